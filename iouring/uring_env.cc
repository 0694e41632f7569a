// The io_uring Env: every write, sync and read of a batch goes through one ring, with up to
// `queue_depth` of them in flight at once.
#include <liburing.h>
#include <limits.h>
#include <sched.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <fstream>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "iouring/posix_env.h"

namespace ckptfs {
namespace {

constexpr char kIoUringDisabledPath[] = "/proc/sys/kernel/io_uring_disabled";

// Attempts to submit that may fail with EAGAIN/EBUSY while nothing is in flight (so no completion
// can free kernel resources) before the ring is declared unusable.
constexpr int kMaxIdleSubmitRetries = 1000;

bool IsRetryable(int err) { return err == EINTR || err == EAGAIN; }

// Value of the io_uring_disabled sysctl (0 allowed, 1 restricted, 2 disabled); 0 when the kernel
// has no such sysctl.
int IoUringDisabledSysctl() {
  std::ifstream in(kIoUringDisabledPath);
  int value = 0;
  if (!(in >> value)) return 0;
  return value;
}

// Owns one ring for its whole lifetime. Write, Sync and ReadBatch are not thread-safe: the thread
// that calls them owns the ring while it does; every call reaps all it submitted before
// returning. Every other call is PosixEnv's.
class UringEnv final : public PosixEnv {
 public:
  explicit UringEnv(unsigned queue_depth) : depth_(queue_depth) {}

  ~UringEnv() override {
    if (initialized_) io_uring_queue_exit(&ring_);
  }

  UringEnv(const UringEnv&) = delete;
  UringEnv& operator=(const UringEnv&) = delete;

  // Sets up the ring and checks that the kernel supports every operation the batches use.
  // Called once, before any other method.
  Status Init() {
    int disabled = IoUringDisabledSysctl();
    if (disabled == 2) {
      return Status::Error(EPERM, std::string("io_uring is disabled by ") + kIoUringDisabledPath);
    }
    int rc = io_uring_queue_init(depth_, &ring_, 0);
    if (rc < 0) {
      std::string what = "io_uring_queue_init(" + std::to_string(depth_) + ")";
      if (disabled == 1) what += std::string(" with ") + kIoUringDisabledPath + "=1";
      return Status::Error(-rc, what);
    }
    initialized_ = true;

    constexpr unsigned kProbeOps = 256;
    size_t probe_size = sizeof(io_uring_probe) + kProbeOps * sizeof(io_uring_probe_op);
    std::unique_ptr<io_uring_probe, decltype(&std::free)> probe(
        static_cast<io_uring_probe*>(std::calloc(1, probe_size)), &std::free);
    if (probe == nullptr) return Status::Error(ENOMEM, "io_uring probe allocation");
    rc = io_uring_register_probe(&ring_, probe.get(), kProbeOps);
    if (rc < 0) return Status::Error(-rc, "io_uring_register_probe");
    if (!io_uring_opcode_supported(probe.get(), IORING_OP_WRITEV)) {
      return Status::Error(EOPNOTSUPP, "io_uring lacks IORING_OP_WRITEV");
    }
    if (!io_uring_opcode_supported(probe.get(), IORING_OP_READV)) {
      return Status::Error(EOPNOTSUPP, "io_uring lacks IORING_OP_READV");
    }
    if (!io_uring_opcode_supported(probe.get(), IORING_OP_FSYNC)) {
      return Status::Error(EOPNOTSUPP, "io_uring lacks IORING_OP_FSYNC");
    }
    return Status::Ok();
  }

  std::string Name() const override { return "io_uring"; }

  std::vector<Status> Write(std::span<const WriteRequest> requests) override {
    if (!broken_.ok()) return Broken(requests.size());
    std::vector<Status> results(requests.size());
    ops_.clear();
    for (size_t i = 0; i < requests.size(); ++i) AddWriteOps(i, requests[i], results);
    Run(results);
    return results;
  }

  std::vector<Status> ReadBatch(std::span<const ReadBatchRequest> requests) override {
    if (!broken_.ok()) return Broken(requests.size());
    std::vector<Status> results(requests.size());
    ops_.clear();
    for (size_t i = 0; i < requests.size(); ++i) {
      const ReadBatchRequest& r = requests[i];
      if (r.offset > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        results[i] = Status::Error(EINVAL, "readv fd " + std::to_string(r.fd) + " at offset " +
                                               std::to_string(r.offset));
        continue;
      }
      if (r.length == 0) continue;
      RingOp op;
      op.slot = i;
      op.fd = r.fd;
      op.read = true;
      op.offset = r.offset;
      op.iov.push_back(iovec{r.dst, r.length});
      op.remaining = r.length;
      ops_.push_back(std::move(op));
    }
    Run(results);
    return results;
  }

