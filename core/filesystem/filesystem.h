// Filesystem: ckptfs without FUSE. Every FUSE operation is one call here; the adapter only
// decodes requests and replies with what these calls return (values or the exact errno).
//
// The namespace (core/tree/namespace.h) is the backing directory, looked up lazily, overlaid
// with what clients changed through the mount. Data written through the mount is held in the
// Arena; sealed versions and namespace changes go to the Journal, which Durability
// (core/filesystem/durability.h: the flusher, the reclaimer, the shared mount) replays on the
// backing store in order. Each open is kept in the HandleTable (core/filesystem/handle_table.h);
// OpenFiles (core/filesystem/open_files.h) serves the open regular files as policy::ChooseOpen
// says (core/filesystem/open_mode.h); zarr fine-grid views (core/views/zarr_views.h) are files
// of the namespace whose content is a range of another; the nodes the namespace does not hold
// (the control files, the tensor views' nodes) are their providers'
// (core/filesystem/special_nodes.h), found once per operation by number; `.ckptfs/stats` is a
// StatsReport (core/filesystem/stats_report.h). What the kernel holds is recorded by the
// KernelStateKeeper (core/filesystem/kernel_state_keeper.h), which this class notifies; Handoff,
// Restore and the recoveries are WorkerTakeover's (core/filesystem/worker_takeover.h).
//
// Thread-safe: any FUSE worker thread may call any method. Lock order: the namespace lock, then
// Inode::mu, then the flusher's lock, then the journal's lock; the namespace lock, then the
// uploader's (a listing from the store asks the uploader what is pending of a name with it).
#pragma once

#include <sys/statvfs.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "core/backing/backing_store.h"
#include "core/base/clock.h"
#include "core/base/config.h"
#include "core/base/thread_annotations.h"
#include "core/filesystem/durability.h"
#include "core/filesystem/handle_table.h"
#include "core/filesystem/kernel_state_keeper.h"
#include "core/filesystem/open_files.h"
#include "core/filesystem/special_nodes.h"
#include "core/filesystem/worker_takeover.h"
#include "core/memory/arena.h"
#include "core/recovery/handoff.h"
#include "core/recovery/recovery_log.h"
#include "core/remote/local_tier.h"
#include "core/remote/remote_reader.h"
#include "core/stats/stats.h"
#include "core/tree/inode.h"
#include "core/tree/journal.h"
#include "core/tree/namespace.h"
#include "core/views/control_files.h"
#include "core/views/tensor_view/tensor_views.h"
#include "core/views/zarr_views.h"
#include "iouring/env.h"

namespace ckptfs {


struct SetAttrRequest {
  std::optional<uint32_t> mode;
  std::optional<uint32_t> uid;
  std::optional<uint32_t> gid;
  std::optional<uint64_t> size;
  std::optional<timespec> atime;  // tv_nsec == UTIME_NOW means now.
  std::optional<timespec> mtime;
};

class Filesystem final : private ControlFiles::Source {
 public:
  // Opens the backing store through `env` (OpenBackingStore), which every later call on the
  // backing store goes through too. Does not start threads.
  // The flush policy runs on `clock`, which must outlive the Filesystem.
  static Result<std::unique_ptr<Filesystem>> Make(const Config& config, std::unique_ptr<Env> env,
                                                  Clock& clock = Clock::Steady());
  ~Filesystem() override;

