// The read path's pure policy: which listed names a directory shows, how an object is cut into
// ranged GETs, when a listing is taken again, and the store's times and encoded keys.
#include "core/remote/remote_read_policy.h"

#include <gtest/gtest.h>

#include <string>

namespace ckptfs::policy {
namespace {

ListedVerdict Judge(const std::string& key, bool common, const std::string& dir_prefix,
                    std::string* name, bool top = false) {
  return JudgeListed(key, common, dir_prefix, top, ".ckptfs", ".ckptfs-checksums.json", name);
}

TEST(RemoteReadPolicyTest, ADirectoryIsListedUnderItsKeyPrefix) {
  EXPECT_EQ(DirectoryKeyPrefix("job/7", ""), "job/7/");
  EXPECT_EQ(DirectoryKeyPrefix("job/7", "step_1/model"), "job/7/step_1/model/");
  EXPECT_EQ(DirectoryKeyPrefix("", ""), "");
  EXPECT_EQ(DirectoryKeyPrefix("", "step_1"), "step_1/");
}

TEST(RemoteReadPolicyTest, PlainObjectsAndCommonPrefixesAreShownByTheirLastComponent) {
  std::string name;
  EXPECT_EQ(Judge("job/step_1/__0_0.distcp", false, "job/step_1/", &name), ListedVerdict::kShow);
  EXPECT_EQ(name, "__0_0.distcp");
  EXPECT_EQ(Judge("job/step_1/", true, "job/", &name), ListedVerdict::kShow);
  EXPECT_EQ(name, "step_1");
  EXPECT_EQ(Judge("job/.metadata", false, "job/", &name), ListedVerdict::kShow);
  EXPECT_EQ(name, ".metadata");
  EXPECT_EQ(Judge("job/" + std::string(255, 'n'), false, "job/", &name), ListedVerdict::kShow);
}

TEST(RemoteReadPolicyTest, HostileNamesAreRefusedAndNeverFollowed) {
  std::string name = "untouched";
  EXPECT_EQ(Judge("job/../", true, "job/", &name), ListedVerdict::kRefuse);
  EXPECT_EQ(Judge("job/./", true, "job/", &name), ListedVerdict::kRefuse);
  EXPECT_EQ(Judge("job/..", false, "job/", &name), ListedVerdict::kRefuse);
  EXPECT_EQ(Judge("job//", true, "job/", &name), ListedVerdict::kRefuse);  // "job//etc/passwd"
  EXPECT_EQ(Judge("job/" + std::string(256, 'n'), false, "job/", &name), ListedVerdict::kRefuse);
  EXPECT_EQ(Judge("job/" + std::string(1100, 'n'), true, "job/", &name), ListedVerdict::kRefuse);
  EXPECT_EQ(Judge("other/x", false, "job/", &name), ListedVerdict::kRefuse);
  EXPECT_EQ(Judge("job/a/b", false, "job/", &name), ListedVerdict::kRefuse);
  EXPECT_EQ(Judge(std::string("job/a\0b", 7), false, "job/", &name), ListedVerdict::kRefuse);
  EXPECT_EQ(Judge("job/step", true, "job/", &name), ListedVerdict::kRefuse);  // No '/'.
  EXPECT_EQ(name, "untouched");
}

TEST(RemoteReadPolicyTest, FolderObjectsAndPrivateNamesAreSkippedQuietly) {
  std::string name = "untouched";
  EXPECT_EQ(Judge("job/step_1/", false, "job/step_1/", &name), ListedVerdict::kSkip);
  EXPECT_EQ(Judge("job/.ckptfs/", true, "job/", &name, /*top=*/true), ListedVerdict::kSkip);
  EXPECT_EQ(Judge("job/a/.ckptfs-checksums.json", false, "job/a/", &name), ListedVerdict::kSkip);
  EXPECT_EQ(name, "untouched");
  // Below the top, ".ckptfs" is an ordinary name.
  EXPECT_EQ(Judge("job/a/.ckptfs/", true, "job/a/", &name), ListedVerdict::kShow);
}

TEST(RemoteReadPolicyTest, AMarkerFoundInAListingOfSeveralPagesIsListedAgainOnce) {
  EXPECT_FALSE(ListAgain(/*found_marker=*/true, /*pages=*/1, /*second_listing=*/false));
  EXPECT_TRUE(ListAgain(true, 2, false));
  EXPECT_FALSE(ListAgain(true, 2, true));
  EXPECT_FALSE(ListAgain(false, 5, false));
}

TEST(RemoteReadPolicyTest, AnObjectIsFetchedInRangesThatCoverItExactly) {
  EXPECT_TRUE(PlanFetch(0, 8).empty());
  const std::vector<FetchRange> ranges = PlanFetch(20, 8);
  ASSERT_EQ(ranges.size(), 3u);
  EXPECT_EQ(ranges[0].offset, 0u);
  EXPECT_EQ(ranges[1].offset, 8u);
  EXPECT_EQ(ranges[2].offset, 16u);
  EXPECT_EQ(ranges[2].length, 4u);
  EXPECT_EQ(PlanFetch(16, 8).size(), 2u);
  EXPECT_EQ(PlanFetch(3, 0).size(), 3u);  // A zero range size is taken as 1.
}

TEST(RemoteReadPolicyTest, TheStoresTimesAreReadAsUtc) {
  std::optional<timespec> t = ParseS3Time("2026-12-04T22:02:49.250Z");
  ASSERT_TRUE(t);
  EXPECT_EQ(t->tv_sec, 1796421769);
  EXPECT_EQ(t->tv_nsec, 250'000'000);
  t = ParseS3Time("1970-01-01T00:00:00Z");
  ASSERT_TRUE(t);
  EXPECT_EQ(t->tv_sec, 0);
  EXPECT_EQ(ParseS3Time("2000-02-29T12:00:00.000Z")->tv_sec, 951825600);
  EXPECT_FALSE(ParseS3Time("yesterday"));
  EXPECT_FALSE(ParseS3Time("2026-13-04T22:02:49.000Z"));
  EXPECT_FALSE(ParseS3Time("2026-12-04T22:02:49.000+01:00"));
}

TEST(RemoteReadPolicyTest, UrlEncodedKeysAreDecodedAndBrokenEscapesRefused) {
  EXPECT_EQ(UrlDecodeKey("job/a%20b+c%2F"), "job/a b c/");
  EXPECT_EQ(UrlDecodeKey("%2e%2E"), "..");
  EXPECT_FALSE(UrlDecodeKey("job/%2"));
  EXPECT_FALSE(UrlDecodeKey("job/%zz"));
}

TEST(RemoteReadPolicyTest, AStoredVersionRecordNamesItsObjectOnlyForTheBytesItWasWrittenFor) {
  const std::string record = FormatStoredVersion("\"9b2cf535f27731c974343645a3985328\"", 4096,
                                                 1764892969123456789);
  EXPECT_EQ(StoredEtagOf(record, 4096, 1764892969123456789),
            "\"9b2cf535f27731c974343645a3985328\"");
  // Rewritten since (another size, or another mtime): the record is of other bytes.
  EXPECT_EQ(StoredEtagOf(record, 4097, 1764892969123456789), std::nullopt);
  EXPECT_EQ(StoredEtagOf(record, 4096, 1764892969123456788), std::nullopt);
  // Broken or hostile records name nothing.
  EXPECT_EQ(StoredEtagOf("", 0, 0), std::nullopt);
  EXPECT_EQ(StoredEtagOf("\n0\n0", 0, 0), std::nullopt);
  EXPECT_EQ(StoredEtagOf("abc\n0", 0, 0), std::nullopt);
  EXPECT_EQ(StoredEtagOf("abc\n0\n0\n", 0, 0), std::nullopt);
  EXPECT_EQ(StoredEtagOf(std::string("a\0c\n0\n0", 7), 0, 0), std::nullopt);
  EXPECT_EQ(StoredEtagOf(std::string(2000, 'e') + "\n0\n0", 0, 0), std::nullopt);
}

TEST(RemoteReadPolicyTest, EtagsAreComparedWithoutTheirQuotesAndAnEmptyOneMatchesNothing) {
  EXPECT_TRUE(SameEtag("\"abc\"", "abc"));
  EXPECT_TRUE(SameEtag("abc-3", "\"abc-3\""));
  EXPECT_FALSE(SameEtag("\"abc\"", "\"abd\""));
  EXPECT_FALSE(SameEtag("", ""));
  EXPECT_FALSE(SameEtag("\"\"", "\"\""));
}

TEST(RemoteReadPolicyTest, ALocalFileTheStoreReplacedBecomesAPlaceholderUnlessItIsStillToBeSent) {
  const std::optional<std::string> none;
  const std::optional<std::string> old_etag = "\"v1\"";
  const std::optional<std::string> new_etag = "\"v2\"";
  // Nothing local: the object is shown.
  EXPECT_EQ(JudgeListedOverLocal(false, false, true, none, "\"v2\"", PendingChange::kNone),
            ListedOverLocal::kPlaceholder);
  // The local file is the listed object: kept.
  EXPECT_EQ(JudgeListedOverLocal(true, true, true, new_etag, "\"v2\"", PendingChange::kNone),
            ListedOverLocal::kKeepLocal);
  // Another node put a newer object over the one the local file matches: the store's wins.
  EXPECT_EQ(JudgeListedOverLocal(true, true, true, old_etag, "\"v2\"", PendingChange::kNone),
            ListedOverLocal::kPlaceholder);
  // No record (a mount that kept none, or a record lost in a crash): the store's wins.
  EXPECT_EQ(JudgeListedOverLocal(true, true, true, none, "\"v2\"", PendingChange::kNone),
            ListedOverLocal::kPlaceholder);
  // A local version still to be uploaded is newer than the store's, record or not.
  EXPECT_EQ(JudgeListedOverLocal(true, true, true, old_etag, "\"v2\"", PendingChange::kUpload),
            ListedOverLocal::kKeepLocal);
  EXPECT_EQ(JudgeListedOverLocal(true, true, true, none, "\"v2\"", PendingChange::kUpload),
            ListedOverLocal::kKeepLocal);
  // Not a regular file (a directory, a symbolic link): never replaced.
  EXPECT_EQ(JudgeListedOverLocal(true, false, true, none, "\"v2\"", PendingChange::kNone),
            ListedOverLocal::kKeepLocal);
  // A backing filesystem without user extended attributes keeps no records: the local file
  // stays, as it would with no remote.
  EXPECT_EQ(JudgeListedOverLocal(true, true, false, none, "\"v2\"", PendingChange::kNone),
            ListedOverLocal::kKeepLocal);
  // The store gave no ETag: nothing to compare with, the local file stays.
  EXPECT_EQ(JudgeListedOverLocal(true, true, true, old_etag, "", PendingChange::kNone),
            ListedOverLocal::kKeepLocal);
}

TEST(RemoteReadPolicyTest, AnObjectWhoseRemovalIsPendingIsNeverShownAgain) {
  EXPECT_EQ(JudgeListedOverLocal(false, false, true, std::nullopt, "\"v1\"",
                                 PendingChange::kRemoval),
            ListedOverLocal::kSkip);
  EXPECT_EQ(JudgeListedOverLocal(true, true, true, std::string("\"v1\""), "\"v1\"",
                                 PendingChange::kRemoval),
            ListedOverLocal::kSkip);
}

TEST(RemoteReadPolicyTest, APlaceholderMarkNamesItsKeyAfterTheEtag) {
  const std::string mark = PlaceholderMark("\"e1\"", "run/ckpt/a b");
  EXPECT_EQ(mark, "\"e1\"\nrun/ckpt/a b");
  EXPECT_EQ(PlaceholderMarkKey(mark), std::optional<std::string_view>("run/ckpt/a b"));
  EXPECT_EQ(PlaceholderMarkKey(PlaceholderMark("", "k")), std::optional<std::string_view>("k"));
  EXPECT_EQ(PlaceholderMarkKey("no line break"), std::nullopt);
}

TEST(RemoteReadPolicyTest, APlaceholderNamesOnlyAnObjectUnderTheMountsPrefix) {
  EXPECT_TRUE(IsPlaceholderKey("job/7/step/x", "job/7"));
  EXPECT_FALSE(IsPlaceholderKey("job/70/x", "job/7"));
  EXPECT_FALSE(IsPlaceholderKey("other/x", "job/7"));
  EXPECT_FALSE(IsPlaceholderKey("", ""));
  EXPECT_TRUE(IsPlaceholderKey("x", ""));
  EXPECT_FALSE(IsPlaceholderKey(std::string(1025, 'k'), ""));
}

}  // namespace
}  // namespace ckptfs::policy
