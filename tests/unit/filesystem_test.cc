// Tests of Filesystem (core, no FUSE) over a real temporary backing directory with the real
// io_uring backend (FaultInjectingEnv wrapped around it for the error tests). Results are
// checked by reading the backing directory itself after Sync(), Fsync() or Shutdown().
#include "core/filesystem/filesystem.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <linux/capability.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <climits>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "core/base/nanos.h"
#include "core_test_util.h"

namespace ckptfs {
namespace {

using namespace std::chrono_literals;
using namespace testing_util;
using Tree = std::map<std::string, std::string>;

class FilesystemTest : public ::testing::Test {
 protected:
  void Mount(FsOptions o = {}) {
    fs_ = StartFs(backing_.path(), o, &fault_);
    ASSERT_NE(fs_, nullptr);
  }
  void TearDown() override {
    if (fs_ && !shut_down_) {
      Status st = fs_->Shutdown();
      (void)st;
    }
    fs_.reset();
  }
  Status Shutdown() {
    shut_down_ = true;
    return fs_->Shutdown();
  }
  Tree Backing() const { return HostTree(backing_.path()); }
  std::vector<std::string> StagingLeftovers() const {
    return HostList(backing_.path() + "/.ckptfs/staging");
  }
  std::string B(const std::string& rel) const { return backing_ / rel; }
  uint64_t Ino(const std::string& path) {
    Result<Attr> a = Resolve(*fs_, path);
    EXPECT_TRUE(a.ok()) << path << ": " << a.status().ToString();
    return a.ok() ? a->ino : 0;
  }
  // Name -> type bits of the entries of directory `dir`.
  std::map<std::string, uint32_t> Listed(uint64_t dir) {
    std::map<std::string, uint32_t> out;
    Result<uint64_t> dh = fs_->OpenDir(dir);
    if (!dh.ok()) return out;
    Result<std::vector<DirEntry>> entries = fs_->ReadDir(*dh, 0);
    for (const DirEntry& e : entries.ok() ? *entries : std::vector<DirEntry>{}) {
      out[e.name] = e.type_bits;
    }
    fs_->ReleaseDir(*dh);
    return out;
  }
  Result<Attr> Mkdir(const std::string& path, uint32_t mode = 0755) {
    auto p = ParentOf(*fs_, path);
    if (!p.ok()) return p.status();
    return fs_->Mkdir(p->first, p->second, mode, Me());
  }
  Status Unlink(const std::string& path) {
    auto p = ParentOf(*fs_, path);
    if (!p.ok()) return p.status();
    return fs_->Unlink(p->first, p->second);
  }
  Status Rename(const std::string& from, const std::string& to, unsigned flags = 0) {
    auto a = ParentOf(*fs_, from);
    auto b = ParentOf(*fs_, to);
    if (!a.ok()) return a.status();
    if (!b.ok()) return b.status();
    return fs_->Rename(a->first, a->second, b->first, b->second, flags);
  }