  // Starts the flusher thread (after the daemon has forked).
  void Start();
  // How a write that bypassed the page cache drops the kernel's cached pages of that range
  // (ino, offset, length) while other handles of the file use the cache. Set before any write.
  void SetPageCacheInvalidator(std::function<void(uint64_t, uint64_t, uint64_t)> invalidate) {
    files_.SetPageCacheInvalidator(std::move(invalidate));
  }
  // How a read-only open of a small file (policy::kPageCacheFillMaxBytes) that the backing store
  // holds whole and nothing has open fills the kernel's page cache with the whole file before
  // the open returns: `fill`(ino, data, size) stores the file's bytes there, false when the
  // kernel did not take them. Later reads of it, through this open and later ones, are served by
  // the kernel. Not in shared mode (other mounts change backing files). Set before the first
  // open.
  void SetPageCacheFiller(std::function<bool(uint64_t, const char*, size_t)> fill) {
    if (!config_.shared) files_.SetPageCacheFiller(std::move(fill));
  }
  // How read-only opens of files held whole by a backing file let the kernel read that file
  // itself (FUSE passthrough): `open_backing` registers a descriptor and returns an id, or -1;
  // `close_backing` drops an id. While such a handle is open, opens for writing and truncation
  // fail with ETXTBSY (the kernel cannot mix it with other opens). Set before the first open.
  void SetPassthrough(std::function<int(int fd)> open_backing,
                      std::function<void(int backing_id)> close_backing) {
    files_.SetPassthrough(std::move(open_backing), std::move(close_backing));
  }
  // Who replaces this worker when asked through the control file `upgrade` (the supervisor's
  // side of the worker, fs/worker.h); without one, upgrades fail with EOPNOTSUPP. Set before
  // the first request.
  void SetUpgradeHandler(std::function<Status(const std::string& binary)> handler) {
    control_hooks_.upgrade = std::move(handler);
  }
  // A JSON object about the process serving the mount, shown as "worker" in the stats. Set
  // before the first request.
  void SetWorkerInfo(std::function<std::string()> info) {
    control_hooks_.worker_info = std::move(info);
  }
  // The stats' "fuse_request_seconds": the latency histograms of FUSE requests by operation. Set
  // before the first request.
  void SetRequestStats(std::function<nlohmann::json()> stats) {
    control_hooks_.request_stats = std::move(stats);
  }
  // Read-only opens of large files held whole by a backing file bypass the page cache too:
  // the daemon splices their reads from the backing file straight into the reader's buffer,
  // rather than the kernel copying them into pages of its own (a second cached copy of the
  // checkpoint). Only where the kernel still allows shared mmap of such opens. Set before the
  // first open.
  void EnableDirectReads() { files_.EnableDirectReads(); }
  // The cache's blocks (fs/write_landing.h reads write requests into them).
  Arena& cache_blocks() { return arena_; }
  // --- Replacing the worker without unmounting (core/recovery/handoff.h) ---
  // With no other call running (the FUSE loop stopped): seals the files no handle holds open,
  // waits until everything sealed is durable (in shared mode, its markers committed), names the
  // blocks of a shared arena or writes handoff files that hold the unsealed content of open files
  // and of files removed while open, and returns what the next worker restores. EAGAIN while a
  // view of a zarr array is open. A failure leaves everything running.
  Result<HandoffImage> Handoff() EXCLUDES(ns_lock);
  // After a Handoff whose image went to the next worker: stops taking part in the shared mount
  // without leaving it (the next worker goes on in its place, Durability::HandOverSharedMount).
  // The process may then exit without destroying this Filesystem (nothing of it is left to do).
  void Retire() EXCLUDES(ns_lock);
  // Before Start: takes over the inodes and handles of the worker that made `image`; each
  // handoff file becomes the named spill file of its content (TakenOverSpillName). EIO when files
  // with unsealed changes could not be taken over (their handoff files stay); the rest is taken
  // over all the same.
  Status Restore(const HandoffImage& image) EXCLUDES(ns_lock);
  // Before Start: replays what the recovery log of the cache's shared memory holds pending, so
  // that everything the predecessor had sealed is in the namespace again and on its way to the
  // backing store; says what it did. Nothing to do with a private arena. EIO when some versions
  // could not be recovered, or the log had dropped changes (the rest is recovered). In shared
  // mode, this member then no longer acknowledges for the predecessor's incarnation.
  // On a worker that took over by no handoff (after its predecessor of this mount crashed):
  // then takes over the nodes and open handles the kernel holds of the predecessor, with what
  // the files open for writing held (core/recovery/kernel_state_record.h).
  Status RecoverCrashedWorker() EXCLUDES(ns_lock);
  // On the mount recovering an earlier mount whose daemon died (core/filesystem/earlier_mount.h):
  // its files open for writing, which nobody closed, are first saved to a rescue directory (an
  // error when that fails, before anything is replayed).
  Status RecoverEarlierMount() EXCLUDES(ns_lock);

  // Flushes everything; when that fails for `config.unmount_retry`, saves every unflushed file
  // to a rescue directory and returns an error naming the files and where they went.
  Status Shutdown();

