// Flusher: the background thread that replays the journal on the backing store.
//
// A batch is a run of due journal entries from the head. Each sealed file version in it is
// written to its own file in the staging directory (<backing>/.ckptfs/staging) through the
// Env (io_uring: all files of the batch in flight at once) and made durable; then, in journal
// order, the staged files are renamed to their final names and the namespace changes are applied;
// then the touched directories are made durable. A failed batch is retried with back-off; the
// entries before the failure stay done, the failure is reported to the client (which keeps it on
// the inode) and to waiters.
//
// Thread model: one flusher thread makes the Env's batched writes and syncs. Other threads call
// the public methods. The flusher knows nothing of the namespace lock: the inodes learn what
// became durable through FlushClient::Flushed. Lock order: the Filesystem's namespace lock, then
// the flusher's lock, then the journal's lock.
#pragma once

#include <atomic>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "core/base/config.h"
#include "core/base/thread_annotations.h"
#include "core/flush/held_markers.h"
#include "core/integrity/checksum_manifest.h"
#include "core/integrity/checksum_record.h"
#include "core/integrity/read_back.h"
#include "core/shared/shared_commit.h"
#include "core/stats/stats.h"
#include "core/tree/journal.h"
#include "iouring/env.h"

namespace ckptfs {

// What one batch did on the backing store.
struct FlushReport {
  // Durable now, in journal order.
  std::span<const EntryRef> durable;
  // After those: on the backing store, not durable yet (a directory sync failed); a later batch
  // syncs their directories again.
  std::span<const EntryRef> applied;
  // Why the batch stopped early, or why its directories are not durable (ok: neither), and the
  // entry that is about (null: none).
  Status error;
  EntryRef failed;
  // The backing directory, or its .ckptfs, was removed.
  bool backing_gone = false;
};

// The flusher's view of the Filesystem. Every call comes from the flusher thread, with none of
// the flusher's or the journal's locks held.
class FlushClient {
 public:
  virtual ~FlushClient() = default;
  // Applies a batch's report to its inodes (on the backing store, durable versions, flush
  // errors). Returns the report's error as waiters see it (naming the failed file), ok when none.
  // The journal completes the batch after this returns: until then its entries are started.
  virtual Status Flushed(const FlushReport& report) = 0;
  // How many writers wait for memory.
  virtual size_t WritersWaiting() = 0;
  // Frees memory held by files still being written, through `env`, when writers wait and nothing
  // is due. Returns the blocks freed, or why that failed (naming the file).
  virtual Result<size_t> Spill(Env& env) = 0;
  // The path of the entry's subject in the mount, for messages.
  virtual std::string PathOf(const EntryRef& entry) = 0;
};

// Shared mode: posts the commit of a marker to the other members (SharedCommits::Post).
using PostCommitFn = std::function<Result<std::string>(const std::string& marker_path)>;

class Flusher {
 public:
  // Every call on the backing store goes through `env`, whose Write and Sync only this thread
  // calls; `env`, `journal`, `stats` and `client` must outlive the Flusher.
  // The flush policy runs on `clock`.
  Flusher(const Config& config, Env& env, Clock& clock, int staging_fd, Journal& journal,
          Stats& stats, FlushClient& client);
  ~Flusher();

  // Before Start, in shared mode: the entries that publish a commit marker (config.commit_markers)
  // are held (core/flush/held_markers.h); their commits are posted through `post`.
  // `durable_advanced` is called, with no lock held, after a batch made entries durable.
  void HoldMarkers(PostCommitFn post, std::function<void()> durable_advanced);
  // Before Start, after HoldMarkers: a marker whose name is taken on the backing store when it
  // would be held is dropped instead, never published over what is there, logged with `why`.
  void DropMarkersOverTakenNames(std::string why);
  void Start();
  // Flushes everything (retrying failures until `retry_for` has passed), then stops the thread.
  // Returns the last error if entries remain unflushed.
  Status Drain(std::chrono::milliseconds retry_for) EXCLUDES(mu_);

  // Wakes the flusher after an append.
  void Notify() EXCLUDES(mu_);
  // Ask for everything appended so far to be flushed now (ignores flush_delay).
  void Hurry() EXCLUDES(mu_);

