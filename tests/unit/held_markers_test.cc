// HeldMarkers: which entries are markers, the order of their outcomes, and what later entries
// and newer markers drop.
#include "core/base/commit_markers.h"
#include "core/flush/held_markers.h"

#include <gtest/gtest.h>

#include "core/shared/shared_policy.h"

namespace ckptfs {
namespace {

class HeldMarkersTest : public ::testing::Test {
 protected:
  EntryRef Publish(uint64_t seq, const std::string& name) {
    auto e = std::make_shared<JournalEntry>();
    e->kind = JournalEntry::Kind::kPublish;
    e->seq = seq;
    e->inode = std::make_shared<Inode>(100 + seq, FileType::kRegular);
    e->names.push_back({dir_, name});
    return e;
  }
  EntryRef Rename(uint64_t seq, const std::string& from, const std::string& to) {
    auto e = std::make_shared<JournalEntry>();
    e->kind = JournalEntry::Kind::kRename;
    e->seq = seq;
    e->inode = std::make_shared<Inode>(100 + seq, FileType::kRegular);
    e->parent = e->new_parent = dir_;
    e->name = from;
    e->new_name = to;
    return e;
  }
  EntryRef Unlink(uint64_t seq, const std::string& name) {
    auto e = std::make_shared<JournalEntry>();
    e->kind = JournalEntry::Kind::kUnlink;
    e->seq = seq;
    e->inode = e->parent = dir_;
    e->name = name;
    return e;
  }
  // Holds `e` and posts it as commit "c<seq>".
  void HoldPosted(const EntryRef& e) {
    held_.Add(e, "", "/" + (e->names.empty() ? e->new_name : e->names[0].name));
    held_.Posted(e->seq, std::string("c") + std::to_string(e->seq));
  }
  static std::vector<uint64_t> Seqs(const std::vector<HeldMarker>& markers) {
    std::vector<uint64_t> out;
    for (const HeldMarker& m : markers) out.push_back(m.entry->seq);
    return out;
  }

