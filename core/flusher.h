// Flusher: the background thread that replays the journal on the backing store.
//
// A batch is a run of due journal entries from the head. Each sealed file version in it is
// written to its own file in the staging directory (<backing>/.ckptfs/staging) through the
// Env (io_uring: all files of the batch in flight at once) and made durable; then, in journal
// order, the staged files are renamed to their final names and the namespace changes are applied;
// then the touched directories are made durable. A failed batch is retried with back-off; the
// entries before the failure stay done, the failure is reported to waiters and kept on the inode.
//
// Thread model: one flusher thread makes the Env's batched writes and syncs. Other threads call
// the public methods.
#pragma once

#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/config.h"
#include "core/journal.h"
#include "core/stats.h"
#include "core/thread_annotations.h"
#include "iouring/env.h"

namespace ckptfs {

class Flusher {
 public:
  struct Hooks {
    // Called with the namespace lock held, after `inode`'s newest version became durable.
    std::function<void(const InodeRef& inode)> on_clean;
    // Called with the namespace lock held: a printable path for messages.
    std::function<std::string(const InodeRef& inode)> path_of;
    // Number of writers waiting for memory.
    std::function<size_t()> waiting_writers;
    // Called without locks when writers wait and nothing is due: frees memory held by files that
    // are still being written, through `env`. Returns the blocks freed.
    std::function<size_t(Env& env)> spill;
  };

  // Every call on the backing store goes through `env`, whose Write and Sync only this thread
  // calls; `env` must outlive the Flusher.
  // The flush policy runs on `clock`.
  Flusher(const Config& config, Env& env, Clock& clock, int staging_fd, NamespaceMutex& ns_mu,
          Journal& journal, Stats& stats, Hooks hooks);
  ~Flusher();

  void Start();
  // Flushes everything (retrying failures until `retry_for` has passed), then stops the thread.
  // Returns the last error if entries remain unflushed.
  Status Drain(std::chrono::milliseconds retry_for) EXCLUDES(ns_lock);

  // Wakes the flusher after an append.
  void NotifyLocked() REQUIRES(ns_lock) { wake_.notify_all(); }
  // Ask for everything appended so far to be flushed now (ignores flush_delay).
  void Hurry() EXCLUDES(ns_lock);

  // Blocks until every entry with seq <= `seq` is durable; or, when a flush covering `seq` fails
  // while waiting (or failed before and is still failing), returns that failure.
  Status WaitDurable(uint64_t seq) EXCLUDES(ns_lock);

  const Status& last_error_locked() const REQUIRES(ns_lock) { return last_error_; }
  bool has_unresolved_error_locked() const REQUIRES(ns_lock) { return !last_error_.ok(); }
  std::string backend_name() const { return backend_name_; }

 private:
  void Run() EXCLUDES(ns_lock);
  struct BatchResult {
    size_t applied = 0;  // Entries from the start now on the backing store.
    size_t durable = 0;  // Of those, entries durable (0 when syncing their directories failed).
    Status error;        // Why it stopped early, or why its directories are not durable.
    EntryRef failed;     // The entry the error is about.
  };
  BatchResult ApplyBatch(const std::vector<EntryRef>& batch) EXCLUDES(ns_lock);
  Status ApplyNamespaceOp(const JournalEntry& e, std::vector<int>* touched_dirs) EXCLUDES(ns_lock);
  // Creates the FIFO, socket or device node of a kMknod entry in directory `dir`, with its
  // mode, owner (when root) and times; it shows there only once complete.
  Status MakeNode(const JournalEntry& e, int dir);
  // The directories an applied entry changed, to sync again.
  void AddAppliedDirs(const JournalEntry& e, std::vector<int>* touched_dirs) EXCLUDES(ns_lock);
  void CompleteBatch(const std::vector<EntryRef>& batch, const BatchResult& result)
      REQUIRES(ns_lock);
  // The backing directory of `dir` (-1 when it has none yet).
  static int DirFd(const InodeRef& dir);

  const Config config_;
  Env& env_;
  Clock& clock_;
  const std::string backend_name_;
  const int staging_fd_;
  const size_t max_batch_entries_;  // policy::MaxBatchEntries of RLIMIT_NOFILE at start.
  NamespaceMutex& ns_mu_;
  Journal& journal_;  // Its own lock, taken after the namespace lock.
  Stats& stats_;
  Hooks hooks_;
  std::thread thread_;

  std::condition_variable_any wake_;      // With ns_mu_.
  std::condition_variable_any progress_;  // With ns_mu_.
  uint64_t force_seq_ GUARDED_BY(ns_lock) = 0;
  bool draining_ GUARDED_BY(ns_lock) = false;
  bool stop_ GUARDED_BY(ns_lock) = false;
  bool stopped_ GUARDED_BY(ns_lock) = false;
  Status last_error_ GUARDED_BY(ns_lock);
  uint64_t error_epoch_ GUARDED_BY(ns_lock) = 0;
  unsigned consecutive_failures_ GUARDED_BY(ns_lock) = 0;
  Clock::time_point retry_at_ GUARDED_BY(ns_lock){};
};

}  // namespace ckptfs
