// OpenFiles: the regular files of the namespace open through the mount (a zarr view's
// included). Each open is served as policy::ChooseOpen says (core/filesystem/open_mode.h):
// through the kernel's page cache, direct, or by FUSE passthrough; this class carries the choice
// out, serves the handles' reads and writes, seals at their closes, and keeps the counts of each
// kind of handle on the inode. The page cache never goes stale under a reader: a cached open
// drops the pages older than a direct write (keep_cache false), and a direct write while cached
// handles are open invalidates its range (SetPageCacheInvalidator).
//
// Thread-safe as Filesystem: the *Locked methods under the namespace lock, the others take what
// they need. Lock order: the namespace lock, then Inode::mu.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>

#include "core/backing/sibling_read_ahead.h"
#include "core/base/status.h"
#include "core/base/thread_annotations.h"
#include "core/filesystem/handle_table.h"
#include "core/filesystem/kernel_state_keeper.h"
#include "core/flush/reclaim.h"
#include "core/memory/arena.h"
#include "core/stats/stats.h"
#include "core/tree/inode.h"
#include "core/tree/namespace.h"
#include "core/views/zarr_views.h"
#include "iouring/env.h"

namespace ckptfs {

// What an open gives the kernel.
struct OpenFile {
  Attr attr;
  uint64_t handle = 0;
  bool direct_io = false;   // The kernel sends every read and write of this handle here.
  bool keep_cache = false;  // The kernel's cached pages of the file are still right.
  int backing_id = -1;      // The kernel reads this backing file itself (FUSE passthrough).
};

class OpenFiles {
 public:
  // What it works on; all must outlive it.
  struct Parts {
    Env& env;
    Stats& stats;
    Arena& arena;
    Namespace& ns;
    ZarrViews& zarr;
    HandleTable& handles;
    KernelStateKeeper& kernel_state;
    Reclaimer& reclaimer;
    // -o verify=reads: a backing file is read whole and checked against its checksum record
    // before the first read of its bytes is answered; a mismatch fails its reads with EIO.
    bool verify_reads = false;
  };
  explicit OpenFiles(const Parts& parts);

  // The daemon's hooks (Filesystem's setters of the same names say what each does). Set before
  // the first open.
  void SetPageCacheInvalidator(std::function<void(uint64_t, uint64_t, uint64_t)> invalidate) {
    invalidate_page_cache_ = std::move(invalidate);
  }
  void SetPassthrough(std::function<int(int fd)> open_backing,
                      std::function<void(int backing_id)> close_backing) {
    open_backing_ = std::move(open_backing);
    close_backing_ = std::move(close_backing);
  }
  void EnableDirectReads() { direct_reads_ = true; }
  void SetPageCacheFiller(std::function<bool(uint64_t, const char*, size_t)> fill) {
    fill_page_cache_ = std::move(fill);
  }

  // Waits, with `lock` (the namespace lock) held, until no open is filling the kernel's page
  // cache of `inode` (policy::ChooseOpen's fill_page_cache).
  void WaitPageCacheFilled(NamespaceLock& lock, const InodeRef& inode) REQUIRES(ns_lock);

  // Waits (up to policy::kPassthroughReleaseWait) until no passthrough handle of `ino` is open:
  // the kernel sends a reader's RELEASE after its close() has returned, so a writer that opens
  // the file right after reading it would otherwise find it still open.
  void WaitPassthroughReleased(uint64_t ino) EXCLUDES(ns_lock);
  // Opens regular file `ino` of the namespace for `flags` (O_TRUNC empties it) on behalf of
  // `c`. When the open needs memory that `reservation` lacks, sets `more` to the blocks it needs
  // and changes nothing. ETXTBSY for an open for writing while passthrough readers hold it.
  // Without `may_bypass`, every read of the handle comes through Read (no passthrough, page cache
  // fill or direct reads): a file whose backing bytes are fetched as they are read.
  Result<OpenFile> Open(uint64_t ino, int flags, const Caller& c, Reservation& reservation,
                        size_t& more, bool may_bypass = true) EXCLUDES(ns_lock);
  // Creates regular file `name` (not there) in `dir`, open for `flags`, looked up once.
  Result<OpenFile> CreateLocked(const InodeRef& dir, const std::string& name, uint32_t mode,
                                int flags, const Caller& c) REQUIRES(ns_lock);
  // What an open is to put in the kernel's page cache before it returns (none: no file).
  struct PageCacheFill {
    InodeRef inode;
    std::shared_ptr<BackingFile> file;  // Holds the file's bytes from offset 0.
    uint64_t size = 0;
    uint64_t version = 0;
  };
  // Counts the handle as open on its regular file and serves it as policy::ChooseOpen chooses;
  // only `may_bypass` handles may skip the page cache; a write-only open of `c` is asked whether
  // its writer's memory is forked. When `fill` is given and the choice is
  // to fill the page cache, marks the inode filling and sets `fill`: the caller then calls
  // FillPageCache outside the lock, before the open is answered.
  OpenFile OpenHandleLocked(std::unique_ptr<Handle> handle, bool may_bypass, const Caller& c,
                            PageCacheFill* fill = nullptr) REQUIRES(ns_lock);

