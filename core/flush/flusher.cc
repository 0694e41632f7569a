#include "core/flush/flusher.h"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>  // RENAME_EXCHANGE
#include <map>
#include <set>

#include "core/base/flush_policy.h"
#include "core/integrity/checksum.h"
#include "core/integrity/checksum_manifest.h"
#include "core/integrity/checksum_record.h"
#include "core/integrity/read_back.h"
#include "core/integrity/verifier.h"

namespace ckptfs {
namespace {

// Staging state of one publish entry during a batch.
struct Staged {
  int fd = -1;
  std::string name;
  Status status;
  ChecksumRecord checksum;  // Of the version's bytes.
  bool direct = false;      // Written with O_DIRECT.
};

// Allocates the ranges about to be written: a full disk shows before any byte is written, and
// the direct writes become overwrites, which the backing filesystem may run in parallel instead
// of serialising them on growing the file. Filesystems without fallocate go without.
Status Preallocate(Env& env, const std::vector<WriteRequest>& writes) {
  for (const WriteRequest& w : writes) {
    uint64_t len = w.bytes();
    if (len == 0) continue;
    Status st = env.Allocate(w.fd, w.offset, len);
    if (st.err() == EOPNOTSUPP) return Status::Ok();
    if (!st.ok()) return Status::Error(st.err(), "allocate staging file");
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

Flusher::Flusher(const Config& config, Env& env, Clock& clock, int staging_fd, Journal& journal,
                 Stats& stats, FlushClient& client)
    : config_(config),
      env_(env),
      clock_(clock),
      backend_name_(env.Name()),
      staging_fd_(staging_fd),
      max_batch_entries_(policy::MaxBatchEntries(OpenFileLimit())),
      journal_(journal),
      stats_(stats),
      client_(client) {}

Flusher::~Flusher() {
  {
    MutexLock lock(mu_);
    stop_ = true;
    wake_.notify_all();
  }
  if (thread_.joinable()) thread_.join();
}

void Flusher::HoldMarkers(PostCommitFn post, std::function<void()> durable_advanced) {
  post_commit_ = std::move(post);
  durable_advanced_ = std::move(durable_advanced);
}

void Flusher::DropMarkersOverTakenNames(std::string why) { drop_markers_why_ = std::move(why); }

void Flusher::Start() { thread_ = std::thread([this] { Run(); }); }

void Flusher::Notify() {
  MutexLock lock(mu_);
  wake_.notify_all();
}

void Flusher::Hurry() {
  MutexLock lock(mu_);
  force_seq_ = std::max(force_seq_, journal_.last_seq());
  wake_.notify_all();
}

Status Flusher::WaitDurable(uint64_t seq) {
  MutexLock lock(mu_);
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

Status Flusher::WaitCommitted(uint64_t seq) {
  if (Status st = WaitDurable(seq); !st.ok()) return st;
  MutexLock lock(mu_);
  while (held_.HeldUpTo(seq)) {
    if (stopped_) return Status::Error(EIO, "flusher stopped");
    progress_.wait(lock);
  }
  return held_.FailureUpTo(seq);
}

void Flusher::CommitsDecided(const std::vector<CommitOutcome>& outcomes) {
  MutexLock lock(mu_);
  for (const CommitOutcome& o : outcomes) held_.Decide(o.id, o.status);
  wake_.notify_all();
}

Status Flusher::last_commit_failure() const {
  MutexLock lock(mu_);
  return held_.FailureUpTo(UINT64_MAX);
}

size_t Flusher::held_markers() const {
  MutexLock lock(mu_);
  return held_.size();
}

Status Flusher::last_error() const {
  MutexLock lock(mu_);
  return last_error_;
}

Status Flusher::spill_error() const {
  MutexLock lock(mu_);
  return spill_error_;
}

void Flusher::NoteSpillLocked(const Status& outcome, bool writers_wait) {
  if (outcome.ok()) {
    if (!spill_error_.ok()) {
      spdlog::info("{} after {}", writers_wait ? "spilling works again" : "no writer waits for memory",
                   spill_error_.ToString());
    }
    spill_error_ = Status::Ok();
    consecutive_spill_failures_ = 0;
    spill_retry_at_ = {};
    return;
  }
  if (outcome.ToString() != spill_error_.ToString()) {
    spdlog::error("writers wait for memory, retried: {}", outcome.ToString());
  }
  spill_error_ = outcome;
  ++consecutive_spill_failures_;
  stats_.spill_errors++;
  spill_retry_at_ = clock_.Now() + policy::RetryDelay(consecutive_spill_failures_);
}

int Flusher::DirFd(const InodeRef& dir) {
  std::shared_ptr<BackingFile> backing = dir ? dir->BackingDir() : nullptr;
  return backing ? backing->fd() : -1;
}

bool Flusher::TargetTaken(const JournalEntry& e) {
  struct stat st {};
  if (e.kind == JournalEntry::Kind::kRename) {
    return env_.Stat(DirFd(e.new_parent), e.new_name, &st).ok();
  }
  return std::any_of(e.names.begin(), e.names.end(), [&](const Inode::Name& n) {
    return env_.Stat(DirFd(n.parent), n.name, &st).ok();
  });
}

void Flusher::Run() {
  while (true) {
    if (post_commit_) ServeHeldMarkers();
    const size_t waiting_writers = client_.WritersWaiting();
    MutexLock lock(mu_);
    auto now = clock_.Now();
    bool hurry = policy::FlushEverythingNow(waiting_writers, false, draining_);
    uint64_t force = hurry ? journal_.last_seq() : force_seq_;
    std::vector<EntryRef> batch;
    if (now >= retry_at_) {
      batch = journal_.TakeBatch(now, config_.flush_delay, force, max_batch_entries_,
                                 policy::kMaxBatchBytes);
    }
    if (batch.empty() && waiting_writers > 0 && now >= spill_retry_at_) {
      lock.Unlock();
      Result<size_t> freed = client_.Spill(env_);
      lock.Lock();
      NoteSpillLocked(freed.status(), /*writers_wait=*/true);
      if (freed.ok() && *freed > 0) continue;
    } else if (waiting_writers == 0) {
      NoteSpillLocked(Status::Ok(), /*writers_wait=*/false);
    }
    if (batch.empty()) {
      if (stop_ || (draining_ && journal_.pending_entries() == 0 && held_.size() == 0)) {
        stopped_ = true;
        progress_.notify_all();
        return;
      }
      auto deadline = std::max(retry_at_, std::min(journal_.HeadDeadline(config_.flush_delay),
                                                   now + std::chrono::milliseconds(100)));
      wake_.wait_for(lock, deadline - now);
      continue;
    }
    lock.Unlock();
    auto started = std::chrono::steady_clock::now();
    applying_.store(true, std::memory_order_relaxed);
    BatchResult result = ApplyBatch(batch);
    applying_.store(false, std::memory_order_relaxed);
    const auto took = std::chrono::duration_cast<std::chrono::nanoseconds>(
        std::chrono::steady_clock::now() - started);
    stats_.flush_busy_ns += took.count();
    stats_.flush_batches++;
    CompleteBatch(batch, result, took);
  }
}

Flusher::BatchResult Flusher::ApplyBatch(const std::vector<EntryRef>& batch) {
  BatchResult result;
  std::vector<Staged> staged(batch.size());
  std::vector<WriteRequest> requests;
  std::vector<size_t> request_owner;
  size_t publishes = 0;
  // Entries a failed batch left on the backing store: only their directories are synced again.
  std::vector<bool> applied(batch.size());
  for (size_t i = 0; i < batch.size(); ++i) applied[i] = journal_.StateOf(batch[i]).applied;

  // Phase 1: write every sealed version of the batch to its staging file.
  for (size_t i = 0; i < batch.size(); ++i) {
    const JournalEntry& e = *batch[i];
    if (e.kind != JournalEntry::Kind::kPublish || applied[i]) continue;
    ++publishes;
    Staged& s = staged[i];
    s.name = std::to_string(e.seq);
    const FileContent& c = e.snapshot;
    uint64_t size = c.size();
    // A file rewritten in part keeps its unchanged prefix through copy_file_range, buffered.
    const bool direct = !c.base() && (config_.flush_io == FlushIo::kDirect ||
                                      (config_.flush_io == FlushIo::kAuto &&
                                       size >= policy::kDirectFlushMinBytes));
    Result<int> fd = CreateStagingFile(e, s.name, O_RDWR | (direct ? O_DIRECT : 0));
    if (!fd.ok()) {
      s.status = Status::Error(fd.status().err(), "create staging file");
      continue;
    }
    s.fd = *fd;
    s.direct = direct;
    if (c.base() && c.base_len() > 0) {
      s.status = c.base()->CopyPrefixTo(s.fd, std::min(c.base_len(), size));
      if (!s.status.ok()) continue;
    }
    uint64_t summed_now = 0;
    Result<ChecksumRecord> checksum = ChecksumOf(c, &summed_now);
    if (!checksum.ok()) {
      s.status = Status::Error(checksum.status().err(), "checksum: " + checksum.status().message());
      continue;
    }
    s.checksum = std::move(*checksum);
    stats_.bytes_checksummed += size;
    stats_.bytes_summed_at_flush += summed_now;
    std::vector<WriteRequest> writes = BlockWriteRequests(c.blocks(), size, s.fd, direct);
    if (direct) {
      s.status = Preallocate(env_, writes);
      if (!s.status.ok()) continue;
    }
    for (WriteRequest& req : writes) {
      requests.push_back(std::move(req));
      request_owner.push_back(i);
    }
  }
  std::vector<Status> results = env_.Write(requests);
  for (size_t r = 0; r < results.size(); ++r) {
    Staged& s = staged[request_owner[r]];
    if (s.status.ok() && !results[r].ok()) s.status = results[r];
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
    Status st = env_.Truncate(s.fd, e.snapshot.size());
    if (st.ok() && (e.uid != euid || e.gid != egid)) {
      Status owned = env_.Chown(s.fd, "", e.uid, e.gid);
      if (euid == 0) st = owned;  // Others cannot give a file away: it stays the daemon's.
    }
    // After the chown, which clears the set-user-ID and set-group-ID bits.
    if (st.ok()) st = env_.Chmod(s.fd, "", e.mode & 07777);
    if (st.ok()) st = env_.SetTimes(s.fd, "", times);
    if (st.ok()) st = RecordChecksum(s.fd, s.checksum);
    if (!st.ok()) {
      s.status = Status::Error(st.err(), "set size and attributes of staging file");
      continue;
    }
    sync_fds.push_back(s.fd);
    sync_owner.push_back(i);
  }
  if (publishes > policy::kSyncfsThreshold) {
    if (Status st = env_.SyncFs(staging_fd_); !st.ok()) {
      for (size_t i : sync_owner) staged[i].status = st;
    }
  } else {
    std::vector<Status> synced = env_.Sync(sync_fds, /*data_only=*/true);
    for (size_t k = 0; k < synced.size(); ++k) {
      if (!synced[k].ok()) staged[sync_owner[k]].status = synced[k];
    }
  }

  if (VerifiesMarkers(config_.verify)) {
    std::vector<ReadBackFile> files;
    std::vector<size_t> owners;
    for (size_t i : sync_owner) {
      if (!staged[i].status.ok()) continue;
      files.push_back(ReadBackFile{staged[i].fd, &staged[i].checksum});
      owners.push_back(i);
    }
    const std::vector<ReadBackOutcome> outcomes = ReadBackFiles(env_, files);
    for (size_t k = 0; k < owners.size(); ++k) {
      staged[owners[k]].status = CheckReadBack(batch[owners[k]], outcomes[k]);
    }
  }

  // Phase 2: in journal order, publish staged files and apply namespace changes.
  std::vector<int> touched_dirs;
  // Without user xattrs: the records of the files published, by directory, for its manifest.
  Manifests manifests;
  size_t& done = result.applied;
  for (; done < batch.size(); ++done) {
    const JournalEntry& e = *batch[done];
    Staged& s = staged[done];
    Status st = s.status;
    if (applied[done]) {
      AddAppliedDirs(e, &touched_dirs);
    } else if (st.ok() && post_commit_ && HoldOrSupersede(batch[done], s.name, s.checksum)) {
      // Held for its commit: published by ServeHeldMarkers, or never.
    } else if (st.ok() && e.kind == JournalEntry::Kind::kPublish) {
      st = PublishStaged(e, s.name, &touched_dirs);
      if (st.ok()) NotePublished(e, s.checksum, &manifests);
    } else if (st.ok()) {
      st = ApplyNamespaceOp(e, &touched_dirs);
      if (st.ok()) CarryRecords(e, &manifests);
      if (!st.ok() && !policy::IsTransient(st.err())) {
        spdlog::error("backing store refused {} of {}: {}; skipped", KindName(e.kind), e.name,
                      st.ToString());
        stats_.flush_errors++;
        st = Status::Ok();
      }
    }
    if (!st.ok()) {
      result.error = st;
      result.failed = batch[done];
      break;
    }
  }

  // The manifests, renamed in before the directories are synced (with their files).
  KeepManifests(manifests, batch[0]->seq);

  // Phase 3: make the directory changes durable.
  const Status dir_status = SyncDirectories(std::move(touched_dirs));
  result.durable = dir_status.ok() ? done : 0;
  if (!dir_status.ok() && !result.failed && done > 0) {
    result.error = Status::Error(dir_status.err(), "sync of directories: " + dir_status.message());
    result.failed = batch[0];
  }

  for (size_t i = 0; i < batch.size(); ++i) {
    Staged& s = staged[i];
    if (s.fd >= 0) env_.Close(s.fd);
    if (i >= done && !s.name.empty()) (void)env_.Unlink(staging_fd_, s.name);
  }
  return result;
}

void Flusher::NotePublished(const JournalEntry& e, const ChecksumRecord& checksum,
                            Manifests* manifests) {
  if (!xattrs_supported_) {
    for (const Inode::Name& n : e.names) (*manifests)[DirFd(n.parent)][n.name] = checksum;
  }
  MutexLock lock(e.inode->mu);
  e.inode->checksum = Inode::ChecksumNote{e.version, FormatChecksumRecord(checksum), {},
                                          /*from_flusher=*/true, /*why_none=*/""};
}

std::optional<ChecksumRecord> Flusher::ManifestRecord(int dir, const std::string& name,
                                                      const Manifests& manifests) {
  if (auto d = manifests.find(dir); d != manifests.end()) {
    if (auto r = d->second.find(name); r != d->second.end()) return r->second;
  }
  Result<ChecksumRecord> kept = ManifestRecordOf(env_, dir, name);
  if (!kept.ok()) return std::nullopt;
  return *kept;
}

void Flusher::CarryRecords(const JournalEntry& e, Manifests* manifests) {
  using Kind = JournalEntry::Kind;
  if (xattrs_supported_ || (e.kind != Kind::kRename && e.kind != Kind::kLink)) return;
  const int from = DirFd(e.parent);
  const int to = DirFd(e.new_parent);
  if (from < 0 || to < 0 || (from == to && e.name == e.new_name)) return;
  const std::optional<ChecksumRecord> moved = ManifestRecord(from, e.name, *manifests);
  const bool exchange = e.kind == Kind::kRename && (e.rename_flags & RENAME_EXCHANGE) != 0;
  const std::optional<ChecksumRecord> other =
      exchange ? ManifestRecord(to, e.new_name, *manifests) : std::nullopt;
  if (e.kind == Kind::kRename && (moved || other)) {
    ChecksumManifest& old_dir = (*manifests)[from];  // Rewritten: the old name goes.
    old_dir.erase(e.name);
    if (other) old_dir[e.name] = *other;
  }
  if (moved) (*manifests)[to][e.new_name] = *moved;
}

void Flusher::KeepManifests(const Manifests& manifests, uint64_t seq) {
  for (const auto& [dir, records] : manifests) {
    const std::string staged = "checksums-" + std::to_string(seq);
    if (Status st = UpdateChecksumManifest(env_, dir, staging_fd_, staged, records); !st.ok()) {
      stats_.flush_errors++;
      spdlog::error("the checksum records of {} files could not be kept in {}: {}",
                    records.size(), kChecksumManifestName, st.ToString());
    }
  }
}

Status Flusher::CheckReadBack(const EntryRef& entry, const ReadBackOutcome& outcome) {
  const Verification& v = outcome.verification;
  stats_.bytes_read_back += v.size;
  if (outcome.from_page_cache && !read_back_from_page_cache_) {
    read_back_from_page_cache_ = true;
    spdlog::warn("the backing filesystem has no O_DIRECT: verify=markers reads files back from "
                 "this machine's page cache, which checks the copy into it, not what the "
                 "backing store keeps");
  }
  if (v.verdict == Verification::Verdict::kOk || v.verdict == Verification::Verdict::kMismatch) {
    MutexLock lock(entry->inode->mu);
    entry->inode->last_check = std::make_unique<Inode::StoredCheck>(Inode::StoredCheck::Now(
        entry->version, v.verdict == Verification::Verdict::kOk, "markers"));
  }
  switch (v.verdict) {
    case Verification::Verdict::kOk:
      return Status::Ok();
    case Verification::Verdict::kMismatch: {
      stats_.checksum_mismatches++;
      const std::string where = fmt::format(
          "MiB {}-{}{}", v.first_differing_begin >> 20,
          (v.first_differing_end + (1 << 20) - 1) >> 20,
          v.size_differs() ? fmt::format(", {} bytes instead of {}", v.size, v.recorded_size) : "");
      spdlog::error("{}: read back from the backing store, it does not match the checksum of its "
                    "bytes in memory ({}); not published, written again from memory",
                    client_.PathOf(entry), where);
      return Status::Error(EIO, "read back does not match the checksum (" + where + ")");
    }
    case Verification::Verdict::kNoChecksum:
    case Verification::Verdict::kError:
      break;
  }
  return Status::Error(EIO, "read back: " + v.reason);
}

Status Flusher::RecordChecksum(int fd, const ChecksumRecord& record) {
  if (!xattrs_supported_) return Status::Ok();
  Status st = env_.SetXattr(fd, kChecksumXattr, FormatChecksumRecord(record));
  if (st.err() == ENOTSUP) {
    xattrs_supported_ = false;
    spdlog::warn("the backing store keeps no user extended attributes ({}): the checksum "
                 "records of published files are kept in {} beside them",
                 st.ToString(), kChecksumManifestName);
    return Status::Ok();
  }
  return st;
}

Result<int> Flusher::CreateStagingFile(const JournalEntry& e, const std::string& name, int flags) {
  const int dir = e.names.empty() ? -1 : DirFd(e.names[0].parent);
  if (dir >= 0 && tmpfile_in_place_) {
    Result<int> fd = env_.Open(dir, ".", flags | O_TMPFILE, 0600);
    if (fd.ok()) {
      Status linked = env_.Link(*fd, "", staging_fd_, name);
      if (!linked.ok() && linked.err() == EEXIST && env_.Unlink(staging_fd_, name).ok()) {
        linked = env_.Link(*fd, "", staging_fd_, name);  // A leftover of the same sequence.
      }
      if (linked.ok()) return fd;
      env_.Close(*fd);
    } else if (const int err = fd.status().err(); err == EOPNOTSUPP || err == EISDIR ||
                                                    err == EINVAL) {
      spdlog::info("the backing filesystem has no O_TMPFILE: staging files are made in the "
                   "staging directory");
      tmpfile_in_place_ = false;
    }
  }
  return env_.Open(staging_fd_, name, flags | O_CREAT | O_TRUNC | O_NOFOLLOW, 0600);
}

Status Flusher::PublishStaged(const JournalEntry& e, const std::string& staged_name,
                              std::vector<int>* touched_dirs) {
  for (size_t k = 0; k < e.names.size(); ++k) {
    const Inode::Name& n = e.names[k];
    int dfd = DirFd(n.parent);
    touched_dirs->push_back(dfd);
    if (k + 1 < e.names.size()) {
      // Every further name becomes a hard link of the same staged file.
      std::string link_name = staged_name + ".link";
      Status linked = env_.Link(staging_fd_, staged_name, staging_fd_, link_name);
      if (linked.ok()) linked = env_.Rename(staging_fd_, link_name, dfd, n.name);
      if (!linked.ok()) return Status::Error(linked.err(), "publish link " + n.name);
    } else if (Status renamed = env_.Rename(staging_fd_, staged_name, dfd, n.name);
               !renamed.ok()) {
      return Status::Error(renamed.err(), "publish " + n.name);
    }
  }
  return Status::Ok();
}

Status Flusher::SyncDirectories(std::vector<int> dirs) {
  std::sort(dirs.begin(), dirs.end());
  dirs.erase(std::unique(dirs.begin(), dirs.end()), dirs.end());
  dirs.erase(std::remove(dirs.begin(), dirs.end(), -1), dirs.end());
  if (dirs.size() > policy::kSyncfsThreshold) return env_.SyncFs(staging_fd_);
  Status first_error;
  for (const Status& st : env_.Sync(dirs, /*data_only=*/false)) {
    if (!st.ok() && first_error.ok()) first_error = st;
  }
  return first_error;
}

void Flusher::AddAppliedDirs(const JournalEntry& e, std::vector<int>* touched_dirs) {
  using Kind = JournalEntry::Kind;
  if (e.kind == Kind::kPublish) {
    for (const Inode::Name& n : e.names) touched_dirs->push_back(DirFd(n.parent));
    return;
  }
  touched_dirs->push_back(DirFd(e.parent));
  if (e.kind == Kind::kRename || e.kind == Kind::kLink) {
    touched_dirs->push_back(DirFd(e.new_parent));
  }
  if (e.kind == Kind::kMkdir) touched_dirs->push_back(DirFd(e.inode));
}

Status Flusher::ApplyNamespaceOp(const JournalEntry& e, std::vector<int>* touched_dirs) {
  using Kind = JournalEntry::Kind;
  int dfd = DirFd(e.parent);
  touched_dirs->push_back(dfd);
  switch (e.kind) {
    case Kind::kMkdir: {
      Status made = env_.Mkdir(dfd, e.name, e.mode & 07777);
      if (!made.ok() && made.err() != EEXIST) return made;
      Result<int> fd = env_.Open(dfd, e.name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW);
      if (!fd.ok()) return Status::Error(fd.status().err(), "open new directory " + e.name);
      auto dir = std::make_shared<BackingFile>(env_, *fd);
      Status st = env_.Chmod(*fd, "", e.mode & 07777);
      if (st.ok() && geteuid() == 0) st = env_.Chown(*fd, "", e.uid, e.gid);
      if (!st.ok()) return Status::Error(st.err(), "set attributes of directory " + e.name);
      touched_dirs->push_back(*fd);
      e.inode->SetBackingDir(std::move(dir));
      return Status::Ok();
    }
    case Kind::kSymlink: {
      std::string tmp = std::to_string(e.seq);
      Status st = env_.Symlink(e.symlink_target, staging_fd_, tmp);
      if (st.ok()) {
        if (geteuid() == 0) (void)env_.Chown(staging_fd_, tmp, e.uid, e.gid);
        st = env_.Rename(staging_fd_, tmp, dfd, e.name);
        if (!st.ok()) (void)env_.Unlink(staging_fd_, tmp);
      }
      return st.ok() ? st : Status::Error(st.err(), "symlink " + e.name);
    }
    case Kind::kMknod:
      return MakeNode(e, dfd);
    case Kind::kRename:
      touched_dirs->push_back(DirFd(e.new_parent));
      return env_.Rename(dfd, e.name, touched_dirs->back(), e.new_name, e.rename_flags);
    case Kind::kUnlink:
    case Kind::kRmdir: {
      Status st = env_.Unlink(dfd, e.name, e.kind == Kind::kRmdir);
      return st.err() == ENOENT ? Status::Ok() : st;
    }
    case Kind::kLink:
      touched_dirs->push_back(DirFd(e.new_parent));
      return env_.Link(dfd, e.name, touched_dirs->back(), e.new_name);
    case Kind::kSetAttr: {
      Status st;
      if (e.set_mode && e.inode->type != FileType::kSymlink) {
        st = env_.Chmod(dfd, e.name, e.mode & 07777);
      }
      if (st.ok() && e.set_owner) st = env_.Chown(dfd, e.name, e.uid, e.gid);
      timespec times[2] = {e.atime, e.mtime};
      if (st.ok() && e.set_times) st = env_.SetTimes(dfd, e.name, times);
      return st;
    }
    case Kind::kPublish:
      break;
  }
  return Status::Error(EINVAL, "unexpected journal entry");
}

Status Flusher::MakeNode(const JournalEntry& e, int dir) {
  const std::string tmp = std::to_string(e.seq);
  const timespec times[2] = {e.atime, e.mtime};
  Status st = env_.Mknod(staging_fd_, tmp, e.node_type | (e.mode & 07777), e.rdev);
  if (!st.ok()) return Status::Error(st.err(), "mknod " + e.name);
  // chown before chmod: a chown clears the set-user-ID bit.
  if (geteuid() == 0) st = env_.Chown(staging_fd_, tmp, e.uid, e.gid);
  if (st.ok()) st = env_.Chmod(staging_fd_, tmp, e.mode & 07777);
  if (st.ok()) st = env_.SetTimes(staging_fd_, tmp, times);
  if (st.ok()) st = env_.Rename(staging_fd_, tmp, dir, e.name);
  if (!st.ok()) {
    (void)env_.Unlink(staging_fd_, tmp);
    return Status::Error(st.err(), "mknod " + e.name);
  }
  return Status::Ok();
}

void Flusher::CountPublished(const JournalEntry& e, std::optional<std::chrono::nanoseconds> took) {
  stats_.files_flushed++;
  stats_.bytes_flushed += e.snapshot.size();
  if (took) stats_.flush_seconds.Observe(*took);
  stats_.save_to_durable_seconds.Observe(clock_.Now() - e.sealed_at);
}

void Flusher::CompleteBatch(const std::vector<EntryRef>& batch, const BatchResult& result,
                            std::chrono::nanoseconds took) {
  const std::span<const EntryRef> entries(batch);
  FlushReport report;
  report.durable = entries.first(result.durable);
  report.applied = entries.subspan(result.durable, result.applied - result.durable);
  report.error = result.error;
  report.failed = result.failed;
  if (result.failed) {
    struct stat staging {};
    // Nothing can be flushed once the backing directory is gone; unmount rescues the data.
    report.backing_gone = env_.Stat(staging_fd_, "", &staging).ok() && staging.st_nlink == 0;
  }
  for (const EntryRef& e : report.durable) {
    // Held markers count when they are published (ServeHeldMarkers).
    const bool held = post_commit_ && journal_.StateOf(e).held;
    if (e->kind == JournalEntry::Kind::kPublish && !held) CountPublished(*e, took);
  }
  // The client first, then the journal, then the waiters (see the header).
  Status error = client_.Flushed(report);
  journal_.Complete(batch, result.durable, result.applied);
  if (durable_advanced_ && result.durable > 0) durable_advanced_();
  MutexLock lock(mu_);
  if (result.failed) {
    if (last_error_.ok() || consecutive_failures_ == 0) {
      spdlog::error("flush failed, will retry: {}", error.ToString());
    }
    last_error_ = error;
    ++error_epoch_;
    ++consecutive_failures_;
    stats_.flush_errors++;
    retry_at_ = clock_.Now() + policy::RetryDelay(consecutive_failures_);
  } else {
    if (!last_error_.ok()) spdlog::info("flushing recovered after {}", last_error_.ToString());
    last_error_ = Status::Ok();
    consecutive_failures_ = 0;
  }
  progress_.notify_all();
}

Status Flusher::Drain(std::chrono::milliseconds retry_for) {
  // Unmount waits in real time, whatever the clock of the policy.
  auto give_up = std::chrono::steady_clock::now() + retry_for;
  MutexLock lock(mu_);
  draining_ = true;
  wake_.notify_all();
  while (journal_.pending_entries() > 0 || held_.size() > 0) {
    const bool late = std::chrono::steady_clock::now() >= give_up;
    if (late && (!last_error_.ok() || journal_.pending_entries() == 0)) break;
    progress_.wait_for(lock, std::chrono::milliseconds(100));
  }
  stop_ = true;
  wake_.notify_all();
  Status result = journal_.pending_entries() > 0 ? last_error_ : Status::Ok();
  lock.Unlock();
  if (thread_.joinable()) thread_.join();
  std::vector<HeldMarker> undecided;
  {
    MutexLock held_lock(mu_);
    undecided = held_.TakeUndecided();
  }
  DropHeld(undecided, "the mount was unmounted before every member acknowledged its commit");
  return result;
}

bool Flusher::HoldOrSupersede(const EntryRef& e, const std::string& staged_name,
                              const ChecksumRecord& checksum) {
  if (HeldMarkers::IsMarker(*e, config_.commit_markers)) {
    std::string path = client_.PathOf(e);
    journal_.Hold(e);
    std::string staged = e->kind == JournalEntry::Kind::kPublish ? staged_name : "";
    if (!drop_markers_why_.empty() && TargetTaken(*e)) {
      HeldMarker dropped;
      dropped.entry = e;
      dropped.staged_name = std::move(staged);
      dropped.path = std::move(path);
      DropHeld({dropped}, drop_markers_why_.c_str());
      return true;
    }
    MutexLock lock(mu_);
    held_.Add(e, std::move(staged), std::move(path), checksum);
    return true;
  }
  std::vector<HeldMarker> dropped;
  {
    MutexLock lock(mu_);
    dropped = held_.SupersededBy(*e);
  }
  DropHeld(dropped, "a later change of its name superseded it");
  return false;
}

void Flusher::ServeHeldMarkers() {
  std::vector<std::pair<uint64_t, std::string>> unposted;
  {
    MutexLock lock(mu_);
    unposted = held_.Unposted();
  }
  for (const auto& [seq, path] : unposted) {
    Result<std::string> id = post_commit_(path);
    if (!id.ok()) spdlog::error("cannot post the commit of {}: {}", path, id.status().ToString());
    MutexLock lock(mu_);
    held_.Posted(seq, id);
  }
  std::vector<HeldMarker> decided;
  {
    MutexLock lock(mu_);
    decided = held_.TakeDecided(journal_.durable_seq());
  }
  for (const HeldMarker& m : decided) {
    const JournalEntry& e = *m.entry;
    Status outcome = *m.outcome;
    if (outcome.ok()) {
      std::vector<int> dirs;
      Manifests manifests;
      if (e.kind == JournalEntry::Kind::kPublish) {
        outcome = PublishStaged(e, m.staged_name, &dirs);
        if (outcome.ok()) NotePublished(e, m.checksum, &manifests);
      } else {
        outcome = ApplyNamespaceOp(e, &dirs);
        if (outcome.ok()) CarryRecords(e, &manifests);
      }
      KeepManifests(manifests, e.seq);
      if (Status synced = SyncDirectories(std::move(dirs)); outcome.ok()) outcome = synced;
    }
    if (!outcome.ok() && !m.staged_name.empty()) (void)env_.Unlink(staging_fd_, m.staged_name);
    // Released first: the client tells held markers (skipped) from published ones by the flag.
    journal_.Release(m.entry);
    if (outcome.ok()) {
      stats_.commits_published++;
      if (e.kind == JournalEntry::Kind::kPublish) CountPublished(e, std::nullopt);
      spdlog::info("published {}: every member acknowledged commit {}", m.path, m.commit_id);
      const std::vector<EntryRef> subject{m.entry};
      FlushReport report;
      report.durable = subject;
      (void)client_.Flushed(report);
    } else {
      // A failed commit is the checkpoint's, not the file's: `ckptfs sync` returns it, the next
      // close of the file does not.
      stats_.commits_failed++;
      if (m.outcome->ok()) {
        outcome = Status::Error(outcome.err(), m.path + ": not published: " + outcome.message());
        spdlog::error("{}", outcome.ToString());
      }
    }
    std::vector<HeldMarker> dropped;
    {
      MutexLock lock(mu_);
      dropped = held_.Finished(e.seq, outcome);
      progress_.notify_all();
    }
    DropHeld(dropped, "a newer marker of the same name was published");
  }
}

void Flusher::DropHeld(const std::vector<HeldMarker>& dropped, const char* why) {
  for (const HeldMarker& m : dropped) {
    spdlog::info("{} is not published: {}", m.path, why);
    if (!m.staged_name.empty()) (void)env_.Unlink(staging_fd_, m.staged_name);
    journal_.Release(m.entry);
  }
  if (dropped.empty()) return;
  MutexLock lock(mu_);
  progress_.notify_all();
}

}  // namespace ckptfs
