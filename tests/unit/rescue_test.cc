// Tests of the rescue directory: where unflushed versions go when unmount cannot flush them.
#include "core/recovery/rescue.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "core_test_util.h"
#include "iouring/fault_injecting_env.h"
#include "iouring/posix_env.h"

namespace ckptfs {
namespace {

using testing_util::Pattern;
using testing_util::ReadHostFile;
using testing_util::SameBytes;
using testing_util::TempDir;

class RescueTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_fd_ = open(backing_.path().c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    ASSERT_GE(root_fd_, 0);
    Reservation reservation = arena_.Reserve(8);
    ASSERT_TRUE(model_.Write(0, model_bytes_.data(), model_bytes_.size(), reservation).ok());
  }
  void TearDown() override {
    close(root_fd_);
    std::error_code ec;
    for (const std::string& dir : made_) std::filesystem::remove_all(dir, ec);
  }
  std::vector<UnflushedFile> Files() { return {{"ckpt/iter_1/model.pt", model_}, {"tracker", tracker_}}; }

  TempDir backing_;
  int root_fd_ = -1;
  Arena arena_{16ull << 20};
  const std::string model_bytes_ = Pattern(5, 40000);
  FileContent model_;
  FileContent tracker_;
  std::vector<std::string> made_;  // Rescue directories outside the backing directory.
};

TEST_F(RescueTest, UnflushedFilesAreSavedUnderTheBackingDirectoryAtTheirPaths) {
  PosixEnv env;
  Result<std::string> where = SaveToRescueDirectory(env, root_fd_, backing_.path(), Files());
  ASSERT_TRUE(where.ok()) << where.status().ToString();
  EXPECT_EQ(where->rfind(backing_ / ".ckptfs/rescue-", 0), 0u) << *where;
  EXPECT_TRUE(SameBytes(ReadHostFile(*where + "/ckpt/iter_1/model.pt").value_or(""), model_bytes_));
  EXPECT_EQ(ReadHostFile(*where + "/tracker"), std::string());
}

TEST_F(RescueTest, WhenTheBackingDirectoryRefusesThemTheyGoToVarTmp) {
  FaultInjectingEnv env(std::make_unique<PosixEnv>());
  env.Inject(FaultInjectingEnv::Fault(Env::Op::kOpen, ENOSPC).Named("ckpt").Times(1));
  Result<std::string> where = SaveToRescueDirectory(env, root_fd_, backing_.path(), Files());
  ASSERT_TRUE(where.ok()) << where.status().ToString();
  made_.push_back(*where);
  EXPECT_EQ(where->rfind("/var/tmp/ckptfs-rescue-", 0), 0u) << *where;
  EXPECT_TRUE(SameBytes(ReadHostFile(*where + "/ckpt/iter_1/model.pt").value_or(""), model_bytes_));
}

TEST_F(RescueTest, APlaceThatTookOnlySomeOfThemKeepsNoRescueDirectory) {
  FaultInjectingEnv env(std::make_unique<PosixEnv>());
  // The model is written under the backing directory, then the tracker cannot be.
  env.Inject(FaultInjectingEnv::Fault(Env::Op::kOpen, ENOSPC).Named("tracker").Times(1));
  Result<std::string> where = SaveToRescueDirectory(env, root_fd_, backing_.path(), Files());
  ASSERT_TRUE(where.ok()) << where.status().ToString();
  made_.push_back(*where);
  EXPECT_EQ(where->rfind("/var/tmp/ckptfs-rescue-", 0), 0u) << *where;
  EXPECT_TRUE(SameBytes(ReadHostFile(*where + "/ckpt/iter_1/model.pt").value_or(""), model_bytes_));
  EXPECT_EQ(ReadHostFile(*where + "/tracker"), std::string());
  EXPECT_EQ(testing_util::HostList(backing_ / ".ckptfs"), std::vector<std::string>{})
      << "no incomplete copy left where the README says to look";
}

TEST_F(RescueTest, WhenNoPlaceTakesThemTheErrorSaysWhere) {
  FaultInjectingEnv env(std::make_unique<PosixEnv>());
  env.Inject(FaultInjectingEnv::Fault(Env::Op::kOpen, EIO).Named("tracker"));
  Result<std::string> where = SaveToRescueDirectory(env, root_fd_, backing_.path(), Files());
  ASSERT_FALSE(where.ok());
  EXPECT_EQ(where.status().err(), EIO);
  EXPECT_NE(where.status().message().find("/var/tmp/ckptfs-rescue-"), std::string::npos)
      << where.status().ToString();
  // The directory it began in /var/tmp is this process's (its name ends with the pid).
  const std::string pid = "-" + std::to_string(getpid());
  for (const auto& entry : std::filesystem::directory_iterator("/var/tmp")) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("ckptfs-rescue-", 0) == 0 && name.size() > pid.size() &&
        name.compare(name.size() - pid.size(), pid.size(), pid) == 0) {
      made_.push_back(entry.path());
    }
  }
}

}  // namespace
}  // namespace ckptfs
