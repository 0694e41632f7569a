// SharedCommits: the commit of a marker (a tracker, `.metadata`) across the mounts that share one
// backing directory, or one object store. A marker may be published once every live member has
// made durable (on the store: uploaded) everything it had sealed before the marker was sealed. The order is causal, never read off a
// clock: the trainers' barrier puts every rank's closes before rank 0's marker; the committer
// posts its request after the marker was sealed; each member, when it first sees the request,
// takes its own sealed point then (which covers its closes before the barrier) and acknowledges
// once everything up to that point is durable.
//
// In the shared area (core/shared/shared_area.h), under commits/<id>/ (id: policy::MakeCommitId,
// "<node>~<incarnation>~<counter>"):
//   request        {"id", "committer", "incarnation", "marker", "awaited": [{"node",
//                  "incarnation"}...]}: written as .request.tmp, then renamed
//   ack.<node>     {"node", "incarnation", "sealed"[, "by"]}: written as
//                  .ack.<node>.<incarnation>.tmp, then renamed; its member's sealed point at sight
//                  is durable ("by": the partner that made it durable for the dead member)
//   seen.<node>    {"node", "incarnation", "run", "sealed"} (-o replicas): the member's sealed
//                  point when it first saw the request, before it acknowledges; what a partner
//                  completing its part after its death needs (SetStandIn)
//
// Outcomes, for the committer: Committed when every awaited member acknowledged; Failed (errno
// EHOSTDOWN, the message naming the member) when an awaited member can no longer acknowledge
// (Membership::MayStillAcknowledge: it left, was replaced by another process, or was judged dead
// member_timeout ago and has not come back). Time alone fails nothing: a slow member that still
// beats only delays the commit. A request awaits the members then live and those judged dead within
// member_timeout (Membership::AwaitedMembers); a member acknowledges for its own earlier
// incarnations too. The committer itself is not awaited: its own data sealed before the marker is
// its owner's to order (the flusher publishes in journal order).
//
// For the owner: a marker held back for its commit must not hold back the durable point its
// ProgressFn reports, nor keep the entries sealed after it from becoming durable. Otherwise two
// members committing at once would each wait for the other's acknowledgement forever: each one's
// sealed point at sight includes its own held marker.
//
// A dead member's part (-o replicas, SetStandIn): a member whose Tick sees a request awaiting a
// member it judges dead or gone, not acknowledged, queues the dead member's seen.<node>; its
// StandInStep hands it to the StandInFn, which makes the dead member's replicated versions durable
// (core/replication/stand_in.h), and when that succeeds writes the dead member's ack (for the
// awaited incarnation). The StandInFn may write for long (gigabytes): it runs on the caller's
// thread of StandInStep, without the object's lock, so that Post, Tick (and the beat beside it)
// go on meanwhile. The committer keeps
// awaiting a dead member for member_timeout after it judged it (policy::StillAwaitedAfterDrop), the
// time the partners have to do it.
//
// A dead committer's marker (-o replicas, SetDeadCommitter): a member that holds, as a replica,
// a marker of a committer that died before it published it, and is the one partner chosen for it
// (core/replication/stand_in.h), posts a request of its own for it, which also names the dead
// committer ("for": {"node", "run", "seq"}, the marker's seq in its run) and awaits every other
// member but the dead one. It is decided as any request, and succeeds only once this member has
// also made durable what it had sealed when it posted (it is not the marker's own committer,
// whose flusher would order that). On success this member publishes the marker (after the dead
// member's versions before it); on failure never. Markers of one dead run are published in seq
// order: one waits for the decisions of those before it. None is published once a process of the
// dead node is live again (its worker recovers that run's versions and publishes them).
//
// Clean-up: the committer removes its request's directory once the outcome is known (request
// first, so that nobody acknowledges it any more, then the acks, then the directory; retried on
// later ticks when it fails, e.g. an ack that landed meanwhile). Any member removes the request
// directories of committers it judges dead or left, of earlier incarnations of its own node, and
// of committers it has not seen beating within member_timeout of first seeing the request (so an
// ack that lands after its request's removal, which a store cannot refuse, is removed by the
// committer, or by the others once it is gone); a member forgets a request when its directory is
// gone. Names in commits/ that are not request
// ids, and requests or acks that do not parse, are ignored (logged once).
//
// Thread-safe: every method takes the object's lock (before Membership's; Pending and acks_owed
// only the lock of their view), and the file I/O of Post and Tick is done with it held (that of
// StandInStep too, but for the StandInFn's). The ProgressFn is called with it held, so it may take
// the namespace lock, but Post and Tick must not be called with the namespace lock held.
#pragma once

#include <chrono>
#include <functional>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "core/base/clock.h"
#include "core/base/status.h"
#include "core/base/thread_annotations.h"
#include "core/shared/membership.h"
#include "core/shared/shared_area.h"

