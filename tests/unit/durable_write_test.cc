// WriteFileDurably (core/backing/durable_write.h): a file written whole under a temporary name,
// made durable and renamed into place, on a real directory; each step failed in turn through the
// fault-injecting Env.
#include "core/backing/durable_write.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>

#include "iouring/fault_injecting_env.h"

namespace ckptfs {
namespace {

using Op = Env::Op;
using Fault = FaultInjectingEnv::Fault;

class DurableWriteTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char templ[] = "/tmp/ckptfs-durable-write-XXXXXX";
    ASSERT_NE(mkdtemp(templ), nullptr);
    dir_ = templ;
    std::filesystem::create_directories(dir_ / "staging");
    std::filesystem::create_directories(dir_ / "final");
    staging_fd_ = open((dir_ / "staging").c_str(), O_RDONLY | O_DIRECTORY);
    final_fd_ = open((dir_ / "final").c_str(), O_RDONLY | O_DIRECTORY);
    ASSERT_GE(staging_fd_, 0);
    ASSERT_GE(final_fd_, 0);
  }
  void TearDown() override {
    close(staging_fd_);
    close(final_fd_);
    std::filesystem::remove_all(dir_);
  }
  // Writes `text` as "name" through the test's Env.
  Status Write(const std::string& text, DirSync dir_sync = DirSync::kSync, mode_t mode = 0640,
               Status fill_result = Status::Ok()) {
    return WriteFileDurably(env_, staging_fd_, ".name.tmp", final_fd_, "name", mode,
                            [&](int fd) {
                              Status st = env_.WriteAt(fd, text.data(), text.size(), 0);
                              return st.ok() ? fill_result : st;
                            },
                            dir_sync);
  }
  std::string Read(const std::filesystem::path& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) return "<missing>";
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  }
  bool StagingEmpty() { return std::filesystem::is_empty(dir_ / "staging"); }

  std::filesystem::path dir_;
  FaultInjectingEnv env_{MakePosixEnv()};
  int staging_fd_ = -1;
  int final_fd_ = -1;
};

TEST_F(DurableWriteTest, TheFileIsWholeUnderItsNameWithItsModeAndNoTemporaryIsLeft) {
  const uint64_t syncs = env_.syncs_seen();
  ASSERT_TRUE(Write("the content").ok());
  EXPECT_EQ(Read(dir_ / "final/name"), "the content");
  const mode_t umasked = umask(0);
  umask(umasked);
  EXPECT_EQ(std::filesystem::status(dir_ / "final/name").permissions(),
            std::filesystem::perms(0640 & ~umasked));
  EXPECT_TRUE(StagingEmpty());
  EXPECT_EQ(env_.syncs_seen() - syncs, 2u) << "the file, then its directory";

  ASSERT_TRUE(Write("replaced").ok());
  EXPECT_EQ(Read(dir_ / "final/name"), "replaced");
}

TEST_F(DurableWriteTest, TheCallerMayLeaveTheDirectorysSyncToItself) {
  const uint64_t syncs = env_.syncs_seen();
  ASSERT_TRUE(Write("the content", DirSync::kCallerSyncs).ok());
  EXPECT_EQ(Read(dir_ / "final/name"), "the content");
  EXPECT_EQ(env_.syncs_seen() - syncs, 1u) << "the file only";
}

TEST_F(DurableWriteTest, AStepThatFailsBeforeTheRenameLeavesTheOldFileAndNoTemporary) {
  ASSERT_TRUE(Write("old").ok());
  struct Case {
    const char* step;
    std::optional<Fault> fault;
    Status fill;
    int err;
  };
  const Case cases[] = {
      {"creating the temporary file", Fault(Op::kOpen, EACCES).Named(".name.tmp"), Status::Ok(),
       EACCES},
      {"writing it", Fault(Op::kWriteAt, ENOSPC), Status::Ok(), ENOSPC},
      {"what fill does besides", std::nullopt, Status::Error(ENOTSUP, "no attributes"), ENOTSUP},
      {"its fdatasync", Fault(Op::kSync, EIO).Named("fdatasync"), Status::Ok(), EIO},
      {"the rename", Fault(Op::kRename, EXDEV).Named("name"), Status::Ok(), EXDEV},
  };
  for (const Case& c : cases) {
    if (c.fault) env_.Inject(*c.fault);
    Status st = Write("new, never whole", DirSync::kSync, 0640, c.fill);
    env_.Heal();
    EXPECT_EQ(st.err(), c.err) << c.step << ": " << st.ToString();
    EXPECT_EQ(Read(dir_ / "final/name"), "old") << c.step;
    EXPECT_TRUE(StagingEmpty()) << c.step;
  }
}

TEST_F(DurableWriteTest, AFailedSyncOfTheDirectoryIsReportedWithTheFileWholeInPlace) {
  env_.Inject(Fault(Op::kSync, EIO).Named("fsync"));
  Status st = Write("the content");
  EXPECT_EQ(st.err(), EIO) << st.ToString();
  EXPECT_EQ(Read(dir_ / "final/name"), "the content");
  EXPECT_TRUE(StagingEmpty());
}

TEST_F(DurableWriteTest, ASymbolicLinkAtTheTemporaryNameIsNotFollowed) {
  std::ofstream(dir_ / "target") << "untouched";
  std::filesystem::create_symlink(dir_ / "target", dir_ / "staging/.name.tmp");
  Status st = Write("the content");
  EXPECT_EQ(st.err(), ELOOP) << st.ToString();
  EXPECT_EQ(Read(dir_ / "target"), "untouched");
  EXPECT_EQ(Read(dir_ / "final/name"), "<missing>");
}

}  // namespace
}  // namespace ckptfs
