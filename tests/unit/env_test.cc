// Tests of the io_uring and POSIX Envs against real files, and of EnvWrapper and FaultInjectingEnv
// wrapped around each of them. File contents are always checked by reading the files back.
#include "iouring/env.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <limits.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "core/base/status.h"
#include "iouring/env_wrapper.h"
#include "iouring/fault_injecting_env.h"

namespace ckptfs {
namespace {

using Bytes = std::vector<uint8_t>;

enum class Kind { kUring, kPosix };

// Queue depth of the Envs under test: small, so that most tests overflow it.
constexpr unsigned kDepth = 8;

// `size` bytes of a deterministic stream chosen by `seed`.
Bytes Pattern(uint64_t seed, size_t size) {
  Bytes bytes(size);
  uint64_t x = (seed + 1) * 0x9E3779B97F4A7C15ull;
  for (size_t i = 0; i < size; ++i) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    bytes[i] = static_cast<uint8_t>(x >> 24);
  }
  return bytes;
}

// Cuts `data` into iovecs whose lengths cycle through `lengths` (zero lengths included); at least
// one length must be positive.
std::vector<iovec> Slice(Bytes& data, const std::vector<size_t>& lengths) {
  std::vector<iovec> iov;
  size_t pos = 0;
  for (size_t i = 0; pos < data.size(); ++i) {
    size_t len = std::min(lengths[i % lengths.size()], data.size() - pos);
    iov.push_back({data.data() + pos, len});
    pos += len;
  }
  return iov;
}

// Records in `image` that `data` was written at `offset`; holes stay zero.
void Put(Bytes& image, uint64_t offset, const Bytes& data) {
  if (image.size() < offset + data.size()) image.resize(offset + data.size());
  std::copy(data.begin(), data.end(), image.begin() + static_cast<ptrdiff_t>(offset));
}

// The whole content of the file at `path`.
Bytes ReadFile(const std::string& path) {
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    ADD_FAILURE() << "open " << path << ": " << std::strerror(errno);
    return {};
  }
  struct stat st {};
  EXPECT_EQ(fstat(fd, &st), 0) << std::strerror(errno);
  Bytes bytes(static_cast<size_t>(st.st_size));
  size_t done = 0;
  while (done < bytes.size()) {
    ssize_t n = pread(fd, bytes.data() + done, bytes.size() - done, static_cast<off_t>(done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      ADD_FAILURE() << "pread " << path << ": " << (n < 0 ? std::strerror(errno) : "eof");
      break;
    }
    done += static_cast<size_t>(n);
  }
  close(fd);
  return bytes;
}

::testing::AssertionResult SameBytes(const Bytes& actual, const Bytes& expected) {
  size_t common = std::min(actual.size(), expected.size());
  auto mismatch = std::mismatch(actual.begin(), actual.begin() + static_cast<ptrdiff_t>(common),
                                expected.begin());
  if (mismatch.first != actual.begin() + static_cast<ptrdiff_t>(common)) {
    size_t at = static_cast<size_t>(mismatch.first - actual.begin());
    return ::testing::AssertionFailure() << "first difference at byte " << at << ": got "
                                         << int{actual[at]} << ", want " << int{expected[at]};
  }
  if (actual.size() != expected.size()) {
    return ::testing::AssertionFailure()
           << "size " << actual.size() << ", want " << expected.size();
  }
  return ::testing::AssertionSuccess();
}

void ExpectAllOk(const std::vector<Status>& results) {
  for (size_t i = 0; i < results.size(); ++i) {
    EXPECT_TRUE(results[i].ok()) << "request " << i << ": " << results[i].ToString();
  }
}

// Lowers the soft file size limit and ignores SIGXFSZ for the lifetime of the object, so that a
// write crossing the limit is cut short and the next one fails with EFBIG.
class FileSizeLimit {
 public:
  explicit FileSizeLimit(rlim_t limit) {
    EXPECT_EQ(getrlimit(RLIMIT_FSIZE, &saved_), 0) << std::strerror(errno);
    rlimit lowered = saved_;
    lowered.rlim_cur = std::min(limit, saved_.rlim_max);
    EXPECT_EQ(setrlimit(RLIMIT_FSIZE, &lowered), 0) << std::strerror(errno);
    saved_handler_ = signal(SIGXFSZ, SIG_IGN);
  }
  ~FileSizeLimit() {
    signal(SIGXFSZ, saved_handler_);
    setrlimit(RLIMIT_FSIZE, &saved_);
  }

  FileSizeLimit(const FileSizeLimit&) = delete;
  FileSizeLimit& operator=(const FileSizeLimit&) = delete;

 private:
  rlimit saved_{};
  sighandler_t saved_handler_ = SIG_DFL;
};

std::string KindName(const ::testing::TestParamInfo<Kind>& info) {
  return info.param == Kind::kUring ? "Uring" : "Posix";
}

// Runs each test against a fresh Env of the parameter's kind (depth kDepth) in a fresh
// temporary directory. The io_uring case is skipped, with the reason, where io_uring is unusable.
class EnvTest : public ::testing::TestWithParam<Kind> {
 protected:
  void SetUp() override {
    if (GetParam() == Kind::kUring) {
      Status why_not;
      env_ = MakeUringEnv(kDepth, &why_not);
      if (env_ == nullptr) GTEST_SKIP() << "io_uring unavailable: " << why_not.ToString();
    } else {
      env_ = MakePosixEnv();
    }
    std::string dir = ::testing::TempDir() + "ckptfs_env_test.XXXXXX";
    ASSERT_NE(mkdtemp(dir.data()), nullptr) << std::strerror(errno);
    dir_ = dir;
  }

  void TearDown() override {
    for (int fd : fds_) close(fd);
    std::error_code ignored;
    if (!dir_.empty()) std::filesystem::remove_all(dir_, ignored);
  }

