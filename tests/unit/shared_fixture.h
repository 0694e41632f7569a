// Several members over one temp backing directory, standing for several nodes that share it:
// each with its own fault-injecting Env, its own journal progress (set by the test) and the
// fixture's ManualClock, ticked by the test as its owner's thread would.
#pragma once

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/base/clock.h"
#include "core/shared/membership.h"
#include "core/shared/shared_commit.h"
#include "core/shared/shared_dir.h"
#include "core_test_util.h"
#include "iouring/fault_injecting_env.h"
#include "iouring/posix_env.h"

namespace ckptfs::testing_util {

inline constexpr std::chrono::milliseconds kMemberTimeout{10000};
// One tick of the tests: the beat interval of kMemberTimeout.
inline constexpr std::chrono::milliseconds kTickStep{1000};

// A pid of this host that no process has (a child, reaped): a member file's dead process.
inline pid_t DeadPid() {
  pid_t child = fork();
  if (child == 0) _exit(0);
  EXPECT_GT(child, 0);
  EXPECT_EQ(waitpid(child, nullptr, 0), child);
  return child;
}

// One mount of the shared backing directory.
struct SharedNode {
  explicit SharedNode(std::string node_name) : name(std::move(node_name)) {}

  std::string name;
  FaultInjectingEnv env{std::make_unique<PosixEnv>()};
  FlushProgress progress;  // What its journal has reached; the test moves it.
  std::unique_ptr<SharedDirectory> area;  // Over `env`.
  std::unique_ptr<Membership> membership;
  std::unique_ptr<SharedCommits> commits;
  bool running = true;  // Ticked by TickAll; false: stopped (killed).
  // TickAll steps its stand-ins after each tick, as its stand-in thread would; false: the test
  // does.
  bool steps_stand_ins = true;
  std::vector<CommitOutcome> outcomes;  // Every outcome its ticks returned.
};

class SharedStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_fd_ = open(backing_.path().c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    ASSERT_GE(root_fd_, 0);
  }
  void TearDown() override {
    nodes_.clear();
    close(root_fd_);
  }

  // A member named `name`, opened but not joined, publishing `replication_endpoint`; with
  // `takes_over`, in the place of a process of its node that died (MembershipSettings).
  SharedNode& Open(const std::string& name, const std::string& replication_endpoint = "",
                   bool takes_over = false) {
    auto node = std::make_unique<SharedNode>(name);
    SharedNode* n = node.get();
    ProgressFn progress = [n] { return n->progress; };
    Result<std::unique_ptr<SharedDirectory>> area = SharedDirectory::Open(n->env, root_fd_);
    EXPECT_TRUE(area.ok()) << area.status().ToString();
    n->area = std::move(*area);
    Result<std::unique_ptr<Membership>> m = Membership::Open(
        *n->area, {name, kMemberTimeout, replication_endpoint, takes_over}, clock_, progress);
    EXPECT_TRUE(m.ok()) << m.status().ToString();
    n->membership = std::move(*m);
    n->commits =
        SharedCommits::Open(*n->area, *n->membership, clock_, kMemberTimeout, progress);
    nodes_.push_back(std::move(node));
    return *n;
  }

  // A member named `name`, joined.
  SharedNode& Start(const std::string& name, const std::string& replication_endpoint = "") {
    SharedNode& n = Open(name, replication_endpoint);
    Status joined = n.membership->Join();
    EXPECT_TRUE(joined.ok()) << joined.ToString();
    return n;
  }

  // Moves the clock one step, then ticks every running member as its owner would: membership,
  // then commits, then the dead members' parts it queued.
  void TickAll() {
    clock_.Advance(kTickStep);
    for (auto& n : nodes_) {
      if (!n->running) continue;
      (void)n->membership->Tick();
      for (CommitOutcome& o : n->commits->Tick()) n->outcomes.push_back(std::move(o));
      if (n->steps_stand_ins) (void)n->commits->StandInStep();
    }
  }
  void TickAll(int times) {
    for (int i = 0; i < times; ++i) TickAll();
  }

  std::string SharedPath(const std::string& rel) const {
    return backing_ / (".ckptfs/shared/" + rel);
  }

  TempDir backing_;
  int root_fd_ = -1;
  PosixEnv env_;  // For what the test does itself.
  ManualClock clock_;
  std::vector<std::unique_ptr<SharedNode>> nodes_;
};

}  // namespace ckptfs::testing_util
