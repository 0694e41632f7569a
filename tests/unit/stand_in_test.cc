// The stand-in (core/replication/stand_in.h): a dead member's replicas written on a real
// directory in its close order, atomically, only when the member said this partner covers what
// the commit needs of it.
#include "core/replication/stand_in.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "checksum_record_of.h"
#include "core/base/commit_markers.h"
#include "core/integrity/checksum_record.h"
#include "core/replication/stand_in_record.h"

namespace ckptfs::replication {
namespace {

constexpr const char* kRun = "0123456789abcdef";

class StandInTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char templ[] = "/tmp/ckptfs-stand-in-XXXXXX";
    ASSERT_NE(mkdtemp(templ), nullptr);
    dir_ = templ;
    std::filesystem::create_directories(dir_ / "backing/.ckptfs/staging/n1");
    root_fd_ = open((dir_ / "backing").c_str(), O_RDONLY | O_DIRECTORY);
    staging_fd_ = open((dir_ / "backing/.ckptfs/staging/n1").c_str(), O_RDONLY | O_DIRECTORY);
    ASSERT_GE(root_fd_, 0);
    ASSERT_GE(staging_fd_, 0);
    writer_ = std::make_unique<StandInWriter>(*env_, root_fd_, staging_fd_, store_,
                                              policy::DefaultCommitMarkers());
  }
  void TearDown() override {
    writer_.reset();
    close(root_fd_);
    close(staging_fd_);
    std::filesystem::remove_all(dir_);
  }
  // Holds version `seq` of `path` of n0 (run kRun), a file of mode `mode` there; with
  // `renamed_from`, n0's rename of that file to the marker `path`.
  void Hold(uint64_t seq, const std::string& path, const std::string& bytes,
            uint32_t mode = 0644, const std::string& renamed_from = "") {
    ASSERT_EQ(store_.Reserve(bytes.size()), PartnerStore::Room::kReserved);
    Replica r{{"n0", kRun}, path, seq, seq, std::shared_ptr<char[]>(new char[bytes.size() + 1]),
              bytes.size(), mode, renamed_from};
    std::copy(bytes.begin(), bytes.end(), r.bytes.get());
    store_.Keep(std::move(r));
  }
  std::string Read(const std::string& rel) {
    std::ifstream in(dir_ / ("backing/" + rel), std::ios::binary);
    if (!in) return "<missing>";
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  }
  std::vector<std::string> Staged() {
    std::vector<std::string> names;
    for (const auto& e : std::filesystem::directory_iterator(dir_ / "backing/.ckptfs/staging/n1")) {
      names.push_back(e.path().filename());
    }
    return names;
  }

  std::filesystem::path dir_;
  std::unique_ptr<Env> env_ = MakePosixEnv();
  PartnerStore store_{1 << 20};
  int root_fd_ = -1;
  int staging_fd_ = -1;
  std::unique_ptr<StandInWriter> writer_;
};

TEST_F(StandInTest, TheVersionsTheCommitNeedsAreWrittenInCloseOrderAndMarkersNever) {
  Hold(3, "ckpt/iter_1/__1_0.distcp", "first version");
  Hold(5, "ckpt/iter_1/__1_0.distcp", "second version");
  Hold(6, "ckpt/iter_1/.metadata", "the dead member's own marker");
  Hold(7, "ckpt/iter_1/extra.bin", "sealed after it saw the request");
  store_.Covered({"n0", kRun}, 7);
  ASSERT_TRUE(writer_->Complete({"n0", kRun}, 6).ok());
  EXPECT_EQ(Read("ckpt/iter_1/__1_0.distcp"), "second version");
  EXPECT_EQ(Read("ckpt/iter_1/.metadata"), "<missing>");
  EXPECT_EQ(Read("ckpt/iter_1/extra.bin"), "<missing>");
  EXPECT_EQ(store_.Totals().completed_for_dead, 2u);
  EXPECT_EQ(Staged(), std::vector<std::string>{});
  // A later commit needs more: only what was not written yet is written.
  ASSERT_TRUE(writer_->Complete({"n0", kRun}, 7).ok());
  EXPECT_EQ(Read("ckpt/iter_1/extra.bin"), "sealed after it saw the request");
  EXPECT_EQ(store_.Totals().completed_for_dead, 3u);
}

