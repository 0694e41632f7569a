#include "fs/client.h"

#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/ioctl.h>
#include <time.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>
#include <utility>

#include <CLI/CLI.hpp>

#include "fs/status_view.h"

namespace ckptfs {
namespace {

using Clock = std::chrono::steady_clock;

// Reads and parses MOUNTPOINT/.ckptfs/stats; false with *error saying why when it cannot.
bool ReadStats(const std::string& mountpoint, nlohmann::json* stats, std::string* error) {
  std::string text;
  if (!ReadControlFile(mountpoint + "/.ckptfs/stats", &text)) {
    *error = std::strerror(errno);
    return false;
  }
  *stats = nlohmann::json::parse(text, nullptr, false);
  if (stats->is_discarded() || !stats->is_object()) {
    *error = "its .ckptfs/stats is no JSON object";
    return false;
  }
  return true;
}

// The local time now, formatted by strftime's `format`.
std::string LocalTime(const char* format) {
  const time_t now = time(nullptr);
  struct tm tm;
  char buf[64];
  if (!localtime_r(&now, &tm) || strftime(buf, sizeof buf, format, &tm) == 0) return "?";
  return buf;
}

struct TerminalSize {
  int columns = 80;
  int rows = 24;
};

// The size of the terminal on `fd`; 80x24 when it tells none.
TerminalSize SizeOf(int fd) {
  struct winsize ws = {};
  if (ioctl(fd, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0 && ws.ws_row > 0) {
    return {ws.ws_col, ws.ws_row};
  }
  return {};
}

void WriteOut(const std::string& text) {
  std::fwrite(text.data(), 1, text.size(), stdout);
  std::fflush(stdout);
}

// The terminal on stdout while `status --watch` draws: the alternate screen with the cursor
// hidden, from construction until destruction, which shows the cursor and leaves it.
class AlternateScreen {
 public:
  AlternateScreen() { WriteOut("\x1b[?1049h\x1b[?25l"); }
  ~AlternateScreen() { WriteOut("\x1b[?25h\x1b[?1049l"); }
  AlternateScreen(const AlternateScreen&) = delete;
  AlternateScreen& operator=(const AlternateScreen&) = delete;

  // Replaces what the screen shows by `frame` (lines ending in '\n', no more than it has rows).
  void Draw(const std::string& frame) {
    std::string out = "\x1b[H";
    for (size_t start = 0; start < frame.size();) {
      size_t end = frame.find('\n', start);
      if (end == std::string::npos) end = frame.size();
      out.append(frame, start, end - start).append("\x1b[K");
      start = end + 1;
      if (start < frame.size()) out += "\n";  // No newline after the last row: no scrolling.
    }
    WriteOut(out + "\x1b[J");
  }
};

// Blocks SIGINT, SIGTERM and SIGWINCH for the rest of the process, to be taken by
// WaitForSignal: a frame is never cut in half, and a second Ctrl-C while the watch ends does
// not kill it. Returns the set.
sigset_t BlockWatchSignals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGWINCH);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  return set;
}

// Waits until `deadline` for a signal of `set` (blocked); returns it, or 0 at the deadline.
int WaitForSignal(const sigset_t& set, Clock::time_point deadline) {
  for (;;) {
    const auto left = deadline - Clock::now();
    if (left <= Clock::duration::zero()) return 0;
    const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(left).count();
    const struct timespec timeout = {static_cast<time_t>(ns / 1000000000),
                                     static_cast<long>(ns % 1000000000)};
    const int sig = sigtimedwait(&set, nullptr, &timeout);
    if (sig > 0) return sig;
    if (errno == EAGAIN) return 0;  // Otherwise EINTR: another signal (SIGCONT) came first.
  }
}

// Reads and draws the stats every interval_s seconds, on `screen` or, when it is null, as plain
// lines on stdout. Returns "" at SIGINT or SIGTERM, or why the stats could no longer be read.
std::string WatchLoop(const std::string& mountpoint, double interval_s, const sigset_t& signals,
                      AlternateScreen* screen) {
  const auto interval = std::chrono::duration_cast<Clock::duration>(
      std::chrono::duration<double>(interval_s));
  FlushTrend trend;
  nlohmann::json stats;
  FrameContext context{mountpoint, "", interval_s};
  auto draw = [&] {
    const TerminalSize size = SizeOf(STDOUT_FILENO);
    context.columns = size.columns;
    context.rows = size.rows;
    screen->Draw(RenderFrame(stats, trend, context));
  };
  for (auto next = Clock::now();;) {
    std::string error;
    const auto at = Clock::now();
    if (!ReadStats(mountpoint, &stats, &error)) {
      return mountpoint +
             (trend.started() ? " can no longer be read (unmounted, or its daemon is gone): "
                              : " is not a ckptfs mount or cannot be read: ") +
             error;
    }
    trend.Add(at, stats);
    if (screen) {
      context.clock = LocalTime("%H:%M:%S");
      draw();
    } else {
      WriteOut(RenderPlainLine(stats, trend, LocalTime("%Y-%m-%d %H:%M:%S")));
    }
    next += interval;
    if (next < Clock::now()) next = Clock::now() + interval;  // A slow read: no catching up.
    for (int sig; (sig = WaitForSignal(signals, next)) != 0;) {
      if (sig != SIGWINCH) return "";
      if (screen) draw();
    }
  }
}

// `status --watch`; returns the exit code.
int Watch(const std::string& mountpoint, double interval_s) {
  const sigset_t signals = BlockWatchSignals();
  std::string error;
  {
    std::optional<AlternateScreen> screen;
    if (isatty(STDOUT_FILENO)) screen.emplace();
    error = WatchLoop(mountpoint, interval_s, signals, screen ? &*screen : nullptr);
  }
  if (error.empty()) return 0;
  std::fprintf(stderr, "ckptfs status: %s\n", Printable(error).c_str());
  return 1;
}

// The progress of a sync on stderr, drawn by a thread of its own from construction until
// Finish(): a bar redrawn in place on a terminal, else a plain line every second at most.
class SyncProgress {
 public:
  // Reads the stats at once: what is dirty now is part of the total.
  explicit SyncProgress(std::string mountpoint)
      : mountpoint_(std::move(mountpoint)), tty_(isatty(STDERR_FILENO)), start_(Clock::now()) {
    Sample();
    thread_ = std::thread([this] { Run(); });
  }
  ~SyncProgress() {
    if (thread_.joinable()) Stop();
  }
  SyncProgress(const SyncProgress&) = delete;
  SyncProgress& operator=(const SyncProgress&) = delete;

