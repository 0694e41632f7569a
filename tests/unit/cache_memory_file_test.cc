// Tests of the cache memory file (fs/cache_memory_file.h): one per backing store, this user's
// alone, held by one live mount at a time, found again by the next mount when not empty.
#include "core/recovery/cache_memory_layout.h"
#include "fs/cache_memory_file.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <string>
#include <thread>

#include "core/memory/arena.h"
#include "core_test_util.h"

namespace ckptfs {
namespace {

using namespace testing_util;

class CacheMemoryFileTest : public ::testing::Test {
 protected:
  Result<CacheMemoryFile> Open(const std::string& node = "") {
    return OpenCacheMemoryFile(dir_.path(), backing_.path(), node);
  }
  std::string PathOf(const std::string& node = "") const {
    struct stat st {};
    EXPECT_EQ(stat(backing_.path().c_str(), &st), 0);
    return dir_ / CacheMemoryFileName(st, node);
  }

  TempDir dir_;
  TempDir backing_;
};

TEST_F(CacheMemoryFileTest, AMountThatDidNotEndCleanlyLeavesItsFileToTheNextOne) {
  Result<CacheMemoryFile> first = Open();
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  EXPECT_FALSE(first->left_by_earlier_mount);
  struct stat st {};
  ASSERT_EQ(fstat(first->fd, &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  EXPECT_EQ(first->path, PathOf());
  EXPECT_EQ(Open().status().err(), EBUSY) << "held by a live mount";
  ASSERT_TRUE(SizeCacheMemoryFile(*first, 16ull << 20).ok());
  ASSERT_EQ(fstat(first->fd, &st), 0);
  EXPECT_EQ(static_cast<uint64_t>(st.st_size), ArenaMemoryBytes(16ull << 20));
  // The mount dies: its last process goes while the next mount waits for the lock.
  std::thread going([fd = first->fd] {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    close(fd);
  });
  Result<CacheMemoryFile> next = Open();
  going.join();
  ASSERT_TRUE(next.ok()) << next.status().ToString();
  EXPECT_TRUE(next->left_by_earlier_mount);
  RemoveCacheMemoryFile(*next);  // It ended cleanly.
  close(next->fd);
  EXPECT_FALSE(HostExists(PathOf()));
}

TEST_F(CacheMemoryFileTest, EachNodeOfASharedBackingStoreHasItsOwn) {
  Result<CacheMemoryFile> a = Open("node-a");
  Result<CacheMemoryFile> b = Open("node-b");
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_NE(a->path, b->path);
  EXPECT_EQ(b->path, PathOf("node-b"));
  close(a->fd);
  close(b->fd);
}

TEST_F(CacheMemoryFileTest, ASymlinkAFileOthersMayOpenAndADirectoryAreRefused) {
  const std::string path = PathOf();
  ASSERT_EQ(symlink((dir_ / "elsewhere").c_str(), path.c_str()), 0);
  EXPECT_EQ(Open().status().err(), ELOOP);
  EXPECT_FALSE(HostExists(dir_ / "elsewhere")) << "nothing made through the symlink";
  ASSERT_EQ(unlink(path.c_str()), 0);

  WriteHostFile(path, "");
  ASSERT_EQ(chmod(path.c_str(), 0644), 0);
  EXPECT_EQ(Open().status().err(), EPERM);
  ASSERT_EQ(unlink(path.c_str()), 0);

  ASSERT_EQ(mkdir(path.c_str(), 0700), 0);
  EXPECT_FALSE(Open().ok());
}

TEST_F(CacheMemoryFileTest, ACacheLargerThanTheRoomOfItsFilesystemIsRefused) {
  Result<CacheMemoryFile> file = Open();
  ASSERT_TRUE(file.ok());
  EXPECT_EQ(SizeCacheMemoryFile(*file, 1ull << 60).err(), ENOSPC);
  close(file->fd);
}

TEST_F(CacheMemoryFileTest, AFileThatReplacedItAtItsPathIsNotRemoved) {
  Result<CacheMemoryFile> file = Open();
  ASSERT_TRUE(file.ok());
  ASSERT_EQ(unlink(file->path.c_str()), 0);
  WriteHostFile(file->path, "another");
  RemoveCacheMemoryFile(*file);
  EXPECT_EQ(*ReadHostFile(file->path), "another");
  close(file->fd);
}

}  // namespace
}  // namespace ckptfs