  // Stands still unless a test moves it: with it, a flush_delay keeps everything in memory until
  // a sync asks for it or the test advances the clock past the delay.
  ManualClock clock_;
  TempDir backing_;
  std::unique_ptr<Filesystem> fs_;
  FaultInjectingEnv* fault_ = nullptr;
  bool shut_down_ = false;
};

// ---------------------------------------------------------------------------------------------
// Basic data path.

TEST_F(FilesystemTest, WrittenFilesLandOnBackingAfterSyncAndShutdown) {
  Mount({.flush_delay = 1s, .clock = &clock_});
  ASSERT_TRUE(Mkdir("ckpt").ok());
  ASSERT_TRUE(Mkdir("ckpt/iter_0000100").ok());
  std::string big = Pattern(1, 3 * kBlockSize + 1234);
  Result<uint64_t> h = CreatePath(*fs_, "ckpt/iter_0000100/model.pt");
  ASSERT_TRUE(h.ok()) << h.status().ToString();
  ASSERT_TRUE(WriteHandle(*fs_, *h, 0, big).ok());
  ASSERT_TRUE(WriteHandle(*fs_, *h, big.size() + 5000, "tail").ok());  // Leaves a hole.
  std::string want = big + std::string(5000, '\0') + "tail";
  // Readable through the mount before it is closed.
  Result<std::string> early = ReadHandle(*fs_, *h, want.size() + 10);
  ASSERT_TRUE(early.ok());
  EXPECT_TRUE(SameBytes(*early, want));
  EXPECT_EQ(fs_->GetAttr(Ino("ckpt/iter_0000100/model.pt"))->size, want.size());
  ASSERT_TRUE(Close(*fs_, *h).ok());
  ASSERT_TRUE(WriteFile(*fs_, "latest_checkpointed_iteration.txt", "100").ok());

  ASSERT_TRUE(fs_->Sync().ok());
  Tree expected = {{"ckpt", "<dir>"},
                   {"ckpt/iter_0000100", "<dir>"},
                   {"ckpt/iter_0000100/model.pt", want},
                   {"latest_checkpointed_iteration.txt", "100"}};
  EXPECT_TRUE(SameTree(Backing(), expected));
  EXPECT_TRUE(SameBytes(*ReadHostFile(B("ckpt/iter_0000100/model.pt")), want));
  EXPECT_TRUE(StagingLeftovers().empty());
  // Still readable through the mount after the flush.
  EXPECT_TRUE(SameBytes(*ReadFile(*fs_, "ckpt/iter_0000100/model.pt"), want));

  ASSERT_TRUE(Shutdown().ok());
  EXPECT_TRUE(SameTree(Backing(), expected));
  EXPECT_TRUE(StagingLeftovers().empty());
}

// The kernel flushes a handle whenever any descriptor of it is closed: a forked child that exits
// closes the parent's descriptors too. Only a close by an owner that wrote through the handle,
// or its release, seals the version the writer is still writing.
TEST_F(FilesystemTest, AFlushByAnOwnerThatNeverWroteThroughTheHandleSealsNothing) {
  Mount({.flush_delay = 0s});
  constexpr uint64_t kTrainer = 0x1234, kForkedChild = 0x5678;
  ASSERT_TRUE(WriteFile(*fs_, "last.pt", "GOOD-OLD").ok());
  ASSERT_TRUE(fs_->Sync().ok());
  Result<uint64_t> h = CreatePath(*fs_, "last.pt", O_CREAT | O_WRONLY | O_TRUNC);
  ASSERT_TRUE(h.ok());
  Caller trainer = Me();
  trainer.lock_owner = kTrainer;
  ASSERT_TRUE(fs_->Write(*h, 0, "NEW-HALF", 8, trainer).ok());
  EXPECT_TRUE(fs_->Flush(*h, kForkedChild).ok());
  ASSERT_TRUE(fs_->Sync().ok());
  EXPECT_EQ(ReadHostFile(B("last.pt")), "GOOD-OLD") << "the child's exit published a torn file";

  ASSERT_TRUE(fs_->Write(*h, 8, "+REST", 5, trainer).ok());
  EXPECT_TRUE(fs_->Flush(*h, kTrainer).ok());
  ASSERT_TRUE(fs_->Sync().ok());
  EXPECT_EQ(ReadHostFile(B("last.pt")), "NEW-HALF+REST") << "the trainer's close seals it";
  EXPECT_TRUE(fs_->Release(*h).ok());
}

TEST_F(FilesystemTest, TheReleaseSealsWhatAFlushByANonWriterLeftOpen) {
  Mount({.flush_delay = 0s});
  Result<uint64_t> h = CreatePath(*fs_, "f", O_CREAT | O_WRONLY | O_TRUNC);
  ASSERT_TRUE(h.ok());
  Caller writer = Me();
  writer.lock_owner = 7;
  ASSERT_TRUE(fs_->Write(*h, 0, "data", 4, writer).ok());
  EXPECT_TRUE(fs_->Flush(*h, 8).ok());
  EXPECT_TRUE(fs_->Release(*h).ok());  // The writer's descriptor went with the child's exit.
  ASSERT_TRUE(fs_->Sync().ok());
  EXPECT_EQ(ReadHostFile(B("f")), "data");
}

TEST(WriterOwnersTest, AFlushClosesForAWriterForUnknownWritersAndWhenNothingWasWritten) {
  WriterOwners w;
  EXPECT_TRUE(w.Closes(9)) << "nothing written: nothing to hold back";
  w.Wrote(1);
  w.Wrote(2);
  w.Wrote(1);
  EXPECT_TRUE(w.Closes(1));
  EXPECT_TRUE(w.Closes(2));
  EXPECT_FALSE(w.Closes(3));
  w.Wrote(3);
  w.Wrote(4);
  EXPECT_FALSE(w.Closes(5));
  w.Wrote(5);  // More owners than are kept: any close may be the writer's.
  EXPECT_TRUE(w.Closes(6));
  WriterOwners cached;
  cached.Wrote(0);  // Write-back names no owner.
  EXPECT_TRUE(cached.Closes(6));
}

// A large file keeps its holes on the backing store: the flush allocates only what was written.
TEST_F(FilesystemTest, FlushKeepsHoles) {
  Mount({.flush_delay = 1s, .clock = &clock_});
  const std::string head = Pattern(2, 2 << 20);
  const std::string tail = Pattern(3, 1 << 20);
  const uint64_t tail_at = 64ull << 20;
  Result<uint64_t> h = CreatePath(*fs_, "sparse.bin");
  ASSERT_TRUE(h.ok());
  ASSERT_TRUE(WriteHandle(*fs_, *h, 0, head).ok());
  ASSERT_TRUE(WriteHandle(*fs_, *h, tail_at, tail).ok());
  ASSERT_TRUE(Close(*fs_, *h).ok());
  ASSERT_TRUE(fs_->Sync().ok());

  struct stat st {};
  ASSERT_EQ(stat(B("sparse.bin").c_str(), &st), 0);
  EXPECT_EQ(static_cast<uint64_t>(st.st_size), tail_at + tail.size());
  EXPECT_LE(static_cast<uint64_t>(st.st_blocks) * 512, head.size() + tail.size() + (1 << 20));
  std::optional<std::string> got = ReadHostFile(B("sparse.bin"));
  ASSERT_TRUE(got.has_value());
  EXPECT_TRUE(SameBytes(got->substr(0, head.size()), head));
  EXPECT_EQ(got->find_first_not_of('\0', head.size()), tail_at);
  EXPECT_TRUE(SameBytes(got->substr(tail_at), tail));
}

// Write-only opens bypass the kernel's page cache, and cached pages never go stale.
TEST_F(FilesystemTest, PageCacheModeOfHandles) {
  Mount({.flush_delay = 1s, .clock = &clock_});
  std::vector<std::tuple<uint64_t, uint64_t, uint64_t>> invalidated;
  fs_->SetPageCacheInvalidator([&](uint64_t ino, uint64_t offset, uint64_t length) {
    invalidated.emplace_back(ino, offset, length);
  });
  Result<OpenFile> writer = fs_->Create(kRootIno, "f", 0644, O_CREAT | O_WRONLY | O_TRUNC, Me());
  ASSERT_TRUE(writer.ok());
  EXPECT_TRUE(writer->direct_io);
  const uint64_t ino = writer->attr.ino;
  ASSERT_TRUE(WriteHandle(*fs_, writer->handle, 0, "aaaa").ok());
  EXPECT_TRUE(invalidated.empty());  // Nobody caches the file.

  // A reader opened meanwhile uses the cache, dropping what it held from before the write...
  Result<OpenFile> reader = fs_->Open(ino, O_RDONLY);
  ASSERT_TRUE(reader.ok());
  EXPECT_FALSE(reader->direct_io);
  EXPECT_FALSE(reader->keep_cache);
  // ...and the writer's next write invalidates the range it wrote.
  ASSERT_TRUE(WriteHandle(*fs_, writer->handle, 2, "bbb").ok());
  ASSERT_EQ(invalidated.size(), 1u);
  EXPECT_EQ(invalidated[0], std::make_tuple(ino, uint64_t{2}, uint64_t{3}));
  // A second writer, opened while a cached handle is open, uses the cache too.
  Result<OpenFile> cached_writer = fs_->Open(ino, O_WRONLY);
  ASSERT_TRUE(cached_writer.ok());
  EXPECT_FALSE(cached_writer->direct_io);
  EXPECT_TRUE(cached_writer->keep_cache);
  ASSERT_TRUE(WriteHandle(*fs_, cached_writer->handle, 0, "c").ok());
  EXPECT_EQ(invalidated.size(), 1u);
  ASSERT_TRUE(Close(*fs_, cached_writer->handle).ok());
  ASSERT_TRUE(Close(*fs_, reader->handle).ok());

  // With no cached handle open, a write only marks the cache stale: the next open drops it once.
  ASSERT_TRUE(WriteHandle(*fs_, writer->handle, 5, "d").ok());
  EXPECT_EQ(invalidated.size(), 1u);
  ASSERT_TRUE(Close(*fs_, writer->handle).ok());
  Result<OpenFile> first = fs_->Open(ino, O_RDONLY);
  ASSERT_TRUE(first.ok());
  EXPECT_FALSE(first->keep_cache);
  ASSERT_TRUE(Close(*fs_, first->handle).ok());
  Result<OpenFile> second = fs_->Open(ino, O_RDONLY);
  ASSERT_TRUE(second.ok());
  EXPECT_TRUE(second->keep_cache);
  EXPECT_TRUE(SameBytes(*ReadHandle(*fs_, second->handle, 10), "cabbbd"));
  ASSERT_TRUE(Close(*fs_, second->handle).ok());
  // Read-write opens always use the cache.
  Result<OpenFile> rw = fs_->Open(ino, O_RDWR);
  ASSERT_TRUE(rw.ok());
  EXPECT_FALSE(rw->direct_io);
  ASSERT_TRUE(Close(*fs_, rw->handle).ok());
}

// Read-only opens of large files held whole by the backing store are read by the kernel from
// the backing file; one backing id per file, writers refused meanwhile.
TEST_F(FilesystemTest, PassthroughOfFilesOnTheBackingStore) {
  const std::string big = Pattern(3, 2 << 20);
  WriteHostFile(B("big.pt"), big);
  WriteHostFile(B("small.txt"), "100");
  Mount({.flush_delay = 1s, .clock = &clock_});
  std::vector<int> opened, closed;
  bool refuse = false;
  fs_->SetPassthrough(
      [&](int fd) {
        if (refuse) return -1;
        opened.push_back(fd);
        return 7;
      },
      [&](int id) { closed.push_back(id); });
  const uint64_t ino = Ino("big.pt");

  Result<OpenFile> first = fs_->Open(ino, O_RDONLY);
  ASSERT_TRUE(first.ok());
  EXPECT_EQ(first->backing_id, 7);
  Result<OpenFile> second = fs_->Open(ino, O_RDONLY);
  ASSERT_TRUE(second.ok());
  EXPECT_EQ(second->backing_id, 7);
  EXPECT_EQ(opened.size(), 1u);
  EXPECT_EQ(fs_->Open(ino, O_WRONLY).status().err(), ETXTBSY);
  EXPECT_EQ(fs_->Open(ino, O_RDWR | O_TRUNC).status().err(), ETXTBSY);
  SetAttrRequest truncate;
  truncate.size = 0;
  EXPECT_EQ(fs_->SetAttr(ino, truncate).status().err(), ETXTBSY);
  ASSERT_TRUE(Close(*fs_, first->handle).ok());
  EXPECT_TRUE(closed.empty());
  ASSERT_TRUE(Close(*fs_, second->handle).ok());
  EXPECT_EQ(closed, std::vector<int>{7});

  // Small files, changed files and refused registrations are read through the daemon.
  Result<OpenFile> small = fs_->Open(Ino("small.txt"), O_RDONLY);
  ASSERT_TRUE(small.ok());
  EXPECT_EQ(small->backing_id, -1);
  ASSERT_TRUE(Close(*fs_, small->handle).ok());
  Result<OpenFile> writer = fs_->Open(ino, O_WRONLY);
  ASSERT_TRUE(writer.ok());
  ASSERT_TRUE(WriteHandle(*fs_, writer->handle, 0, "new").ok());
  Result<OpenFile> changed = fs_->Open(ino, O_RDONLY);
  ASSERT_TRUE(changed.ok());
  EXPECT_EQ(changed->backing_id, -1);
  ASSERT_TRUE(Close(*fs_, changed->handle).ok());
  ASSERT_TRUE(Close(*fs_, writer->handle).ok());
  EXPECT_EQ(opened.size(), 1u);
  refuse = true;
  WriteHostFile(B("other.pt"), big);
  Result<OpenFile> refused = fs_->Open(Ino("other.pt"), O_RDONLY);
  ASSERT_TRUE(refused.ok());
  EXPECT_EQ(refused->backing_id, -1);
  EXPECT_TRUE(SameBytes(*ReadHandle(*fs_, refused->handle, big.size()), big));
  ASSERT_TRUE(Close(*fs_, refused->handle).ok());
}

TEST_F(FilesystemTest, DirectReadsOfFilesOnTheBackingStore) {
  const std::string big = Pattern(4, 2 << 20);
  WriteHostFile(B("big.pt"), big);
  WriteHostFile(B("small.txt"), "100");
  Mount({.flush_delay = 1s, .clock = &clock_});
  const uint64_t ino = Ino("big.pt");
  Result<OpenFile> before = fs_->Open(ino, O_RDONLY);
  ASSERT_TRUE(before.ok());
  EXPECT_FALSE(before->direct_io);  // Off until enabled.
  ASSERT_TRUE(Close(*fs_, before->handle).ok());
  fs_->EnableDirectReads();

  Result<OpenFile> reader = fs_->Open(ino, O_RDONLY);
  ASSERT_TRUE(reader.ok());
  EXPECT_TRUE(reader->direct_io);
  EXPECT_EQ(reader->backing_id, -1);
  EXPECT_TRUE(SameBytes(*ReadHandle(*fs_, reader->handle, big.size()), big));
  // A cached handle opened meanwhile, and readers after it, use the page cache.
  Result<OpenFile> rw = fs_->Open(ino, O_RDWR);
  ASSERT_TRUE(rw.ok());
  EXPECT_FALSE(rw->direct_io);
  Result<OpenFile> second = fs_->Open(ino, O_RDONLY);
  ASSERT_TRUE(second.ok());
  EXPECT_FALSE(second->direct_io);
  ASSERT_TRUE(Close(*fs_, second->handle).ok());
  ASSERT_TRUE(Close(*fs_, rw->handle).ok());
  ASSERT_TRUE(Close(*fs_, reader->handle).ok());

  // Small files and files changed in memory are cached.
  Result<OpenFile> small = fs_->Open(Ino("small.txt"), O_RDONLY);
  ASSERT_TRUE(small.ok());
  EXPECT_FALSE(small->direct_io);
  ASSERT_TRUE(Close(*fs_, small->handle).ok());
  Result<OpenFile> writer = fs_->Open(ino, O_WRONLY);
  ASSERT_TRUE(writer.ok());
  ASSERT_TRUE(WriteHandle(*fs_, writer->handle, 0, "new").ok());
  ASSERT_TRUE(Close(*fs_, writer->handle).ok());
  Result<OpenFile> changed = fs_->Open(ino, O_RDONLY);
  ASSERT_TRUE(changed.ok());
  EXPECT_FALSE(changed->direct_io);
  EXPECT_TRUE(SameBytes(*ReadHandle(*fs_, changed->handle, big.size()), "new" + big.substr(3)));
  ASSERT_TRUE(Close(*fs_, changed->handle).ok());
}

// Pages of `path` in [offset, offset+length) that are in the page cache.
size_t ResidentPages(const std::string& path, uint64_t offset, uint64_t length) {
  int fd = open(path.c_str(), O_RDONLY);
  void* map = mmap(nullptr, offset + length, PROT_READ, MAP_SHARED, fd, 0);
  close(fd);
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  std::vector<unsigned char> resident((offset + length) / page);
  mincore(map, offset + length, resident.data());
  munmap(map, offset + length);
  size_t n = 0;
  for (size_t i = offset / page; i < resident.size(); ++i) n += resident[i] & 1;
  return n;
}

TEST_F(FilesystemTest, SequentialDirectReadsReadTheBackingFileAhead) {
  const std::string big = Pattern(5, 8 << 20);
  WriteHostFile(B("big.pt"), big);
  Mount({.flush_delay = 1s, .clock = &clock_});
  fs_->EnableDirectReads();
  {
    // Out of the page cache, as after a reboot.
    int fd = open(B("big.pt").c_str(), O_RDONLY);
    ASSERT_EQ(fdatasync(fd), 0);
    ASSERT_EQ(posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED), 0);
    close(fd);
  }
  ASSERT_EQ(ResidentPages(B("big.pt"), 2 << 20, 6 << 20), 0u);
  Result<OpenFile> reader = fs_->Open(Ino("big.pt"), O_RDONLY);
  ASSERT_TRUE(reader.ok());
  ASSERT_TRUE(reader->direct_io);
  Result<ReadData> first = fs_->Read(reader->handle, 0, 1 << 20);
  ASSERT_TRUE(first.ok());
  // The kernel reads ahead in the background; the rest of the file arrives without more reads.
  // Bounded for a hang, not a speed: a loaded machine's disk may take seconds.
  const size_t pages = (6u << 20) / static_cast<size_t>(sysconf(_SC_PAGESIZE));
  size_t resident = 0;
  for (int i = 0; i < 3000 && resident < pages; ++i) {
    resident = ResidentPages(B("big.pt"), 2 << 20, 6 << 20);
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(resident, pages);
  ASSERT_TRUE(Close(*fs_, reader->handle).ok());
}

TEST_F(FilesystemTest, ShutdownFlushesEverythingIncludingOpenFiles) {
  Mount({.flush_delay = 1s, .clock = &clock_});
  ASSERT_TRUE(WriteFile(*fs_, "a", Pattern(2, 100000)).ok());
  Result<uint64_t> h = CreatePath(*fs_, "open");
  ASSERT_TRUE(h.ok());
  ASSERT_TRUE(WriteHandle(*fs_, *h, 0, "still open").ok());
  EXPECT_TRUE(Backing().empty()) << "flushed before its delay";
  ASSERT_TRUE(Shutdown().ok());
  EXPECT_TRUE(SameTree(Backing(), (Tree{{"a", Pattern(2, 100000)}, {"open", "still open"}})));
  EXPECT_TRUE(StagingLeftovers().empty());
  EXPECT_TRUE(fs_->Release(*h).ok());
}

TEST_F(FilesystemTest, EmptyNewFileReachesBacking) {
  // touch(1): create and close with no write.
  Mount({.flush_delay = 1s, .clock = &clock_});
  Result<uint64_t> h = CreatePath(*fs_, "empty");
  ASSERT_TRUE(h.ok());
  ASSERT_TRUE(Close(*fs_, *h).ok());
  ASSERT_TRUE(Mkdir("d").ok());
  h = CreatePath(*fs_, "d/marker");
  ASSERT_TRUE(h.ok());
  ASSERT_TRUE(fs_->Fsync(*h).ok());
  EXPECT_TRUE(HostExists(B("d/marker"))) << "fsync of an empty new file returned before it was durable";
  ASSERT_TRUE(Close(*fs_, *h).ok());
  ASSERT_TRUE(fs_->Sync().ok());
  EXPECT_TRUE(SameTree(Backing(), (Tree{{"empty", ""}, {"d", "<dir>"}, {"d/marker", ""}})));
  ASSERT_TRUE(Shutdown().ok());
  EXPECT_TRUE(SameTree(Backing(), (Tree{{"empty", ""}, {"d", "<dir>"}, {"d/marker", ""}})));
}

TEST_F(FilesystemTest, OverwriteTruncateAndExtend) {
  Mount({.flush_delay = 1s, .clock = &clock_});
  ASSERT_TRUE(WriteFile(*fs_, "f", Pattern(3, 200000)).ok());
  ASSERT_TRUE(fs_->Sync().ok());
  uint64_t ino = Ino("f");
  SetAttrRequest shrink;
  shrink.size = 1000;
  ASSERT_TRUE(fs_->SetAttr(ino, shrink).ok());
  SetAttrRequest grow;
  grow.size = 150000;
  ASSERT_TRUE(fs_->SetAttr(ino, grow).ok());
  std::string want = Pattern(3, 1000) + std::string(149000, '\0');
  EXPECT_TRUE(SameBytes(*ReadFile(*fs_, "f"), want));
  ASSERT_TRUE(fs_->Sync().ok());
  EXPECT_TRUE(SameBytes(*ReadHostFile(B("f")), want));
  // O_TRUNC reopen then a short write.
  Result<OpenFile> o = fs_->Open(ino, O_RDWR | O_TRUNC);
  ASSERT_TRUE(o.ok());
  ASSERT_TRUE(WriteHandle(*fs_, o->handle, 0, "xy").ok());
  ASSERT_TRUE(Close(*fs_, o->handle).ok());
  ASSERT_TRUE(fs_->Sync().ok());
  EXPECT_EQ(*ReadHostFile(B("f")), "xy");
  EXPECT_EQ(*ReadFile(*fs_, "f"), "xy");
}

// ---------------------------------------------------------------------------------------------
// Files that exist on the backing store before the mount.

// The kernel leaves clearing set-ID bits to the daemon for writes that bypass the page cache and
// for opens with O_TRUNC (it does it itself, with a setattr, for cached writes and truncate).
TEST_F(FilesystemTest, WritesAndTruncatingOpensByOtherUsersClearSetIdBits) {
  Mount({.flush_delay = 1s, .clock = &clock_});
  const Caller nobody{65534, 65534, 022};
  auto write_as = [&](const std::string& path, const Caller& c, int flags) {
    Result<OpenFile> f = fs_->Open(Ino(path), flags, c);
    EXPECT_TRUE(f.ok()) << path << ": " << f.status().ToString();
    if (!f.ok()) return;
    if (!(flags & O_TRUNC)) {
      EXPECT_TRUE(fs_->Write(f->handle, 0, "w", 1, c).ok());
    }
    EXPECT_TRUE(Close(*fs_, f->handle).ok());
  };
  auto mode_of = [&](const std::string& path) { return Resolve(*fs_, path)->mode & 07777; };
  for (const char* name : {"suid", "sgid-x", "sgid", "by-root", "trunc", "empty"}) {
    ASSERT_TRUE(WriteFile(*fs_, name, std::string(name) == "empty" ? "" : "data").ok());
  }
  ASSERT_TRUE(fs_->Sync().ok());  // "empty" is then on the backing store, with its mode.
  for (auto [name, mode] : std::map<std::string, uint32_t>{
           {"suid", 04777}, {"sgid-x", 02777}, {"sgid", 02767}, {"by-root", 06777},
           {"trunc", 06777}, {"empty", 06777}}) {
    SetAttrRequest chmod;
    chmod.mode = mode;
    ASSERT_TRUE(fs_->SetAttr(Ino(name), chmod).ok());
  }
  write_as("suid", nobody, O_WRONLY);
  write_as("sgid-x", nobody, O_RDWR);
  write_as("sgid", nobody, O_WRONLY);
  write_as("by-root", Caller{}, O_WRONLY);
  write_as("trunc", nobody, O_WRONLY | O_TRUNC);
  write_as("empty", nobody, O_WRONLY | O_TRUNC);
  EXPECT_EQ(mode_of("suid"), 0777u);
  EXPECT_EQ(mode_of("sgid-x"), 0777u);
  EXPECT_EQ(mode_of("sgid"), 02767u) << "set-group-ID without group execute stays";
  EXPECT_EQ(mode_of("by-root"), 06777u) << "root has CAP_FSETID";
  EXPECT_EQ(mode_of("trunc"), 0777u);
  EXPECT_EQ(mode_of("empty"), 0777u);
  ASSERT_TRUE(fs_->Sync().ok());
  for (auto [name, mode] : std::map<std::string, uint32_t>{
           {"suid", 0777}, {"sgid-x", 0777}, {"sgid", 02767}, {"by-root", 06777},
           {"trunc", 0777}, {"empty", 0777}}) {
    struct stat st {};
    ASSERT_EQ(stat(B(name).c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 07777, mode) << name << " on the backing store";
  }
}

// A set-user-ID file of another owner keeps its bits on the backing store: the chown that gives
// the published file its owner comes before the chmod (a chown clears set-user-ID).
TEST_F(FilesystemTest, ASetUserIdFileOfAnotherOwnerIsPublishedWithItsBits) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to give files to another owner";
  Mount({.flush_delay = 1s, .clock = &clock_});
  Result<uint64_t> h = CreatePath(*fs_, "tool");
  ASSERT_TRUE(h.ok());
  ASSERT_TRUE(WriteHandle(*fs_, *h, 0, "#!/bin/true\n").ok());
  SetAttrRequest chown;
  chown.uid = 65534;
  chown.gid = 65534;
  ASSERT_TRUE(fs_->SetAttr(Ino("tool"), chown).ok());
  SetAttrRequest chmod;
  chmod.mode = 06755;
  ASSERT_TRUE(fs_->SetAttr(Ino("tool"), chmod).ok());
  ASSERT_TRUE(Close(*fs_, *h).ok());
  ASSERT_TRUE(fs_->Sync().ok());
  struct stat st {};
  ASSERT_EQ(stat(B("tool").c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, 65534u);
  EXPECT_EQ(st.st_mode & 07777, 06755u);
}

// A small durable file's page cache is filled at a read-only open once per lookup by the
// kernel: again after the kernel forgot the inode (and its pages). Its attributes are settled
// while it is durable.
TEST_F(FilesystemTest, ASmallFilesPageCacheIsFilledAgainAfterAForgetAndItIsSettledWhileDurable) {
  WriteHostFile(B("small"), "hello");
  Mount();
  int fills = 0;
  fs_->SetPageCacheFiller([&](uint64_t, const char*, size_t) { return ++fills > 0; });
  const uint64_t ino = Ino("small");
  EXPECT_TRUE(fs_->GetAttr(ino)->settled);
  auto read_once = [&] {
    Result<OpenFile> o = fs_->Open(ino, O_RDONLY);
    ASSERT_TRUE(o.ok()) << o.status().ToString();
    EXPECT_TRUE(o->keep_cache);
    ASSERT_TRUE(Close(*fs_, o->handle).ok());
  };
  read_once();
  read_once();
  EXPECT_EQ(fills, 1);
  fs_->Forget(ino, 1);
  ASSERT_EQ(Ino("small"), ino);
  read_once();
  EXPECT_EQ(fills, 2) << "the kernel's new inode has no pages";
  Result<OpenFile> w = fs_->Open(ino, O_WRONLY);
  ASSERT_TRUE(w.ok());
  ASSERT_TRUE(WriteHandle(*fs_, w->handle, 0, "HE").ok());
  ASSERT_TRUE(Close(*fs_, w->handle).ok());
  EXPECT_FALSE(fs_->GetAttr(ino)->settled) << "changed, not durable yet";
  ASSERT_TRUE(fs_->Sync().ok());
  EXPECT_TRUE(fs_->GetAttr(ino)->settled);
}

TEST_F(FilesystemTest, FilesThatMayBelongToAZarrArrayAreNotSettled) {
  WriteHostFile(B("plain/model.pt"), "x");
  WriteHostFile(B("plain/0.0"), "x");
  WriteHostFile(B("array/.zarray"), "{}");
  WriteHostFile(B("array/notes.txt"), "x");
  Mount();
  EXPECT_TRUE(fs_->GetAttr(Ino("plain/model.pt"))->settled);
  EXPECT_FALSE(fs_->GetAttr(Ino("plain/0.0"))->settled) << "named like a chunk";
  EXPECT_TRUE(fs_->GetAttr(Ino("array/notes.txt"))->settled) << "no view takes its name";
  EXPECT_FALSE(fs_->GetAttr(Ino("array/.zarray"))->settled);
  EXPECT_FALSE(fs_->GetAttr(Ino("plain"))->settled) << "directories keep the short timeout";
}

TEST_F(FilesystemTest, SharedModeFillsNoPageCacheAndSettlesNothing) {
  WriteHostFile(B("small"), "hello");
  Mount({.node = "a"});
  int fills = 0;
  fs_->SetPageCacheFiller([&](uint64_t, const char*, size_t) { return ++fills > 0; });
  const uint64_t ino = Ino("small");
  EXPECT_FALSE(fs_->GetAttr(ino)->settled);
  Result<OpenFile> o = fs_->Open(ino, O_RDONLY);
  ASSERT_TRUE(o.ok());
  ASSERT_TRUE(Close(*fs_, o->handle).ok());
  EXPECT_EQ(fills, 0);
}

TEST_F(FilesystemTest, PreExistingFilesAreVisibleLazilyAndModifiable) {
  std::string a = Pattern(10, 3 * kBlockSize + 17);
  WriteHostFile(B("old/a.bin"), a);
  WriteHostFile(B("old/b.bin"), "bbbbbbbbbb");
  WriteHostFile(B("old/c.bin"), "to be deleted");
  WriteHostFile(B("old/d.bin"), "to be renamed");
  WriteHostFile(B("top.txt"), "top");
  ASSERT_EQ(symlink("top.txt", B("link").c_str()), 0);
  Mount({.flush_delay = 1s, .clock = &clock_});

  Result<std::vector<DirEntry>> root = ListDir(*fs_, kRootIno);
  ASSERT_TRUE(root.ok());
  std::set<std::string> names;
  for (const DirEntry& e : *root) names.insert(e.name);
  EXPECT_EQ(names, (std::set<std::string>{"old", "top.txt", "link"}));  // .ckptfs is hidden.
  EXPECT_EQ(fs_->Readlink(Ino("link")).value(), "top.txt");
  EXPECT_EQ(fs_->GetAttr(Ino("old/a.bin"))->size, a.size());
  EXPECT_TRUE(SameBytes(*ReadFile(*fs_, "old/a.bin"), a));

  // Overlay a write in the middle of the existing file.
  Result<OpenFile> o = fs_->Open(Ino("old/a.bin"), O_RDWR);
  ASSERT_TRUE(o.ok());
  ASSERT_TRUE(WriteHandle(*fs_, o->handle, kBlockSize + 3, "PATCH").ok());
  ASSERT_TRUE(Close(*fs_, o->handle).ok());
  std::string a2 = a;
  a2.replace(kBlockSize + 3, 5, "PATCH");
  EXPECT_TRUE(SameBytes(*ReadFile(*fs_, "old/a.bin"), a2));
  // Truncate, unlink, rename.
  SetAttrRequest t;
  t.size = 4;
  ASSERT_TRUE(fs_->SetAttr(Ino("old/b.bin"), t).ok());
  ASSERT_TRUE(Unlink("old/c.bin").ok());
  EXPECT_EQ(Resolve(*fs_, "old/c.bin").status().err(), ENOENT);
  ASSERT_TRUE(Rename("old/d.bin", "renamed.bin").ok());
  EXPECT_EQ(*ReadFile(*fs_, "renamed.bin"), "to be renamed");
  // The backing store is untouched until the flush.
  EXPECT_TRUE(SameBytes(*ReadHostFile(B("old/a.bin")), a));
  ASSERT_TRUE(fs_->Sync().ok());
  Tree expected = {{"old", "<dir>"},          {"old/a.bin", a2},
                   {"old/b.bin", "bbbb"},     {"renamed.bin", "to be renamed"},
                   {"top.txt", "top"},        {"link", "<link:top.txt>"}};
  EXPECT_TRUE(SameTree(Backing(), expected));
  EXPECT_TRUE(StagingLeftovers().empty());
  ASSERT_TRUE(Shutdown().ok());
  EXPECT_TRUE(SameTree(Backing(), expected));
}

TEST_F(FilesystemTest, StagingLeftoversOfAKilledRunAreRemoved) {
  WriteHostFile(B(".ckptfs/staging/17"), "half a file");
  Mount();
  EXPECT_TRUE(StagingLeftovers().empty());
  EXPECT_EQ(Resolve(*fs_, ".ckptfs").ok(), true);  // The control directory, not the backing one.
  EXPECT_EQ(Resolve(*fs_, ".ckptfs/staging").status().err(), ENOENT);
}

// ---------------------------------------------------------------------------------------------
// Namespace operations.

TEST_F(FilesystemTest, RenameLinkSymlinkSetAttr) {
  Mount({.flush_delay = 1s, .clock = &clock_});
  ASSERT_TRUE(Mkdir("d").ok());
  ASSERT_TRUE(Mkdir("e").ok());
  ASSERT_TRUE(WriteFile(*fs_, "d/x", "xxx").ok());
  ASSERT_TRUE(WriteFile(*fs_, "e/victim", "victim").ok());
  ASSERT_TRUE(Rename("d/x", "e/victim").ok());  // Over an existing file.
  EXPECT_EQ(*ReadFile(*fs_, "e/victim"), "xxx");
  EXPECT_EQ(Resolve(*fs_, "d/x").status().err(), ENOENT);
  EXPECT_EQ(Rename("e/victim", "d", 0).err(), EISDIR);
  ASSERT_TRUE(WriteFile(*fs_, "d/y", "y").ok());
  EXPECT_EQ(Rename("d/y", "e/victim", RENAME_NOREPLACE).err(), EEXIST);
  auto link = fs_->Link(Ino("e/victim"), Ino("d"), "hard");
  ASSERT_TRUE(link.ok());
  EXPECT_EQ(link->nlink, 2u);
  ASSERT_TRUE(fs_->Symlink(kRootIno, "sym", "e/victim", Me()).ok());
  SetAttrRequest chmod;
  chmod.mode = 0600;
  ASSERT_TRUE(fs_->SetAttr(Ino("d/y"), chmod).ok());
  ASSERT_TRUE(Mkdir("gone").ok());
  ASSERT_TRUE(fs_->Rmdir(kRootIno, "gone").ok());
  EXPECT_EQ(fs_->Rmdir(kRootIno, "d").err(), ENOTEMPTY);
  ASSERT_TRUE(Rename("e", "f").ok());  // A directory.

  ASSERT_TRUE(fs_->Sync().ok());
  Tree expected = {{"d", "<dir>"},   {"d/y", "y"}, {"d/hard", "xxx"}, {"f", "<dir>"},
                   {"f/victim", "xxx"}, {"sym", "<link:e/victim>"}};
  EXPECT_TRUE(SameTree(Backing(), expected));
  struct stat s1 {}, s2 {}, sy {};
  ASSERT_EQ(stat(B("d/hard").c_str(), &s1), 0);
  ASSERT_EQ(stat(B("f/victim").c_str(), &s2), 0);
  EXPECT_EQ(s1.st_ino, s2.st_ino) << "hard link published as two files";
  ASSERT_EQ(stat(B("d/y").c_str(), &sy), 0);
  EXPECT_EQ(sy.st_mode & 07777, 0600u);
  EXPECT_TRUE(StagingLeftovers().empty());
  ASSERT_TRUE(Shutdown().ok());
  EXPECT_TRUE(SameTree(Backing(), expected));
}

// Found by pjdfstest: in a directory held whole in memory (made through the mount, or listed),
// a name too long was looked up as missing (ENOENT).
TEST_F(FilesystemTest, ANameLongerThanNameMaxFailsWithEnametoolongInEveryOperation) {
  WriteHostFile(B("old/kept"), "kept");
  Mount({.flush_delay = 1s, .clock = &clock_});
  ASSERT_TRUE(Mkdir("d").ok());
  ASSERT_TRUE(WriteFile(*fs_, "d/f", "f").ok());
  ASSERT_FALSE(Listed(Ino("old")).empty());
  const std::string too_long(NAME_MAX + 1, 'n');
  const uint64_t file = Ino("d/f");
  for (const char* path : {"d", "old"}) {
    SCOPED_TRACE(path);
    const uint64_t dir = Ino(path);
    EXPECT_EQ(fs_->Lookup(dir, too_long).status().err(), ENAMETOOLONG);
    EXPECT_EQ(fs_->Create(dir, too_long, 0644, O_CREAT | O_WRONLY, Me()).status().err(),
              ENAMETOOLONG);
    EXPECT_EQ(fs_->Mkdir(dir, too_long, 0755, Me()).status().err(), ENAMETOOLONG);
    EXPECT_EQ(fs_->Mknod(dir, too_long, S_IFIFO | 0644, 0, Me()).status().err(), ENAMETOOLONG);
    EXPECT_EQ(fs_->Symlink(dir, too_long, "f", Me()).status().err(), ENAMETOOLONG);
    EXPECT_EQ(fs_->Link(file, dir, too_long).status().err(), ENAMETOOLONG);
    EXPECT_EQ(fs_->Rename(Ino("d"), "f", dir, too_long, 0).err(), ENAMETOOLONG);
    EXPECT_EQ(fs_->Rename(dir, too_long, Ino("d"), "g", 0).err(), ENAMETOOLONG);
    EXPECT_EQ(fs_->Unlink(dir, too_long).err(), ENAMETOOLONG);
    EXPECT_EQ(fs_->Rmdir(dir, too_long).err(), ENAMETOOLONG);
  }
  EXPECT_EQ(fs_->Lookup(kControlDirIno, too_long).status().err(), ENAMETOOLONG);
  const std::string longest(NAME_MAX, 'n');
  ASSERT_TRUE(fs_->Rename(Ino("d"), "f", Ino("d"), longest, 0).ok());
  EXPECT_EQ(fs_->Lookup(Ino("d"), longest)->ino, file);
}

// Found by pjdfstest (rename/23.t): a file renamed over one name of a hard-linked file loses
// that file a link, which changes its ctime, as on a local filesystem.
TEST_F(FilesystemTest, ARenameOverOneNameOfAHardLinkedFileChangesTheFilesCtime) {
  Mount({.flush_delay = 1s, .clock = &clock_});
  ASSERT_TRUE(WriteFile(*fs_, "a", "a").ok());
  ASSERT_TRUE(fs_->Link(Ino("a"), kRootIno, "b").ok());
  ASSERT_TRUE(WriteFile(*fs_, "c", "c").ok());
  const Attr before = *fs_->GetAttr(Ino("b"));
  std::this_thread::sleep_for(10ms);
  ASSERT_TRUE(Rename("c", "a").ok());
  const Attr after = *fs_->GetAttr(Ino("b"));
  EXPECT_EQ(after.nlink, 1u);
  EXPECT_GT(NanosOf(after.ctime), NanosOf(before.ctime));
}

// FIFOs, sockets and device nodes are metadata-only nodes: shown like files, renamed, linked,
// chmodded and removed like them, and created on the backing store in journal order.
TEST_F(FilesystemTest, FifosSocketsAndDeviceNodesAreShownAndPublishedLikeOtherNodes) {
  Mount({.flush_delay = 1s, .clock = &clock_});
  const bool root = geteuid() == 0;
  ASSERT_TRUE(Mkdir("d").ok());
  Result<Attr> fifo = fs_->Mknod(Ino("d"), "fifo", S_IFIFO | 0640, 0, Me());
  ASSERT_TRUE(fifo.ok()) << fifo.status().ToString();
  EXPECT_EQ(fifo->mode, S_IFIFO | 0640u);
  EXPECT_EQ(fifo->size, 0u);
  ASSERT_TRUE(fs_->Mknod(kRootIno, "sock", S_IFSOCK | 0755, 0, Me()).ok());
  if (root) {
    Result<Attr> chr = fs_->Mknod(kRootIno, "null", S_IFCHR | 0600, makedev(1, 3), Me());
    ASSERT_TRUE(chr.ok()) << chr.status().ToString();
    EXPECT_EQ(fs_->GetAttr(chr->ino)->rdev, makedev(1, 3));
    EXPECT_EQ(fs_->GetAttr(chr->ino)->mode, S_IFCHR | 0600u);
  }
  EXPECT_EQ(fs_->Mknod(Ino("d"), "fifo", S_IFIFO | 0600, 0, Me()).status().err(), EEXIST);
  Result<Attr> file = fs_->Mknod(kRootIno, "empty", S_IFREG | 0600, 0, Me());
  ASSERT_TRUE(file.ok()) << file.status().ToString();
  EXPECT_EQ(file->mode, S_IFREG | 0600u);
  EXPECT_EQ(fs_->Open(fifo->ino, O_RDONLY).status().err(), ENXIO);  // The kernel opens it.

  EXPECT_EQ(Listed(Ino("d"))["fifo"], static_cast<uint32_t>(S_IFIFO));
  EXPECT_EQ(Resolve(*fs_, "sock")->mode & S_IFMT, static_cast<uint32_t>(S_IFSOCK));

  ASSERT_TRUE(Rename("d/fifo", "fifo2").ok());
  Result<Attr> linked = fs_->Link(Ino("fifo2"), Ino("d"), "fifo-link");
  ASSERT_TRUE(linked.ok());
  EXPECT_EQ(linked->nlink, 2u);
  SetAttrRequest chmod;
  chmod.mode = 0604;
  ASSERT_TRUE(fs_->SetAttr(Ino("sock"), chmod).ok());
  // Made and removed before a flush: never reaches the backing store.
  ASSERT_TRUE(fs_->Mknod(kRootIno, "brief", S_IFIFO | 0600, 0, Me()).ok());
  ASSERT_TRUE(Unlink("brief").ok());

  ASSERT_TRUE(fs_->Sync().ok());
  Tree expected = {{"d", "<dir>"},          {"d/fifo-link", "<fifo>"}, {"fifo2", "<fifo>"},
                   {"sock", "<socket>"},    {"empty", ""}};
  if (root) expected["null"] = "<chr:1:3>";
  EXPECT_TRUE(SameTree(Backing(), expected));
  struct stat a {}, b {}, sock {};
  ASSERT_EQ(lstat(B("fifo2").c_str(), &a), 0);
  ASSERT_EQ(lstat(B("d/fifo-link").c_str(), &b), 0);
  EXPECT_EQ(a.st_ino, b.st_ino) << "hard link published as two nodes";
  EXPECT_EQ(a.st_mode & 07777, 0640u);
  ASSERT_EQ(lstat(B("sock").c_str(), &sock), 0);
  EXPECT_EQ(sock.st_mode & 07777, 0604u);
  EXPECT_TRUE(StagingLeftovers().empty());

  ASSERT_TRUE(Unlink("fifo2").ok());
  ASSERT_TRUE(fs_->Sync().ok());
  expected.erase("fifo2");
  EXPECT_TRUE(SameTree(Backing(), expected));
}

TEST_F(FilesystemTest, SpecialFilesOnTheBackingStoreAreShownAsSuch) {
  ASSERT_EQ(mkdir(B("d").c_str(), 0755), 0);
  ASSERT_EQ(mkfifo(B("d/fifo").c_str(), 0620), 0);
  ASSERT_EQ(chmod(B("d/fifo").c_str(), 0620), 0);  // Whatever the umask.
  ASSERT_EQ(link(B("d/fifo").c_str(), B("d/fifo2").c_str()), 0);
  ASSERT_EQ(mknod(B("sock").c_str(), S_IFSOCK | 0700, 0), 0);
  const bool root = geteuid() == 0;
  if (root) {
    ASSERT_EQ(mknod(B("zero").c_str(), S_IFCHR | 0640, makedev(1, 5)), 0);
  }
  Mount({.flush_delay = 1s, .clock = &clock_});
  Result<Attr> fifo = Resolve(*fs_, "d/fifo");
  ASSERT_TRUE(fifo.ok()) << fifo.status().ToString();
  EXPECT_EQ(fifo->mode, S_IFIFO | 0620u);
  EXPECT_EQ(fifo->nlink, 2u);
  EXPECT_EQ(Resolve(*fs_, "d/fifo2")->ino, fifo->ino);
  EXPECT_EQ(Resolve(*fs_, "sock")->mode, S_IFSOCK | 0700u);
  if (root) {
    EXPECT_EQ(Resolve(*fs_, "zero")->mode, S_IFCHR | 0640u);
    EXPECT_EQ(Resolve(*fs_, "zero")->rdev, makedev(1, 5));
  }
  std::map<std::string, uint32_t> listed = Listed(kRootIno);
  EXPECT_EQ(listed["sock"], static_cast<uint32_t>(S_IFSOCK));
  EXPECT_EQ(listed.count("zero"), root ? 1u : 0u);
  if (root) {
    EXPECT_EQ(listed["zero"], static_cast<uint32_t>(S_IFCHR));
  }
  ASSERT_TRUE(Rename("d/fifo2", "moved").ok());
  ASSERT_TRUE(fs_->Sync().ok());
  EXPECT_EQ(Backing()["moved"], "<fifo>");
  EXPECT_EQ(Backing().count("d/fifo2"), 0u);
}

// Found by test_differential: removing a subdirectory that never reached the backing store
// cancels its mkdir and rmdir; the parent, itself not flushed yet, must still be moved there.
TEST_F(FilesystemTest, RenameOfADirectoryWhoseSubdirectoryCameAndWentBeforeAFlush) {
  Mount({.flush_delay = 1s, .clock = &clock_});
  ASSERT_TRUE(Mkdir("d1").ok());
  ASSERT_TRUE(Mkdir("d1/d2").ok());
  ASSERT_TRUE(fs_->Rmdir(Ino("d1"), "d2").ok());
  ASSERT_TRUE(WriteFile(*fs_, "d1/f", "f").ok());
  ASSERT_TRUE(Mkdir("d3").ok());
  ASSERT_TRUE(Rename("d1", "d3/l0").ok());
  ASSERT_TRUE(fs_->Sync().ok());
  EXPECT_TRUE(SameTree(Backing(), {{"d3", "<dir>"}, {"d3/l0", "<dir>"}, {"d3/l0/f", "f"}}));
}

TEST_F(FilesystemTest, ReadDirListsEverything) {
  WriteHostFile(B("dir/on_disk"), "1");
  Mount({.flush_delay = 1s, .clock = &clock_});
  ASSERT_TRUE(WriteFile(*fs_, "dir/in_memory", "2").ok());
  ASSERT_TRUE(Mkdir("dir/sub").ok());
  uint64_t dir = Ino("dir");
  Result<uint64_t> dh = fs_->OpenDir(dir);
  ASSERT_TRUE(dh.ok());
  Result<std::vector<DirEntry>> all = fs_->ReadDir(*dh, 0);
  ASSERT_TRUE(all.ok());
  std::map<std::string, uint32_t> got;
  for (const DirEntry& e : *all) got[e.name] = e.type_bits;
  EXPECT_EQ(got, (std::map<std::string, uint32_t>{{".", S_IFDIR}, {"..", S_IFDIR},
                                                  {"on_disk", S_IFREG}, {"in_memory", S_IFREG},
                                                  {"sub", S_IFDIR}}));
  // Offsets resume after the given index.
  Result<std::vector<DirEntry>> rest = fs_->ReadDir(*dh, 2);
  ASSERT_TRUE(rest.ok());
  EXPECT_EQ(rest->size(), 3u);
  EXPECT_TRUE(fs_->ReadDir(*dh, 5)->empty());
  fs_->ReleaseDir(*dh);
}

// Regression: a name deleted on the mount while its deletion is not yet flushed must not come
// back from the backing store when the name is reused and deleted again.
TEST_F(FilesystemTest, RegressionDeletedBackingNameStaysDeletedAfterReuse) {
  WriteHostFile(B("a"), "OLD");
  Mount({.flush_delay = 1s, .clock = &clock_});
  ASSERT_TRUE(Resolve(*fs_, "a").ok());
  ASSERT_TRUE(Unlink("a").ok());
  Result<uint64_t> h = CreatePath(*fs_, "a");  // Reused (empty, never written)...
  ASSERT_TRUE(h.ok());
  ASSERT_TRUE(Close(*fs_, *h).ok());
  ASSERT_TRUE(Unlink("a").ok());  // ...and deleted again.
  Result<Attr> again = Resolve(*fs_, "a");
  EXPECT_EQ(again.status().err(), ENOENT) << "the old backing file came back";
  ASSERT_TRUE(fs_->Sync().ok());
  EXPECT_FALSE(HostExists(B("a")));
}

// Same, with the re-created file written but deleted while still open (never sealed).
TEST_F(FilesystemTest, RegressionDeletedBackingNameStaysDeletedAfterReuseWhileOpen) {
  WriteHostFile(B("dir/a"), "OLD");
  Mount({.flush_delay = 1s, .clock = &clock_});
  ASSERT_TRUE(Unlink("dir/a").ok());
  Result<uint64_t> h = CreatePath(*fs_, "dir/a");
  ASSERT_TRUE(h.ok());
  ASSERT_TRUE(WriteHandle(*fs_, *h, 0, "NEW").ok());
  ASSERT_TRUE(Unlink("dir/a").ok());
  EXPECT_EQ(Resolve(*fs_, "dir/a").status().err(), ENOENT) << "the old backing file came back";
  ASSERT_TRUE(Close(*fs_, *h).ok());
  Result<std::vector<DirEntry>> list = ListDir(*fs_, Ino("dir"));
  ASSERT_TRUE(list.ok());
  EXPECT_TRUE(list->empty()) << "listed: " << (*list)[0].name;
  ASSERT_TRUE(fs_->Sync().ok());
  EXPECT_FALSE(HostExists(B("dir/a")));
}

// Regression (reference model, seed 87): same as above with rename instead of unlink. A backing
// file is renamed away; a new file takes the name and is renamed away too before anything is
// flushed: the old file must not reappear under the name.
TEST_F(FilesystemTest, RegressionRenamedBackingNameStaysGoneAfterReuse) {
  WriteHostFile(B("c"), "OLD");
  Mount({.flush_delay = 1s, .clock = &clock_});
  ASSERT_TRUE(Rename("c", "moved").ok());
  Result<uint64_t> h = CreatePath(*fs_, "c");
  ASSERT_TRUE(h.ok());
  ASSERT_TRUE(WriteHandle(*fs_, *h, 0, "NEW").ok());
  ASSERT_TRUE(Rename("c", "moved2").ok());  // Still open, never sealed.
  EXPECT_EQ(Resolve(*fs_, "c").status().err(), ENOENT) << "the old backing file came back";
  ASSERT_TRUE(Close(*fs_, *h).ok());
  ASSERT_TRUE(fs_->Sync().ok());
  EXPECT_TRUE(SameTree(Backing(), (Tree{{"moved", "OLD"}, {"moved2", "NEW"}})));
}

// Regression (reference model, seed 51): a file that never reached the backing store is renamed
// over a file that is there, then deleted. Cancelling the new file's journal entries must not
// cancel the removal of the file it replaced.
TEST_F(FilesystemTest, RegressionUnlinkOfUnflushedFileRenamedOverBackingFile) {
  WriteHostFile(B("ckpt"), "OLD");
  Mount({.flush_delay = 1s, .clock = &clock_});
  ASSERT_TRUE(WriteFile(*fs_, "ckpt.tmp", "NEW").ok());  // Sealed, not flushed yet.
  ASSERT_TRUE(Rename("ckpt.tmp", "ckpt").ok());           // Replaces the backing file.
  ASSERT_TRUE(Unlink("ckpt").ok());
  EXPECT_EQ(Resolve(*fs_, "ckpt").status().err(), ENOENT);
  ASSERT_TRUE(fs_->Sync().ok());
  EXPECT_TRUE(SameTree(Backing(), Tree{})) << "the replaced file survived on the backing store";
  ASSERT_TRUE(Shutdown().ok());
  EXPECT_TRUE(SameTree(Backing(), Tree{}));
}

// Same, when the replaced file reached the backing store through the mount.
TEST_F(FilesystemTest, RegressionUnlinkOfUnflushedFileRenamedOverFlushedFile) {
  Mount({.flush_delay = 1s, .clock = &clock_});
  ASSERT_TRUE(WriteFile(*fs_, "b", "OLD").ok());
  ASSERT_TRUE(fs_->Sync().ok());
  ASSERT_TRUE(WriteFile(*fs_, "x.tmp", "NEW").ok());
  ASSERT_TRUE(Rename("x.tmp", "b").ok());
  ASSERT_TRUE(Unlink("b").ok());
  ASSERT_TRUE(fs_->Sync().ok());
  EXPECT_TRUE(SameTree(Backing(), Tree{})) << "the replaced file survived on the backing store";
}

// ---------------------------------------------------------------------------------------------
// Ordering and durability.

TEST_F(FilesystemTest, FsyncMakesTheFileAndEverythingClosedBeforeItDurable) {
  Mount({.flush_delay = 1s, .clock = &clock_});
  ASSERT_TRUE(WriteFile(*fs_, "data0", Pattern(1, 70000)).ok());
  ASSERT_TRUE(WriteFile(*fs_, "data1", Pattern(2, 70000)).ok());
  Result<uint64_t> h = CreatePath(*fs_, "tracker");
  ASSERT_TRUE(h.ok());
  ASSERT_TRUE(WriteHandle(*fs_, *h, 0, "1").ok());
  EXPECT_FALSE(HostExists(B("data0")));
  ASSERT_TRUE(fs_->Fsync(*h).ok());
  EXPECT_TRUE(SameBytes(ReadHostFile(B("data0")).value_or("<missing>"), Pattern(1, 70000)));
  EXPECT_TRUE(SameBytes(ReadHostFile(B("data1")).value_or("<missing>"), Pattern(2, 70000)));
  EXPECT_EQ(ReadHostFile(B("tracker")).value_or("<missing>"), "1");
  ASSERT_TRUE(Close(*fs_, *h).ok());
}

TEST_F(FilesystemTest, FilesArePublishedInCloseOrder) {
  Mount({.flush_delay = 0ms});
  constexpr int kFiles = 40;
  const size_t kSize = 256 * 1024 + 7;
  std::atomic<bool> done{false};
  std::atomic<int> violations{0}, torn{0}, observations{0};
  std::string first_violation;
  std::thread poller([&] {
    while (!done.load()) {
      // Newest first: if file k exists now, every file closed before it existed already and
      // must still exist when we look at it next.
      bool seen_newer = false;
      int newer = -1;
      for (int i = kFiles - 1; i >= 0; --i) {
        struct stat st {};
        bool exists = stat(B("f" + std::to_string(i)).c_str(), &st) == 0;
        if (exists && static_cast<size_t>(st.st_size) != kSize) torn++;
        if (exists && !seen_newer) {
          seen_newer = true;
          newer = i;
          observations++;
        } else if (!exists && seen_newer) {
          if (violations++ == 0) {
            first_violation = "f" + std::to_string(newer) + " published before f" +
                              std::to_string(i);
          }
        }
      }
    }
  });
  for (int i = 0; i < kFiles; ++i) {
    Status st = WriteFile(*fs_, "f" + std::to_string(i), Pattern(i, kSize));
    EXPECT_TRUE(st.ok()) << st.ToString();
  }
  ASSERT_TRUE(fs_->Sync().ok());
  done = true;
  poller.join();
  EXPECT_EQ(violations.load(), 0) << first_violation;
  EXPECT_EQ(torn.load(), 0) << "a file was visible under its final name with the wrong size";
  for (int i = 0; i < kFiles; ++i) {
    EXPECT_TRUE(SameBytes(ReadHostFile(B("f" + std::to_string(i))).value_or(""),
                          Pattern(i, kSize)));
  }
  EXPECT_TRUE(StagingLeftovers().empty());
  RecordProperty("observations", observations.load());
}

// ---------------------------------------------------------------------------------------------
// Coalescing.

TEST_F(FilesystemTest, FileCreatedAndDeletedBeforeFlushNeverReachesBacking) {
  Mount({.flush_delay = 1s, .clock = &clock_});
  ASSERT_TRUE(Mkdir("tmpdir").ok());
  ASSERT_TRUE(WriteFile(*fs_, "tmpdir/scratch", Pattern(5, 300000)).ok());
  ASSERT_TRUE(WriteFile(*fs_, "keep", "k").ok());
  ASSERT_TRUE(Unlink("tmpdir/scratch").ok());
  ASSERT_TRUE(fs_->Rmdir(kRootIno, "tmpdir").ok());
  ASSERT_TRUE(fs_->Sync().ok());
  EXPECT_TRUE(SameTree(Backing(), (Tree{{"keep", "k"}})));
  EXPECT_EQ(StatOf(*fs_, "files_flushed"), 1u);
  EXPECT_GE(StatOf(*fs_, "versions_skipped"), 1u);
  EXPECT_LT(StatOf(*fs_, "bytes_flushed"), 300000u) << "the deleted file was written";
  EXPECT_TRUE(StagingLeftovers().empty());
}

TEST_F(FilesystemTest, FileRewrittenManyTimesBeforeFlushIsWrittenOnce) {
  Mount({.flush_delay = 1s, .clock = &clock_});
  constexpr int kRewrites = 10;
  for (int i = 0; i < kRewrites; ++i) {
    ASSERT_TRUE(WriteFile(*fs_, "chunk", Pattern(100 + i, 100000)).ok());
  }
  ASSERT_TRUE(fs_->Sync().ok());
  EXPECT_TRUE(SameBytes(*ReadHostFile(B("chunk")), Pattern(100 + kRewrites - 1, 100000)));
  EXPECT_EQ(StatOf(*fs_, "files_flushed"), 1u);
  EXPECT_EQ(StatOf(*fs_, "versions_skipped"), static_cast<uint64_t>(kRewrites - 1));
  EXPECT_EQ(StatOf(*fs_, "bytes_flushed"), 100000u);
}

TEST_F(FilesystemTest, TempFileAndRenameRewritesAreWrittenOnce) {
  // zarr's way: write <chunk>.tmp, rename over <chunk>; many times before the flush.
  Mount({.flush_delay = 1s, .clock = &clock_});
  ASSERT_TRUE(Mkdir("arr").ok());
  for (int i = 0; i < 8; ++i) {
    ASSERT_TRUE(WriteFile(*fs_, "arr/0.0.tmp", Pattern(200 + i, 90000)).ok());
    ASSERT_TRUE(Rename("arr/0.0.tmp", "arr/0.0").ok());
  }
  ASSERT_TRUE(fs_->Sync().ok());
  EXPECT_TRUE(SameTree(Backing(), (Tree{{"arr", "<dir>"}, {"arr/0.0", Pattern(207, 90000)}})));
  EXPECT_EQ(StatOf(*fs_, "files_flushed"), 1u);
  EXPECT_EQ(StatOf(*fs_, "versions_skipped"), 7u);
  EXPECT_TRUE(StagingLeftovers().empty());
}

// ---------------------------------------------------------------------------------------------
// Bounded memory. Run in a child process with a deadline, so that a writer stuck in
// back-pressure fails the test instead of hanging the suite.

// Runs `body` in a forked child; returns "" on success, else what went wrong.
std::string RunWithDeadline(std::chrono::seconds limit, const std::function<std::string()>& body) {
  int pipefd[2];
  if (pipe(pipefd) != 0) return "pipe failed";
  pid_t pid = fork();
  if (pid == 0) {
    close(pipefd[0]);
    std::string err;
    try {
      err = body();
    } catch (const std::exception& e) {
      err = std::string("exception: ") + e.what();
    }
    if (!err.empty()) (void)!write(pipefd[1], err.data(), err.size());
    close(pipefd[1]);
    _exit(err.empty() ? 0 : 1);
  }
  close(pipefd[1]);
  std::string msg;
  auto deadline = std::chrono::steady_clock::now() + limit;
  bool timed_out = false;
  while (true) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      timed_out = true;
      break;
    }
    pollfd p{pipefd[0], POLLIN, 0};
    int r = poll(&p, 1, static_cast<int>(left.count()));
    if (r <= 0) continue;
    char buf[512];
    ssize_t n = read(pipefd[0], buf, sizeof buf);
    if (n <= 0) break;  // EOF: the child finished.
    msg.append(buf, static_cast<size_t>(n));
  }
  close(pipefd[0]);
  if (timed_out) {
    kill(pid, SIGKILL);
    waitpid(pid, nullptr, 0);
    return "timed out after " + std::to_string(limit.count()) + " s (writer stuck?) " + msg;
  }
  int status = 0;
  waitpid(pid, &status, 0);
  if (!WIFEXITED(status)) return "child died: " + std::to_string(status) + " " + msg;
  if (WEXITSTATUS(status) != 0) return msg.empty() ? "child failed" : msg;
  return "";
}

TEST_F(FilesystemTest, FileLargerThanTheCacheStreamsThroughWithinTheBound) {
  constexpr uint64_t kCache = 16ull << 20;
  constexpr size_t kMiB = 1 << 20;
  constexpr int kTotalMiB = 100;
  const std::string backing = backing_.path();
  std::string err = RunWithDeadline(120s, [&]() -> std::string {
    std::unique_ptr<Filesystem> fs =
        StartFs(backing, {.cache_size = kCache, .flush_delay = 300ms});
    if (!fs) return "mount failed";
    Result<uint64_t> h = CreatePath(*fs, "huge.bin");
    if (!h.ok()) return "create: " + h.status().ToString();
    uint64_t peak = 0;
    for (int i = 0; i < kTotalMiB; ++i) {
      std::string piece = Pattern(1000 + i, kMiB);
      Status st = WriteHandle(*fs, *h, uint64_t(i) * kMiB, piece);
      if (!st.ok()) return "write " + std::to_string(i) + ": " + st.ToString();
      auto stats = StatsOf(*fs);
      peak = std::max(peak, stats.at("memory_used").get<uint64_t>());
      if (stats.at("memory_used").get<uint64_t>() > kCache ||
          stats.at("memory_mapped").get<uint64_t>() > kCache) {
        return "memory above the cache size after MiB " + std::to_string(i) + ": " + fs->StatsJson();
      }
    }
    // Read back a few pieces through the mount while still open.
    for (int i : {0, 37, kTotalMiB - 1}) {
      Result<ReadData> r = fs->Read(*h, uint64_t(i) * kMiB, kMiB);
      if (!r.ok()) return "read: " + r.status().ToString();
      std::string got = Materialize(*r);
      if (got != Pattern(1000 + i, kMiB)) return "read back MiB " + std::to_string(i) + " differs";
    }
    Status st = Close(*fs, *h);
    if (!st.ok()) return "close: " + st.ToString();
    st = fs->Sync();
    if (!st.ok()) return "sync: " + st.ToString();
    st = fs->Shutdown();
    if (!st.ok()) return "shutdown: " + st.ToString();
    int fd = open((backing + "/huge.bin").c_str(), O_RDONLY);
    if (fd < 0) return "huge.bin missing on the backing store";
    std::string buf(kMiB, '\0');
    for (int i = 0; i < kTotalMiB; ++i) {
      ssize_t n = pread(fd, buf.data(), kMiB, off_t(i) * kMiB);
      if (n != ssize_t(kMiB) || buf != Pattern(1000 + i, kMiB)) {
        close(fd);
        return "backing huge.bin differs in MiB " + std::to_string(i);
      }
    }
    struct stat stbuf {};
    fstat(fd, &stbuf);
    close(fd);
    if (uint64_t(stbuf.st_size) != uint64_t(kTotalMiB) * kMiB) return "backing huge.bin has the wrong size";
    fs.reset();  // The spill file goes with the content that reads from it.
    if (!HostList(backing + "/.ckptfs/staging").empty()) return "staging leftovers";
    return "";
  });
  EXPECT_EQ(err, "");
}

// ---------------------------------------------------------------------------------------------
// Flush timing, on a clock the test moves.

// Whether `path` shows up on the backing store within `within` of real time (the flusher looks
// at its clock at least every 100 ms).
bool ShowsUpWithin(const std::string& path, std::chrono::milliseconds within) {
  auto deadline = std::chrono::steady_clock::now() + within;
  while (!HostExists(path)) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(10ms);
  }
  return true;
}

