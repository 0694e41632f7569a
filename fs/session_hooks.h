// Kernel features newer than libfuse 3.14, through its custom I/O hooks on the session: they
// see each request the kernel sends and each reply.
//
// - FUSE_DIRECT_IO_ALLOW_MMAP (kernel 6.6+): files opened with direct_io may still be mapped
//   shared. Added to the INIT reply whenever the kernel offers it.
// - FUSE passthrough (kernel 6.9+): the kernel serves reads of a file straight from a backing
//   file the daemon registered, at the backing filesystem's speed. Added to the INIT reply when
//   wanted and offered; the open replies of files registered with RegisterOpen are marked.
#pragma once

#include <fuse_lowlevel.h>
#include <sys/types.h>
#include <sys/uio.h>

#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>

namespace ckptfs {

// Installs the hooks on a mounted session (before its loop runs). When they cannot be
// installed, neither feature is used, and a worker cannot take over from another.
bool InstallSessionHooks(fuse_session* se, bool passthrough_wanted);

// --- Taking over the connection of an earlier worker (fs/worker.h) ---
//
// The kernel sends INIT once per connection: the first worker hands each INIT request it reads
// to `sink` (before answering it); a later worker replays it with ReplayInit, so that its session
// and these hooks agree with what the kernel was told. Set before the loop runs.
void RecordInit(void (*sink)(const char* request, size_t length));
// Processes an INIT request read by an earlier worker as if just read; its reply, which the
// kernel no longer waits for, is not sent.
void ReplayInit(fuse_session* se, const char* request, size_t length);
// Asks the kernel to send again every request an earlier worker read but did not answer
// (FUSE_NOTIFY_RESEND, Linux 6.9); ENOSYS when the kernel cannot (its INIT did not offer it).
int ResendUnanswered();
// Requests received again after ResendUnanswered.
uint64_t ResentRequests();
// Whether the request the calling thread is serving was sent again (FUSE_NOTIFY_RESEND).
bool RequestResent();
// The kernel's id of that request, without the resend bit (the same when it is resent); 0 when
// the session is not hooked.
uint64_t RequestId();
// CLOCK_MONOTONIC nanoseconds when this process first answered a request (0: not yet).
int64_t FirstReplyNanos();

// The latency of the requests this process answered, from reading each to writing its reply, by
// operation: {"write": histogram (core/stats/histogram.h), ...} for the operations seen. FORGET and
// BATCH_FORGET have no reply and are not counted.
nlohmann::json RequestLatencyJson();

// --- FUSE over io_uring (fs/fuse_ring.h) ---
//
// Asks for io_uring in the INIT reply when the kernel offers it and no request or reply of the
// connection carries more than `payload_bytes`; `started` is then called once, right after the
// kernel has that reply (from then on ring entries may be registered). A worker that replays
// INIT is told the same. Set before the loop runs.
void WantRing(size_t payload_bytes, void (*started)());

// Where the reply to a request served from the ring goes instead of /dev/fuse.
class RingReply {
 public:
  // The reply as libfuse writes it: a fuse_out_header, then its arguments.
  virtual ssize_t Write(const iovec* iov, int count) = 0;
  // The reply as libfuse splices it: `length` bytes in `pipe_fd`, header first.
  virtual ssize_t Splice(int pipe_fd, size_t length) = 0;

 protected:
  ~RingReply() = default;
};

// Serves one request taken from the ring (`length` bytes from its fuse_in_header on, in memory
// the handlers may keep using until they reply): counted as if read from /dev/fuse, processed by
// libfuse, and the reply written on this thread handed to `reply`.
void ServeRingRequest(fuse_session* se, char* request, size_t length, RingReply* reply);

// Whether the INIT reply allows shared mmap of direct_io files (known once the INIT request has
// been read, i.e. from the init callback on).
bool DirectIoMmapAllowed();

// Whether the kernel agreed to passthrough (known once INIT has been answered).
bool PassthroughActive();

// Whether this process may register backing files with the kernel (it needs CAP_SYS_ADMIN).
bool MayRegisterBackingFiles();

// Registers `fd` (a backing file open for reading) with the kernel; returns its backing id, or
// -1 (passthrough off, or the kernel refused: it needs CAP_SYS_ADMIN).
int OpenBacking(int fd);
void CloseBacking(int backing_id);

// The open reply carrying file handle `fh` is marked to read through `backing_id`.
void RegisterOpen(uint64_t fh, int backing_id);

}  // namespace ckptfs
