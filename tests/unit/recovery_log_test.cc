// Tests of the recovery log (core/recovery/recovery_log.h) and of
// Filesystem::RecoverCrashedWorker: a worker that dies without flushing leaves its sealed
// versions to the next, which publishes them.
#include "core/recovery/recovery_log.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <string>
#include <vector>

#include "core/recovery/cache_memory_layout.h"
#include "core/replication/replication_policy.h"
#include "core/replication/stand_in_record.h"
#include "core_test_util.h"

namespace ckptfs {
namespace {

using namespace std::chrono_literals;
using namespace testing_util;

LoggedEntry Publish(uint64_t seq, const std::string& path, uint64_t size,
                    std::vector<std::pair<uint64_t, uint64_t>> blocks) {
  LoggedEntry e;
  e.seq = seq;
  e.names = {path};
  e.size = size;
  e.mode = 0644;
  e.blocks = std::move(blocks);
  return e;
}

LoggedEntry Rename(uint64_t seq, const std::string& from, const std::string& to) {
  LoggedEntry e;
  e.kind = JournalEntry::Kind::kRename;
  e.seq = seq;
  e.path = from;
  e.new_path = to;
  return e;
}

std::vector<uint64_t> Seqs(const LoggedState& state) {
  std::vector<uint64_t> out;
  for (const LoggedEntry& e : state.entries) out.push_back(e.seq);
  return out;
}

class RecoveryLogTest : public ::testing::Test {
 protected:
  std::vector<char> memory_ = std::vector<char>(1 << 20);
};

TEST_F(RecoveryLogTest, EntriesAreReadBackAsLoggedUntilDurableOrCancelled) {
  RecoveryLog log(memory_.data(), memory_.size());
  log.Append(Publish(1, "ckpt/a.pt", 3 * kBlockSize, {{0, 40}, {1, 41}, {2, 7}}));
  log.Append(Rename(2, "ckpt/a.pt", "ckpt/b.pt"));
  log.Append(Publish(3, "ckpt/c.pt", 10, {{0, 9}}));
  log.Append(Publish(4, "latest.txt", 1, {{0, 11}}));
  log.Cancelled(3);
  log.Durable(1);
  RecoveryLog next(memory_.data(), memory_.size());  // The next worker's view.
  Result<LoggedState> state = next.Pending();
  ASSERT_TRUE(state.ok()) << state.status().ToString();
  EXPECT_EQ(Seqs(*state), (std::vector<uint64_t>{2, 4}));
  EXPECT_EQ(state->entries[0].new_path, "ckpt/b.pt");
  EXPECT_EQ(state->entries[1].blocks, (std::vector<std::pair<uint64_t, uint64_t>>{{0, 11}}));
  EXPECT_FALSE(state->dropped);
  log.Durable(4);
  EXPECT_EQ(log.used_bytes(), 0u) << "all durable: the half is emptied";
  EXPECT_TRUE(next.Pending()->entries.empty());
}

TEST_F(RecoveryLogTest, ALaterRecordOfAnEntryReplacesTheEarlier) {
  RecoveryLog log(memory_.data(), memory_.size());
  log.Append(Rename(5, "tmp", "ckpt/model.pt"));
  LoggedEntry removal;
  removal.kind = JournalEntry::Kind::kUnlink;
  removal.seq = 5;
  removal.path = "ckpt/model.pt";
  log.Append(removal);
  Result<LoggedState> state = log.Pending();
  ASSERT_TRUE(state.ok());
  ASSERT_EQ(state->entries.size(), 1u);
  EXPECT_EQ(state->entries[0].kind, JournalEntry::Kind::kUnlink);
}

TEST_F(RecoveryLogTest, AFullHalfKeepsTheRecordsBeforeTheFirstDroppedOne) {
  std::vector<char> small(4096 + 2 * 600);
  RecoveryLog log(small.data(), small.size());
  for (uint64_t seq = 1; seq <= 20; ++seq) {
    log.Append(Publish(seq, "f" + std::to_string(seq), 1, {{0, seq}}));
  }
  EXPECT_TRUE(log.dropped());
  Result<LoggedState> state = log.Pending();
  ASSERT_TRUE(state.ok());
  EXPECT_TRUE(state->dropped);
  ASSERT_FALSE(state->entries.empty());
  for (size_t i = 0; i < state->entries.size(); ++i) EXPECT_EQ(state->entries[i].seq, i + 1);
  EXPECT_LT(state->entries.size(), 20u);
  log.Durable(20);
  EXPECT_FALSE(log.dropped()) << "emptied once all is durable";
}

// How many of the `length` bytes at `at` (page aligned) are resident.
size_t ResidentBytes(char* at, size_t length) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  std::vector<unsigned char> in((length + page - 1) / page);
  EXPECT_EQ(mincore(at, length, in.data()), 0) << std::strerror(errno);
  size_t resident = 0;
  for (unsigned char p : in) resident += (p & 1) ? page : 0;
  return resident;
}

TEST_F(RecoveryLogTest, AnEmptiedHalfGivesItsMemoryPastTwoMiBBackToTheSystem) {
  const size_t half = 8 << 20;
  const size_t length = 4096 + 2 * half;
  const int fd = memfd_create("recovery-log-test", MFD_CLOEXEC);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(ftruncate(fd, static_cast<off_t>(length)), 0);
  auto* memory =
      static_cast<char*>(mmap(nullptr, length, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0));
  ASSERT_NE(memory, MAP_FAILED);
  close(fd);
  char* first_half = memory + 4096;
  // 320 directories of 200-byte names: a record of about 64 KiB.
  std::string deep;
  for (int level = 0; level < 320; ++level) deep += std::string(200, 'a' + level % 26) + "/";
  {
    RecoveryLog log(memory, length);
    uint64_t seq = 0;
    while (log.used_bytes() < (6u << 20)) {
      ++seq;
      log.Append(Publish(seq, deep + "p" + std::to_string(seq), 1, {}));
    }
    ASSERT_FALSE(log.dropped());
    EXPECT_GE(ResidentBytes(first_half + (2 << 20), 4 << 20), 4u << 20);
    log.Durable(seq);  // Nothing pending: the half is emptied.
    EXPECT_EQ(log.used_bytes(), 0u);
    EXPECT_EQ(ResidentBytes(first_half + (2 << 20), half - (2 << 20)), 0u);
    EXPECT_EQ(ResidentBytes(first_half, 2 << 20), 2u << 20);
    // The half serves on: later entries are logged and read back as before.
    for (uint64_t later = seq + 1; later <= seq + 60; ++later) {
      log.Append(Publish(later, deep + "q" + std::to_string(later), 1, {}));
    }
    Result<LoggedState> pending = log.Pending();
    ASSERT_TRUE(pending.ok()) << pending.status().ToString();
    ASSERT_EQ(pending->entries.size(), 60u);
    EXPECT_EQ(pending->entries.front().seq, seq + 1);
    EXPECT_EQ(pending->entries.back().names[0], deep + "q" + std::to_string(seq + 60));
  }
  munmap(memory, length);
}

TEST_F(RecoveryLogTest, EntriesAtPathsLongerThan64KiBAreReadBack) {
  // 400 directories of 200-byte names: 80,408 bytes, as openat reaches them.
  std::string path;
  for (int level = 0; level < 400; ++level) path += std::string(200, 'a' + level % 26) + "/";
  path += "model.pt";
  RecoveryLog log(memory_.data(), memory_.size());
  log.Append(Rename(1, path, path + ".renamed"));
  log.Append(Publish(2, path, 1, {{0, 3}}));
  Result<LoggedState> state = RecoveryLog(memory_.data(), memory_.size()).Pending();
  ASSERT_TRUE(state.ok()) << state.status().ToString();
  ASSERT_EQ(Seqs(*state), (std::vector<uint64_t>{1, 2}));
  EXPECT_EQ(state->entries[0].path, path);
  EXPECT_EQ(state->entries[0].new_path, path + ".renamed");
  EXPECT_EQ(state->entries[1].names, std::vector<std::string>{path});
}

TEST_F(RecoveryLogTest, ARecoveryThatDiesLeavesTheSameRecordsToTheNext) {
  RecoveryLog crashed(memory_.data(), memory_.size());
  crashed.Append(Publish(7, "a", 1, {{0, 3}}));
  RecoveryLog recovering(memory_.data(), memory_.size());
  recovering.BeginRecovery();
  recovering.Append(Publish(1, "a", 1, {{0, 3}}));  // Replayed, under its new number.
  EXPECT_EQ(Seqs(*RecoveryLog(memory_.data(), memory_.size()).Pending()),
            std::vector<uint64_t>{7}) << "before Commit, the old half is the log";
  recovering.Commit();
  EXPECT_EQ(Seqs(*RecoveryLog(memory_.data(), memory_.size()).Pending()),
            std::vector<uint64_t>{1});
  recovering.Reset();
  EXPECT_TRUE(RecoveryLog(memory_.data(), memory_.size()).Pending()->entries.empty());
}

TEST_F(RecoveryLogTest, ThePendingEntriesNameTheReplicationRunTheirSeqsBelongTo) {
  RecoveryLog crashed(memory_.data(), memory_.size());
  EXPECT_EQ(crashed.pending_run(), 0u) << "a new log names no run";
  crashed.SetRun(0x0123456789abcdefull);
  crashed.Append(Publish(7, "a", 1, {{0, 3}}));
  RecoveryLog recovering(memory_.data(), memory_.size());
  EXPECT_EQ(recovering.pending_run(), 0x0123456789abcdefull);
  recovering.SetRun(0xfedcba9876543210ull);
  recovering.BeginRecovery();
  recovering.Append(Publish(1, "a", 1, {{0, 3}}));
  EXPECT_EQ(recovering.pending_run(), 0x0123456789abcdefull) << "before Commit, the old run";
  recovering.Commit();
  EXPECT_EQ(RecoveryLog(memory_.data(), memory_.size()).pending_run(), 0xfedcba9876543210ull);
}

TEST_F(RecoveryLogTest, MalformedRecordsAreRefusedAndEveryByteFlipDecodesOrIsRefused) {
  LoggedEntry e = Publish(3, "ckpt/x", 2 * kBlockSize + 1, {{0, 5}, {1, 6}, {2, 9}});
  e.names.push_back("ckpt/y");
  const std::string record = EncodeLoggedEntry(e);
  Result<LoggedEntry> back = DecodeLoggedEntry(record);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->names, e.names);
  EXPECT_EQ(back->blocks, e.blocks);
  ExpectPrefixesRefusedAndFlipsHandled(record, DecodeLoggedEntry);
  LoggedEntry escaping = Rename(1, "../etc", "x");
  EXPECT_EQ(DecodeLoggedEntry(EncodeLoggedEntry(escaping)).status().err(), EINVAL);
  LoggedEntry absolute = Rename(1, "/etc/passwd", "x");
  EXPECT_EQ(DecodeLoggedEntry(EncodeLoggedEntry(absolute)).status().err(), EINVAL);
  LoggedEntry past_end = Publish(1, "f", 1, {{1, 5}});
  EXPECT_EQ(DecodeLoggedEntry(EncodeLoggedEntry(past_end)).status().err(), EINVAL);
  // A torn or hostile half: lengths out of range are refused, not followed.
  RecoveryLog log(memory_.data(), memory_.size());
  log.Append(Publish(1, "f", 1, {{0, 1}}));
  std::memset(memory_.data() + 4096, 0xff, 16);
  EXPECT_EQ(RecoveryLog(memory_.data(), memory_.size()).Pending().status().err(), EINVAL);
}

