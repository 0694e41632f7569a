#include "iouring/shared_mapping.h"

#include <sys/mman.h>

#include <utility>

namespace ckptfs {

Result<SharedMapping> SharedMapping::OfFile(int fd, uint64_t offset, size_t length, Access access,
                                            const std::string& what) {
  const int protection = access == Access::kReadWrite ? PROT_READ | PROT_WRITE : PROT_READ;
  void* memory = mmap(nullptr, length, protection, MAP_SHARED, fd, static_cast<off_t>(offset));
  if (memory == MAP_FAILED) return Status::FromErrno(what);
  return SharedMapping(static_cast<char*>(memory), length);
}

Result<SharedMapping> SharedMapping::Anonymous(size_t length, const std::string& what) {
  void* memory = mmap(nullptr, length, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (memory == MAP_FAILED) return Status::FromErrno(what);
  return SharedMapping(static_cast<char*>(memory), length);
}

SharedMapping::SharedMapping(SharedMapping&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0)) {}

SharedMapping& SharedMapping::operator=(SharedMapping&& other) noexcept {
  if (this != &other) {
    if (data_ != nullptr) munmap(data_, size_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

SharedMapping::~SharedMapping() {
  if (data_ != nullptr) munmap(data_, size_);
}

char* SharedMapping::Release() {
  size_ = 0;
  return std::exchange(data_, nullptr);
}

}  // namespace ckptfs
