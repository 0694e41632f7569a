#include "core/replication/replicator.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <thread>

#include "core/replication/replication_policy.h"
#include "core/shared/shared_policy.h"

namespace ckptfs::replication {

std::string FormatEndpoint(const std::string& address, uint16_t port) {
  const bool v6 = address.find(':') != std::string::npos;
  return (v6 ? "[" + address + "]" : address) + ":" + std::to_string(port);
}

bool ParseEndpoint(const std::string& text, std::string* address, uint16_t* port) {
  if (text.size() > 64) return false;
  size_t colon = text.rfind(':');
  if (colon == std::string::npos || colon == 0) return false;
  std::string host = text.substr(0, colon);
  const std::string digits = text.substr(colon + 1);
  if (host.front() == '[') {
    if (host.size() < 3 || host.back() != ']') return false;
    host = host.substr(1, host.size() - 2);
  }
  if (digits.empty() || digits.size() > 5 ||
      !std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    return false;
  }
  const unsigned long value = std::stoul(digits);
  if (value == 0 || value > 65535) return false;
  unsigned char buf[sizeof(in6_addr)];
  if (inet_pton(AF_INET, host.c_str(), buf) != 1 && inet_pton(AF_INET6, host.c_str(), buf) != 1) {
    return false;
  }
  *address = host;
  *port = static_cast<uint16_t>(value);
  return true;
}

std::string LocalAddress() {
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return "127.0.0.1";
  std::string v4, v6;
  for (ifaddrs* i = list; i; i = i->ifa_next) {
    if (!i->ifa_addr || !(i->ifa_flags & IFF_UP) || (i->ifa_flags & IFF_LOOPBACK)) continue;
    char text[INET6_ADDRSTRLEN] = {};
    if (i->ifa_addr->sa_family == AF_INET && v4.empty()) {
      inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(i->ifa_addr)->sin_addr, text, sizeof text);
      v4 = text;
    } else if (i->ifa_addr->sa_family == AF_INET6 && v6.empty()) {
      const in6_addr& a = reinterpret_cast<sockaddr_in6*>(i->ifa_addr)->sin6_addr;
      if (IN6_IS_ADDR_LINKLOCAL(&a)) continue;
      inet_ntop(AF_INET6, &a, text, sizeof text);
      v6 = text;
    }
  }
  freeifaddrs(list);
  return !v4.empty() ? v4 : !v6.empty() ? v6 : "127.0.0.1";
}

Result<std::unique_ptr<Replicator>> Replicator::Start(ReplicatorSettings settings,
                                                      GroupSecret secret) {
  if (settings.run.empty()) {
    Result<Nonce> random = RandomNonce();
    if (!random.ok()) return random.status();
    static constexpr char kHex[] = "0123456789abcdef";
    for (size_t i = 0; i < policy::kIncarnationLength / 2; ++i) {
      settings.run += kHex[(*random)[i] >> 4];
      settings.run += kHex[(*random)[i] & 0xf];
    }
  }
  if (!policy::IsValidIncarnation(settings.run)) {
    return ckptfs::Status::Error(EINVAL, "replication run " + settings.run +
                                             " is not 16 hex digits");
  }
  std::unique_ptr<Replicator> r(new Replicator(std::move(settings), std::move(secret)));
  r->store_ = std::make_unique<PartnerStore>(r->settings_.store_bytes);
  Result<std::unique_ptr<PartnerServer>> server = PartnerServer::Start(
      {r->settings_.node, r->settings_.bind_address}, r->secret_, *r->store_);
  if (!server.ok()) return server.status();
  r->server_ = std::move(*server);
  std::string address = r->settings_.publish_address;
  if (address.empty()) {
    const std::string& bind = r->settings_.bind_address;
    address = (bind == "0.0.0.0" || bind == "::") ? LocalAddress() : bind;
  }
  r->endpoint_ = FormatEndpoint(address, r->server_->port());
  spdlog::info("replication: {} replica(s) of each sealed version (run {}); receiving partners' "
               "replicas at {} (bound to {}), up to {} bytes",
               r->settings_.replicas, r->settings_.run, r->endpoint_, r->settings_.bind_address,
               r->settings_.store_bytes);
  return r;
}

Replicator::Replicator(ReplicatorSettings settings, GroupSecret secret)
    : settings_(std::move(settings)), secret_(std::move(secret)) {}

Replicator::~Replicator() { Stop(); }

namespace {

// How long a retired link may take to tell its former partner before it is stopped anyway, and
// how long the links may take at Stop.
constexpr std::chrono::seconds kRetireGrace{5};
constexpr std::chrono::seconds kStopGrace{1};

}  // namespace

void Replicator::Stop() {
  std::vector<std::shared_ptr<PartnerLink>> links;
  {
    MutexLock lock(mu_);
    for (auto& [node, link] : links_) links.push_back(link);
    for (auto& [link, since] : retired_) links.push_back(link);
    links_.clear();
    retired_.clear();
  }
  for (auto& link : links) link->Finish();
  const auto give_up = std::chrono::steady_clock::now() + kStopGrace;
  for (auto& link : links) {
    while (!link->finished() && std::chrono::steady_clock::now() < give_up) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    link->Stop();
  }
  if (server_) server_->Stop();
}

