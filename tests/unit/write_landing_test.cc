// Tests of write landing: requests as the kernel queues them (one whole request per read), here
// through a pipe, read so that a WRITE's payload lands in cache blocks and any other request
// reads as one read(2) would have read it.
#include "fs/write_landing.h"

#include <gtest/gtest.h>
#include <fcntl.h>
#include <linux/fuse.h>
#include <unistd.h>

#include <cstring>
#include <string>
#include <vector>

namespace ckptfs {
namespace {

// libfuse's is max_write and a page; a pipe holds at most 1 MiB unprivileged.
constexpr size_t kLibfuseBuffer = (512u << 10) + 4096;

std::string Pattern(size_t size, char seed) {
  std::string s(size, '\0');
  for (size_t i = 0; i < size; ++i) s[i] = static_cast<char>(seed + i * 7 + (i >> 12));
  return s;
}

std::string WriteRequest(uint64_t offset, const std::string& payload) {
  fuse_in_header in{};
  fuse_write_in write{};
  in.opcode = FUSE_WRITE;
  in.unique = 42;
  in.len = static_cast<uint32_t>(sizeof in + sizeof write + payload.size());
  write.offset = offset;
  write.size = static_cast<uint32_t>(payload.size());
  std::string request(reinterpret_cast<const char*>(&in), sizeof in);
  request.append(reinterpret_cast<const char*>(&write), sizeof write);
  return request + payload;
}

class WriteLandingTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(pipe(fds_), 0);
    ASSERT_GE(fcntl(fds_[1], F_SETPIPE_SZ, 1 << 20), static_cast<int>(kLibfuseBuffer));
  }
  void TearDown() override {
    StopWriteLanding();
    close(fds_[0]);
    close(fds_[1]);
    EXPECT_EQ(arena_.used_blocks(), 0u) << "blocks held after the landing stopped";
    EXPECT_EQ(arena_.held_ahead_blocks(), 0u);
  }
  // Queues `request` and reads it as the session would; the bytes read.
  ssize_t Serve(const std::string& request) {
    EXPECT_EQ(write(fds_[1], request.data(), request.size()),
              static_cast<ssize_t>(request.size()));
    return ReadLandingWrites(fds_[0], buffer_.data(), buffer_.size());
  }
  const char* Payload() const { return buffer_.data() + sizeof(fuse_in_header) + sizeof(fuse_write_in); }
  static std::string Bytes(const LandedBytes& landed) {
    std::string out(landed.size, '\0');
    landed.CopyTo(out.data());
    return out;
  }

  int fds_[2] = {-1, -1};
  Arena arena_{256ull << 20};
  std::vector<char> buffer_ = std::vector<char>(kLibfuseBuffer);
};

TEST_F(WriteLandingTest, AWritesPayloadLandsInBlocksPlacedWhereTheLastWriteEnded) {
  StartWriteLanding(arena_);
  const std::string first = Pattern(40000, 'a');
  const std::string request = WriteRequest(0, first);
  ASSERT_EQ(Serve(request), static_cast<ssize_t>(request.size()));
  EXPECT_EQ(std::memcmp(buffer_.data(), request.data(), sizeof(fuse_in_header) + sizeof(fuse_write_in)), 0)
      << "the head is not where libfuse reads it";
  EXPECT_EQ(arena_.held_ahead_blocks(), arena_.used_blocks())
      << "the blocks held ahead are not counted as such";
  LandedBytes* landed = LandedPayload(Payload());
  ASSERT_NE(landed, nullptr);
  EXPECT_EQ(landed->skip, 0u);
  EXPECT_EQ(Bytes(*landed), first);
  EXPECT_EQ(LandedPayload(Payload()), nullptr) << "handed out twice";

  // A sequential writer's next write lands in line with the file's blocks.
  const std::string second = Pattern(3 * kBlockSize, 'b');
  ASSERT_GT(Serve(WriteRequest(first.size(), second)), 0);
  landed = LandedPayload(Payload());
  ASSERT_NE(landed, nullptr);
  EXPECT_EQ(landed->skip, first.size() % kBlockSize);
  EXPECT_EQ(Bytes(*landed), second);
  EXPECT_EQ(LandedPayload(Payload() + 1), nullptr) << "handed out for another payload";
}

TEST_F(WriteLandingTest, AnotherRequestReadsWholeBehindItsHead) {
  StartWriteLanding(arena_);
  fuse_in_header in{};
  in.opcode = FUSE_SETXATTR;
  const std::string body = Pattern(70000, 'x');
  in.len = static_cast<uint32_t>(sizeof in + body.size());
  const std::string request = std::string(reinterpret_cast<const char*>(&in), sizeof in) + body;
  ASSERT_EQ(Serve(request), static_cast<ssize_t>(request.size()));
  EXPECT_EQ(std::string(buffer_.data(), request.size()), request);
  EXPECT_EQ(LandedPayload(Payload()), nullptr);
  // A short one fits in the head.
  in.opcode = FUSE_GETATTR;
  in.len = sizeof in;
  const std::string getattr(reinterpret_cast<const char*>(&in), sizeof in);
  ASSERT_EQ(Serve(getattr), static_cast<ssize_t>(getattr.size()));
  EXPECT_EQ(std::string(buffer_.data(), getattr.size()), getattr);
}

TEST_F(WriteLandingTest, WithoutLandingOrBlocksToSpareAWriteIsReadAsBefore) {
  const std::string payload = Pattern(5000, 'p');
  const std::string request = WriteRequest(0, payload);
  ASSERT_EQ(Serve(request), static_cast<ssize_t>(request.size()));
  EXPECT_EQ(std::string(buffer_.data(), request.size()), request);
  EXPECT_EQ(LandedPayload(Payload()), nullptr);

  Arena tiny{kBlockSize * 4};
  StartWriteLanding(tiny);
  ASSERT_EQ(Serve(request), static_cast<ssize_t>(request.size()));
  EXPECT_EQ(std::string(buffer_.data(), request.size()), request) << "no blocks: read as before";
  EXPECT_EQ(LandedPayload(Payload()), nullptr);
  StopWriteLanding();
}

}  // namespace
}  // namespace ckptfs
