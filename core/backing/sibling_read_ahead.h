// SiblingReadAhead: loaders of many small files (a checkpoint of one file per tensor, zarr
// chunks) open a directory's files one after another in name order, the order a listing
// through the mount shows. Each such open of a file that is not in the kernel's caches waits
// for the device twice (its inode at the lookup, its bytes at the open), one file at a time.
// Once a directory's files are opened in that order, the next ones have their inode and bytes
// read into the kernel's caches ahead of the loader, on a thread of this class's own: the
// device gets many reads at once, and the loader's lookups and opens find what they need.
//
// Only a hint: names that are gone, not regular files, or larger than a page-cache fill are
// skipped; nothing the mount shows depends on it. Bounded: a window of files per directory,
// a queue of opens, and the directory listings held (their number and names in all; a
// directory too large is never read ahead).
//
// Thread-safe: any thread may call Opened.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "core/base/thread_annotations.h"
#include "core/memory/file_content.h"
#include "iouring/env.h"

namespace ckptfs {

namespace policy {

// Files read ahead of the last one opened in a directory.
inline constexpr size_t kSiblingReadAheadWindow = 16;

// A directory's listing that lacks the name opened is read again, at most this often.
inline constexpr std::chrono::seconds kSiblingListAgainAfter{1};

// Where a loader is in one directory's listing (names sorted).
struct SiblingCursor {
  static constexpr size_t kNone = SIZE_MAX;
  size_t last_opened = kNone;  // Index of the file opened last.
  size_t read_ahead_end = 0;   // Files before this index were read ahead (or opened).
};

// The range [first, second) of the listing (of `count` names) to read ahead now that the file
// at `opened` was opened, and the cursor moved to it. Only a forward step of at most `window`
// names from the file opened before reads ahead (a loader going through the directory, maybe
// skipping some names); up to `window` names after `opened`, those not read ahead already.
inline std::pair<size_t, size_t> SiblingsToReadAhead(SiblingCursor& cursor, size_t opened,
                                                     size_t count, size_t window) {
  const size_t last = cursor.last_opened;
  cursor.last_opened = opened;
  const bool in_order = last != SiblingCursor::kNone && opened > last && opened - last <= window;
  if (!in_order) return {0, 0};
  const size_t first = std::max(opened + 1, cursor.read_ahead_end);
  const size_t end = std::min(count, opened + 1 + window);
  if (first >= end) return {0, 0};
  cursor.read_ahead_end = end;
  return {first, end};
}

}  // namespace policy

// The directory listings a SiblingReadAhead holds: their number (each keeps its directory's
// descriptor open) and their names in all; a directory of more than `directory_names` is never
// read ahead (nor listed again).
struct SiblingListingLimits {
  size_t directories = 256;
  size_t names = 1u << 20;
  size_t directory_names = 1u << 18;
};

class SiblingReadAhead {
 public:
  // Reads ahead files of up to `max_file_bytes` through `env`, counting them in `files_read_ahead`.
  // Both must outlive it.
  SiblingReadAhead(Env& env, std::atomic<uint64_t>& files_read_ahead, uint64_t max_file_bytes,
                   SiblingListingLimits limits = {});
  ~SiblingReadAhead();  // Stops the thread; what is queued is dropped.
  SiblingReadAhead(const SiblingReadAhead&) = delete;
  SiblingReadAhead& operator=(const SiblingReadAhead&) = delete;

  // A reader opened `name` of backing directory `dir`, to read it whole from the backing file.
  // Returns at once; the thread (started by the first call) does the rest.
  void Opened(std::shared_ptr<BackingFile> dir, std::string name) EXCLUDES(mu_);
  // Waits until every open handed over so far has been acted on (for tests).
  void Drain() EXCLUDES(mu_);

 private:
  struct Open {
    std::shared_ptr<BackingFile> dir;
    std::string name;
  };
  struct Listing {
    std::shared_ptr<BackingFile> dir;  // Keeps the key's descriptor from being reused.
    std::vector<std::string> names;    // Sorted.
    policy::SiblingCursor cursor;
    uint64_t used = 0;                 // When it was last used (a count of opens acted on).
    std::chrono::steady_clock::time_point listed_at;
    bool too_many_names = false;  // Not read ahead; `names` is empty.
  };
  void Run() EXCLUDES(mu_);
  void ActOn(const Open& open);
  // The listing of `dir`, read (again) when absent or when it lacks `name`; null when `dir`
  // cannot be listed or holds too many names.
  Listing* ListingOf(const std::shared_ptr<BackingFile>& dir, const std::string& name);
  // Reads the inode and bytes of `name` of `dir_fd` into the kernel's caches, when it is a
  // regular file of up to max_file_bytes_.
  void ReadAheadFile(int dir_fd, const std::string& name);

  Env& env_;
  std::atomic<uint64_t>& files_read_ahead_;
  const uint64_t max_file_bytes_;
  const SiblingListingLimits limits_;
  // Used by the thread only.
  std::map<const BackingFile*, Listing> listings_;
  size_t listed_names_ = 0;
  uint64_t acted_ = 0;
  mutable Mutex mu_;
  std::condition_variable_any wake_;  // With mu_: an open queued, or stop.
  std::condition_variable_any idle_;  // With mu_: the queue is empty and nothing is being acted on.
  std::deque<Open> queue_ GUARDED_BY(mu_);
  bool busy_ GUARDED_BY(mu_) = false;
  bool stop_ GUARDED_BY(mu_) = false;
  std::thread thread_;  // Started by the first Opened, under mu_.
};

}  // namespace ckptfs
