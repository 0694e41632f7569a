// Tests of the Journal: order, batching, completion, cancellation, durable_seq.
#include "core/tree/journal.h"

#include <gtest/gtest.h>

#include <chrono>

namespace ckptfs {
namespace {

using namespace std::chrono_literals;
using Kind = JournalEntry::Kind;

class JournalTest : public ::testing::Test {
 protected:
  InodeRef NewInode(FileType type = FileType::kRegular) {
    return std::make_shared<Inode>(next_ino_++, type);
  }
  // A publish of `size` bytes of `file` under `dir`/name, sealed at t0_ + `at`.
  EntryRef Publish(const InodeRef& file, const InodeRef& dir, uint64_t size,
                   Clock::duration at = 0s) {
    auto e = std::make_shared<JournalEntry>();
    e->kind = Kind::kPublish;
    e->inode = file;
    e->parent = dir;
    e->name = "f" + std::to_string(file->ino);
    e->names = {Inode::Name{dir, e->name}};
    Reservation none;
    e->snapshot.Truncate(size, none);  // Growing takes no blocks.
    e->sealed_at = t0_ + at;
    return e;
  }
  EntryRef Op(Kind kind, const InodeRef& inode, const InodeRef& parent, Clock::duration at = 0s) {
    auto e = std::make_shared<JournalEntry>();
    e->kind = kind;
    e->inode = inode;
    e->parent = parent;
    e->sealed_at = t0_ + at;
    return e;
  }
  static std::vector<uint64_t> Seqs(const std::vector<EntryRef>& batch) {
    std::vector<uint64_t> out;
    for (const auto& e : batch) out.push_back(e->seq);
    return out;
  }