  // A name CheckName refuses (core/tree/namespace.h) fails with its error in every directory,
  // whatever it holds: ENAMETOOLONG past NAME_MAX, as on a local filesystem.
  Result<Attr> Lookup(uint64_t parent, const std::string& name) EXCLUDES(ns_lock);
  void Forget(uint64_t ino, uint64_t count) EXCLUDES(ns_lock);
  Result<Attr> GetAttr(uint64_t ino) EXCLUDES(ns_lock);
  // `handle` is the open file the change comes through (ftruncate), or 0 (truncate by path).
  Result<Attr> SetAttr(uint64_t ino, const SetAttrRequest& request, uint64_t handle = 0)
      EXCLUDES(ns_lock);
  // A resent request (Caller::resent) whose change is there already is answered as done: made
  // by the worker that died before it answered (mkdir, symlink, mknod, link and an exclusive
  // create find the entry; unlink, rmdir and rename find the name gone, the new one there).
  Result<Attr> Mkdir(uint64_t parent, const std::string& name, uint32_t mode, const Caller& c)
      EXCLUDES(ns_lock);
  Status Unlink(uint64_t parent, const std::string& name, const Caller& c = Caller())
      EXCLUDES(ns_lock);
  Status Rmdir(uint64_t parent, const std::string& name, const Caller& c = Caller())
      EXCLUDES(ns_lock);
  Result<Attr> Symlink(uint64_t parent, const std::string& name, const std::string& target,
                       const Caller& c) EXCLUDES(ns_lock);
  // A FIFO, socket or device node (mode's type bits; `rdev` for devices), shown and published
  // like the other nodes; with S_IFREG (or no type), an empty regular file. Device nodes fail
  // with EPERM when the backing store takes none (probed at mount).
  Result<Attr> Mknod(uint64_t parent, const std::string& name, uint32_t mode, uint64_t rdev,
                     const Caller& c) EXCLUDES(ns_lock);
  Result<std::string> Readlink(uint64_t ino) EXCLUDES(ns_lock);
  Status Rename(uint64_t parent, const std::string& name, uint64_t new_parent,
                const std::string& new_name, unsigned flags, const Caller& c = Caller())
      EXCLUDES(ns_lock);
  Result<Attr> Link(uint64_t ino, uint64_t new_parent, const std::string& new_name,
                    const Caller& c = Caller()) EXCLUDES(ns_lock);

  Result<OpenFile> Create(uint64_t parent, const std::string& name, uint32_t mode, int flags,
                          const Caller& c) EXCLUDES(ns_lock);
  // An open with O_TRUNC, and a write, by a caller without CAP_FSETID clear the file's
  // set-user-ID bit, and its set-group-ID bit when group execute is set, as the kernel does for
  // local filesystems (it leaves that to the FUSE daemon for these requests).
  Result<OpenFile> Open(uint64_t ino, int flags, const Caller& c = Caller()) EXCLUDES(ns_lock);
  Result<ReadData> Read(uint64_t handle, uint64_t offset, size_t size) EXCLUDES(ns_lock);
  Result<size_t> Write(uint64_t handle, uint64_t offset, const char* data, size_t size,
                       const Caller& c = Caller()) EXCLUDES(ns_lock);
  // The same with bytes read straight into blocks (fs/write_landing.h), which the file takes
  // where it can.
  Result<size_t> Write(uint64_t handle, uint64_t offset, LandedBytes& landed,
                       const Caller& c = Caller()) EXCLUDES(ns_lock);
  // close() of one descriptor by `lock_owner` (FUSE's): seals the file if it changed through
  // this handle and the closer is one that wrote through it (core/tree/writer_owners.h); a writer's
  // handle also gets a flush error of the file not reported yet.
  Status Flush(uint64_t handle, uint64_t lock_owner) EXCLUDES(ns_lock);
  // The last close of the handle: seals the file if it changed through it, whoever closes.
  Status Release(uint64_t handle) EXCLUDES(ns_lock);
  // Seals the file; then, by config.fsync_mode, returns at once (defer), once it and everything
  // sealed before it are in every partner's memory or durable (replicated), or durable (wait).
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
  // Bytes of sealed versions not durable yet.
  uint64_t UnflushedBytes() const { return journal_.pending_bytes(); }
  std::string backend_name() const { return durability_.flusher().backend_name(); }
  // True while the flusher applies a batch (lock-free; lives as long as this Filesystem).
  const std::atomic<bool>& flushing() const { return durability_.flusher().applying(); }
  // JSON figures for .ckptfs/stats.
  std::string StatsJson() override EXCLUDES(ns_lock);

