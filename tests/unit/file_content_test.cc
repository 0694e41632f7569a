// Tests of FileContent: writes, reads, truncation, copy-on-write and base-file overlays, always
// checked against a plain std::string image of what the file must hold.
#include "core/memory/file_content.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "core_test_util.h"

namespace ckptfs {
namespace {

using testing_util::Pattern;
using testing_util::SameBytes;
using testing_util::TempDir;

class FileContentTest : public ::testing::Test {
 protected:
  // Writes through a reservation of exactly the blocks the content says it needs.
  void Write(FileContent& c, uint64_t offset, const std::string& bytes) {
    size_t needed = c.BlocksNeededForWrite(offset, bytes.size());
    Reservation r = arena_.Reserve(needed);
    ASSERT_TRUE(c.Write(offset, bytes.data(), bytes.size(), r).ok());
    EXPECT_EQ(r.count(), 0u) << "BlocksNeededForWrite overestimated";
  }
  // Lands `bytes` at `offset` as a request read into fresh blocks `skip` bytes in would (in
  // line with the file's blocks unless told), garbage around them. Returns how many of the
  // landed blocks the content took.
  size_t Land(FileContent& c, uint64_t offset, const std::string& bytes,
              std::optional<size_t> skip = std::nullopt) {
    LandedBytes landed;
    landed.skip = skip.value_or(offset % kBlockSize);
    landed.size = bytes.size();
    const size_t count = (landed.skip + bytes.size() + kBlockSize - 1) / kBlockSize;
    Reservation taken = arena_.Reserve(count);
    std::vector<const char*> memory;
    for (size_t i = 0; i < count; ++i) {
      landed.blocks.push_back(taken.Take());
      std::memset(landed.blocks.back().data(), '\xee', kBlockSize);
      memory.push_back(landed.blocks.back().data());
    }
    for (size_t i = 0; i < bytes.size(); ++i) {
      const size_t at = landed.skip + i;
      landed.blocks[at / kBlockSize].data()[at % kBlockSize] = bytes[i];
    }
    EXPECT_EQ(landed.Copied(), bytes) << "Copied";
    size_t needed = c.BlocksNeededForLand(offset, landed);
    Reservation r = arena_.Reserve(needed);
    Result<size_t> reported = c.Land(offset, landed, r);
    EXPECT_TRUE(reported.ok());
    EXPECT_EQ(r.count(), 0u) << "BlocksNeededForLand overestimated";
    size_t took = 0;
    for (size_t i = 0; i < count; ++i) {
      if (landed.blocks[i]) continue;
      ++took;
      const BlockRef* kept = c.blocks().Find(offset / kBlockSize + i);
      EXPECT_TRUE(kept && kept->data() == memory[i]) << "a taken block is not where it belongs";
    }
    EXPECT_EQ(reported.ok() ? *reported : 0, took) << "Land's count";
    return took;
  }
  void Truncate(FileContent& c, uint64_t size) {
    Reservation r = arena_.Reserve(c.BlocksNeededForTruncate(size));
    c.Truncate(size, r);
  }
  // Applies the same write to the image.
  static void Put(std::string& image, uint64_t offset, const std::string& bytes) {
    if (image.size() < offset + bytes.size()) image.resize(offset + bytes.size(), '\0');
    image.replace(offset, bytes.size(), bytes);
  }
  static std::string All(const FileContent& c) {
    std::string out(c.size(), '\x7f');
    Result<size_t> n = c.ReadInto(0, c.size(), out.data());
    EXPECT_TRUE(n.ok());
    EXPECT_EQ(*n, c.size());
    return out;
  }
  static std::string ViaSegments(const FileContent& c, uint64_t off, size_t len) {
    ReadData d;
    d.segments = c.Read(off, len);
    return testing_util::Materialize(d);
  }
  // A base file on disk holding `bytes`.
  std::shared_ptr<BackingFile> Base(const std::string& bytes) {
    std::string path = dir_ / ("base" + std::to_string(next_++));
    testing_util::WriteHostFile(path, bytes);
    int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
    EXPECT_GE(fd, 0);
    return std::make_shared<BackingFile>(*env_, fd);
  }