  // A descriptor of the test directory, closed at the end of the test.
  int DirFd() {
    int fd = open(dir_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    EXPECT_GE(fd, 0) << std::strerror(errno);
    if (fd >= 0) fds_.push_back(fd);
    return fd;
  }

  std::string Path(const std::string& name) const { return dir_ + "/" + name; }

  // Creates (or truncates) `name` in the test directory and returns an fd open with `flags`.
  int Create(const std::string& name, int flags = O_RDWR) {
    std::string path = Path(name);
    int fd = open(path.c_str(), flags | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    EXPECT_GE(fd, 0) << "open " << path << ": " << std::strerror(errno);
    if (fd >= 0) fds_.push_back(fd);
    return fd;
  }

  // Appends to `requests` one request per buffer of `buffers`, writing them back to back into
  // `fd` from `offset` as iovecs cut by `lengths`.
  static void AddBackToBack(int fd, uint64_t offset, std::vector<Bytes>& buffers,
                            const std::vector<size_t>& lengths,
                            std::vector<WriteRequest>* requests) {
    for (Bytes& buffer : buffers) {
      requests->push_back(WriteRequest{fd, offset, Slice(buffer, lengths)});
      offset += buffer.size();
    }
  }

  std::unique_ptr<Env> env_;

 private:
  std::string dir_;
  std::vector<int> fds_;
};

INSTANTIATE_TEST_SUITE_P(Envs, EnvTest, ::testing::Values(Kind::kUring, Kind::kPosix),
                         KindName);

TEST_P(EnvTest, NameMatchesKind) {
  EXPECT_EQ(env_->Name(), GetParam() == Kind::kUring ? "io_uring" : "posix");
}

TEST_P(EnvTest, EmptyCallsAndZeroLengthRequestsSucceed) {
  EXPECT_TRUE(env_->Write({}).empty());
  EXPECT_TRUE(env_->Sync({}, true).empty());

  int fd = Create("empty");
  Bytes data(10);
  std::vector<WriteRequest> requests = {
      WriteRequest{fd, 0, {}},
      WriteRequest{fd, 4096, {iovec{data.data(), 0}, iovec{data.data() + 5, 0}}},
  };
  std::vector<Status> results = env_->Write(requests);
  ASSERT_EQ(results.size(), 2u);
  ExpectAllOk(results);
  EXPECT_TRUE(SameBytes(ReadFile(Path("empty")), {}));
}

TEST_P(EnvTest, ThousandRequestsThroughDepthEight) {
  constexpr int kFiles = 7;
  constexpr int kRequests = 1000;
  std::vector<int> fds;
  for (int f = 0; f < kFiles; ++f) fds.push_back(Create("file" + std::to_string(f)));
  std::vector<Bytes> images(kFiles);
  std::vector<Bytes> buffers;
  buffers.reserve(kRequests);
  std::vector<WriteRequest> requests;
  for (int r = 0; r < kRequests; ++r) {
    int f = r % kFiles;
    buffers.push_back(Pattern(r, 1 + (r * 37) % 5000));
    uint64_t offset = images[f].size();
    Put(images[f], offset, buffers.back());
    requests.push_back(WriteRequest{fds[f], offset, Slice(buffers.back(), {100, 0, 1000, 7})});
  }

  std::vector<Status> results = env_->Write(requests);
  ASSERT_EQ(results.size(), requests.size());
  ExpectAllOk(results);
  for (int f = 0; f < kFiles; ++f) {
    EXPECT_TRUE(SameBytes(ReadFile(Path("file" + std::to_string(f))), images[f])) << "file " << f;
  }
}

TEST_P(EnvTest, RequestsWithMoreThanIovMaxIovecs) {
  int fd = Create("iovecs");
  Bytes image;
  // About 7000 iovecs of mixed lengths, some empty.
  Bytes mixed = Pattern(1, 1'500'000);
  std::vector<iovec> mixed_iov = Slice(mixed, {1, 0, 513, 64, 700, 3});
  ASSERT_GT(mixed_iov.size(), 3u * IOV_MAX);
  // Exactly IOV_MAX and IOV_MAX + 1 iovecs.
  Bytes exact = Pattern(2, 3 * size_t{IOV_MAX});
  Bytes one_more = Pattern(3, 3 * (size_t{IOV_MAX} + 1));
  std::vector<WriteRequest> requests = {
      WriteRequest{fd, 4096 + 5, std::move(mixed_iov)},
      WriteRequest{fd, 2'000'000, Slice(exact, {3})},
      WriteRequest{fd, 3'000'000, Slice(one_more, {3})},
  };
  ASSERT_EQ(requests[1].iov.size(), static_cast<size_t>(IOV_MAX));
  ASSERT_EQ(requests[2].iov.size(), static_cast<size_t>(IOV_MAX) + 1);
  Put(image, 4096 + 5, mixed);
  Put(image, 2'000'000, exact);
  Put(image, 3'000'000, one_more);

  std::vector<Status> results = env_->Write(requests);
  ASSERT_EQ(results.size(), requests.size());
  ExpectAllOk(results);
  EXPECT_TRUE(SameBytes(ReadFile(Path("iovecs")), image));
}

TEST_P(EnvTest, LargeMultiIovecWrite) {
  constexpr size_t kMiB = 1 << 20;
  int fd = Create("large");
  Bytes data = Pattern(4, 32 * kMiB + 12345);
  std::vector<WriteRequest> requests = {WriteRequest{fd, 0, Slice(data, {4 * kMiB, 1, kMiB})}};
  std::vector<Status> results = env_->Write(requests);
  ASSERT_EQ(results.size(), 1u);
  ExpectAllOk(results);
  EXPECT_TRUE(SameBytes(ReadFile(Path("large")), data));
}

TEST_P(EnvTest, WritesAtOffsetsWithHoles) {
  int fd = Create("holes");
  std::vector<Bytes> buffers = {Pattern(5, 100), Pattern(6, 5000), Pattern(7, 1), Pattern(8, 4096)};
  std::vector<uint64_t> offsets = {0, (1 << 20) + 3, (10 << 20) + 7, 8192};
  std::vector<WriteRequest> requests;
  Bytes image;
  for (size_t i = 0; i < buffers.size(); ++i) {
    requests.push_back(WriteRequest{fd, offsets[i], Slice(buffers[i], {333})});
    Put(image, offsets[i], buffers[i]);
  }
  std::vector<Status> results = env_->Write(requests);
  ASSERT_EQ(results.size(), requests.size());
  ExpectAllOk(results);
  EXPECT_TRUE(SameBytes(ReadFile(Path("holes")), image));
}

TEST_P(EnvTest, ManyCallsOnOneEnv) {
  int fd = Create("calls");
  Bytes image;
  std::vector<Bytes> buffers;
  buffers.reserve(size_t{300} * 3);
  for (int call = 0; call < 300; ++call) {
    std::vector<WriteRequest> requests;
    for (int i = 0; i < 3; ++i) {
      buffers.push_back(Pattern(call * 3 + i, 97));
      uint64_t offset = static_cast<uint64_t>(call * 3 + i) * 97;
      requests.push_back(WriteRequest{fd, offset, Slice(buffers.back(), {50})});
      Put(image, offset, buffers.back());
    }
    std::vector<Status> results = env_->Write(requests);
    ASSERT_EQ(results.size(), 3u);
    ExpectAllOk(results);
    if (call % 50 == 0) ExpectAllOk(env_->Sync(std::vector<int>{fd}, call % 100 == 0));
  }
  EXPECT_TRUE(SameBytes(ReadFile(Path("calls")), image));
}

TEST_P(EnvTest, SyncsManyFds) {
  constexpr int kFiles = 100;
  std::vector<int> fds;
  std::vector<Bytes> buffers;
  std::vector<WriteRequest> requests;
  buffers.reserve(kFiles);
  for (int f = 0; f < kFiles; ++f) {
    fds.push_back(Create("sync" + std::to_string(f)));
    buffers.push_back(Pattern(100 + f, 1000 + f));
    requests.push_back(WriteRequest{fds.back(), 0, Slice(buffers.back(), {4096})});
  }
  ExpectAllOk(env_->Write(requests));

  std::vector<Status> data_only = env_->Sync(fds, true);
  ASSERT_EQ(data_only.size(), fds.size());
  ExpectAllOk(data_only);
  std::vector<int> twice = fds;
  twice.insert(twice.end(), fds.begin(), fds.end());
  std::vector<Status> full = env_->Sync(twice, false);
  ASSERT_EQ(full.size(), twice.size());
  ExpectAllOk(full);
  for (int f = 0; f < kFiles; ++f) {
    EXPECT_TRUE(SameBytes(ReadFile(Path("sync" + std::to_string(f))), buffers[f])) << f;
  }
}

TEST_P(EnvTest, BadFdFailsOnlyItsOwnRequest) {
  int good = Create("good");
  int read_only = Create("read_only", O_RDONLY);
  constexpr int kNeverOpen = 1 << 30;
  std::vector<Bytes> buffers = {Pattern(9, 3000), Pattern(10, 3000), Pattern(11, 3000),
                                Pattern(12, 3000), Pattern(13, 3000)};
  std::vector<WriteRequest> requests = {
      WriteRequest{good, 0, Slice(buffers[0], {1000})},
      WriteRequest{-1, 0, Slice(buffers[1], {1000})},
      WriteRequest{good, 3000, Slice(buffers[2], {1000})},
      WriteRequest{read_only, 0, Slice(buffers[3], {1000})},
      WriteRequest{kNeverOpen, 0, Slice(buffers[4], {1000})},
  };
  std::vector<Status> results = env_->Write(requests);
  ASSERT_EQ(results.size(), requests.size());
  EXPECT_TRUE(results[0].ok()) << results[0].ToString();
  EXPECT_EQ(results[1].err(), EBADF) << results[1].ToString();
  EXPECT_TRUE(results[2].ok()) << results[2].ToString();
  EXPECT_EQ(results[3].err(), EBADF) << results[3].ToString();
  EXPECT_EQ(results[4].err(), EBADF) << results[4].ToString();
  EXPECT_NE(results[1].message().find("fd -1"), std::string::npos) << results[1].message();

  Bytes image;
  Put(image, 0, buffers[0]);
  Put(image, 3000, buffers[2]);
  EXPECT_TRUE(SameBytes(ReadFile(Path("good")), image));
  EXPECT_TRUE(SameBytes(ReadFile(Path("read_only")), {}));

  for (bool data_only : {true, false}) {
    std::vector<Status> synced = env_->Sync(std::vector<int>{good, -1, read_only}, data_only);
    ASSERT_EQ(synced.size(), 3u);
    EXPECT_TRUE(synced[0].ok()) << synced[0].ToString();
    EXPECT_EQ(synced[1].err(), EBADF) << synced[1].ToString();
    EXPECT_TRUE(synced[2].ok()) << synced[2].ToString();
  }
}

TEST_P(EnvTest, DeviceWithoutSpaceReportsEnospc) {
  int full = open("/dev/full", O_WRONLY | O_CLOEXEC);
  if (full < 0) GTEST_SKIP() << "/dev/full: " << std::strerror(errno);
  int good = Create("beside_full");
  Bytes a = Pattern(14, 5000);
  Bytes b = Pattern(15, 5000);
  std::vector<WriteRequest> requests = {WriteRequest{full, 0, Slice(a, {4096})},
                                        WriteRequest{good, 0, Slice(b, {4096})}};
  std::vector<Status> results = env_->Write(requests);
  close(full);
  ASSERT_EQ(results.size(), 2u);
  EXPECT_EQ(results[0].err(), ENOSPC) << results[0].ToString();
  EXPECT_TRUE(results[1].ok()) << results[1].ToString();
  EXPECT_TRUE(SameBytes(ReadFile(Path("beside_full")), b));
}

TEST_P(EnvTest, ShortWriteIsContinuedUntilTheRealError) {
  constexpr rlim_t kLimit = (1 << 20) + 100;
  int capped = Create("capped");
  int small = Create("small");
  Bytes big = Pattern(16, 2 << 20);
  Bytes little = Pattern(17, 1000);
  std::vector<WriteRequest> requests = {WriteRequest{capped, 0, Slice(big, {700'000})},
                                        WriteRequest{small, 0, Slice(little, {10})}};
  std::vector<Status> results;
  {
    FileSizeLimit limit(kLimit);
    results = env_->Write(requests);
  }
  ASSERT_EQ(results.size(), 2u);
  EXPECT_EQ(results[0].err(), EFBIG) << results[0].ToString();
  EXPECT_TRUE(results[1].ok()) << results[1].ToString();
  EXPECT_TRUE(SameBytes(ReadFile(Path("capped")), Bytes(big.begin(), big.begin() + kLimit)));
  EXPECT_TRUE(SameBytes(ReadFile(Path("small")), little));
}

TEST_P(EnvTest, NamespaceCallsChangeTheDirectoryAsTheirSystemCallsDo) {
  int dir = DirFd();
  ASSERT_TRUE(env_->Mkdir(dir, "sub", 0750).ok());
  EXPECT_EQ(env_->Mkdir(dir, "sub", 0750).err(), EEXIST);
  Result<int> sub = env_->Open(dir, "sub", O_RDONLY | O_DIRECTORY | O_NOFOLLOW);
  ASSERT_TRUE(sub.ok()) << sub.status().ToString();
  Result<int> file = env_->Open(*sub, "a", O_CREAT | O_RDWR | O_NOFOLLOW, 0600);
  ASSERT_TRUE(file.ok()) << file.status().ToString();
  ASSERT_TRUE(env_->WriteAt(*file, "hello", 5, 0).ok());
  env_->Close(*file);
  ASSERT_TRUE(env_->Link(*sub, "a", dir, "b").ok());
  ASSERT_TRUE(env_->Symlink("sub/a", dir, "c").ok());
  Result<std::string> target = env_->ReadLink(dir, "c");
  ASSERT_TRUE(target.ok());
  EXPECT_EQ(*target, "sub/a");
  EXPECT_EQ(env_->Rename(dir, "b", dir, "c", RENAME_NOREPLACE).err(), EEXIST);
  ASSERT_TRUE(env_->Rename(dir, "b", dir, "c").ok());
  struct stat st {};
  ASSERT_TRUE(env_->Stat(dir, "c", &st).ok());
  EXPECT_TRUE(S_ISREG(st.st_mode));
  EXPECT_EQ(st.st_nlink, 2u);
  Result<std::vector<std::string>> names = env_->ListDir(dir);
  ASSERT_TRUE(names.ok());
  std::sort(names->begin(), names->end());
  EXPECT_EQ(*names, (std::vector<std::string>{"c", "sub"}));
  EXPECT_EQ(env_->Unlink(dir, "sub", /*directory=*/true).err(), ENOTEMPTY);
  ASSERT_TRUE(env_->Unlink(*sub, "a").ok());
  ASSERT_TRUE(env_->Unlink(dir, "c").ok());
  env_->Close(*sub);
  ASSERT_TRUE(env_->Unlink(dir, "sub", /*directory=*/true).ok());
  Status missing = env_->Stat(dir, "sub", &st);
  EXPECT_EQ(missing.err(), ENOENT);
  EXPECT_NE(missing.message().find("sub"), std::string::npos) << missing.ToString();
  ASSERT_TRUE(env_->Sync(std::vector<int>{dir}, /*data_only=*/false).front().ok());
  ASSERT_TRUE(env_->SyncFs(dir).ok());
  struct statvfs vfs {};
  ASSERT_TRUE(env_->StatFs(dir, &vfs).ok());
  EXPECT_GT(vfs.f_bsize, 0u);
}

TEST_P(EnvTest, FileCallsReadWriteCopyAndChangeAttributes) {
  int dir = DirFd();
  int from = Create("from");
  int to = Create("to");
  Bytes data = Pattern(90, 300'000);
  ASSERT_TRUE(env_->WriteAt(from, reinterpret_cast<const char*>(data.data()), data.size(), 0).ok());
  ASSERT_TRUE(env_->Copy(from, to, 200'000).ok());
  EXPECT_TRUE(SameBytes(ReadFile(Path("to")), Bytes(data.begin(), data.begin() + 200'000)));
  // Reads past the end give zeros.
  std::string back(10, 'x');
  ASSERT_TRUE(env_->Read(from, back.data(), back.size(), data.size() - 4).ok());
  const char* tail = reinterpret_cast<const char*>(&data[data.size() - 4]);
  EXPECT_EQ(back.substr(0, 4), std::string(tail, 4));
  EXPECT_EQ(back.substr(4), std::string(6, '\0'));
  ASSERT_TRUE(env_->Truncate(to, 10).ok());
  Status allocated = env_->Allocate(to, 0, 1 << 20);
  EXPECT_TRUE(allocated.ok() || allocated.err() == EOPNOTSUPP) << allocated.ToString();
  env_->Advise(from, 0, data.size());
  ASSERT_TRUE(env_->Chmod(to, "", 0604).ok());
  ASSERT_TRUE(env_->Chmod(dir, "from", 0640).ok());
  ASSERT_TRUE(env_->Chown(to, "", geteuid(), getegid()).ok());
  timespec times[2] = {{1000, 0}, {2000, 0}};
  ASSERT_TRUE(env_->SetTimes(dir, "to", times).ok());
  struct stat st {};
  ASSERT_TRUE(env_->Stat(to, "", &st).ok());
  EXPECT_EQ(st.st_size, allocated.ok() ? 1 << 20 : 10);  // fallocate extends the file.
  EXPECT_EQ(st.st_mode & 07777, 0604u);
  EXPECT_EQ(st.st_mtim.tv_sec, 2000);
  ASSERT_TRUE(env_->Stat(dir, "from", &st).ok());
  EXPECT_EQ(st.st_mode & 07777, 0640u);
  EXPECT_EQ(env_->Open(dir, "nothing", O_RDONLY).status().err(), ENOENT);
}

// The FUSE adapter's reads of backing files: a stat and reads of an open descriptor see the file
// as it is now, after its name is gone and after another process truncated it.
TEST_P(EnvTest, AnOpenFileIsStatedAndReadAsItIsNow) {
  int fd = Create("open");
  Bytes data = Pattern(7, 10'000);
  ASSERT_TRUE(env_->WriteAt(fd, reinterpret_cast<const char*>(data.data()), data.size(), 0).ok());
  struct stat st {};
  ASSERT_TRUE(env_->Stat(fd, "", &st).ok());
  EXPECT_EQ(st.st_size, 10'000);
  ASSERT_EQ(truncate(Path("open").c_str(), 4'000), 0) << std::strerror(errno);
  ASSERT_EQ(unlink(Path("open").c_str()), 0) << std::strerror(errno);
  ASSERT_TRUE(env_->Stat(fd, "", &st).ok());
  EXPECT_EQ(st.st_size, 4'000);
  EXPECT_EQ(st.st_nlink, 0u);
  std::string back(2'000, 'x');
  ASSERT_TRUE(env_->Read(fd, back.data(), back.size(), 3'000).ok());
  EXPECT_EQ(back.substr(0, 1'000),
            std::string(reinterpret_cast<const char*>(&data[3'000]), 1'000));
  EXPECT_EQ(back.substr(1'000), std::string(1'000, '\0'));
  EXPECT_EQ(env_->Stat(-1, "", &st).err(), EBADF);
  EXPECT_EQ(env_->Read(-1, back.data(), back.size(), 0).err(), EBADF);
}

TEST_P(EnvTest, ABatchOfReadsThroughDepthEightReadsEveryRangeAndZerosPastTheEnd) {
  int a = Create("a");
  int b = Create("b");
  Bytes bytes_a = Pattern(8, 300'000);
  Bytes bytes_b = Pattern(9, 5'000);
  for (const auto& [fd, bytes] : {std::pair{a, &bytes_a}, std::pair{b, &bytes_b}}) {
    const char* data = reinterpret_cast<const char*>(bytes->data());
    ASSERT_TRUE(env_->WriteAt(fd, data, bytes->size(), 0).ok());
  }
  // 20 ranges of a (more than the depth), one of b crossing its end, one of a bad fd.
  std::vector<std::string> buffers(22, std::string(16'384, 'x'));
  std::vector<ReadBatchRequest> requests;
  for (size_t i = 0; i < 20; ++i) {
    requests.push_back(ReadBatchRequest{a, i * 15'000, buffers[i].data(), buffers[i].size()});
  }
  requests.push_back(ReadBatchRequest{b, 4'000, buffers[20].data(), buffers[20].size()});
  requests.push_back(ReadBatchRequest{-1, 0, buffers[21].data(), buffers[21].size()});
  std::vector<Status> results = env_->ReadBatch(requests);
  ASSERT_EQ(results.size(), requests.size());
  for (size_t i = 0; i < 21; ++i) {
    SCOPED_TRACE(i);
    ASSERT_TRUE(results[i].ok()) << results[i].ToString();
  }
  EXPECT_EQ(results[21].err(), EBADF);
  for (size_t i = 0; i < 20; ++i) {
    const size_t at = i * 15'000;
    const size_t in_file = std::min<size_t>(buffers[i].size(), bytes_a.size() - at);
    EXPECT_EQ(buffers[i].substr(0, in_file),
              std::string(reinterpret_cast<const char*>(&bytes_a[at]), in_file)) << i;
    EXPECT_EQ(buffers[i].substr(in_file), std::string(buffers[i].size() - in_file, '\0')) << i;
  }
  EXPECT_EQ(buffers[20].substr(0, 1'000),
            std::string(reinterpret_cast<const char*>(&bytes_b[4'000]), 1'000));
  EXPECT_EQ(buffers[20].substr(1'000), std::string(buffers[20].size() - 1'000, '\0'));
  EXPECT_TRUE(env_->ReadBatch({}).empty());
}

TEST_P(EnvTest, ABatchOfDirectReadsReadsAnUnalignedFileToItsEnd) {
  // O_DIRECT needs aligned buffers, offsets and lengths: the last range is rounded up past the end.
  int fd = Create("direct");
  Bytes bytes = Pattern(10, (1 << 20) + 4'101);
  ASSERT_TRUE(env_->WriteAt(fd, reinterpret_cast<const char*>(bytes.data()), bytes.size(), 0).ok());
  ExpectAllOk(env_->Sync(std::vector<int>{fd}, /*data_only=*/true));
  int direct = open(Path("direct").c_str(), O_RDONLY | O_DIRECT | O_CLOEXEC);
  ASSERT_GE(direct, 0) << std::strerror(errno);
  constexpr size_t kSpan = 1 << 20;
  struct Free {
    void operator()(char* p) const { std::free(p); }
  };
  std::unique_ptr<char, Free> buffer(static_cast<char*>(std::aligned_alloc(4096, 2 * kSpan)));
  std::vector<ReadBatchRequest> requests{
      ReadBatchRequest{direct, 0, buffer.get(), kSpan},
      ReadBatchRequest{direct, kSpan, buffer.get() + kSpan, 8'192}};
  std::vector<Status> results = env_->ReadBatch(requests);
  close(direct);
  ExpectAllOk(results);
  EXPECT_EQ(std::string(buffer.get(), bytes.size()),
            std::string(reinterpret_cast<const char*>(bytes.data()), bytes.size()));
  EXPECT_EQ(std::string(buffer.get() + bytes.size(), kSpan + 8'192 - bytes.size()),
            std::string(kSpan + 8'192 - bytes.size(), '\0'));
}

// A wrapper that changes one call: unlinks fail with EROFS; everything else reaches the Env.
class NoUnlinkEnv final : public EnvWrapper {
 public:
  using EnvWrapper::EnvWrapper;
  std::vector<std::string> seen;

 protected:
  Status BeforeCall(Op op, std::initializer_list<std::string_view> names) override {
    std::string call = OpName(op);
    for (std::string_view name : names) call += " " + std::string(name);
    seen.push_back(call);
    return op == Op::kUnlink ? Status::Error(EROFS, "no unlink") : Status::Ok();
  }
};

TEST_P(EnvTest, AWrapperForwardsEveryCallItDoesNotChange) {
  int dir = DirFd();
  NoUnlinkEnv wrapper(std::move(env_));
  Env& env = wrapper;
  EXPECT_EQ(env.Name(), GetParam() == Kind::kUring ? "io_uring" : "posix");
  Result<int> fd = env.Open(dir, "a", O_CREAT | O_RDWR, 0600);
  ASSERT_TRUE(fd.ok()) << fd.status().ToString();
  Bytes data = Pattern(3, 5'000);
  std::vector<WriteRequest> requests{WriteRequest{*fd, 0, Slice(data, {5'000})}};
  ExpectAllOk(env.Write(requests));
  ExpectAllOk(env.Sync(std::vector<int>{*fd}, /*data_only=*/true));
  struct stat st {};
  ASSERT_TRUE(env.Stat(*fd, "", &st).ok());
  EXPECT_EQ(st.st_size, 5'000);
  ASSERT_TRUE(env.Rename(dir, "a", dir, "b").ok());
  EXPECT_EQ(env.Unlink(dir, "b").err(), EROFS);
  env.Close(*fd);
  EXPECT_TRUE(SameBytes(ReadFile(Path("b")), data));
  EXPECT_EQ(wrapper.seen,
            (std::vector<std::string>{"open a", "stat ", "rename a b", "unlink b", "close"}));
}

class FaultInjectionTest : public EnvTest {
 protected:
  void SetUp() override {
    EnvTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    auto counting = std::make_unique<FaultInjectingEnv>(std::move(env_));
    counting_ = counting.get();
    fault_ = std::make_unique<FaultInjectingEnv>(std::move(counting));
  }

  // The Env under test; it wraps counting_, which wraps the real Env.
  std::unique_ptr<FaultInjectingEnv> fault_;
  // Fault-free wrapper that counts what reaches the real Env.
  FaultInjectingEnv* counting_ = nullptr;
};

INSTANTIATE_TEST_SUITE_P(Envs, FaultInjectionTest,
                         ::testing::Values(Kind::kUring, Kind::kPosix), KindName);

TEST_P(FaultInjectionTest, NameShowsTheWrappedEnv) {
  std::string real = GetParam() == Kind::kUring ? "io_uring" : "posix";
  EXPECT_EQ(fault_->Name(), "fault(fault(" + real + "))");
}

TEST_P(FaultInjectionTest, KthWriteFailsWithEnospcWithoutWriting) {
  int fd = Create("enospc");
  std::vector<Bytes> buffers;
  for (int i = 0; i < 8; ++i) buffers.push_back(Pattern(20 + i, 1000));
  std::vector<WriteRequest> requests;
  AddBackToBack(fd, 0, buffers, {300}, &requests);

  fault_->FailWritesFrom(3, ENOSPC, 1);
  std::vector<Status> results = fault_->Write(requests);
  ASSERT_EQ(results.size(), 8u);
  for (size_t i = 0; i < results.size(); ++i) {
    if (i == 3) continue;
    EXPECT_TRUE(results[i].ok()) << i << ": " << results[i].ToString();
  }
  EXPECT_EQ(results[3].err(), ENOSPC);
  EXPECT_NE(results[3].message().find("offset 3000"), std::string::npos) << results[3].message();
  EXPECT_EQ(fault_->writes_seen(), 8u);
  EXPECT_EQ(counting_->writes_seen(), 7u);

  Bytes image;
  for (size_t i = 0; i < buffers.size(); ++i) {
    if (i != 3) Put(image, i * 1000, buffers[i]);
  }
  EXPECT_TRUE(SameBytes(ReadFile(Path("enospc")), image));

  // The fault was for one request only: writing it again succeeds.
  std::vector<Status> retried = fault_->Write(std::span(requests).subspan(3, 1));
  ASSERT_EQ(retried.size(), 1u);
  EXPECT_TRUE(retried[0].ok()) << retried[0].ToString();
  Put(image, 3000, buffers[3]);
  EXPECT_TRUE(SameBytes(ReadFile(Path("enospc")), image));
}

TEST_P(FaultInjectionTest, EioFaultSpansCalls) {
  int fd = Create("eio");
  std::vector<Bytes> buffers;
  for (int i = 0; i < 7; ++i) buffers.push_back(Pattern(30 + i, 512));
  std::vector<WriteRequest> requests;
  AddBackToBack(fd, 0, buffers, {512}, &requests);

  fault_->FailWritesFrom(2, EIO, 3);
  std::vector<Status> first = fault_->Write(std::span(requests).first(3));
  std::vector<Status> second = fault_->Write(std::span(requests).subspan(3));
  ASSERT_EQ(first.size(), 3u);
  ASSERT_EQ(second.size(), 4u);
  EXPECT_TRUE(first[0].ok());
  EXPECT_TRUE(first[1].ok());
  EXPECT_EQ(first[2].err(), EIO);
  EXPECT_EQ(second[0].err(), EIO);
  EXPECT_EQ(second[1].err(), EIO);
  EXPECT_TRUE(second[2].ok()) << second[2].ToString();
  EXPECT_TRUE(second[3].ok()) << second[3].ToString();

  Bytes image;
  for (size_t i : {0, 1, 5, 6}) Put(image, i * 512, buffers[i]);
  EXPECT_TRUE(SameBytes(ReadFile(Path("eio")), image));
}

TEST_P(FaultInjectionTest, WriteFaultLastsUntilHealed) {
  int fd = Create("until_healed");
  std::vector<Bytes> buffers = {Pattern(40, 100), Pattern(41, 100)};
  std::vector<WriteRequest> requests;
  AddBackToBack(fd, 0, buffers, {100}, &requests);

  fault_->FailWritesFrom(0, ENOSPC);
  for (int call = 0; call < 3; ++call) {
    for (const Status& status : fault_->Write(requests)) EXPECT_EQ(status.err(), ENOSPC);
  }
  EXPECT_EQ(counting_->writes_seen(), 0u);
  EXPECT_TRUE(SameBytes(ReadFile(Path("until_healed")), {}));

  fault_->Heal();
  ExpectAllOk(fault_->Write(requests));
  Bytes image;
  Put(image, 0, buffers[0]);
  Put(image, 100, buffers[1]);
  EXPECT_TRUE(SameBytes(ReadFile(Path("until_healed")), image));
  EXPECT_EQ(fault_->writes_seen(), 8u);
}

TEST_P(FaultInjectionTest, ShortWritesStillProduceCompleteFiles) {
  int fd = Create("short");
  Bytes one = Pattern(50, 1);
  Bytes two = Pattern(51, 2);
  Bytes mid = Pattern(52, 10'000);
  Bytes many = Pattern(53, 5 * (3 * size_t{IOV_MAX}));
  std::vector<WriteRequest> requests = {
      WriteRequest{fd, 0, Slice(one, {1})},
      WriteRequest{fd, 10, Slice(two, {1})},
      WriteRequest{fd, 100, Slice(mid, {1429, 0, 3})},
      WriteRequest{fd, 20'000, Slice(many, {5})},
      WriteRequest{fd, 500'000, {}},
  };
  Bytes image;
  Put(image, 0, one);
  Put(image, 10, two);
  Put(image, 100, mid);
  Put(image, 20'000, many);

  fault_->ShortWrites(true);
  std::vector<Status> results = fault_->Write(requests);
  ASSERT_EQ(results.size(), requests.size());
  ExpectAllOk(results);
  // Requests of two bytes or more reach the real Env as two pieces.
  EXPECT_EQ(counting_->writes_seen(), 1u + 2u + 2u + 2u + 1u);
  EXPECT_TRUE(SameBytes(ReadFile(Path("short")), image));
}

TEST_P(FaultInjectionTest, CorruptedWritesChangeTheFirstByteOfEachRequestAndSucceed) {
  int fd = Create("corrupt");
  Bytes a = Pattern(60, 3000);
  Bytes b = Pattern(61, 5000);
  Bytes c = Pattern(62, 700);
  fault_->CorruptWrites(2);
  std::vector<WriteRequest> requests = {WriteRequest{fd, 0, Slice(a, {1000, 0, 2000})},
                                        WriteRequest{fd, 8192, {}},
                                        WriteRequest{fd, 4096, Slice(b, {5000})}};
  ExpectAllOk(fault_->Write(requests));
  ExpectAllOk(fault_->Write(std::vector<WriteRequest>{WriteRequest{fd, 9000, Slice(c, {700})}}));
  Bytes image;
  Put(image, 0, a);
  Put(image, 4096, b);
  Put(image, 9000, c);
  image[0] = static_cast<char>(image[0] ^ 0xff);
  image[4096] = static_cast<char>(image[4096] ^ 0xff);
  EXPECT_TRUE(SameBytes(ReadFile(Path("corrupt")), image));
}

TEST_P(FaultInjectionTest, ShortWritesPassRealErrorsThrough) {
  int fd = Create("short_errors");
  Bytes a = Pattern(54, 4000);
  Bytes b = Pattern(55, 4000);
  std::vector<WriteRequest> requests = {WriteRequest{-1, 0, Slice(a, {1000})},
                                        WriteRequest{fd, 0, Slice(b, {1000})}};
  fault_->ShortWrites(true);
  std::vector<Status> results = fault_->Write(requests);
  ASSERT_EQ(results.size(), 2u);
  EXPECT_EQ(results[0].err(), EBADF) << results[0].ToString();
  EXPECT_TRUE(results[1].ok()) << results[1].ToString();
  // The failed request's second half is not attempted.
  EXPECT_EQ(counting_->writes_seen(), 3u);
  EXPECT_TRUE(SameBytes(ReadFile(Path("short_errors")), b));
}

TEST_P(FaultInjectionTest, SyncFaults) {
  std::vector<int> fds;
  for (int f = 0; f < 5; ++f) fds.push_back(Create("sync" + std::to_string(f)));

  fault_->FailSyncs(EIO, 2);
  std::vector<Status> results = fault_->Sync(fds, true);
  ASSERT_EQ(results.size(), 5u);
  EXPECT_EQ(results[0].err(), EIO);
  EXPECT_EQ(results[1].err(), EIO);
  EXPECT_NE(results[0].message().find("fdatasync fd"), std::string::npos) << results[0].message();
  for (size_t i = 2; i < results.size(); ++i) EXPECT_TRUE(results[i].ok()) << i;
  EXPECT_EQ(fault_->syncs_seen(), 5u);
  EXPECT_EQ(counting_->syncs_seen(), 3u);
  ExpectAllOk(fault_->Sync(fds, false));

  fault_->FailSyncs(ENOSPC);
  for (bool data_only : {true, false}) {
    for (const Status& status : fault_->Sync(fds, data_only)) EXPECT_EQ(status.err(), ENOSPC);
  }
  fault_->Heal();
  ExpectAllOk(fault_->Sync(fds, true));
  EXPECT_EQ(fault_->syncs_seen(), 25u);
  EXPECT_EQ(counting_->syncs_seen(), 13u);
}

TEST_P(FaultInjectionTest, HealClearsEveryFault) {
  int fd = Create("healed");
  std::vector<Bytes> buffers = {Pattern(60, 777), Pattern(61, 778)};
  std::vector<WriteRequest> requests;
  AddBackToBack(fd, 0, buffers, {100}, &requests);

  fault_->FailWritesFrom(0, ENOSPC);
  fault_->FailSyncs(EIO);
  fault_->ShortWrites(true);
  fault_->Heal();

  ExpectAllOk(fault_->Write(requests));
  ExpectAllOk(fault_->Sync(std::vector<int>{fd}, true));
  EXPECT_EQ(counting_->writes_seen(), 2u);
  EXPECT_EQ(counting_->syncs_seen(), 1u);
  Bytes image;
  Put(image, 0, buffers[0]);
  Put(image, 777, buffers[1]);
  EXPECT_TRUE(SameBytes(ReadFile(Path("healed")), image));
}

TEST_P(FaultInjectionTest, KnobsMayChangeWhileAnotherThreadWrites) {
  int fd = Create("racing");
  std::atomic<bool> stop{false};
  std::thread knobs([&] {
    for (uint64_t i = 0; !stop.load(); ++i) {
      switch (i % 4) {
        case 0:
          fault_->FailWritesFrom(i % 3, i % 2 ? EIO : ENOSPC, 2);
          break;
        case 1:
          fault_->ShortWrites(i % 8 == 1);
          break;
        case 2:
          fault_->FailSyncs(EIO, 1);
          break;
        default:
          fault_->Heal();
          break;
      }
      EXPECT_LE(fault_->syncs_seen(), fault_->writes_seen());
      std::this_thread::yield();
    }
  });

  Bytes data = Pattern(70, size_t{4} * 256);
  for (int call = 0; call < 200; ++call) {
    std::vector<WriteRequest> requests;
    for (uint64_t i = 0; i < 4; ++i) {
      requests.push_back(WriteRequest{fd, i * 256, {iovec{data.data() + i * 256, 256}}});
    }
    for (const Status& status : fault_->Write(requests)) {
      EXPECT_TRUE(status.ok() || status.err() == EIO || status.err() == ENOSPC)
          << status.ToString();
    }
    for (const Status& status : fault_->Sync(std::vector<int>{fd}, true)) {
      EXPECT_TRUE(status.ok() || status.err() == EIO) << status.ToString();
    }
  }
  stop.store(true);
  knobs.join();

  fault_->Heal();
  std::vector<WriteRequest> all = {WriteRequest{fd, 0, {iovec{data.data(), data.size()}}}};
  ExpectAllOk(fault_->Write(all));
  EXPECT_EQ(fault_->writes_seen(), 200u * 4u + 1u);
  EXPECT_EQ(fault_->syncs_seen(), 200u);
  EXPECT_TRUE(SameBytes(ReadFile(Path("racing")), data));
}

TEST_P(FaultInjectionTest, AnyCallFailsByOperationAndNameWithoutReachingTheDisk) {
  int dir = DirFd();
  Env& env = *fault_;  // Its defaults (rename flags) are the interface's.
  fault_->Inject(FaultInjectingEnv::Fault(Env::Op::kRename, EXDEV).Named("latest"));
  fault_->Inject(FaultInjectingEnv::Fault(Env::Op::kMkdir, ENOSPC));
  ASSERT_TRUE(env.WriteAt(Create("a"), "1", 1, 0).ok());
  ASSERT_TRUE(env.Rename(dir, "a", dir, "b").ok());
  Status renamed = env.Rename(dir, "b", dir, "latest");
  EXPECT_EQ(renamed.err(), EXDEV);
  EXPECT_NE(renamed.message().find("(injected)"), std::string::npos) << renamed.ToString();
  EXPECT_NE(renamed.message().find("latest"), std::string::npos) << renamed.ToString();
  EXPECT_EQ(env.Mkdir(dir, "d", 0700).err(), ENOSPC);
  struct stat st {};
  EXPECT_EQ(stat(Path("d").c_str(), &st), -1);
  EXPECT_EQ(stat(Path("latest").c_str(), &st), -1);
  EXPECT_EQ(stat(Path("b").c_str(), &st), 0);
  EXPECT_EQ(fault_->calls(Env::Op::kRename), 2u);
  EXPECT_EQ(counting_->calls(Env::Op::kRename), 1u);
  EXPECT_EQ(counting_->calls(Env::Op::kMkdir), 0u);
  fault_->Heal();
  ASSERT_TRUE(env.Rename(dir, "b", dir, "latest").ok());
  ASSERT_TRUE(env.Mkdir(dir, "d", 0700).ok());
}

TEST_P(FaultInjectionTest, AFaultSkipsItsFirstCallsAndLastsItsCount) {
  int dir = DirFd();
  fault_->Inject(FaultInjectingEnv::Fault(Env::Op::kStat, EIO).After(2).Times(2));
  std::vector<int> errs;
  for (int i = 0; i < 6; ++i) {
    struct stat st {};
    errs.push_back(fault_->Stat(dir, "", &st).err());
  }
  EXPECT_EQ(errs, (std::vector<int>{0, 0, EIO, EIO, 0, 0}));
  EXPECT_EQ(counting_->calls(Env::Op::kStat), 4u);
}

TEST_P(FaultInjectionTest, ADelayedCallWaitsAndThenRuns) {
  int dir = DirFd();
  constexpr auto kDelay = std::chrono::milliseconds(50);
  fault_->Inject(FaultInjectingEnv::Fault(Env::Op::kMkdir, 0).Delayed(kDelay).Times(1));
  auto start = std::chrono::steady_clock::now();
  ASSERT_TRUE(fault_->Mkdir(dir, "slow", 0700).ok());
  EXPECT_GE(std::chrono::steady_clock::now() - start, kDelay);
  struct stat st {};
  EXPECT_EQ(stat(Path("slow").c_str(), &st), 0);
}

TEST_P(FaultInjectionTest, ReadsAndStatsOfAnOpenFileFailWithoutReachingTheDisk) {
  int fd = Create("open");
  ASSERT_TRUE(fault_->WriteAt(fd, "abc", 3, 0).ok());
  fault_->Inject(FaultInjectingEnv::Fault(Env::Op::kRead, EIO).Times(1));
  fault_->Inject(FaultInjectingEnv::Fault(Env::Op::kStat, EIO).Times(1));
  std::string back(3, 'x');
  EXPECT_EQ(fault_->Read(fd, back.data(), back.size(), 0).err(), EIO);
  EXPECT_EQ(back, "xxx");
  struct stat st {};
  EXPECT_EQ(fault_->Stat(fd, "", &st).err(), EIO);
  EXPECT_EQ(counting_->calls(Env::Op::kRead), 0u);
  EXPECT_EQ(counting_->calls(Env::Op::kStat), 0u);
  ASSERT_TRUE(fault_->Read(fd, back.data(), back.size(), 0).ok());
  EXPECT_EQ(back, "abc");
  ASSERT_TRUE(fault_->Stat(fd, "", &st).ok());
  EXPECT_EQ(st.st_size, 3);
}

TEST_P(FaultInjectionTest, AReadOfABatchFailsAloneWithoutReachingTheDisk) {
  int fd = Create("batch");
  ASSERT_TRUE(fault_->WriteAt(fd, "abcdef", 6, 0).ok());
  fault_->Inject(FaultInjectingEnv::Fault(Env::Op::kRead, EIO).After(1).Times(1));
  std::string first(3, 'x');
  std::string second(3, 'x');
  std::string third(3, 'x');
  std::vector<ReadBatchRequest> requests{ReadBatchRequest{fd, 0, first.data(), 3},
                                         ReadBatchRequest{fd, 3, second.data(), 3},
                                         ReadBatchRequest{fd, 3, third.data(), 3}};
  std::vector<Status> results = fault_->ReadBatch(requests);
  ASSERT_EQ(results.size(), 3u);
  EXPECT_TRUE(results[0].ok()) << results[0].ToString();
  EXPECT_EQ(results[1].err(), EIO);
  EXPECT_TRUE(results[2].ok()) << results[2].ToString();
  EXPECT_EQ(first, "abc");
  EXPECT_EQ(second, "xxx");
  EXPECT_EQ(third, "def");
  EXPECT_EQ(fault_->calls(Env::Op::kRead), 3u);
  EXPECT_EQ(counting_->calls(Env::Op::kRead), 2u);
}

TEST(MakeUringEnvTest, RejectsZeroQueueDepth) {
  Status why_not;
  EXPECT_EQ(MakeUringEnv(0, &why_not), nullptr);
  EXPECT_EQ(why_not.err(), EINVAL) << why_not.ToString();
}

TEST(MakeUringEnvTest, RejectsQueueDepthBeyondTheKernelLimit) {
  Status why_not;
  if (MakeUringEnv(kDepth, &why_not) == nullptr) {
    GTEST_SKIP() << "io_uring unavailable: " << why_not.ToString();
  }
  EXPECT_EQ(MakeUringEnv(1u << 20, &why_not), nullptr);
  EXPECT_EQ(why_not.err(), EINVAL) << why_not.ToString();
  EXPECT_NE(why_not.message().find("io_uring_queue_init"), std::string::npos);
}

TEST(MakeBestEnvTest, FallsBackToPosixOnlyWithAReason) {
  Status why_not;
  bool uring_usable = MakeUringEnv(64, &why_not) != nullptr;
  Status fallback_reason;
  std::unique_ptr<Env> env = MakeBestEnv(64, &fallback_reason);
  ASSERT_NE(env, nullptr);
  if (uring_usable) {
    EXPECT_EQ(env->Name(), "io_uring");
    EXPECT_TRUE(fallback_reason.ok()) << fallback_reason.ToString();
  } else {
    EXPECT_EQ(env->Name(), "posix");
    EXPECT_EQ(fallback_reason.err(), why_not.err()) << fallback_reason.ToString();
  }

  std::unique_ptr<Env> posix = MakeBestEnv(0, &fallback_reason);
  ASSERT_NE(posix, nullptr);
  EXPECT_EQ(posix->Name(), "posix");
  EXPECT_EQ(fallback_reason.err(), EINVAL) << fallback_reason.ToString();
}

}  // namespace
}  // namespace ckptfs
