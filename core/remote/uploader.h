// Uploader: copies each file version published on the backing directory to the object store, in
// the order it was published (close order), markers last.
//
// A version is handed over (Enqueue) once it is durable under its name on the backing directory,
// as a read-only descriptor of that version: a later version published over the name leaves it
// as it was. A file of up to part_size bytes is one PutObject; a larger one a multipart upload
// whose parts go in parallel (`concurrency` requests in flight in all, one thread and connection
// each); the object appears under its key only when complete (S3 completes a multipart upload
// atomically). Versions of one key are uploaded one after another, a waiting one dropped when a
// newer one is handed over with no marker or removal between them. A commit marker
// (config.commit_markers) starts only once every version handed over before it is on the store;
// so does a removal (of a renamed file's old name, or of a removed file). Failed requests are
// retried (policy::JudgeRequest) and, when they fail for good, the whole step again after a
// back-off: nothing handed over is dropped while the mount runs. Bytes the store refuses for
// their checksum (BadDigest) are read again and checked against the file's checksum record
// (policy::JudgeDigestMismatch): corrupt on the local disk, or refused too often, the version is
// given up (counted, logged, shown in stats as failed), and the markers after it are held.
// Each version uploaded records the ETag of its object (kStoredVersionAttr,
// core/remote/remote_read_policy.h).
//
// The store has no rename. A renamed file is handed over under its new name with the removal of
// its old one (Replaced): waiting versions of the old name are dropped (back to the last barrier,
// as policy::SupersededBy says), so a file renamed before its upload starts goes only under its
// final name; a file whose version is on the store under the old name (its kStoredVersionAttr
// says so) is copied there by the store (CopyObject, once the old name's upload in flight is
// done), never sent again; up to max_copy_size (S3: 5 GiB), above that it is sent again. The
// old name's object is removed after, like every removal, once everything before it is on the
// store; a marker renamed into place goes, like every marker, after everything before it.
// A renamed directory (Move) moves every object under its old name: once everything handed over
// before it is on the store, each is copied by the store under the new name, then the old ones
// are removed (an object over max_copy_size is sent from its file under the new name, when that
// is still the object's version); what is handed over after it under either name waits for it.
// Logged, a move cut
// by a crash is done again by the next mount: every object stays under at least one name.
// A version given up as corrupt is recorded in the upload log: later mounts hold it (and the
// markers after it) without sending it again, until a newer version of its name is handed over.
//
// With an upload log (settings.log_dir_fd), what is handed over survives the worker and the
// daemon (core/remote/upload_log.h): Start resumes what the log names as not done, in its order
// (policy::ResumeLogged), before anything else is handed over, after aborting the multipart
// uploads left open under the prefix by the uploaders before it (so no upload of theirs
// lingers; none is ever visible under a final key).
//
// Thread-safe: any thread may call any method.
#pragma once

#include <sys/stat.h>

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "core/base/clock.h"
#include "core/base/status.h"
#include "core/base/thread_annotations.h"
#include "core/remote/remote_policy.h"
#include "core/remote/remote_read_policy.h"
#include "core/remote/s3_client.h"
#include "core/remote/upload_log.h"
#include "core/stats/stats.h"

namespace ckptfs {

struct UploaderSettings {
  S3Settings s3;
  uint64_t part_size = 16ull << 20;
  unsigned concurrency = 8;
  // The largest object the store copies in one request (S3's CopyObject limit); a larger one
  // renamed is sent again from its local file.
  uint64_t max_copy_size = policy::kMaxCopySize;
  std::vector<std::string> markers;  // Base names of the commit markers.
  std::string backing_root;          // The backing directory's real path.
  // The upload log: its directory (-1: none; must outlive the uploader) and name.
  int log_dir_fd = -1;
  std::string log_name;
  // Whether Start aborts the multipart uploads open under the prefix (false when other mounts,
  // whose uploads are theirs, share it).
  bool abort_open_uploads = true;
  // The private area of the backing directory (".ckptfs"): logged paths under it are refused.
  std::string reserved_name;
  // Told of each file version that reached the store (its path, inode, size and mtime as handed
  // over, and the object's ETag, empty when the store gave none), on an upload thread with the
  // uploader's lock held: it must not call the uploader.
  using OnUploaded = std::function<void(const std::string& path, uint64_t ino, uint64_t size,
                                        int64_t mtime_ns, const std::string& etag)>;
  OnUploaded on_uploaded;
};

// What the remote tier has done, for stats.
struct UploadProgress {
  uint64_t handed_over = 0;     // Versions handed over so far.
  uint64_t done_in_order = 0;   // Of those, from the first: uploaded (or superseded) without gap.
  uint64_t pending_files = 0;
  uint64_t failed_files = 0;    // Of those, given up (Uploader::GiveUpLocked): never sent again.
  uint64_t pending_bytes = 0;
  Status last_error;            // Of the last failed request; ok once a request succeeds after it.
};

class Uploader {
 public:
  // Resumes what the upload log names (with one) and starts `settings.concurrency` threads, each
  // with its client. `stats` must outlive it.
  static Result<std::unique_ptr<Uploader>> Start(const UploaderSettings& settings, Stats& stats);
  ~Uploader();  // Stop(0).