 private:
  Filesystem(const Config& config, const BackingStore& store, std::unique_ptr<Env> env,
             Clock& clock);
  // With a shared arena: maps the recovery log and the kernel state record of its memory file
  // (MapRecoveryMemory) and keeps both current from now on; an error when either cannot be
  // mapped (a crash would lose what the worker holds).
  Status UseRecoveryMemory();
  // Handoff, Restore and the recoveries, on this Filesystem and its parts.
  WorkerTakeover Takeover();

  // Runs op(reservation, more) until it returns with `more` == 0; when it sets `more`, it has
  // changed nothing and is run again with that many blocks reserved (taken without the
  // namespace lock). EINTR when caller `c` is killed while it waits for them.
  template <typename Op>
  std::invoke_result_t<Op, Reservation&, size_t&> Reserving(const Caller& c, Op op) {
    Reservation reservation;
    while (true) {
      size_t more = 0;
      auto result = op(reservation, more);
      if (more == 0) return result;
      reservation = Reservation();
      Result<Reservation> got =
          arena_.Reserve(std::min(more, arena_.capacity_blocks()), c.interrupted);
      if (!got.ok()) return got.status();
      reservation = std::move(*got);
    }
  }
  // The operations without the resend check: a request resent after a crash (Caller::resent)
  // whose change the worker that died had made is answered as done only by the public ones.
  Result<Attr> MkdirWithoutResendCheck(uint64_t parent, const std::string& name, uint32_t mode,
                                       const Caller& c) EXCLUDES(ns_lock);
  Status RmdirWithoutResendCheck(uint64_t parent, const std::string& name) EXCLUDES(ns_lock);
  Result<Attr> SymlinkWithoutResendCheck(uint64_t parent, const std::string& name,
                                         const std::string& target, const Caller& c)
      EXCLUDES(ns_lock);
  Result<Attr> MknodWithoutResendCheck(uint64_t parent, const std::string& name, uint32_t mode,
                                       uint64_t rdev, const Caller& c) EXCLUDES(ns_lock);
  Result<Attr> LinkWithoutResendCheck(uint64_t ino, uint64_t new_parent,
                                      const std::string& new_name) EXCLUDES(ns_lock);
  Result<OpenFile> CreateWithoutResendCheck(uint64_t parent, const std::string& name,
                                            uint32_t mode, int flags, const Caller& c)
      EXCLUDES(ns_lock);
  // A resent open or create (`op`) for which the crashed worker had made a handle, never
  // answered: that handle (answered now), or nullopt.
  std::optional<OpenFile> OpenedBeforeLocked(const Caller& c, const char* op) REQUIRES(ns_lock);
  // A resent request of `op` on `name` found its change made: logged, answered as done.
  static void NoteAppliedBefore(const char* op, const std::string& name);
  // What `op` answers when it `made` entry `name` of `parent`: on a resent request that found
  // it there (EEXIST), the entry looked up, when it has the file `type` (S_IFMT bits; 0: any).
  Result<Attr> EntryMadeBefore(Result<Attr> made, const Caller& c, const char* op,
                               uint64_t parent, const std::string& name, uint32_t type = 0)
      EXCLUDES(ns_lock);
  // Whether directory `parent` has an entry `name`.
  bool HasEntry(uint64_t parent, const std::string& name) EXCLUDES(ns_lock);
  Status RenameReserved(uint64_t parent, const std::string& name, uint64_t new_parent,
                        const std::string& new_name, unsigned flags, Reservation& reservation,
                        size_t& more) EXCLUDES(ns_lock);
  Status UnlinkReserved(uint64_t parent, const std::string& name, Reservation& reservation,
                        size_t& more) EXCLUDES(ns_lock);

