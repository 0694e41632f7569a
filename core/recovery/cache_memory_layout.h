// The cache memory file of a shared arena (cache_memory=shared or private): the arena's blocks,
// then the recovery log, then the kernel state record. All three outlive the worker that wrote
// them; the next worker (or a later mount) finds each by these offsets.
#pragma once

#include <cstdint>
#include <memory>

#include "core/base/status.h"
#include "core/memory/arena.h"
#include "core/recovery/kernel_state_record.h"
#include "core/recovery/recovery_log.h"

namespace ckptfs {

// Bytes after the blocks of a shared arena's memory file: its recovery log
// (core/recovery/recovery_log.h), then the record of what the kernel holds
// (core/recovery/kernel_state_record.h).
inline constexpr uint64_t kArenaLogBytes = 64ull << 20;
// Where the recovery log starts in the memory file of an arena of `capacity_bytes` (the
// blocks' bytes), where the kernel state record starts, and the file's whole size.
uint64_t ArenaLogOffset(uint64_t capacity_bytes);
inline uint64_t ArenaKernelStateOffset(uint64_t capacity_bytes) {
  return ArenaLogOffset(capacity_bytes) + kArenaLogBytes;
}
uint64_t ArenaMemoryBytes(uint64_t capacity_bytes);
// The capacity_bytes whose memory file is `memory_bytes` long (the inverse of ArenaMemoryBytes),
// or EINVAL when no capacity gives that size.
Result<uint64_t> ArenaCapacityOf(uint64_t memory_bytes);

// What outlives a worker in the memory file of a shared arena: its recovery log and its kernel
// state record, mapped.
struct RecoveryMemory {
  std::unique_ptr<RecoveryLog> log;
  std::unique_ptr<KernelStateRecord> record;
};
// Maps both from the memory file `memory_fd` of an arena of `capacity_bytes`; when either cannot
// be mapped, the error says what a crash would lose.
Result<RecoveryMemory> MapRecoveryMemory(int memory_fd, uint64_t capacity_bytes);

// A file of shared memory for an arena of `capacity_bytes` and its recovery log (memfd,
// close-on-exec; zeros until written, taking memory only once touched).
Result<int> MakeArenaMemory(uint64_t capacity_bytes);

}  // namespace ckptfs
