// Tests of the Namespace on its own: the inode table and the overlay on the backing directory,
// and the journal entries its changes make.
#include "core/namespace.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include "namespace_fixture.h"

namespace ckptfs {
namespace {

using testing_util::NamespaceTest;
using testing_util::WriteHostFile;

TEST_F(NamespaceTest, ABackingFileIsFoundByNameOnlyWhenLookedUpAndTakesItsAttributes) {
  WriteHostFile(backing_ / "f", "12345");
  ASSERT_EQ(chmod((backing_ / "f").c_str(), 0640), 0);
  NamespaceLock lock(ns_->mutex());
  InodeRef root = RootLocked();
  EXPECT_TRUE(root->children.empty()) << "nothing is read before a lookup";
  Result<InodeRef> f = ns_->ChildLocked(root, "f");
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_TRUE((*f)->on_backing);
  EXPECT_EQ(ns_->FindLocked((*f)->ino), *f);
  Attr attr = ns_->AttrOf(**f);
  EXPECT_EQ(attr.size, 5u);
  EXPECT_EQ(attr.mode, S_IFREG | 0640u);
  EXPECT_EQ(ns_->ChildLocked(root, "missing").status().err(), ENOENT);
  EXPECT_EQ(ns_->ChildLocked(root, ".ckptfs").status().err(), ENOENT)
      << "the reserved name is never a child of the root";
}

TEST_F(NamespaceTest, AllNamesOfAHardLinkedBackingFileShareOneInode) {
  WriteHostFile(backing_ / "a", "x");
  ASSERT_EQ(link((backing_ / "a").c_str(), (backing_ / "b").c_str()), 0);
  InodeRef a = ChildOfRoot("a");
  InodeRef b = ChildOfRoot("b");
  ASSERT_TRUE(a && b);
  EXPECT_EQ(a, b);
  NamespaceLock lock(ns_->mutex());
  EXPECT_EQ(a->names.size(), 2u);
  EXPECT_EQ(ns_->AttrOf(*a).nlink, 2u);
}

TEST_F(NamespaceTest, ANameRemovedThroughTheMountStaysGoneWhileTheBackingStoreStillHasIt) {
  WriteHostFile(backing_ / "old", "x");
  WriteHostFile(backing_ / "other", "y");
  NamespaceLock lock(ns_->mutex());
  InodeRef root = RootLocked();
  Result<InodeRef> old = ns_->ChildLocked(root, "old");
  ASSERT_TRUE(old.ok());
  ns_->RemoveNameLocked(root, "old", *old);
  EXPECT_TRUE(testing_util::HostExists(backing_ / "old")) << "only the journal changes the backing store";
  EXPECT_EQ(ns_->ChildLocked(root, "old").status().err(), ENOENT);
  ns_->LoadDirLocked(root);
  EXPECT_EQ(root->children.count("old"), 0u);
  EXPECT_EQ(root->children.count("other"), 1u);
  ASSERT_EQ(journal_.pending_entries(), 1u);
  EXPECT_EQ(journal_.Unflushed().front()->kind, JournalEntry::Kind::kUnlink);
  EXPECT_EQ(appended_, 1u);
}

TEST_F(NamespaceTest, NewEntriesRefuseTakenAndBadNamesAndCarryTheirAttributesToTheJournal) {
  NamespaceLock lock(ns_->mutex());
  Caller owner{1234, 5678, 022};
  Result<EntryRef> dir = ns_->AddNewLocked(kRootIno, "d", FileType::kDirectory, 0750, owner,
                                           JournalEntry::Kind::kMkdir);
  ASSERT_TRUE(dir.ok()) << dir.status().ToString();
  EXPECT_EQ((*dir)->mode, 0750u);
  EXPECT_EQ((*dir)->uid, 1234u);
  EXPECT_EQ((*dir)->gid, 5678u);
  EXPECT_EQ((*dir)->name, "d");
  EXPECT_EQ(ns_->AddNewLocked(kRootIno, "d", FileType::kRegular, 0600, owner,
                              JournalEntry::Kind::kMknod).status().err(), EEXIST);
  EXPECT_EQ(ns_->AddNewLocked(kRootIno, "a/b", FileType::kRegular, 0600, owner,
                              JournalEntry::Kind::kMknod).status().err(), EINVAL);
  EXPECT_EQ(ns_->AddNewLocked(kRootIno, std::string(256, 'n'), FileType::kRegular, 0600, owner,
                              JournalEntry::Kind::kMknod).status().err(), ENAMETOOLONG);
  EXPECT_EQ(ns_->AddNewLocked(kRootIno, ".ckptfs", FileType::kRegular, 0600, owner,
                              JournalEntry::Kind::kMknod).status().err(), EEXIST);
  EXPECT_EQ(ns_->PathLocked((*dir)->inode), "d");
}

TEST_F(NamespaceTest, SealingAppendsAPublishAndReplacesTheUnsentOneItSupersedes) {
  NamespaceLock lock(ns_->mutex());
  InodeRef file = ns_->NewInodeLocked(FileType::kRegular, 0644, testing_util::Me());
  ns_->AddNameLocked(RootLocked(), "f", file);
  {
    MutexLock ilock(file->mu);
    file->version = 1;
  }
  EXPECT_EQ(ns_->SealLocked(file), 1u);
  EXPECT_EQ(ns_->SealLocked(file), 0u) << "an unchanged file is not sealed again";
  {
    MutexLock ilock(file->mu);
    file->version = 2;
  }
  EXPECT_EQ(ns_->SealLocked(file), 2u);
  EXPECT_EQ(stats_.versions_skipped.load(), 1u);
  ASSERT_EQ(journal_.pending_entries(), 1u) << "the superseded version left the journal";
  EXPECT_EQ(journal_.Unflushed().front()->version, 2u);
  EXPECT_EQ(journal_.Unflushed().front()->names.size(), 1u);
}

TEST_F(NamespaceTest, ADeletedClosedFileIsForgottenOnceTheKernelForgetsIt) {
  NamespaceLock lock(ns_->mutex());
  InodeRef root = RootLocked();
  InodeRef file = ns_->NewInodeLocked(FileType::kRegular, 0644, testing_util::Me());
  ns_->AddNameLocked(root, "f", file);
  file->lookups = 1;
  ns_->RemoveNameLocked(root, "f", file);
  file->nlink = 0;
  EXPECT_EQ(ns_->PathLocked(file), "(deleted)");
  ns_->MaybeDropLocked(file);
  EXPECT_EQ(ns_->FindLocked(file->ino), file) << "the kernel still knows it";
  file->lookups = 0;
  ns_->MaybeDropLocked(file);
  EXPECT_EQ(ns_->FindLocked(file->ino), nullptr);
}

}  // namespace
}  // namespace ckptfs
