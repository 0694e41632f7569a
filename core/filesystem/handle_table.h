// HandleTable: the files and directories the kernel holds open, by the numbers it knows them by.
//
// A handle is one kind of open file: a regular file of the namespace (a zarr view's included),
// or a file of a special node (core/filesystem/special_nodes.h: a control file, a file of a tensor view).
// This worker's handle numbers are their addresses with the worker's tag in the top bits;
// handles of an earlier worker (Restore, RecoverCrashedWorker) keep the numbers it gave.
// Directory handles are numbered from 1, tagged the same way.
//
// Thread-safe: file handles are added and removed under the namespace lock and found without
// it (the kernel sends no request on a handle it has not been given or has released); directory
// handles have a leaf lock of their own.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <variant>
#include <vector>

#include "core/base/clock.h"
#include "core/base/status.h"
#include "core/base/thread_annotations.h"
#include "core/filesystem/special_nodes.h"
#include "core/tree/inode.h"
#include "core/tree/namespace.h"
#include "core/tree/writer_owners.h"

namespace ckptfs {

// EBADF for a handle number no open file of this worker has.
Status UnknownHandle(uint64_t number);

// An open regular file of the namespace.
struct FileHandle {
  explicit FileHandle(InodeRef file) : inode(std::move(file)) {}
  InodeRef inode;
  bool direct = false;       // Bypasses the kernel's page cache (else counted in cached_handles).
  bool passthrough = false;  // Read by the kernel (counted in passthrough_handles).
  // The file's version after this handle's latest change. Its close seals the file only when
  // that change is not sealed yet: a reader's close, or the late release of an earlier open,
  // never publishes a version another handle is still writing. Guarded by the mu of the
  // inode that holds the content (ContentOwner(inode), the real chunk of a virtual one), which
  // a view may change: not an expression the annotations can name.
  uint64_t wrote_version = 0;
  WriterOwners writers;  // Who wrote through it. Guarded as wrote_version.
  // The write requests it served and their bytes. Guarded as wrote_version.
  uint64_t write_requests = 0;
  uint64_t write_bytes = 0;
  // Direct reads: where the next sequential read starts, and how far the backing file has
  // been asked to be read ahead.
  uint64_t next_read GUARDED_BY(inode->mu) = 0;
  uint64_t read_ahead_until GUARDED_BY(inode->mu) = 0;
  int record = -1;  // Its entry in the kernel state record, or -1. Guarded by the ns_lock.
  uint64_t request = 0;  // The kernel's id of the open or create that made it (Caller).
};

// An open file of a special node.
struct SpecialHandle {
  std::unique_ptr<SpecialFile> file;
};

struct Handle {
  Handle(std::variant<FileHandle, SpecialHandle> what, int open_flags)
      : kind(std::move(what)), flags(open_flags) {}
  // The regular file open, or null for another kind.
  FileHandle* file() { return std::get_if<FileHandle>(&kind); }
  const FileHandle* file() const { return std::get_if<FileHandle>(&kind); }

  // The special file open, or null for a regular file.
  SpecialFile* special() const {
    const auto* s = std::get_if<SpecialHandle>(&kind);
    return s ? s->file.get() : nullptr;
  }

  std::variant<FileHandle, SpecialHandle> kind;
  int flags = 0;
  uint64_t number = 0;  // What the kernel calls it (this worker's, or an earlier worker's).
};

class HandleTable {
 public:
  // Numbers this worker gives are tagged with `worker`; opens and releases of regular files are
  // dated by `clock` (which must outlive the table), the first at construction.
  HandleTable(uint32_t worker, Clock& clock);

  // Takes ownership of an open file; returns its number.
  uint64_t AddLocked(std::unique_ptr<Handle> handle) REQUIRES(ns_lock);
  // Takes ownership of an open file an earlier worker gave the kernel as `number`. Before the
  // first request: the numbers of earlier handles are only read afterwards.
  void AddEarlierLocked(std::unique_ptr<Handle> handle, uint64_t number) REQUIRES(ns_lock);
  // The open file of `number`: one of this worker's, whose tag it carries, or one an earlier
  // worker gave. Null for any other (of a worker that stopped without a handoff).
  Handle* Find(uint64_t number) const;
  // Whether `number` is a handle an earlier worker gave (released or not).
  bool IsEarlier(uint64_t number) const;
  // The handle is released: destroyed.
  void RemoveLocked(Handle* handle) REQUIRES(ns_lock);
  // Every open file, in no order.
  template <typename Fn>
  void ForEachLocked(Fn fn) REQUIRES(ns_lock) {
    for (const auto& [address, h] : handles_) fn(*h);
  }
  // Drops every open file (the mount went away without releasing them).
  void ClearLocked() REQUIRES(ns_lock);
  // Whether no regular file has been open for at least `quiet`.
  bool NoFileOpenForLocked(Clock::duration quiet) const REQUIRES(ns_lock);

  // The handles a crashed worker made, by the kernel's id of the open or create that made them:
  // one whose answer the kernel never got is asked for again by the same request, resent.
  void NoteOpenedByLocked(uint64_t request, uint64_t number) REQUIRES(ns_lock);
  // The earlier handle `request` made, no longer noted; null when none is (or it is released).
  Handle* TakeOpenedByLocked(uint64_t request) REQUIRES(ns_lock);
  // The handle `request` made is released.
  void ForgetOpenedByLocked(uint64_t request) REQUIRES(ns_lock);

  // Directory handles: a listing taken at open, read from an index on.
  uint64_t AddDir(std::vector<DirEntry> entries) EXCLUDES(dir_mu_);
  void AddEarlierDir(uint64_t number, std::vector<DirEntry> entries) EXCLUDES(dir_mu_);
  // Entries from index `offset` on; EBADF for an unknown number.
  Result<std::vector<DirEntry>> ReadDir(uint64_t number, uint64_t offset) const EXCLUDES(dir_mu_);
  void ReleaseDir(uint64_t number) EXCLUDES(dir_mu_);
  // Every open directory: its number and listing.
  std::vector<std::pair<uint64_t, std::vector<DirEntry>>> Dirs() const EXCLUDES(dir_mu_);

 private:
  static constexpr unsigned kTagShift = 48;
  static constexpr uint64_t kAddressMask = (uint64_t{1} << kTagShift) - 1;

  Clock& clock_;
  const uint64_t tag_;
  std::unordered_map<Handle*, std::unique_ptr<Handle>> handles_ GUARDED_BY(ns_lock);
  // Handles of an earlier worker, by their numbers. An entry outlives its handle's release: the
  // kernel never sends a released handle again.
  std::unordered_map<uint64_t, Handle*> earlier_;
  std::unordered_map<uint64_t, uint64_t> opened_by_request_ GUARDED_BY(ns_lock);
  // Open regular files, and when one was last opened or released (construction before that).
  size_t open_files_ GUARDED_BY(ns_lock) = 0;
  Clock::time_point last_open_or_release_ GUARDED_BY(ns_lock);
  mutable Mutex dir_mu_;  // A leaf lock.
  std::unordered_map<uint64_t, std::vector<DirEntry>> dirs_ GUARDED_BY(dir_mu_);
  uint64_t next_dir_ GUARDED_BY(dir_mu_) = 1;
};

}  // namespace ckptfs
