#include "fs/control_block.h"

#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <new>

#include "iouring/shared_mapping.h"

namespace ckptfs {
namespace {

Result<SharedMapping> Map(int fd) {
  return SharedMapping::OfFile(fd, 0, kControlMappingSize, SharedMapping::Access::kReadWrite,
                               "mmap of the control block");
}

}  // namespace

Result<ControlMapping> CreateControlBlock() {
  int fd = memfd_create("ckptfs-control", MFD_CLOEXEC);
  if (fd < 0) return Status::FromErrno("memfd_create");
  if (ftruncate(fd, kControlMappingSize) != 0) {
    Status st = Status::FromErrno("sizing the control block");
    close(fd);
    return st;
  }
  Result<SharedMapping> mapping = Map(fd);
  if (!mapping.ok()) {
    close(fd);
    return mapping.status();
  }
  // Mapped for the life of the process.
  ControlBlock* b = new (mapping->Release()) ControlBlock();
  b->magic = ControlBlock::kMagic;
  b->layout = ControlBlock::kLayout;
  return ControlMapping{fd, b};
}

Result<ControlMapping> MapControlBlock(int fd) {
  struct stat st {};
  if (fstat(fd, &st) != 0) return Status::FromErrno("control block");
  if (static_cast<uint64_t>(st.st_size) != kControlMappingSize) {
    return Status::Error(EINVAL, "descriptor " + std::to_string(fd) + " is no control block");
  }
  Result<SharedMapping> mapping = Map(fd);
  if (!mapping.ok()) return mapping.status();
  const auto* block = reinterpret_cast<const ControlBlock*>(mapping->data());
  if (block->magic != ControlBlock::kMagic || block->layout != ControlBlock::kLayout) {
    return Status::Error(EINVAL, "the control block has another layout (a binary of another "
                                 "version of ckptfs cannot take over this mount)");
  }
  // Mapped for the life of the process.
  return ControlMapping{fd, reinterpret_cast<ControlBlock*>(mapping->Release())};
}

}  // namespace ckptfs