  // Hands over the file `name` of backing directory `dir_fd`, as it is now (opened here; a file
  // gone, or outside the backing root, is skipped), as the object of `relative` (its path when
  // the change was journaled: a directory renamed since is moved after it), and, when `replaced`
  // is not empty (the name a renamed file had), the removal of that object, once everything
  // handed over before the removal (the file under its new name included) is on the store.
  // Logged, not yet durably: see SyncLog.
  void Enqueue(int dir_fd, const std::string& name, const std::string& relative,
               const std::string& replaced = "") EXCLUDES(mu_);
  // Hands over the move of every object under directory `from` to directory `to` (both relative
  // to the backing root; a directory renamed). Logged, not yet durably: see SyncLog.
  void Move(const std::string& from, const std::string& to) EXCLUDES(mu_);
  // Hands over the removal of the object of `relative` (a file removed from under the backing
  // root): it starts once everything handed over before it is on the store, so the store loses a
  // file only after the markers closed before its removal. Logged, not yet durably: see SyncLog.
  void Remove(const std::string& relative) EXCLUDES(mu_);
  // What is still to be sent about the object of `relative`, or about the objects under it when
  // it names a directory: the last change handed over of them that is not done (an upload, or a
  // removal), or none.
  policy::PendingChange PendingOf(const std::string& relative) const EXCLUDES(mu_);
  // The path of open file or directory `fd` under the backing root ("" for the root itself);
  // nullopt when it is not under it, or gone (removed, or its fd closed).
  std::optional<std::string> RelativePath(int fd) const;
  // Makes what was handed over so far durable in the upload log (ok without one); the first
  // failure to write it since the last call otherwise (the uploads go on, in memory only).
  Status SyncLog();
  UploadProgress Progress() const EXCLUDES(mu_);
  // Waits until everything handed over is uploaded, giving up once nothing has been uploaded for
  // `idle_limit`; then stops the threads (uploads in flight are aborted). Returns what is left,
  // naming it (kept in the upload log), or ok (the upload log is removed).
  Status Stop(std::chrono::milliseconds idle_limit) EXCLUDES(mu_);

