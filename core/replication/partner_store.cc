#include "core/replication/partner_store.h"

#include <algorithm>

#include "core/replication/replication_policy.h"

namespace ckptfs::replication {

PartnerStore::Room PartnerStore::Reserve(uint64_t size) {
  MutexLock lock(mu_);
  if (!policy::EverFits(size, limit_)) return Room::kTooLarge;
  if (!policy::MayHold(totals_.bytes, size, limit_)) {
    ++totals_.refused_full;
    return Room::kFull;
  }
  totals_.bytes += size;
  return Room::kReserved;
}

void PartnerStore::Unreserve(uint64_t size) {
  MutexLock lock(mu_);
  totals_.bytes -= std::min(size, totals_.bytes);
}

void PartnerStore::Keep(Replica replica) {
  MutexLock lock(mu_);
  auto& replicas = held_[replica.owner].replicas;
  auto [it, inserted] = replicas.try_emplace(replica.seq);
  if (!inserted) {
    totals_.bytes -= std::min(it->second.size, totals_.bytes);
    --totals_.replicas;
  }
  it->second = std::move(replica);
  ++totals_.replicas;
  ++totals_.received;
}

size_t PartnerStore::DropLocked(Held& held, uint64_t through) {
  size_t dropped = 0;
  auto& replicas = held.replicas;
  for (auto it = replicas.begin(); it != replicas.end() && it->first <= through;) {
    totals_.bytes -= std::min(it->second.size, totals_.bytes);
    it = replicas.erase(it);
    ++dropped;
  }
  totals_.replicas -= dropped;
  return dropped;
}

size_t PartnerStore::DropDurable(const OwnerRun& owner, uint64_t durable_seq) {
  MutexLock lock(mu_);
  auto it = held_.find(owner);
  if (it == held_.end()) return 0;
  const size_t dropped = DropLocked(it->second, durable_seq);
  totals_.dropped += dropped;
  if (it->second.replicas.empty() && !it->second.covered) held_.erase(it);
  return dropped;
}

std::vector<OwnerRun> PartnerStore::Owners() const {
  MutexLock lock(mu_);
  std::vector<OwnerRun> owners;
  for (const auto& [owner, held] : held_) {
    if (!held.replicas.empty()) owners.push_back(owner);
  }
  return owners;
}

void PartnerStore::Covered(const OwnerRun& owner, uint64_t seq) {
  MutexLock lock(mu_);
  std::optional<uint64_t>& covered = held_[owner].covered;
  covered = std::max(covered.value_or(0), seq);
}

std::optional<uint64_t> PartnerStore::CoveredOf(const OwnerRun& owner) const {
  MutexLock lock(mu_);
  auto it = held_.find(owner);
  return it == held_.end() ? std::nullopt : it->second.covered;
}

std::vector<Replica> PartnerStore::Through(const OwnerRun& owner, uint64_t through) const {
  MutexLock lock(mu_);
  std::vector<Replica> out;
  auto it = held_.find(owner);
  if (it == held_.end()) return out;
  for (const auto& [seq, r] : it->second.replicas) {
    if (seq > through) break;
    out.push_back(r);
  }
  return out;
}

void PartnerStore::CountCompleted() {
  MutexLock lock(mu_);
  ++totals_.completed_for_dead;
}

PartnerStoreTotals PartnerStore::Totals() const {
  MutexLock lock(mu_);
  PartnerStoreTotals t = totals_;
  t.limit = limit_;
  return t;
}

std::map<std::string, std::pair<uint64_t, uint64_t>> PartnerStore::ByOwner() const {
  MutexLock lock(mu_);
  std::map<std::string, std::pair<uint64_t, uint64_t>> out;
  for (const auto& [owner, held] : held_) {
    if (held.replicas.empty()) continue;
    auto& [count, bytes] = out[owner.node];
    for (const auto& [seq, r] : held.replicas) {
      ++count;
      bytes += r.size;
    }
  }
  return out;
}

std::string PartnerStore::Bytes(const OwnerRun& owner, uint64_t seq) const {
  MutexLock lock(mu_);
  auto of_owner = held_.find(owner);
  if (of_owner == held_.end()) return {};
  auto it = of_owner->second.replicas.find(seq);
  if (it == of_owner->second.replicas.end()) return {};
  return std::string(it->second.bytes.get(), it->second.size);
}

}  // namespace ckptfs::replication
