// Membership: a mount's place in the group of mounts that share one backing directory, or one
// object store (-o shared), kept through their shared area alone (core/shared/shared_area.h).
//
// Each member owns one file, members/<node> of the shared area (core/shared/shared_area.h: the
// shared backing directory's .ckptfs/shared, or the store's PREFIX/.ckptfs/shared/), a small JSON
// object
//   {"node", "host", "pid", "incarnation", "beat", "sealed", "durable", "pending_bytes",
//    "former", "replication"}
// that it rewrites every policy::BeatInterval(member_timeout) (temp file
// ".<node>.<incarnation>.tmp", then rename), its beat counter one higher each time. The
// incarnation (16 random hex digits) names one run of the member: a mount that restarts under the
// same node name is another incarnation, never mistaken for the one before.
//
// Liveness never compares clocks across nodes: an observer judges a member dead when its beat
// counter has not changed for member_timeout on the observer's own clock (policy::MemberDead).
// The first observer that judges a member dead removes its file, after reading it once more
// unchanged, and logs its last content: left in place, a dead member's file would make every
// mount that joins later wait member_timeout on it, and fail the commits it posts meanwhile.
// An incarnation judged dead stays dead for that observer; so does one whose file vanished while
// its beat stood still for half of member_timeout (another observer judged it first).
//
// A member never goes on unaware that it was judged dead: when none of its beats was seen in
// place for half of member_timeout (policy::MayHaveBeenJudgedDead: a stalled write, its file
// removed, unreadable or replaced meanwhile), it rejoins as a new incarnation of the same process.
// It remembers its earlier incarnations, and acknowledges commits for them (its journal is the
// same); the others keep awaiting a dropped incarnation for member_timeout after they judged it
// (policy::StillAwaitedAfterDrop), and for as long as a new incarnation that names it as former
// beats. So no commit counts without a member that was only stalled for less than
// twice member_timeout: the commit waits for it, or fails.
//
// At most policy::kMaxMembers node names are read from the members directory; with more, the
// observation fails (EUSERS, logged once) and nobody is judged from it.
//
// Thread-safe: every method takes the object's lock (Members() only the lock of its view); Join,
// Tick, Observe and Leave do their file I/O with it held. The ProgressFn is called with it held,
// so it may take the namespace lock (lock order: Membership before the namespace lock) but must
// not call back into Membership.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "core/base/clock.h"
#include "core/base/status.h"
#include "core/base/thread_annotations.h"
#include "core/shared/shared_area.h"

namespace ckptfs {

// What a member's journal has reached, as its owner reports it.
struct FlushProgress {
  uint64_t sealed_seq = 0;     // The last sequence number sealed (Journal::last_seq).
  uint64_t durable_seq = 0;    // Everything up to it is durable (Journal::durable_seq).
  uint64_t pending_bytes = 0;  // Sealed data not durable yet, for the status.
};
using ProgressFn = std::function<FlushProgress()>;

// A member file's content.
struct MemberRecord {
  std::string node;
  std::string host;
  std::string incarnation;
  int64_t pid = 0;
  uint64_t beat = 0;
  FlushProgress progress;
  // The incarnations of the same process this one continues (it rejoined from them), at most
  // kMaxFormerIncarnations; optional in the file.
  std::vector<std::string> former;
  // Where it receives partners' replicas, "ADDRESS:PORT" (-o replicas); optional in the file,
  // untrusted (core/replication/replicator.h parses it).
  std::string replication_endpoint;
};

// One member as this mount sees it.
struct MemberView {
  MemberRecord record;
  // Time since this observer saw the member's beat change (its own last beat for itself).
  Clock::duration beat_age{};
  bool self = false;
};

// One run of a member: its node name and incarnation.
struct MemberId {
  std::string node;
  std::string incarnation;
  auto operator<=>(const MemberId&) const = default;
};

// An observer's judgement of one incarnation.
enum class Liveness {
  kLive,
  kDead,     // Stopped beating for member_timeout.
  kLeft,     // Its file went away (clean unmount, or removed as dead by another observer) or
             // holds another incarnation now.
  kUnknown,  // Not seen by this observer (maybe not yet).
};
const char* LivenessName(Liveness liveness);

struct MembershipSettings {
  std::string node;  // Must satisfy policy::IsValidNodeName.
  std::chrono::milliseconds member_timeout{10000};
  // Published in the member file as "replication" when not empty.
  std::string replication_endpoint;
  // This process takes over what the member process before it on this host held (the next worker
  // after a handoff or a crash, or the recovery of an earlier mount): joining in the place of a
  // process that is gone, or of a worker of its own supervisor (which handed over, or died), it
  // lists that process's incarnations as its former ones and so acknowledges for them, until
  // ForgetPredecessor.
  bool takes_over = false;
};

// `configured` when not empty, else the host name; EINVAL when it is not a valid node name.
Result<std::string> NodeNameOrHostName(const std::string& configured);

class Membership {
 public:
  enum class State {
    kOut,       // Not joined (before Join, after Leave).
    kClaiming,  // A file with this node name exists: watching whether its owner still beats.
    kJoined,
    kRefused,   // Another live member uses this node name (EEXIST).
  };