  std::unique_ptr<Env> env_ = MakePosixEnv();
  TempDir dir_;
  int next_ = 0;
  Arena arena_{64ull << 20};
};

TEST_F(FileContentTest, EmptyReadsNothing) {
  FileContent c;
  EXPECT_EQ(c.size(), 0u);
  EXPECT_TRUE(c.Read(0, 100).empty());
  char buf[4];
  EXPECT_EQ(*c.ReadInto(0, 4, buf), 0u);
}

TEST_F(FileContentTest, WritesAtOffsetsAndAcrossBlocksReadBack) {
  FileContent c;
  std::string image;
  std::mt19937_64 rng(7);
  for (int i = 0; i < 200; ++i) {
    uint64_t off = rng() % (6 * kBlockSize);
    size_t len = 1 + rng() % (2 * kBlockSize + 10);
    std::string bytes = Pattern(i, len);
    Write(c, off, bytes);
    Put(image, off, bytes);
    ASSERT_EQ(c.size(), image.size());
  }
  EXPECT_TRUE(SameBytes(All(c), image));
  // Arbitrary sub-ranges, through both read paths, clipped at the end.
  for (int i = 0; i < 100; ++i) {
    uint64_t off = rng() % (image.size() + 10);
    size_t len = rng() % (3 * kBlockSize);
    std::string want = off < image.size() ? image.substr(off, len) : "";
    EXPECT_TRUE(SameBytes(ViaSegments(c, off, len), want)) << off << "+" << len;
    std::string got(len, '\x7f');
    Result<size_t> n = c.ReadInto(off, len, got.data());
    ASSERT_TRUE(n.ok());
    got.resize(*n);
    EXPECT_TRUE(SameBytes(got, want)) << off << "+" << len;
  }
}

TEST_F(FileContentTest, HolesReadAsZerosAndTakeNoMemory) {
  FileContent c;
  const uint64_t off = 5 * kBlockSize + 123;
  Write(c, off, "hello");
  EXPECT_EQ(c.size(), off + 5);
  EXPECT_EQ(c.memory_blocks(), 1u);
  auto segs = c.Read(0, c.size());
  ASSERT_EQ(segs.size(), 2u);
  EXPECT_EQ(segs[0].kind, ReadSegment::Kind::kZeros);
  EXPECT_EQ(segs[0].length, 5 * kBlockSize);
  EXPECT_EQ(segs[1].kind, ReadSegment::Kind::kMemory);
  EXPECT_EQ(segs[1].length, 128u);
  std::string want(off, '\0');
  want += "hello";
  EXPECT_TRUE(SameBytes(All(c), want));
}

TEST_F(FileContentTest, BlocksNeededForWrite) {
  FileContent c;
  EXPECT_EQ(c.BlocksNeededForWrite(0, 0), 0u);
  EXPECT_EQ(c.BlocksNeededForWrite(0, 1), 1u);
  EXPECT_EQ(c.BlocksNeededForWrite(0, kBlockSize), 1u);
  EXPECT_EQ(c.BlocksNeededForWrite(1, kBlockSize), 2u);
  EXPECT_EQ(c.BlocksNeededForWrite(kBlockSize - 1, 2), 2u);
  EXPECT_EQ(c.BlocksNeededForWrite(10 * kBlockSize, 3 * kBlockSize), 3u);
  Write(c, 0, std::string(kBlockSize + 1, 'a'));  // Blocks 0 and 1 exist now.
  EXPECT_EQ(c.BlocksNeededForWrite(0, 2 * kBlockSize), 0u);
  EXPECT_EQ(c.BlocksNeededForWrite(0, 2 * kBlockSize + 1), 1u);
  FileContent snapshot = c;  // Shares both blocks: a write must copy them.
  EXPECT_EQ(c.BlocksNeededForWrite(0, 1), 1u);
  EXPECT_EQ(c.BlocksNeededForWrite(0, 3 * kBlockSize), 3u);
  EXPECT_EQ(snapshot.BlocksNeededForWrite(kBlockSize, 1), 1u);
}

TEST_F(FileContentTest, CopyIsUnaffectedByLaterWritesAndTruncates) {
  FileContent c;
  std::string v1 = Pattern(1, 3 * kBlockSize + 77);
  Write(c, 0, v1);
  FileContent snap = c;
  Write(c, 100, "XXXXXXXX");
  Write(c, 2 * kBlockSize - 3, "YYYYYY");
  Write(c, 10 * kBlockSize, "tail");
  EXPECT_TRUE(SameBytes(All(snap), v1));
  Truncate(c, kBlockSize + 5);  // Tail block shared with the snapshot.
  EXPECT_TRUE(SameBytes(All(snap), v1));
  Truncate(c, 0);
  EXPECT_TRUE(SameBytes(All(snap), v1));
  // And the other way round: writes to the copy leave the original alone.
  FileContent c2 = snap;
  Write(snap, 0, "ZZ");
  EXPECT_TRUE(SameBytes(All(c2), v1));
  EXPECT_EQ(All(snap).substr(0, 2), "ZZ");
}

TEST_F(FileContentTest, TruncateDownThenUpExposesZerosNeverStaleBytes) {
  FileContent c;
  Write(c, 0, std::string(3 * kBlockSize, '\xAA'));
  Truncate(c, 1000);
  EXPECT_EQ(c.size(), 1000u);
  Truncate(c, 3 * kBlockSize);
  std::string want = std::string(1000, '\xAA') + std::string(3 * kBlockSize - 1000, '\0');
  EXPECT_TRUE(SameBytes(All(c), want));
  // Writing past the end after a shrink must not resurrect old bytes either.
  Truncate(c, 10);
  Write(c, 2 * kBlockSize, "x");
  want = std::string(10, '\xAA') + std::string(2 * kBlockSize - 10, '\0') + "x";
  EXPECT_TRUE(SameBytes(All(c), want));
}

TEST_F(FileContentTest, TruncateOfSharedTailBlockCopiesIt) {
  FileContent c;
  Write(c, 0, std::string(kBlockSize, 'q'));
  FileContent snap = c;
  EXPECT_EQ(c.BlocksNeededForTruncate(100), 1u);
  EXPECT_EQ(c.BlocksNeededForTruncate(kBlockSize * 2), 0u);  // Growing takes nothing.
  EXPECT_EQ(c.BlocksNeededForTruncate(0), 0u);
  Truncate(c, 100);
  Truncate(c, kBlockSize);
  EXPECT_TRUE(SameBytes(All(c), std::string(100, 'q') + std::string(kBlockSize - 100, '\0')));
  EXPECT_TRUE(SameBytes(All(snap), std::string(kBlockSize, 'q')));
}

TEST_F(FileContentTest, BaseFileOverlaidByWrites) {
  std::string base = Pattern(9, 3 * kBlockSize + 500);
  FileContent c(Base(base), base.size());
  EXPECT_EQ(c.size(), base.size());
  EXPECT_EQ(c.memory_blocks(), 0u);
  EXPECT_TRUE(SameBytes(All(c), base));
  std::string image = base;
  Write(c, kBlockSize + 10, "patch");
  Put(image, kBlockSize + 10, "patch");
  EXPECT_EQ(c.memory_blocks(), 1u);  // Only the touched block is in memory.
  EXPECT_TRUE(SameBytes(All(c), image));
  EXPECT_TRUE(SameBytes(ViaSegments(c, 0, image.size()), image));
  auto segs = c.Read(0, image.size());
  ASSERT_EQ(segs.size(), 3u);
  EXPECT_EQ(segs[0].kind, ReadSegment::Kind::kBacking);
  EXPECT_EQ(segs[1].kind, ReadSegment::Kind::kMemory);
  EXPECT_EQ(segs[2].kind, ReadSegment::Kind::kBacking);
  // Extending past the base: the gap reads as zeros.
  Write(c, base.size() + kBlockSize, "end");
  Put(image, base.size() + kBlockSize, "end");
  EXPECT_TRUE(SameBytes(All(c), image));
}

TEST_F(FileContentTest, BaseBytesBeyondTruncationNeverReappear) {
  std::string base(2 * kBlockSize, '\xBB');
  FileContent c(Base(base), base.size());
  Truncate(c, 10);
  EXPECT_EQ(c.base_len(), 10u);
  Truncate(c, 2 * kBlockSize);
  EXPECT_TRUE(SameBytes(All(c), std::string(10, '\xBB') + std::string(2 * kBlockSize - 10, '\0')));
  // A write in the same block fills the rest of the block from the base only up to base_len.
  Write(c, 20, "w");
  std::string want = std::string(10, '\xBB') + std::string(10, '\0') + "w" +
                     std::string(2 * kBlockSize - 21, '\0');
  EXPECT_TRUE(SameBytes(All(c), want));
  Truncate(c, 0);
  EXPECT_EQ(c.base(), nullptr);
  Truncate(c, 5);
  EXPECT_TRUE(SameBytes(All(c), std::string(5, '\0')));
}

TEST_F(FileContentTest, ReplaceWithBaseKeepsBytes) {
  FileContent c;
  std::string bytes = Pattern(3, 2 * kBlockSize + 9);
  Write(c, 0, bytes);
  c.ReplaceWithBase(Base(bytes));
  EXPECT_EQ(c.memory_blocks(), 0u);
  EXPECT_TRUE(SameBytes(All(c), bytes));
}

TEST_F(FileContentTest, SpliceSharesAlignedBlocksAndCopiesTheRest) {
  std::string base_bytes = Pattern(7, 6 * kBlockSize);
  FileContent dst(Base(base_bytes), base_bytes.size());
  std::string image = base_bytes;
  for (auto [offset, length] : {std::pair<uint64_t, uint64_t>{kBlockSize, 2 * kBlockSize},
                                {3 * kBlockSize + 100, kBlockSize + 7},
                                {5 * kBlockSize, 2 * kBlockSize + 3}}) {
    FileContent src;
    std::string bytes = Pattern(offset, length);
    Write(src, 0, bytes);
    size_t needed = dst.BlocksNeededForSplice(offset, src, length);
    Reservation r = arena_.Reserve(needed);
    ASSERT_TRUE(dst.Splice(offset, src, length, r).ok());
    EXPECT_EQ(r.count(), 0u) << "BlocksNeededForSplice overestimated";
    Put(image, offset, bytes);
    ASSERT_TRUE(SameBytes(All(dst), image)) << "splice at " << offset;
    // Later writes to the source never show in the destination (shared blocks are copied).
    Write(src, 0, std::string(length, 'x'));
    ASSERT_TRUE(SameBytes(All(dst), image)) << "source written after the splice at " << offset;
  }
  FileContent src;
  Write(src, 0, Pattern(1, 2 * kBlockSize));
  EXPECT_EQ(dst.BlocksNeededForSplice(0, src, 2 * kBlockSize), 0u) << "aligned: all shared";
  EXPECT_GT(dst.BlocksNeededForSplice(1, src, 2 * kBlockSize), 0u) << "unaligned: copied";
}

TEST_F(FileContentTest, LandedBlocksCoveredWholeAreTakenAndTheEdgesCopied) {
  std::string base_bytes = Pattern(3, 5 * kBlockSize + 11);
  FileContent c(Base(base_bytes), base_bytes.size());
  std::string image = base_bytes;
  const FileContent before = c;
  // Aligned: every block taken.
  std::string bytes = Pattern(4, 3 * kBlockSize);
  EXPECT_EQ(Land(c, kBlockSize, bytes), 3u);
  Put(image, kBlockSize, bytes);
  ASSERT_TRUE(SameBytes(All(c), image));
  // Unaligned, past the end: the whole blocks between the edges taken, the edges copied over
  // the base and the garbage around the bytes never shown.
  bytes = Pattern(5, 4 * kBlockSize + 300);
  EXPECT_EQ(Land(c, 3 * kBlockSize + 100, bytes), 3u);
  Put(image, 3 * kBlockSize + 100, bytes);
  ASSERT_TRUE(SameBytes(All(c), image));
  Truncate(c, c.size() + kBlockSize);
  image.resize(image.size() + kBlockSize, '\0');
  ASSERT_TRUE(SameBytes(All(c), image)) << "bytes past the end were not zero";
  // Within one block: copied.
  EXPECT_EQ(Land(c, 10, "small"), 0u);
  Put(image, 10, "small");
  ASSERT_TRUE(SameBytes(All(c), image));
  // Read out of line with the file's blocks: all copied.
  bytes = Pattern(6, 3 * kBlockSize + 5);
  EXPECT_EQ(Land(c, 2 * kBlockSize + 7, bytes, /*skip=*/9), 0u);
  Put(image, 2 * kBlockSize + 7, bytes);
  ASSERT_TRUE(SameBytes(All(c), image));
  ASSERT_TRUE(SameBytes(All(before), base_bytes)) << "a copy taken before changed";
}

TEST_F(FileContentTest, RandomOperationsMatchImage) {
  for (uint64_t seed = 1; seed <= 5; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937_64 rng(seed);
    std::string base_bytes = Pattern(seed, rng() % (3 * kBlockSize));
    FileContent c(Base(base_bytes), base_bytes.size());
    std::string image = base_bytes;
    std::vector<std::pair<FileContent, std::string>> snaps;
    for (int step = 0; step < 300; ++step) {
      int op = rng() % 10;
      if (op < 6) {
        uint64_t off = rng() % (5 * kBlockSize);
        std::string bytes = Pattern(seed * 1000 + step, 1 + rng() % (3 * kBlockSize + 100));
        if (op < 2) {
          Write(c, off, bytes);
        } else if (op < 4) {
          Land(c, off, bytes, rng() % kBlockSize);
        } else {
          Land(c, off, bytes);
        }
        Put(image, off, bytes);
      } else if (op < 8) {
        uint64_t size = rng() % (5 * kBlockSize);
        Truncate(c, size);
        image.resize(size, '\0');
      } else if (op == 8 && snaps.size() < 8) {
        snaps.emplace_back(c, image);
      } else if (!snaps.empty()) {
        auto& [snap, want] = snaps[rng() % snaps.size()];
        ASSERT_TRUE(SameBytes(All(snap), want)) << "snapshot changed, step " << step;
      }
      ASSERT_TRUE(SameBytes(All(c), image)) << "step " << step;
    }
    for (auto& [snap, want] : snaps) EXPECT_TRUE(SameBytes(All(snap), want));
  }
}

}  // namespace
}  // namespace ckptfs
