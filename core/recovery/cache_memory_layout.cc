#include "core/recovery/cache_memory_layout.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <string>

#include "core/recovery/kernel_state_record.h"

namespace ckptfs {

uint64_t ArenaLogOffset(uint64_t capacity_bytes) {
  return std::max<uint64_t>(1, capacity_bytes / kBlockSize) * kBlockSize;
}

uint64_t ArenaMemoryBytes(uint64_t capacity_bytes) {
  return ArenaKernelStateOffset(capacity_bytes) +
         KernelStateRecord::Bytes(ArenaLogOffset(capacity_bytes) / kBlockSize);
}

Result<RecoveryMemory> MapRecoveryMemory(int memory_fd, uint64_t capacity_bytes) {
  Result<std::unique_ptr<RecoveryLog>> log =
      RecoveryLog::Map(memory_fd, ArenaLogOffset(capacity_bytes), kArenaLogBytes);
  if (!log.ok()) {
    return Status::Error(log.status().err(), "no recovery log in the cache's shared memory (" +
                                                 log.status().ToString() +
                                                 "): a crash would lose what is sealed");
  }
  Result<std::unique_ptr<KernelStateRecord>> record =
      KernelStateRecord::Map(memory_fd, ArenaKernelStateOffset(capacity_bytes),
                             ArenaLogOffset(capacity_bytes) / kBlockSize);
  if (!record.ok()) {
    return Status::Error(record.status().err(),
                         "no kernel state record in the cache's shared memory (" +
                             record.status().ToString() + "): a crash would lose the open files");
  }
  return RecoveryMemory{std::move(*log), std::move(*record)};
}

Result<uint64_t> ArenaCapacityOf(uint64_t memory_bytes) {
  const uint64_t fixed = kArenaLogBytes + KernelStateRecord::Bytes(0);
  const uint64_t per_block = kBlockSize + KernelStateRecord::Bytes(1) - KernelStateRecord::Bytes(0);
  const uint64_t capacity = memory_bytes > fixed ? (memory_bytes - fixed) / per_block * kBlockSize : 0;
  if (capacity == 0 || ArenaMemoryBytes(capacity) != memory_bytes) {
    return Status::Error(EINVAL, std::to_string(memory_bytes) +
                                     " bytes are not the memory of a cache of any size");
  }
  return capacity;
}

Result<int> MakeArenaMemory(uint64_t capacity_bytes) {
  int fd = memfd_create("ckptfs-arena", MFD_CLOEXEC);
  if (fd < 0) return Status::FromErrno("memfd_create");
  if (ftruncate(fd, static_cast<off_t>(ArenaMemoryBytes(capacity_bytes))) != 0) {
    Status st = Status::FromErrno("sizing the cache's shared memory");
    close(fd);
    return st;
  }
  return fd;
}

}  // namespace ckptfs
