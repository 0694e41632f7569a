// Tests of the /proc readers and /proc/PID/status parsers the FUSE adapter learns callers from.
#include "fs/proc_files.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <string>

namespace ckptfs {
namespace {

TEST(ProcFilesTest, StatusFieldsAreReadByNameAndMalformedOnesAreNone) {
  const char* status = "Name:\tpython\nTgid:\t4242\nPPid:\t17\nRssAnon:\t  204800 kB\n";
  EXPECT_EQ(ProcStatusField(status, "Tgid"), 4242u);
  EXPECT_EQ(ProcStatusField(status, "PPid"), 17u);
  EXPECT_EQ(ProcStatusField(status, "RssAnon"), 204800u);
  EXPECT_EQ(ProcStatusField(status, "Pid"), std::nullopt) << "PPid is not Pid";
  EXPECT_EQ(ProcStatusField(status, "Rss"), std::nullopt) << "RssAnon is not Rss";
  EXPECT_EQ(ProcStatusField("RssAnon:\tmany kB\n", "RssAnon"), std::nullopt);
  EXPECT_EQ(ProcStatusField("RssAnon:\t99999999999999999999999 kB\n", "RssAnon"), std::nullopt);
  EXPECT_EQ(ProcStatusField("", "RssAnon"), std::nullopt);
}

TEST(ProcFilesTest, SignalMasksAreReadAsHexadecimal) {
  const char* status = "SigPnd:\t0000000000004102\nShdPnd:\tFFFFFFFFFFFFFFFF\nSigBlk:\tzz\n";
  EXPECT_EQ(ProcStatusMask(status, "SigPnd"), 0x4102u);
  EXPECT_EQ(ProcStatusMask(status, "ShdPnd"), UINT64_MAX);
  EXPECT_EQ(ProcStatusMask(status, "SigBlk"), std::nullopt);
  EXPECT_EQ(ProcStatusMask("SigPnd:\t1FFFFFFFFFFFFFFFF\n", "SigPnd"), std::nullopt)
      << "more than 64 bits";
}

TEST(ProcFilesTest, FilesOfThisProcessAreReadAndThoseOfNoProcessAreNot) {
  const std::optional<std::string> status = ReadProcFile(getpid(), "status");
  ASSERT_TRUE(status.has_value());
  EXPECT_EQ(ProcStatusField(*status, "Tgid"), static_cast<uint64_t>(getpid()));
  const std::optional<std::string> exe = ProcExecutable(getpid());
  ASSERT_TRUE(exe.has_value());
  EXPECT_NE(exe->find("proc_files_test"), std::string::npos) << *exe;
  EXPECT_EQ(ReadProcFile(0, "status"), std::nullopt);
  EXPECT_EQ(ProcExecutable(0), std::nullopt);
}

}  // namespace
}  // namespace ckptfs
