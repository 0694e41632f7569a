// The remote tier's parsers of untrusted text: s3:// locations, the AWS shared files and the
// environment's credentials, S3's XML answers, and the upload log (hostile input bounded).
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>

#include "core/remote/aws_credentials.h"
#include "core/remote/s3_location.h"
#include "core/remote/s3_xml.h"
#include "core/remote/upload_log.h"

namespace ckptfs {
namespace {

TEST(S3LocationTest, ABucketAndPrefixGiveKeysUnderThePrefix) {
  Result<S3Location> l = S3Location::Parse("s3://ckpt-bucket/runs/7/");
  ASSERT_TRUE(l.ok()) << l.status().ToString();
  EXPECT_EQ(l->bucket, "ckpt-bucket");
  EXPECT_EQ(l->prefix, "runs/7");
  EXPECT_EQ(l->KeyOf("step_10/.metadata"), "runs/7/step_10/.metadata");
  EXPECT_EQ(l->ToString(), "s3://ckpt-bucket/runs/7");
}

TEST(S3LocationTest, ABucketWithoutPrefixKeepsPathsAsKeys) {
  Result<S3Location> l = S3Location::Parse("s3://abc");
  ASSERT_TRUE(l.ok());
  EXPECT_EQ(l->prefix, "");
  EXPECT_EQ(l->KeyOf("a/b"), "a/b");
}

TEST(S3LocationTest, WhatS3RefusesIsRefusedWithTheReason) {
  for (const char* bad : {"http://bucket/x", "s3://", "s3://ab", "s3://Upper", "s3://-abc",
                          "s3://abc-", "s3://a_b_c", "s3://abc//x", "s3://abc/./x",
                          "s3://abc/../x", "s3://abc/x\ty"}) {
    Result<S3Location> l = S3Location::Parse(bad);
    EXPECT_FALSE(l.ok()) << bad;
    EXPECT_EQ(l.status().err(), EINVAL) << bad;
  }
  EXPECT_FALSE(S3Location::Parse("s3://" + std::string(64, 'a')).ok());
  EXPECT_FALSE(S3Location::Parse("s3://abc/" + std::string(513, 'p')).ok());
}

TEST(IniTest, SectionsKeysAndValuesAreTrimmedAndCommentsSkipped) {
  Result<IniSections> ini = ParseIni(
      "# comment\n[default]\naws_access_key_id = AKIA\r\n ; another\n"
      "[profile dev]\nregion=eu-west-1\nnot a pair\n");
  ASSERT_TRUE(ini.ok());
  EXPECT_EQ((*ini)["default"]["aws_access_key_id"], "AKIA");
  EXPECT_EQ((*ini)["profile dev"]["region"], "eu-west-1");
  EXPECT_EQ((*ini)["profile dev"].size(), 1u);
}

TEST(IniTest, HostileFilesAreRefusedNotRead) {
  EXPECT_FALSE(ParseIni(std::string((1 << 20) + 1, 'a')).ok());
  EXPECT_FALSE(ParseIni("[x]\nk=" + std::string(5000, 'v') + "\n").ok());
  std::string many;
  for (int i = 0; i < 5000; ++i) many += "k" + std::to_string(i) + "=v\n";
  EXPECT_FALSE(ParseIni(many).ok());
  // Unclosed sections and stray bytes are skipped, not fatal.
  Result<IniSections> odd = ParseIni(std::string("[unclosed\n\x01\xff=\x02\n", 14));
  EXPECT_TRUE(odd.ok());
}

class CredentialsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/ckptfs-aws-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    home_ = tmpl;
    env_["HOME"] = home_;
    mkdir((home_ + "/.aws").c_str(), 0700);
  }
  void TearDown() override { std::filesystem::remove_all(home_); }
  void Write(const std::string& name, const std::string& text) {
    std::ofstream(home_ + "/.aws/" + name) << text;
  }
  EnvLookup Env() {
    return [this](const std::string& name) -> std::optional<std::string> {
      auto it = env_.find(name);
      if (it == env_.end()) return std::nullopt;
      return it->second;
    };
  }
  std::string home_;
  std::map<std::string, std::string> env_;
};

TEST_F(CredentialsTest, TheEnvironmentComesFirst) {
  Write("credentials", "[default]\naws_access_key_id=FILEKEY\naws_secret_access_key=FILESECRET\n");
  env_["AWS_ACCESS_KEY_ID"] = "ENVKEY";
  env_["AWS_SECRET_ACCESS_KEY"] = "ENVSECRET";
  env_["AWS_SESSION_TOKEN"] = "TOKEN";
  Result<AwsCredentials> c = LoadAwsCredentials(Env());
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->access_key, "ENVKEY");
  EXPECT_EQ(c->secret_key, "ENVSECRET");
  EXPECT_EQ(c->session_token, "TOKEN");
  EXPECT_EQ(c->source.find("SECRET"), std::string::npos);
}