TEST_F(FilesystemTest, AVersionIsFlushedOnceFlushDelayHasPassedOnTheClock) {
  Mount({.flush_delay = 30s, .clock = &clock_});
  ASSERT_TRUE(WriteFile(*fs_, "tracker", "1").ok());
  clock_.Advance(29s);
  EXPECT_FALSE(ShowsUpWithin(B("tracker"), 300ms));
  clock_.Advance(2s);
  EXPECT_TRUE(ShowsUpWithin(B("tracker"), 10s));
  EXPECT_EQ(ReadHostFile(B("tracker")).value_or("<missing>"), "1");
}

TEST_F(FilesystemTest, AFileSealedAgainSoonWaitsTwiceAsLongAndOnlyItsLastVersionIsFlushed) {
  Mount({.flush_delay = 10s, .clock = &clock_});
  ASSERT_TRUE(WriteFile(*fs_, "tracker", "1").ok());
  clock_.Advance(5s);
  // Sealed again within twice its wait: the new version waits 20 s, the old one is dropped.
  ASSERT_TRUE(WriteFile(*fs_, "tracker", "2").ok());
  clock_.Advance(15s);
  EXPECT_FALSE(ShowsUpWithin(B("tracker"), 300ms));
  clock_.Advance(6s);
  EXPECT_TRUE(ShowsUpWithin(B("tracker"), 10s));
  EXPECT_EQ(ReadHostFile(B("tracker")).value_or("<missing>"), "2");
  EXPECT_EQ(StatOf(*fs_, "versions_skipped"), 1u);
}

