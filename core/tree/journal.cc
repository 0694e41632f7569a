#include "core/tree/journal.h"

#include <algorithm>

#include "core/base/flush_policy.h"

namespace ckptfs {

const char* KindName(JournalEntry::Kind kind) {
  switch (kind) {
    case JournalEntry::Kind::kPublish: return "write";
    case JournalEntry::Kind::kMkdir: return "mkdir";
    case JournalEntry::Kind::kSymlink: return "symlink";
    case JournalEntry::Kind::kMknod: return "mknod";
    case JournalEntry::Kind::kRename: return "rename";
    case JournalEntry::Kind::kUnlink: return "unlink";
    case JournalEntry::Kind::kRmdir: return "rmdir";
    case JournalEntry::Kind::kLink: return "link";
    case JournalEntry::Kind::kSetAttr: return "setattr";
  }
  return "?";
}

uint64_t Journal::Append(EntryRef entry) {
  JournalLock lock(mu_);
  entry->seq = next_seq_++;
  if (entry->kind == JournalEntry::Kind::kPublish) pending_bytes_ += entry->snapshot.size();
  pending_.push_back(std::move(entry));
  AdvanceDurableLocked();
  return next_seq_ - 1;
}

size_t Journal::CancelUnsent(const InodeRef& inode, std::vector<EntryRef>* rewritten) {
  if (inode->on_backing) return 0;
  auto about = [&](const JournalEntry& e) {
    return e.inode == inode || ((e.kind == JournalEntry::Kind::kUnlink ||
                                 e.kind == JournalEntry::Kind::kRmdir) && e.victim == inode);
  };
  JournalLock lock(mu_);
  for (const EntryRef& e : pending_) {
    if (e->state.done) continue;
    if (about(*e) && (e->state.started || e->state.applied)) return 0;
    if (!about(*e) && (e->parent == inode || e->new_parent == inode)) return 0;
    for (const Inode::Name& n : e->names) {
      if (n.parent == inode) return 0;
    }
  }
  size_t versions = 0;
  for (const EntryRef& e : pending_) {
    if (!about(*e) || e->state.done) continue;
    if (e->kind == JournalEntry::Kind::kRename && e->victim) {
      // The renamed file need not reach the backing store, but what it replaced must still go.
      e->kind = e->victim->type == FileType::kDirectory ? JournalEntry::Kind::kRmdir
                                                        : JournalEntry::Kind::kUnlink;
      e->inode = e->new_parent;
      e->parent = e->new_parent;
      e->name = e->new_name;
      e->new_parent.reset();
      e->new_name.clear();
      e->sent_as_marker = false;
      e->snapshot = FileContent();
      if (rewritten) rewritten->push_back(e);
      continue;
    }
    versions += e->kind == JournalEntry::Kind::kPublish;
    CancelLocked(e);
  }
  AdvanceDurableLocked();
  return versions;
}

bool Journal::Cancel(const EntryRef& e) {
  JournalLock lock(mu_);
  // The flusher owns a started or applied entry.
  if (e->state.started || e->state.applied || e->state.done) return false;
  CancelLocked(e);
  return true;
}

// `e` is neither started, applied nor done.
void Journal::CancelLocked(const EntryRef& e) {
  if (on_cancelled_) on_cancelled_(e->seq);
  if (e->kind == JournalEntry::Kind::kPublish) pending_bytes_ -= e->snapshot.size();
  e->snapshot = FileContent();
  e->state.cancelled = true;
  e->state.done = true;
}

bool Journal::Pending(const EntryRef& e) const {
  JournalLock lock(mu_);
  return !e->state.done || e->state.held;
}

void Journal::Hold(const EntryRef& e) {
  JournalLock lock(mu_);
  e->state.held = true;
  held_[e->seq] = e;
}

void Journal::Release(const EntryRef& e) {
  JournalLock lock(mu_);
  e->state.held = false;
  held_.erase(e->seq);
  if (e->state.done) e->snapshot = FileContent();
}

JournalEntry::State Journal::StateOf(const EntryRef& e) const {
  JournalLock lock(mu_);
  return e->state;
}

std::vector<EntryRef> Journal::TakeBatch(Clock::time_point now, Clock::duration delay,
                                         uint64_t force_seq, size_t max_entries,
                                         uint64_t max_bytes) {
  JournalLock lock(mu_);
  std::vector<EntryRef> batch;
  uint64_t bytes = 0;
  for (const EntryRef& e : pending_) {
    if (e->state.started) break;  // A batch is already in flight.
    if (e->state.done) continue;
    bool due = e->seq <= force_seq || policy::FlushDue(e->sealed_at, e->hold, delay) <= now;
    if (!due || batch.size() >= max_entries || (bytes >= max_bytes && !batch.empty())) break;
    e->state.started = true;
    bytes += e->snapshot.size();
    batch.push_back(e);
  }
  return batch;
}

void Journal::Complete(const std::vector<EntryRef>& batch, size_t durable, size_t applied) {
  JournalLock lock(mu_);
  for (size_t i = 0; i < batch.size(); ++i) {
    const EntryRef& e = batch[i];
    if (i < durable) {
      if (e->kind == JournalEntry::Kind::kPublish) pending_bytes_ -= e->snapshot.size();
      e->state.done = true;
    } else if (i < applied) {
      e->state.applied = true;
    }
    e->state.started = false;
  }
  AdvanceDurableLocked();
  // Freed only once the observer knows them durable; a held one's once it is released.
  for (size_t i = 0; i < durable && i < batch.size(); ++i) {
    if (!batch[i]->state.held) batch[i]->snapshot = FileContent();
  }
}

void Journal::AdvanceDurableLocked() {
  while (!pending_.empty() && pending_.front()->state.done) pending_.pop_front();
  const uint64_t durable = pending_.empty() ? next_seq_ - 1 : pending_.front()->seq - 1;
  if (durable != durable_seq_ && on_durable_) on_durable_(durable);
  durable_seq_ = durable;
}

Clock::time_point Journal::HeadDeadline(Clock::duration delay) const {
  JournalLock lock(mu_);
  for (const EntryRef& e : pending_) {
    if (!e->state.done) return policy::FlushDue(e->sealed_at, e->hold, delay);
  }
  return Clock::time_point::max();
}

uint64_t Journal::last_seq() const {
  JournalLock lock(mu_);
  return next_seq_ - 1;
}

uint64_t Journal::durable_seq() const {
  JournalLock lock(mu_);
  return durable_seq_;
}

uint64_t Journal::settled_seq() const {
  JournalLock lock(mu_);
  return held_.empty() ? durable_seq_ : std::min(durable_seq_, held_.begin()->first - 1);
}

std::vector<EntryRef> Journal::Held() const {
  JournalLock lock(mu_);
  std::vector<EntryRef> out;
  for (const auto& [seq, e] : held_) out.push_back(e);
  return out;
}

size_t Journal::pending_entries() const {
  JournalLock lock(mu_);
  return pending_.size();
}

uint64_t Journal::pending_bytes() const {
  JournalLock lock(mu_);
  return pending_bytes_;
}

std::vector<EntryRef> Journal::Unflushed() const {
  JournalLock lock(mu_);
  std::vector<EntryRef> out;
  for (const EntryRef& e : pending_) {
    if (!e->state.done) out.push_back(e);
  }
  return out;
}

std::vector<std::pair<EntryRef, FileContent>> Journal::ReplicasAfter(uint64_t after) const {
  JournalLock lock(mu_);
  auto replica = [after](const JournalEntry& e) REQUIRES(journal_lock) {
    return e.seq > after && !e.state.cancelled &&
           (e.kind == JournalEntry::Kind::kPublish || e.sent_as_marker);
  };
  // Held entries are done (out of pending_) or not (still in it): each is taken once, in order.
  std::map<uint64_t, std::pair<EntryRef, FileContent>> found;
  for (const auto& [seq, e] : held_) {
    if (replica(*e)) found.try_emplace(seq, e, e->snapshot);
  }
  for (const EntryRef& e : pending_) {
    if (!e->state.done && replica(*e)) found.try_emplace(e->seq, e, e->snapshot);
  }
  std::vector<std::pair<EntryRef, FileContent>> out;
  for (auto& [seq, entry] : found) out.push_back(std::move(entry));
  return out;
}

}  // namespace ckptfs
