// Filesystem: ckptfs without FUSE. Every FUSE operation is one call here; the adapter only
// decodes requests and replies with what these calls return (values or the exact errno).
//
// The namespace is the backing directory, looked up lazily, overlaid with what clients changed
// through the mount. Data written through the mount is held in the Arena; sealed versions and
// namespace changes go to the Journal, which the Flusher replays on the backing store in order.
//
// Thread-safe: any FUSE worker thread may call any method. Lock order: ns_mu_, then Inode::mu,
// then the flusher's lock, then the journal's lock.
#pragma once

#include <sys/statvfs.h>

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <cstdint>
#include <memory>
#include <mutex>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/arena.h"
#include "core/backing_store.h"
#include "core/clock.h"
#include "core/config.h"
#include "core/flusher.h"
#include "core/inode.h"
#include "core/journal.h"
#include "core/stats.h"
#include "core/thread_annotations.h"
#include "core/zarr_array.h"
#include "iouring/env.h"

namespace ckptfs {

inline constexpr uint64_t kRootIno = 1;
inline constexpr uint64_t kControlDirIno = 2;
inline constexpr uint64_t kStatsIno = 3;
inline constexpr uint64_t kSyncIno = 4;
inline constexpr uint64_t kFirstIno = 16;

// Who asks (from the FUSE request). Root is taken to hold every capability (CAP_FSETID), any
// other user none.
struct Caller {
  uint32_t uid = 0;
  uint32_t gid = 0;
  uint32_t umask = 022;
};

struct SetAttrRequest {
  std::optional<uint32_t> mode;
  std::optional<uint32_t> uid;
  std::optional<uint32_t> gid;
  std::optional<uint64_t> size;
  std::optional<timespec> atime;  // tv_nsec == UTIME_NOW means now.
  std::optional<timespec> mtime;
};

struct DirEntry {
  std::string name;
  uint64_t ino;
  uint32_t type_bits;  // S_IFDIR etc.
};

struct OpenFile {
  Attr attr;
  uint64_t handle = 0;
  bool direct_io = false;   // The kernel sends every read and write of this handle here.
  bool keep_cache = false;  // The kernel's cached pages of the file are still right.
  int backing_id = -1;      // The kernel reads this backing file itself (FUSE passthrough).
};

// The bytes of a read. Memory segments keep their blocks alive until this is destroyed.
struct ReadData {
  std::vector<ReadSegment> segments;
  std::string owned;  // Control-file content, when the read is served from a string.
};

class Filesystem : private FlushClient {
 public:
  // Opens the backing store through `env` (OpenBackingStore), which every later call on the
  // backing store goes through too. Does not start threads.
  // The flush policy runs on `clock`, which must outlive the Filesystem.
  static Result<std::unique_ptr<Filesystem>> Make(const Config& config, std::unique_ptr<Env> env,
                                                  Clock& clock = Clock::Steady());
  ~Filesystem();

  // Starts the flusher thread (after the daemon has forked).
  void Start();
  // How a write that bypassed the page cache drops the kernel's cached pages of that range
  // (ino, offset, length) while other handles of the file use the cache. Set before any write.
  void SetPageCacheInvalidator(std::function<void(uint64_t, uint64_t, uint64_t)> invalidate) {
    invalidate_page_cache_ = std::move(invalidate);
  }
  // How read-only opens of files held whole by a backing file let the kernel read that file
  // itself (FUSE passthrough): `open_backing` registers a descriptor and returns an id, or -1;
  // `close_backing` drops an id. While such a handle is open, opens for writing and truncation
  // fail with ETXTBSY (the kernel cannot mix it with other opens). Set before the first open.
  void SetPassthrough(std::function<int(int fd)> open_backing,
                      std::function<void(int backing_id)> close_backing) {
    open_backing_ = std::move(open_backing);
    close_backing_ = std::move(close_backing);
  }
  // Read-only opens of large files held whole by a backing file bypass the page cache too:
  // the daemon splices their reads from the backing file straight into the reader's buffer,
  // rather than the kernel copying them into pages of its own (a second cached copy of the
  // checkpoint). Only where the kernel still allows shared mmap of such opens. Set before the
  // first open.
  void EnableDirectReads() { direct_reads_ = true; }
  // Flushes everything; when that fails for `config.unmount_retry`, saves every unflushed file
  // to a rescue directory and returns an error naming the files and where they went.
  Status Shutdown();

