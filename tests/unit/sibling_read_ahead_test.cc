// SiblingReadAhead (core/backing/sibling_read_ahead.h): the pure choice of what to read ahead,
// and the thread on a real directory: files read ahead are in the page cache afterwards
// (mincore), what is skipped is not; listings and files that fail through the fault-injecting
// Env are skipped without harm.
#include "core/backing/sibling_read_ahead.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "iouring/fault_injecting_env.h"
#include "iouring/posix_env.h"

namespace ckptfs {
namespace {

using policy::SiblingCursor;
using policy::SiblingsToReadAhead;
using Range = std::pair<size_t, size_t>;

TEST(SiblingsToReadAheadTest, TheFirstOpenOfADirectoryReadsNothingAhead) {
  SiblingCursor cursor;
  EXPECT_EQ(SiblingsToReadAhead(cursor, 0, 100, 16), Range(0, 0));
  EXPECT_EQ(cursor.last_opened, 0u);
}

TEST(SiblingsToReadAheadTest, TheNextNameInOrderReadsAWindowAheadThenOneMorePerOpen) {
  SiblingCursor cursor;
  SiblingsToReadAhead(cursor, 0, 100, 16);
  EXPECT_EQ(SiblingsToReadAhead(cursor, 1, 100, 16), Range(2, 18));
  EXPECT_EQ(SiblingsToReadAhead(cursor, 2, 100, 16), Range(18, 19));
  EXPECT_EQ(SiblingsToReadAhead(cursor, 3, 100, 16), Range(19, 20));
}

TEST(SiblingsToReadAheadTest, ALoaderSkippingSomeNamesStillReadsAhead) {
  SiblingCursor cursor;
  SiblingsToReadAhead(cursor, 10, 100, 16);
  EXPECT_EQ(SiblingsToReadAhead(cursor, 13, 100, 16), Range(14, 30));
  EXPECT_EQ(SiblingsToReadAhead(cursor, 16, 100, 16), Range(30, 33));
}

TEST(SiblingsToReadAheadTest, OpensOutOfOrderReadNothingAhead) {
  SiblingCursor cursor;
  SiblingsToReadAhead(cursor, 50, 100, 16);
  EXPECT_EQ(SiblingsToReadAhead(cursor, 10, 100, 16), Range(0, 0));  // Backwards.
  EXPECT_EQ(SiblingsToReadAhead(cursor, 10, 100, 16), Range(0, 0));  // The same file again.
  EXPECT_EQ(SiblingsToReadAhead(cursor, 40, 100, 16), Range(0, 0));  // Too far a jump.
  EXPECT_EQ(SiblingsToReadAhead(cursor, 41, 100, 16), Range(42, 58));  // In order again.
}

TEST(SiblingsToReadAheadTest, TheWindowStopsAtTheEndOfTheListing) {
  SiblingCursor cursor;
  SiblingsToReadAhead(cursor, 5, 10, 16);
  EXPECT_EQ(SiblingsToReadAhead(cursor, 6, 10, 16), Range(7, 10));
  EXPECT_EQ(SiblingsToReadAhead(cursor, 7, 10, 16), Range(0, 0));
  EXPECT_EQ(SiblingsToReadAhead(cursor, 9, 10, 16), Range(0, 0));
}

class SiblingReadAheadTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char templ[] = "/var/tmp/ckptfs-read-ahead-XXXXXX";  // Not tmpfs: its pages can be dropped.
    ASSERT_NE(mkdtemp(templ), nullptr);
    dir_ = templ;
    dir_fd_ = open(dir_.c_str(), O_RDONLY | O_DIRECTORY);
    ASSERT_GE(dir_fd_, 0);
    backing_dir_ = std::make_shared<BackingFile>(env_, fcntl(dir_fd_, F_DUPFD_CLOEXEC, 0));
  }
  void TearDown() override {
    read_ahead_.reset();
    backing_dir_.reset();
    close(dir_fd_);
    std::filesystem::remove_all(dir_);
  }
  // Writes `name` of `size` bytes, durably, and drops its pages from the page cache.
  void WriteCold(const std::string& name, size_t size) {
    int fd = openat(dir_fd_, name.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ASSERT_GE(fd, 0);
    std::string bytes(size, 'x');
    ASSERT_EQ(write(fd, bytes.data(), bytes.size()), static_cast<ssize_t>(size));
    ASSERT_EQ(fdatasync(fd), 0);
    ASSERT_EQ(posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED), 0);
    close(fd);
    ASSERT_EQ(ResidentPages(name), 0u) << name;
  }
  // Pages of `name` in the page cache.
  size_t ResidentPages(const std::string& name) {
    int fd = openat(dir_fd_, name.c_str(), O_RDONLY);
    if (fd < 0) return 0;
    struct stat st {};
    fstat(fd, &st);
    size_t resident = 0;
    if (st.st_size > 0) {
      void* map = mmap(nullptr, static_cast<size_t>(st.st_size), PROT_READ, MAP_SHARED, fd, 0);
      const size_t pages = (static_cast<size_t>(st.st_size) + 4095) / 4096;
      std::vector<unsigned char> in(pages);
      if (map != MAP_FAILED && mincore(map, static_cast<size_t>(st.st_size), in.data()) == 0) {
        for (unsigned char page : in) resident += page & 1;
      }
      if (map != MAP_FAILED) munmap(map, static_cast<size_t>(st.st_size));
    }
    close(fd);
    return resident;
  }
  // Pages read in ahead arrive after the advice: waits (bounded) for `name` to be resident.
  bool BecomesResident(const std::string& name) {
    for (int i = 0; i < 400; ++i) {
      if (ResidentPages(name) > 0) return true;
      usleep(5000);
    }
    return false;
  }
  void Opened(const std::string& name) {
    read_ahead_->Opened(backing_dir_, name);
    read_ahead_->Drain();
  }
  static std::string Name(int i) {
    char name[16];
    std::snprintf(name, sizeof(name), "f%03d", i);
    return name;
  }

