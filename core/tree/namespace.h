// Namespace: the inode table and the tree the mount shows. The tree is the backing directory,
// looked up lazily, overlaid with what clients changed through the mount; every change the
// backing store must see is appended to the Journal in the order it was made (namespace changes
// when they happen, a file's version when it is sealed).
//
// Thread-safe through the namespace lock (ns_lock, core/base/thread_annotations.h), which Lock()
// takes: the *Locked methods require it. Lock order: the namespace lock, then Inode::mu.
// Inode numbers are never reused.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/base/clock.h"
#include "core/base/config.h"
#include "core/base/thread_annotations.h"
#include "core/stats/stats.h"
#include "core/tree/inode.h"
#include "core/tree/journal.h"
#include "core/tree/logged_entry.h"
#include "iouring/env.h"

namespace ckptfs {


// How long the kernel may keep attributes and directory entries (the timeouts of the FUSE
// replies). With Config::shared, also the longest this mount serves what it last read of the
// backing store, which other mounts change.
inline constexpr std::chrono::seconds kAttrTimeout{1};

inline constexpr uint64_t kRootIno = 1;
inline constexpr uint64_t kFirstIno = 16;  // Below: the root and the control files.
// Worker w of a mount (Config::worker) numbers its inodes from kFirstIno + (w << this).
inline constexpr unsigned kWorkerInoShift = 40;
// Nodes of the read-only tensor views (core/views/tensor_view/tensor_views.h) have this bit set.
inline constexpr uint64_t kTensorViewInoBit = uint64_t{1} << 62;
inline bool IsTensorViewIno(uint64_t ino) { return (ino & kTensorViewInoBit) != 0; }
// The root of a tensor view: looked up again at every path walk, so that a changed checkpoint is
// seen at once (the view is checked against it at each lookup).
inline bool IsTensorViewRoot(uint64_t ino) { return IsTensorViewIno(ino) && (ino & 0xFFFFFFFF) == 0; }

// Who asks (from the FUSE request). Root is taken to hold every capability (CAP_FSETID), any
// other user none.
struct Caller {
  uint32_t uid = 0;
  uint32_t gid = 0;
  uint32_t umask = 022;
  // The kernel sent the request again because the worker it went to died before answering
  // (FUSE_NOTIFY_RESEND): that worker may have applied it already.
  bool resent = false;
  // The kernel's id of the request (without the resend bit), the same when resent; 0: unknown.
  uint64_t request = 0;
  // The table of descriptors the request came through (FUSE's lock_owner), where the kernel
  // tells it: direct writes (core/tree/writer_owners.h); 0: not told.
  uint64_t lock_owner = 0;
  // Whether the caller has been given a fatal signal: a wait for cache memory then ends with
  // EINTR (Arena::Reserve). Empty: it is never asked.
  std::function<bool()> interrupted{};
  // Whether the caller writes from memory it shares copy-on-write with its parent
  // (policy::WritesFromForkedMemory), asked only of write-only opens; cheap (cached by the
  // asker), as it is asked with the namespace lock held. Empty: never.
  std::function<bool()> writes_forked_memory{};
};

// An entry of a directory listing.
struct DirEntry {
  std::string name;
  uint64_t ino;
  uint32_t type_bits;  // S_IFDIR etc.
};

// ESTALE for an inode number the kernel sent that this worker does not know (one an earlier
// worker gave, or forgotten): the kernel then looks the path up again, once. EROFS for a node of
// a tensor view: only changes reach the namespace with one.
Status UnknownInode(uint64_t ino);

// EINVAL for an empty name, "." and ".." or a name with a slash; ENAMETOOLONG past NAME_MAX.
Status CheckName(const std::string& name);
// A path from the mount's root: names CheckName accepts, joined by '/'.
bool ValidRelativePath(const std::string& path);
// Whether `name` in directory `dir_ino` is a name of the backing store the mount never shows:
// ckptfs' own directory at the top, a checksum manifest (core/integrity/checksum_manifest.h)
// in any directory.
bool PrivateName(uint64_t dir_ino, const std::string& name);
// CheckName, and EPERM for a private name (PrivateName): for a new entry made through the mount.
Status CheckNewName(uint64_t dir_ino, const std::string& name);

// The wall-clock time, for file times.
timespec WallTime();

// The attributes a journal entry gives the backing store: `inode`'s mode, owner and times.
void CopyAttributes(const Inode& inode, JournalEntry& e) REQUIRES(inode.mu);

class Namespace {
 public:
  // A kind of directory served differently from a plain one (a zarr fine grid,
  // core/views/zarr_views.h): how it takes part in looking up and listing the backing store.
  class DirectoryKind {
   public:
    virtual ~DirectoryKind() = default;
    // `dir` has just been found on the backing store.
    virtual void FoundLocked(const InodeRef& dir) REQUIRES(ns_lock) = 0;
    // Takes the backing entry `name` of `dir`, being listed; false leaves it an ordinary child.
    virtual bool TakeBackingEntryLocked(const InodeRef& dir, const std::string& name)
        REQUIRES(ns_lock) = 0;
    // Ok when a new entry `name` may be made in `dir` (which has none of that name).
    virtual Status MayCreateLocked(const InodeRef& dir, const std::string& name)
        REQUIRES(ns_lock) = 0;
  };

