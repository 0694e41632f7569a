#include "core/shared/membership.h"

#include <signal.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <cinttypes>
#include <climits>
#include <cstdio>
#include <cstring>
#include <random>
#include <set>

#include "core/backing/backing_paths.h"
#include "core/shared/shared_policy.h"

namespace ckptfs {
namespace {

// Incarnations whose end an observer remembers (beyond that, the oldest are forgotten).
constexpr size_t kMaxEndsRemembered = 4 * policy::kMaxMembers;
// Earlier incarnations of its own a member acknowledges for and lists in its file.
constexpr size_t kMaxFormerIncarnations = 16;
constexpr size_t kMaxHostBytes = 255;
// An endpoint "ADDRESS:PORT" a member receives replicas at; validated where it is used.
constexpr size_t kMaxEndpointBytes = 64;
// Bad files logged at once; more are ignored without a log line (a flood must not flood the log).
constexpr size_t kMaxBadFilesLogged = 256;

// The optional list of former incarnations of a member file; false when it is not valid.
bool FormerIncarnations(const nlohmann::json& j, std::vector<std::string>* out) {
  auto it = j.find("former");
  if (it == j.end()) return true;
  if (!it->is_array() || it->size() > kMaxFormerIncarnations) return false;
  for (const nlohmann::json& f : *it) {
    if (!f.is_string() || !policy::IsValidIncarnation(f.get_ref<const std::string&>())) {
      return false;
    }
    out->push_back(f.get<std::string>());
  }
  return true;
}

std::string RandomIncarnation() {
  std::random_device rd;
  uint64_t value = (static_cast<uint64_t>(rd()) << 32) ^ rd();
  char text[policy::kIncarnationLength + 1];
  std::snprintf(text, sizeof text, "%016" PRIx64, value);
  return text;
}

std::string HostName() {
  char host[HOST_NAME_MAX + 1] = {};
  if (gethostname(host, sizeof host - 1) != 0) return "";
  return host;
}

std::string Describe(const MemberRecord& r) {
  return r.node + " (host " + r.host + ", pid " + std::to_string(r.pid) + ", beat " +
         std::to_string(r.beat) + ")";
}

// The parent of process `pid` of this host (-1 when it cannot be read).
pid_t ParentOf(pid_t pid) {
  std::FILE* f = std::fopen(("/proc/" + std::to_string(pid) + "/stat").c_str(), "r");
  if (!f) return -1;
  char text[1024];
  const size_t n = std::fread(text, 1, sizeof text - 1, f);
  std::fclose(f);
  text[n] = '\0';
  // "PID (COMM) STATE PPID ...": COMM may hold anything, so the fields after its last ')'.
  const char* end = std::strrchr(text, ')');
  char state = 0;
  int parent = -1;
  if (!end || std::sscanf(end + 1, " %c %d", &state, &parent) != 2) return -1;
  return parent;
}

// Whether process `pid` of this host is gone or, for a process that takes over (`takes_over`),
// is a worker of this process's own supervisor: one that handed over or died (the supervisor runs
// one serving worker at a time, and starts the next while the last one exits).
bool EndedOrReplaced(pid_t pid, bool takes_over) {
  if (pid == getpid()) return false;
  if (kill(pid, 0) != 0 && errno == ESRCH) return true;
  return takes_over && getppid() != 1 && ParentOf(pid) == getppid();
}

std::string Seconds(Clock::duration d) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f s", std::chrono::duration<double>(d).count());
  return text;
}

}  // namespace

const char* LivenessName(Liveness liveness) {
  switch (liveness) {
    case Liveness::kLive: return "live";
    case Liveness::kDead: return "dead";
    case Liveness::kLeft: return "left";
    case Liveness::kUnknown: return "unknown";
  }
  return "?";
}

Result<std::string> NodeNameOrHostName(const std::string& configured) {
  if (!configured.empty()) {
    if (!policy::IsValidNodeName(configured)) {
      return Status::Error(EINVAL, "node name '" + configured +
                                       "' is not valid (1-64 of A-Z a-z 0-9 . _ -, not "
                                       "starting with '.')");
    }
    return configured;
  }
  std::string host = HostName();
  if (!policy::IsValidNodeName(host)) {
    return Status::Error(EINVAL, "the host name '" + host +
                                     "' is not a valid node name: give one with -o node=NAME");
  }
  return host;
}