  Result<Attr> Lookup(uint64_t parent, const std::string& name) EXCLUDES(ns_lock);
  void Forget(uint64_t ino, uint64_t count) EXCLUDES(ns_lock);
  Result<Attr> GetAttr(uint64_t ino) EXCLUDES(ns_lock);
  // `handle` is the open file the change comes through (ftruncate), or 0 (truncate by path).
  Result<Attr> SetAttr(uint64_t ino, const SetAttrRequest& request, uint64_t handle = 0)
      EXCLUDES(ns_lock);
  Result<Attr> Mkdir(uint64_t parent, const std::string& name, uint32_t mode, const Caller& c)
      EXCLUDES(ns_lock);
  Status Unlink(uint64_t parent, const std::string& name) EXCLUDES(ns_lock);
  Status Rmdir(uint64_t parent, const std::string& name) EXCLUDES(ns_lock);
  Result<Attr> Symlink(uint64_t parent, const std::string& name, const std::string& target,
                       const Caller& c) EXCLUDES(ns_lock);
  // A FIFO, socket or device node (mode's type bits; `rdev` for devices), shown and published
  // like the other nodes; with S_IFREG (or no type), an empty regular file. Device nodes fail
  // with EPERM when the backing store takes none (probed at mount).
  Result<Attr> Mknod(uint64_t parent, const std::string& name, uint32_t mode, uint64_t rdev,
                     const Caller& c) EXCLUDES(ns_lock);
  Result<std::string> Readlink(uint64_t ino) EXCLUDES(ns_lock);
  Status Rename(uint64_t parent, const std::string& name, uint64_t new_parent,
                const std::string& new_name, unsigned flags) EXCLUDES(ns_lock);
  Result<Attr> Link(uint64_t ino, uint64_t new_parent, const std::string& new_name)
      EXCLUDES(ns_lock);

  Result<OpenFile> Create(uint64_t parent, const std::string& name, uint32_t mode, int flags,
                          const Caller& c) EXCLUDES(ns_lock);
  // An open with O_TRUNC, and a write, by a caller without CAP_FSETID clear the file's
  // set-user-ID bit, and its set-group-ID bit when group execute is set, as the kernel does for
  // local filesystems (it leaves that to the FUSE daemon for these requests).
  Result<OpenFile> Open(uint64_t ino, int flags, const Caller& c = Caller()) EXCLUDES(ns_lock);
  Result<ReadData> Read(uint64_t handle, uint64_t offset, size_t size) EXCLUDES(ns_lock);
  Result<size_t> Write(uint64_t handle, uint64_t offset, const char* data, size_t size,
                       const Caller& c = Caller()) EXCLUDES(ns_lock);
  // close(): seals the file if it changed through this handle; a handle opened for writing
  // also gets a flush error of the file not reported yet.
  Status Flush(uint64_t handle) EXCLUDES(ns_lock);
  Status Release(uint64_t handle) EXCLUDES(ns_lock);
  Status Fsync(uint64_t handle) EXCLUDES(ns_lock);
  Status Fallocate(uint64_t handle, int mode, uint64_t offset, uint64_t length) EXCLUDES(ns_lock);

