// A Namespace over a fresh backing directory, without a Filesystem or a flusher: the inode table
// and overlay on their own, with a journal nobody replays and a clock that stands still.
// File data written in tests comes from arena_.
#pragma once

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <memory>
#include <string>

#include "core/backing/backing_store.h"
#include "core/memory/arena.h"
#include "core/tree/namespace.h"
#include "core_test_util.h"
#include "iouring/posix_env.h"

namespace ckptfs::testing_util {

class NamespaceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    config_.backing_dir = backing_.path();
    config_.cache_size = 64ull << 20;
    root_fd_ = open(backing_.path().c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    ASSERT_GE(root_fd_, 0);
    ns_ = std::make_unique<Namespace>(config_, env_, clock_, stats_, journal_, root_fd_,
                                      [this] { ++appended_; });
  }
  void TearDown() override {
    ns_.reset();
    close(root_fd_);
    if (store_.staging_fd >= 0) close(store_.staging_fd);
    if (store_.root_fd >= 0) close(store_.root_fd);
  }
  // Opens the backing directory as a mount does (OpenBackingStore: the staging directory made)
  // into store_, which TearDown closes.
  void OpenStore() {
    Result<BackingStore> store = OpenBackingStore(env_, config_);
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    store_ = *store;
  }
  InodeRef RootLocked() REQUIRES(ns_lock) { return ns_->FindLocked(kRootIno); }
  // A file `name` in the root holding `bytes` in memory, changed `version` times.
  InodeRef FileInMemory(const std::string& name, const std::string& bytes, uint64_t version) {
    NamespaceLock lock(ns_->mutex());
    InodeRef file = ns_->NewInodeLocked(FileType::kRegular, 0644, Me());
    ns_->AddNameLocked(RootLocked(), name, file);
    Reservation reservation = arena_.Reserve((bytes.size() + kBlockSize - 1) / kBlockSize);
    MutexLock ilock(file->mu);
    EXPECT_TRUE(file->content.Write(0, bytes.data(), bytes.size(), reservation).ok());
    file->version = version;
    return file;
  }
  // The inode at `name` in the root, or null.
  InodeRef ChildOfRoot(const std::string& name) {
    NamespaceLock lock(ns_->mutex());
    Result<InodeRef> child = ns_->ChildLocked(RootLocked(), name);
    return child.ok() ? *child : nullptr;
  }

  TempDir backing_;
  Arena arena_{16ull << 20};  // Before everything that may hold its blocks.
  Config config_;
  PosixEnv env_;
  ManualClock clock_;
  Stats stats_;
  Journal journal_;
  int root_fd_ = -1;
  BackingStore store_;  // With OpenStore.
  size_t appended_ = 0;
  std::unique_ptr<Namespace> ns_;
};

}  // namespace ckptfs::testing_util
