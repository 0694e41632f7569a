// SharedMount: a mount's part in the group of mounts of -o shared, over one shared backing
// directory or one object store (core/shared/shared_area.h):
// its membership (core/shared/membership.h), the commits of the markers its flusher holds
// (core/shared/shared_commit.h, core/flush/held_markers.h), the thread that beats, acknowledges
// and collects commit outcomes every poll interval, and (-o replicas) the thread that completes
// dead members' parts of commits (SharedCommits::StandInStep), which may write for long.
//
// Thread-safe. Lock order: nothing of the mount is locked when it calls the ProgressFn (which
// reads the journal) or hands outcomes on.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/base/clock.h"
#include "core/base/config.h"
#include "core/base/status.h"
#include "core/base/thread_annotations.h"
#include "core/shared/membership.h"
#include "core/shared/shared_commit.h"
#include "core/shared/shared_area.h"

namespace ckptfs {

class SharedMount {
 public:
  using DecidedFn = std::function<void(const std::vector<CommitOutcome>&)>;

  // Joins the group that meets in `area` (the shared backing directory, or the store) as
  // config.node (a resolved name: NodeNameOrHostName): at once, or, when a file holds that name,
  // once its beat has stood still for member_timeout (a run that died elsewhere). EEXIST when a
  // live member uses the name; ETIMEDOUT when the claim is not decided within twice
  // member_timeout of real time. `clock` must outlive it. `replication_endpoint` (not empty with
  // -o replicas) is published in the member file.
  static Result<std::unique_ptr<SharedMount>> Join(const Config& config,
                                                   std::unique_ptr<SharedArea> area, Clock& clock,
                                                   ProgressFn progress,
                                                   std::string replication_endpoint = "");
  ~SharedMount();
  SharedMount(const SharedMount&) = delete;
  SharedMount& operator=(const SharedMount&) = delete;

  // -o replicas, before Start: see SharedCommits::SetStandIn.
  void SetStandIn(std::string run, StandInFn stand_in) {
    commits_->SetStandIn(std::move(run), std::move(stand_in));
    stands_in_ = true;
  }
  // -o replicas, before Start: see SharedCommits::SetDeadCommitter.
  void SetDeadCommitter(DeadCommitterFns fns) { commits_->SetDeadCommitter(std::move(fns)); }
  // Before Start, on a worker whose takeover lost some of what the process before it had
  // sealed: see Membership::ForgetPredecessor.
  void ForgetPredecessor();
  // Asks every other live member to commit `marker` (a path, for messages); Step reports the
  // outcome by the returned id.
  Result<std::string> Post(const std::string& marker);
  // One poll: beats, serves the requests of others, hands the outcomes decided now to `decided`,
  // and calls `owing` while requests of others wait for this member's data (so that it flushes
  // now, whatever its flush_delay: a commit never waits for another member's delay).
  void Step(const DecidedFn& decided, const std::function<void()>& owing);
  // Steps every poll interval on a thread of its own until Leave; with a stand-in, completes dead
  // members' parts on another.
  void Start(DecidedFn decided, std::function<void()> owing) EXCLUDES(mu_);
  // After this member's durable point advanced: steps at once when requests of others wait for
  // it, so that it acknowledges as soon as its data is durable rather than at the next poll.
  void DataDurable() EXCLUDES(mu_);
  // At unmount, once the flusher has drained: stops the thread, acknowledges the requests it sees
  // then, withdraws this member's pending commits and leaves the group.
  void Leave() EXCLUDES(mu_);
  // At a handoff to the next worker, which joins in this one's place (MembershipSettings::
  // takes_over): stops the threads and nothing else; Leave does nothing after it.
  void HandOver() EXCLUDES(mu_);

  // The live members (this one included), as of the last beat.
  std::vector<MemberView> Members() const { return membership_->Members(); }

  // Members, their heartbeat age and flush lag, pending commits (for stats and `ckptfs status`).
  nlohmann::json StatusJson() const;

 private:
  SharedMount(std::unique_ptr<SharedArea> area, std::unique_ptr<Membership> membership,
              std::unique_ptr<SharedCommits> commits, std::chrono::milliseconds poll_interval);
  // Stops both threads; false when they were stopped before.
  bool StopThreads() EXCLUDES(mu_);

  std::unique_ptr<SharedArea> area_;  // Outlives the two below.
  std::unique_ptr<Membership> membership_;
  std::unique_ptr<SharedCommits> commits_;
  const std::chrono::milliseconds poll_interval_;
  bool stands_in_ = false;  // Set before Start.
  std::thread thread_;
  std::thread stand_in_thread_;
  Mutex mu_;
  std::condition_variable_any wake_;  // With mu_: stop, or step now (both threads wait on it).
  bool stop_ GUARDED_BY(mu_) = false;
  bool step_now_ GUARDED_BY(mu_) = false;
};

}  // namespace ckptfs
