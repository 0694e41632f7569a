// Tests of KernelStateKeeper: what it records as Filesystem tells it what the kernel gets, where
// recorded nodes move and what the kernel gives back; and that it does nothing without a record.
#include "core/filesystem/kernel_state_keeper.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <memory>
#include <string>
#include <vector>

#include "namespace_fixture.h"

namespace ckptfs {
namespace {

constexpr uint64_t kCapacityBlocks = 64;

class KernelStateKeeperTest : public testing_util::NamespaceTest {
 protected:
  void SetUp() override {
    NamespaceTest::SetUp();
    char* aligned = memory_.data() + (64 - reinterpret_cast<uintptr_t>(memory_.data()) % 64);
    keeper_ = std::make_unique<KernelStateKeeper>(
        std::make_unique<KernelStateRecord>(aligned, kCapacityBlocks), *ns_, handles_, stats_);
  }
  void TearDown() override {
    keeper_.reset();
    NamespaceTest::TearDown();
  }
  // The recorded node of `ino`, or null.
  const KernelStateRecord::Node* Recorded(uint64_t ino) {
    state_ = keeper_->record()->Read();
    for (const KernelStateRecord::Node& n : state_.nodes) {
      if (n.ino == ino) return &n;
    }
    return nullptr;
  }

  std::vector<char> memory_ = std::vector<char>(KernelStateRecord::Bytes(kCapacityBlocks) + 64);
  HandleTable handles_{1, clock_};
  std::unique_ptr<KernelStateKeeper> keeper_;
  KernelStateRecord::State state_;
};

TEST_F(KernelStateKeeperTest, ADirectoryIsRecordedBelowItsDirectoriesAndGoesWhenForgotten) {
  ASSERT_EQ(mkdir((backing_ / "a").c_str(), 0755), 0);
  ASSERT_EQ(mkdir((backing_ / "a/b").c_str(), 0755), 0);
  NamespaceLock lock(ns_->mutex());
  InodeRef a = *ns_->ChildLocked(RootLocked(), "a");
  InodeRef b = *ns_->ChildLocked(a, "b");
  b->lookups = 1;
  ASSERT_TRUE(keeper_->RoomLocked(b.get(), 0).ok());
  keeper_->RecordNodeLocked(b);
  ASSERT_NE(Recorded(a->ino), nullptr) << "its directory first";
  const KernelStateRecord::Node* recorded = Recorded(b->ino);
  ASSERT_NE(recorded, nullptr);
  EXPECT_TRUE(recorded->directory);
  EXPECT_EQ(recorded->parent, a->ino);
  EXPECT_EQ(recorded->name, "b");
  keeper_->UnrecordNodeLocked(*b);
  EXPECT_EQ(Recorded(b->ino), nullptr);
  EXPECT_NE(Recorded(a->ino), nullptr);
}

TEST_F(KernelStateKeeperTest, ARecordedNodeThatMovesIsRecordedAtItsNewPlace) {
  ASSERT_EQ(mkdir((backing_ / "a").c_str(), 0755), 0);
  ASSERT_EQ(mkdir((backing_ / "a/b").c_str(), 0755), 0);
  NamespaceLock lock(ns_->mutex());
  InodeRef root = RootLocked();
  InodeRef a = *ns_->ChildLocked(root, "a");
  InodeRef b = *ns_->ChildLocked(a, "b");
  keeper_->RecordNodeLocked(b);
  ASSERT_TRUE(ns_->RenameLocked(a, "b", b, root, "c", nullptr).ok());
  keeper_->RecordPlaceLocked(b);
  const KernelStateRecord::Node* recorded = Recorded(b->ino);
  ASSERT_NE(recorded, nullptr);
  EXPECT_EQ(recorded->parent, kRootIno);
  EXPECT_EQ(recorded->name, "c");
}

TEST_F(KernelStateKeeperTest, AFileOpenForWritingIsRecordedWithItsHandleUntilItsLastRelease) {
  NamespaceLock lock(ns_->mutex());
  InodeRef file = ns_->NewInodeLocked(FileType::kRegular, 0644, testing_util::Me());
  ns_->AddNameLocked(RootLocked(), "f", file);
  auto handle = std::make_unique<Handle>(FileHandle(file), O_WRONLY);
  Handle& h = *handle;
  handles_.AddLocked(std::move(handle));
  file->open_handles = 1;
  keeper_->RecordHandleLocked(h);
  const KernelStateRecord::Node* recorded = Recorded(file->ino);
  ASSERT_NE(recorded, nullptr);
  EXPECT_TRUE(recorded->content) << "what it holds is recorded while open for writing";
  ASSERT_EQ(state_.handles.size(), 1u);
  EXPECT_EQ(state_.handles[0].fh, h.number);
  EXPECT_EQ(state_.handles[0].ino, file->ino);
  keeper_->UnrecordHandleLocked(*h.file());
  EXPECT_EQ(Recorded(file->ino), nullptr);
  EXPECT_TRUE(state_.handles.empty());
  handles_.RemoveLocked(&h);
}

TEST_F(KernelStateKeeperTest, WithoutARecordNothingIsRecordedAndThereIsAlwaysRoom) {
  KernelStateKeeper none(nullptr, *ns_, handles_, stats_);
  ASSERT_EQ(mkdir((backing_ / "a").c_str(), 0755), 0);
  NamespaceLock lock(ns_->mutex());
  InodeRef a = *ns_->ChildLocked(RootLocked(), "a");
  EXPECT_EQ(none.record(), nullptr);
  EXPECT_TRUE(none.RoomLocked(nullptr, 1000000).ok());
  none.RecordNodeLocked(a);
  MutexLock ilock(a->mu);
  EXPECT_LT(a->record, 0);
}

}  // namespace
}  // namespace ckptfs