namespace ckptfs {

// How one of this member's requests ended.
struct CommitOutcome {
  std::string id;
  std::string marker;
  Status status;  // Ok: the marker may be published. Otherwise why it must not be.
};

// One of this member's requests still waiting, for the status.
struct PendingCommit {
  std::string id;
  std::string marker;
  std::vector<std::string> waiting_for;  // Awaited members that have not acknowledged yet.
  Clock::duration age{};                 // Since it was posted.
};

// What a member left in a request's directory when it first saw it (-o replicas).
struct Sight {
  std::string run;      // Its replication run (core/replication/wire.h).
  uint64_t sealed = 0;  // Its sealed point then.
};
// Completes dead member `dead`'s part of a request: Ok when everything the request needs of it
// is durable, so that this member acknowledges for it. `sight`: what it left (nullopt: nothing).
// EHOSTDOWN (logged) and ENODATA (not its partner: silent) are final for that request; any
// other error is tried again next tick.
using StandInFn = std::function<Status(const MemberId& dead, const std::optional<Sight>& sight)>;

// A dead committer's marker that this member holds as a replica (core/replication/stand_in.h).
struct DeadCommitterMarker {
  std::string node;  // The dead committer.
  std::string run;   // Its replication run.
  uint64_t seq = 0;  // The marker's seq in that run.
  std::string path;  // Relative to the backing directory.
  auto operator<=>(const DeadCommitterMarker&) const = default;
};
// How this member commits dead committers' markers. Both are called without the object's lock.
struct DeadCommitterFns {
  // The markers it is to commit now, given the node names of the live members (this one's too).
  std::function<std::vector<DeadCommitterMarker>(const std::vector<std::string>& live)> markers;
  // Publishes one whose commit succeeded: Ok once it is in place (otherwise tried again).
  std::function<Status(const DeadCommitterMarker&)> publish;
};

class SharedCommits {
 public:
  // The commits of the group that meets in `area` (its "commits" directory). `progress` gives
  // this member's sealed and durable points; it is read after the requests are listed, so a
  // sealed point taken for a request covers everything sealed before the request was posted.
  // `area`, `membership` and `clock` must outlive the SharedCommits.
  static std::unique_ptr<SharedCommits> Open(SharedArea& area, Membership& membership,
                                             Clock& clock,
                                             std::chrono::milliseconds member_timeout,
                                             ProgressFn progress);
  ~SharedCommits();
  SharedCommits(const SharedCommits&) = delete;
  SharedCommits& operator=(const SharedCommits&) = delete;

  // Posts a request for `marker` (its path, for messages), to be called once the marker is
  // sealed. Reads the members directory first and awaits every member then live, this one left
  // out. Returns the request's id; Tick reports its outcome. ENOTCONN when this mount is not a
  // joined member; the Env's error when the request cannot be written (nothing is left behind).
  Result<std::string> Post(const std::string& marker) EXCLUDES(mu_);

  // -o replicas, before the first Tick: this member leaves its sight of each request it owes
  // under replication run `run`, and completes dead members' parts through `stand_in`
  // (StandInStep).
  void SetStandIn(std::string run, StandInFn stand_in) EXCLUDES(mu_);

  // -o replicas, before the first StandInStep: how this member commits the markers of dead
  // committers it holds.
  void SetDeadCommitter(DeadCommitterFns fns) EXCLUDES(mu_);

  // -o replicas: completes the dead members' parts that Tick queued, one after another, each with
  // the StandInFn called without the lock, then acknowledges for those it completed; then posts
  // the commits of dead committers' markers newly listed, and publishes those whose commit
  // succeeded. From one thread, not Tick's (a long write must not hold back the beat). Returns
  // whether it did any of this.
  bool StandInStep() EXCLUDES(mu_);

  // One step, every poll interval, from one thread, after Membership::Tick. As committer:
  // collects the acks of its requests and returns the outcomes decided now (each exactly once).
  // As member: lists the requests, takes its sealed point for each new one that awaits it,
  // acknowledges those whose sealed point is durable, queues dead members' parts (-o replicas:
  // StandInStep does them), and removes stale requests.
  std::vector<CommitOutcome> Tick() EXCLUDES(mu_);

  // On a clean unmount, before Membership::Leave: withdraws this member's pending requests
  // (outcomes ECANCELED) and removes them.
  std::vector<CommitOutcome> Abandon() EXCLUDES(mu_);

  // This member's requests still waiting, as the last Post, Tick or Abandon left them (never
  // waits for the shared store).
  std::vector<PendingCommit> Pending() const EXCLUDES(view_mu_);
  // Requests of others that await this member and are not acknowledged yet, and dead committers'
  // commits that wait only for this member's own data, likewise.
  size_t acks_owed() const EXCLUDES(view_mu_);

