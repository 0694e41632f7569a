// Reclaimer: frees memory held by files when the arena runs short. Evicts files whose newest
// version is durable and that are unchanged and closed (their content is opened again from the
// backing store when needed), and spills the full blocks of files still being written to spill
// files in the staging directory.
#pragma once

#include <deque>
#include <functional>
#include <memory>

#include "core/stats/stats.h"
#include "core/tree/namespace.h"
#include "iouring/env.h"

namespace ckptfs {

class Reclaimer {
 public:
  // Spill files are made in `staging_fd` (not owned), named after `worker` (Config::worker).
  Reclaimer(Namespace& ns, Stats& stats, int staging_fd, uint32_t worker)
      : ns_(ns), stats_(stats), staging_fd_(staging_fd), worker_(worker) {}

  // `inode`'s newest version is durable: it may be evicted once closed. Candidates are kept, by
  // inode number (inode numbers are never reused), in the order they first became durable; each
  // time the list has doubled since it was last pruned (and holds at least kPruneMinCandidates),
  // files gone since and files listed twice are dropped from it, so that it stays within about
  // twice the files alive.
  void AddCandidateLocked(const InodeRef& inode) REQUIRES(ns_lock);
  void ClearLocked() REQUIRES(ns_lock) { candidates_.clear(); }
  size_t CandidatesLocked() const REQUIRES(ns_lock) { return candidates_.size(); }
  static constexpr size_t kPruneMinCandidates = 4096;

  // Drops the content of a durable, unchanged, closed file from memory (and its descriptor); it
  // is opened again by name when needed. Returns the blocks freed (0: not such a file).
  size_t UnloadLocked(const InodeRef& inode) REQUIRES(ns_lock, inode->mu);
  // Evicts candidates until `wanted` blocks are freed or none is left. Returns the blocks freed.
  size_t Reclaim(size_t wanted) EXCLUDES(ns_lock);
  // Moves the full blocks of the largest file still being written to its spill file (a named
  // file of the staging directory, core/backing/backing_store.h), written through `env`'s batched
  // Write (the flusher's thread only). Returns the blocks freed (0: no file to spill), or why
  // the spill failed, naming the file (its blocks stay in memory).
  Result<size_t> Spill(Env& env) EXCLUDES(ns_lock);
  // Told (the file's lock held) after a file's blocks moved to a spill file. Set before use.
  void SetSpillObserver(std::function<void(Inode&)> observer) { spilled_ = std::move(observer); }

 private:
  Namespace& ns_;
  Stats& stats_;
  const int staging_fd_;
  const uint32_t worker_;
  uint64_t spill_files_ = 0;  // Made so far; the flusher's thread only.
  std::function<void(Inode&)> spilled_;
  std::deque<uint64_t> candidates_ GUARDED_BY(ns_lock);
  size_t prune_at_ GUARDED_BY(ns_lock) = kPruneMinCandidates;
};

}  // namespace ckptfs
