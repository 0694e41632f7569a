#include "fs/status_view.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>

namespace ckptfs {
namespace {

// A rate in bytes per second; "-- B/s" when unknown (negative).
std::string HumanRate(double bytes_per_s) {
  return bytes_per_s < 0 ? "-- B/s" : HumanBytes(bytes_per_s) + "/s";
}

// Seconds as m:ss, or h:mm:ss from an hour on; "--:--" when unknown (negative) or beyond 99 h.
std::string ClockDuration(double seconds) {
  if (seconds < 0 || seconds >= 99 * 3600) return "--:--";
  const long s = std::lround(seconds);
  char buf[32];
  if (s >= 3600) {
    std::snprintf(buf, sizeof buf, "%ld:%02ld:%02ld", s / 3600, s / 60 % 60, s % 60);
  } else {
    std::snprintf(buf, sizeof buf, "%ld:%02ld", s / 60, s % 60);
  }
  return buf;
}

// The first `columns` characters of `text` (one column per UTF-8 character).
std::string FitWidth(const std::string& text, int columns) {
  size_t end = 0;
  for (int used = 0; end < text.size(); ++end) {
    const bool starts_character = (static_cast<unsigned char>(text[end]) & 0xC0) != 0x80;
    if (starts_character && used++ == columns) break;
  }
  return text.substr(0, end);
}

// `cells` cells between brackets, the first `fraction` of them (clamped to [0, 1]) filled.
std::string Bar(double fraction, int cells) {
  const int filled = static_cast<int>(std::clamp(fraction, 0.0, 1.0) * cells);
  return "[" + std::string(filled, '#') + std::string(cells - filled, '-') + "]";
}

// "LABEL    [bar] TEXT": the bar has `cells` cells.
std::string BarLine(const char* label, double fraction, const std::string& text, int cells) {
  char head[16];
  std::snprintf(head, sizeof head, "%-9s", label);
  return head + Bar(fraction, cells) + " " + text;
}

}  // namespace

std::string HumanBytes(double bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (bytes >= 1024 && u < 4) {
    bytes /= 1024;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.1f %s", bytes, units[u]);
  return buf;
}

std::string Printable(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c == 0xC2 && i + 1 < text.size() && static_cast<unsigned char>(text[i + 1]) < 0xA0 &&
        static_cast<unsigned char>(text[i + 1]) >= 0x80) {
      out += '?';  // A C1 control in UTF-8.
      ++i;
    } else {
      out += c < 0x20 || c == 0x7F ? '?' : text[i];
    }
  }
  return out;
}

void FlushTrend::Add(Clock::time_point at, const nlohmann::json& stats) {
  const double flushed = stats.value("bytes_flushed", 0.0);
  dirty_ = stats.value("dirty_bytes", 0.0);
  if (!started_) {
    started_ = true;
    first_ = at;
  } else {
    const double delta = flushed >= last_flushed_ ? flushed - last_flushed_ : flushed;
    const double dt = std::chrono::duration<double>(at - last_).count();
    if (dt > 0) rate_ = delta / dt;
    since_first_ += delta;
    since_backlog_empty_ += delta;
  }
  if (dirty_ == 0) since_backlog_empty_ = 0;
  last_ = at;
  last_flushed_ = flushed;
}

