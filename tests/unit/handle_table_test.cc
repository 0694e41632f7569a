// Tests of HandleTable: numbers, earlier workers' handles, the open-file count, resent opens and
// directory handles.
#include "core/filesystem/handle_table.h"

#include <fcntl.h>
#include <gtest/gtest.h>

#include <chrono>
#include <memory>

namespace ckptfs {
namespace {

using namespace std::chrono_literals;

std::unique_ptr<Handle> FileOf(uint64_t ino) {
  return std::make_unique<Handle>(FileHandle(std::make_shared<Inode>(ino, FileType::kRegular)),
                                  O_RDWR);
}

class StatsFile final : public SpecialFile {
 public:
  Result<ReadData> Read(uint64_t, size_t) override { return ReadData{}; }
  Result<size_t> Write(std::string_view) override { return Status::Error(EBADF, "read-only"); }
  std::optional<uint64_t> HandedOverIno() const override { return kStatsIno; }
};

std::unique_ptr<Handle> ControlFile() {
  return std::make_unique<Handle>(SpecialHandle{std::make_unique<StatsFile>()}, O_RDONLY);
}

class HandleTableTest : public ::testing::Test {
 protected:
  // A handle of file `ino` that an earlier worker gave the kernel, taken over; its number.
  uint64_t TakeOverLocked(uint64_t ino) REQUIRES(ns_lock) {
    const uint64_t number = earlier_.AddLocked(FileOf(ino));
    table_.AddEarlierLocked(FileOf(ino), number);
    return number;
  }

  ManualClock clock_;
  HandleTable table_{3, clock_};
  HandleTable earlier_{9, clock_};
  NamespaceMutex mu_;
};

TEST_F(HandleTableTest, AHandleIsFoundByTheNumberItWasGivenUntilItIsRemoved) {
  NamespaceLock lock(mu_);
  uint64_t file = table_.AddLocked(FileOf(20));
  uint64_t control = table_.AddLocked(ControlFile());
  ASSERT_NE(file, control);
  ASSERT_NE(table_.Find(file), nullptr);
  EXPECT_EQ(table_.Find(file)->number, file);
  ASSERT_NE(table_.Find(file)->file(), nullptr);
  EXPECT_EQ(table_.Find(file)->file()->inode->ino, 20u);
  EXPECT_EQ(table_.Find(file)->special(), nullptr);
  EXPECT_EQ(table_.Find(control)->file(), nullptr);
  ASSERT_NE(table_.Find(control)->special(), nullptr);
  EXPECT_EQ(table_.Find(control)->special()->HandedOverIno(), kStatsIno);
  int seen = 0;
  table_.ForEachLocked([&](Handle&) { ++seen; });
  EXPECT_EQ(seen, 2);
  table_.RemoveLocked(table_.Find(file));
  seen = 0;
  table_.ForEachLocked([&](Handle&) { ++seen; });
  EXPECT_EQ(seen, 1);
}

TEST_F(HandleTableTest, NumbersCarryTheWorkersTagSoAnotherWorkersNumberIsNotFound) {
  HandleTable other{4, clock_};
  NamespaceLock lock(mu_);
  uint64_t mine = table_.AddLocked(FileOf(20));
  uint64_t theirs = other.AddLocked(FileOf(21));
  EXPECT_NE(mine >> 48, theirs >> 48);
  EXPECT_EQ(table_.Find(theirs), nullptr);
  EXPECT_EQ(other.Find(mine), nullptr);
  EXPECT_FALSE(table_.IsEarlier(mine));
}

TEST_F(HandleTableTest, AnEarlierWorkersHandleKeepsItsNumber) {
  NamespaceLock lock(mu_);
  const uint64_t number = TakeOverLocked(30);
  ASSERT_NE(table_.Find(number), nullptr);
  EXPECT_EQ(table_.Find(number)->number, number);
  EXPECT_TRUE(table_.IsEarlier(number));
}

TEST_F(HandleTableTest, OnlyRegularFilesCountAsOpenAndTheQuietTimeRunsFromTheLastRelease) {
  NamespaceLock lock(mu_);
  clock_.Advance(10s);
  EXPECT_TRUE(table_.NoFileOpenForLocked(10s));
  table_.AddLocked(ControlFile());
  EXPECT_TRUE(table_.NoFileOpenForLocked(10s));
  const uint64_t file = table_.AddLocked(FileOf(20));
  clock_.Advance(60s);
  EXPECT_FALSE(table_.NoFileOpenForLocked(1s));
  table_.RemoveLocked(table_.Find(file));
  EXPECT_FALSE(table_.NoFileOpenForLocked(1s));
  clock_.Advance(1s);
  EXPECT_TRUE(table_.NoFileOpenForLocked(1s));
}

TEST_F(HandleTableTest, AResentOpenFindsTheEarlierHandleItMadeOnce) {
  NamespaceLock lock(mu_);
  const uint64_t number = TakeOverLocked(30);
  table_.NoteOpenedByLocked(77, number);
  EXPECT_EQ(table_.TakeOpenedByLocked(0), nullptr);
  EXPECT_EQ(table_.TakeOpenedByLocked(78), nullptr);
  Handle* found = table_.TakeOpenedByLocked(77);
  ASSERT_NE(found, nullptr);
  EXPECT_EQ(found->number, number);
  EXPECT_EQ(table_.TakeOpenedByLocked(77), nullptr);
}

TEST_F(HandleTableTest, AReleasedEarlierHandleIsNotFoundByItsRequest) {
  NamespaceLock lock(mu_);
  table_.NoteOpenedByLocked(77, TakeOverLocked(30));
  table_.ForgetOpenedByLocked(77);
  EXPECT_EQ(table_.TakeOpenedByLocked(77), nullptr);
}

TEST_F(HandleTableTest, ADirectoryHandleReadsItsListingFromAnIndexOnUntilReleased) {
  const uint64_t dir = table_.AddDir({{".", 1, S_IFDIR}, {"..", 1, S_IFDIR}, {"a", 20, S_IFREG}});
  Result<std::vector<DirEntry>> all = table_.ReadDir(dir, 0);
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(all->size(), 3u);
  Result<std::vector<DirEntry>> rest = table_.ReadDir(dir, 2);
  ASSERT_TRUE(rest.ok());
  ASSERT_EQ(rest->size(), 1u);
  EXPECT_EQ((*rest)[0].name, "a");
  EXPECT_TRUE(table_.ReadDir(dir, 5)->empty());
  table_.AddEarlierDir(12345, {{".", 1, S_IFDIR}});
  EXPECT_EQ(table_.Dirs().size(), 2u);
  table_.ReleaseDir(dir);
  EXPECT_EQ(table_.ReadDir(dir, 0).status().err(), EBADF);
  EXPECT_EQ(table_.ReadDir(12345, 0)->size(), 1u);
}

}  // namespace
}  // namespace ckptfs
