// Tests of OpenFiles on its own (a namespace and its handle table; no Filesystem): how each
// open is served (passthrough, direct, page cache) and what that keeps right: writers wait out
// passthrough readers, the page cache is dropped or invalidated after direct writes; and which
// closes seal a file.
#include "core/filesystem/open_files.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "namespace_fixture.h"

namespace ckptfs {
namespace {

using testing_util::Me;
using testing_util::Pattern;
using testing_util::WriteHostFile;

class OpenFilesTest : public testing_util::NamespaceTest {
 protected:
  void SetUp() override {
    NamespaceTest::SetUp();
    OpenStore();
    zarr_ = std::make_unique<ZarrViews>(config_, env_, *ns_);
    keeper_ = std::make_unique<KernelStateKeeper>(nullptr, *ns_, handles_, stats_);
    reclaimer_ = std::make_unique<Reclaimer>(*ns_, stats_, store_.staging_fd, /*worker=*/0);
    files_ = std::make_unique<OpenFiles>(OpenFiles::Parts{
        env_, stats_, arena_, *ns_, *zarr_, handles_, *keeper_, *reclaimer_});
  }
  void TearDown() override {
    {
      NamespaceLock lock(ns_->mutex());
      handles_.ClearLocked();
    }
    files_.reset();
    reclaimer_.reset();
    keeper_.reset();
    zarr_.reset();
    NamespaceTest::TearDown();
  }
  // The number of entry `name` of the root, looked up.
  uint64_t Ino(const std::string& name) {
    NamespaceLock lock(ns_->mutex());
    InodeRef child = *ns_->LookupLocked(RootLocked(), name);
    child->lookups++;
    return child->ino;
  }
  Result<OpenFile> Open(uint64_t ino, int flags, const Caller& c = Me()) {
    Reservation reservation = arena_.Reserve(1);
    size_t more = 0;
    Result<OpenFile> opened = files_->Open(ino, flags, c, reservation, more);
    EXPECT_EQ(more, 0u);
    return opened;
  }
  FileHandle& File(const OpenFile& opened) { return *handles_.Find(opened.handle)->file(); }
  void Release(const OpenFile& opened) {
    NamespaceLock lock(ns_->mutex());
    Handle* h = handles_.Find(opened.handle);
    files_->ReleaseLocked(*h->file());
    handles_.RemoveLocked(h);
  }

