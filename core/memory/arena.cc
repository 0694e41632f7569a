#include "core/memory/arena.h"

#include <pthread.h>
#include <sched.h>
#include <spdlog/spdlog.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cassert>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <new>
#include <sstream>
#include <string>

#include "core/base/memory_policy.h"

namespace ckptfs {
namespace {
constexpr size_t kSlabBytes = 64ull << 20;
constexpr size_t kSlabBlocks = kSlabBytes / kBlockSize;
constexpr size_t kPrefaultStep = 2ull << 20;  // One huge page: the unit between stop checks.
constexpr auto kPrefaultPoll = std::chrono::milliseconds(100);  // While it may not run.

// The system's memory as /proc/meminfo gives it (total 0 when it cannot be read).
policy::SystemMemory ReadSystemMemory() {
  std::ifstream in("/proc/meminfo");
  policy::SystemMemory m;
  for (std::string line; std::getline(in, line);) {
    std::istringstream fields(line);
    std::string key;
    uint64_t kib = 0;
    if (!(fields >> key >> kib)) continue;
    if (key == "MemTotal:") m.total = kib << 10;
    if (key == "MemAvailable:") m.available = kib << 10;
  }
  return m;
}
}  // namespace

BlockRef::BlockRef(Block* block) : block_(block) {
  block_->refs.store(1, std::memory_order_release);
}

BlockRef::BlockRef(const BlockRef& other) : block_(other.block_) {
  if (block_) block_->refs.fetch_add(1, std::memory_order_relaxed);
}

BlockRef::~BlockRef() {
  if (block_ && block_->refs.fetch_sub(1, std::memory_order_acq_rel) == 1) {
    block_->arena->ReturnBlock(block_);
  }
}

Reservation::Reservation(Reservation&& other) noexcept
    : arena_(other.arena_), count_(other.count_) {
  other.count_ = 0;
}

Reservation& Reservation::operator=(Reservation&& other) noexcept {
  if (this != &other) {
    Release();
    arena_ = other.arena_;
    count_ = other.count_;
    other.count_ = 0;
  }
  return *this;
}

Reservation::~Reservation() { Release(); }

void Reservation::Release() {
  if (count_ > 0) arena_->Unreserve(count_);
  count_ = 0;
}

BlockRef Reservation::Take() {
  assert(count_ > 0);
  --count_;
  return BlockRef(arena_->TakeBlock());
}

Arena::Arena(uint64_t capacity_bytes, int memory_fd)
    : capacity_blocks_(std::max<uint64_t>(1, capacity_bytes / kBlockSize)),
      memory_fd_(memory_fd),
      returned_to_system_(capacity_blocks_) {}

Arena::~Arena() { StopBackground(); }

char* Arena::DataLocked(uint64_t slot) {
  return slabs_[slot / kSlabBlocks].data() + (slot % kSlabBlocks) * kBlockSize;
}

size_t Arena::SlabBlocksLocked(size_t slab) const {
  return std::min(kSlabBlocks, mapped_ - slab * kSlabBlocks);
}

Block* Arena::HeaderLocked(uint64_t slot) {
  std::unique_ptr<Block[]>& slab = headers_[slot / kSlabBlocks];
  if (!slab) {
    uint64_t first = slot - slot % kSlabBlocks;
    size_t blocks = SlabBlocksLocked(slot / kSlabBlocks);
    slab = std::make_unique<Block[]>(blocks);
    for (size_t i = 0; i < blocks; ++i) {
      slab[i].data = DataLocked(first + i);
      slab[i].arena = this;
      slab[i].slot = static_cast<uint32_t>(first + i);
    }
  }
  return &slab[slot % kSlabBlocks];
}

bool Arena::TryReserveLocked(size_t count) {
  if (used_ + count > capacity_blocks_) return false;
  used_ += count;
  return true;
}

bool Arena::TryReserve(size_t count, Reservation* out, bool reclaim) {
  {
    MutexLock lock(mu_);
    if (TryReserveLocked(count)) {
      *out = Reservation(this, count);
      return true;
    }
  }
  if (!reclaim || !reclaimer_) return false;
  reclaimer_(count);
  MutexLock lock(mu_);
  if (!TryReserveLocked(count)) return false;
  *out = Reservation(this, count);
  return true;
}

Result<Reservation> Arena::Reserve(size_t count, const Interrupted& interrupted) {
  assert(count <= capacity_blocks_);
  Reservation out;
  while (!TryReserve(count, &out, /*reclaim=*/true)) {
    if (interrupted && interrupted()) {
      return Status::Error(EINTR, "the caller was killed while it waited for cache memory");
    }
    {
      MutexLock lock(mu_);
      ++waiting_;  // Before the callback, so that the flusher sees a waiter when it wakes.
    }
    if (on_pressure_) on_pressure_();
    MutexLock lock(mu_);
    freed_.wait_for(lock, std::chrono::milliseconds(50),
                    [&]() REQUIRES(mu_) { return used_ + count <= capacity_blocks_; });
    --waiting_;
  }
  return out;
}

void Arena::MapSlabLocked() {
  size_t blocks = std::min(kSlabBlocks, capacity_blocks_ - mapped_);
  size_t len = blocks * kBlockSize;
  Result<SharedMapping> slab =
      shared() ? SharedMapping::OfFile(memory_fd_, mapped_ * kBlockSize, len,
                                       SharedMapping::Access::kReadWrite, "cache memory")
               : SharedMapping::Anonymous(len, "cache memory");
  if (!slab.ok()) throw std::bad_alloc();
  madvise(slab->data(), len, MADV_HUGEPAGE);
  slabs_.push_back(std::move(*slab));
  headers_.emplace_back();
  mapped_ += blocks;
}

Result<std::vector<BlockRef>> Arena::Adopt(const std::vector<uint64_t>& slots) {
  if (!shared()) return Status::Error(EINVAL, "the cache's memory is private: nothing to adopt");
  std::vector<Block*> adopted;
  {
    MutexLock lock(mu_);
    std::vector<bool> taken(capacity_blocks_);
    for (uint64_t slot : slots) {
      if (slot >= capacity_blocks_ || taken[slot]) {
        return Status::Error(EINVAL, "block " + std::to_string(slot) + " is not in the cache");
      }
      taken[slot] = true;
      while (mapped_ <= slot) MapSlabLocked();
    }
    // The blocks not adopted become free ones, lowest slot on top.
    free_.clear();
    for (size_t slot = mapped_; slot-- > 0;) {
      if (!taken[slot]) free_.push_back(static_cast<uint32_t>(slot));
    }
    fresh_ = mapped_;
    used_ += slots.size();
    for (uint64_t slot : slots) adopted.push_back(HeaderLocked(slot));
  }
  std::vector<BlockRef> out;
  out.reserve(adopted.size());
  for (Block* b : adopted) out.emplace_back(b);
  return out;
}

void Arena::Prefault(std::function<bool()> may_run) {
  std::vector<std::pair<void*, size_t>> slabs;
  {
    MutexLock lock(mu_);
    while (mapped_ < capacity_blocks_) MapSlabLocked();
    for (const SharedMapping& slab : slabs_) slabs.emplace_back(slab.data(), slab.size());
  }
  prefaulter_ = std::thread([this, slabs = std::move(slabs), may_run = std::move(may_run)] {
    PrefaultSlabs(slabs, may_run);
  });
}

void Arena::StopBackground() {
  {
    MutexLock lock(stop_mu_);
    stop_background_ = true;
  }
  stop_requested_.notify_all();
  if (prefaulter_.joinable()) prefaulter_.join();
  if (memory_watcher_.joinable()) memory_watcher_.join();
}

uint64_t Arena::GiveBackIdle(uint64_t wanted) {
  constexpr size_t kRunBlocks = kPrefaultStep / kBlockSize;
  constexpr size_t kRunBytes = kRunBlocks * kBlockSize;
  uint64_t given = 0;
  MutexLock lock(mu_);
  static_assert(kSlabBlocks % kRunBlocks == 0, "a run lies within one slab");
  std::vector<bool> idle(mapped_, false);
  for (uint32_t slot : free_) idle[slot] = !returned_to_system_[slot];
  for (size_t slot = fresh_; slot < mapped_; ++slot) idle[slot] = !returned_to_system_[slot];
  for (size_t first = 0; first + kRunBlocks <= mapped_ && given < wanted; first += kRunBlocks) {
    if (!std::all_of(idle.begin() + first, idle.begin() + first + kRunBlocks,
                     [](bool b) { return b; })) {
      continue;
    }
    // MADV_REMOVE frees the shared memory file's pages; MADV_DONTNEED private memory's.
    if (madvise(DataLocked(first), kRunBytes, shared() ? MADV_REMOVE : MADV_DONTNEED) != 0) {
      spdlog::warn("giving idle cache memory back failed: madvise: {}", std::strerror(errno));
      break;
    }
    for (size_t i = first; i < first + kRunBlocks; ++i) returned_to_system_[i] = true;
    given += kRunBytes;
  }
  given_back_.fetch_add(given, std::memory_order_relaxed);
  return given;
}

void Arena::WatchSystemMemory() {
  memory_watcher_ = std::thread([this] {
    MutexLock lock(stop_mu_);
    while (!stop_background_) {
      policy::SystemMemory m = ReadSystemMemory();
      if (uint64_t wanted = policy::IdleMemoryToGiveBack(m); wanted > 0) {
        if (uint64_t given = GiveBackIdle(wanted); given > 0) {
          spdlog::info("gave {} MiB of idle cache memory back: the system had {} MiB of {} MiB "
                       "available",
                       given >> 20, m.available >> 20, m.total >> 20);
        }
      }
      stop_requested_.wait_for(lock, policy::kSystemMemoryWatchPeriod);
    }
  });
}

void Arena::PrefaultSlabs(const std::vector<std::pair<void*, size_t>>& slabs,
                          const std::function<bool()>& may_run) {
  sched_param idle{};
  pthread_setschedparam(pthread_self(), SCHED_IDLE, &idle);
  auto started = std::chrono::steady_clock::now();
  std::string stopped_by;
  // In the order never used blocks are handed out: ascending.
  for (auto it = slabs.begin(); it != slabs.end() && stopped_by.empty(); ++it) {
    char* base = static_cast<char*>(it->first);
    for (size_t off = 0; off < it->second; off += kPrefaultStep) {
      while (!stop_background_ && !may_run()) std::this_thread::sleep_for(kPrefaultPoll);
      if (stop_background_) {
        stopped_by = "unmount";
        break;
      }
      if (!policy::MayTakeMemoryAhead(ReadSystemMemory())) {
        stopped_by = "the system running short of available memory";
        break;
      }
      size_t len = std::min(kPrefaultStep, it->second - off);
      if (madvise(base + off, len, MADV_POPULATE_WRITE) != 0) {
        stopped_by = std::string("madvise(MADV_POPULATE_WRITE): ") + std::strerror(errno);
        break;
      }
      prefaulted_.fetch_add(len, std::memory_order_relaxed);
    }
  }
  double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  uint64_t mib = prefaulted_.load() >> 20;
  if (stopped_by.empty()) {
    spdlog::info("prefaulted the cache's {} MiB, done {:.1f} s after mount", mib, seconds);
  } else if (stop_background_) {
    spdlog::info("prefault stopped by unmount after {} MiB", mib);
  } else {
    spdlog::warn("prefault stopped after {} MiB in {:.1f} s by {}", mib, seconds, stopped_by);
  }
  prefault_done_.store(true, std::memory_order_release);
}

Block* Arena::TakeBlock() {
  MutexLock lock(mu_);
  uint32_t slot;
  if (!free_.empty()) {
    slot = free_.back();
    free_.pop_back();
  } else {
    if (fresh_ == mapped_) MapSlabLocked();
    slot = static_cast<uint32_t>(fresh_++);
  }
  returned_to_system_[slot] = false;
  return HeaderLocked(slot);
}

void Arena::ReturnBlock(Block* block) {
  {
    MutexLock lock(mu_);
    free_.push_back(block->slot);
    --used_;
  }
  freed_.notify_all();
}

void Arena::Unreserve(size_t count) {
  {
    MutexLock lock(mu_);
    used_ -= count;
  }
  freed_.notify_all();
}

size_t Arena::used_blocks() const {
  MutexLock lock(mu_);
  return used_;
}

size_t Arena::mapped_blocks() const {
  MutexLock lock(mu_);
  return mapped_;
}

size_t Arena::blocks_with_headers() const {
  MutexLock lock(mu_);
  size_t blocks = 0;
  for (size_t i = 0; i < headers_.size(); ++i) {
    if (headers_[i]) blocks += SlabBlocksLocked(i);
  }
  return blocks;
}

size_t Arena::waiting_writers() const {
  MutexLock lock(mu_);
  return waiting_;
}

}  // namespace ckptfs
