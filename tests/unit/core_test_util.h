// Helpers shared by the unit tests of core: temp directories, byte patterns, reading the backing
// directory, and small drivers for Filesystem that do what the FUSE adapter would do.
#pragma once

#include <dirent.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/base/config.h"
#include "core/filesystem/filesystem.h"
#include "core/recovery/cache_memory_layout.h"
#include "iouring/env.h"
#include "iouring/fault_injecting_env.h"

namespace ckptfs::testing_util {

// A fresh directory under $TMPDIR (or /tmp), removed with everything in it on destruction.
class TempDir {
 public:
  TempDir() {
    const char* base = getenv("TMPDIR");
    std::string templ = std::string(base && *base ? base : "/tmp") + "/ckptfs-unit-XXXXXX";
    std::vector<char> buf(templ.begin(), templ.end());
    buf.push_back('\0');
    if (mkdtemp(buf.data()) == nullptr) {
      ADD_FAILURE() << "mkdtemp: " << std::strerror(errno);
    }
    path_ = buf.data();
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  std::string operator/(const std::string& rel) const { return path_ + "/" + rel; }

 private:
  std::string path_;
};

// `size` bytes of a deterministic stream chosen by `seed`.
inline std::string Pattern(uint64_t seed, size_t size) {
  std::string bytes(size, '\0');
  uint64_t x = (seed + 1) * 0x9E3779B97F4A7C15ull;
  for (size_t i = 0; i < size; ++i) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    bytes[i] = static_cast<char>(x >> 24);
  }
  return bytes;
}

// Equal byte strings; on failure, says where they first differ instead of printing them.
inline ::testing::AssertionResult SameBytes(const std::string& actual, const std::string& expected) {
  if (actual == expected) return ::testing::AssertionSuccess();
  size_t i = 0;
  while (i < actual.size() && i < expected.size() && actual[i] == expected[i]) ++i;
  auto at = [&](const std::string& s) {
    return i < s.size() ? std::to_string(static_cast<unsigned char>(s[i])) : std::string("EOF");
  };
  return ::testing::AssertionFailure()
         << "sizes " << actual.size() << " (actual) vs " << expected.size()
         << " (expected); first difference at offset " << i << ": " << at(actual) << " vs "
         << at(expected);
}

inline void WriteHostFile(const std::string& path, const std::string& bytes) {
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  int fd = open(path.c_str(), O_CREAT | O_WRONLY | O_TRUNC | O_CLOEXEC, 0644);
  ASSERT_GE(fd, 0) << path << ": " << std::strerror(errno);
  size_t done = 0;
  while (done < bytes.size()) {
    ssize_t n = write(fd, bytes.data() + done, bytes.size() - done);
    ASSERT_GT(n, 0) << std::strerror(errno);
    done += static_cast<size_t>(n);
  }
  close(fd);
}

// The content of a host file, or nullopt if it does not exist.
inline std::optional<std::string> ReadHostFile(const std::string& path) {
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  std::string out;
  char buf[1 << 16];
  while (true) {
    ssize_t n = read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  close(fd);
  return out;
}

inline bool HostExists(const std::string& path) {
  struct stat st {};
  return lstat(path.c_str(), &st) == 0;
}

// The tree under `root`: relative path -> file bytes, or "<dir>" for directories, "<link:T>" for
// symlinks, "<fifo>", "<socket>", "<chr:MAJOR:MINOR>", "<blk:MAJOR:MINOR>" for special files
// (never opened). The reserved .ckptfs at the top is left out.
inline std::map<std::string, std::string> HostTree(const std::string& root) {
  std::map<std::string, std::string> out;
  std::error_code ec;
  for (auto it = std::filesystem::recursive_directory_iterator(root, ec);
       it != std::filesystem::recursive_directory_iterator(); it.increment(ec)) {
    std::string rel = it->path().lexically_relative(root).string();
    if (rel == kReservedName) {
      it.disable_recursion_pending();
      continue;
    }
    if (it->is_symlink()) {
      out[rel] = "<link:" + std::filesystem::read_symlink(it->path()).string() + ">";
    } else if (it->is_directory()) {
      out[rel] = "<dir>";
    } else if (it->is_fifo()) {
      out[rel] = "<fifo>";
    } else if (it->is_socket()) {
      out[rel] = "<socket>";
    } else if (it->is_character_file() || it->is_block_file()) {
      struct stat st {};
      lstat(it->path().c_str(), &st);
      out[rel] = std::string(it->is_character_file() ? "<chr:" : "<blk:") +
                 std::to_string(major(st.st_rdev)) + ":" + std::to_string(minor(st.st_rdev)) + ">";
    } else {
      out[rel] = ReadHostFile(it->path().string()).value_or("<unreadable>");
    }
  }
  return out;
}

// Compares two trees (path -> content); reports only the paths that differ.
inline ::testing::AssertionResult SameTree(const std::map<std::string, std::string>& actual,
                                           const std::map<std::string, std::string>& expected) {
  std::string diffs;
  for (const auto& [p, c] : expected) {
    auto it = actual.find(p);
    if (it == actual.end()) {
      diffs += "\n  missing: " + p;
    } else if (it->second != c) {
      diffs += "\n  differs: " + p + " (" + std::string(SameBytes(it->second, c).message()) + ")";
    }
  }
  for (const auto& [p, c] : actual) {
    if (!expected.count(p)) diffs += "\n  unexpected: " + p + " (" + std::to_string(c.size()) + " bytes)";
  }
  if (diffs.empty()) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "trees differ:" << diffs;
}

// Names in a host directory (empty if it does not exist).
inline std::vector<std::string> HostList(const std::string& dir) {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    out.push_back(e.path().filename().string());
  }
  return out;
}

inline Caller Me() { return Caller{static_cast<uint32_t>(geteuid()), static_cast<uint32_t>(getegid()), 022}; }

// Untrusted input: every proper prefix of `encoded` is refused by `decode` with EINVAL, and every
// byte flip of it is decoded or refused with EINVAL (never anything worse).
template <typename Decode>
void ExpectPrefixesRefusedAndFlipsHandled(const std::string& encoded, Decode decode) {
  for (size_t n = 0; n < encoded.size(); ++n) {
    EXPECT_EQ(decode(encoded.substr(0, n)).status().err(), EINVAL) << "prefix of " << n;
  }
  for (size_t i = 0; i < encoded.size(); ++i) {
    std::string flipped = encoded;
    flipped[i] = static_cast<char>(flipped[i] ^ 0x5a);
    auto r = decode(flipped);
    if (!r.ok()) {
      EXPECT_EQ(r.status().err(), EINVAL) << "flip at " << i;
    }
  }
}

// A shared memory file for a cache of `bytes` (MakeArenaMemory), closed with this.
class ArenaMemory {
 public:
  explicit ArenaMemory(uint64_t bytes = 64ull << 20) {
    Result<int> fd = MakeArenaMemory(bytes);
    if (fd.ok()) {
      fd_ = *fd;
    } else {
      ADD_FAILURE() << "MakeArenaMemory: " << fd.status().ToString();
    }
  }
  ~ArenaMemory() {
    if (fd_ >= 0) close(fd_);
  }
  ArenaMemory(const ArenaMemory&) = delete;
  ArenaMemory& operator=(const ArenaMemory&) = delete;
  int fd() const { return fd_; }

