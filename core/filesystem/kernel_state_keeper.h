// KernelStateKeeper: keeps a worker's kernel state record (core/recovery/kernel_state_record.h) current.
// Filesystem tells it what the kernel gets and gives back (nodes, handles), where recorded nodes
// move, and how the content of files open for writing changes; the next worker reads the record
// after a crash. Without a record (a private arena), every call does nothing.
//
// Thread-safe as Filesystem: under the namespace lock (the content calls under the inode's lock).
#pragma once

#include <cstdint>
#include <memory>
#include <unordered_map>

#include "core/base/status.h"
#include "core/base/thread_annotations.h"
#include "core/filesystem/handle_table.h"
#include "core/recovery/kernel_state_record.h"
#include "core/stats/stats.h"
#include "core/tree/inode.h"
#include "core/tree/namespace.h"

namespace ckptfs {

class KernelStateKeeper {
 public:
  // Keeps `record` (null: none) of the nodes of `ns` and the handles of `handles`; a refusal is
  // counted in `stats`. All must outlive the keeper.
  KernelStateKeeper(std::unique_ptr<KernelStateRecord> record, Namespace& ns,
                    HandleTable& handles, Stats& stats);

  // Keeps `record` from now on. Before the first request.
  void SetRecord(std::unique_ptr<KernelStateRecord> record) { record_ = std::move(record); }
  // The record, or null.
  KernelStateRecord* record() const { return record_.get(); }
  // Runs `f` with nothing recorded: a worker that dies meanwhile leaves the record as it was.
  template <typename F>
  auto Unrecorded(F f) {
    std::unique_ptr<KernelStateRecord> record = std::move(record_);
    auto result = f();
    record_ = std::move(record);
    return result;
  }

  // ENFILE (logged, counted) when the record has no room for node `node` (null: a new one)
  // unless it is recorded, and `handles` more handles: called before an operation that gives
  // the kernel those changes anything.
  Status RoomLocked(const Inode* node, size_t handles) REQUIRES(ns_lock);
  // The kernel got node `inode` (a directory), or opened handle `h` of a regular file.
  void RecordNodeLocked(const InodeRef& inode) REQUIRES(ns_lock);
  void RecordHandleLocked(Handle& h) REQUIRES(ns_lock);
  // Handle `h` is released (before its inode's open count goes down).
  void UnrecordHandleLocked(FileHandle& h) REQUIRES(ns_lock);
  // The kernel forgot `inode` (a directory), or its last handle is released.
  void UnrecordNodeLocked(Inode& inode) REQUIRES(ns_lock);
  // The recorded file `inode`'s content is recorded whole again (after it dropped blocks), or
  // has changed in [offset, offset + length).
  void RecordContentLocked(Inode& inode) REQUIRES(inode.mu);
  void RecordWriteLocked(Inode& inode, uint64_t offset, uint64_t length) REQUIRES(inode.mu);
  // `changed` was renamed or removed: its recorded place is made current.
  void RecordPlaceLocked(const InodeRef& changed) REQUIRES(ns_lock);
  // Records what this worker holds (after taking over), then removes the entries found there.
  void RecordAllLocked() REQUIRES(ns_lock);
  // The kernel forgot node `ino`; false when it is not one an earlier worker gave.
  bool ForgetAliasLocked(uint64_t ino) REQUIRES(ns_lock);

 private:
  // RecordNodeLocked of a node whose directory is recorded (or has no name).
  void RecordOneLocked(const InodeRef& inode) REQUIRES(ns_lock);
  // A node entry for node id `ino` (the inode's own, or an earlier worker's alias of it) at the
  // inode's place, its directory recorded first; -1 when the record is full.
  int AddRecordLocked(uint64_t ino, const InodeRef& inode) REQUIRES(ns_lock);
  // The node id under which directory `dir` is recorded (recorded now when it is not).
  uint64_t RecordedDirLocked(const InodeRef& dir) REQUIRES(ns_lock);
  void RecordAliasLocked(uint64_t ino, const InodeRef& inode) REQUIRES(ns_lock);

  std::unique_ptr<KernelStateRecord> record_;
  Namespace& ns_;
  HandleTable& handles_;
  Stats& stats_;
  // The record's entries in use (entry -> the inode whose place it keeps), the entries of nodes
  // an earlier worker gave (node -> entry), and a node id an earlier worker gave of each inode
  // that has one (its children are recorded in it while the kernel holds only that one).
  std::unordered_map<int, InodeRef> recorded_ GUARDED_BY(ns_lock);
  std::unordered_map<uint64_t, int> alias_records_ GUARDED_BY(ns_lock);
  std::unordered_map<const Inode*, uint64_t> alias_ids_ GUARDED_BY(ns_lock);
};

}  // namespace ckptfs
