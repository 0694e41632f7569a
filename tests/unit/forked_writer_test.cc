// Tests of how the FUSE adapter tells a writer that writes from memory forked from its parent:
// the /proc facts read of real processes.
#include "fs/forked_writer.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <vector>

namespace ckptfs {
namespace {

// Runs `judge` in a child forked from this process, which holds `parent_bytes` of memory it
// touched; returns what the child judged.
bool JudgedInAForkedChild(size_t parent_bytes, bool (*judge)()) {
  std::vector<char> memory(parent_bytes);
  std::memset(memory.data(), 1, memory.size());
  int pipe_fds[2];
  if (pipe(pipe_fds) != 0) return false;
  const pid_t child = fork();
  if (child == 0) {
    const char verdict = judge() ? 1 : 0;
    _exit(write(pipe_fds[1], &verdict, 1) == 1 ? 0 : 1);
  }
  close(pipe_fds[1]);
  char verdict = 2;
  const bool read_one = read(pipe_fds[0], &verdict, 1) == 1;
  close(pipe_fds[0]);
  int status = 0;
  waitpid(child, &status, 0);
  EXPECT_TRUE(read_one && WIFEXITED(status) && WEXITSTATUS(status) == 0);
  EXPECT_NE(memory[parent_bytes / 2], 0);
  return verdict == 1;
}

TEST(ForkedWriterTest, AChildForkedFromALargeParentWritesForkedMemory) {
  EXPECT_TRUE(JudgedInAForkedChild(256 << 20, [] {
    const std::optional<policy::WriterProcess> facts = ReadWriterProcess(gettid());
    return facts && facts->forked_without_exec &&
           facts->parent_anon_bytes >= (256u << 20) && facts->anon_bytes >= (256u << 20);
  }));
  EXPECT_TRUE(JudgedInAForkedChild(256 << 20, [] {
    ForkedWriters writers;
    return writers.WritesForkedMemory(gettid()) && writers.WritesForkedMemory(gettid());
  }));
}

TEST(ForkedWriterTest, ThisProcessAndAChildOfASmallParentDoNot) {
  ForkedWriters writers;
  EXPECT_FALSE(writers.WritesForkedMemory(gettid())) << "the test binary was exec'd";
  EXPECT_FALSE(JudgedInAForkedChild(1 << 20, [] {
    return ForkedWriters().WritesForkedMemory(gettid());
  })) << "too little memory to share";
  EXPECT_FALSE(writers.WritesForkedMemory(0));
  EXPECT_FALSE(ReadWriterProcess(-1).has_value());
}

}  // namespace
}  // namespace ckptfs