  // The root is the backing directory `root_fd` (not owned). Entries go to `journal`, and
  // `appended` is called (namespace lock held) after each. Seal times and holds run on `clock`.
  Namespace(const Config& config, Env& env, Clock& clock, Stats& stats, Journal& journal,
            int root_fd, std::function<void()> appended);
  ~Namespace();

  void SetDirectoryKind(DirectoryKind* kind) { directory_kind_ = kind; }
  // Every entry appended from now on is also logged there (the recovery log,
  // core/recovery/recovery_log.h). Set before use.
  void SetRecoveryLog(EntryLog* log) { log_ = log; }
  NamespaceMutex& mutex() const { return mu_; }

  // --- The inode table ---
  InodeRef FindLocked(uint64_t ino) const REQUIRES(ns_lock);
  Result<InodeRef> DirLocked(uint64_t ino) const REQUIRES(ns_lock);
  // A new inode with the next number (or `ino`, one an earlier worker gave and no inode has
  // here), in the table, with no name yet.
  InodeRef MakeInodeLocked(FileType type, uint64_t ino = 0) REQUIRES(ns_lock);
  // A new inode with `mode`'s permission bits, owned by `c`, times now.
  InodeRef NewInodeLocked(FileType type, uint32_t mode, const Caller& c) REQUIRES(ns_lock);
  // Frees the data of a deleted, closed file, and forgets the inode once the kernel has.
  void MaybeDropLocked(const InodeRef& inode) REQUIRES(ns_lock);
  // Removes an inode that never got a name.
  void EraseLocked(uint64_t ino) REQUIRES(ns_lock) { inodes_.erase(ino); }
  // Node `ino`, which the kernel got from a worker that crashed, is `inode` now: FindLocked
  // finds it until ForgetAliasLocked (the kernel forgot the node).
  void AliasLocked(uint64_t ino, InodeRef inode) REQUIRES(ns_lock) {
    aliases_[ino] = std::move(inode);
  }
  // False when `ino` is no alias.
  bool ForgetAliasLocked(uint64_t ino) REQUIRES(ns_lock) { return aliases_.erase(ino) > 0; }
  template <typename F>
  void ForEachAliasLocked(F f) REQUIRES(ns_lock) {
    for (const auto& [ino, inode] : aliases_) f(ino, inode);
  }
  template <typename F>
  void ForEachLocked(F f) REQUIRES(ns_lock) {
    for (const auto& [ino, inode] : inodes_) f(inode);
  }

  // --- The tree ---
  //
  // Shared mode (Config::shared): other mounts change the backing store, and this mount follows
  // within kAttrTimeout. A lookup that finds no child still asks the backing store; a listing
  // older than kAttrTimeout is read again: new names are added, and children held only as what
  // the backing store showed (BackingOnlyLocked) whose names are gone are forgotten. A name
  // removed here stays hidden until the journal is settled through the removal (its whiteout's
  // seq): only then does the backing store no longer hold it because of this mount. Directories
  // of fine-grid zarr arrays are listed once, as without shared mode.

