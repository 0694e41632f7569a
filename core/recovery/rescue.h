// Rescue: where file versions go when unmount cannot flush them to the backing store.
#pragma once

#include <string>
#include <vector>

#include "core/base/status.h"
#include "core/memory/file_content.h"
#include "iouring/env.h"

namespace ckptfs {

struct UnflushedFile {
  std::string path;  // Relative to the mount root.
  FileContent content;
};

// Writes every file at its path under a new rescue directory, made durable:
// <backing_dir>/.ckptfs/rescue-<time>-<pid> (through `root_fd`, the backing directory), or,
// when the backing directory cannot hold them, /var/tmp/ckptfs-rescue-<time>-<pid>. Returns the
// rescue directory's path, or why no place took them all. A place that could not take them all
// is left without a rescue directory: a rescue copy is complete or not there.
// Syncs through `env`: the flusher must have stopped.
Result<std::string> SaveToRescueDirectory(Env& env, int root_fd, const std::string& backing_dir,
                                          const std::vector<UnflushedFile>& files);

}  // namespace ckptfs
