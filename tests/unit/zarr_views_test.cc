// Tests of the zarr fine-grid views on their own, over a Namespace: which directories are served
// with a fine grid, what their views read, where their writes go, and what an unlink leaves.
#include "core/views/zarr_views.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include "namespace_fixture.h"

namespace ckptfs {
namespace {

using testing_util::Materialize;
using testing_util::Pattern;
using testing_util::SameBytes;
using testing_util::WriteHostFile;

constexpr uint64_t kKiB = 1024;

// A 1-D float32 .zarray of `shape` elements in chunks of `chunk` elements, as zarr writes it.
std::string Zarray(uint64_t shape, uint64_t chunk) {
  return "{\n    \"chunks\": [\n        " + std::to_string(chunk) +
         "\n    ],\n    \"compressor\": null,\n    \"dtype\": \"<f4\",\n    \"fill_value\": 0.0,\n"
         "    \"filters\": null,\n    \"order\": \"C\",\n    \"shape\": [\n        " +
         std::to_string(shape) + "\n    ],\n    \"zarr_format\": 2\n}";
}

class ZarrViewsTest : public testing_util::NamespaceTest {
 protected:
  void SetUp() override {
    config_.zarr_chunk = 64 * kKiB;
    NamespaceTest::SetUp();
    views_ = std::make_unique<ZarrViews>(config_, env_, *ns_);
    // Two real chunks of 256 KiB (65536 floats) on the backing store, of which only "0" is
    // written: each is shown as four virtual chunks of 64 KiB, "0" to "3" and "4" to "7".
    ASSERT_EQ(mkdir((backing_ / "arr").c_str(), 0755), 0);
    WriteHostFile(backing_ / "arr/.zarray", Zarray(131072, 65536));
    WriteHostFile(backing_ / "arr/0", chunk0_);
  }
  void TearDown() override {
    views_.reset();
    NamespaceTest::TearDown();
  }
  InodeRef ChildLocked(const InodeRef& dir, const std::string& name) REQUIRES(ns_lock) {
    Result<InodeRef> child = ns_->ChildLocked(dir, name);
    return child.ok() ? *child : nullptr;
  }

