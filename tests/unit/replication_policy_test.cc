// The pure rules of replication (core/replication/replication_policy.h).
#include "core/replication/replication_policy.h"

#include <gtest/gtest.h>

#include "core/base/commit_markers.h"

#include <limits>

namespace ckptfs::policy {
namespace {

using Names = std::vector<std::string>;

TEST(PartnersOfTest, PartnersAreTheNextMembersInTheRingOfNames) {
  EXPECT_EQ(PartnersOf("n1", {"n0", "n2", "n3"}, 1), Names({"n2"}));
  EXPECT_EQ(PartnersOf("n1", {"n3", "n0", "n2"}, 2), Names({"n2", "n3"}));
}

TEST(PartnersOfTest, TheRingWrapsAroundAfterTheLastName) {
  EXPECT_EQ(PartnersOf("n3", {"n0", "n1", "n2"}, 1), Names({"n0"}));
  EXPECT_EQ(PartnersOf("n2", {"n0", "n1", "n3"}, 2), Names({"n3", "n0"}));
}

TEST(PartnersOfTest, AMemberMissingFromTheLiveListStillFindsItsSuccessor) {
  // The ring is of live names: a member that is not listed (itself) still has its place.
  EXPECT_EQ(PartnersOf("b", {"a", "c"}, 1), Names({"c"}));
}

TEST(PartnersOfTest, FewerLiveMembersGiveFewerPartnersAndNeverSelfOrOneTwice) {
  EXPECT_EQ(PartnersOf("n0", {"n1"}, 2), Names({"n1"}));
  EXPECT_EQ(PartnersOf("n0", {"n0", "n1", "n1"}, 2), Names({"n1"}));
  EXPECT_TRUE(PartnersOf("n0", {}, 2).empty());
  EXPECT_TRUE(PartnersOf("n0", {"n0"}, 1).empty());
}

TEST(PartnersOfTest, NoReplicasMeansNoPartners) {
  EXPECT_TRUE(PartnersOf("n0", {"n1", "n2"}, 0).empty());
  EXPECT_TRUE(PartnersOf("n0", {"n1", "n2"}, -1).empty());
}

TEST(PartnersOfTest, EveryMemberIsThePartnerOfAsManyAsItHasPartners) {
  const Names all = {"a", "b", "c", "d", "e"};
  std::map<std::string, int> held_for;
  for (const std::string& self : all) {
    for (const std::string& p : PartnersOf(self, all, 2)) ++held_for[p];
  }
  for (const std::string& n : all) EXPECT_EQ(held_for[n], 2) << n;
}

TEST(MayHoldTest, AStoreTakesAReplicaOnlyWhileItFits) {
  EXPECT_TRUE(MayHold(0, 100, 100));
  EXPECT_TRUE(MayHold(40, 60, 100));
  EXPECT_FALSE(MayHold(41, 60, 100));
  EXPECT_FALSE(MayHold(0, 101, 100));
  EXPECT_TRUE(MayHold(100, 0, 100));
}

TEST(MayHoldTest, HugeSizesDoNotWrapAround) {
  const uint64_t max = std::numeric_limits<uint64_t>::max();
  EXPECT_FALSE(MayHold(10, max, 100));
  EXPECT_FALSE(MayHold(max, 10, 100));
  EXPECT_FALSE(EverFits(max, 100));
  EXPECT_TRUE(EverFits(100, 100));
}

TEST(DefaultPartnerStoreBytesTest, IsAQuarterOfTheCache) {
  EXPECT_EQ(DefaultPartnerStoreBytes(uint64_t{4} << 30), uint64_t{1} << 30);
}

TEST(ReplicaMemoryPolicyTest, OnlyReplicasOfAMebibyteOrMoreAreReceivedIntoKeptMemory) {
  EXPECT_FALSE(KeepsReplicaMemory(0));
  EXPECT_FALSE(KeepsReplicaMemory(kKeptReplicaBytes - 1));
  EXPECT_TRUE(KeepsReplicaMemory(kKeptReplicaBytes));
}

TEST(ReplicaMemoryPolicyTest, AReplicaIsMappedInWholePages) {
  EXPECT_EQ(ReplicaMapBytes(1, 4096), 4096u);
  EXPECT_EQ(ReplicaMapBytes(4096, 4096), 4096u);
  EXPECT_EQ(ReplicaMapBytes(4097, 4096), 8192u);
  EXPECT_EQ(ReplicaMapBytes(uint64_t{128} << 20, 4096), uint64_t{128} << 20);
}

TEST(ReplicaMemoryPolicyTest, KeptMemoryTakesAReplicaThatFitsAndWastesAtMostAnEighth) {
  const uint64_t mib = uint64_t{1} << 20;
  EXPECT_TRUE(ReusesReplicaMemory(128 * mib, 128 * mib));
  EXPECT_TRUE(ReusesReplicaMemory(128 * mib, 112 * mib));
  EXPECT_FALSE(ReusesReplicaMemory(128 * mib, 112 * mib - 1));
  EXPECT_FALSE(ReusesReplicaMemory(128 * mib, 128 * mib + 1));
}

TEST(MayStandInTest, APartnerCompletesOnlyWhenItCoversEverythingTheDeadMemberHadSealedAtSight) {
  EXPECT_EQ(MayStandIn(10, 10), StandIn::kComplete);
  EXPECT_EQ(MayStandIn(10, 25), StandIn::kComplete);
  EXPECT_EQ(MayStandIn(10, 9), StandIn::kNotReplicated);
}

TEST(MayStandInTest, AMemberThatToldThisOneNothingIsNotItsToCompleteExceptWhenItOwedNothing) {
  EXPECT_EQ(MayStandIn(10, std::nullopt), StandIn::kNothingHeld);
  EXPECT_EQ(MayStandIn(std::nullopt, std::nullopt), StandIn::kUnseen);
}

TEST(MayStandInTest, AMemberThatDiedBeforeItSawTheRequestCannotBeStoodInFor) {
  EXPECT_EQ(MayStandIn(std::nullopt, 1000), StandIn::kUnseen);
}

TEST(MayStandInTest, AMemberThatHadSealedNothingOwesNothing) {
  EXPECT_EQ(MayStandIn(0, std::nullopt), StandIn::kComplete);
  EXPECT_EQ(MayStandIn(0, 0), StandIn::kComplete);
}

TEST(CoveredPointTest, IsTheLowestOfWhatWasFedWhatIsHeldAndWhatCanBeReplayed) {
  EXPECT_EQ(CoveredPoint(10, UINT64_MAX, UINT64_MAX), 10u);
  EXPECT_EQ(CoveredPoint(10, 7, UINT64_MAX), 7u);
  EXPECT_EQ(CoveredPoint(10, 12, 4), 4u);
  EXPECT_EQ(CoveredPoint(0, 12, 4), 0u);
}

TEST(ReplayableThroughTest, ANamespaceChangeNotDurableStopsThePointBeforeIt) {
  EXPECT_EQ(ReplayableThrough(20, 0), 20u);
  EXPECT_EQ(ReplayableThrough(20, 8), 7u);
  EXPECT_EQ(ReplayableThrough(20, 1), 0u);
  // A change sealed after the last entry handed over does not matter yet.
  EXPECT_EQ(ReplayableThrough(5, 9), 5u);
}

TEST(PartnerReplaysTest, VersionsDirectoriesAndRenamesSentAsMarkersNothingElse) {
  EXPECT_TRUE(PartnerReplays(JournalChange::kFileVersion));
  EXPECT_TRUE(PartnerReplays(JournalChange::kDirectoryCreation));
  EXPECT_TRUE(PartnerReplays(JournalChange::kRenameSentAsMarker));
  EXPECT_FALSE(PartnerReplays(JournalChange::kOther)) << "a rename, unlink, link, setattr";
}

TEST(RenameSentAsMarkerTest, ARenameOfAnUnchangedFileToAMarkerWithReplicasOnly) {
  EXPECT_TRUE(RenameSentAsMarker(1, true, true, false)) << "DCP's .metadata.tmp to .metadata";
  EXPECT_TRUE(RenameSentAsMarker(2, true, true, false));
  EXPECT_FALSE(RenameSentAsMarker(0, true, true, false)) << "no partners";
  EXPECT_FALSE(RenameSentAsMarker(1, false, true, false)) << "a directory";
  EXPECT_FALSE(RenameSentAsMarker(1, true, false, false)) << "not to a marker";
  EXPECT_FALSE(RenameSentAsMarker(1, true, true, true))
      << "changed since its seal: its content is not what the rename moves";
}

TEST(StandInWritesTest, EachNeededVersionIsWrittenOnceInCloseOrderAndMarkersNever) {
  EXPECT_TRUE(StandInWrites(5, 0, 10, false));
  EXPECT_TRUE(StandInWrites(10, 9, 10, false));
  EXPECT_FALSE(StandInWrites(11, 0, 10, false)) << "sealed after the member saw the request";
  EXPECT_FALSE(StandInWrites(5, 5, 10, false)) << "written already";
  EXPECT_FALSE(StandInWrites(5, 0, 10, true)) << "the dead member's own marker";
}

TEST(RecoveryRepublishesTest, OnlyWhatNoPartnerMadeDurable) {
  EXPECT_TRUE(RecoveryRepublishes(5, 0, 0, false)) << "no partner stood in";
  EXPECT_FALSE(RecoveryRepublishes(5, 10, 0, false));
  EXPECT_FALSE(RecoveryRepublishes(10, 10, 0, false));
  EXPECT_TRUE(RecoveryRepublishes(11, 10, 0, false)) << "sealed after what the partner wrote";
  EXPECT_TRUE(RecoveryRepublishes(5, 10, 0, true)) << "a marker the partner did not publish";
  EXPECT_FALSE(RecoveryRepublishes(5, 10, 5, true)) << "the partner published it";
  EXPECT_TRUE(RecoveryRepublishes(12, 12, 5, true)) << "a later marker";
  // A rename to a marker is a marker: the partner published it in its place, or did not.
  EXPECT_FALSE(RecoveryRepublishes(6, 5, 6, true)) << "a renamed marker the partner published";
  EXPECT_TRUE(RecoveryRepublishes(6, 9, 0, true)) << "its data written, the rename not replayed";
}

TEST(MarkerStandInOfTest, TheFirstLiveMemberAfterTheDeadOneInTheRingPublishesItsMarkers) {
  EXPECT_EQ(MarkerStandInOf("n1", {"n3", "n0", "n2"}), "n2");
  EXPECT_EQ(MarkerStandInOf("n3", {"n0", "n1", "n2"}), "n0") << "the ring wraps around";
  // With replicas=2 its second partner holds the marker too, and takes over once the first died.
  EXPECT_EQ(MarkerStandInOf("n1", {"n0", "n3"}), "n3");
  EXPECT_EQ(MarkerStandInOf("n1", {"n1"}), std::nullopt) << "nobody else is live";
  EXPECT_EQ(MarkerStandInOf("n1", {}), std::nullopt);
}

TEST(MarkerStandInOfTest, EveryMemberNamesTheSameOneWhateverTheOrderItListsThemIn) {
  EXPECT_EQ(MarkerStandInOf("b", {"c", "a", "d"}), MarkerStandInOf("b", {"d", "c", "a"}));
}

TEST(DeadMarkerActionTest, TheChosenPartnerCommitsAMarkerWhoseEarlierVersionsItCovers) {
  EXPECT_EQ(DeadMarkerAction(true, false, 10, 10, 0), DeadMarker::kCommit);
  EXPECT_EQ(DeadMarkerAction(true, false, 10, 9, 0), DeadMarker::kCommit)
      << "everything before the marker is covered, and the marker is held";
  EXPECT_EQ(DeadMarkerAction(true, false, 10, 20, 0), DeadMarker::kCommit);
  EXPECT_EQ(DeadMarkerAction(true, false, 1, 0, 0), DeadMarker::kCommit)
      << "the marker is its first entry";
}

TEST(DeadMarkerActionTest, NoMarkerIsPublishedAheadOfDataNeverReplicated) {
  EXPECT_EQ(DeadMarkerAction(true, false, 10, 8, 0), DeadMarker::kNotReplicated);
  EXPECT_EQ(DeadMarkerAction(true, false, 10, std::nullopt, 0), DeadMarker::kNotReplicated);
}

TEST(DeadMarkerActionTest, OnlyTheChosenPartnerPublishesAndNothingTwice) {
  EXPECT_EQ(DeadMarkerAction(false, false, 10, 10, 0), DeadMarker::kNotMine);
  EXPECT_EQ(DeadMarkerAction(true, true, 10, 10, 0), DeadMarker::kComesBack)
      << "its node's worker recovers the run and publishes the marker itself";
  EXPECT_EQ(DeadMarkerAction(true, false, 10, 10, 10), DeadMarker::kPublished);
  EXPECT_EQ(DeadMarkerAction(true, false, 10, 20, 12), DeadMarker::kPublished);
  EXPECT_EQ(DeadMarkerAction(true, false, 14, 20, 12), DeadMarker::kCommit) << "a later marker";
}

TEST(RunNumberTest, RunsRoundTripAndAnythingElseIsRefused) {
  EXPECT_EQ(RunNumber("0123456789abcdef"), 0x0123456789abcdefull);
  EXPECT_EQ(RunName(0x0123456789abcdefull), "0123456789abcdef");
  EXPECT_EQ(RunName(0), "0000000000000000");
  EXPECT_EQ(RunNumber(RunName(UINT64_MAX)), UINT64_MAX);
  for (const char* bad : {"", "0123456789abcde", "0123456789abcdef0", "0123456789ABCDEF",
                          "0123456789abcdeg", "-123456789abcdef"}) {
    EXPECT_EQ(RunNumber(bad), std::nullopt) << bad;
  }
}

}  // namespace
}  // namespace ckptfs::policy