  FaultInjectingEnv env_{std::make_unique<PosixEnv>()};
  std::atomic<uint64_t> files_read_ahead_{0};
  std::filesystem::path dir_;
  int dir_fd_ = -1;
  std::shared_ptr<BackingFile> backing_dir_;
  std::unique_ptr<SiblingReadAhead> read_ahead_ =
      std::make_unique<SiblingReadAhead>(env_, files_read_ahead_, 64 << 10);
};

TEST_F(SiblingReadAheadTest, FilesOpenedInNameOrderHaveTheNextOnesReadIntoThePageCache) {
  for (int i = 0; i < 40; ++i) WriteCold(Name(i), 8192);
  Opened(Name(0));
  Opened(Name(1));
  EXPECT_EQ(files_read_ahead_.load(), policy::kSiblingReadAheadWindow);
  for (int i = 2; i < 2 + static_cast<int>(policy::kSiblingReadAheadWindow); ++i) {
    EXPECT_TRUE(BecomesResident(Name(i))) << Name(i);
  }
  EXPECT_EQ(ResidentPages(Name(2 + policy::kSiblingReadAheadWindow)), 0u);
  EXPECT_EQ(ResidentPages(Name(39)), 0u);
}

TEST_F(SiblingReadAheadTest, FilesOpenedOutOfOrderReadNothingAhead) {
  for (int i = 0; i < 40; ++i) WriteCold(Name(i), 8192);
  Opened(Name(30));
  Opened(Name(3));
  Opened(Name(20));
  EXPECT_EQ(files_read_ahead_.load(), 0u);
  EXPECT_EQ(ResidentPages(Name(21)), 0u);
}

TEST_F(SiblingReadAheadTest, LargeFilesDirectoriesAndSymlinksAreSkipped) {
  WriteCold(Name(0), 8192);
  WriteCold(Name(1), 8192);
  WriteCold(Name(2), 1 << 20);  // Larger than the read-ahead's 64 KiB.
  ASSERT_EQ(mkdirat(dir_fd_, Name(3).c_str(), 0755), 0);
  ASSERT_EQ(symlinkat(Name(5).c_str(), dir_fd_, Name(4).c_str()), 0);
  WriteCold(Name(5), 8192);
  Opened(Name(0));
  Opened(Name(1));
  EXPECT_EQ(files_read_ahead_.load(), 1u);  // Only f005.
  EXPECT_TRUE(BecomesResident(Name(5)));
  EXPECT_EQ(ResidentPages(Name(2)), 0u);
}

