// Inode: one file, directory, symlink or special file as the mount shows it.
//
// Lock order: the namespace lock (core/tree/namespace.h) before Inode::mu. The namespace fields
// (children, names, nlink, lookups, open counts, journal links) are guarded by the namespace lock;
// attributes and content by Inode::mu; the backing directory is an atomic of its own. Inode
// numbers are never reused (64-bit counter), so the generation is always 0.
#pragma once

#include <sys/stat.h>
#include <time.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "core/base/lazy_map.h"
#include "core/base/status.h"
#include "core/base/thread_annotations.h"
#include "core/memory/file_content.h"

namespace ckptfs {

struct JournalEntry;
struct ZarrArray;
struct ChunkView;

// kSpecial: a FIFO, socket or device node; metadata only (the kernel opens it itself).
enum class FileType { kRegular, kDirectory, kSymlink, kSpecial };

// What getattr returns.
struct Attr {
  uint64_t ino = 0;
  uint32_t mode = 0;  // Type and permission bits.
  uint32_t nlink = 0;
  uint32_t uid = 0;
  uint32_t gid = 0;
  uint64_t size = 0;
  uint64_t rdev = 0;  // Device nodes: the device.
  timespec atime{}, mtime{}, ctime{};
  bool no_blocks = false;  // Nothing stored: a view's file (du counts what is stored).
  // The kernel may keep it, and the entry that led to it, for policy::kSettledAttrTimeout
  // (policy::AttrSettled) instead of kAttrTimeout.
  bool settled = false;
};

struct Inode {
  struct Name {
    std::shared_ptr<Inode> parent;
    std::string name;
    bool operator<(const Name& o) const {
      return parent != o.parent ? parent < o.parent : name < o.name;
    }
  };

  Inode(uint64_t ino_in, FileType type_in) : ino(ino_in), type(type_in) {}

  // The fields are grouped by the room that owns them; within a group, the namespace lock
  // (ns_lock) or mu guards each field as annotated.

  // --- Tree (core/tree): the node, its names and its place on the backing store ---
  const uint64_t ino;
  const FileType type;
  // kSpecial: S_IFIFO, S_IFSOCK, S_IFCHR or S_IFBLK, and the device of a device node. Set before
  // the inode is shown, never changed.
  uint32_t special_type = 0;
  uint64_t rdev = 0;
  uint32_t nlink GUARDED_BY(ns_lock) = 1;
  uint64_t lookups GUARDED_BY(ns_lock) = 0;
  // Names of a non-directory (several with hard links); the one name of a directory.
  std::set<Name> names GUARDED_BY(ns_lock);
  // Present on the backing store under some name (found there, or published/created there).
  bool on_backing GUARDED_BY(ns_lock) = false;
  // A regular file whose content is only on the backing store and not opened (found there, or
  // unloaded once durable): where to open it. Content holds just its size meanwhile.
  std::shared_ptr<BackingFile> origin_dir GUARDED_BY(ns_lock);
  std::string origin_name GUARDED_BY(ns_lock);
  // The newest journal entry about this inode while it is pending (weak: entries hold inodes).
  std::weak_ptr<JournalEntry> last_entry GUARDED_BY(ns_lock);
  // Directory: children by name; names removed here that may still exist on the backing store,
  // each with the journal seq through which its removals are journaled; and whether every
  // backing entry has been loaded.
  LazyMap<std::string, std::shared_ptr<Inode>> children GUARDED_BY(ns_lock);
  LazyMap<std::string, uint64_t> whiteouts GUARDED_BY(ns_lock);
  bool complete GUARDED_BY(ns_lock) = false;
  // Shared mode: when this inode last took what the backing store holds (a directory its
  // listing, a regular file its attributes).
  std::chrono::steady_clock::time_point backing_read_at GUARDED_BY(ns_lock){};
  std::string symlink_target GUARDED_BY(ns_lock);
  mutable Mutex mu;
  uint32_t mode GUARDED_BY(mu) = 0;  // Permission bits only.
  uint32_t uid GUARDED_BY(mu) = 0;
  uint32_t gid GUARDED_BY(mu) = 0;
  timespec atime GUARDED_BY(mu){};
  timespec mtime GUARDED_BY(mu){};
  timespec ctime GUARDED_BY(mu){};

  // --- Staging memory (core/memory): the content and its versions ---
  FileContent content GUARDED_BY(mu);
  uint64_t version GUARDED_BY(mu) = 0;          // Bumped by every change of content.
  uint64_t sealed_version GUARDED_BY(mu) = 0;   // Version of the newest sealed snapshot.

  // --- Flush (core/flush, core/filesystem/durability.h): when it is flushed, what is durable ---
  // When its content was last sealed, and how long that version waits (policy::NextHold).
  std::chrono::steady_clock::time_point last_sealed GUARDED_BY(ns_lock){};
  std::chrono::steady_clock::duration hold GUARDED_BY(ns_lock){};
  uint64_t durable_version GUARDED_BY(mu) = 0;  // Version the backing store holds durably.
  // Last failed flush of this file (cleared when one succeeds), and whether a close returned it.
  Status flush_error GUARDED_BY(mu);
  bool flush_error_reported GUARDED_BY(mu) = false;