TEST_F(RecoveryLogTest, ALogIsReadableOnlyAsAWorkerWroteItAndReadingItChangesNothing) {
  EXPECT_EQ(RecoveryLog::Readable(memory_.data(), memory_.size()).err(), EINVAL)
      << "never written";
  RecoveryLog log(memory_.data(), memory_.size());
  log.Append(Publish(1, "f", 1, {{0, 1}}));
  EXPECT_TRUE(RecoveryLog::Readable(memory_.data(), memory_.size()).ok());
  const std::vector<char> written = memory_;
  memory_[0] ^= 1;  // The header's magic damaged.
  const std::vector<char> damaged = memory_;
  Status st = RecoveryLog::Readable(memory_.data(), memory_.size());
  EXPECT_EQ(st.err(), EINVAL);
  EXPECT_NE(st.message().find("not a recovery log"), std::string::npos) << st.message();
  EXPECT_TRUE(memory_ == damaged) << "read, not reset for a new mount";
  memory_ = written;
  std::memset(memory_.data() + 4096, 0xff, 16);  // A record's length damaged.
  EXPECT_EQ(RecoveryLog::Readable(memory_.data(), memory_.size()).err(), EINVAL);
}

class RecoverTest : public ::testing::Test {
 protected:
  std::string B(const std::string& rel) const { return backing_ / rel; }
  // What a partner leaves once it stood in for `node`'s run `run` (stand_in_record.h).
  ::testing::AssertionResult WriteStandInRecord(const std::string& node, const std::string& run,
                                                replication::StandInRecord record) {
    std::unique_ptr<Env> env = MakePosixEnv();
    const int root = open(backing_.path().c_str(), O_RDONLY | O_DIRECTORY);
    if (root < 0) return ::testing::AssertionFailure() << "cannot open the backing directory";
    Status written = replication::WriteStandInRecord(*env, root, root, node, run, record);
    close(root);
    if (!written.ok()) return ::testing::AssertionFailure() << written.ToString();
    return ::testing::AssertionSuccess();
  }

