// Tests of the pure policy functions: flushing, and how an open is served.
#include "core/base/flush_policy.h"
#include "core/base/memory_policy.h"
#include "core/base/serve_policy.h"

#include "core/filesystem/open_mode.h"

#include <gtest/gtest.h>

#include <string_view>
#include <utility>
#include <vector>

namespace ckptfs::policy {
namespace {

using std::chrono::milliseconds;

TEST(PolicyTest, BatchesTakeAQuarterOfTheDescriptorsBetween16And1024Entries) {
  EXPECT_EQ(MaxBatchEntries(1024), 256u);
  EXPECT_EQ(MaxBatchEntries(1u << 20), kMaxBatchEntries);
  EXPECT_EQ(MaxBatchEntries(UINT64_MAX), kMaxBatchEntries);
  EXPECT_EQ(MaxBatchEntries(40), 16u);
}

TEST(PolicyTest, RetryDelayDoublesFrom100msAndCapsAt5s) {
  EXPECT_EQ(RetryDelay(0), milliseconds(100));
  EXPECT_EQ(RetryDelay(1), milliseconds(100));
  EXPECT_EQ(RetryDelay(2), milliseconds(200));
  EXPECT_EQ(RetryDelay(3), milliseconds(400));
  EXPECT_EQ(RetryDelay(4), milliseconds(800));
  EXPECT_EQ(RetryDelay(5), milliseconds(1600));
  EXPECT_EQ(RetryDelay(6), milliseconds(3200));
  EXPECT_EQ(RetryDelay(7), milliseconds(5000));
  EXPECT_EQ(RetryDelay(100), milliseconds(5000));
  EXPECT_EQ(RetryDelay(~0u), milliseconds(5000));
  for (unsigned f = 1; f < 64; ++f) EXPECT_LE(RetryDelay(f), RetryDelay(f + 1)) << f;
}

TEST(PolicyTest, NextHoldGrowsForFilesRewrittenSoonAndResetsForQuietOnes) {
  using namespace std::chrono_literals;
  const auto base = std::chrono::duration_cast<std::chrono::steady_clock::duration>(300ms);
  auto hold = NextHold({}, 1h, base);
  EXPECT_EQ(hold, base) << "a first seal waits flush_delay";
  hold = NextHold(hold, 100ms, base);
  EXPECT_EQ(hold, 2 * base);
  for (int i = 0; i < 10; ++i) hold = NextHold(hold, 100ms, base);
  EXPECT_EQ(hold, 16 * base) << "capped";
  EXPECT_EQ(NextHold(hold, 2 * hold, base), base) << "left alone long enough: starts over";
  EXPECT_EQ(NextHold(hold, 2 * hold - 1ms, base), 16 * base);
  const std::chrono::steady_clock::duration zero{};
  EXPECT_EQ(NextHold(zero, 0ms, zero), zero) << "flush_delay=0 flushes at once";
}

TEST(PolicyTest, IsTransient) {
  for (int err : {ENOSPC, EIO, EDQUOT, EAGAIN, EINTR, ENOMEM, ETIMEDOUT}) {
    EXPECT_TRUE(IsTransient(err)) << err;
  }
  for (int err : {0, ENOENT, EEXIST, ENOTEMPTY, ENOTDIR, EISDIR, EINVAL, ENAMETOOLONG, ELOOP,
                  EXDEV, EMLINK, EPERM}) {
    EXPECT_FALSE(IsTransient(err)) << err;
  }
}

TEST(PolicyTest, FlushEverythingNow) {
  EXPECT_FALSE(FlushEverythingNow(0, false, false));
  EXPECT_TRUE(FlushEverythingNow(1, false, false));
  EXPECT_TRUE(FlushEverythingNow(0, true, false));
  EXPECT_TRUE(FlushEverythingNow(0, false, true));
}

TEST(PolicyTest, AVersionIsDueAfterTheLongerOfFlushDelayAndItsHold) {
  using namespace std::chrono_literals;
  const std::chrono::steady_clock::time_point t0{};
  EXPECT_EQ(FlushDue(t0, 0s, 300ms), t0 + 300ms);
  EXPECT_EQ(FlushDue(t0, 2s, 300ms), t0 + 2s);
}

// A read-only open of a file of `size` bytes that the backing store holds whole, nothing else
// open, passthrough and direct reads available.
OpenFacts LargeReadOfABackingFile(uint64_t size = kBackingReadMinBytes) {
  return {.may_bypass = true, .access = O_RDONLY, .size = size, .whole_on_backing = true,
          .prefetched = false, .passthrough_on = true, .passthrough_readers = false,
          .open = false, .cached_open = false, .direct_reads = true,
          .fill_on = false, .filled = false, .page_cache_stale = false};
}

TEST(OpenModeTest, TheFirstReaderOfALargeBackingFileRegistersItForPassthrough) {
  OpenChoice c = ChooseOpen(LargeReadOfABackingFile());
  EXPECT_TRUE(c.register_passthrough);
  EXPECT_FALSE(c.prefetch);
  EXPECT_TRUE(c.direct) << "served directly if the kernel refuses the backing file";
}

TEST(OpenModeTest, PassthroughIsNotRegisteredWhileTheFileIsOpenOrOff) {
  OpenFacts f = LargeReadOfABackingFile();
  f.open = true;
  EXPECT_FALSE(ChooseOpen(f).register_passthrough);
  f = LargeReadOfABackingFile();
  f.passthrough_readers = true;
  EXPECT_FALSE(ChooseOpen(f).register_passthrough);
  f = LargeReadOfABackingFile();
  f.passthrough_on = false;
  EXPECT_FALSE(ChooseOpen(f).register_passthrough);
  EXPECT_TRUE(ChooseOpen(f).direct);
}

TEST(OpenModeTest, ASmallBackingFileIsReadAheadOnceAndServedByThePageCache) {
  OpenFacts f = LargeReadOfABackingFile(kBackingReadMinBytes - 1);
  OpenChoice c = ChooseOpen(f);
  EXPECT_TRUE(c.prefetch);
  EXPECT_FALSE(c.register_passthrough);
  EXPECT_FALSE(c.direct);
  f.prefetched = true;
  EXPECT_FALSE(ChooseOpen(f).prefetch);
  f.size = 0;
  f.prefetched = false;
  EXPECT_FALSE(ChooseOpen(f).prefetch) << "nothing to read ahead";
}

TEST(OpenModeTest, ASmallBackingFileNothingHasOpenFillsThePageCacheOncePerVersion) {
  OpenFacts f = LargeReadOfABackingFile(kPageCacheFillMaxBytes);
  f.fill_on = true;
  OpenChoice c = ChooseOpen(f);
  EXPECT_TRUE(c.fill_page_cache);
  EXPECT_FALSE(c.prefetch) << "read whole at the open instead";
  EXPECT_FALSE(c.direct);
  EXPECT_FALSE(c.register_passthrough);
  f.filled = true;
  EXPECT_FALSE(ChooseOpen(f).fill_page_cache) << "the kernel has it already";
  EXPECT_TRUE(ChooseOpen(f).prefetch) << "in case the kernel dropped it";
}

TEST(OpenModeTest, NoFillForLargeEmptyChangedOpenOrStaleFilesNorWithoutTheFiller) {
  const OpenFacts small = [] {
    OpenFacts f = LargeReadOfABackingFile(4096);
    f.fill_on = true;
    return f;
  }();
  ASSERT_TRUE(ChooseOpen(small).fill_page_cache);
  std::vector<std::pair<const char*, OpenFacts>> cases;
  auto add = [&](const char* why, auto change) {
    OpenFacts f = small;
    change(f);
    cases.emplace_back(why, f);
  };
  add("larger", [](OpenFacts& f) { f.size = kPageCacheFillMaxBytes + 1; });
  add("empty", [](OpenFacts& f) { f.size = 0; });
  add("in memory", [](OpenFacts& f) { f.whole_on_backing = false; });
  add("open", [](OpenFacts& f) { f.open = true; });
  add("cached pages stale", [](OpenFacts& f) { f.page_cache_stale = true; });
  add("no filler (shared mode)", [](OpenFacts& f) { f.fill_on = false; });
  add("a zarr view", [](OpenFacts& f) { f.may_bypass = false; });
  add("for writing", [](OpenFacts& f) { f.access = O_RDWR; });
  for (const auto& [why, f] : cases) EXPECT_FALSE(ChooseOpen(f).fill_page_cache) << why;
}

TEST(PolicyTest, OnlyDurableRegularFilesOutsideZarrArraysAreSettledAndNoneInSharedMode) {
  const AttrFacts settled{.shared = false, .regular = true, .zarr = false, .durable = true};
  EXPECT_TRUE(AttrSettled(settled));
  AttrFacts f = settled;
  f.shared = true;
  EXPECT_FALSE(AttrSettled(f)) << "other mounts change it";
  f = settled;
  f.regular = false;
  EXPECT_FALSE(AttrSettled(f)) << "directories and the rest keep the short timeout";
  f = settled;
  f.zarr = true;
  EXPECT_FALSE(AttrSettled(f)) << "its name may come to mean a view";
  f = settled;
  f.durable = false;
  EXPECT_FALSE(AttrSettled(f)) << "changed since its last flush";
  EXPECT_GT(kSettledAttrTimeout, std::chrono::seconds(60));
}

TEST(PolicyTest, TheRequestPollWindowIsTheMaximumOnceASmallRequestComesSoonAndHalvesForLateOnes) {
  using std::chrono::microseconds;
  using std::chrono::nanoseconds;
  const nanoseconds max = microseconds(400);
  const uint64_t small = 80;
  EXPECT_EQ(NextRequestPollWindow({}, microseconds(300), small, max), max)
      << "a request soon after the one before: the next is polled for";
  EXPECT_EQ(NextRequestPollWindow(max, microseconds(5), small, max), max);
  EXPECT_EQ(NextRequestPollWindow(max, max, small, max), max);
  EXPECT_EQ(NextRequestPollWindow(max, max + microseconds(1), small, max), max / 2)
      << "later than the maximum: halved";
  nanoseconds idle = max;
  for (int i = 0; i < 5; ++i) {
    idle = NextRequestPollWindow(idle, std::chrono::seconds(1), small, max);
  }
  EXPECT_EQ(idle, microseconds(12) + nanoseconds(500));
  idle = NextRequestPollWindow(idle, std::chrono::seconds(1), small, max);
  EXPECT_EQ(idle, nanoseconds{}) << "below the least window: no polling";
  EXPECT_EQ(NextRequestPollWindow(idle, std::chrono::seconds(1), small, max), nanoseconds{});
}

TEST(PolicyTest, NoRequestIsPolledForAfterALargeOne) {
  using std::chrono::microseconds;
  const std::chrono::nanoseconds max = microseconds(400);
  EXPECT_EQ(NextRequestPollWindow(max, microseconds(5), kRequestPollMaxBytes, max),
            std::chrono::nanoseconds{});
  EXPECT_EQ(NextRequestPollWindow(max, microseconds(5), kRequestPollMaxBytes - 1, max), max);
  EXPECT_EQ(NextRequestPollWindow({}, microseconds(5), (1u << 20) + 80, max),
            std::chrono::nanoseconds{});
}

TEST(PolicyTest, APollersYieldLongerThanTheMaximumMeansAnotherThreadWantedItsCpu) {
  using std::chrono::microseconds;
  const std::chrono::nanoseconds max = microseconds(400);
  EXPECT_FALSE(RequestPollContended(microseconds(1), max)) << "nothing else was runnable";
  EXPECT_FALSE(RequestPollContended(max, max)) << "a caller that ran its turn and asked again";
  EXPECT_TRUE(RequestPollContended(max + microseconds(1), max));
  EXPECT_TRUE(RequestPollContended(std::chrono::milliseconds(3), max)) << "a scheduler slice";
  EXPECT_GT(kRequestPollContendedPause, std::chrono::milliseconds(1));
}

TEST(PolicyTest, ARequestPollMaximumBelowTheLeastWindowTurnsPollingOff) {
  using std::chrono::microseconds;
  for (auto max : {microseconds(0), microseconds(9)}) {
    EXPECT_EQ(NextRequestPollWindow(kRequestPollMinWindow, microseconds(1), 80, max),
              std::chrono::nanoseconds{});
    EXPECT_EQ(NextRequestPollWindow({}, microseconds(1), 80, max), std::chrono::nanoseconds{});
  }
}

TEST(OpenModeTest, WriteOnlyOpensAreDirectUnlessACachedHandleHasTheFile) {
  OpenFacts f{.may_bypass = true, .access = O_WRONLY, .size = 0, .whole_on_backing = false,
              .prefetched = false, .passthrough_on = true, .passthrough_readers = false,
              .open = false, .cached_open = false, .direct_reads = false,
              .fill_on = false, .filled = false, .page_cache_stale = false};
  EXPECT_TRUE(ChooseOpen(f).direct);
  f.cached_open = true;
  EXPECT_FALSE(ChooseOpen(f).direct);
  f = {.may_bypass = true, .access = O_RDWR, .size = 0, .whole_on_backing = false,
       .prefetched = false, .passthrough_on = true, .passthrough_readers = false, .open = false,
       .cached_open = false, .direct_reads = true, .fill_on = false, .filled = false,
       .page_cache_stale = false};
  EXPECT_FALSE(ChooseOpen(f).direct) << "a reader-writer reads back through the cache";
}

TEST(OpenModeTest, AWriterWhoseMemoryIsForkedWritesThroughThePageCache) {
  OpenFacts f{.may_bypass = true, .access = O_WRONLY};
  ASSERT_TRUE(ChooseOpen(f).direct);
  f.writer_memory_forked = true;
  EXPECT_FALSE(ChooseOpen(f).direct) << "a direct write would unshare every page it hands over";
}

TEST(OpenModeTest, AForkedWriterOfAFileLastWrittenInSmallPiecesWritesDirect) {
  OpenFacts f{.may_bypass = true, .access = O_WRONLY, .writer_memory_forked = true};
  f.small_writes_before = true;
  EXPECT_TRUE(ChooseOpen(f).direct) << "a small write unshares a page or two, not a checkpoint";
  f.cached_open = true;
  EXPECT_FALSE(ChooseOpen(f).direct) << "a cached handle has the file: it stays coherent";
  f = {.may_bypass = true, .access = O_RDWR, .writer_memory_forked = true,
       .small_writes_before = true};
  EXPECT_FALSE(ChooseOpen(f).direct) << "a reader-writer reads back through the cache";
}

TEST(OpenModeTest, AFileIsWrittenInSmallPiecesWhenEnoughRequestsAreSmallOnAverage) {
  constexpr uint64_t kDcpTensor = 5673;  // A 64x16 float32 tensor as torch.save writes it.
  EXPECT_TRUE(WroteInSmallPieces(10000, 10000 * kDcpTensor));
  EXPECT_FALSE(WroteInSmallPieces(kSmallWritesMinRequests - 1, kDcpTensor))
      << "too few requests to tell";
  EXPECT_FALSE(WroteInSmallPieces(1024, 1024ull << 20)) << "1 MiB requests: a large writer";
  // A shard of big tensors (1000 of 1 MiB) beside 10,000 small ones: its bytes are the big
  // tensors', which the page cache spares a forked writer from unsharing.
  EXPECT_FALSE(WroteInSmallPieces(11000, 1000 * (1ull << 20) + 10000 * kDcpTensor));
  EXPECT_TRUE(WroteInSmallPieces(kSmallWritesMinRequests,
                                 kSmallWritesMinRequests * kSmallWriteMaxBytes - 1));
}

TEST(OpenModeTest, AWriterForkedFromAParentAsLargeAsItWritesFromForkedMemory) {
  constexpr uint64_t kGiB = 1ull << 30;
  const WriterProcess megatron_writer{.forked_without_exec = true, .anon_bytes = 20 * kGiB,
                                      .parent_anon_bytes = 20 * kGiB};
  EXPECT_TRUE(WritesFromForkedMemory(megatron_writer));
  WriterProcess p = megatron_writer;
  p.forked_without_exec = false;
  EXPECT_FALSE(WritesFromForkedMemory(p)) << "an exec'd process (spawn, torchrun) owns its memory";
  p = {.forked_without_exec = true, .anon_bytes = 3 * kGiB, .parent_anon_bytes = kGiB / 2};
  EXPECT_FALSE(WritesFromForkedMemory(p)) << "a fork server's child that built its own state";
  p = {.forked_without_exec = true, .anon_bytes = 2 * kGiB, .parent_anon_bytes = kGiB};
  EXPECT_TRUE(WritesFromForkedMemory(p)) << "half of it may be shared: the parent's";
  p = {.forked_without_exec = true, .anon_bytes = kForkedWriterMinAnonBytes - 1,
       .parent_anon_bytes = kGiB};
  EXPECT_FALSE(WritesFromForkedMemory(p)) << "too small to matter";
  p = megatron_writer;
  p.parent_is_fork_server = true;
  EXPECT_FALSE(WritesFromForkedMemory(p)) << "a fork server's child writes what it built";
}

TEST(OpenModeTest, AForkServerIsPythonsExecdByAnotherProgramNotItsChildren) {
  using namespace std::string_view_literals;
  const std::string_view server =
      "/venv/bin/python\0-B\0-c\0from multiprocessing.forkserver import main; main(5, 7, "
      "['__main__'], **{'sys_path': ['/tmp']})\0"sv;
  const std::string_view launcher = "/venv/bin/python\0train.py\0--steps\0100\0"sv;
  EXPECT_TRUE(IsForkServer(server, launcher));
  EXPECT_FALSE(IsForkServer(server, server)) << "a rank the server forked, or its own child";
  EXPECT_FALSE(IsForkServer(launcher, ""sv));
  EXPECT_FALSE(IsForkServer("/venv/bin/python\0-c\0print('from multiprocessing.forkserver "
                            "import main;')\0"sv, launcher))
      << "the server's code must be the argument, not inside it";
  EXPECT_FALSE(IsForkServer(""sv, launcher));
}

TEST(OpenModeTest, LargeReadsAreDirectOnlyWithDirectReadsAndTheFileWhole) {
  OpenFacts f = LargeReadOfABackingFile();
  f.passthrough_on = false;
  f.direct_reads = false;
  EXPECT_FALSE(ChooseOpen(f).direct);
  f.direct_reads = true;
  f.whole_on_backing = false;
  EXPECT_FALSE(ChooseOpen(f).direct) << "part of it is in memory";
}

TEST(OpenModeTest, AViewOfAZarrArrayAlwaysUsesThePageCache) {
  OpenFacts f = LargeReadOfABackingFile();
  f.may_bypass = false;
  OpenChoice c = ChooseOpen(f);
  EXPECT_FALSE(c.register_passthrough);
  EXPECT_FALSE(c.prefetch);
  EXPECT_FALSE(c.direct);
  f.access = O_WRONLY;
  EXPECT_FALSE(ChooseOpen(f).direct);
}

// Below an eighth of the system's memory available: no memory taken ahead, and idle memory given
// back up to the shortfall and a margin; a /proc/meminfo that could not be read stops nothing.
TEST(PolicyTest, IdleMemoryGoesBackOnlyBelowAnEighthOfTheSystemsMemoryAvailable) {
  constexpr uint64_t kGiB = 1ull << 30;
  EXPECT_TRUE(MayTakeMemoryAhead({24 * kGiB, 4 * kGiB}));
  EXPECT_EQ(IdleMemoryToGiveBack({24 * kGiB, 4 * kGiB}), 0u);
  EXPECT_EQ(IdleMemoryToGiveBack({24 * kGiB, 3 * kGiB}), 0u) << "at the line: not short";
  EXPECT_FALSE(MayTakeMemoryAhead({24 * kGiB, 3 * kGiB}));
  EXPECT_EQ(IdleMemoryToGiveBack({24 * kGiB, 2 * kGiB}), kGiB + kGiveBackMargin);
  EXPECT_TRUE(MayTakeMemoryAhead({0, 0}));
  EXPECT_EQ(IdleMemoryToGiveBack({0, 0}), 0u);
}

}  // namespace
}  // namespace ckptfs::policy