TEST_F(CredentialsTest, AProfileIsReadFromTheCredentialsThenTheConfigFile) {
  Write("credentials", "[default]\naws_access_key_id=DEFKEY\naws_secret_access_key=DEFSECRET\n");
  Write("config", "[profile train]\naws_access_key_id=CFGKEY\naws_secret_access_key=CFGSECRET\n"
                  "region = eu-central-1\n");
  Result<AwsCredentials> d = LoadAwsCredentials(Env());
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->access_key, "DEFKEY");
  env_["AWS_PROFILE"] = "train";
  Result<AwsCredentials> t = LoadAwsCredentials(Env());
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->access_key, "CFGKEY");
  EXPECT_NE(t->source.find("profile train"), std::string::npos);
  EXPECT_EQ(LoadAwsRegion(Env()), "eu-central-1");
  env_["AWS_REGION"] = "us-west-2";
  EXPECT_EQ(LoadAwsRegion(Env()), "us-west-2");
}

TEST_F(CredentialsTest, NoCredentialsSaysWhereItLookedAndNeverAKey) {
  Write("config", "[profile sso]\nsso_session = corp\naws_secret_access_key=HALFSECRET\n");
  env_["AWS_PROFILE"] = "sso";
  Result<AwsCredentials> c = LoadAwsCredentials(Env());
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().err(), EACCES);
  EXPECT_NE(c.status().message().find("SSO, not supported"), std::string::npos);
  EXPECT_NE(c.status().message().find(home_ + "/.aws/credentials"), std::string::npos);
  EXPECT_EQ(c.status().message().find("HALFSECRET"), std::string::npos);
}

TEST_F(CredentialsTest, AnOversizedCredentialsFileIsRefusedAndSaidSo) {
  Write("credentials", std::string((1 << 20) + 10, '#'));
  Result<AwsCredentials> c = LoadAwsCredentials(Env());
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("larger than 1 MiB"), std::string::npos);
}

TEST(S3XmlTest, AnErrorAnswerGivesItsCodeAndMessage) {
  Result<S3Xml> x = ParseS3Xml(
      "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>SlowDown</Code>"
      "<Message>Reduce your request rate.</Message><RequestId>1</RequestId></Error>");
  ASSERT_TRUE(x.ok()) << x.status().ToString();
  EXPECT_EQ(x->root, "Error");
  EXPECT_EQ(x->Field("Code"), "SlowDown");
  EXPECT_EQ(x->Field("Message"), "Reduce your request rate.");
  EXPECT_EQ(x->Field("Missing"), "");
}

TEST(S3XmlTest, ANamespacedUploadAnswerGivesItsUploadId) {
  Result<S3Xml> x = ParseS3Xml(
      "<InitiateMultipartUploadResult xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">"
      "<Bucket>b</Bucket><Key>k</Key><UploadId>abc&amp;def</UploadId>"
      "</InitiateMultipartUploadResult>");
  ASSERT_TRUE(x.ok());
  EXPECT_EQ(x->Field("UploadId"), "abc&def");
}

TEST(S3XmlTest, HostileAnswersAreRefusedBounded) {
  EXPECT_EQ(ParseS3Xml("not xml").status().err(), EPROTO);
  EXPECT_EQ(ParseS3Xml("<a><b>").status().err(), EPROTO);
  EXPECT_FALSE(ParseS3Xml("").ok());
  EXPECT_FALSE(ParseS3Xml(std::string((1 << 20) + 1, ' ')).ok());
  EXPECT_FALSE(ParseS3Xml("<a><b>" + std::string(5000, 'x') + "</b></a>").ok());
  std::string deep;
  for (int i = 0; i < 40; ++i) deep += "<d>";
  for (int i = 0; i < 40; ++i) deep += "</d>";
  EXPECT_FALSE(ParseS3Xml(deep).ok());
  // Billion laughs: entity declarations are refused before any expansion.
  const std::string laughs =
      "<?xml version=\"1.0\"?><!DOCTYPE r [<!ENTITY a \"aaaaaaaaaa\">"
      "<!ENTITY b \"&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;\"><!ENTITY c \"&b;&b;&b;&b;&b;&b;&b;&b;\">]>"
      "<r><Code>&c;</Code></r>";
  Result<S3Xml> x = ParseS3Xml(laughs);
  EXPECT_FALSE(x.ok());
  // External entities are never fetched.
  Result<S3Xml> ext = ParseS3Xml(
      "<?xml version=\"1.0\"?><!DOCTYPE r [<!ENTITY e SYSTEM \"file:///etc/passwd\">]>"
      "<r><Code>&e;</Code></r>");
  EXPECT_FALSE(ext.ok());
}

