// S3Client against a real S3 server: moto's server mode (tests/unit/moto_server.h), started for
// this test and stopped after.
#include <gtest/gtest.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "core/backing/backing_paths.h"
#include "core/remote/remote_read_policy.h"
#include "core/remote/remote_reader.h"
#include "core/remote/remote_settings.h"
#include "core/remote/s3_client.h"
#include "core/remote/uploader.h"
#include "moto_server.h"

namespace ckptfs {
namespace {

using testing_util::FreeLoopbackPort;
using testing_util::MotoServer;

class RemoteStoreTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { server_ = new MotoServer(); }
  static void TearDownTestSuite() {
    delete server_;
    server_ = nullptr;
  }

  void SetUp() override {
    ASSERT_TRUE(server_->ready()) << "moto_server (" CKPTFS_MOTO_SERVER ") does not listen";
    endpoint_ = server_->endpoint();
    ASSERT_TRUE(server_->CreateBucket(bucket_));
    S3Settings settings{{bucket_, "run"}, endpoint_, "us-east-1",
                        {"test-key", "test-secret", "", "the test"}};
    Result<std::unique_ptr<S3Client>> client = S3Client::Make(settings);
    ASSERT_TRUE(client.ok());
    client_ = std::move(*client);
    settings_ = settings;
  }

  // A memory file holding `bytes`.
  int MemFile(const std::string& bytes) {
    int fd = memfd_create("ckptfs-remote-test", MFD_CLOEXEC);
    EXPECT_EQ(write(fd, bytes.data(), bytes.size()), static_cast<ssize_t>(bytes.size()));
    fds_.push_back(fd);
    return fd;
  }
  void TearDown() override {
    for (int fd : fds_) close(fd);
  }

  static std::string Pattern(size_t size, char seed) {
    std::string s(size, '\0');
    for (size_t i = 0; i < size; ++i) s[i] = static_cast<char>(seed + i * 131 + (i >> 20));
    return s;
  }