  // Stops the drawing and ends with a line of the figures now and whether the sync `succeeded`
  // (none when the stats could never be read). Call once.
  void Finish(bool succeeded) {
    Stop();
    if (!trend_.started()) return;
    Sample();
    char outcome[64];
    std::snprintf(outcome, sizeof outcome, "%s %.1f s", succeeded ? "done in" : "stopped after",
                  std::chrono::duration<double>(Clock::now() - start_).count());
    Draw(outcome);
  }

 private:
  void Stop() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      finished_ = true;
    }
    wake_.notify_one();
    thread_.join();
  }

  void Run() {
    const auto period = tty_ ? std::chrono::milliseconds(200) : std::chrono::milliseconds(1000);
    std::unique_lock<std::mutex> lock(mu_);
    while (!finished_) {
      lock.unlock();
      if (Sample()) Draw("");
      lock.lock();
      wake_.wait_for(lock, period, [this] { return finished_; });
    }
  }

  // Adds a sample of the stats to trend_; false when they cannot be read.
  bool Sample() {
    nlohmann::json stats;
    std::string error;
    const auto at = Clock::now();
    if (!ReadStats(mountpoint_, &stats, &error)) return false;
    trend_.Add(at, stats);
    return true;
  }

  // Draws the progress: in place on a terminal (a final line when `outcome` is set), else a line.
  void Draw(const std::string& outcome) {
    std::string out;
    if (tty_) {
      out = "\r" + RenderSyncProgress(trend_, SizeOf(STDERR_FILENO).columns - 1, outcome) +
            "\x1b[K" + (outcome.empty() ? "" : "\n");
    } else {
      out = RenderSyncProgress(trend_, 0, outcome) + "\n";
    }
    std::fputs(out.c_str(), stderr);
  }

  const std::string mountpoint_;
  const bool tty_;
  const Clock::time_point start_;
  FlushTrend trend_;  // The drawing thread's until Finish() joined it.
  std::mutex mu_;
  std::condition_variable wake_;
  bool finished_ = false;  // Guarded by mu_.
  std::thread thread_;
};

