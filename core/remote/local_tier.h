// LocalTier: with -o local_size, the backing directory is a cache of the store. Files that are on
// the store as the backing directory holds them (uploaded by the Uploader, or fetched by the
// RemoteReader) are resident; once they and the files still on their way to the store hold more
// than local_size, files on the store are evicted as policy::ChooseEvictions says (oldest
// checkpoints first): each becomes a placeholder again (core/remote/remote_reader.h), marked
// first and made durable, then its blocks freed (a hole over the whole file), so that it stays
// listed with its size and is fetched again at its next open. A crash between the two leaves a
// marked whole file, fetched again needlessly, never an unmarked hole.
//
// A file is evicted only when the mount says it may (the Gate, called for each file to evict):
// not open, nothing of it pending, not being fetched or opened; the Gate runs `evict` under the
// lock that keeps it so. A file whose inode, size or mtime changed since it reached the store
// is not evicted (a newer version is on its way, and will be resident once uploaded).
//
// Files of earlier mounts are not known here until this mount uploads or fetches them.
//
// Thread-safe: any thread may call any method; eviction runs on a thread of its own.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <thread>

#include "core/base/status.h"
#include "core/base/thread_annotations.h"
#include "core/remote/s3_location.h"
#include "core/stats/stats.h"

namespace ckptfs {

class LocalTier {
 public:
  // Runs `evict` (which says whether it evicted) when the mount may evict file `path` now.
  using Gate = std::function<bool(const std::string& path, const std::function<bool()>& evict)>;
  struct Settings {
    uint64_t local_size = 0;
    S3Location location;
    int root_fd = -1;  // The backing directory (not owned).
  };
  // `pending_bytes` says the bytes on their way to the store.
  LocalTier(const Settings& settings, Stats& stats, Gate gate,
            std::function<uint64_t()> pending_bytes);
  ~LocalTier();  // Stops the thread.
  // Starts evicting (its thread), once the gate and `pending_bytes` may be called.
  void Start();

  // File `path` of the backing directory is on the store as it is now (inode `ino`, `size`
  // bytes, mtime `mtime_ns`); `etag`, when known, is sent with its fetch.
  void OnStore(const std::string& path, uint64_t ino, uint64_t size, int64_t mtime_ns,
               const std::string& etag) EXCLUDES(mu_);
  // Bytes of resident files.
  uint64_t ResidentBytes() const EXCLUDES(mu_);

 private:
  struct Resident {
    uint64_t ino = 0;
    uint64_t size = 0;
    int64_t mtime_ns = 0;
    std::string etag;
    uint64_t seq = 0;
  };
  void Run() EXCLUDES(mu_);
  // Makes `path` (as `r` says it is) a placeholder again; false when it is not that file any more
  // or cannot be evicted.
  bool Evict(const std::string& path, const Resident& r);

  const Settings settings_;
  Stats& stats_;
  const Gate gate_;
  const std::function<uint64_t()> pending_bytes_;
  mutable Mutex mu_;
  std::condition_variable_any wake_;  // With mu_: a file became resident, or stop.
  std::map<std::string, Resident> resident_ GUARDED_BY(mu_);
  uint64_t next_seq_ GUARDED_BY(mu_) = 0;
  bool stop_ GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace ckptfs
