// Tests of the Flusher on its own: a Journal of mkdir and publish entries replayed on a temp
// backing directory through a FaultInjectingEnv, and a FlushClient that records the reports.
#include "core/flush/flusher.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "core/base/thread_annotations.h"
#include "core/integrity/checksum.h"
#include "core/integrity/checksum_manifest.h"
#include "core/integrity/checksum_record.h"
#include "core/integrity/verifier.h"
#include "core/memory/arena.h"
#include "checksum_record_of.h"
#include "core_test_util.h"
#include "iouring/fault_injecting_env.h"

namespace ckptfs {
namespace {

using namespace std::chrono_literals;
using Fault = FaultInjectingEnv::Fault;
using Kind = JournalEntry::Kind;
using testing_util::Pattern;
using testing_util::TempDir;

// A report as the client saw it: entries by seq.
struct Seen {
  std::vector<uint64_t> durable;
  std::vector<uint64_t> applied;
  Status error;
  uint64_t failed = 0;
  bool backing_gone = false;
};

class RecordingClient final : public FlushClient {
 public:
  // Flushed waits `delay` before it records the report.
  explicit RecordingClient(std::chrono::milliseconds delay = 0ms) : delay_(delay) {}

  Status Flushed(const FlushReport& report) override {
    std::this_thread::sleep_for(delay_);
    Seen seen;
    for (const EntryRef& e : report.durable) seen.durable.push_back(e->seq);
    for (const EntryRef& e : report.applied) seen.applied.push_back(e->seq);
    seen.error = report.error;
    seen.failed = report.failed ? report.failed->seq : 0;
    seen.backing_gone = report.backing_gone;
    MutexLock lock(mu_);
    reports_.push_back(seen);
    if (!report.failed) return Status::Ok();
    return Status::Error(report.error.err(), "client: " + report.failed->name);
  }
  size_t WritersWaiting() override { return writers_waiting_; }
  std::string PathOf(const EntryRef& entry) override { return entry->name; }
  Result<size_t> Spill(Env& env) override {
    MutexLock lock(mu_);
    spill_env_ = &env;
    ++spills_;
    if (!spill_outcome_.ok()) return spill_outcome_;
    return size_t{0};
  }
  void FailSpills(Status outcome) {
    MutexLock lock(mu_);
    spill_outcome_ = std::move(outcome);
  }

  std::vector<Seen> reports() const {
    MutexLock lock(mu_);
    return reports_;
  }
  size_t spills() const {
    MutexLock lock(mu_);
    return spills_;
  }
  Env* spill_env() const {
    MutexLock lock(mu_);
    return spill_env_;
  }
  std::atomic<size_t> writers_waiting_{0};

 private:
  const std::chrono::milliseconds delay_;
  mutable Mutex mu_;
  std::vector<Seen> reports_ GUARDED_BY(mu_);
  size_t spills_ GUARDED_BY(mu_) = 0;
  Env* spill_env_ GUARDED_BY(mu_) = nullptr;
  Status spill_outcome_ GUARDED_BY(mu_);
};

class FlusherTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::filesystem::create_directories(dir_ / ".ckptfs/staging");
    auto env = MakePosixEnv();
    fault_ = std::make_unique<FaultInjectingEnv>(std::move(env));
    staging_fd_ = open((dir_ / ".ckptfs/staging").c_str(), O_RDONLY | O_DIRECTORY);
    ASSERT_GE(staging_fd_, 0);
    root_->SetBackingDir(
        std::make_shared<BackingFile>(*fault_, open(dir_.path().c_str(), O_RDONLY | O_DIRECTORY)));
    // Nothing is due before a waiter asks for it: a test's entries go in one batch.
    config_.flush_delay = 1h;
  }
  void TearDown() override {
    flusher_.reset();
    close(staging_fd_);
  }

  // Starts a flusher reporting to a new RecordingClient, which waits `report_delay` in Flushed;
  // with `post`, markers are held for their commits (shared mode), posted through it.
  RecordingClient& StartFlusher(std::chrono::milliseconds report_delay = 0ms,
                                PostCommitFn post = {}) {
    client_ = std::make_unique<RecordingClient>(report_delay);
    flusher_ = std::make_unique<Flusher>(config_, *fault_, Clock::Steady(), staging_fd_, journal_,
                                         stats_, *client_);
    if (post) flusher_->HoldMarkers(std::move(post), [] {});
    flusher_->Start();
    return *client_;
  }