  // A member of the group that meets in `area` (its "members" directory). EINVAL when the node
  // name is not valid. `area` and `clock` must outlive the Membership.
  static Result<std::unique_ptr<Membership>> Open(SharedArea& area, MembershipSettings settings,
                                                  Clock& clock, ProgressFn progress);
  ~Membership();
  Membership(const Membership&) = delete;
  Membership& operator=(const Membership&) = delete;

  // Joins as a new incarnation. Ok: joined (no valid file held the node name, or it was left by a
  // dead process of this host, or with takes_over by its predecessor, whose incarnations become
  // former ones). The Env's error when the member file cannot be read or written. EINPROGRESS: a
  // file holds the node name; Tick keeps watching it and joins when its beat stays still for
  // member_timeout, or refuses (EEXIST) when it moves. The owner at mount: Join, then Tick every
  // poll interval while state() is kClaiming.
  Status Join() EXCLUDES(mu_);

  // One step, every poll interval, from one thread. Claiming: as Join says. Joined: once per
  // beat interval, checks its own file (rejoins as a new incarnation when it was removed; EEXIST
  // and kRefused when another incarnation holds it), beats, then reads the other members' files
  // and judges them. Returns the join status (EINPROGRESS while claiming, EEXIST once refused), or
  // why this beat failed (the member stays joined; the next beat tries again).
  Status Tick() EXCLUDES(mu_);

  // Reads the other members' files now (Tick does it once per beat interval).
  Status Observe() EXCLUDES(mu_);

  // Leaves on a clean unmount: removes its file (when it still holds this incarnation).
  Status Leave() EXCLUDES(mu_);

  // With takes_over, before the first Tick, when the takeover lost some of what the process
  // before it had sealed: stops listing that process's incarnations (beats at once), so that
  // commits awaiting them fail rather than take this member's acknowledgement.
  void ForgetPredecessor() EXCLUDES(mu_);

  State state() const EXCLUDES(mu_);
  const std::string& node() const { return node_; }
  // This run's identity; the incarnation changes when the member rejoins.
  MemberId self() const EXCLUDES(mu_);

  // The other members this observer holds live now, by node name.
  std::vector<MemberId> LiveMembers() const EXCLUDES(mu_);
  // The other members a commit posted now must wait for, one incarnation per node name: each live
  // one, and for a node with none live, the incarnation judged dead within member_timeout.
  std::vector<MemberId> AwaitedMembers() const EXCLUDES(mu_);
  // Whether another member's incarnation `id` may still acknowledge a commit: it is live, or it
  // was judged dead within member_timeout, or a live incarnation that continues it (its file
  // lists `id` as former) took its place (it acknowledges for the one before).
  bool MayStillAcknowledge(const MemberId& id) const EXCLUDES(mu_);
  // Whether a live incarnation of `id.node` continues `id` (its file lists it as former): the same
  // process, which acknowledges for it itself.
  bool ContinuedByLive(const MemberId& id) const EXCLUDES(mu_);
  // Whether `incarnation` is this process's, the current one or one it rejoined from.
  bool IsOwnIncarnation(const std::string& incarnation) const EXCLUDES(mu_);
  // This observer's judgement of incarnation `id` (itself included).
  Liveness Judge(const MemberId& id) const EXCLUDES(mu_);
  // Every member this observer holds live, itself first when joined, for the status: the view
  // the last Join, Tick, Observe or Leave left, so that it never waits for the shared store.
  std::vector<MemberView> Members() const EXCLUDES(view_mu_);

