// ReplicationFeed: what connects a mount's journal to its Replicator (-o shared,replicas=N). A
// thread of its own, every few milliseconds: hands each newly sealed file version to the
// replicator in close order (its path and a copy of its snapshot, which shares the blocks), and
// each rename to a commit marker sent as the marker's replica (policy::RenameSentAsMarker: the
// renamed file's snapshot under the marker's name, and the old name), tells
// it the settled point (partners drop what is durable and not a commit marker held back), and, every poll interval, the live
// members and their endpoints (partners are chosen again) and which versions were superseded
// before their flush (a chunk rewritten a hundred times pins one version's blocks, not a
// hundred); and up to where its partners could replay its journal (versions, directory
// creations and renames sent as markers, policy::ReplayableThrough), for what they are told they
// cover.
//
// Thread-safe. Lock order: the namespace lock, then the journal's, while it reads the journal;
// nothing of the mount is locked when it calls the replicator.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <thread>

#include "core/base/thread_annotations.h"
#include "core/replication/replicator.h"
#include "core/shared/shared_mount.h"
#include "core/tree/journal.h"
#include "core/tree/namespace.h"

namespace ckptfs {

class ReplicationFeed {
 public:
  // All must outlive the feed.
  ReplicationFeed(Journal& journal, Namespace& ns, SharedMount& shared,
                  replication::Replicator& replicator, std::chrono::milliseconds poll_interval);
  ~ReplicationFeed();
  void Start() EXCLUDES(mu_);
  void Stop() EXCLUDES(mu_);
  // Hands what was sealed to the replicator now rather than at the next tick (an fsync waits).
  void Nudge() EXCLUDES(mu_);
  bool stopped() const EXCLUDES(mu_);

 private:
  void Run() EXCLUDES(mu_);
  // Hands over the versions sealed, and the renames sent as markers' replicas, since the last
  // call, each under its name when it was journaled.
  void FeedSealed() EXCLUDES(ns_lock);
  // The seq of the first entry not durable, or held, that no partner replays
  // (policy::PartnerReplays); 0 when none is.
  uint64_t FirstPendingNamespaceChange() const EXCLUDES(ns_lock);

  Journal& journal_;
  Namespace& ns_;
  SharedMount& shared_;
  replication::Replicator& replicator_;
  const std::chrono::milliseconds poll_interval_;
  uint64_t fed_ = 0;  // Used by the feed's thread only.
  std::thread thread_;
  mutable Mutex mu_;
  std::condition_variable_any wake_;  // With mu_: stop, or a nudge.
  bool stop_ GUARDED_BY(mu_) = false;
  bool nudged_ GUARDED_BY(mu_) = false;
};

}  // namespace ckptfs
