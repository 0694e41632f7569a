// FUSE over io_uring (Linux 6.14+, with the fuse module's enable_uring on): the kernel puts each
// request on the queue of the CPU its caller runs on, and one thread per queue, pinned to that
// CPU, serves it, so that the caller, the daemon's thread and the caller's wakeup stay on one
// CPU. Requests are handed to libfuse as if read from /dev/fuse; their replies, caught by the
// session hooks (fs/session_hooks.h), are committed to the ring, which fetches the next request
// in the same call. INIT, FORGET, INTERRUPT and notifications stay on /dev/fuse.
#pragma once

#include <fuse_lowlevel.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>

#include "core/base/status.h"

namespace ckptfs {

// Whether the kernel offers FUSE over io_uring to new mounts: the fuse module has the parameter
// enable_uring and it is on.
bool KernelOffersFuseRing();

// The CPUs the kernel makes queues for: every possible CPU (/sys/devices/system/cpu/possible).
unsigned PossibleCpus();

class FuseRing {
 public:
  // Prepares one thread per possible CPU, each with its io_uring and `depth` entries whose
  // payload buffers hold `payload_bytes`, for the connection `dev_fd` of session `se`.
  static Result<std::unique_ptr<FuseRing>> Make(fuse_session* se, int dev_fd,
                                                size_t payload_bytes, unsigned depth);
  // Stops serving (Stop).
  ~FuseRing();
  // Registers the entries and serves them, once the kernel has the INIT reply that asked for
  // io_uring: from then on it holds requests back until every queue has an entry, and falls back
  // to /dev/fuse for good when a registration fails.
  void Register();
  // Ends the threads. Requests the kernel had already put into an entry are then never answered:
  // call it only when the connection is gone or no request can be in flight.
  void Stop();
  // The payload a request or reply may have at most.
  size_t PayloadBytes() const { return payload_bytes_; }
  // Requests served through the ring.
  uint64_t Served() const;

  struct Queue;

 private:
  FuseRing() = default;
  std::unique_ptr<Queue[]> queues_;
  unsigned count_ = 0;
  size_t payload_bytes_ = 0;
  std::atomic<bool> go_{false};
};

}  // namespace ckptfs
