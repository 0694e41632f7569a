// Tests of the verification of files against their checksum records (`ckptfs verify`'s core):
// real files in a temp directory, their records in the extended attribute as the flusher keeps
// them, read through the test Env.
#include "core/integrity/verifier.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <string>

#include "core/integrity/checksum.h"
#include "core/integrity/checksum_record.h"
#include "checksum_record_of.h"
#include "core_test_util.h"

namespace ckptfs {
namespace {

using testing_util::Pattern;
using testing_util::RecordOf;
using testing_util::TempDir;
using testing_util::WriteHostFile;
using Verdict = Verification::Verdict;

constexpr uint64_t MiB = uint64_t{1} << 20;

class VerifierTest : public ::testing::Test {
 protected:
  // Writes `bytes` to `name` with `record` (as text) in its checksum attribute; returns its path.
  std::string Publish(const std::string& name, const std::string& bytes,
                      const std::string& record) {
    const std::string path = dir_ / name;
    WriteHostFile(path, bytes);
    EXPECT_EQ(setxattr(path.c_str(), kChecksumXattr, record.data(), record.size(), 0), 0)
        << std::strerror(errno);
    return path;
  }
  std::string Publish(const std::string& name, const std::string& bytes) {
    return Publish(name, bytes, FormatChecksumRecord(RecordOf(bytes)));
  }

  Verification Verify(const std::string& path) {
    const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
    EXPECT_GE(fd, 0) << std::strerror(errno);
    Verification v = VerifyFile(*env_, fd, fd);
    close(fd);
    return v;
  }

