#include "core/flusher.h"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <set>

#include "core/policy.h"

namespace ckptfs {
namespace {

// Staging state of one publish entry during a batch.
struct Staged {
  int fd = -1;
  std::string name;
  Status status;
};

// Allocates the ranges about to be written: a full disk shows before any byte is written, and
// the direct writes become overwrites, which the backing filesystem may run in parallel instead
// of serialising them on growing the file. Filesystems without fallocate go without.
Status Preallocate(const std::vector<WriteRequest>& writes) {
  for (const WriteRequest& w : writes) {
    uint64_t len = w.bytes();
    if (len == 0) continue;
    if (fallocate(w.fd, 0, static_cast<off_t>(w.offset), static_cast<off_t>(len)) != 0) {
      if (errno == EOPNOTSUPP) return Status::Ok();
      return Status::FromErrno("allocate staging file");
    }
  }
  return Status::Ok();
}

uint64_t OpenFileLimit() {
  rlimit nofile {};
  if (getrlimit(RLIMIT_NOFILE, &nofile) != 0 || nofile.rlim_cur == RLIM_INFINITY) {
    return UINT64_MAX;
  }
  return nofile.rlim_cur;
}

}  // namespace

Flusher::Flusher(const Config& config, std::unique_ptr<Backend> backend, int staging_fd,
                 std::mutex& ns_mu, Journal& journal, Stats& stats, Hooks hooks)
    : config_(config),
      backend_(std::move(backend)),
      backend_name_(backend_->Name()),
      staging_fd_(staging_fd),
      max_batch_entries_(policy::MaxBatchEntries(OpenFileLimit())),
      ns_mu_(ns_mu),
      journal_(journal),
      stats_(stats),
      hooks_(std::move(hooks)) {}

Flusher::~Flusher() {
  {
    std::lock_guard lock(ns_mu_);
    stop_ = true;
    wake_.notify_all();
  }
  if (thread_.joinable()) thread_.join();
}

void Flusher::Start() { thread_ = std::thread([this] { Run(); }); }

void Flusher::Hurry() {
  std::lock_guard lock(ns_mu_);
  force_seq_ = std::max(force_seq_, journal_.last_seq());
  wake_.notify_all();
}

Status Flusher::WaitDurable(uint64_t seq) {
  std::unique_lock lock(ns_mu_);
  force_seq_ = std::max(force_seq_, seq);
  wake_.notify_all();
  uint64_t epoch = error_epoch_;
  // A failure that is already standing also answers at once once the flusher retried once.
  while (journal_.durable_seq() < seq) {
    if (error_epoch_ != epoch && !last_error_.ok()) return last_error_;
    if (stopped_) return Status::Error(EIO, "flusher stopped");
    progress_.wait(lock);
  }
  return Status::Ok();
}

int Flusher::DirFd(const InodeRef& dir) {
  std::lock_guard lock(ns_mu_);
  return dir && dir->dir_fd ? dir->dir_fd->fd() : -1;
}

void Flusher::Run() {
  std::unique_lock lock(ns_mu_);
  while (true) {
    auto now = Clock::now();
    bool hurry = policy::FlushEverythingNow(hooks_.waiting_writers(), false, draining_);
    uint64_t force = hurry ? journal_.last_seq() : force_seq_;
    std::vector<EntryRef> batch;
    if (now >= retry_at_) {
      batch = journal_.TakeBatch(now, config_.flush_delay, force, max_batch_entries_,
                                 policy::kMaxBatchBytes);
    }
    if (batch.empty() && hooks_.spill && hooks_.waiting_writers() > 0) {
      lock.unlock();
      size_t freed = hooks_.spill(*backend_);
      lock.lock();
      if (freed > 0) continue;
    }
    if (batch.empty()) {
      if (stop_ || (draining_ && journal_.pending_entries() == 0)) {
        stopped_ = true;
        progress_.notify_all();
        break;
      }
      auto deadline = std::max(retry_at_, std::min(journal_.HeadDeadline(config_.flush_delay),
                                                   now + std::chrono::milliseconds(100)));
      wake_.wait_until(lock, deadline);
      continue;
    }
    lock.unlock();
    auto started = Clock::now();
    Status error;
    EntryRef failed;
    size_t done = ApplyBatch(batch, &error, &failed);
    stats_.flush_busy_ns += std::chrono::duration_cast<std::chrono::nanoseconds>(
                                Clock::now() - started).count();
    stats_.flush_batches++;
    lock.lock();
    CompleteBatch(batch, done, error, failed);
  }
}

size_t Flusher::ApplyBatch(const std::vector<EntryRef>& batch, Status* error, EntryRef* failed) {
  std::vector<Staged> staged(batch.size());
  std::vector<WriteRequest> requests;
  std::vector<size_t> request_owner;
  size_t publishes = 0;

  // Phase 1: write every sealed version of the batch to its staging file.
  for (size_t i = 0; i < batch.size(); ++i) {
    const JournalEntry& e = *batch[i];
    if (e.kind != JournalEntry::Kind::kPublish) continue;
    ++publishes;
    Staged& s = staged[i];
    s.name = std::to_string(e.seq);
    const FileContent& c = e.snapshot;
    uint64_t size = c.size();
    // A file rewritten in part keeps its unchanged prefix through copy_file_range, buffered.
    const bool direct = !c.base() && (config_.flush_io == FlushIo::kDirect ||
                                      (config_.flush_io == FlushIo::kAuto &&
                                       size >= policy::kDirectFlushMinBytes));
    int flags = O_CREAT | O_RDWR | O_TRUNC | O_CLOEXEC | (direct ? O_DIRECT : 0);
    s.fd = openat(staging_fd_, s.name.c_str(), flags, 0600);
    if (s.fd < 0) {
      s.status = Status::FromErrno("create staging file");
      continue;
    }
    if (c.base() && c.base_len() > 0) {
      s.status = CopyFilePrefix(c.base()->fd(), s.fd, std::min(c.base_len(), size));
      if (!s.status.ok()) continue;
    }
    std::vector<WriteRequest> writes = BlockWriteRequests(c.blocks(), size, s.fd, direct);
    if (direct) {
      s.status = Preallocate(writes);
      if (!s.status.ok()) continue;
    }
    for (WriteRequest& req : writes) {
      requests.push_back(std::move(req));
      request_owner.push_back(i);
    }
  }
  std::vector<Status> results = backend_->Write(requests);
  for (size_t r = 0; r < results.size(); ++r) {
    Staged& s = staged[request_owner[r]];
    if (s.status.ok() && !results[r].ok()) s.status = results[r];
    if (results[r].ok()) stats_.bytes_flushed += requests[r].bytes();
  }
  std::vector<int> sync_fds;
  std::vector<size_t> sync_owner;
  const uid_t euid = geteuid();
  const gid_t egid = getegid();
  for (size_t i = 0; i < batch.size(); ++i) {
    Staged& s = staged[i];
    if (s.fd < 0 || !s.status.ok()) continue;
    const JournalEntry& e = *batch[i];
    timespec times[2] = {e.atime, e.mtime};
    // chown before chmod: a chown clears the set-user-ID bit.
    if (ftruncate(s.fd, static_cast<off_t>(e.snapshot.size())) != 0 ||
        ((e.uid != euid || e.gid != egid) && fchown(s.fd, e.uid, e.gid) != 0 && euid == 0) ||
        fchmod(s.fd, e.mode & 07777) != 0 || futimens(s.fd, times) != 0) {
      s.status = Status::FromErrno("set size and attributes of staging file");
      continue;
    }
    sync_fds.push_back(s.fd);
    sync_owner.push_back(i);
  }
  if (publishes > policy::kSyncfsThreshold) {
    if (syncfs(staging_fd_) != 0) {
      Status st = Status::FromErrno("syncfs");
      for (size_t i : sync_owner) staged[i].status = st;
    }
  } else {
    std::vector<Status> synced = backend_->Sync(sync_fds, /*data_only=*/true);
    for (size_t k = 0; k < synced.size(); ++k) {
      if (!synced[k].ok()) staged[sync_owner[k]].status = synced[k];
    }
  }

  // Phase 2: in journal order, publish staged files and apply namespace changes.
  std::vector<int> touched_dirs;
  size_t done = 0;
  for (; done < batch.size(); ++done) {
    const JournalEntry& e = *batch[done];
    Staged& s = staged[done];
    Status st = s.status;
    if (st.ok() && e.kind == JournalEntry::Kind::kPublish) {
      for (size_t k = 0; k < e.names.size() && st.ok(); ++k) {
        const Inode::Name& n = e.names[k];
        int dfd = DirFd(n.parent);
        std::string link_name = s.name + ".link";
        if (k + 1 < e.names.size()) {
          // Every further name becomes a hard link of the same staged file.
          if (linkat(staging_fd_, s.name.c_str(), staging_fd_, link_name.c_str(), 0) != 0 ||
              renameat(staging_fd_, link_name.c_str(), dfd, n.name.c_str()) != 0) {
            st = Status::FromErrno("publish link " + n.name);
          }
        } else if (renameat(staging_fd_, s.name.c_str(), dfd, n.name.c_str()) != 0) {
          st = Status::FromErrno("publish " + n.name);
        }
        touched_dirs.push_back(dfd);
      }
    } else if (st.ok()) {
      st = ApplyNamespaceOp(e, &touched_dirs);
      if (!st.ok() && !policy::IsTransient(st.err())) {
        spdlog::error("backing store refused {} of {}: {}; skipped", KindName(e.kind), e.name,
                      st.ToString());
        stats_.flush_errors++;
        st = Status::Ok();
      }
    }
    if (!st.ok()) {
      *error = st;
      *failed = batch[done];
      break;
    }
  }

  // Phase 3: make the directory changes durable.
  std::sort(touched_dirs.begin(), touched_dirs.end());
  touched_dirs.erase(std::unique(touched_dirs.begin(), touched_dirs.end()), touched_dirs.end());
  touched_dirs.erase(std::remove(touched_dirs.begin(), touched_dirs.end(), -1), touched_dirs.end());
  Status dir_status;
  if (touched_dirs.size() > policy::kSyncfsThreshold) {
    if (syncfs(staging_fd_) != 0) dir_status = Status::FromErrno("syncfs");
  } else {
    for (const Status& st : backend_->Sync(touched_dirs, /*data_only=*/false)) {
      if (!st.ok() && dir_status.ok()) dir_status = st;
    }
  }
  if (!dir_status.ok()) {
    spdlog::error("backing store: directory sync failed: {}", dir_status.ToString());
    stats_.flush_errors++;
  }

  for (size_t i = 0; i < batch.size(); ++i) {
    Staged& s = staged[i];
    if (s.fd >= 0) close(s.fd);
    if (i >= done && !s.name.empty()) unlinkat(staging_fd_, s.name.c_str(), 0);
  }
  return done;
}

Status Flusher::ApplyNamespaceOp(const JournalEntry& e, std::vector<int>* touched_dirs) {
  using Kind = JournalEntry::Kind;
  int dfd = DirFd(e.parent);
  touched_dirs->push_back(dfd);
  switch (e.kind) {
    case Kind::kMkdir: {
      if (mkdirat(dfd, e.name.c_str(), e.mode & 07777) != 0 && errno != EEXIST) {
        return Status::FromErrno("mkdir " + e.name);
      }
      int fd = openat(dfd, e.name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
      if (fd < 0) return Status::FromErrno("open new directory " + e.name);
      if (fchmod(fd, e.mode & 07777) != 0 ||
          (geteuid() == 0 && fchown(fd, e.uid, e.gid) != 0)) {
        Status st = Status::FromErrno("set attributes of directory " + e.name);
        close(fd);
        return st;
      }
      touched_dirs->push_back(fd);
      std::lock_guard lock(ns_mu_);
      e.inode->dir_fd = std::make_shared<BackingFile>(fd);
      return Status::Ok();
    }
    case Kind::kSymlink: {
      std::string tmp = std::to_string(e.seq);
      if (symlinkat(e.symlink_target.c_str(), staging_fd_, tmp.c_str()) != 0) {
        return Status::FromErrno("symlink " + e.name);
      }
      if (geteuid() == 0) fchownat(staging_fd_, tmp.c_str(), e.uid, e.gid, AT_SYMLINK_NOFOLLOW);
      if (renameat(staging_fd_, tmp.c_str(), dfd, e.name.c_str()) != 0) {
        Status st = Status::FromErrno("symlink " + e.name);
        unlinkat(staging_fd_, tmp.c_str(), 0);
        return st;
      }
      return Status::Ok();
    }
    case Kind::kMknod:
      return MakeNode(e, dfd);
    case Kind::kRename: {
      int nfd = DirFd(e.new_parent);
      touched_dirs->push_back(nfd);
      if (renameat2(dfd, e.name.c_str(), nfd, e.new_name.c_str(), e.rename_flags) != 0) {
        return Status::FromErrno("rename " + e.name + " to " + e.new_name);
      }
      return Status::Ok();
    }
    case Kind::kUnlink:
    case Kind::kRmdir:
      if (unlinkat(dfd, e.name.c_str(), e.kind == Kind::kRmdir ? AT_REMOVEDIR : 0) != 0 &&
          errno != ENOENT) {
        return Status::FromErrno(std::string(KindName(e.kind)) + " " + e.name);
      }
      return Status::Ok();
    case Kind::kLink: {
      int nfd = DirFd(e.new_parent);
      touched_dirs->push_back(nfd);
      if (linkat(dfd, e.name.c_str(), nfd, e.new_name.c_str(), 0) != 0) {
        return Status::FromErrno("link " + e.name + " to " + e.new_name);
      }
      return Status::Ok();
    }
    case Kind::kSetAttr: {
      const char* n = e.name.c_str();
      if (e.set_mode && e.inode->type != FileType::kSymlink &&
          fchmodat(dfd, n, e.mode & 07777, 0) != 0) {
        return Status::FromErrno("chmod " + e.name);
      }
      if (e.set_owner && fchownat(dfd, n, e.uid, e.gid, AT_SYMLINK_NOFOLLOW) != 0) {
        return Status::FromErrno("chown " + e.name);
      }
      timespec times[2] = {e.atime, e.mtime};
      if (e.set_times && utimensat(dfd, n, times, AT_SYMLINK_NOFOLLOW) != 0) {
        return Status::FromErrno("utimes " + e.name);
      }
      return Status::Ok();
    }
    case Kind::kPublish:
      break;
  }
  return Status::Error(EINVAL, "unexpected journal entry");
}

Status Flusher::MakeNode(const JournalEntry& e, int dir) {
  const std::string tmp = std::to_string(e.seq);
  const timespec times[2] = {e.atime, e.mtime};
  if (mknodat(staging_fd_, tmp.c_str(), e.node_type | (e.mode & 07777), e.rdev) != 0) {
    return Status::FromErrno("mknod " + e.name);
  }
  // chown before chmod: a chown clears the set-user-ID bit.
  const bool root = geteuid() == 0;
  if ((root && fchownat(staging_fd_, tmp.c_str(), e.uid, e.gid, AT_SYMLINK_NOFOLLOW) != 0) ||
      fchmodat(staging_fd_, tmp.c_str(), e.mode & 07777, 0) != 0 ||
      utimensat(staging_fd_, tmp.c_str(), times, AT_SYMLINK_NOFOLLOW) != 0 ||
      renameat(staging_fd_, tmp.c_str(), dir, e.name.c_str()) != 0) {
    Status st = Status::FromErrno("mknod " + e.name);
    unlinkat(staging_fd_, tmp.c_str(), 0);
    return st;
  }
  return Status::Ok();
}

void Flusher::CompleteBatch(const std::vector<EntryRef>& batch, size_t done, const Status& error,
                            const EntryRef& failed) {
  for (size_t i = 0; i < done; ++i) {
    const EntryRef& e = batch[i];
    e->inode->on_backing = true;
    if (e->kind != JournalEntry::Kind::kPublish) continue;
    stats_.files_flushed++;
    bool clean;
    {
      std::lock_guard ilock(e->inode->mu);
      Inode& inode = *e->inode;
      inode.durable_version = std::max(inode.durable_version, e->version);
      inode.flush_error = Status::Ok();
      clean = inode.durable_version == inode.version;
    }
    if (clean && hooks_.on_clean) hooks_.on_clean(e->inode);
  }
  journal_.Complete(batch, done);
  if (failed) {
    std::string path = hooks_.path_of ? hooks_.path_of(failed->inode) : failed->name;
    struct stat staging {};
    // Nothing can be flushed once the backing directory is gone; unmount rescues the data.
    const bool gone = fstat(staging_fd_, &staging) == 0 && staging.st_nlink == 0;
    Status st = Status::Error(error.err(), path + ": " + error.message() +
                                               (gone ? " (the backing directory, or its .ckptfs, "
                                                       "was removed; unmount saves the data to "
                                                       "a rescue directory)"
                                                     : ""));
    if (failed->kind == JournalEntry::Kind::kPublish) {
      std::lock_guard ilock(failed->inode->mu);
      failed->inode->flush_error = st;
      failed->inode->flush_error_reported = false;
    }
    if (last_error_.ok() || consecutive_failures_ == 0) {
      spdlog::error("flush failed, will retry: {}", st.ToString());
    }
    last_error_ = st;
    ++error_epoch_;
    ++consecutive_failures_;
    stats_.flush_errors++;
    retry_at_ = Clock::now() + policy::RetryDelay(consecutive_failures_);
  } else {
    if (!last_error_.ok()) spdlog::info("flushing recovered after {}", last_error_.ToString());
    last_error_ = Status::Ok();
    consecutive_failures_ = 0;
  }
  progress_.notify_all();
}

Status Flusher::Drain(std::chrono::milliseconds retry_for) {
  auto give_up = Clock::now() + retry_for;
  std::unique_lock lock(ns_mu_);
  draining_ = true;
  wake_.notify_all();
  while (journal_.pending_entries() > 0) {
    if (!last_error_.ok() && Clock::now() >= give_up) break;
    progress_.wait_for(lock, std::chrono::milliseconds(100));
  }
  stop_ = true;
  wake_.notify_all();
  Status result = journal_.pending_entries() > 0 ? last_error_ : Status::Ok();
  lock.unlock();
  if (thread_.joinable()) thread_.join();
  return result;
}

}  // namespace ckptfs
