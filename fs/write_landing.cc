#include "fs/write_landing.h"

#include <linux/fuse.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <utility>
#include <vector>

#include "core/base/thread_annotations.h"

namespace ckptfs {
namespace {

// What a WRITE carries before its payload (FUSE 7.9 and later).
constexpr size_t kHeadBytes = sizeof(fuse_in_header) + sizeof(fuse_write_in);
// Requests are landed when libfuse reads them with a buffer up to this large (its buffer is
// max_write and a page): a thread holds at most this much ahead.
constexpr size_t kMaxLandedRead = 2u << 20;
// The head and the blocks of such a request, wherever it starts in its first block.
constexpr size_t kMaxPieces = 1 + kMaxLandedRead / kBlockSize + 1;

// One serving thread's blocks; touched only by that thread, and by StopWriteLanding once the
// threads have stopped.
struct ThreadBlocks {
  std::vector<BlockRef> spare;  // Contents unspecified.
  LandedBytes landed;           // The last WRITE read, when `fresh`.
  const char* payload = nullptr;
  bool fresh = false;
  size_t counted = 0;  // Counted as held ahead by the arena (all of `spare` at the last read).

  // Everything back to `spare`.
  void Recycle() {
    for (BlockRef& b : landed.blocks) {
      if (b) spare.push_back(std::move(b));
    }
    landed.blocks.clear();
    fresh = false;
  }
};

struct Landing {
  Mutex mu;
  Arena* arena GUARDED_BY(mu) = nullptr;
  std::vector<ThreadBlocks*> threads GUARDED_BY(mu);
  std::atomic<bool> on{false};
  // Where in its first block the next payload is placed: where the last landed write ended.
  std::atomic<size_t> next_skip{0};
};

Landing& TheLanding() {
  static Landing* landing = new Landing();  // Never destroyed: threads may outlive statics.
  return *landing;
}

// Gives `t`'s blocks back (to the arena landing uses; none when there is none).
void DropLocked(Landing& landing, ThreadBlocks& t) REQUIRES(landing.mu) {
  if (landing.arena) landing.arena->CountHeldAhead(-static_cast<int64_t>(t.counted));
  t.counted = 0;
  t.landed.blocks.clear();
  t.spare.clear();
  t.fresh = false;
}

// Gives back every thread's blocks.
void DropHeldBlocks(Landing& landing) REQUIRES(landing.mu) {
  for (ThreadBlocks* t : landing.threads) DropLocked(landing, *t);
}

// The calling thread's blocks, registered at first use and given back when the thread ends.
class ThreadSlot {
 public:
  ThreadSlot() {
    Landing& landing = TheLanding();
    MutexLock lock(landing.mu);
    landing.threads.push_back(&blocks_);
  }
  ~ThreadSlot() {
    Landing& landing = TheLanding();
    MutexLock lock(landing.mu);
    auto& all = landing.threads;
    all.erase(std::remove(all.begin(), all.end(), &blocks_), all.end());
    DropLocked(landing, blocks_);
  }
  ThreadBlocks& blocks() { return blocks_; }

 private:
  ThreadBlocks blocks_;
};

ThreadBlocks& Mine() {
  thread_local ThreadSlot slot;
  return slot.blocks();
}

// Tops `spare` up to `count` blocks, if the arena has them free now.
bool HoldBlocks(ThreadBlocks& mine, size_t count) {
  Landing& landing = TheLanding();
  MutexLock lock(landing.mu);
  if (!landing.arena) return false;
  Reservation more;
  const bool held = mine.spare.size() >= count ||
                    landing.arena->TryReserve(count - mine.spare.size(), &more, false);
  while (more.count() > 0) mine.spare.push_back(more.Take());
  landing.arena->CountHeldAhead(static_cast<int64_t>(mine.spare.size()) -
                                static_cast<int64_t>(mine.counted));
  mine.counted = mine.spare.size();
  return held;
}

}  // namespace

void StartWriteLanding(Arena& arena) {
  Landing& landing = TheLanding();
  MutexLock lock(landing.mu);
  DropHeldBlocks(landing);
  landing.arena = &arena;
  landing.on.store(true, std::memory_order_release);
}

void StopWriteLanding() {
  Landing& landing = TheLanding();
  MutexLock lock(landing.mu);
  landing.on.store(false, std::memory_order_release);
  DropHeldBlocks(landing);
  landing.arena = nullptr;
}

ssize_t ReadLandingWrites(int fd, void* buf, size_t len) {
  if (!TheLanding().on.load(std::memory_order_acquire) || len <= kHeadBytes || len > kMaxLandedRead) {
    return ::read(fd, buf, len);
  }
  ThreadBlocks& mine = Mine();
  mine.Recycle();
  const size_t skip = TheLanding().next_skip.load(std::memory_order_relaxed);
  const size_t count = (skip + len - kHeadBytes + kBlockSize - 1) / kBlockSize;
  if (!HoldBlocks(mine, count)) return ::read(fd, buf, len);
  iovec pieces[kMaxPieces];
  pieces[0] = {buf, kHeadBytes};
  for (size_t i = 0; i < count; ++i) {
    const size_t from = i == 0 ? skip : 0;
    pieces[i + 1] = {mine.spare[i].data() + from, kBlockSize - from};
  }
  const ssize_t n = ::readv(fd, pieces, static_cast<int>(count + 1));
  if (n <= static_cast<ssize_t>(kHeadBytes)) return n;
  const size_t body = static_cast<size_t>(n) - kHeadBytes;
  const auto* in = static_cast<const fuse_in_header*>(buf);
  const auto* write = reinterpret_cast<const fuse_write_in*>(in + 1);
  if (in->opcode == FUSE_WRITE && in->len == static_cast<uint32_t>(n) && write->size == body) {
    const size_t used = (skip + body + kBlockSize - 1) / kBlockSize;
    mine.landed.skip = skip;
    mine.landed.size = body;
    mine.landed.blocks.assign(std::make_move_iterator(mine.spare.begin()),
                              std::make_move_iterator(mine.spare.begin() + used));
    mine.spare.erase(mine.spare.begin(), mine.spare.begin() + used);
    mine.payload = static_cast<const char*>(buf) + kHeadBytes;
    mine.fresh = true;
    TheLanding().next_skip.store((write->offset + write->size) % kBlockSize, std::memory_order_relaxed);
    return n;
  }
  // Not a write that landed: its bytes go behind its head, as one read would have put them.
  LandedBytes rest;
  rest.skip = skip;
  rest.size = body;
  rest.blocks = std::move(mine.spare);
  rest.CopyTo(static_cast<char*>(buf) + kHeadBytes);
  mine.spare = std::move(rest.blocks);
  return n;
}

LandedBytes* LandedPayload(const char* payload) {
  if (!TheLanding().on.load(std::memory_order_acquire)) return nullptr;
  ThreadBlocks& mine = Mine();
  if (!mine.fresh || mine.payload != payload) return nullptr;
  mine.fresh = false;
  return &mine.landed;
}

}  // namespace ckptfs
