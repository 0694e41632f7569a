// The backing store's setup: the backing directory checked and opened, ckptfs' own directory
// (.ckptfs/staging) prepared and emptied of what a killed daemon left there, and how files may be
// flushed into it.
#pragma once

#include <functional>
#include <string>
#include <string_view>

#include "core/base/config.h"
#include "core/backing/backing_paths.h"
#include "core/base/status.h"
#include "iouring/env.h"

namespace ckptfs {

struct BackingStore {
  int root_fd = -1;     // The backing directory.
  int staging_fd = -1;  // <backing>/.ckptfs/staging: where versions are written before publishing.
  // config.flush_io, or kBuffered when it was kAuto and the filesystem refuses O_DIRECT.
  FlushIo flush_io = FlushIo::kAuto;
  // The staging directory takes device nodes (CAP_MKNOD, and a filesystem and user namespace
  // that allow them).
  bool device_nodes = false;
};

// Opens the backing directory `path`, which must exist, be a directory and be writable; fails
// with a message naming it.
Result<int> OpenBackingDirectory(Env& env, const std::string& path);

// Opens the backing directory of `config` (it must exist, be a directory and be writable) and
// prepares the staging directory: .ckptfs/staging, emptied of what a killed daemon left there;
// in shared mode .ckptfs/staging/<config.node> (a resolved node name), emptied by the caller once
// it has joined (RemoveStagingLeftovers). Handoff and spill files stay for a worker taking over
// (Config::worker > 0), which removes the spill files it does not take (RemoveSpillFiles). The
// caller owns both descriptors. Fails with a message naming the backing directory;
// flush_io=direct fails where the filesystem refuses O_DIRECT.
Result<BackingStore> OpenBackingStore(Env& env, const Config& config);

// Removes the staged files of an earlier run that was killed: they never reached a final name.
// A worker taking over from another (Config::worker > 0) keeps the handoff and spill files it
// may take over.
void RemoveStagingLeftovers(Env& env, int staging_fd, bool keep_for_takeover);
// Whether `name` is a name a spill file may have (no path, no "." or "..").
inline bool IsSpillFileName(std::string_view name) {
  return name.size() > kSpillPrefix.size() && name.size() <= kMaxSpillName &&
         name.substr(0, kSpillPrefix.size()) == kSpillPrefix &&
         name.find('/') == std::string_view::npos;
}
// Removes the spill files of the staging directory whose names `keep` does not hold (all of
// them without `keep`).
void RemoveSpillFiles(Env& env, int staging_fd,
                      const std::function<bool(const std::string&)>& keep = nullptr);

}  // namespace ckptfs
