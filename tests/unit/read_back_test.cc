// Tests of the read-back of files against the records of their bytes (verify=markers' check):
// real files in a temp directory read through the test Env (io_uring where it works), compared
// with records taken as the daemon takes them.
#include "core/integrity/read_back.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "checksum_record_of.h"
#include "core_test_util.h"
#include "iouring/fault_injecting_env.h"

namespace ckptfs {
namespace {

using testing_util::Pattern;
using testing_util::RecordOf;
using testing_util::TempDir;
using testing_util::WriteHostFile;
using Verdict = Verification::Verdict;

constexpr uint64_t MiB = uint64_t{1} << 20;

class ReadBackTest : public ::testing::Test {
 protected:
  ~ReadBackTest() override {
    for (int fd : fds_) close(fd);
  }
  // Writes `stored` to `name` and opens it as the flusher holds a staged file (read and write).
  int Stored(const std::string& name, const std::string& stored) {
    WriteHostFile(dir_ / name, stored);
    const int fd = open((dir_ / name).c_str(), O_RDWR | O_CLOEXEC);
    EXPECT_GE(fd, 0) << std::strerror(errno);
    fds_.push_back(fd);
    return fd;
  }

  TempDir dir_;
  std::unique_ptr<Env> env_ = testing_util::MakeTestEnv();
  std::vector<int> fds_;
};

TEST_F(ReadBackTest, FilesAsRecordedAreOkAndEachChangedOneNamesItsFirstDifferingChunk) {
  // Sizes around spans and chunks: empty, one short span, a chunk and a bit, several 16 MiB
  // chunks of four spans each; more spans than are in flight at once.
  const std::string empty;
  const std::string small = Pattern(1, 3000);
  const std::string chunk_and_bit = Pattern(2, 8 * MiB + 5);
  const std::string big = Pattern(3, 40 * MiB + 4097);  // 128 chunks of 8 MiB fit: chunk 8 MiB.
  std::string flipped = big;
  flipped[17 * MiB + 3] ^= 0x01;
  const std::string truncated = chunk_and_bit.substr(0, 8 * MiB);
  const ChecksumRecord records[] = {RecordOf(empty), RecordOf(small), RecordOf(chunk_and_bit),
                                    RecordOf(big), RecordOf(big), RecordOf(chunk_and_bit)};
  const std::vector<ReadBackFile> files{
      {Stored("empty", empty), &records[0]},         {Stored("small", small), &records[1]},
      {Stored("chunk", chunk_and_bit), &records[2]}, {Stored("big", big), &records[3]},
      {Stored("flipped", flipped), &records[4]},     {Stored("truncated", truncated), &records[5]}};
  const std::vector<ReadBackOutcome> outcomes = ReadBackFiles(*env_, files);
  ASSERT_EQ(outcomes.size(), files.size());
  for (size_t i = 0; i < 4; ++i) {
    SCOPED_TRACE(i);
    EXPECT_EQ(outcomes[i].verification.verdict, Verdict::kOk) << outcomes[i].verification.reason;
    EXPECT_EQ(outcomes[i].verification.size, records[i].size);
  }
  const Verification& f = outcomes[4].verification;
  EXPECT_EQ(f.verdict, Verdict::kMismatch);
  EXPECT_EQ(f.first_differing_begin, 16 * MiB);
  EXPECT_EQ(f.first_differing_end, 24 * MiB);
  EXPECT_FALSE(f.size_differs());
  const Verification& t = outcomes[5].verification;
  EXPECT_EQ(t.verdict, Verdict::kMismatch);
  EXPECT_TRUE(t.size_differs());
  EXPECT_EQ(t.size, 8 * MiB);
  EXPECT_EQ(t.first_differing_begin, 8 * MiB);
}

TEST_F(ReadBackTest, AFileWithLargerChunksIsJoinedFromItsSpans) {
  // Chunks of 32 MiB (those of files of more than 2 GiB): every chunk joins eight spans.
  const std::string bytes = Pattern(4, 70 * MiB + 11);
  ChunkedChecksum sum(bytes.size(), 32 * MiB);
  sum.Update(bytes.data(), bytes.size());
  const ChecksumRecord record = std::move(sum).Finish();
  ASSERT_EQ(record.sums.size(), 3u);
  std::string changed = bytes;
  changed[70 * MiB] ^= 0x40;
  const std::vector<ReadBackFile> files{{Stored("a", bytes), &record},
                                        {Stored("b", changed), &record}};
  const std::vector<ReadBackOutcome> outcomes = ReadBackFiles(*env_, files);
  EXPECT_EQ(outcomes[0].verification.verdict, Verdict::kOk);
  EXPECT_EQ(outcomes[1].verification.verdict, Verdict::kMismatch);
  EXPECT_EQ(outcomes[1].verification.first_differing_begin, 64 * MiB);
  EXPECT_EQ(outcomes[1].verification.first_differing_end, 70 * MiB + 11);
}

TEST_F(ReadBackTest, FilesAreReadPastThePageCacheWhereTheFilesystemAllows) {
  const std::string bytes = Pattern(5, 3 * MiB);
  const ChecksumRecord record = RecordOf(bytes);
  const int fd = Stored("f", bytes);
  const int probe = open((dir_ / "f").c_str(), O_RDONLY | O_DIRECT | O_CLOEXEC);
  const bool direct = probe >= 0;
  if (probe >= 0) close(probe);
  const std::vector<ReadBackFile> files{{fd, &record}};
  const std::vector<ReadBackOutcome> outcomes = ReadBackFiles(*env_, files);
  EXPECT_EQ(outcomes[0].verification.verdict, Verdict::kOk);
  EXPECT_EQ(outcomes[0].from_page_cache, !direct);
}

TEST_F(ReadBackTest, AFailedReadFailsItsFileOnly) {
  auto fault = std::make_unique<FaultInjectingEnv>(std::move(env_));
  const std::string bytes = Pattern(6, 5 * MiB);
  const ChecksumRecord record = RecordOf(bytes);
  const std::vector<ReadBackFile> files{{Stored("a", bytes), &record},
                                        {Stored("b", bytes), &record}};
  // The third read is b's first span (a has two).
  fault->Inject(FaultInjectingEnv::Fault(Env::Op::kRead, EIO).After(2).Times(1));
  const std::vector<ReadBackOutcome> outcomes = ReadBackFiles(*fault, files);
  EXPECT_EQ(outcomes[0].verification.verdict, Verdict::kOk);
  EXPECT_EQ(outcomes[1].verification.verdict, Verdict::kError);
  EXPECT_NE(outcomes[1].verification.reason.find("(injected)"), std::string::npos)
      << outcomes[1].verification.reason;
}

}  // namespace
}  // namespace ckptfs