  Journal j_;
  InodeRef root_ = std::make_shared<Inode>(1, FileType::kDirectory);
  Clock::time_point t0_ = Clock::Steady().Now();
  uint64_t next_ino_ = 16;
};

TEST_F(JournalTest, AppendAssignsIncreasingSeqs) {
  EXPECT_EQ(j_.last_seq(), 0u);
  EXPECT_EQ(j_.durable_seq(), 0u);
  EXPECT_EQ(j_.Append(Publish(NewInode(), root_, 10)), 1u);
  EXPECT_EQ(j_.Append(Op(Kind::kMkdir, NewInode(FileType::kDirectory), root_)), 2u);
  EXPECT_EQ(j_.Append(Publish(NewInode(), root_, 5)), 3u);
  EXPECT_EQ(j_.last_seq(), 3u);
  EXPECT_EQ(j_.durable_seq(), 0u);
  EXPECT_EQ(j_.pending_entries(), 3u);
  EXPECT_EQ(j_.pending_bytes(), 15u);
  ASSERT_EQ(j_.Unflushed().size(), 3u);
  EXPECT_EQ(j_.Unflushed()[1]->seq, 2u);
}

TEST_F(JournalTest, TakeBatchHonorsDelay) {
  j_.Append(Publish(NewInode(), root_, 1, 0ms));
  j_.Append(Publish(NewInode(), root_, 1, 500ms));
  j_.Append(Publish(NewInode(), root_, 1, 100ms));  // Sealed "earlier" but later in order.
  EXPECT_TRUE(j_.TakeBatch(t0_ + 999ms, 1s, 0, 100, 1 << 30).empty());
  EXPECT_EQ(j_.HeadDeadline(1s), t0_ + 1s);
  // Only the head is old enough: strict order means the third waits behind the second.
  auto b = j_.TakeBatch(t0_ + 1200ms, 1s, 0, 100, 1 << 30);
  EXPECT_EQ(Seqs(b), (std::vector<uint64_t>{1}));
  j_.Complete(b, 1, 1);
  EXPECT_EQ(j_.HeadDeadline(1s), t0_ + 1500ms);
  b = j_.TakeBatch(t0_ + 2s, 1s, 0, 100, 1 << 30);
  EXPECT_EQ(Seqs(b), (std::vector<uint64_t>{2, 3}));
}

TEST_F(JournalTest, TakeBatchHonorsForceSeq) {
  for (int i = 0; i < 4; ++i) j_.Append(Publish(NewInode(), root_, 1));
  auto b = j_.TakeBatch(t0_, 1h, /*force_seq=*/2, 100, 1 << 30);
  EXPECT_EQ(Seqs(b), (std::vector<uint64_t>{1, 2}));
  for (const auto& e : b) EXPECT_TRUE(j_.StateOf(e).started);
  EXPECT_FALSE(j_.StateOf(j_.Unflushed()[2]).started);
}

TEST_F(JournalTest, NoSecondBatchWhileOneIsInFlight) {
  for (int i = 0; i < 4; ++i) j_.Append(Publish(NewInode(), root_, 1));
  auto b = j_.TakeBatch(t0_, 0s, 0, 2, 1 << 30);
  EXPECT_EQ(Seqs(b), (std::vector<uint64_t>{1, 2}));
  EXPECT_TRUE(j_.TakeBatch(t0_, 0s, 0, 100, 1 << 30).empty());
  j_.Complete(b, 2, 2);
  EXPECT_EQ(Seqs(j_.TakeBatch(t0_, 0s, 0, 100, 1 << 30)), (std::vector<uint64_t>{3, 4}));
}

TEST_F(JournalTest, TakeBatchHonorsLimits) {
  for (int i = 0; i < 5; ++i) j_.Append(Publish(NewInode(), root_, 100));
  auto b = j_.TakeBatch(t0_, 0s, 0, 3, 1 << 30);
  EXPECT_EQ(b.size(), 3u);
  j_.Complete(b, 3, 3);
  // Byte limit: stop once at least max_bytes are in the batch.
  b = j_.TakeBatch(t0_, 0s, 0, 100, 100);
  EXPECT_EQ(Seqs(b), (std::vector<uint64_t>{4}));
  j_.Complete(b, 1, 1);
  // An entry larger than the limit still goes, alone.
  j_.Append(Publish(NewInode(), root_, 1000));
  b = j_.TakeBatch(t0_, 0s, 0, 100, 10);
  EXPECT_EQ(Seqs(b), (std::vector<uint64_t>{5}));
}

TEST_F(JournalTest, CompleteWithPartialSuccess) {
  for (int i = 0; i < 4; ++i) j_.Append(Publish(NewInode(), root_, 10));
  auto b = j_.TakeBatch(t0_, 0s, 0, 100, 1 << 30);
  ASSERT_EQ(b.size(), 4u);
  j_.Complete(b, 2, 2);
  EXPECT_EQ(j_.durable_seq(), 2u);
  EXPECT_EQ(j_.pending_entries(), 2u);
  EXPECT_EQ(j_.pending_bytes(), 20u);
  EXPECT_TRUE(j_.StateOf(b[0]).done);
  EXPECT_EQ(b[0]->snapshot.size(), 0u);  // Released once durable.
  EXPECT_FALSE(j_.StateOf(b[2]).done);
  EXPECT_FALSE(j_.StateOf(b[2]).started);
  EXPECT_EQ(b[2]->snapshot.size(), 10u);  // Kept for the retry.
  // The failed tail is taken again, from where it stopped.
  auto retry = j_.TakeBatch(t0_, 0s, 0, 100, 1 << 30);
  EXPECT_EQ(Seqs(retry), (std::vector<uint64_t>{3, 4}));
  j_.Complete(retry, 0, 0);
  EXPECT_EQ(j_.durable_seq(), 2u);
  retry = j_.TakeBatch(t0_, 0s, 0, 100, 1 << 30);
  j_.Complete(retry, 2, 2);
  EXPECT_EQ(j_.durable_seq(), 4u);
  EXPECT_EQ(j_.pending_entries(), 0u);
  EXPECT_EQ(j_.pending_bytes(), 0u);
  EXPECT_EQ(j_.HeadDeadline(0s), Clock::time_point::max());
}

TEST_F(JournalTest, HeldEntriesKeepTheSettledPointBelowThemAndTheirSnapshotsUntilReleased) {
  j_.Append(Publish(NewInode(), root_, 10));
  j_.Append(Publish(NewInode(), root_, 10));           // A marker's version, held.
  j_.Append(Op(Kind::kRename, NewInode(), root_));     // A rename to a marker, held.
  j_.Append(Publish(NewInode(), root_, 10));
  auto b = j_.TakeBatch(t0_, 0s, 0, 100, 1 << 30);
  ASSERT_EQ(b.size(), 4u);
  j_.Hold(b[1]);
  j_.Hold(b[2]);
  j_.Complete(b, 4, 4);
  EXPECT_EQ(j_.durable_seq(), 4u);
  EXPECT_EQ(j_.settled_seq(), 1u);
  EXPECT_EQ(Seqs(j_.Held()), (std::vector<uint64_t>{2, 3}));
  EXPECT_EQ(b[0]->snapshot.size(), 0u) << "durable, not held: freed";
  EXPECT_EQ(b[1]->snapshot.size(), 10u) << "held: kept for the partners until released";
  j_.Release(b[1]);
  EXPECT_EQ(b[1]->snapshot.size(), 0u);
  EXPECT_EQ(j_.settled_seq(), 2u);
  j_.Release(b[2]);
  EXPECT_EQ(j_.settled_seq(), 4u);
  EXPECT_TRUE(j_.Held().empty());
}

TEST_F(JournalTest, ReplicasAreTheVersionsAndRenamesSentAsMarkersPendingOrHeldEachOnceInOrder) {
  j_.Append(Publish(NewInode(), root_, 10));                          // 1: durable below.
  j_.Append(Op(Kind::kMkdir, NewInode(FileType::kDirectory), root_));  // 2
  const InodeRef renamed = NewInode();
  j_.Append(Publish(renamed, root_, 7));                              // 3: held below.
  EntryRef to_marker = Op(Kind::kRename, renamed, root_);
  to_marker->sent_as_marker = true;
  Reservation none;
  to_marker->snapshot.Truncate(7, none);
  j_.Append(to_marker);                                               // 4: held below.
  j_.Append(Op(Kind::kRename, NewInode(), root_));                    // 5: another rename.
  j_.Append(Publish(NewInode(), root_, 3));                           // 6: pending.
  auto b = j_.TakeBatch(t0_, 0s, 0, 100, 1 << 30);
  j_.Hold(b[2]);
  j_.Hold(b[3]);
  j_.Complete(b, 4, 4);
  ASSERT_EQ(j_.durable_seq(), 4u);

  std::vector<uint64_t> seqs;
  std::vector<uint64_t> sizes;
  for (const auto& [e, snapshot] : j_.ReplicasAfter(0)) {
    seqs.push_back(e->seq);
    sizes.push_back(snapshot.size());
  }
  EXPECT_EQ(seqs, (std::vector<uint64_t>{3, 4, 6}))
      << "held versions and renames sent as markers, and what is pending";
  EXPECT_EQ(sizes, (std::vector<uint64_t>{7, 7, 3}));
  EXPECT_EQ(j_.ReplicasAfter(4).size(), 1u);
  j_.Release(b[3]);
  EXPECT_EQ(to_marker->snapshot.size(), 0u) << "released and durable: its content is let go";
  EXPECT_EQ(j_.ReplicasAfter(3).size(), 1u) << "published: no longer a replica";
}

TEST_F(JournalTest, DurableSeqAdvancesOverCancelledEntries) {
  auto a = Publish(NewInode(), root_, 10);
  auto b = Publish(NewInode(), root_, 20);
  auto c = Publish(NewInode(), root_, 30);
  j_.Append(a);
  j_.Append(b);
  j_.Append(c);
  j_.Cancel(b);
  EXPECT_EQ(j_.pending_bytes(), 40u);
  EXPECT_TRUE(j_.StateOf(b).cancelled);
  EXPECT_EQ(j_.durable_seq(), 0u);  // a is still ahead of it.
  auto batch = j_.TakeBatch(t0_, 0s, 0, 100, 1 << 30);
  EXPECT_EQ(Seqs(batch), (std::vector<uint64_t>{1, 3}));  // b skipped.
  j_.Complete(batch, 1, 1);
  EXPECT_EQ(j_.durable_seq(), 2u);  // Over the cancelled b, up to c.
  j_.Cancel(c);
  // Cancelling the head alone does not advance; the next journal change does.
  j_.Append(Op(Kind::kMkdir, NewInode(FileType::kDirectory), root_));
  EXPECT_EQ(j_.durable_seq(), 3u);
  EXPECT_EQ(j_.pending_bytes(), 0u);
}

TEST_F(JournalTest, CancelUnsentCancelsEveryEntryOfAFileThatNeverReachedTheStore) {
  InodeRef f = NewInode();
  InodeRef other = NewInode();
  j_.Append(Publish(f, root_, 10));
  j_.Append(Publish(other, root_, 7));
  j_.Append(Publish(f, root_, 20));
  auto unlink = Op(Kind::kUnlink, root_, root_);
  unlink->victim = f;
  j_.Append(unlink);
  EXPECT_EQ(j_.CancelUnsent(f), 2u);  // Two versions.
  EXPECT_TRUE(j_.StateOf(unlink).cancelled);
  EXPECT_EQ(j_.pending_bytes(), 7u);
  auto batch = j_.TakeBatch(t0_, 0s, 0, 100, 1 << 30);
  EXPECT_EQ(Seqs(batch), (std::vector<uint64_t>{2}));
  j_.Complete(batch, 1, 1);
  EXPECT_EQ(j_.durable_seq(), 4u);
  EXPECT_EQ(j_.pending_entries(), 0u);
}

TEST_F(JournalTest, CancelUnsentLeavesFilesOnTheBackingStore) {
  InodeRef f = NewInode();
  f->on_backing = true;
  auto e = Publish(f, root_, 10);
  j_.Append(e);
  EXPECT_EQ(j_.CancelUnsent(f), 0u);
  EXPECT_FALSE(j_.StateOf(e).cancelled);
}

TEST_F(JournalTest, CancelUnsentNeverCancelsStartedEntries) {
  InodeRef f = NewInode();
  auto first = Publish(f, root_, 10);
  auto second = Publish(f, root_, 20);
  j_.Append(first);
  j_.Append(second);
  auto batch = j_.TakeBatch(t0_, 1h, /*force_seq=*/1, 100, 1 << 30);
  ASSERT_EQ(Seqs(batch), (std::vector<uint64_t>{1}));
  EXPECT_EQ(j_.CancelUnsent(f), 0u);
  EXPECT_FALSE(j_.StateOf(first).cancelled);
  EXPECT_FALSE(j_.StateOf(second).cancelled);  // Nothing of the file: it will exist on the store.
  EXPECT_EQ(first->snapshot.size(), 10u);
}

TEST_F(JournalTest, CancelUnsentKeepsADirectoryStillNeededAsAParent) {
  InodeRef dir = NewInode(FileType::kDirectory);
  auto mkdir = Op(Kind::kMkdir, dir, root_);
  j_.Append(mkdir);
  InodeRef f = NewInode();
  auto pub = Publish(f, dir, 5);  // A file published inside it.
  j_.Append(pub);
  EXPECT_EQ(j_.CancelUnsent(dir), 0u);
  EXPECT_FALSE(j_.StateOf(mkdir).cancelled);

  // A rename out of the directory also needs it (as the source parent).
  Journal j2;
  InodeRef dir2 = NewInode(FileType::kDirectory);
  auto mkdir2 = Op(Kind::kMkdir, dir2, root_);
  j2.Append(mkdir2);
  auto rename = Op(Kind::kRename, NewInode(), dir2);
  rename->new_parent = root_;
  j2.Append(rename);
  j2.CancelUnsent(dir2);
  EXPECT_FALSE(j2.StateOf(mkdir2).cancelled);

  // And as a rename destination.
  Journal j3;
  InodeRef dir3 = NewInode(FileType::kDirectory);
  auto mkdir3 = Op(Kind::kMkdir, dir3, root_);
  j3.Append(mkdir3);
  auto rename3 = Op(Kind::kRename, NewInode(), root_);
  rename3->new_parent = dir3;
  j3.Append(rename3);
  j3.CancelUnsent(dir3);
  EXPECT_FALSE(j3.StateOf(mkdir3).cancelled);

  // Once nothing needs it, its mkdir and rmdir both go.
  Journal j4;
  InodeRef dir4 = NewInode(FileType::kDirectory);
  auto mkdir4 = Op(Kind::kMkdir, dir4, root_);
  j4.Append(mkdir4);
  auto rmdir4 = Op(Kind::kRmdir, root_, root_);
  rmdir4->victim = dir4;
  j4.Append(rmdir4);
  j4.CancelUnsent(dir4);
  EXPECT_TRUE(j4.StateOf(mkdir4).cancelled);
  EXPECT_TRUE(j4.StateOf(rmdir4).cancelled);
  EXPECT_EQ(j4.durable_seq(), 2u);
}

TEST_F(JournalTest, CancelledOrDoneEntriesAreIgnoredByCancelUnsent) {
  InodeRef dir = NewInode(FileType::kDirectory);
  auto mkdir = Op(Kind::kMkdir, dir, root_);
  j_.Append(mkdir);
  auto pub = Publish(NewInode(), dir, 5);
  j_.Append(pub);
  j_.Cancel(pub);  // The only user of dir is gone.
  auto rmdir = Op(Kind::kRmdir, root_, root_);
  rmdir->victim = dir;
  j_.Append(rmdir);
  j_.CancelUnsent(dir);
  EXPECT_TRUE(j_.StateOf(mkdir).cancelled);
  EXPECT_EQ(j_.durable_seq(), 3u);
}

// Regression (see FilesystemTest.RegressionUnlinkOfUnflushedFileRenamedOverBackingFile): a file
// that never reached the store was renamed over one that is there; cancelling the new file's
// entries must keep the removal of the replaced file.
TEST_F(JournalTest, CancelUnsentKeepsTheRemovalOfARenameVictim) {
  InodeRef old_file = NewInode();
  old_file->on_backing = true;
  InodeRef f = NewInode();
  j_.Append(Publish(f, root_, 3));  // "x.tmp"
  auto rename = Op(Kind::kRename, f, root_);
  rename->name = "x.tmp";
  rename->new_parent = root_;
  rename->new_name = "b";
  rename->victim = old_file;
  j_.Append(rename);
  auto unlink = Op(Kind::kUnlink, root_, root_);
  unlink->name = "b";
  unlink->victim = f;
  j_.Append(unlink);
  j_.CancelUnsent(f);
  bool removes_old = false;
  for (const EntryRef& e : j_.Unflushed()) {
    bool renames_over = e->kind == Kind::kRename && e->victim == old_file;
    bool unlinks = e->kind == Kind::kUnlink && e->new_name.empty() && e->name == "b";
    removes_old |= renames_over || unlinks;
  }
  EXPECT_TRUE(removes_old) << "nothing pending removes \"b\" from the backing store any more";
}

}  // namespace
}  // namespace ckptfs