  TempDir backing_;
  ArenaMemory memory_;
  const int arena_fd_ = memory_.fd();
};

TEST_F(RecoverTest, AWorkerThatDiesUnflushedLeavesEverySealedChangeToTheNext) {
  const std::string model = Pattern(1, 5 * kBlockSize + 123);
  const std::string optim = Pattern(2, 70000);
  {
    // Nothing is flushed before the "crash": the worker is dropped without Shutdown.
    auto crashed = StartFs(backing_.path(), {.flush_delay = 3600s, .arena_fd = arena_fd_});
    Filesystem& a = *crashed;
    ASSERT_TRUE(a.Mkdir(kRootIno, "ckpt", 0755, Me()).ok());
    ASSERT_TRUE(WriteFile(a, "ckpt/model.pt.tmp", model).ok());
    const uint64_t ckpt = Resolve(a, "ckpt")->ino;
    ASSERT_TRUE(a.Rename(ckpt, "model.pt.tmp", ckpt, "model.pt", 0).ok());
    ASSERT_TRUE(WriteFile(a, "ckpt/optim.pt", optim).ok());
    ASSERT_TRUE(WriteFile(a, "ckpt/scratch", "gone").ok());
    ASSERT_TRUE(a.Unlink(ckpt, "scratch").ok());
    ASSERT_TRUE(WriteFile(a, "latest.txt", "1").ok());
    ASSERT_TRUE(WriteFile(a, "latest.txt", "2").ok()) << "a version superseded";
    Result<uint64_t> open = CreatePath(a, "ckpt/unsealed");
    ASSERT_TRUE(open.ok());
    ASSERT_TRUE(WriteHandle(a, *open, 0, "never closed").ok());
  }
  EXPECT_FALSE(HostExists(B("ckpt"))) << "nothing was flushed before the crash";
  auto next = StartFs(backing_.path(), {.flush_delay = 0ms, .worker = 1, .arena_fd = arena_fd_,
                                        .recover = true});
  Filesystem& b = *next;
  EXPECT_TRUE(SameBytes(*ReadFile(b, "ckpt/model.pt"), model)) << "served at once";
  ASSERT_TRUE(b.Sync().ok());
  EXPECT_TRUE(SameTree(HostTree(backing_.path()), {{"ckpt", "<dir>"},
                                                   {"ckpt/model.pt", model},
                                                   {"ckpt/optim.pt", optim},
                                                   {"latest.txt", "2"}}))
      << "what was sealed, as it was named; the unsealed file is lost";
  EXPECT_NE(b.StatsJson().find("\"recovered_versions\": 3"), std::string::npos) << b.StatsJson();
  EXPECT_TRUE(b.Shutdown().ok());
}

