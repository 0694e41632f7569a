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
  auto& of_owner = held_[replica.owner];
  auto [it, inserted] = of_owner.try_emplace(replica.seq);
  if (!inserted) {
    totals_.bytes -= std::min(it->second.size, totals_.bytes);
    --totals_.replicas;
  }
  it->second = std::move(replica);
  ++totals_.replicas;
  ++totals_.received;
}

size_t PartnerStore::DropDurable(const std::string& owner, uint64_t durable_seq) {
  MutexLock lock(mu_);
  auto of_owner = held_.find(owner);
  if (of_owner == held_.end()) return 0;
  size_t dropped = 0;
  auto& replicas = of_owner->second;
  for (auto it = replicas.begin(); it != replicas.end() && it->first <= durable_seq;) {
    totals_.bytes -= std::min(it->second.size, totals_.bytes);
    it = replicas.erase(it);
    ++dropped;
  }
  totals_.replicas -= dropped;
  totals_.dropped += dropped;
  if (replicas.empty()) held_.erase(of_owner);
  return dropped;
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
  for (const auto& [owner, replicas] : held_) {
    auto& [count, bytes] = out[owner];
    for (const auto& [seq, r] : replicas) {
      ++count;
      bytes += r.size;
    }
  }
  return out;
}

std::string PartnerStore::Bytes(const std::string& owner, uint64_t seq) const {
  MutexLock lock(mu_);
  auto of_owner = held_.find(owner);
  if (of_owner == held_.end()) return {};
  auto it = of_owner->second.find(seq);
  if (it == of_owner->second.end()) return {};
  return std::string(it->second.bytes.get(), it->second.size);
}

}  // namespace ckptfs::replication
