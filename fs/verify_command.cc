#include "fs/verify_command.h"

#include <fcntl.h>
#include <stdlib.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <CLI/CLI.hpp>

#include "core/backing/backing_paths.h"
#include "core/integrity/verifier.h"
#include "core/views/tensor_view/tensor_views.h"
#include "fs/client.h"
#include "fs/status_view.h"
#include "iouring/env.h"

namespace ckptfs {
namespace {

using Verdict = Verification::Verdict;

constexpr size_t kMaxVerifyThreads = 4;
constexpr std::string_view kFsnamePrefix = "ckptfs:";

// A file to verify.
struct Target {
  std::string path;         // As found under a PATH given; its bytes are read here.
  std::string record_path;  // The file whose record applies: its backing file in a mount.
  bool in_mount = false;
  uint64_t size = 0;        // At listing: the progress bar's total.
};

struct Outcome {
  Verification v;
  // In a mount, with no backing file yet or another version than its backing file's.
  bool not_durable = false;
};

// Where the files under the PATHs given are, for a walk through them.
struct Place {
  std::string mount_point;  // Empty outside a ckptfs mount.
  std::string backing_dir;  // The mount's.
};

// What the PATHs hold: the files to verify and what could not be listed, each with why.
struct Listing {
  std::vector<Target> targets;
  std::set<std::string> listed;  // The targets' paths: a file under two PATHs is verified once.
  std::vector<std::pair<std::string, std::string>> unlisted;
  std::map<std::string, std::string> mounts;  // Mount point: backing directory.
};

std::string RealPath(const std::string& path) {
  char buf[PATH_MAX];
  return realpath(path.c_str(), buf) ? std::string(buf) : std::string();
}

// The ckptfs mount that holds `path` (a real path), or none.
std::optional<MountEntry> CkptfsMountOf(const std::string& path) {
  struct stat st {};
  if (stat(path.c_str(), &st) != 0) return std::nullopt;
  const std::string device =
      std::to_string(major(st.st_dev)) + ":" + std::to_string(minor(st.st_dev));
  std::optional<MountEntry> found;
  for (MountEntry& m : ReadMountInfo()) {
    if (m.device == device) found = std::move(m);
  }
  if (!found || found->fs_type != "fuse.ckptfs") return std::nullopt;
  return found;
}

// Whether the walk leaves out the directory `path` (named `name`): a mount's control directory
// and tensor views (served, not stored), and the backing store's own directory.
bool LeftOut(const Place& place, const std::string& path, const std::string& name) {
  if (!place.mount_point.empty()) {
    return path == place.mount_point + "/" + kReservedName || name == kTensorViewName;
  }
  struct stat st {};
  return name == kReservedName &&
         lstat((path + "/" + kStagingDirName).c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

void AddFile(const Place& place, const std::string& path, const struct stat& st, Listing* out) {
  if (!out->listed.insert(path).second) return;
  Target t{path, path, !place.mount_point.empty(), static_cast<uint64_t>(st.st_size)};
  if (t.in_mount) t.record_path = place.backing_dir + path.substr(place.mount_point.size());
  out->targets.push_back(std::move(t));
}

// Adds the regular files under the directory `dir`, in name order, leaving out LeftOut ones and
// not following symbolic links.
void Walk(const Place& place, const std::string& dir, Listing* out) {
  std::vector<std::string> names;
  std::error_code ec;
  for (std::filesystem::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    names.push_back(it->path().filename());
  }
  if (ec) {
    out->unlisted.emplace_back(dir, ec.message());
    return;
  }
  std::sort(names.begin(), names.end());
  for (const std::string& name : names) {
    const std::string path = dir == "/" ? "/" + name : dir + "/" + name;
    struct stat st {};
    if (lstat(path.c_str(), &st) != 0) {
      out->unlisted.emplace_back(path, std::strerror(errno));
    } else if (S_ISDIR(st.st_mode)) {
      if (!LeftOut(place, path, name)) Walk(place, path, out);
    } else if (S_ISREG(st.st_mode) && name != kChecksumManifestName) {
      AddFile(place, path, st, out);  // A manifest is checksum records, checked as they are used.
    }
  }
}

Listing List(const std::vector<std::string>& paths) {
  Listing out;
  for (const std::string& given : paths) {
    const std::string path = RealPath(given);
    struct stat st {};
    if (path.empty() || stat(path.c_str(), &st) != 0) {
      out.unlisted.emplace_back(given, std::strerror(errno));
      continue;
    }
    Place place;
    if (std::optional<MountEntry> mount = CkptfsMountOf(path)) {
      std::optional<std::string> backing = BackingDirOf(*mount);
      if (!backing) {
        out.unlisted.emplace_back(given, "the backing directory of the ckptfs mount " +
                                             mount->mount_point + " is unknown (its fsname is " +
                                             mount->source + "): verify the backing directory");
        continue;
      }
      place = {mount->mount_point, *backing};
      out.mounts.emplace(mount->mount_point, *backing);
    }
    if (S_ISDIR(st.st_mode)) {
      Walk(place, path, &out);
    } else if (S_ISREG(st.st_mode)) {
      AddFile(place, path, st, &out);
    } else {
      out.unlisted.emplace_back(given, "not a regular file or a directory");
    }
  }
  return out;
}

// Whether the file a mount serves on `data` is the version its backing file `record` holds:
// the same size and modification time (the flusher gives a published file its version's).
bool SameVersion(Env& env, int data, int record) {
  struct stat served {}, stored {};
  return env.Stat(data, "", &served).ok() && env.Stat(record, "", &stored).ok() &&
         served.st_size == stored.st_size && served.st_mtim.tv_sec == stored.st_mtim.tv_sec &&
         served.st_mtim.tv_nsec == stored.st_mtim.tv_nsec;
}

// The directories of the arrays `mount_point` shows with a fine grid (its stats'
// zarr_fine_grid); none when its stats cannot be read.
std::vector<std::string> FineGridArrays(const std::string& mount_point) {
  std::string text;
  if (!ReadControlFile(mount_point + "/.ckptfs/stats", &text)) return {};
  const nlohmann::json stats = nlohmann::json::parse(text, nullptr, false);
  std::vector<std::string> dirs;
  if (stats.is_discarded() || !stats.contains("zarr_fine_grid")) return dirs;
  for (const nlohmann::json& array : stats["zarr_fine_grid"]) {
    if (array.contains("path") && array["path"].is_string()) {
      dirs.push_back(mount_point + "/" + array["path"].get<std::string>());
    }
  }
  return dirs;
}

// Replaces the files a mount serves for an array it shows with a fine grid (a .zarray and
// chunks of its own making) by the array's stored files, verified on the backing store.
void VerifyFineGridArraysAsStored(Listing* listing) {
  for (const auto& [mount_point, backing_dir] : listing->mounts) {
    for (const std::string& dir : FineGridArrays(mount_point)) {
      auto in_array = [&](const Target& t) { return t.path.starts_with(dir + "/"); };
      if (std::none_of(listing->targets.begin(), listing->targets.end(), in_array)) continue;
      std::erase_if(listing->targets, in_array);
      Walk(Place{}, backing_dir + dir.substr(mount_point.size()), listing);
    }
  }
}

Outcome VerifyOne(Env& env, const Target& t, std::atomic<uint64_t>* bytes_read) {
  Outcome o;
  auto fail = [&](Verdict verdict, std::string why) {
    o.v.verdict = verdict;
    o.v.reason = std::move(why);
    return o;
  };
  Result<int> data = env.Open(AT_FDCWD, t.path, O_RDONLY | O_NOFOLLOW);
  if (!data.ok()) return fail(Verdict::kError, data.status().ToString());
  Result<int> record = *data;
  if (t.in_mount) record = env.Open(AT_FDCWD, t.record_path, O_RDONLY | O_NOFOLLOW);
  if (!record.ok()) {
    env.Close(*data);
    if (record.status().err() != ENOENT) return fail(Verdict::kError, record.status().ToString());
    o.not_durable = true;
    return fail(Verdict::kNoChecksum, "not durable yet: not on the backing store");
  }
  const auto count = [&](uint64_t n) { bytes_read->fetch_add(n, std::memory_order_relaxed); };
  if (*record == *data || SameVersion(env, *data, *record)) {
    o.v = VerifyFile(env, *data, *record, count);
  } else {
    // The mount holds another version (still open for writing), or the backing file was changed
    // under it: the backing file is checked against its own record.
    o.v = VerifyFile(env, *record, *record, count);
    if (o.v.verdict == Verdict::kOk) {
      o.not_durable = true;
      o.v.verdict = Verdict::kNoChecksum;
      o.v.reason = "not durable yet: the mount holds a version the backing store does not";
    }
  }
  if (*record != *data) env.Close(*record);
  env.Close(*data);
  return o;
}

// The outcome of each target, verified by up to kMaxVerifyThreads threads; on a terminal,
// a progress bar on stderr meanwhile.
std::vector<Outcome> VerifyAll(Env& env, const std::vector<Target>& targets, bool progress,
                               std::atomic<uint64_t>* bytes_read) {
  std::vector<Outcome> outcomes(targets.size());
  std::atomic<size_t> next{0};
  std::mutex mu;
  std::condition_variable all_done;
  size_t done = 0;  // Guarded by mu.
  auto work = [&] {
    for (size_t i; (i = next.fetch_add(1)) < targets.size();) {
      outcomes[i] = VerifyOne(env, targets[i], bytes_read);
      std::lock_guard<std::mutex> lock(mu);
      if (++done == targets.size()) all_done.notify_one();
    }
  };
  std::vector<std::thread> threads;
  for (size_t n = std::min(kMaxVerifyThreads, targets.size()); n > 0; --n) {
    threads.emplace_back(work);
  }
  if (progress) {
    VerifyProgress p;
    for (const Target& t : targets) p.bytes_total += t.size;
    p.files_total = targets.size();
    const auto start = std::chrono::steady_clock::now();
    for (bool finished = false; !finished;) {
      {
        std::unique_lock<std::mutex> lock(mu);
        finished = all_done.wait_for(lock, std::chrono::milliseconds(200),
                                     [&] { return done == targets.size(); });
        p.files_done = done;
      }
      p.bytes_read = bytes_read->load(std::memory_order_relaxed);
      p.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      struct winsize ws = {};
      const int columns = ioctl(STDERR_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 1
                              ? ws.ws_col - 1
                              : 79;
      std::fprintf(stderr, "\r%s\x1b[K%s", RenderVerifyProgress(p, columns).c_str(),
                   finished ? "\n" : "");
    }
  }
  for (std::thread& t : threads) t.join();
  return outcomes;
}

// The line naming a file that is not ok.
std::string ProblemLine(const std::string& path, const Outcome& o) {
  const Verification& v = o.v;
  std::string line = Printable(path) + ": ";
  switch (v.verdict) {
    case Verdict::kOk:
      return "";
    case Verdict::kMismatch:
      line += "mismatch, first differing MiB: " +
              MiBRange(v.first_differing_begin, v.first_differing_end) + " (bytes " +
              std::to_string(v.first_differing_begin) + "-" +
              std::to_string(v.first_differing_end) + ")";
      if (v.size_differs()) {
        line += ", size " + std::to_string(v.size) + " but recorded " +
                std::to_string(v.recorded_size);
      }
      return line;
    case Verdict::kNoChecksum:
      return line + Printable(v.reason);
    case Verdict::kError:
      return line + "unreadable: " + Printable(v.reason);
  }
  return line;
}

nlohmann::json ReportEntry(const std::string& path, const Outcome& o) {
  const Verification& v = o.v;
  nlohmann::json j = {{"path", path}, {"size", v.size}, {"status", VerdictName(v.verdict)}};
  if (v.verdict == Verdict::kOk || v.verdict == Verdict::kMismatch) {
    j["recorded_size"] = v.recorded_size;
  }
  if (v.verdict == Verdict::kMismatch) {
    j["size_differs"] = v.size_differs();
    j["first_differing_bytes"] = {v.first_differing_begin, v.first_differing_end};
    j["first_differing_mib"] = MiBRange(v.first_differing_begin, v.first_differing_end);
  }
  if (o.not_durable) j["not_durable"] = true;
  if (!v.reason.empty()) j["reason"] = v.reason;
  return j;
}

// Writes `text` to `path` ("-": stdout); false with errno set when it cannot.
bool WriteReport(const std::string& path, const std::string& text) {
  if (path == "-") return std::fwrite(text.data(), 1, text.size(), stdout) == text.size();
  std::FILE* f = std::fopen(path.c_str(), "we");
  if (!f) return false;
  const bool written = std::fwrite(text.data(), 1, text.size(), f) == text.size();
  const int err = errno;
  if (std::fclose(f) != 0 || !written) {
    if (!written) errno = err;
    return false;
  }
  return true;
}

}  // namespace

std::optional<std::string> BackingDirOf(const MountEntry& mount) {
  if (mount.fs_type != "fuse.ckptfs" || !mount.source.starts_with(kFsnamePrefix) ||
      mount.source.size() == kFsnamePrefix.size()) {
    return std::nullopt;
  }
  return mount.source.substr(kFsnamePrefix.size());
}

int VerifyExitStatus(const VerifyCounts& counts) {
  if (counts.mismatch > 0 || counts.error > 0) return 1;
  return counts.no_checksum > 0 ? 2 : 0;
}

std::string MiBRange(uint64_t begin, uint64_t end) {
  constexpr uint64_t kMiB = uint64_t{1} << 20;
  return std::to_string(begin / kMiB) + "-" + std::to_string((end + kMiB - 1) / kMiB);
}

int RunVerify(int argc, char** argv) {
  CLI::App app{"Re-read files (directories recursively), on a backing directory or through a\n"
               "ckptfs mount, and compare them with the checksum records ckptfs kept with them.\n"
               "Exit status: 0 all ok, 1 a file differs or cannot be read, 2 otherwise a file\n"
               "has no usable checksum record",
               "ckptfs verify"};
  std::vector<std::string> paths;
  std::string json_path;
  app.add_option("PATH", paths, "Files or directories")->required();
  app.add_option("--json", json_path, "Write a report of every file to FILE (- for stdout)")
      ->option_text("FILE");
  try {
    app.parse(argc - 1, argv + 1);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  // A file closed in a mount reaches its backing file, with its record, at the mount's sync.
  Listing listing = List(paths);
  for (const auto& mount : listing.mounts) {
    std::string answer;
    if (!ReadControlFile(mount.first + "/.ckptfs/sync", &answer)) {
      answer = std::strerror(errno);
    }
    if (answer.rfind("ok", 0) != 0) {
      std::fprintf(stderr, "ckptfs verify: the sync of %s failed (what is not durable is "
                   "reported so): %s\n", Printable(mount.first).c_str(),
                   Printable(answer).c_str());
    }
  }
  VerifyFineGridArraysAsStored(&listing);
  std::unique_ptr<Env> env = MakePosixEnv();
  std::atomic<uint64_t> bytes_read{0};
  const auto start = std::chrono::steady_clock::now();
  const std::vector<Outcome> outcomes =
      VerifyAll(*env, listing.targets, isatty(STDERR_FILENO), &bytes_read);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

  std::FILE* lines = json_path == "-" ? stderr : stdout;
  VerifyCounts counts;
  nlohmann::json files = nlohmann::json::array();
  for (const auto& [path, why] : listing.unlisted) {
    ++counts.error;
    std::fprintf(lines, "%s: unreadable: %s\n", Printable(path).c_str(), Printable(why).c_str());
    files.push_back({{"path", path}, {"size", 0}, {"status", "error"}, {"reason", why}});
  }
  for (size_t i = 0; i < outcomes.size(); ++i) {
    const Outcome& o = outcomes[i];
    switch (o.v.verdict) {
      case Verdict::kOk: ++counts.ok; break;
      case Verdict::kMismatch: ++counts.mismatch; break;
      case Verdict::kNoChecksum: ++counts.no_checksum; break;
      case Verdict::kError: ++counts.error; break;
    }
    if (o.not_durable) ++counts.not_durable;
    if (o.v.verdict != Verdict::kOk) {
      std::fprintf(lines, "%s\n", ProblemLine(listing.targets[i].path, o).c_str());
    }
    files.push_back(ReportEntry(listing.targets[i].path, o));
  }
  std::fflush(lines);
  const int status = VerifyExitStatus(counts);
  const uint64_t bytes = bytes_read.load();
  std::fprintf(stderr,
               "ckptfs verify: %zu files, %s in %.1f s (%s/s): %zu ok, %zu mismatching, "
               "%zu unreadable, %zu without a checksum record (%zu of them not durable yet)\n",
               outcomes.size() + listing.unlisted.size(), HumanBytes(double(bytes)).c_str(),
               seconds, HumanBytes(seconds > 0 ? double(bytes) / seconds : 0).c_str(), counts.ok,
               counts.mismatch, counts.error, counts.no_checksum, counts.not_durable);
  if (json_path.empty()) return status;
  const nlohmann::json report = {
      {"files", std::move(files)},
      {"counts", {{"ok", counts.ok}, {"mismatch", counts.mismatch}, {"error", counts.error},
                  {"no_checksum", counts.no_checksum}, {"not_durable", counts.not_durable}}},
      {"bytes_read", bytes},
      {"seconds", seconds},
      {"exit_status", status}};
  if (!WriteReport(json_path, report.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) +
                                  "\n")) {
    std::fprintf(stderr, "ckptfs verify: cannot write the report %s: %s\n",
                 Printable(json_path).c_str(), std::strerror(errno));
    return 1;
  }
  return status;
}

}  // namespace ckptfs