// -o replicas: a partner that stood in for this node's run while it was dead made versions
// durable (the stand-in record says up to which seq); the recovery publishes none of those again,
// but the commit marker among them (a stand-in never writes one) and what came after.
TEST_F(RecoverTest, VersionsAPartnerMadeDurableForTheDeadRunAreNotPublishedAgain) {
  const std::string secret = backing_.path() + ".key";
  WriteHostFile(secret, "the secret of the recovery test's group");
  ASSERT_EQ(chmod(secret.c_str(), 0600), 0);
  const std::string first = Pattern(1, 70000), second = Pattern(2, 80000), later = Pattern(3, 9);
  {
    auto crashed = StartFs(backing_.path(),
                           {.flush_delay = 3600s, .node = "a", .arena_fd = arena_fd_,
                            .replicas = 1, .replication_secret = secret,
                            .replication_address = "127.0.0.1"});
    Filesystem& a = *crashed;
    ASSERT_TRUE(a.Mkdir(kRootIno, "ckpt", 0755, Me()).ok());
    ASSERT_TRUE(WriteFile(a, "ckpt/__0_0.distcp", first).ok());
    ASSERT_TRUE(WriteFile(a, "ckpt/.metadata", "the marker").ok());
    ASSERT_TRUE(WriteFile(a, "ckpt/__1_0.distcp", second).ok());
    ASSERT_TRUE(WriteFile(a, "ckpt/later.bin", later).ok());
  }
  EXPECT_FALSE(HostExists(B("ckpt/__0_0.distcp"))) << "nothing was flushed before the crash";
  EXPECT_FALSE(HostExists(B("ckpt/__1_0.distcp"))) << "nothing was flushed before the crash";
  Result<RecoveryMemory> memory = MapRecoveryMemory(arena_fd_, 64ull << 20);
  ASSERT_TRUE(memory.ok()) << memory.status().ToString();
  const uint64_t run = memory->log->pending_run();
  ASSERT_NE(run, 0u) << "the log names the dead worker's run";
  uint64_t through = 0;  // The seq of __1_0.distcp's version.
  Result<LoggedState> pending = memory->log->Pending();
  ASSERT_TRUE(pending.ok()) << pending.status().ToString();
  for (const LoggedEntry& e : pending->entries) {
    if (!e.names.empty() && e.names[0] == "ckpt/__1_0.distcp") through = e.seq;
  }
  ASSERT_NE(through, 0u);
  memory = Status::Error(EINVAL, "unmapped");
  // The partner's work: both data files durable (its own bytes, so that a second publication
  // shows), and its record.
  mkdir(B("ckpt").c_str(), 0755);  // The partner makes the directories it needs.
  WriteHostFile(B("ckpt/__0_0.distcp"), "written by the partner 0");
  WriteHostFile(B("ckpt/__1_0.distcp"), "written by the partner 1");
  ASSERT_TRUE(WriteStandInRecord("a", policy::RunName(run), {through, 0}));
  auto next = StartFs(backing_.path(), {.flush_delay = 0ms, .node = "a", .worker = 1,
                                        .arena_fd = arena_fd_, .recover = true});
  ASSERT_TRUE(next->Sync().ok());
  EXPECT_TRUE(SameTree(HostTree(B("ckpt")), {{"__0_0.distcp", "written by the partner 0"},
                                             {"__1_0.distcp", "written by the partner 1"},
                                             {".metadata", "the marker"},
                                             {"later.bin", later}}))
      << "what the partner published is not published again; the marker and the rest are";
  EXPECT_FALSE(HostExists(B(".ckptfs/stood-in/a." + policy::RunName(run))))
      << "the record is consumed";
  EXPECT_TRUE(next->Shutdown().ok());
  unlink(secret.c_str());
}