  std::vector<Status> Sync(std::span<const int> fds, bool data_only) override {
    if (!broken_.ok()) return Broken(fds.size());
    std::vector<Status> results(fds.size());
    ops_.clear();
    for (size_t i = 0; i < fds.size(); ++i) {
      RingOp op;
      op.slot = i;
      op.fd = fds[i];
      op.sync = true;
      op.data_only = data_only;
      ops_.push_back(std::move(op));
    }
    Run(results);
    return results;
  }

 private:
  enum class RingOpState { kReady, kQueued, kInFlight, kDone };

  // One SQE's worth of work: a writev of at most IOV_MAX iovecs, a readv, or an fsync.
  struct RingOp {
    size_t slot = 0;  // index of the request (or fd) whose Status this op reports into
    int fd = -1;
    bool sync = false;
    bool read = false;
    bool data_only = false;
    uint64_t offset = 0;     // file offset of the first byte not yet written (read)
    std::vector<iovec> iov;  // bytes not yet written (read) are iov[first..]
    size_t first = 0;
    uint64_t remaining = 0;  // bytes not yet written (read)
    RingOpState state = RingOpState::kReady;
  };

  std::vector<Status> Broken(size_t n) const { return std::vector<Status>(n, broken_); }

  static std::string Describe(const RingOp& op) {
    if (op.sync) return (op.data_only ? "fdatasync fd " : "fsync fd ") + std::to_string(op.fd);
    return (op.read ? "readv fd " : "writev fd ") + std::to_string(op.fd) + " at offset " +
           std::to_string(op.offset);
  }

  // Splits `request` into ops of at most IOV_MAX iovecs; zero-byte requests need no op.
  void AddWriteOps(size_t slot, const WriteRequest& request, std::vector<Status>& results) {
    if (request.offset > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      results[slot] = Status::Error(EINVAL, "writev fd " + std::to_string(request.fd) +
                                                " at offset " + std::to_string(request.offset));
      return;
    }
    uint64_t offset = request.offset;
    for (size_t begin = 0; begin < request.iov.size(); begin += IOV_MAX) {
      size_t end = std::min(request.iov.size(), begin + static_cast<size_t>(IOV_MAX));
      RingOp op;
      op.slot = slot;
      op.fd = request.fd;
      op.offset = offset;
      for (size_t i = begin; i < end; ++i) {
        if (request.iov[i].iov_len == 0) continue;
        op.iov.push_back(request.iov[i]);
        op.remaining += request.iov[i].iov_len;
      }
      offset += op.remaining;
      if (op.remaining > 0) ops_.push_back(std::move(op));
    }
  }

  // Drives every op in ops_ to completion; `results` receives the first error of each slot.
  // Returns with nothing in flight.
  void Run(std::vector<Status>& results) {
    ready_.clear();
    queued_.clear();
    for (size_t i = 0; i < ops_.size(); ++i) ready_.push_back(i);
    for (;;) {
      if (broken_.ok()) {
        Prepare(results);
        Submit();
      }
      if (in_flight_ == 0) {
        if (!broken_.ok() || (ready_.empty() && queued_.empty())) break;
        continue;
      }
      Reap(results);
    }
    if (broken_.ok()) return;
    for (RingOp& op : ops_) {
      if (op.state == RingOpState::kDone) continue;
      op.state = RingOpState::kDone;
      if (results[op.slot].ok()) results[op.slot] = broken_;
    }
    ready_.clear();
    queued_.clear();
  }

  // Fills the SQ from ready_ while fewer than depth_ ops are queued or in flight.
  void Prepare(const std::vector<Status>& results) {
    size_t outstanding = in_flight_ + queued_.size();
    size_t budget = std::min<size_t>(io_uring_sq_space_left(&ring_), depth_ - outstanding);
    while (budget > 0 && !ready_.empty()) {
      size_t index = ready_.front();
      RingOp& op = ops_[index];
      if (!results[op.slot].ok()) {
        ready_.pop_front();
        op.state = RingOpState::kDone;
        continue;
      }
      io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
      if (sqe == nullptr) break;
      ready_.pop_front();
      if (op.sync) {
        io_uring_prep_fsync(sqe, op.fd, op.data_only ? IORING_FSYNC_DATASYNC : 0);
      } else if (op.read) {
        io_uring_prep_readv(sqe, op.fd, op.iov.data() + op.first,
                            static_cast<unsigned>(op.iov.size() - op.first), op.offset);
      } else {
        io_uring_prep_writev(sqe, op.fd, op.iov.data() + op.first,
                             static_cast<unsigned>(op.iov.size() - op.first), op.offset);
      }
      io_uring_sqe_set_data64(sqe, index);
      op.state = RingOpState::kQueued;
      queued_.push_back(index);
      --budget;
    }
  }

