// S3Client against a real S3 server: moto's server mode (tests/unit/moto_server.h), started for
// this test and stopped after.
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <string>

#include "core/remote/remote_settings.h"
#include "core/remote/s3_client.h"
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
  std::vector<std::string> etags;
  const uint64_t part = 5 << 20;
  for (unsigned p = 0; p * part < data.size(); ++p) {
    const uint64_t size = std::min<uint64_t>(part, data.size() - p * part);
    Result<std::string> etag = client_->UploadPart("run/big", *id, p + 1, fd, p * part, size,
                                                   nullptr);
    ASSERT_TRUE(etag.ok()) << etag.status().ToString();
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

}  // namespace
}  // namespace ckptfs