// DCP's marker is a rename of .metadata.tmp: a partner that published it for the dead run in the
// rename's place (here it died before it removed the old name, durable before the rename) is not
// published again: the recovery does not replay that rename over the partner's marker.
TEST_F(RecoverTest, ARenameToAMarkerAPartnerPublishedForTheDeadRunIsNotReplayed) {
  const std::string secret = backing_.path() + ".key";
  WriteHostFile(secret, "the secret of the recovery test's group");
  ASSERT_EQ(chmod(secret.c_str(), 0600), 0);
  const std::string later = Pattern(3, 9);
  {
    auto crashed = StartFs(backing_.path(),
                           {.flush_delay = 3600s, .node = "a", .arena_fd = arena_fd_,
                            .replicas = 1, .replication_secret = secret,
                            .replication_address = "127.0.0.1"});
    Filesystem& a = *crashed;
    ASSERT_TRUE(a.Mkdir(kRootIno, "ckpt", 0755, Me()).ok());
    ASSERT_TRUE(WriteFile(a, "ckpt/.metadata.tmp", "the marker").ok());
    ASSERT_TRUE(a.Sync().ok());
    const uint64_t ckpt = Resolve(a, "ckpt")->ino;
    ASSERT_TRUE(a.Rename(ckpt, ".metadata.tmp", ckpt, ".metadata", 0).ok());
    ASSERT_TRUE(WriteFile(a, "ckpt/later.bin", later).ok());
  }
  ASSERT_EQ(ReadHostFile(B("ckpt/.metadata.tmp")).value_or("<missing>"), "the marker");
  Result<RecoveryMemory> memory = MapRecoveryMemory(arena_fd_, 64ull << 20);
  ASSERT_TRUE(memory.ok()) << memory.status().ToString();
  const uint64_t run = memory->log->pending_run();
  ASSERT_NE(run, 0u);
  uint64_t rename = 0;
  Result<LoggedState> pending = memory->log->Pending();
  ASSERT_TRUE(pending.ok()) << pending.status().ToString();
  for (const LoggedEntry& e : pending->entries) {
    if (e.kind == JournalEntry::Kind::kRename && e.new_path == "ckpt/.metadata") rename = e.seq;
  }
  ASSERT_NE(rename, 0u) << "the rename is pending in the log";
  memory = Status::Error(EINVAL, "unmapped");
  // The partner's work: the marker (its own bytes, so that a second publication shows) and its
  // record.
  WriteHostFile(B("ckpt/.metadata"), "published by the partner");
  ASSERT_TRUE(WriteStandInRecord("a", policy::RunName(run), {rename - 1, rename}));
  auto next = StartFs(backing_.path(), {.flush_delay = 0ms, .node = "a", .worker = 1,
                                        .arena_fd = arena_fd_, .recover = true});
  ASSERT_TRUE(next->Sync().ok());
  EXPECT_TRUE(SameTree(HostTree(B("ckpt")), {{".metadata", "published by the partner"},
                                             {".metadata.tmp", "the marker"},
                                             {"later.bin", later}}))
      << "the marker the partner published stays its; what came after is published";
  EXPECT_TRUE(next->Shutdown().ok());
  unlink(secret.c_str());
}

