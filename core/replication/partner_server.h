// PartnerServer: the listening side of replication. It binds an ephemeral TCP port on one
// address, authenticates each member that connects (member_auth.h; a refused one is logged and
// counted), and keeps the replicas it is offered in a PartnerStore (received into ReplicaMemory),
// answering each offer at once: accepted, full (the member offers again later) or too large; and
// what each member says it covers (a dead member's commits are completed from it: stand_in.h).
// Each connection is served on a thread of its own (at most kMaxConnections at a time; more are
// closed at once).
//
// Thread-safe. Stop (or destruction) closes every connection and joins every thread.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <list>
#include <memory>
#include <string>
#include <thread>

#include "core/base/status.h"
#include "core/base/thread_annotations.h"
#include "core/replication/connection.h"
#include "core/replication/member_auth.h"
#include "core/replication/partner_store.h"
#include "core/replication/replica_memory.h"

namespace ckptfs::replication {

inline constexpr size_t kMaxConnections = 64;

struct PartnerServerSettings {
  std::string node;          // This member's name, sent in Welcome.
  std::string bind_address;  // Numeric IPv4 or IPv6; "0.0.0.0" for every interface.
  // A member that has not proven itself within this time is dropped.
  std::chrono::milliseconds handshake_timeout{5000};
  // How long it waits for the next bytes of a replica it accepted before it drops the
  // connection and gives the reservation back.
  std::chrono::milliseconds data_timeout{30000};
};

class PartnerServer {
 public:
  // Binds and listens (port 0: the kernel picks one) and starts accepting. `secret` and `store`
  // must outlive the server.
  static Result<std::unique_ptr<PartnerServer>> Start(PartnerServerSettings settings,
                                                      const GroupSecret& secret,
                                                      PartnerStore& store);
  ~PartnerServer();
  PartnerServer(const PartnerServer&) = delete;
  PartnerServer& operator=(const PartnerServer&) = delete;

  void Stop() EXCLUDES(mu_);
  uint16_t port() const { return port_; }

  uint64_t connections_accepted() const { return accepted_.load(); }
  uint64_t connections_refused() const { return refused_.load(); }

 private:
  struct Served {
    std::shared_ptr<Connection> conn;
    std::thread thread;
    std::atomic<bool> done{false};
  };
  PartnerServer(PartnerServerSettings settings, const GroupSecret& secret, PartnerStore& store,
                int listen_fd, int stop_fd, uint16_t port);
  void AcceptLoop() EXCLUDES(mu_);
  // Serves one connection until it ends.
  void Serve(Connection& conn);
  // The handshake: the member's node name and run once it proved it holds the secret.
  Result<OwnerRun> Authenticate(Connection& conn);
  // Takes one offered replica (the offer was read).
  Status TakeOffer(Connection& conn, const OwnerRun& owner, const Offer& offer);
  void ReapDone() REQUIRES(mu_);

  const PartnerServerSettings settings_;
  const GroupSecret& secret_;
  PartnerStore& store_;
  ReplicaMemory memory_;  // What replicas are received into.
  const int listen_fd_;
  const int stop_fd_;  // An eventfd: readable once Stop began.
  const uint16_t port_;
  std::atomic<uint64_t> accepted_{0};
  std::atomic<uint64_t> refused_{0};
  std::thread acceptor_;
  Mutex mu_;
  bool stopped_ GUARDED_BY(mu_) = false;
  std::list<Served> served_ GUARDED_BY(mu_);
};

}  // namespace ckptfs::replication