// ---------------------------------------------------------------------------------------------
// Errors.

TEST_F(FilesystemTest, FlushErrorsAreReportedAndDataLandsAfterHealing) {
  Mount({.flush_delay = 0ms, .fault = true});
  ASSERT_NE(fault_, nullptr);
  ASSERT_TRUE(Mkdir("ckpt").ok());
  ASSERT_TRUE(fs_->Sync().ok());
  fault_->FailWritesFrom(0, ENOSPC);
  std::string data = Pattern(42, 300000);
  Result<uint64_t> h = CreatePath(*fs_, "ckpt/data.bin");
  ASSERT_TRUE(h.ok());
  ASSERT_TRUE(WriteHandle(*fs_, *h, 0, data).ok());

  Status fs1 = fs_->Fsync(*h);
  EXPECT_EQ(fs1.err(), ENOSPC) << fs1.ToString();
  EXPECT_NE(fs1.message().find("ckpt/data.bin"), std::string::npos) << fs1.ToString();
  Status sync = fs_->Sync();
  EXPECT_EQ(sync.err(), ENOSPC) << sync.ToString();
  EXPECT_NE(sync.message().find("ckpt/data.bin"), std::string::npos) << sync.ToString();
  // close() reports it once.
  Status c1 = fs_->Flush(*h, 0);
  EXPECT_EQ(c1.err(), ENOSPC) << c1.ToString();
  EXPECT_NE(c1.message().find("ckpt/data.bin"), std::string::npos) << c1.ToString();
  EXPECT_TRUE(fs_->Flush(*h, 0).ok()) << "the same error reported twice by close";
  EXPECT_TRUE(fs_->Release(*h).ok());
  // Visible in the stats; the data is still served from memory; nothing torn on disk.
  auto stats = StatsOf(*fs_);
  EXPECT_GE(stats.at("flush_errors").get<uint64_t>(), 1u);
  EXPECT_NE(stats.at("last_error").get<std::string>().find("ckpt/data.bin"), std::string::npos)
      << stats.dump();
  EXPECT_TRUE(SameBytes(*ReadFile(*fs_, "ckpt/data.bin"), data));
  EXPECT_FALSE(HostExists(B("ckpt/data.bin")));

  fault_->Heal();
  // One retry that started before Heal() may still fail; the next one must succeed.
  Status healed = fs_->Sync();
  if (!healed.ok()) healed = fs_->Sync();
  ASSERT_TRUE(healed.ok()) << healed.ToString();
  EXPECT_TRUE(SameBytes(ReadHostFile(B("ckpt/data.bin")).value_or("<missing>"), data));
  EXPECT_EQ(StatsOf(*fs_).at("last_error").get<std::string>(), "");
  EXPECT_TRUE(StagingLeftovers().empty());
  ASSERT_TRUE(Shutdown().ok());
  EXPECT_TRUE(SameBytes(ReadHostFile(B("ckpt/data.bin")).value_or("<missing>"), data));
}

