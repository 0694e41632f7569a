#include "core/replication/partner_link.h"

#include <spdlog/spdlog.h>

#include <algorithm>

namespace ckptfs::replication {
namespace {

constexpr std::chrono::milliseconds kConnectTimeout{2000};
// A partner answers an offer at once, and stores a replica as fast as it arrives.
constexpr std::chrono::milliseconds kReplyTimeout{30000};
constexpr std::chrono::milliseconds kFirstBackoff{100};
constexpr std::chrono::milliseconds kMaxBackoff{2000};
// How soon a version a full partner refused is offered again (sooner when the owner's durable
// point moves and the partner is told to drop replicas).
constexpr std::chrono::milliseconds kFullRetry{50};

}  // namespace

PartnerLink::PartnerLink(std::string self_node, std::string run, PartnerAddress partner,
                         const GroupSecret& secret, std::function<void()> on_stored)
    : self_node_(std::move(self_node)),
      run_(std::move(run)),
      partner_(std::move(partner)),
      secret_(secret),
      on_stored_(std::move(on_stored)) {
  thread_ = std::thread([this] { Run(); });
}

PartnerLink::~PartnerLink() { Stop(); }

void PartnerLink::Stop() {
  {
    MutexLock lock(mu_);
    stop_ = true;
    if (live_conn_) live_conn_->Shutdown();
    news_.notify_all();
  }
  if (thread_.joinable()) thread_.join();
}

void PartnerLink::Finish() {
  MutexLock lock(mu_);
  finishing_ = true;
  news_pending_ = true;
  news_.notify_all();
}

bool PartnerLink::finished() const {
  MutexLock lock(mu_);
  return finished_;
}

void PartnerLink::Enqueue(std::shared_ptr<const Outgoing> version) {
  MutexLock lock(mu_);
  queue_.push_back(std::move(version));
  news_pending_ = true;
  news_.notify_all();
}

void PartnerLink::Durable(uint64_t seq) {
  MutexLock lock(mu_);
  if (seq <= durable_) return;
  durable_ = seq;
  while (!queue_.empty() && queue_.front()->seq <= seq) queue_.pop_front();
  unsendable_.erase(unsendable_.begin(), unsendable_.upper_bound(seq));
  news_pending_ = true;
  news_.notify_all();
}

void PartnerLink::Coverable(uint64_t seq) {
  MutexLock lock(mu_);
  if (seq <= coverable_) return;
  coverable_ = seq;
  news_pending_ = true;
  news_.notify_all();
}

void PartnerLink::DropSuperseded() {
  MutexLock lock(mu_);
  std::erase_if(queue_, [](const auto& v) { return v->Superseded(); });
}

uint64_t PartnerLink::stored_through() const {
  MutexLock lock(mu_);
  return StoredThroughLocked();
}

uint64_t PartnerLink::StoredThroughLocked() const {
  uint64_t through = queue_.empty() ? UINT64_MAX : queue_.front()->seq - 1;
  if (!unsendable_.empty()) through = std::min(through, *unsendable_.begin() - 1);
  return std::max(through, durable_);
}

PartnerLinkStats PartnerLink::stats() const {
  MutexLock lock(mu_);
  PartnerLinkStats s = stats_;
  s.queued = queue_.size();
  return s;
}

void PartnerLink::Wait(std::chrono::milliseconds timeout) {
  MutexLock lock(mu_);
  if (!stop_ && !news_pending_) news_.wait_for(lock, timeout);
  news_pending_ = false;
}

Status PartnerLink::Connect() {
  Result<std::unique_ptr<Connection>> dialed =
      Connection::Dial(partner_.address, partner_.port, kConnectTimeout);
  if (!dialed.ok()) return dialed.status();
  std::shared_ptr<Connection> conn = std::move(*dialed);
  {
    MutexLock lock(mu_);
    if (stop_) return Status::Error(ECANCELED, "stopping");
    live_conn_ = conn;
  }
  conn->SetTimeout(kReplyTimeout);
  Result<std::string> body = conn->Expect(Type::kChallenge);
  Result<Challenge> challenge = body.ok() ? DecodeChallenge(*body) : Result<Challenge>(body.status());
  if (!challenge.ok()) return challenge.status();
  Result<Nonce> nonce = RandomNonce();
  if (!nonce.ok()) return nonce.status();
  Hello hello{self_node_, run_, *nonce,
              secret_.MemberProof(challenge->nonce, *nonce, self_node_)};
  if (Status st = conn->Send(Encode(hello)); !st.ok()) return st;
  body = conn->Expect(Type::kWelcome);
  if (!body.ok()) {
    return Status::Error(body.status().err() == ECONNRESET ? EACCES : body.status().err(),
                         "partner " + partner_.node + " refused this member (" +
                             body.status().message() + ")");
  }
  Result<Welcome> welcome = DecodeWelcome(*body);
  if (!welcome.ok()) return welcome.status();
  if (welcome->node != partner_.node ||
      !SameMac(welcome->mac, secret_.PartnerProof(challenge->nonce, *nonce, self_node_,
                                                  welcome->node))) {
    return Status::Error(EACCES, "the listener at " + partner_.address + ":" +
                                     std::to_string(partner_.port) + " did not prove it is " +
                                     partner_.node);
  }
  conn_ = std::move(conn);
  MutexLock lock(mu_);
  covered_sent_ = 0;  // A new connection: the partner is told again.
  return Status::Ok();
}

Result<bool> PartnerLink::Send(const Outgoing& version, bool* unreadable) {
  Offer offer{version.seq,  version.version, version.size,
              version.path, version.mode,    version.renamed_from};
  if (Status st = conn_->Send(Encode(offer)); !st.ok()) return st;
  Result<FrameHeader> header = conn_->ReadHeader();
  if (!header.ok()) return header.status();
  Result<std::string> body = conn_->ReadBody(*header);
  if (!body.ok()) return body.status();
  Result<SeqMessage> reply = DecodeSeq(*body);
  if (!reply.ok()) return reply.status();
  if (reply->seq != version.seq) return Status::Error(EPROTO, "reply for another version");
  if (header->type == Type::kFull) return false;
  if (header->type == Type::kTooLarge) {
    return Status::Error(EFBIG, version.path + " is larger than partner " + partner_.node +
                                    " may hold");
  }
  if (header->type != Type::kAccept) {
    return Status::Error(EPROTO, std::string("unexpected ") + TypeName(header->type));
  }
  std::unique_ptr<char[]> chunk(new char[kMaxDataChunk]);
  for (uint64_t offset = 0; offset < version.size;) {
    const size_t want = static_cast<size_t>(std::min<uint64_t>(kMaxDataChunk, version.size - offset));
    Result<size_t> got = version.read(offset, want, chunk.get());
    if (!got.ok() || *got != want) {
      *unreadable = true;
      return got.ok() ? Status::Error(EIO, version.path + ": its sealed version is shorter than "
                                                          "its size")
                      : got.status();
    }
    if (Status st = conn_->SendData(chunk.get(), want); !st.ok()) return st;
    offset += want;
  }
  body = conn_->Expect(Type::kStored);
  if (!body.ok()) return body.status();
  reply = DecodeSeq(*body);
  if (!reply.ok()) return reply.status();
  if (reply->seq != version.seq) return Status::Error(EPROTO, "stored another version");
  return true;
}

void PartnerLink::Run() {
  std::chrono::milliseconds backoff = kFirstBackoff;
  for (;;) {
    {
      MutexLock lock(mu_);
      if (stop_) break;
    }
    if (!conn_) {
      {
        MutexLock lock(mu_);
        if (finishing_) break;  // Nobody to tell.
      }
      Status connected = Connect();
      MutexLock lock(mu_);
      stats_.connected = connected.ok();
      if (!connected.ok()) {
        live_conn_.reset();
        if (stop_) break;
        ++stats_.connect_failures;
        if (stats_.last_error != connected.message()) {
          spdlog::warn("replication: cannot reach partner {}: {}", partner_.node,
                       connected.ToString());
        }
        stats_.last_error = connected.message();
        lock.Unlock();
        Wait(backoff);
        backoff = std::min(backoff * 2, kMaxBackoff);
        continue;
      }
      spdlog::info("replication: connected to partner {} at {}:{}", partner_.node,
                   partner_.address, partner_.port);
      stats_.last_error.clear();
      backoff = kFirstBackoff;
    }
    std::shared_ptr<const Outgoing> next;
    uint64_t durable_notice = 0;
    uint64_t covered_notice = 0;
    bool finishing = false;
    {
      MutexLock lock(mu_);
      if (durable_ > durable_sent_) durable_notice = durable_;
      const uint64_t covered = std::min(coverable_, StoredThroughLocked());
      if (covered > covered_sent_) covered_notice = covered;
      while (!queue_.empty() && queue_.front()->Superseded()) queue_.pop_front();
      finishing = finishing_;
      if (!queue_.empty() && !finishing) next = queue_.front();
    }
    Status st;
    if (durable_notice != 0) {
      st = conn_->Send(Encode(Type::kDurable, SeqMessage{durable_notice}));
      if (st.ok()) {
        MutexLock lock(mu_);
        durable_sent_ = std::max(durable_sent_, durable_notice);
      }
    }
    // After the durable point: the partner drops what is durable before it learns what it covers.
    if (st.ok() && covered_notice != 0) {
      st = conn_->Send(Encode(Type::kCovered, SeqMessage{covered_notice}));
      if (st.ok()) {
        MutexLock lock(mu_);
        covered_sent_ = std::max(covered_sent_, covered_notice);
      }
    }
    if (finishing) break;
    if (st.ok() && !next) {
      Wait(std::chrono::milliseconds(1000));
      continue;
    }
    bool unreadable = false;
    Result<bool> stored = st.ok() ? Send(*next, &unreadable) : Result<bool>(st);
    MutexLock lock(mu_);
    if (stored.ok() && *stored) {
      ++stats_.replicas_stored;
      stats_.bytes_stored += next->size;
      if (!queue_.empty() && queue_.front() == next) queue_.pop_front();
      lock.Unlock();
      if (on_stored_) on_stored_();
    } else if (stored.ok()) {
      ++stats_.offers_full;
      lock.Unlock();
      Wait(kFullRetry);
    } else if (stored.status().err() == EFBIG || unreadable) {
      ++stats_.replicas_unsendable;
      spdlog::warn("replication: not replicated to {}: {}", partner_.node,
                   stored.status().ToString());
      unsendable_.insert(next->seq);
      auto it = std::find(queue_.begin(), queue_.end(), next);
      if (it != queue_.end()) queue_.erase(it);
      if (unreadable) {
        live_conn_.reset();
        conn_.reset();
      }
    } else {
      if (!stop_) {
        spdlog::warn("replication: lost partner {}: {}", partner_.node,
                     stored.status().ToString());
      }
      stats_.last_error = stored.status().message();
      stats_.connected = false;
      live_conn_.reset();
      conn_.reset();
    }
  }
  MutexLock lock(mu_);
  live_conn_.reset();
  conn_.reset();
  finished_ = true;
}

}  // namespace ckptfs::replication
