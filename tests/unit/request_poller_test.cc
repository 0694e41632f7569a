// Tests of the request poller (fs/request_poller.h) on a socket pair that keeps message
// boundaries, as /dev/fuse hands out one whole request per read. The poller's state is the
// process's: each test sets the maximum it needs and reads the figures' changes.
#include "fs/request_poller.h"

#include <gtest/gtest.h>
#include <sched.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

namespace ckptfs {
namespace {

using std::chrono::microseconds;

ssize_t PlainRead(int fd, void* buf, size_t len) { return ::read(fd, buf, len); }

class RequestPollerTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_EQ(socketpair(AF_UNIX, SOCK_SEQPACKET, 0, fds_), 0); }
  void TearDown() override {
    SetRequestPollMax(microseconds(0));
    SetRequestPollPause(nullptr);
    close(fds_[0]);
    close(fds_[1]);
  }

  void Send(const std::string& message) {
    ASSERT_EQ(write(fds_[1], message.data(), message.size()),
              static_cast<ssize_t>(message.size()));
  }
  std::string Receive() {
    const ssize_t n = ReadAfterPolling(fds_[0], buf_.data(), buf_.size(), PlainRead);
    return n < 0 ? "error" : buf_.substr(0, static_cast<size_t>(n));
  }
  // Sends and reads small requests back to back until the window is `max` (the gap between two
  // may exceed it on a loaded machine, so this tries a few times).
  void ReachWindow(int max_us) {
    for (int i = 0; i < 1000 && Figures()["request_poll_window_us"] != max_us; ++i) {
      Send("warm-up");
      ASSERT_EQ(Receive(), "warm-up");
    }
    ASSERT_EQ(Figures()["request_poll_window_us"], max_us);
  }
  static nlohmann::json Figures() {
    nlohmann::json j;
    AddRequestPollStats(&j);
    return j;
  }

  int fds_[2] = {-1, -1};
  std::string buf_ = std::string(128 << 10, '\0');  // Made once: reads follow each other closely.
};

TEST_F(RequestPollerTest, WithoutAMaximumRequestsAreReadAtOnceAndNothingIsPolled) {
  SetRequestPollMax(microseconds(0));
  const nlohmann::json before = Figures();
  for (const char* m : {"open", "ioctl", "release"}) {
    Send(m);
    EXPECT_EQ(Receive(), m);
  }
  const nlohmann::json after = Figures();
  EXPECT_EQ(after["request_poll_us"], 0);
  EXPECT_EQ(after["request_poll_window_us"], 0);
  EXPECT_EQ(after["request_polls"], before["request_polls"]);
}

TEST_F(RequestPollerTest, ASmallRequestSoonAfterAnotherIsPolledForAndCaught) {
  SetRequestPollMax(microseconds(2000));
  EXPECT_EQ(Figures()["request_poll_window_us"], 0) << "nothing read yet";
  ReachWindow(2000);
  const nlohmann::json before = Figures();
  Send("third");  // Already waiting when the poll begins: caught by its first look.
  EXPECT_EQ(Receive(), "third");
  const nlohmann::json after = Figures();
  EXPECT_EQ(after["request_polls"].get<uint64_t>(), before["request_polls"].get<uint64_t>() + 1);
  EXPECT_EQ(after["requests_caught_polling"].get<uint64_t>(),
            before["requests_caught_polling"].get<uint64_t>() + 1);
}

TEST_F(RequestPollerTest, NothingIsPolledWhileTheFlusherIsBusy) {
  SetRequestPollMax(microseconds(2000));
  std::atomic<bool> flushing{false};
  SetRequestPollPause(&flushing);
  ReachWindow(2000);
  flushing = true;
  const nlohmann::json before = Figures();
  for (const char* m : {"create", "write", "flush"}) {
    Send(m);
    EXPECT_EQ(Receive(), m);
  }
  EXPECT_EQ(Figures()["request_polls"], before["request_polls"]);
  flushing = false;
  Send("release");
  EXPECT_EQ(Receive(), "release");
  EXPECT_EQ(Figures()["request_polls"].get<uint64_t>(),
            before["request_polls"].get<uint64_t>() + 1);
}

TEST_F(RequestPollerTest, AnotherThreadWantingThePollersCpuEndsItsPolling) {
  cpu_set_t one_cpu;
  CPU_ZERO(&one_cpu);
  CPU_SET(sched_getcpu(), &one_cpu);
  cpu_set_t was;
  ASSERT_EQ(sched_getaffinity(0, sizeof(was), &was), 0);
  ASSERT_EQ(sched_setaffinity(0, sizeof(one_cpu), &one_cpu), 0);
  SetRequestPollMax(microseconds(100));
  ReachWindow(100);
  const uint64_t before = Figures()["request_polls_contended"].get<uint64_t>();
  std::atomic<bool> spin{true};
  std::atomic<bool> spinning{false};
  std::thread spinner([&] {
    sched_setaffinity(0, sizeof(one_cpu), &one_cpu);
    spinning = true;
    while (spin.load(std::memory_order_relaxed)) {
    }
  });
  while (!spinning) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  // Nothing comes during the window: the poller yields to the spinner, which keeps the CPU for a
  // scheduler slice, far longer than the 100 us window. The request comes once that was seen.
  std::thread late([&] {
    for (int i = 0; i < 5000 && Figures()["request_polls_contended"] == before; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    spin = false;
    Send("late");
  });
  EXPECT_EQ(Receive(), "late");
  late.join();
  spinner.join();
  EXPECT_GT(Figures()["request_polls_contended"].get<uint64_t>(), before);
  ASSERT_EQ(sched_setaffinity(0, sizeof(was), &was), 0);
}

TEST_F(RequestPollerTest, ALargeRequestEndsPolling) {
  SetRequestPollMax(microseconds(2000));
  ReachWindow(2000);
  const std::string large(64 << 10, 'w');
  std::thread writer([&] { Send(large); });  // May not fit the socket's buffer at once.
  EXPECT_EQ(Receive(), large);
  writer.join();
  EXPECT_EQ(Figures()["request_poll_window_us"], 0);
}

TEST_F(RequestPollerTest, ThreadsWaitingForTheirTurnEachReadOneRequest) {
  SetRequestPollMax(microseconds(2000));
  ReachWindow(2000);
  constexpr int kThreads = 4;
  std::vector<std::string> got(kThreads);
  std::vector<std::thread> readers;
  for (int i = 0; i < kThreads; ++i) {
    readers.emplace_back([&, i] {
      std::string buf(4096, '\0');
      const ssize_t n = ReadAfterPolling(fds_[0], buf.data(), buf.size(), PlainRead);
      got[i] = n < 0 ? "error" : buf.substr(0, static_cast<size_t>(n));
    });
  }
  for (int i = 0; i < kThreads; ++i) Send("request " + std::to_string(i));
  for (auto& t : readers) t.join();
  std::sort(got.begin(), got.end());
  EXPECT_EQ(got, (std::vector<std::string>{"request 0", "request 1", "request 2", "request 3"}));
}

}  // namespace
}  // namespace ckptfs
