#include "fs/client.h"

#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>

#include <CLI/CLI.hpp>

namespace ckptfs {
namespace {

// Reads a whole control file; false with errno set when it cannot be read.
bool ReadControl(const std::string& path, std::string* out) {
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

int Sync(const std::string& mountpoint, bool progress) {
  std::atomic<bool> done{false};
  std::thread reporter;
  if (progress) {
    reporter = std::thread([&] {
      while (!done) {
        std::string text;
        if (ReadControl(mountpoint + "/.ckptfs/stats", &text)) {
          auto j = nlohmann::json::parse(text, nullptr, false);
          if (!j.is_discarded()) {
            std::fprintf(stderr, "\r%s left in %llu pending entries   ",
                         HumanBytes(j.value("dirty_bytes", 0.0)).c_str(),
                         static_cast<unsigned long long>(j.value("pending_entries", 0ull)));
          }
        }
        for (int i = 0; i < 5 && !done; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(100));
      }
      std::fprintf(stderr, "\n");
    });
  }
  std::string answer;
  bool ok = ReadControl(mountpoint + "/.ckptfs/sync", &answer);
  int err = errno;
  done = true;
  if (reporter.joinable()) reporter.join();
  if (!ok) {
    std::fprintf(stderr, "ckptfs sync: %s is not a ckptfs mount or cannot be read: %s\n",
                 mountpoint.c_str(), std::strerror(err));
    return 1;
  }
  if (answer.rfind("ok", 0) == 0) return 0;
  std::fprintf(stderr, "ckptfs sync: %s", answer.c_str());
  return 1;
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

int PrintStatus(const std::string& mountpoint, bool json) {
  std::string text;
  if (!ReadControl(mountpoint + "/.ckptfs/stats", &text)) {
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
  std::printf("versions skipped %llu\n", static_cast<unsigned long long>(j.value("versions_skipped", 0ull)));
  std::printf("flush errors     %llu%s%s\n", static_cast<unsigned long long>(j.value("flush_errors", 0ull)),
              j.value("last_error", "").empty() ? "" : ", now failing: ",
              j.value("last_error", "").c_str());
  const nlohmann::json& arrays = j.contains("zarr_fine_grid") ? j["zarr_fine_grid"] : nlohmann::json::array();
  std::printf("zarr fine grid   %zu arrays\n", arrays.size());
  for (const nlohmann::json& a : arrays) {
    std::printf("  %s  %s  chunks %s shown as %s, %llu real chunk files\n",
                a.value("path", "").c_str(), a.value("dtype", "").c_str(),
                a.value("chunks", nlohmann::json::array()).dump().c_str(),
                a.value("virtual_chunks", nlohmann::json::array()).dump().c_str(),
                static_cast<unsigned long long>(a.value("real_chunks", 0ull)));
  }
  if (j.contains("shared") && j["shared"].is_object()) PrintShared(j["shared"]);
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
  std::string text;
  if (!ReadControl(mountpoint + "/.ckptfs/stats", &text)) return nullptr;
  nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.contains("worker") || !j["worker"].is_object()) return nullptr;
  return j["worker"];
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

int RunClient(int argc, char** argv) {
  CLI::App app{"ckptfs client commands"};
  app.require_subcommand(1);
  std::string mountpoint;
  bool progress = false, json = false;
  CLI::App* sync = app.add_subcommand("sync", "Wait until everything closed so far is durable");
  sync->add_option("MOUNTPOINT", mountpoint)->required();
  sync->add_flag("--progress", progress, "Show the bytes left while waiting");
  CLI::App* status = app.add_subcommand("status", "Show the figures of a mount");
  status->add_option("MOUNTPOINT", mountpoint)->required();
  status->add_flag("--json", json, "Print the raw JSON of .ckptfs/stats");
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
  if (sync->parsed()) return Sync(mountpoint, progress);
  if (upgrade->parsed()) return Upgrade(mountpoint, binary, timeout_s);
  return PrintStatus(mountpoint, json);
}

}  // namespace ckptfs
