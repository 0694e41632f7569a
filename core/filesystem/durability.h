// Durability: what is sealed made durable on the backing store. Owns the Flusher (the journal
// replayed on the backing store), the Reclaimer (memory given back: durable files evicted, others
// spilled) and, in shared mode, the SharedMount (markers committed with the other mounts). It is
// the flusher's FlushClient: each flush report is applied to its inodes (on the backing store,
// durable versions, flush errors, files to evict). A sync waits here and names the files not
// durable; at unmount everything is drained or saved to a rescue directory.
//
// Thread-safe: any thread may call any method but Start, Stop and JoinSharedMount (before Start,
// at destruction); flush reports come on the flusher's thread.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "core/backing/backing_store.h"
#include "core/base/clock.h"
#include "core/base/config.h"
#include "core/base/status.h"
#include "core/base/thread_annotations.h"
#include "core/flush/flusher.h"
#include "core/filesystem/replication_feed.h"
#include "core/flush/reclaim.h"
#include "core/memory/arena.h"
#include "core/remote/uploaded_point.h"
#include "core/remote/uploader.h"
#include "core/replication/replicator.h"
#include "core/replication/stand_in.h"
#include "core/shared/shared_mount.h"
#include "core/stats/stats.h"
#include "core/tree/journal.h"
#include "core/tree/namespace.h"
#include "iouring/env.h"

namespace ckptfs {

class Durability final : private FlushClient {
 public:
  // What it works on; all must outlive it. The flush policy runs on `clock`.
  struct Parts {
    const Config& config;
    Env& env;
    const BackingStore& store;
    Clock& clock;
    Stats& stats;
    Arena& arena;
    Journal& journal;
    Namespace& ns;
  };
  explicit Durability(const Parts& parts);

  // Shared mode, before Start: joins the mounts sharing the backing directory, or with -o remote
  // (`remote`: its settings; null without) the object store (whose members wait for each
  // other's uploads: a member reports as durable what is on the store); markers are then held until the group commits them
  // (core/flush/held_markers.h). With -o replicas, first
  // starts receiving partners' replicas (its endpoint goes into the member file); fails when the
  // group secret cannot be read or the address cannot be bound.
  Status JoinSharedMount(const S3Settings* remote) EXCLUDES(ns_lock);
  // With -o remote, before Start (and before a recovery): resumes the uploads the upload log in
  // the private area names as not done, then uploads every file version made durable from then
  // on (core/remote/uploader.h, upload_log.h), to the store of `remote`. Fails when the log
  // cannot be written. `on_uploaded` (may be empty) is UploaderSettings::on_uploaded.
  Status ConnectRemote(const S3Settings& remote,
                       UploaderSettings::OnUploaded on_uploaded = nullptr);
  // Before Start, after taking over from the process before this one (`taken`: how that went):
  // in shared mode, a takeover that lost something does not acknowledge for that process
  // (SharedMount::ForgetPredecessor). Returns `taken`.
  Status TookOver(Status taken);
  // Starts the flusher thread (and the shared mount's).
  void Start();
  // Leaves the shared mount, if any: its markers are no longer committed.
  void LeaveSharedMount();
  // At a handoff to the next worker, which takes this member's place (it acknowledges for this
  // incarnation and posts the held markers again): stops replicating and stepping the shared
  // mount, leaving its member file and requests as they are.
  void HandOverSharedMount();
  // Stops the flusher and leaves the shared mount (at destruction, before the namespace goes).
  void Stop();

  Flusher& flusher() const { return *flusher_; }
  Reclaimer& reclaimer() { return reclaimer_; }
  // Null unless shared mode.
  SharedMount* shared_mount() const { return shared_.get(); }
  // Null unless -o remote.
  const Uploader* uploader() const { return uploader_.get(); }
  // Null unless -o replicas.
  const replication::Replicator* replicator() const { return replicator_.get(); }
  const replication::StandInWriter* stand_in() const { return stand_in_.get(); }

  // Waits until everything journaled up to `point` is durable (in shared mode, its markers
  // committed): the error names every file sealed by then and not durable (the first 100). Ok
  // but a spill failure when writers are stuck on memory.
  Status WaitDurable(uint64_t point) EXCLUDES(ns_lock);
  // -o replicas: waits until everything journaled up to `point` is in every partner's memory, or
  // durable (with fewer live partners than replicas, until it is durable). Fails as WaitDurable
  // when a flush fails meanwhile, and with EIO when replication stopped (at unmount).
  Status WaitReplicated(uint64_t point) EXCLUDES(ns_lock);
  // Unmount: seals every file and flushes everything; when that fails for
  // `config.unmount_retry`, saves every unflushed file to a rescue directory and returns an error
  // naming the files and where they went.
  Status Drain() EXCLUDES(ns_lock);

 private:
  // Stops the replication feed and the replicator (the partners told what is durable).
  void StopReplicating();
  // FlushClient.
  Status Flushed(const FlushReport& report) override EXCLUDES(ns_lock);
  size_t WritersWaiting() override { return parts_.arena.waiting_writers(); }
  Result<size_t> Spill(Env& env) override { return reclaimer_.Spill(env); }
  std::string PathOf(const EntryRef& entry) override EXCLUDES(ns_lock);

  // `error`, the failure of a sync up to journal point `point`, with every file sealed by then
  // and not durable yet named before it (the first 100 of them).
  Status NamingUnflushed(const Status& error, uint64_t point) EXCLUDES(ns_lock);

  const Parts parts_;
  Reclaimer reclaimer_;
  std::unique_ptr<Flusher> flusher_;
  // Hands the files the durable entries of `report` published (not held markers) to the
  // uploader, each as it is now on the backing store.
  void HandOverUploads(const FlushReport& report) EXCLUDES(uploaded_mu_);
  // -o remote: every journal entry up to it is on the store (published files uploaded, removals
  // done); 0 before the uploader starts.
  uint64_t UploadedSeq() EXCLUDES(uploaded_mu_);

  // -o remote: the uploads (null otherwise). Fed on the flusher's thread.
  std::unique_ptr<Uploader> uploader_;
  int upload_log_dir_ = -1;  // The private area holding the upload log (-1: none).
  // Shared mode: what each flush report handed over, for UploadedSeq.
  Mutex uploaded_mu_;
  UploadedPoint uploaded_ GUARDED_BY(uploaded_mu_);
  // Shared mode: this mount's membership and commits (null otherwise). Its thread hands commit
  // outcomes to the flusher, whose thread posts commits through it.
  std::unique_ptr<SharedMount> shared_;
  // -o replicas: this member's replication, fed from the journal (null otherwise). At Stop the
  // feed goes first, then the shared mount (whose stand-in thread calls the stand-in), the
  // stand-in, the replicator.
  std::unique_ptr<replication::Replicator> replicator_;
  std::unique_ptr<ReplicationFeed> replication_feed_;
  // -o replicas: completes dead members' parts of commits from the replicas held for them (called
  // by the shared mount's stand-in thread), through an Env of its own: the mount's belongs to the
  // flusher's thread for its syncs (io_uring), and the stand-in syncs on another.
  std::unique_ptr<Env> stand_in_env_;
  std::unique_ptr<replication::StandInWriter> stand_in_;
};

}  // namespace ckptfs