Result<std::unique_ptr<Membership>> Membership::Open(SharedArea& area,
                                                     MembershipSettings settings, Clock& clock,
                                                     ProgressFn progress) {
  if (!policy::IsValidNodeName(settings.node)) {
    return Status::Error(EINVAL, "node name '" + settings.node + "' is not valid");
  }
  return std::unique_ptr<Membership>(
      new Membership(area, std::move(settings), clock, std::move(progress), HostName()));
}

Membership::Membership(SharedArea& area, MembershipSettings settings, Clock& clock,
                       ProgressFn progress, std::string host)
    : area_(area),
      node_(std::move(settings.node)),
      member_timeout_(settings.member_timeout),
      clock_(clock),
      progress_(std::move(progress)),
      host_(std::move(host)),
      replication_endpoint_(std::move(settings.replication_endpoint)),
      takes_over_(settings.takes_over) {}

Membership::~Membership() = default;

Result<MemberRecord> Membership::ReadRecord(const std::string& name) const {
  Result<std::string> text = area_.Read(kMembersDirName, name, policy::kMaxMemberFileBytes);
  if (!text.ok()) return text.status();
  std::optional<nlohmann::json> j = ParseObject(*text);
  if (!j) return Status::Error(EINVAL, "not a JSON object");
  MemberRecord r;
  uint64_t pid = 0;
  if (!JsonString(*j, "node", policy::kMaxNodeNameLength, &r.node) || r.node != name ||
      !JsonString(*j, "host", kMaxHostBytes, &r.host) ||
      !JsonString(*j, "incarnation", policy::kIncarnationLength, &r.incarnation) ||
      !policy::IsValidIncarnation(r.incarnation) || !JsonUnsigned(*j, "pid", &pid) ||
      pid > INT32_MAX || !JsonUnsigned(*j, "beat", &r.beat) ||
      !JsonUnsigned(*j, "sealed", &r.progress.sealed_seq) ||
      !JsonUnsigned(*j, "durable", &r.progress.durable_seq) ||
      !JsonUnsigned(*j, "pending_bytes", &r.progress.pending_bytes) ||
      !FormerIncarnations(*j, &r.former) ||
      (j->contains("replication") &&
       !JsonString(*j, "replication", kMaxEndpointBytes, &r.replication_endpoint))) {
    return Status::Error(EINVAL, "not a member file of node " + name);
  }
  r.pid = static_cast<int64_t>(pid);
  return r;
}

Status Membership::Beat() {
  const Clock::time_point started = clock_.Now();
  beat_tried_at_ = started;
  last_progress_ = progress_();
  nlohmann::json j = {{"node", node_},
                      {"host", host_},
                      {"pid", static_cast<uint64_t>(getpid())},
                      {"incarnation", incarnation_},
                      {"beat", beat_ + 1},
                      {"sealed", last_progress_.sealed_seq},
                      {"durable", last_progress_.durable_seq},
                      {"pending_bytes", last_progress_.pending_bytes},
                      {"former", former_}};
  if (!replication_endpoint_.empty()) j["replication"] = replication_endpoint_;
  Status st = area_.Replace(kMembersDirName, node_, "." + node_ + "." + incarnation_ + ".tmp",
                          j.dump());
  if (!st.ok()) return st;
  ++beat_;
  beat_started_at_ = started;
  last_beat_at_ = clock_.Now();
  return Status::Ok();
}

Status Membership::StartIncarnation() {
  incarnation_ = RandomIncarnation();
  beat_ = 0;
  Status st = Beat();
  if (!st.ok()) {
    state_ = State::kOut;
    return Status::Error(st.err(), "cannot write the member file of node " + node_ + " (" +
                                       st.ToString() + ")");
  }
  state_ = State::kJoined;
  renewed_beat_ = beat_;
  renewed_at_ = beat_started_at_;
  spdlog::info("joined the shared backing store as node {} (incarnation {})", node_, incarnation_);
  RemoveEarlierTemporaryFiles();
  return Status::Ok();
}

