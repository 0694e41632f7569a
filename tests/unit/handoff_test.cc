// Tests of handing a mount from one worker to the next (core/recovery/handoff.h): the image's
// encoding, which takes untrusted input, and Filesystem::Handoff / Filesystem::Restore over a real
// backing directory, calling the new worker with the inode numbers and handles the kernel kept.
#include "core/recovery/handoff.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <string>

#include "core/backing/backing_store.h"
#include "core_test_util.h"

namespace ckptfs {
namespace {

using namespace std::chrono_literals;
using namespace testing_util;

HandoffImage SampleImage() {
  HandoffImage image;
  image.inodes.push_back({.ino = 16, .parent = kRootIno, .name = "ckpt", .lookups = 2});
  image.inodes.push_back({.ino = 17, .parent = 16, .name = "model.pt", .lookups = 1,
                          .has_content = true, .size = 12345, .mode = 0644, .uid = 5,
                          .gid = 6, .mtime_ns = 1'700'000'000'123'456'789,
                          .ctime_ns = 1'700'000'001'000'000'000});
  image.inodes.push_back({.ino = 18, .parent = 0, .name = "", .lookups = 1,
                          .has_content = true, .in_memory = true,
                          .blocks = {{0, 10}, {1, 11}, {2, 12}, {4, 20}, {5, 19}},
                          .size = 5 * kBlockSize + 3});
  image.handles.push_back({.fh = (1ull << 48) | 0x5000, .ino = 17, .flags = O_RDWR,
                           .direct = false, .passthrough = false, .backing_id = -1,
                           .wrote = true});
  image.handles.push_back({.fh = (1ull << 48) | 0x6000, .ino = 4, .flags = O_RDONLY});
  image.dir_handles.push_back({(1ull << 48) | 1, {{".", 16, S_IFDIR}, {"model.pt", 17, S_IFREG}}});
  return image;
}

TEST(HandoffImageTest, AnImageDecodesToWhatWasEncoded) {
  HandoffImage image = SampleImage();
  Result<HandoffImage> back = DecodeHandoff(EncodeHandoff(image));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  ASSERT_EQ(back->inodes.size(), 3u);
  EXPECT_EQ(back->inodes[1].name, "model.pt");
  EXPECT_EQ(back->inodes[1].size, 12345u);
  EXPECT_EQ(back->inodes[1].mtime_ns, 1'700'000'000'123'456'789);
  EXPECT_EQ(back->inodes[1].uid, 5u);
  EXPECT_TRUE(back->inodes[2].name.empty());
  EXPECT_TRUE(back->inodes[2].in_memory);
  EXPECT_EQ(back->inodes[2].blocks, image.inodes[2].blocks) << "runs of blocks, and blocks alone";
  EXPECT_FALSE(back->inodes[1].in_memory);
  ASSERT_EQ(back->handles.size(), 2u);
  EXPECT_EQ(back->handles[0].fh, (1ull << 48) | 0x5000);
  EXPECT_TRUE(back->handles[0].wrote);
  EXPECT_EQ(back->handles[1].ino, 4u);
  ASSERT_EQ(back->dir_handles.size(), 1u);
  EXPECT_EQ(back->dir_handles[0].entries[1].name, "model.pt");
}

TEST(HandoffImageTest, NamesThatAreNotUtf8SurviveTheImage) {
  HandoffImage image;
  image.inodes.push_back({.ino = 16, .parent = kRootIno, .name = std::string("\xff\xfe-x"),
                          .lookups = 1});
  Result<HandoffImage> back = DecodeHandoff(EncodeHandoff(image));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->inodes[0].name, "\xff\xfe-x");
}

TEST(HandoffImageTest, MalformedImagesAreRefusedWithEinval) {
  auto refused = [](HandoffImage image) {
    return DecodeHandoff(EncodeHandoff(image)).status().err() == EINVAL;
  };
  HandoffImage child_first = SampleImage();
  std::swap(child_first.inodes[0], child_first.inodes[1]);
  EXPECT_TRUE(refused(child_first));
  HandoffImage reserved = SampleImage();
  reserved.inodes[0].ino = kRootIno;
  EXPECT_TRUE(refused(reserved));
  HandoffImage slash = SampleImage();
  slash.inodes[0].name = "../etc";
  EXPECT_TRUE(refused(slash));
  HandoffImage twice = SampleImage();
  twice.handles[1].fh = twice.handles[0].fh;
  EXPECT_TRUE(refused(twice));
  HandoffImage past_end = SampleImage();
  past_end.inodes[2].blocks = {{6, 7}};
  EXPECT_TRUE(refused(past_end)) << "a block past the file's size";
  HandoffImage unordered = SampleImage();
  unordered.inodes[2].blocks = {{1, 7}, {0, 8}};
  EXPECT_TRUE(refused(unordered));
  HandoffImage nameless = SampleImage();
  nameless.inodes[2].has_content = false;
  EXPECT_TRUE(refused(nameless));
  EXPECT_EQ(DecodeHandoff("not json").status().err(), EINVAL);
  EXPECT_EQ(DecodeHandoff("[]").status().err(), EINVAL);
  EXPECT_EQ(DecodeHandoff(R"({"version": 3, "inodes": [], "handles": [], "dir_handles": []})")
                .status().err(), EINVAL);
  EXPECT_EQ(DecodeHandoff(std::string(kMaxHandoffImage + 1, ' ')).status().err(), EINVAL);
}

TEST(HandoffImageTest, EveryPrefixAndEveryByteFlipOfAnImageDecodesOrIsRefused) {
  ExpectPrefixesRefusedAndFlipsHandled(EncodeHandoff(SampleImage()), DecodeHandoff);
}

class HandoffTest : public ::testing::Test {
 protected:
  std::string B(const std::string& rel) const { return backing_ / rel; }
  std::vector<std::string> Staging() const { return HostList(backing_ / ".ckptfs/staging"); }