 private:
  struct Job;
  struct Task;
  Uploader(const UploaderSettings& settings, Stats& stats);
  // Opens the upload log and queues what it names as not done (before the threads start).
  Status Resume() EXCLUDES(mu_);
  // A job uploading the file open as `fd` (owned by the job: closed when it is not made) as the
  // object of `relative`; null when it is not a regular file.
  std::unique_ptr<Job> MakeJob(int fd, const std::string& relative, struct stat* st) const;
  // A job removing the object of `relative`.
  static std::unique_ptr<Job> RemovalJob(const S3Location& location, const std::string& relative);
  // A job moving the objects under directory `from` to directory `to`.
  static std::unique_ptr<Job> MoveJob(const S3Location& location, const std::string& from,
                                      const std::string& to);
  // Copies every object under directory `from` to `to` (relative paths), then removes them;
  // where the backing directory's file under `to` records the object it was copied from
  // (kStoredVersionAttr), the record names the copy. An object larger than the store copies is
  // sent from that file when the file is still the object's version (ESTALE otherwise).
  Status MoveObjects(S3Client& client, const std::string& from, const std::string& to,
                     const RetryHook& hook) const;
  // Sends the backing directory's file `relative` (under `root`) as `key` when it is the
  // version stored as `object` (ESTALE otherwise), in parts one after the other; records the
  // new object on the file.
  Status SendLocalVersion(S3Client& client, int root, const std::string& relative,
                          const S3Client::ListedObject& object, const std::string& key,
                          const RetryHook& hook) const;
  // Appends `job` (its version logged when `log`), superseding waiting versions of its key.
  void PushLocked(std::unique_ptr<Job> job, bool log) REQUIRES(mu_);
  // Aborts the multipart uploads open under the prefix (on the first thread, before any task).
  void AbortOpenUploads(S3Client& client) EXCLUDES(mu_);
  void Run(S3Client& client) EXCLUDES(mu_);
  // The next step to take, in order; false when there is none now.
  bool NextTaskLocked(Task* task) REQUIRES(mu_);
  // The CRC32C of a range of `job`'s file from its checksum record; nullopt when it has none
  // for that range.
  static std::optional<uint32_t> RecordedCrc32c(const Job& job, uint64_t offset, uint64_t length);
  // Takes a step; then records its outcome.
  void Perform(S3Client& client, Task& task) EXCLUDES(mu_);
  // Records on the uploaded version of `job` (when it is still as handed over) the object's
  // `etag` (kStoredVersionAttr): listings of later mounts compare it with the store's.
  static void RecordStored(const Job& job, const std::string& etag);
  // The ETag of the object `job`'s version is on the store as (its kStoredVersionAttr), when the
  // file is still that version; nullopt otherwise.
  static std::optional<std::string> StoredEtag(const Job& job);
  // Whether bytes [offset, offset + length) of `job`'s file, read again, match its checksum
  // record; nullopt when the record covers no such range.
  static std::optional<bool> LocalBytesMatchRecord(const Job& job, uint64_t offset,
                                                   uint64_t length);
  // Gives `job` up for good (policy::JudgeDigestMismatch: its local bytes `corrupt`, or refused
  // too often): counted, logged, its key never sent again while the mount runs (nor by later
  // mounts when `corrupt`: recorded in the upload log); what waits for it (markers, removals)
  // waits.
  void GiveUpLocked(Job& job, const Status& why, bool corrupt) REQUIRES(mu_);
  // Drops the waiting versions of `key` handed over since the last barrier (policy::SupersededBy):
  // only what is handed over next for it (a newer version, or its removal) goes.
  void SupersedeLocked(const std::string& key) REQUIRES(mu_);
  void FinishLocked(Job& job) REQUIRES(mu_);
  void FailedLocked(Job& job, const Status& why) REQUIRES(mu_);
  // Drops the done jobs at the front.
  void TrimLocked() REQUIRES(mu_);
  bool OnRetry(const Status& why) EXCLUDES(mu_);

  const UploaderSettings settings_;
  Stats& stats_;
  std::vector<std::unique_ptr<S3Client>> clients_;
  std::vector<std::thread> threads_;

  // Taken after the mount's namespace lock (PendingOf), never before it: nothing called with it
  // held (on_uploaded) takes that lock.
  mutable Mutex mu_;
  std::condition_variable_any wake_;      // With mu_: a task may be ready, or stop.
  std::condition_variable_any progress_;  // With mu_: a job finished.
  std::deque<std::unique_ptr<Job>> jobs_ GUARDED_BY(mu_);  // Handed-over order; done ones trimmed.
  uint64_t handed_over_ GUARDED_BY(mu_) = 0;
  uint64_t trimmed_ GUARDED_BY(mu_) = 0;
  uint64_t finished_steps_ GUARDED_BY(mu_) = 0;  // Steps done, for Stop's progress check.
  Status last_error_ GUARDED_BY(mu_);
  // The kinds of failure logged (policy::FailureKind), each once until everything is uploaded.
  std::set<std::string> logged_kinds_ GUARDED_BY(mu_);
  bool stop_ GUARDED_BY(mu_) = false;
  bool swept_ GUARDED_BY(mu_) = false;  // AbortOpenUploads is done: tasks may start.
  std::unique_ptr<UploadLog> log_;  // Null without one.
  uint64_t log_base_ GUARDED_BY(mu_) = 0;  // handed_over_ when the log was last emptied.
};

}  // namespace ckptfs
