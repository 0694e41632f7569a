// UploadedPoint: the journal point on the store, from the flush reports handed to the uploader.
#include "core/remote/uploaded_point.h"

#include <gtest/gtest.h>

namespace ckptfs {
namespace {

TEST(UploadedPointTest, WithNothingHandedOverTheDurablePointIsOnTheStore) {
  UploadedPoint p;
  EXPECT_EQ(p.Point(0, 0), 0u);
  EXPECT_EQ(p.Point(7, 0), 7u);
}

TEST(UploadedPointTest, AReportCountsOnlyOnceEveryVersionHandedOverUpToItsLastIsDone) {
  UploadedPoint p;
  p.HandedOver(5, 2);  // Entries 1..5: two versions.
  EXPECT_EQ(p.Point(5, 0), 0u);
  EXPECT_EQ(p.Point(5, 1), 0u);
  EXPECT_EQ(p.Point(5, 2), 5u);
}

TEST(UploadedPointTest, AnEarlierReportDoneCountsWhileALaterOneIsPending) {
  UploadedPoint p;
  p.HandedOver(5, 2);
  p.HandedOver(9, 4);
  EXPECT_EQ(p.Point(9, 3), 5u);
  EXPECT_EQ(p.Point(9, 3), 5u);  // Remembered once its report is forgotten.
  EXPECT_EQ(p.Point(9, 4), 9u);
}

TEST(UploadedPointTest, AReportThatHandedNothingOverIsDoneWithTheOnesBeforeIt) {
  UploadedPoint p;
  p.HandedOver(5, 2);
  p.HandedOver(8, 2);  // Directories made, a held marker: nothing to upload.
  EXPECT_EQ(p.Point(8, 1), 0u);
  EXPECT_EQ(p.Point(8, 2), 8u);
}

TEST(UploadedPointTest, ThePointNeverPassesTheDurablePointReadBefore) {
  UploadedPoint p;
  p.HandedOver(5, 1);
  p.HandedOver(12, 3);
  // Report 12 is done but the journal had not completed it when `durable` was read.
  EXPECT_EQ(p.Point(4, 3), 4u);
  p.HandedOver(20, 5);
  EXPECT_EQ(p.Point(12, 3), 12u);
  EXPECT_EQ(p.Point(20, 5), 20u);
}

}  // namespace
}  // namespace ckptfs