  HandleTable handles_{1, clock_};
  std::unique_ptr<ZarrViews> zarr_;
  std::unique_ptr<KernelStateKeeper> keeper_;
  std::unique_ptr<Reclaimer> reclaimer_;
  std::unique_ptr<OpenFiles> files_;
};

TEST_F(OpenFilesTest, ALargeBackingFileIsReadByPassthroughWhichKeepsWritersOutUntilItsLastClose) {
  WriteHostFile(backing_ / "big", Pattern(1, 2 << 20));
  std::vector<int> opened_fds, closed_ids;
  files_->SetPassthrough([&](int fd) { opened_fds.push_back(fd); return 7; },
                         [&](int id) { closed_ids.push_back(id); });
  const uint64_t ino = Ino("big");
  Result<OpenFile> reader = Open(ino, O_RDONLY);
  ASSERT_TRUE(reader.ok()) << reader.status().ToString();
  EXPECT_EQ(reader->backing_id, 7);
  EXPECT_EQ(opened_fds.size(), 1u);
  Result<OpenFile> second = Open(ino, O_RDONLY);
  ASSERT_TRUE(second.ok());
  EXPECT_EQ(second->backing_id, 7) << "readers share the registered backing file";
  EXPECT_EQ(opened_fds.size(), 1u);
  EXPECT_EQ(Open(ino, O_WRONLY).status().err(), ETXTBSY);
  Release(*reader);
  EXPECT_TRUE(closed_ids.empty()) << "a passthrough reader still holds it";
  Release(*second);
  EXPECT_EQ(closed_ids, std::vector<int>{7});
  files_->WaitPassthroughReleased(ino);
  Result<OpenFile> writer = Open(ino, O_WRONLY);
  ASSERT_TRUE(writer.ok()) << writer.status().ToString();
  EXPECT_EQ(writer->backing_id, -1);
  Release(*writer);
}

TEST_F(OpenFilesTest, WithDirectReadsALargeBackingFileIsReadBesideThePageCache) {
  const std::string bytes = Pattern(2, (1 << 20) + 5);
  WriteHostFile(backing_ / "big", bytes);
  files_->EnableDirectReads();
  Result<OpenFile> reader = Open(Ino("big"), O_RDONLY);
  ASSERT_TRUE(reader.ok());
  EXPECT_TRUE(reader->direct_io);
  EXPECT_EQ(reader->backing_id, -1);
  Result<ReadData> read = files_->Read(File(*reader), 1 << 20, 100);
  ASSERT_TRUE(read.ok());
  size_t length = 0;
  for (const ReadSegment& s : read->segments) length += s.length;
  EXPECT_EQ(length, 5u) << "a read stops at the end of the file";
  EXPECT_EQ(stats_.bytes_read.load(), 5u);
  Release(*reader);
}

TEST_F(OpenFilesTest, ASmallBackingFileFillsThePageCacheAtItsFirstReadOnlyOpenOnly) {
  const std::string bytes = Pattern(3, 5000);
  WriteHostFile(backing_ / "small", bytes);
  std::vector<std::pair<uint64_t, std::string>> fills;
  files_->SetPageCacheFiller([&](uint64_t ino, const char* data, size_t size) {
    fills.emplace_back(ino, std::string(data, size));
    return true;
  });
  const uint64_t ino = Ino("small");
  Result<OpenFile> reader = Open(ino, O_RDONLY);
  ASSERT_TRUE(reader.ok()) << reader.status().ToString();
  EXPECT_TRUE(reader->keep_cache);
  EXPECT_FALSE(reader->direct_io);
  ASSERT_EQ(fills.size(), 1u);
  EXPECT_EQ(fills[0], std::make_pair(ino, bytes));
  Result<OpenFile> second = Open(ino, O_RDONLY);
  ASSERT_TRUE(second.ok());
  EXPECT_TRUE(second->keep_cache);
  EXPECT_EQ(fills.size(), 1u) << "open already";
  Release(*second);
  Release(*reader);
  reader = Open(ino, O_RDONLY);
  ASSERT_TRUE(reader.ok());
  EXPECT_EQ(fills.size(), 1u) << "the kernel holds this version already";
  Release(*reader);
  WriteHostFile(backing_ / "large", Pattern(4, (256 << 10) + 1));
  reader = Open(Ino("large"), O_RDONLY);
  ASSERT_TRUE(reader.ok());
  EXPECT_EQ(fills.size(), 1u) << "larger than policy::kPageCacheFillMaxBytes";
  Release(*reader);
}

TEST_F(OpenFilesTest, AnOpenForWritingWaitsForAFillInProgress) {
  WriteHostFile(backing_ / "small", Pattern(5, 3000));
  const uint64_t ino = Ino("small");
  std::mutex mu;
  std::vector<std::string> events;
  auto note = [&](const char* event) {
    std::lock_guard<std::mutex> lock(mu);
    events.push_back(event);
  };
  std::thread writer;
  files_->SetPageCacheFiller([&](uint64_t, const char*, size_t) {
    writer = std::thread([&] {
      Result<OpenFile> opened = Open(ino, O_WRONLY);
      ASSERT_TRUE(opened.ok()) << opened.status().ToString();
      note("writer opened");
      Release(*opened);
    });
    // Were the writer let in, it would be open long before this.
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    note("filled");
    return true;
  });
  Result<OpenFile> reader = Open(ino, O_RDONLY);
  ASSERT_TRUE(reader.ok());
  writer.join();
  EXPECT_EQ(events, (std::vector<std::string>{"filled", "writer opened"}));
  Release(*reader);
}

TEST_F(OpenFilesTest, ADirectWriteDropsTheCachedPagesOfTheNextReaderAndInvalidatesThoseOfOpenOnes) {
  WriteHostFile(backing_ / "f", "small");
  std::vector<std::tuple<uint64_t, uint64_t, uint64_t>> invalidated;
  files_->SetPageCacheInvalidator([&](uint64_t ino, uint64_t offset, uint64_t length) {
    invalidated.emplace_back(ino, offset, length);
  });
  const uint64_t ino = Ino("f");
  Result<OpenFile> writer = Open(ino, O_WRONLY);
  ASSERT_TRUE(writer.ok());
  EXPECT_TRUE(writer->direct_io) << "a write-only open skips the page cache";
  ASSERT_TRUE(files_->Write(File(*writer), 0, "S", 1, Me()).ok());
  Result<OpenFile> reader = Open(ino, O_RDONLY);
  ASSERT_TRUE(reader.ok());
  EXPECT_FALSE(reader->direct_io);
  EXPECT_FALSE(reader->keep_cache) << "the pages predate the direct write";
  Result<OpenFile> again = Open(ino, O_RDONLY);
  ASSERT_TRUE(again.ok());
  EXPECT_TRUE(again->keep_cache);
  EXPECT_TRUE(invalidated.empty());
  ASSERT_TRUE(files_->Write(File(*writer), 2, "AL", 2, Me()).ok());
  EXPECT_EQ(invalidated, (std::vector<std::tuple<uint64_t, uint64_t, uint64_t>>{{ino, 2, 2}}));
  Release(*again);
  Release(*reader);
  Release(*writer);
}

TEST_F(OpenFilesTest, OnlyTheCloseOfAWriterSealsTheFileAndOnlyAWriterIsToldOfAFlushError) {
  WriteHostFile(backing_ / "f", "old");
  const uint64_t ino = Ino("f");
  Result<OpenFile> writer = Open(ino, O_WRONLY);
  Result<OpenFile> reader = Open(ino, O_RDONLY);
  ASSERT_TRUE(writer.ok() && reader.ok());
  Caller owner = Me();
  owner.lock_owner = 5;
  ASSERT_TRUE(files_->Write(File(*writer), 0, "new", 3, owner).ok());
  ASSERT_TRUE(files_->Flush(File(*writer), O_WRONLY, /*lock_owner=*/6).ok());
  EXPECT_EQ(journal_.pending_entries(), 0u) << "a close by another owner seals nothing";
  {
    MutexLock lock(File(*writer).inode->mu);
    File(*writer).inode->flush_error = Status::Error(EIO, "failed");
  }
  ASSERT_TRUE(files_->Flush(File(*reader), O_RDONLY, /*lock_owner=*/5).ok())
      << "a reader is not told";
  EXPECT_EQ(files_->Flush(File(*writer), O_WRONLY, /*lock_owner=*/5).err(), EIO);
  EXPECT_EQ(journal_.pending_entries(), 1u) << "the writer's close sealed the new version";
  EXPECT_TRUE(files_->Flush(File(*writer), O_WRONLY, /*lock_owner=*/5).ok())
      << "an error is told once";
  Release(*reader);
  Release(*writer);
}

TEST_F(OpenFilesTest, ATruncateRefusesADirectoryAndAFileReadByPassthrough) {
  ASSERT_EQ(mkdir((backing_ / "d").c_str(), 0755), 0);
  WriteHostFile(backing_ / "big", Pattern(3, 2 << 20));
  files_->SetPassthrough([](int) { return 1; }, [](int) {});
  const uint64_t big = Ino("big");
  Result<OpenFile> reader = Open(big, O_RDONLY);
  ASSERT_TRUE(reader.ok());
  NamespaceLock lock(ns_->mutex());
  Reservation none;
  EXPECT_EQ(files_->TruncateLocked(*ns_->ChildLocked(RootLocked(), "d"), 0, 0, WallTime(), none)
                .err(),
            EISDIR);
  EXPECT_EQ(files_->TruncateLocked(ns_->FindLocked(big), 0, 0, WallTime(), none).err(), ETXTBSY);
  lock.Unlock();
  Release(*reader);
}

}  // namespace
}  // namespace ckptfs