  InodeRef NewInode(FileType type) { return std::make_shared<Inode>(next_ino_++, type); }
  // Journals the creation of directory `name` in `parent`.
  InodeRef Mkdir(const InodeRef& parent, const std::string& name) {
    InodeRef dir = NewInode(FileType::kDirectory);
    auto e = NewEntry(Kind::kMkdir, dir, parent, name);
    e->mode = 0755;
    journal_.Append(e);
    return dir;
  }
  // Journals `bytes` as the content of new file `name` in `parent`. Returns its seq.
  uint64_t Publish(const InodeRef& parent, const std::string& name, const std::string& bytes) {
    auto e = NewEntry(Kind::kPublish, NewInode(FileType::kRegular), parent, name);
    e->mode = 0644;
    e->names = {Inode::Name{parent, name}};
    e->version = 1;
    Reservation reservation = arena_.Reserve(e->snapshot.BlocksNeededForWrite(0, bytes.size()));
    EXPECT_TRUE(e->snapshot.Write(0, bytes.data(), bytes.size(), reservation).ok());
    return journal_.Append(e);
  }
  // Journals the rename of `name` in `parent` to `new_name` in `new_parent`. Returns its seq.
  uint64_t Rename(const InodeRef& parent, const std::string& name, const InodeRef& new_parent,
                  const std::string& new_name, unsigned flags = 0) {
    auto e = NewEntry(Kind::kRename, NewInode(FileType::kRegular), parent, name);
    e->new_parent = new_parent;
    e->new_name = new_name;
    e->rename_flags = flags;
    return journal_.Append(e);
  }
  // The manifest of directory `rel` of the backing directory.
  Result<ChecksumManifest> Manifest(const std::string& rel) {
    const int fd = open((dir_ / rel).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    EXPECT_GE(fd, 0) << std::strerror(errno);
    Result<ChecksumManifest> manifest = ReadChecksumManifest(*fault_, fd);
    close(fd);
    return manifest;
  }
  // Verifies backing file `rel` against its record (in its directory's manifest).
  Verification::Verdict Verified(const std::string& rel) {
    const int fd = open((dir_ / rel).c_str(), O_RDONLY | O_CLOEXEC);
    EXPECT_GE(fd, 0) << std::strerror(errno);
    const Verification v = VerifyFile(*fault_, fd, fd);
    close(fd);
    return v.verdict;
  }
  std::string HostFile(const std::string& rel) {
    return testing_util::ReadHostFile(dir_ / rel).value_or("<missing>");
  }

  TempDir dir_;
  std::unique_ptr<FaultInjectingEnv> fault_;
  int staging_fd_ = -1;
  Config config_;
  Arena arena_{16 << 20};
  Journal journal_;
  Stats stats_;
  InodeRef root_ = std::make_shared<Inode>(1, FileType::kDirectory);
  std::unique_ptr<RecordingClient> client_;
  std::unique_ptr<Flusher> flusher_;  // Stopped before the client and journal go.

 private:
  EntryRef NewEntry(Kind kind, const InodeRef& inode, const InodeRef& parent,
                    const std::string& name) {
    auto e = std::make_shared<JournalEntry>();
    e->kind = kind;
    e->inode = inode;
    e->parent = parent;
    e->name = name;
    e->uid = geteuid();
    e->gid = getegid();
    e->sealed_at = Clock::Steady().Now();
    return e;
  }
  uint64_t next_ino_ = 16;
};

TEST_F(FlusherTest, ABatchIsReportedDurableOnlyOnceItsDirectoriesAreSynced) {
  fault_->Inject(Fault(Env::Op::kSync, EIO).Named("fsync").Times(1));
  RecordingClient& client = StartFlusher();
  InodeRef d = Mkdir(root_, "d");
  uint64_t seq = Publish(d, "f", Pattern(1, 5000));

  Status first = flusher_->WaitDurable(seq);
  EXPECT_EQ(first.err(), EIO) << first.ToString();
  std::vector<Seen> reports = client.reports();
  ASSERT_EQ(reports.size(), 1u);
  // On the backing store, but not durable: applied, and the error names the first entry.
  EXPECT_TRUE(reports[0].durable.empty());
  EXPECT_EQ(reports[0].applied, (std::vector<uint64_t>{1, 2}));
  EXPECT_EQ(reports[0].failed, 1u);
  EXPECT_NE(reports[0].error.message().find("sync of directories"), std::string::npos)
      << reports[0].error.ToString();
  EXPECT_EQ(HostFile("d/f"), Pattern(1, 5000));

  // Retried: only the directories are synced again.
  Status second = flusher_->WaitDurable(seq);
  ASSERT_TRUE(second.ok()) << second.ToString();
  reports = client.reports();
  ASSERT_EQ(reports.size(), 2u);
  EXPECT_EQ(reports[1].durable, (std::vector<uint64_t>{1, 2}));
  EXPECT_TRUE(reports[1].applied.empty());
  EXPECT_EQ(reports[1].failed, 0u);
  EXPECT_EQ(fault_->calls(Env::Op::kMkdir), 1u);
  EXPECT_EQ(fault_->calls(Env::Op::kRename), 1u);
  EXPECT_EQ(journal_.durable_seq(), seq);
  EXPECT_TRUE(flusher_->last_error().ok());
}

TEST_F(FlusherTest, AStagingFileIsMadeInItsOwnDirectoryAndLinkedIntoTheStagingDirectory) {
  StartFlusher();
  InodeRef d = Mkdir(root_, "d");
  ASSERT_TRUE(flusher_->WaitDurable(journal_.last_seq()).ok());
  uint64_t seq = Publish(d, "f", Pattern(4, 3000));
  ASSERT_TRUE(flusher_->WaitDurable(seq).ok());
  EXPECT_EQ(HostFile("d/f"), Pattern(4, 3000));
  // Made unnamed in d (O_TMPFILE), then named in the staging directory, then renamed into d.
  EXPECT_EQ(fault_->calls(Env::Op::kLink), 1u);
  EXPECT_EQ(fault_->calls(Env::Op::kRename), 1u);
  EXPECT_TRUE(std::filesystem::is_empty(dir_ / ".ckptfs/staging"));
}

TEST_F(FlusherTest, WithoutOTmpfileOnTheBackingStoreStagingFilesAreMadeInTheStagingDirectory) {
  fault_->Inject(Fault(Env::Op::kOpen, EOPNOTSUPP).Named(".").Times(1));
  StartFlusher();
  uint64_t a = Publish(root_, "a", Pattern(5, 100));
  ASSERT_TRUE(flusher_->WaitDurable(a).ok());
  uint64_t b = Publish(root_, "b", Pattern(6, 200));
  ASSERT_TRUE(flusher_->WaitDurable(b).ok());
  EXPECT_EQ(HostFile("a"), Pattern(5, 100));
  EXPECT_EQ(HostFile("b"), Pattern(6, 200));
  EXPECT_EQ(fault_->calls(Env::Op::kLink), 0u);  // Not tried again after the refusal.
  EXPECT_TRUE(std::filesystem::is_empty(dir_ / ".ckptfs/staging"));
}

// The checksum record on the published file, read as anyone reads it (getxattr of its path).
Result<ChecksumRecord> RecordOf(const std::string& path) {
  char value[kMaxChecksumRecordBytes + 1];
  ssize_t n = getxattr(path.c_str(), kChecksumXattr, value, sizeof value);
  if (n < 0) return Status::Error(errno, "getxattr " + path);
  return ParseChecksumRecord(std::string_view(value, static_cast<size_t>(n)));
}

TEST_F(FlusherTest, APublishedFileCarriesTheChecksumOfItsBytes) {
  StartFlusher();
  const std::string bytes = Pattern(7, 3 * kBlockSize + 123);
  uint64_t seq = Publish(root_, "f", bytes);
  uint64_t empty = Publish(root_, "empty", "");
  ASSERT_TRUE(flusher_->WaitDurable(std::max(seq, empty)).ok());
  Crc32c crc;
  crc.Update(bytes.data(), bytes.size());
  Result<ChecksumRecord> record = RecordOf(dir_ / "f");
  ASSERT_TRUE(record.ok()) << record.status().ToString();
  EXPECT_EQ(*record, (ChecksumRecord{kMinChecksumChunk, bytes.size(), {crc.value()}}));
  Result<ChecksumRecord> none = RecordOf(dir_ / "empty");
  ASSERT_TRUE(none.ok()) << none.status().ToString();
  EXPECT_EQ(*none, (ChecksumRecord{kMinChecksumChunk, 0, {}}));
  EXPECT_EQ(stats_.bytes_checksummed.load(), bytes.size());
}

TEST_F(FlusherTest, WhereTheBackingStoreKeepsNoExtendedAttributesRecordsGoToTheDirectorysManifest) {
  fault_->Inject(Fault(Env::Op::kSetXattr, EOPNOTSUPP).Times(1));
  StartFlusher();
  uint64_t a = Publish(root_, "a", Pattern(8, 100));
  ASSERT_TRUE(flusher_->WaitDurable(a).ok());
  uint64_t b = Publish(root_, "b", Pattern(9, 200));
  ASSERT_TRUE(flusher_->WaitDurable(b).ok());
  EXPECT_EQ(HostFile("a"), Pattern(8, 100));
  EXPECT_EQ(HostFile("b"), Pattern(9, 200));
  EXPECT_EQ(RecordOf(dir_ / "b").status().err(), ENODATA);
  EXPECT_EQ(fault_->calls(Env::Op::kSetXattr), 1u);  // Not tried again after the refusal.
  // Both records are in the manifest beside them, and verification finds them there.
  const int root = open(dir_.path().c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  ASSERT_GE(root, 0);
  Result<ChecksumManifest> manifest = ReadChecksumManifest(*fault_, root);
  close(root);
  ASSERT_TRUE(manifest.ok()) << manifest.status().ToString();
  for (const auto& [name, bytes] : {std::pair{"a", Pattern(8, 100)}, std::pair{"b", Pattern(9, 200)}}) {
    SCOPED_TRACE(name);
    Crc32c crc;
    crc.Update(bytes.data(), bytes.size());
    ASSERT_EQ(manifest->count(name), 1u);
    EXPECT_EQ(manifest->at(name), (ChecksumRecord{kMinChecksumChunk, bytes.size(), {crc.value()}}));
    const int fd = open((dir_ / name).c_str(), O_RDONLY | O_CLOEXEC);
    ASSERT_GE(fd, 0);
    EXPECT_EQ(VerifyFile(*fault_, fd, fd).verdict, Verification::Verdict::kOk);
    close(fd);
  }
  EXPECT_EQ(stats_.flush_errors.load(), 0u);
  EXPECT_TRUE(std::filesystem::is_empty(dir_ / ".ckptfs/staging"));
}

TEST_F(FlusherTest, WithoutExtendedAttributesARenamedFileTakesItsRecordToItsNewName) {
  using testing_util::RecordOf;  // Of bytes, not of a backing file.
  fault_->Inject(Fault(Env::Op::kSetXattr, EOPNOTSUPP).Times(1));
  StartFlusher();
  InodeRef dir = Mkdir(root_, "d");
  const std::string a = Pattern(20, 5000);
  const std::string b = Pattern(21, 6000);
  const std::string c = Pattern(22, 7000);
  const std::string x = Pattern(23, 8000);
  Publish(root_, "a.tmp", a);
  Publish(root_, "c", c);
  ASSERT_TRUE(flusher_->WaitDurable(Publish(root_, "x", x)).ok());
  // Renamed in a later batch (into another directory, and over an exchange); published and
  // renamed in one batch.
  Rename(root_, "a.tmp", dir, "a");
  Rename(root_, "c", root_, "x", RENAME_EXCHANGE);
  Publish(root_, "b.tmp", b);
  ASSERT_TRUE(flusher_->WaitDurable(Rename(root_, "b.tmp", root_, "b")).ok());
  EXPECT_EQ(HostFile("d/a"), a);
  EXPECT_EQ(HostFile("b"), b);
  EXPECT_EQ(HostFile("x"), c);
  EXPECT_EQ(HostFile("c"), x);

  Result<ChecksumManifest> root = Manifest("");
  ASSERT_TRUE(root.ok()) << root.status().ToString();
  EXPECT_EQ(*root, (ChecksumManifest{{"b", RecordOf(b)}, {"c", RecordOf(x)}, {"x", RecordOf(c)}}));
  Result<ChecksumManifest> in_d = Manifest("d");
  ASSERT_TRUE(in_d.ok()) << in_d.status().ToString();
  EXPECT_EQ(*in_d, (ChecksumManifest{{"a", RecordOf(a)}}));
  for (const char* name : {"d/a", "b", "c", "x"}) {
    EXPECT_EQ(Verified(name), Verification::Verdict::kOk) << name;
  }
  EXPECT_EQ(stats_.flush_errors.load(), 0u);
}

TEST_F(FlusherTest, WithoutExtendedAttributesAMarkerHeldForItsCommitGetsItsRecordWhenPublished) {
  using testing_util::RecordOf;  // Of bytes, not of a backing file.
  fault_->Inject(Fault(Env::Op::kSetXattr, EOPNOTSUPP).Times(1));
  config_.commit_markers = {".metadata", "latest"};
  std::atomic<int> posted{0};
  StartFlusher(0ms, [&](const std::string&) -> Result<std::string> {
    return "commit-" + std::to_string(++posted);
  });
  const std::string shard = Pattern(24, 9000);
  Publish(root_, "shard", shard);
  // A marker written in place, and one renamed into place.
  const uint64_t metadata = Publish(root_, ".metadata", "done");
  Publish(root_, "latest.tmp", "7");
  const uint64_t latest = Rename(root_, "latest.tmp", root_, "latest");
  ASSERT_TRUE(flusher_->WaitDurable(latest).ok());
  while (posted.load() < 2) std::this_thread::sleep_for(1ms);
  EXPECT_EQ(HostFile(".metadata"), "<missing>");
  flusher_->CommitsDecided({CommitOutcome{"commit-1", ".metadata", Status::Ok()},
                            CommitOutcome{"commit-2", "latest", Status::Ok()}});
  ASSERT_TRUE(flusher_->WaitCommitted(std::max(metadata, latest)).ok());
  EXPECT_EQ(HostFile(".metadata"), "done");
  EXPECT_EQ(HostFile("latest"), "7");

  Result<ChecksumManifest> root = Manifest("");
  ASSERT_TRUE(root.ok()) << root.status().ToString();
  EXPECT_EQ(*root, (ChecksumManifest{{".metadata", RecordOf("done")},
                                     {"latest", RecordOf("7")},
                                     {"shard", RecordOf(shard)}}));
  for (const char* name : {".metadata", "latest", "shard"}) {
    EXPECT_EQ(Verified(name), Verification::Verdict::kOk) << name;
  }
}

TEST_F(FlusherTest, WithVerifyMarkersACorruptedWriteIsWrittenAgainFromMemoryBeforeTheMarker) {
  config_.verify = VerifyMode::kMarkers;
  RecordingClient& client = StartFlusher();
  const std::string big = Pattern(10, (1 << 20) + 4101);  // O_DIRECT: read back from the disk.
  const std::string small = Pattern(11, 3000);              // Buffered, read back past the cache.
  for (const auto& [name, bytes] : {std::pair{"big", big}, std::pair{"small", small}}) {
    SCOPED_TRACE(name);
    const uint64_t mismatches = stats_.checksum_mismatches.load();
    InodeRef dir = Mkdir(root_, name);
    fault_->CorruptWrites(1);
    Publish(dir, "shard", bytes);
    const uint64_t marker = Publish(dir, ".metadata", "done");
    Status first = flusher_->WaitDurable(marker);
    EXPECT_EQ(first.err(), EIO) << first.ToString();
    const Status reported = client.reports().back().error;
    EXPECT_NE(reported.message().find("does not match the checksum (MiB "), std::string::npos)
        << reported.ToString();
    EXPECT_EQ(stats_.checksum_mismatches.load(), mismatches + 1);
    EXPECT_EQ(HostFile(std::string(name) + "/.metadata"), "<missing>");

    ASSERT_TRUE(flusher_->WaitDurable(marker).ok());  // The retry wrote it again from memory.
    EXPECT_EQ(HostFile(std::string(name) + "/shard"), bytes);
    EXPECT_EQ(HostFile(std::string(name) + "/.metadata"), "done");
    EXPECT_EQ(stats_.checksum_mismatches.load(), mismatches + 1);
  }
  EXPECT_GE(stats_.bytes_read_back.load(), 2 * (big.size() + small.size()));
}

TEST_F(FlusherTest, WithoutVerifyACorruptedWriteIsPublishedAndItsRecordTellsIt) {
  StartFlusher();
  const std::string bytes = Pattern(12, 3000);
  fault_->CorruptWrites(1);
  const uint64_t seq = Publish(root_, "shard", bytes);
  ASSERT_TRUE(flusher_->WaitDurable(seq).ok());
  const std::string stored = HostFile("shard");
  EXPECT_NE(stored, bytes);
  Crc32c crc;
  crc.Update(stored.data(), stored.size());
  Result<ChecksumRecord> record = RecordOf(dir_ / "shard");
  ASSERT_TRUE(record.ok()) << record.status().ToString();
  EXPECT_NE(record->sums, std::vector<uint32_t>{crc.value()});
  EXPECT_EQ(stats_.bytes_read_back.load(), 0u);
}

TEST_F(FlusherTest, AFailedRenameIsReportedWithTheFailedEntryAndRetried) {
  fault_->Inject(Fault(Env::Op::kRename, EIO).Named("b").Times(1));
  RecordingClient& client = StartFlusher();
  uint64_t a = Publish(root_, "a", Pattern(2, 100));
  uint64_t b = Publish(root_, "b", Pattern(3, 200));

  // Waiters see the error as the client told it.
  Status first = flusher_->WaitDurable(b);
  EXPECT_EQ(first.err(), EIO);
  EXPECT_EQ(first.message(), "client: b");
  EXPECT_EQ(flusher_->last_error().message(), "client: b");
  std::vector<Seen> reports = client.reports();
  ASSERT_GE(reports.size(), 1u);
  EXPECT_EQ(reports[0].durable, (std::vector<uint64_t>{a}));
  EXPECT_TRUE(reports[0].applied.empty());
  EXPECT_EQ(reports[0].failed, b);
  EXPECT_EQ(reports[0].error.err(), EIO);
  EXPECT_FALSE(reports[0].backing_gone);
  EXPECT_EQ(journal_.durable_seq(), a);

  Status second = flusher_->WaitDurable(b);
  ASSERT_TRUE(second.ok()) << second.ToString();
  reports = client.reports();
  EXPECT_EQ(reports.back().durable, (std::vector<uint64_t>{b}));
  EXPECT_EQ(HostFile("a"), Pattern(2, 100));
  EXPECT_EQ(HostFile("b"), Pattern(3, 200));
  EXPECT_TRUE(std::filesystem::is_empty(dir_ / ".ckptfs/staging"));
  EXPECT_EQ(stats_.files_flushed.load(), 2u);
}

TEST_F(FlusherTest, AWaiterReturnsOnlyOnceTheClientHasAppliedTheReport) {
  RecordingClient& client = StartFlusher(/*report_delay=*/200ms);
  uint64_t seq = Publish(root_, "f", "x");
  ASSERT_TRUE(flusher_->WaitDurable(seq).ok());
  std::vector<Seen> reports = client.reports();
  ASSERT_EQ(reports.size(), 1u);
  EXPECT_EQ(reports[0].durable, (std::vector<uint64_t>{seq}));
}

TEST_F(FlusherTest, ARemovedBackingDirectoryIsReported) {
  RecordingClient& client = StartFlusher();
  std::filesystem::remove_all(dir_ / ".ckptfs");
  uint64_t seq = Publish(root_, "f", "x");
  EXPECT_FALSE(flusher_->WaitDurable(seq).ok());
  std::vector<Seen> reports = client.reports();
  ASSERT_GE(reports.size(), 1u);
  EXPECT_EQ(reports[0].failed, seq);
  EXPECT_TRUE(reports[0].backing_gone);
}

TEST_F(FlusherTest, WhenWritersWaitAndNothingIsDueTheClientSpillsThroughTheFlushersEnv) {
  RecordingClient& client = StartFlusher();
  client.writers_waiting_ = 1;
  for (int i = 0; i < 200 && client.spills() == 0; ++i) std::this_thread::sleep_for(10ms);
  EXPECT_GT(client.spills(), 0u);
  EXPECT_EQ(client.spill_env(), fault_.get());
}

TEST_F(FlusherTest, AFailingSpillStandsAsTheSpillErrorIsRetriedAndEndsWhenNoWriterWaits) {
  RecordingClient& client = StartFlusher();
  client.FailSpills(Status::Error(ENOSPC, "cannot spill f"));
  client.writers_waiting_ = 1;
  for (int i = 0; i < 500 && stats_.spill_errors.load() < 3; ++i) std::this_thread::sleep_for(10ms);
  EXPECT_GE(stats_.spill_errors.load(), 3u) << "retried";
  EXPECT_EQ(flusher_->spill_error().err(), ENOSPC);
  EXPECT_EQ(flusher_->spill_error().message(), "cannot spill f");
  EXPECT_TRUE(flusher_->last_error().ok()) << "no flush failed";
  client.writers_waiting_ = 0;
  for (int i = 0; i < 500 && !flusher_->spill_error().ok(); ++i) std::this_thread::sleep_for(10ms);
  EXPECT_TRUE(flusher_->spill_error().ok()) << "nothing is stuck once no writer waits";
}

}  // namespace
}  // namespace ckptfs
