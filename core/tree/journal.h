// The journal: every change the backing store must see, in the order the mount made it.
//
// Data reaches the journal when a file version is sealed (last close, fsync); namespace changes
// (mkdir, rename, unlink, ...) when they happen. The flusher replays the journal on the backing
// store strictly in order, so the backing store is always a prefix of this history, except that
// a version superseded before its turn (the file rewritten at the same name, deleted, or renamed
// over) is skipped: such a file then shows an older version, never a newer one early.
//
// Thread-safe: the journal and the state of its entries are guarded by the journal's own lock,
// which every method takes inside. Lock order: the namespace lock, then Inode::mu, then the
// flusher's lock, then the journal's lock; nothing else is locked while it is held.
// An entry's other fields are filled before Append; after it only CancelUnsent changes them (on
// entries not started, with the namespace lock held). A started entry belongs to the flusher
// until the batch completes, which reads it without locks; other threads read entries under the
// namespace lock.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/base/clock.h"
#include "core/base/thread_annotations.h"
#include "core/memory/file_content.h"
#include "core/tree/inode.h"

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
  // kRename to a commit marker sent to partners as the marker's replica
  // (policy::RenameSentAsMarker): `snapshot`, `version` and `mode` are then the renamed file's
  // content, version and mode, kept until the rename is durable and no longer held.
  bool sent_as_marker = false;

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

  // Where the entry is on its way to the backing store; read through Journal::StateOf.
  struct State {
    bool started = false;    // Taken by the flusher; no longer cancellable.
    // On the backing store, but not durable yet (syncing its directory failed): no longer
    // cancellable; the flusher only syncs its directories again.
    bool applied = false;
    bool cancelled = false;  // Superseded before it was sent.
    bool done = false;       // Durable on the backing store, or cancelled.
    // Shared mode: a commit marker kept off the backing store until its commit is decided
    // (core/flush/held_markers.h). Done as far as the journal's order goes (durable_seq passes it),
    // still Pending for its inode until released.
    bool held = false;
  };
  State state GUARDED_BY(journal_lock);
};

using EntryRef = std::shared_ptr<JournalEntry>;

const char* KindName(JournalEntry::Kind kind);

class Journal {
 public:
  // Assigns the next sequence number and appends. Returns the sequence number.
  uint64_t Append(EntryRef entry) EXCLUDES(journal_lock);

  // Told, with the journal lock held, of every advance of durable_seq() and of every entry
  // cancelled, before the snapshots concerned are freed (core/recovery/recovery_log.h). Set before
  // use.
  void SetObservers(std::function<void(uint64_t seq)> durable,
                    std::function<void(uint64_t seq)> cancelled) {
    on_durable_ = std::move(durable);
    on_cancelled_ = std::move(cancelled);
  }

  // Cancels every unsent entry about `inode` when it never reached the backing store, its last
  // name is gone and no other pending entry needs it (as a parent directory): nothing of it needs
  // to be written. Returns how many file versions it cancelled; `rewritten` receives the entries
  // it changed instead (a rename over another file becomes that file's removal).
  size_t CancelUnsent(const InodeRef& inode, std::vector<EntryRef>* rewritten = nullptr)
      REQUIRES(ns_lock) EXCLUDES(journal_lock);
  // Cancels one unsent entry (a version superseded by a newer one at the same names). Returns
  // whether it cancelled it: false when the flusher has taken it, or it is done.
  bool Cancel(const EntryRef& entry) EXCLUDES(journal_lock);
  // Whether `entry` is neither durable nor cancelled, or is held.
  bool Pending(const EntryRef& entry) const EXCLUDES(journal_lock);
  // Marks an entry of the batch in flight as held, and releases it once its commit is decided
  // (a held entry keeps its snapshot until it is released and durable).
  void Hold(const EntryRef& entry) EXCLUDES(journal_lock);
  void Release(const EntryRef& entry) EXCLUDES(journal_lock);
  JournalEntry::State StateOf(const EntryRef& entry) const EXCLUDES(journal_lock);

  // The entries from the head that may be flushed now (see policy), at most `max_entries`
  // and about `max_bytes` of data; marks them started.
  std::vector<EntryRef> TakeBatch(Clock::time_point now, Clock::duration delay, uint64_t force_seq,
                                  size_t max_entries, uint64_t max_bytes) EXCLUDES(journal_lock);

  // Of the batch in flight, the first `durable` entries are durable; those after them up to
  // `applied` (>= `durable`) are on the backing store but not durable; those and the rest go back
  // to pending.
  void Complete(const std::vector<EntryRef>& batch, size_t durable, size_t applied)
      EXCLUDES(journal_lock);

  // When the head entry becomes eligible by age (time_point::max() when empty).
  Clock::time_point HeadDeadline(Clock::duration delay) const EXCLUDES(journal_lock);

  uint64_t last_seq() const EXCLUDES(journal_lock);
  // Every entry with seq <= durable_seq() is durable (or cancelled).
  uint64_t durable_seq() const EXCLUDES(journal_lock);
  // Every entry with seq <= settled_seq() is durable (or cancelled) and none is held: the backing
  // store shows all of them.
  uint64_t settled_seq() const EXCLUDES(journal_lock);
  // The held entries, in order (a held rename to a commit marker is durable as far as the order
  // goes, but not applied).
  std::vector<EntryRef> Held() const EXCLUDES(journal_lock);
  size_t pending_entries() const EXCLUDES(journal_lock);
  uint64_t pending_bytes() const EXCLUDES(journal_lock);
  // The entries neither durable nor cancelled, in order. Their snapshots may be read once the
  // flusher has stopped, with the namespace lock held (nothing cancels them then).
  std::vector<EntryRef> Unflushed() const EXCLUDES(journal_lock);
  // What partners get (-o replicas): the sealed file versions and the renames sent as commit
  // markers' replicas (sent_as_marker) with seq > `after`, neither durable nor cancelled, or
  // held, in order, each with a copy of its snapshot taken under the journal's lock (it shares
  // the blocks, which stay readable from any thread while the copy lives).
  std::vector<std::pair<EntryRef, FileContent>> ReplicasAfter(uint64_t after) const
      EXCLUDES(journal_lock);

 private:
  void CancelLocked(const EntryRef& entry) REQUIRES(journal_lock);
  void AdvanceDurableLocked() REQUIRES(journal_lock);

  std::function<void(uint64_t)> on_durable_;
  std::function<void(uint64_t)> on_cancelled_;
  mutable JournalMutex mu_;
  std::deque<EntryRef> pending_ GUARDED_BY(journal_lock);  // Unsent and in-flight, in seq order.
  uint64_t next_seq_ GUARDED_BY(journal_lock) = 1;
  uint64_t durable_seq_ GUARDED_BY(journal_lock) = 0;
  std::map<uint64_t, EntryRef> held_ GUARDED_BY(journal_lock);  // The held entries by seq.
  uint64_t pending_bytes_ GUARDED_BY(journal_lock) = 0;
};

}  // namespace ckptfs