  // --- Open files (core/filesystem/open_files.h): how its handles are served ---
  uint32_t open_handles GUARDED_BY(ns_lock) = 0;
  // Open handles read by the kernel from the backing file, and the backing id they share (the
  // kernel takes one backing file per inode).
  uint32_t passthrough_handles GUARDED_BY(ns_lock) = 0;
  int backing_id GUARDED_BY(ns_lock) = -1;
  // Open handles that use the kernel's page cache (OpenFiles::OpenHandleLocked), and whether
  // that cache may miss a change made through a handle that bypasses it, or (shared mode) made
  // to the backing file by another mount.
  uint32_t cached_handles GUARDED_BY(mu) = 0;
  bool page_cache_stale GUARDED_BY(mu) = false;
  // A read-only open had the backing file read ahead.
  bool backing_prefetched GUARDED_BY(mu) = false;
  // -o verify=reads: the backing file last checked against its checksum record before its bytes
  // were served (the descriptor, and the file as fstat saw it before the check, which a later
  // descriptor of the unchanged file matches), and whether it failed (its reads fail with EIO).
  // Null before the first check.
  struct ReadCheck {
    std::weak_ptr<BackingFile> base;
    std::array<int64_t, 5> file{};
    bool failed = false;
  };
  std::unique_ptr<ReadCheck> read_check GUARDED_BY(mu);

  // --- Integrity (core/integrity): what tensor views' info.json show of its checksum ---
  // The checksum record of one version of its content (core/integrity/checksum_record.h, as
  // text): set by the flusher as it publishes that version, or read once from the backing file
  // `read_from` (the version's base file; a new base file is read again).
  struct ChecksumNote {
    uint64_t version = 0;
    std::string record;
    std::weak_ptr<BackingFile> read_from;
    bool from_flusher = false;
    std::string why_none;  // Without a record: why (a malformed one, a failed read).
  };
  std::optional<ChecksumNote> checksum GUARDED_BY(mu);
  // The daemon's last check of the stored bytes of `version` against its record: by the flusher
  // before publishing it (verify=markers) or before serving reads (verify=reads).
  struct StoredCheck {
    uint64_t version = 0;
    bool matched = false;
    const char* by = "";     // "markers" or "reads".
    int64_t at_unix_ns = 0;  // Wall clock.
    static StoredCheck Now(uint64_t version, bool matched, const char* by) {
      return {version, matched, by,
              std::chrono::duration_cast<std::chrono::nanoseconds>(
                  std::chrono::system_clock::now().time_since_epoch())
                  .count()};
    }
  };
  std::unique_ptr<StoredCheck> last_check GUARDED_BY(mu);  // Null before the first check.
  // The version whose bytes an open put in the kernel's page cache whole (policy::ChooseOpen's
  // fill_page_cache), since the kernel last looked the inode up (reset at its last FORGET).
  std::optional<uint64_t> page_cache_filled_version GUARDED_BY(mu);
  // An open is filling the kernel's page cache now; opens for writing and truncations wait
  // until it is done (OpenFiles::WaitPageCacheFilled), so that it never stores bytes older than
  // theirs.
  bool page_cache_filling GUARDED_BY(ns_lock) = false;

  // --- Views (core/views/zarr_views.h): zarr arrays served with a fine chunk grid ---
  // Directory: the zarr array it holds, when served with a fine chunk grid
  // (core/views/zarr_array.h).
  std::shared_ptr<ZarrArray> zarr GUARDED_BY(ns_lock);
  // Regular file: a virtual chunk of a fine-grid zarr array; its bytes are a range of a real
  // chunk file and `content` holds only its size. Changed with the namespace lock and mu held.
  std::shared_ptr<const ChunkView> view GUARDED_BY(mu);
  // With `view`: the file that holds its bytes (view->real), for the tree, which does not read
  // views (Namespace::ContentOwner).
  std::shared_ptr<Inode> content_owner GUARDED_BY(mu);
  // The .zarray of a fine-grid array: the text clients read (`content` holds the real one).
  std::string served_text GUARDED_BY(mu);

  // --- Remote tier (core/remote/remote_reader.h): what the object store shows of it ---
  // Directory: its entries on the store are in the backing directory (listed by this worker, or
  // made through this mount: what it holds is what this mount writes).
  bool remote_listed GUARDED_BY(ns_lock) = false;

  // --- Takeover (core/filesystem/kernel_state_keeper.h): what the next worker finds of it ---
  // Its entry in the kernel state record (core/recovery/kernel_state_record.h), or -1, the node id
  // that entry names it by (its own, or an earlier worker's that the kernel holds), and whether
  // that entry records its content (a file open for writing). Changed with both locks held.
  int record GUARDED_BY(mu) = -1;
  uint64_t record_ino GUARDED_BY(mu) = 0;
  bool content_recorded GUARDED_BY(mu) = false;

  // Directory: its backing directory once it exists (null before). Set by lookup, or by the
  // flusher when it creates the directory; any thread, with or without other locks.
  std::shared_ptr<BackingFile> BackingDir() const { return backing_dir_.load(); }
  void SetBackingDir(std::shared_ptr<BackingFile> dir) { backing_dir_.store(std::move(dir)); }

  uint32_t TypeBits() const {
    switch (type) {
      case FileType::kDirectory: return S_IFDIR;
      case FileType::kSymlink: return S_IFLNK;
      case FileType::kSpecial: return special_type;
      default: return S_IFREG;
    }
  }

 private:
  std::atomic<std::shared_ptr<BackingFile>> backing_dir_;
};

using InodeRef = std::shared_ptr<Inode>;

}  // namespace ckptfs