int Sync(const std::string& mountpoint, bool progress) {
  std::optional<SyncProgress> bar;
  if (progress) bar.emplace(mountpoint);
  std::string answer;
  bool ok = ReadControlFile(mountpoint + "/.ckptfs/sync", &answer);
  int err = errno;
  if (bar) bar->Finish(ok && answer.rfind("ok", 0) == 0);
  if (!ok) {
    std::fprintf(stderr, "ckptfs sync: %s is not a ckptfs mount or cannot be read: %s\n",
                 mountpoint.c_str(), std::strerror(err));
    return 1;
  }
  if (answer.rfind("ok", 0) == 0) return 0;
  std::fprintf(stderr, "ckptfs sync: %s", answer.c_str());
  return 1;
}

// Instead of a sync: waits until every file version sealed (closed, fsynced) before the call is in
// its N partners' memory or durable (-o replicas). Fails when the mount does not replicate, or its
// worker was replaced meanwhile (the new one's journal starts again).
int SyncReplicated(const std::string& mountpoint, bool progress) {
  nlohmann::json stats;
  std::string error;
  auto read = [&] {
    if (!ReadStats(mountpoint, &stats, &error)) return false;
    if (stats.contains("replication") && stats["replication"].is_object()) return true;
    error = mountpoint + " is not mounted with -o shared,replicas=N";
    return false;
  };
  if (!read()) {
    std::fprintf(stderr, "ckptfs sync: %s\n", Printable(error).c_str());
    return 1;
  }
  const uint64_t target = stats["replication"].value("sealed_seq", 0ull);
  auto last_line = std::chrono::steady_clock::now();
  for (;;) {
    const nlohmann::json& r = stats["replication"];
    const uint64_t replicated = r.value("replicated_seq", 0ull);
    if (r.value("sealed_seq", 0ull) < target) {
      std::fprintf(stderr, "ckptfs sync: the mount's worker was replaced during the sync; run it "
                           "again\n");
      return 1;
    }
    const bool finished = replicated >= target;
    const auto now = std::chrono::steady_clock::now();
    if (progress && (finished || now - last_line >= std::chrono::seconds(1))) {
      last_line = now;
      std::fprintf(stderr, "replicated: %llu of %llu entries in the partners' memory or durable\n",
                   static_cast<unsigned long long>(std::min(replicated, target)),
                   static_cast<unsigned long long>(target));
    }
    if (finished) return 0;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    if (!read()) {
      std::fprintf(stderr, "ckptfs sync: %s\n", Printable(error).c_str());
      return 1;
    }
  }
}