  // The child named `name` of `dir`, looking it up on the backing store if needed; CheckName's
  // error for a name it refuses, whatever `dir` holds.
  Result<InodeRef> ChildLocked(const InodeRef& dir, const std::string& name) REQUIRES(ns_lock);
  // ChildLocked for a lookup: in shared mode, a regular file found is first refreshed
  // (RefreshFileLocked), and forgotten (then looked up afresh) when its backing name is gone.
  Result<InodeRef> LookupLocked(const InodeRef& dir, const std::string& name) REQUIRES(ns_lock);
  // Shared mode: a regular file held only as a reference to its backing file (origin_dir) and
  // with no pending entry takes the size, mode, owner and times of that backing file again once
  // what it took is older than kAttrTimeout; when they changed, its next open drops the kernel's
  // cached pages. False when its backing name is gone or no longer a regular file (the inode is
  // left as it was); true otherwise, and always without shared mode.
  bool RefreshFileLocked(const InodeRef& inode) REQUIRES(ns_lock);
  // A new inode for the backing entry `name` of `dir` (or the inode of another name of the same
  // hard-linked file), with no name yet; numbered `ino` when not 0 (as MakeInodeLocked).
  Result<InodeRef> BackingInodeLocked(const InodeRef& dir, const std::string& name,
                                      uint64_t ino = 0) REQUIRES(ns_lock);
  // Adds `child`, found on the backing store as `name` of `dir`, to the tree.
  void AddFoundLocked(const InodeRef& dir, const std::string& name, const InodeRef& child)
      REQUIRES(ns_lock);
  // Ok when `dir` has no entry `name` and one may be made; EEXIST when it has, or why not.
  Status CheckAbsentLocked(const InodeRef& dir, const std::string& name) REQUIRES(ns_lock);
  // Forgets the child `name` of `dir` when BackingOnlyLocked allows it (its backing file was
  // replaced under the tree, by a newer one from the object store): its next lookup finds the
  // new one.
  void ForgetBackingNameLocked(const InodeRef& dir, const std::string& name) REQUIRES(ns_lock);
  // Loads every backing entry of `dir` not loaded yet; in shared mode, also reads a listing
  // older than kAttrTimeout again.
  void LoadDirLocked(const InodeRef& dir) REQUIRES(ns_lock);
  // Opens the backing content of a file found on the backing store, before its name changes.
  // In shared mode the file also takes the attributes of what it opened, as RefreshFileLocked.
  Status LoadOriginLocked(const InodeRef& inode) REQUIRES(ns_lock);
  // Adds the new entry `name` (a valid name not there yet) of directory `parent`: its inode, and
  // the journal entry of `kind` that creates it on the backing store (its directory, name, mode,
  // owner and times set), for the caller to complete and append. In shared mode a directory is
  // made on the backing store at once, where `parent` is there and no removal of `name` is
  // pending, so other mounts find it right away (the journaled mkdir then finds it made); when
  // that fails, nothing is added and the error is returned.
  Result<EntryRef> AddNewLocked(uint64_t parent, const std::string& name, FileType type,
                                uint32_t mode, const Caller& c, JournalEntry::Kind kind)
      REQUIRES(ns_lock);
  // New entries made and journaled (AddNewLocked): directory, symlink to `target`, or special
  // file (`mode`'s type bits: a FIFO, socket or device node; `rdev` kept for a device). The
  // errors of AddNewLocked; nothing is made on error.
  Result<InodeRef> MkdirLocked(uint64_t parent, const std::string& name, uint32_t mode,
                               const Caller& c) REQUIRES(ns_lock);
  Result<InodeRef> SymlinkLocked(uint64_t parent, const std::string& name,
                                 const std::string& target, const Caller& c) REQUIRES(ns_lock);
  Result<InodeRef> MknodLocked(uint64_t parent, const std::string& name, uint32_t mode,
                               uint64_t rdev, const Caller& c) REQUIRES(ns_lock);
  void AddNameLocked(const InodeRef& dir, const std::string& name, const InodeRef& inode)
      REQUIRES(ns_lock);
  // Removes a name; with `journal`, also from the backing store (when the inode may be there).
  void RemoveNameLocked(const InodeRef& dir, const std::string& name, const InodeRef& inode,
                        bool journal = true) REQUIRES(ns_lock);
  // Renames entry `name` of `src`, file `child`, to `new_name` of `dst`, replacing `victim` (null:
  // none there; not `child`): the names and link counts change, the rename is journaled when
  // `child` is on the backing store or on its way, and a replaced file that lost its last name
  // goes. EINVAL for a directory moved into itself; ENOTDIR, EISDIR or ENOTEMPTY for a victim
  // it cannot replace; an error of loading what a backing file held. Nothing changes on error.
  Status RenameLocked(const InodeRef& src, const std::string& name, const InodeRef& child,
                      const InodeRef& dst, const std::string& new_name, const InodeRef& victim)
      REQUIRES(ns_lock);
  // Removes entry `name` of `dir`, file `inode` (not a directory): the removal is journaled, the
  // link count drops, and a file with no name left goes once nothing holds it open or looked up.
  // A file that keeps a name, a handle or a lookup first takes in what its backing file held
  // (an error of that loading changes nothing).
  Status UnlinkLocked(const InodeRef& dir, const std::string& name, const InodeRef& inode)
      REQUIRES(ns_lock);
  // Removes entry `name` of `dir`, the empty directory `inode`: the removal is journaled and the
  // directory goes once the kernel forgets it.
  void RmdirLocked(const InodeRef& dir, const std::string& name, const InodeRef& inode)
      REQUIRES(ns_lock);
  // The entries of directory `dir` (loaded from the backing store first), "." (named `ino`, the
  // number the kernel asked by) and ".." included.
  std::vector<DirEntry> ListLocked(const InodeRef& dir, uint64_t ino) REQUIRES(ns_lock);
  // Adds the name `new_name` of directory `new_parent` to file `inode` (sealed first), journaled
  // when the file is on the backing store or on its way. EPERM for a directory; the errors of
  // DirLocked and CheckAbsentLocked; ENOENT for a file with no name left. Nothing changes on
  // error.
  Status LinkLocked(const InodeRef& inode, uint64_t new_parent, const std::string& new_name)
      REQUIRES(ns_lock);
  std::string PathLocked(const InodeRef& inode) const REQUIRES(ns_lock);
  // The path from the root of entry `name` of `dir`; false when `dir` was removed.
  bool ChildPathLocked(const Inode& dir, const std::string& name, std::string* path) const
      REQUIRES(ns_lock);
  Attr AttrOf(const Inode& inode) const REQUIRES(ns_lock);  // Takes inode.mu.
  // Whether one of the names of `inode` is in a directory served with a fine grid, or is .zarray
  // or a zarr chunk key (digits and dots): the names whose meaning an array that takes a fine
  // grid later changes (core/views/zarr_views.h).
  bool MayBeInZarrArrayLocked(const Inode& inode) const REQUIRES(ns_lock);
  // The inode whose content a file's reads and writes reach: its real chunk for a virtual
  // chunk, else the file itself. Takes inode->mu.
  static InodeRef ContentOwner(const InodeRef& inode);