 private:
  struct Observed {
    MemberRecord record;
    Clock::time_point beat_changed_at;
  };
  // How an incarnation this observer saw ended.
  struct Ended {
    Liveness how;
    MemberRecord record;  // Its last content seen.
    Clock::time_point at;
  };

  Membership(SharedArea& area, MembershipSettings settings, Clock& clock, ProgressFn progress,
             std::string host);

  // Reads and validates the member file `name`: ENOENT when missing, EINVAL (with the reason)
  // when it is not a valid member file of that name.
  Result<MemberRecord> ReadRecord(const std::string& name) const;
  // Writes this member's file with the next beat.
  Status Beat() REQUIRES(mu_);
  Status JoinLocked() REQUIRES(mu_);
  Status TickLocked() REQUIRES(mu_);
  Status LeaveLocked() REQUIRES(mu_);
  // Copies what Members() shows.
  void PublishView() REQUIRES(mu_) EXCLUDES(view_mu_);
  Status StartIncarnation() REQUIRES(mu_);
  // A joined member takes a new incarnation (logging `why`), remembering the one it leaves, and
  // beats under it.
  Status Rejoin(const std::string& why) REQUIRES(mu_);
  // Removes the temporary files that runs of this node killed between writing and renaming left.
  void RemoveEarlierTemporaryFiles() REQUIRES(mu_);
  Status ObserveLocked() REQUIRES(mu_);
  Status TickClaiming() REQUIRES(mu_);
  Status TickJoined() REQUIRES(mu_);
  // Remembers how the incarnation of `record` ended (bounded: the oldest are forgotten).
  void RememberEnd(const MemberRecord& record, Liveness how) REQUIRES(mu_);
  // Logs a failed beat when its cause changed, and a beat after failed ones.
  void LogBeat(const Status& beat) REQUIRES(mu_);
  // Logs `what` about file `name` once until it changes.
  void LogBadFileOnce(const std::string& name, const std::string& what) REQUIRES(mu_);

  SharedArea& area_;
  const std::string node_;
  const std::chrono::milliseconds member_timeout_;
  Clock& clock_;
  const ProgressFn progress_;
  const std::string host_;
  const std::string replication_endpoint_;
  const bool takes_over_;

  mutable Mutex mu_;
  State state_ GUARDED_BY(mu_) = State::kOut;
  Status refusal_ GUARDED_BY(mu_);
  std::string incarnation_ GUARDED_BY(mu_);
  uint64_t beat_ GUARDED_BY(mu_) = 0;
  // When the newest beat's write began and ended, and when the last try (failed or not) began.
  Clock::time_point beat_started_at_ GUARDED_BY(mu_){};
  Clock::time_point last_beat_at_ GUARDED_BY(mu_){};
  Clock::time_point beat_tried_at_ GUARDED_BY(mu_){};
  // The newest beat read back in place, and when its write began (policy::MayHaveBeenJudgedDead).
  uint64_t renewed_beat_ GUARDED_BY(mu_) = 0;
  Clock::time_point renewed_at_ GUARDED_BY(mu_){};
  // Why the last beats failed, as logged (empty: the last one succeeded).
  std::string beat_error_ GUARDED_BY(mu_);
  // The incarnations this process rejoined from, the oldest first (bounded).
  std::deque<std::string> former_ GUARDED_BY(mu_);
  // Too many node names in the members directory (logged once).
  bool crowded_ GUARDED_BY(mu_) = false;
  FlushProgress last_progress_ GUARDED_BY(mu_);
  // Claiming: the record that holds the node name, and since when its beat stands still.
  MemberRecord claimed_ GUARDED_BY(mu_);
  Clock::time_point claim_since_ GUARDED_BY(mu_){};
  // The other members, by node name.
  std::map<std::string, Observed> observed_ GUARDED_BY(mu_);
  // How incarnations this observer saw ended, the oldest first in `ended_order_`.
  std::map<MemberId, Ended> ended_ GUARDED_BY(mu_);
  std::deque<MemberId> ended_order_ GUARDED_BY(mu_);
  // Files logged as bad, with what was logged.
  std::map<std::string, std::string> bad_files_ GUARDED_BY(mu_);

  // What Members() shows, as of view_at_. Lock order: mu_ before view_mu_.
  mutable Mutex view_mu_;
  std::vector<MemberView> view_ GUARDED_BY(view_mu_);
  Clock::time_point view_at_ GUARDED_BY(view_mu_){};
};

}  // namespace ckptfs
