// What the live client views draw from a mount's stats (`.ckptfs/stats`): the screen of
// `ckptfs status --watch`, its plain line when stdout is no terminal, and the bar of
// `ckptfs sync --progress` and `ckptfs verify`. Pure: it reads nothing and touches no terminal;
// fs/client.cc and fs/verify_command.cc read, keep the time and draw.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

namespace ckptfs {

// `bytes` in the largest of B, KiB, MiB, GiB and TiB it reaches: "512 B", "1.5 MiB".
std::string HumanBytes(double bytes);

// `text` safe to print on a terminal: control characters (C0, DEL and C1, which may come from
// file names in error messages) are shown as '?'.
std::string Printable(const std::string& text);

// The flush figures that need more than one stats sample. bytes_flushed counts from 0 again in
// a new worker (ckptfs upgrade): a drop is taken as a restart of the counter, never as negative
// progress.
class FlushTrend {
 public:
  using Clock = std::chrono::steady_clock;

  // Takes the stats sampled at `at`; samples come in time order.
  void Add(Clock::time_point at, const nlohmann::json& stats);

  // Whether a sample was taken.
  bool started() const { return started_; }
  // Bytes flushed per second between the last two samples; negative before the second.
  double current_rate() const { return rate_; }
  // Bytes flushed per second since the first sample; negative before the second.
  double average_rate() const { return seconds() > 0 ? since_first_ / seconds() : -1; }
  // Seconds from the first sample to the last.
  double seconds() const { return std::chrono::duration<double>(last_ - first_).count(); }
  // Bytes flushed from the first sample to the last.
  double flushed_since_first() const { return since_first_; }
  // Bytes flushed since a sample last had no dirty bytes, or since the first sample.
  double flushed_since_backlog_empty() const { return since_backlog_empty_; }
  // dirty_bytes of the last sample.
  double dirty() const { return dirty_; }

 private:
  bool started_ = false;
  Clock::time_point first_, last_;
  double last_flushed_ = 0, dirty_ = 0, rate_ = -1, since_first_ = 0, since_backlog_empty_ = 0;
};

// What a frame of `status --watch` shows besides the figures, and the room it has.
struct FrameContext {
  std::string mountpoint;
  std::string clock;  // When the stats were read.
  double interval_s = 1;
  int columns = 80;
  int rows = 24;
};

// A frame of `status --watch` from the stats and their trend: lines ending in '\n', at most
// c.rows of them (the last saying "+N more lines" when some do not fit), each at most c.columns
// wide and free of control characters.
std::string RenderFrame(const nlohmann::json& stats, const FlushTrend& trend,
                        const FrameContext& c);

// The line `status --watch` prints for each sample when its output is no terminal: one line
// ending in '\n', free of control characters, starting with `clock`.
std::string RenderPlainLine(const nlohmann::json& stats, const FlushTrend& trend,
                            const std::string& clock);

// The progress line of a sync (no '\n'): bytes made durable since it began of those plus what is
// dirty now, the rate since it began and the time left at that rate; at most `columns` wide with
// a bar, or a plain sentence when columns is 0. `outcome` ends the final line instead of the ETA.
std::string RenderSyncProgress(const FlushTrend& trend, int columns, const std::string& outcome);

// What `ckptfs verify` has read so far.
struct VerifyProgress {
  uint64_t bytes_read = 0;
  uint64_t bytes_total = 0;
  size_t files_done = 0;
  size_t files_total = 0;
  double seconds = 0;  // Since it began.
};

// The progress line of a verify (no '\n'): a bar of the bytes read, the files done, the rate;
// at most `columns` wide.
std::string RenderVerifyProgress(const VerifyProgress& p, int columns);

}  // namespace ckptfs