  // --- Changes for the backing store ---
  // Whether `inode` is on the backing store or on its way there.
  bool JournaledLocked(const InodeRef& inode) const REQUIRES(ns_lock);
  // Whether the newest journal entry about `inode` is not durable yet.
  bool PendingLocked(const InodeRef& inode) const REQUIRES(ns_lock);
  // Whether `inode` is held only as what the backing store showed: on the backing store, with no
  // pending entry, open handle or unflushed version, and for a directory none of its own
  // whiteouts and only such children. Forgetting it loses nothing of this mount's.
  bool BackingOnlyLocked(const InodeRef& inode) const REQUIRES(ns_lock);
  uint64_t AppendLocked(EntryRef entry) REQUIRES(ns_lock);
  // Journals the removal of `name` from the backing store, when `inode` may be there under it.
  void JournalRemovalLocked(const InodeRef& dir, const std::string& name, const InodeRef& inode)
      REQUIRES(ns_lock);
  // Journals `inode`'s current mode (with set_mode), owner (set_owner) and times (set_times) for
  // the backing store, when it is there or on its way.
  void JournalAttrsLocked(const InodeRef& inode, bool set_mode, bool set_owner, bool set_times)
      REQUIRES(ns_lock);
  // Seals the current version of a regular file if it changed; returns the seq to wait for.
  uint64_t SealLocked(const InodeRef& inode) REQUIRES(ns_lock);
  // Cancels what is still unsent about `inode`, whose last name is gone.
  void CancelUnsentLocked(const InodeRef& inode) REQUIRES(ns_lock);