  InodeRef dir_ = std::make_shared<Inode>(1, FileType::kDirectory);
  HeldMarkers held_;
};

TEST_F(HeldMarkersTest, PublishesUnderAMarkerNameAndRenamesToOneAreMarkers) {
  const std::vector<std::string> markers = policy::DefaultCommitMarkers();
  EXPECT_TRUE(HeldMarkers::IsMarker(*Publish(1, "latest_checkpointed_iteration.txt"), markers));
  EXPECT_TRUE(HeldMarkers::IsMarker(*Rename(2, ".metadata.tmp", ".metadata"), markers));
  EXPECT_FALSE(HeldMarkers::IsMarker(*Publish(3, ".metadata.tmp"), markers));
  EXPECT_FALSE(HeldMarkers::IsMarker(*Rename(4, ".metadata", "old"), markers));
  EXPECT_FALSE(HeldMarkers::IsMarker(*Unlink(5, ".metadata"), markers));
}

TEST_F(HeldMarkersTest, ASucceededCommitWaitsForTheMountsOwnEarlierDataAFailedOneDoesNot) {
  HoldPosted(Publish(5, ".metadata"));
  HoldPosted(Publish(7, "latest_iteration.txt"));
  EXPECT_TRUE(held_.TakeDecided(100).empty()) << "nothing is decided yet";
  held_.Decide("c5", Status::Ok());
  held_.Decide("c7", Status::Error(EHOSTDOWN, "member b died"));
  EXPECT_EQ(Seqs(held_.TakeDecided(4)), std::vector<uint64_t>{7});
  EXPECT_EQ(Seqs(held_.TakeDecided(5)), std::vector<uint64_t>{5});
  EXPECT_TRUE(held_.TakeDecided(100).empty()) << "each decided marker is taken once";
  EXPECT_TRUE(held_.HeldUpTo(5)) << "held until finished";
  held_.Finished(7, Status::Error(EHOSTDOWN, "member b died"));
  held_.Finished(5, Status::Ok());
  EXPECT_FALSE(held_.HeldUpTo(100));
  EXPECT_TRUE(held_.FailureUpTo(6).ok());
  EXPECT_EQ(held_.FailureUpTo(7).err(), EHOSTDOWN);
  EXPECT_TRUE(held_.FailureUpTo(4).ok());
}

TEST_F(HeldMarkersTest, APostThatFailsDecidesTheMarker) {
  held_.Add(Publish(3, ".metadata"), "3", "/.metadata");
  ASSERT_EQ(held_.Unposted().size(), 1u);
  held_.Posted(3, Status::Error(ENOTCONN, "not a member"));
  EXPECT_TRUE(held_.Unposted().empty());
  std::vector<HeldMarker> decided = held_.TakeDecided(0);
  ASSERT_EQ(decided.size(), 1u);
  EXPECT_EQ(decided[0].outcome->err(), ENOTCONN);
}

TEST_F(HeldMarkersTest, PublishingAMarkerDropsTheOlderOnesOfTheSameName) {
  HoldPosted(Publish(2, "latest_checkpointed_iteration.txt"));
  HoldPosted(Publish(4, "metadata.json"));
  HoldPosted(Publish(6, "latest_checkpointed_iteration.txt"));
  held_.Decide("c6", Status::Ok());
  ASSERT_EQ(Seqs(held_.TakeDecided(6)), std::vector<uint64_t>{6});
  EXPECT_EQ(Seqs(held_.Finished(6, Status::Ok())), std::vector<uint64_t>{2});
  held_.Decide("c2", Status::Ok());
  EXPECT_TRUE(held_.TakeDecided(10).empty()) << "the dropped marker's outcome is ignored";
  EXPECT_TRUE(held_.HeldUpTo(4));
}

TEST_F(HeldMarkersTest, AFailedCommitDropsNothingElse) {
  HoldPosted(Publish(2, "latest_checkpointed_iteration.txt"));
  HoldPosted(Publish(6, "latest_checkpointed_iteration.txt"));
  held_.Decide("c6", Status::Error(EHOSTDOWN, "member b died"));
  ASSERT_EQ(Seqs(held_.TakeDecided(0)), std::vector<uint64_t>{6});
  EXPECT_TRUE(held_.Finished(6, Status::Error(EHOSTDOWN, "member b died")).empty());
  held_.Decide("c2", Status::Ok());
  EXPECT_EQ(Seqs(held_.TakeDecided(6)), std::vector<uint64_t>{2});
}

TEST_F(HeldMarkersTest, ALaterChangeOfTheNameOrOfARenamesSourceDropsTheMarker) {
  HoldPosted(Publish(2, "latest_iteration.txt"));
  HoldPosted(Rename(3, ".metadata.tmp", ".metadata"));
  HoldPosted(Publish(4, "metadata.json"));
  EXPECT_TRUE(held_.SupersededBy(*Unlink(1, "latest_iteration.txt")).empty())
      << "only later entries supersede";
  EXPECT_EQ(Seqs(held_.SupersededBy(*Unlink(5, "latest_iteration.txt"))),
            std::vector<uint64_t>{2});
  EXPECT_EQ(Seqs(held_.SupersededBy(*Publish(6, ".metadata.tmp"))), std::vector<uint64_t>{3});
  EXPECT_TRUE(held_.SupersededBy(*Publish(7, "other")).empty());
  EXPECT_EQ(held_.size(), 1u);
}

TEST_F(HeldMarkersTest, UnmountTakesTheUndecidedMarkersAndRemembersThemAsFailed) {
  HoldPosted(Publish(2, ".metadata"));
  std::vector<HeldMarker> left = held_.TakeUndecided();
  EXPECT_EQ(Seqs(left), std::vector<uint64_t>{2});
  EXPECT_FALSE(held_.HeldUpTo(10));
  EXPECT_EQ(held_.FailureUpTo(10).err(), ECANCELED);
}

}  // namespace
}  // namespace ckptfs
