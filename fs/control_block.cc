#include "fs/control_block.h"

#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <new>

namespace ckptfs {
namespace {

Result<ControlBlock*> Map(int fd) {
  void* p = mmap(nullptr, kControlMappingSize, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) return Status::FromErrno("mmap of the control block");
  return static_cast<ControlBlock*>(p);
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
  Result<ControlBlock*> block = Map(fd);
  if (!block.ok()) {
    close(fd);
    return block.status();
  }
  ControlBlock* b = new (*block) ControlBlock();
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
  Result<ControlBlock*> block = Map(fd);
  if (!block.ok()) return block.status();
  if ((*block)->magic != ControlBlock::kMagic || (*block)->layout != ControlBlock::kLayout) {
    munmap(*block, kControlMappingSize);
    return Status::Error(EINVAL, "the control block has another layout (a binary of another "
                                 "version of ckptfs cannot take over this mount)");
  }
  return ControlMapping{fd, *block};
}

}  // namespace ckptfs