  // The hard-linked backing files remembered, some of them perhaps gone (at most twice the live
  // ones, or kBackingLinksSwept).
  size_t BackingLinksLocked() const REQUIRES(ns_lock) { return backing_links_.size(); }

 private:
  static constexpr size_t kBackingLinksSwept = 64;
  // Remembers a hard-linked backing file's inode, sweeping out those gone first when due.
  void RememberBackingLinkLocked(std::pair<uint64_t, uint64_t> backing_id, const InodeRef& inode)
      REQUIRES(ns_lock);
  // Logs `e`, just appended or changed, with the paths it names; not when it is under a removed
  // directory (it is cancelled or never reaches the backing store).
  void LogLocked(const JournalEntry& e) REQUIRES(ns_lock);
  // Whether `dir`, listed once, is still read from the backing store again (shared mode).
  bool FollowsBackingLocked(const InodeRef& dir) const REQUIRES(ns_lock);
  // Whether `name` of `dir` is hidden by a removal through this mount; drops a whiteout whose
  // removals are durable in shared mode.
  bool HiddenLocked(const InodeRef& dir, const std::string& name) REQUIRES(ns_lock);
  // Forgets the children of `dir` not among `listed` (its backing entries) that BackingOnlyLocked
  // allows to forget.
  void ForgetVanishedLocked(const InodeRef& dir, const std::vector<std::string>& listed)
      REQUIRES(ns_lock);
  // Removes the name `name` of `inode` in `dir`, and with a directory's last name its subtree,
  // as if removed elsewhere: nothing is journaled.
  void ForgetNameLocked(const InodeRef& dir, const std::string& name, const InodeRef& inode)
      REQUIRES(ns_lock);
  // Shared mode: `inode` takes the mode, owner and times of its backing file `st` (the caller sets
  // its content); a change of size or times marks the kernel's cached pages stale.
  void FollowBackingFileLocked(const InodeRef& inode, const struct stat& st) REQUIRES(ns_lock);
  // Shared mode: makes the new directory `name` of `dir` on the backing store with `mode` and
  // owner `c`, and opens it; null when it is made only by the journaled mkdir.
  Result<std::shared_ptr<BackingFile>> MakeBackingDirLocked(const InodeRef& dir,
                                                            const std::string& name,
                                                            uint32_t mode, const Caller& c)
      REQUIRES(ns_lock);

  const Config& config_;
  Env& env_;
  Clock& clock_;
  Stats& stats_;
  DirectoryKind* directory_kind_ = nullptr;
  EntryLog* log_ = nullptr;
  const std::function<void()> appended_;

  mutable NamespaceMutex mu_;
  Journal& journal_;  // Its own lock, taken after the namespace lock.
  std::unordered_map<uint64_t, InodeRef> inodes_ GUARDED_BY(ns_lock);
  std::unordered_map<uint64_t, InodeRef> aliases_ GUARDED_BY(ns_lock);
  uint64_t next_ino_ GUARDED_BY(ns_lock);
  // Hard-linked backing files by (st_dev, st_ino), to give all names one inode. Entries of
  // inodes gone since are swept when it reaches backing_links_sweep_at_ entries.
  std::map<std::pair<uint64_t, uint64_t>, std::weak_ptr<Inode>> backing_links_ GUARDED_BY(ns_lock);
  size_t backing_links_sweep_at_ GUARDED_BY(ns_lock) = kBackingLinksSwept;
};

}  // namespace ckptfs
