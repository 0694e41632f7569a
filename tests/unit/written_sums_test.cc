// Tests of the sums a file's content keeps as it is written (WrittenSums): what they sum, when
// they catch up, and that no change of the content leaves a stale sum behind.
#include "core/memory/written_sums.h"

#include <gtest/gtest.h>

#include <random>
#include <string>

#include "core/memory/file_content.h"
#include "core_test_util.h"
#include "crc32c_of.h"

namespace ckptfs {
namespace {

constexpr uint64_t kPiece = WrittenSums::kPiece;

using testing_util::Crc32cOf;

// The sums kept for `image` are those of its bytes: each whole piece of the summed prefix, and
// the part of a piece after them.
void ExpectSumsOf(const WrittenSums& sums, std::string_view image) {
  ASSERT_LE(sums.summed(), image.size());
  ASSERT_EQ(sums.piece_sums().size(), sums.summed() / kPiece);
  for (size_t i = 0; i < sums.piece_sums().size(); ++i) {
    ASSERT_EQ(sums.piece_sums()[i], Crc32cOf(image.substr(i * kPiece, kPiece))) << "piece " << i;
  }
  const uint64_t partial_start = sums.summed() / kPiece * kPiece;
  ASSERT_EQ(sums.partial_piece_sum(),
            Crc32cOf(image.substr(partial_start, sums.summed() - partial_start)));
}

TEST(WrittenSumsTest, BytesWrittenInOrderAreSummedAsTheyCome) {
  const std::string bytes = testing_util::Pattern(1, kPiece + 1000);
  WrittenSums sums;
  sums.Written(0, bytes.data(), 5000);
  sums.Written(5000, bytes.data() + 5000, bytes.size() - 5000);
  EXPECT_EQ(sums.summed(), bytes.size());
  ExpectSumsOf(sums, bytes);
  EXPECT_FALSE(sums.NextToCatchUp());
}

TEST(WrittenSumsTest, BytesWrittenAheadWaitUntilThePrefixReachesThem) {
  const std::string bytes = testing_util::Pattern(2, 3000);
  WrittenSums sums;
  sums.Written(2000, bytes.data() + 2000, 1000);
  sums.Written(1000, bytes.data() + 1000, 1000);
  EXPECT_EQ(sums.summed(), 0u);
  EXPECT_FALSE(sums.NextToCatchUp());
  sums.Written(0, bytes.data(), 1000);
  EXPECT_EQ(sums.summed(), 1000u);
  ASSERT_EQ(sums.NextToCatchUp(), std::make_pair(uint64_t{1000}, uint64_t{3000}));
  sums.Written(1000, bytes.data() + 1000, 2000);
  EXPECT_EQ(sums.summed(), 3000u);
  EXPECT_FALSE(sums.NextToCatchUp());
  ExpectSumsOf(sums, bytes);
}

TEST(WrittenSumsTest, ARewriteTakesThePrefixBackToTheStartOfItsPiece) {
  const std::string bytes = testing_util::Pattern(3, 2 * kPiece + 10);
  WrittenSums sums;
  sums.Written(0, bytes.data(), bytes.size());
  sums.Written(kPiece + 5, bytes.data() + kPiece + 5, 1);
  EXPECT_EQ(sums.summed(), kPiece);
  EXPECT_EQ(sums.piece_sums().size(), 1u);
  ExpectSumsOf(sums, bytes);
  sums.Truncated(100);
  EXPECT_EQ(sums.summed(), 0u);
  EXPECT_FALSE(sums.NextToCatchUp());
}

TEST(WrittenSumsTest, KeepsABoundedNumberOfPendingRanges) {
  const std::string bytes = testing_util::Pattern(4, 100 * 10);
  WrittenSums sums;
  for (uint64_t i = 40; i > 1; i -= 2) sums.Written(i * 10, bytes.data(), 10);
  sums.Written(0, bytes.data(), 10);
  // The nearest ranges are kept: only the gap at 10 stops the catch-up.
  EXPECT_FALSE(sums.NextToCatchUp());
  sums.Written(10, bytes.data(), 10);
  ASSERT_EQ(sums.NextToCatchUp(), std::make_pair(uint64_t{20}, uint64_t{30}));
}

class ContentSumsTest : public ::testing::Test {
 protected:
  void Write(FileContent& c, uint64_t offset, const std::string& bytes) {
    Reservation r = arena_.Reserve(c.BlocksNeededForWrite(offset, bytes.size()));
    ASSERT_TRUE(c.Write(offset, bytes.data(), bytes.size(), r).ok());
  }
  static void Put(std::string& image, uint64_t offset, std::string_view bytes) {
    if (image.size() < offset + bytes.size()) image.resize(offset + bytes.size(), '\0');
    image.replace(offset, bytes.size(), bytes);
  }

