#include "core/shared/shared_mount.h"

#include <spdlog/spdlog.h>

namespace ckptfs {
namespace {

int64_t Milliseconds(Clock::duration d) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(d).count();
}

}  // namespace

Result<std::unique_ptr<SharedMount>> SharedMount::Join(const Config& config,
                                                       std::unique_ptr<SharedArea> area,
                                                       Clock& clock, ProgressFn progress,
                                                       std::string replication_endpoint) {
  const std::string& node = config.node;
  Result<std::unique_ptr<Membership>> membership = Membership::Open(
      *area,
      MembershipSettings{node, config.member_timeout, std::move(replication_endpoint),
                         TakesOverStagedFiles(config)},
      clock, progress);
  if (!membership.ok()) return membership.status();
  std::unique_ptr<SharedCommits> commits = SharedCommits::Open(
      *area, **membership, clock, config.member_timeout, std::move(progress));

  Status joined = (*membership)->Join();
  if (joined.err() == EINPROGRESS) {
    spdlog::info("node name {} is held by a member file: joining once its beat has stood still "
                 "for {} ms", node, config.member_timeout.count());
  }
  // Claiming waits in real time, whatever the clock of the policy.
  const auto give_up = std::chrono::steady_clock::now() + 2 * config.member_timeout;
  while (joined.err() == EINPROGRESS && std::chrono::steady_clock::now() < give_up) {
    std::this_thread::sleep_for(config.poll_interval);
    joined = (*membership)->Tick();
  }
  if (joined.err() == EINPROGRESS) {
    return Status::Error(ETIMEDOUT, "node name " + node + " is still claimed by another mount");
  }
  if (!joined.ok()) return joined;
  if (Status observed = (*membership)->Observe(); !observed.ok()) {
    spdlog::warn("cannot read the other members yet: {}", observed.ToString());
  }
  spdlog::info("joined the shared mounts as node {} ({} others live)",
               node, (*membership)->LiveMembers().size());
  return std::unique_ptr<SharedMount>(new SharedMount(std::move(area), std::move(*membership),
                                                      std::move(commits), config.poll_interval));
}

SharedMount::SharedMount(std::unique_ptr<SharedArea> area, std::unique_ptr<Membership> membership,
                         std::unique_ptr<SharedCommits> commits,
                         std::chrono::milliseconds poll_interval)
    : area_(std::move(area)),
      membership_(std::move(membership)),
      commits_(std::move(commits)),
      poll_interval_(poll_interval) {}

SharedMount::~SharedMount() { Leave(); }

void SharedMount::ForgetPredecessor() { membership_->ForgetPredecessor(); }

Result<std::string> SharedMount::Post(const std::string& marker) { return commits_->Post(marker); }

void SharedMount::Step(const DecidedFn& decided, const std::function<void()>& owing) {
  // Membership logs why a beat failed, once per cause.
  (void)membership_->Tick();
  // SharedCommits logs each outcome.
  std::vector<CommitOutcome> outcomes = commits_->Tick();
  if (!outcomes.empty()) decided(outcomes);
  if (commits_->acks_owed() > 0) owing();
}

void SharedMount::Start(DecidedFn decided, std::function<void()> owing) {
  thread_ = std::thread([this, decided = std::move(decided), owing = std::move(owing)] {
    MutexLock lock(mu_);
    while (!stop_) {
      lock.Unlock();
      Step(decided, owing);
      lock.Lock();
      if (!stop_ && !step_now_) wake_.wait_for(lock, poll_interval_);
      step_now_ = false;
    }
  });
  if (!stands_in_) return;
  stand_in_thread_ = std::thread([this] {
    MutexLock lock(mu_);
    while (!stop_) {
      lock.Unlock();
      const bool worked = commits_->StandInStep();
      lock.Lock();
      if (!stop_ && !worked) wake_.wait_for(lock, poll_interval_);
    }
  });
}

void SharedMount::DataDurable() {
  if (commits_->acks_owed() == 0) return;
  MutexLock lock(mu_);
  step_now_ = true;
  wake_.notify_all();
}

bool SharedMount::StopThreads() {
  {
    MutexLock lock(mu_);
    if (stop_) return false;
    stop_ = true;
    wake_.notify_all();
  }
  if (thread_.joinable()) thread_.join();
  if (stand_in_thread_.joinable()) stand_in_thread_.join();
  return true;
}

void SharedMount::HandOver() {
  if (StopThreads()) spdlog::info("handing the membership of node {} over to the next worker",
                                  membership_->node());
}

void SharedMount::Leave() {
  if (!StopThreads()) return;
  // A last round: the flusher has drained, so every request seen now is acknowledged.
  (void)commits_->Tick();
  for (const CommitOutcome& o : commits_->Abandon()) {
    spdlog::error("commit of {} withdrawn at unmount: {}", o.marker, o.status.ToString());
  }
  if (Status left = membership_->Leave(); !left.ok()) {
    spdlog::warn("leaving the shared directory: {}", left.ToString());
  }
}

nlohmann::json SharedMount::StatusJson() const {
  nlohmann::json j;
  const MemberId self = membership_->self();
  j["node"] = self.node;
  j["incarnation"] = self.incarnation;
  nlohmann::json members = nlohmann::json::array();
  for (const MemberView& m : membership_->Members()) {
    const FlushProgress& p = m.record.progress;
    members.push_back({{"node", m.record.node},
                       {"self", m.self},
                       {"host", m.record.host},
                       {"beat_age_ms", Milliseconds(m.beat_age)},
                       {"sealed", p.sealed_seq},
                       {"durable", p.durable_seq},
                       {"flush_lag_entries", p.sealed_seq - std::min(p.sealed_seq, p.durable_seq)},
                       {"pending_bytes", p.pending_bytes}});
  }
  j["members"] = std::move(members);
  nlohmann::json pending = nlohmann::json::array();
  for (const PendingCommit& c : commits_->Pending()) {
    pending.push_back({{"id", c.id},
                       {"marker", c.marker},
                       {"waiting_for", c.waiting_for},
                       {"age_ms", Milliseconds(c.age)}});
  }
  j["pending_commits"] = std::move(pending);
  j["acks_owed"] = commits_->acks_owed();
  return j;
}

}  // namespace ckptfs
