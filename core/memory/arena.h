// Arena: the bounded store of file-data blocks.
//
// Memory is carved into fixed-size, page-aligned blocks from large mappings made on demand (all
// at once by Prefault). Blocks never used yet are handed out in ascending order; a freed block
// goes to a LIFO free list, taken first, and is handed out again already faulted in. A block's
// header exists once its slab's first block has been handed out, so that memory no file has
// used costs no header (a freed block costs 4 bytes of free list). The memory of free blocks
// goes back to the system only when the system runs short of it (GiveBackIdle,
// WatchSystemMemory). At most `capacity` bytes of blocks are ever in use.
//
// The memory is private to the process, or a shared memory file (a memfd the supervisor holds,
// core/recovery/cache_memory_layout.h): then block i is bytes [i * kBlockSize, (i + 1) *
// kBlockSize) of that file, its slot, and the next worker of the mount takes over the blocks its
// predecessor named (Adopt).
//
// Writers reserve blocks before they take any file lock (Reserve). When the arena is full, the
// reclaimer is asked to drop clean blocks, the pressure callback tells the flusher to hurry, and
// the writer waits until blocks are freed: back-pressure instead of ENOMEM.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "core/base/status.h"
#include "core/base/thread_annotations.h"
#include "iouring/shared_mapping.h"

namespace ckptfs {

// Granularity of file data in memory: a file takes whole blocks. At 16 KiB, 20,000 files of
// 1-64 KiB (291 MiB) take about 440 MiB of cache, against 1.25 GiB at 64 KiB; large writes and
// flushes cost the same either way.
inline constexpr size_t kBlockSize = 16 * 1024;

class Arena;

// One block of file data; reference-counted. A block referenced more than once is shared
// between a live file and sealed versions and must be copied before it is written.
struct Block {
  char* data = nullptr;
  Arena* arena = nullptr;
  uint32_t slot = 0;  // Its place in the arena's memory.
  std::atomic<int> refs{0};
};

// Owning reference to a Block; returns the block to its arena when the last reference goes.
class BlockRef {
 public:
  BlockRef() = default;
  explicit BlockRef(Block* block);  // Adopts a block with refs == 0.
  BlockRef(const BlockRef& other);
  BlockRef(BlockRef&& other) noexcept : block_(other.block_) { other.block_ = nullptr; }
  BlockRef& operator=(BlockRef other) noexcept {
    std::swap(block_, other.block_);
    return *this;
  }
  ~BlockRef();

  char* data() const { return block_->data; }
  uint64_t slot() const { return block_->slot; }
  bool shared() const { return block_->refs.load(std::memory_order_acquire) > 1; }
  explicit operator bool() const { return block_ != nullptr; }

 private:
  Block* block_ = nullptr;
};

// A promise of `count` blocks, made by Arena::Reserve. Unused blocks go back on destruction.
class Reservation {
 public:
  Reservation() = default;
  Reservation(Arena* arena, size_t count) : arena_(arena), count_(count) {}
  Reservation(Reservation&& other) noexcept;
  Reservation& operator=(Reservation&& other) noexcept;
  Reservation(const Reservation&) = delete;
  Reservation& operator=(const Reservation&) = delete;
  ~Reservation();

  size_t count() const { return count_; }
  // Takes one reserved block (contents unspecified). Requires count() > 0.
  BlockRef Take();

 private:
  void Release();

  Arena* arena_ = nullptr;
  size_t count_ = 0;
};

class Arena {
 public:
  // Frees up to `wanted` clean blocks; returns how many it freed. Called with no arena lock held.
  using Reclaimer = std::function<size_t(size_t wanted)>;

  // Private memory, or the shared memory file `memory_fd` (not owned; at least capacity_bytes
  // long) when it is not -1.
  explicit Arena(uint64_t capacity_bytes, int memory_fd = -1);
  ~Arena();
  Arena(const Arena&) = delete;
  Arena& operator=(const Arena&) = delete;

  // Set once before use.
  void SetReclaimer(Reclaimer reclaimer) { reclaimer_ = std::move(reclaimer); }
  void SetPressureCallback(std::function<void()> callback) { on_pressure_ = std::move(callback); }

  // Whether the caller of a wait has been given a fatal signal (empty: never).
  using Interrupted = std::function<bool()>;
  // Reserves `count` blocks, waiting while the arena is full; EINTR, with nothing reserved, once
  // `interrupted()` holds (asked about every 50 ms while waiting). `count` must not exceed
  // capacity_blocks(). Thread-safe; must be called without file locks held.
  Result<Reservation> Reserve(size_t count, const Interrupted& interrupted);
  // The same, never interrupted.
  Reservation Reserve(size_t count) { return std::move(*Reserve(count, Interrupted())); }
  // Reserves `count` blocks only if they are free now. With `reclaim`, may first ask the
  // reclaimer for clean blocks (then no file lock may be held).
  bool TryReserve(size_t count, Reservation* out, bool reclaim);

