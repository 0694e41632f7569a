// Replicator: a member's whole part in replication (-o shared,replicas=N). It listens for its
// partners' replicas (PartnerServer into a PartnerStore), publishes where it listens (endpoint(),
// written into its member file), and sends each sealed version of its own, in close order, to
// its N partners (policy::PartnersOf over the live members that publish an endpoint), one
// PartnerLink each. A version is replicated once every partner holds it; the level is
// replicated_seq(). A former partner (the ring changed) is told to drop every replica of this
// member; at Stop, each partner is told the final durable point.
//
// Thread-safe. Lock order: nothing is locked when it calls into its links, server or store.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/base/status.h"
#include "core/base/thread_annotations.h"
#include "core/replication/member_auth.h"
#include "core/replication/partner_link.h"
#include "core/replication/partner_server.h"
#include "core/replication/partner_store.h"

namespace ckptfs::replication {

struct ReplicatorSettings {
  std::string node;
  int replicas = 1;                      // 1..policy::kMaxReplicas.
  std::string bind_address = "0.0.0.0";  // Where partners' replicas are received.
  // The address published to the others; empty: bind_address, or when that is a wildcard, this
  // host's first non-loopback address (LocalAddress).
  std::string publish_address;
  uint64_t store_bytes = 0;  // How much of partners' replicas this member holds at most.
  // Names this process's versions to its partners (wire.h); empty: chosen at random at Start.
  std::string run;
};

// A live member's published endpoint, as read from its member file.
struct MemberEndpoint {
  std::string node;
  std::string endpoint;  // "ADDRESS:PORT" or "[IPV6]:PORT"; empty: it does not replicate.
};

// "ADDRESS:PORT" of `address` (numeric; IPv6 in brackets) and `port`, and back: false for
// anything that is not a numeric address with a port 1-65535.
std::string FormatEndpoint(const std::string& address, uint16_t port);
bool ParseEndpoint(const std::string& text, std::string* address, uint16_t* port);
// The first non-loopback IPv4 address of this host's interfaces that are up (IPv6 after), or
// 127.0.0.1 when there is none.
std::string LocalAddress();

struct PartnerStatus {
  std::string node;
  std::string endpoint;
  PartnerLinkStats link;
  uint64_t stored_through = 0;
};

struct ReplicatorStatus {
  std::string endpoint;
  int replicas = 0;
  uint64_t replicated_seq = 0;
  uint64_t queued_versions = 0;  // Sealed, not durable, kept for the partners.
  std::vector<PartnerStatus> partners;
  PartnerStoreTotals held;  // What this member holds for others.
  std::map<std::string, std::pair<uint64_t, uint64_t>> held_by_owner;
  uint64_t connections_accepted = 0;
  uint64_t connections_refused = 0;
};

class Replicator {
 public:
  // Binds the listener (an ephemeral port). `secret` is the group's.
  static Result<std::unique_ptr<Replicator>> Start(ReplicatorSettings settings,
                                                   GroupSecret secret);
  ~Replicator();

  // What to publish in the member file.
  const std::string& endpoint() const { return endpoint_; }
  // The run that names this process's versions at its partners.
  const std::string& run() const { return settings_.run; }
  // The live members now (the shared mount's view): partners are chosen again from them.
  void MembersChanged(const std::vector<MemberEndpoint>& live) EXCLUDES(mu_);
  // A version sealed (seqs rising): sent to every partner.
  void Sealed(std::shared_ptr<const Outgoing> version) EXCLUDES(mu_);
  // Every version sealed up to `seq` was handed to Sealed.
  void Fed(uint64_t seq) EXCLUDES(mu_);
  // Every entry sealed up to `seq` that is not durable is a file version or a directory's
  // creation (a partner can replay those alone): partners are told they cover up to it, as far
  // as they hold what was fed (policy::CoveredPoint).
  void Replayable(uint64_t seq) EXCLUDES(mu_);
  // Everything up to `seq` is durable on the backing store.
  void Durable(uint64_t seq) EXCLUDES(mu_);
  // Lets go of the versions superseded before they were flushed (and of their blocks).
  void DropSuperseded() EXCLUDES(mu_);
  // Every version sealed with seq <= it is in `replicas` partners' memory, or durable (at most
  // the point Fed names).
  uint64_t replicated_seq() const EXCLUDES(mu_);
  // Waits up to `timeout` for replicated_seq() to reach `seq`; whether it did.
  bool WaitReplicated(uint64_t seq, std::chrono::milliseconds timeout) const EXCLUDES(mu_);
  ReplicatorStatus Status() const EXCLUDES(mu_);
  // The partners' replicas this member holds (for tests, and for completing a dead owner's).
  PartnerStore& store() { return *store_; }
  const PartnerStore& store() const { return *store_; }
  // Stops the links (each first tells its partner the durable point, for up to a second) and the
  // listener.
  void Stop() EXCLUDES(mu_);

 private:
  Replicator(ReplicatorSettings settings, GroupSecret secret);
  // What the links may tell their partners they cover.
  uint64_t CoverableLocked() const REQUIRES(mu_);
  uint64_t ReplicatedSeqLocked() const REQUIRES(mu_);
  // Wakes WaitReplicated: a link stored a version (called on its thread, nothing locked).
  void Stored() EXCLUDES(mu_);

  const ReplicatorSettings settings_;
  const GroupSecret secret_;
  std::unique_ptr<PartnerStore> store_;
  std::unique_ptr<PartnerServer> server_;
  std::string endpoint_;

  mutable Mutex mu_;
  // With mu_: the replicated level may have risen.
  mutable std::condition_variable_any progress_;
  // The partners' links, by node name, with the endpoint each was made for.
  std::map<std::string, std::shared_ptr<PartnerLink>> links_ GUARDED_BY(mu_);
  // Links to former partners, telling them to drop this member's replicas, and since when.
  std::vector<std::pair<std::shared_ptr<PartnerLink>, std::chrono::steady_clock::time_point>>
      retired_ GUARDED_BY(mu_);
  // Versions sealed and not durable yet, for partners chosen later.
  std::deque<std::shared_ptr<const Outgoing>> unflushed_ GUARDED_BY(mu_);
  uint64_t durable_ GUARDED_BY(mu_) = 0;
  uint64_t fed_ GUARDED_BY(mu_) = 0;
  uint64_t replayable_ GUARDED_BY(mu_) = 0;
};

}  // namespace ckptfs::replication