// After a sync: waits until every file version made durable so far is on the object store
// (-o remote), telling the uploads' progress on stderr every second with `progress`. Fails when
// the mount has no remote, its worker was replaced meanwhile (its uploads are not resumed yet),
// or an upload was given up (remote.failed_files).
int SyncRemote(const std::string& mountpoint, bool progress) {
  nlohmann::json stats;
  std::string error;
  if (!ReadStats(mountpoint, &stats, &error)) {
    std::fprintf(stderr, "ckptfs sync: %s\n", Printable(error).c_str());
    return 1;
  }
  if (!stats.contains("remote") || !stats["remote"].is_object()) {
    std::fprintf(stderr, "ckptfs sync: %s is not mounted with -o remote\n", mountpoint.c_str());
    return 1;
  }
  const uint64_t target = stats["remote"].value("handed_over", 0ull);
  auto last_line = std::chrono::steady_clock::now();
  for (;;) {
    const nlohmann::json& remote = stats["remote"];
    const uint64_t done = remote.value("uploaded_in_order", 0ull);
    if (remote.value("handed_over", 0ull) < target) {
      std::fprintf(stderr, "ckptfs sync: the mount's worker was replaced during the sync; the "
                           "uploads it had not finished are not resumed (not yet supported)\n");
      return 1;
    }
    const bool finished = done >= target;
    if (!finished && remote.value("failed_files", 0ull) > 0) {
      std::fprintf(stderr,
                   "ckptfs sync: %llu files cannot be uploaded (their bytes refused for their "
                   "checksum; corrupt on the local disk: %llu): see the mount's log\n",
                   static_cast<unsigned long long>(remote.value("failed_files", 0ull)),
                   static_cast<unsigned long long>(remote.value("corrupt_files", 0ull)));
      return 1;
    }
    const auto now = std::chrono::steady_clock::now();
    if (progress && (finished || now - last_line >= std::chrono::seconds(1))) {
      last_line = now;
      std::fprintf(stderr,
                   "remote: %llu of %llu files on the store, %s pending, %llu retries%s%s\n",
                   static_cast<unsigned long long>(std::min(done, target)),
                   static_cast<unsigned long long>(target),
                   HumanBytes(remote.value("pending_bytes", 0.0)).c_str(),
                   static_cast<unsigned long long>(remote.value("retries", 0ull)),
                   remote.value("last_error", "").empty() ? "" : ", failing: ",
                   Printable(remote.value("last_error", "")).c_str());
    }
    if (finished) return 0;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    if (!ReadStats(mountpoint, &stats, &error) || !stats.contains("remote")) {
      std::fprintf(stderr, "ckptfs sync: %s\n", Printable(error).c_str());
      return 1;
    }
  }
}

// The members of a shared backing directory and this mount's pending commits.
void PrintShared(const nlohmann::json& shared) {
  std::printf("shared as node   %s, %llu markers published, %llu failed%s%s\n",
              shared.value("node", "").c_str(),
              static_cast<unsigned long long>(shared.value("commits_published", 0ull)),
              static_cast<unsigned long long>(shared.value("commits_failed", 0ull)),
              shared.value("last_commit_error", "").empty() ? "" : ", last: ",
              shared.value("last_commit_error", "").c_str());
  for (const nlohmann::json& m : shared.value("members", nlohmann::json::array())) {
    std::printf("  member %-20s beat %5lld ms ago, %llu entries not durable (%s)%s\n",
                m.value("node", "").c_str(), static_cast<long long>(m.value("beat_age_ms", 0ll)),
                static_cast<unsigned long long>(m.value("flush_lag_entries", 0ull)),
                HumanBytes(m.value("pending_bytes", 0.0)).c_str(),
                m.value("self", false) ? "  (this mount)" : "");
  }
  for (const nlohmann::json& c : shared.value("pending_commits", nlohmann::json::array())) {
    std::printf("  commit %s for %s: %lld ms, waiting for %s\n", c.value("id", "").c_str(),
                c.value("marker", "").c_str(), static_cast<long long>(c.value("age_ms", 0ll)),
                c.value("waiting_for", nlohmann::json::array()).dump().c_str());
  }
}

