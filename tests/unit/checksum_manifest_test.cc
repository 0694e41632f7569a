// Tests of the checksum manifest (core/integrity/checksum_manifest.h): its text, hostile and
// missing manifests, its update beside real files, and verification that finds a file's record
// there when the file has no extended attribute.
#include "core/integrity/checksum_manifest.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <string>

#include "core/integrity/checksum.h"
#include "core/integrity/verifier.h"
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

const std::string kRecord = "crc32c chunk=8388608 size=3 sums=352441c2";

TEST(ChecksumManifestText, AManifestReadsBackAsWritten) {
  ChecksumManifest manifest{{"a", RecordOf("abc")}, {"b.distcp", RecordOf(Pattern(1, 20 << 20))},
                            {"empty", RecordOf("")}};
  Result<ChecksumManifest> back = ParseChecksumManifest(FormatChecksumManifest(manifest));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(*back, manifest);
}

TEST(ChecksumManifestText, HostileManifestsAreRefusedSayingWhy) {
  const std::string many = [] {
    std::string text = R"({"ckptfs_checksums": 1, "files": {)";
    for (size_t i = 0; i <= kMaxManifestFiles; ++i) {
      text += (i ? "," : "") + ("\"f" + std::to_string(i) + "\": \"") + kRecord + "\"";
    }
    return text + "}}";
  }();
  const std::pair<std::string, std::string> cases[] = {
      {"", "not a JSON object"},
      {"[1, 2]", "not a JSON object"},
      {"{\"files\": {}}", "no \"ckptfs_checksums\": 1"},
      {R"({"ckptfs_checksums": 2, "files": {}})", "no \"ckptfs_checksums\": 1"},
      {R"({"ckptfs_checksums": 1, "files": []})", "no \"files\" object"},
      {R"({"ckptfs_checksums": 1, "files": {"a": 7}})", "not a string"},
      {R"({"ckptfs_checksums": 1, "files": {"a": "crc32c chunk=3 size=1 sums=00000000"}})",
       "a: malformed checksum record"},
      {R"({"ckptfs_checksums": 1, "files": {"../etc/x": ")" + kRecord + "\"}}", "no name"},
      {R"({"ckptfs_checksums": 1, "files": {"": ")" + kRecord + "\"}}", "no name"},
      {R"({"ckptfs_checksums": 1, "files": {"a": {"b": {"c": 1}}}})", "nested too deep"},
      {std::string(100000, '[') + std::string(100000, ']'), "nested too deep"},
      {many, "more than"},
      {std::string(kMaxManifestBytes + 1, ' '), "too long"},
  };
  for (const auto& [text, why] : cases) {
    SCOPED_TRACE(text.substr(0, 120));
    Result<ChecksumManifest> parsed = ParseChecksumManifest(text);
    ASSERT_FALSE(parsed.ok());
    EXPECT_EQ(parsed.status().err(), EINVAL);
    EXPECT_NE(parsed.status().message().find(why), std::string::npos) << parsed.status().message();
    EXPECT_NE(parsed.status().message().find(kChecksumManifestName), std::string::npos);
  }
}

class ChecksumManifestFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_fd_ = open(dir_.path().c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    ASSERT_GE(dir_fd_, 0);
    ASSERT_EQ(mkdir((dir_ / "staging").c_str(), 0700), 0);
    staging_fd_ = open((dir_ / "staging").c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    ASSERT_GE(staging_fd_, 0);
  }
  void TearDown() override {
    close(dir_fd_);
    close(staging_fd_);
  }
  // The verification of the file `name` of the directory, read as `ckptfs verify` reads it.
  Verification Verify(const std::string& name) {
    const int fd = open((dir_ / name).c_str(), O_RDONLY | O_CLOEXEC);
    EXPECT_GE(fd, 0);
    Verification v = VerifyFile(*env_, fd, fd);
    close(fd);
    return v;
  }

  TempDir dir_;
  std::unique_ptr<Env> env_ = testing_util::MakeTestEnv();
  int dir_fd_ = -1;
  int staging_fd_ = -1;
};

TEST_F(ChecksumManifestFiles, AFileWithoutAnAttributeIsVerifiedAgainstItsManifestEntry) {
  const std::string a = Pattern(2, 5000), b = Pattern(3, 9 << 20);
  WriteHostFile(dir_ / "a", a);
  WriteHostFile(dir_ / "b", b);
  ASSERT_TRUE(UpdateChecksumManifest(*env_, dir_fd_, staging_fd_, "m", {{"a", RecordOf(a)}}).ok());
  ASSERT_TRUE(UpdateChecksumManifest(*env_, dir_fd_, staging_fd_, "m", {{"b", RecordOf(b)}}).ok());
  Result<ChecksumManifest> kept = ReadChecksumManifest(*env_, dir_fd_);
  ASSERT_TRUE(kept.ok()) << kept.status().ToString();
  EXPECT_EQ(*kept, (ChecksumManifest{{"a", RecordOf(a)}, {"b", RecordOf(b)}}));
  EXPECT_EQ(Verify("a").verdict, Verdict::kOk);
  EXPECT_EQ(Verify("b").verdict, Verdict::kOk);
  // A byte flipped in the second chunk of b is found there.
  std::string flipped = b;
  flipped[(8 << 20) + 5] ^= 1;
  WriteHostFile(dir_ / "b", flipped);
  Verification v = Verify("b");
  EXPECT_EQ(v.verdict, Verdict::kMismatch);
  EXPECT_EQ(v.first_differing_begin, uint64_t{8} << 20);
  // A file the manifest does not name has no record; nothing was left in the staging directory.
  WriteHostFile(dir_ / "c", "c");
  EXPECT_EQ(Verify("c").verdict, Verdict::kNoChecksum);
  struct stat st {};
  EXPECT_NE(fstatat(staging_fd_, "m", &st, 0), 0);
}