 private:
  int fd_ = -1;
};

// Runs `work` in a child process killed with SIGKILL once it returned (a worker's crash: what
// `work` leaves is never destroyed); returns what it returned, or 0 when it failed (`work` says
// why on stderr).
inline uint64_t RunAndKill(const std::function<uint64_t()>& work) {
  int out[2];
  if (pipe(out) != 0) return 0;
  const pid_t child = fork();
  if (child == 0) {
    close(out[0]);
    const uint64_t result = work();
    if (write(out[1], &result, sizeof result) != sizeof result) _exit(1);
    pause();
    _exit(0);
  }
  close(out[1]);
  uint64_t result = 0;
  if (read(out[0], &result, sizeof result) != sizeof result) result = 0;
  close(out[0]);
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
  return result;
}
// The Env the unit tests of core run on: io_uring (MakeBestEnv), or POSIX where io_uring is
// unusable. With CI=true in the environment the fallback fails the calling test (CI claims the
// io_uring backend); it still returns the POSIX Env, so the test runs on.
inline std::unique_ptr<Env> MakeTestEnv(unsigned queue_depth = 16) {
  Status fallback;
  std::unique_ptr<Env> env = MakeBestEnv(queue_depth, &fallback);
  const char* ci = getenv("CI");
  if (!fallback.ok() && ci != nullptr && std::string(ci) == "true") {
    ADD_FAILURE() << "CI=true requires the io_uring backend: " << fallback.ToString();
  }
  return env;
}

struct FsOptions {
  uint64_t cache_size = 64ull << 20;
  std::chrono::milliseconds flush_delay{0};
  Clock* clock = nullptr;  // The policy's clock; the steady clock when null.
  std::chrono::milliseconds unmount_retry{10000};
  FsyncMode fsync_mode = FsyncMode::kWait;
  bool fault = false;  // Wrap the Env in a FaultInjectingEnv.
  VerifyMode verify = VerifyMode::kOff;
  // Shared mode (-o shared) as node `node`, when not empty.
  std::string node{};
  std::chrono::milliseconds member_timeout{1000};
  std::chrono::milliseconds poll_interval{10};
  // A later worker of the mount (Config::worker), restoring `handoff` (when set) before Start.
  uint32_t worker = 0;
  const HandoffImage* handoff = nullptr;
  int arena_fd = -1;  // The cache's shared memory (MakeArenaMemory), or -1: private.
  bool recover = false;  // Filesystem::RecoverCrashedWorker before Start (a worker after a crash).
  // The remote tier (-o remote, remote_endpoint), when not empty.
  std::string remote{};
  std::string remote_endpoint{};
  // Replication (-o replicas, replication_secret, replication_address), with `node`.
  int replicas = 0;
  std::string replication_secret{};
  std::string replication_address{};
};

// A started Filesystem over `backing`. `*fault` receives the fault-injecting Env if asked.
inline std::unique_ptr<Filesystem> StartFs(const std::string& backing, const FsOptions& o,
                                           FaultInjectingEnv** fault = nullptr) {
  Config config;
  config.backing_dir = backing;
  config.cache_size = o.cache_size;
  config.flush_delay = o.flush_delay;
  config.unmount_retry = o.unmount_retry;
  config.fsync_mode = o.fsync_mode;
  config.verify = o.verify;
  config.queue_depth = 16;
  config.shared = !o.node.empty();
  config.node = o.node;
  config.member_timeout = o.member_timeout;
  config.poll_interval = o.poll_interval;
  config.worker = o.worker;
  config.arena_fd = o.arena_fd;
  config.remote = o.remote;
  config.remote_endpoint = o.remote_endpoint;
  config.replicas = o.replicas;
  config.replication_secret = o.replication_secret;
  config.replication_address = o.replication_address;
  std::unique_ptr<Env> env = MakeTestEnv(config.queue_depth);
  if (o.fault) {
    auto f = std::make_unique<FaultInjectingEnv>(std::move(env));
    if (fault) *fault = f.get();
    env = std::move(f);
  }
  auto fs = Filesystem::Make(config, std::move(env), o.clock ? *o.clock : Clock::Steady());
  if (!fs.ok()) {
    ADD_FAILURE() << "Filesystem::Make: " << fs.status().ToString();
    return nullptr;
  }
  std::unique_ptr<Filesystem> out = std::move(*fs);
  if (o.handoff) {
    Status restored = out->Restore(*o.handoff);
    EXPECT_TRUE(restored.ok()) << restored.ToString();
  }
  if (o.recover) {
    Status recovered = out->RecoverCrashedWorker();
    EXPECT_TRUE(recovered.ok()) << recovered.ToString();
  }
  out->Start();
  return out;
}

// Splits "a/b/c" into its parts.
inline std::vector<std::string> SplitPath(const std::string& path) {
  std::vector<std::string> parts;
  size_t pos = 0;
  while (pos <= path.size()) {
    size_t slash = path.find('/', pos);
    if (slash == std::string::npos) slash = path.size();
    if (slash > pos) parts.push_back(path.substr(pos, slash - pos));
    pos = slash + 1;
  }
  return parts;
}

// Inode of the directory holding `path`, and the last name of `path`.
inline Result<std::pair<uint64_t, std::string>> ParentOf(Filesystem& fs, const std::string& path) {
  std::vector<std::string> parts = SplitPath(path);
  if (parts.empty()) return Status::Error(EINVAL, "empty path");
  uint64_t ino = kRootIno;
  for (size_t i = 0; i + 1 < parts.size(); ++i) {
    Result<Attr> a = fs.Lookup(ino, parts[i]);
    if (!a.ok()) return a.status();
    ino = a->ino;
  }
  return std::make_pair(ino, parts.back());
}

inline Result<Attr> Resolve(Filesystem& fs, const std::string& path) {
  auto p = ParentOf(fs, path);
  if (!p.ok()) return p.status();
  return fs.Lookup(p->first, p->second);
}

// The bytes described by a ReadData.
inline std::string Materialize(const ReadData& data) {
  std::string out = data.owned;
  for (const ReadSegment& s : data.segments) {
    switch (s.kind) {
      case ReadSegment::Kind::kMemory: out.append(s.data, s.length); break;
      case ReadSegment::Kind::kZeros: out.append(s.length, '\0'); break;
      case ReadSegment::Kind::kBacking: {
        std::string buf(s.length, '\0');
        size_t done = 0;
        while (done < s.length) {
          ssize_t n = pread(s.file->fd(), buf.data() + done, s.length - done,
                            static_cast<off_t>(s.file_offset + done));
          if (n < 0 && errno == EINTR) continue;
          if (n <= 0) break;
          done += static_cast<size_t>(n);
        }
        EXPECT_EQ(done, s.length) << "short read of a backing segment";
        out += buf;
        break;
      }
    }
  }
  return out;
}

// Reads `size` bytes (or up to EOF) through an open handle, in FUSE-sized pieces.
inline Result<std::string> ReadHandle(Filesystem& fs, uint64_t handle, uint64_t size) {
  std::string out;
  constexpr size_t kPiece = 128 << 10;
  while (out.size() < size) {
    Result<ReadData> r = fs.Read(handle, out.size(), kPiece);
    if (!r.ok()) return r.status();
    std::string piece = Materialize(*r);
    if (piece.empty()) break;
    out += piece;
  }
  return out;
}

// Writes `bytes` at `offset` through `handle` in pieces of at most 1 MiB (what FUSE sends).
inline Status WriteHandle(Filesystem& fs, uint64_t handle, uint64_t offset, const std::string& bytes) {
  constexpr size_t kPiece = 1 << 20;
  for (size_t done = 0; done < bytes.size();) {
    size_t n = std::min(kPiece, bytes.size() - done);
    Result<size_t> w = fs.Write(handle, offset + done, bytes.data() + done, n);
    if (!w.ok()) return w.status();
    if (*w != n) return Status::Error(EIO, "short write");
    done += n;
  }
  return Status::Ok();
}

inline Result<uint64_t> CreatePath(Filesystem& fs, const std::string& path,
                                   int flags = O_CREAT | O_RDWR | O_TRUNC, uint32_t mode = 0644) {
  auto p = ParentOf(fs, path);
  if (!p.ok()) return p.status();
  Result<OpenFile> f = fs.Create(p->first, p->second, mode, flags, Me());
  if (!f.ok()) return f.status();
  return f->handle;
}

// close(): Flush then Release; returns what Flush returned.
inline Status Close(Filesystem& fs, uint64_t handle) {
  Status st = fs.Flush(handle, 0);
  Status rel = fs.Release(handle);
  return st.ok() ? rel : st;
}

// Creates (or truncates) `path`, writes `bytes`, closes.
inline Status WriteFile(Filesystem& fs, const std::string& path, const std::string& bytes) {
  Result<uint64_t> h = CreatePath(fs, path);
  if (!h.ok()) return h.status();
  Status st = WriteHandle(fs, *h, 0, bytes);
  Status cl = Close(fs, *h);
  return st.ok() ? cl : st;
}

// The content of `path` read through the Filesystem (open, read, release).
inline Result<std::string> ReadFile(Filesystem& fs, const std::string& path) {
  Result<Attr> a = Resolve(fs, path);
  if (!a.ok()) return a.status();
  Result<OpenFile> f = fs.Open(a->ino, O_RDONLY);
  if (!f.ok()) return f.status();
  Result<std::string> bytes = ReadHandle(fs, f->handle, f->attr.size);
  Status rel = fs.Release(f->handle);
  if (!rel.ok()) return rel;
  return bytes;
}

// Entry names of directory `ino` through OpenDir/ReadDir ("." and ".." left out).
inline Result<std::vector<DirEntry>> ListDir(Filesystem& fs, uint64_t ino) {
  Result<uint64_t> dh = fs.OpenDir(ino);
  if (!dh.ok()) return dh.status();
  Result<std::vector<DirEntry>> entries = fs.ReadDir(*dh, 0);
  fs.ReleaseDir(*dh);
  if (!entries.ok()) return entries.status();
  std::vector<DirEntry> out;
  for (DirEntry& e : *entries) {
    if (e.name != "." && e.name != "..") out.push_back(std::move(e));
  }
  return out;
}

// Figures from StatsJson().
inline nlohmann::json StatsOf(Filesystem& fs) { return nlohmann::json::parse(fs.StatsJson()); }
inline uint64_t StatOf(Filesystem& fs, const std::string& key) {
  return StatsOf(fs).at(key).get<uint64_t>();
}

// In a child process killed once done (RunAndKill, as a worker or daemon dies): a Filesystem over
// `backing` with a cache of `cache` bytes in the shared memory `arena_fd` writes `bytes` to a new
// file `path` in 128 KiB pieces (the writer waits for memory, the flusher spills the file) and
// leaves it open. Returns its handle, or 0 when that failed or nothing was spilled (on stderr).
inline uint64_t WriteASpilledFileAndDie(const std::string& backing, uint64_t cache, int arena_fd,
                                        const std::string& path, const std::string& bytes) {
  using namespace std::chrono_literals;
  return RunAndKill([&]() -> uint64_t {
    // Never destroyed: the process is killed.
    Filesystem* dying = StartFs(backing, {.cache_size = cache, .flush_delay = 3600s,
                                          .arena_fd = arena_fd}).release();
    Result<uint64_t> opened = CreatePath(*dying, path);
    if (!opened.ok()) return 0;
    for (size_t at = 0; at < bytes.size(); at += 128 << 10) {
      if (!WriteHandle(*dying, *opened, at, bytes.substr(at, 128 << 10)).ok()) return 0;
    }
    if (StatOf(*dying, "spilled_bytes") == 0) {
      std::fprintf(stderr, "nothing was spilled: %s\n", dying->StatsJson().c_str());
      return 0;
    }
    return *opened;
  });
}

}  // namespace ckptfs::testing_util