  Arena arena_{256ull << 20};
};

TEST_F(ContentSumsTest, ParallelWritesArrivingOutOfOrderAreAllSummedInMemory) {
  const std::string bytes = testing_util::Pattern(5, 3 * kPiece / 2);
  FileContent c;
  constexpr size_t kRequest = 1 << 20;
  // Requests of a window of four arrive last first.
  for (size_t window = 0; window < bytes.size(); window += 4 * kRequest) {
    for (size_t at = std::min(bytes.size(), window + 4 * kRequest); at > window;) {
      const size_t begin = (at - 1) / kRequest * kRequest;
      Write(c, begin, bytes.substr(begin, at - begin));
      at = begin;
    }
  }
  EXPECT_EQ(c.written_sums().summed(), bytes.size());
  ExpectSumsOf(c.written_sums(), bytes);
}

TEST_F(ContentSumsTest, AWriterThroughThePageCacheRewritingItsLastPageIsSummedInMemory) {
  const std::string bytes = testing_util::Pattern(6, kPiece + 300000);
  FileContent c;
  constexpr size_t kPage = 4096;
  // Each write-back sends the last page as far as it is filled, then again when it is full.
  for (size_t at = 0; at < bytes.size(); at += kPage) {
    const size_t page = std::min(kPage, bytes.size() - at);
    Write(c, at, bytes.substr(at, page / 3 + 1));
    Write(c, at, bytes.substr(at, page));
  }
  EXPECT_EQ(c.written_sums().summed(), bytes.size());
  ExpectSumsOf(c.written_sums(), bytes);
}

TEST_F(ContentSumsTest, NoWriteSpliceOrTruncationLeavesAStaleSum) {
  for (uint64_t seed = 1; seed <= 4; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937_64 rng(seed);
    FileContent c;
    std::string image;
    FileContent source;
    const std::string source_bytes = testing_util::Pattern(seed + 100, 4 << 20);
    Write(source, 0, source_bytes);
    int steps_with_sums = 0;
    for (int step = 0; step < 150; ++step) {
      const int op = static_cast<int>(rng() % 10);
      const uint64_t limit = 3 * kPiece;
      if (op < 5) {  // Appends, in requests of up to 1 MiB.
        const uint64_t at = image.size();
        const std::string bytes = testing_util::Pattern(seed * 1000 + step, rng() % (1 << 20) + 1);
        if (at + bytes.size() > limit) continue;
        Write(c, at, bytes);
        Put(image, at, bytes);
      } else if (op < 7) {  // Over the summed prefix, beyond it, or at the end.
        const uint64_t at = rng() % (image.size() + 1);
        const std::string bytes = testing_util::Pattern(seed * 1000 + step, rng() % 70000 + 1);
        if (at + bytes.size() > limit) continue;
        Write(c, at, bytes);
        Put(image, at, bytes);
      } else if (op < 9) {  // Shared blocks from another file, aligned or not.
        const uint64_t at =
            rng() % 2 ? image.size() / kBlockSize * kBlockSize : rng() % (image.size() + 1);
        const uint64_t length = rng() % (source_bytes.size() / kBlockSize) * kBlockSize + 1;
        if (at + length > limit) continue;
        Reservation r = arena_.Reserve(c.BlocksNeededForSplice(at, source, length));
        ASSERT_TRUE(c.Splice(at, source, length, r).ok());
        Put(image, at, std::string_view(source_bytes).substr(0, length));
      } else {
        const uint64_t size = rng() % 2 ? image.size() - rng() % (image.size() + 1)
                                        : image.size() + rng() % 100000;
        Reservation r = arena_.Reserve(c.BlocksNeededForTruncate(size));
        c.Truncate(size, r);
        image.resize(size, '\0');
      }
      ASSERT_NO_FATAL_FAILURE(ExpectSumsOf(c.written_sums(), image)) << "step " << step;
      if (c.written_sums().summed() > 0) ++steps_with_sums;
    }
    EXPECT_GT(steps_with_sums, 15) << steps_with_sums;
  }
}

}  // namespace
}  // namespace ckptfs