TEST_F(SiblingReadAheadTest, AFileMadeAfterTheListingIsFoundByListingAgain) {
  WriteCold(Name(0), 8192);
  Opened(Name(0));
  WriteCold(Name(1), 8192);
  WriteCold(Name(2), 8192);
  std::this_thread::sleep_for(policy::kSiblingListAgainAfter);
  Opened(Name(1));  // Not in the listing of the first open: the directory is listed again.
  EXPECT_EQ(files_read_ahead_.load(), 1u);
  EXPECT_TRUE(BecomesResident(Name(2)));
}

TEST_F(SiblingReadAheadTest, ListingsAndFilesThatFailAreSkippedAndLaterOpensStillWork) {
  for (int i = 0; i < 20; ++i) WriteCold(Name(i), 8192);
  env_.Inject(FaultInjectingEnv::Fault(Env::Op::kListDir, EIO).Times(1));
  Opened(Name(0));
  Opened(Name(1));  // The listing failed before: listed now, but its cursor starts here.
  EXPECT_EQ(files_read_ahead_.load(), 0u);
  env_.Inject(FaultInjectingEnv::Fault(Env::Op::kOpen, EACCES).Named(Name(4)));
  Opened(Name(2));
  EXPECT_EQ(files_read_ahead_.load(), policy::kSiblingReadAheadWindow - 1);  // f003-f018 but f004.
  EXPECT_EQ(ResidentPages(Name(4)), 0u);
  EXPECT_TRUE(BecomesResident(Name(18)));
}

TEST_F(SiblingReadAheadTest, ADirectoryOfTooManyNamesIsNeverReadAheadNorListedAgain) {
  read_ahead_ = std::make_unique<SiblingReadAhead>(
      env_, files_read_ahead_, 64 << 10, SiblingListingLimits{.directory_names = 8});
  for (int i = 0; i < 9; ++i) WriteCold(Name(i), 8192);
  const uint64_t listed_before = env_.calls(Env::Op::kListDir);
  Opened(Name(0));
  Opened(Name(1));
  std::this_thread::sleep_for(policy::kSiblingListAgainAfter);
  Opened(Name(2));
  EXPECT_EQ(files_read_ahead_.load(), 0u);
  EXPECT_EQ(env_.calls(Env::Op::kListDir) - listed_before, 1u);
}

TEST_F(SiblingReadAheadTest, ListingsBeyondTheLimitDropTheLeastRecentlyUsed) {
  read_ahead_ = std::make_unique<SiblingReadAhead>(
      env_, files_read_ahead_, 64 << 10, SiblingListingLimits{.directories = 2});
  std::vector<std::shared_ptr<BackingFile>> dirs;
  for (const char* sub : {"a", "b", "c"}) {
    ASSERT_EQ(mkdirat(dir_fd_, sub, 0755), 0);
    const int fd = openat(dir_fd_, sub, O_RDONLY | O_DIRECTORY);
    ASSERT_GE(fd, 0);
    for (int i = 0; i < 3; ++i) {
      const int file = openat(fd, Name(i).c_str(), O_WRONLY | O_CREAT, 0644);
      ASSERT_EQ(write(file, "x", 1), 1);
      close(file);
    }
    dirs.push_back(std::make_shared<BackingFile>(env_, fd));
  }
  const uint64_t listed_before = env_.calls(Env::Op::kListDir);
  for (const auto& dir : dirs) read_ahead_->Opened(dir, Name(0));  // Lists a, b, c; drops a.
  read_ahead_->Opened(dirs[1], Name(1));  // b is held: read ahead from its listing.
  read_ahead_->Opened(dirs[0], Name(1));  // a was dropped: listed again, its cursor anew.
  read_ahead_->Drain();
  EXPECT_EQ(env_.calls(Env::Op::kListDir) - listed_before, 4u);
  EXPECT_EQ(files_read_ahead_.load(), 1u);  // b's f002.
}

TEST_F(SiblingReadAheadTest, AFileGoneBeforeItsTurnIsSkipped) {
  for (int i = 0; i < 4; ++i) WriteCold(Name(i), 8192);
  Opened(Name(0));
  ASSERT_EQ(unlinkat(dir_fd_, Name(2).c_str(), 0), 0);
  Opened(Name(1));
  EXPECT_EQ(files_read_ahead_.load(), 1u);  // f003.
}

}  // namespace
}  // namespace ckptfs