TEST_F(FilesystemTest, CloseAfterAFailedFlushReportsIt) {
  Mount({.flush_delay = 0ms, .fault = true});
  fault_->FailWritesFrom(0, EIO);
  ASSERT_TRUE(WriteFile(*fs_, "first", Pattern(1, 1000)).ok());  // Sealed, then fails.
  Status sync = fs_->Sync();
  EXPECT_EQ(sync.err(), EIO);
  // A reader's close is not told; a writer's close of the failed file gets the error, once.
  Result<OpenFile> r = fs_->Open(Ino("first"), O_RDONLY);
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(fs_->Flush(r->handle, 0).ok());
  EXPECT_TRUE(fs_->Release(r->handle).ok());
  Result<OpenFile> o = fs_->Open(Ino("first"), O_RDWR);
  ASSERT_TRUE(o.ok());
  Status c = fs_->Flush(o->handle, 0);
  EXPECT_EQ(c.err(), EIO) << c.ToString();
  EXPECT_TRUE(fs_->Flush(o->handle, 0).ok());
  EXPECT_TRUE(fs_->Release(o->handle).ok());
  fault_->Heal();
  Status healed = fs_->Sync();
  if (!healed.ok()) healed = fs_->Sync();
  ASSERT_TRUE(healed.ok()) << healed.ToString();
  EXPECT_EQ(ReadHostFile(B("first")).value_or("<missing>"), Pattern(1, 1000));
}

