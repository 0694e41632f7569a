#include "fs/session_hooks.h"

#include <fcntl.h>
#include <linux/capability.h>
#include <linux/fuse.h>
#include <spdlog/spdlog.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>
#if defined(__SANITIZE_THREAD__)
#include <sanitizer/tsan_interface.h>
#endif

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "core/base/thread_annotations.h"
#include "core/stats/histogram.h"
#include "fs/control_block.h"
#include "fs/request_poller.h"
#include "fs/write_landing.h"

namespace ckptfs {
namespace {

// Kernel ABI of FUSE 7.40, newer than the installed <linux/fuse.h>.
constexpr uint32_t kHasResendFlags2 = 1u << (39 - 32);  // FUSE_HAS_RESEND.
constexpr int32_t kNotifyResend = 7;                    // FUSE_NOTIFY_RESEND.
constexpr uint64_t kResentUnique = 1ull << 63;          // FUSE_UNIQUE_RESEND.
constexpr uint32_t kDirectIoAllowMmapFlags2 = 1u << (36 - 32);  // FUSE_DIRECT_IO_ALLOW_MMAP.
constexpr uint32_t kPassthroughFlags2 = 1u << (37 - 32);        // FUSE_PASSTHROUGH, in flags2.
constexpr uint32_t kOpenPassthrough = 1u << 7;            // FOPEN_PASSTHROUGH.
struct BackingMap {
  int32_t fd;
  uint32_t flags;
  uint64_t padding;
};
constexpr unsigned long kIocBackingOpen = _IOW(229, 1, BackingMap);
constexpr unsigned long kIocBackingClose = _IOW(229, 2, uint32_t);
// fuse_init_out: max_stack_depth took the first unused word; fuse_open_out: backing_id took
// the padding.
constexpr size_t kMaxStackDepthOffset = offsetof(fuse_init_out, unused);
constexpr uint32_t kStatx = 52;  // FUSE_STATX.
constexpr uint32_t kOverIoUringFlags2 = 1u << (41 - 32);  // FUSE_OVER_IO_URING (7.42).
constexpr uint32_t kMinReadBuffer = 8192;                 // FUSE_MIN_READ_BUFFER.

// The operations named in the request latency histograms, by opcode.
constexpr std::pair<uint32_t, const char*> kOperationNames[] = {
    {FUSE_LOOKUP, "lookup"}, {FUSE_GETATTR, "getattr"}, {FUSE_SETATTR, "setattr"},
    {FUSE_READLINK, "readlink"}, {FUSE_SYMLINK, "symlink"}, {FUSE_MKNOD, "mknod"},
    {FUSE_MKDIR, "mkdir"}, {FUSE_UNLINK, "unlink"}, {FUSE_RMDIR, "rmdir"}, {FUSE_RENAME, "rename"},
    {FUSE_LINK, "link"}, {FUSE_OPEN, "open"}, {FUSE_READ, "read"}, {FUSE_WRITE, "write"},
    {FUSE_STATFS, "statfs"}, {FUSE_RELEASE, "release"}, {FUSE_FSYNC, "fsync"},
    {FUSE_SETXATTR, "setxattr"}, {FUSE_GETXATTR, "getxattr"}, {FUSE_LISTXATTR, "listxattr"},
    {FUSE_REMOVEXATTR, "removexattr"}, {FUSE_FLUSH, "flush"}, {FUSE_INIT, "init"},
    {FUSE_OPENDIR, "opendir"}, {FUSE_READDIR, "readdir"}, {FUSE_RELEASEDIR, "releasedir"},
    {FUSE_FSYNCDIR, "fsyncdir"}, {FUSE_GETLK, "getlk"}, {FUSE_SETLK, "setlk"},
    {FUSE_SETLKW, "setlkw"}, {FUSE_ACCESS, "access"}, {FUSE_CREATE, "create"},
    {FUSE_INTERRUPT, "interrupt"}, {FUSE_BMAP, "bmap"}, {FUSE_DESTROY, "destroy"},
    {FUSE_IOCTL, "ioctl"}, {FUSE_POLL, "poll"}, {FUSE_FALLOCATE, "fallocate"},
    {FUSE_READDIRPLUS, "readdirplus"}, {FUSE_RENAME2, "rename2"}, {FUSE_LSEEK, "lseek"},
    {FUSE_COPY_FILE_RANGE, "copy_file_range"}, {FUSE_SYNCFS, "syncfs"}, {FUSE_TMPFILE, "tmpfile"},
    {kStatx, "statx"}};
// Opcodes past this share the last histogram, "other".
constexpr uint32_t kOtherOperation = 53;

struct State {
  State() {
    for (uint32_t op = 0; op <= kOtherOperation; ++op) {
      latency.push_back(std::make_unique<Histogram>(kRequestBuckets));
    }
  }
  int dev_fd = -1;
  bool passthrough_wanted = false;
  std::atomic<bool> direct_io_mmap{false};  // The kernel's INIT has FUSE_DIRECT_IO_ALLOW_MMAP.
  std::atomic<bool> offered{false};         // The kernel's INIT has FUSE_PASSTHROUGH (wanted).
  std::atomic<uint64_t> init_unique{0};
  std::atomic<bool> active{false};
  std::atomic<bool> has_resend{false};  // The kernel's INIT has FUSE_HAS_RESEND.
  void (*init_sink)(const char*, size_t) = nullptr;
  void (*ring_started)() = nullptr;  // Set when io_uring is wanted.
  size_t ring_payload = 0;           // What its entries hold.
  std::atomic<bool> ring_offered{false};    // The kernel's INIT has FUSE_OVER_IO_URING.
  std::atomic<bool> replaying_init{false};
  std::atomic<uint64_t> resent{0};
  std::atomic<int64_t> first_reply_ns{0};
  std::vector<std::unique_ptr<Histogram>> latency;  // By opcode, up to kOtherOperation.
  Mutex mu;
  std::unordered_set<uint64_t> open_requests GUARDED_BY(mu);     // Unanswered OPEN requests.
  std::unordered_map<uint64_t, int> backing_ids GUARDED_BY(mu);  // File handle -> backing id.
};

State& S() {
  static State state;
  return state;
}

// Takes what the kernel offers in its INIT request `in` of `n` bytes; false when it is too short.
bool NoteInit(const fuse_in_header* in, size_t n) {
  if (n < sizeof(fuse_in_header) + offsetof(fuse_init_in, unused)) return false;
  State& s = S();
  const auto* init = reinterpret_cast<const fuse_init_in*>(in + 1);
  const bool ext = init->flags & FUSE_INIT_EXT;
  s.direct_io_mmap = ext && (init->flags2 & kDirectIoAllowMmapFlags2);
  s.offered = s.passthrough_wanted && ext && (init->flags2 & kPassthroughFlags2);
  s.has_resend = ext && (init->flags2 & kHasResendFlags2);
  s.ring_offered = ext && (init->flags2 & kOverIoUringFlags2);
  s.init_unique = in->unique;
  return true;
}


// ThreadSanitizer orders a write to a descriptor before a later read of it only for descriptors
// the process opened itself; a worker inherits its FUSE descriptor. The kernel orders every reply
// before the requests it lets follow (a reply to an open before the writes through its handle):
// said here for it, on one sync object for the connection.
#if defined(__SANITIZE_THREAD__)
char connection_order;
void RequestRead() { __tsan_acquire(&connection_order); }
void ReplyWriting() { __tsan_release(&connection_order); }
#else
void RequestRead() {}
void ReplyWriting() {}
#endif

// Set as a request is read; the thread that reads a request serves it (libfuse's loops).
thread_local bool current_request_resent = false;
thread_local uint64_t current_request = 0;
// The request the calling thread is serving, as read (unique with the resend bit), its opcode
// and when it was read; started 0 once it is answered.
thread_local uint64_t serving_unique = 0;
thread_local uint32_t serving_opcode = 0;
thread_local int64_t serving_started_ns = 0;

// Counts the latency of the request the calling thread serves, once, when `unique` is its reply
// (0: a spliced reply, whose header the hook does not see; only replies are spliced).
void Answered(uint64_t unique) {
  if (serving_started_ns == 0 || (unique != 0 && unique != serving_unique)) return;
  S().latency[std::min(serving_opcode, kOtherOperation)]->Observe(
      std::chrono::nanoseconds(MonotonicNanos() - serving_started_ns));
  serving_started_ns = 0;
}

// The reply to the request the calling thread serves from the ring goes to ring_reply; its
// unique is ring_unique.
thread_local RingReply* ring_reply = nullptr;
thread_local uint64_t ring_unique = 0;

// Takes note of a request of `n` bytes read (or taken from the ring) by the calling thread.
void NoteRequest(const void* buf, size_t n) {
  const auto* in = static_cast<const fuse_in_header*>(buf);
  State& s = S();
  current_request_resent = (in->unique & kResentUnique) != 0;
  current_request = in->unique & ~kResentUnique;
  serving_unique = in->unique;
  serving_opcode = in->opcode;
  serving_started_ns = MonotonicNanos();
  if (current_request_resent) s.resent.fetch_add(1, std::memory_order_relaxed);
  if (in->opcode == FUSE_INIT) {
    if (NoteInit(in, n) && s.init_sink) s.init_sink(static_cast<const char*>(buf), n);
  } else if (in->opcode == FUSE_OPEN && s.active) {
    MutexLock lock(s.mu);
    s.open_requests.insert(in->unique);
  }
}

ssize_t ReadRequest(int fd, void* buf, size_t len, void*) {
  ssize_t n = ReadAfterPolling(fd, buf, len, ReadLandingWrites);
  RequestRead();
  if (n >= static_cast<ssize_t>(sizeof(fuse_in_header))) NoteRequest(buf, static_cast<size_t>(n));
  return n;
}

// The payload buffer a ring entry needs for the connection an INIT reply `init` sets up.
size_t RingPayloadBytes(const fuse_init_out& init) {
  const size_t pages = static_cast<size_t>(init.max_pages) * static_cast<size_t>(getpagesize());
  return std::max<size_t>({kMinReadBuffer, init.max_write, pages});
}

ssize_t WriteReply(int fd, iovec* iov, int count, void*) {
  ReplyWriting();
  State& s = S();
  bool asks_ring = false;  // This is the INIT reply, asking for io_uring.
  bool to_ring = false;
  if (count >= 1 && iov[0].iov_len == sizeof(fuse_out_header)) {
    const auto* out = static_cast<const fuse_out_header*>(iov[0].iov_base);
    if (out->unique != 0) Answered(out->unique);
    to_ring = ring_reply != nullptr && out->unique == ring_unique;
    if (out->unique == s.init_unique && out->error == 0 && count >= 2 &&
        iov[1].iov_len >= sizeof(fuse_init_out)) {
      auto* init = static_cast<fuse_init_out*>(iov[1].iov_base);
      if (s.ring_started && s.ring_offered) {
        if (RingPayloadBytes(*init) <= s.ring_payload) {
          init->flags |= FUSE_INIT_EXT;
          init->flags2 |= kOverIoUringFlags2;
          asks_ring = true;
        } else {
          spdlog::warn("FUSE over io_uring not used: requests of up to {} bytes do not fit its "
                       "{}-byte buffers", RingPayloadBytes(*init), s.ring_payload);
        }
      }
      if (s.direct_io_mmap) {
        init->flags |= FUSE_INIT_EXT;
        init->flags2 |= kDirectIoAllowMmapFlags2;
      }
      if (s.offered) {
        init->flags |= FUSE_INIT_EXT;
        init->flags2 |= kPassthroughFlags2;
        const uint32_t max_stack_depth = 1;
        std::memcpy(reinterpret_cast<char*>(init) + kMaxStackDepthOffset, &max_stack_depth,
                    sizeof max_stack_depth);
        s.active = true;
      }
    } else if (s.active) {
      MutexLock lock(s.mu);
      if (s.open_requests.erase(out->unique) > 0 && out->error == 0 && count >= 2 &&
          iov[1].iov_len == sizeof(fuse_open_out)) {
        auto* open = static_cast<fuse_open_out*>(iov[1].iov_base);
        if (auto it = s.backing_ids.find(open->fh); it != s.backing_ids.end()) {
          open->open_flags |= kOpenPassthrough;
          open->padding = static_cast<uint32_t>(it->second);
          s.backing_ids.erase(it);
        }
      }
    }
  }
  if (s.replaying_init && count >= 1 &&
      static_cast<const fuse_out_header*>(iov[0].iov_base)->unique == s.init_unique) {
    // The replayed INIT's reply: the kernel had its answer from the first worker.
    ssize_t total = 0;
    for (int i = 0; i < count; ++i) total += static_cast<ssize_t>(iov[i].iov_len);
    if (asks_ring) s.ring_started();
    return total;
  }
  if (s.first_reply_ns.load(std::memory_order_relaxed) == 0) {
    int64_t expected = 0;
    s.first_reply_ns.compare_exchange_strong(expected, MonotonicNanos());
  }
  if (to_ring) {
    ring_unique = 0;
    return ring_reply->Write(iov, count);
  }
  const ssize_t written = ::writev(fd, iov, count);
  if (asks_ring && written >= 0) s.ring_started();
  return written;
}

// Replies spliced from a pipe (read data from backing files) carry nothing to mark.
ssize_t SpliceReply(int fd_in, off_t* off_in, int fd_out, off_t* off_out, size_t len,
                    unsigned flags, void*) {
  ReplyWriting();
  Answered(0);
  if (ring_reply != nullptr && ring_unique != 0) {
    ring_unique = 0;
    return ring_reply->Splice(fd_in, len);
  }
  return ::splice(fd_in, off_in, fd_out, off_out, len, flags);
}

}  // namespace

bool InstallSessionHooks(fuse_session* se, bool passthrough_wanted) {
  static const fuse_custom_io io = {WriteReply, ReadRequest, nullptr, SpliceReply};
  int fd = fuse_session_fd(se);
  if (int err = fuse_session_custom_io(se, &io, fd); err != 0) {
    spdlog::warn("cannot hook the FUSE session ({}): no passthrough, no direct reads",
                 std::strerror(-err));
    return false;
  }
  S().dev_fd = fd;
  S().passthrough_wanted = passthrough_wanted;
  return true;
}

void RecordInit(void (*sink)(const char*, size_t)) { S().init_sink = sink; }

void WantRing(size_t payload_bytes, void (*started)()) {
  S().ring_payload = payload_bytes;
  S().ring_started = started;
}

void ServeRingRequest(fuse_session* se, char* request, size_t length, RingReply* reply) {
  RequestRead();
  NoteRequest(request, length);
  ring_reply = reply;
  ring_unique = reinterpret_cast<const fuse_in_header*>(request)->unique;
  fuse_buf buf{};
  buf.mem = request;
  buf.size = length;
  fuse_session_process_buf(se, &buf);
  ring_reply = nullptr;
  ring_unique = 0;
}

void ReplayInit(fuse_session* se, const char* request, size_t length) {
  State& s = S();
  std::vector<char> copy(request, request + length);
  if (!NoteInit(reinterpret_cast<const fuse_in_header*>(copy.data()), copy.size())) return;
  s.replaying_init = true;
  fuse_buf buf {};
  buf.mem = copy.data();
  buf.size = copy.size();
  fuse_session_process_buf(se, &buf);
  s.replaying_init = false;
}

int ResendUnanswered() {
  State& s = S();
  if (!s.has_resend) return ENOSYS;
  fuse_out_header notify{sizeof(fuse_out_header), kNotifyResend, 0};
  if (::write(s.dev_fd, &notify, sizeof notify) != static_cast<ssize_t>(sizeof notify)) {
    return errno;
  }
  return 0;
}

nlohmann::json RequestLatencyJson() {
  const State& s = S();
  nlohmann::json out = nlohmann::json::object();
  auto add = [&](const char* name, uint32_t opcode) {
    if (s.latency[opcode]->count() > 0) out[name] = s.latency[opcode]->ToJson();
  };
  for (const auto& [opcode, name] : kOperationNames) add(name, opcode);
  add("other", kOtherOperation);
  return out;
}

bool RequestResent() { return current_request_resent; }

uint64_t RequestId() { return current_request; }

uint64_t ResentRequests() { return S().resent.load(std::memory_order_relaxed); }

int64_t FirstReplyNanos() { return S().first_reply_ns.load(std::memory_order_relaxed); }

bool DirectIoMmapAllowed() { return S().direct_io_mmap; }

bool PassthroughActive() { return S().active; }

bool MayRegisterBackingFiles() {
  __user_cap_header_struct header{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct data[_LINUX_CAPABILITY_U32S_3] = {};
  if (syscall(SYS_capget, &header, data) != 0) return false;
  return data[CAP_TO_INDEX(CAP_SYS_ADMIN)].effective & CAP_TO_MASK(CAP_SYS_ADMIN);
}

int OpenBacking(int fd) {
  State& s = S();
  if (!s.active) return -1;
  BackingMap map{fd, 0, 0};
  int id = ioctl(s.dev_fd, kIocBackingOpen, &map);
  if (id < 0) {
    static std::once_flag warned;
    int err = errno;
    std::call_once(warned, [err] {
      spdlog::warn("FUSE passthrough refused by the kernel ({}); reads go through the daemon",
                   std::strerror(err));
    });
    return -1;
  }
  return id;
}

void CloseBacking(int backing_id) {
  uint32_t id = static_cast<uint32_t>(backing_id);
  if (ioctl(S().dev_fd, kIocBackingClose, &id) != 0) {
    spdlog::warn("FUSE passthrough: closing backing id {} failed: {}", backing_id,
                 std::strerror(errno));
  }
}

void RegisterOpen(uint64_t fh, int backing_id) {
  State& s = S();
  MutexLock lock(s.mu);
  s.backing_ids[fh] = backing_id;
}

}  // namespace ckptfs
