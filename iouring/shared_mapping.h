// SharedMapping: owns one mapping of memory (mmap) and unmaps it when destroyed. Either a range
// of a file (a memfd, the cache memory file) shared with every process that maps it, or
// anonymous memory of this process alone (the cache's memory when it is private, buffers).
//
// Thread model: the owner moves and destroys it; the memory itself may be used from any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "core/base/status.h"

namespace ckptfs {

class SharedMapping {
 public:
  enum class Access { kReadOnly, kReadWrite };

  // Maps `length` bytes of `fd` from `offset` (a multiple of the page size), MAP_SHARED: what
  // one process writes, every process that maps the range sees, and the file keeps. Fails with
  // the errno of mmap and a message naming `what`.
  static Result<SharedMapping> OfFile(int fd, uint64_t offset, size_t length, Access access,
                                      const std::string& what);
  // Maps `length` bytes of zeroed memory that no other process sees (MAP_PRIVATE |
  // MAP_ANONYMOUS), readable and writable.
  static Result<SharedMapping> Anonymous(size_t length, const std::string& what);

  // No mapping.
  SharedMapping() = default;
  SharedMapping(SharedMapping&& other) noexcept;
  SharedMapping& operator=(SharedMapping&& other) noexcept;
  SharedMapping(const SharedMapping&) = delete;
  SharedMapping& operator=(const SharedMapping&) = delete;
  ~SharedMapping();

  char* data() const { return data_; }
  size_t size() const { return size_; }

  // Gives up the mapping without unmapping it: the memory stays mapped until the caller unmaps
  // it (or the process ends). This object is left without a mapping.
  char* Release();

 private:
  SharedMapping(char* data, size_t size) : data_(data), size_(size) {}

  char* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace ckptfs