// A rename, mkdir or directory fsync the backing store refuses is reported like a failed data
// write, holds back everything journaled after it, and lands when retried.
using Fault = FaultInjectingEnv::Fault;

// Heals the fault and waits until everything is durable: a retry that started before Heal()
// may still fail; the next one must succeed.
Status HealAndSync(FaultInjectingEnv& fault, Filesystem& fs) {
  fault.Heal();
  Status healed = fs.Sync();
  return healed.ok() ? healed : fs.Sync();
}

TEST_F(FilesystemTest, ARenameTheBackingStoreRefusesHoldsBackTheTrackerUntilItIsRetried) {
  Mount({.flush_delay = 0ms, .fault = true});
  ASSERT_TRUE(Mkdir("ckpt").ok());
  ASSERT_TRUE(WriteFile(*fs_, "ckpt/shard.tmp", Pattern(3, 70000)).ok());
  ASSERT_TRUE(fs_->Sync().ok());
  fault_->Inject(Fault(Env::Op::kRename, EIO).Named("shard.bin"));
  ASSERT_TRUE(Rename("ckpt/shard.tmp", "ckpt/shard.bin").ok());
  ASSERT_TRUE(WriteFile(*fs_, "latest", "1").ok());

  Status sync = fs_->Sync();
  EXPECT_EQ(sync.err(), EIO) << sync.ToString();
  EXPECT_NE(sync.message().find("shard"), std::string::npos) << sync.ToString();
  EXPECT_GE(StatOf(*fs_, "flush_errors"), 1u);
  // The mount shows the rename; the backing store has neither it nor the tracker after it.
  EXPECT_TRUE(SameBytes(*ReadFile(*fs_, "ckpt/shard.bin"), Pattern(3, 70000)));
  EXPECT_TRUE(
      SameTree(Backing(), (Tree{{"ckpt", "<dir>"}, {"ckpt/shard.tmp", Pattern(3, 70000)}})));

  Status healed = HealAndSync(*fault_, *fs_);
  ASSERT_TRUE(healed.ok()) << healed.ToString();
  EXPECT_TRUE(SameTree(Backing(), (Tree{{"ckpt", "<dir>"},
                                        {"ckpt/shard.bin", Pattern(3, 70000)},
                                        {"latest", "1"}})));
  EXPECT_TRUE(StagingLeftovers().empty());
}

