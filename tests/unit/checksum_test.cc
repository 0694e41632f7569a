// Tests of the checksum records of file contents and of the records kept with published files.
#include "core/integrity/checksum.h"

#include <fcntl.h>
#include <gtest/gtest.h>

#include <random>
#include <string>

#include "core/integrity/checksum_record.h"
#include "core_test_util.h"
#include "crc32c_of.h"

namespace ckptfs {
namespace {

using testing_util::Crc32cOf;

class ChecksumOfContentTest : public ::testing::Test {
 protected:
  void Write(FileContent& c, uint64_t offset, const std::string& bytes) {
    Reservation r = arena_.Reserve(c.BlocksNeededForWrite(offset, bytes.size()));
    ASSERT_TRUE(c.Write(offset, bytes.data(), bytes.size(), r).ok());
  }
  static void Put(std::string& image, uint64_t offset, const std::string& bytes) {
    if (image.size() < offset + bytes.size()) image.resize(offset + bytes.size(), '\0');
    image.replace(offset, bytes.size(), bytes);
  }

  testing_util::TempDir dir_;
  std::unique_ptr<Env> env_ = MakePosixEnv();
  Arena arena_{64ull << 20};
};

// The record of `image`, summed chunk by chunk with one Crc32c each.
ChecksumRecord RecordOfImage(const std::string& image) {
  ChecksumRecord record{ChecksumChunkFor(image.size()), image.size(), {}};
  for (uint64_t at = 0; at < image.size(); at += record.chunk) {
    record.sums.push_back(Crc32cOf(image.substr(at, record.chunk)));
  }
  return record;
}

TEST(ChecksumTest, TheChunkIsThePowerOfTwoThatKeepsARecordWithinItsSums) {
  EXPECT_EQ(ChecksumChunkFor(0), kMinChecksumChunk);
  EXPECT_EQ(ChecksumChunkFor(kMaxChecksumChunks * kMinChecksumChunk), kMinChecksumChunk);
  EXPECT_EQ(ChecksumChunkFor(kMaxChecksumChunks * kMinChecksumChunk + 1), 2 * kMinChecksumChunk);
  EXPECT_EQ(ChecksumChunkFor(uint64_t{100} << 30), uint64_t{1} << 30);
  EXPECT_EQ(ChecksumChunkFor(UINT64_MAX), uint64_t{1} << 57);
}

TEST(ChecksumTest, AChunkedChecksumSumsEachChunkOnItsOwn) {
  const std::string image = testing_util::Pattern(5, 2 * kMinChecksumChunk + 4321);
  ChunkedChecksum sum(image.size());
  std::mt19937_64 rng(9);
  for (size_t at = 0; at < image.size();) {
    size_t piece = std::min<size_t>(image.size() - at, rng() % (5 << 20) + 1);
    sum.Update(image.data() + at, piece);
    at += piece;
  }
  ChecksumRecord record = std::move(sum).Finish();
  EXPECT_EQ(record.sums.size(), 3u);
  EXPECT_EQ(record, RecordOfImage(image));
}

TEST_F(ChecksumOfContentTest, CoversBlocksAndHolesInFileOrder) {
  FileContent c;
  std::string image;
  std::mt19937_64 rng(3);
  for (int i = 0; i < 12; ++i) {
    const uint64_t offset = rng() % (kMinChecksumChunk + 6 * kBlockSize);
    const std::string bytes = testing_util::Pattern(i, rng() % (kBlockSize + 100) + 1);
    Write(c, offset, bytes);
    Put(image, offset, bytes);
  }
  Result<ChecksumRecord> sum = ChecksumOf(c);
  ASSERT_TRUE(sum.ok()) << sum.status().ToString();
  EXPECT_EQ(*sum, RecordOfImage(image));
}

TEST_F(ChecksumOfContentTest, ReadsTheBytesOfItsBaseFile) {
  const std::string base_bytes = testing_util::Pattern(11, 3 * kBlockSize + 17);
  const std::string path = dir_ / "base";
  testing_util::WriteHostFile(path, base_bytes);
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  FileContent c(std::make_shared<BackingFile>(*env_, fd), base_bytes.size());
  std::string image = base_bytes;
  const std::string patch = testing_util::Pattern(12, 5000);
  Write(c, kBlockSize - 100, patch);
  Put(image, kBlockSize - 100, patch);
  Result<ChecksumRecord> sum = ChecksumOf(c);
  ASSERT_TRUE(sum.ok()) << sum.status().ToString();
  EXPECT_EQ(*sum, RecordOfImage(image));
}

TEST_F(ChecksumOfContentTest, AFileWrittenInOrderIsNotReadAgainToBeSummed) {
  FileContent c;
  const std::string image = testing_util::Pattern(13, 2 * kMinChecksumChunk + 12345);
  for (size_t at = 0; at < image.size(); at += 1 << 20) {
    Write(c, at, image.substr(at, 1 << 20));
  }
  uint64_t summed_now = 0;
  Result<ChecksumRecord> sum = ChecksumOf(c, &summed_now);
  ASSERT_TRUE(sum.ok()) << sum.status().ToString();
  EXPECT_EQ(*sum, RecordOfImage(image));
  EXPECT_EQ(summed_now, 0u);
}

TEST_F(ChecksumOfContentTest, AFileWrittenOutOfOrderIsSummedWhereItsSumsStop) {
  FileContent c;
  std::string image = testing_util::Pattern(14, kMinChecksumChunk + 5 * kBlockSize);
  Write(c, 0, image);
  const std::string patch = testing_util::Pattern(15, 100);
  Write(c, 7, patch);  // Back into the first piece: summed again from there, at flush.
  Put(image, 7, patch);
  uint64_t summed_now = 0;
  Result<ChecksumRecord> sum = ChecksumOf(c, &summed_now);
  ASSERT_TRUE(sum.ok()) << sum.status().ToString();
  EXPECT_EQ(*sum, RecordOfImage(image));
  EXPECT_EQ(summed_now, image.size());
}

TEST_F(ChecksumOfContentTest, AFileOfMoreChunksThanARecordHoldsHasItsPiecesJoinedIntoChunks) {
  // 129 pieces: chunks of two pieces each, the last chunk one piece and a bit.
  const uint64_t size = (kMaxChecksumChunks + 1) * kMinChecksumChunk + 3;
  // Memory stays small: each MiB shares the blocks of one source.
  const std::string piece = testing_util::Pattern(16, 1 << 20);
  FileContent source;
  Write(source, 0, piece);
  FileContent c;
  ChunkedChecksum reference(size);
  for (uint64_t at = 0; at < size; at += piece.size()) {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(piece.size(), size - at));
    Reservation r = arena_.Reserve(c.BlocksNeededForSplice(at, source, n));
    ASSERT_TRUE(c.Splice(at, source, n, r).ok());
    reference.Update(piece.data(), n);
  }
  uint64_t summed_now = 0;
  Result<ChecksumRecord> sum = ChecksumOf(c, &summed_now);
  ASSERT_TRUE(sum.ok()) << sum.status().ToString();
  EXPECT_EQ(sum->chunk, 2 * kMinChecksumChunk);
  EXPECT_EQ(*sum, std::move(reference).Finish());
  EXPECT_EQ(summed_now, 0u);
}

TEST(ChecksumRecordTest, ReadsBackWhatItWrites) {
  std::vector<uint32_t> many(kMaxChecksumChunks, 0xffffffff);
  for (const ChecksumRecord& r :
       {ChecksumRecord{kMinChecksumChunk, 0, {}}, ChecksumRecord{kMinChecksumChunk, 9, {0xe3069283}},
        ChecksumRecord{uint64_t{1} << 20, kMaxChecksumChunks << 20, many}}) {
    const std::string text = FormatChecksumRecord(r);
    EXPECT_LE(text.size(), kMaxChecksumRecordBytes);
    Result<ChecksumRecord> back = ParseChecksumRecord(text);
    ASSERT_TRUE(back.ok()) << text << ": " << back.status().ToString();
    EXPECT_EQ(*back, r);
  }
  EXPECT_EQ(FormatChecksumRecord({kMinChecksumChunk, 9, {0xe3069283}}),
            "crc32c chunk=8388608 size=9 sums=e3069283");
}

TEST(ChecksumRecordTest, RefusesAnythingElseWithEinval) {
  for (const char* text :
       {"", "crc32c", "crc32c chunk=8388608 size=9", "crc32c chunk=8388608 size=9 sums=",
        "crc32c chunk=8388608 size=9 sums=E3069283", "crc32c chunk=8388608 size=9 sums=e306928",
        "crc32c chunk=8388608 size=9 sums=e30692830", "crc32c chunk=8388608 size=9 sums=e3069283,",
        "crc32c chunk=8388608 size=9 sums=e3069283,e3069283", "crc32c chunk=8388608 size=09 sums=e3069283",
        "crc32c chunk=8388607 size=9 sums=e3069283", "crc32c chunk=4096 size=9 sums=e3069283",
        "crc32c chunk=8388608 size=-9 sums=e3069283", "crc32c chunk=8388608 size=9 sums=e3069283 ",
        "crc32c chunk=8388608  size=9 sums=e3069283", "crc32c size=9 chunk=8388608 sums=e3069283",
        "crc32c chunk=8388608 size=9 sums=e3069283\n", "crc32c chunk=8388608 size=9 sums=+3069283",
        "crc32c chunk=1048576 size=18446744073709551615 sums=e3069283",
        "crc32c chunk=8388608 size=18446744073709551616 sums=e3069283",
        "crc32c chunk=8388608 size=0 sums=e3069283"}) {
    Result<ChecksumRecord> r = ParseChecksumRecord(text);
    EXPECT_FALSE(r.ok()) << '"' << text << '"';
    if (!r.ok()) {
      EXPECT_EQ(r.status().err(), EINVAL) << text;
    }
  }
  EXPECT_FALSE(ParseChecksumRecord(std::string(10000, 'a')).ok());
}

TEST(ChecksumRecordTest, RandomBytesGiveARecordOrAnErrorNeverACrash) {
  std::mt19937_64 rng(42);
  const std::string good = FormatChecksumRecord(
      {kMinChecksumChunk, 3 * kMinChecksumChunk - 5, {0x12345678, 0x9abcdef0, 0x0fedcba9}});
  for (int i = 0; i < 50000; ++i) {
    std::string text = good;
    for (int k = rng() % 4; k >= 0; --k) {
      switch (rng() % 3) {
        case 0: text[rng() % text.size()] = static_cast<char>(rng()); break;
        case 1: text.insert(rng() % (text.size() + 1), 1, static_cast<char>(rng())); break;
        default: if (!text.empty()) text.erase(rng() % text.size(), 1); break;
      }
      if (text.empty()) text = "c";
    }
    Result<ChecksumRecord> r = ParseChecksumRecord(text);
    if (r.ok()) {
      EXPECT_EQ(FormatChecksumRecord(*r), text);
    }
  }
}

}  // namespace
}  // namespace ckptfs
