// Tests of the kernel state record (core/recovery/kernel_state_record.h) and of what
// Filesystem::RecoverCrashedWorker takes over from it: a worker that dies with files open for
// writing and directories the kernel knows leaves them to the next, which answers the same
// handles and nodes.
#include "core/recovery/kernel_state_record.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>
#include <sys/wait.h>
#include <signal.h>

#include <algorithm>
#include <climits>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "core/backing/backing_store.h"
#include "core/memory/arena.h"
#include "core_test_util.h"

namespace ckptfs {
namespace {

using namespace std::chrono_literals;
using namespace testing_util;
using Blocks = std::vector<std::pair<uint64_t, uint64_t>>;

constexpr uint64_t kCapacityBlocks = 64;

class KernelStateRecordTest : public ::testing::Test {
 protected:
  std::vector<char> memory_ =
      std::vector<char>(KernelStateRecord::Bytes(kCapacityBlocks) + 64);
  // Aligned for the record's atomics.
  char* memory() {
    return memory_.data() + (64 - reinterpret_cast<uintptr_t>(memory_.data()) % 64);
  }
};

const KernelStateRecord::Node* NodeOf(const KernelStateRecord::State& s, uint64_t ino) {
  for (const auto& n : s.nodes) {
    if (n.ino == ino) return &n;
  }
  return nullptr;
}

TEST_F(KernelStateRecordTest, NodesHandlesAndTheNewestBlockOfEachIndexAreReadBack) {
  {
    KernelStateRecord crashed(memory(), kCapacityBlocks);
    ASSERT_EQ(crashed.AddNode(20, true, kRootIno, "ckpt"), 0);
    const int file = crashed.AddNode(21, false, 20, "model.pt");
    ASSERT_GE(file, 0);
    ASSERT_GE(crashed.AddHandle(0xabc, 21, O_WRONLY), 0);
    const uint64_t begun = crashed.BeginContent(file, 0, {}, 0640, 7, 8);
    crashed.Tag(3, 21, 0, begun);
    crashed.Tag(4, 21, 1, crashed.NextStamp());
    crashed.Tag(9, 21, 1, crashed.NextStamp());  // Index 1 copied on write: the newer block.
    crashed.Tag(5, 99, 0, crashed.NextStamp());  // Another file's, not recorded.
    crashed.SetSize(file, 2 * kBlockSize);
    crashed.SetName(0, kRootIno, "ckpt.renamed");
    crashed.SetName(file, 20, "model.pt.renamed");
  }
  KernelStateRecord next(memory(), kCapacityBlocks);
  const KernelStateRecord::State s = next.Read();
  EXPECT_EQ(s.refused, 0u);
  ASSERT_EQ(s.nodes.size(), 2u);
  const auto* dir = NodeOf(s, 20);
  ASSERT_TRUE(dir);
  EXPECT_TRUE(dir->directory);
  EXPECT_EQ(dir->parent, kRootIno);
  EXPECT_EQ(dir->name, "ckpt.renamed");
  const auto* file = NodeOf(s, 21);
  ASSERT_TRUE(file);
  EXPECT_EQ(file->parent, 20u);
  EXPECT_EQ(file->name, "model.pt.renamed");
  EXPECT_EQ(s.PathOf(*file), "ckpt.renamed/model.pt.renamed");
  EXPECT_TRUE(file->content);
  EXPECT_EQ(file->size, 2 * kBlockSize);
  EXPECT_EQ(file->mode, 0640u);
  EXPECT_EQ(file->uid, 7u);
  EXPECT_EQ(file->blocks, (Blocks{{0, 3}, {1, 9}}));
  ASSERT_EQ(s.handles.size(), 1u);
  EXPECT_EQ(s.handles[0].fh, 0xabcu);
  EXPECT_EQ(s.handles[0].ino, 21u);
  EXPECT_EQ(s.handles[0].flags, O_WRONLY);
  next.Clear();
  EXPECT_TRUE(next.Read().nodes.empty());
  EXPECT_TRUE(next.Read().handles.empty());
}

TEST_F(KernelStateRecordTest, BlocksTaggedBeforeTheContentWasRecordedAgainAreNotItsOwn) {
  KernelStateRecord r(memory(), kCapacityBlocks);
  const int file = r.AddNode(21, false, kRootIno, "f");
  r.BeginContent(file, 3 * kBlockSize, {}, 0644, 0, 0);
  r.Tag(1, 21, 0, r.NextStamp());
  r.Tag(2, 21, 2, r.NextStamp());
  // Truncated to one block: recorded whole again, its remaining block tagged anew.
  const uint64_t again = r.BeginContent(file, kBlockSize, {}, 0644, 0, 0);
  r.Tag(1, 21, 0, again);
  EXPECT_EQ(NodeOf(r.Read(), 21)->blocks, (Blocks{{0, 1}}));
  r.SetSize(file, 3 * kBlockSize);  // Grown again: the old block 2 stays out.
  EXPECT_EQ(NodeOf(r.Read(), 21)->blocks, (Blocks{{0, 1}}));
  // Spilled: over the first bytes of a spill file.
  r.Tag(1, 21, 0, r.BeginContent(file, 3 * kBlockSize, {false, "spill-0-1", 2 * kBlockSize},
                                 0644, 0, 0));
  EXPECT_EQ(NodeOf(r.Read(), 21)->base.spill, "spill-0-1");
  EXPECT_EQ(NodeOf(r.Read(), 21)->base.length, 2 * kBlockSize);
  EXPECT_EQ(NodeOf(r.Read(), 21)->blocks, (Blocks{{0, 1}}));
  // Over a file that cannot be named: not recoverable.
  r.BeginContent(file, 3 * kBlockSize, {true, "", 0}, 0644, 0, 0);
  EXPECT_TRUE(NodeOf(r.Read(), 21)->base.other_file);
  EXPECT_TRUE(NodeOf(r.Read(), 21)->blocks.empty());
}

TEST_F(KernelStateRecordTest, AWorkerThatDiesWhileRecordingAllAgainLeavesTheNewerRecordOfEachFile) {
  {
    KernelStateRecord crashed(memory(), kCapacityBlocks);
    const int file = crashed.AddNode(21, false, kRootIno, "f");
    ASSERT_GE(crashed.AddHandle(0xabc, 21, O_WRONLY), 0);
    crashed.Tag(3, 21, 0, crashed.BeginContent(file, kBlockSize, {}, 0644, 0, 0));
  }
  {
    // The next worker records everything again, under its own node id (and once under the
    // same one), and dies before it removes the entries it found.
    KernelStateRecord next(memory(), kCapacityBlocks);
    const KernelStateRecord::Entries before = next.InUse();
    EXPECT_EQ(before.nodes.size(), 1u);
    EXPECT_EQ(before.handles.size(), 1u);
    const int file = next.AddNode(121, false, kRootIno, "f");
    ASSERT_GE(next.AddHandle(0xabc, 121, O_WRONLY), 0);
    const uint64_t begun = next.BeginContent(file, 2 * kBlockSize, {}, 0600, 0, 0);
    next.Tag(3, 121, 0, begun);
    next.Tag(7, 121, 1, begun);
  }
  KernelStateRecord third(memory(), kCapacityBlocks);
  const KernelStateRecord::State s = third.Read();
  EXPECT_EQ(s.refused, 0u);
  ASSERT_TRUE(NodeOf(s, 121) && NodeOf(s, 21));
  EXPECT_TRUE(NodeOf(s, 121)->content);
  EXPECT_EQ(NodeOf(s, 121)->blocks, (Blocks{{0, 3}, {1, 7}}));
  EXPECT_EQ(NodeOf(s, 121)->mode, 0600u);
  EXPECT_FALSE(NodeOf(s, 21)->content) << "the older record is a plain node of the same path";
  EXPECT_EQ(NodeOf(s, 21)->name, "f");
  ASSERT_EQ(s.handles.size(), 1u) << "one handle, recorded twice";
  // A third worker records again under the same node id, then removes what it found.
  const KernelStateRecord::Entries found = third.InUse();
  const int again = third.AddNode(121, false, kRootIno, "f");
  third.Tag(9, 121, 0, third.BeginContent(again, kBlockSize, {}, 0640, 0, 0));
  const KernelStateRecord::State both = third.Read();
  const auto newest = std::find_if(both.nodes.begin(), both.nodes.end(),
                                   [](const auto& n) { return n.ino == 121 && n.content; });
  ASSERT_NE(newest, both.nodes.end());
  EXPECT_EQ(newest->blocks, (Blocks{{0, 9}}));
  EXPECT_EQ(newest->mode, 0640u);
  EXPECT_EQ(std::count_if(both.nodes.begin(), both.nodes.end(),
                          [](const auto& n) { return n.content; }),
            1);
  third.Remove(found);
  ASSERT_EQ(third.Read().nodes.size(), 1u);
  EXPECT_TRUE(third.Read().nodes[0].content);
  EXPECT_TRUE(third.Read().handles.empty());
}

TEST_F(KernelStateRecordTest, APathDeeperThanPathMaxIsKeptAsItsDirectoriesAndNames) {
  // 30 directories of 200-byte names: 6,000 bytes from the root, as openat reaches them.
  std::string path;
  {
    KernelStateRecord crashed(memory(), kCapacityBlocks);
    uint64_t parent = kRootIno;
    for (uint64_t level = 0; level < 30; ++level) {
      const std::string name = std::string(199, 'a' + level % 26) + std::to_string(level % 10);
      ASSERT_GE(crashed.AddNode(100 + level, true, parent, name), 0);
      path += name + "/";
      parent = 100 + level;
    }
    const int file = crashed.AddNode(7, false, parent, std::string(255, 'f'));
    ASSERT_GE(file, 0);
    crashed.BeginContent(file, 0, {}, 0644, 0, 0);
    path += std::string(255, 'f');
  }
  ASSERT_GT(path.size(), size_t{PATH_MAX});
  KernelStateRecord next(memory(), kCapacityBlocks);
  const KernelStateRecord::State s = next.Read();
  EXPECT_EQ(s.refused, 0u);
  ASSERT_TRUE(NodeOf(s, 7));
  EXPECT_EQ(s.PathOf(*NodeOf(s, 7)), path);
  // A directory on the way not recorded: no path, rather than a wrong one.
  next.RemoveNode(10);
  const KernelStateRecord::State broken = next.Read();
  ASSERT_FALSE(NodeOf(broken, 110));
  EXPECT_EQ(broken.PathOf(*NodeOf(broken, 7)), "");
}

TEST_F(KernelStateRecordTest, NamesThatAreNotNamesAreRefusedAndRemovedEntriesAreReused) {
  KernelStateRecord r(memory(), kCapacityBlocks);
  EXPECT_EQ(r.AddNode(20, true, kRootIno, std::string(KernelStateRecord::kMaxName + 1, 'a')), -1);
  EXPECT_EQ(r.AddNode(20, true, kRootIno, "a/b"), -1);
  EXPECT_EQ(r.AddNode(20, true, kRootIno, ".."), -1);
  EXPECT_EQ(r.AddNode(20, true, 0, "a"), -1) << "a name in no directory";
  EXPECT_EQ(r.AddNode(20, true, kRootIno, ""), -1) << "a directory and no name";
  std::vector<int> nodes;
  for (size_t i = 0; i < KernelStateRecord::kNodes; ++i) {
    nodes.push_back(r.AddNode(100 + i, true, kRootIno, "d" + std::to_string(i)));
    ASSERT_GE(nodes.back(), 0);
  }
  EXPECT_EQ(r.AddNode(1, true, kRootIno, "full"), -1);
  r.RemoveNode(nodes[5]);
  EXPECT_EQ(r.AddNode(1, true, kRootIno, "again"), nodes[5]);
  EXPECT_EQ(r.Read().nodes.size(), KernelStateRecord::kNodes);
}

TEST_F(KernelStateRecordTest, AnOperationHasRoomWhileEachTableIsAtMostHalfFull) {
  KernelStateRecord r(memory(), kCapacityBlocks);
  constexpr size_t kHalf = KernelStateRecord::kNodes / 2;
  std::vector<int> nodes;
  for (size_t i = 0; i + 1 < kHalf; ++i) {
    nodes.push_back(r.AddNode(100 + i, true, kRootIno, "d" + std::to_string(i)));
  }
  EXPECT_TRUE(r.HasRoom(1, 0));
  EXPECT_FALSE(r.HasRoom(2, 0));
  ASSERT_GE(r.AddNode(99, false, kRootIno, "last"), 0);
  EXPECT_FALSE(r.HasRoom(1, 0));
  EXPECT_TRUE(r.HasRoom(0, KernelStateRecord::kHandles / 2));
  EXPECT_FALSE(r.HasRoom(0, KernelStateRecord::kHandles / 2 + 1));
  // The other half is the next worker's, to record everything anew beside what it found.
  EXPECT_GE(r.AddNode(98, true, kRootIno, "beyond"), 0);
  r.RemoveNode(nodes[0]);
  r.RemoveNode(nodes[1]);
  EXPECT_TRUE(r.HasRoom(1, 0));
}

TEST_F(KernelStateRecordTest, HostileBytesAreRefusedOrBoundedNeverACrash) {
  {
    KernelStateRecord r(memory(), kCapacityBlocks);
    const int dir = r.AddNode(20, true, kRootIno, "ckpt");
    const int file = r.AddNode(21, false, 20, "f");
    r.AddHandle(0x1234, 21, O_RDWR);
    const uint64_t stamp =
        r.BeginContent(file, 5 * kBlockSize, {false, "spill-0-7", 100}, 0644, 0, 0);
    for (uint64_t i = 0; i < 5; ++i) r.Tag(10 + i, 21, i, stamp);
    (void)dir;
  }
  const size_t bytes = KernelStateRecord::Bytes(kCapacityBlocks);
  const std::vector<char> good(memory(), memory() + bytes);
  // The header and first node entries, the first handle entries, and the slots' tags.
  const size_t tags = bytes - kCapacityBlocks * 24;
  const size_t handles = tags - KernelStateRecord::kHandles * 32;
  const std::pair<size_t, size_t> regions[] = {{0, 8192}, {handles, 256}, {tags, 24 * 32}};
  std::mt19937_64 rng(1234);
  for (int round = 0; round < 300; ++round) {
    std::copy(good.begin(), good.end(), memory());
    for (int flips = 0; flips < 8; ++flips) {
      const auto& [start, length] = regions[rng() % 3];
      memory()[start + rng() % length] ^= static_cast<char>(1 << (rng() % 8));
    }
    // Names, parents, sizes, stamps and indices flipped: whatever is read is checked.
    KernelStateRecord r(memory(), kCapacityBlocks);
    const KernelStateRecord::State s = r.Read();
    for (const auto& n : s.nodes) {
      EXPECT_TRUE(n.name.empty() ? n.parent == 0 : n.parent != 0 && CheckName(n.name).ok())
          << n.name;
      const std::string path = s.PathOf(n);
      EXPECT_TRUE(path.empty() || ValidRelativePath(path)) << path;
      EXPECT_TRUE(n.base.spill.empty() || IsSpillFileName(n.base.spill)) << n.base.spill;
      for (const auto& [index, slot] : n.blocks) {
        EXPECT_LT(slot, kCapacityBlocks);
        EXPECT_LT(index * kBlockSize, n.size);
      }
    }
  }
  // A torn name (a rename the worker died in) is refused, not taken.
  std::copy(good.begin(), good.end(), memory());
  {
    KernelStateRecord r(memory(), kCapacityBlocks);
    auto* name_state = reinterpret_cast<std::atomic<uint32_t>*>(memory() + 4096 + 4);
    name_state->store(1);
    const KernelStateRecord::State s = r.Read();
    EXPECT_EQ(s.refused, 1u);
    EXPECT_FALSE(NodeOf(s, 20));
  }
}

class KernelStateRecoveryTest : public ::testing::Test {
 protected:
  std::string B(const std::string& rel) const { return backing_ / rel; }
  std::unique_ptr<Filesystem> Next(uint32_t worker) {
    return StartFs(backing_.path(), {.flush_delay = 0ms, .worker = worker, .arena_fd = arena_fd_,
                                     .recover = true});
  }

