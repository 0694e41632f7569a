// BlockMap: the in-memory blocks of one file (block index -> block). Indices are grouped in
// segments of kSegmentBlocks that copies of the map share until one of them changes: copying the
// map of an n-block file costs about n / kSegmentBlocks, and the first change to a segment after
// a copy clones that segment alone. Snapshots of a large file that is changed and sealed over
// and over (a zarr chunk filled piece by piece) stay cheap that way. A map's first segment starts
// with room for the blocks it is given (at least kFirstSegmentMinBlocks) and doubles as it needs:
// the map of a small file costs a few words, not kSegmentBlocks slots; every other segment is
// whole from the start.
//
// A block held by a segment that is shared must not be written in place: WritableInPlace says
// whether one may be.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <utility>

#include "core/memory/arena.h"

namespace ckptfs {

class BlockMap {
 public:
  static constexpr uint64_t kSegmentBlocks = (4ull << 20) / kBlockSize;  // 4 MiB of file.
  static constexpr uint32_t kFirstSegmentMinBlocks = 4;

 private:
  // A segment's slots follow it in the same allocation (Make), `capacity` of them.
  struct alignas(BlockRef) Segment {
    explicit Segment(uint32_t capacity_in) : capacity(capacity_in) {}
    static Segment* Make(uint32_t capacity);
    static void Destroy(Segment* seg);
    BlockRef* slots() { return reinterpret_cast<BlockRef*>(this + 1); }
    const BlockRef* slots() const { return reinterpret_cast<const BlockRef*>(this + 1); }

    const uint32_t capacity;
    uint32_t count = 0;             // Slots holding a block.
    std::atomic<uint32_t> refs{1};  // Maps holding this segment.
  };
  // A counted reference to a segment. shared() acquires, as BlockRef::shared() does: a map that
  // finds its segment unshared may change it in place after the last other holder let go.
  class SegmentRef {
   public:
    explicit SegmentRef(Segment* seg) : seg_(seg) {}
    SegmentRef(const SegmentRef& o) : seg_(o.seg_) {
      seg_->refs.fetch_add(1, std::memory_order_relaxed);
    }
    SegmentRef& operator=(const SegmentRef&) = delete;
    ~SegmentRef() {
      if (seg_->refs.fetch_sub(1, std::memory_order_acq_rel) == 1) Segment::Destroy(seg_);
    }
    Segment* get() const { return seg_; }
    bool shared() const { return seg_->refs.load(std::memory_order_acquire) > 1; }

   private:
    Segment* seg_;
  };
  using Segments = std::map<uint64_t, SegmentRef>;

 public:
  const BlockRef* Find(uint64_t index) const;
  // The block at `index` in a segment of this map alone (cloned first if shared), or null.
  BlockRef* FindMutable(uint64_t index);
  // Whether the block at `index` exists and neither it nor its segment is shared.
  bool WritableInPlace(uint64_t index) const;
  // Sets (adds or replaces) the block at `index`; returns its slot in this map.
  BlockRef& Put(uint64_t index, BlockRef block);
  void Erase(uint64_t index);
  // Erases every block at `first` and beyond.
  void EraseFrom(uint64_t first);
  void Clear();
  size_t size() const { return size_; }
  // Slots the map's segments hold, filled or not: what its memory grows with.
  size_t SlotsHeld() const {
    size_t held = 0;
    for (const auto& [key, seg] : segments_) held += seg.get()->capacity;
    return held;
  }

  // Visits (index, block) in index order.
  class Iterator {
   public:
    std::pair<uint64_t, const BlockRef&> operator*() const {
      return {seg_->first * kSegmentBlocks + slot_, seg_->second.get()->slots()[slot_]};
    }
    Iterator& operator++() {
      ++slot_;
      SkipEmpty();
      return *this;
    }
    bool operator==(const Iterator& o) const {
      return seg_ == o.seg_ && (seg_ == end_ || slot_ == o.slot_);
    }
    bool operator!=(const Iterator& o) const { return !(*this == o); }

   private:
    friend class BlockMap;
    Iterator(Segments::const_iterator seg, Segments::const_iterator end)
        : seg_(seg), end_(end) {
      SkipEmpty();
    }
    void SkipEmpty() {
      for (; seg_ != end_; ++seg_, slot_ = 0) {
        const Segment& seg = *seg_->second.get();
        while (slot_ < seg.capacity && !seg.slots()[slot_]) ++slot_;
        if (slot_ < seg.capacity) return;
      }
    }
    Segments::const_iterator seg_, end_;
    uint64_t slot_ = 0;
  };
  Iterator begin() const { return Iterator(segments_.begin(), segments_.end()); }
  Iterator end() const { return Iterator(segments_.end(), segments_.end()); }

 private:
  // The segment `key` for changing its slot `slot`: created if missing, cloned if shared, grown
  // if too small.
  Segment& MutableSegment(uint64_t key, uint64_t slot);

  Segments segments_;
  size_t size_ = 0;
};

}  // namespace ckptfs
