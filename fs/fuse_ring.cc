#include "fs/fuse_ring.h"

#include <linux/fuse.h>
#include <liburing.h>
#include <pthread.h>
#include <sched.h>
#include <spdlog/spdlog.h>
#include <sys/eventfd.h>
#include <sys/sysinfo.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include "fs/session_hooks.h"
#include "iouring/shared_mapping.h"

namespace ckptfs {
namespace {

// Kernel ABI of FUSE 7.42, newer than the installed <linux/fuse.h>.
struct RingEntryInOut {
  uint64_t flags;
  uint64_t commit_id;
  uint32_t payload_sz;
  uint32_t padding;
  uint64_t reserved;
};
constexpr size_t kRingHeaderBytes = 128;  // FUSE_URING_IN_OUT_HEADER_SZ, FUSE_URING_OP_IN_OUT_SZ.
struct RingRequestHeader {                // fuse_uring_req_header.
  char in_out[kRingHeaderBytes];          // fuse_in_header of a request, fuse_out_header of a reply.
  char op_in[kRingHeaderBytes];           // The request's first argument, its operation's header.
  RingEntryInOut ring_ent_in_out;
};
struct RingCommand {  // fuse_uring_cmd_req, in the SQE's command area.
  uint64_t flags;
  uint64_t commit_id;
  uint16_t qid;
  uint8_t padding[6];
};
constexpr uint32_t kRegister = 1;        // FUSE_IO_URING_CMD_REGISTER.
constexpr uint32_t kCommitAndFetch = 2;  // FUSE_IO_URING_CMD_COMMIT_AND_FETCH.
static_assert(sizeof(RingRequestHeader) == 288 && sizeof(RingCommand) == 24);

// Each entry's memory: a page holding its header, then its payload buffer. A request is handed to
// libfuse as one piece: its fuse_in_header and operation header are copied into the end of the
// header page, right before the payload.
constexpr size_t kHeaderPage = 4096;
static_assert(sizeof(RingRequestHeader) + sizeof(fuse_in_header) + kRingHeaderBytes <= kHeaderPage);
constexpr uint64_t kWakeTag = ~0ull;  // user_data of the wake-up read.

uint64_t ParseCpuList(const std::string& text) {
  uint64_t count = 0;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find(',', pos);
    if (end == std::string::npos) end = text.size();
    const std::string part = text.substr(pos, end - pos);
    unsigned first = 0, last = 0;
    if (std::sscanf(part.c_str(), "%u-%u", &first, &last) == 2 && last >= first) {
      count = std::max<uint64_t>(count, last + 1);
    } else if (std::sscanf(part.c_str(), "%u", &first) == 1) {
      count = std::max<uint64_t>(count, first + 1);
    }
    pos = end + 1;
  }
  return count;
}

}  // namespace

bool KernelOffersFuseRing() {
  std::ifstream in("/sys/module/fuse/parameters/enable_uring");
  std::string value;
  return in && std::getline(in, value) && value == "Y";
}

unsigned PossibleCpus() {
  std::ifstream in("/sys/devices/system/cpu/possible");
  std::string text;
  if (in && std::getline(in, text)) {
    if (uint64_t n = ParseCpuList(text); n > 0) return static_cast<unsigned>(n);
  }
  return static_cast<unsigned>(std::max(1, get_nprocs_conf()));
}

struct FuseRing::Queue final : RingReply {
  struct Entry {
    RingRequestHeader* header = nullptr;
    char* payload = nullptr;
    iovec buffers[2] = {};
  };

  fuse_session* se = nullptr;
  int dev_fd = -1;
  uint16_t qid = 0;
  size_t payload_bytes = 0;
  std::vector<Entry> entries;
  SharedMapping memory;  // Every entry's header page and payload buffer.
  io_uring ring{};
  bool ring_made = false;
  int wake_fd = -1;
  uint64_t wake_value = 0;
  std::atomic<bool> stopping{false};
  std::atomic<bool>* go = nullptr;  // Set once the entries may be registered (or on Stop).
  std::atomic<uint64_t> served{0};
  std::thread thread;
  Entry* serving = nullptr;  // The entry whose request the thread is serving.

  ~Queue() {
    if (ring_made) io_uring_queue_exit(&ring);
    if (wake_fd >= 0) close(wake_fd);
  }

