#include "core/shared/shared_commit.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <optional>

#include "core/backing/backing_paths.h"
#include "core/shared/shared_policy.h"

namespace ckptfs {
namespace {

constexpr const char* kRequestName = "request";
constexpr const char* kAckPrefix = "ack.";
constexpr const char* kSightPrefix = "seen.";
constexpr size_t kMaxMarkerBytes = 4096;
// Problems logged at once; more are ignored without a log line (a flood must not flood the log).
constexpr size_t kMaxLogged = 256;

// The directory of request `id` in the shared area.
std::string RequestDir(const std::string& id) { return std::string(kCommitsDirName) + "/" + id; }

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

// The awaited members of a parsed request; false when the list is not valid.
bool AwaitedMembers(const nlohmann::json& request, std::vector<MemberId>* out) {
  auto it = request.find("awaited");
  if (it == request.end() || !it->is_array() || it->size() > policy::kMaxMembers) return false;
  for (const nlohmann::json& m : *it) {
    MemberId id;
    if (!m.is_object() || !JsonString(m, "node", policy::kMaxNodeNameLength, &id.node) ||
        !policy::IsValidNodeName(id.node) ||
        !JsonString(m, "incarnation", policy::kIncarnationLength, &id.incarnation) ||
        !policy::IsValidIncarnation(id.incarnation)) {
      return false;
    }
    out->push_back(std::move(id));
  }
  return true;
}

}  // namespace

std::unique_ptr<SharedCommits> SharedCommits::Open(SharedArea& area, Membership& membership,
                                                   Clock& clock,
                                                   std::chrono::milliseconds member_timeout,
                                                   ProgressFn progress) {
  return std::unique_ptr<SharedCommits>(
      new SharedCommits(area, membership, clock, member_timeout, std::move(progress)));
}

SharedCommits::SharedCommits(SharedArea& area, Membership& membership, Clock& clock,
                             std::chrono::milliseconds member_timeout, ProgressFn progress)
    : area_(area),
      membership_(membership),
      clock_(clock),
      member_timeout_(member_timeout),
      progress_(std::move(progress)) {}

SharedCommits::~SharedCommits() = default;

Result<std::string> SharedCommits::Post(const std::string& marker) {
  MutexLock lock(mu_);
  return PostLocked(marker, std::nullopt);
}

Result<std::string> SharedCommits::PostLocked(const std::string& marker,
                                              std::optional<DeadCommitterMarker> for_dead) {
  if (membership_.state() != Membership::State::kJoined) {
    return Status::Error(ENOTCONN, "cannot commit " + marker + ": node " + membership_.node() +
                                       " is not a joined member");
  }
  if (Status observed = membership_.Observe(); !observed.ok()) {
    return Status::Error(observed.err(), "cannot commit " + marker +
                                             ": cannot read the members (" +
                                             observed.ToString() + ")");
  }
  OwnRequest r{marker.substr(0, kMaxMarkerBytes), membership_.self(),
               membership_.AwaitedMembers(), {}, clock_.Now(), {}, for_dead, 0, false};
  if (for_dead) {
    // The dead committer acknowledges nothing; its data before the marker is this member's to
    // write. What this member sealed so far must be durable before the marker.
    std::erase_if(r.awaited, [&](const MemberId& m) { return m.node == for_dead->node; });
    r.own_sealed = progress_().sealed_seq;
  }
  if (r.awaited.size() > policy::kMaxMembers) {
    return Status::Error(EUSERS, "cannot commit " + marker + ": it would wait for " +
                                     std::to_string(r.awaited.size()) + " members, more than " +
                                     std::to_string(policy::kMaxMembers));
  }
  const std::string id =
      policy::MakeCommitId(r.committer.node, r.committer.incarnation, ++counter_);
  // A dead committer's marker always has its request: it names what it is for.
  if (!r.awaited.empty() || for_dead) {
    nlohmann::json awaited = nlohmann::json::array();
    for (const MemberId& m : r.awaited) {
      awaited.push_back({{"node", m.node}, {"incarnation", m.incarnation}});
    }
    nlohmann::json request = {{"id", id},
                              {"committer", r.committer.node},
                              {"incarnation", r.committer.incarnation},
                              {"marker", r.marker},
                              {"awaited", awaited}};
    if (for_dead) {
      request["for"] = {{"node", for_dead->node}, {"run", for_dead->run}, {"seq", for_dead->seq}};
    }
    Status written = area_.MakeDir(RequestDir(id));
    if (written.ok()) {
      written = area_.Replace(RequestDir(id), kRequestName, ".request.tmp", request.dump());
      if (!written.ok()) (void)area_.RemoveDir(RequestDir(id));
    }
    if (!written.ok()) {
      return Status::Error(written.err(), "cannot post the commit of " + marker + " (" +
                                              written.ToString() + ")");
    }
  }
  spdlog::debug("posted commit {} of {}, awaiting {} members", id, marker, r.awaited.size());
  own_.emplace(id, std::move(r));
  PublishView();
  return id;
}

std::optional<Status> SharedCommits::Decide(const std::string& id, OwnRequest& r) {
  // A dead committer's marker: this member's own data sealed before it is durable, too.
  auto own_data = [&]() -> std::optional<Status> {
    r.waits_own_data = r.for_dead && !policy::MayAcknowledge(progress_().durable_seq, r.own_sealed);
    if (r.waits_own_data) return std::nullopt;
    return Status::Ok();
  };
  if (r.awaited.empty() && !r.for_dead) return Status::Ok();
  auto failed = [&](const std::string& why) {
    return Status::Error(EHOSTDOWN, "commit of " + r.marker + " failed: " + why +
                                        "; the marker is not published");
  };
  if (membership_.state() != Membership::State::kJoined ||
      !membership_.IsOwnIncarnation(r.committer.incarnation)) {
    return failed("node " + r.committer.node + " stopped being the member that posted it");
  }
  Result<std::vector<std::string>> names = area_.List(RequestDir(id));
  if ((!names.ok() && names.status().err() == ENOENT) ||
      (names.ok() && std::find(names->begin(), names->end(), kRequestName) == names->end())) {
    return failed("its request was removed by another member");
  }
  if (!names.ok()) LogOnce(id, "cannot list: " + names.status().ToString());
  for (const std::string& name : names.ok() ? *names : std::vector<std::string>()) {
    if (name.rfind(kAckPrefix, 0) != 0) continue;
    const std::string node = name.substr(std::char_traits<char>::length(kAckPrefix));
    auto awaited = std::find_if(r.awaited.begin(), r.awaited.end(),
                                [&](const MemberId& m) { return m.node == node; });
    if (awaited == r.awaited.end() || r.acked.count(node)) continue;
    Result<std::string> text = area_.Read(RequestDir(id), name, policy::kMaxMemberFileBytes);
    std::optional<nlohmann::json> ack = text.ok() ? ParseObject(*text) : std::nullopt;
    std::string ack_node, ack_incarnation;
    uint64_t sealed = 0;
    if (!ack || !JsonString(*ack, "node", policy::kMaxNodeNameLength, &ack_node) ||
        !JsonString(*ack, "incarnation", policy::kIncarnationLength, &ack_incarnation) ||
        !JsonUnsigned(*ack, "sealed", &sealed) || ack_node != node ||
        ack_incarnation != awaited->incarnation) {
      LogOnce(id + "/" + name, text.ok() ? "not an acknowledgement of this request"
                                         : text.status().ToString());
      continue;
    }
    r.acked.insert(node);
  }
  if (r.acked.size() == r.awaited.size()) return own_data();
  for (const MemberId& m : r.awaited) {
    if (r.acked.count(m.node) || membership_.MayStillAcknowledge(m)) continue;
    Liveness l = membership_.Judge(m);
    return failed("member " + m.node +
                  (l == Liveness::kDead ? " stopped beating"
                                        : " left (unmounted, or judged dead by another member)") +
                  " before it acknowledged");
  }
  return std::nullopt;
}

std::vector<CommitOutcome> SharedCommits::Tick() {
  MutexLock lock(mu_);
  std::vector<CommitOutcome> outcomes;
  const Clock::time_point now = clock_.Now();
  for (auto it = own_.begin(); it != own_.end();) {
    if (stand_in_ && membership_.state() == Membership::State::kJoined) {
      QueueStandIns(it->first, it->second.awaited, it->second.stood_in);
    }
    std::optional<Status> decided = Decide(it->first, it->second);
    if (!decided) {
      ++it;
      continue;
    }
    const OwnRequest& r = it->second;
    if (r.for_dead) {
      // Not the flusher's: StandInStep publishes it, or never.
      DeadCommit& dead = dead_commits_[*r.for_dead];
      dead.state = decided->ok() ? DeadCommit::State::kCommitted : DeadCommit::State::kFailed;
      if (decided->ok()) {
        spdlog::info("committed {} for dead node {} ({} members acknowledged in {:.3f} s)",
                     r.marker, r.for_dead->node, r.awaited.size(), Seconds(now - r.posted_at));
      } else {
        spdlog::error("{} (for dead node {})", decided->message(), r.for_dead->node);
      }
      to_remove_.insert(it->first);
      it = own_.erase(it);
      continue;
    }
    if (decided->ok()) {
      spdlog::info("committed {} ({} members acknowledged in {:.3f} s)", r.marker,
                   r.awaited.size(), Seconds(now - r.posted_at));
    } else {
      spdlog::error("{}", decided->message());
    }
    outcomes.push_back({it->first, r.marker, *decided});
    if (!r.awaited.empty()) to_remove_.insert(it->first);
    it = own_.erase(it);
  }
  for (auto it = to_remove_.begin(); it != to_remove_.end();) {
    it = RemoveRequest(*it) ? to_remove_.erase(it) : std::next(it);
  }
  if (membership_.state() == Membership::State::kJoined) ServeOthers();
  PublishView();
  return outcomes;
}

SharedCommits::SeenRequest SharedCommits::Examine(const std::string& id, const MemberId& self) {
  SeenRequest seen;
  Result<std::string> text =
      area_.Read(RequestDir(id), kRequestName, policy::kMaxRequestFileBytes);
  // Not posted yet, or gone meanwhile (forgotten on the tick that no longer lists it).
  if (!text.ok() && text.status().err() == ENOENT) {
    seen.state = SeenRequest::State::kNotPosted;
    return seen;
  }
  std::optional<nlohmann::json> request = text.ok() ? ParseObject(*text) : std::nullopt;
  policy::CommitIdParts parts;
  std::string got_id, committer, incarnation;
  std::vector<MemberId> awaited;
  if (!request || !policy::ParseCommitId(id, &parts) ||
      !JsonString(*request, "id", id.size(), &got_id) || got_id != id ||
      !JsonString(*request, "committer", policy::kMaxNodeNameLength, &committer) ||
      committer != parts.node ||
      !JsonString(*request, "incarnation", policy::kIncarnationLength, &incarnation) ||
      incarnation != parts.incarnation || !AwaitedMembers(*request, &awaited)) {
    LogOnce(id, text.ok() ? "not a valid request" : text.status().ToString());
    seen.state = SeenRequest::State::kUnreadable;
    return seen;
  }
  seen.awaited = awaited;
  auto mine = std::find_if(awaited.begin(), awaited.end(), [&](const MemberId& m) {
    return m.node == self.node && membership_.IsOwnIncarnation(m.incarnation);
  });
  seen.state = mine != awaited.end() ? SeenRequest::State::kOwed : SeenRequest::State::kNotAwaited;
  if (mine != awaited.end()) seen.ack_as = mine->incarnation;
  return seen;
}

void SharedCommits::ServeOthers() {
  Result<std::vector<std::string>> names = area_.List(kCommitsDirName);
  if (!names.ok()) {
    LogOnce(".", "cannot list the shared commits directory: " + names.status().ToString());
    return;
  }
  std::sort(names->begin(), names->end());
  // The names that may be other members' requests, at most kMaxCommitRequests.
  std::vector<std::pair<std::string, policy::CommitIdParts>> requests;
  for (const std::string& id : *names) {
    if (id.front() == '.' || own_.count(id) || to_remove_.count(id)) continue;
    policy::CommitIdParts parts;
    if (!policy::ParseCommitId(id, &parts)) {
      LogOnce(id, "not a commit request id");
    } else if (requests.size() < policy::kMaxCommitRequests) {
      requests.emplace_back(id, std::move(parts));
    }
  }
  const MemberId self = membership_.self();
  const Clock::time_point now = clock_.Now();
  // Read once, after the listing: a sealed point taken now covers every request listed.
  std::optional<FlushProgress> progress;
  auto local = [&]() -> const FlushProgress& {
    if (!progress) progress = progress_();
    return *progress;
  };
  std::set<std::string> listed;
  for (const auto& [id, parts] : requests) {
    listed.insert(id);
    auto [it, fresh] = seen_.try_emplace(id);
    SeenRequest& seen = it->second;
    if (fresh) seen.first_seen = now;
    const MemberId committer{parts.node, parts.incarnation};
    std::string stale_why;
    if (committer.node == self.node) {
      stale_why = membership_.IsOwnIncarnation(committer.incarnation)
                      ? "its committer withdrew it"
                      : "its committer is of an earlier run";
    } else {
      Liveness l = membership_.Judge(committer);
      if (l == Liveness::kDead || l == Liveness::kLeft) stale_why = std::string("its committer is ") + LivenessName(l);
      if (l == Liveness::kUnknown && policy::MemberDead(seen.first_seen, now, member_timeout_)) {
        stale_why = "its committer is not beating";
      }
    }
    if (!stale_why.empty()) {
      if (RemoveRequest(id)) {
        spdlog::info("removed commit request {}: {}", id, stale_why);
        seen_.erase(it);
        listed.erase(id);
      }
      continue;
    }
    if (fresh || seen.state == SeenRequest::State::kNotPosted) {
      SeenRequest examined = Examine(id, self);
      seen.state = examined.state;
      seen.ack_as = examined.ack_as;
      seen.awaited = std::move(examined.awaited);
      if (seen.state == SeenRequest::State::kOwed) {
        seen.sealed_at_sight = local().sealed_seq;
        if (!run_.empty()) WriteSight(id, seen, self);
      }
    }
    if (stand_in_) QueueStandIns(id, seen.awaited, seen.stood_in);
    if (seen.state != SeenRequest::State::kOwed ||
        !policy::MayAcknowledge(local().durable_seq, seen.sealed_at_sight)) {
      continue;
    }
    // For the incarnation awaited, which may be one this process rejoined from: its journal is
    // this one, so the sealed point covers what that incarnation sealed.
    nlohmann::json ack = {{"node", self.node},
                          {"incarnation", seen.ack_as},
                          {"sealed", seen.sealed_at_sight}};
    Status acked = area_.Replace(RequestDir(id), kAckPrefix + self.node,
                                 ".ack." + self.node + "." + seen.ack_as + ".tmp", ack.dump());
    if (acked.ok()) {
      seen.state = SeenRequest::State::kAcked;
      logged_.erase(id);
    } else if (acked.err() != ENOENT) {
      LogOnce(id, "cannot acknowledge: " + acked.ToString());
    }
  }
  for (auto it = seen_.begin(); it != seen_.end();) {
    it = listed.count(it->first) ? std::next(it) : seen_.erase(it);
  }
  for (auto it = logged_.begin(); it != logged_.end();) {
    const std::string dir = it->first.substr(0, it->first.find('/'));
    bool keep = dir == "." || own_.count(dir) || to_remove_.count(dir) ||
                std::binary_search(names->begin(), names->end(), dir);
    it = keep ? std::next(it) : logged_.erase(it);
  }
}

void SharedCommits::SetStandIn(std::string run, StandInFn stand_in) {
  MutexLock lock(mu_);
  run_ = std::move(run);
  stand_in_ = std::move(stand_in);
}

void SharedCommits::WriteSight(const std::string& id, const SeenRequest& seen,
                               const MemberId& self) {
  nlohmann::json sight = {{"node", self.node},
                          {"incarnation", seen.ack_as},
                          {"run", run_},
                          {"sealed", seen.sealed_at_sight}};
  Status written = area_.Replace(RequestDir(id), kSightPrefix + self.node,
                                 ".seen." + self.node + "." + seen.ack_as + ".tmp", sight.dump());
  // Without it, a partner cannot complete this member's part should it die before it acks.
  if (!written.ok() && written.err() != ENOENT) {
    LogOnce(id, "cannot leave this member's sight: " + written.ToString());
  }
}

void SharedCommits::QueueStandIns(const std::string& id, const std::vector<MemberId>& awaited,
                                  std::set<std::string>& stood_in) {
  const MemberId self = membership_.self();
  for (const MemberId& m : awaited) {
    if (m.node == self.node || stood_in.count(m.node) || standing_in_.count({id, m.node})) {
      continue;
    }
    const Liveness l = membership_.Judge(m);
    if ((l != Liveness::kDead && l != Liveness::kLeft) || membership_.ContinuedByLive(m)) {
      continue;
    }
    const std::string dir = RequestDir(id);
    Result<std::string> request = area_.Read(dir, kRequestName, policy::kMaxRequestFileBytes);
    if (!request.ok()) return;
    // It acknowledged before it died.
    if (area_.Read(dir, kAckPrefix + m.node, policy::kMaxMemberFileBytes).ok()) {
      stood_in.insert(m.node);
      continue;
    }
    std::optional<Sight> sight;
    Result<std::string> text = area_.Read(dir, kSightPrefix + m.node, policy::kMaxMemberFileBytes);
    std::optional<nlohmann::json> parsed = text.ok() ? ParseObject(*text) : std::nullopt;
    std::string node, incarnation, run;
    uint64_t sealed = 0;
    if (parsed && JsonString(*parsed, "node", policy::kMaxNodeNameLength, &node) &&
        node == m.node && JsonString(*parsed, "incarnation", policy::kIncarnationLength,
                                     &incarnation) &&
        incarnation == m.incarnation &&
        JsonString(*parsed, "run", policy::kIncarnationLength, &run) &&
        policy::IsValidIncarnation(run) && JsonUnsigned(*parsed, "sealed", &sealed)) {
      sight = Sight{run, sealed};
    }
    standing_in_.insert({id, m.node});
    stand_ins_.push_back({id, m, std::move(sight)});
  }
}

void SharedCommits::SetDeadCommitter(DeadCommitterFns fns) {
  MutexLock lock(mu_);
  dead_committer_ = std::move(fns);
}

bool SharedCommits::StandInStep() {
  std::vector<StandInJob> jobs;
  StandInFn stand_in;
  DeadCommitterFns dead_committer;
  std::vector<std::string> live;
  {
    MutexLock lock(mu_);
    jobs.swap(stand_ins_);
    stand_in = stand_in_;
    dead_committer = dead_committer_;
    if (membership_.state() == Membership::State::kJoined) {
      live.push_back(membership_.self().node);
      for (const MemberId& m : membership_.LiveMembers()) live.push_back(m.node);
    }
  }
  for (const StandInJob& job : jobs) {
    // Without the lock: it may write gigabytes.
    Status done = stand_in(job.member, job.sight);
    MutexLock lock(mu_);
    FinishStandIn(job, std::move(done));
  }
  bool worked = !jobs.empty();
  if (!dead_committer.markers || live.empty()) return worked;
  const std::vector<DeadCommitterMarker> held = dead_committer.markers(live);
  std::vector<DeadCommitterMarker> publishable;
  {
    MutexLock lock(mu_);
    worked = PostDeadMarkers(held) || worked;
    publishable = PublishableDeadMarkers();
  }
  for (const DeadCommitterMarker& m : publishable) {
    // Its node runs again: its worker recovers the run and publishes the marker itself.
    if (std::find(live.begin(), live.end(), m.node) != live.end()) break;
    // Without the lock: it writes the dead member's versions before the marker.
    Status published = dead_committer.publish(m);
    MutexLock lock(mu_);
    if (published.ok()) {
      dead_commits_[m].state = DeadCommit::State::kPublished;
      worked = true;
    } else {
      LogOnce(dead_commits_[m].id, "cannot publish " + m.path + " for dead node " + m.node +
                                       ": " + published.ToString());
      break;  // The markers after it wait for it.
    }
  }
  return worked;
}

bool SharedCommits::PostDeadMarkers(const std::vector<DeadCommitterMarker>& held) {
  bool posted = false;
  for (const DeadCommitterMarker& m : held) {
    if (dead_commits_.count(m)) continue;
    Result<std::string> id = PostLocked(m.path, m);
    if (!id.ok()) {
      LogOnce(m.path, "cannot commit the marker of dead node " + m.node + ": " +
                          id.status().ToString());
      continue;  // Tried again on the next step.
    }
    spdlog::info("committing {} for dead node {} (run {}, seq {}) as {}", m.path, m.node, m.run,
                 m.seq, *id);
    dead_commits_[m] = DeadCommit{DeadCommit::State::kPosted, *id};
    posted = true;
  }
  return posted;
}

std::vector<DeadCommitterMarker> SharedCommits::PublishableDeadMarkers() const {
  std::vector<DeadCommitterMarker> publishable;
  std::optional<std::pair<std::string, std::string>> blocked;  // A run with one undecided.
  for (const auto& [m, commit] : dead_commits_) {
    const std::pair<std::string, std::string> run{m.node, m.run};
    if (blocked == run) continue;
    if (commit.state == DeadCommit::State::kPosted) blocked = run;
    if (commit.state == DeadCommit::State::kCommitted) publishable.push_back(m);
  }
  return publishable;
}

void SharedCommits::FinishStandIn(const StandInJob& job, Status done) {
  standing_in_.erase({job.id, job.member.node});
  // The request's record here: gone when it was decided or removed meanwhile.
  std::set<std::string>* stood_in = nullptr;
  if (auto own = own_.find(job.id); own != own_.end()) {
    stood_in = &own->second.stood_in;
  } else if (auto seen = seen_.find(job.id); seen != seen_.end()) {
    stood_in = &seen->second.stood_in;
  }
  if (!stood_in) return;
  const MemberId& m = job.member;
  const std::string dir = RequestDir(job.id);
  if (done.ok()) {
    const std::string self = membership_.self().node;
    nlohmann::json ack = {{"node", m.node},
                          {"incarnation", m.incarnation},
                          {"sealed", job.sight ? job.sight->sealed : 0},
                          {"by", self}};
    done = area_.Replace(dir, kAckPrefix + m.node,
                         ".ack." + m.node + "." + m.incarnation + ".by." + self + ".tmp",
                         ack.dump());
    if (done.ok()) {
      spdlog::info("completed the part of dead node {} in commit {} from its replicas", m.node,
                   job.id);
      stood_in->insert(m.node);
    }
  } else if (done.err() == EHOSTDOWN || done.err() == ENODATA) {
    if (done.err() == EHOSTDOWN) spdlog::warn("commit {}: {}", job.id, done.message());
    stood_in->insert(m.node);
  }
  if (!done.ok() && done.err() != EHOSTDOWN && done.err() != ENODATA) {
    LogOnce(job.id + "/" + m.node, "completing the dead member's part: " + done.ToString());
  }
}

bool SharedCommits::RemoveRequest(const std::string& id) {
  (void)area_.Remove(RequestDir(id), kRequestName);
  Status removed = area_.RemoveDir(RequestDir(id));
  if (removed.ok() || removed.err() == ENOENT) return true;
  LogOnce(id, "cannot remove: " + removed.ToString());
  return false;
}

void SharedCommits::LogOnce(const std::string& name, const std::string& what) {
  auto [it, inserted] = logged_.emplace(name, what);
  if (inserted && logged_.size() > kMaxLogged) {
    logged_.erase(it);
    return;
  }
  if (!inserted && it->second == what) return;
  it->second = what;
  spdlog::warn("shared commits: {}: {}", name, what);
}

std::vector<CommitOutcome> SharedCommits::Abandon() {
  MutexLock lock(mu_);
  std::vector<CommitOutcome> outcomes;
  for (auto& [id, r] : own_) {
    if ((!r.awaited.empty() || r.for_dead) && !RemoveRequest(id)) to_remove_.insert(id);
    if (r.for_dead) continue;  // Never published: nobody waits for it here.
    Status withdrawn = Status::Error(ECANCELED, "commit of " + r.marker + " withdrawn: unmounting");
    outcomes.push_back({id, r.marker, withdrawn});
  }
  own_.clear();
  for (auto it = to_remove_.begin(); it != to_remove_.end();) {
    it = RemoveRequest(*it) ? to_remove_.erase(it) : std::next(it);
  }
  PublishView();
  return outcomes;
}

void SharedCommits::PublishView() {
  const Clock::time_point now = clock_.Now();
  std::vector<PendingCommit> pending;
  for (const auto& [id, r] : own_) {
    PendingCommit p{id, r.marker, {}, now - r.posted_at};
    for (const MemberId& m : r.awaited) {
      if (!r.acked.count(m.node)) p.waiting_for.push_back(m.node);
    }
    pending.push_back(std::move(p));
  }
  const size_t owed =
      static_cast<size_t>(std::count_if(
          seen_.begin(), seen_.end(),
          [](const auto& entry) { return entry.second.state == SeenRequest::State::kOwed; })) +
      static_cast<size_t>(std::count_if(own_.begin(), own_.end(), [](const auto& entry) {
        return entry.second.waits_own_data;
      }));
  MutexLock lock(view_mu_);
  pending_view_ = std::move(pending);
  acks_owed_view_ = owed;
  view_at_ = now;
}

std::vector<PendingCommit> SharedCommits::Pending() const {
  MutexLock lock(view_mu_);
  const Clock::duration since = clock_.Now() - view_at_;
  std::vector<PendingCommit> pending = pending_view_;
  for (PendingCommit& p : pending) p.age += since;
  return pending;
}

size_t SharedCommits::acks_owed() const {
  MutexLock lock(view_mu_);
  return acks_owed_view_;
}

}  // namespace ckptfs