TEST(S3XmlTest, TextOfNestedElementsIsNotTakenForAField) {
  Result<S3Xml> x = ParseS3Xml("<r><Outer><Inner>v</Inner></Outer><Code>c</Code></r>");
  ASSERT_TRUE(x.ok());
  EXPECT_EQ(x->Field("Outer"), "");
  EXPECT_EQ(x->Field("Code"), "c");
}

TEST(S3XmlTest, AListingGivesEachUploadsKeyAndId) {
  Result<S3Xml> x = ParseS3Xml(
      "<ListMultipartUploadsResult xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">"
      "<Bucket>b</Bucket><IsTruncated>false</IsTruncated>"
      "<Upload><Key>run/a</Key><UploadId>id1</UploadId><Initiator><ID>x</ID></Initiator></Upload>"
      "<Upload><Key>run/b</Key><UploadId>id2</UploadId></Upload>"
      "</ListMultipartUploadsResult>");
  ASSERT_TRUE(x.ok()) << x.status().ToString();
  EXPECT_EQ(x->Field("IsTruncated"), "false");
  ASSERT_EQ(x->groups.size(), 2u);
  EXPECT_EQ(x->groups[0].name, "Upload");
  EXPECT_EQ(x->groups[0].fields.at("Key"), "run/a");
  EXPECT_EQ(x->groups[0].fields.at("UploadId"), "id1");
  EXPECT_EQ(x->groups[0].fields.count("Initiator"), 0u) << "it holds elements";
  EXPECT_EQ(x->groups[1].fields.at("UploadId"), "id2");
}

