// Rules of replication (-o shared,replicas=N), as pure functions: which members hold a member's
// replicas, whether a partner's store may take one more, and when a partner may complete a dead
// member's commits. core/replication/replicator, partner_store and stand_in apply them.
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
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

// Replicas of at least this size are received into memory kept for the next ones
// (replica_memory.h); smaller ones are left to malloc.
inline constexpr uint64_t kKeptReplicaBytes = uint64_t{1} << 20;
inline bool KeepsReplicaMemory(uint64_t size) { return size >= kKeptReplicaBytes; }
// The bytes mapped for a replica of `size` bytes: whole pages of `page` bytes.
inline uint64_t ReplicaMapBytes(uint64_t size, uint64_t page) {
  return (size + page - 1) / page * page;
}
// Whether kept memory of `mapped` bytes takes a replica of `size` bytes: it fits, and wastes at
// most an eighth of it.
inline bool ReusesReplicaMemory(uint64_t mapped, uint64_t size) {
  return size <= mapped && mapped - size <= mapped / 8;
}

// What an owner tells a partner it covers: every entry it sealed up to that point is held by the
// partner or durable. `fed`: every version sealed up to it was queued to the partner's link;
// `stored_through`: every version queued up to it is held by the partner or durable;
// `replayable_through`: every entry up to it that is not durable is one a partner replays
// (PartnerReplays: a rename that is not sent as a marker, an unlink, link, ... keeps the point
// below it until it is durable).
inline uint64_t CoveredPoint(uint64_t fed, uint64_t stored_through, uint64_t replayable_through) {
  return std::min({fed, stored_through, replayable_through});
}

// What a partner can replay of a member's journal entry that is not durable (or is held), for
// what it is told it covers: a file version, a directory's creation, and a rename sent as a commit
// marker's replica (RenameSentAsMarker: a partner publishes its content in the rename's place);
// nothing else (another rename, an unlink, a link, an attribute change).
enum class JournalChange { kFileVersion, kDirectoryCreation, kRenameSentAsMarker, kOther };
inline bool PartnerReplays(JournalChange change) { return change != JournalChange::kOther; }

// The replayable point of a journal whose last entry is `last` and whose first entry that is not
// durable (or is held) and that no partner replays (PartnerReplays) is `first_other` (0: none).
inline uint64_t ReplayableThrough(uint64_t last, uint64_t first_other) {
  return first_other == 0 ? last : std::min(last, first_other - 1);
}

// Whether a partner completes a dead member's part of one commit (makes its versions durable and
// acknowledges for it), or why not.
enum class StandIn {
  kComplete,
  kUnseen,          // The member died before it saw the request: what it owed is unknown.
  kNotReplicated,   // Something it had sealed when it saw the request is not held here.
  kNothingHeld,     // It never told this member what it covers: not its partner.
};
// `sealed_at_sight`: the member's sealed point when it first saw the request (it covers
// everything the commit needs of it), nullopt when it left none; `covered`: the point the member
// last said this partner covers, nullopt when it said nothing to this partner. Sound: it
// completes only when every entry the commit needs of the member is held here or durable.
inline StandIn MayStandIn(std::optional<uint64_t> sealed_at_sight,
                          std::optional<uint64_t> covered) {
  if (!sealed_at_sight) return StandIn::kUnseen;
  if (*sealed_at_sight == 0) return StandIn::kComplete;  // It owed nothing.
  if (!covered) return StandIn::kNothingHeld;
  if (*covered < *sealed_at_sight) return StandIn::kNotReplicated;
  return StandIn::kComplete;
}

// Whether a stand-in writes a dead member's held replica `seq` of a file named `base_name` for a
// commit that needs the member's entries up to `through`, when it wrote them up to `written`
// already: in close order, each once; never a commit marker (a marker is published only by a
// commit of its own: DeadMarkerAction).
inline bool StandInWrites(uint64_t seq, uint64_t written, uint64_t through, bool is_marker) {
  return seq > written && seq <= through && !is_marker;
}

// Whether a worker recovering its run's pending version `seq` (a commit marker or not), or its
// rename `seq` to a commit marker (`is_marker`), publishes it, when a partner stood in for that
// run: not when the partner made it durable already (every version up to `stood_in_through` but
// commit markers; the markers up to `markers_through`, versions and renames, which it published
// for the dead committer, DeadMarkerAction). 0: none.
inline bool RecoveryRepublishes(uint64_t seq, uint64_t stood_in_through, uint64_t markers_through,
                                bool is_marker) {
  return is_marker ? seq > markers_through : seq > stood_in_through;
}

// The member that publishes dead member `dead`'s commit markers from its replicas: the first
// member of `live` that follows it in the ring of node names (its first partner while that one
// lives; its second, with replicas=2, when the first died too). Every member that sees the same
// live members names the same one; nullopt when no other member is live.
inline std::optional<std::string> MarkerStandInOf(const std::string& dead,
                                                  std::vector<std::string> live) {
  std::vector<std::string> first = PartnersOf(dead, std::move(live), 1);
  if (first.empty()) return std::nullopt;
  return first.front();
}

// What a partner does with a dead member's replica of a commit marker (the dead member was the
// committer: it died before it published the marker).
enum class DeadMarker {
  kCommit,         // Commit it for the dead member: once every other live member acknowledged
                   // (its data sealed before the marker durable), and this member's own data
                   // sealed before it and the dead member's versions before it are durable,
                   // publish it last.
  kNotMine,        // Another member is the chosen one (MarkerStandInOf).
  kComesBack,      // The dead member's node runs again and recovers its run: its worker decides.
  kPublished,      // The run's stand-in record says it was published already: never twice.
  kNotReplicated,  // A version the dead member sealed before it is neither held here nor durable:
                   // publishing it would put a marker ahead of its data; it is never published.
};
// `chosen`: this member is MarkerStandInOf the dead one; `continued`: a live process of its node
// continues its run; `marker_seq`: the marker's seq in the dead member's run; `covered`: the
// point the dead member last said this partner covers (nullopt: nothing); `markers_through`:
// the markers of that run its stand-in record says were published (0: none).
inline DeadMarker DeadMarkerAction(bool chosen, bool continued, uint64_t marker_seq,
                                   std::optional<uint64_t> covered, uint64_t markers_through) {
  if (!chosen) return DeadMarker::kNotMine;
  if (continued) return DeadMarker::kComesBack;
  if (marker_seq <= markers_through) return DeadMarker::kPublished;
  // The marker itself is held here; everything sealed before it must be held or durable.
  if (!covered || *covered + 1 < marker_seq) return DeadMarker::kNotReplicated;
  return DeadMarker::kCommit;
}

// A run (wire.h: 16 hex digits) as the number the recovery log keeps, and back; nullopt for
// anything that is not a run.
inline std::optional<uint64_t> RunNumber(std::string_view run) {
  if (run.size() != 16) return std::nullopt;
  uint64_t n = 0;
  for (char c : run) {
    const int digit = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
    if (digit < 0) return std::nullopt;
    n = (n << 4) | static_cast<uint64_t>(digit);
  }
  return n;
}
inline std::string RunName(uint64_t number) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string run(16, '0');
  for (int i = 15; i >= 0; --i, number >>= 4) run[static_cast<size_t>(i)] = kHex[number & 0xf];
  return run;
}

}  // namespace ckptfs::policy