  Status Make(unsigned depth) {
    const size_t stride = kHeaderPage + payload_bytes;
    Result<SharedMapping> mapped =
        SharedMapping::Anonymous(stride * depth, "mapping the FUSE ring's buffers");
    if (!mapped.ok()) return mapped.status();
    memory = std::move(*mapped);
    entries.resize(depth);
    for (unsigned i = 0; i < depth; ++i) {
      Entry& e = entries[i];
      e.header = reinterpret_cast<RingRequestHeader*>(memory.data() + i * stride);
      e.payload = memory.data() + i * stride + kHeaderPage;
      e.buffers[0] = {e.header, sizeof(RingRequestHeader)};
      e.buffers[1] = {e.payload, payload_bytes};
    }
    wake_fd = eventfd(0, EFD_CLOEXEC);
    if (wake_fd < 0) return Status::FromErrno("eventfd for the FUSE ring");
    return Status::Ok();
  }

  // Made by the queue's thread, the only one that submits to it.
  Status MakeRing() {
    io_uring_params params{};
    params.flags = IORING_SETUP_SQE128 | IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN;
    const unsigned depth = static_cast<unsigned>(entries.size());
    if (int err = io_uring_queue_init_params(2 * depth + 2, &ring, &params); err < 0) {
      return Status::Error(-err, "io_uring for the FUSE ring");
    }
    ring_made = true;
    return Status::Ok();
  }

  // A free SQE; a full submission queue is submitted first.
  io_uring_sqe* Sqe() {
    io_uring_sqe* sqe;
    while ((sqe = io_uring_get_sqe(&ring)) == nullptr) io_uring_submit(&ring);
    return sqe;
  }

  void PrepareCommand(Entry& e, uint32_t op, uint64_t commit_id) {
    io_uring_sqe* sqe = Sqe();
    std::memset(static_cast<void*>(sqe), 0, 2 * sizeof(io_uring_sqe));  // One SQE128.
    sqe->opcode = IORING_OP_URING_CMD;
    sqe->fd = dev_fd;
    sqe->cmd_op = op;
    if (op == kRegister) {
      sqe->addr = reinterpret_cast<uint64_t>(e.buffers);
      sqe->len = 2;
    }
    auto* cmd = reinterpret_cast<RingCommand*>(sqe->cmd);
    cmd->commit_id = commit_id;
    cmd->qid = qid;
    io_uring_sqe_set_data64(sqe, static_cast<uint64_t>(&e - entries.data()));
  }

  void ArmWake() {
    io_uring_sqe* sqe = Sqe();
    io_uring_prep_read(sqe, wake_fd, &wake_value, sizeof wake_value, 0);
    io_uring_sqe_set_data64(sqe, kWakeTag);
  }

  // RingReply: the reply to the request `serving` holds.
  ssize_t Write(const iovec* iov, int count) override {
    Entry& e = *serving;
    std::memcpy(e.header->in_out, iov[0].iov_base, sizeof(fuse_out_header));
    size_t used = 0;
    for (int i = 1; i < count; ++i) {
      if (iov[i].iov_len > payload_bytes - used) return Fail(e, EIO);
      std::memmove(e.payload + used, iov[i].iov_base, iov[i].iov_len);
      used += iov[i].iov_len;
    }
    Commit(e, used);
    return static_cast<ssize_t>(sizeof(fuse_out_header) + used);
  }

  ssize_t Splice(int pipe_fd, size_t length) override {
    Entry& e = *serving;
    if (length < sizeof(fuse_out_header) || length - sizeof(fuse_out_header) > payload_bytes) {
      return Fail(e, EIO);
    }
    if (!ReadFully(pipe_fd, e.header->in_out, sizeof(fuse_out_header)) ||
        !ReadFully(pipe_fd, e.payload, length - sizeof(fuse_out_header))) {
      return Fail(e, EIO);
    }
    Commit(e, length - sizeof(fuse_out_header));
    return static_cast<ssize_t>(length);
  }

  static bool ReadFully(int fd, void* to, size_t length) {
    auto* p = static_cast<char*>(to);
    while (length > 0) {
      ssize_t n = read(fd, p, length);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return false;
      p += n;
      length -= static_cast<size_t>(n);
    }
    return true;
  }

  // Answers the request in `e` with `err` instead of a reply that cannot be committed.
  ssize_t Fail(Entry& e, int err) {
    auto* out = reinterpret_cast<fuse_out_header*>(e.header->in_out);
    const uint64_t unique = e.header->ring_ent_in_out.commit_id;
    *out = fuse_out_header{sizeof(fuse_out_header), -err, unique};
    Commit(e, 0);
    errno = err;
    return -1;
  }

  void Commit(Entry& e, size_t payload) {
    e.header->ring_ent_in_out.payload_sz = static_cast<uint32_t>(payload);
    PrepareCommand(e, kCommitAndFetch, e.header->ring_ent_in_out.commit_id);
    serving = nullptr;
  }