  Result<ReadData> Read(FileHandle& h, uint64_t offset, size_t size);
  // verify=reads of bytes of `inode` read from its backing file `file` by another reader than
  // its handles (a tensor view): `file` is read whole and checked against its record unless it
  // was; EIO when it does not match. A spill file holds the daemon's own bytes: not checked.
  Status CheckSource(Inode& inode, const std::shared_ptr<BackingFile>& file) EXCLUDES(inode.mu);
  // Writes into the file's memory (a virtual zarr chunk: into its range of the real chunk),
  // waiting for memory as long as it takes; EINTR when `c` is killed meanwhile.
  Result<size_t> Write(FileHandle& h, uint64_t offset, const char* data, size_t size,
                       const Caller& c);
  // The same with bytes read straight into blocks, which the file takes where it can
  // (FileContent::Land).
  Result<size_t> Write(FileHandle& h, uint64_t offset, LandedBytes& landed, const Caller& c);
  // Extends the file to offset + length (mode 0 only).
  Status Fallocate(FileHandle& h, int mode, uint64_t offset, uint64_t length);
  // Truncation of `inode` to `size` at time `now`, by path (`handle` 0) or through open file
  // `handle`, whose close then seals it; `reservation` holds the block it may cut. EISDIR or
  // EINVAL for what is not a regular file; EPERM for a zarr view (its size is fixed); ETXTBSY
  // while the file is read through passthrough.
  Status TruncateLocked(const InodeRef& inode, uint64_t size, uint64_t handle, timespec now,
                        Reservation& reservation) REQUIRES(ns_lock);
  // close() by `lock_owner` of handle `h` opened with `flags`: seals the file when the closer
  // is one that wrote through it; a writer also gets a flush error not reported yet.
  Status Flush(FileHandle& h, int flags, uint64_t lock_owner) EXCLUDES(ns_lock);
  // Seals the file of `h` if a change made through `h` is not sealed yet.
  void SealLocked(FileHandle& h) REQUIRES(ns_lock);
  // The last close of handle `h`: sealed, its counts and passthrough id given back (the table
  // removes it after).
  void ReleaseLocked(FileHandle& h) REQUIRES(ns_lock);

 private:
  // Write: the bytes are `data`, or `landed` when not null.
  Result<size_t> WriteBytes(FileHandle& h, uint64_t offset, const char* data, size_t size,
                            LandedBytes* landed, const Caller& c);
  // Direct reads: the range of the backing file to have the kernel read ahead of a sequential
  // reader (none: no file), asked for outside the lock.
  struct ReadAhead {
    std::shared_ptr<BackingFile> file;
    uint64_t offset = 0;
    uint64_t length = 0;
  };
  ReadAhead ReadAheadLocked(FileHandle& h, uint64_t offset, size_t size) REQUIRES(h.inode->mu);
  // verify=reads: the backing file `segments` read from that is not checked yet, if any; EIO
  // when it failed its check.
  Result<std::shared_ptr<BackingFile>> BackingToCheckLocked(
      const Inode& inode, const std::vector<ReadSegment>& segments) REQUIRES(inode.mu);
  // Reads `file` whole and checks it against its record, for reads of `inode`.
  Status CheckBacking(Inode& inode, const std::shared_ptr<BackingFile>& file) EXCLUDES(inode.mu);
  // Open without its page cache fill, which it sets in `fill` for the caller.
  Result<OpenFile> OpenUnfilled(uint64_t ino, int flags, const Caller& c,
                                Reservation& reservation, size_t& more, PageCacheFill& fill,
                                bool may_bypass) EXCLUDES(ns_lock);
  // Reads the file of `fill` and stores it in the kernel's page cache, then ends the inode's
  // filling (a failure leaves the reads to the daemon).
  void FillPageCache(const PageCacheFill& fill) EXCLUDES(ns_lock);
  // One open handle of `inode` fewer; a file left unchanged gives its descriptor back.
  void CloseOneLocked(const InodeRef& inode) REQUIRES(ns_lock);
  // Whether the last file named as `inode` is closed on this mount was written in small pieces.
  bool SmallWritesBeforeLocked(const Inode& inode) REQUIRES(ns_lock);
  // Hands the name of `inode` (a small file an open reads whole from its backing file) to the
  // sibling read-ahead.
  void ReadAheadSiblingsLocked(const Inode& inode) REQUIRES(ns_lock);
  // Remembers, by its name, whether handle `h` wrote its file in small pieces (when it sent
  // enough write requests to tell).
  void RememberWritePiecesLocked(FileHandle& h) REQUIRES(ns_lock);

  Env& env_;
  Stats& stats_;
  Arena& arena_;
  Namespace& ns_;
  ZarrViews& zarr_;
  HandleTable& handles_;
  KernelStateKeeper& kernel_state_;
  Reclaimer& reclaimer_;
  std::function<void(uint64_t, uint64_t, uint64_t)> invalidate_page_cache_;
  std::function<int(int)> open_backing_;
  std::function<void(int)> close_backing_;
  std::function<bool(uint64_t, const char*, size_t)> fill_page_cache_;
  std::atomic<bool> direct_reads_{false};
  const bool verify_reads_;
  // With the namespace lock: a file's last passthrough handle closed.
  std::condition_variable_any passthrough_released_;
  // With the namespace lock: an open ended its page cache fill.
  std::condition_variable_any page_cache_filled_;
  // By base name (a checkpoint's files repeat their names from one checkpoint to the next):
  // whether the last file of that name closed was written in small pieces. At most
  // kMaxRememberedNames, forgotten all at once.
  std::unordered_map<std::string, bool> written_in_small_pieces_ GUARDED_BY(ns_lock);
  // Small files read whole from the backing store: the next ones of their directory are read
  // ahead (declared last: its thread stops first).
  SiblingReadAhead sibling_read_ahead_;
};

}  // namespace ckptfs
