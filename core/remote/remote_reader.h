// RemoteReader: the read path from the object store (restart on any node): a mount of an empty
// backing directory with the same remote shows the store's files and reads them.
//
// Listing (policy in core/remote/remote_read_policy.h): ListInto lists one directory from the
// store (ListObjectsV2 with delimiter '/', page by page; never the whole bucket) and makes its
// entries there: a common prefix a directory (unless the name is taken), an object a
// placeholder: a sparse file of the object's size and LastModified time marked with
// kRemotePlaceholderAttr (core/backing/backing_paths.h) holding its ETag and key (so that it is
// fetched from where it was listed, whatever it is renamed to). An object whose name the backing
// directory holds already is judged by policy::JudgeListedOverLocal, against the ETag the local
// file records (kStoredVersionAttr, or its placeholder's mark) and what the mount still has to
// send about it (the Gate): a local file the store has a newer object of is replaced by a
// placeholder of it; an object whose removal is pending is not shown. A placeholder is made in
// the staging directory and linked (or renamed) under its name, so a crash leaves no unmarked
// placeholder. Names the store lists that are not one plain component (policy::JudgeListed) are
// refused, counted and logged, never followed.
//
// Every file fetched whole records the ETag it was fetched with (kStoredVersionAttr), as the
// Uploader does for the files it uploads.
//
// Fetching: a placeholder opened for reading is a LazyFile: each read first fetches the ranges it
// reads (and the read-ahead) in place. Fetch fills a placeholder in place with the object's bytes
// at once (before an open for writing, a rename, a link), by ranged GETs in
// parallel (`concurrency` at most, `range_size` each) with If-Match on the listed ETag (an object
// replaced on the store since fails with ESTALE, never mixed), makes the bytes durable, then
// removes the mark: the local tier keeps the file from then on, as a file this mount published
// (a cache of the store; a crash before the mark is removed fetches it again, a crash before
// then fetches the ranges again). While a placeholder is not whole, every read of it comes
// through the mount (no passthrough). Where the backing filesystem takes no user extended
// attributes, an object is fetched as it is listed.
//
// Thread-safe: any thread may call any method; one fetch of a file runs at a time (others wait
// for it).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "core/base/status.h"
#include "core/base/thread_annotations.h"
#include "core/remote/remote_read_policy.h"
#include "core/remote/s3_client.h"
#include "core/stats/stats.h"

namespace ckptfs {

struct RemoteReaderSettings {
  S3Settings s3;
  unsigned concurrency = 8;        // Ranged GETs in flight for one file.
  uint64_t range_size = 8ull << 20;
  unsigned read_ahead = 4;         // Ranges a LazyFile fetches past the ones read.
  std::vector<std::string> markers;  // Base names of the commit markers.
  int staging_fd = -1;               // Where placeholders are made (not owned).
  std::string reserved_name;         // The private area at the top (".ckptfs"): never listed.
  std::string manifest_name;         // Checksum manifests: never listed.
};

class RemoteReader {
 public:
  // ENOMEM when no S3 client can be made.
  static Result<std::unique_ptr<RemoteReader>> Make(const RemoteReaderSettings& settings,
                                                    Stats& stats);

  // Runs `place` for the listed object `name` with what the mount still has to send about it,
  // under the lock that keeps that so (no version of the name is published meanwhile); `place`
  // says whether it replaced the local file of the name.
  using Place = std::function<bool(policy::PendingChange pending)>;
  using Gate = std::function<void(const std::string& name, const Place& place)>;
  // Lists directory `relative_dir` ("" for the root) of the store into backing directory
  // `dir_fd` (see above), each object through `gate`. Ok when every entry it shows is made; the
  // first failure otherwise (a request that failed after its retries; what was made stays).
  Status ListInto(int dir_fd, const std::string& relative_dir, const Gate& gate) EXCLUDES(mu_);
  // Whether open file `fd` is a placeholder not fetched yet.
  static bool IsPlaceholder(int fd);
  // Fills placeholder `fd` (open for writing; `what` names it in messages) with its object's
  // bytes and removes its mark (see above); ok at once when it is no placeholder (any longer).
  // Keeps the file's times. `etag` (when not null) is set to the ETag it was fetched with.
  Status Fetch(int fd, const std::string& what, std::string* etag = nullptr) EXCLUDES(mu_);

  // A placeholder read as it is fetched: its ranges (range_size each) are fetched in place when
  // first read (EnsureFetched), with the `read_ahead` ranges after them, in parallel; once every
  // range is there, its bytes are made durable and its mark removed, as Fetch does.
  class LazyFile {
   public:
    const std::string& what() const { return what_; }
    int fd() const { return fd_; }
    ~LazyFile();

   private:
    friend class RemoteReader;
    enum class Range : uint8_t { kMissing, kFetching, kHere };
    int fd_ = -1;  // Owned, open for writing.
    std::string what_, key_, etag_;
    uint64_t size_ = 0;
    struct timespec times_[2] = {};
    Mutex mu_;
    std::condition_variable_any changed_;  // With mu_: a range is here, or failed.
    std::vector<Range> ranges_ GUARDED_BY(mu_);
    uint64_t here_ GUARDED_BY(mu_) = 0;
    bool complete_ GUARDED_BY(mu_) = false;
  };
  // The placeholder open as `fd` (owned from now on: closed with the LazyFile, or here on error)
  // as a LazyFile; null when it is no placeholder (any longer).
  Result<std::shared_ptr<LazyFile>> OpenLazy(int fd, const std::string& what);
  // Makes bytes [offset, offset + length) of `file` local, fetching its missing ranges and the
  // read-ahead. True when this call made the file complete (its mark is gone).
  Result<bool> EnsureFetched(LazyFile& file, uint64_t offset, uint64_t length);

 private:
  RemoteReader(const RemoteReaderSettings& settings, Stats& stats);
  // A client of the pool (made when none is free); given back by GiveBack.
  Result<std::unique_ptr<S3Client>> TakeClient() EXCLUDES(mu_);
  void GiveBack(std::unique_ptr<S3Client> client) EXCLUDES(mu_);
  // Makes the placeholder `name` of `dir_fd` for `object` where policy::JudgeListedOverLocal
  // says so (through `gate`); fetches it where marks cannot be kept.
  Status MakePlaceholder(int dir_fd, const std::string& name, const std::string& relative_path,
                         const S3Client::ListedObject& object, const Gate& gate);
  // The ranged GETs of the whole object `key` of `size` bytes into `fd`, in parallel.
  Status FetchRanges(int fd, const std::string& key, const std::string& etag, uint64_t size);
  // The ranged GETs of `ranges` of `key` into `fd`, in parallel.
  Status FetchList(int fd, const std::string& key, const std::string& etag,
                   const std::vector<policy::FetchRange>& ranges);
  bool OnRetry(const Status& why);

  const RemoteReaderSettings settings_;
  Stats& stats_;
  Mutex mu_;
  std::condition_variable_any fetched_;  // With mu_: a fetch ended.
  std::vector<std::unique_ptr<S3Client>> idle_clients_ GUARDED_BY(mu_);
  // The files being fetched, by (st_dev, st_ino).
  std::set<std::pair<uint64_t, uint64_t>> fetching_ GUARDED_BY(mu_);
  uint64_t staged_ GUARDED_BY(mu_) = 0;  // Placeholders made, for their staging names.
  std::set<std::string> logged_kinds_ GUARDED_BY(mu_);  // Failures logged, once per kind.
};

}  // namespace ckptfs
