// Flusher: the background thread that replays the journal on the backing store.
//
// A batch is a run of due journal entries from the head. Each sealed file version in it is
// written to its own file in the staging directory (<backing>/.ckptfs/staging) through the
// Backend (io_uring: all files of the batch in flight at once) and made durable; then, in journal
// order, the staged files are renamed to their final names and the namespace changes are applied;
// then the touched directories are made durable. A failed batch is retried with back-off; the
// entries before the failure stay done, the failure is reported to waiters and kept on the inode.
//
// Thread model: one flusher thread owns the Backend. Other threads call the public methods.
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
#include "iouring/backend.h"

namespace ckptfs {

class Flusher {
 public:
  struct Hooks {
    // Called with ns_mu held, after `inode`'s newest version became durable.
    std::function<void(const InodeRef& inode)> on_clean;
    // Called with ns_mu held: a printable path for messages.
    std::function<std::string(const InodeRef& inode)> path_of;
    // Number of writers waiting for memory.
    std::function<size_t()> waiting_writers;
    // Called without locks when writers wait and nothing is due: frees memory held by files that
    // are still being written, through `backend`. Returns the blocks freed.
    std::function<size_t(Backend& backend)> spill;
  };

  Flusher(const Config& config, std::unique_ptr<Backend> backend, int staging_fd,
          std::mutex& ns_mu, Journal& journal, Stats& stats, Hooks hooks);
  ~Flusher();

  void Start();
  // Flushes everything (retrying failures until `retry_for` has passed), then stops the thread.
  // Returns the last error if entries remain unflushed.
  Status Drain(std::chrono::milliseconds retry_for);

  // Wakes the flusher after an append; call with ns_mu held.
  void NotifyLocked() { wake_.notify_all(); }
  // Ask for everything appended so far to be flushed now (ignores flush_delay).
  void Hurry();

  // Blocks until every entry with seq <= `seq` is durable; or, when a flush covering `seq` fails
  // while waiting (or failed before and is still failing), returns that failure. Takes ns_mu.
  Status WaitDurable(uint64_t seq);

  // Called with ns_mu held.
  const Status& last_error_locked() const { return last_error_; }
  bool has_unresolved_error_locked() const { return !last_error_.ok(); }
  std::string backend_name() const { return backend_name_; }

 private:
  void Run();
  // Applies a batch; returns how many entries from its start are done. Sets `*error` when
  // it stopped early.
  size_t ApplyBatch(const std::vector<EntryRef>& batch, Status* error, EntryRef* failed);
  Status ApplyNamespaceOp(const JournalEntry& e, std::vector<int>* touched_dirs);
  // Creates the FIFO, socket or device node of a kMknod entry in directory `dir`, with its
  // mode, owner (when root) and times; it shows there only once complete.
  Status MakeNode(const JournalEntry& e, int dir);
  void CompleteBatch(const std::vector<EntryRef>& batch, size_t done, const Status& error,
                     const EntryRef& failed);
  int DirFd(const InodeRef& dir);  // Takes ns_mu.

  const Config config_;
  std::unique_ptr<Backend> backend_;
  const std::string backend_name_;
  const int staging_fd_;
  const size_t max_batch_entries_;  // policy::MaxBatchEntries of RLIMIT_NOFILE at start.
  std::mutex& ns_mu_;
  Journal& journal_;
  Stats& stats_;
  Hooks hooks_;
  std::thread thread_;

  // Guarded by ns_mu_.
  std::condition_variable_any wake_;
  std::condition_variable_any progress_;
  uint64_t force_seq_ = 0;
  bool draining_ = false;
  bool stop_ = false;
  bool stopped_ = false;
  Status last_error_;
  uint64_t error_epoch_ = 0;
  unsigned consecutive_failures_ = 0;
  Clock::time_point retry_at_{};
};

}  // namespace ckptfs