  Result<uint64_t> OpenDir(uint64_t ino) EXCLUDES(ns_lock);
  // Entries from index `offset` on (index i has cookie i + 1), "." and ".." included.
  Result<std::vector<DirEntry>> ReadDir(uint64_t dir_handle, uint64_t offset) EXCLUDES(ns_lock);
  void ReleaseDir(uint64_t dir_handle) EXCLUDES(ns_lock);
  Status FsyncDir(uint64_t ino) EXCLUDES(ns_lock);

  Result<struct statvfs> StatFs() EXCLUDES(ns_lock);

  // Waits until everything sealed before the call is durable; the error names the file.
  Status Sync() EXCLUDES(ns_lock);
  std::string backend_name() const { return flusher_->backend_name(); }
  // JSON figures for .ckptfs/stats.
  std::string StatsJson() EXCLUDES(ns_lock);

 private:
  // Waits (up to policy::kPassthroughReleaseWait) until no passthrough handle of `ino` is open:
  // the kernel sends a reader's RELEASE after its close() has returned, so a writer that opens
  // the file right after reading it would otherwise find it still open.
  void WaitPassthroughReleased(uint64_t ino) EXCLUDES(ns_lock);
  struct Handle {
    Handle() = default;
    Handle(InodeRef file, int open_flags) : inode(std::move(file)), flags(open_flags) {}
    InodeRef inode;  // Null for control files.
    int flags = 0;
    bool direct = false;  // Bypasses the kernel's page cache (else counted in cached_handles).
    bool passthrough = false;  // Read by the kernel (counted in passthrough_handles).
    // The file's version after this handle's latest change. Its close seals the file only when
    // that change is not sealed yet: a reader's close, or the late release of an earlier open,
    // never publishes a version another handle is still writing. Guarded by the mu of the
    // inode that holds the content (ContentOwner(inode), the real chunk of a virtual one), which
    // a view may change: not an expression the annotations can name.
    uint64_t wrote_version = 0;
    // Direct reads: where the next sequential read starts, and how far the backing file has
    // been asked to be read ahead.
    uint64_t next_read GUARDED_BY(inode->mu) = 0;
    uint64_t read_ahead_until GUARDED_BY(inode->mu) = 0;
    uint64_t control_ino = 0;
    uint64_t sync_seq = 0;  // .ckptfs/sync: what its reader waits for.
    std::string content;    // Control files: generated at open (stats) or first read (sync).
  };
  struct DirHandle {
    std::vector<DirEntry> entries;
  };

  Filesystem(const Config& config, const BackingStore& store, std::unique_ptr<Env> env,
             Clock& clock);

  // Runs op(reservation, more) until it returns with `more` == 0; when it sets `more`, it has
  // changed nothing and is run again with that many blocks reserved (taken without ns_mu_).
  template <typename Op>
  auto Reserving(Op op) {
    Reservation reservation;
    while (true) {
      size_t more = 0;
      auto result = op(reservation, more);
      if (more == 0) return result;
      reservation = Reservation();
      reservation = arena_.Reserve(std::min(more, arena_.capacity_blocks()));
    }
  }
  Status RenameReserved(uint64_t parent, const std::string& name, uint64_t new_parent,
                        const std::string& new_name, unsigned flags, Reservation& reservation,
                        size_t& more) EXCLUDES(ns_lock);
  Status UnlinkReserved(uint64_t parent, const std::string& name, Reservation& reservation,
                        size_t& more) EXCLUDES(ns_lock);
  Result<OpenFile> OpenReserved(uint64_t ino, int flags, const Caller& c, Reservation& reservation,
                                size_t& more) EXCLUDES(ns_lock);