  // Blocks until every entry with seq <= `seq` is durable; or, when a flush covering `seq` fails
  // while waiting (or failed before and is still failing), returns that failure. Either way the
  // client has applied the report of that batch (FlushClient::Flushed) by then.
  Status WaitDurable(uint64_t seq) EXCLUDES(mu_);

  // Like WaitDurable, and then until no marker with seq <= `seq` is held; returns the failed commit
  // of the newest marker finished up to `seq`, if it failed.
  Status WaitCommitted(uint64_t seq) EXCLUDES(mu_);
  // Commits decided (SharedCommits::Tick): the markers are published, or never are.
  void CommitsDecided(const std::vector<CommitOutcome>& outcomes) EXCLUDES(mu_);
  // Markers held now, and the failure of the newest finished one (ok when it was published).
  size_t held_markers() const EXCLUDES(mu_);
  Status last_commit_failure() const EXCLUDES(mu_);

  // The error of the last batch (ok once one succeeds).
  Status last_error() const EXCLUDES(mu_);
  // Why the writers waiting for memory cannot have it: the last spill failed (ok once one
  // succeeds, or once no writer waits). Spills are retried with the back-off of batches.
  Status spill_error() const EXCLUDES(mu_);
  std::string backend_name() const { return backend_name_; }
  // True while a batch is being applied (any thread may read it, lock-free).
  const std::atomic<bool>& applying() const { return applying_; }

 private:
  void Run() EXCLUDES(mu_);
  struct BatchResult {
    size_t applied = 0;  // Entries from the start now on the backing store.
    size_t durable = 0;  // Of those, entries durable (0 when syncing their directories failed).
    Status error;        // Why it stopped early, or why its directories are not durable.
    EntryRef failed;     // The entry the error is about.
  };
  BatchResult ApplyBatch(const std::vector<EntryRef>& batch) EXCLUDES(mu_);
  Status ApplyNamespaceOp(const JournalEntry& e, std::vector<int>* touched_dirs) EXCLUDES(mu_);
  // Opens the new staging file `name` of publish `e` with `flags`. Its inode is made in the
  // backing directory of the file's first name (O_TMPFILE there, then linked into the staging
  // directory), so that the backing filesystem places it as it places a file created in that
  // directory: ext4 allocates a file's inode in its directory's block group, and without a
  // journal it steps over every inode freed in the last 30 s, one lookup each, so that a single
  // staging directory cost 0.3 ms per file after the previous checkpoint's files were deleted.
  // Made in the staging directory when the parent has no backing directory yet, or that fails
  // (the backing filesystem has no O_TMPFILE: never tried again).
  Result<int> CreateStagingFile(const JournalEntry& e, const std::string& name, int flags);
  // Keeps `record` with the staging file `fd` (core/integrity/checksum_record.h); nothing where
  // the backing store keeps no user extended attributes (said once in the log).
  Status RecordChecksum(int fd, const ChecksumRecord& record);
  // -o verify=markers: takes the outcome of reading the staged file of `entry` back from the
  // backing store (core/integrity/read_back.h). A mismatch is logged and counted, and fails the
  // entry with EIO: its batch stops before it is published, and the retry writes it again from
  // memory.
  Status CheckReadBack(const EntryRef& entry, const ReadBackOutcome& outcome);
  // Renames the staged file `staged_name` to every name of publish `e`.
  Status PublishStaged(const JournalEntry& e, const std::string& staged_name,
                       std::vector<int>* touched_dirs);
  // Phase 2 of a batch in shared mode: holds entry `e` when it is a marker (true), with its
  // staged file and the checksum of its bytes, else drops the held markers it supersedes.
  bool HoldOrSupersede(const EntryRef& e, const std::string& staged_name,
                       const ChecksumRecord& checksum) EXCLUDES(mu_);
  // Without user xattrs: the checksum records to set in the manifests of directories (by fd).
  using Manifests = std::map<int, ChecksumManifest>;
  // Publish `e` is on the backing store with `checksum`: the inode learns it, and, without user
  // xattrs, `manifests` get its names.
  void NotePublished(const JournalEntry& e, const ChecksumRecord& checksum, Manifests* manifests);
  // Rename or link `e` was applied on the backing store: without user xattrs, the records of the
  // names it moved (`manifests` first, else the manifests on the backing store) go to their new
  // names in `manifests` (a rename's old directory is rewritten, which drops the old name).
  void CarryRecords(const JournalEntry& e, Manifests* manifests);
  // The record of `name` in directory `dir`: in `manifests`, else its directory's manifest.
  std::optional<ChecksumRecord> ManifestRecord(int dir, const std::string& name,
                                               const Manifests& manifests);
  // Writes `manifests` into their directories (named in the staging directory after `seq`);
  // failures are logged and counted, not retried.
  void KeepManifests(const Manifests& manifests, uint64_t seq);
  // Posts the commits of new held markers, and publishes (or fails) the decided ones.
  void ServeHeldMarkers() EXCLUDES(mu_);
  // Gives up held markers that will never be published: removes their staged files, releases
  // their entries.
  void DropHeld(const std::vector<HeldMarker>& dropped, const char* why) EXCLUDES(mu_);
  // Creates the FIFO, socket or device node of a kMknod entry in directory `dir`, with its
  // mode, owner (when root) and times; it shows there only once complete.
  Status MakeNode(const JournalEntry& e, int dir);
  // Syncs each directory in `dirs` once (-1: none), or the whole filesystem when there are many;
  // the first error.
  Status SyncDirectories(std::vector<int> dirs);
  // The directories an applied entry changed, to sync again.
  void AddAppliedDirs(const JournalEntry& e, std::vector<int>* touched_dirs);
  // Reports the batch to the client, then completes it in the journal, then tells waiters: so a
  // waiter never returns before the inodes show its batch, and the Filesystem never sees an entry
  // done whose inode does not show it yet.
  // Counts a file durable under its name: its batch took `took` (none: a held marker, whose
  // batch was counted before its commit).
  void CountPublished(const JournalEntry& e, std::optional<std::chrono::nanoseconds> took);
  // `took`: how long the batch was applied.
  void CompleteBatch(const std::vector<EntryRef>& batch, const BatchResult& result,
                     std::chrono::nanoseconds took) EXCLUDES(mu_);
  // The backing directory of `dir` (-1 when it has none yet).
  static int DirFd(const InodeRef& dir);
  // Whether a name the entry would publish (or rename to) exists on the backing store now.
  bool TargetTaken(const JournalEntry& e);
  // Takes the outcome of a spill (ok also when no writer waits any more): the standing
  // spill_error, its back-off, and a log line when its cause changes.
  void NoteSpillLocked(const Status& outcome, bool writers_wait) REQUIRES(mu_);

