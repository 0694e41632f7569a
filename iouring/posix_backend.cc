// POSIX implementation of Backend (pwritev, fdatasync/fsync; one request at a time) and the
// choice between io_uring and POSIX.
#include <limits.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "iouring/backend.h"

namespace ckptfs {
namespace {

bool IsRetryable(int err) { return err == EINTR || err == EAGAIN; }

std::string DescribeWrite(int fd, uint64_t offset) {
  return "pwritev fd " + std::to_string(fd) + " at offset " + std::to_string(offset);
}

class PosixBackend final : public Backend {
 public:
  std::string Name() const override { return "posix"; }

  std::vector<Status> Write(std::span<const WriteRequest> requests) override {
    std::vector<Status> results;
    results.reserve(requests.size());
    for (const WriteRequest& request : requests) results.push_back(WriteAll(request));
    return results;
  }

  std::vector<Status> Sync(std::span<const int> fds, bool data_only) override {
    std::vector<Status> results;
    results.reserve(fds.size());
    for (int fd : fds) results.push_back(SyncOne(fd, data_only));
    return results;
  }

 private:
  // Writes every byte of `request`, continuing short writes and retrying EINTR/EAGAIN.
  static Status WriteAll(const WriteRequest& request) {
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

  static Status SyncOne(int fd, bool data_only) {
    for (;;) {
      int rc = data_only ? fdatasync(fd) : fsync(fd);
      if (rc == 0) return Status::Ok();
      int err = errno;
      if (err == EINTR) continue;
      return Status::Error(err, (data_only ? "fdatasync fd " : "fsync fd ") + std::to_string(fd));
    }
  }
};

}  // namespace

std::unique_ptr<Backend> MakePosixBackend() { return std::make_unique<PosixBackend>(); }

std::unique_ptr<Backend> MakeBestBackend(unsigned queue_depth, Status* fallback_reason) {
  Status why_not;
  if (std::unique_ptr<Backend> uring = MakeUringBackend(queue_depth, &why_not)) return uring;
  if (fallback_reason != nullptr) *fallback_reason = std::move(why_not);
  return MakePosixBackend();
}

}  // namespace ckptfs
