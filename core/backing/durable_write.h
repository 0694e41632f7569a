// A whole small file made durable under its final name, the way ckptfs writes every file of its
// own on a backing store (a stand-in's copy of a dead member's version, a stand-in record, a
// checksum manifest): written under a temporary name in a staging directory, made durable, then
// renamed into place, so that nothing is ever under the final name that is not whole.
#pragma once

#include <sys/types.h>

#include <functional>
#include <string>

#include "core/base/status.h"
#include "iouring/env.h"

namespace ckptfs {

// Whether WriteFileDurably makes the new name durable too (fsync of the directory), or leaves
// that to the caller (which renames several files into one directory, say).
enum class DirSync { kSync, kCallerSyncs };

// Creates `temp_name` in `staging_fd` with `mode` (a leftover of that name is truncated; a
// symbolic link there is refused), lets `fill` write the content through the descriptor it is
// given (and set what else it must: attributes, mode), fdatasyncs it, and renames it to `name`
// in `dir_fd` (replacing what is there); with DirSync::kSync, then fsyncs `dir_fd`. Ok once all
// of it is done. On failure, the error of the step that failed: before the rename, the temporary
// file is unlinked and `name` is as it was; a failure of the directory's sync leaves the whole
// file under `name`, its name perhaps not durable yet. The calling thread must be one that may
// call `env`'s Sync (iouring/env.h).
Status WriteFileDurably(Env& env, int staging_fd, const std::string& temp_name, int dir_fd,
                        const std::string& name, mode_t mode,
                        const std::function<Status(int fd)>& fill, DirSync dir_sync);

}  // namespace ckptfs