// Records of runs of this node that no worker will recover (the memory of their workers was
// lost, or held nothing pending) go once a worker of the node has recovered; other nodes' stay.
TEST_F(RecoverTest, AWorkerThatRecoveredRemovesTheStandInRecordsOfItsNodesEarlierRuns) {
  const std::string earlier = policy::RunName(0x1a), earliest = policy::RunName(0x2b);
  ASSERT_EQ(mkdir(B(".ckptfs").c_str(), 0755), 0);
  for (const auto& [node, run] : std::vector<std::pair<std::string, std::string>>{
           {"a", earlier}, {"a", earliest}, {"b", earlier}}) {
    EXPECT_TRUE(WriteStandInRecord(node, run, {3, 0}));
  }
  auto fs = StartFs(backing_.path(), {.node = "a", .arena_fd = arena_fd_, .recover = true});
  EXPECT_FALSE(HostExists(B(".ckptfs/stood-in/a." + earlier)));
  EXPECT_FALSE(HostExists(B(".ckptfs/stood-in/a." + earliest)));
  EXPECT_TRUE(HostExists(B(".ckptfs/stood-in/b." + earlier))) << "another node's";
  EXPECT_TRUE(fs->Shutdown().ok());
}

TEST_F(RecoverTest, AWorkerThatDiesRightAfterItsRecoveryLeavesTheSameToTheNext) {
  {
    auto crashed = StartFs(backing_.path(), {.flush_delay = 3600s, .arena_fd = arena_fd_});
    ASSERT_TRUE(WriteFile(*crashed, "a.bin", Pattern(3, 40000)).ok());
  }
  {
    auto recovered = StartFs(backing_.path(), {.flush_delay = 3600s, .worker = 1,
                                               .arena_fd = arena_fd_, .recover = true});
    EXPECT_TRUE(SameBytes(*ReadFile(*recovered, "a.bin"), Pattern(3, 40000)));
  }
  auto next = StartFs(backing_.path(), {.flush_delay = 0ms, .worker = 2, .arena_fd = arena_fd_,
                                        .recover = true});
  ASSERT_TRUE(next->Sync().ok());
  EXPECT_TRUE(SameBytes(*ReadHostFile(B("a.bin")), Pattern(3, 40000)));
  EXPECT_TRUE(next->Shutdown().ok());
}