  // Whether the blocks are in a shared memory file that outlives the process.
  bool shared() const { return memory_fd_ >= 0; }
  // The blocks at `slots` of a shared arena, as a previous worker left them, now used (counted
  // as used and never handed out by Reserve). Call before any other use, with distinct slots.
  // EINVAL when the arena is not shared or a slot is out of range.
  Result<std::vector<BlockRef>> Adopt(const std::vector<uint64_t>& slots);

  // Maps the whole capacity now and faults it in on a background thread of idle priority, so
  // that the first writes land in memory the kernel has already handed over. The thread works
  // only while `may_run()` holds, asking again between steps of 2 MiB. It stops early, leaving
  // the rest to be faulted on first use, when the system's available memory falls below an
  // eighth of its total (policy::MayTakeMemoryAhead). Call at most once, before use.
  void Prefault(std::function<bool()> may_run);
  // Gives the memory of free blocks back to the system, in whole runs of 2 MiB of free blocks (a
  // huge page goes back whole), until `wanted` bytes went back or no such run is left; returns
  // the bytes given back. The blocks stay free and are faulted in again when next used.
  uint64_t GiveBackIdle(uint64_t wanted);
  // Looks at the system's memory every policy::kSystemMemoryWatchPeriod on a background thread
  // and, whenever it runs short, gives idle memory back (policy::IdleMemoryToGiveBack). Call at
  // most once.
  void WatchSystemMemory();
  // Stops the prefault and the watch (the daemon's unmount) and waits for their threads;
  // `may_run` is not called afterwards.
  void StopBackground();
  // Bytes the background thread has faulted in so far; prefault_done() once it has stopped.
  uint64_t prefaulted_bytes() const { return prefaulted_.load(std::memory_order_relaxed); }
  bool prefault_done() const { return prefault_done_.load(std::memory_order_acquire); }
  // Bytes of idle memory given back to the system so far.
  uint64_t given_back_bytes() const { return given_back_.load(std::memory_order_relaxed); }

  size_t capacity_blocks() const { return capacity_blocks_; }
  size_t used_blocks() const;      // Blocks held by files and reservations.
  // Blocks taken ahead of use (the blocks serving threads land writes in, fs/write_landing.h):
  // in used_blocks, but free memory as far as the files are concerned. Their holders count
  // them here.
  void CountHeldAhead(int64_t change) { held_ahead_.fetch_add(change, std::memory_order_relaxed); }
  size_t held_ahead_blocks() const {
    return static_cast<size_t>(std::max<int64_t>(0, held_ahead_.load(std::memory_order_relaxed)));
  }
  size_t mapped_blocks() const;    // Blocks mapped so far (all of them after Prefault).
  // Blocks that have a header: those of slabs (64 MiB) of which some block was ever handed out.
  size_t blocks_with_headers() const;
  size_t waiting_writers() const;  // Writers blocked in Reserve right now.

 private:
  friend class BlockRef;
  friend class Reservation;

  bool TryReserveLocked(size_t count) REQUIRES(mu_);
  Block* TakeBlock() EXCLUDES(mu_);              // For a reserved slot.
  void ReturnBlock(Block* block) EXCLUDES(mu_);  // Last reference dropped.
  void Unreserve(size_t count) EXCLUDES(mu_);
  void MapSlabLocked() REQUIRES(mu_);
  Block* HeaderLocked(uint64_t slot) REQUIRES(mu_);
  char* DataLocked(uint64_t slot) REQUIRES(mu_);
  size_t SlabBlocksLocked(size_t slab) const REQUIRES(mu_);  // Blocks of mapped slab `slab`.
  void PrefaultSlabs(const std::vector<std::pair<void*, size_t>>& slabs,
                     const std::function<bool()>& may_run);

  const size_t capacity_blocks_;
  const int memory_fd_;
  Reclaimer reclaimer_;
  std::function<void()> on_pressure_;

  mutable Mutex mu_;
  std::condition_variable_any freed_;  // With mu_.
  size_t used_ GUARDED_BY(mu_) = 0;
  size_t mapped_ GUARDED_BY(mu_) = 0;
  size_t waiting_ GUARDED_BY(mu_) = 0;
  // Slots of freed blocks, LIFO (hot blocks first), then the never used ones: [fresh_, mapped_).
  std::vector<uint32_t> free_ GUARDED_BY(mu_);
  size_t fresh_ GUARDED_BY(mu_) = 0;
  // Free blocks whose memory went back to the system (GiveBackIdle), by slot.
  std::vector<bool> returned_to_system_ GUARDED_BY(mu_);
  std::vector<SharedMapping> slabs_ GUARDED_BY(mu_);
  // Block headers, a slab's in one array made when its first block is handed out: block `slot`
  // is HeaderLocked(slot).
  std::vector<std::unique_ptr<Block[]>> headers_ GUARDED_BY(mu_);

  std::thread prefaulter_;
  std::thread memory_watcher_;
  std::atomic<bool> stop_background_{false};
  Mutex stop_mu_;
  std::condition_variable_any stop_requested_;  // With stop_mu_.
  std::atomic<bool> prefault_done_{false};
  std::atomic<uint64_t> prefaulted_{0};
  std::atomic<uint64_t> given_back_{0};
  std::atomic<int64_t> held_ahead_{0};
};

}  // namespace ckptfs