  // --- Called with the namespace lock held ---
  InodeRef FindLocked(uint64_t ino) const REQUIRES(ns_lock);
  Result<InodeRef> DirLocked(uint64_t ino) const REQUIRES(ns_lock);
  // The child named `name` of `dir`, looking it up on the backing store if needed.
  Result<InodeRef> ChildLocked(const InodeRef& dir, const std::string& name) REQUIRES(ns_lock);
  // A new inode for the backing entry `name` of `dir` (or the inode of another name of the same
  // hard-linked file), with no name yet.
  Result<InodeRef> BackingInodeLocked(const InodeRef& dir, const std::string& name)
      REQUIRES(ns_lock);
  // Ok when `dir` has no entry `name`; EEXIST when it has, or why the lookup failed.
  Status CheckAbsentLocked(const InodeRef& dir, const std::string& name) REQUIRES(ns_lock);
  InodeRef NewInodeLocked(FileType type, uint32_t mode, const Caller& c) REQUIRES(ns_lock);
  // Adds the new entry `name` (a valid name not there yet) of directory `parent`: its inode, and
  // the journal entry of `kind` that creates it on the backing store (its directory, name, mode,
  // owner and times set), for the caller to complete and append.
  Result<EntryRef> AddNewLocked(uint64_t parent, const std::string& name, FileType type,
                                uint32_t mode, const Caller& c, JournalEntry::Kind kind)
      REQUIRES(ns_lock);
  void AddNameLocked(const InodeRef& dir, const std::string& name, const InodeRef& inode)
      REQUIRES(ns_lock);
  // Removes a name; with `journal`, also from the backing store (when the inode may be there).
  void RemoveNameLocked(const InodeRef& dir, const std::string& name, const InodeRef& inode,
                        bool journal = true) REQUIRES(ns_lock);
  // Journals the removal of `name` from the backing store, when `inode` may be there under it.
  void JournalRemovalLocked(const InodeRef& dir, const std::string& name, const InodeRef& inode)
      REQUIRES(ns_lock);
  // Opens the backing content of a file found on the backing store, before its name changes.
  Status LoadOriginLocked(const InodeRef& inode) REQUIRES(ns_lock);
  void LoadDirLocked(const InodeRef& dir) REQUIRES(ns_lock);
  bool JournaledLocked(const InodeRef& inode) const REQUIRES(ns_lock);
  uint64_t AppendLocked(EntryRef entry) REQUIRES(ns_lock);
  // Journals `inode`'s current mode (with set_mode), owner (set_owner) and times (set_times) for
  // the backing store, when it is there or on its way.
  void JournalAttrsLocked(const InodeRef& inode, bool set_mode, bool set_owner, bool set_times)
      REQUIRES(ns_lock);
  // Seals the current version of a regular file if it changed; returns the seq to wait for.
  uint64_t SealLocked(const InodeRef& inode) REQUIRES(ns_lock);
  // Takes ownership of an open file; returns its handle number.
  uint64_t AdoptHandleLocked(std::unique_ptr<Handle> handle) REQUIRES(ns_lock);
  // Whether no file (control files aside) has been open for at least `quiet`.
  bool NoFileOpenFor(Clock::duration quiet) const EXCLUDES(ns_lock);
  // Counts the handle as open on its regular file and serves it as policy::ChooseOpen chooses
  // (core/open_mode.h); only `may_bypass` handles may skip the page cache. The page cache never
  // goes stale under a reader: a cached open drops the pages older than a direct write
  // (keep_cache false), and a direct write while cached handles are open invalidates its range
  // (SetPageCacheInvalidator).
  OpenFile OpenHandleLocked(std::unique_ptr<Handle> handle, bool may_bypass) REQUIRES(ns_lock);
  // Direct reads: the range of the backing file to have the kernel read ahead of a sequential
  // reader (none: no file), asked for outside the lock.
  struct ReadAhead {
    std::shared_ptr<BackingFile> file;
    uint64_t offset = 0;
    uint64_t length = 0;
  };
  ReadAhead ReadAheadLocked(Handle& h, uint64_t offset, size_t size) REQUIRES(h.inode->mu);
  // Seals the file of `h` if a change made through `h` is not sealed yet.
  void SealHandleLocked(Handle* h) REQUIRES(ns_lock);
  std::string PathLocked(const InodeRef& inode) const REQUIRES(ns_lock);
  Attr AttrOf(const Inode& inode) const REQUIRES(ns_lock);  // Takes inode.mu.
  // Frees the data of a deleted, closed file, and forgets the inode once the kernel has.
  void MaybeDropLocked(const InodeRef& inode) REQUIRES(ns_lock);