Status Membership::Rejoin(const std::string& why) {
  spdlog::warn("the member file of node {} (incarnation {}) {}: rejoining as a new incarnation",
                node_, incarnation_, why);
  former_.push_back(incarnation_);
  if (former_.size() > kMaxFormerIncarnations) former_.pop_front();
  incarnation_ = RandomIncarnation();
  beat_ = 0;
  renewed_beat_ = 0;
  renewed_at_ = clock_.Now();
  Status st = Beat();
  if (st.ok()) {
    renewed_beat_ = beat_;
    renewed_at_ = beat_started_at_;
    spdlog::info("node {} rejoined as incarnation {}", node_, incarnation_);
    RemoveEarlierTemporaryFiles();
  }
  return st;
}

void Membership::RemoveEarlierTemporaryFiles() {
  Result<std::vector<std::string>> names = area_.List(kMembersDirName);
  if (!names.ok()) return;
  const std::string prefix = "." + node_ + ".";
  const std::string suffix = ".tmp";
  for (const std::string& name : *names) {
    if (name.size() != prefix.size() + policy::kIncarnationLength + suffix.size() ||
        name.rfind(prefix, 0) != 0 || !name.ends_with(suffix)) {
      continue;
    }
    std::string incarnation = name.substr(prefix.size(), policy::kIncarnationLength);
    if (policy::IsValidIncarnation(incarnation) && incarnation != incarnation_) {
      (void)area_.Remove(kMembersDirName, name);
    }
  }
}

Status Membership::Join() {
  MutexLock lock(mu_);
  Status st = JoinLocked();
  PublishView();
  return st;
}

Status Membership::JoinLocked() {
  if (state_ == State::kJoined || state_ == State::kClaiming) {
    return Status::Error(EALREADY, "node " + node_ + " has joined already");
  }
  Result<MemberRecord> held = ReadRecord(node_);
  if (!held.ok() && held.status().err() == ENOENT) return StartIncarnation();
  if (!held.ok() && (held.status().err() == EINVAL || held.status().err() == EFBIG)) {
    spdlog::warn("member file of node {} is not valid ({}): taking it over", node_,
                 held.status().ToString());
    return StartIncarnation();
  }
  if (!held.ok()) {
    return Status::Error(held.status().err(), "cannot read the member file of node " + node_ +
                                                  " (" + held.status().ToString() + ")");
  }
  const pid_t pid = static_cast<pid_t>(held->pid);
  if (held->host == host_ && EndedOrReplaced(pid, takes_over_)) {
    spdlog::info("member file of node {} was left by process {} of this host, which has ended or "
                 "handed over{}",
                 node_, held->pid,
                 takes_over_ ? ": taking over its incarnation " + held->incarnation : "");
    if (takes_over_) {
      former_.assign(held->former.begin(), held->former.end());
      former_.push_back(held->incarnation);
      while (former_.size() > kMaxFormerIncarnations) former_.pop_front();
    }
    return StartIncarnation();
  }
  state_ = State::kClaiming;
  claimed_ = *held;
  claim_since_ = clock_.Now();
  return Status::Error(EINPROGRESS, "node name " + node_ + " is held by " + Describe(*held) +
                                        ": watching whether it still beats");
}

Status Membership::TickClaiming() {
  Result<MemberRecord> held = ReadRecord(node_);
  if (!held.ok() && held.status().err() == ENOENT) return StartIncarnation();
  if (held.ok() && (held->incarnation != claimed_.incarnation || held->beat != claimed_.beat)) {
    state_ = State::kRefused;
    refusal_ = Status::Error(EEXIST, "node name " + node_ + " is in use by a live member, " +
                                         Describe(*held) +
                                         ": give each mount its own -o node=NAME");
    spdlog::error("{}", refusal_.message());
    return refusal_;
  }
  if (policy::MemberDead(claim_since_, clock_.Now(), member_timeout_)) {
    spdlog::info("member file of node {} did not change for {}: taking it over", node_,
                 Seconds(member_timeout_));
    return StartIncarnation();
  }
  return Status::Error(EINPROGRESS, "watching whether " + Describe(claimed_) + " still beats");
}