std::string RenderFrame(const nlohmann::json& stats, const FlushTrend& trend,
                        const FrameContext& c) {
  // The bars, one below the other, leave 32 columns for their figures.
  const int cells = std::clamp(c.columns - 9 - 3 - 32, 10, 40);
  std::vector<std::string> lines;
  char buf[256];
  std::snprintf(buf, sizeof buf, "  every %g s, Ctrl-C quits", c.interval_s);
  lines.push_back(c.clock + "  ckptfs " + c.mountpoint + buf);

  const double used = stats.value("memory_used", 0.0), size = stats.value("cache_size", 0.0);
  std::string memory = HumanBytes(used) + " of " + HumanBytes(size);
  if (size > 0) memory += " (" + std::to_string(std::lround(100 * used / size)) + "%)";
  lines.push_back(BarLine("memory", size > 0 ? used / size : 0, memory, cells));
  if (const auto waiting = stats.value("writers_waiting", 0ull); waiting > 0) {
    const std::string spill_error = stats.value("spill_error", "");
    lines.push_back("writers  " + std::to_string(waiting) + " waiting for memory" +
                    (spill_error.empty() ? "" : ", stuck: " + spill_error));
  }

  lines.push_back("dirty    " + HumanBytes(trend.dirty()) + " not yet durable in " +
                  std::to_string(stats.value("pending_entries", 0ull)) + " entries");
  lines.push_back("flush    " + HumanRate(trend.current_rate()) + " now, " +
                  HumanBytes(stats.value("bytes_flushed", 0.0)) + " in " +
                  std::to_string(stats.value("files_flushed", 0ull)) + " files so far");

  // Of the backlog since it last was empty: what was made durable, of that plus what is dirty.
  const double done = trend.flushed_since_backlog_empty(), total = done + trend.dirty();
  lines.push_back(total > 0 ? BarLine("durable", done / total,
                                      HumanBytes(done) + " of " + HumanBytes(total), cells)
                            : BarLine("durable", 1, "nothing pending", cells));

  const auto mismatches = stats.value("checksum_mismatches", 0ull);
  lines.push_back("checks   " + HumanBytes(stats.value("bytes_checksummed", 0.0)) + " summed, " +
                  HumanBytes(stats.value("bytes_read_back", 0.0)) + " read back, " +
                  (mismatches == 0 ? std::string("no mismatch")
                                   : std::to_string(mismatches) + " mismatches (written again)"));

  const auto errors = stats.value("flush_errors", 0ull);
  const std::string last_error = stats.value("last_error", "");
  lines.push_back("errors   " + (errors == 0 && last_error.empty()
                                     ? std::string("none")
                                     : std::to_string(errors) + " flush errors" +
                                           (last_error.empty() ? ", none now"
                                                               : ", now failing: " + last_error)));

  if (stats.contains("worker") && stats["worker"].is_object()) {
    const nlohmann::json& w = stats["worker"];
    lines.push_back("worker   " + std::to_string(w.value("number", 0ull)) + " (pid " +
                    std::to_string(w.value("pid", 0ll)) + "), supervisor pid " +
                    std::to_string(w.value("supervisor_pid", 0ll)));
  }
  if (stats.contains("shared") && stats["shared"].is_object()) {
    const nlohmann::json& shared = stats["shared"];
    const nlohmann::json members = shared.value("members", nlohmann::json::array());
    lines.push_back("shared   as node " + shared.value("node", "") + ", " +
                    std::to_string(members.size()) + " members");
    for (const nlohmann::json& m : members) {
      std::snprintf(buf, sizeof buf, "  %-16s beat %6lld ms ago, %llu entries pending (%s)%s",
                    m.value("node", "").c_str(),
                    static_cast<long long>(m.value("beat_age_ms", 0ll)),
                    static_cast<unsigned long long>(m.value("flush_lag_entries", 0ull)),
                    HumanBytes(m.value("pending_bytes", 0.0)).c_str(),
                    m.value("self", false) ? ", this mount" : "");
      lines.push_back(buf);
    }
  }
  if (stats.contains("replication") && stats["replication"].is_object()) {
    const nlohmann::json& r = stats["replication"];
    std::string partners;
    for (const nlohmann::json& p : r.value("partners", nlohmann::json::array())) {
      partners += (partners.empty() ? "" : ", ") + p.value("node", "") +
                  (p.value("connected", false) ? "" : " (not connected)");
    }
    lines.push_back("replicas " + std::to_string(r.value("not_replicated_entries", 0ull)) +
                    " entries not yet in " + std::to_string(r.value("replicas", 0)) +
                    " partner(s)' memory (" + (partners.empty() ? "none live" : partners) +
                    "); holding " + HumanBytes(r.value("held_bytes", 0.0)) + " for others");
  }

  const size_t rows = static_cast<size_t>(std::max(c.rows, 1));
  if (lines.size() > rows) {
    const size_t hidden = lines.size() - rows + 1;
    lines.resize(rows - 1);
    lines.push_back("+" + std::to_string(hidden) + " more lines");
  }
  std::string frame;
  for (const std::string& line : lines) frame += FitWidth(Printable(line), c.columns) + "\n";
  return frame;
}

std::string RenderPlainLine(const nlohmann::json& stats, const FlushTrend& trend,
                            const std::string& clock) {
  std::string line = clock + "  memory " + HumanBytes(stats.value("memory_used", 0.0)) + " of " +
                     HumanBytes(stats.value("cache_size", 0.0)) + "  dirty " +
                     HumanBytes(trend.dirty()) + " in " +
                     std::to_string(stats.value("pending_entries", 0ull)) + " entries  flush " +
                     HumanRate(trend.current_rate()) + "  errors " +
                     std::to_string(stats.value("flush_errors", 0ull));
  const std::string last_error = stats.value("last_error", "");
  if (!last_error.empty()) line += ", now failing: " + last_error;
  const std::string spill_error = stats.value("spill_error", "");
  if (!spill_error.empty()) line += ", writers stuck: " + spill_error;
  return Printable(line) + "\n";
}

std::string RenderSyncProgress(const FlushTrend& trend, int columns, const std::string& outcome) {
  const double done = trend.flushed_since_first(), total = done + trend.dirty();
  const double rate = trend.average_rate();
  const std::string end =
      outcome.empty() ? "ETA " + ClockDuration(rate > 0 ? (total - done) / rate : -1) : outcome;
  const std::string amounts = HumanBytes(done) + " of " + HumanBytes(total) + " durable";
  const std::string figures = ", " + HumanRate(rate) + ", " + end;
  if (columns == 0) return "sync " + amounts + figures;
  const int cells =
      std::clamp(columns - 8 - static_cast<int>(amounts.size() + figures.size()), 10, 40);
  return FitWidth("sync " + Bar(total > 0 ? done / total : 1, cells) + " " + amounts + figures,
                  columns);
}

std::string RenderVerifyProgress(const VerifyProgress& p, int columns) {
  const double rate = p.seconds > 0 ? static_cast<double>(p.bytes_read) / p.seconds : -1;
  const std::string figures = HumanBytes(static_cast<double>(p.bytes_read)) + " of " +
                              HumanBytes(static_cast<double>(p.bytes_total)) + ", " +
                              std::to_string(p.files_done) + " of " +
                              std::to_string(p.files_total) + " files, " + HumanRate(rate);
  const int cells = std::clamp(columns - 10 - static_cast<int>(figures.size()), 10, 40);
  const double fraction = p.bytes_total > 0 ? static_cast<double>(p.bytes_read) /
                                                  static_cast<double>(p.bytes_total)
                                            : 1;
  return FitWidth("verify " + Bar(fraction, cells) + " " + figures, columns);
}

}  // namespace ckptfs
