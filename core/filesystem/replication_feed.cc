#include "core/filesystem/replication_feed.h"

#include <utility>
#include <vector>

#include "core/replication/replication_policy.h"

namespace ckptfs {
namespace {

// How soon a sealed version is handed to the replicator (superseded ones are let go of, and
// partners chosen again, every poll interval).
constexpr std::chrono::milliseconds kFeedInterval{5};

}  // namespace

ReplicationFeed::ReplicationFeed(Journal& journal, Namespace& ns, SharedMount& shared,
                                 replication::Replicator& replicator,
                                 std::chrono::milliseconds poll_interval)
    : journal_(journal),
      ns_(ns),
      shared_(shared),
      replicator_(replicator),
      poll_interval_(poll_interval) {}

ReplicationFeed::~ReplicationFeed() { Stop(); }

void ReplicationFeed::Start() {
  thread_ = std::thread([this] { Run(); });
}

void ReplicationFeed::Stop() {
  {
    MutexLock lock(mu_);
    stop_ = true;
    wake_.notify_all();
  }
  if (thread_.joinable()) thread_.join();
}

void ReplicationFeed::Nudge() {
  MutexLock lock(mu_);
  nudged_ = true;
  wake_.notify_all();
}

bool ReplicationFeed::stopped() const {
  MutexLock lock(mu_);
  return stop_;
}

void ReplicationFeed::FeedSealed() {
  const uint64_t last = journal_.last_seq();
  if (last <= fed_) return;
  std::vector<std::shared_ptr<const replication::Outgoing>> versions;
  {
    // The namespace lock keeps paths still while they are read; the journal copies snapshots
    // under its own.
    NamespaceLock lock(ns_.mutex());
    // Where `dir`'s entry `name` is (as when the entry was journaled, unless a directory on the
    // way was renamed since); the file's path now when the directory is gone.
    auto path_of = [this](const InodeRef& dir, const std::string& name, const InodeRef& file)
                       REQUIRES(ns_lock) {
                         std::string path;
                         return dir && ns_.ChildPathLocked(*dir, name, &path) ? path
                                                                              : ns_.PathLocked(file);
                       };
    for (auto& [entry, snapshot] : journal_.ReplicasAfter(fed_)) {
      if (entry->seq > last) break;
      auto v = std::make_shared<replication::Outgoing>();
      v->seq = entry->seq;
      v->version = entry->version;
      if (entry->kind == JournalEntry::Kind::kRename) {
        v->path = path_of(entry->new_parent, entry->new_name, entry->inode);
        v->renamed_from = path_of(entry->parent, entry->name, entry->inode);
      } else {
        v->path = entry->names.empty()
                      ? ns_.PathLocked(entry->inode)
                      : path_of(entry->names.front().parent, entry->names.front().name,
                                entry->inode);
      }
      v->size = snapshot.size();
      v->mode = entry->mode & 07777;
      v->read = [content = std::move(snapshot)](uint64_t offset, size_t length, char* out) {
        return content.ReadInto(offset, length, out);
      };
      // A version rewritten before its flush is cancelled: its blocks must not stay pinned here.
      v->superseded = [&journal = journal_, e = entry] { return journal.StateOf(e).cancelled; };
      versions.push_back(std::move(v));
    }
  }
  for (auto& v : versions) replicator_.Sealed(std::move(v));
  replicator_.Fed(last);
  fed_ = last;
}

uint64_t ReplicationFeed::FirstPendingNamespaceChange() const {
  auto change = [](const JournalEntry& e) {
    if (e.kind == JournalEntry::Kind::kPublish) return policy::JournalChange::kFileVersion;
    if (e.kind == JournalEntry::Kind::kMkdir) return policy::JournalChange::kDirectoryCreation;
    if (e.sent_as_marker) return policy::JournalChange::kRenameSentAsMarker;
    return policy::JournalChange::kOther;
  };
  const std::vector<EntryRef> unflushed = journal_.Unflushed();
  // Read after the pending ones: an entry is held before it leaves them. A held rename to a
  // commit marker is durable in the journal's order but not applied: unless it was sent as the
  // marker's replica, no partner replays it, so none may publish a marker sealed after it.
  const std::vector<EntryRef> held = journal_.Held();
  uint64_t first = 0;
  // Entries change kind (CancelUnsent) under the namespace lock only.
  NamespaceLock lock(ns_.mutex());
  for (const std::vector<EntryRef>* entries : {&unflushed, &held}) {
    for (const EntryRef& e : *entries) {
      if (first != 0 && e->seq >= first) break;
      if (!policy::PartnerReplays(change(*e))) {
        first = e->seq;
        break;
      }
    }
  }
  return first;
}

void ReplicationFeed::Run() {
  auto members_at = std::chrono::steady_clock::time_point{};
  MutexLock lock(mu_);
  while (!stop_) {
    lock.Unlock();
    if (std::chrono::steady_clock::now() - members_at >= poll_interval_) {
      std::vector<replication::MemberEndpoint> live;
      for (const MemberView& m : shared_.Members()) {
        live.push_back({m.record.node, m.record.replication_endpoint});
      }
      replicator_.MembersChanged(live);
      replicator_.DropSuperseded();
      members_at = std::chrono::steady_clock::now();
    }
    FeedSealed();
    // Read after the feed (what it names up to `fed_` was handed over); the durable point read
    // after it covers every namespace change it found done, and reaches the partners first.
    const uint64_t replayable = policy::ReplayableThrough(fed_, FirstPendingNamespaceChange());
    // Settled, not durable: a commit marker held back for its commit stays in the partners'
    // memory (with what follows it) until it is published, so that a partner can publish it
    // should this member die before (policy::DeadMarkerAction).
    replicator_.Durable(journal_.settled_seq());
    replicator_.Replayable(replayable);
    lock.Lock();
    if (!stop_ && !nudged_) wake_.wait_for(lock, kFeedInterval);
    nudged_ = false;
  }
}

}  // namespace ckptfs