TEST_F(FilesystemTest, AMkdirTheBackingStoreRefusesHoldsBackTheFilesInsideIt) {
  Mount({.flush_delay = 0ms, .fault = true});
  fault_->Inject(Fault(Env::Op::kMkdir, ENOSPC).Named("iter_2"));
  ASSERT_TRUE(Mkdir("iter_2").ok());
  ASSERT_TRUE(WriteFile(*fs_, "iter_2/model.pt", Pattern(4, 5000)).ok());
  ASSERT_TRUE(WriteFile(*fs_, "latest", "2").ok());

  Status sync = fs_->Sync();
  EXPECT_EQ(sync.err(), ENOSPC) << sync.ToString();
  EXPECT_NE(sync.message().find("iter_2"), std::string::npos) << sync.ToString();
  EXPECT_TRUE(SameTree(Backing(), Tree{}));
  EXPECT_TRUE(SameBytes(*ReadFile(*fs_, "iter_2/model.pt"), Pattern(4, 5000)));

  Status healed = HealAndSync(*fault_, *fs_);
  ASSERT_TRUE(healed.ok()) << healed.ToString();
  EXPECT_TRUE(SameTree(Backing(), (Tree{{"iter_2", "<dir>"},
                                        {"iter_2/model.pt", Pattern(4, 5000)},
                                        {"latest", "2"}})));
  EXPECT_TRUE(StagingLeftovers().empty());
}

TEST_F(FilesystemTest, ADirectoryFsyncThatFailsIsReportedAndRetriedWithoutApplyingTwice) {
  // Nothing is flushed before Sync(): the rename and the new file go in one batch. The steady
  // clock: retries back off in the policy's time.
  Mount({.flush_delay = 1h, .fault = true});
  ASSERT_TRUE(Mkdir("ckpt").ok());
  ASSERT_TRUE(WriteFile(*fs_, "ckpt/a", "first").ok());
  ASSERT_TRUE(fs_->Sync().ok());
  fault_->Inject(Fault(Env::Op::kSync, EIO).Named("fsync"));
  ASSERT_TRUE(Rename("ckpt/a", "ckpt/b").ok());
  ASSERT_TRUE(WriteFile(*fs_, "ckpt/c", "second").ok());

  Status sync = fs_->Sync();
  EXPECT_EQ(sync.err(), EIO) << sync.ToString();
  EXPECT_NE(sync.message().find("sync of directories"), std::string::npos) << sync.ToString();
  EXPECT_GE(StatOf(*fs_, "flush_errors"), 1u);
  const uint64_t renames = fault_->calls(Env::Op::kRename);

  Status healed = HealAndSync(*fault_, *fs_);
  ASSERT_TRUE(healed.ok()) << healed.ToString();
  // The retry synced the directories again; it did not rename or publish anything twice.
  EXPECT_EQ(fault_->calls(Env::Op::kRename), renames);
  EXPECT_TRUE(SameTree(Backing(),
                       (Tree{{"ckpt", "<dir>"}, {"ckpt/b", "first"}, {"ckpt/c", "second"}})));
  EXPECT_TRUE(StagingLeftovers().empty());
  EXPECT_EQ(StatsOf(*fs_).at("last_error").get<std::string>(), "");
}