TEST(S3XmlTest, AListingOfTooManyGroupsIsRefused) {
  std::string xml = "<r>";
  for (int i = 0; i < 10'001; ++i) xml += "<U><K>k</K></U>";
  xml += "</r>";
  EXPECT_EQ(ParseS3Xml(xml).status().err(), EINVAL);
}

policy::LoggedUploads::Version Logged(std::string path, uint64_t inode) {
  policy::LoggedUploads::Version v;
  v.path = std::move(path);
  v.inode = inode;
  v.size = inode * 10;
  v.mtime_ns = -static_cast<int64_t>(inode);
  return v;
}

policy::LoggedUploads::Version Removal(std::string path) {
  policy::LoggedUploads::Version v;
  v.path = std::move(path);
  v.removal = true;
  return v;
}

TEST(UploadLogTest, RecordsReadBackInOrderWithTheLastDoneCount) {
  std::string bytes(UploadLogHeader());
  bytes += EncodeHandedOver(Logged("step 1/a\nb:c", 1));
  bytes += EncodeHandedOver(Removal("step 1/old"));
  bytes += EncodeDone(1);
  bytes += EncodeHandedOver(Logged("step 1/.metadata", 3));
  bool torn = true;
  Result<policy::LoggedUploads> log = DecodeUploadLog(bytes, &torn);
  ASSERT_TRUE(log.ok()) << log.status().ToString();
  EXPECT_FALSE(torn);
  ASSERT_EQ(log->handed_over.size(), 3u);
  EXPECT_EQ(log->handed_over[0].path, "step 1/a\nb:c");
  EXPECT_EQ(log->handed_over[0].inode, 1u);
  EXPECT_EQ(log->handed_over[0].size, 10u);
  EXPECT_EQ(log->handed_over[0].mtime_ns, -1);
  EXPECT_TRUE(log->handed_over[1].removal);
  EXPECT_EQ(log->handed_over[1].path, "step 1/old");
  EXPECT_EQ(log->done, 1u);
  ASSERT_EQ(log->Pending().size(), 2u);
  EXPECT_EQ(log->Pending()[1].path, "step 1/.metadata");
}

TEST(UploadLogTest, ARenamedFilesOldNameAndAVersionGivenUpReadBack) {
  policy::LoggedUploads::Version renamed = Logged("step/.metadata", 2);
  renamed.copy_from = "step/.metadata.tmp";
  std::string bytes(UploadLogHeader());
  bytes += EncodeHandedOver(Logged("step/x", 1));
  bytes += EncodeHandedOver(renamed);
  bytes += EncodeGivenUp(0, {12, -5});
  bytes += EncodeGivenUp(2, {12, -5});  // Names no version: the log ends before it.
  bool torn = false;
  Result<policy::LoggedUploads> log = DecodeUploadLog(bytes, &torn);
  ASSERT_TRUE(log.ok()) << log.status().ToString();
  EXPECT_TRUE(torn);
  ASSERT_EQ(log->handed_over.size(), 2u);
  ASSERT_TRUE(log->handed_over[0].given_up);
  EXPECT_EQ(log->handed_over[0].given_up->size, 12u);
  EXPECT_EQ(log->handed_over[0].given_up->mtime_ns, -5);
  EXPECT_TRUE(log->handed_over[0].copy_from.empty());
  EXPECT_FALSE(log->handed_over[1].given_up);
  EXPECT_EQ(log->handed_over[1].path, "step/.metadata");
  EXPECT_EQ(log->handed_over[1].copy_from, "step/.metadata.tmp");
  EXPECT_EQ(log->handed_over[1].inode, 2u);
}

TEST(UploadLogTest, ARenamedDirectoryReadsBackWithBothNames) {
  policy::LoggedUploads::Version move;
  move.path = "ckpt.orbax-checkpoint-tmp-1";
  move.move_to = "ckpt";
  bool torn = true;
  Result<policy::LoggedUploads> log =
      DecodeUploadLog(std::string(UploadLogHeader()) + EncodeHandedOver(move), &torn);
  ASSERT_TRUE(log.ok()) << log.status().ToString();
  EXPECT_FALSE(torn);
  ASSERT_EQ(log->handed_over.size(), 1u);
  EXPECT_EQ(log->handed_over[0].path, "ckpt.orbax-checkpoint-tmp-1");
  EXPECT_EQ(log->handed_over[0].move_to, "ckpt");
  EXPECT_FALSE(log->handed_over[0].removal);
}

TEST(UploadLogTest, ATornOrAlteredRecordEndsTheLog) {
  const std::string head = std::string(UploadLogHeader()) + EncodeHandedOver(Logged("a", 1));
  const std::string second = EncodeHandedOver(Logged("b", 2));
  for (size_t cut = 0; cut < second.size(); ++cut) {
    bool torn = false;
    Result<policy::LoggedUploads> log = DecodeUploadLog(head + second.substr(0, cut), &torn);
    ASSERT_TRUE(log.ok());
    EXPECT_EQ(log->handed_over.size(), 1u) << "cut at " << cut;
    EXPECT_EQ(torn, cut > 0);
  }
  for (size_t flip = 0; flip + 1 < second.size(); ++flip) {
    std::string altered = second;
    altered[flip] ^= 0x01;
    bool torn = false;
    Result<policy::LoggedUploads> log = DecodeUploadLog(head + altered + second, &torn);
    ASSERT_TRUE(log.ok());
    EXPECT_EQ(log->handed_over.size(), 1u) << "flip at " << flip;
    EXPECT_TRUE(torn);
  }
}

TEST(UploadLogTest, HostileLogsAreRefusedOrCutBounded) {
  bool torn = false;
  EXPECT_EQ(DecodeUploadLog("not a log\n", &torn).status().err(), EINVAL);
  EXPECT_EQ(DecodeUploadLog("", &torn).status().err(), EINVAL);
  const std::string head(UploadLogHeader());
  // A path length beyond the bound, or beyond the bytes there are.
  for (const std::string record : {"U 1 2 3 99999999999:x 00000000\n", "U 1 2 3 5000:x 0\n",
                                   "R 18446744073709551616:x 00000000\n", "D 5 00000000\n",
                                   "X junk\n", "U -1 2 3 1:x 00000000\n"}) {
    Result<policy::LoggedUploads> log = DecodeUploadLog(head + record, &torn);
    ASSERT_TRUE(log.ok()) << record;
    EXPECT_TRUE(log->handed_over.empty()) << record;
    EXPECT_TRUE(torn) << record;
  }
  // A done count beyond what was handed over is not one this code wrote.
  Result<policy::LoggedUploads> log =
      DecodeUploadLog(head + EncodeHandedOver(Logged("a", 1)) + EncodeDone(2), &torn);
  ASSERT_TRUE(log.ok());
  EXPECT_EQ(log->done, 0u);
  EXPECT_TRUE(torn);
  EXPECT_EQ(DecodeUploadLog(std::string(kMaxUploadLogBytes + 1, 'x'), &torn).status().err(),
            EINVAL);
}

}  // namespace
}  // namespace ckptfs
