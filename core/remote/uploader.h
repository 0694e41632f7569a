// Uploader: copies each file version published on the backing directory to the object store, in
// the order it was published (close order), markers last.
//
// A version is handed over (Enqueue) once it is durable under its name on the backing directory,
// as a read-only descriptor of that version: a later version published over the name leaves it
// as it was. A file of up to part_size bytes is one PutObject; a larger one a multipart upload
// whose parts go in parallel (`concurrency` requests in flight in all, one thread and connection
// each); the object appears under its key only when complete (S3 completes a multipart upload
// atomically). Versions of one key are uploaded one after another, a waiting one dropped when a
// newer one is handed over. A commit marker (config.commit_markers) starts only once every
// version handed over before it is on the store; so does the removal of a renamed file's old
// name. Failed requests are retried (policy::JudgeRequest) and, when they fail for good, the
// whole step again after a back-off: nothing handed over is dropped while the mount runs. Not yet
// kept across a worker's crash or a remount.
//
// Thread-safe: any thread may call any method.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "core/base/clock.h"
#include "core/base/status.h"
#include "core/base/thread_annotations.h"
#include "core/remote/remote_policy.h"
#include "core/remote/s3_client.h"
#include "core/stats/stats.h"

namespace ckptfs {

struct UploaderSettings {
  S3Settings s3;
  uint64_t part_size = 16ull << 20;
  unsigned concurrency = 8;
  std::vector<std::string> markers;  // Base names of the commit markers.
  std::string backing_root;          // The backing directory's real path.
};

// What the remote tier has done, for stats.
struct UploadProgress {
  uint64_t handed_over = 0;     // Versions handed over so far.
  uint64_t done_in_order = 0;   // Of those, from the first: uploaded (or superseded) without gap.
  uint64_t pending_files = 0;
  uint64_t pending_bytes = 0;
  Status last_error;            // Of the last failed request; ok once a request succeeds after it.
};

class Uploader {
 public:
  // Starts `settings.concurrency` threads, each with its client. `stats` must outlive it.
  static Result<std::unique_ptr<Uploader>> Start(const UploaderSettings& settings, Stats& stats);
  ~Uploader();  // Stop(0).

  // The name a renamed file had: its object is removed once everything handed over before the
  // removal (the file under its new name included) is on the store.
  struct Replaced {
    int dir_fd = -1;  // -1: none.
    std::string name;
  };
  // Hands over the file `name` of backing directory `dir_fd`, as it is now (opened here; a file
  // gone, or outside the backing root, is skipped), and the removal of `replaced` ({}: none).
  void Enqueue(int dir_fd, const std::string& name, const Replaced& replaced) EXCLUDES(mu_);
  UploadProgress Progress() const EXCLUDES(mu_);
  // Waits until everything handed over is uploaded, giving up once nothing has been uploaded for
  // `idle_limit`; then stops the threads (uploads in flight are aborted). Returns what is left,
  // naming it, or ok.
  Status Stop(std::chrono::milliseconds idle_limit) EXCLUDES(mu_);

 private:
  struct Job;
  struct Task;
  Uploader(const UploaderSettings& settings, Stats& stats);
  // The path of open file or directory `fd` under the backing root ("" for the root itself);
  // nullopt when it is not under it (or gone).
  std::optional<std::string> RelativePath(int fd) const;
  void Run(S3Client& client) EXCLUDES(mu_);
  // The next step to take, in order; false when there is none now.
  bool NextTaskLocked(Task* task) REQUIRES(mu_);
  // Takes a step; then records its outcome.
  void Perform(S3Client& client, Task& task) EXCLUDES(mu_);
  void FinishLocked(Job& job) REQUIRES(mu_);
  void FailedLocked(Job& job, const Status& why) REQUIRES(mu_);
  // Drops the done jobs at the front.
  void TrimLocked() REQUIRES(mu_);
  bool OnRetry(const Status& why) EXCLUDES(mu_);

  const UploaderSettings settings_;
  Stats& stats_;
  std::vector<std::unique_ptr<S3Client>> clients_;
  std::vector<std::thread> threads_;

  mutable Mutex mu_;
  std::condition_variable_any wake_;      // With mu_: a task may be ready, or stop.
  std::condition_variable_any progress_;  // With mu_: a job finished.
  std::deque<std::unique_ptr<Job>> jobs_ GUARDED_BY(mu_);  // Handed-over order; done ones trimmed.
  uint64_t handed_over_ GUARDED_BY(mu_) = 0;
  uint64_t trimmed_ GUARDED_BY(mu_) = 0;
  uint64_t finished_steps_ GUARDED_BY(mu_) = 0;  // Steps done, for Stop's progress check.
  Status last_error_ GUARDED_BY(mu_);
  bool stop_ GUARDED_BY(mu_) = false;
};

}  // namespace ckptfs