Status Membership::TickJoined() {
  const Clock::time_point now = clock_.Now();
  if (now - beat_tried_at_ < policy::BeatInterval(member_timeout_)) return Status::Ok();
  Result<MemberRecord> own = ReadRecord(node_);
  Status beat;
  if (!own.ok() && own.status().err() == ENOENT && beat_ > 0) {
    beat = Rejoin("was removed: the others judged it dead");
  } else if (own.ok() && own->incarnation != incarnation_ &&
             std::find(former_.begin(), former_.end(), own->incarnation) == former_.end()) {
    state_ = State::kRefused;
    refusal_ = Status::Error(EEXIST, "node name " + node_ + " was taken by another mount, " +
                                         Describe(*own) +
                                         ": give each mount its own -o node=NAME");
    spdlog::error("{}", refusal_.message());
    return refusal_;
  } else {
    // A newer beat read back in place was seen from when it landed (by last_beat_at_); until
    // one is, the others may have seen none since the one renewed_at_ stands for.
    const bool in_place = own.ok() && own->incarnation == incarnation_ && own->beat == beat_ &&
                          beat_ > renewed_beat_;
    const Clock::time_point seen_until = in_place ? last_beat_at_ : now;
    if (beat_ > 0 && policy::MayHaveBeenJudgedDead(renewed_at_, seen_until, member_timeout_)) {
      beat = Rejoin("showed no new beat for " + Seconds(seen_until - renewed_at_) +
                    " (a stalled write, or the file removed, unreadable or replaced meanwhile): "
                    "the others may have judged it dead");
    } else {
      if (in_place) {
        renewed_beat_ = beat_;
        renewed_at_ = beat_started_at_;
      }
      beat = Beat();
    }
  }
  LogBeat(beat);
  Status observed = ObserveLocked();
  return beat.ok() ? observed : beat;
}

void Membership::LogBeat(const Status& beat) {
  if (beat.ok()) {
    if (!beat_error_.empty()) spdlog::info("node {}: beats again", node_);
    beat_error_.clear();
    return;
  }
  if (beat.ToString() == beat_error_) return;
  beat_error_ = beat.ToString();
  spdlog::warn("node {}: cannot beat (retried every {} ms): {}", node_,
               policy::BeatInterval(member_timeout_).count(), beat_error_);
}

Status Membership::Tick() {
  MutexLock lock(mu_);
  Status st = TickLocked();
  PublishView();
  return st;
}

Status Membership::TickLocked() {
  switch (state_) {
    case State::kOut: return Status::Error(ENOTCONN, "node " + node_ + " has not joined");
    case State::kRefused: return refusal_;
    case State::kClaiming: return TickClaiming();
    case State::kJoined: return TickJoined();
  }
  return Status::Ok();
}

Status Membership::Observe() {
  MutexLock lock(mu_);
  Status st = ObserveLocked();
  PublishView();
  return st;
}

