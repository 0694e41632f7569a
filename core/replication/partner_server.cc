#include "core/replication/partner_server.h"

#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <spdlog/spdlog.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include "core/replication/replication_policy.h"

namespace ckptfs::replication {

Result<std::unique_ptr<PartnerServer>> PartnerServer::Start(PartnerServerSettings settings,
                                                            const GroupSecret& secret,
                                                            PartnerStore& store) {
  addrinfo hints{};
  hints.ai_flags = AI_NUMERICHOST | AI_NUMERICSERV | AI_PASSIVE;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (int rc = getaddrinfo(settings.bind_address.c_str(), "0", &hints, &found); rc != 0) {
    return Status::Error(EINVAL, "replication: not a numeric address to bind: " +
                                     settings.bind_address);
  }
  std::unique_ptr<addrinfo, decltype(&freeaddrinfo)> owned(found, freeaddrinfo);
  int fd = socket(found->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return Status::FromErrno("replication: socket");
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (bind(fd, found->ai_addr, found->ai_addrlen) != 0 || listen(fd, 64) != 0) {
    Status st = Status::FromErrno("replication: bind to " + settings.bind_address);
    close(fd);
    return st;
  }
  sockaddr_storage bound{};
  socklen_t len = sizeof bound;
  getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &len);
  const uint16_t port = ntohs(bound.ss_family == AF_INET6
                                  ? reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port
                                  : reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
  int stop_fd = eventfd(0, EFD_CLOEXEC);
  if (stop_fd < 0) {
    close(fd);
    return Status::FromErrno("replication: eventfd");
  }
  std::unique_ptr<PartnerServer> server(
      new PartnerServer(std::move(settings), secret, store, fd, stop_fd, port));
  server->acceptor_ = std::thread([s = server.get()] { s->AcceptLoop(); });
  return server;
}

PartnerServer::PartnerServer(PartnerServerSettings settings, const GroupSecret& secret,
                             PartnerStore& store, int listen_fd, int stop_fd, uint16_t port)
    : settings_(std::move(settings)),
      secret_(secret),
      store_(store),
      memory_(store.Totals().limit),
      listen_fd_(listen_fd),
      stop_fd_(stop_fd),
      port_(port) {}

PartnerServer::~PartnerServer() {
  Stop();
  close(listen_fd_);
  close(stop_fd_);
}

void PartnerServer::Stop() {
  {
    MutexLock lock(mu_);
    if (stopped_) return;
    stopped_ = true;
    for (Served& s : served_) s.conn->Shutdown();
  }
  uint64_t one = 1;
  (void)!write(stop_fd_, &one, sizeof one);
  if (acceptor_.joinable()) acceptor_.join();
  std::list<Served> served;
  {
    MutexLock lock(mu_);
    served.swap(served_);
  }
  for (Served& s : served) {
    s.conn->Shutdown();
    if (s.thread.joinable()) s.thread.join();
  }
}

void PartnerServer::ReapDone() {
  for (auto it = served_.begin(); it != served_.end();) {
    if (it->done.load()) {
      it->thread.join();
      it = served_.erase(it);
    } else {
      ++it;
    }
  }
}

void PartnerServer::AcceptLoop() {
  for (;;) {
    pollfd fds[2] = {{listen_fd_, POLLIN, 0}, {stop_fd_, POLLIN, 0}};
    if (poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      spdlog::error("replication: poll of the listening socket: {}", strerror(errno));
      return;
    }
    if (fds[1].revents != 0) return;
    int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;
    auto conn = std::make_shared<Connection>(fd);
    MutexLock lock(mu_);
    if (stopped_) return;
    ReapDone();
    if (served_.size() >= kMaxConnections) {
      spdlog::warn("replication: closing a connection from {}: {} connections are served already",
                   conn->Peer(), served_.size());
      continue;
    }
    Served& s = served_.emplace_back();
    s.conn = conn;
    s.thread = std::thread([this, &s] {
      Serve(*s.conn);
      // The peer learns at once; the descriptor is closed when the thread is reaped.
      s.conn->Shutdown();
      s.done.store(true);
    });
  }
}

Result<OwnerRun> PartnerServer::Authenticate(Connection& conn) {
  Result<Nonce> challenge = RandomNonce();
  if (!challenge.ok()) return challenge.status();
  if (Status st = conn.Send(Encode(Challenge{*challenge})); !st.ok()) return st;
  Result<std::string> body = conn.Expect(Type::kHello);
  if (body.status().err() == ECONNRESET) {
    return Status::Error(ECONNRESET, body.status().message() +
                                         " before its hello (a member of another replication "
                                         "protocol version than " +
                                         std::to_string(kProtocolVersion) +
                                         " refuses this daemon's challenge so)");
  }
  if (!body.ok()) return body.status();
  Result<Hello> hello = DecodeHello(*body);
  if (!hello.ok()) return hello.status();
  if (!SameMac(hello->mac, secret_.MemberProof(*challenge, hello->nonce, hello->node))) {
    return Status::Error(EACCES, "node " + hello->node + " did not prove it holds the secret");
  }
  Welcome welcome{settings_.node,
                  secret_.PartnerProof(*challenge, hello->nonce, hello->node, settings_.node)};
  if (Status st = conn.Send(Encode(welcome)); !st.ok()) return st;
  return OwnerRun{hello->node, hello->run};
}

void PartnerServer::Serve(Connection& conn) {
  const std::string peer = conn.Peer();
  conn.SetTimeout(settings_.handshake_timeout);
  Result<OwnerRun> owner = Authenticate(conn);
  if (!owner.ok()) {
    ++refused_;
    spdlog::warn("replication: refused a connection from {}: {}", peer,
                 owner.status().ToString());
    return;
  }
  ++accepted_;
  conn.SetTimeout(std::chrono::milliseconds(0));
  spdlog::info("replication: node {} (run {}) connected from {}", owner->node, owner->run, peer);
  Status st;
  while (st.ok()) {
    Result<FrameHeader> header = conn.ReadHeader();
    if (!header.ok()) {
      st = header.status();
      break;
    }
    Result<std::string> body = conn.ReadBody(*header);
    if (!body.ok()) {
      st = body.status();
      break;
    }
    if (header->type == Type::kOffer) {
      Result<Offer> offer = DecodeOffer(*body);
      st = offer.ok() ? TakeOffer(conn, *owner, *offer) : offer.status();
    } else if (header->type == Type::kDurable || header->type == Type::kCovered) {
      Result<SeqMessage> point = DecodeSeq(*body);
      if (!point.ok()) {
        st = point.status();
      } else if (header->type == Type::kDurable) {
        store_.DropDurable(*owner, point->seq);
      } else {
        store_.Covered(*owner, point->seq);
      }
    } else {
      st = Status::Error(EPROTO, std::string("unexpected ") + TypeName(header->type) + " frame");
    }
  }
  if (st.err() == ECONNRESET) {
    spdlog::info("replication: node {} ({}) disconnected", owner->node, peer);
  } else {
    spdlog::warn("replication: connection of node {} ({}) ended: {}", owner->node, peer,
                 st.ToString());
  }
}

Status PartnerServer::TakeOffer(Connection& conn, const OwnerRun& owner, const Offer& offer) {
  switch (store_.Reserve(offer.size)) {
    case PartnerStore::Room::kTooLarge:
      return conn.Send(Encode(Type::kTooLarge, SeqMessage{offer.seq}));
    case PartnerStore::Room::kFull:
      return conn.Send(Encode(Type::kFull, SeqMessage{offer.seq}));
    case PartnerStore::Room::kReserved:
      break;
  }
  Replica replica{owner,       offer.path,
                  offer.seq,   offer.version,
                  memory_.Take(offer.size),
                  offer.size,  offer.mode,
                  offer.renamed_from};
  if (!replica.bytes) {
    store_.Unreserve(offer.size);
    return conn.Send(Encode(Type::kFull, SeqMessage{offer.seq}));
  }
  Status st = conn.Send(Encode(Type::kAccept, SeqMessage{offer.seq}));
  // A member that stops sending an accepted replica must not hold its reservation for ever.
  conn.SetTimeout(settings_.data_timeout);
  uint64_t received = 0;
  while (st.ok() && received < offer.size) {
    Result<FrameHeader> header = conn.ReadHeader();
    if (!header.ok()) {
      st = header.status();
    } else if (header->type != Type::kData || header->length == 0 ||
               header->length > offer.size - received) {
      st = Status::Error(EPROTO, "expected data of replica " + std::to_string(offer.seq) +
                                     " (" + std::to_string(offer.size - received) +
                                     " bytes left), got a " + TypeName(header->type) +
                                     " frame of " + std::to_string(header->length) + " bytes");
    } else {
      st = conn.ReadExact(replica.bytes.get() + received, header->length);
      received += header->length;
    }
  }
  conn.SetTimeout(std::chrono::milliseconds(0));
  if (!st.ok()) {
    store_.Unreserve(offer.size);
    return st;
  }
  store_.Keep(std::move(replica));
  return conn.Send(Encode(Type::kStored, SeqMessage{offer.seq}));
}

}  // namespace ckptfs::replication
