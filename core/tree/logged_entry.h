// A journal entry named by paths, as the namespace was when it was journaled, and the log that
// takes every such entry (core/recovery/recovery_log.h keeps them for the next worker).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/tree/journal.h"

namespace ckptfs {

// A journal entry as the log keeps it: paths are relative to the mount's root.
struct LoggedEntry {
  JournalEntry::Kind kind = JournalEntry::Kind::kPublish;
  uint64_t seq = 0;
  std::string path{};      // The subject (rename and link: the source).
  std::string new_path{};  // Rename and link: the destination.
  unsigned rename_flags = 0;
  std::vector<std::string> names{};  // kPublish: every path of the file.
  uint32_t mode = 0;
  uint32_t uid = 0;
  uint32_t gid = 0;
  int64_t atime_ns = 0;
  int64_t mtime_ns = 0;
  bool set_mode = false, set_owner = false, set_times = false;
  std::string symlink_target{};
  uint32_t node_type = 0;
  uint64_t rdev = 0;
  // kPublish: the snapshot's size and blocks (block index, arena slot). `in_memory` is false
  // when part of it lives in a file: the first `base_len` bytes of the spill file `spill_file`
  // of the staging directory (a file larger than the cache, spilled while it was written), or,
  // with no spill file named, a file this log cannot name (not recoverable).
  uint64_t size = 0;
  bool in_memory = true;
  std::string spill_file{};
  uint64_t base_len = 0;
  std::vector<std::pair<uint64_t, uint64_t>> blocks{};
};

// Takes each entry the namespace journals, before the operation that journaled it is answered.
class EntryLog {
 public:
  virtual ~EntryLog() = default;
  virtual void Append(const LoggedEntry& entry) = 0;
};

}  // namespace ckptfs