  const Config config_;
  Env& env_;
  Clock& clock_;
  const std::string backend_name_;
  const int staging_fd_;
  bool tmpfile_in_place_ = true;  // Flusher thread only: O_TMPFILE works on the backing store.
  bool xattrs_supported_ = true;  // Flusher thread only: the backing store keeps user xattrs.
  bool read_back_from_page_cache_ = false;  // Flusher thread only: said once in the log.
  const size_t max_batch_entries_;  // policy::MaxBatchEntries of RLIMIT_NOFILE at start.
  Journal& journal_;  // Its own lock, taken after mu_.
  Stats& stats_;
  FlushClient& client_;
  std::thread thread_;

  // The flusher's lock: after the namespace lock, before the journal's.
  mutable Mutex mu_;
  std::condition_variable_any wake_;      // With mu_: something to flush, or stop.
  std::condition_variable_any progress_;  // With mu_: a batch completed, or the thread stopped.
  uint64_t force_seq_ GUARDED_BY(mu_) = 0;
  bool draining_ GUARDED_BY(mu_) = false;
  bool stop_ GUARDED_BY(mu_) = false;
  bool stopped_ GUARDED_BY(mu_) = false;
  std::atomic<bool> applying_{false};
  Status last_error_ GUARDED_BY(mu_);
  PostCommitFn post_commit_;  // Set before Start; empty: markers are not held.
  // Set before Start; not empty: markers over taken names are dropped.
  std::string drop_markers_why_;
  std::function<void()> durable_advanced_;
  HeldMarkers held_ GUARDED_BY(mu_);
  uint64_t error_epoch_ GUARDED_BY(mu_) = 0;
  unsigned consecutive_failures_ GUARDED_BY(mu_) = 0;
  Clock::time_point retry_at_ GUARDED_BY(mu_){};
  Status spill_error_ GUARDED_BY(mu_);
  unsigned consecutive_spill_failures_ GUARDED_BY(mu_) = 0;
  Clock::time_point spill_retry_at_ GUARDED_BY(mu_){};
};

}  // namespace ckptfs
