// PartnerLink: the member's side of replication to one partner. A thread of its own connects
// (and reconnects, backing off), proves the group secret and checks the partner's proof, then
// offers the sealed versions it was given, in close order, one at a time: sent when the partner
// accepts, offered again a little later when the partner is full (back-pressure: nothing on the
// writer's side ever fails or waits for it), skipped when it can never fit or cannot be read. It tells the partner
// of the owner's durable point, so the partner drops what it need no longer hold, and drops such
// versions from its own queue unsent; and of the point it covers: every entry the owner sealed
// up to it is held by the partner or durable (what a partner completing a dead owner's commits
// relies on, stand_in.h).
//
// Thread-safe.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <thread>

#include "core/base/status.h"
#include "core/base/thread_annotations.h"
#include "core/replication/connection.h"
#include "core/replication/member_auth.h"

namespace ckptfs::replication {

// A sealed file version to replicate, or a rename to a commit marker sent as the marker's replica
// (the renamed file's version under the new name `path`, and `renamed_from`). `read` copies
// [offset, offset+length) of its bytes into `out` and returns how many it copied (it holds what it
// reads from alive). `superseded`, when set, says whether a newer version took its place before
// it was flushed (it is then never needed: not sent, and dropped with what it holds).
struct Outgoing {
  uint64_t seq = 0;
  uint64_t version = 0;
  std::string path;
  uint64_t size = 0;
  uint32_t mode = 0644;      // Its permission bits.
  std::string renamed_from = {};  // A rename sent as a marker's replica: the old name; else empty.
  std::function<Result<size_t>(uint64_t offset, size_t length, char* out)> read;
  std::function<bool()> superseded;
  bool Superseded() const { return superseded && superseded(); }
};

// Where a partner listens, from its member file.
struct PartnerAddress {
  std::string node;
  std::string address;
  uint16_t port = 0;
  bool operator==(const PartnerAddress&) const = default;
};

struct PartnerLinkStats {
  bool connected = false;
  uint64_t replicas_stored = 0;
  uint64_t bytes_stored = 0;
  uint64_t offers_full = 0;       // Offers the partner had no room for (offered again later).
  uint64_t replicas_unsendable = 0;  // Too large for the partner, or unreadable.
  uint64_t connect_failures = 0;
  uint64_t queued = 0;
  std::string last_error;
};

class PartnerLink {
 public:
  // Starts the link's thread for member `self_node`, whose versions `run` numbers (wire.h).
  // `secret` must outlive the link. `on_stored` (may be empty) is called on the link's thread,
  // nothing of the link locked, after each version the partner stored.
  PartnerLink(std::string self_node, std::string run, PartnerAddress partner,
              const GroupSecret& secret, std::function<void()> on_stored = nullptr);
  ~PartnerLink();
  PartnerLink(const PartnerLink&) = delete;
  PartnerLink& operator=(const PartnerLink&) = delete;

  // Queues a version (seqs rising).
  void Enqueue(std::shared_ptr<const Outgoing> version) EXCLUDES(mu_);
  // The owner made everything up to `seq` durable.
  void Durable(uint64_t seq) EXCLUDES(mu_);
  // Every entry the owner sealed up to `seq` that is not durable is a version queued to this
  // link (or was superseded) or a directory's creation: the partner is told it covers
  // min(seq, stored_through()) once that rises.
  void Coverable(uint64_t seq) EXCLUDES(mu_);
  // Drops the queued versions that were superseded (Outgoing::superseded).
  void DropSuperseded() EXCLUDES(mu_);
  // Every version queued with seq <= it is held by the partner or durable (versions that cannot
  // be sent hold it back until they are durable); UINT64_MAX when every version queued is.
  uint64_t stored_through() const EXCLUDES(mu_);
  const PartnerAddress& partner() const { return partner_; }
  PartnerLinkStats stats() const EXCLUDES(mu_);
  // Asks the link to end without blocking: it sends no more versions, tells the partner its
  // durable point once more (after Durable(UINT64_MAX): drop every replica of this member) when
  // connected, and ends; finished() then says so.
  void Finish() EXCLUDES(mu_);
  bool finished() const EXCLUDES(mu_);
  // Stops the thread at once (at destruction too).
  void Stop() EXCLUDES(mu_);

 private:
  void Run() EXCLUDES(mu_);
  uint64_t StoredThroughLocked() const REQUIRES(mu_);
  Status Connect() EXCLUDES(mu_);
  // Offers `version` and, when accepted, sends it. Ok(true) when stored, Ok(false) when the
  // partner was full; EFBIG when it can never fit the partner. `unreadable` is set when its bytes
  // could not be read (the connection is then unusable: the partner awaits them).
  Result<bool> Send(const Outgoing& version, bool* unreadable) EXCLUDES(mu_);
  // Waits up to `timeout` for news (a version, a durable point, Stop).
  void Wait(std::chrono::milliseconds timeout) EXCLUDES(mu_);

  const std::string self_node_;
  const std::string run_;
  const PartnerAddress partner_;
  const GroupSecret& secret_;
  const std::function<void()> on_stored_;
  // Owned by the link's thread; Stop shuts it down from outside.
  std::shared_ptr<Connection> conn_;

  mutable Mutex mu_;
  std::condition_variable_any news_;  // With mu_.
  bool stop_ GUARDED_BY(mu_) = false;
  bool news_pending_ GUARDED_BY(mu_) = false;
  bool finishing_ GUARDED_BY(mu_) = false;
  bool finished_ GUARDED_BY(mu_) = false;
  std::shared_ptr<Connection> live_conn_ GUARDED_BY(mu_);  // For Stop to shut down.
  std::deque<std::shared_ptr<const Outgoing>> queue_ GUARDED_BY(mu_);
  uint64_t durable_ GUARDED_BY(mu_) = 0;
  uint64_t durable_sent_ GUARDED_BY(mu_) = 0;
  uint64_t coverable_ GUARDED_BY(mu_) = 0;
  uint64_t covered_sent_ GUARDED_BY(mu_) = 0;  // On this connection.
  // Versions that cannot be replicated (too large for the partner, or unreadable) and are not
  // durable yet.
  std::set<uint64_t> unsendable_ GUARDED_BY(mu_);
  PartnerLinkStats stats_ GUARDED_BY(mu_);
  std::thread thread_;
};

}  // namespace ckptfs::replication
