// Tests of the special node providers and their registry: which provider serves which node or
// entry, what the control nodes give and refuse, and that tensor views' nodes refuse changes.
#include "core/filesystem/special_nodes.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <memory>

#include "namespace_fixture.h"

namespace ckptfs {
namespace {

using Change = SpecialNodes::Change;

class SpecialNodesTest : public testing_util::NamespaceTest, public ControlFiles::Source {
 protected:
  void SetUp() override {
    NamespaceTest::SetUp();
    views_ = std::make_unique<TensorViews>(*ns_, env_);
    auto control = std::make_unique<ControlNodes>(*this, timespec{1000, 0});
    control_ = control.get();
    registry_.Add(std::move(control));
    auto tensors = std::make_unique<TensorViewNodes>(*views_);
    tensors_ = tensors.get();
    registry_.Add(std::move(tensors));
  }
  std::string StatsJson() override { return "{\"made\": true}\n"; }
  uint64_t SyncPoint() override { return 0; }
  Status WaitDurable(uint64_t) override { return Status::Ok(); }
  Status RequestUpgrade(const std::string&) override { return Status::Ok(); }

  static constexpr uint64_t kViewNode = kTensorViewInoBit | (uint64_t{1} << 32) | 3;

  std::unique_ptr<TensorViews> views_;
  SpecialNodeRegistry registry_;
  SpecialNodes* control_ = nullptr;
  SpecialNodes* tensors_ = nullptr;
};

TEST_F(SpecialNodesTest, EachNodeAndEntryIsFoundAtItsProviderAndNamespaceNodesAtNone) {
  EXPECT_EQ(registry_.ForNode(kControlDirIno), control_);
  EXPECT_EQ(registry_.ForNode(kStatsIno), control_);
  EXPECT_EQ(registry_.ForNode(kViewNode), tensors_);
  EXPECT_EQ(registry_.ForNode(kRootIno), nullptr);
  EXPECT_EQ(registry_.ForNode(kFirstIno), nullptr);
  EXPECT_EQ(registry_.ForEntry(kRootIno, ".ckptfs"), control_);
  EXPECT_EQ(registry_.ForEntry(kControlDirIno, "stats"), control_);
  EXPECT_EQ(registry_.ForEntry(kViewNode, "0.0"), tensors_);
  EXPECT_EQ(registry_.ForEntry(kRootIno, "ckpt"), nullptr);
  EXPECT_EQ(registry_.ForEntry(kFirstIno, ".ckptfs"), nullptr)
      << "only the root holds the control directory";
}

TEST_F(SpecialNodesTest, TheControlDirectoryIsFoundFromTheRootAndItsFilesOpenForDirectIo) {
  Result<Attr> dir = control_->Lookup(kRootIno, ".ckptfs");
  ASSERT_TRUE(dir.ok());
  EXPECT_EQ(dir->ino, kControlDirIno);
  EXPECT_EQ(dir->mode, S_IFDIR | 0755u);
  EXPECT_EQ(control_->Lookup(kControlDirIno, "stats")->ino, kStatsIno);
  Result<std::vector<DirEntry>> entries = control_->List(kControlDirIno);
  ASSERT_TRUE(entries.ok());
  EXPECT_EQ(entries->size(), 5u);
  EXPECT_EQ(control_->List(kStatsIno).status().err(), ENOTDIR);
  Result<SpecialNodes::Opened> stats = control_->Open(kStatsIno, O_RDONLY);
  ASSERT_TRUE(stats.ok()) << stats.status().ToString();
  EXPECT_EQ(stats->attr.ino, kStatsIno);
  EXPECT_TRUE(stats->direct_io);
  EXPECT_FALSE(stats->keep_cache);
  Result<ReadData> read = stats->file->Read(0, 100);
  ASSERT_TRUE(read.ok());
  EXPECT_EQ(read->owned, "{\"made\": true}\n");
  EXPECT_EQ(stats->file->HandedOverIno(), kStatsIno) << "the next worker opens it again";
}

TEST_F(SpecialNodesTest, ControlNodesRefuseEveryChangeWithTheErrnoOfTheirKind) {
  EXPECT_EQ(control_->Refuse(Change::kSetAttr, kStatsIno, "").err(), EPERM);
  EXPECT_EQ(control_->Refuse(Change::kUnlink, kControlDirIno, "stats").err(), EPERM);
  EXPECT_EQ(control_->Refuse(Change::kRmdir, kRootIno, ".ckptfs").err(), EPERM);
  EXPECT_EQ(control_->Refuse(Change::kRmdir, kControlDirIno, "stats").err(), ENOTDIR);
  EXPECT_EQ(control_->Refuse(Change::kRename, kRootIno, ".ckptfs").err(), EPERM);
  EXPECT_EQ(control_->Refuse(Change::kLink, kSyncIno, "").err(), EPERM);
  for (Change made : {Change::kCreate, Change::kMknod, Change::kLinkInto}) {
    EXPECT_EQ(control_->Refuse(made, kRootIno, ".ckptfs").err(), EEXIST);
    EXPECT_EQ(control_->Refuse(made, kControlDirIno, "new").err(), EPERM);
  }
}

TEST_F(SpecialNodesTest, TensorViewNodesRefuseEveryChangeAsReadOnly) {
  for (Change change : {Change::kSetAttr, Change::kUnlink, Change::kRmdir, Change::kRename,
                        Change::kLink, Change::kLinkInto, Change::kCreate, Change::kMknod}) {
    EXPECT_EQ(tensors_->Refuse(change, kViewNode, "x").err(), EROFS);
  }
  EXPECT_EQ(tensors_->GetAttr(kViewNode).status().err(), ESTALE) << "no view was built";
}

}  // namespace
}  // namespace ckptfs
