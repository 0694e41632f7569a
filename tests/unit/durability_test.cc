// Tests of Durability on its own (a namespace, a journal, the real flusher; no Filesystem): a
// sync returns once what was sealed is durable and the file says so; a failing one names every
// file not durable; an unmount that cannot flush saves the files to a rescue directory.
#include "core/filesystem/durability.h"

#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <string>

#include "iouring/fault_injecting_env.h"
#include "iouring/posix_env.h"
#include "namespace_fixture.h"

namespace ckptfs {
namespace {

using namespace std::chrono_literals;
using testing_util::ReadHostFile;

class DurabilityTest : public testing_util::NamespaceTest {
 protected:
  void SetUp() override {
    NamespaceTest::SetUp();
    config_.flush_delay = 0ms;
    config_.unmount_retry = 200ms;
    OpenStore();
  }
  void TearDown() override {
    if (durability_) durability_->Stop();
    durability_.reset();
    NamespaceTest::TearDown();
  }
  // A started Durability whose flusher writes through `faulty_env_`, its policy on the steady
  // clock (an unmount gives up after config_.unmount_retry of it).
  void Start() {
    durability_ = std::make_unique<Durability>(Durability::Parts{
        config_, faulty_env_, store_, Clock::Steady(), stats_, arena_, journal_, *ns_});
    durability_->Start();
  }
  // A closed file `name` in the root holding `bytes`, sealed; its journal point.
  uint64_t SealedFile(const std::string& name, const std::string& bytes) {
    InodeRef file = FileInMemory(name, bytes, /*version=*/1);
    files_[name] = file;
    NamespaceLock lock(ns_->mutex());
    return ns_->SealLocked(file);
  }

  FaultInjectingEnv faulty_env_{MakePosixEnv()};
  std::map<std::string, InodeRef> files_;
  std::unique_ptr<Durability> durability_;
};

TEST_F(DurabilityTest, ASyncReturnsOnceTheSealedFileIsDurableAndTheFileIsMarkedDurable) {
  Start();
  const uint64_t point = SealedFile("a.bin", "checkpoint bytes");
  ASSERT_GT(point, 0u);
  Status st = durability_->WaitDurable(point);
  ASSERT_TRUE(st.ok()) << st.ToString();
  EXPECT_EQ(ReadHostFile(backing_ / "a.bin").value_or("<missing>"), "checkpoint bytes");
  const InodeRef& a = files_["a.bin"];
  {
    MutexLock lock(a->mu);
    EXPECT_EQ(a->durable_version, 1u);
    EXPECT_TRUE(a->flush_error.ok());
  }
  NamespaceLock lock(ns_->mutex());
  EXPECT_TRUE(a->on_backing);
}

TEST_F(DurabilityTest, ASyncThatCannotWriteNamesEveryFileNotDurableAndTheFilesKeepTheError) {
  faulty_env_.FailWritesFrom(0, EIO);
  Start();
  SealedFile("a.bin", "a");
  const uint64_t point = SealedFile("b.bin", "b");
  Status st = durability_->WaitDurable(point);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.err(), EIO) << st.ToString();
  EXPECT_NE(st.message().find("2 files are not durable (a.bin, b.bin)"), std::string::npos)
      << st.ToString();
  const InodeRef& a = files_["a.bin"];
  MutexLock lock(a->mu);
  EXPECT_EQ(a->flush_error.err(), EIO) << "the next fsync or close of the file returns it";
  EXPECT_EQ(a->durable_version, 0u);
}

TEST_F(DurabilityTest, AnUnmountThatCannotFlushSavesTheFilesToARescueDirectoryAndSaysWhere) {
  faulty_env_.FailWritesFrom(0, EIO);
  Start();
  SealedFile("a.bin", "the bytes of a");
  Status st = durability_->Drain();
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.err(), EIO) << st.ToString();
  const std::string marker = "saved to ";
  const size_t at = st.message().find(marker);
  ASSERT_NE(at, std::string::npos) << st.ToString();
  EXPECT_EQ(ReadHostFile(st.message().substr(at + marker.size()) + "/a.bin").value_or("<missing>"),
            "the bytes of a");
  EXPECT_FALSE(ReadHostFile(backing_ / "a.bin").has_value()) << "nothing torn is published";
}

TEST_F(DurabilityTest, AnUnmountDrainsEverySealedFileToTheBackingStore) {
  Start();
  SealedFile("a.bin", "a");
  SealedFile("b.bin", "b");
  Status st = durability_->Drain();
  ASSERT_TRUE(st.ok()) << st.ToString();
  EXPECT_EQ(ReadHostFile(backing_ / "a.bin").value_or("<missing>"), "a");
  EXPECT_EQ(ReadHostFile(backing_ / "b.bin").value_or("<missing>"), "b");
  EXPECT_EQ(journal_.pending_entries(), 0u);
}

}  // namespace
}  // namespace ckptfs
