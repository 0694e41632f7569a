// Rules of replication (-o shared,replicas=N), as pure functions: which members hold a member's
// replicas, and whether a partner's store may take one more.
// core/replication/replicator and core/replication/partner_store apply them.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

namespace ckptfs::policy {

// Most partners a member's versions are replicated to.
inline constexpr int kMaxReplicas = 2;

// The partners of `self`: the first `replicas` of the other live members that follow it in the
// ring of node names (sorted bytewise, wrapping around). Fewer when fewer others are live; never
// `self`, never one twice.
inline std::vector<std::string> PartnersOf(const std::string& self,
                                           std::vector<std::string> live_others, int replicas) {
  std::sort(live_others.begin(), live_others.end());
  live_others.erase(std::unique(live_others.begin(), live_others.end()), live_others.end());
  std::erase(live_others, self);
  std::vector<std::string> partners;
  if (replicas <= 0 || live_others.empty()) return partners;
  auto next = std::upper_bound(live_others.begin(), live_others.end(), self);
  for (size_t i = 0; i < live_others.size() && partners.size() < static_cast<size_t>(replicas);
       ++i) {
    if (next == live_others.end()) next = live_others.begin();
    partners.push_back(*next++);
  }
  return partners;
}

// Whether a partner's store holding `held` of its `limit` bytes may take a replica of `size`
// bytes now.
inline bool MayHold(uint64_t held, uint64_t size, uint64_t limit) {
  return size <= limit && held <= limit - size;
}

// Whether a replica of `size` bytes could ever fit a store of `limit` bytes; one that cannot is
// refused at once rather than waited for.
inline bool EverFits(uint64_t size, uint64_t limit) { return size <= limit; }

// The share of the cache a partner's store may hold by default.
inline uint64_t DefaultPartnerStoreBytes(uint64_t cache_size) { return cache_size / 4; }

}  // namespace ckptfs::policy
