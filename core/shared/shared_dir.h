// The shared directory of -o shared, <backing>/.ckptfs/shared: where the mounts that share one
// backing directory meet (members/, commits/), and how its small files are read and written.
//
// Everything in it may have been written by another node, or by anyone with write access to the
// backing store: reads are bounded, never follow symbolic links, and callers validate what they
// parse.
#pragma once

#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "core/base/status.h"
#include "iouring/env.h"

namespace ckptfs {

// Opens <backing>/.ckptfs/shared/`sub`, making the missing directories on the way. The caller owns
// the descriptor.
Result<int> OpenSharedSubdir(Env& env, int backing_fd, const std::string& sub);

// The content of regular file `name` of `dir`. ENOENT when it is missing, EFBIG when it holds
// more than `max_bytes`, EINVAL when it is not a regular file (a symbolic link is not followed).
Result<std::string> ReadSmallFile(Env& env, int dir, const std::string& name, size_t max_bytes);

// Replaces file `name` of `dir` by one holding `content`, atomically: written to `temp_name`
// first (removed again when that fails), then renamed over `name`. Not synced: the shared files
// tell the live mounts of each other; none of them is needed after a crash.
Status ReplaceFile(Env& env, int dir, const std::string& name, const std::string& temp_name,
                   const std::string& content);

// The JSON object `text` holds; nullopt for anything else (no exception).
std::optional<nlohmann::json> ParseObject(const std::string& text);

// Field `key` of object `j` when it is a string of at most `max_bytes`.
bool JsonString(const nlohmann::json& j, const char* key, size_t max_bytes, std::string* out);
// Field `key` of object `j` when it is an integer that fits a uint64_t.
bool JsonUnsigned(const nlohmann::json& j, const char* key, uint64_t* out);

// Removes directory `name` of `dir` with the files in it (it has no subdirectories). ENOENT when
// it is gone already; ENOTEMPTY when a file appeared in it meanwhile (try again later).
Status RemoveFlatDir(Env& env, int dir, const std::string& name);

}  // namespace ckptfs
