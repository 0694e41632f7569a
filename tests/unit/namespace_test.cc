// Tests of the Namespace on its own: the inode table and the overlay on the backing directory,
// and the journal entries its changes make.
#include "core/tree/namespace.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <set>
#include <string>
#include <vector>

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

TEST_F(NamespaceTest, HardLinkedBackingFilesDeletedThroughTheMountAreNotRememberedForever) {
  constexpr int kFiles = 1000;
  for (int i = 0; i < kFiles; ++i) {
    const std::string a = "a" + std::to_string(i);
    WriteHostFile(backing_ / a, "x");
    ASSERT_EQ(link((backing_ / a).c_str(), (backing_ / ("b" + std::to_string(i))).c_str()), 0);
  }
  NamespaceLock lock(ns_->mutex());
  InodeRef root = RootLocked();
  for (int i = 0; i < kFiles; ++i) {
    for (const std::string& name : {"a" + std::to_string(i), "b" + std::to_string(i)}) {
      Result<InodeRef> f = ns_->ChildLocked(root, name);
      ASSERT_TRUE(f.ok()) << f.status().ToString();
      ASSERT_TRUE(ns_->UnlinkLocked(root, name, *f).ok());
    }
    // The flusher applies the removals, and the journal lets go of the inode.
    std::vector<EntryRef> batch = journal_.TakeBatch(clock_.Now(), {}, journal_.last_seq(),
                                                     SIZE_MAX, UINT64_MAX);
    journal_.Complete(batch, batch.size(), batch.size());
  }
  EXPECT_EQ(journal_.pending_entries(), 0u);
  EXPECT_LE(ns_->BackingLinksLocked(), 64u);
  WriteHostFile(backing_ / "kept", "y");
  ASSERT_EQ(link((backing_ / "kept").c_str(), (backing_ / "kept2").c_str()), 0);
  InodeRef kept = *ns_->ChildLocked(root, "kept");
  EXPECT_EQ(*ns_->ChildLocked(root, "kept2"), kept) << "a live link is still remembered";
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

TEST_F(NamespaceTest, ARenameMovesTheNameJournalsItAndTheFileItReplacesGoesWithItsLastName) {
  WriteHostFile(backing_ / "a", "new");
  WriteHostFile(backing_ / "b", "old");
  InodeRef a = ChildOfRoot("a");
  InodeRef b = ChildOfRoot("b");
  ASSERT_TRUE(a && b);
  NamespaceLock lock(ns_->mutex());
  InodeRef root = RootLocked();
  const uint64_t victim_ino = b->ino;
  ASSERT_TRUE(ns_->RenameLocked(root, "a", a, root, "b", b).ok());
  EXPECT_EQ(ns_->ChildLocked(root, "a").status().err(), ENOENT);
  EXPECT_EQ(*ns_->ChildLocked(root, "b"), a);
  EXPECT_EQ(ns_->PathLocked(a), "b");
  EXPECT_EQ(b->nlink, 0u);
  EXPECT_EQ(ns_->FindLocked(victim_ino), nullptr) << "nobody holds the replaced file";
  ASSERT_EQ(journal_.pending_entries(), 1u);
  const EntryRef e = journal_.Unflushed().back();
  EXPECT_EQ(e->kind, JournalEntry::Kind::kRename);
  EXPECT_EQ(e->name, "a");
  EXPECT_EQ(e->new_name, "b");
  EXPECT_EQ(e->victim, b);
}

TEST_F(NamespaceTest, ADirectoryMovesWithItsLinkCountsButNeverIntoItselfOrOverAFileOrAFullOne) {
  ASSERT_EQ(mkdir((backing_ / "d").c_str(), 0755), 0);
  ASSERT_EQ(mkdir((backing_ / "d/sub").c_str(), 0755), 0);
  ASSERT_EQ(mkdir((backing_ / "full").c_str(), 0755), 0);
  WriteHostFile(backing_ / "full/x", "x");
  ASSERT_EQ(mkdir((backing_ / "e").c_str(), 0755), 0);
  WriteHostFile(backing_ / "f", "f");
  NamespaceLock lock(ns_->mutex());
  InodeRef root = RootLocked();
  InodeRef d = *ns_->ChildLocked(root, "d");
  InodeRef sub = *ns_->ChildLocked(d, "sub");
  InodeRef full = *ns_->ChildLocked(root, "full");
  InodeRef e = *ns_->ChildLocked(root, "e");
  InodeRef f = *ns_->ChildLocked(root, "f");
  EXPECT_EQ(ns_->RenameLocked(root, "d", d, sub, "d", nullptr).err(), EINVAL);
  EXPECT_EQ(ns_->RenameLocked(root, "d", d, root, "f", f).err(), ENOTDIR);
  EXPECT_EQ(ns_->RenameLocked(root, "f", f, root, "d", d).err(), EISDIR);
  EXPECT_EQ(ns_->RenameLocked(root, "d", d, root, "full", full).err(), ENOTEMPTY);
  EXPECT_EQ(journal_.pending_entries(), 0u) << "a refused rename changes nothing";
  EXPECT_EQ(ns_->PathLocked(d), "d");
  const uint32_t root_links = root->nlink;
  const uint32_t e_links = e->nlink;
  ASSERT_TRUE(ns_->RenameLocked(root, "d", d, e, "d", nullptr).ok());
  EXPECT_EQ(ns_->PathLocked(sub), "e/d/sub");
  EXPECT_EQ(root->nlink, root_links - 1);
  EXPECT_EQ(e->nlink, e_links + 1);
}

TEST_F(NamespaceTest, MkdirSymlinkAndMknodMakeJournaledNodesWithWhatEachKindCarries) {
  NamespaceLock lock(ns_->mutex());
  InodeRef root = RootLocked();
  const uint32_t root_links = root->nlink;
  Result<InodeRef> dir = ns_->MkdirLocked(kRootIno, "d", 0750, testing_util::Me());
  ASSERT_TRUE(dir.ok()) << dir.status().ToString();
  EXPECT_TRUE((*dir)->complete) << "a new directory has nothing on the backing store to load";
  EXPECT_EQ(root->nlink, root_links + 1);
  Result<InodeRef> link = ns_->SymlinkLocked(kRootIno, "l", "d/target", testing_util::Me());
  ASSERT_TRUE(link.ok());
  EXPECT_EQ((*link)->symlink_target, "d/target");
  Result<InodeRef> fifo = ns_->MknodLocked(kRootIno, "p", S_IFIFO | 0600, 77, testing_util::Me());
  ASSERT_TRUE(fifo.ok());
  EXPECT_EQ((*fifo)->TypeBits(), static_cast<uint32_t>(S_IFIFO));
  EXPECT_EQ((*fifo)->rdev, 0u) << "only a device keeps its device number";
  Result<InodeRef> device =
      ns_->MknodLocked(kRootIno, "c", S_IFCHR | 0600, 77, testing_util::Me());
  ASSERT_TRUE(device.ok());
  EXPECT_EQ((*device)->rdev, 77u);
  std::vector<JournalEntry::Kind> kinds;
  for (const EntryRef& e : journal_.Unflushed()) kinds.push_back(e->kind);
  EXPECT_EQ(kinds, (std::vector<JournalEntry::Kind>{JournalEntry::Kind::kMkdir,
                                                    JournalEntry::Kind::kSymlink,
                                                    JournalEntry::Kind::kMknod,
                                                    JournalEntry::Kind::kMknod}));
  EXPECT_EQ(journal_.Unflushed().back()->rdev, 77u);
  EXPECT_EQ(ns_->MkdirLocked(kRootIno, "l", 0755, testing_util::Me()).status().err(), EEXIST);
  EXPECT_EQ(journal_.pending_entries(), 4u) << "a refused entry is not journaled";
}

TEST_F(NamespaceTest, AnUnlinkedFileGoesWithItsLastNameUnlessTheKernelStillHoldsIt) {
  WriteHostFile(backing_ / "a", "x");
  NamespaceLock lock(ns_->mutex());
  InodeRef root = RootLocked();
  InodeRef a = *ns_->ChildLocked(root, "a");
  ASSERT_TRUE(ns_->LinkLocked(a, kRootIno, "b").ok());
  ASSERT_TRUE(ns_->UnlinkLocked(root, "a", a).ok());
  EXPECT_EQ(a->nlink, 1u);
  EXPECT_EQ(ns_->ChildLocked(root, "a").status().err(), ENOENT);
  EXPECT_EQ(ns_->FindLocked(a->ino), a) << "its other name keeps it";
  a->lookups = 1;
  ASSERT_TRUE(ns_->UnlinkLocked(root, "b", a).ok());
  EXPECT_EQ(a->nlink, 0u);
  EXPECT_EQ(ns_->FindLocked(a->ino), a) << "the kernel still knows it";
  EXPECT_EQ(journal_.Unflushed().back()->kind, JournalEntry::Kind::kUnlink);
  a->lookups = 0;
  ns_->MaybeDropLocked(a);
  EXPECT_EQ(ns_->FindLocked(a->ino), nullptr);
}

TEST_F(NamespaceTest, ARemovedDirectoryLeavesItsParentsLinkCountAndTheListing) {
  ASSERT_EQ(mkdir((backing_ / "d").c_str(), 0755), 0);
  WriteHostFile(backing_ / "f", "x");
  NamespaceLock lock(ns_->mutex());
  InodeRef root = RootLocked();
  std::vector<DirEntry> listed = ns_->ListLocked(root, kRootIno);
  std::set<std::string> names;
  for (const DirEntry& e : listed) names.insert(e.name);
  EXPECT_EQ(names, (std::set<std::string>{".", "..", "d", "f"}));
  EXPECT_EQ(listed[0].name, ".");
  EXPECT_EQ(listed[1].name, "..");
  InodeRef d = *ns_->ChildLocked(root, "d");
  const uint32_t root_links = root->nlink;
  ns_->RmdirLocked(root, "d", d);
  EXPECT_EQ(d->nlink, 0u);
  EXPECT_EQ(root->nlink, root_links - 1);
  EXPECT_EQ(journal_.Unflushed().back()->kind, JournalEntry::Kind::kRmdir);
  names.clear();
  for (const DirEntry& e : ns_->ListLocked(root, kRootIno)) names.insert(e.name);
  EXPECT_EQ(names, (std::set<std::string>{".", "..", "f"}));
}

TEST_F(NamespaceTest, ALinkAddsAJournaledNameButNotToADirectoryATakenNameOrADeletedFile) {
  WriteHostFile(backing_ / "a", "x");
  ASSERT_EQ(mkdir((backing_ / "d").c_str(), 0755), 0);
  NamespaceLock lock(ns_->mutex());
  InodeRef root = RootLocked();
  InodeRef a = *ns_->ChildLocked(root, "a");
  InodeRef d = *ns_->ChildLocked(root, "d");
  const uint32_t links = a->nlink;
  ASSERT_TRUE(ns_->LinkLocked(a, d->ino, "b").ok());
  EXPECT_EQ(a->nlink, links + 1);
  EXPECT_EQ(*ns_->ChildLocked(d, "b"), a);
  ASSERT_EQ(journal_.pending_entries(), 1u);
  EXPECT_EQ(journal_.Unflushed().back()->kind, JournalEntry::Kind::kLink);
  EXPECT_EQ(journal_.Unflushed().back()->new_name, "b");
  EXPECT_EQ(ns_->LinkLocked(a, d->ino, "b").err(), EEXIST);
  EXPECT_EQ(ns_->LinkLocked(d, kRootIno, "d2").err(), EPERM);
  InodeRef deleted = ns_->NewInodeLocked(FileType::kRegular, 0644, testing_util::Me());
  EXPECT_EQ(ns_->LinkLocked(deleted, kRootIno, "c").err(), ENOENT);
  EXPECT_EQ(a->nlink, links + 1) << "refused links change nothing";
}

// Shared mode: other mounts change the backing directory; here the test does, on the host.
class SharedNamespaceTest : public NamespaceTest {
 protected:
  void SetUp() override {
    config_.shared = true;
    NamespaceTest::SetUp();
  }
  // Marks everything journaled so far durable, as the flusher would.
  void MakeJournalDurable() {
    std::vector<EntryRef> batch = journal_.TakeBatch(clock_.Now(), Clock::duration::zero(),
                                                     journal_.last_seq(), 1000, 1ull << 30);
    journal_.Complete(batch, batch.size(), batch.size());
  }
  // Names of the children of `dir` after a listing.
  std::set<std::string> ListedLocked(const InodeRef& dir) REQUIRES(ns_lock) {
    ns_->LoadDirLocked(dir);
    std::set<std::string> names;
    for (const auto& [name, child] : dir->children) names.insert(name);
    return names;
  }
  static constexpr Clock::duration kPastTimeout = kAttrTimeout + std::chrono::milliseconds(1);
};

TEST_F(SharedNamespaceTest, ALookupInAListedDirectoryStillFindsANameAddedOnTheBackingStore) {
  NamespaceLock lock(ns_->mutex());
  InodeRef root = RootLocked();
  ns_->LoadDirLocked(root);
  ASSERT_TRUE(root->complete);
  WriteHostFile(backing_ / "new", "abc");
  Result<InodeRef> found = ns_->ChildLocked(root, "new");
  ASSERT_TRUE(found.ok()) << found.status().ToString();
  EXPECT_EQ(ns_->AttrOf(**found).size, 3u);
}

TEST_F(SharedNamespaceTest, AListingOlderThanTheAttributeTimeoutAddsNewNamesAndForgetsVanishedOnes) {
  WriteHostFile(backing_ / "stays", "1");
  WriteHostFile(backing_ / "goes", "2");
  ASSERT_EQ(mkdir((backing_ / "gone_dir").c_str(), 0755), 0);
  WriteHostFile(backing_ / "gone_dir/inner", "3");
  NamespaceLock lock(ns_->mutex());
  InodeRef root = RootLocked();
  ASSERT_EQ(ListedLocked(root), (std::set<std::string>{"stays", "goes", "gone_dir"}));
  Result<InodeRef> gone_dir = ns_->ChildLocked(root, "gone_dir");
  ASSERT_TRUE(gone_dir.ok());
  ASSERT_EQ(ListedLocked(*gone_dir), (std::set<std::string>{"inner"}));

  WriteHostFile(backing_ / "added", "4");
  ASSERT_EQ(unlink((backing_ / "goes").c_str()), 0);
  std::filesystem::remove_all(backing_ / "gone_dir");
  EXPECT_EQ(ListedLocked(root), (std::set<std::string>{"stays", "goes", "gone_dir"}))
      << "a listing younger than the attribute timeout is served as it was";
  clock_.Advance(kPastTimeout);
  EXPECT_EQ(ListedLocked(root), (std::set<std::string>{"stays", "added"}));
  EXPECT_EQ(ns_->FindLocked((*gone_dir)->ino), nullptr) << "a vanished subtree is forgotten";
}

TEST_F(SharedNamespaceTest, ANameOfThisMountIsKeptWhenTheBackingStoreHasItNot) {
  NamespaceLock lock(ns_->mutex());
  InodeRef root = RootLocked();
  Result<EntryRef> made = ns_->AddNewLocked(kRootIno, "mine", FileType::kSymlink, 0777,
                                            testing_util::Me(), JournalEntry::Kind::kSymlink);
  ASSERT_TRUE(made.ok());
  ns_->AppendLocked(*made);
  clock_.Advance(kPastTimeout);
  EXPECT_EQ(ListedLocked(root), (std::set<std::string>{"mine"}))
      << "its symlink entry is still pending";
}

TEST_F(SharedNamespaceTest, ANameRemovedThroughTheMountStaysHiddenUntilItsRemovalIsDurable) {
  WriteHostFile(backing_ / "f", "x");
  NamespaceLock lock(ns_->mutex());
  InodeRef root = RootLocked();
  ASSERT_EQ(ListedLocked(root), (std::set<std::string>{"f"}));
  Result<InodeRef> f = ns_->ChildLocked(root, "f");
  ASSERT_TRUE(f.ok());
  ns_->RemoveNameLocked(root, "f", *f);
  clock_.Advance(kPastTimeout);
  EXPECT_TRUE(ListedLocked(root).empty()) << "the backing store still has it: the unlink is pending";
  EXPECT_EQ(ns_->ChildLocked(root, "f").status().err(), ENOENT);

  // The removal reaches the backing store; another mount then makes the name again.
  MakeJournalDurable();
  WriteHostFile(backing_ / "f", "again");
  clock_.Advance(kPastTimeout);
  EXPECT_EQ(ListedLocked(root), (std::set<std::string>{"f"}));
}

TEST_F(SharedNamespaceTest, ANameRemovedTwiceStaysHiddenWhileTheFirstRemovalIsPending) {
  WriteHostFile(backing_ / "f", "backing");
  NamespaceLock lock(ns_->mutex());
  InodeRef root = RootLocked();
  Result<InodeRef> found = ns_->ChildLocked(root, "f");
  ASSERT_TRUE(found.ok());
  ns_->RemoveNameLocked(root, "f", *found);
  // A new file of that name, never journaled, removed again.
  InodeRef fresh = ns_->NewInodeLocked(FileType::kRegular, 0644, testing_util::Me());
  ns_->AddNameLocked(root, "f", fresh);
  ns_->RemoveNameLocked(root, "f", fresh);
  EXPECT_EQ(ns_->ChildLocked(root, "f").status().err(), ENOENT);
}

TEST_F(SharedNamespaceTest, AFileHeldOnlyByReferenceFollowsItsBackingFileAfterTheAttributeTimeout) {
  WriteHostFile(backing_ / "f", "old");
  NamespaceLock lock(ns_->mutex());
  InodeRef root = RootLocked();
  Result<InodeRef> f = ns_->LookupLocked(root, "f");
  ASSERT_TRUE(f.ok());
  WriteHostFile(backing_ / "f", "rewritten");
  EXPECT_EQ(ns_->AttrOf(**f).size, 3u) << "younger than the attribute timeout";
  clock_.Advance(kPastTimeout);
  Result<InodeRef> again = ns_->LookupLocked(root, "f");
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*again, *f) << "the same inode, with the backing file's new attributes";
  EXPECT_EQ(ns_->AttrOf(**f).size, 9u);
  {
    MutexLock ilock((*f)->mu);
    EXPECT_TRUE((*f)->page_cache_stale) << "the next open drops the kernel's old pages";
  }
  ASSERT_EQ(unlink((backing_ / "f").c_str()), 0);
  clock_.Advance(kPastTimeout);
  EXPECT_EQ(ns_->LookupLocked(root, "f").status().err(), ENOENT);
  EXPECT_EQ(root->children.count("f"), 0u);
}