Status Membership::ObserveLocked() {
  Result<std::vector<std::string>> names = area_.List(kMembersDirName);
  if (!names.ok()) {
    spdlog::warn("cannot list the shared members directory: {}", names.status().ToString());
    return names.status();
  }
  std::sort(names->begin(), names->end());
  // The names that may be members' (temporary files start with '.').
  std::vector<std::string> candidates;
  for (const std::string& name : *names) {
    if (name.front() == '.' || name == node_) continue;
    if (policy::IsValidNodeName(name)) {
      candidates.push_back(name);
    } else {
      LogBadFileOnce(name, "not a valid node name");
    }
  }
  if (candidates.size() > policy::kMaxMembers) {
    if (!crowded_) {
      spdlog::error("the shared members directory holds {} node names, more than the {} members "
                    "a shared backing directory supports: nobody is judged, and commits fail, "
                    "until there are fewer",
                    candidates.size(), policy::kMaxMembers);
    }
    crowded_ = true;
    return Status::Error(EUSERS, "more than " + std::to_string(policy::kMaxMembers) +
                                     " node names in the shared members directory");
  }
  if (crowded_) spdlog::info("the shared members directory is back within its bound");
  crowded_ = false;
  const Clock::time_point now = clock_.Now();
  std::set<std::string> listed;
  for (const std::string& name : candidates) {
    listed.insert(name);
    Result<MemberRecord> r = ReadRecord(name);
    if (!r.ok()) {
      if (r.status().err() != ENOENT) LogBadFileOnce(name, r.status().ToString());
      // A beat that cannot be read does not change: the same rule judges it.
      auto it = observed_.find(name);
      if (it != observed_.end() &&
          policy::MemberDead(it->second.beat_changed_at, now, member_timeout_)) {
        spdlog::warn("member {} has shown no new beat for {}: judged dead",
                     Describe(it->second.record), Seconds(now - it->second.beat_changed_at));
        RememberEnd(it->second.record, Liveness::kDead);
        observed_.erase(it);
      }
      continue;
    }
    bad_files_.erase(name);
    MemberId id{r->node, r->incarnation};
    if (ended_.count(id)) continue;  // Judged dead (or gone) before: never live again.
    auto it = observed_.find(name);
    if (it != observed_.end() && it->second.record.incarnation != r->incarnation) {
      RememberEnd(it->second.record, Liveness::kLeft);
      observed_.erase(it);
      it = observed_.end();
    }
    if (it == observed_.end()) {
      observed_.emplace(name, Observed{*r, now});
      continue;
    }
    if (it->second.record.beat != r->beat) {
      it->second = Observed{*r, now};
      continue;
    }
    if (!policy::MemberDead(it->second.beat_changed_at, now, member_timeout_)) continue;
    spdlog::warn("member {} stopped beating ({} without a new beat; sealed {}, durable {}): "
                 "removing its member file",
                 Describe(*r), Seconds(now - it->second.beat_changed_at),
                 r->progress.sealed_seq, r->progress.durable_seq);
    RememberEnd(*r, Liveness::kDead);
    observed_.erase(it);
    Result<MemberRecord> again = ReadRecord(name);
    if (again.ok() && again->incarnation == r->incarnation && again->beat == r->beat) {
      Status removed = area_.Remove(kMembersDirName, name);
      if (!removed.ok() && removed.err() != ENOENT) {
        spdlog::warn("cannot remove the member file of {}: {}", name, removed.ToString());
      }
    }
  }
  for (auto it = observed_.begin(); it != observed_.end();) {
    if (listed.count(it->first)) {
      ++it;
      continue;
    }
    // Removed while its beat stood still: another observer judged it dead first.
    const Clock::duration still = now - it->second.beat_changed_at;
    const bool dead = policy::MayHaveBeenJudgedDead(it->second.beat_changed_at, now,
                                                    member_timeout_);
    if (dead) {
      spdlog::warn("member {} is gone after {} without a new beat: judged dead",
                   Describe(it->second.record), Seconds(still));
    } else {
      spdlog::info("member {} left", Describe(it->second.record));
    }
    RememberEnd(it->second.record, dead ? Liveness::kDead : Liveness::kLeft);
    it = observed_.erase(it);
  }
  for (auto it = bad_files_.begin(); it != bad_files_.end();) {
    it = std::binary_search(names->begin(), names->end(), it->first) ? std::next(it)
                                                                     : bad_files_.erase(it);
  }
  return Status::Ok();
}

void Membership::RememberEnd(const MemberRecord& record, Liveness how) {
  const MemberId id{record.node, record.incarnation};
  if (ended_.emplace(id, Ended{how, record, clock_.Now()}).second) ended_order_.push_back(id);
  while (ended_order_.size() > kMaxEndsRemembered) {
    ended_.erase(ended_order_.front());
    ended_order_.pop_front();
  }
}

void Membership::LogBadFileOnce(const std::string& name, const std::string& what) {
  auto [it, inserted] = bad_files_.emplace(name, what);
  if (inserted && bad_files_.size() > kMaxBadFilesLogged) {
    bad_files_.erase(it);
    return;
  }
  if (!inserted && it->second == what) return;
  it->second = what;
  spdlog::warn("ignoring {} in the shared members directory: {}", name, what);
}

Status Membership::Leave() {
  MutexLock lock(mu_);
  Status st = LeaveLocked();
  PublishView();
  return st;
}

Status Membership::LeaveLocked() {
  const bool joined = state_ == State::kJoined;
  state_ = State::kOut;
  if (!joined) return Status::Ok();
  Result<MemberRecord> own = ReadRecord(node_);
  if (!own.ok() || own->incarnation != incarnation_) return Status::Ok();
  Status removed = area_.Remove(kMembersDirName, node_);
  if (removed.ok() || removed.err() == ENOENT) {
    spdlog::info("node {} left the shared backing store", node_);
    return Status::Ok();
  }
  return removed;
}

