// WorkerTakeover: one worker of a mount taking over from the one before, through the public
// calls of Filesystem and of its parts. With the previous worker alive: Handoff (it writes what
// the next one takes) and Restore (the next one takes it; core/recovery/handoff.h). After it
// crashed: RecoverCrashedWorker replays its recovery log (core/recovery/recovery_log.h) through
// the operations a client would have made, then takes over what the kernel held of it
// (core/recovery/kernel_state_record.h); RecoverEarlierMount, for an earlier mount whose daemon
// died, rescues the files it had open for writing, then replays its log.
//
// Not thread-safe: each call runs with no other call on the Filesystem running (before Start,
// or with the FUSE loop stopped).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <unordered_set>

#include "core/base/config.h"
#include "core/base/status.h"
#include "core/base/thread_annotations.h"
#include "core/filesystem/handle_table.h"
#include "core/filesystem/kernel_state_keeper.h"
#include "core/filesystem/special_nodes.h"
#include "core/flush/flusher.h"
#include "core/memory/arena.h"
#include "core/memory/file_content.h"
#include "core/recovery/handoff.h"
#include "core/recovery/kernel_state_record.h"
#include "core/recovery/recovery_log.h"
#include "core/stats/stats.h"
#include "core/tree/journal.h"
#include "core/tree/namespace.h"
#include "iouring/env.h"

namespace ckptfs {

class Filesystem;

class WorkerTakeover {
 public:
  // The parts of `fs` it drives; all must outlive it. `log` is null with a private arena.
  struct Parts {
    const Config& config;
    Env& env;
    int root_fd;
    int staging_fd;
    Stats& stats;
    Arena& arena;
    RecoveryLog* log;
    Journal& journal;
    Namespace& ns;
    HandleTable& handles;
    KernelStateKeeper& kernel_state;
    SpecialNodeRegistry& specials;
    Flusher& flusher;
    // -o replicas: this worker's replication run (core/replication/wire.h); empty otherwise.
    std::string replication_run;
  };
  WorkerTakeover(Filesystem& fs, const Parts& parts);

  // Filesystem::Handoff, Restore (core/filesystem/worker_takeover_handoff.cc),
  // RecoverCrashedWorker and RecoverEarlierMount (core/filesystem/worker_takeover_recovery.cc).
  Result<HandoffImage> Handoff() EXCLUDES(ns_lock);
  Status Restore(const HandoffImage& image) EXCLUDES(ns_lock);
  Status RecoverCrashedWorker() EXCLUDES(ns_lock) {
    return ForgetOtherRuns(Recover(Predecessor::kCrashedWorker));
  }
  Status RecoverEarlierMount() EXCLUDES(ns_lock) {
    return ForgetOtherRuns(Recover(Predecessor::kEarlierMount));
  }

 private:
  // Whose shared memory a recovery reads: the crashed worker's of this mount (same kernel
  // connection), or that of an earlier mount of the backing store whose daemon died.
  enum class Predecessor { kCrashedWorker, kEarlierMount };
  Status Recover(Predecessor predecessor) EXCLUDES(ns_lock);
  // Shared mode, after a recovery that succeeded (`recovered`): removes this node's stand-in
  // records of runs other than this worker's, which nobody will read
  // (core/replication/stand_in_record.h). Returns `recovered`.
  Status ForgetOtherRuns(Status recovered);

  // The directory holding a path and the path's last name.
  struct PathParent {
    uint64_t dir = 0;
    std::string name;
  };
  // What a recovery took over from the crashed worker: the cache's blocks (slot -> block) and
  // the spill files (name -> file) its log and record name, and the inodes whose sealed
  // version the replay of its log made.
  struct Adopted {
    std::unordered_map<uint64_t, BlockRef> blocks;
    std::unordered_map<std::string, std::shared_ptr<BackingFile>> spills;
    std::unordered_set<uint64_t> replayed;
  };

  // Takes ownership of an open file an earlier worker gave the kernel as `number`, counted as
  // open on its file.
  void AdoptEarlierHandleLocked(std::unique_ptr<Handle> h, uint64_t number) REQUIRES(ns_lock);

  // Recovery (core/filesystem/worker_takeover_recovery.cc, which also defines the constructor):
  // where a logged path is, and one logged entry made again through the operations a client
  // would call. The inode at `path` (from the root), looked up as a client would; the directory
  // holding it and its last name; and the inode's number.
  Result<InodeRef> ResolveLocked(const std::string& path) REQUIRES(ns_lock);
  Result<PathParent> ParentOfLocked(const std::string& path) REQUIRES(ns_lock);
  Result<PathParent> ParentOf(const std::string& path) EXCLUDES(ns_lock);
  Result<uint64_t> InodeAt(const std::string& path) EXCLUDES(ns_lock);
  Status ReplayEntry(const LoggedEntry& e, Adopted& adopted) EXCLUDES(ns_lock);
  Status ReplayPublish(const LoggedEntry& e, Adopted& adopted) EXCLUDES(ns_lock);
  // Replays the pending entries of the log (their blocks adopted).
  Status Replay(const LoggedState& state, Adopted& adopted) EXCLUDES(ns_lock);

  // Taking over the kernel state record after a crash (core/filesystem/filesystem_kernel_state.cc).
  // The spill file `name` of the staging directory, opened once.
  Result<std::shared_ptr<BackingFile>> AdoptSpillFile(const std::string& name, Adopted& adopted);
  // RecoverCrashedWorker: the nodes and handles the crashed worker had given the kernel, with
  // their content. Then records them again.
  void RecoverKernelState(const KernelStateRecord::State& state, Adopted& adopted)
      EXCLUDES(ns_lock);
  // The content a node of the record held (its blocks adopted, its spill file taken), or why not.
  Result<FileContent> RecordedContent(const KernelStateRecord::Node& n, Adopted& adopted);
  // RecoverEarlierMount: the content of the files it had open for writing, saved to a
  // rescue directory (never published: they were not closed); the record emptied.
  Status RescueOpenFiles(const KernelStateRecord::State& state, Adopted& adopted)
      EXCLUDES(ns_lock);

  Filesystem& fs_;
  const Config& config_;
  Env* const env_;
  const int root_fd_;
  const int staging_fd_;
  Stats& stats_;
  Arena& arena_;
  RecoveryLog* const log_;
  Journal& journal_;
  Namespace& ns_;
  HandleTable& handles_;
  KernelStateKeeper& kernel_state_;
  SpecialNodeRegistry& specials_;
  Flusher* const flusher_;
  const std::string replication_run_;
};

}  // namespace ckptfs