TEST_F(SharedNamespaceTest, AFileWithAPendingChangeKeepsThisMountsVersion) {
  WriteHostFile(backing_ / "f", "old");
  NamespaceLock lock(ns_->mutex());
  InodeRef root = RootLocked();
  Result<InodeRef> f = ns_->LookupLocked(root, "f");
  ASSERT_TRUE(f.ok());
  {
    MutexLock ilock((*f)->mu);
    (*f)->mode = 0600;
  }
  ns_->JournalAttrsLocked(*f, /*set_mode=*/true, false, false);
  WriteHostFile(backing_ / "f", "rewritten");
  clock_.Advance(kPastTimeout);
  ASSERT_TRUE(ns_->LookupLocked(root, "f").ok());
  Attr attr = ns_->AttrOf(**f);
  EXPECT_EQ(attr.mode & 07777, 0600u);
  EXPECT_EQ(attr.size, 3u);
}

TEST_F(SharedNamespaceTest, ANewDirectoryIsMadeOnTheBackingStoreAtOnce) {
  NamespaceLock lock(ns_->mutex());
  Result<EntryRef> made = ns_->AddNewLocked(kRootIno, "d", FileType::kDirectory, 0750,
                                            testing_util::Me(), JournalEntry::Kind::kMkdir);
  ASSERT_TRUE(made.ok()) << made.status().ToString();
  struct stat st {};
  ASSERT_EQ(stat((backing_ / "d").c_str(), &st), 0);
  EXPECT_TRUE(S_ISDIR(st.st_mode));
  EXPECT_EQ(st.st_mode & 07777, 0750u);
  EXPECT_NE((*made)->inode->BackingDir(), nullptr);
  EXPECT_TRUE((*made)->inode->on_backing) << "its removal must reach the backing store too";
}