void Membership::ForgetPredecessor() {
  MutexLock lock(mu_);
  if (former_.empty() || state_ != State::kJoined) return;
  spdlog::warn("node {} does not acknowledge for the incarnations of the process before it: "
               "not everything they sealed was taken over", node_);
  former_.clear();
  LogBeat(Beat());
  PublishView();
}

Membership::State Membership::state() const {
  MutexLock lock(mu_);
  return state_;
}

MemberId Membership::self() const {
  MutexLock lock(mu_);
  return {node_, incarnation_};
}

std::vector<MemberId> Membership::LiveMembers() const {
  MutexLock lock(mu_);
  std::vector<MemberId> live;
  for (const auto& [name, o] : observed_) live.push_back({name, o.record.incarnation});
  return live;
}

std::vector<MemberId> Membership::AwaitedMembers() const {
  MutexLock lock(mu_);
  std::map<std::string, MemberId> awaited;
  for (const auto& [name, o] : observed_) awaited.emplace(name, MemberId{name, o.record.incarnation});
  const Clock::time_point now = clock_.Now();
  // The newest judgement of each node first.
  for (auto it = ended_order_.rbegin(); it != ended_order_.rend(); ++it) {
    const Ended& e = ended_.at(*it);
    if (e.how == Liveness::kDead && policy::StillAwaitedAfterDrop(e.at, now, member_timeout_)) {
      awaited.emplace(it->node, *it);
    }
  }
  std::vector<MemberId> ids;
  for (auto& [name, id] : awaited) ids.push_back(std::move(id));
  return ids;
}

bool Membership::MayStillAcknowledge(const MemberId& id) const {
  MutexLock lock(mu_);
  auto live = observed_.find(id.node);
  if (live != observed_.end() && live->second.record.incarnation == id.incarnation) return true;
  auto ended = ended_.find(id);
  if (ended == ended_.end()) return false;
  if (live != observed_.end()) {
    const std::vector<std::string>& former = live->second.record.former;
    return std::find(former.begin(), former.end(), id.incarnation) != former.end();
  }
  return ended->second.how == Liveness::kDead &&
         policy::StillAwaitedAfterDrop(ended->second.at, clock_.Now(), member_timeout_);
}

bool Membership::ContinuedByLive(const MemberId& id) const {
  MutexLock lock(mu_);
  auto live = observed_.find(id.node);
  if (live == observed_.end()) return false;
  const MemberRecord& record = live->second.record;
  return record.incarnation == id.incarnation ||
         std::find(record.former.begin(), record.former.end(), id.incarnation) !=
             record.former.end();
}

bool Membership::IsOwnIncarnation(const std::string& incarnation) const {
  MutexLock lock(mu_);
  return incarnation == incarnation_ ||
         std::find(former_.begin(), former_.end(), incarnation) != former_.end();
}

Liveness Membership::Judge(const MemberId& id) const {
  MutexLock lock(mu_);
  if (id.node == node_ && id.incarnation == incarnation_) {
    return state_ == State::kJoined ? Liveness::kLive : Liveness::kLeft;
  }
  if (auto it = ended_.find(id); it != ended_.end()) return it->second.how;
  // Another incarnation under that name that did not end before this observer's eyes may be a
  // newer one it has not read yet.
  if (auto it = observed_.find(id.node);
      it != observed_.end() && it->second.record.incarnation == id.incarnation) {
    return Liveness::kLive;
  }
  return Liveness::kUnknown;
}

void Membership::PublishView() {
  const Clock::time_point now = clock_.Now();
  std::vector<MemberView> views;
  if (state_ == State::kJoined) {
    MemberRecord me{node_,  host_,  incarnation_, getpid(), beat_, last_progress_,
                    {former_.begin(), former_.end()}, replication_endpoint_};
    views.push_back({me, now - last_beat_at_, true});
  }
  for (const auto& [name, o] : observed_) {
    views.push_back({o.record, now - o.beat_changed_at, false});
  }
  MutexLock lock(view_mu_);
  view_ = std::move(views);
  view_at_ = now;
}

std::vector<MemberView> Membership::Members() const {
  MutexLock lock(view_mu_);
  const Clock::duration since = clock_.Now() - view_at_;
  std::vector<MemberView> views = view_;
  for (MemberView& v : views) v.beat_age += since;
  return views;
}

}  // namespace ckptfs