TEST_F(ChecksumManifestFiles, AnUnchangedManifestIsParsedOnceAndAChangedOneAgain) {
  FaultInjectingEnv counting(testing_util::MakeTestEnv());
  ChecksumManifest manifest;
  for (int i = 0; i < 100; ++i) manifest["f" + std::to_string(i)] = RecordOf(std::to_string(i));
  WriteHostFile(dir_ / kChecksumManifestName, FormatChecksumManifest(manifest));
  for (int i = 0; i < 100; ++i) {
    Result<ChecksumRecord> record = ManifestRecordOf(counting, dir_fd_, "f" + std::to_string(i));
    ASSERT_TRUE(record.ok()) << record.status().ToString();
    EXPECT_EQ(*record, RecordOf(std::to_string(i)));
  }
  EXPECT_EQ(counting.calls(Env::Op::kRead), 1u);
  // Rewritten in place (another size): read again, and its new records are the ones given.
  manifest["f0"] = RecordOf("changed");
  manifest["new"] = RecordOf("new");
  WriteHostFile(dir_ / kChecksumManifestName, FormatChecksumManifest(manifest));
  Result<ChecksumRecord> changed = ManifestRecordOf(counting, dir_fd_, "f0");
  ASSERT_TRUE(changed.ok());
  EXPECT_EQ(*changed, RecordOf("changed"));
  EXPECT_EQ(counting.calls(Env::Op::kRead), 2u);
}

TEST_F(ChecksumManifestFiles, EntriesOfFilesGoneFromTheDirectoryAreDropped) {
  WriteHostFile(dir_ / "a", "abc");
  ASSERT_TRUE(UpdateChecksumManifest(*env_, dir_fd_, staging_fd_, "m",
                                     {{"a", RecordOf("abc")}, {"old", RecordOf("x")}})
                  .ok());
  WriteHostFile(dir_ / "b", "b");
  ASSERT_TRUE(UpdateChecksumManifest(*env_, dir_fd_, staging_fd_, "m", {{"b", RecordOf("b")}}).ok());
  Result<ChecksumManifest> kept = ReadChecksumManifest(*env_, dir_fd_);
  ASSERT_TRUE(kept.ok());
  EXPECT_EQ(*kept, (ChecksumManifest{{"a", RecordOf("abc")}, {"b", RecordOf("b")}}));
}

TEST_F(ChecksumManifestFiles, AHostileOrMissingManifestLeavesFilesWithoutARecordSayingWhy) {
  WriteHostFile(dir_ / "a", "abc");
  EXPECT_EQ(ReadChecksumManifest(*env_, dir_fd_).status().err(), ENOENT);
  Verification none = Verify("a");
  EXPECT_EQ(none.verdict, Verdict::kNoChecksum);
  EXPECT_NE(none.reason.find("no checksum record"), std::string::npos) << none.reason;

  WriteHostFile(dir_ / kChecksumManifestName, R"({"ckptfs_checksums": 1, "files": {"a": "crc32c"}})");
  Verification bad = Verify("a");
  EXPECT_EQ(bad.verdict, Verdict::kNoChecksum);
  EXPECT_NE(bad.reason.find("malformed checksum manifest"), std::string::npos) << bad.reason;

  ASSERT_EQ(truncate((dir_ / kChecksumManifestName).c_str(), kMaxManifestBytes + 1), 0);
  Verification big = Verify("a");
  EXPECT_EQ(big.verdict, Verdict::kNoChecksum);
  EXPECT_NE(big.reason.find("longer than"), std::string::npos) << big.reason;

  ASSERT_EQ(unlink((dir_ / kChecksumManifestName).c_str()), 0);
  ASSERT_EQ(mkfifo((dir_ / kChecksumManifestName).c_str(), 0600), 0);  // Never waited for.
  Verification fifo = Verify("a");
  EXPECT_EQ(fifo.verdict, Verdict::kNoChecksum);
  EXPECT_NE(fifo.reason.find("not a regular file"), std::string::npos) << fifo.reason;
  ASSERT_EQ(unlink((dir_ / kChecksumManifestName).c_str()), 0);
  ASSERT_EQ(symlink("/etc/passwd", (dir_ / kChecksumManifestName).c_str()), 0);
  Verification linked = Verify("a");
  EXPECT_EQ(linked.verdict, Verdict::kNoChecksum);
  EXPECT_NE(linked.reason.find("symbolic link"), std::string::npos) << linked.reason;

  // An update replaces a hostile manifest.
  ASSERT_EQ(unlink((dir_ / kChecksumManifestName).c_str()), 0);
  WriteHostFile(dir_ / kChecksumManifestName, "{{{{");
  ASSERT_TRUE(UpdateChecksumManifest(*env_, dir_fd_, staging_fd_, "m", {{"a", RecordOf("abc")}}).ok());
  EXPECT_EQ(Verify("a").verdict, Verdict::kOk);
}

}  // namespace
}  // namespace ckptfs
