// What `ckptfs status --watch` and `ckptfs sync --progress` draw, from stats made up here and
// samples at made-up times: the frame fits the terminal, bars, rates and the ETA are right even
// across a new worker's counters, and nothing from the mount reaches the terminal as a control
// character. tests/mount/test_status_view.py runs the views on a real mount and terminal.
#include "fs/status_view.h"

#include <gtest/gtest.h>

#include <sstream>
#include <string>
#include <vector>

namespace ckptfs {
namespace {

constexpr double kMiB = 1 << 20;
constexpr double kGiB = 1 << 30;

// The time `seconds` after an arbitrary start.
FlushTrend::Clock::time_point At(double seconds) {
  return FlushTrend::Clock::time_point() +
         std::chrono::duration_cast<FlushTrend::Clock::duration>(
             std::chrono::duration<double>(seconds));
}

// Stats with the flush figures FlushTrend reads.
nlohmann::json FlushStats(double bytes_flushed, double dirty_bytes) {
  return {{"bytes_flushed", bytes_flushed}, {"dirty_bytes", dirty_bytes}};
}

// A trend of one sample of `stats`.
FlushTrend TrendOf(const nlohmann::json& stats) {
  FlushTrend trend;
  trend.Add(At(0), stats);
  return trend;
}

FrameContext Context(int columns, int rows) {
  FrameContext c;
  c.mountpoint = "/mnt/ckpt";
  c.clock = "12:00:00";
  c.columns = columns;
  c.rows = rows;
  return c;
}

// The lines of `frame`, without their '\n'; fails the test when it does not end in one.
std::vector<std::string> Lines(const std::string& frame) {
  EXPECT_TRUE(!frame.empty() && frame.back() == '\n') << frame;
  std::vector<std::string> lines;
  std::istringstream in(frame);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// The frame's line starting with `label`; "" when there is none.
std::string LineStarting(const std::string& frame, const std::string& label) {
  for (const std::string& line : Lines(frame)) {
    if (line.rfind(label, 0) == 0) return line;
  }
  return "";
}

// The number of characters (UTF-8) of `text`.
int Columns(const std::string& text) {
  int n = 0;
  for (const char c : text) n += (static_cast<unsigned char>(c) & 0xC0) != 0x80;
  return n;
}

// Whether `text` has a control character (C0 but '\n', DEL, or C1 in UTF-8).
bool HasControlCharacter(const std::string& text) {
  for (size_t i = 0; i < text.size(); ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    if ((c < 0x20 && c != '\n') || c == 0x7F) return true;
    if (c == 0xC2 && i + 1 < text.size() && static_cast<unsigned char>(text[i + 1]) >= 0x80 &&
        static_cast<unsigned char>(text[i + 1]) < 0xA0) {
      return true;
    }
  }
  return false;
}

// The memory line of a frame 64 columns wide (a bar of 20 cells).
std::string MemoryLine(double memory_used, double cache_size) {
  const nlohmann::json stats = {{"memory_used", memory_used}, {"cache_size", cache_size}};
  return LineStarting(RenderFrame(stats, TrendOf(stats), Context(64, 24)), "memory");
}

TEST(StatusViewTest, TheMemoryBarShowsUsedAgainstTheCacheSize) {
  const nlohmann::json stats = {{"memory_used", 512 * kMiB}, {"cache_size", kGiB}};
  EXPECT_EQ(LineStarting(RenderFrame(stats, TrendOf(stats), Context(80, 24)), "memory"),
            "memory   [" + std::string(18, '#') + std::string(18, '-') +
                "] 512.0 MiB of 1.0 GiB (50%)");
}

TEST(StatusViewTest, TheMemoryBarIsEmptyWhenNothingIsUsed) {
  EXPECT_EQ(MemoryLine(0, kGiB), "memory   [" + std::string(20, '-') + "] 0 B of 1.0 GiB (0%)");
}

TEST(StatusViewTest, TheMemoryBarIsHalfFullWhenHalfTheCacheIsUsed) {
  EXPECT_EQ(MemoryLine(kGiB / 2, kGiB), "memory   [" + std::string(10, '#') +
                                            std::string(10, '-') + "] 512.0 MiB of 1.0 GiB (50%)");
}

TEST(StatusViewTest, TheMemoryBarIsFullWhenTheWholeCacheIsUsed) {
  EXPECT_EQ(MemoryLine(kGiB, kGiB),
            "memory   [" + std::string(20, '#') + "] 1.0 GiB of 1.0 GiB (100%)");
}

TEST(StatusViewTest, AnOverFullMemoryBarStaysFullAndSaysByHowMuch) {
  EXPECT_EQ(MemoryLine(1.5 * kGiB, kGiB),
            "memory   [" + std::string(20, '#') + "] 1.5 GiB of 1.0 GiB (150%)");
}

TEST(StatusViewTest, AMountWithoutACacheSizeShowsAnEmptyMemoryBarWithoutPercent) {
  EXPECT_EQ(MemoryLine(4096, 0), "memory   [" + std::string(20, '-') + "] 4.0 KiB of 0 B");
}

TEST(StatusViewTest, EveryLineOfTheFrameIsCutToTheWidth) {
  nlohmann::json stats = {{"memory_used", 3 * kGiB},
                          {"cache_size", 4 * kGiB},
                          {"flush_errors", 7},
                          {"last_error", "pwrite " + std::string(200, 'x') + ": No space left"}};
  FrameContext c = Context(30, 24);
  c.mountpoint = "/mnt/" + std::string(100, 'm');
  const std::string frame = RenderFrame(stats, TrendOf(stats), c);
  for (const std::string& line : Lines(frame)) EXPECT_LE(Columns(line), 30) << line;
  EXPECT_EQ(Columns(Lines(frame)[0]), 30);
}

TEST(StatusViewTest, ALineIsCutBetweenCharactersNotInsideOne) {
  FrameContext c = Context(40, 24);
  c.mountpoint = "/mnt/";
  for (int i = 0; i < 50; ++i) c.mountpoint += "\xc3\xa9";  // é
  const nlohmann::json stats = nlohmann::json::object();
  const std::string header = Lines(RenderFrame(stats, TrendOf(stats), c))[0];
  EXPECT_EQ(header, "12:00:00  ckptfs /mnt/" + c.mountpoint.substr(5, 2 * 18));
  EXPECT_EQ(Columns(header), 40);
}

// Stats of a shared mount with `members` members: a frame of 8 + members lines.
nlohmann::json SharedStats(int members) {
  nlohmann::json list = nlohmann::json::array();
  for (int i = 0; i < members; ++i) list.push_back({{"node", "node-" + std::to_string(i)}});
  return {{"shared", {{"node", "node-0"}, {"members", list}}}};
}

TEST(StatusViewTest, AFrameTallerThanTheScreenEndsSayingHowManyLinesItLeftOut) {
  const nlohmann::json stats = SharedStats(10);
  const std::vector<std::string> lines = Lines(RenderFrame(stats, TrendOf(stats), Context(80, 9)));
  ASSERT_EQ(lines.size(), 9u);
  EXPECT_EQ(lines[7], "shared   as node node-0, 10 members");
  EXPECT_EQ(lines[8], "+10 more lines");
}

TEST(StatusViewTest, AFrameThatFitsTheScreenLeavesNothingOut) {
  const nlohmann::json stats = SharedStats(10);
  const std::vector<std::string> lines =
      Lines(RenderFrame(stats, TrendOf(stats), Context(80, 18)));
  ASSERT_EQ(lines.size(), 18u);
  EXPECT_EQ(lines[17], "  node-9           beat      0 ms ago, 0 entries pending (0 B)");
}

TEST(StatusViewTest, AScreenOfOneRowShowsOnlyHowManyLinesItLeftOut) {
  const nlohmann::json stats = SharedStats(1);
  EXPECT_EQ(RenderFrame(stats, TrendOf(stats), Context(80, 1)), "+9 more lines\n");
}

TEST(StatusViewTest, TheMembersOfASharedMountAreListed) {
  const nlohmann::json stats = {
      {"shared",
       {{"node", "node-a"},
        {"members",
         {{{"node", "node-a"},
           {"beat_age_ms", 120},
           {"flush_lag_entries", 3},
           {"pending_bytes", 2048},
           {"self", true}},
          {{"node", "node-b"},
           {"beat_age_ms", 4500},
           {"flush_lag_entries", 0},
           {"pending_bytes", 0}}}}}}};
  const std::vector<std::string> lines =
      Lines(RenderFrame(stats, TrendOf(stats), Context(100, 24)));
  ASSERT_EQ(lines.size(), 10u);
  EXPECT_EQ(lines[7], "shared   as node node-a, 2 members");
  EXPECT_EQ(lines[8],
            "  node-a           beat    120 ms ago, 3 entries pending (2.0 KiB), this mount");
  EXPECT_EQ(lines[9], "  node-b           beat   4500 ms ago, 0 entries pending (0 B)");
}

TEST(StatusViewTest, TheReplicatedLevelAndThePartnersAreShown) {
  const nlohmann::json stats = {
      {"replication",
       {{"replicas", 2},
        {"not_replicated_entries", 5},
        {"held_bytes", 3 << 20},
        {"partners",
         {{{"node", "node-b"}, {"connected", true}}, {{"node", "node-c"}, {"connected", false}}}}}}};
  EXPECT_EQ(LineStarting(RenderFrame(stats, TrendOf(stats), Context(120, 24)), "replicas"),
            "replicas 5 entries not yet in 2 partner(s)' memory (node-b, node-c (not connected)); "
            "holding 3.0 MiB for others");
}

TEST(StatusViewTest, TheWorkerAndItsSupervisorAreShown) {
  const nlohmann::json stats = {{"worker", {{"number", 3}, {"pid", 4242}, {"supervisor_pid", 17}}}};
  EXPECT_EQ(LineStarting(RenderFrame(stats, TrendOf(stats), Context(80, 24)), "worker"),
            "worker   3 (pid 4242), supervisor pid 17");
}

TEST(StatusViewTest, TheFlushRateIsTheBytesFlushedBetweenTheLastTwoSamplesOverTheirTime) {
  FlushTrend trend;
  trend.Add(At(0), FlushStats(0, 0));
  EXPECT_LT(trend.current_rate(), 0);
  trend.Add(At(2), FlushStats(200 * kMiB, 0));
  trend.Add(At(3), FlushStats(250 * kMiB, 0));
  EXPECT_DOUBLE_EQ(trend.current_rate(), 50 * kMiB);
  EXPECT_DOUBLE_EQ(trend.average_rate(), 250 * kMiB / 3);
  nlohmann::json stats = FlushStats(250 * kMiB, 0);
  stats["files_flushed"] = 4;
  EXPECT_EQ(LineStarting(RenderFrame(stats, trend, Context(80, 24)), "flush"),
            "flush    50.0 MiB/s now, 250.0 MiB in 4 files so far");
}

TEST(StatusViewTest, TheFlushRateIsUnknownBeforeASecondSample) {
  const nlohmann::json stats = FlushStats(kGiB, 0);
  EXPECT_EQ(LineStarting(RenderFrame(stats, TrendOf(stats), Context(80, 24)), "flush"),
            "flush    -- B/s now, 1.0 GiB in 0 files so far");
}

TEST(StatusViewTest, ACounterThatWentBackIsANewWorkersCountingFromZeroNotNegativeProgress) {
  FlushTrend trend;
  trend.Add(At(0), FlushStats(1000 * kMiB, 500 * kMiB));
  trend.Add(At(1), FlushStats(1100 * kMiB, 400 * kMiB));
  trend.Add(At(2), FlushStats(30 * kMiB, 370 * kMiB));  // A new worker flushed 30 MiB so far.
  EXPECT_DOUBLE_EQ(trend.current_rate(), 30 * kMiB);
  EXPECT_DOUBLE_EQ(trend.flushed_since_first(), 130 * kMiB);
  EXPECT_DOUBLE_EQ(trend.flushed_since_backlog_empty(), 130 * kMiB);
  EXPECT_EQ(RenderSyncProgress(trend, 0, ""),
            "sync 130.0 MiB of 500.0 MiB durable, 65.0 MiB/s, ETA 0:06");
}

TEST(StatusViewTest, TheDurableBarCountsFromWhenTheBacklogWasLastEmpty) {
  FlushTrend trend;
  trend.Add(At(0), FlushStats(0, 100 * kMiB));
  trend.Add(At(1), FlushStats(100 * kMiB, 0));  // All durable: the backlog starts anew.
  trend.Add(At(2), FlushStats(200 * kMiB, 300 * kMiB));
  const std::string frame = RenderFrame(FlushStats(200 * kMiB, 300 * kMiB), trend, Context(64, 24));
  EXPECT_EQ(LineStarting(frame, "durable"), "durable  [" + std::string(5, '#') +
                                                std::string(15, '-') +
                                                "] 100.0 MiB of 400.0 MiB");
}

TEST(StatusViewTest, TheDurableBarIsFullWhenNothingIsPending) {
  const nlohmann::json stats = FlushStats(kGiB, 0);
  EXPECT_EQ(LineStarting(RenderFrame(stats, TrendOf(stats), Context(64, 24)), "durable"),
            "durable  [" + std::string(20, '#') + "] nothing pending");
}

TEST(StatusViewTest, ControlCharactersInTheLastErrorAreShownAsQuestionMarks) {
  const nlohmann::json stats = {{"flush_errors", 2},
                                {"last_error", "open bad\x1b[2Jname\n\x7f\xc2\x9b: EIO"}};
  const std::string frame = RenderFrame(stats, TrendOf(stats), Context(100, 24));
  EXPECT_EQ(LineStarting(frame, "errors"),
            "errors   2 flush errors, now failing: open bad?[2Jname???: EIO");
  EXPECT_FALSE(HasControlCharacter(frame)) << frame;
}

TEST(StatusViewTest, ControlCharactersInMemberNamesAreShownAsQuestionMarks) {
  const nlohmann::json stats = {
      {"shared", {{"node", "a\x1b]0;x\x07"}, {"members", {{{"node", "b\rc"}}}}}}};
  const std::string frame = RenderFrame(stats, TrendOf(stats), Context(100, 24));
  EXPECT_EQ(LineStarting(frame, "shared"), "shared   as node a?]0;x?, 1 members");
  EXPECT_FALSE(HasControlCharacter(frame)) << frame;
}

TEST(StatusViewTest, TheErrorsLineSaysWhenErrorsCameButNoneFailsNow) {
  const nlohmann::json stats = {{"flush_errors", 2}};
  EXPECT_EQ(LineStarting(RenderFrame(stats, TrendOf(stats), Context(80, 24)), "errors"),
            "errors   2 flush errors, none now");
  const nlohmann::json clean = nlohmann::json::object();
  EXPECT_EQ(LineStarting(RenderFrame(clean, TrendOf(clean), Context(80, 24)), "errors"),
            "errors   none");
}

TEST(StatusViewTest, TheChecksLineSaysWhatWasSummedReadBackAndFoundWrong) {
  const nlohmann::json clean = {{"bytes_checksummed", 4 * kGiB}};
  EXPECT_EQ(LineStarting(RenderFrame(clean, TrendOf(clean), Context(80, 24)), "checks"),
            "checks   4.0 GiB summed, 0 B read back, no mismatch");
  const nlohmann::json wrong = {
      {"bytes_checksummed", 4 * kGiB}, {"bytes_read_back", kGiB}, {"checksum_mismatches", 2}};
  EXPECT_EQ(LineStarting(RenderFrame(wrong, TrendOf(wrong), Context(80, 24)), "checks"),
            "checks   4.0 GiB summed, 1.0 GiB read back, 2 mismatches (written again)");
}

TEST(StatusViewTest, ThePlainLineIsOneLineWithoutEscapeCharacters) {
  const nlohmann::json stats = {{"memory_used", kGiB},     {"cache_size", 4 * kGiB},
                                {"dirty_bytes", 3 * kMiB}, {"pending_entries", 2},
                                {"flush_errors", 1},       {"last_error", "\x1b[31mred\nline"}};
  const std::string line = RenderPlainLine(stats, TrendOf(stats), "2024-01-02 03:04:05");
  EXPECT_EQ(line,
            "2024-01-02 03:04:05  memory 1.0 GiB of 4.0 GiB  dirty 3.0 MiB in 2 entries  flush "
            "-- B/s  errors 1, now failing: ?[31mred?line\n");
  EXPECT_EQ(line.find('\x1b'), std::string::npos);
  EXPECT_FALSE(HasControlCharacter(line));
}

// A sync that began with 300 MiB dirty and made 100 MiB durable in 10 s.
FlushTrend SyncTenSecondsIn() {
  FlushTrend trend;
  trend.Add(At(0), FlushStats(0, 300 * kMiB));
  trend.Add(At(10), FlushStats(100 * kMiB, 200 * kMiB));
  return trend;
}

TEST(StatusViewTest, TheSyncLineShowsTheBytesDurableTheRateAndTheTimeLeft) {
  EXPECT_EQ(RenderSyncProgress(SyncTenSecondsIn(), 0, ""),
            "sync 100.0 MiB of 300.0 MiB durable, 10.0 MiB/s, ETA 0:20");
}

TEST(StatusViewTest, TheSyncBarFillsTheColumnsItIsGiven) {
  EXPECT_EQ(RenderSyncProgress(SyncTenSecondsIn(), 80, ""),
            "sync [" + std::string(6, '#') + std::string(14, '-') +
                "] 100.0 MiB of 300.0 MiB durable, 10.0 MiB/s, ETA 0:20");
}

TEST(StatusViewTest, TheSyncBarIsCutToANarrowTerminal) {
  EXPECT_EQ(RenderSyncProgress(SyncTenSecondsIn(), 30, ""),
            "sync [###-------] 100.0 MiB of");
}

TEST(StatusViewTest, TheSyncEtaIsUnknownBeforeASecondSample) {
  EXPECT_EQ(RenderSyncProgress(TrendOf(FlushStats(5 * kGiB, kGiB)), 0, ""),
            "sync 0 B of 1.0 GiB durable, -- B/s, ETA --:--");
}

TEST(StatusViewTest, TheSyncEtaIsUnknownWhileNothingWasFlushed) {
  FlushTrend trend;
  trend.Add(At(0), FlushStats(0, kGiB));
  trend.Add(At(5), FlushStats(0, kGiB));
  EXPECT_EQ(RenderSyncProgress(trend, 0, ""), "sync 0 B of 1.0 GiB durable, 0 B/s, ETA --:--");
}

TEST(StatusViewTest, TheSyncEtaShowsHoursFromAnHourOn) {
  FlushTrend trend;
  trend.Add(At(0), FlushStats(0, 3601 * kMiB));
  trend.Add(At(1), FlushStats(kMiB, 3600 * kMiB));
  EXPECT_EQ(RenderSyncProgress(trend, 0, ""),
            "sync 1.0 MiB of 3.5 GiB durable, 1.0 MiB/s, ETA 1:00:00");
}

TEST(StatusViewTest, TheFinalSyncLineSaysTheOutcomeInsteadOfTheEta) {
  FlushTrend trend = SyncTenSecondsIn();
  trend.Add(At(30), FlushStats(300 * kMiB, 0));
  EXPECT_EQ(RenderSyncProgress(trend, 0, "done in 30.0 s"),
            "sync 300.0 MiB of 300.0 MiB durable, 10.0 MiB/s, done in 30.0 s");
}

TEST(StatusViewTest, ASyncWithNothingDirtyShowsAFullBar) {
  EXPECT_EQ(RenderSyncProgress(TrendOf(FlushStats(0, 0)), 60, ""),
            "sync [" + std::string(15, '#') + "] 0 B of 0 B durable, -- B/s, ETA --:--");
}

TEST(StatusViewTest, TheVerifyBarShowsTheBytesReadTheFilesDoneAndTheRate) {
  const VerifyProgress p{.bytes_read = uint64_t{100} << 20, .bytes_total = uint64_t{400} << 20,
                         .files_done = 3, .files_total = 10, .seconds = 10};
  EXPECT_EQ(RenderVerifyProgress(p, 80),
            "verify [" + std::string(5, '#') + std::string(16, '-') +
                "] 100.0 MiB of 400.0 MiB, 3 of 10 files, 10.0 MiB/s");
  EXPECT_EQ(RenderVerifyProgress(p, 20), "verify [##--------] ");
}

TEST(StatusViewTest, TheVerifyRateIsUnknownAtTheStart) {
  EXPECT_EQ(RenderVerifyProgress({.bytes_total = uint64_t{1} << 30, .files_total = 2}, 80),
            "verify [" + std::string(34, '-') + "] 0 B of 1.0 GiB, 0 of 2 files, -- B/s");
}

}  // namespace
}  // namespace ckptfs
