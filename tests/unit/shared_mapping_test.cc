// SharedMapping: a file's range mapped shared is the file's memory in every mapping of it,
// anonymous memory is zeroed, and each mapping is unmapped exactly when its owner goes (a
// released one stays).
#include "iouring/shared_mapping.h"

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <utility>

namespace ckptfs {
namespace {

const size_t kPage = static_cast<size_t>(sysconf(_SC_PAGESIZE));

// Whether [data, data + size) is mapped in this process (msync fails with ENOMEM where not).
bool Mapped(const char* data, size_t size) {
  return msync(const_cast<char*>(data), size, MS_ASYNC) == 0;
}

// A memfd of `pages` zeroed pages, closed at the end of the test.
class MemoryFile {
 public:
  explicit MemoryFile(size_t pages) : fd_(memfd_create("shared_mapping_test", MFD_CLOEXEC)) {
    EXPECT_GE(fd_, 0) << std::strerror(errno);
    EXPECT_EQ(ftruncate(fd_, static_cast<off_t>(pages * kPage)), 0) << std::strerror(errno);
  }
  ~MemoryFile() { close(fd_); }
  int fd() const { return fd_; }

 private:
  const int fd_;
};

TEST(SharedMappingTest, TwoMappingsOfAFileRangeAreTheFilesMemory) {
  MemoryFile file(2);
  Result<SharedMapping> a =
      SharedMapping::OfFile(file.fd(), kPage, kPage, SharedMapping::Access::kReadWrite, "a");
  Result<SharedMapping> b =
      SharedMapping::OfFile(file.fd(), kPage, kPage, SharedMapping::Access::kReadOnly, "b");
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_EQ(a->size(), kPage);
  EXPECT_NE(a->data(), b->data());
  std::memcpy(a->data() + 10, "shared", 6);
  EXPECT_EQ(std::string(b->data() + 10, 6), "shared");
  char back[6] = {};
  ASSERT_EQ(pread(file.fd(), back, sizeof back, static_cast<off_t>(kPage + 10)), 6);
  EXPECT_EQ(std::string(back, 6), "shared");
}

TEST(SharedMappingTest, AnonymousMemoryIsZeroedAndWritable) {
  Result<SharedMapping> m = SharedMapping::Anonymous(3 * kPage, "buffers");
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ(m->size(), 3 * kPage);
  EXPECT_EQ(std::string(m->data(), m->size()), std::string(3 * kPage, '\0'));
  m->data()[3 * kPage - 1] = 'z';
  EXPECT_EQ(m->data()[3 * kPage - 1], 'z');
}

TEST(SharedMappingTest, TheLastOwnerUnmapsAndAReleasedMappingStays) {
  Result<SharedMapping> made = SharedMapping::Anonymous(kPage, "moved");
  ASSERT_TRUE(made.ok());
  char* data = made->data();
  {
    SharedMapping moved = std::move(*made);
    EXPECT_EQ(made->data(), nullptr);
    EXPECT_EQ(moved.data(), data);
    SharedMapping assigned;
    assigned = std::move(moved);
    EXPECT_TRUE(Mapped(data, kPage));
  }
  EXPECT_FALSE(Mapped(data, kPage));

  Result<SharedMapping> kept = SharedMapping::Anonymous(kPage, "kept");
  ASSERT_TRUE(kept.ok());
  char* released = kept->Release();
  EXPECT_EQ(kept->data(), nullptr);
  EXPECT_EQ(kept->size(), 0u);
  *kept = SharedMapping();
  EXPECT_TRUE(Mapped(released, kPage));
  ASSERT_EQ(munmap(released, kPage), 0);
}

TEST(SharedMappingTest, AFailedMappingSaysWhyAndWhat) {
  Result<SharedMapping> bad =
      SharedMapping::OfFile(-1, 0, kPage, SharedMapping::Access::kReadWrite, "the record");
  EXPECT_EQ(bad.status().err(), EBADF);
  EXPECT_NE(bad.status().ToString().find("the record"), std::string::npos);
  MemoryFile file(1);
  Result<SharedMapping> unaligned =
      SharedMapping::OfFile(file.fd(), 1, kPage, SharedMapping::Access::kReadOnly, "unaligned");
  EXPECT_EQ(unaligned.status().err(), EINVAL);
}

}  // namespace
}  // namespace ckptfs