TEST_F(FilesystemTest, ShutdownWithAFailingBackingStoreSavesFilesToARescueDirectory) {
  Mount({.flush_delay = 0ms, .unmount_retry = 300ms, .fault = true});
  ASSERT_TRUE(Mkdir("run").ok());
  ASSERT_TRUE(fs_->Sync().ok());
  fault_->FailWritesFrom(0, EIO);
  std::string a = Pattern(7, 200000), b = Pattern(8, 5000), c = "unclosed";
  ASSERT_TRUE(WriteFile(*fs_, "run/a.bin", a).ok());
  ASSERT_TRUE(WriteFile(*fs_, "b.bin", b).ok());
  Result<uint64_t> h = CreatePath(*fs_, "run/c.bin");
  ASSERT_TRUE(h.ok());
  ASSERT_TRUE(WriteHandle(*fs_, *h, 0, c).ok());

  Status st = Shutdown();
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.err(), EIO) << st.ToString();
  for (const char* name : {"run/a.bin", "b.bin", "run/c.bin"}) {
    EXPECT_NE(st.message().find(name), std::string::npos) << name << " not named: " << st.ToString();
  }
  const std::string marker = "saved to ";
  size_t at = st.message().find(marker);
  ASSERT_NE(at, std::string::npos) << st.ToString();
  std::string rescue = st.message().substr(at + marker.size());
  EXPECT_TRUE(SameBytes(ReadHostFile(rescue + "/run/a.bin").value_or("<missing>"), a));
  EXPECT_TRUE(SameBytes(ReadHostFile(rescue + "/b.bin").value_or("<missing>"), b));
  EXPECT_EQ(ReadHostFile(rescue + "/run/c.bin").value_or("<missing>"), c);
  // Nothing half-written under a final name.
  EXPECT_TRUE(SameTree(Backing(), (Tree{{"run", "<dir>"}})));
  EXPECT_TRUE(StagingLeftovers().empty());
  EXPECT_TRUE(fs_->Release(*h).ok());
}

// Without CAP_MKNOD (or on a backing filesystem that refuses them) device nodes fail at once
// with EPERM, before anything is shown; FIFOs still work.
TEST_F(FilesystemTest, DeviceNodesFailWithEpermWhereTheBackingStoreTakesNone) {
  const std::string backing = backing_.path();
  std::string err = RunWithDeadline(60s, [&]() -> std::string {
    __user_cap_header_struct header{_LINUX_CAPABILITY_VERSION_3, 0};
    __user_cap_data_struct caps[2] {};
    if (syscall(SYS_capget, &header, caps) != 0) return "capget failed";
    caps[CAP_MKNOD / 32].effective &= ~(1u << (CAP_MKNOD % 32));
    if (syscall(SYS_capset, &header, caps) != 0) return "capset failed";
    std::unique_ptr<Filesystem> fs = StartFs(backing, {.flush_delay = 0ms});
    if (!fs) return "mount failed";
    Result<Attr> dev = fs->Mknod(kRootIno, "null", S_IFCHR | 0600, makedev(1, 3), Me());
    if (dev.ok() || dev.status().err() != EPERM) {
      return "mknod of a device: " +
             (dev.ok() ? std::string("succeeded") : dev.status().ToString());
    }
    if (fs->Lookup(kRootIno, "null").ok()) return "the refused device node is shown";
    if (!fs->Mknod(kRootIno, "fifo", S_IFIFO | 0600, 0, Me()).ok()) return "mkfifo failed";
    Status st = fs->Shutdown();
    if (!st.ok()) return "shutdown: " + st.ToString();
    return HostExists(backing + "/fifo") ? "" : "the FIFO did not reach the backing store";
  });
  EXPECT_EQ(err, "");
}

// ---------------------------------------------------------------------------------------------
// Shared mode: two mounts over one backing directory, as on two nodes.

class SharedFilesystemTest : public ::testing::Test {
 protected:
  void SetUp() override {
    a_ = StartShared("a");
    b_ = StartShared("b");
    ASSERT_TRUE(a_ && b_);
  }
  void TearDown() override {
    for (std::unique_ptr<Filesystem>* fs : {&a_, &b_}) {
      if (*fs) {
        EXPECT_TRUE((*fs)->Shutdown().ok());
      }
      fs->reset();
    }
  }
  // A started mount `node` whose flushes wait for a sync (the clock moves only by the
  // attribute timeout).
  std::unique_ptr<Filesystem> StartShared(const std::string& node) {
    Config config;
    config.backing_dir = backing_.path();
    config.cache_size = 64ull << 20;
    config.flush_delay = 1h;
    config.queue_depth = 16;
    config.shared = true;
    config.node = node;
    Result<std::unique_ptr<Filesystem>> fs =
        Filesystem::Make(config, MakeTestEnv(config.queue_depth), clock_);
    if (!fs.ok()) {
      ADD_FAILURE() << "Filesystem::Make: " << fs.status().ToString();
      return nullptr;
    }
    (*fs)->Start();
    return std::move(*fs);
  }
  void PassAttrTimeout() { clock_.Advance(kAttrTimeout + 1ms); }
  static std::set<std::string> Names(Filesystem& fs, const std::string& dir) {
    std::set<std::string> names;
    Result<Attr> a = dir.empty() ? fs.GetAttr(kRootIno) : Resolve(fs, dir);
    if (!a.ok()) return names;
    Result<std::vector<DirEntry>> entries = ListDir(fs, a->ino);
    for (const DirEntry& e : entries.ok() ? *entries : std::vector<DirEntry>{}) {
      names.insert(e.name);
    }
    return names;
  }

  ManualClock clock_;
  TempDir backing_;
  std::unique_ptr<Filesystem> a_, b_;
};

TEST_F(SharedFilesystemTest, AFileSyncedThroughOneMountIsReadThroughTheOtherWithEachNewVersion) {
  ASSERT_TRUE(WriteFile(*a_, "f", "first").ok());
  ASSERT_TRUE(a_->Sync().ok());
  EXPECT_EQ(ReadFile(*b_, "f").value(), "first");

  ASSERT_TRUE(WriteFile(*a_, "f", "second, longer").ok());
  ASSERT_TRUE(a_->Sync().ok());
  EXPECT_EQ(Resolve(*b_, "f")->size, 5u) << "attributes younger than the timeout are kept";
  PassAttrTimeout();
  Result<Attr> attr = Resolve(*b_, "f");
  ASSERT_TRUE(attr.ok());
  EXPECT_EQ(attr->size, 14u);
  Result<OpenFile> opened = b_->Open(attr->ino, O_RDONLY);
  ASSERT_TRUE(opened.ok());
  EXPECT_FALSE(opened->keep_cache) << "the kernel's pages hold the old version";
  EXPECT_EQ(ReadHandle(*b_, opened->handle, 100).value(), "second, longer");
  ASSERT_TRUE(b_->Release(opened->handle).ok());

  ASSERT_TRUE(WriteFile(*a_, "f", "third").ok());
  ASSERT_TRUE(a_->Sync().ok());
  EXPECT_EQ(ReadFile(*b_, "f").value(), "third") << "an open reads the backing file anew";
}

TEST_F(SharedFilesystemTest, AFileChangedThroughAMountKeepsItsVersionThereUntilFlushed) {
  ASSERT_TRUE(WriteFile(*a_, "f", "from a").ok());
  ASSERT_TRUE(a_->Sync().ok());
  ASSERT_TRUE(WriteFile(*b_, "f", "from b, unflushed").ok());
  ASSERT_TRUE(WriteFile(*a_, "f", "from a again").ok());
  ASSERT_TRUE(a_->Sync().ok());
  PassAttrTimeout();
  EXPECT_EQ(ReadFile(*b_, "f").value(), "from b, unflushed");
  ASSERT_TRUE(b_->Sync().ok());
  EXPECT_EQ(ReadHostFile(backing_ / "f").value(), "from b, unflushed") << "the last flush wins";
}

TEST_F(SharedFilesystemTest, ADirectoryListedBeforeAnotherMountAddedFilesShowsThemAfterTheTimeout) {
  ASSERT_TRUE(a_->Mkdir(kRootIno, "ckpt", 0755, Me()).ok());
  EXPECT_TRUE(Names(*b_, "ckpt").empty());
  ASSERT_TRUE(WriteFile(*a_, "ckpt/rank0", "0").ok());
  ASSERT_TRUE(WriteFile(*a_, "ckpt/rank1", "1").ok());
  ASSERT_TRUE(a_->Sync().ok());
  PassAttrTimeout();
  EXPECT_EQ(Names(*b_, "ckpt"), (std::set<std::string>{"rank0", "rank1"}));
  EXPECT_EQ(ReadFile(*b_, "ckpt/rank1").value(), "1");
}

TEST_F(SharedFilesystemTest, ANameRemovedFromTheBackingStoreDisappearsFromTheOtherMount) {
  ASSERT_TRUE(WriteFile(*a_, "old", "x").ok());
  ASSERT_TRUE(a_->Sync().ok());
  ASSERT_EQ(Names(*b_, ""), (std::set<std::string>{"old"}));
  ASSERT_TRUE(a_->Unlink(kRootIno, "old").ok());
  ASSERT_TRUE(a_->Sync().ok());
  PassAttrTimeout();
  EXPECT_TRUE(Names(*b_, "").empty());
  EXPECT_EQ(b_->Lookup(kRootIno, "old").status().err(), ENOENT);
}

TEST_F(SharedFilesystemTest, ANameUnlinkedThroughAMountStaysHiddenThereUntilTheUnlinkIsFlushed) {
  ASSERT_TRUE(WriteFile(*a_, "f", "x").ok());
  ASSERT_TRUE(a_->Sync().ok());
  ASSERT_TRUE(b_->Lookup(kRootIno, "f").ok());
  ASSERT_TRUE(b_->Unlink(kRootIno, "f").ok());
  PassAttrTimeout();
  EXPECT_TRUE(HostExists(backing_ / "f"));
  EXPECT_TRUE(Names(*b_, "").empty());
  EXPECT_EQ(b_->Lookup(kRootIno, "f").status().err(), ENOENT);
  ASSERT_TRUE(b_->Sync().ok());
  EXPECT_FALSE(HostExists(backing_ / "f"));
}

TEST_F(SharedFilesystemTest, ADirectoryMadeThroughOneMountIsOnTheBackingStoreAtOnce) {
  ASSERT_TRUE(Names(*b_, "").empty());  // b has listed the root: it is complete there.
  ASSERT_TRUE(a_->Mkdir(kRootIno, "iter_0000100", 0755, Me()).ok());
  EXPECT_TRUE(HostExists(backing_ / "iter_0000100")) << "made before the mkdir returned";
  ASSERT_TRUE(WriteFile(*b_, "iter_0000100/rank1.distcp", "shard").ok());
  ASSERT_TRUE(b_->Sync().ok());
  ASSERT_TRUE(a_->Sync().ok()) << "the journaled mkdir finds the directory made";
  EXPECT_EQ(ReadHostFile(backing_ / "iter_0000100/rank1.distcp").value(), "shard");
}

TEST_F(FilesystemTest, WithoutSharedModeAListedDirectoryIsNotReadAgain) {
  Mount({.flush_delay = 1s, .clock = &clock_});
  ASSERT_TRUE(Listed(kRootIno).count("late") == 0);
  WriteHostFile(B("late"), "x");
  clock_.Advance(1h);
  EXPECT_EQ(Listed(kRootIno).count("late"), 0u);
  EXPECT_EQ(fs_->Lookup(kRootIno, "late").status().err(), ENOENT);
}

}  // namespace
}  // namespace ckptfs
