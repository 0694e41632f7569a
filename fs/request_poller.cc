#include "fs/request_poller.h"

#include <poll.h>
#include <pthread.h>
#include <sched.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>

#include "core/base/serve_policy.h"
#include "core/base/thread_annotations.h"
#include "fs/control_block.h"

namespace ckptfs {
namespace {

struct Poller {
  std::atomic<int64_t> max_ns{0};
  std::atomic<int64_t> window_ns{0};
  std::atomic<int64_t> last_request_ns{0};  // When the latest request was read.
  Mutex mu;
  std::condition_variable_any turn_free;  // With mu: no thread polls or reads.
  bool reading GUARDED_BY(mu) = false;    // A thread polls or reads.
  std::atomic<uint64_t> polls{0};
  std::atomic<uint64_t> caught{0};
  std::atomic<int64_t> polling_ns{0};
  std::atomic<int64_t> contended_until_ns{0};  // No polling before then.
  std::atomic<uint64_t> contended{0};
  const std::atomic<bool>* busy = nullptr;
  bool Paused() const { return busy != nullptr && busy->load(std::memory_order_relaxed); }
};

Poller& ThePoller() {
  static Poller poller;
  return poller;
}

// The one thread that polls and reads /dev/fuse; the others wait here, not in read(2), where
// the kernel would wake one for each request. Given back also when the thread is cancelled in
// poll(2) or read(2), as libfuse cancels its serving threads when its loop ends.
class ReaderTurn {
 public:
  explicit ReaderTurn(Poller& p) : p_(p) {
    // Not cancelled while waiting (condition_variable_any::wait may not unwind): a cancelled
    // holder gives the turn back, and the cancel then takes effect in this thread's poll(2) or
    // read(2).
    int cancel_state = 0;
    pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &cancel_state);
    {
      MutexLock lock(p_.mu);
      p_.turn_free.wait(lock, [this]() REQUIRES(p_.mu) { return !p_.reading; });
      p_.reading = true;
    }
    pthread_setcancelstate(cancel_state, nullptr);
  }
  ~ReaderTurn() {
    {
      MutexLock lock(p_.mu);
      p_.reading = false;
    }
    p_.turn_free.notify_one();
  }

 private:
  Poller& p_;
};

}  // namespace

void SetRequestPollMax(std::chrono::microseconds max) {
  ThePoller().max_ns.store(std::chrono::nanoseconds(max).count(), std::memory_order_relaxed);
  ThePoller().window_ns.store(0, std::memory_order_relaxed);
  ThePoller().contended_until_ns.store(0, std::memory_order_relaxed);
}

void SetRequestPollPause(const std::atomic<bool>* busy) { ThePoller().busy = busy; }

ssize_t ReadAfterPolling(int fd, void* buf, size_t len, ssize_t (*read)(int, void*, size_t)) {
  Poller& p = ThePoller();
  const int64_t max = p.max_ns.load(std::memory_order_relaxed);
  ssize_t n;
  if (max == 0 || p.window_ns.load(std::memory_order_relaxed) == 0 || p.Paused() ||
      MonotonicNanos() < p.contended_until_ns.load(std::memory_order_relaxed)) {
    n = read(fd, buf, len);
  } else {
    ReaderTurn turn(p);
    const int64_t window = p.window_ns.load(std::memory_order_relaxed);
    p.polls.fetch_add(1, std::memory_order_relaxed);
    const int64_t start = MonotonicNanos();
    int64_t now = start;
    pollfd device{fd, POLLIN, 0};
    while (now - start < window && !p.Paused()) {
      if (::poll(&device, 1, 0) != 0) {
        p.caught.fetch_add(1, std::memory_order_relaxed);
        break;
      }
      const int64_t yielded = MonotonicNanos();
      sched_yield();  // The CPU goes to any other thread that wants it.
      now = MonotonicNanos();
      if (policy::RequestPollContended(std::chrono::nanoseconds(now - yielded),
                                       std::chrono::nanoseconds(max))) {
        p.contended_until_ns.store(now + policy::kRequestPollContendedPause.count(),
                                   std::memory_order_relaxed);
        p.contended.fetch_add(1, std::memory_order_relaxed);
        break;
      }
    }
    p.polling_ns.fetch_add(now - start, std::memory_order_relaxed);
    n = read(fd, buf, len);
  }
  if (n > 0 && max > 0) {
    const int64_t now = MonotonicNanos();
    const int64_t gap = now - p.last_request_ns.exchange(now, std::memory_order_relaxed);
    const std::chrono::nanoseconds next = policy::NextRequestPollWindow(
        std::chrono::nanoseconds(p.window_ns.load(std::memory_order_relaxed)),
        std::chrono::nanoseconds(gap), static_cast<uint64_t>(n), std::chrono::nanoseconds(max));
    p.window_ns.store(next.count(), std::memory_order_relaxed);
  }
  return n;
}

void AddRequestPollStats(nlohmann::json* worker) {
  const Poller& p = ThePoller();
  nlohmann::json& j = *worker;
  j["request_poll_us"] = p.max_ns.load(std::memory_order_relaxed) / 1000;
  j["request_poll_window_us"] = p.window_ns.load(std::memory_order_relaxed) / 1000;
  j["request_polls"] = p.polls.load(std::memory_order_relaxed);
  j["requests_caught_polling"] = p.caught.load(std::memory_order_relaxed);
  j["request_polls_contended"] = p.contended.load(std::memory_order_relaxed);
  j["request_polling_seconds"] =
      static_cast<double>(p.polling_ns.load(std::memory_order_relaxed)) / 1e9;
}

}  // namespace ckptfs