// The durability ladder of -o replicas (sealed, replicated, durable), the partners and what this
// member holds for others.
void PrintReplication(const nlohmann::json& r) {
  std::printf("replicated       %llu of %llu entries sealed in %llu partner(s)' memory or durable "
              "(%llu durable), receiving at %s\n",
              static_cast<unsigned long long>(r.value("replicated_seq", 0ull)),
              static_cast<unsigned long long>(r.value("sealed_seq", 0ull)),
              static_cast<unsigned long long>(r.value("replicas", 0ull)),
              static_cast<unsigned long long>(r.value("durable_seq", 0ull)),
              Printable(r.value("endpoint", "")).c_str());
  for (const nlohmann::json& p : r.value("partners", nlohmann::json::array())) {
    std::printf("  partner %-19s %s at %s: %llu versions (%s) stored, %llu queued, %llu offers "
                "refused full%s%s\n",
                Printable(p.value("node", "")).c_str(),
                p.value("connected", false) ? "connected" : "not connected",
                Printable(p.value("endpoint", "")).c_str(),
                static_cast<unsigned long long>(p.value("replicas_stored", 0ull)),
                HumanBytes(p.value("bytes_stored", 0.0)).c_str(),
                static_cast<unsigned long long>(p.value("queued", 0ull)),
                static_cast<unsigned long long>(p.value("offers_full", 0ull)),
                p.value("last_error", "").empty() ? "" : ", last error: ",
                Printable(p.value("last_error", "")).c_str());
  }
  std::printf("  holding %llu versions (%s of %s) for others; %llu connections refused\n",
              static_cast<unsigned long long>(r.value("held_replicas", 0ull)),
              HumanBytes(r.value("held_bytes", 0.0)).c_str(),
              HumanBytes(r.value("held_limit", 0.0)).c_str(),
              static_cast<unsigned long long>(r.value("connections_refused", 0ull)));
}

int PrintStatus(const std::string& mountpoint, bool json) {
  std::string text;
  if (!ReadControlFile(mountpoint + "/.ckptfs/stats", &text)) {
    std::fprintf(stderr, "ckptfs status: %s is not a ckptfs mount or cannot be read: %s\n",
                 mountpoint.c_str(), std::strerror(errno));
    return 1;
  }
  if (json) {
    std::fputs(text.c_str(), stdout);
    return 0;
  }
  auto j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_discarded()) {
    std::fprintf(stderr, "ckptfs status: unreadable stats from %s\n", mountpoint.c_str());
    return 1;
  }
  std::printf("backend          %s\n", j.value("backend", "").c_str());
  std::printf("memory           %s used of %s\n", HumanBytes(j.value("memory_used", 0.0)).c_str(),
              HumanBytes(j.value("cache_size", 0.0)).c_str());
  std::printf("not yet durable  %s in %llu entries\n", HumanBytes(j.value("dirty_bytes", 0.0)).c_str(),
              static_cast<unsigned long long>(j.value("pending_entries", 0ull)));
  std::printf("written          %s\n", HumanBytes(j.value("bytes_written", 0.0)).c_str());
  std::printf("flushed          %s in %llu files (%s/s)\n",
              HumanBytes(j.value("bytes_flushed", 0.0)).c_str(),
              static_cast<unsigned long long>(j.value("files_flushed", 0ull)),
              HumanBytes(j.value("flush_throughput", 0.0)).c_str());
  std::printf("writers waiting  %llu%s%s\n",
              static_cast<unsigned long long>(j.value("writers_waiting", 0ull)),
              j.value("spill_error", "").empty() ? "" : ", stuck: ",
              Printable(j.value("spill_error", "")).c_str());
  std::printf("versions skipped %llu\n", static_cast<unsigned long long>(j.value("versions_skipped", 0ull)));
  std::printf("flush errors     %llu%s%s\n", static_cast<unsigned long long>(j.value("flush_errors", 0ull)),
              j.value("last_error", "").empty() ? "" : ", now failing: ",
              Printable(j.value("last_error", "")).c_str());
  const nlohmann::json& arrays = j.contains("zarr_fine_grid") ? j["zarr_fine_grid"] : nlohmann::json::array();
  std::printf("zarr fine grid   %zu arrays\n", arrays.size());
  for (const nlohmann::json& a : arrays) {
    std::printf("  %s  %s  chunks %s shown as %s, %llu real chunk files\n",
                a.value("path", "").c_str(), a.value("dtype", "").c_str(),
                a.value("chunks", nlohmann::json::array()).dump().c_str(),
                a.value("virtual_chunks", nlohmann::json::array()).dump().c_str(),
                static_cast<unsigned long long>(a.value("real_chunks", 0ull)));
  }
  if (j.contains("remote") && j["remote"].is_object()) {
    const nlohmann::json& r = j["remote"];
    std::printf("uploaded         %s in %llu files to %s; %llu files (%s) pending, %llu retries, "
                "%llu errors%s%s\n",
                HumanBytes(r.value("bytes_uploaded", 0.0)).c_str(),
                static_cast<unsigned long long>(r.value("files_uploaded", 0ull)),
                Printable(r.value("location", "")).c_str(),
                static_cast<unsigned long long>(r.value("pending_files", 0ull)),
                HumanBytes(r.value("pending_bytes", 0.0)).c_str(),
                static_cast<unsigned long long>(r.value("retries", 0ull)),
                static_cast<unsigned long long>(r.value("errors", 0ull)),
                r.value("last_error", "").empty() ? "" : ", now failing: ",
                Printable(r.value("last_error", "")).c_str());
  }
  if (j.contains("shared") && j["shared"].is_object()) PrintShared(j["shared"]);
  if (j.contains("replication") && j["replication"].is_object()) {
    PrintReplication(j["replication"]);
  }
  if (j.contains("worker") && j["worker"].is_object()) {
    const nlohmann::json& w = j["worker"];
    std::printf("worker           %llu (pid %lld, %s), supervisor pid %lld\n",
                static_cast<unsigned long long>(w.value("number", 0ull)),
                static_cast<long long>(w.value("pid", 0ll)), w.value("binary", "").c_str(),
                static_cast<long long>(w.value("supervisor_pid", 0ll)));
    std::printf("takeovers        %llu handed over, %llu after a crash; last took %.1f ms, "
                "%llu requests resent\n",
                static_cast<unsigned long long>(w.value("handoffs", 0ull)),
                static_cast<unsigned long long>(w.value("crashes", 0ull)),
                w.value("takeover_ms", 0.0),
                static_cast<unsigned long long>(w.value("resent_requests", 0ull)));
    if (!w.value("upgrade_error", "").empty()) {
      std::printf("upgrade failed   %s\n", w.value("upgrade_error", "").c_str());
    }
  }
  return 0;
}