  // The inode whose content a file's reads and writes reach: its real chunk for a virtual
  // chunk, else the file itself. Takes inode->mu.
  static InodeRef ContentOwner(const InodeRef& inode);
  // A virtual chunk or the shown .zarray of a fine-grid array. Takes inode.mu.
  static bool IsZarrView(const Inode& inode);
  // One open handle of `inode` fewer; a file left unchanged gives its descriptor back.
  void CloseOneLocked(const InodeRef& inode) REQUIRES(ns_lock);

  // --- The zarr fine grid (core/zarr_namespace.cc); ns_mu_ held ---
  // Serves `dir`, just found on the backing store, with a fine grid when its .zarray qualifies.
  void ZarrProbeLocked(const InodeRef& dir) REQUIRES(ns_lock);
  // Starts serving `dir` with a fine grid once zarr has renamed a qualifying .zarray into it,
  // unless chunk files were written there before.
  void ZarrAdoptLocked(const InodeRef& dir, const InodeRef& zarray) REQUIRES(ns_lock);
  // Whether `dir` can serve the grid of `text` (fill values need memory for whole chunks).
  std::optional<ZarrGrid> ZarrGridFor(const InodeRef& dir, const std::string& text,
                                      const ZarrGrid* keep = nullptr) const REQUIRES(ns_lock);
  // Adds the backing entry `name` of a fine-grid directory being loaded, when it is the array's
  // (a real chunk, or hidden); false for an ordinary child.
  bool ZarrAddBackingLocked(const InodeRef& dir, const std::string& name) REQUIRES(ns_lock);
  // Shows sub-chunk `sub` of real chunk `real_key` as a file named by its virtual key.
  void ZarrShowLocked(const InodeRef& dir, const std::string& real_key, size_t sub)
      REQUIRES(ns_lock);
  // rename(`src_dir`/`src_name` = `file`, `dir`/`key`) where `key` is a virtual chunk: the bytes
  // go into the real chunk and `file` becomes the virtual chunk.
  Status ZarrRenameInLocked(const InodeRef& src_dir, const std::string& src_name,
                            const InodeRef& file, const InodeRef& dir, const std::string& key,
                            const VirtualChunk& vc, Reservation& reservation, size_t& more)
      REQUIRES(ns_lock);
  // Checks a .zarray renamed over the one of fine-grid `dir` before the rename; after it,
  // ZarrZarrayReplacedLocked stores the real text and takes the new grid.
  Status ZarrCheckZarrayLocked(const InodeRef& dir, const InodeRef& file, Reservation& reservation,
                               size_t& more) REQUIRES(ns_lock);
  void ZarrZarrayReplacedLocked(const InodeRef& dir, const InodeRef& zarray,
                                Reservation& reservation) REQUIRES(ns_lock);
  Status ZarrUnlinkLocked(const InodeRef& dir, const std::string& key, const InodeRef& view,
                          Reservation& reservation, size_t& more) REQUIRES(ns_lock);
  // Removes real chunk `real_key` (all its virtual chunks are gone).
  void ZarrRemoveChunkLocked(const InodeRef& dir, const std::string& real_key) REQUIRES(ns_lock);
  // Serves `dir` as a plain directory again once neither chunks nor .zarray are left.
  void ZarrForgetIfGoneLocked(const InodeRef& dir) REQUIRES(ns_lock);
  // Sets [offset, offset + length) of a real chunk to the fill value (`real`->mu held).
  static Status ZarrFill(Inode& real, uint64_t offset, uint64_t length, const std::string& fill,
                         Reservation& reservation) REQUIRES(real.mu);
  // Fills the range of a virtual chunk (its real chunk loaded), or sets `more` to the blocks that
  // needs when `reservation` holds fewer.
  static Status ZarrFillView(const ChunkView& view, Reservation& reservation, size_t& more);
  // Reads of a virtual chunk.
  static Result<ReadData> ZarrRead(const ChunkView& view, uint64_t offset, size_t size);
  // The fine-grid arrays for .ckptfs/stats, as a JSON array.
  nlohmann::json ZarrStatsLocked() const REQUIRES(ns_lock);

