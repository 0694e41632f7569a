// Env: the one interface through which ckptfs touches the backing store (the role leveldb's Env
// plays). Every open, read, write, sync, rename, mkdir, unlink, link, symlink, stat, attribute
// change and extended attribute of a backing file or directory goes through it, so that a test can fail any of them.
//
// Implementations: the io_uring Env (batched writes and syncs, many in flight), the POSIX Env
// (pwritev/fdatasync one at a time; its single calls serve the io_uring Env too), EnvWrapper
// (forwards every call to another Env: the base of wrappers) and FaultInjectingEnv (an
// EnvWrapper that fails, splits or delays chosen calls; for tests).
//
// Names are relative to a directory descriptor (the *at calls); an empty name means the
// descriptor itself. Symbolic links are not followed (Open: unless its flags say so). Every
// failure is a Status with the call's errno and a message naming the call and the name.
//
// Thread model: Write, Sync and ReadBatch (the batched data path) belong to one owner thread, the
// flusher.
// Every other call may be made from any thread.
#pragma once

#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/uio.h>

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/base/status.h"

namespace ckptfs {

// Write all bytes of `iov` to `fd` starting at `offset`. Buffers must stay valid until the call
// that carries the request returns. With O_DIRECT fds, buffers, offset and lengths must be
// aligned by the caller.
struct WriteRequest {
  int fd = -1;
  uint64_t offset = 0;
  std::vector<iovec> iov;

  uint64_t bytes() const {
    uint64_t total = 0;
    for (const iovec& v : iov) total += v.iov_len;
    return total;
  }
};

// Read `length` bytes at `offset` of `fd` into `dst`, which must stay valid until the call that
// carries the request returns. With O_DIRECT fds, `dst`, offset and length must be aligned by the
// caller.
struct ReadBatchRequest {
  int fd = -1;
  uint64_t offset = 0;
  char* dst = nullptr;
  size_t length = 0;
};

class Env {
 public:
  // Every call of an Env, for fault injection and counting.
  enum class Op {
    kWrite,  // One request of Write.
    kSync,   // One fd of Sync.
    kOpen,
    kClose,
    kStat,
    kStatFs,
    kReadLink,
    kListDir,
    kRead,  // Read, and one request of ReadBatch.
    kWriteAt,
    kCopy,
    kTruncate,
    kAllocate,
    kAdvise,
    kSyncFs,
    kMkdir,
    kMknod,
    kSymlink,
    kLink,
    kRename,
    kUnlink,
    kChmod,
    kChown,
    kSetTimes,
    kSetXattr,
    kGetXattr,
    kLastOp = kGetXattr,
  };
  static const char* OpName(Op op);

  virtual ~Env() = default;

  // Short human-readable name for logs and stats ("io_uring", "posix").
  virtual std::string Name() const = 0;

  // Performs every request completely: short writes are continued, EINTR/EAGAIN retried.
  // Returns one Status per request, in request order. A failure of one request does not stop the
  // others. Returns only when no request is in flight any more.
  virtual std::vector<Status> Write(std::span<const WriteRequest> requests) = 0;

  // fdatasync (data_only) or fsync of every fd (files or directories), concurrently where
  // possible. One Status per fd, in order. Returns only when no request is in flight any more.
  virtual std::vector<Status> Sync(std::span<const int> fds, bool data_only) = 0;

  // Performs every request as Read does (short reads continued, EINTR/EAGAIN retried, bytes past
  // the end of the file read as zeros), many in flight at once where possible. One Status per
  // request, in order; a failure of one does not stop the others. Returns only when no request
  // is in flight any more.
  virtual std::vector<Status> ReadBatch(std::span<const ReadBatchRequest> requests) = 0;

  // openat(dir, name, flags | O_CLOEXEC, mode): the new descriptor.
  virtual Result<int> Open(int dir, const std::string& name, int flags, mode_t mode = 0) = 0;
  virtual void Close(int fd) = 0;
  virtual Status Stat(int dir, const std::string& name, struct stat* st) = 0;
  virtual Status StatFs(int fd, struct statvfs* st) = 0;
  virtual Result<std::string> ReadLink(int dir, const std::string& name) = 0;
  // The names in directory `dir` ("." and ".." left out).
  virtual Result<std::vector<std::string>> ListDir(int dir) = 0;

  // Reads `length` bytes at `offset`, retrying short reads; bytes past the end read as zeros.
  virtual Status Read(int fd, char* dst, size_t length, uint64_t offset) = 0;
  // Writes all `length` bytes at `offset`.
  virtual Status WriteAt(int fd, const char* src, size_t length, uint64_t offset) = 0;
  // Copies the first `length` bytes of `from` to the same offsets of `to` (copy_file_range,
  // or read and write where the filesystems cannot).
  virtual Status Copy(int from, int to, uint64_t length) = 0;
  virtual Status Truncate(int fd, uint64_t size) = 0;
  // Allocates the range; EOPNOTSUPP where the filesystem cannot.
  virtual Status Allocate(int fd, uint64_t offset, uint64_t length) = 0;
  // Asks for the range to be read into the page cache ahead of its use; a hint, no error.
  virtual void Advise(int fd, uint64_t offset, uint64_t length) = 0;
  // syncfs of the filesystem that holds `fd`.
  virtual Status SyncFs(int fd) = 0;

  virtual Status Mkdir(int dir, const std::string& name, mode_t mode) = 0;
  // mknodat: a FIFO, socket or device node (`mode` holds the type).
  virtual Status Mknod(int dir, const std::string& name, mode_t mode, dev_t dev) = 0;
  virtual Status Symlink(const std::string& target, int dir, const std::string& name) = 0;
  // linkat; an empty `name` gives the open file `dir` (an O_TMPFILE one too) the new name.
  virtual Status Link(int dir, const std::string& name, int new_dir,
                      const std::string& new_name) = 0;
  // renameat2 with `flags` (RENAME_NOREPLACE, RENAME_EXCHANGE).
  virtual Status Rename(int dir, const std::string& name, int new_dir,
                        const std::string& new_name, unsigned flags = 0) = 0;
  // unlinkat; `directory` removes an empty directory.
  virtual Status Unlink(int dir, const std::string& name, bool directory = false) = 0;
  virtual Status Chmod(int dir, const std::string& name, mode_t mode) = 0;
  virtual Status Chown(int dir, const std::string& name, uid_t uid, gid_t gid) = 0;
  virtual Status SetTimes(int dir, const std::string& name, const timespec times[2]) = 0;
  // fsetxattr of the descriptor's extended attribute `name` (created or replaced).
  virtual Status SetXattr(int fd, const std::string& name, const std::string& value) = 0;
  // fgetxattr: the attribute's value; ENODATA when the file has none, ENOTSUP where the
  // filesystem keeps none, ERANGE when it is longer than `max_size` bytes.
  virtual Result<std::string> GetXattr(int fd, const std::string& name, size_t max_size) = 0;
};

// io_uring Env with at most `queue_depth` requests in flight. Returns nullptr and sets
// `*why_not` when io_uring cannot be used on this machine (probed at construction).
std::unique_ptr<Env> MakeUringEnv(unsigned queue_depth, Status* why_not);

// Plain POSIX Env: pwritev and fdatasync, one request at a time.
std::unique_ptr<Env> MakePosixEnv();

// io_uring if available, otherwise POSIX. `*fallback_reason` is set when it fell back.
std::unique_ptr<Env> MakeBestEnv(unsigned queue_depth, Status* fallback_reason);

}  // namespace ckptfs