  // Hands queued SQEs to the kernel. Leaves some queued when the kernel is short of resources
  // and completions are pending (Reap frees them); marks the ring broken on any other failure.
  void Submit() {
    int idle_retries = 0;
    while (!queued_.empty()) {
      int rc = io_uring_submit(&ring_);
      if (rc > 0) {
        for (int i = 0; i < rc && !queued_.empty(); ++i) {
          ops_[queued_.front()].state = RingOpState::kInFlight;
          queued_.pop_front();
          ++in_flight_;
        }
        continue;
      }
      if (rc == 0) rc = -EAGAIN;
      if (rc == -EINTR) continue;
      if (rc == -EAGAIN || rc == -EBUSY) {
        if (in_flight_ > 0) return;
        if (++idle_retries < kMaxIdleSubmitRetries) {
          sched_yield();
          continue;
        }
      }
      // SQEs the kernel did not consume stay in the SQ; the ring is never entered for
      // submission again, so they are never executed.
      broken_ = Status::Error(-rc, "io_uring_submit");
      return;
    }
  }

  // Waits for at least one completion, then handles every completion available.
  void Reap(std::vector<Status>& results) {
    io_uring_cqe* cqe = nullptr;
    for (;;) {
      int rc = io_uring_wait_cqe(&ring_, &cqe);
      if (rc == 0) break;
      if (rc == -EINTR || rc == -EAGAIN || rc == -EBUSY) continue;
      // Returning now would leave the kernel using the callers' buffers after they are freed,
      // which could write garbage into checkpoints.
      spdlog::critical("io_uring_wait_cqe failed with {} requests in flight: {}", in_flight_,
                       std::strerror(-rc));
      std::abort();
    }
    unsigned head;
    unsigned seen = 0;
    io_uring_for_each_cqe(&ring_, head, cqe) {
      Complete(io_uring_cqe_get_data64(cqe), cqe->res, results);
      ++seen;
    }
    io_uring_cq_advance(&ring_, seen);
  }

  // Applies one completion to the op that the registry records as in flight under `user_data`.
  void Complete(uint64_t user_data, int res, std::vector<Status>& results) {
    if (user_data >= ops_.size() || ops_[user_data].state != RingOpState::kInFlight) return;
    RingOp& op = ops_[user_data];
    --in_flight_;
    op.state = RingOpState::kDone;
    if (res < 0) {
      if (IsRetryable(-res)) {
        Retry(user_data);
      } else if (results[op.slot].ok()) {
        results[op.slot] = Status::Error(-res, Describe(op));
      }
      return;
    }
    if (op.sync) return;
    if (res == 0 && op.read) {  // The end of the file: the rest reads as zeros.
      for (size_t i = op.first; i < op.iov.size(); ++i) {
        std::memset(op.iov[i].iov_base, 0, op.iov[i].iov_len);
      }
      return;
    }
    if (res == 0) {
      if (results[op.slot].ok()) {
        results[op.slot] = Status::Error(EIO, Describe(op) + " wrote nothing");
      }
      return;
    }
    Advance(op, static_cast<uint64_t>(res));
    if (op.remaining > 0) Retry(user_data);
  }

  void Retry(size_t index) {
    ops_[index].state = RingOpState::kReady;
    ready_.push_back(index);
  }

  // Drops the first `n` bytes written (read) from `op`.
  static void Advance(RingOp& op, uint64_t n) {
    n = std::min(n, op.remaining);
    op.offset += n;
    op.remaining -= n;
    while (n > 0 && op.first < op.iov.size()) {
      iovec& v = op.iov[op.first];
      if (n < v.iov_len) {
        v.iov_base = static_cast<char*>(v.iov_base) + n;
        v.iov_len -= n;
        return;
      }
      n -= v.iov_len;
      ++op.first;
    }
  }

  const unsigned depth_;
  io_uring ring_{};
  bool initialized_ = false;
  // Set when the ring can no longer be used; every later request fails with it.
  Status broken_;
  // The in-flight registry of the current call: user_data is an index into ops_.
  std::vector<RingOp> ops_;
  std::deque<size_t> ready_;   // ops waiting for an SQE
  std::deque<size_t> queued_;  // ops in the SQ that the kernel has not consumed, in SQ order
  size_t in_flight_ = 0;       // ops consumed by the kernel whose completion is not yet seen
};

}  // namespace

std::unique_ptr<Env> MakeUringEnv(unsigned queue_depth, Status* why_not) {
  Status status;
  std::unique_ptr<UringEnv> env;
  if (queue_depth == 0) {
    status = Status::Error(EINVAL, "io_uring queue depth must be positive");
  } else {
    env = std::make_unique<UringEnv>(queue_depth);
    status = env->Init();
  }
  if (status.ok()) return env;
  if (why_not != nullptr) *why_not = std::move(status);
  return nullptr;
}

}  // namespace ckptfs