  TempDir backing_;
  ArenaMemory memory_;
  const int arena_fd_ = memory_.fd();
};

TEST_F(KernelStateRecoveryTest, AFileOpenForWritingGoesOnThroughTheSameHandleAfterACrash) {
  const std::string head = Pattern(1, 5 * kBlockSize + 100);
  const std::string tail = Pattern(2, 3 * kBlockSize + 7);
  uint64_t handle, dir_ino, file_ino;
  {
    auto crashed = StartFs(backing_.path(), {.flush_delay = 3600s, .arena_fd = arena_fd_});
    ASSERT_TRUE(crashed->Mkdir(kRootIno, "iter_1", 0755, Me()).ok());
    dir_ino = Resolve(*crashed, "iter_1")->ino;
    Result<uint64_t> opened = CreatePath(*crashed, "iter_1/model.pt");
    ASSERT_TRUE(opened.ok());
    handle = *opened;
    file_ino = Resolve(*crashed, "iter_1/model.pt")->ino;
    ASSERT_TRUE(WriteHandle(*crashed, handle, 0, head).ok());
  }
  auto next = Next(1);
  Filesystem& b = *next;
  EXPECT_NE(b.StatsJson().find("\"recovered_handles\": 1"), std::string::npos) << b.StatsJson();
  // The kernel's nodes of the crashed worker are answered.
  Result<Attr> dir = b.GetAttr(dir_ino);
  ASSERT_TRUE(dir.ok()) << dir.status().ToString();
  EXPECT_TRUE(S_ISDIR(dir->mode));
  Result<Attr> file = b.Lookup(dir_ino, "model.pt");
  ASSERT_TRUE(file.ok()) << file.status().ToString();
  EXPECT_EQ(file->size, head.size());
  EXPECT_EQ(b.GetAttr(file_ino)->size, head.size());
  EXPECT_EQ(*ReadHandle(b, handle, head.size()), head);
  ASSERT_TRUE(WriteHandle(b, handle, head.size(), tail).ok());
  ASSERT_TRUE(b.Flush(handle, 0).ok());
  ASSERT_TRUE(b.Release(handle).ok());
  ASSERT_TRUE(b.Sync().ok());
  EXPECT_TRUE(SameBytes(*ReadHostFile(B("iter_1/model.pt")), head + tail));
  EXPECT_TRUE(b.Shutdown().ok());
}

// The bytes of the file at `names` under the directory `root`, opened one name at a time (the
// whole path may be longer than PATH_MAX).
std::optional<std::string> ReadHostFileAt(const std::string& root,
                                          const std::vector<std::string>& names) {
  int dir = open(root.c_str(), O_RDONLY | O_DIRECTORY);
  for (size_t i = 0; dir >= 0 && i + 1 < names.size(); ++i) {
    const int next = openat(dir, names[i].c_str(), O_RDONLY | O_DIRECTORY);
    close(dir);
    dir = next;
  }
  if (dir < 0) return std::nullopt;
  const int fd = openat(dir, names.back().c_str(), O_RDONLY);
  close(dir);
  if (fd < 0) return std::nullopt;
  std::string bytes;
  char buf[65536];
  for (ssize_t n; (n = read(fd, buf, sizeof buf)) > 0;) bytes.append(buf, n);
  close(fd);
  return bytes;
}

TEST_F(KernelStateRecoveryTest, AFileOpenDeeperThanPathMaxGoesOnThroughTheSameHandleAfterACrash) {
  // 25 directories of 200-byte names and a file of 255: 5,280 bytes from the root.
  std::vector<std::string> names;
  for (int level = 0; level < 25; ++level) names.push_back(std::string(200, 'a' + level));
  names.push_back(std::string(255, 'f'));
  const std::string head = Pattern(8, 2 * kBlockSize + 10);
  uint64_t handle, dir_ino;
  {
    auto crashed = StartFs(backing_.path(), {.flush_delay = 3600s, .arena_fd = arena_fd_});
    uint64_t dir = kRootIno;
    for (size_t i = 0; i + 1 < names.size(); ++i) {
      Result<Attr> made = crashed->Mkdir(dir, names[i], 0755, Me());
      ASSERT_TRUE(made.ok()) << made.status().ToString();
      dir = made->ino;
    }
    dir_ino = dir;
    Result<OpenFile> created =
        crashed->Create(dir, names.back(), 0640, O_WRONLY | O_CREAT | O_EXCL, Me());
    ASSERT_TRUE(created.ok()) << created.status().ToString();
    handle = created->handle;
    ASSERT_TRUE(WriteHandle(*crashed, handle, 0, head).ok());
  }
  auto next = Next(1);
  Filesystem& b = *next;
  EXPECT_EQ(StatOf(b, "recovered_handles"), 1u);
  Result<Attr> file = b.Lookup(dir_ino, names.back());
  ASSERT_TRUE(file.ok()) << "the deepest directory's node: " << file.status().ToString();
  EXPECT_EQ(file->size, head.size());
  EXPECT_TRUE(SameBytes(*ReadHandle(b, handle, head.size() + 10), head));
  ASSERT_TRUE(WriteHandle(b, handle, head.size(), "after the crash").ok());
  ASSERT_TRUE(Close(b, handle).ok());
  ASSERT_TRUE(b.Sync().ok());
  std::optional<std::string> stored = ReadHostFileAt(backing_.path(), names);
  ASSERT_TRUE(stored.has_value());
  EXPECT_TRUE(SameBytes(*stored, head + "after the crash"));
  EXPECT_TRUE(b.Shutdown().ok());
}

TEST_F(KernelStateRecoveryTest, AFullRecordRefusesNewOpensWithEnfileAndEveryOpenFileOutlivesACrash) {
  constexpr size_t kFiles = KernelStateRecord::kNodes / 2;
  std::vector<uint64_t> handles;
  {
    auto crashed = StartFs(backing_.path(), {.flush_delay = 3600s, .arena_fd = arena_fd_});
    Filesystem& a = *crashed;
    ASSERT_TRUE(WriteFile(a, "closed", "c").ok());
    ASSERT_TRUE(a.Mkdir(kRootIno, "d", 0755, Me()).ok());
    const uint64_t closed = Resolve(a, "closed")->ino;
    // Files open for writing until the record's operating half is taken: the directory, and
    // one node and one handle for each file.
    for (size_t i = 0; i + 1 < kFiles; ++i) {
      Result<OpenFile> f =
          a.Create(kRootIno, "f" + std::to_string(i), 0644, O_WRONLY | O_CREAT, Me());
      ASSERT_TRUE(f.ok()) << i << ": " << f.status().ToString();
      handles.push_back(f->handle);
      // A few bytes in some of them (a block each: more would fill this test's cache).
      if (i % 1024 == 0) {
        ASSERT_TRUE(WriteHandle(a, f->handle, 0, std::to_string(i)).ok());
      }
    }
    EXPECT_EQ(a.Create(kRootIno, "one more", 0644, O_WRONLY | O_CREAT, Me()).status().err(),
              ENFILE);
    EXPECT_EQ(a.Open(closed, O_RDONLY).status().err(), ENFILE);
    EXPECT_EQ(a.Mkdir(kRootIno, "e", 0755, Me()).status().err(), ENFILE);
    EXPECT_EQ(StatOf(a, "kernel_record_refused"), 3u);
    EXPECT_EQ(a.Lookup(kRootIno, "one more").status().err(), ENOENT) << "nothing made";
    ASSERT_TRUE(a.Release(handles.back()).ok());
    handles.pop_back();
    Result<OpenFile> again = a.Open(closed, O_RDONLY);
    ASSERT_TRUE(again.ok()) << "room again: " << again.status().ToString();
    handles.push_back(again->handle);
  }
  auto next = Next(1);
  Filesystem& b = *next;
  EXPECT_EQ(StatOf(b, "recovered_handles"), handles.size()) << "every open file, none refused";
  EXPECT_EQ(*ReadHandle(b, handles.back(), 10), "c");
  for (size_t i = 0; i + 1 < handles.size(); i += 1024) {
    ASSERT_TRUE(WriteHandle(b, handles[i], std::to_string(i).size(), "+").ok()) << i;
  }
  ASSERT_TRUE(WriteHandle(b, handles[kFiles - 3], 0, "last").ok());
  for (uint64_t h : handles) ASSERT_TRUE(Close(b, h).ok());
  ASSERT_TRUE(b.Sync().ok());
  EXPECT_EQ(*ReadHostFile(B("f0")), "0+");
  EXPECT_EQ(*ReadHostFile(B("f1024")), "1024+");
  EXPECT_EQ(*ReadHostFile(B("f1")), "");
  EXPECT_EQ(*ReadHostFile(B("f" + std::to_string(kFiles - 3))), "last");
  EXPECT_TRUE(b.Shutdown().ok());
}

TEST_F(KernelStateRecoveryTest, TheNewestBytesOfAnOpenFileAreRecoveredAfterSealsAndTruncates) {
  const std::string first = Pattern(3, 6 * kBlockSize);
  std::string expected;
  uint64_t handle;
  {
    auto crashed = StartFs(backing_.path(), {.flush_delay = 3600s, .arena_fd = arena_fd_});
    Filesystem& a = *crashed;
    Result<uint64_t> opened = CreatePath(a, "f.tmp");
    ASSERT_TRUE(opened.ok());
    handle = *opened;
    ASSERT_TRUE(WriteHandle(a, handle, 0, first).ok());
    ASSERT_TRUE(a.Fsync(handle).ok()) << "sealed: its blocks are shared with that version";
    ASSERT_TRUE(WriteHandle(a, handle, kBlockSize + 5, "changed after the seal").ok());
    SetAttrRequest shrink;
    shrink.size = 3 * kBlockSize + 1;
    const uint64_t ino = Resolve(a, "f.tmp")->ino;
    ASSERT_TRUE(a.SetAttr(ino, shrink, handle).ok());
    ASSERT_TRUE(WriteHandle(a, handle, 5 * kBlockSize, "past a hole").ok());
    ASSERT_TRUE(a.Rename(kRootIno, "f.tmp", kRootIno, "f", 0).ok());
    expected = first.substr(0, 3 * kBlockSize + 1);
    expected.replace(kBlockSize + 5, 22, "changed after the seal");
    expected.resize(5 * kBlockSize, '\0');
    expected += "past a hole";
    ASSERT_TRUE(SameBytes(*ReadHandle(a, handle, expected.size() + 10), expected));
  }
  auto next = Next(1);
  EXPECT_TRUE(SameBytes(*ReadHandle(*next, handle, expected.size() + 10), expected));
  EXPECT_TRUE(SameBytes(*ReadFile(*next, "f"), expected));
  ASSERT_TRUE(next->Release(handle).ok());
  ASSERT_TRUE(next->Sync().ok());
  EXPECT_TRUE(SameTree(HostTree(backing_.path()), {{"f", expected}}));
  EXPECT_TRUE(next->Shutdown().ok());
}

TEST_F(KernelStateRecoveryTest, TwoCrashesInARowLeaveTheSameOpenFileAndNodesToTheThird) {
  const std::string bytes = Pattern(4, 2 * kBlockSize + 3);
  uint64_t handle, dir_ino;
  {
    auto crashed = StartFs(backing_.path(), {.flush_delay = 3600s, .arena_fd = arena_fd_});
    ASSERT_TRUE(crashed->Mkdir(kRootIno, "d", 0755, Me()).ok());
    dir_ino = Resolve(*crashed, "d")->ino;
    Result<uint64_t> opened = CreatePath(*crashed, "d/open");
    ASSERT_TRUE(opened.ok());
    handle = *opened;
    ASSERT_TRUE(WriteHandle(*crashed, handle, 0, bytes).ok());
  }
  { auto recovered_then_crashed = Next(1); }
  auto third = Next(2);
  EXPECT_TRUE(third->GetAttr(dir_ino).ok()) << "the first worker's node, through two takeovers";
  EXPECT_TRUE(SameBytes(*ReadHandle(*third, handle, bytes.size()), bytes));
  ASSERT_TRUE(third->Release(handle).ok());
  ASSERT_TRUE(third->Sync().ok());
  EXPECT_TRUE(SameBytes(*ReadHostFile(B("d/open")), bytes));
  EXPECT_TRUE(third->Shutdown().ok());
}

TEST_F(KernelStateRecoveryTest, ADirectoryLookedUpAgainAfterATakeoverKeepsBothNodeIdsThroughTheNext) {
  uint64_t first;
  {
    auto crashed = StartFs(backing_.path(), {.flush_delay = 3600s, .arena_fd = arena_fd_});
    Result<Attr> made = crashed->Mkdir(kRootIno, "d", 0755, Me());
    ASSERT_TRUE(made.ok());
    first = made->ino;
  }
  uint64_t second;
  {
    auto recovered_then_crashed = Next(1);
    // The kernel looks the directory up again and holds the new worker's node id too.
    Result<Attr> again = recovered_then_crashed->Lookup(kRootIno, "d");
    ASSERT_TRUE(again.ok());
    second = again->ino;
    ASSERT_NE(second, first);
  }
  auto third = Next(2);
  EXPECT_TRUE(third->GetAttr(first).ok()) << "the first worker's node id";
  Result<Attr> by_second = third->GetAttr(second);
  ASSERT_TRUE(by_second.ok()) << "the second worker's: " << by_second.status().ToString();
  EXPECT_TRUE(S_ISDIR(by_second->mode));
  EXPECT_TRUE(third->Shutdown().ok());
}

TEST_F(KernelStateRecoveryTest, AFileRemovedWhileOpenGoesOnNamelessAfterACrash) {
  const std::string bytes = Pattern(7, 2 * kBlockSize + 9);
  uint64_t handle, ino;
  {
    auto crashed = StartFs(backing_.path(), {.flush_delay = 3600s, .arena_fd = arena_fd_});
    Result<uint64_t> opened = CreatePath(*crashed, "scratch");
    ASSERT_TRUE(opened.ok());
    handle = *opened;
    ino = Resolve(*crashed, "scratch")->ino;
    ASSERT_TRUE(WriteHandle(*crashed, handle, 0, bytes).ok());
    ASSERT_TRUE(crashed->Unlink(kRootIno, "scratch").ok());
  }
  auto next = Next(1);
  Filesystem& b = *next;
  EXPECT_TRUE(SameBytes(*ReadHandle(b, handle, bytes.size() + 10), bytes));
  Result<Attr> attr = b.GetAttr(ino);
  ASSERT_TRUE(attr.ok()) << "the kernel's node of it: " << attr.status().ToString();
  EXPECT_EQ(attr->nlink, 0u);
  ASSERT_TRUE(WriteHandle(b, handle, bytes.size(), "more").ok());
  EXPECT_TRUE(SameBytes(*ReadHandle(b, handle, bytes.size() + 10), bytes + "more"));
  EXPECT_EQ(b.Lookup(kRootIno, "scratch").status().err(), ENOENT);
  ASSERT_TRUE(b.Release(handle).ok());
  ASSERT_TRUE(b.Sync().ok());
  EXPECT_FALSE(HostExists(B("scratch"))) << "removed: never published";
  EXPECT_TRUE(b.Shutdown().ok());
}

TEST_F(KernelStateRecoveryTest, ClosedFilesAndForgottenNodesAreNotRecorded) {
  {
    auto a = StartFs(backing_.path(), {.flush_delay = 0ms, .arena_fd = arena_fd_});
    ASSERT_TRUE(WriteFile(*a, "closed", "x").ok());
    ASSERT_TRUE(a->Sync().ok());
  }
  auto next = Next(1);
  EXPECT_NE(next->StatsJson().find("\"recovered_handles\": 0"), std::string::npos);
  EXPECT_EQ(*ReadFile(*next, "closed"), "x");
  EXPECT_TRUE(next->Shutdown().ok());
}

TEST(KernelStateSpillTest, AFileLargerThanTheCacheGoesOnFromItsSpillFileAfterACrash) {
  TempDir backing;
  constexpr uint64_t kCache = 1 << 20;
  ArenaMemory memory(kCache);
  const std::string head = Pattern(5, 3 * kCache + 1000);
  const std::string tail = Pattern(6, 100000);
  const uint64_t handle =
      WriteASpilledFileAndDie(backing.path(), kCache, memory.fd(), "big.distcp", head);
  ASSERT_NE(handle, 0u);
  EXPECT_EQ(HostTree(backing / ".ckptfs/staging").size(), 1u) << "its spill file, kept";
  auto next = StartFs(backing.path(), {.cache_size = kCache, .flush_delay = 0ms, .worker = 1,
                                       .arena_fd = memory.fd(), .recover = true});
  EXPECT_TRUE(SameBytes(*ReadHandle(*next, handle, head.size()), head));
  ASSERT_TRUE(WriteHandle(*next, handle, head.size(), tail).ok());
  ASSERT_TRUE(next->Release(handle).ok());
  ASSERT_TRUE(next->Sync().ok());
  EXPECT_TRUE(SameBytes(*ReadHostFile(backing / "big.distcp"), head + tail));
  EXPECT_TRUE(next->Shutdown().ok());
  next.reset();
  EXPECT_TRUE(HostTree(backing / ".ckptfs/staging").empty()) << "the spill file went with it";
}

TEST_F(KernelStateRecoveryTest, ResentRequestsWhoseChangeIsThereAreAnsweredAsDone) {
  auto fs = StartFs(backing_.path(), {.flush_delay = 0ms, .arena_fd = arena_fd_});
  Filesystem& a = *fs;
  Caller resent = Me();
  resent.resent = true;
  ASSERT_TRUE(a.Mkdir(kRootIno, "d", 0755, Me()).ok());
  ASSERT_TRUE(WriteFile(a, "f", "x").ok());
  ASSERT_TRUE(a.Rename(kRootIno, "f", kRootIno, "g", 0).ok());
  // What the worker that died had applied, sent again.
  EXPECT_TRUE(a.Mkdir(kRootIno, "d", 0755, resent).ok());
  EXPECT_TRUE(a.Rename(kRootIno, "f", kRootIno, "g", 0, resent).ok());
  Result<OpenFile> created = a.Create(kRootIno, "g", 0644, O_WRONLY | O_CREAT | O_EXCL, resent);
  ASSERT_TRUE(created.ok()) << created.status().ToString();
  ASSERT_TRUE(a.Release(created->handle).ok());
  ASSERT_TRUE(a.Unlink(kRootIno, "g", Me()).ok());
  EXPECT_TRUE(a.Unlink(kRootIno, "g", resent).ok());
  ASSERT_TRUE(a.Rmdir(kRootIno, "d", Me()).ok());
  EXPECT_TRUE(a.Rmdir(kRootIno, "d", resent).ok());
  // Not sent again, or not the change asked for: the error stands.
  EXPECT_EQ(a.Unlink(kRootIno, "g", Me()).err(), ENOENT);
  EXPECT_EQ(a.Rename(kRootIno, "f", kRootIno, "g", 0, Me()).err(), ENOENT);
  EXPECT_EQ(a.Rename(kRootIno, "f", kRootIno, "h", 0, resent).err(), ENOENT) << "h is not there";
  ASSERT_TRUE(WriteFile(a, "file", "x").ok());
  EXPECT_EQ(a.Mkdir(kRootIno, "file", 0755, resent).status().err(), EEXIST) << "not a directory";
  EXPECT_TRUE(a.Shutdown().ok());
}

TEST_F(KernelStateRecoveryTest, AResentOpenOrCreateGetsTheHandleTheCrashedWorkerMadeForIt) {
  Caller request_7 = Me();
  request_7.request = 7;
  Caller request_8 = Me();
  request_8.request = 8;
  uint64_t opened_before, created_before;
  {
    auto crashed = StartFs(backing_.path(), {.flush_delay = 3600s, .arena_fd = arena_fd_});
    ASSERT_TRUE(WriteFile(*crashed, "existing", "old").ok());
    const uint64_t ino = Resolve(*crashed, "existing")->ino;
    Result<OpenFile> opened = crashed->Open(ino, O_RDWR, request_7);
    ASSERT_TRUE(opened.ok());
    opened_before = opened->handle;
    Result<OpenFile> created =
        crashed->Create(kRootIno, "new", 0644, O_WRONLY | O_CREAT | O_EXCL, request_8);
    ASSERT_TRUE(created.ok());
    created_before = created->handle;
    ASSERT_TRUE(WriteHandle(*crashed, created_before, 0, "written").ok());
    // The worker dies before the kernel gets either answer.
  }
  auto next = Next(1);
  Filesystem& b = *next;
  request_7.resent = request_8.resent = true;
  const uint64_t ino = Resolve(b, "existing")->ino;
  Result<OpenFile> opened = b.Open(ino, O_RDWR, request_7);
  ASSERT_TRUE(opened.ok());
  EXPECT_EQ(opened->handle, opened_before) << "not a second handle, left open";
  Result<OpenFile> created =
      b.Create(kRootIno, "new", 0644, O_WRONLY | O_CREAT | O_EXCL, request_8);
  ASSERT_TRUE(created.ok()) << created.status().ToString();
  EXPECT_EQ(created->handle, created_before);
  EXPECT_EQ(*ReadHandle(b, created->handle, 100), "written");
  // Answered once: the same request again, or another one, opens anew.
  Result<OpenFile> again = b.Open(ino, O_RDONLY, request_7);
  ASSERT_TRUE(again.ok());
  EXPECT_NE(again->handle, opened_before);
  ASSERT_TRUE(b.Release(again->handle).ok());
  ASSERT_TRUE(b.Release(opened->handle).ok());
  ASSERT_TRUE(b.Release(created->handle).ok());
  ASSERT_TRUE(b.Sync().ok());
  EXPECT_EQ(*ReadHostFile(B("new")), "written");
  EXPECT_TRUE(b.Shutdown().ok());
}

}  // namespace
}  // namespace ckptfs
