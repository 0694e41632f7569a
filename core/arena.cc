#include "core/arena.h"

#include <sys/mman.h>

#include <algorithm>
#include <cassert>
#include <chrono>
#include <new>

namespace ckptfs {
namespace {
constexpr size_t kSlabBytes = 64ull << 20;
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

Arena::Arena(uint64_t capacity_bytes)
    : capacity_blocks_(std::max<uint64_t>(1, capacity_bytes / kBlockSize)) {}

Arena::~Arena() {
  for (auto [addr, len] : slabs_) munmap(addr, len);
  for (Block* b : headers_) delete b;
}

bool Arena::TryReserveLocked(size_t count) {
  if (used_ + count > capacity_blocks_) return false;
  used_ += count;
  return true;
}

bool Arena::TryReserve(size_t count, Reservation* out, bool reclaim) {
  {
    std::lock_guard lock(mu_);
    if (TryReserveLocked(count)) {
      *out = Reservation(this, count);
      return true;
    }
  }
  if (!reclaim || !reclaimer_) return false;
  reclaimer_(count);
  std::lock_guard lock(mu_);
  if (!TryReserveLocked(count)) return false;
  *out = Reservation(this, count);
  return true;
}

Reservation Arena::Reserve(size_t count) {
  assert(count <= capacity_blocks_);
  Reservation out;
  while (!TryReserve(count, &out, /*reclaim=*/true)) {
    {
      std::lock_guard lock(mu_);
      ++waiting_;  // Before the callback, so that the flusher sees a waiter when it wakes.
    }
    if (on_pressure_) on_pressure_();
    std::unique_lock lock(mu_);
    freed_.wait_for(lock, std::chrono::milliseconds(50),
                    [&] { return used_ + count <= capacity_blocks_; });
    --waiting_;
  }
  return out;
}

void Arena::MapSlabLocked() {
  size_t blocks = std::min(kSlabBytes / kBlockSize, capacity_blocks_ - mapped_);
  size_t len = blocks * kBlockSize;
  void* addr = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (addr == MAP_FAILED) throw std::bad_alloc();
  madvise(addr, len, MADV_HUGEPAGE);
  slabs_.emplace_back(addr, len);
  char* base = static_cast<char*>(addr);
  for (size_t i = blocks; i-- > 0;) {
    auto* b = new Block;
    b->data = base + i * kBlockSize;
    b->arena = this;
    headers_.push_back(b);
    free_.push_back(b);
  }
  mapped_ += blocks;
}

Block* Arena::TakeBlock() {
  std::lock_guard lock(mu_);
  if (free_.empty()) MapSlabLocked();
  Block* b = free_.back();
  free_.pop_back();
  return b;
}

void Arena::ReturnBlock(Block* block) {
  {
    std::lock_guard lock(mu_);
    free_.push_back(block);
    --used_;
  }
  freed_.notify_all();
}

void Arena::Unreserve(size_t count) {
  {
    std::lock_guard lock(mu_);
    used_ -= count;
  }
  freed_.notify_all();
}

size_t Arena::used_blocks() const {
  std::lock_guard lock(mu_);
  return used_;
}

size_t Arena::mapped_blocks() const {
  std::lock_guard lock(mu_);
  return mapped_;
}

size_t Arena::waiting_writers() const {
  std::lock_guard lock(mu_);
  return waiting_;
}

}  // namespace ckptfs
