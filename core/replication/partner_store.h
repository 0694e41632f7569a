// PartnerStore: the replicas a member holds for its partners (the owners), in a bounded amount of
// memory, until each owner reports them durable.
//
// Thread-safe: every method takes the store's lock; none blocks (a replica that does not fit now
// is refused, and its owner offers it again later: that is the back-pressure).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/base/status.h"
#include "core/base/thread_annotations.h"

namespace ckptfs::replication {

// A sealed file version of an owner, as its partner holds it.
struct Replica {
  std::string owner;     // The owner's node name.
  std::string path;      // Relative to the backing directory.
  uint64_t seq = 0;      // The owner's close order (its journal's sequence number).
  uint64_t version = 0;  // The file's version at the owner.
  std::unique_ptr<char[]> bytes;
  uint64_t size = 0;
};

// What the store holds, for stats.
struct PartnerStoreTotals {
  uint64_t replicas = 0;
  uint64_t bytes = 0;     // Held and reserved.
  uint64_t limit = 0;
  uint64_t received = 0;  // Replicas kept since the start.
  uint64_t dropped = 0;   // Replicas dropped because their owner made them durable.
  uint64_t refused_full = 0;
};

class PartnerStore {
 public:
  explicit PartnerStore(uint64_t limit) : limit_(limit) {}

  enum class Room { kReserved, kFull, kTooLarge };
  // Reserves `size` bytes for a replica about to arrive (policy::MayHold), or says why not.
  Room Reserve(uint64_t size) EXCLUDES(mu_);
  // Gives back a reservation whose replica did not arrive whole.
  void Unreserve(uint64_t size) EXCLUDES(mu_);
  // Keeps a replica whose `size` bytes were reserved. A replica of the same owner and seq
  // replaces the one held (its reservation is given back).
  void Keep(Replica replica) EXCLUDES(mu_);
  // Drops `owner`'s replicas with seq <= `durable_seq`; returns how many.
  size_t DropDurable(const std::string& owner, uint64_t durable_seq) EXCLUDES(mu_);

  PartnerStoreTotals Totals() const EXCLUDES(mu_);
  // Per owner: how many replicas and bytes are held.
  std::map<std::string, std::pair<uint64_t, uint64_t>> ByOwner() const EXCLUDES(mu_);
  // The bytes of `owner`'s replica `seq` (empty when not held), for tests and the later
  // completion of a dead owner's checkpoint.
  std::string Bytes(const std::string& owner, uint64_t seq) const EXCLUDES(mu_);

 private:
  const uint64_t limit_;
  mutable Mutex mu_;
  // By owner, then seq.
  std::map<std::string, std::map<uint64_t, Replica>> held_ GUARDED_BY(mu_);
  PartnerStoreTotals totals_ GUARDED_BY(mu_);
};

}  // namespace ckptfs::replication
