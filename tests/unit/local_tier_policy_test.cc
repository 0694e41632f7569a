// The local tier's eviction policy (-o local_size): oldest checkpoints leave first, files at the
// top never, only as much as needed.
#include "core/remote/local_tier_policy.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace ckptfs::policy {
namespace {

std::vector<std::string> Evicted(const std::vector<ResidentFile>& files, uint64_t pending,
                                 uint64_t local_size) {
  std::vector<std::string> paths;
  for (size_t i : ChooseEvictions(files, pending, local_size)) paths.push_back(files[i].path);
  return paths;
}

TEST(LocalTierPolicyTest, NothingIsEvictedWhileEverythingFits) {
  const std::vector<ResidentFile> files = {{"step_1/a", 10, 1}, {"step_2/a", 10, 2}};
  EXPECT_TRUE(Evicted(files, 0, 20).empty());
  EXPECT_TRUE(Evicted(files, 5, 25).empty());
}

TEST(LocalTierPolicyTest, TheOldestCheckpointsLeaveFirstAndOnlyAsMuchAsNeeded) {
  const std::vector<ResidentFile> files = {
      {"step_2/a", 10, 3}, {"step_1/a", 10, 1}, {"step_1/b", 10, 2},
      {"step_3/a", 10, 5}, {"step_2/b", 10, 4}};
  EXPECT_EQ(Evicted(files, 0, 40), (std::vector<std::string>{"step_1/a"}));
  EXPECT_EQ(Evicted(files, 0, 25), (std::vector<std::string>{"step_1/a", "step_1/b", "step_2/a"}));
  // Bytes on their way to the store count, and are never evicted.
  EXPECT_EQ(Evicted(files, 20, 50), (std::vector<std::string>{"step_1/a", "step_1/b"}));
}

TEST(LocalTierPolicyTest, ACheckpointIsAsNewAsItsNewestFile) {
  // step_1 got a file after step_2 was complete: step_2 is now the older one.
  const std::vector<ResidentFile> files = {
      {"step_1/a", 10, 1}, {"step_2/a", 10, 2}, {"step_1/late", 10, 3}};
  EXPECT_EQ(Evicted(files, 0, 20), (std::vector<std::string>{"step_2/a"}));
}

TEST(LocalTierPolicyTest, FilesAtTheTopAreNeverEvicted) {
  const std::vector<ResidentFile> files = {{"latest_checkpointed_iteration.txt", 10, 1},
                                           {"step_1/a", 10, 2}};
  EXPECT_EQ(Evicted(files, 0, 0), (std::vector<std::string>{"step_1/a"}));
  EXPECT_EQ(CheckpointOf("iter_0000010/mp_rank_00/model.pt"), "iter_0000010");
  EXPECT_EQ(CheckpointOf("tracker.txt"), "");
}

}  // namespace
}  // namespace ckptfs::policy