  // Serves the request the kernel put into `e`.
  void Serve(Entry& e) {
    const auto* in = reinterpret_cast<const fuse_in_header*>(e.header->in_out);
    const size_t payload = e.header->ring_ent_in_out.payload_sz;
    serving = &e;
    if (in->len < sizeof(fuse_in_header) + payload ||
        in->len - sizeof(fuse_in_header) - payload > kRingHeaderBytes) {
      spdlog::error("FUSE ring: a request of {} bytes with {} bytes of payload", in->len, payload);
      Fail(e, EIO);
      return;
    }
    const size_t op_header = in->len - sizeof(fuse_in_header) - payload;
    char* request = e.payload - sizeof(fuse_in_header) - op_header;
    std::memcpy(request, in, sizeof(fuse_in_header));
    std::memcpy(request + sizeof(fuse_in_header), e.header->op_in, op_header);
    ServeRingRequest(se, request, in->len, this);
    if (serving != nullptr) {
      spdlog::error("FUSE ring: request {} (opcode {}) left without a reply", in->unique,
                    in->opcode);
      Fail(e, EIO);
    }
    served.fetch_add(1, std::memory_order_relaxed);
  }

  // Registers the entries and serves them; `made` learns whether the ring could be made.
  void Run(std::promise<Status>* made) {
    if (qid < CPU_SETSIZE) {
      cpu_set_t cpus;
      CPU_ZERO(&cpus);
      CPU_SET(qid, &cpus);
      pthread_setaffinity_np(pthread_self(), sizeof cpus, &cpus);  // Fails for an offline CPU.
    }
    Status st = MakeRing();
    made->set_value(st);
    if (!st.ok()) return;
    go->wait(false);
    if (stopping.load(std::memory_order_acquire)) return;
    for (Entry& e : entries) PrepareCommand(e, kRegister, 0);
    ArmWake();
    while (!stopping.load(std::memory_order_acquire)) {
      int err = io_uring_submit_and_wait(&ring, 1);
      if (err < 0 && err != -EINTR) {
        spdlog::error("FUSE ring queue {}: {}", qid, std::strerror(-err));
        return;
      }
      io_uring_cqe* cqe;
      unsigned head;
      unsigned seen = 0;
      bool gone = false;
      io_uring_for_each_cqe(&ring, head, cqe) {
        ++seen;
        const uint64_t tag = io_uring_cqe_get_data64(cqe);
        if (tag == kWakeTag) continue;
        if (cqe->res < 0) {
          // ENOTCONN: the connection ended; anything else ends this queue too.
          if (cqe->res != -ENOTCONN) {
            spdlog::error("FUSE ring queue {}: {}", qid, std::strerror(-cqe->res));
          }
          gone = true;
          continue;
        }
        Serve(entries[tag]);
      }
      io_uring_cq_advance(&ring, seen);
      if (gone) return;
    }
  }
};

Result<std::unique_ptr<FuseRing>> FuseRing::Make(fuse_session* se, int dev_fd,
                                                 size_t payload_bytes, unsigned depth) {
  std::unique_ptr<FuseRing> r(new FuseRing);
  r->payload_bytes_ = payload_bytes;
  r->count_ = PossibleCpus();
  r->queues_ = std::make_unique<Queue[]>(r->count_);
  for (unsigned q = 0; q < r->count_; ++q) {
    Queue& queue = r->queues_[q];
    queue.se = se;
    queue.dev_fd = dev_fd;
    queue.qid = static_cast<uint16_t>(q);
    queue.payload_bytes = payload_bytes;
    queue.go = &r->go_;
    if (Status st = queue.Make(depth); !st.ok()) return st;
  }
  std::vector<std::promise<Status>> made(r->count_);
  for (unsigned q = 0; q < r->count_; ++q) {
    Queue& queue = r->queues_[q];
    queue.thread = std::thread([&queue, promise = &made[q]] { queue.Run(promise); });
  }
  for (auto& m : made) {
    if (Status st = m.get_future().get(); !st.ok()) return st;  // r's destructor stops the rest.
  }
  return r;
}

FuseRing::~FuseRing() { Stop(); }

void FuseRing::Register() {
  go_.store(true, std::memory_order_release);
  go_.notify_all();
}

void FuseRing::Stop() {
  for (unsigned q = 0; q < count_; ++q) queues_[q].stopping.store(true, std::memory_order_release);
  Register();
  for (unsigned q = 0; q < count_; ++q) {
    Queue& queue = queues_[q];
    if (!queue.thread.joinable()) continue;
    const uint64_t one = 1;
    if (write(queue.wake_fd, &one, sizeof one) < 0) {
      spdlog::warn("FUSE ring: cannot wake queue {}: {}", q, std::strerror(errno));
    }
    queue.thread.join();
  }
}

uint64_t FuseRing::Served() const {
  uint64_t n = 0;
  for (unsigned q = 0; q < count_; ++q) n += queues_[q].served.load(std::memory_order_relaxed);
  return n;
}

}  // namespace ckptfs