  static inline MotoServer* server_ = nullptr;
  std::string endpoint_;
  std::string bucket_ = "ckptfs-test";
  S3Settings settings_;
  std::unique_ptr<S3Client> client_;
  std::vector<int> fds_;
};

TEST_F(RemoteStoreTest, AnObjectPutIsReadBackEqual) {
  const std::string data = Pattern(300000, 'a');
  ASSERT_TRUE(client_->PutObject("run/a b/ü.bin", MemFile(data), 0, data.size(), nullptr).ok());
  Result<std::string> got = client_->GetObject("run/a b/ü.bin", 1 << 20, nullptr);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_TRUE(*got == data);
}

TEST_F(RemoteStoreTest, AMultipartObjectAppearsOnlyWhenCompleteAndEqualsItsFile) {
  const std::string data = Pattern(11 << 20, 'm');
  const int fd = MemFile(data);
  Result<std::string> id = client_->CreateMultipartUpload("run/big", nullptr);
  ASSERT_TRUE(id.ok()) << id.status().ToString();
  std::vector<UploadedPart> etags;
  const uint64_t part = 5 << 20;
  for (unsigned p = 0; p * part < data.size(); ++p) {
    const uint64_t size = std::min<uint64_t>(part, data.size() - p * part);
    Result<UploadedPart> etag = client_->UploadPart("run/big", *id, p + 1, fd, p * part, size,
                                                    nullptr);
    ASSERT_TRUE(etag.ok()) << etag.status().ToString();
    EXPECT_EQ(etag->crc32c.size(), 8u);
    etags.push_back(*etag);
  }
  EXPECT_EQ(etags.size(), 3u);
  Result<std::string> before = client_->GetObject("run/big", 16 << 20, nullptr);
  EXPECT_EQ(before.status().err(), ENOENT) << "a partial object is visible under the key";
  ASSERT_TRUE(client_->CompleteMultipartUpload("run/big", *id, etags, nullptr).ok());
  Result<std::string> got = client_->GetObject("run/big", 16 << 20, nullptr);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(got->size(), data.size());
  EXPECT_TRUE(*got == data);
}

TEST_F(RemoteStoreTest, APartCarriesTheCrc32cOfItsBytesAsS3WritesIt) {
  Result<std::string> id = client_->CreateMultipartUpload("run/check", nullptr);
  ASSERT_TRUE(id.ok()) << id.status().ToString();
  // The check value of CRC32C (RFC 3720): 0xE3069283, big-endian, in base64.
  Result<UploadedPart> part =
      client_->UploadPart("run/check", *id, 1, MemFile("123456789"), 0, 9, nullptr);
  ASSERT_TRUE(part.ok()) << part.status().ToString();
  EXPECT_EQ(part->crc32c, "4waSgw==");
  ASSERT_TRUE(client_->CompleteMultipartUpload("run/check", *id, {*part}, nullptr).ok());
  Result<std::string> got = client_->GetObject("run/check", 100, nullptr);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(*got, "123456789");
}

TEST_F(RemoteStoreTest, AnAnswerLargerThanAskedIsRefused) {
  const std::string data = Pattern(5000, 'x');
  ASSERT_TRUE(client_->PutObject("run/x", MemFile(data), 0, data.size(), nullptr).ok());
  EXPECT_EQ(client_->GetObject("run/x", 100, nullptr).status().err(), EFBIG);
}

TEST_F(RemoteStoreTest, ADeletedObjectIsGoneAndDeletingNoObjectIsOk) {
  const std::string data = Pattern(1000, 'd');
  ASSERT_TRUE(client_->PutObject("run/old-name", MemFile(data), 0, data.size(), nullptr).ok());
  ASSERT_TRUE(client_->DeleteObject("run/old-name", nullptr).ok());
  EXPECT_EQ(client_->GetObject("run/old-name", 1 << 20, nullptr).status().err(), ENOENT);
  EXPECT_TRUE(client_->DeleteObject("run/never-there", nullptr).ok());
}

TEST_F(RemoteStoreTest, ABucketThatIsThereChecksOk) {
  EXPECT_TRUE(CheckRemote(settings_).ok());
}

TEST_F(RemoteStoreTest, AMissingBucketFailsTheCheckSayingSo) {
  S3Settings missing = settings_;
  missing.location.bucket = "no-such-bucket";
  Status st = CheckRemote(missing);
  EXPECT_EQ(st.err(), ENOENT) << st.ToString();
  EXPECT_NE(st.message().find("no such bucket"), std::string::npos) << st.message();
  EXPECT_EQ(st.message().find("test-secret"), std::string::npos);
}

TEST_F(RemoteStoreTest, AnUnreachableEndpointFailsTheCheckSayingSo) {
  S3Settings unreachable = settings_;
  unreachable.endpoint = "http://127.0.0.1:" + std::to_string(FreeLoopbackPort());
  Status st = CheckRemote(unreachable);
  EXPECT_EQ(st.err(), EHOSTUNREACH) << st.ToString();
  EXPECT_NE(st.message().find("the endpoint is unreachable"), std::string::npos) << st.message();
}

TEST_F(RemoteStoreTest, OpenMultipartUploadsAreListedUnderThePrefixOnly) {
  Result<std::string> mine = client_->CreateMultipartUpload("run/open-one", nullptr);
  Result<std::string> other = client_->CreateMultipartUpload("elsewhere/open", nullptr);
  ASSERT_TRUE(mine.ok() && other.ok());
  Result<std::vector<S3Client::OpenUpload>> open = client_->ListMultipartUploads("run/", nullptr);
  ASSERT_TRUE(open.ok()) << open.status().ToString();
  bool found = false;
  for (const auto& u : *open) {
    EXPECT_EQ(u.key.rfind("run/", 0), 0u) << u.key;
    found = found || (u.key == "run/open-one" && u.upload_id == *mine);
  }
  EXPECT_TRUE(found);
  for (const auto& u : *open) client_->AbortMultipartUpload(u.key, u.upload_id);
  client_->AbortMultipartUpload("elsewhere/open", *other);
  open = client_->ListMultipartUploads("run/", nullptr);
  ASSERT_TRUE(open.ok());
  EXPECT_TRUE(open->empty());
}

// A backing directory with its private area, removed after.
class UploadResumeTest : public RemoteStoreTest {
 protected:
  void SetUp() override {
    RemoteStoreTest::SetUp();
    char tmpl[] = "/tmp/ckptfs-resume-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    root_ = std::filesystem::canonical(tmpl).string();
    std::filesystem::create_directories(root_ + "/.ckptfs");
    std::filesystem::create_directories(root_ + "/step");
    std::filesystem::create_directories(root_ + "/other");
    reserved_ = open((root_ + "/.ckptfs").c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    ASSERT_GE(reserved_, 0);
  }
  void TearDown() override {
    close(reserved_);
    std::filesystem::remove_all(root_);
    RemoteStoreTest::TearDown();
  }
  policy::LoggedUploads::Version Write(const std::string& path, const std::string& bytes) {
    std::ofstream(root_ + "/" + path, std::ios::binary) << bytes;
    struct stat st {};
    EXPECT_EQ(stat((root_ + "/" + path).c_str(), &st), 0);
    return Logged(path, static_cast<uint64_t>(st.st_ino), static_cast<uint64_t>(st.st_size),
                  int64_t{st.st_mtim.tv_sec} * 1'000'000'000 + st.st_mtim.tv_nsec);
  }
  static policy::LoggedUploads::Version Logged(const std::string& path, uint64_t inode,
                                               uint64_t size, int64_t mtime_ns) {
    policy::LoggedUploads::Version v;
    v.path = path;
    v.inode = inode;
    v.size = size;
    v.mtime_ns = mtime_ns;
    return v;
  }
  UploaderSettings Settings() const {
    UploaderSettings u;
    u.s3 = settings_;
    u.part_size = 5 << 20;
    u.concurrency = 2;
    u.markers = {".metadata"};
    u.backing_root = root_;
    u.log_dir_fd = reserved_;
    u.log_name = "uploads.log";
    u.reserved_name = ".ckptfs";
    return u;
  }
  bool OnStore(const std::string& path, const std::string& bytes) {
    Result<std::string> got = client_->GetObject("run/" + path, 64 << 20, nullptr);
    return got.ok() && *got == bytes;
  }
  bool Absent(const std::string& path) {
    return client_->GetObject("run/" + path, 64 << 20, nullptr).status().err() == ENOENT;
  }

  std::string root_;
  int reserved_ = -1;
};

TEST_F(UploadResumeTest, WhatTheLogLeftPendingIsUploadedInOrderAndOpenUploadsAborted) {
  const std::string a = Pattern(12 << 20, 'a'), b = Pattern(1000, 'b'), meta = Pattern(300, 'm');
  Result<std::string> stale = client_->CreateMultipartUpload("run/step/a", nullptr);
  ASSERT_TRUE(stale.ok());
  std::string log(UploadLogHeader());
  log += EncodeHandedOver(Write("done-before", "x"));
  log += EncodeDone(1);
  log += EncodeHandedOver(Write("step/a", a));
  policy::LoggedUploads::Version b_logged = Write("step/b", "an older version");
  log += EncodeHandedOver(b_logged);
  log += EncodeHandedOver(Write("step/.metadata", meta));
  log += EncodeHandedOver(Logged("step/gone", 1, 1, 1));
  log += EncodeHandedOver(Logged("../escape", 1, 1, 1));
  policy::LoggedUploads::Version other_marker = Write("other/.metadata", "new");
  log += EncodeHandedOver(Logged("other/.metadata", other_marker.inode + 1, 3, 0));
  policy::LoggedUploads::Version old_name;
  old_name.path = "old-name";
  old_name.removal = true;
  log += EncodeHandedOver(old_name);
  // step/b replaced since it was logged, by a version the log does not name.
  ASSERT_EQ(unlink((root_ + "/step/b").c_str()), 0);
  Write("step/b", b);
  std::ofstream(root_ + "/.ckptfs/uploads.log", std::ios::binary) << log;
  const std::string old_bytes = "stale object of a renamed file";
  ASSERT_TRUE(client_->PutObject("run/old-name", MemFile(old_bytes), 0, old_bytes.size(), nullptr)
                  .ok());

  Stats stats;
  Result<std::unique_ptr<Uploader>> uploader = Uploader::Start(Settings(), stats);
  ASSERT_TRUE(uploader.ok()) << uploader.status().ToString();
  Status left = (*uploader)->Stop(std::chrono::seconds(30));
  ASSERT_TRUE(left.ok()) << left.ToString();

  EXPECT_TRUE(OnStore("step/a", a));
  EXPECT_TRUE(OnStore("step/b", b)) << "data goes as it is now";
  EXPECT_TRUE(OnStore("step/.metadata", meta));
  EXPECT_TRUE(Absent("other/.metadata")) << "a marker goes only as the version logged";
  EXPECT_TRUE(Absent("done-before"));
  EXPECT_TRUE(Absent("old-name"));
  Result<std::vector<S3Client::OpenUpload>> open = client_->ListMultipartUploads("run/", nullptr);
  ASSERT_TRUE(open.ok());
  EXPECT_TRUE(open->empty()) << open->size() << " uploads left open";
  // Everything is done: the log is gone with the uploader.
  EXPECT_FALSE(std::filesystem::exists(root_ + "/.ckptfs/uploads.log"));
}

TEST_F(UploadResumeTest, AFileRewrittenAfterAMarkerIsResumedAheadOfTheMarker) {
  std::string log(UploadLogHeader());
  log += EncodeHandedOver(Write("step/x", "the version the marker commits"));
  log += EncodeHandedOver(Write("step/.metadata", "marker"));
  ASSERT_EQ(unlink((root_ + "/step/x").c_str()), 0);
  log += EncodeHandedOver(Write("step/x", "a later version"));
  std::ofstream(root_ + "/.ckptfs/uploads.log", std::ios::binary) << log;
  UploaderSettings unreachable = Settings();
  unreachable.s3.endpoint = "http://127.0.0.1:" + std::to_string(FreeLoopbackPort());
  Stats stats;
  {
    Result<std::unique_ptr<Uploader>> uploader = Uploader::Start(unreachable, stats);
    ASSERT_TRUE(uploader.ok()) << uploader.status().ToString();
    EXPECT_FALSE((*uploader)->Stop(std::chrono::milliseconds(0)).ok());
  }
  policy::LoggedUploads held;
  ASSERT_TRUE(UploadLog::Open(reserved_, "uploads.log", &held).ok());
  std::vector<std::string> order;
  for (const policy::LoggedUploads::Version& v : held.Pending()) order.push_back(v.path);
  EXPECT_EQ(order, (std::vector<std::string>{"step/x", "step/.metadata", "step/x"}))
      << "x goes as it now is before the marker, which must follow a version of it";
}

TEST_F(UploadResumeTest, VersionsHandedOverAndNotDoneAreInTheLogForTheNextUploader) {
  const std::string a = Pattern(2000, 'q');
  const policy::LoggedUploads::Version logged = Write("step/a", a);
  UploaderSettings unreachable = Settings();
  unreachable.s3.endpoint = "http://127.0.0.1:" + std::to_string(FreeLoopbackPort());
  Stats stats;
  {
    Result<std::unique_ptr<Uploader>> uploader = Uploader::Start(unreachable, stats);
    ASSERT_TRUE(uploader.ok());
    const int dir = open((root_ + "/step").c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    (*uploader)->Enqueue(dir, "a", "step/a");
    close(dir);
    ASSERT_TRUE((*uploader)->SyncLog().ok());
    EXPECT_FALSE((*uploader)->Stop(std::chrono::milliseconds(0)).ok());
  }
  policy::LoggedUploads held;
  {
    Result<std::unique_ptr<UploadLog>> log = UploadLog::Open(reserved_, "uploads.log", &held);
    ASSERT_TRUE(log.ok());
  }
  ASSERT_EQ(held.Pending().size(), 1u);
  EXPECT_EQ(held.Pending()[0].path, "step/a");
  EXPECT_EQ(held.Pending()[0].inode, logged.inode);
  Result<std::unique_ptr<Uploader>> next = Uploader::Start(Settings(), stats);
  ASSERT_TRUE(next.ok());
  ASSERT_TRUE((*next)->Stop(std::chrono::seconds(30)).ok());
  EXPECT_TRUE(OnStore("step/a", a));
}

// Waits (30 s at most) until `count` versions handed over are done, in order.
bool WaitDone(const Uploader& uploader, uint64_t count) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (uploader.Progress().done_in_order < count) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return true;
}

TEST_F(UploadResumeTest, AFileRenamedAfterItsUploadIsCopiedByTheStoreNotSentAgain) {
  const std::string small = Pattern(3000, 's'), big = Pattern(12 << 20, 'g');
  Write("step/small.tmp", small);
  Write("step/big.tmp", big);
  Stats stats;
  Result<std::unique_ptr<Uploader>> uploader = Uploader::Start(Settings(), stats);
  ASSERT_TRUE(uploader.ok()) << uploader.status().ToString();
  const int dir = open((root_ + "/step").c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  (*uploader)->Enqueue(dir, "small.tmp", "step/small.tmp");
  (*uploader)->Enqueue(dir, "big.tmp", "step/big.tmp");  // A multipart upload.
  ASSERT_TRUE(WaitDone(**uploader, 2));
  const uint64_t sent = stats.remote_bytes_uploaded.load();
  EXPECT_EQ(sent, small.size() + big.size());
  for (const char* name : {"small", "big"}) {
    const std::string old_name = std::string(name) + ".tmp";
    ASSERT_EQ(renameat(dir, old_name.c_str(), dir, name), 0);
    (*uploader)->Enqueue(dir, name, std::string("step/") + name, "step/" + old_name);
  }
  Status left = (*uploader)->Stop(std::chrono::seconds(30));
  close(dir);
  ASSERT_TRUE(left.ok()) << left.ToString();
  EXPECT_EQ(stats.remote_bytes_uploaded.load(), sent) << "the renamed files were sent again";
  EXPECT_TRUE(OnStore("step/small", small));
  EXPECT_TRUE(OnStore("step/big", big));
  EXPECT_TRUE(Absent("step/small.tmp"));
  EXPECT_TRUE(Absent("step/big.tmp"));
}

TEST_F(UploadResumeTest, AMarkerRenamedIntoPlaceIsSentOnceUnderItsNameAfterTheDataBeforeIt) {
  const std::string big = Pattern(12 << 20, 'd'), meta = Pattern(500, 'm');
  Write("step/data", big);
  Write("step/.metadata.tmp", meta);
  Mutex mu;
  std::vector<std::string> order;
  UploaderSettings settings = Settings();
  settings.on_uploaded = [&](const std::string& path, uint64_t, uint64_t, int64_t,
                             const std::string&) {
    MutexLock lock(mu);
    order.push_back(path);
  };
  Stats stats;
  Result<std::unique_ptr<Uploader>> uploader = Uploader::Start(settings, stats);
  ASSERT_TRUE(uploader.ok()) << uploader.status().ToString();
  const int dir = open((root_ + "/step").c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  (*uploader)->Enqueue(dir, "data", "step/data");
  // As DCP saves its metadata: written under a temporary name, then renamed into place; whether
  // its upload started meanwhile or not, its bytes go once.
  (*uploader)->Enqueue(dir, ".metadata.tmp", "step/.metadata.tmp");
  ASSERT_EQ(renameat(dir, ".metadata.tmp", dir, ".metadata"), 0);
  (*uploader)->Enqueue(dir, ".metadata", "step/.metadata", "step/.metadata.tmp");
  Status left = (*uploader)->Stop(std::chrono::seconds(30));
  close(dir);
  ASSERT_TRUE(left.ok()) << left.ToString();
  EXPECT_EQ(stats.remote_bytes_uploaded.load(), big.size() + meta.size());
  EXPECT_TRUE(OnStore("step/.metadata", meta));
  EXPECT_TRUE(Absent("step/.metadata.tmp"));
  MutexLock lock(mu);
  ASSERT_FALSE(order.empty());
  EXPECT_EQ(order.back(), "step/.metadata") << "the marker went before the data before it";
}

TEST_F(UploadResumeTest, ARenamedDirectorysObjectsMoveUnderItsNewNameNotSentAgain) {
  const std::string a = Pattern(3000, 'a'), b = Pattern(6 << 20, 'b'), c = Pattern(100, 'c');
  // On the store under the old name (uploaded before the rename).
  ASSERT_TRUE(client_->PutObject("run/ckpt.tmp/a", MemFile(a), 0, a.size(), nullptr).ok());
  ASSERT_TRUE(client_->PutObject("run/ckpt.tmp/sub/b", MemFile(b), 0, b.size(), nullptr).ok());
  std::filesystem::create_directories(root_ + "/ckpt/sub");
  Write("ckpt/a", a);
  Write("ckpt/sub/b", b);
  Write("ckpt/c", c);
  Stats stats;
  Result<std::unique_ptr<Uploader>> uploader = Uploader::Start(Settings(), stats);
  ASSERT_TRUE(uploader.ok()) << uploader.status().ToString();
  const int dir = open((root_ + "/ckpt").c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  // Published before the rename, handed over after it: under the name it had then.
  (*uploader)->Enqueue(dir, "c", "ckpt.tmp/c");
  close(dir);
  (*uploader)->Move("ckpt.tmp", "ckpt");
  Status left = (*uploader)->Stop(std::chrono::seconds(30));
  ASSERT_TRUE(left.ok()) << left.ToString();
  EXPECT_TRUE(OnStore("ckpt/a", a));
  EXPECT_TRUE(OnStore("ckpt/sub/b", b));
  EXPECT_TRUE(OnStore("ckpt/c", c));
  for (const char* gone : {"ckpt.tmp/a", "ckpt.tmp/sub/b", "ckpt.tmp/c"}) {
    EXPECT_TRUE(Absent(gone)) << gone;
  }
  EXPECT_EQ(stats.remote_bytes_uploaded.load(), c.size()) << "moved objects were sent again";
}

// Records on the backing file `path` that it is the version stored as `etag`.
void RecordStoredVersion(const std::string& path, const std::string& etag) {
  struct stat st {};
  ASSERT_EQ(stat(path.c_str(), &st), 0);
  const std::string record = policy::FormatStoredVersion(
      etag, static_cast<uint64_t>(st.st_size),
      int64_t{st.st_mtim.tv_sec} * 1'000'000'000 + st.st_mtim.tv_nsec);
  ASSERT_EQ(setxattr(path.c_str(), kStoredVersionAttr, record.data(), record.size(), 0), 0);
}

// Moves ckpt.tmp/ to ckpt/ through an uploader whose store copies objects of up to 5 MiB: what
// its Stop (after `idle` without progress) leaves.
Status MoveCopyingUpTo5MiB(UploaderSettings settings, Stats& stats, std::chrono::seconds idle) {
  settings.max_copy_size = 5 << 20;
  Result<std::unique_ptr<Uploader>> uploader = Uploader::Start(settings, stats);
  if (!uploader.ok()) return uploader.status();
  (*uploader)->Move("ckpt.tmp", "ckpt");
  return (*uploader)->Stop(idle);
}

TEST_F(UploadResumeTest, AnObjectOfARenamedDirectoryLargerThanTheStoreCopiesIsSentFromItsFile) {
  const std::string big = Pattern(12 << 20, 'g'), small = Pattern(4000, 's');
  Result<std::string> big_etag =
      client_->PutObject("run/ckpt.tmp/big", MemFile(big), 0, big.size(), nullptr);
  ASSERT_TRUE(big_etag.ok()) << big_etag.status().ToString();
  ASSERT_TRUE(client_->PutObject("run/ckpt.tmp/small", MemFile(small), 0, small.size(), nullptr)
                  .ok());
  std::filesystem::create_directories(root_ + "/ckpt");
  Write("ckpt/big", big);
  Write("ckpt/small", small);
  RecordStoredVersion(root_ + "/ckpt/big", *big_etag);
  Stats stats;
  Status left = MoveCopyingUpTo5MiB(Settings(), stats, std::chrono::seconds(30));
  ASSERT_TRUE(left.ok()) << left.ToString();
  EXPECT_TRUE(OnStore("ckpt/big", big));
  EXPECT_TRUE(OnStore("ckpt/small", small));
  EXPECT_TRUE(Absent("ckpt.tmp/big"));
  EXPECT_TRUE(Absent("ckpt.tmp/small"));
  EXPECT_EQ(stats.remote_bytes_uploaded.load(), big.size()) << "only the large one goes again";
  Result<std::string> sent_etag = client_->HeadObject("run/ckpt/big", nullptr);
  ASSERT_TRUE(sent_etag.ok()) << sent_etag.status().ToString();
  std::string record(policy::kMaxStoredVersion, '\0');
  const ssize_t n = getxattr((root_ + "/ckpt/big").c_str(), kStoredVersionAttr, record.data(),
                             record.size());
  ASSERT_GT(n, 0);
  record.resize(static_cast<size_t>(n));
  EXPECT_NE(record.find(*sent_etag), std::string::npos) << "the file still names the old object";
}

TEST_F(UploadResumeTest, ALargeObjectOfARenamedDirectoryWhoseFileIsNotItsVersionStaysWhereItIs) {
  const std::string big = Pattern(6 << 20, 'h');
  Result<std::string> big_etag =
      client_->PutObject("run/ckpt.tmp/big", MemFile(big), 0, big.size(), nullptr);
  ASSERT_TRUE(big_etag.ok()) << big_etag.status().ToString();
  // Evicted from the local tier: a placeholder, zeros where the object's bytes would be.
  std::filesystem::create_directories(root_ + "/ckpt");
  Write("ckpt/big", std::string(big.size(), '\0'));
  RecordStoredVersion(root_ + "/ckpt/big", *big_etag);
  const std::string mark = policy::PlaceholderMark(*big_etag, "run/ckpt.tmp/big");
  ASSERT_EQ(setxattr((root_ + "/ckpt/big").c_str(), kRemotePlaceholderAttr, mark.data(),
                     mark.size(), 0),
            0);
  Stats stats;
  EXPECT_FALSE(MoveCopyingUpTo5MiB(Settings(), stats, std::chrono::seconds(3)).ok())
      << "the move was said done";
  EXPECT_TRUE(OnStore("ckpt.tmp/big", big)) << "the only copy of the object was removed";
  EXPECT_TRUE(Absent("ckpt/big")) << "the placeholder's zeros were sent";
  EXPECT_EQ(stats.remote_bytes_uploaded.load(), 0u);
}

TEST_F(UploadResumeTest, AnEvictedFileOfARenamedDirectoryNamesItsMovedObject) {
  const std::string e = Pattern(5000, 'e');
  Result<std::string> source_etag =
      client_->PutObject("run/ckpt.tmp/e", MemFile(e), 0, e.size(), nullptr);
  ASSERT_TRUE(source_etag.ok()) << source_etag.status().ToString();
  // Evicted from the local tier before the rename: a placeholder naming the old key.
  std::filesystem::create_directories(root_ + "/ckpt");
  Write("ckpt/e", std::string(e.size(), '\0'));
  const std::string path = root_ + "/ckpt/e";
  const std::string old_mark = policy::PlaceholderMark(*source_etag, "run/ckpt.tmp/e");
  ASSERT_EQ(setxattr(path.c_str(), kRemotePlaceholderAttr, old_mark.data(), old_mark.size(), 0),
            0);
  Stats stats;
  Result<std::unique_ptr<Uploader>> uploader = Uploader::Start(Settings(), stats);
  ASSERT_TRUE(uploader.ok()) << uploader.status().ToString();
  (*uploader)->Move("ckpt.tmp", "ckpt");
  ASSERT_TRUE((*uploader)->Stop(std::chrono::seconds(30)).ok());
  EXPECT_TRUE(OnStore("ckpt/e", e));
  EXPECT_TRUE(Absent("ckpt.tmp/e"));
  Result<std::string> moved_etag = client_->HeadObject("run/ckpt/e", nullptr);
  ASSERT_TRUE(moved_etag.ok()) << moved_etag.status().ToString();
  std::string mark(policy::kMaxPlaceholderMark, '\0');
  const ssize_t got = getxattr(path.c_str(), kRemotePlaceholderAttr, mark.data(), mark.size());
  ASSERT_GT(got, 0);
  mark.resize(static_cast<size_t>(got));
  EXPECT_EQ(mark, policy::PlaceholderMark(*moved_etag, "run/ckpt/e"))
      << "the placeholder still names the removed object";
}

TEST_F(UploadResumeTest, ADirectoryMoveCutByACrashIsFinishedByTheNextUploader) {
  const std::string a = Pattern(2000, 'a'), b = Pattern(3000, 'b');
  // What a crash in the middle of the move leaves: a copied (not yet removed), b not yet copied.
  ASSERT_TRUE(client_->PutObject("run/old/a", MemFile(a), 0, a.size(), nullptr).ok());
  ASSERT_TRUE(client_->PutObject("run/new/a", MemFile(a), 0, a.size(), nullptr).ok());
  ASSERT_TRUE(client_->PutObject("run/old/b", MemFile(b), 0, b.size(), nullptr).ok());
  policy::LoggedUploads::Version move;
  move.path = "old";
  move.move_to = "new";
  std::ofstream(root_ + "/.ckptfs/uploads.log", std::ios::binary)
      << std::string(UploadLogHeader()) + EncodeHandedOver(move);
  Stats stats;
  Result<std::unique_ptr<Uploader>> uploader = Uploader::Start(Settings(), stats);
  ASSERT_TRUE(uploader.ok()) << uploader.status().ToString();
  ASSERT_TRUE((*uploader)->Stop(std::chrono::seconds(30)).ok());
  EXPECT_TRUE(OnStore("new/a", a));
  EXPECT_TRUE(OnStore("new/b", b));
  EXPECT_TRUE(Absent("old/a"));
  EXPECT_TRUE(Absent("old/b"));
}

// A listing's gate with nothing of the mount pending.
const RemoteReader::Gate kNothingPending = [](const std::string&,
                                              const RemoteReader::Place& place) {
  place(policy::PendingChange::kNone);
};

// A backing directory with a staging directory, and a RemoteReader of a prefix of the test's own
// (the bucket is the suite's).
class RemoteReaderTest : public RemoteStoreTest {
 protected:
  void SetUp() override {
    RemoteStoreTest::SetUp();
    char tmpl[] = "/var/tmp/ckptfs-read-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    root_ = tmpl;
    std::filesystem::create_directories(root_ + "/.ckptfs/staging");
    root_fd_ = open(root_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    staging_fd_ = open((root_ + "/.ckptfs/staging").c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    ASSERT_GE(root_fd_, 0);
    ASSERT_GE(staging_fd_, 0);
    prefix_ = std::string("read/") +
              ::testing::UnitTest::GetInstance()->current_test_info()->name();
    RemoteReaderSettings r;
    r.s3 = settings_;
    r.s3.location.prefix = prefix_;
    r.concurrency = 3;
    r.range_size = 1 << 20;
    r.read_ahead = 1;
    r.markers = {".metadata"};
    r.staging_fd = staging_fd_;
    r.reserved_name = kReservedName;
    r.manifest_name = kChecksumManifestName;
    Result<std::unique_ptr<RemoteReader>> reader = RemoteReader::Make(r, stats_);
    ASSERT_TRUE(reader.ok());
    reader_ = std::move(*reader);
  }
  void TearDown() override {
    close(root_fd_);
    close(staging_fd_);
    std::filesystem::remove_all(root_);
    RemoteStoreTest::TearDown();
  }
  // Puts `data` under `path` of the test's prefix (a key as it is with `absolute`).
  void Put(const std::string& path, const std::string& data, bool absolute = false) {
    const std::string key = absolute ? path : prefix_ + "/" + path;
    ASSERT_TRUE(client_->PutObject(key, MemFile(data), 0, data.size(), nullptr).ok()) << key;
  }
  std::string Read(const std::string& path) {
    std::ifstream in(root_ + "/" + path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  }

  Stats stats_;
  std::string prefix_;
  std::string root_;
  int root_fd_ = -1;
  int staging_fd_ = -1;
  std::unique_ptr<RemoteReader> reader_;
};

TEST_F(RemoteReaderTest, ADirectoryIsListedAsPlaceholdersAndAFetchFillsOneWithTheObject) {
  const std::string big = Pattern((5 << 20) + 12345, 'r');  // 6 ranges.
  Put("step_1/__0_0.distcp", big);
  Put("step_1/.metadata", "meta");
  Put("step_1/sub/deep.bin", "deep");
  Put("top.txt", "top");
  Put(prefix_ + "-other/not-ours", "x", /*absolute=*/true);
  ASSERT_TRUE(reader_->ListInto(root_fd_, "", kNothingPending).ok());
  EXPECT_TRUE(std::filesystem::is_directory(root_ + "/step_1"));
  EXPECT_FALSE(std::filesystem::exists(root_ + "/step_1/.metadata"))
      << "only the directory asked for is listed";
  EXPECT_FALSE(std::filesystem::exists(root_ + "/not-ours"));
  EXPECT_EQ(std::filesystem::file_size(root_ + "/top.txt"), 3u);

  const int dir = open((root_ + "/step_1").c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  ASSERT_GE(dir, 0);
  ASSERT_TRUE(reader_->ListInto(dir, "step_1", kNothingPending).ok());
  close(dir);
  EXPECT_TRUE(std::filesystem::is_directory(root_ + "/step_1/sub"));
  EXPECT_EQ(std::filesystem::file_size(root_ + "/step_1/__0_0.distcp"), big.size());
  EXPECT_EQ(stats_.remote_directories_listed.load(), 2u);
  EXPECT_TRUE(std::filesystem::is_empty(root_ + "/.ckptfs/staging"));

  const int fd = open((root_ + "/step_1/__0_0.distcp").c_str(), O_RDWR | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  EXPECT_TRUE(RemoteReader::IsPlaceholder(fd));
  struct stat st {};
  ASSERT_EQ(fstat(fd, &st), 0);
  EXPECT_LT(static_cast<uint64_t>(st.st_blocks) * 512, big.size()) << "not sparse";
  Status fetched = reader_->Fetch(fd, "step_1/__0_0.distcp");
  ASSERT_TRUE(fetched.ok()) << fetched.ToString();
  EXPECT_FALSE(RemoteReader::IsPlaceholder(fd));
  close(fd);
  EXPECT_TRUE(Read("step_1/__0_0.distcp") == big);
  EXPECT_EQ(stats_.remote_bytes_fetched.load(), big.size());
  EXPECT_EQ(stats_.remote_files_fetched.load(), 1u);
}

TEST_F(RemoteReaderTest, ALazyFileFetchesTheRangesReadAndTheReadAheadThenLosesItsMark) {
  const std::string big = Pattern((6 << 20) + 12345, 'z');  // 7 ranges of 1 MiB.
  Put("lazy.bin", big);
  ASSERT_TRUE(reader_->ListInto(root_fd_, "", kNothingPending).ok());
  const int fd = open((root_ + "/lazy.bin").c_str(), O_RDWR | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  Result<std::shared_ptr<RemoteReader::LazyFile>> file = reader_->OpenLazy(fd, "lazy.bin");
  ASSERT_TRUE(file.ok() && *file) << file.status().ToString();
  // Bytes in range 3: range 3 and the read-ahead (range 4) are fetched, nothing else.
  Result<bool> done = reader_->EnsureFetched(**file, (3 << 20) + 10, 100);
  ASSERT_TRUE(done.ok()) << done.status().ToString();
  EXPECT_FALSE(*done);
  EXPECT_EQ(stats_.remote_bytes_fetched.load(), 2u << 20);
  EXPECT_TRUE(RemoteReader::IsPlaceholder(fd));
  std::string got(2 << 20, '\0');
  ASSERT_EQ(pread(fd, got.data(), got.size(), 3 << 20), static_cast<ssize_t>(got.size()));
  EXPECT_TRUE(got == big.substr(3 << 20, 2 << 20));
  // The rest: the file is whole, durable, unmarked.
  done = reader_->EnsureFetched(**file, 0, big.size());
  ASSERT_TRUE(done.ok()) << done.status().ToString();
  EXPECT_TRUE(*done);
  EXPECT_FALSE(RemoteReader::IsPlaceholder(fd));
  EXPECT_EQ(stats_.remote_bytes_fetched.load(), big.size());
  EXPECT_EQ(stats_.remote_files_fetched.load(), 1u);
  file->reset();  // Closes fd.
  EXPECT_TRUE(Read("lazy.bin") == big);
}

TEST_F(RemoteReaderTest, ALocalFileIsKeptOnlyWhenItIsTheStoresObjectOrStillToBeUploaded) {
  for (const char* name : {"same.bin", "older.bin", "unrecorded.bin", "pending.bin"}) {
    Put(name, std::string("from the store: ") + name);
    std::ofstream(root_ + "/" + name, std::ios::binary) << "local";
  }
  // "same.bin" records the ETag of the object listed; "older.bin" the one of an object the store
  // has replaced since.
  ASSERT_TRUE(reader_->ListInto(root_fd_, "", kNothingPending).ok());  // Placeholders of all.
  const int same = open((root_ + "/same.bin").c_str(), O_RDWR | O_CLOEXEC);
  ASSERT_TRUE(reader_->Fetch(same, "same.bin").ok());
  close(same);
  std::string record(2000, '\0');
  const ssize_t n = getxattr((root_ + "/same.bin").c_str(), kStoredVersionAttr, record.data(),
                             record.size());
  ASSERT_GT(n, 0) << "a fetched file records the ETag it was fetched with";
  std::filesystem::remove(root_ + "/older.bin");
  std::ofstream(root_ + "/older.bin", std::ios::binary) << "local";
  struct stat st {};
  ASSERT_EQ(stat((root_ + "/older.bin").c_str(), &st), 0);
  const std::string old_record = policy::FormatStoredVersion(
      "\"0123456789abcdef0123456789abcdef\"", static_cast<uint64_t>(st.st_size),
      int64_t{st.st_mtim.tv_sec} * 1'000'000'000 + st.st_mtim.tv_nsec);
  ASSERT_EQ(setxattr((root_ + "/older.bin").c_str(), kStoredVersionAttr, old_record.data(),
                     old_record.size(), 0), 0);
  for (const char* name : {"unrecorded.bin", "pending.bin"}) {
    std::filesystem::remove(root_ + "/" + name);
    std::ofstream(root_ + "/" + name, std::ios::binary) << "local";
  }
  const uint64_t replaced = stats_.remote_local_files_replaced.load();

  const RemoteReader::Gate pending_upload = [](const std::string& name,
                                               const RemoteReader::Place& place) {
    place(name == "pending.bin" ? policy::PendingChange::kUpload : policy::PendingChange::kNone);
  };
  ASSERT_TRUE(reader_->ListInto(root_fd_, "", pending_upload).ok());
  EXPECT_EQ(Read("same.bin"), "from the store: same.bin");
  EXPECT_EQ(Read("pending.bin"), "local") << "a version still to upload is newer than the store's";
  EXPECT_EQ(stats_.remote_local_files_replaced.load() - replaced, 2u);
  for (const char* name : {"older.bin", "unrecorded.bin"}) {
    const int fd = open((root_ + "/" + name).c_str(), O_RDWR | O_CLOEXEC);
    ASSERT_GE(fd, 0);
    EXPECT_TRUE(RemoteReader::IsPlaceholder(fd)) << name;
    ASSERT_TRUE(reader_->Fetch(fd, name).ok()) << name;
    close(fd);
    EXPECT_EQ(Read(name), std::string("from the store: ") + name);
  }
  for (const char* name : {"same.bin", "pending.bin"}) {
    const int fd = open((root_ + "/" + name).c_str(), O_RDONLY | O_CLOEXEC);
    EXPECT_FALSE(RemoteReader::IsPlaceholder(fd)) << name;
    close(fd);
  }
  EXPECT_TRUE(std::filesystem::is_empty(root_ + "/.ckptfs/staging"));
}

TEST_F(RemoteReaderTest, AnObjectOrDirectoryWhoseRemovalIsPendingIsNotShownAgain) {
  Put("removed.bin", "removed through the mount");
  Put("removed_dir/a.bin", "a");
  Put("kept.bin", "kept");
  const RemoteReader::Gate removal = [](const std::string& name,
                                        const RemoteReader::Place& place) {
    place(name == "kept.bin" ? policy::PendingChange::kNone : policy::PendingChange::kRemoval);
  };
  ASSERT_TRUE(reader_->ListInto(root_fd_, "", removal).ok());
  EXPECT_FALSE(std::filesystem::exists(root_ + "/removed.bin"));
  EXPECT_FALSE(std::filesystem::exists(root_ + "/removed_dir"));
  EXPECT_TRUE(std::filesystem::exists(root_ + "/kept.bin"));
  EXPECT_TRUE(std::filesystem::is_empty(root_ + "/.ckptfs/staging"));
}

TEST_F(RemoteReaderTest, HostileNamesOnTheStoreAreRefusedNotFollowed) {
  // (libcurl sends "." and ".." segments resolved: the mount test puts those with boto3.)
  Put("/abs.bin", "abs");
  Put(std::string(300, 'n'), "long");
  Put("fine.bin", "fine");
  ASSERT_TRUE(reader_->ListInto(root_fd_, "", kNothingPending).ok());
  std::vector<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(root_)) {
    names.push_back(e.path().filename().string());
  }
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{".ckptfs", "fine.bin"}));
  EXPECT_EQ(stats_.remote_names_refused.load(), 2u);
}

TEST_F(RemoteReaderTest, AnObjectReplacedOnTheStoreSinceItWasListedIsNotMixedIn) {
  Put("changing.bin", Pattern(3 << 20, 'a'));
  ASSERT_TRUE(reader_->ListInto(root_fd_, "", kNothingPending).ok());
  Put("changing.bin", Pattern(3 << 20, 'b'));
  const int fd = open((root_ + "/changing.bin").c_str(), O_RDWR | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  EXPECT_EQ(reader_->Fetch(fd, "changing.bin").err(), ESTALE);
  EXPECT_TRUE(RemoteReader::IsPlaceholder(fd)) << "a failed fetch keeps the mark";
  close(fd);
}

}  // namespace
}  // namespace ckptfs
