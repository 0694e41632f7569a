// Tests of BlockMap: lookups, order, erasure, and copies that share segments until one changes.
#include "core/memory/block_map.h"

#include <gtest/gtest.h>

#include <vector>

namespace ckptfs {
namespace {

class BlockMapTest : public ::testing::Test {
 protected:
  // A fresh block whose first byte is `tag`.
  BlockRef Block(char tag) {
    Reservation r = arena_.Reserve(1);
    BlockRef b = r.Take();
    b.data()[0] = tag;
    return b;
  }
  static std::vector<std::pair<uint64_t, char>> Contents(const BlockMap& m) {
    std::vector<std::pair<uint64_t, char>> out;
    for (const auto& [index, block] : m) out.emplace_back(index, block.data()[0]);
    return out;
  }

  Arena arena_{1024 * kBlockSize};
};

constexpr uint64_t kSeg = BlockMap::kSegmentBlocks;

TEST_F(BlockMapTest, VisitsBlocksInIndexOrderAcrossSegments) {
  BlockMap m;
  for (uint64_t i : {3 * kSeg + 1, 0ul, kSeg - 1, uint64_t{1} << 50, kSeg}) m.Put(i, Block('a'));
  std::vector<uint64_t> seen;
  for (const auto& [index, block] : m) seen.push_back(index);
  EXPECT_EQ(seen, (std::vector<uint64_t>{0, kSeg - 1, kSeg, 3 * kSeg + 1, uint64_t{1} << 50}));
  EXPECT_EQ(m.size(), 5u);
  EXPECT_EQ(m.Find(1), nullptr);
  EXPECT_NE(m.Find(kSeg), nullptr);
}

TEST_F(BlockMapTest, ACopySharesItsSegmentsUntilOneSideChanges) {
  BlockMap live;
  for (uint64_t i = 0; i < 2 * kSeg; ++i) live.Put(i, Block('a'));
  EXPECT_TRUE(live.WritableInPlace(5));
  {
    BlockMap snapshot = live;
    EXPECT_FALSE(live.WritableInPlace(5)) << "the segment is shared with the snapshot";
    EXPECT_FALSE(snapshot.WritableInPlace(5));
    live.Put(5, Block('b'));
    live.Erase(kSeg + 2);
    EXPECT_EQ(snapshot.Find(5)->data()[0], 'a');
    EXPECT_NE(snapshot.Find(kSeg + 2), nullptr);
    EXPECT_EQ(snapshot.size(), 2 * kSeg);
    EXPECT_EQ(live.Find(5)->data()[0], 'b');
    EXPECT_EQ(live.size(), 2 * kSeg - 1);
    // The cloned segment holds the snapshot's blocks too: they are shared now, block by block.
    EXPECT_FALSE(live.WritableInPlace(6));
    EXPECT_TRUE(live.WritableInPlace(5));
  }
  EXPECT_TRUE(live.WritableInPlace(6)) << "the snapshot is gone";
  BlockRef* mine = live.FindMutable(6);
  ASSERT_NE(mine, nullptr);
  mine->data()[0] = 'c';
  EXPECT_EQ(live.Find(6)->data()[0], 'c');
}

TEST_F(BlockMapTest, EraseFromDropsEverythingAtAndBeyondAnIndex) {
  for (uint64_t first : {uint64_t{0}, kSeg / 2, kSeg, kSeg + 1, 10 * kSeg}) {
    BlockMap m;
    for (uint64_t i = 0; i < 3 * kSeg; i += 3) m.Put(i, Block('x'));
    BlockMap snapshot = m;
    m.EraseFrom(first);
    size_t kept = 0;
    for (const auto& [index, block] : m) {
      EXPECT_LT(index, first);
      ++kept;
    }
    EXPECT_EQ(kept, m.size());
    EXPECT_EQ(m.size(), (std::min(first, 3 * kSeg) + 2) / 3);
    EXPECT_EQ(Contents(snapshot).size(), kSeg) << "the copy keeps every block";
  }
}

TEST_F(BlockMapTest, ASmallFilesMapHoldsRoomForItsBlocksOnlyAndGrowsKeepingThem) {
  BlockMap m;
  m.Put(0, Block('a'));
  m.Put(2, Block('b'));
  EXPECT_EQ(m.SlotsHeld(), BlockMap::kFirstSegmentMinBlocks);
  m.Put(9, Block('c'));
  EXPECT_EQ(m.SlotsHeld(), 16u);
  EXPECT_EQ(Contents(m), (std::vector<std::pair<uint64_t, char>>{{0, 'a'}, {2, 'b'}, {9, 'c'}}));
  EXPECT_TRUE(m.WritableInPlace(0)) << "growing moved the blocks, it did not share them";
  m.Put(kSeg - 1, Block('d'));
  EXPECT_EQ(m.SlotsHeld(), kSeg);
  m.Put(kSeg, Block('e'));
  EXPECT_EQ(m.SlotsHeld(), 2 * kSeg) << "every segment after the first is whole from the start";
  m.EraseFrom(1);
  EXPECT_EQ(Contents(m), (std::vector<std::pair<uint64_t, char>>{{0, 'a'}}));
}

TEST_F(BlockMapTest, GrowingTheFirstSegmentOfACopyLeavesTheOtherCopyAlone) {
  BlockMap live;
  live.Put(0, Block('a'));
  live.Put(1, Block('b'));
  BlockMap snapshot = live;
  live.Put(40, Block('c'));
  EXPECT_EQ(snapshot.SlotsHeld(), BlockMap::kFirstSegmentMinBlocks);
  EXPECT_EQ(snapshot.Find(40), nullptr);
  EXPECT_EQ(Contents(snapshot), (std::vector<std::pair<uint64_t, char>>{{0, 'a'}, {1, 'b'}}));
  EXPECT_EQ(live.SlotsHeld(), 64u);
  EXPECT_FALSE(live.WritableInPlace(1)) << "the snapshot still holds block 1";
  EXPECT_EQ(Contents(live),
            (std::vector<std::pair<uint64_t, char>>{{0, 'a'}, {1, 'b'}, {40, 'c'}}));
}

TEST_F(BlockMapTest, ADroppedMapsBlocksAreHandedOutAgainInAscendingOrder) {
  for (uint64_t count : {uint64_t{3}, kSeg}) {
    Arena arena(2 * kSeg * kBlockSize);
    {
      BlockMap m;
      Reservation r = arena.Reserve(count);
      for (uint64_t i = 0; i < count; ++i) m.Put(i, r.Take());
    }
    Reservation again = arena.Reserve(count);
    std::vector<BlockRef> taken;
    for (uint64_t i = 0; i < count; ++i) taken.push_back(again.Take());
    for (uint64_t i = 1; i < count; ++i) {
      EXPECT_GT(taken[i].data(), taken[i - 1].data()) << "large writes land in ascending memory";
    }
  }
}

TEST_F(BlockMapTest, ClearAndEraseOfMissingBlocks) {
  BlockMap m;
  m.Erase(7);
  EXPECT_EQ(m.FindMutable(7), nullptr);
  m.Put(7, Block('a'));
  m.Put(7, Block('b'));
  EXPECT_EQ(m.size(), 1u);
  EXPECT_EQ(Contents(m), (std::vector<std::pair<uint64_t, char>>{{7, 'b'}}));
  m.Erase(7);
  EXPECT_EQ(m.size(), 0u);
  EXPECT_TRUE(m.begin() == m.end());
  m.Put(1, Block('a'));
  m.Clear();
  EXPECT_EQ(m.size(), 0u);
  EXPECT_EQ(m.Find(1), nullptr);
}

}  // namespace
}  // namespace ckptfs
