// PartnerStore: the replicas a member holds for its partners (the owners), in a bounded amount of
// memory, until each owner reports them durable.
//
// Thread-safe: every method takes the store's lock; none blocks (a replica that does not fit now
// is refused, and its owner offers it again later: that is the back-pressure).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/base/status.h"
#include "core/base/thread_annotations.h"

namespace ckptfs::replication {

// One run of an owner: its node name and the run (wire.h) that numbers its versions.
struct OwnerRun {
  std::string node;
  std::string run;
  auto operator<=>(const OwnerRun&) const = default;
};

// A sealed file version of an owner, as its partner holds it, or a rename to a commit marker
// sent as the marker's replica (the renamed file's version under the marker's name, and the name
// it was renamed from). Copies share the bytes; each replica's bytes are its own (a renamed
// marker's count again beside the version it was renamed from).
struct Replica {
  OwnerRun owner;
  std::string path;      // Relative to the backing directory.
  uint64_t seq = 0;      // The owner's close order (its journal's sequence number in that run).
  uint64_t version = 0;  // The file's version at the owner.
  std::shared_ptr<char[]> bytes;
  uint64_t size = 0;
  uint32_t mode = 0644;      // The file's permission bits at the owner.
  std::string renamed_from = {};  // A renamed marker: its old name (relative); else empty.
};

// What the store holds, for stats.
struct PartnerStoreTotals {
  uint64_t replicas = 0;
  uint64_t bytes = 0;     // Held and reserved.
  uint64_t limit = 0;
  uint64_t received = 0;  // Replicas kept since the start.
  uint64_t dropped = 0;   // Replicas dropped because their owner made them durable.
  uint64_t refused_full = 0;
  uint64_t completed_for_dead = 0;  // Versions made durable for dead owners (stand_in.h).
};

class PartnerStore {
 public:
  explicit PartnerStore(uint64_t limit) : limit_(limit) {}

  enum class Room { kReserved, kFull, kTooLarge };
  // Reserves `size` bytes for a replica about to arrive (policy::MayHold), or says why not.
  Room Reserve(uint64_t size) EXCLUDES(mu_);
  // Gives back a reservation whose replica did not arrive whole.
  void Unreserve(uint64_t size) EXCLUDES(mu_);
  // Keeps a replica whose `size` bytes were reserved. A replica of the same owner run and seq
  // replaces the one held (its reservation is given back).
  void Keep(Replica replica) EXCLUDES(mu_);
  // Drops `owner`'s replicas with seq <= `durable_seq`; returns how many.
  size_t DropDurable(const OwnerRun& owner, uint64_t durable_seq) EXCLUDES(mu_);
  // The owner told this partner that everything it sealed up to `seq` is held here or durable
  // (wire.h Covered); the point only rises.
  void Covered(const OwnerRun& owner, uint64_t seq) EXCLUDES(mu_);
  // What `owner` last said it covers; nullopt when it said nothing.
  std::optional<uint64_t> CoveredOf(const OwnerRun& owner) const EXCLUDES(mu_);
  // `owner`'s replicas with seq <= `through`, in seq order (copies that share the bytes).
  std::vector<Replica> Through(const OwnerRun& owner, uint64_t through) const EXCLUDES(mu_);
  // The owner runs it holds replicas of.
  std::vector<OwnerRun> Owners() const EXCLUDES(mu_);
  // One more version was made durable for a dead owner.
  void CountCompleted() EXCLUDES(mu_);

  PartnerStoreTotals Totals() const EXCLUDES(mu_);
  // Per owner: how many replicas and bytes are held.
  std::map<std::string, std::pair<uint64_t, uint64_t>> ByOwner() const EXCLUDES(mu_);
  // The bytes of `owner`'s replica `seq` (empty when not held), for tests.
  std::string Bytes(const OwnerRun& owner, uint64_t seq) const EXCLUDES(mu_);

 private:
  struct Held {
    std::map<uint64_t, Replica> replicas;  // By seq.
    std::optional<uint64_t> covered;
  };
  // Drops `held`'s replicas with seq <= `through`; returns how many.
  size_t DropLocked(Held& held, uint64_t through) REQUIRES(mu_);

  const uint64_t limit_;
  mutable Mutex mu_;
  // By owner run. An entry stays while it holds replicas or a covered point.
  std::map<OwnerRun, Held> held_ GUARDED_BY(mu_);
  PartnerStoreTotals totals_ GUARDED_BY(mu_);
};

}  // namespace ckptfs::replication
