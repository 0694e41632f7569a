// The one interface through which ckptfs writes to and syncs the backing store.
//
// Implementations: UringBackend (io_uring, batched, many requests in flight), PosixBackend
// (pwritev/fdatasync, used when io_uring is unavailable) and FaultInjectingBackend (wraps another
// backend and fails chosen requests; for tests).
//
// Thread model: a Backend is owned by one thread (the flusher) and is not thread-safe.
#pragma once

#include <sys/uio.h>

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/status.h"

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

class Backend {
 public:
  virtual ~Backend() = default;

  // Short human-readable name for logs and stats ("io_uring", "posix").
  virtual std::string Name() const = 0;

  // Performs every request completely: short writes are continued, EINTR/EAGAIN retried.
  // Returns one Status per request, in request order. A failure of one request does not stop the
  // others. Returns only when no request is in flight any more.
  virtual std::vector<Status> Write(std::span<const WriteRequest> requests) = 0;

  // fdatasync (data_only) or fsync of every fd, concurrently where possible. One Status per fd,
  // in order. Returns only when no request is in flight any more.
  virtual std::vector<Status> Sync(std::span<const int> fds, bool data_only) = 0;
};

// io_uring backend with at most `queue_depth` requests in flight. Returns nullptr and sets
// `*why_not` when io_uring cannot be used on this machine (probed at construction).
std::unique_ptr<Backend> MakeUringBackend(unsigned queue_depth, Status* why_not);

// Plain POSIX backend: pwritev and fdatasync, one request at a time.
std::unique_ptr<Backend> MakePosixBackend();

// io_uring if available, otherwise POSIX. `*fallback_reason` is set when it fell back.
std::unique_ptr<Backend> MakeBestBackend(unsigned queue_depth, Status* fallback_reason);

}  // namespace ckptfs