  // A command written to a control file: "sync" to the sync file. Returns the bytes taken.
  Result<size_t> ControlWrite(uint64_t ino, std::string_view command);
  // Control directory entries: their inode numbers and attributes.
  Result<uint64_t> ControlLookup(const std::string& name) const;
  Attr ControlAttr(uint64_t ino) const;
  // Writes every unflushed file version to a rescue directory; returns its path.
  Result<std::string> RescueLocked(std::vector<std::string>* files) REQUIRES(ns_lock);
  // Drops the content of a durable, unchanged, closed file from memory (and its descriptor); it
  // is opened again by name when needed. Returns the blocks freed.
  size_t UnloadLocked(const InodeRef& inode) REQUIRES(ns_lock, inode->mu);
  size_t Reclaim(size_t wanted) EXCLUDES(ns_lock);
  // Moves the full blocks of the largest file still being written to its spill file (flusher
  // thread only). Returns the blocks freed.
  size_t Spill(Env& env) override EXCLUDES(ns_lock);
  // FlushClient: a flushed batch's entries are on the backing store, durable or failed.
  Status Flushed(const FlushReport& report) override EXCLUDES(ns_lock);
  size_t WritersWaiting() override { return arena_.waiting_writers(); }
  Handle* HandleOf(uint64_t handle) { return reinterpret_cast<Handle*>(handle); }

  const Config config_;
  // Declared first: every BackingFile closes its descriptor through it.
  const std::unique_ptr<Env> env_;
  const bool device_nodes_;  // The backing store takes device nodes.
  Clock& clock_;
  const int root_fd_;
  const int staging_fd_;
  const timespec start_time_;
  Stats stats_;
  Arena arena_;

  // The namespace lock (core/thread_annotations.h).
  mutable NamespaceMutex ns_mu_;
  std::unordered_map<uint64_t, InodeRef> inodes_ GUARDED_BY(ns_lock);
  uint64_t next_ino_ GUARDED_BY(ns_lock) = kFirstIno;
  Journal journal_;  // Its own lock, taken after ns_mu_.
  // Open files, owned here until released.
  std::unordered_map<Handle*, std::unique_ptr<Handle>> handles_ GUARDED_BY(ns_lock);
  // Open handles of files (control files aside), and when one was last opened or released
  // (mount time before that).
  size_t open_files_ GUARDED_BY(ns_lock) = 0;
  Clock::time_point last_open_or_release_ GUARDED_BY(ns_lock);
  std::deque<std::weak_ptr<Inode>> clean_ GUARDED_BY(ns_lock);  // Eviction candidates.
  // Hard-linked backing files by (st_dev, st_ino), to give all names one inode.
  std::map<std::pair<uint64_t, uint64_t>, std::weak_ptr<Inode>> backing_links_ GUARDED_BY(ns_lock);
  // Directories served with a fine grid.
  std::vector<std::weak_ptr<Inode>> zarr_dirs_ GUARDED_BY(ns_lock);
  std::unique_ptr<Flusher> flusher_;
  std::function<void(uint64_t, uint64_t, uint64_t)> invalidate_page_cache_;
  std::atomic<bool> direct_reads_{false};
  std::function<int(int)> open_backing_;
  std::condition_variable_any passthrough_released_;  // With ns_mu_: a file's last one closed.
  std::function<void(int)> close_backing_;
};

}  // namespace ckptfs
