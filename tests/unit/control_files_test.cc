// Tests of the control files on their own: what they show, what they refuse, and what a sync
// reports. The mount behind them is stood in for by a source whose durability wait can fail.
#include "core/views/control_files.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <vector>

namespace ckptfs {
namespace {

class ControlFilesTest : public ::testing::Test, public ControlFiles::Source {
 protected:
  std::string StatsJson() override { return "{\"n\": " + std::to_string(++stats_made_) + "}\n"; }
  uint64_t SyncPoint() override { return point_; }
  Status WaitDurable(uint64_t point) override {
    waited_for_.push_back(point);
    return durable_;
  }
  Status RequestUpgrade(const std::string& binary) override {
    upgrades_.push_back(binary);
    return upgrade_;
  }

  int stats_made_ = 0;
  uint64_t point_ = 7;
  Status durable_;
  std::vector<uint64_t> waited_for_;
  std::vector<std::string> upgrades_;
  Status upgrade_;
  ControlFiles control_{*this, timespec{1000, 0}};
};

std::string Owned(const Result<ReadData>& data) { return data.ok() ? data->owned : "<error>"; }

TEST_F(ControlFilesTest, TheDirectoryListsStatsSyncAndUpgradeWithTheirModes) {
  std::vector<DirEntry> entries = control_.List();
  ASSERT_EQ(entries.size(), 5u);
  EXPECT_EQ(entries[2].name, "stats");
  EXPECT_EQ(entries[3].name, "sync");
  EXPECT_EQ(entries[4].name, "upgrade");
  EXPECT_EQ(control_.Lookup("stats")->mode, S_IFREG | 0444u);
  EXPECT_EQ(control_.Lookup("sync")->mode, S_IFREG | 0600u);
  EXPECT_EQ(control_.Lookup("upgrade")->mode, S_IFREG | 0600u);
  EXPECT_EQ(control_.Lookup("other").status().err(), ENOENT);
  EXPECT_EQ(control_.AttrOf(kControlDirIno).mode, S_IFDIR | 0755u);
  EXPECT_EQ(control_.AttrOf(kSyncIno).mtime.tv_sec, 1000);
  EXPECT_TRUE(IsControl(kSyncIno));
  EXPECT_FALSE(IsControl(kRootIno));
  EXPECT_FALSE(IsControl(kFirstIno));
}

TEST_F(ControlFilesTest, StatsAreGeneratedAtOpenAndAreReadOnly) {
  Result<ControlFiles::OpenFile> stats = control_.Open(kStatsIno, O_RDONLY);
  ASSERT_TRUE(stats.ok());
  EXPECT_EQ(Owned(control_.Read(*stats, 0, 100)), "{\"n\": 1}\n");
  EXPECT_EQ(Owned(control_.Read(*stats, 2, 2)), "n\"");
  EXPECT_EQ(stats_made_, 1) << "reads of one open see one generation";
  EXPECT_EQ(control_.Open(kStatsIno, O_WRONLY).status().err(), EACCES);
  EXPECT_EQ(control_.Write(*stats, "sync").status().err(), EBADF);
  EXPECT_EQ(control_.Open(kControlDirIno, O_RDONLY).status().err(), EISDIR);
}

TEST_F(ControlFilesTest, AReadOfSyncWaitsForWhatWasSealedBeforeItsOpenAndReportsTheOutcome) {
  Result<ControlFiles::OpenFile> sync = control_.Open(kSyncIno, O_RDWR);
  ASSERT_TRUE(sync.ok());
  point_ = 9;  // Sealed after the open: not waited for.
  EXPECT_EQ(Owned(control_.Read(*sync, 0, 100)), "ok\n");
  EXPECT_EQ(waited_for_, std::vector<uint64_t>{7});

  durable_ = Status::Error(EIO, "data/model.pt: write failed");
  Result<ControlFiles::OpenFile> failing = control_.Open(kSyncIno, O_RDONLY);
  ASSERT_TRUE(failing.ok());
  EXPECT_EQ(Owned(control_.Read(*failing, 0, 100)).rfind("error: ", 0), 0u);
  EXPECT_NE(Owned(control_.Read(*failing, 0, 100)).find("data/model.pt"), std::string::npos);
}

TEST_F(ControlFilesTest, WritingSyncWaitsForEverythingSealedAndRefusesOtherCommands) {
  Result<ControlFiles::OpenFile> sync = control_.Open(kSyncIno, O_WRONLY);
  ASSERT_TRUE(sync.ok());
  point_ = 11;
  Result<size_t> taken = control_.Write(*sync, "sync\n");
  ASSERT_TRUE(taken.ok());
  EXPECT_EQ(*taken, 5u);
  EXPECT_EQ(waited_for_, std::vector<uint64_t>{11});
  EXPECT_EQ(control_.Write(*sync, "flush").status().err(), EINVAL);
  durable_ = Status::Error(ENOSPC, "full");
  EXPECT_EQ(control_.Write(*sync, "sync").status().err(), ENOSPC);
}

TEST_F(ControlFilesTest, UpgradeTakesTheCommandWithOrWithoutABinaryAndReturnsTheRefusal) {
  Result<ControlFiles::OpenFile> upgrade = control_.Open(kUpgradeIno, O_WRONLY);
  ASSERT_TRUE(upgrade.ok());
  EXPECT_EQ(*control_.Write(*upgrade, "upgrade\n"), 8u);
  EXPECT_EQ(*control_.Write(*upgrade, "upgrade /opt/ckptfs/bin/ckptfs\n"), 31u);
  EXPECT_EQ(upgrades_, (std::vector<std::string>{"", "/opt/ckptfs/bin/ckptfs"}));
  EXPECT_EQ(control_.Write(*upgrade, "upgradex").status().err(), EINVAL);
  EXPECT_EQ(control_.Write(*upgrade, "sync").status().err(), EINVAL);
  upgrade_ = Status::Error(EOPNOTSUPP, "no supervisor");
  EXPECT_EQ(control_.Write(*upgrade, "upgrade").status().err(), EOPNOTSUPP);
  EXPECT_EQ(upgrades_.size(), 3u);
}

}  // namespace
}  // namespace ckptfs
