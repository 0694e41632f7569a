// The control directory (.ckptfs/ at the mount root) and the end of a mount's life.
#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

#include <ctime>
#include <nlohmann/json.hpp>

#include "core/filesystem.h"

namespace ckptfs {
namespace {

// Creates every directory of `rel` below `root_fd`; returns the fd of the last one.
Result<int> MakeDirs(Env& env, int root_fd, const std::string& rel) {
  int fd = dup(root_fd);
  if (fd < 0) return Status::FromErrno("dup");
  size_t pos = 0;
  while (pos < rel.size()) {
    size_t slash = rel.find('/', pos);
    std::string part = rel.substr(pos, slash == std::string::npos ? std::string::npos : slash - pos);
    pos = slash == std::string::npos ? rel.size() : slash + 1;
    if (part.empty()) continue;
    (void)env.Mkdir(fd, part, 0700);
    Result<int> next = env.Open(fd, part, O_RDONLY | O_DIRECTORY | O_NOFOLLOW);
    env.Close(fd);
    if (!next.ok()) return next.status();
    fd = *next;
  }
  return fd;
}

// Writes `content` to `fd` and makes it durable (the flusher has stopped: this thread owns the
// Env's syncs).
Status WriteAll(Env& env, int fd, const FileContent& content) {
  std::vector<char> buf(1 << 20);
  for (uint64_t off = 0; off < content.size(); off += buf.size()) {
    Result<size_t> n = content.ReadInto(off, buf.size(), buf.data());
    if (!n.ok()) return n.status();
    if (Status st = env.WriteAt(fd, buf.data(), *n, off); !st.ok()) return st;
  }
  return env.Sync(std::vector<int>{fd}, /*data_only=*/false).front();
}

}  // namespace

Result<uint64_t> Filesystem::ControlLookup(const std::string& name) const {
  if (name == "stats") return kStatsIno;
  if (name == "sync") return kSyncIno;
  return Status::Error(ENOENT, name);
}

Attr Filesystem::ControlAttr(uint64_t ino) const {
  Attr a;
  a.ino = ino;
  a.uid = geteuid();
  a.gid = getegid();
  a.atime = a.mtime = a.ctime = start_time_;
  if (ino == kControlDirIno) {
    a.mode = S_IFDIR | 0755;
    a.nlink = 2;
    a.size = 4096;
  } else {
    // Sizes are unknown until generated; reads are direct, so 0 does not truncate them.
    // Only the mounting user may give commands (default_permissions enforces the mode).
    a.mode = S_IFREG | (ino == kSyncIno ? 0600 : 0444);
    a.nlink = 1;
  }
  return a;
}

Result<size_t> Filesystem::ControlWrite(uint64_t ino, std::string_view command) {
  if (ino != kSyncIno) return Status::Error(EBADF, "the stats file is read-only");
  std::string_view word = command.substr(0, command.find_last_not_of('\n') + 1);
  if (word != "sync") return Status::Error(EINVAL, "the sync file takes the command \"sync\"");
  Status st = Sync();
  if (!st.ok()) return st;
  return command.size();
}

std::string Filesystem::StatsJson() {
  nlohmann::json j;
  uint64_t pending_bytes, pending_entries;
  std::string last_error;
  nlohmann::json zarr_arrays;
  {
    NamespaceLock lock(ns_mu_);
    zarr_arrays = ZarrStatsLocked();
    pending_bytes = journal_.pending_bytes();
    pending_entries = journal_.pending_entries();
    Status flush_error = flusher_->last_error();
    last_error = flush_error.ok() ? "" : flush_error.ToString();
  }
  double busy_s = static_cast<double>(stats_.flush_busy_ns.load()) / 1e9;
  j["backend"] = flusher_->backend_name();
  j["cache_size"] = config_.cache_size;
  j["memory_used"] = arena_.used_blocks() * kBlockSize;
  j["memory_mapped"] = arena_.mapped_blocks() * kBlockSize;
  j["memory_prefaulted"] = arena_.prefaulted_bytes();
  j["prefault_running"] = config_.prefault && !arena_.prefault_done();
  j["writers_waiting"] = arena_.waiting_writers();
  j["dirty_bytes"] = pending_bytes;
  j["pending_entries"] = pending_entries;
  j["bytes_written"] = stats_.bytes_written.load();
  j["bytes_read"] = stats_.bytes_read.load();
  j["bytes_flushed"] = stats_.bytes_flushed.load();
  j["files_flushed"] = stats_.files_flushed.load();
  j["versions_skipped"] = stats_.versions_skipped.load();
  j["flush_batches"] = stats_.flush_batches.load();
  j["flush_errors"] = stats_.flush_errors.load();
  j["flush_throughput"] = busy_s > 0 ? static_cast<double>(stats_.bytes_flushed.load()) / busy_s : 0.0;
  j["evicted_bytes"] = stats_.evicted_blocks.load() * kBlockSize;
  j["spilled_bytes"] = stats_.spilled_blocks.load() * kBlockSize;
  j["last_error"] = last_error;
  j["zarr_fine_grid"] = zarr_arrays;
  return j.dump(2) + "\n";
}

Status Filesystem::Shutdown() {
  {
    NamespaceLock lock(ns_mu_);
    for (auto& [ino, inode] : inodes_) SealLocked(inode);
  }
  Status st = flusher_->Drain(config_.unmount_retry);
  if (st.ok()) return st;
  NamespaceLock lock(ns_mu_);
  std::vector<std::string> files;
  Result<std::string> where = RescueLocked(&files);
  std::string list;
  for (const std::string& f : files) list += (list.empty() ? "" : ", ") + f;
  if (!where.ok()) {
    return Status::Error(st.err(), "could not write " + list + " (" + st.message() +
                                       ") and could not save them: " + where.status().ToString());
  }
  return Status::Error(st.err(), "could not write " + list + " (" + st.message() +
                                     "); their contents were saved to " + *where);
}

Result<std::string> Filesystem::RescueLocked(std::vector<std::string>* files) {
  char stamp[32];
  time_t t = time(nullptr);
  strftime(stamp, sizeof stamp, "%Y%m%d-%H%M%S", localtime(&t));
  std::string name = std::string("rescue-") + stamp + "-" + std::to_string(getpid());
  // The backing directory first; when it cannot hold the files (full, failing), /var/tmp.
  struct Place {
    int base_fd;
    std::string rel;
    std::string shown;
  };
  Result<int> var_tmp = env_->Open(AT_FDCWD, "/var/tmp", O_RDONLY | O_DIRECTORY);
  const Place places[] = {
      {root_fd_, std::string(kReservedName) + "/" + name,
       config_.backing_dir + "/" + kReservedName + "/" + name},
      {var_tmp.ok() ? *var_tmp : -1, "ckptfs-" + name, "/var/tmp/ckptfs-" + name}};
  Status result;
  for (const Place& place : places) {
    files->clear();
    Result<int> dfd =
        place.base_fd < 0 ? var_tmp.status() : MakeDirs(*env_, place.base_fd, place.rel);
    if (!dfd.ok()) {
      result = Status::Error(dfd.status().err(), "create rescue directory " + place.shown);
      continue;
    }
    result = Status::Ok();
    for (const EntryRef& e : journal_.Unflushed()) {
      if (e->kind != JournalEntry::Kind::kPublish) continue;
      std::string path = e->names.empty() ? e->name : PathLocked(e->inode);
      files->push_back(path);
      size_t slash = path.rfind('/');
      Result<int> parent =
          MakeDirs(*env_, *dfd, slash == std::string::npos ? "" : path.substr(0, slash));
      std::string base = slash == std::string::npos ? path : path.substr(slash + 1);
      Result<int> fd =
          parent.ok() ? env_->Open(*parent, base, O_CREAT | O_WRONLY | O_TRUNC | O_NOFOLLOW, 0600)
                      : parent;
      Status st = fd.ok() ? WriteAll(*env_, *fd, e->snapshot)
                          : Status::Error(fd.status().err(), "create " + path);
      if (fd.ok()) env_->Close(*fd);
      if (parent.ok()) env_->Close(*parent);
      if (!st.ok() && result.ok()) result = Status::Error(st.err(), place.shown + ": " + st.ToString());
    }
    if (result.ok()) {
      Status synced = env_->Sync(std::vector<int>{*dfd}, /*data_only=*/false).front();
      if (!synced.ok()) result = Status::Error(synced.err(), "fsync " + place.shown);
    }
    env_->Close(*dfd);
    if (result.ok()) {
      if (var_tmp.ok()) env_->Close(*var_tmp);
      return place.shown;
    }
  }
  if (var_tmp.ok()) env_->Close(*var_tmp);
  return result;
}

}  // namespace ckptfs
