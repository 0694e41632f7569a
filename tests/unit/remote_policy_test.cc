// The remote tier's pure policy: what is retried, how long it waits, how files are cut in parts.
#include "core/remote/remote_policy.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "crc32c_of.h"

namespace ckptfs::policy {
namespace {

TEST(RemotePolicyTest, TransientFailuresAreRetriedAndRefusalsAreNot) {
  EXPECT_EQ(JudgeRequest(Transport::kOk, 200, ""), RequestVerdict::kDone);
  EXPECT_EQ(JudgeRequest(Transport::kOk, 204, ""), RequestVerdict::kDone);
  EXPECT_EQ(JudgeRequest(Transport::kTimeout, 0, ""), RequestVerdict::kRetry);
  EXPECT_EQ(JudgeRequest(Transport::kReset, 0, ""), RequestVerdict::kRetry);
  EXPECT_EQ(JudgeRequest(Transport::kConnectFailed, 0, ""), RequestVerdict::kRetry);
  EXPECT_EQ(JudgeRequest(Transport::kOther, 0, ""), RequestVerdict::kFail);
  EXPECT_EQ(JudgeRequest(Transport::kOk, 503, "SlowDown"), RequestVerdict::kRetry);
  EXPECT_EQ(JudgeRequest(Transport::kOk, 500, "InternalError"), RequestVerdict::kRetry);
  EXPECT_EQ(JudgeRequest(Transport::kOk, 502, ""), RequestVerdict::kRetry);
  EXPECT_EQ(JudgeRequest(Transport::kOk, 429, ""), RequestVerdict::kRetry);
  EXPECT_EQ(JudgeRequest(Transport::kOk, 400, "RequestTimeout"), RequestVerdict::kRetry);
  EXPECT_EQ(JudgeRequest(Transport::kOk, 403, "AccessDenied"), RequestVerdict::kFail);
  EXPECT_EQ(JudgeRequest(Transport::kOk, 404, "NoSuchBucket"), RequestVerdict::kFail);
  EXPECT_EQ(JudgeRequest(Transport::kOk, 400, "InvalidPart"), RequestVerdict::kFail);
  // CompleteMultipartUpload may answer 200 with an error inside.
  EXPECT_EQ(JudgeRequest(Transport::kOk, 200, "InternalError"), RequestVerdict::kRetry);
  EXPECT_EQ(JudgeRequest(Transport::kOk, 200, "InvalidPart"), RequestVerdict::kFail);
}

TEST(RemotePolicyTest, BytesRefusedForTheirChecksumAreNeverRetriedForever) {
  // A request refused for its checksum fails; the uploader then judges the local bytes.
  for (const char* code : {"BadDigest", "InvalidDigest", "XAmzContentSHA256Mismatch"}) {
    EXPECT_TRUE(IsDigestMismatch(code)) << code;
    EXPECT_EQ(JudgeRequest(Transport::kOk, 400, code), RequestVerdict::kFail) << code;
  }
  EXPECT_FALSE(IsDigestMismatch("InvalidPart"));
  EXPECT_FALSE(IsDigestMismatch(""));
  // Local bytes that no longer match their checksum record are corrupt at once.
  EXPECT_EQ(JudgeDigestMismatch(false, 1), DigestVerdict::kCorrupt);
  // Bytes that match it (damaged on the way), or that cannot be checked, are sent again a few
  // times, then given up.
  for (std::optional<bool> matches : {std::optional<bool>(true), std::optional<bool>()}) {
    for (unsigned i = 1; i < kMaxDigestMismatches; ++i) {
      EXPECT_EQ(JudgeDigestMismatch(matches, i), DigestVerdict::kSendAgain) << i;
    }
    EXPECT_EQ(JudgeDigestMismatch(matches, kMaxDigestMismatches), DigestVerdict::kGiveUp);
    EXPECT_EQ(JudgeDigestMismatch(matches, kMaxDigestMismatches + 5), DigestVerdict::kGiveUp);
  }
}

TEST(RemotePolicyTest, RetryDelaysDoubleUpToTenSecondsLessTheJitter) {
  EXPECT_EQ(RetryDelay(1, 0).count(), 100);
  EXPECT_EQ(RetryDelay(2, 0).count(), 200);
  EXPECT_EQ(RetryDelay(5, 0).count(), 1600);
  EXPECT_EQ(RetryDelay(8, 0).count(), 10000);
  EXPECT_EQ(RetryDelay(1000, 0).count(), 10000);
  EXPECT_EQ(RetryDelay(1, 0.25).count(), 75);
  EXPECT_EQ(RetryDelay(1, 0.9).count(), 50) << "jitter takes off at most half";
}

TEST(RemotePolicyTest, SmallFilesAreOnePutAndLargeOnesEvenParts) {
  const uint64_t MiB = 1 << 20;
  PartPlan empty = PlanParts(0, 16 * MiB);
  EXPECT_FALSE(empty.multipart);
  PartPlan exact = PlanParts(16 * MiB, 16 * MiB);
  EXPECT_FALSE(exact.multipart);
  PartPlan over = PlanParts(16 * MiB + 1, 16 * MiB);
  EXPECT_TRUE(over.multipart);
  EXPECT_EQ(over.parts, 2u);
  EXPECT_EQ(over.part_size, 16 * MiB);
  // Below S3's minimum part size, the option is raised to it.
  PartPlan tiny = PlanParts(12 * MiB, MiB);
  EXPECT_EQ(tiny.part_size, 5 * MiB);
  EXPECT_EQ(tiny.parts, 3u);
}

TEST(RemotePolicyTest, AHugeFileGetsLargerPartsToStayWithinTenThousand) {
  const uint64_t size = 1ull << 40;  // 1 TiB at 16 MiB would be 65,536 parts.
  PartPlan p = PlanParts(size, 16ull << 20);
  EXPECT_LE(p.parts, kMaxParts);
  EXPECT_GE(p.part_size * p.parts, size);
  EXPECT_EQ(p.part_size % (1 << 20), 0u);
}

TEST(RemotePolicyTest, ThePartsChecksumIsJoinedFromTheRecordedChunksWhenItIsWholeChunks) {
  using testing_util::Crc32cOf;
  std::string bytes(10000, '\0');
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<char>(i * 7 + (i >> 9));
  const uint64_t chunk = 1024;
  std::vector<uint32_t> sums;
  for (uint64_t at = 0; at < bytes.size(); at += chunk) {
    sums.push_back(Crc32cOf(std::string_view(bytes).substr(at, chunk)));
  }
  const std::string_view all(bytes);
  EXPECT_EQ(RecordedCrc32c(chunk, bytes.size(), sums, 0, bytes.size()), Crc32cOf(all));
  EXPECT_EQ(RecordedCrc32c(chunk, bytes.size(), sums, 2048, 4096),
            Crc32cOf(all.substr(2048, 4096)));
  EXPECT_EQ(RecordedCrc32c(chunk, bytes.size(), sums, 8192, 1808), Crc32cOf(all.substr(8192)))
      << "the last part ends with the file";
  EXPECT_EQ(RecordedCrc32c(chunk, bytes.size(), sums, 0, 0), Crc32cOf(""));
  EXPECT_FALSE(RecordedCrc32c(chunk, bytes.size(), sums, 100, 1024)) << "not on a chunk";
  EXPECT_FALSE(RecordedCrc32c(chunk, bytes.size(), sums, 0, 1000)) << "part of a chunk";
  EXPECT_FALSE(RecordedCrc32c(chunk, bytes.size(), sums, 8192, 4096)) << "beyond the file";
  EXPECT_FALSE(RecordedCrc32c(chunk, 20000, sums, 0, 20000)) << "beyond the record";
  EXPECT_FALSE(RecordedCrc32c(0, bytes.size(), sums, 0, 10));
}

TEST(RemotePolicyTest, FailuresOfOneKindAreOneKindWhateverTheObject) {
  EXPECT_EQ(FailureKind(EIO, "PUT s3://b/run/a: HTTP 503 SlowDown: Please reduce your rate."),
            "HTTP 503 SlowDown");
  EXPECT_EQ(FailureKind(EIO, "PUT s3://b/run/other: HTTP 503 SlowDown: Please reduce."),
            "HTTP 503 SlowDown");
  EXPECT_EQ(FailureKind(EIO, "POST s3://b/run/a: HTTP 500"), "HTTP 500");
  EXPECT_EQ(FailureKind(EHOSTUNREACH, "PUT s3://b/a: Failed to connect after 3 ms"),
            std::strerror(EHOSTUNREACH));
  EXPECT_NE(FailureKind(ECONNRESET, "PUT s3://b/a: reset"), FailureKind(EHOSTUNREACH, "x"));
}

TEST(RemotePolicyTest, OnlyPathsAMountPublishesAreResumedFromTheLog) {
  EXPECT_TRUE(IsUploadablePath("a", ".ckptfs"));
  EXPECT_TRUE(IsUploadablePath("step-1/__0_0.distcp", ".ckptfs"));
  EXPECT_TRUE(IsUploadablePath("dir/.ckptfs", ".ckptfs")) << "only the top one is private";
  EXPECT_FALSE(IsUploadablePath("", ".ckptfs"));
  EXPECT_FALSE(IsUploadablePath("/etc/passwd", ".ckptfs"));
  EXPECT_FALSE(IsUploadablePath("../outside", ".ckptfs"));
  EXPECT_FALSE(IsUploadablePath("a/../../outside", ".ckptfs"));
  EXPECT_FALSE(IsUploadablePath("a/./b", ".ckptfs"));
  EXPECT_FALSE(IsUploadablePath("a//b", ".ckptfs"));
  EXPECT_FALSE(IsUploadablePath("a/", ".ckptfs"));
  EXPECT_FALSE(IsUploadablePath(".ckptfs/staging/x", ".ckptfs"));
  EXPECT_FALSE(IsUploadablePath(std::string("a\0b", 3), ".ckptfs"));
  EXPECT_FALSE(IsUploadablePath(std::string(4097, 'a'), ".ckptfs"));
}

TEST(RemotePolicyTest, ThePendingVersionsAreThoseAfterTheLastDoneCount) {
  LoggedUploads log;
  for (const char* p : {"a", "b", "c"}) {
    LoggedUploads::Version v;
    v.path = p;
    log.handed_over.push_back(v);
  }
  EXPECT_EQ(log.Pending().size(), 3u);
  log.done = 2;
  ASSERT_EQ(log.Pending().size(), 1u);
  EXPECT_EQ(log.Pending()[0].path, "c");
  log.done = 7;  // Never written so, but bounded all the same.
  EXPECT_TRUE(log.Pending().empty());
}

TEST(RemotePolicyTest, AVersionIsSupersededOnlyByALaterOneWithNoMarkerOrRemovalBetween) {
  // Handed over: 0 x, 1 y, 2 .metadata, 3 x, 4 removal, 5 x, 6 y.
  const std::vector<bool> barrier = {false, false, true, false, true, false, false};
  const auto is_barrier = [&](size_t k) { return static_cast<bool>(barrier[k]); };
  EXPECT_FALSE(SupersededBy(0, 3, is_barrier)) << "the marker at 2 must follow x's version at 0";
  EXPECT_FALSE(SupersededBy(3, 5, is_barrier)) << "the removal at 4 must follow x at 3";
  EXPECT_TRUE(SupersededBy(5, 6, is_barrier));
  EXPECT_TRUE(SupersededBy(2, 3, is_barrier)) << "a barrier itself may be superseded";
  EXPECT_TRUE(SupersededBy(0, 1, is_barrier));
}

TEST(RemotePolicyTest, AResumedMarkerIsOnlyTheVersionTheLogNamesAndDataIsItsNewestVersion) {
  // removal, marker, exists, same_version, named_again, given_up
  EXPECT_EQ(ResumeLogged(false, false, true, true, false, false), Resumed::kUpload);
  EXPECT_EQ(ResumeLogged(false, true, true, true, false, false), Resumed::kUpload);
  EXPECT_EQ(ResumeLogged(false, false, true, false, false, false), Resumed::kUpload)
      << "data replaced by a version not logged yet goes as it is: only ahead of markers";
  EXPECT_EQ(ResumeLogged(false, true, true, false, false, false), Resumed::kSkip)
      << "a marker replaced by a version not logged yet may name data not logged yet";
  EXPECT_EQ(ResumeLogged(false, false, true, true, true, false), Resumed::kSkip);
  EXPECT_EQ(ResumeLogged(false, true, true, true, true, false), Resumed::kSkip);
  EXPECT_EQ(ResumeLogged(false, false, false, false, false, false), Resumed::kSkip);
  EXPECT_EQ(ResumeLogged(true, false, false, false, false, false), Resumed::kRemove);
  EXPECT_EQ(ResumeLogged(true, false, true, false, true, false), Resumed::kRemove);
}

TEST(RemotePolicyTest, AVersionGivenUpAsCorruptIsHeldWhileItIsTheFileAndGoesOnceReplaced) {
  // removal, marker, exists, same_version, named_again, still_corrupt
  EXPECT_EQ(ResumeLogged(false, false, true, true, false, true), Resumed::kHold)
      << "the same corrupt bytes are never sent again";
  EXPECT_EQ(ResumeLogged(false, false, true, false, false, true), Resumed::kHold)
      << "damaged after it was handed over, as it was when given up";
  EXPECT_EQ(ResumeLogged(false, false, true, false, false, false), Resumed::kUpload)
      << "a file replaced since it was given up goes as it is now";
  EXPECT_EQ(ResumeLogged(false, false, true, true, true, true), Resumed::kSkip)
      << "a newer version handed over supersedes it";
  EXPECT_EQ(ResumeLogged(false, false, false, false, false, true), Resumed::kSkip);
}

}  // namespace
}  // namespace ckptfs::policy
