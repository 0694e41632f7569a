#include "core/journal.h"

#include <algorithm>

#include "core/policy.h"

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
  entry->seq = next_seq_++;
  if (entry->kind == JournalEntry::Kind::kPublish) pending_bytes_ += entry->snapshot.size();
  pending_.push_back(std::move(entry));
  AdvanceDurable();
  return next_seq_ - 1;
}

size_t Journal::CancelUnsent(const InodeRef& inode) {
  if (inode->on_backing) return 0;
  auto about = [&](const JournalEntry& e) {
    return e.inode == inode || ((e.kind == JournalEntry::Kind::kUnlink ||
                                 e.kind == JournalEntry::Kind::kRmdir) && e.victim == inode);
  };
  for (const EntryRef& e : pending_) {
    if (e->done) continue;
    if (about(*e) && (e->started || e->applied)) return 0;
    if (!about(*e) && (e->parent == inode || e->new_parent == inode)) return 0;
    for (const Inode::Name& n : e->names) {
      if (n.parent == inode) return 0;
    }
  }
  size_t versions = 0;
  for (const EntryRef& e : pending_) {
    if (!about(*e) || e->done) continue;
    if (e->kind == JournalEntry::Kind::kRename && e->victim) {
      // The renamed file need not reach the backing store, but what it replaced must still go.
      e->kind = e->victim->type == FileType::kDirectory ? JournalEntry::Kind::kRmdir
                                                        : JournalEntry::Kind::kUnlink;
      e->inode = e->new_parent;
      e->parent = e->new_parent;
      e->name = e->new_name;
      e->new_parent.reset();
      e->new_name.clear();
      continue;
    }
    versions += e->kind == JournalEntry::Kind::kPublish;
    Cancel(e);
  }
  AdvanceDurable();
  return versions;
}

void Journal::Cancel(const EntryRef& e) {
  if (e->started || e->applied || e->done) return;  // The flusher owns a started entry.
  if (e->kind == JournalEntry::Kind::kPublish) pending_bytes_ -= e->snapshot.size();
  e->snapshot = FileContent();
  e->cancelled = true;
  e->done = true;
}

std::vector<EntryRef> Journal::TakeBatch(Clock::time_point now, Clock::duration delay,
                                         uint64_t force_seq, size_t max_entries,
                                         uint64_t max_bytes) {
  std::vector<EntryRef> batch;
  uint64_t bytes = 0;
  for (const EntryRef& e : pending_) {
    if (e->started) break;  // A batch is already in flight.
    if (e->done) continue;
    bool due = e->seq <= force_seq || policy::FlushDue(e->sealed_at, e->hold, delay) <= now;
    if (!due || batch.size() >= max_entries || (bytes >= max_bytes && !batch.empty())) break;
    e->started = true;
    bytes += e->snapshot.size();
    batch.push_back(e);
  }
  return batch;
}

void Journal::Complete(const std::vector<EntryRef>& batch, size_t done) {
  for (size_t i = 0; i < batch.size(); ++i) {
    const EntryRef& e = batch[i];
    if (i < done) {
      if (e->kind == JournalEntry::Kind::kPublish) pending_bytes_ -= e->snapshot.size();
      e->done = true;
      e->snapshot = FileContent();
    }
    e->started = false;
  }
  AdvanceDurable();
}

void Journal::AdvanceDurable() {
  while (!pending_.empty() && pending_.front()->done) pending_.pop_front();
  durable_seq_ = pending_.empty() ? next_seq_ - 1 : pending_.front()->seq - 1;
}

Clock::time_point Journal::HeadDeadline(Clock::duration delay) const {
  for (const EntryRef& e : pending_) {
    if (!e->done) return policy::FlushDue(e->sealed_at, e->hold, delay);
  }
  return Clock::time_point::max();
}

}  // namespace ckptfs