// The "worker" object of the mount's stats; null when unreadable.
nlohmann::json WorkerStats(const std::string& mountpoint) {
  nlohmann::json stats;
  std::string error;
  if (!ReadStats(mountpoint, &stats, &error) || !stats.contains("worker") ||
      !stats["worker"].is_object()) {
    return nullptr;
  }
  return stats["worker"];
}

int Upgrade(const std::string& mountpoint, const std::string& binary_arg, double timeout_s) {
  std::string binary;
  if (!binary_arg.empty()) {
    char resolved[PATH_MAX];
    if (!realpath(binary_arg.c_str(), resolved) || access(resolved, X_OK) != 0) {
      std::fprintf(stderr, "ckptfs upgrade: %s: %s\n", binary_arg.c_str(), std::strerror(errno));
      return 1;
    }
    binary = resolved;
  }
  nlohmann::json before = WorkerStats(mountpoint);
  if (before.is_null()) {
    std::fprintf(stderr, "ckptfs upgrade: %s is not a ckptfs mount with a supervisor\n",
                 mountpoint.c_str());
    return 1;
  }
  std::string command = binary.empty() ? "upgrade\n" : "upgrade " + binary + "\n";
  int fd = open((mountpoint + "/.ckptfs/upgrade").c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0 || write(fd, command.data(), command.size()) < 0) {
    std::fprintf(stderr, "ckptfs upgrade: %s\n", std::strerror(errno));
    if (fd >= 0) close(fd);
    return 1;
  }
  close(fd);
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::duration<double>(timeout_s);
  while (std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    nlohmann::json now = WorkerStats(mountpoint);
    if (now.is_null()) continue;
    if (now.value("number", 0ull) == before.value("number", 0ull)) {
      if (now.value("upgrade_error", "").empty()) continue;
      std::fprintf(stderr, "ckptfs upgrade: %s; worker %llu serves on\n",
                   now.value("upgrade_error", "").c_str(),
                   static_cast<unsigned long long>(now.value("number", 0ull)));
      return 1;
    }
    if (!now.value("upgrade_error", "").empty()) {
      std::fprintf(stderr, "ckptfs upgrade: %s; worker %llu (%s) serves\n",
                   now.value("upgrade_error", "").c_str(),
                   static_cast<unsigned long long>(now.value("number", 0ull)),
                   now.value("binary", "").c_str());
      return 1;
    }
    std::printf("worker %llu (pid %lld, %s, version %s) took over in %.1f ms\n",
                static_cast<unsigned long long>(now.value("number", 0ull)),
                static_cast<long long>(now.value("pid", 0ll)), now.value("binary", "").c_str(),
                now.value("version", "").c_str(), now.value("takeover_ms", 0.0));
    return 0;
  }
  std::fprintf(stderr, "ckptfs upgrade: no new worker within %.0f s (the handoff waits until "
               "everything closed is durable; see the mount's log)\n", timeout_s);
  return 1;
}

}  // namespace