TEST_F(SharedNamespaceTest, ANewDirectoryWhoseNameIsStillBeingRemovedWaitsForTheJournal) {
  ASSERT_EQ(mkdir((backing_ / "d").c_str(), 0755), 0);
  WriteHostFile(backing_ / "d/old", "x");
  NamespaceLock lock(ns_->mutex());
  InodeRef root = RootLocked();
  Result<InodeRef> old = ns_->ChildLocked(root, "d");
  ASSERT_TRUE(old.ok());
  ns_->RemoveNameLocked(root, "d", *old);
  Result<EntryRef> made = ns_->AddNewLocked(kRootIno, "d", FileType::kDirectory, 0755,
                                            testing_util::Me(), JournalEntry::Kind::kMkdir);
  ASSERT_TRUE(made.ok()) << made.status().ToString();
  EXPECT_EQ((*made)->inode->BackingDir(), nullptr);
  EXPECT_TRUE(testing_util::HostExists(backing_ / "d/old")) << "the old directory is untouched";
}

TEST_F(SharedNamespaceTest, ANewDirectoryTheBackingStoreRefusesIsNotAdded) {
  ASSERT_EQ(mkdir((backing_ / "p").c_str(), 0755), 0);
  NamespaceLock lock(ns_->mutex());
  Result<InodeRef> p = ns_->ChildLocked(RootLocked(), "p");
  ASSERT_TRUE(p.ok());
  ASSERT_EQ(rmdir((backing_ / "p").c_str()), 0);
  Result<EntryRef> made = ns_->AddNewLocked((*p)->ino, "d", FileType::kDirectory, 0755,
                                            testing_util::Me(), JournalEntry::Kind::kMkdir);
  EXPECT_EQ(made.status().err(), ENOENT);
  EXPECT_TRUE((*p)->children.empty());
  EXPECT_EQ(journal_.pending_entries(), 0u);
}

}  // namespace
}  // namespace ckptfs
