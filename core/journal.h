// The journal: every change the backing store must see, in the order the mount made it.
//
// Data reaches the journal when a file version is sealed (last close, fsync); namespace changes
// (mkdir, rename, unlink, ...) when they happen. The flusher replays the journal on the backing
// store strictly in order, so the backing store is always a prefix of this history, except that
// a version superseded before its turn (the file rewritten at the same name, deleted, or renamed
// over) is skipped: such a file then shows an older version, never a newer one early.
//
// Not thread-safe: guarded by the namespace lock. A started entry belongs to the flusher until
// the batch completes; other threads use entries under the namespace lock.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "core/clock.h"
#include "core/file_content.h"
#include "core/inode.h"

namespace ckptfs {

struct JournalEntry {
  enum class Kind {
    kPublish, kMkdir, kSymlink, kMknod, kRename, kUnlink, kRmdir, kLink, kSetAttr
  };

  Kind kind = Kind::kPublish;
  uint64_t seq = 0;
  Clock::time_point sealed_at;
  Clock::duration hold{};  // Waits at least this long after sealed_at (see policy::NextHold).
  InodeRef inode;  // The subject.
  // Where the subject is (rename, link: the source; unlink, rmdir, mkdir, symlink, mknod,
  // setattr).
  InodeRef parent;
  std::string name;
  // Rename and link destination.
  InodeRef new_parent;
  std::string new_name;
  unsigned rename_flags = 0;
  // The inode a rename replaced or an unlink/rmdir removed.
  InodeRef victim;

  // kPublish: the sealed version and every name it is published under.
  FileContent snapshot;
  uint64_t version = 0;
  std::vector<Inode::Name> names;

  // Attributes to apply (publish, mkdir, symlink, mknod, setattr).
  uint32_t mode = 0;
  uint32_t uid = 0;
  uint32_t gid = 0;
  timespec atime{}, mtime{};
  bool set_mode = false, set_owner = false, set_times = false;
  std::string symlink_target;
  // kMknod: the node's type (S_IFIFO, S_IFSOCK, S_IFCHR, S_IFBLK) and device.
  uint32_t node_type = 0;
  uint64_t rdev = 0;

  bool started = false;    // Taken by the flusher; no longer cancellable.
  // On the backing store, but not durable yet (syncing its directory failed): no longer
  // cancellable; the flusher only syncs its directories again.
  bool applied = false;
  bool cancelled = false;  // Superseded before it was sent.
  bool done = false;       // Durable on the backing store, or cancelled.
};

using EntryRef = std::shared_ptr<JournalEntry>;

const char* KindName(JournalEntry::Kind kind);

class Journal {
 public:
  // Assigns the next sequence number and appends. Returns the sequence number.
  uint64_t Append(EntryRef entry);

  // Cancels every unsent entry about `inode` when it never reached the backing store, its last
  // name is gone and no other pending entry needs it (as a parent directory): nothing of it needs
  // to be written. Returns how many file versions it cancelled.
  size_t CancelUnsent(const InodeRef& inode) REQUIRES(ns_lock);
  // Cancels one unsent entry (a version superseded by a newer one at the same names).
  void Cancel(const EntryRef& entry);

  // The entries from the head that may be flushed now (see policy), at most `max_entries`
  // and about `max_bytes` of data; marks them started.
  std::vector<EntryRef> TakeBatch(Clock::time_point now, Clock::duration delay, uint64_t force_seq,
                                  size_t max_entries, uint64_t max_bytes);

  // The first `done` entries of the batch in flight are durable; the rest go back to pending.
  void Complete(const std::vector<EntryRef>& batch, size_t done);

  // When the head entry becomes eligible by age (time_point::max() when empty).
  Clock::time_point HeadDeadline(Clock::duration delay) const;

  uint64_t last_seq() const { return next_seq_ - 1; }
  // Every entry with seq <= durable_seq() is durable (or cancelled).
  uint64_t durable_seq() const { return durable_seq_; }
  size_t pending_entries() const { return pending_.size(); }
  uint64_t pending_bytes() const { return pending_bytes_; }
  const std::deque<EntryRef>& pending() const { return pending_; }

 private:
  void AdvanceDurable();

  std::deque<EntryRef> pending_;  // Unsent and in-flight entries, in seq order.
  uint64_t next_seq_ = 1;
  uint64_t durable_seq_ = 0;
  uint64_t pending_bytes_ = 0;
};

}  // namespace ckptfs