bool ReadControlFile(const std::string& path, std::string* out) {
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  out->clear();
  char buf[65536];
  ssize_t n;
  while ((n = read(fd, buf, sizeof buf)) > 0) out->append(buf, static_cast<size_t>(n));
  int err = errno;
  close(fd);
  errno = err;
  return n == 0;
}

int RunClient(int argc, char** argv) {
  CLI::App app{"ckptfs client commands"};
  app.require_subcommand(1);
  std::string mountpoint;
  bool progress = false, json = false, watch = false;
  double interval_s = 1;
  CLI::App* sync = app.add_subcommand("sync", "Wait until everything closed so far is durable");
  sync->add_option("MOUNTPOINT", mountpoint)->required();
  sync->add_flag("--progress", progress,
                 "Show on stderr a bar of the bytes made durable, the rate and the time left");
  bool remote = false;
  CLI::Option* remote_flag = sync->add_flag(
      "--remote", remote,
      "Then wait until everything made durable is on the object store (-o remote)");
  bool replicated = false;
  sync->add_flag("--replicated", replicated,
                 "Instead, wait until everything closed so far is in the partners' memory or "
                 "durable (-o replicas)")
      ->excludes(remote_flag);
  CLI::App* status = app.add_subcommand("status", "Show the figures of a mount");
  status->add_option("MOUNTPOINT", mountpoint)->required();
  CLI::Option* json_flag = status->add_flag("--json", json, "Print the raw JSON of .ckptfs/stats");
  CLI::Option* watch_flag =
      status->add_flag("--watch", watch, "Redraw the figures every interval until Ctrl-C");
  status->add_option("--interval", interval_s, "Seconds between two draws of --watch (default 1)")
      ->check(CLI::Range(0.05, 3600.0))
      ->needs(watch_flag);
  json_flag->excludes(watch_flag);
  std::string binary;
  double timeout_s = 600;
  CLI::App* upgrade = app.add_subcommand(
      "upgrade", "Replace the mount's worker (with another binary) without unmounting");
  upgrade->add_option("MOUNTPOINT", mountpoint)->required();
  upgrade->add_option("--binary", binary, "The new binary (absolute path); default: the same path");
  upgrade->add_option("--timeout", timeout_s, "Seconds to wait for the new worker")
      ->check(CLI::PositiveNumber);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  if (sync->parsed()) {
    if (replicated) return SyncReplicated(mountpoint, progress);
    if (int synced = Sync(mountpoint, progress); synced != 0 || !remote) return synced;
    return SyncRemote(mountpoint, progress);
  }
  if (upgrade->parsed()) return Upgrade(mountpoint, binary, timeout_s);
  if (watch) return Watch(mountpoint, interval_s);
  return PrintStatus(mountpoint, json);
}

}  // namespace ckptfs
