// Flush policy: pure functions of sizes, ages and events, so they can be tested with no clock.
#pragma once

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstdint>

namespace ckptfs::policy {

// Batches are bounded so that one slow batch does not hold back sync waiters for long.
inline constexpr size_t kMaxBatchEntries = 1024;
inline constexpr uint64_t kMaxBatchBytes = 1ull << 30;
// Entries of one batch for a process that may open `open_file_limit` descriptors: each file a
// batch publishes holds a staging file open until its data is synced, so a batch takes at most
// a quarter of them (the rest serve backing directories, files being read, FUSE and io_uring).
inline size_t MaxBatchEntries(uint64_t open_file_limit) {
  return static_cast<size_t>(std::clamp<uint64_t>(open_file_limit / 4, 16, kMaxBatchEntries));
}
// Above this many files in a batch, one syncfs replaces per-file fdatasync and directory fsync.
inline constexpr size_t kSyncfsThreshold = 32;
// With flush_io=auto, files of at least this size bypass the backing store's page cache: a copy
// of every byte saved, and page-cache memory as large as the checkpoint, cost more than what
// the cache would spare (small files are synced together and gain from it).
inline constexpr uint64_t kDirectFlushMinBytes = 1ull << 20;

// Delay before the flusher retries after a failed batch: 100 ms doubling to 5 s.
inline std::chrono::milliseconds RetryDelay(unsigned consecutive_failures) {
  unsigned shift = std::min(consecutive_failures > 0 ? consecutive_failures - 1 : 0u, 6u);
  return std::min(std::chrono::milliseconds(100) * (1u << shift), std::chrono::milliseconds(5000));
}

// Whether the flusher should ignore flush_delay for everything pending: writers are waiting for
// memory, a sync asked for it, or the mount is being unmounted.
inline bool FlushEverythingNow(size_t waiting_writers, bool sync_requested, bool draining) {
  return waiting_writers > 0 || sync_requested || draining;
}

// When a version sealed at `sealed_at`, held `hold` (NextHold), is due to be flushed with
// flush_delay `delay`, unless something asks for it sooner (FlushEverythingNow, a sync).
inline std::chrono::steady_clock::time_point FlushDue(
    std::chrono::steady_clock::time_point sealed_at, std::chrono::steady_clock::duration hold,
    std::chrono::steady_clock::duration delay) {
  return sealed_at + std::max(delay, hold);
}

// How long a sealed version of a file waits for a newer one before it is flushed. A file sealed
// again within twice its wait is being rewritten (zarr chunks, tracker files): its wait doubles,
// from flush_delay (`base`) up to 16x. A file left alone that long starts over at `base`.
inline std::chrono::steady_clock::duration NextHold(std::chrono::steady_clock::duration hold,
                                                    std::chrono::steady_clock::duration since_last_seal,
                                                    std::chrono::steady_clock::duration base) {
  if (hold < base || since_last_seal >= 2 * hold) return base;
  return std::min(2 * hold, 16 * base);
}

// errnos after which a failed flush is retried (the condition may go away).
inline bool IsTransient(int err) {
  switch (err) {
    case 0: return false;
    case ENOENT: case EEXIST: case ENOTEMPTY: case ENOTDIR: case EISDIR: case EINVAL:
    case ENAMETOOLONG: case ELOOP: case EXDEV: case EMLINK: case EPERM:
      return false;
    default:
      return true;
  }
}

}  // namespace ckptfs::policy
