// Tests of the Reclaimer: which files give their memory back, and that their bytes stay the same.
#include "core/flush/reclaim.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/memory/arena.h"
#include "iouring/fault_injecting_env.h"
#include "namespace_fixture.h"

namespace ckptfs {
namespace {

using testing_util::Pattern;
using testing_util::SameBytes;

class ReclaimTest : public testing_util::NamespaceTest {
 protected:
  void SetUp() override {
    NamespaceTest::SetUp();
    ASSERT_EQ(mkdir((backing_ / ".ckptfs").c_str(), 0700), 0);
    ASSERT_EQ(mkdir((backing_ / ".ckptfs/staging").c_str(), 0700), 0);
    staging_fd_ = open((backing_ / ".ckptfs/staging").c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    ASSERT_GE(staging_fd_, 0);
    reclaimer_ = std::make_unique<Reclaimer>(*ns_, stats_, staging_fd_, /*worker=*/0);
  }
  void TearDown() override {
    reclaimer_.reset();
    NamespaceTest::TearDown();
    close(staging_fd_);
  }
  static std::string Content(const InodeRef& file) {
    MutexLock lock(file->mu);
    std::string out(file->content.size(), '\0');
    Result<size_t> n = file->content.ReadInto(0, out.size(), out.data());
    EXPECT_TRUE(n.ok());
    return out;
  }
  static size_t MemoryBlocks(const InodeRef& file) {
    MutexLock lock(file->mu);
    return file->content.memory_blocks();
  }

  int staging_fd_ = -1;
  std::unique_ptr<Reclaimer> reclaimer_;
  // An Env that fails what a test asks; it outlives the spill files opened through it.
  FaultInjectingEnv faulty_env_{MakePosixEnv()};
};

TEST_F(ReclaimTest, ADurableUnchangedClosedFileIsEvictedAndReadAgainFromTheBackingStore) {
  const std::string bytes = Pattern(1, 2 * kBlockSize);
  testing_util::WriteHostFile(backing_ / "f", bytes);  // What the flusher published.
  InodeRef file = FileInMemory("f", bytes, 1);
  {
    NamespaceLock lock(ns_->mutex());
    file->on_backing = true;
    MutexLock ilock(file->mu);
    file->sealed_version = file->durable_version = 1;
  }
  {
    NamespaceLock lock(ns_->mutex());
    reclaimer_->AddCandidateLocked(file);
  }
  EXPECT_EQ(reclaimer_->Reclaim(100), 2u);
  EXPECT_EQ(stats_.evicted_blocks.load(), 2u);
  EXPECT_EQ(MemoryBlocks(file), 0u);
  NamespaceLock lock(ns_->mutex());
  ASSERT_TRUE(ns_->LoadOriginLocked(file).ok());
  EXPECT_TRUE(SameBytes(Content(file), bytes));
}

TEST_F(ReclaimTest, TheCandidateListForgetsDeletedFilesAndListsEachFileOnce) {
  constexpr size_t kMin = Reclaimer::kPruneMinCandidates;
  InodeRef kept = FileInMemory("kept", Pattern(3, kBlockSize), 1);
  std::weak_ptr<Inode> deleted;
  {
    NamespaceLock lock(ns_->mutex());
    for (size_t i = 0; i < kMin; ++i) {
      auto gone = std::make_shared<Inode>(1'000'000 + i, FileType::kRegular);
      if (i == 0) deleted = gone;
      reclaimer_->AddCandidateLocked(gone);  // Deleted right after it became durable.
    }
    EXPECT_LE(reclaimer_->CandidatesLocked(), 1u) << "files gone are dropped once the list grew";
    for (size_t i = 0; i < 10 * kMin; ++i) reclaimer_->AddCandidateLocked(kept);
    EXPECT_LT(reclaimer_->CandidatesLocked(), kMin) << "a file made durable again and again";
  }
  EXPECT_TRUE(deleted.expired());
  {
    NamespaceLock lock(ns_->mutex());
    kept->on_backing = true;
    MutexLock ilock(kept->mu);
    kept->sealed_version = kept->durable_version = 1;
  }
  testing_util::WriteHostFile(backing_ / "kept", Pattern(3, kBlockSize));
  EXPECT_EQ(reclaimer_->Reclaim(100), 1u) << "the file listed stays a candidate";
}

TEST_F(ReclaimTest, AFileWithAChangeNotYetDurableIsNotEvicted) {
  InodeRef file = FileInMemory("f", Pattern(2, kBlockSize), 2);
  {
    NamespaceLock lock(ns_->mutex());
    file->on_backing = true;
    MutexLock ilock(file->mu);
    file->sealed_version = 2;
    file->durable_version = 1;
    reclaimer_->AddCandidateLocked(file);
  }
  EXPECT_EQ(reclaimer_->Reclaim(100), 0u);
  EXPECT_EQ(MemoryBlocks(file), 1u);
}

TEST_F(ReclaimTest, TheLargestFileStillBeingWrittenIsSpilledAndKeepsItsBytes) {
  const std::string small = Pattern(3, kBlockSize);
  const std::string large = Pattern(4, 3 * kBlockSize + 100);
  InodeRef a = FileInMemory("a", small, 1);
  InodeRef b = FileInMemory("b", large, 1);
  EXPECT_EQ(*reclaimer_->Spill(env_), 3u) << "the full blocks of the larger file";
  EXPECT_EQ(stats_.spilled_blocks.load(), 3u);
  EXPECT_EQ(MemoryBlocks(a), 1u);
  EXPECT_EQ(MemoryBlocks(b), 1u) << "its partial last block stays in memory";
  EXPECT_TRUE(SameBytes(Content(b), large));
  EXPECT_EQ(testing_util::HostList(backing_ / ".ckptfs/staging"),
            std::vector<std::string>{"spill-0-1"})
      << "named, for a worker that takes over after a crash";
}

TEST_F(ReclaimTest, ASpillThatCannotBeWrittenNamesTheFileAndKeepsItsBlocksInMemory) {
  const std::string bytes = Pattern(5, 3 * kBlockSize + 100);
  InodeRef file = FileInMemory("model.pt", bytes, 1);
  faulty_env_.FailWritesFrom(0, ENOSPC);
  Result<size_t> spilled = reclaimer_->Spill(faulty_env_);
  ASSERT_FALSE(spilled.ok());
  EXPECT_EQ(spilled.status().err(), ENOSPC);
  EXPECT_NE(spilled.status().message().find("model.pt"), std::string::npos)
      << spilled.status().ToString();
  EXPECT_EQ(MemoryBlocks(file), 4u);
  EXPECT_EQ(stats_.spilled_blocks.load(), 0u);
  EXPECT_TRUE(SameBytes(Content(file), bytes));
  faulty_env_.Heal();
  EXPECT_EQ(*reclaimer_->Spill(faulty_env_), 3u) << "spilled once the backing store takes it";
  EXPECT_TRUE(SameBytes(Content(file), bytes));
}

}  // namespace
}  // namespace ckptfs
