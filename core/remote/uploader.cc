#include "core/remote/uploader.h"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstring>
#include <random>
#include <string_view>
#include <unordered_set>

#include "core/backing/backing_paths.h"
#include "core/base/commit_markers.h"
#include "core/base/nanos.h"
#include "core/integrity/checksum_record.h"
#include "core/memory/crc32c.h"
#include "core/remote/open_beneath.h"
#include "core/remote/remote_read_policy.h"

namespace ckptfs {
namespace {

// Makes placeholder `fd`'s mark name object `new_key` (ETag `etag`) when it names `old_key`;
// durably, so that a crash after the source's removal leaves no mark of a removed object.
void MovePlaceholderMark(int fd, const std::string& old_key, const std::string& etag,
                         const std::string& new_key) {
  std::string mark(policy::kMaxPlaceholderMark, '\0');
  const ssize_t got = fgetxattr(fd, kRemotePlaceholderAttr, mark.data(), mark.size());
  if (got < 0) return;
  mark.resize(static_cast<size_t>(got));
  if (policy::PlaceholderMarkKey(mark) != std::optional<std::string_view>(old_key)) return;
  const std::string moved = policy::PlaceholderMark(etag, new_key);
  if (fsetxattr(fd, kRemotePlaceholderAttr, moved.data(), moved.size(), 0) != 0 || fsync(fd) != 0) {
    spdlog::warn("remote: the placeholder of {} cannot name its moved object: {}", new_key,
                 std::strerror(errno));
  }
}

// The file's kStoredVersionAttr, with its stat in `st` (nothing when either cannot be read).
std::optional<std::string> StoredVersionText(int fd, struct stat* st) {
  std::string text(policy::kMaxStoredVersion + 1, '\0');
  const ssize_t n = fgetxattr(fd, kStoredVersionAttr, text.data(), text.size());
  if (n <= 0 || fstat(fd, st) != 0) return std::nullopt;
  text.resize(static_cast<size_t>(n));
  return text;
}

}  // namespace

struct Uploader::Job {
  // kFailed: given up for good (its bytes refused for their checksum, policy::JudgeDigestMismatch):
  // never sent again while the mount runs, and what was handed over after it that waits for it
  // (markers, removals) waits; a newer version of the key handed over supersedes it.
  enum class Phase { kWaiting, kSingle, kCreating, kParts, kCompleting, kDone, kFailed };
  std::string key;
  policy::LoggedUploads::Version logged;  // What the upload log says of it.
  int fd = -1;
  uint64_t size = 0;
  // The file's checksum record (core/integrity/checksum_record.h), when it has one of its size:
  // the CRC32C sent for whole chunks is the one of the bytes as the trainer wrote them.
  std::optional<ChecksumRecord> record;
  bool marker = false;
  // Removes `key` instead of uploading to it: the old name of a renamed file (no fd).
  bool removal = false;
  // The key of the file's old name (empty: none): the store copies that object to `key` when the
  // file's kStoredVersionAttr says it is this version; else the file is sent (kSingle/kParts).
  std::string copy_from;
  // Moves every object under `key` (a directory's, with '/' after) under this prefix instead of
  // uploading (no fd): a renamed directory.
  std::string move_to;
  uint64_t seq = 0;  // Handed over as the seq-th (Uploader::handed_over_ then).
  policy::PartPlan plan;
  Phase phase = Phase::kWaiting;
  std::string upload_id;
  std::vector<unsigned> parts_to_send;  // Part indexes not handed to a thread yet.
  std::vector<UploadedPart> parts;
  size_t parts_done = 0;
  uint64_t uploaded = 0;     // Bytes of this job on the store (parts or the whole).
  unsigned generation = 0;   // Bumped when the job starts again from the beginning.
  unsigned in_flight = 0;     // Tasks of this job being performed.
  unsigned failures = 0;
  unsigned digest_mismatches = 0;  // Its bytes refused by the store for their checksum.
  std::chrono::steady_clock::time_point retry_at{};

