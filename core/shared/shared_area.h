// SharedArea: where the mounts of -o shared meet (members/, commits/<id>/), as the few operations
// the membership and commit protocol make of it. Two places implement it: the shared backing
// directory, <backing>/.ckptfs/shared (core/shared/shared_dir.h), and the object store of -o
// remote, PREFIX/.ckptfs/shared/ (core/shared/shared_store.h), for nodes with no shared filesystem.
//
// A `dir` is a path under the area of one or two names: "members", "commits", "commits/<id>".
// Everything in the area may have been written by another node, or by anyone with write access to
// the backing store or the bucket: reads are bounded, and callers validate what they parse.
//
// Thread-safe: each implementation serialises its own requests.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/base/status.h"

namespace ckptfs {

class SharedArea {
 public:
  virtual ~SharedArea() = default;

  // The names in `dir`: its files and subdirectories, at most policy::kMaxListedNames (the rest
  // unread). ENOENT when `dir` does not exist (the store: an empty list).
  virtual Result<std::vector<std::string>> List(const std::string& dir) = 0;
  // The content of `name` in `dir`. ENOENT when it is missing, EFBIG when it holds more than
  // `max_bytes`, EINVAL when it is not a regular file (a symbolic link is not followed).
  virtual Result<std::string> Read(const std::string& dir, const std::string& name,
                                   size_t max_bytes) = 0;
  // Replaces `name` in `dir` by `content`, atomically: a reader sees the old content or the new,
  // never a part. `temp_name` is where the directory stages it first (unique to the writer; the
  // store puts the object at once). ENOENT when `dir` does not exist (the directory only: the
  // store has none). Not synced: the area tells the live mounts of each other; none of it is
  // needed after a crash.
  virtual Status Replace(const std::string& dir, const std::string& name,
                         const std::string& temp_name, const std::string& content) = 0;
  // Removes `name` from `dir`: ok, or ENOENT when it was not there (the store: ok).
  virtual Status Remove(const std::string& dir, const std::string& name) = 0;
  // Makes directory `dir` (EEXIST when it is there; the store: ok, it has no directories).
  virtual Status MakeDir(const std::string& dir) = 0;
  // Removes `dir` with the files in it (it has no subdirectories). ENOENT when it is gone
  // already; ENOTEMPTY when a file appeared in it meanwhile (the directory: try again later).
  virtual Status RemoveDir(const std::string& dir) = 0;
};

// The JSON object `text` holds; nullopt for anything else (no exception).
std::optional<nlohmann::json> ParseObject(const std::string& text);
// Field `key` of object `j` when it is a string of at most `max_bytes`.
bool JsonString(const nlohmann::json& j, const char* key, size_t max_bytes, std::string* out);
// Field `key` of object `j` when it is an integer that fits a uint64_t.
bool JsonUnsigned(const nlohmann::json& j, const char* key, uint64_t* out);

}  // namespace ckptfs