 private:
  struct OwnRequest {
    std::string marker;
    MemberId committer;  // This member's incarnation when it posted.
    std::vector<MemberId> awaited;
    std::set<std::string> acked;  // Node names.
    Clock::time_point posted_at;
    std::set<std::string> stood_in;  // Dead members whose part this member completed or cannot.
    // A dead committer's marker: what it is for, and this member's sealed point when it posted,
    // which must be durable too; whether every awaited member acknowledged and only that lacks.
    std::optional<DeadCommitterMarker> for_dead;
    uint64_t own_sealed = 0;
    bool waits_own_data = false;
  };
  // A dead committer's marker, as this member commits it.
  struct DeadCommit {
    enum class State { kPosted, kCommitted, kFailed, kPublished } state = State::kPosted;
    std::string id;
  };
  // A request of another member, as this member handles it.
  struct SeenRequest {
    enum class State {
      kNotPosted,   // Its request file is not there yet: examined again on the next tick.
      kOwed,        // Awaits this member, not acknowledged yet.
      kAcked,
      kNotAwaited,  // Posted before this member joined, or for another incarnation of it.
      kUnreadable,  // Not a valid request (logged once).
    } state = State::kNotPosted;
    uint64_t sealed_at_sight = 0;
    std::string ack_as;  // kOwed: the incarnation of this process it awaits.
    Clock::time_point first_seen;
    std::vector<MemberId> awaited;  // Once read.
    // Dead members whose part this member completed, or found it cannot (-o replicas).
    std::set<std::string> stood_in;
  };

  SharedCommits(SharedArea& area, Membership& membership, Clock& clock,
                std::chrono::milliseconds member_timeout, ProgressFn progress);

  // Posts a request for `marker` (for a dead committer's when `for_dead`).
  Result<std::string> PostLocked(const std::string& marker,
                                 std::optional<DeadCommitterMarker> for_dead) REQUIRES(mu_);
  // Posts the commits of `held` not posted yet; returns whether it posted any.
  bool PostDeadMarkers(const std::vector<DeadCommitterMarker>& held) REQUIRES(mu_);
  // The dead committers' markers whose commit succeeded and that may be published now: in seq
  // order per run, none after one still undecided.
  std::vector<DeadCommitterMarker> PublishableDeadMarkers() const REQUIRES(mu_);
  // Collects the acks of request `id`; the outcome when it is decided.
  std::optional<Status> Decide(const std::string& id, OwnRequest& r) REQUIRES(mu_);
  // Handles the requests of others; `progress` is read at most once, after the listing.
  void ServeOthers() REQUIRES(mu_);
  // Reads the request `id` of another member and whether it awaits `self`.
  SeenRequest Examine(const std::string& id, const MemberId& self) REQUIRES(mu_);
  // Writes this member's sight of request `id` (-o replicas).
  void WriteSight(const std::string& id, const SeenRequest& seen, const MemberId& self)
      REQUIRES(mu_);
  // A dead member's part of a request, queued for StandInStep.
  struct StandInJob {
    std::string id;
    MemberId member;
    std::optional<Sight> sight;
  };
  // Queues the parts of request `id`'s `awaited` members that are dead, did not acknowledge, are
  // not in `stood_in` (those done or found impossible; it receives those that acknowledged before
  // they died) and are not queued or under way already.
  void QueueStandIns(const std::string& id, const std::vector<MemberId>& awaited,
                     std::set<std::string>& stood_in) REQUIRES(mu_);
  // Records how `job` ended (`done`): acknowledges for its member when it succeeded and its
  // request is still pending here.
  void FinishStandIn(const StandInJob& job, Status done) REQUIRES(mu_);
  // Removes request directory `id` (request first); true when it is gone.
  bool RemoveRequest(const std::string& id) REQUIRES(mu_);
  // Copies what Pending() and acks_owed() show.
  void PublishView() REQUIRES(mu_) EXCLUDES(view_mu_);
  void LogOnce(const std::string& name, const std::string& what) REQUIRES(mu_);

  SharedArea& area_;
  Membership& membership_;
  Clock& clock_;
  const std::chrono::milliseconds member_timeout_;
  const ProgressFn progress_;

  mutable Mutex mu_;
  uint64_t counter_ GUARDED_BY(mu_) = 0;
  std::string run_ GUARDED_BY(mu_);  // -o replicas: this process's replication run.
  StandInFn stand_in_ GUARDED_BY(mu_);
  std::map<std::string, OwnRequest> own_ GUARDED_BY(mu_);
  std::set<std::string> to_remove_ GUARDED_BY(mu_);  // Decided requests not removed yet.
  std::map<std::string, SeenRequest> seen_ GUARDED_BY(mu_);
  std::map<std::string, std::string> logged_ GUARDED_BY(mu_);  // Name -> what was logged.
  std::vector<StandInJob> stand_ins_ GUARDED_BY(mu_);  // Queued, not taken by StandInStep yet.
  DeadCommitterFns dead_committer_ GUARDED_BY(mu_);
  // The dead committers' markers this member took on (bounded by the markers it held).
  std::map<DeadCommitterMarker, DeadCommit> dead_commits_ GUARDED_BY(mu_);
  // (request id, node) of the jobs queued or under way.
  std::set<std::pair<std::string, std::string>> standing_in_ GUARDED_BY(mu_);

  // What Pending() and acks_owed() show, as of view_at_. Lock order: mu_ before view_mu_.
  mutable Mutex view_mu_;
  std::vector<PendingCommit> pending_view_ GUARDED_BY(view_mu_);
  size_t acks_owed_view_ GUARDED_BY(view_mu_) = 0;
  Clock::time_point view_at_ GUARDED_BY(view_mu_){};
};

}  // namespace ckptfs
