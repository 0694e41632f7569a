// UploadLog: the uploader's queue kept in a file of the backing directory's private area, so that
// a worker that crashed or handed over, and a daemon that died, leave the next one what was handed
// over and not yet on the store, in order.
//
// Each version handed over is appended (path, and the inode, size and mtime of the version) and
// made durable (Sync) before the flusher completes its journal entry: a version published but not
// yet logged is still pending in the recovery log, and the recovery publishes it again. How many
// versions, from the first, are done is appended as they are (not synced: a lost one only
// uploads a version again). When nothing is pending the file is emptied; a restarted mount
// rewrites it with what it resumes.
//
// A directory renamed is recorded by its two names (its objects are moved under the new one).
// A version given up as corrupt is recorded as such (by its place since the log was emptied),
// durably (Sync).
//
// Records are lines "KIND FIELDS LEN:PATH CRC32C\n" after a header line. The file is untrusted
// input: read up to 64 MiB, each record checked, reading stopped at the first one that is torn
// or wrong (what follows is the tail of a crash, never acknowledged).
//
// Thread-safe (a leaf lock of its own), but Rewrite, which comes before any other call.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/base/status.h"
#include "core/base/thread_annotations.h"
#include "core/remote/remote_policy.h"

namespace ckptfs {

inline constexpr uint64_t kMaxUploadLogBytes = 64ull << 20;

// Encodes a record (exposed for tests).
std::string EncodeHandedOver(const policy::LoggedUploads::Version& version);
std::string EncodeDone(uint64_t count);
std::string EncodeGivenUp(uint64_t index, const policy::LoggedUploads::Version::GivenUp& then);
// The header a log starts with.
std::string_view UploadLogHeader();
// Decodes a whole log: EINVAL when it is not one (no header, over 64 MiB); the records before
// the first bad one otherwise, `*torn` set when there was one.
Result<policy::LoggedUploads> DecodeUploadLog(std::string_view bytes, bool* torn);

class UploadLog {
 public:
  // Opens the log `name` in directory `dir_fd` (created, and made durable, when absent) and sets
  // `*held` to what it holds (empty for a new log, or one that cannot be read: said in the log).
  static Result<std::unique_ptr<UploadLog>> Open(int dir_fd, const std::string& name,
                                                 policy::LoggedUploads* held);
  ~UploadLog();
  UploadLog(const UploadLog&) = delete;
  UploadLog& operator=(const UploadLog&) = delete;

  // Replaces the contents by `pending`, none done, durably (a new file renamed over the log).
  Status Rewrite(const std::vector<policy::LoggedUploads::Version>& pending);
  // Appends a version handed over; Sync makes it durable.
  void HandedOver(const policy::LoggedUploads::Version& version) EXCLUDES(mu_);
  // The version handed over `index`-th (from 0) since the log was last emptied is given up as
  // corrupt, its file as `then`; Sync makes it durable.
  void GivenUp(uint64_t index, const policy::LoggedUploads::Version::GivenUp& then) EXCLUDES(mu_);
  // The first `count` versions handed over since the log was last emptied are done.
  void Done(uint64_t count) EXCLUDES(mu_);
  // Everything handed over is done: the log is emptied (the next version handed over is the
  // first).
  void Empty() EXCLUDES(mu_);
  // Removes the log's file (nothing is pending: a clean unmount); no call may follow.
  void Remove() EXCLUDES(mu_);
  // Makes what was appended durable. The first failure of a write since the last Sync, if any.
  Status Sync() EXCLUDES(mu_);

 private:
  UploadLog(int dir_fd, std::string name, int fd);
  void AppendLocked(const std::string& record) REQUIRES(mu_);

  const int dir_fd_;  // Not owned.
  const std::string name_;
  int fd_;  // Replaced only by Rewrite.
  Mutex mu_;
  Status write_error_ GUARDED_BY(mu_);
};

}  // namespace ckptfs
