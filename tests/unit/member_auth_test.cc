// Member authentication (core/replication/member_auth.h): the secret file's checks and the
// HMAC-SHA256 proofs.
#include "core/replication/member_auth.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

namespace ckptfs::replication {
namespace {

class MemberAuthTest : public testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/ckptfs-auth-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string Write(const std::string& name, const std::string& content, mode_t mode) {
    std::string path = dir_ + "/" + name;
    std::ofstream(path) << content;
    chmod(path.c_str(), mode);
    return path;
  }
  std::string dir_;
};

Nonce Filled(uint8_t v) {
  Nonce n;
  n.fill(v);
  return n;
}

TEST_F(MemberAuthTest, ASecretReadableByItsOwnerOnlyIsLoaded) {
  Result<GroupSecret> s = GroupSecret::Load(Write("key", "0123456789abcdef0123\n", 0600));
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  // The trailing newline is not part of it: the same proofs as the bytes without it.
  Result<GroupSecret> same = GroupSecret::FromBytes("0123456789abcdef0123");
  EXPECT_TRUE(SameMac(s->MemberProof(Filled(1), Filled(2), "n0"),
                      same->MemberProof(Filled(1), Filled(2), "n0")));
  EXPECT_TRUE(GroupSecret::Load(Write("key400", "0123456789abcdef0123", 0400)).ok());
}

TEST_F(MemberAuthTest, ASecretOthersMayReadOrWriteIsRefused) {
  for (mode_t mode : {0644, 0640, 0604, 0620, 0602, 0660}) {
    Result<GroupSecret> s = GroupSecret::Load(Write("key", "0123456789abcdef0123", mode));
    EXPECT_EQ(s.status().err(), EPERM) << std::oct << mode;
    EXPECT_NE(s.status().message().find("chmod 600"), std::string::npos);
  }
}

TEST_F(MemberAuthTest, ASymbolicLinkADirectoryAMissingFileAndBadLengthsAreRefused) {
  std::string target = Write("real", "0123456789abcdef0123", 0600);
  std::string link = dir_ + "/link";
  ASSERT_EQ(symlink(target.c_str(), link.c_str()), 0);
  EXPECT_EQ(GroupSecret::Load(link).status().err(), EPERM);
  mkdir((dir_ + "/d").c_str(), 0700);
  EXPECT_EQ(GroupSecret::Load(dir_ + "/d").status().err(), EPERM);
  EXPECT_EQ(GroupSecret::Load(dir_ + "/missing").status().err(), ENOENT);
  EXPECT_EQ(GroupSecret::Load(Write("short", "0123456789abcde\n\n", 0600)).status().err(), EINVAL);
  EXPECT_EQ(GroupSecret::Load(Write("long", std::string(kMaxSecretBytes + 1, 'k'), 0600))
                .status()
                .err(),
            EINVAL);
}

TEST_F(MemberAuthTest, ProofsMatchOnlyForTheSameSecretNoncesAndNames) {
  GroupSecret a = *GroupSecret::FromBytes("the group secret of the cluster");
  GroupSecret b = *GroupSecret::FromBytes("another secret of another group");
  const Mac proof = a.MemberProof(Filled(1), Filled(2), "n0");
  EXPECT_TRUE(SameMac(proof, a.MemberProof(Filled(1), Filled(2), "n0")));
  EXPECT_FALSE(SameMac(proof, b.MemberProof(Filled(1), Filled(2), "n0")));
  EXPECT_FALSE(SameMac(proof, a.MemberProof(Filled(9), Filled(2), "n0")));
  EXPECT_FALSE(SameMac(proof, a.MemberProof(Filled(1), Filled(9), "n0")));
  EXPECT_FALSE(SameMac(proof, a.MemberProof(Filled(1), Filled(2), "n1")));
  // A partner's proof is never a member's (no reflection of one side's proof to the other).
  EXPECT_FALSE(SameMac(proof, a.PartnerProof(Filled(1), Filled(2), "n0", "")));
  const Mac partner = a.PartnerProof(Filled(1), Filled(2), "n0", "n1");
  EXPECT_FALSE(SameMac(partner, a.PartnerProof(Filled(1), Filled(2), "n0", "n2")));
  EXPECT_FALSE(SameMac(partner, b.PartnerProof(Filled(1), Filled(2), "n0", "n1")));
}

TEST_F(MemberAuthTest, NoncesAreFresh) {
  Result<Nonce> a = RandomNonce();
  Result<Nonce> b = RandomNonce();
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_NE(*a, *b);
}

}  // namespace
}  // namespace ckptfs::replication
