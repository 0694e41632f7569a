#include "core/memory/block_map.h"

namespace ckptfs {

const BlockRef* BlockMap::Find(uint64_t index) const {
  auto it = segments_.find(index / kSegmentBlocks);
  if (it == segments_.end()) return nullptr;
  const BlockRef& block = it->second.get()->slots[index % kSegmentBlocks];
  return block ? &block : nullptr;
}

BlockRef* BlockMap::FindMutable(uint64_t index) {
  if (!Find(index)) return nullptr;
  return &MutableSegment(index / kSegmentBlocks).slots[index % kSegmentBlocks];
}

bool BlockMap::WritableInPlace(uint64_t index) const {
  auto it = segments_.find(index / kSegmentBlocks);
  if (it == segments_.end() || it->second.shared()) return false;
  const BlockRef& block = it->second.get()->slots[index % kSegmentBlocks];
  return block && !block.shared();
}

BlockRef& BlockMap::Put(uint64_t index, BlockRef block) {
  Segment& seg = MutableSegment(index / kSegmentBlocks);
  BlockRef& slot = seg.slots[index % kSegmentBlocks];
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
  Segment& seg = MutableSegment(key);
  seg.slots[index % kSegmentBlocks] = BlockRef();
  --size_;
  if (--seg.count == 0) segments_.erase(key);
}

void BlockMap::EraseFrom(uint64_t first) {
  const uint64_t key = first / kSegmentBlocks;
  for (auto it = segments_.upper_bound(key); it != segments_.end();) {
    size_ -= it->second.get()->count;
    it = segments_.erase(it);
  }
  if (first % kSegmentBlocks == 0) {
    if (auto it = segments_.find(key); it != segments_.end()) {
      size_ -= it->second.get()->count;
      segments_.erase(it);
    }
    return;
  }
  for (uint64_t index = first; index < (key + 1) * kSegmentBlocks; ++index) Erase(index);
}

void BlockMap::Clear() {
  segments_.clear();
  size_ = 0;
}

BlockMap::Segment& BlockMap::MutableSegment(uint64_t key) {
  auto it = segments_.find(key);
  if (it == segments_.end()) {
    return *segments_.emplace(key, SegmentRef(new Segment)).first->second.get();
  }
  if (it->second.shared()) {
    const Segment& old = *it->second.get();
    auto* copy = new Segment;
    copy->slots = old.slots;
    copy->count = old.count;
    it = segments_.erase(it);
    it = segments_.emplace_hint(it, key, SegmentRef(copy));
  }
  return *it->second.get();
}

}  // namespace ckptfs