  ~Job() {
    if (fd >= 0) close(fd);
  }
};

struct Uploader::Task {
  enum class Kind { kPut, kCreate, kPart, kComplete, kDelete, kCopy, kMove } kind = Kind::kPut;
  Job* job = nullptr;
  unsigned part = 0;
  unsigned generation = 0;
  // Copied under the lock: the thread uses them without it.
  std::string key;
  std::string upload_id;
  std::string copy_from;
  std::vector<UploadedPart> parts;
};

Result<std::unique_ptr<Uploader>> Uploader::Start(const UploaderSettings& settings, Stats& stats) {
  std::unique_ptr<Uploader> uploader(new Uploader(settings, stats));
  if (settings.log_dir_fd >= 0) {
    if (Status resumed = uploader->Resume(); !resumed.ok()) return resumed;
  }
  for (unsigned i = 0; i < std::max(1u, settings.concurrency); ++i) {
    Result<std::unique_ptr<S3Client>> client = S3Client::Make(settings.s3);
    if (!client.ok()) return client.status();
    uploader->clients_.push_back(std::move(*client));
  }
  for (auto& client : uploader->clients_) {
    S3Client* c = client.get();
    uploader->threads_.emplace_back([u = uploader.get(), c] { u->Run(*c); });
  }
  return uploader;
}

Uploader::Uploader(const UploaderSettings& settings, Stats& stats)
    : settings_(settings), stats_(stats) {}

Uploader::~Uploader() { (void)Stop(std::chrono::milliseconds(0)); }

std::optional<std::string> Uploader::RelativePath(int fd) const {
  struct stat st {};
  // Removed: its /proc link names where it was, with " (deleted)" after.
  if (fstat(fd, &st) != 0 || st.st_nlink == 0) return std::nullopt;
  char path[PATH_MAX + 1];
  const std::string link = "/proc/self/fd/" + std::to_string(fd);
  const ssize_t n = readlink(link.c_str(), path, PATH_MAX);
  if (n <= 0) return std::nullopt;
  const std::string_view whole(path, static_cast<size_t>(n));
  if (whole == settings_.backing_root) return std::string();
  const std::string root = settings_.backing_root + "/";
  if (whole.substr(0, root.size()) != root) return std::nullopt;
  return std::string(path + root.size(), static_cast<size_t>(n) - root.size());
}

std::unique_ptr<Uploader::Job> Uploader::MakeJob(int fd, const std::string& relative,
                                                 struct stat* st) const {
  auto job = std::make_unique<Job>();
  job->fd = fd;
  if (fstat(fd, st) != 0 || !S_ISREG(st->st_mode)) return nullptr;
  job->key = settings_.s3.location.KeyOf(relative);
  job->size = static_cast<uint64_t>(st->st_size);
  job->marker = policy::IsCommitMarker(relative.substr(relative.rfind('/') + 1), settings_.markers);
  job->plan = policy::PlanParts(job->size, settings_.part_size);
  std::string text(kMaxChecksumRecordBytes, '\0');
  const ssize_t n = fgetxattr(fd, kChecksumXattr, text.data(), text.size());
  if (n > 0) {
    text.resize(static_cast<size_t>(n));
    Result<ChecksumRecord> record = ParseChecksumRecord(text);
    if (record.ok() && record->size == job->size) job->record = std::move(*record);
  }
  job->logged.path = relative;
  job->logged.inode = static_cast<uint64_t>(st->st_ino);
  job->logged.size = job->size;
  job->logged.mtime_ns = NanosOf(st->st_mtim);
  return job;
}

std::unique_ptr<Uploader::Job> Uploader::RemovalJob(const S3Location& location,
                                                    const std::string& relative) {
  auto job = std::make_unique<Job>();
  job->key = location.KeyOf(relative);
  job->removal = true;
  job->logged.path = relative;
  job->logged.removal = true;
  return job;
}

void Uploader::Enqueue(int dir_fd, const std::string& name, const std::string& relative,
                       const std::string& replaced) {
  if (!policy::IsUploadablePath(relative, settings_.reserved_name)) return;
  const int fd = openat(dir_fd, name.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) {
    // ENOENT: renamed out or removed later in the batch that published it; a rename hands its
    // new name over itself.
    if (errno != ENOENT) {
      spdlog::warn("remote: {} is not uploaded: cannot open it ({})", name, std::strerror(errno));
    }
    return;
  }
  struct stat st {};
  const std::optional<std::string> now = RelativePath(fd);
  // Gone (renamed out or removed) since it was published, or not a file: nothing to do.
  if (!now || now->empty()) {
    close(fd);
    return;
  }
  std::unique_ptr<Job> job = MakeJob(fd, relative, &st);
  if (!job) return;
  std::unique_ptr<Job> removal;
  if (policy::IsUploadablePath(replaced, settings_.reserved_name)) {
    removal = RemovalJob(settings_.s3.location, replaced);
    if (job->size <= settings_.max_copy_size) {
      job->copy_from = removal->key;
      job->logged.copy_from = replaced;
    }
  }
  MutexLock lock(mu_);
  if (stop_) return;
  // The old name's versions not started go no more: the file goes under its new name.
  if (removal) SupersedeLocked(removal->key);
  PushLocked(std::move(job), true);
  if (removal) PushLocked(std::move(removal), true);
  wake_.notify_one();
}

std::unique_ptr<Uploader::Job> Uploader::MoveJob(const S3Location& location,
                                                 const std::string& from, const std::string& to) {
  auto job = std::make_unique<Job>();
  job->key = location.KeyOf(from) + "/";
  job->move_to = location.KeyOf(to) + "/";
  job->logged.path = from;
  job->logged.move_to = to;
  return job;
}

void Uploader::Move(const std::string& from, const std::string& to) {
  if (!policy::IsUploadablePath(from, settings_.reserved_name) ||
      !policy::IsUploadablePath(to, settings_.reserved_name) || from == to) {
    return;
  }
  std::unique_ptr<Job> move = MoveJob(settings_.s3.location, from, to);
  MutexLock lock(mu_);
  if (stop_) return;
  PushLocked(std::move(move), true);
  wake_.notify_one();
}

void Uploader::Remove(const std::string& relative) {
  if (!policy::IsUploadablePath(relative, settings_.reserved_name)) return;
  std::unique_ptr<Job> removal = RemovalJob(settings_.s3.location, relative);
  MutexLock lock(mu_);
  if (stop_) return;
  PushLocked(std::move(removal), true);
  wake_.notify_one();
}

void Uploader::SupersedeLocked(const std::string& key) {
  // Searched from the newest back to the first barrier (the rule of policy::SupersededBy).
  for (auto earlier = jobs_.rbegin(); earlier != jobs_.rend(); ++earlier) {
    Job& candidate = **earlier;
    if (candidate.phase == Job::Phase::kDone) continue;
    if (candidate.key == key &&
        ((candidate.phase == Job::Phase::kWaiting && candidate.generation == 0 &&
          candidate.in_flight == 0) ||
         candidate.phase == Job::Phase::kFailed)) {
      candidate.phase = Job::Phase::kDone;
    }
    if (candidate.marker || candidate.removal || !candidate.move_to.empty()) break;
  }
}

void Uploader::PushLocked(std::unique_ptr<Job> job, bool log) {
  // A waiting version of the same key is superseded: only the newest is uploaded.
  SupersedeLocked(job->key);
  TrimLocked();
  if (log && log_) log_->HandedOver(job->logged);
  job->seq = handed_over_++;
  jobs_.push_back(std::move(job));
}

Status Uploader::SyncLog() { return log_ ? log_->Sync() : Status::Ok(); }

Status Uploader::Resume() {
  policy::LoggedUploads held;
  Result<std::unique_ptr<UploadLog>> log =
      UploadLog::Open(settings_.log_dir_fd, settings_.log_name, &held);
  if (!log.ok()) return log.status();
  log_ = std::move(*log);
  const int root =
      open(settings_.backing_root.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
  if (root < 0) return Status::FromErrno(settings_.backing_root);
  const std::vector<policy::LoggedUploads::Version> pending = held.Pending();
  std::vector<std::unique_ptr<Job>> resumed;
  size_t refused = 0, skipped = 0, held_corrupt = 0;
  for (size_t i = 0; i < pending.size(); ++i) {
    const policy::LoggedUploads::Version& v = pending[i];
    if (!policy::IsUploadablePath(v.path, settings_.reserved_name)) {
      ++refused;
      continue;
    }
    if (!v.move_to.empty()) {
      if (policy::IsUploadablePath(v.move_to, settings_.reserved_name)) {
        resumed.push_back(MoveJob(settings_.s3.location, v.path, v.move_to));
      } else {
        ++refused;
      }
      continue;
    }
    const auto is_barrier = [&](size_t k) {
      const std::string& path = pending[k].path;
      return pending[k].removal || !pending[k].move_to.empty() ||
             policy::IsCommitMarker(path.substr(path.rfind('/') + 1), settings_.markers);
    };
    bool named_again = false;
    for (size_t j = i + 1; j < pending.size() && !named_again; ++j) {
      named_again = pending[j].path == v.path && policy::SupersededBy(i, j, is_barrier);
    }
    const int fd = v.removal || named_again ? -1 : OpenBeneath(root, v.path, O_RDONLY);
    struct stat st {};
    std::unique_ptr<Job> job = fd >= 0 ? MakeJob(fd, v.path, &st) : nullptr;
    const bool same = job && job->logged.inode == v.inode && job->logged.size == v.size &&
                      job->logged.mtime_ns == v.mtime_ns;
    const bool marker =
        policy::IsCommitMarker(v.path.substr(v.path.rfind('/') + 1), settings_.markers);
    if (job && policy::IsUploadablePath(v.copy_from, settings_.reserved_name) &&
        job->size <= settings_.max_copy_size) {
      job->copy_from = settings_.s3.location.KeyOf(v.copy_from);
      job->logged.copy_from = v.copy_from;
    }
    // Given up as corrupt, and the file still as it was then.
    const bool still_corrupt = job && v.given_up && job->logged.size == v.given_up->size &&
                               job->logged.mtime_ns == v.given_up->mtime_ns;
    switch (policy::ResumeLogged(v.removal, marker, job != nullptr, same, named_again,
                                 still_corrupt)) {
      case policy::Resumed::kUpload:
        resumed.push_back(std::move(job));
        break;
      case policy::Resumed::kHold:
        job->phase = Job::Phase::kFailed;
        job->logged.given_up = v.given_up;
        resumed.push_back(std::move(job));
        ++held_corrupt;
        break;
      case policy::Resumed::kRemove:
        resumed.push_back(RemovalJob(settings_.s3.location, v.path));
        break;
      case policy::Resumed::kSkip:
        ++skipped;
        break;
    }
  }
  close(root);
  if (refused > 0) {
    spdlog::error("remote: the upload log names {} paths no mount publishes: left out", refused);
  }
  std::vector<policy::LoggedUploads::Version> kept;
  for (const auto& job : resumed) kept.push_back(job->logged);
  if (Status st = log_->Rewrite(kept); !st.ok()) return st;
  if (held_corrupt > 0) {
    stats_.remote_corrupt_files += held_corrupt;
    spdlog::error("remote: {} files an earlier mount found corrupt on the local disk are still as "
                  "they were: not uploaded; the commit markers handed over after them are held",
                  held_corrupt);
  }
  MutexLock lock(mu_);
  for (auto& job : resumed) PushLocked(std::move(job), false);
  if (!resumed.empty() || skipped > 0) {
    spdlog::info("remote: resuming {} uploads the previous worker left ({} superseded or gone)",
                 resumed.size(), skipped);
  }
  return Status::Ok();
}

bool Uploader::NextTaskLocked(Task* task) {
  if (!swept_) return false;
  const auto now = std::chrono::steady_clock::now();
  bool all_before_done = true;
  std::unordered_set<std::string_view> busy_keys;  // Of the unfinished jobs before this one.
  std::vector<const Job*> moves;  // The unfinished moves before this one.
  // Looks at the first unfinished jobs only: enough to keep every thread busy.
  const size_t window = 4 * clients_.size() + 64;
  for (auto& owned : jobs_) {
    Job& job = *owned;
    if (job.phase == Job::Phase::kDone) continue;
    if (busy_keys.size() >= window) break;
    const bool key_busy = !busy_keys.insert(job.key).second;
    // A copy waits for the upload of its source before it.
    const bool source_busy = !job.copy_from.empty() && busy_keys.count(job.copy_from) > 0;
    // What names an object a move before it takes or gives waits for the move.
    const auto moved_by = [&job](const Job* move) {
      const auto under = [](const std::string& key, const std::string& prefix) {
        return !key.empty() && key.compare(0, prefix.size(), prefix) == 0;
      };
      return under(job.key, move->key) || under(job.key, move->move_to) ||
             under(job.copy_from, move->key) || under(job.copy_from, move->move_to);
    };
    const bool moving = std::any_of(moves.begin(), moves.end(), moved_by);
    const bool barrier = job.marker || job.removal || !job.move_to.empty();
    const bool may_start = !key_busy && !source_busy && !moving &&
                           (!barrier || all_before_done) && now >= job.retry_at;
    all_before_done = false;
    if (!job.move_to.empty()) moves.push_back(&job);
    if (!may_start) continue;
    task->job = &job;
    task->key = job.key;
    task->generation = job.generation;
    task->upload_id = job.upload_id;
    if (job.phase == Job::Phase::kWaiting && job.removal) {
      ++job.in_flight;
      job.phase = Job::Phase::kSingle;
      task->kind = Task::Kind::kDelete;
      return true;
    }
    if (job.phase == Job::Phase::kWaiting && !job.move_to.empty()) {
      ++job.in_flight;
      job.phase = Job::Phase::kSingle;
      task->kind = Task::Kind::kMove;
      return true;
    }
    if (job.phase == Job::Phase::kWaiting && !job.copy_from.empty()) {
      ++job.in_flight;
      job.phase = Job::Phase::kSingle;
      task->kind = Task::Kind::kCopy;
      task->copy_from = job.copy_from;
      return true;
    }
    if (job.phase == Job::Phase::kWaiting) {
      ++job.in_flight;
      job.phase = job.plan.multipart ? Job::Phase::kCreating : Job::Phase::kSingle;
      task->kind = job.plan.multipart ? Task::Kind::kCreate : Task::Kind::kPut;
      return true;
    }
    if (job.phase == Job::Phase::kParts && !job.parts_to_send.empty()) {
      ++job.in_flight;
      task->kind = Task::Kind::kPart;
      task->part = job.parts_to_send.back();
      job.parts_to_send.pop_back();
      return true;
    }
    if (job.phase == Job::Phase::kParts && job.parts_done == job.plan.parts) {
      ++job.in_flight;
      job.phase = Job::Phase::kCompleting;
      task->kind = Task::Kind::kComplete;
      task->parts = job.parts;
      return true;
    }
  }
  return false;
}

void Uploader::AbortOpenUploads(S3Client& client) {
  const std::string& prefix = settings_.s3.location.prefix;
  const std::string under = prefix.empty() ? "" : prefix + "/";
  const RetryHook hook = [this](const Status& why) { return OnRetry(why); };
  size_t aborted = 0;
  // Each listing shows the next 1,000 once those before are aborted; bounded all the same.
  for (int page = 0; page < 100; ++page) {
    Result<std::vector<S3Client::OpenUpload>> open = client.ListMultipartUploads(under, hook);
    if (!open.ok()) {
      MutexLock lock(mu_);
      if (!stop_) {
        spdlog::error("remote: cannot list the multipart uploads left open under {}: {}",
                      settings_.s3.location.ToString(), open.status().message());
      }
      break;
    }
    if (open->empty()) break;
    for (const S3Client::OpenUpload& upload : *open) {
      client.AbortMultipartUpload(upload.key, upload.upload_id);
    }
    aborted += open->size();
  }
  if (aborted > 0) {
    spdlog::info("remote: aborted {} multipart uploads left open under {}", aborted,
                 settings_.s3.location.ToString());
  }
}

void Uploader::Run(S3Client& client) {
  if (&client == clients_.front().get()) {
    if (settings_.abort_open_uploads) AbortOpenUploads(client);
    MutexLock lock(mu_);
    swept_ = true;
    wake_.notify_all();
  }
  MutexLock lock(mu_);
  while (!stop_) {
    Task task;
    if (!NextTaskLocked(&task)) {
      wake_.wait_for(lock, std::chrono::milliseconds(100));
      continue;
    }
    lock.Unlock();
    Perform(client, task);
    lock.Lock();
  }
}

std::optional<uint32_t> Uploader::RecordedCrc32c(const Job& job, uint64_t offset,
                                                 uint64_t length) {
  if (!job.record) return std::nullopt;
  return policy::RecordedCrc32c(job.record->chunk, job.record->size, job.record->sums, offset,
                                length);
}

void Uploader::Perform(S3Client& client, Task& task) {
  Job& job = *task.job;  // Stays in jobs_ until done, and done only through its last task.
  const RetryHook hook = [this](const Status& why) { return OnRetry(why); };
  Status outcome;
  std::string upload_id;
  UploadedPart part;
  std::string etag;  // Of the object a put or a completed upload made.
  uint64_t sent = 0;
  switch (task.kind) {
    case Task::Kind::kPut: {
      Result<std::string> put =
          client.PutObject(task.key, job.fd, 0, job.size, hook, RecordedCrc32c(job, 0, job.size));
      outcome = put.status();
      if (put.ok()) etag = *put;
      sent = job.size;
      break;
    }
    case Task::Kind::kCreate: {
      Result<std::string> id = client.CreateMultipartUpload(task.key, hook);
      outcome = id.status();
      if (id.ok()) upload_id = *id;
      break;
    }
    case Task::Kind::kPart: {
      const uint64_t offset = task.part * job.plan.part_size;
      sent = std::min(job.plan.part_size, job.size - offset);
      Result<UploadedPart> answer =
          client.UploadPart(task.key, task.upload_id, task.part + 1, job.fd, offset, sent, hook,
                            RecordedCrc32c(job, offset, sent));
      outcome = answer.status();
      if (answer.ok()) part = *answer;
      break;
    }
    case Task::Kind::kComplete: {
      Result<std::string> completed =
          client.CompleteMultipartUpload(task.key, task.upload_id, task.parts, hook);
      outcome = completed.status();
      if (completed.ok()) etag = *completed;
      break;
    }
    case Task::Kind::kDelete:
      outcome = client.DeleteObject(task.key, hook);
      break;
    case Task::Kind::kMove:
      // The paths are set once, before the job is shared: read without the lock.
      outcome = MoveObjects(client, job.logged.path, job.logged.move_to, hook);
      break;
    case Task::Kind::kCopy: {
      // Copied only when the old name's object is this version (nothing else writes it: the
      // old name's uploads before this one are done).
      const std::optional<std::string> stored = StoredEtag(job);
      Result<std::string> source = stored ? client.HeadObject(task.copy_from, hook)
                                          : Result<std::string>(Status::Error(ESTALE, ""));
      if (!source.ok() || !policy::SameEtag(*source, *stored)) {
        outcome = source.ok() || source.status().err() == ENOENT || !stored
                      ? Status::Error(ESTALE, "this version is not on the store under " +
                                                  task.copy_from)
                      : source.status();
        break;
      }
      Result<std::string> copied = client.CopyObject(task.copy_from, task.key, hook);
      outcome = copied.status();
      if (copied.ok()) etag = *copied;
      break;
    }
  }
  // Bytes the store refused for their checksum: read again and checked against their record.
  const bool digest_mismatch = outcome.err() == EBADMSG &&
                               (task.kind == Task::Kind::kPut || task.kind == Task::Kind::kPart);
  const std::optional<bool> matches_record =
      digest_mismatch ? LocalBytesMatchRecord(job, task.kind == Task::Kind::kPart
                                                       ? task.part * job.plan.part_size
                                                       : 0,
                                              sent)
                      : std::nullopt;
  MutexLock lock(mu_);
  --job.in_flight;
  if (task.generation != job.generation) {  // The job was started again meanwhile.
    TrimLocked();
    return;
  }
  if (!outcome.ok()) {
    if (stop_) return;
    if (task.kind == Task::Kind::kCopy &&
        (outcome.err() == ESTALE || outcome.err() == ENOENT)) {
      // This version is not on the store under the old name: it is sent.
      job.copy_from.clear();
      job.phase = Job::Phase::kWaiting;
      wake_.notify_all();
      return;
    }
    if (digest_mismatch) {
      const policy::DigestVerdict verdict =
          policy::JudgeDigestMismatch(matches_record, ++job.digest_mismatches);
      if (verdict != policy::DigestVerdict::kSendAgain) {
        const bool corrupt = verdict == policy::DigestVerdict::kCorrupt;
        GiveUpLocked(job, outcome, corrupt);
        if (!corrupt) return;
        const std::string path = job.logged.path;  // The job may go once the lock is let go.
        lock.Unlock();
        // Durably: later mounts hold it without sending it again.
        if (Status st = SyncLog(); !st.ok()) {
          spdlog::error("remote: the upload log cannot be written ({}): the next mount sends {} "
                        "again", st.ToString(), path);
        }
        return;
      }
    }
    if (task.kind == Task::Kind::kPart && outcome.err() != ENOENT) {
      job.parts_to_send.push_back(task.part);
    } else if (task.kind == Task::Kind::kComplete && outcome.err() != ENOENT) {
      job.phase = Job::Phase::kParts;  // Complete again after the back-off.
    } else {
      // A single put, a create, or the store lost the upload (NoSuchUpload): from the start.
      job.phase = Job::Phase::kWaiting;
      job.upload_id.clear();
      job.parts_to_send.clear();
      job.uploaded = 0;
      ++job.generation;
    }
    FailedLocked(job, outcome);
    return;
  }
  ++finished_steps_;
  last_error_ = Status::Ok();
  switch (task.kind) {
    case Task::Kind::kCreate:
      job.upload_id = upload_id;
      job.parts.assign(job.plan.parts, {});
      job.parts_to_send.clear();
      for (auto p = static_cast<unsigned>(job.plan.parts); p-- > 0;) job.parts_to_send.push_back(p);
      job.parts_done = 0;
      job.phase = Job::Phase::kParts;
      wake_.notify_all();
      return;
    case Task::Kind::kPart:
      stats_.remote_bytes_uploaded += sent;
      job.uploaded += sent;
      job.parts[task.part] = part;
      ++job.parts_done;
      wake_.notify_all();
      return;
    case Task::Kind::kPut:
      stats_.remote_bytes_uploaded += sent;
      job.uploaded += sent;
      [[fallthrough]];
    case Task::Kind::kCopy:
    case Task::Kind::kComplete:
      stats_.remote_files_uploaded++;
      RecordStored(job, etag);
      if (settings_.on_uploaded) {
        settings_.on_uploaded(job.logged.path, job.logged.inode, job.logged.size,
                              job.logged.mtime_ns, etag);
      }
      FinishLocked(job);
      return;
    case Task::Kind::kDelete:
    case Task::Kind::kMove:
      FinishLocked(job);
      return;
  }
}

Status Uploader::MoveObjects(S3Client& client, const std::string& from, const std::string& to,
                             const RetryHook& hook) const {
  const std::string from_key = settings_.s3.location.KeyOf(from) + "/";
  const std::string to_key = settings_.s3.location.KeyOf(to) + "/";
  const int root =
      open(settings_.backing_root.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
  // Each listing bounded by the store's page; their number by this.
  constexpr unsigned kMaxPages = 1'000'000;
  size_t copied = 0;
  Status failed;
  std::string token;
  for (unsigned page_count = 0; failed.ok() && page_count < kMaxPages; ++page_count) {
    Result<S3Client::ListPage> page =
        client.ListObjects(from_key, token, policy::kListPageKeys, hook, /*whole_tree=*/true);
    if (!page.ok()) {
      failed = page.status();
      break;
    }
    for (const S3Client::ListedObject& object : page->objects) {
      if (object.key.size() <= from_key.size() ||
          object.key.compare(0, from_key.size(), from_key) != 0) {
        continue;  // Not asked for.
      }
      const std::string under = object.key.substr(from_key.size());
      if (object.size > settings_.max_copy_size) {
        // UploadPartCopy would copy it in parts, but libcurl 7.88 signs its range header out of
        // S3's order (as x-amz-copy-source-if-match): the file goes again.
        failed = SendLocalVersion(client, root, to + "/" + under, object, to_key + under, hook);
        if (!failed.ok()) break;
        ++copied;
        continue;
      }
      Result<std::string> copy = client.CopyObject(object.key, to_key + under, hook);
      if (!copy.ok()) {
        failed = copy.status();
        break;
      }
      ++copied;
      const std::string local = to + "/" + under;
      if (root < 0 || !policy::IsUploadablePath(local, settings_.reserved_name)) continue;
      const int fd = OpenBeneath(root, local, O_RDONLY);
      if (fd < 0) continue;
      // A placeholder of the source (evicted from the local tier) names the copy before the
      // source goes; the local file copied, when it records the source, records the copy.
      MovePlaceholderMark(fd, object.key, *copy, to_key + under);
      struct stat st {};
      if (copy->empty()) {
        close(fd);
        continue;
      }
      if (const std::optional<std::string> text = StoredVersionText(fd, &st)) {
        const uint64_t size = static_cast<uint64_t>(st.st_size);
        const int64_t mtime_ns = NanosOf(st.st_mtim);
        const std::optional<std::string> recorded = policy::StoredEtagOf(*text, size, mtime_ns);
        if (recorded && policy::SameEtag(*recorded, object.etag)) {
          const std::string record = policy::FormatStoredVersion(*copy, size, mtime_ns);
          (void)fsetxattr(fd, kStoredVersionAttr, record.data(), record.size(), 0);
        }
      }
      close(fd);
    }
    // A token the store repeats would loop forever.
    if (page->next_token.empty() || page->next_token == token) break;
    token = page->next_token;
  }
  if (root >= 0) close(root);
  if (!failed.ok()) return failed;
  // Every object is under the new name: the old ones go, the first page again until none is left.
  for (unsigned page_count = 0; page_count < kMaxPages; ++page_count) {
    Result<S3Client::ListPage> page =
        client.ListObjects(from_key, "", policy::kListPageKeys, hook, /*whole_tree=*/true);
    if (!page.ok()) return page.status();
    size_t removed = 0;
    for (const S3Client::ListedObject& object : page->objects) {
      if (object.key.compare(0, from_key.size(), from_key) != 0) continue;
      if (Status st = client.DeleteObject(object.key, hook); !st.ok()) return st;
      ++removed;
    }
    if (removed == 0) break;
  }
  if (copied > 0) spdlog::info("remote: {} objects moved from {}/ to {}/", copied, from, to);
  return Status::Ok();
}

Status Uploader::SendLocalVersion(S3Client& client, int root, const std::string& relative,
                                  const S3Client::ListedObject& object, const std::string& key,
                                  const RetryHook& hook) const {
  const std::string named = "s3://" + settings_.s3.location.bucket + "/" + object.key;
  const Status stale = Status::Error(
      ESTALE, named + " is larger than the store copies and " + relative +
                  " is not its version on the backing directory: not moved");
  const int fd = root >= 0 && policy::IsUploadablePath(relative, settings_.reserved_name)
                     ? OpenBeneath(root, relative, O_RDONLY)
                     : -1;
  if (fd < 0) return stale;
  struct stat st {};
  std::unique_ptr<Job> job = MakeJob(fd, relative, &st);
  if (!job) return stale;
  // A placeholder (evicted, or fetched in part) holds no bytes of the object to send.
  if (fgetxattr(job->fd, kRemotePlaceholderAttr, nullptr, 0) >= 0) return stale;
  const std::optional<std::string> text = StoredVersionText(job->fd, &st);
  const std::optional<std::string> recorded =
      text ? policy::StoredEtagOf(*text, job->size, NanosOf(st.st_mtim)) : std::nullopt;
  if (!recorded || !policy::SameEtag(*recorded, object.etag) || job->size != object.size) {
    return stale;
  }
  Result<std::string> etag = std::string();
  if (!job->plan.multipart) {
    etag = client.PutObject(key, job->fd, 0, job->size, hook, RecordedCrc32c(*job, 0, job->size));
    if (etag.ok()) stats_.remote_bytes_uploaded += job->size;
  } else {
    Result<std::string> id = client.CreateMultipartUpload(key, hook);
    if (!id.ok()) return id.status();
    std::vector<UploadedPart> parts;
    for (uint64_t part = 0; part < job->plan.parts; ++part) {
      const uint64_t offset = part * job->plan.part_size;
      const uint64_t length = std::min(job->plan.part_size, job->size - offset);
      Result<UploadedPart> sent =
          client.UploadPart(key, *id, static_cast<unsigned>(part + 1), job->fd, offset, length,
                            hook, RecordedCrc32c(*job, offset, length));
      if (!sent.ok()) {
        client.AbortMultipartUpload(key, *id);
        return sent.status();
      }
      parts.push_back(*sent);
      stats_.remote_bytes_uploaded += length;
    }
    etag = client.CompleteMultipartUpload(key, *id, parts, hook);
    if (!etag.ok()) client.AbortMultipartUpload(key, *id);
  }
  if (!etag.ok()) return etag.status();
  spdlog::info("remote: {} is larger than the store copies: {} sent again as {}", named, relative,
               key);
  RecordStored(*job, *etag);
  return Status::Ok();
}

std::optional<bool> Uploader::LocalBytesMatchRecord(const Job& job, uint64_t offset,
                                                    uint64_t length) {
  const std::optional<uint32_t> recorded = RecordedCrc32c(job, offset, length);
  if (!recorded) return std::nullopt;
  std::vector<char> buffer(std::min<uint64_t>(std::max<uint64_t>(length, 1), 1 << 20));
  Crc32c crc;
  for (uint64_t done = 0; done < length;) {
    const ssize_t got =
        pread(job.fd, buffer.data(), std::min<uint64_t>(buffer.size(), length - done),
              static_cast<off_t>(offset + done));
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) return false;  // Unreadable, or shorter than recorded: not the bytes recorded.
    crc.Update(buffer.data(), static_cast<size_t>(got));
    done += static_cast<uint64_t>(got);
  }
  return crc.value() == *recorded;
}

void Uploader::GiveUpLocked(Job& job, const Status& why, bool corrupt) {
  job.phase = Job::Phase::kFailed;
  struct stat st {};
  if (corrupt && fstat(job.fd, &st) == 0) {
    job.logged.given_up = policy::LoggedUploads::Version::GivenUp{
        static_cast<uint64_t>(st.st_size), NanosOf(st.st_mtim)};
    if (log_) log_->GivenUp(job.seq - log_base_, *job.logged.given_up);
  }
  ++job.generation;  // Its tasks still in flight are ignored.
  job.parts_to_send.clear();
  stats_.remote_errors++;
  if (corrupt) {
    stats_.remote_corrupt_files++;
    spdlog::error("remote: {}: its bytes on the local disk no longer match the checksums recorded "
                  "when it was written (the store refused them: {}): corrupt, not uploaded; the "
                  "commit markers handed over after it are held",
                  job.logged.path, why.message());
  } else {
    spdlog::error("remote: {}: the store refused its bytes for their checksum {} times though "
                  "they match their record ({}): not uploaded; the commit markers handed over "
                  "after it are held",
                  job.logged.path, job.digest_mismatches, why.message());
  }
  last_error_ = why;
  progress_.notify_all();
  wake_.notify_all();
}

std::optional<std::string> Uploader::StoredEtag(const Job& job) {
  struct stat st {};
  const std::optional<std::string> text = StoredVersionText(job.fd, &st);
  // The file as handed over: its bytes are those of the version recorded.
  if (!text || static_cast<uint64_t>(st.st_size) != job.logged.size ||
      NanosOf(st.st_mtim) != job.logged.mtime_ns) {
    return std::nullopt;
  }
  return policy::StoredEtagOf(*text, job.logged.size, job.logged.mtime_ns);
}

void Uploader::RecordStored(const Job& job, const std::string& etag) {
  struct stat st {};
  if (etag.empty() || fstat(job.fd, &st) != 0 ||
      static_cast<uint64_t>(st.st_size) != job.logged.size ||
      NanosOf(st.st_mtim) != job.logged.mtime_ns) {
    return;
  }
  const std::string record =
      policy::FormatStoredVersion(etag, job.logged.size, job.logged.mtime_ns);
  // Not made durable: a record lost in a crash only has the file fetched again.
  (void)fsetxattr(job.fd, kStoredVersionAttr, record.data(), record.size(), 0);
}

policy::PendingChange Uploader::PendingOf(const std::string& relative) const {
  MutexLock lock(mu_);
  const std::string under = relative + "/";
  // Whether `path` is `relative` or under it.
  const auto names = [&](const std::string& path) {
    return path == relative || path.compare(0, under.size(), under) == 0;
  };
  for (auto it = jobs_.rbegin(); it != jobs_.rend(); ++it) {
    const Job& job = **it;
    if (job.phase == Job::Phase::kDone) continue;
    if (!job.move_to.empty()) {
      // A move: its old name (and what is under it) is being removed, its new one uploaded.
      const std::string& from = job.logged.path;
      if (relative == from || relative.compare(0, from.size() + 1, from + "/") == 0) {
        return policy::PendingChange::kRemoval;
      }
      if (names(from) || names(job.logged.move_to) ||
          relative.compare(0, job.logged.move_to.size() + 1, job.logged.move_to + "/") == 0) {
        return policy::PendingChange::kUpload;
      }
      continue;
    }
    if (!names(job.logged.path)) continue;
    return job.removal ? policy::PendingChange::kRemoval : policy::PendingChange::kUpload;
  }
  return policy::PendingChange::kNone;
}

void Uploader::FinishLocked(Job& job) {
  job.phase = Job::Phase::kDone;
  TrimLocked();
  progress_.notify_all();
  wake_.notify_all();
}

void Uploader::FailedLocked(Job& job, const Status& why) {
  ++job.failures;
  job.retry_at = std::chrono::steady_clock::now() + policy::RetryDelay(job.failures, 0);
  stats_.remote_errors++;
  if (logged_kinds_.insert(policy::FailureKind(why.err(), why.message())).second) {
    spdlog::error("remote: upload failed, will retry (said once for this kind until everything "
                  "is uploaded): {}", why.message());
  }
  last_error_ = why;
  wake_.notify_all();
}

void Uploader::TrimLocked() {
  const uint64_t before = trimmed_;
  while (!jobs_.empty() && jobs_.front()->phase == Job::Phase::kDone &&
         jobs_.front()->in_flight == 0) {
    jobs_.pop_front();
    ++trimmed_;
  }
  if (jobs_.empty() && !logged_kinds_.empty()) {
    spdlog::info("remote: everything handed over is uploaded; failures are said again from now");
    logged_kinds_.clear();
  }
  if (!log_ || trimmed_ == before) return;
  if (jobs_.empty()) {
    log_->Empty();
    log_base_ = handed_over_;
  } else {
    log_->Done(trimmed_ - log_base_);
  }
}

bool Uploader::OnRetry(const Status& why) {
  stats_.remote_retries++;
  MutexLock lock(mu_);
  if (!stop_ && logged_kinds_.insert(policy::FailureKind(why.err(), why.message())).second) {
    spdlog::warn("remote: retrying (said once for this kind until everything is uploaded): {}",
                 why.message());
  }
  last_error_ = why;
  return !stop_;
}

UploadProgress Uploader::Progress() const {
  MutexLock lock(mu_);
  UploadProgress p;
  p.handed_over = handed_over_;
  p.done_in_order = trimmed_;
  for (const auto& job : jobs_) {
    if (job->phase == Job::Phase::kDone) continue;
    ++p.pending_files;
    if (job->phase == Job::Phase::kFailed) ++p.failed_files;
    p.pending_bytes += job->size - std::min(job->size, job->uploaded);
  }
  p.last_error = last_error_;
  return p;
}

Status Uploader::Stop(std::chrono::milliseconds idle_limit) {
  MutexLock lock(mu_);
  if (threads_.empty()) return Status::Ok();
  uint64_t steps = finished_steps_;
  auto idle_since = std::chrono::steady_clock::now();
  while (!jobs_.empty() && !stop_) {
    const auto now = std::chrono::steady_clock::now();
    if (finished_steps_ != steps) {
      steps = finished_steps_;
      idle_since = now;
    }
    if (now - idle_since >= idle_limit) break;
    progress_.wait_for(lock, std::min<std::chrono::nanoseconds>(std::chrono::milliseconds(100),
                                                                idle_limit - (now - idle_since)));
  }
  Status left;
  size_t pending = 0;
  std::string named;
  for (const auto& job : jobs_) {
    if (job->phase == Job::Phase::kDone) continue;
    if (++pending <= 10) named += (named.empty() ? "" : ", ") + job->key;
  }
  if (pending > 0) {
    left = Status::Error(EIO, std::to_string(pending) + " files not uploaded (" + named +
                                  (pending > 10 ? ", ..." : "") + "); the last error: " +
                                  last_error_.ToString());
  }
  stop_ = true;
  wake_.notify_all();
  lock.Unlock();
  for (std::thread& t : threads_) t.join();
  threads_.clear();
  lock.Lock();
  for (const auto& job : jobs_) {
    if (!job->upload_id.empty() && job->phase != Job::Phase::kDone) {
      clients_.front()->AbortMultipartUpload(job->key, job->upload_id);
    }
  }
  if (pending == 0 && log_) log_->Remove();
  return left;
}

}  // namespace ckptfs