  // -o remote, the read path (core/remote/remote_reader.h): lists directory `ino` from the store
  // the first time it is needed, before the namespace reads its backing directory. A failure is
  // logged; the directory then shows what the backing directory holds, and is listed again at
  // its next need.
  void ListRemoteDir(uint64_t ino) EXCLUDES(ns_lock);
  // -o remote: fills the backing file of regular file `ino` from the store when it is a
  // placeholder, before it is opened with `flags` (not for O_TRUNC: its bytes are not read).
  Status FetchRemoteFile(uint64_t ino, int flags) EXCLUDES(ns_lock);
  // The backing file of regular file `ino`, open for writing, when it is a placeholder; -1 when
  // it is not (or has no backing file). `path` is set to the file's path.
  Result<int> OpenPlaceholder(uint64_t ino, std::string* path) EXCLUDES(ns_lock);
  // -o local_size: keeps file `ino` from being evicted until UnpinLocal (between the fetch that
  // makes its backing file whole and the operation that needs it so).
  void PinLocal(uint64_t ino) EXCLUDES(ns_lock);
  void UnpinLocal(uint64_t ino) EXCLUDES(ns_lock);
  // LocalTier's gate: runs `evict` (under the namespace lock) when file `path` of the backing
  // directory is neither open, pinned, nor holding anything not durable; what it holds in memory
  // is dropped first (Reclaimer::UnloadLocked).
  bool MayEvict(const std::string& path, const std::function<bool()>& evict) EXCLUDES(ns_lock);
  // -o remote: a read-only open of placeholder `ino` makes it a LazyFile read as it is fetched
  // (core/remote/remote_reader.h); true when it is one (its open then never bypasses Read).
  Result<bool> OpenRemoteLazily(uint64_t ino) EXCLUDES(ns_lock, lazy_mu_);
  // Before a read of [offset, offset + size) of `ino`: fetches what a LazyFile lacks of it.
  Status FetchForRead(uint64_t ino, uint64_t offset, size_t size) EXCLUDES(lazy_mu_);
  // The number of the child `name` of directory `parent` the namespace holds; 0 when none.
  uint64_t EntryIno(uint64_t parent, const std::string& name) EXCLUDES(ns_lock);

  // Whether no file (control files aside) has been open for at least `quiet`.
  bool NoFileOpenFor(Clock::duration quiet) const EXCLUDES(ns_lock);

  // ControlFiles::Source: a sync waits for everything journaled so far (and, in shared mode, for
  // the commits of the markers among it, returning a failed one).
  uint64_t SyncPoint() override EXCLUDES(ns_lock);
  Status WaitDurable(uint64_t point) override EXCLUDES(ns_lock);
  Status RequestUpgrade(const std::string& binary) override;

  const Config config_;
  // Declared first: every BackingFile closes its descriptor through it.
  const std::unique_ptr<Env> env_;
  const BackingStore store_;
  Stats stats_;
  Arena arena_;
  // With a shared arena: the recovery log in its memory file (core/recovery/recovery_log.h);
  // else null.
  std::unique_ptr<RecoveryLog> log_;
  Journal journal_;  // Its own lock, taken after the namespace lock.
  Namespace ns_;
  ZarrViews zarr_;
  TensorViews tensors_;
  // The control files and the tensor views' nodes.
  SpecialNodeRegistry specials_;
  HandleTable handles_;
  // With a shared arena: the record of what the kernel holds of this worker, kept current.
  KernelStateKeeper kernel_state_;
  Durability durability_;
  OpenFiles files_;
  // -o remote: the read path from the store (null otherwise).
  std::unique_ptr<RemoteReader> remote_reader_;
  // Placeholders open for reading and not whole yet, by inode number. A leaf lock.
  Mutex lazy_mu_;
  std::map<uint64_t, std::shared_ptr<RemoteReader::LazyFile>> lazy_files_ GUARDED_BY(lazy_mu_);
  // Files PinLocal keeps, by inode number, with their pin counts.
  std::map<uint64_t, unsigned> local_pins_ GUARDED_BY(ns_lock);
  // -o local_size: what is evicted from the backing directory (null otherwise). Destroyed first
  // (its thread calls the namespace and the uploader).
  std::unique_ptr<LocalTier> local_tier_;
  // What the daemon around the core sets for the control files before the first request (the
  // setters above).
  struct ControlHooks {
    std::function<Status(const std::string&)> upgrade;
    std::function<std::string()> worker_info;
    std::function<nlohmann::json()> request_stats;
  };
  ControlHooks control_hooks_;
};

}  // namespace ckptfs