  const std::string chunk0_ = Pattern(7, 256 * kKiB);
  std::unique_ptr<ZarrViews> views_;
};

TEST_F(ZarrViewsTest, AnArrayFoundOnTheBackingStoreShowsItsRealChunksAsVirtualOnes) {
  InodeRef arr = ChildOfRoot("arr");
  ASSERT_TRUE(arr);
  NamespaceLock lock(ns_->mutex());
  ASSERT_TRUE(arr->zarr) << "served with a fine grid";
  ns_->LoadDirLocked(arr);
  std::vector<std::string> names;
  for (const auto& [name, child] : arr->children) names.push_back(name);
  EXPECT_EQ(names, (std::vector<std::string>{".zarray", "0", "1", "2", "3"}));
  InodeRef third = ChildLocked(arr, "2");
  ASSERT_TRUE(third && IsZarrView(*third));
  Reservation none;
  size_t more = 0;
  Result<ZarrViews::Opened> opened = views_->OpenLocked(third, O_RDONLY, none, more);
  ASSERT_TRUE(opened.ok() && more == 0);
  EXPECT_FALSE(opened->text);
  EXPECT_EQ(ns_->AttrOf(*third).size, 64 * kKiB);
  Result<ReadData> read = ZarrViews::Read(*third, 0, 64 * kKiB);
  ASSERT_TRUE(read.ok());
  EXPECT_TRUE(SameBytes(Materialize(*read), chunk0_.substr(128 * kKiB, 64 * kKiB)));

  InodeRef zarray = ChildLocked(arr, ".zarray");
  ASSERT_TRUE(zarray && IsZarrView(*zarray));
  EXPECT_EQ(views_->OpenLocked(zarray, O_WRONLY, none, more).status().err(), EACCES);
  EXPECT_TRUE(views_->OpenLocked(zarray, O_RDONLY, none, more)->text);
  std::string shown = Materialize(*ZarrViews::Read(*zarray, 0, 4096));
  EXPECT_NE(shown.find("16384"), std::string::npos) << "clients see the virtual chunks:\n" << shown;
  EXPECT_EQ(ns_->AttrOf(*zarray).size, shown.size());
}

TEST_F(ZarrViewsTest, AVirtualChunkComesIntoBeingOnlyByARenameOverIt) {
  InodeRef arr = ChildOfRoot("arr");
  ASSERT_TRUE(arr);
  NamespaceLock lock(ns_->mutex());
  EXPECT_EQ(views_->MayCreateLocked(arr, "5").err(), EPERM) << "a chunk of real chunk 1";
  EXPECT_TRUE(views_->MayCreateLocked(arr, "notes.txt").ok());
  EXPECT_EQ(ns_->CheckAbsentLocked(arr, "6").err(), EPERM);
}

TEST_F(ZarrViewsTest, WritesPastTheRealChunkAreNotStoredAndPastTheViewAreRefused) {
  // 3,000,000 floats in one chunk, split into 1 MiB views: the last reaches past the real chunk.
  Result<ZarrGrid> grid = ZarrGrid::Parse(Zarray(3000000, 3000000), 1 << 20);
  ASSERT_TRUE(grid.ok());
  ChunkView last{nullptr, *grid->Virtual("11"), grid->fill()};
  const uint64_t stored = last.chunk.stored;
  ASSERT_LT(stored, last.chunk.length);
  Result<ZarrViews::Target> inside = ZarrViews::WriteTarget(last, 0, 100);
  ASSERT_TRUE(inside.ok());
  EXPECT_EQ(inside->offset, last.chunk.offset);
  EXPECT_EQ(inside->size, 100u);
  Result<ZarrViews::Target> across = ZarrViews::WriteTarget(last, stored - 10, 100);
  ASSERT_TRUE(across.ok());
  EXPECT_EQ(across->size, 10u) << "only the bytes inside the array are stored";
  EXPECT_EQ(ZarrViews::WriteTarget(last, stored + 10, 100)->size, 0u);
  EXPECT_EQ(ZarrViews::WriteTarget(last, last.chunk.length - 10, 100).status().err(), EFBIG);
}

TEST_F(ZarrViewsTest, UnlinkingAVirtualChunkFillsItsRangeAndTheLastOneRemovesTheRealChunk) {
  InodeRef arr = ChildOfRoot("arr");
  ASSERT_TRUE(arr);
  NamespaceLock lock(ns_->mutex());
  ns_->LoadDirLocked(arr);
  InodeRef real;
  for (const std::string key : {"0", "1", "2"}) {
    InodeRef view = ChildLocked(arr, key);
    ASSERT_TRUE(view);
    real = Namespace::ContentOwner(view);
    Reservation none;
    size_t more = 0;
    ASSERT_TRUE(views_->UnlinkLocked(arr, key, view, none, more).ok());
    ASSERT_EQ(more, 4u) << "filling 64 KiB takes four blocks";
    Reservation four = arena_.Reserve(more);
    more = 0;
    ASSERT_TRUE(views_->UnlinkLocked(arr, key, view, four, more).ok());
    EXPECT_EQ(more, 0u);
    EXPECT_EQ(arr->children.count(key), 0u);
  }
  {
    MutexLock rlock(real->mu);
    std::string bytes(256 * kKiB, '\x01');
    ASSERT_TRUE(real->content.ReadInto(0, bytes.size(), bytes.data()).ok());
    EXPECT_EQ(bytes.substr(0, 192 * kKiB), std::string(192 * kKiB, '\0')) << "the fill value";
    EXPECT_TRUE(SameBytes(bytes.substr(192 * kKiB), chunk0_.substr(192 * kKiB)));
  }
  const size_t before = journal_.pending_entries();
  InodeRef last = ChildLocked(arr, "3");
  Reservation none;
  size_t more = 0;
  ASSERT_TRUE(views_->UnlinkLocked(arr, "3", last, none, more).ok());
  EXPECT_EQ(more, 0u) << "nothing to fill: the real chunk goes";
  EXPECT_TRUE(arr->zarr && arr->zarr->chunks.empty());
  ASSERT_GT(journal_.pending_entries(), before);
  EntryRef removal = journal_.Unflushed().back();
  EXPECT_EQ(removal->kind, JournalEntry::Kind::kUnlink);
  EXPECT_EQ(removal->name, "0");
}

}  // namespace
}  // namespace ckptfs