  TempDir backing_;
};

// With the cache in shared memory (as under a supervisor) or private to each worker.
class HandoffOfMemoryTest : public HandoffTest, public ::testing::WithParamInterface<bool> {
 protected:
  ArenaMemory memory_;
  const int arena_fd_ = GetParam() ? memory_.fd() : -1;
};

INSTANTIATE_TEST_SUITE_P(Cache, HandoffOfMemoryTest, ::testing::Values(false, true),
                         [](const auto& info) { return info.param ? "Shared" : "Private"; });

TEST_P(HandoffOfMemoryTest, TheNextWorkerServesTheKernelsInodesAndHandlesAndPublishesUnsealedChanges) {
  auto old_worker = StartFs(backing_.path(), {.flush_delay = 0ms, .arena_fd = arena_fd_});
  Filesystem& a = *old_worker;
  ASSERT_TRUE(a.Mkdir(kRootIno, "ckpt", 0755, Me()).ok());
  ASSERT_TRUE(WriteFile(a, "ckpt/done.txt", "closed before").ok());
  const std::string first = Pattern(1, 3 * kBlockSize + 7);
  const std::string second = Pattern(2, kBlockSize);
  Result<uint64_t> writing = CreatePath(a, "ckpt/open.bin");
  ASSERT_TRUE(writing.ok());
  ASSERT_TRUE(WriteHandle(a, *writing, 0, first).ok());
  Result<uint64_t> removed = CreatePath(a, "ckpt/removed.tmp");
  ASSERT_TRUE(removed.ok());
  ASSERT_TRUE(WriteHandle(a, *removed, 0, "still open").ok());
  const uint64_t ckpt = Resolve(a, "ckpt")->ino;
  ASSERT_TRUE(a.Unlink(ckpt, "removed.tmp").ok());
  const uint64_t done = Resolve(a, "ckpt/done.txt")->ino;
  Result<OpenFile> reading = a.Open(done, O_RDONLY);
  ASSERT_TRUE(reading.ok());
  Result<uint64_t> listing = a.OpenDir(ckpt);
  ASSERT_TRUE(listing.ok());
  Result<OpenFile> stats = a.Open(kStatsIno, O_RDONLY);
  ASSERT_TRUE(stats.ok());
  const uint64_t open_ino = Resolve(a, "ckpt/open.bin")->ino;

  Result<HandoffImage> image = a.Handoff();
  ASSERT_TRUE(image.ok()) << image.status().ToString();
  EXPECT_EQ(*ReadHostFile(B("ckpt/done.txt")), "closed before") << "durable before the handoff";
  EXPECT_FALSE(HostExists(B("ckpt/open.bin"))) << "a file never closed is not published";
  // Unsealed bytes in shared memory stay there; private memory is written out.
  EXPECT_EQ(Staging().size(), GetParam() ? 0u : 2u);
  old_worker.reset();  // The old worker exits.

  auto new_worker = StartFs(backing_.path(), {.flush_delay = 0ms, .worker = 1,
                                              .handoff = &*image, .arena_fd = arena_fd_});
  Filesystem& b = *new_worker;
  const std::vector<std::string> taken_files = Staging();
  EXPECT_EQ(taken_files.size(), GetParam() ? 0u : 2u) << "handoff files become spill files";
  for (const std::string& name : taken_files) EXPECT_TRUE(IsSpillFileName(name)) << name;
  const std::string taken = std::to_string(first.size() + std::string("still open").size());
  const std::string stats_text = b.StatsJson();
  EXPECT_NE(stats_text.find(std::string(GetParam() ? "\"taken_over_in_memory\": "
                                                   : "\"taken_over_from_files\": ") + taken),
            std::string::npos) << stats_text;
  // The kernel goes on with the numbers it holds.
  EXPECT_EQ(b.GetAttr(open_ino)->size, first.size());
  EXPECT_TRUE(SameBytes(*ReadHandle(b, *writing, first.size()), first));
  ASSERT_TRUE(WriteHandle(b, *writing, first.size(), second).ok());
  EXPECT_TRUE(SameBytes(*ReadHandle(b, reading->handle, 100), "closed before"));
  EXPECT_EQ(*ReadHandle(b, *removed, 100), "still open");
  Result<std::vector<DirEntry>> entries = b.ReadDir(*listing, 0);
  ASSERT_TRUE(entries.ok());
  EXPECT_EQ(entries->size(), 4u) << ". .. done.txt open.bin, as listed before";
  b.ReleaseDir(*listing);
  EXPECT_NE(ReadHandle(b, stats->handle, 100)->find("\"bytes_written\""), std::string::npos);
  EXPECT_TRUE(b.Release(stats->handle).ok());
  EXPECT_TRUE(b.Release(reading->handle).ok());
  EXPECT_TRUE(Close(b, *removed).ok());
  ASSERT_TRUE(Close(b, *writing).ok());
  // New inodes are numbered apart from the earlier worker's.
  ASSERT_TRUE(WriteFile(b, "ckpt/new.txt", "new").ok());
  EXPECT_GE(Resolve(b, "ckpt/new.txt")->ino, uint64_t{1} << kWorkerInoShift);

  ASSERT_TRUE(b.Sync().ok());
  EXPECT_TRUE(SameTree(HostTree(backing_.path()),
                       {{"ckpt", "<dir>"},
                        {"ckpt/done.txt", "closed before"},
                        {"ckpt/open.bin", first + second},
                        {"ckpt/new.txt", "new"}}));
  EXPECT_TRUE(Staging().empty()) << "spill files go once their files are durable and closed";
  EXPECT_TRUE(b.Shutdown().ok());
}

TEST(HandoffSpillTest, AFileLargerThanTheCacheTakenOverByAnUpgradeSurvivesTheNextWorkersCrash) {
  TempDir backing;
  constexpr uint64_t kCache = 1 << 20;
  ArenaMemory memory(kCache);
  const std::string head = Pattern(7, 3 * kCache + 1000);
  const std::string middle = Pattern(8, 200000);
  const std::string tail = Pattern(9, 100000);
  const uint64_t handle = RunAndKill([&]() -> uint64_t {
    auto upgraded = StartFs(backing.path(), {.cache_size = kCache, .flush_delay = 3600s,
                                             .arena_fd = memory.fd()});
    Result<uint64_t> opened = CreatePath(*upgraded, "big.distcp");
    if (!opened.ok()) return 0;
    for (size_t at = 0; at < head.size(); at += 128 << 10) {
      if (!WriteHandle(*upgraded, *opened, at, head.substr(at, 128 << 10)).ok()) return 0;
    }
    Result<HandoffImage> image = upgraded->Handoff();
    if (StatOf(*upgraded, "spilled_bytes") == 0 || !image.ok()) return 0;
    upgraded.reset();
    // Never destroyed: the process is killed.
    Filesystem* dying = StartFs(backing.path(), {.cache_size = kCache, .flush_delay = 3600s,
                                                 .worker = 1, .handoff = &*image,
                                                 .arena_fd = memory.fd()}).release();
    return WriteHandle(*dying, *opened, head.size(), middle).ok() ? *opened : 0;
  });
  ASSERT_NE(handle, 0u);
  auto next = StartFs(backing.path(), {.cache_size = kCache, .flush_delay = 0ms, .worker = 2,
                                       .arena_fd = memory.fd(), .recover = true});
  EXPECT_TRUE(SameBytes(*ReadHandle(*next, handle, head.size() + middle.size()), head + middle));
  ASSERT_TRUE(WriteHandle(*next, handle, head.size() + middle.size(), tail).ok());
  ASSERT_TRUE(next->Release(handle).ok());
  ASSERT_TRUE(next->Sync().ok());
  EXPECT_TRUE(SameBytes(*ReadHostFile(backing / "big.distcp"), head + middle + tail));
  EXPECT_TRUE(next->Shutdown().ok());
}

TEST_F(HandoffTest, HandlesOfAWorkerThatStoppedWithoutAHandoffAreRefused) {
  auto crashed = StartFs(backing_.path(), {});
  ASSERT_TRUE(WriteFile(*crashed, "kept.txt", "durable").ok());
  ASSERT_TRUE(crashed->Sync().ok());
  Result<uint64_t> h = CreatePath(*crashed, "lost.txt");
  ASSERT_TRUE(h.ok());
  const uint64_t ino = Resolve(*crashed, "kept.txt")->ino;
  Result<uint64_t> dh = crashed->OpenDir(kRootIno);
  ASSERT_TRUE(dh.ok());
  EXPECT_TRUE(crashed->Shutdown().ok());
  crashed.reset();

  auto next = StartFs(backing_.path(), {.worker = 1});
  EXPECT_EQ(next->Write(*h, 0, "x", 1).status().err(), EBADF);
  EXPECT_EQ(next->Read(*h, 0, 1).status().err(), EBADF);
  EXPECT_EQ(next->Release(*h).err(), EBADF);
  EXPECT_EQ(next->ReadDir(*dh, 0).status().err(), EBADF);
  EXPECT_EQ(next->GetAttr(ino).status().err(), ESTALE) << "an inode number it never gave";
  EXPECT_EQ(*ReadFile(*next, "kept.txt"), "durable");
  EXPECT_TRUE(next->Shutdown().ok());
}

TEST_P(HandoffOfMemoryTest, AHandedOverHandleCanBeHandedOverAgain) {
  auto first = StartFs(backing_.path(), {.arena_fd = arena_fd_});
  Result<uint64_t> h = CreatePath(*first, "f");
  ASSERT_TRUE(h.ok());
  ASSERT_TRUE(WriteHandle(*first, *h, 0, "one").ok());
  Result<HandoffImage> image1 = first->Handoff();
  ASSERT_TRUE(image1.ok());
  first.reset();
  auto second = StartFs(backing_.path(), {.worker = 1, .handoff = &*image1, .arena_fd = arena_fd_});
  ASSERT_TRUE(WriteHandle(*second, *h, 3, "two").ok());
  Result<HandoffImage> image2 = second->Handoff();
  ASSERT_TRUE(image2.ok());
  second.reset();
  auto third = StartFs(backing_.path(), {.worker = 2, .handoff = &*image2, .arena_fd = arena_fd_});
  ASSERT_TRUE(WriteHandle(*third, *h, 6, "three").ok());
  ASSERT_TRUE(Close(*third, *h).ok());
  ASSERT_TRUE(third->Sync().ok());
  EXPECT_EQ(*ReadHostFile(B("f")), "onetwothree");
  EXPECT_TRUE(third->Shutdown().ok());
}

}  // namespace
}  // namespace ckptfs