TEST_F(RecoverTest, ARecoveryIntoACacheFullOfRecoveredVersionsNeverWaitsForMemory) {
  // Before Start no flusher frees memory: a replay that asked for a block would wait forever.
  constexpr uint64_t kCache = 64 * kBlockSize;
  ArenaMemory memory(kCache);
  {
    auto first = StartFs(backing_.path(), {.cache_size = kCache, .arena_fd = memory.fd()});
    ASSERT_TRUE(WriteFile(*first, "f", "published").ok());
    ASSERT_TRUE(first->Sync().ok());
  }
  const std::string whole_cache = Pattern(4, kCache);
  {
    auto crashed = StartFs(backing_.path(), {.cache_size = kCache, .flush_delay = 3600s,
                                             .worker = 1, .arena_fd = memory.fd(),
                                             .recover = true});
    ASSERT_TRUE(WriteFile(*crashed, "f", whole_cache).ok());
  }
  auto next = StartFs(backing_.path(), {.cache_size = kCache, .worker = 2,
                                        .arena_fd = memory.fd(), .recover = true});
  ASSERT_TRUE(next->Sync().ok());
  EXPECT_TRUE(SameBytes(*ReadHostFile(B("f")), whole_cache));
  EXPECT_TRUE(next->Shutdown().ok());
}

TEST_F(RecoverTest, NothingIsReplayedOnceEverythingWasDurable) {
  {
    auto first = StartFs(backing_.path(), {.flush_delay = 0ms, .arena_fd = arena_fd_});
    ASSERT_TRUE(WriteFile(*first, "f", "flushed").ok());
    ASSERT_TRUE(first->Sync().ok());
  }
  auto next = StartFs(backing_.path(), {.worker = 1, .arena_fd = arena_fd_, .recover = true});
  EXPECT_NE(next->StatsJson().find("\"recovered_versions\": 0"), std::string::npos);
  EXPECT_EQ(*ReadFile(*next, "f"), "flushed");
  EXPECT_TRUE(next->Shutdown().ok());
}

}  // namespace
}  // namespace ckptfs
