// ControlFiles: the control directory `.ckptfs` at the mount root. `stats` reads as the mount's
// figures in JSON; `sync` reads as "ok" once everything written before its open is durable (or
// as the error that keeps it from being), and writing "sync" to it waits the same way. Writing
// "upgrade" (or "upgrade PATH") to `upgrade` asks for the worker to be replaced (with the binary
// at PATH) without unmounting; the write returns once the request is taken.
//
// Thread-safe: every call may come from any thread (a read of `sync` blocks its caller only).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "core/backing/backing_store.h"
#include "core/base/status.h"
#include "core/memory/file_content.h"
#include "core/tree/inode.h"
#include "core/tree/namespace.h"

namespace ckptfs {

inline constexpr uint64_t kControlDirIno = 2;
inline constexpr uint64_t kStatsIno = 3;
inline constexpr uint64_t kSyncIno = 4;
inline constexpr uint64_t kUpgradeIno = 5;

// Whether `ino` is the control directory or one of its files.
inline bool IsControl(uint64_t ino) { return ino != kRootIno && ino < kFirstIno; }
// Whether entry `name` of directory `parent` is the control directory or one of its files.
inline bool IsControlEntry(uint64_t parent, const std::string& name) {
  return parent == kControlDirIno || (parent == kRootIno && name == kReservedName);
}

class ControlFiles {
 public:
  // What the control files read from the mount.
  class Source {
   public:
    virtual ~Source() = default;
    virtual std::string StatsJson() = 0;
    // The point a sync waits for: everything sealed so far.
    virtual uint64_t SyncPoint() = 0;
    // Blocks until everything up to `point` is durable, or returns why it is not.
    virtual Status WaitDurable(uint64_t point) = 0;
    // Asks for this worker to be replaced by `binary` (empty: the binary it runs).
    virtual Status RequestUpgrade(const std::string& binary) = 0;
  };
  // An open control file.
  struct OpenFile {
    uint64_t ino = 0;
    uint64_t sync_point = 0;  // sync: what its reader waits for.
    std::string content;      // Generated at open (stats) or first read (sync).
  };

  // `source` must outlive this. The files' times are `start` (the mount's start).
  ControlFiles(Source& source, timespec start) : source_(source), start_(start) {}

  // The attributes of control inode `ino`.
  Attr AttrOf(uint64_t ino) const;
  // The entry `name` of the control directory.
  Result<Attr> Lookup(const std::string& name) const;
  // The control directory's entries, "." and ".." included.
  std::vector<DirEntry> List() const;
  // Opens control file `ino` for `flags` (stats is read-only); EISDIR for the directory.
  Result<OpenFile> Open(uint64_t ino, int flags);
  Result<ReadData> Read(OpenFile& file, uint64_t offset, size_t size);
  // A command written to a control file: "sync" to the sync file, "upgrade [PATH]" to the
  // upgrade file. Returns the bytes taken.
  Result<size_t> Write(const OpenFile& file, std::string_view command);

 private:
  Source& source_;
  const timespec start_;
};

}  // namespace ckptfs