TEST_F(StandInTest, AFileWrittenForTheDeadMemberHasItsModeAndAChecksumRecordOfItsBytes) {
  const std::string bytes(600 << 10, 'w');
  Hold(2, "ckpt/run.sh", "#!/bin/sh\n", 0750);
  Hold(3, "ckpt/__1_0.distcp", bytes, 0600);
  store_.Covered({"n0", kRun}, 3);
  ASSERT_TRUE(writer_->Complete({"n0", kRun}, 3).ok());
  struct stat st {};
  ASSERT_EQ(stat((dir_ / "backing/ckpt/run.sh").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0750u);
  ASSERT_EQ(stat((dir_ / "backing/ckpt/__1_0.distcp").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0600u);
  char text[kMaxChecksumRecordBytes] = {};
  const ssize_t n = getxattr((dir_ / "backing/ckpt/__1_0.distcp").c_str(), kChecksumXattr, text,
                             sizeof text);
  ASSERT_GT(n, 0) << "no checksum record: " << strerror(errno) << " (this test's directory is "
                  << dir_ << ": a filesystem with user extended attributes)";
  Result<ChecksumRecord> record = ParseChecksumRecord(std::string_view(text, n));
  ASSERT_TRUE(record.ok()) << record.status().ToString();
  EXPECT_EQ(*record, testing_util::RecordOf(bytes));
}

TEST_F(StandInTest, ACompletionLeavesARecordOfHowFarItMadeTheDeadRunDurable) {
  Hold(3, "ckpt/__1_0.distcp", "data");
  Hold(4, "ckpt/__1_1.distcp", "more data");
  store_.Covered({"n0", kRun}, 4);
  EXPECT_EQ(ReadStandInRecord(*env_, root_fd_, "n0", kRun)->through, 0u) << "none before";
  ASSERT_TRUE(writer_->Complete({"n0", kRun}, 3).ok());
  EXPECT_EQ(Read(".ckptfs/stood-in/n0." + std::string(kRun)), "3\n");
  ASSERT_TRUE(writer_->Complete({"n0", kRun}, 4).ok());
  EXPECT_EQ(*ReadStandInRecord(*env_, root_fd_, "n0", kRun), (StandInRecord{4, 0}));
  EXPECT_TRUE(Staged().empty()) << "no temporary file left";
  ASSERT_TRUE(RemoveStandInRecord(*env_, root_fd_, "n0", kRun).ok());
  EXPECT_EQ(*ReadStandInRecord(*env_, root_fd_, "n0", kRun), StandInRecord{});
  EXPECT_TRUE(RemoveStandInRecord(*env_, root_fd_, "n0", kRun).ok()) << "none: nothing to do";
}

TEST_F(StandInTest, TheRecordsOfANodesOtherRunsAreRemovedAndNothingElse) {
  const std::string kept = "00000000000000b0";
  for (const char* run : {kRun, "00000000000000a0", "00000000000000b0"}) {
    ASSERT_TRUE(WriteStandInRecord(*env_, root_fd_, staging_fd_, "n0", run, {5, 0}).ok());
  }
  // Another node's, one whose name extends n0's with a dot, and names that are no record.
  ASSERT_TRUE(WriteStandInRecord(*env_, root_fd_, staging_fd_, "n1", kRun, {5, 0}).ok());
  ASSERT_TRUE(WriteStandInRecord(*env_, root_fd_, staging_fd_, "n0.x", kRun, {5, 0}).ok());
  for (const char* other : {"n0.", "n0.0123456789ABCDEF", "n0.0123456789abcdef0", "n0"}) {
    std::ofstream(dir_ / "backing/.ckptfs/stood-in" / other) << "7\n";
  }
  ASSERT_TRUE(RemoveStandInRecordsOfOtherRuns(*env_, root_fd_, "n0", kept).ok());
  std::vector<std::string> left;
  for (const auto& e : std::filesystem::directory_iterator(dir_ / "backing/.ckptfs/stood-in")) {
    left.push_back(e.path().filename());
  }
  std::sort(left.begin(), left.end());
  EXPECT_EQ(left, (std::vector<std::string>{"n0", "n0.", "n0.00000000000000b0",
                                             "n0.0123456789ABCDEF", "n0.0123456789abcdef0",
                                             "n0.x.0123456789abcdef", "n1.0123456789abcdef"}));
  // Without a run to keep, every run's record of the node goes; without records, nothing to do.
  ASSERT_TRUE(RemoveStandInRecordsOfOtherRuns(*env_, root_fd_, "n0", "").ok());
  EXPECT_EQ(*ReadStandInRecord(*env_, root_fd_, "n0", kept), StandInRecord{});
  EXPECT_EQ(ReadStandInRecord(*env_, root_fd_, "n1", kRun)->through, 5u);
  std::filesystem::remove_all(dir_ / "backing/.ckptfs");
  EXPECT_TRUE(RemoveStandInRecordsOfOtherRuns(*env_, root_fd_, "n0", kept).ok());
}

TEST_F(StandInTest, AStandInRecordThatIsNotOneIsRefused) {
  const std::string path = dir_ / ("backing/.ckptfs/stood-in/n0." + std::string(kRun));
  std::filesystem::create_directories(dir_ / "backing/.ckptfs/stood-in");
  for (const std::string& bad : std::vector<std::string>{"", "\n", "12", "12\n3", "x\n", "-1\n", "99999999999999999999\n",
                                std::string(4096, '1') + "\n", "1 \n", "1 2", "1  2\n", "1 2 3\n",
                                "1 x\n", "1 99999999999999999999\n"}) {
    std::ofstream(path, std::ios::binary | std::ios::trunc) << bad;
    EXPECT_EQ(ReadStandInRecord(*env_, root_fd_, "n0", kRun).status().err(), EINVAL) << bad;
  }
  std::ofstream(path, std::ios::binary | std::ios::trunc) << "18446744073709551615\n";
  EXPECT_EQ(*ReadStandInRecord(*env_, root_fd_, "n0", kRun), (StandInRecord{UINT64_MAX, 0}));
  std::ofstream(path, std::ios::binary | std::ios::trunc)
      << "18446744073709551615 18446744073709551615\n";
  EXPECT_EQ(*ReadStandInRecord(*env_, root_fd_, "n0", kRun),
            (StandInRecord{UINT64_MAX, UINT64_MAX}));
  ASSERT_TRUE(WriteStandInRecord(*env_, root_fd_, staging_fd_, "n0", kRun, {7, 9}).ok());
  EXPECT_EQ(Read(".ckptfs/stood-in/n0." + std::string(kRun)), "7 9\n");
  EXPECT_EQ(*ReadStandInRecord(*env_, root_fd_, "n0", kRun), (StandInRecord{7, 9}));
}

TEST_F(StandInTest, NothingIsWrittenWhenTheDeadMemberDidNotReplicateWhatTheCommitNeeds) {
  Hold(3, "a.bin", "held");
  store_.Covered({"n0", kRun}, 3);
  Status st = writer_->Complete({"n0", kRun}, 4);
  EXPECT_EQ(st.err(), EHOSTDOWN);
  EXPECT_NE(st.message().find("not held here"), std::string::npos) << st.ToString();
  st = writer_->Complete({"n0", kRun}, std::nullopt);
  EXPECT_EQ(st.err(), EHOSTDOWN);
  EXPECT_NE(st.message().find("before it saw the request"), std::string::npos) << st.ToString();
  // Another run of the same node never replicated here.
  EXPECT_EQ(writer_->Complete({"n0", "fedcba9876543210"}, 3).err(), ENODATA);
  EXPECT_EQ(Read("a.bin"), "<missing>");
  EXPECT_EQ(store_.Totals().completed_for_dead, 0u);
}

TEST_F(StandInTest, AVersionThatCannotBeWrittenLeavesNoFileUnderItsNameAndIsRetried) {
  Hold(1, "dir/file", "bytes");
  store_.Covered({"n0", kRun}, 1);
  { std::ofstream(dir_ / "backing/dir") << "a file where the directory belongs"; }
  Status st = writer_->Complete({"n0", kRun}, 1);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.err(), EHOSTDOWN) << "an I/O failure is retried, not final";
  EXPECT_EQ(Staged(), std::vector<std::string>{});
  std::filesystem::remove(dir_ / "backing/dir");
  ASSERT_TRUE(writer_->Complete({"n0", kRun}, 1).ok());
  EXPECT_EQ(Read("dir/file"), "bytes");
}

// n1 is the partner that follows n0 in the ring of live members {n1, n2}.
TEST_F(StandInTest, TheChosenPartnerListsTheDeadCommittersMarkersWhoseDataItCovers) {
  Hold(3, "ckpt/__0_0.distcp", "data");
  Hold(4, "ckpt/.metadata", "the marker");
  Hold(6, "ckpt2/.metadata", "a marker after data not replicated");
  store_.Covered({"n0", kRun}, 4);
  const std::vector<std::string> live = {"n1", "n2"};
  const HeldDeadMarker first{{"n0", kRun}, 4, "ckpt/.metadata"};
  EXPECT_EQ(writer_->DeadMarkersToCommit("n1", live), std::vector<HeldDeadMarker>{first});
  EXPECT_TRUE(writer_->DeadMarkersToCommit("n2", live).empty()) << "n1 is the one chosen";
  EXPECT_TRUE(writer_->DeadMarkersToCommit("n1", {"n0", "n1", "n2"}).empty())
      << "n0 runs again: its worker recovers its run";
  store_.Covered({"n0", kRun}, 5);
  EXPECT_EQ(writer_->DeadMarkersToCommit("n1", live).size(), 2u);
}

TEST_F(StandInTest, ADeadCommittersMarkerIsPublishedAfterItsDataAndNeverTwice) {
  Hold(3, "ckpt/__0_0.distcp", "data");
  Hold(4, "ckpt/.metadata", "the marker");
  Hold(5, "ckpt/later.bin", "sealed after the marker");
  store_.Covered({"n0", kRun}, 5);
  const HeldDeadMarker marker{{"n0", kRun}, 4, "ckpt/.metadata"};
  ASSERT_TRUE(writer_->PublishDeadMarker(marker).ok());
  EXPECT_EQ(Read("ckpt/__0_0.distcp"), "data");
  EXPECT_EQ(Read("ckpt/.metadata"), "the marker");
  EXPECT_EQ(Read("ckpt/later.bin"), "<missing>") << "not needed by the marker";
  EXPECT_EQ(Read(".ckptfs/stood-in/n0." + std::string(kRun)), "3 4\n")
      << "a returning node publishes neither the data nor the marker again";
  EXPECT_EQ(store_.Totals().completed_for_dead, 2u);
  EXPECT_TRUE(Staged().empty());
  EXPECT_TRUE(writer_->DeadMarkersToCommit("n1", {"n1"}).empty()) << "published: not again";
  EXPECT_EQ(writer_->PublishDeadMarker(marker).err(), ENODATA) << "no longer held";
}

TEST_F(StandInTest, ADeadCommittersRenamedMarkerIsPublishedInTheRenamesPlaceWithoutItsOldName) {
  // DCP: .metadata.tmp written and sealed, then renamed to .metadata; nothing durable.
  Hold(3, "ckpt/__0_0.distcp", "data");
  Hold(4, "ckpt/.metadata.tmp", "the marker", 0640);
  Hold(5, "ckpt/.metadata", "the marker", 0640, "ckpt/.metadata.tmp");
  store_.Covered({"n0", kRun}, 5);
  const HeldDeadMarker marker{{"n0", kRun}, 5, "ckpt/.metadata"};
  EXPECT_EQ(writer_->DeadMarkersToCommit("n1", {"n1", "n2"}), std::vector<HeldDeadMarker>{marker})
      << "the rename is the marker, not the version it renamed";
  ASSERT_TRUE(writer_->PublishDeadMarker(marker).ok());
  EXPECT_EQ(Read("ckpt/__0_0.distcp"), "data");
  EXPECT_EQ(Read("ckpt/.metadata"), "the marker");
  struct stat st {};
  ASSERT_EQ(stat((dir_ / "backing/ckpt/.metadata").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0640u);
  EXPECT_EQ(Read("ckpt/.metadata.tmp"), "<missing>") << "the rename took the old name away";
  EXPECT_EQ(Read(".ckptfs/stood-in/n0." + std::string(kRun)), "4 5\n");
  EXPECT_EQ(store_.Totals().completed_for_dead, 3u);
  EXPECT_TRUE(Staged().empty());
  EXPECT_TRUE(writer_->DeadMarkersToCommit("n1", {"n1"}).empty()) << "published: not again";
}

TEST_F(StandInTest, ARenamedMarkersOldNameOnTheStoreGoesOnlyWhenItHoldsTheBytesTheRenameMoved) {
  // The dead member had made each .metadata.tmp durable before it died; one was rewritten since
  // (a later version of that name, also durable).
  std::filesystem::create_directories(dir_ / "backing/a");
  std::filesystem::create_directories(dir_ / "backing/b");
  { std::ofstream(dir_ / "backing/a/.metadata.tmp") << "marker a"; }
  { std::ofstream(dir_ / "backing/b/.metadata.tmp") << "a later version"; }
  Hold(5, "a/.metadata", "marker a", 0644, "a/.metadata.tmp");
  Hold(6, "b/.metadata", "marker b", 0644, "b/.metadata.tmp");
  store_.Covered({"n0", kRun}, 6);
  ASSERT_TRUE(writer_->PublishDeadMarker({{"n0", kRun}, 5, "a/.metadata"}).ok());
  ASSERT_TRUE(writer_->PublishDeadMarker({{"n0", kRun}, 6, "b/.metadata"}).ok());
  EXPECT_EQ(Read("a/.metadata"), "marker a");
  EXPECT_EQ(Read("a/.metadata.tmp"), "<missing>");
  EXPECT_EQ(Read("b/.metadata"), "marker b");
  EXPECT_EQ(Read("b/.metadata.tmp"), "a later version") << "not what the rename moved: it stays";
  EXPECT_EQ(Read(".ckptfs/stood-in/n0." + std::string(kRun)), "5 6\n");
}

TEST_F(StandInTest, AMarkerAnotherPartnerPublishedIsNotListedAgain) {
  Hold(4, "ckpt/.metadata", "the marker");
  store_.Covered({"n0", kRun}, 4);
  ASSERT_TRUE(WriteStandInRecord(*env_, root_fd_, staging_fd_, "n0", kRun, {3, 4}).ok());
  EXPECT_TRUE(writer_->DeadMarkersToCommit("n1", {"n1"}).empty());
  // What this partner records later never says less than the other one's record.
  Hold(2, "ckpt/a.bin", "a");
  store_.Covered({"n0", kRun}, 4);
  ASSERT_TRUE(writer_->Complete({"n0", kRun}, 2).ok());
  EXPECT_EQ(*ReadStandInRecord(*env_, root_fd_, "n0", kRun), (StandInRecord{3, 4}));
}

}  // namespace
}  // namespace ckptfs::replication
