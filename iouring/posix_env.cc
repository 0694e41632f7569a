// The POSIX Env: plain system calls, and the choice between io_uring and POSIX.
#include "iouring/posix_env.h"

#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <vector>

namespace ckptfs {
namespace {

bool IsRetryable(int err) { return err == EINTR || err == EAGAIN; }

std::string DescribeWrite(int fd, uint64_t offset) {
  return "pwritev fd " + std::to_string(fd) + " at offset " + std::to_string(offset);
}

// Writes every byte of `request`, continuing short writes and retrying EINTR/EAGAIN.
Status WriteAll(const WriteRequest& request) {
  uint64_t offset = request.offset;
  if (offset > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
    return Status::Error(EINVAL, DescribeWrite(request.fd, offset));
  }
  std::vector<iovec> iov;
  iov.reserve(request.iov.size());
  for (const iovec& v : request.iov) {
    if (v.iov_len > 0) iov.push_back(v);
  }
  size_t first = 0;
  while (first < iov.size()) {
    int count = static_cast<int>(std::min(iov.size() - first, static_cast<size_t>(IOV_MAX)));
    ssize_t n = pwritev(request.fd, iov.data() + first, count, static_cast<off_t>(offset));
    if (n < 0) {
      int err = errno;
      if (IsRetryable(err)) continue;
      return Status::Error(err, DescribeWrite(request.fd, offset));
    }
    if (n == 0) return Status::Error(EIO, DescribeWrite(request.fd, offset) + " wrote nothing");
    offset += static_cast<uint64_t>(n);
    auto left = static_cast<size_t>(n);
    while (left > 0 && first < iov.size()) {
      iovec& v = iov[first];
      if (left < v.iov_len) {
        v.iov_base = static_cast<char*>(v.iov_base) + left;
        v.iov_len -= left;
        break;
      }
      left -= v.iov_len;
      ++first;
    }
  }
  return Status::Ok();
}

Status SyncOne(int fd, bool data_only) {
  for (;;) {
    int rc = data_only ? fdatasync(fd) : fsync(fd);
    if (rc == 0) return Status::Ok();
    int err = errno;
    if (err == EINTR) continue;
    return Status::Error(err, (data_only ? "fdatasync fd " : "fsync fd ") + std::to_string(fd));
  }
}

// Ok when `rc` is 0, else the errno as a Status naming `what`.
Status Checked(int rc, const std::string& what) {
  return rc == 0 ? Status::Ok() : Status::FromErrno(what);
}

}  // namespace

const char* Env::OpName(Op op) {
  switch (op) {
    case Op::kWrite: return "write";
    case Op::kSync: return "sync";
    case Op::kOpen: return "open";
    case Op::kClose: return "close";
    case Op::kStat: return "stat";
    case Op::kStatFs: return "statfs";
    case Op::kReadLink: return "readlink";
    case Op::kListDir: return "listdir";
    case Op::kRead: return "read";
    case Op::kWriteAt: return "pwrite";
    case Op::kCopy: return "copy";
    case Op::kTruncate: return "truncate";
    case Op::kAllocate: return "fallocate";
    case Op::kAdvise: return "fadvise";
    case Op::kSyncFs: return "syncfs";
    case Op::kMkdir: return "mkdir";
    case Op::kMknod: return "mknod";
    case Op::kSymlink: return "symlink";
    case Op::kLink: return "link";
    case Op::kRename: return "rename";
    case Op::kUnlink: return "unlink";
    case Op::kChmod: return "chmod";
    case Op::kChown: return "chown";
    case Op::kSetTimes: return "utimens";
    case Op::kSetXattr: return "setxattr";
    case Op::kGetXattr: return "getxattr";
  }
  return "?";
}

std::vector<Status> PosixEnv::Write(std::span<const WriteRequest> requests) {
  std::vector<Status> results;
  results.reserve(requests.size());
  for (const WriteRequest& request : requests) results.push_back(WriteAll(request));
  return results;
}

std::vector<Status> PosixEnv::Sync(std::span<const int> fds, bool data_only) {
  std::vector<Status> results;
  results.reserve(fds.size());
  for (int fd : fds) results.push_back(SyncOne(fd, data_only));
  return results;
}

std::vector<Status> PosixEnv::ReadBatch(std::span<const ReadBatchRequest> requests) {
  std::vector<Status> results;
  results.reserve(requests.size());
  for (const ReadBatchRequest& r : requests) {
    results.push_back(Read(r.fd, r.dst, r.length, r.offset));
  }
  return results;
}

Result<int> PosixEnv::Open(int dir, const std::string& name, int flags, mode_t mode) {
  int fd;
  do {
    fd = openat(dir, name.c_str(), flags | O_CLOEXEC, mode);
  } while (fd < 0 && errno == EINTR);
  if (fd < 0) return Status::FromErrno("open " + name);
  return fd;
}

void PosixEnv::Close(int fd) { ::close(fd); }

Status PosixEnv::Stat(int dir, const std::string& name, struct stat* st) {
  if (name.empty()) return Checked(fstat(dir, st), "fstat");
  return Checked(fstatat(dir, name.c_str(), st, AT_SYMLINK_NOFOLLOW), "stat " + name);
}

Status PosixEnv::StatFs(int fd, struct statvfs* st) { return Checked(fstatvfs(fd, st), "statfs"); }

Result<std::string> PosixEnv::ReadLink(int dir, const std::string& name) {
  std::string target(PATH_MAX, '\0');
  ssize_t n = readlinkat(dir, name.c_str(), target.data(), target.size());
  if (n < 0) return Status::FromErrno("readlink " + name);
  target.resize(static_cast<size_t>(n));
  return target;
}

Result<std::vector<std::string>> PosixEnv::ListDir(int dir) {
  int fd = dup(dir);
  if (fd < 0) return Status::FromErrno("list directory");
  DIR* d = fdopendir(fd);
  if (d == nullptr) {
    Status st = Status::FromErrno("list directory");
    ::close(fd);
    return st;
  }
  rewinddir(d);
  std::vector<std::string> names;
  errno = 0;
  while (dirent* de = readdir(d)) {
    if (std::strcmp(de->d_name, ".") != 0 && std::strcmp(de->d_name, "..") != 0) {
      names.emplace_back(de->d_name);
    }
  }
  Status st = errno == 0 ? Status::Ok() : Status::FromErrno("list directory");
  closedir(d);
  if (!st.ok()) return st;
  return names;
}

Status PosixEnv::Read(int fd, char* dst, size_t length, uint64_t offset) {
  size_t done = 0;
  while (done < length) {
    ssize_t n = ::pread(fd, dst + done, length - done, static_cast<off_t>(offset + done));
    if (n < 0) {
      if (errno == EINTR) continue;
      return Status::FromErrno("read of backing file");
    }
    if (n == 0) {
      std::memset(dst + done, 0, length - done);
      break;
    }
    done += static_cast<size_t>(n);
  }
  return Status::Ok();
}

Status PosixEnv::WriteAt(int fd, const char* src, size_t length, uint64_t offset) {
  for (size_t done = 0; done < length;) {
    ssize_t n = ::pwrite(fd, src + done, length - done, static_cast<off_t>(offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Status::FromErrno("write of backing file");
    if (n == 0) return Status::Error(EIO, "write of backing file wrote nothing");
    done += static_cast<size_t>(n);
  }
  return Status::Ok();
}

Status PosixEnv::Copy(int from, int to, uint64_t length) {
  loff_t in = 0, out = 0;
  while (static_cast<uint64_t>(in) < length) {
    ssize_t n = copy_file_range(from, &in, to, &out, length - in, 0);
    if (n > 0) continue;
    if (n == 0) break;
    if (errno == EINTR) continue;
    if (errno != EXDEV && errno != EINVAL && errno != ENOSYS && errno != EOPNOTSUPP) {
      return Status::FromErrno("copy of unchanged bytes");
    }
    std::vector<char> buf(1 << 20);
    while (static_cast<uint64_t>(in) < length) {
      ssize_t r = pread(from, buf.data(), std::min<uint64_t>(buf.size(), length - in), in);
      if (r < 0 && errno == EINTR) continue;
      if (r < 0) return Status::FromErrno("read of unchanged bytes");
      if (r == 0) return Status::Ok();
      Status st = WriteAt(to, buf.data(), static_cast<size_t>(r), static_cast<uint64_t>(in));
      if (!st.ok()) return Status::Error(st.err(), "copy of unchanged bytes");
      in += r;
    }
  }
  return Status::Ok();
}

Status PosixEnv::Truncate(int fd, uint64_t size) {
  return Checked(ftruncate(fd, static_cast<off_t>(size)), "truncate");
}

Status PosixEnv::Allocate(int fd, uint64_t offset, uint64_t length) {
  return Checked(fallocate(fd, 0, static_cast<off_t>(offset), static_cast<off_t>(length)),
                 "fallocate");
}

void PosixEnv::Advise(int fd, uint64_t offset, uint64_t length) {
  posix_fadvise(fd, static_cast<off_t>(offset), static_cast<off_t>(length), POSIX_FADV_WILLNEED);
}

Status PosixEnv::SyncFs(int fd) { return Checked(syncfs(fd), "syncfs"); }

Status PosixEnv::Mkdir(int dir, const std::string& name, mode_t mode) {
  return Checked(mkdirat(dir, name.c_str(), mode), "mkdir " + name);
}

Status PosixEnv::Mknod(int dir, const std::string& name, mode_t mode, dev_t dev) {
  return Checked(mknodat(dir, name.c_str(), mode, dev), "mknod " + name);
}

Status PosixEnv::Symlink(const std::string& target, int dir, const std::string& name) {
  return Checked(symlinkat(target.c_str(), dir, name.c_str()), "symlink " + name);
}

Status PosixEnv::Link(int dir, const std::string& name, int new_dir, const std::string& new_name) {
  if (!name.empty()) {
    return Checked(linkat(dir, name.c_str(), new_dir, new_name.c_str(), 0),
                   "link " + name + " to " + new_name);
  }
  // AT_EMPTY_PATH needs CAP_DAC_READ_SEARCH; the descriptor's /proc link does not.
  if (linkat(dir, "", new_dir, new_name.c_str(), AT_EMPTY_PATH) == 0) return Status::Ok();
  const std::string self = "/proc/self/fd/" + std::to_string(dir);
  return Checked(linkat(AT_FDCWD, self.c_str(), new_dir, new_name.c_str(), AT_SYMLINK_FOLLOW),
                 "link " + new_name);
}

Status PosixEnv::Rename(int dir, const std::string& name, int new_dir, const std::string& new_name,
                        unsigned flags) {
  return Checked(renameat2(dir, name.c_str(), new_dir, new_name.c_str(), flags),
                 "rename " + name + " to " + new_name);
}

Status PosixEnv::Unlink(int dir, const std::string& name, bool directory) {
  return Checked(unlinkat(dir, name.c_str(), directory ? AT_REMOVEDIR : 0),
                 (directory ? "rmdir " : "unlink ") + name);
}

Status PosixEnv::Chmod(int dir, const std::string& name, mode_t mode) {
  if (name.empty()) return Checked(fchmod(dir, mode), "chmod");
  return Checked(fchmodat(dir, name.c_str(), mode, 0), "chmod " + name);
}

Status PosixEnv::Chown(int dir, const std::string& name, uid_t uid, gid_t gid) {
  if (name.empty()) return Checked(fchown(dir, uid, gid), "chown");
  return Checked(fchownat(dir, name.c_str(), uid, gid, AT_SYMLINK_NOFOLLOW), "chown " + name);
}

Status PosixEnv::SetTimes(int dir, const std::string& name, const timespec times[2]) {
  if (name.empty()) return Checked(futimens(dir, times), "utimens");
  return Checked(utimensat(dir, name.c_str(), times, AT_SYMLINK_NOFOLLOW), "utimens " + name);
}

Status PosixEnv::SetXattr(int fd, const std::string& name, const std::string& value) {
  return Checked(fsetxattr(fd, name.c_str(), value.data(), value.size(), 0), "setxattr " + name);
}

Result<std::string> PosixEnv::GetXattr(int fd, const std::string& name, size_t max_size) {
  std::string value(max_size, '\0');
  ssize_t n = fgetxattr(fd, name.c_str(), value.data(), value.size());
  if (n < 0) return Status::Error(errno, "getxattr " + name);
  value.resize(static_cast<size_t>(n));
  return value;
}

std::unique_ptr<Env> MakePosixEnv() { return std::make_unique<PosixEnv>(); }

std::unique_ptr<Env> MakeBestEnv(unsigned queue_depth, Status* fallback_reason) {
  Status why_not;
  if (std::unique_ptr<Env> uring = MakeUringEnv(queue_depth, &why_not)) return uring;
  if (fallback_reason != nullptr) *fallback_reason = std::move(why_not);
  return MakePosixEnv();
}

}  // namespace ckptfs