void Replicator::MembersChanged(const std::vector<MemberEndpoint>& live) {
  std::map<std::string, PartnerAddress> reachable;
  std::vector<std::string> names;
  for (const MemberEndpoint& m : live) {
    PartnerAddress a{m.node, "", 0};
    if (m.node == settings_.node || !ParseEndpoint(m.endpoint, &a.address, &a.port)) continue;
    reachable[m.node] = a;
    names.push_back(m.node);
  }
  const std::vector<std::string> partners =
      policy::PartnersOf(settings_.node, names, settings_.replicas);
  std::vector<std::shared_ptr<PartnerLink>> gone;
  MutexLock lock(mu_);
  const auto now = std::chrono::steady_clock::now();
  for (auto it = retired_.begin(); it != retired_.end();) {
    if (it->first->finished() || now - it->second >= kRetireGrace) {
      gone.push_back(it->first);
      it = retired_.erase(it);
    } else {
      ++it;
    }
  }
  for (auto it = links_.begin(); it != links_.end();) {
    const bool kept = std::find(partners.begin(), partners.end(), it->first) != partners.end() &&
                      it->second->partner() == reachable[it->first];
    if (kept) {
      ++it;
    } else {
      spdlog::info("replication: {} at {}:{} is no longer a partner", it->first,
                   it->second->partner().address, it->second->partner().port);
      // It drops every replica of this member; the new partners receive what is not durable.
      it->second->Durable(UINT64_MAX);
      it->second->Finish();
      retired_.emplace_back(it->second, now);
      it = links_.erase(it);
    }
  }
  for (const std::string& node : partners) {
    if (links_.count(node)) continue;
    auto link = std::make_shared<PartnerLink>(settings_.node, settings_.run, reachable[node],
                                              secret_, [this] { Stored(); });
    spdlog::info("replication: partner {} at {}", node,
                 FormatEndpoint(reachable[node].address, reachable[node].port));
    link->Durable(durable_);
    for (const auto& v : unflushed_) link->Enqueue(v);
    link->Coverable(CoverableLocked());
    links_[node] = std::move(link);
  }
  progress_.notify_all();
  lock.Unlock();
  for (auto& link : gone) link->Stop();
}

void Replicator::Sealed(std::shared_ptr<const Outgoing> version) {
  MutexLock lock(mu_);
  if (version->seq <= durable_) return;
  unflushed_.push_back(version);
  for (auto& [node, link] : links_) link->Enqueue(version);
}

void Replicator::Fed(uint64_t seq) {
  MutexLock lock(mu_);
  fed_ = std::max(fed_, seq);
  for (auto& [node, link] : links_) link->Coverable(CoverableLocked());
  progress_.notify_all();
}

void Replicator::Replayable(uint64_t seq) {
  MutexLock lock(mu_);
  replayable_ = std::max(replayable_, seq);
  for (auto& [node, link] : links_) link->Coverable(CoverableLocked());
}

uint64_t Replicator::CoverableLocked() const {
  return policy::CoveredPoint(fed_, UINT64_MAX, std::max(replayable_, durable_));
}

void Replicator::Durable(uint64_t seq) {
  MutexLock lock(mu_);
  if (seq <= durable_) return;
  durable_ = seq;
  while (!unflushed_.empty() && unflushed_.front()->seq <= seq) unflushed_.pop_front();
  for (auto& [node, link] : links_) link->Durable(seq);
  progress_.notify_all();
}

void Replicator::DropSuperseded() {
  std::vector<std::shared_ptr<PartnerLink>> links;
  {
    MutexLock lock(mu_);
    std::erase_if(unflushed_, [](const auto& v) { return v->Superseded(); });
    for (auto& [node, link] : links_) links.push_back(link);
  }
  for (auto& link : links) link->DropSuperseded();
}

uint64_t Replicator::replicated_seq() const {
  MutexLock lock(mu_);
  return ReplicatedSeqLocked();
}

bool Replicator::WaitReplicated(uint64_t seq, std::chrono::milliseconds timeout) const {
  const auto until = std::chrono::steady_clock::now() + timeout;
  MutexLock lock(mu_);
  while (ReplicatedSeqLocked() < seq) {
    if (progress_.wait_until(lock, until) == std::cv_status::timeout) {
      return ReplicatedSeqLocked() >= seq;
    }
  }
  return true;
}

void Replicator::Stored() {
  MutexLock lock(mu_);
  progress_.notify_all();
}

uint64_t Replicator::ReplicatedSeqLocked() const {
  if (links_.size() < static_cast<size_t>(settings_.replicas)) return durable_;
  uint64_t through = fed_;
  for (const auto& [node, link] : links_) through = std::min(through, link->stored_through());
  return std::max(through, durable_);
}

ReplicatorStatus Replicator::Status() const {
  ReplicatorStatus s;
  s.endpoint = endpoint_;
  s.replicas = settings_.replicas;
  s.replicated_seq = replicated_seq();
  {
    MutexLock lock(mu_);
    s.queued_versions = unflushed_.size();
    for (const auto& [node, link] : links_) {
      s.partners.push_back({node, FormatEndpoint(link->partner().address, link->partner().port),
                            link->stats(), link->stored_through()});
    }
  }
  s.held = store_->Totals();
  s.held_by_owner = store_->ByOwner();
  s.connections_accepted = server_->connections_accepted();
  s.connections_refused = server_->connections_refused();
  return s;
}

}  // namespace ckptfs::replication