  TempDir dir_;
  std::unique_ptr<Env> env_ = testing_util::MakeTestEnv();
};

TEST_F(VerifierTest, AFileAsRecordedIsOk) {
  const std::string bytes = Pattern(1, 20 * MiB + 5);
  uint64_t told = 0;
  const int fd = open(Publish("f", bytes).c_str(), O_RDONLY | O_CLOEXEC);
  const Verification v = VerifyFile(*env_, fd, fd, [&](uint64_t n) { told += n; });
  close(fd);
  EXPECT_EQ(v.verdict, Verdict::kOk) << v.reason;
  EXPECT_EQ(v.size, bytes.size());
  EXPECT_EQ(v.recorded_size, bytes.size());
  EXPECT_EQ(told, bytes.size());
}

TEST_F(VerifierTest, AnEmptyFileAsRecordedIsOk) {
  EXPECT_EQ(Verify(Publish("empty", "")).verdict, Verdict::kOk);
}

TEST_F(VerifierTest, OneByteFlippedInChunkKNamesChunkK) {
  const std::string bytes = Pattern(2, 30 * MiB);
  for (uint64_t k : {0, 1, 3}) {
    const uint64_t at = k * 8 * MiB + 12345;
    std::string flipped = bytes;
    flipped[at] ^= 0x01;
    const std::string path = Publish("f" + std::to_string(k), flipped,
                                     FormatChecksumRecord(RecordOf(bytes)));
    const Verification v = Verify(path);
    EXPECT_EQ(v.verdict, Verdict::kMismatch) << k;
    EXPECT_EQ(v.first_differing_begin, k * 8 * MiB) << k;
    EXPECT_EQ(v.first_differing_end, std::min<uint64_t>((k + 1) * 8 * MiB, 30 * MiB)) << k;
    EXPECT_FALSE(v.size_differs());
  }
}

TEST_F(VerifierTest, ATruncatedFileNamesTheChunkWhereItEnds) {
  const std::string bytes = Pattern(3, 30 * MiB);
  const Verification v = Verify(
      Publish("f", bytes.substr(0, 20 * MiB), FormatChecksumRecord(RecordOf(bytes))));
  EXPECT_EQ(v.verdict, Verdict::kMismatch);
  EXPECT_TRUE(v.size_differs());
  EXPECT_EQ(v.size, 20 * MiB);
  EXPECT_EQ(v.recorded_size, 30 * MiB);
  EXPECT_EQ(v.first_differing_begin, 16 * MiB);
  EXPECT_EQ(v.first_differing_end, 24 * MiB);
}

TEST_F(VerifierTest, AFileTruncatedAtAChunkBoundaryNamesTheFirstMissingChunk) {
  const std::string bytes = Pattern(4, 20 * MiB);
  const Verification v = Verify(
      Publish("f", bytes.substr(0, 16 * MiB), FormatChecksumRecord(RecordOf(bytes))));
  EXPECT_EQ(v.verdict, Verdict::kMismatch);
  EXPECT_TRUE(v.size_differs());
  EXPECT_EQ(v.first_differing_begin, 16 * MiB);
  EXPECT_EQ(v.first_differing_end, 20 * MiB);
}

TEST_F(VerifierTest, AnExtendedFileNamesTheChunkWhereItGrew) {
  const std::string bytes = Pattern(5, 16 * MiB);
  const Verification v = Verify(
      Publish("f", bytes + std::string(100, 'x'), FormatChecksumRecord(RecordOf(bytes))));
  EXPECT_EQ(v.verdict, Verdict::kMismatch);
  EXPECT_TRUE(v.size_differs());
  EXPECT_EQ(v.first_differing_begin, 16 * MiB);
  EXPECT_EQ(v.first_differing_end, 16 * MiB + 100);
}

TEST_F(VerifierTest, AFileExtendedWithinItsLastChunkNamesThatChunk) {
  const std::string bytes = Pattern(6, 9 * MiB);
  const Verification v = Verify(
      Publish("f", bytes + std::string(1, '\0'), FormatChecksumRecord(RecordOf(bytes))));
  EXPECT_EQ(v.verdict, Verdict::kMismatch);
  EXPECT_EQ(v.first_differing_begin, 8 * MiB);
  EXPECT_EQ(v.first_differing_end, 9 * MiB + 1);
}

TEST_F(VerifierTest, AFileWithoutARecordHasNoChecksum) {
  const std::string path = dir_ / "plain";
  WriteHostFile(path, "bytes");
  const Verification v = Verify(path);
  EXPECT_EQ(v.verdict, Verdict::kNoChecksum);
  EXPECT_NE(v.reason.find("no checksum record"), std::string::npos) << v.reason;
}

TEST_F(VerifierTest, MalformedAndHostileRecordsGiveNoChecksumSayingWhy) {
  const std::string bytes = Pattern(7, 9 * MiB);
  const std::string good = FormatChecksumRecord(RecordOf(bytes));
  const std::pair<std::string, std::string> cases[] = {
      {"garbage", "not crc32c"},
      {"", "not crc32c"},
      {good.substr(0, good.size() - 1), "a sum is not 8 lowercase hex digits"},
      {good.substr(0, good.rfind(',')), "fewer sums than chunks"},
      {good + ",00000000", "more sums than chunks"},
      {"crc32c chunk=3 size=1 sums=00000000", "chunk is not a power of two"},
      {"crc32c chunk=8388608 size=99999999999999999999999 sums=", "size is not a number"},
      {"crc32c chunk=1048576 size=1099511627776 sums=", "too many chunks"},
      {std::string("crc32c chunk=8388608 size=1 sums=\0\0\0\0\0\0\0\0", 42),
       "a sum is not 8 lowercase hex digits"},
  };
  int i = 0;
  for (const auto& [record, why] : cases) {
    const Verification v = Verify(Publish("f" + std::to_string(i++), bytes, record));
    EXPECT_EQ(v.verdict, Verdict::kNoChecksum) << record;
    EXPECT_NE(v.reason.find("malformed checksum record: " + why), std::string::npos)
        << record << " gives " << v.reason;
  }
}

TEST_F(VerifierTest, ARecordLongerThanTheBoundIsRefusedUnread) {
  const std::string bytes = Pattern(8, MiB);
  const std::string good = FormatChecksumRecord(RecordOf(bytes));
  const Verification v =
      Verify(Publish("f", bytes, good + std::string(kMaxChecksumRecordBytes, ' ')));
  EXPECT_EQ(v.verdict, Verdict::kNoChecksum);
  EXPECT_NE(v.reason.find("longer than " + std::to_string(kMaxChecksumRecordBytes)),
            std::string::npos)
      << v.reason;
}

TEST_F(VerifierTest, ARecordWithAnotherChunkThanTheFlushersIsSummedByItsChunk) {
  const std::string bytes = Pattern(9, 3 * MiB + 7);
  ChunkedChecksum sum(bytes.size(), MiB);
  sum.Update(bytes.data(), bytes.size());
  const ChecksumRecord record = std::move(sum).Finish();
  ASSERT_EQ(record.sums.size(), 4u);
  std::string flipped = bytes;
  flipped[2 * MiB + 1] ^= 0x80;
  const Verification v = Verify(Publish("f", flipped, FormatChecksumRecord(record)));
  EXPECT_EQ(v.verdict, Verdict::kMismatch);
  EXPECT_EQ(v.first_differing_begin, 2 * MiB);
  EXPECT_EQ(v.first_differing_end, 3 * MiB);
}

TEST_F(VerifierTest, AFailedReadIsAnErrorNamingTheCall) {
  const std::string path = Publish("f", Pattern(10, 10 * MiB));
  FaultInjectingEnv faulty(testing_util::MakeTestEnv());
  faulty.Inject(FaultInjectingEnv::Fault(Env::Op::kRead, EIO).After(1));
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  const Verification v = VerifyFile(faulty, fd, fd);
  close(fd);
  EXPECT_EQ(v.verdict, Verdict::kError);
  EXPECT_NE(v.reason.find(std::strerror(EIO)), std::string::npos) << v.reason;
}

TEST_F(VerifierTest, TheBytesOfOneFileAreCheckedAgainstTheRecordOfAnother) {
  const std::string bytes = Pattern(11, 9 * MiB);
  const std::string recorded = Publish("backing", bytes);
  const std::string served = dir_ / "served";
  WriteHostFile(served, Pattern(12, 9 * MiB));
  const int data = open(served.c_str(), O_RDONLY | O_CLOEXEC);
  const int record = open(recorded.c_str(), O_RDONLY | O_CLOEXEC);
  const Verification v = VerifyFile(*env_, data, record);
  close(data);
  close(record);
  EXPECT_EQ(v.verdict, Verdict::kMismatch);
  EXPECT_EQ(v.first_differing_begin, 0u);
  EXPECT_EQ(v.first_differing_end, 8 * MiB);
}

}  // namespace
}  // namespace ckptfs
