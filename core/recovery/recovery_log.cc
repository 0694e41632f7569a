#include "core/recovery/recovery_log.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstring>
#include <map>

#include "core/backing/backing_store.h"
#include "core/memory/arena.h"
#include "core/tree/namespace.h"

namespace ckptfs {

struct RecoveryLog::Half {
  std::atomic<uint64_t> tail;         // Bytes of complete records.
  std::atomic<uint64_t> durable_seq;  // Entries up to it need no replay.
  std::atomic<uint64_t> drop_from;    // The first seq whose record was dropped; 0: none.
};

struct RecoveryLog::Header {
  uint64_t magic;
  uint32_t version;
  std::atomic<uint32_t> active;
  Half halves[2];
  // The replication run (ReplicatorSettings::run, as a number) of the worker that appended each
  // half's entries, whose seqs they are; 0: none (zeros in a log written before it was kept).
  std::atomic<uint64_t> runs[2];
};

namespace {

constexpr uint64_t kMagic = 0x636b70746673524c;  // "ckptfsRL"
constexpr uint32_t kVersion = 2;
constexpr uint64_t kHeaderBytes = 4096;
static_assert(sizeof(std::atomic<uint64_t>) == 8 && std::atomic<uint64_t>::is_always_lock_free);

enum RecordType : uint8_t { kEntryRecord = 1, kCancelRecord = 2 };
constexpr size_t kMaxRecord = 32ull << 20;
// A path of any depth (openat reaches past PATH_MAX): only the record's size bounds it.
constexpr size_t kMaxString = kMaxRecord;
constexpr size_t kMaxNames = 4096;
// Bytes at the start of a half that stay resident when it is emptied (EmptyLocked).
constexpr uint64_t kKeptResidentBytes = 2ull << 20;

class Writer {
 public:
  void U8(uint8_t v) { out_ += static_cast<char>(v); }
  void U64(uint64_t v) {
    for (int i = 0; i < 8; ++i) out_ += static_cast<char>(v >> (8 * i));
  }
  void Str(const std::string& s) {
    U64(s.size());
    out_ += s;
  }
  std::string& out() { return out_; }

 private:
  std::string out_;
};

class Reader {
 public:
  explicit Reader(std::string_view in) : in_(in) {}
  bool U8(uint8_t* v) {
    if (in_.size() < 1) return false;
    *v = static_cast<uint8_t>(in_[0]);
    in_.remove_prefix(1);
    return true;
  }
  bool U64(uint64_t* v) {
    if (in_.size() < 8) return false;
    *v = 0;
    for (int i = 0; i < 8; ++i) *v |= uint64_t{static_cast<uint8_t>(in_[i])} << (8 * i);
    in_.remove_prefix(8);
    return true;
  }
  bool Str(std::string* s) {
    uint64_t n;
    if (!U64(&n) || n > kMaxString || n > in_.size()) return false;
    s->assign(in_.substr(0, n));
    in_.remove_prefix(n);
    return true;
  }
  bool done() const { return in_.empty(); }

 private:
  std::string_view in_;
};

Status Bad(const std::string& what) { return Status::Error(EINVAL, "recovery log: " + what); }

}  // namespace

std::string EncodeLoggedEntry(const LoggedEntry& e) {
  Writer w;
  w.U8(static_cast<uint8_t>(e.kind));
  w.U64(e.seq);
  w.Str(e.path);
  w.Str(e.new_path);
  w.U64(e.rename_flags);
  w.U64(e.names.size());
  for (const std::string& n : e.names) w.Str(n);
  w.U64(e.mode);
  w.U64(e.uid);
  w.U64(e.gid);
  w.U64(static_cast<uint64_t>(e.atime_ns));
  w.U64(static_cast<uint64_t>(e.mtime_ns));
  w.U8(static_cast<uint8_t>(e.set_mode | e.set_owner << 1 | e.set_times << 2 | e.in_memory << 3));
  w.Str(e.symlink_target);
  w.U64(e.node_type);
  w.U64(e.rdev);
  w.U64(e.size);
  w.Str(e.spill_file);
  w.U64(e.base_len);
  // Runs [index, slot, count]: blocks index + i at slot + i.
  std::vector<std::array<uint64_t, 3>> runs;
  for (const auto& [index, slot] : e.blocks) {
    if (!runs.empty() && runs.back()[0] + runs.back()[2] == index &&
        runs.back()[1] + runs.back()[2] == slot) {
      ++runs.back()[2];
    } else {
      runs.push_back({index, slot, 1});
    }
  }
  w.U64(runs.size());
  for (const auto& run : runs) {
    for (uint64_t v : run) w.U64(v);
  }
  return std::move(w.out());
}

Result<LoggedEntry> DecodeLoggedEntry(std::string_view record) {
  Reader r(record);
  LoggedEntry e;
  uint8_t kind, flags;
  uint64_t rename_flags, names, mode, uid, gid, atime, mtime, node_type, runs;
  if (!r.U8(&kind) || kind > static_cast<uint8_t>(JournalEntry::Kind::kSetAttr) ||
      !r.U64(&e.seq) || !r.Str(&e.path) || !r.Str(&e.new_path) || !r.U64(&rename_flags) ||
      !r.U64(&names) || names > kMaxNames) {
    return Bad("a malformed entry");
  }
  e.kind = static_cast<JournalEntry::Kind>(kind);
  for (uint64_t i = 0; i < names; ++i) {
    std::string name;
    if (!r.Str(&name) || !ValidRelativePath(name)) return Bad("a malformed name");
    e.names.push_back(std::move(name));
  }
  if (!r.U64(&mode) || !r.U64(&uid) || !r.U64(&gid) || !r.U64(&atime) || !r.U64(&mtime) ||
      !r.U8(&flags) || !r.Str(&e.symlink_target) || !r.U64(&node_type) || !r.U64(&e.rdev) ||
      !r.U64(&e.size) || !r.Str(&e.spill_file) || !r.U64(&e.base_len) || !r.U64(&runs) ||
      mode > 07777 || uid > UINT32_MAX ||
      gid > UINT32_MAX || rename_flags > UINT32_MAX || node_type > UINT32_MAX ||
      e.size > (1ull << 60) || e.base_len > (1ull << 60)) {
    return Bad("a malformed entry");
  }
  e.rename_flags = static_cast<unsigned>(rename_flags);
  e.mode = static_cast<uint32_t>(mode);
  e.uid = static_cast<uint32_t>(uid);
  e.gid = static_cast<uint32_t>(gid);
  e.atime_ns = static_cast<int64_t>(atime);
  e.mtime_ns = static_cast<int64_t>(mtime);
  e.set_mode = flags & 1;
  e.set_owner = flags & 2;
  e.set_times = flags & 4;
  e.in_memory = flags & 8;
  if (!e.spill_file.empty() && (e.in_memory || !IsSpillFileName(e.spill_file))) {
    return Bad("a malformed spill file");
  }
  e.node_type = static_cast<uint32_t>(node_type);
  const uint64_t block_count = (e.size + kBlockSize - 1) / kBlockSize;
  for (uint64_t i = 0; i < runs; ++i) {
    uint64_t index, slot, count;
    if (!r.U64(&index) || !r.U64(&slot) || !r.U64(&count)) return Bad("a malformed run");
    if (count == 0 || index >= block_count || count > block_count - index ||
        slot > UINT64_MAX - count || (!e.blocks.empty() && index <= e.blocks.back().first)) {
      return Bad("a run of blocks out of order or past the end");
    }
    for (uint64_t k = 0; k < count; ++k) e.blocks.emplace_back(index + k, slot + k);
  }
  if (!r.done()) return Bad("bytes after an entry");
  const bool two_paths = e.kind == JournalEntry::Kind::kRename ||
                         e.kind == JournalEntry::Kind::kLink;
  if (e.kind == JournalEntry::Kind::kPublish ? e.names.empty()
                                             : !ValidRelativePath(e.path) ||
                                                   two_paths != !e.new_path.empty() ||
                                                   (two_paths && !ValidRelativePath(e.new_path))) {
    return Bad("an entry without its paths");
  }
  return e;
}

RecoveryLog::RecoveryLog(char* memory, uint64_t length)
    : header_(reinterpret_cast<Header*>(memory)),
      halves_{memory + kHeaderBytes, memory + kHeaderBytes + (length - kHeaderBytes) / 2},
      half_bytes_((length - kHeaderBytes) / 2) {
  static_assert(sizeof(Header) <= kHeaderBytes);
  if (header_->magic != kMagic || header_->version != kVersion) {
    // A new mount (zeros), or a log of another version: nothing to recover from it.
    std::memset(static_cast<void*>(header_), 0, kHeaderBytes);
    header_->magic = kMagic;
    header_->version = kVersion;
  }
  MutexLock lock(mu_);
  writing_ = static_cast<int>(header_->active.load() & 1);
}

Result<std::unique_ptr<RecoveryLog>> RecoveryLog::Map(int fd, uint64_t offset, uint64_t length) {
  Result<SharedMapping> mapping = SharedMapping::OfFile(
      fd, offset, length, SharedMapping::Access::kReadWrite, "mapping the recovery log");
  if (!mapping.ok()) return mapping.status();
  auto log = std::make_unique<RecoveryLog>(mapping->data(), length);
  log->mapping_ = std::move(*mapping);
  return log;
}

Status RecoveryLog::Readable(char* memory, uint64_t length) {
  if (length <= kHeaderBytes) return Bad("too small for a recovery log");
  const Header* header = reinterpret_cast<const Header*>(memory);
  if (header->magic != kMagic || header->version != kVersion) {
    return Bad("not a recovery log of this version: damaged, or never written");
  }
  // A valid header: the log is read, not rewritten.
  return RecoveryLog(memory, length).Pending().status();
}

Status RecoveryLog::MappedReadable(int fd, uint64_t offset, uint64_t length) {
  Result<SharedMapping> mapping = SharedMapping::OfFile(
      fd, offset, length, SharedMapping::Access::kReadOnly, "mapping the recovery log");
  if (!mapping.ok()) return mapping.status();
  return Readable(mapping->data(), length);
}

RecoveryLog::Half& RecoveryLog::Writing() const { return header_->halves[writing_]; }

Result<LoggedState> RecoveryLog::Pending() const {
  MutexLock lock(mu_);
  const int active = static_cast<int>(header_->active.load(std::memory_order_acquire) & 1);
  const Half& half = header_->halves[active];
  const uint64_t tail = std::min(half.tail.load(std::memory_order_acquire), half_bytes_);
  const uint64_t durable = half.durable_seq.load();
  const uint64_t drop_from = half.drop_from.load();
  std::map<uint64_t, LoggedEntry> by_seq;  // A later record of a seq replaces the earlier.
  std::string_view records(halves_[active], tail);
  while (!records.empty()) {
    Reader r(records);
    uint64_t length;
    uint8_t type;
    if (!r.U64(&length) || length < 1 || length > records.size() - 8 || length > kMaxRecord) {
      return Bad("a record's length is out of range");
    }
    std::string_view body = records.substr(8, length);
    records.remove_prefix(8 + length);
    type = static_cast<uint8_t>(body[0]);
    body.remove_prefix(1);
    if (type == kCancelRecord) {
      Reader c(body);
      uint64_t seq;
      if (!c.U64(&seq) || !c.done()) return Bad("a malformed cancel");
      by_seq.erase(seq);
    } else if (type == kEntryRecord) {
      Result<LoggedEntry> e = DecodeLoggedEntry(body);
      if (!e.ok()) return e.status();
      uint64_t seq = e->seq;
      by_seq.insert_or_assign(seq, std::move(*e));
    } else {
      return Bad("a record of unknown type");
    }
  }
  LoggedState out;
  out.dropped = drop_from != 0;
  for (auto& [seq, e] : by_seq) {
    if (seq <= durable) continue;
    if (drop_from != 0 && seq >= drop_from) break;
    out.entries.push_back(std::move(e));
  }
  return out;
}

void RecoveryLog::EmptyLocked(Half& half) {
  const uint64_t tail = std::min(half.tail.load(), half_bytes_);
  half.tail.store(0, std::memory_order_release);
  half.drop_from.store(0);
  last_seq_ = 0;
  if (tail <= kKeptResidentBytes) return;
  // The pages past the first kKeptResidentBytes go back to the system: a burst of pending
  // entries must not stay in the daemon's memory for the rest of the mount. Nothing reads past
  // the tail, and the memory reads as zeros until appends touch it again. Not shared memory (a
  // test's buffer): nothing is given back.
  const auto page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const auto start = reinterpret_cast<uintptr_t>(halves_[&half == &header_->halves[0] ? 0 : 1]);
  const uintptr_t from = (start + kKeptResidentBytes + page - 1) & ~(page - 1);
  const uintptr_t to = std::min((start + tail + page - 1) & ~(page - 1),
                                (start + half_bytes_) & ~(page - 1));
  if (from < to) (void)madvise(reinterpret_cast<void*>(from), to - from, MADV_REMOVE);
}

void RecoveryLog::BeginRecovery() {
  MutexLock lock(mu_);
  writing_ = 1 - static_cast<int>(header_->active.load() & 1);
  EmptyLocked(Writing());
  Writing().durable_seq.store(0);
}

void RecoveryLog::Commit() {
  MutexLock lock(mu_);
  header_->active.store(static_cast<uint32_t>(writing_), std::memory_order_release);
}

void RecoveryLog::Reset() {
  MutexLock lock(mu_);
  writing_ = static_cast<int>(header_->active.load() & 1);
  EmptyLocked(Writing());
  Writing().durable_seq.store(0);
}

void RecoveryLog::AppendRecordLocked(const std::string& record) {
  Half& half = Writing();
  const uint64_t tail = half.tail.load();
  char* at = halves_[writing_] + tail;
  for (int i = 0; i < 8; ++i) at[i] = static_cast<char>(uint64_t{record.size()} >> (8 * i));
  std::memcpy(at + 8, record.data(), record.size());
  half.tail.store(tail + 8 + record.size(), std::memory_order_release);
}

void RecoveryLog::Append(const LoggedEntry& entry) {
  std::string record(1, static_cast<char>(kEntryRecord));
  record += EncodeLoggedEntry(entry);
  MutexLock lock(mu_);
  Half& half = Writing();
  if (entry.seq <= half.durable_seq.load()) return;  // Flushed already.
  last_seq_ = std::max(last_seq_, entry.seq);
  if (half.drop_from.load() != 0) return;
  if (record.size() > kMaxRecord || half.tail.load() + 8 + record.size() > half_bytes_) {
    half.drop_from.store(entry.seq);
    return;
  }
  header_->runs[writing_].store(run_, std::memory_order_release);
  AppendRecordLocked(record);
}

void RecoveryLog::SetRun(uint64_t run) {
  MutexLock lock(mu_);
  run_ = run;
}

uint64_t RecoveryLog::pending_run() const {
  MutexLock lock(mu_);
  return header_->runs[header_->active.load(std::memory_order_acquire) & 1].load();
}

void RecoveryLog::Durable(uint64_t seq) {
  MutexLock lock(mu_);
  Half& half = Writing();
  if (seq <= half.durable_seq.load()) return;
  half.durable_seq.store(seq, std::memory_order_release);
  if (seq >= last_seq_) EmptyLocked(half);  // Nothing logged is pending.
}

void RecoveryLog::Cancelled(uint64_t seq) {
  Writer w;
  w.U8(kCancelRecord);
  w.U64(seq);
  MutexLock lock(mu_);
  Half& half = Writing();
  if (seq <= half.durable_seq.load()) return;
  const uint64_t drop_from = half.drop_from.load();
  if (drop_from != 0 && drop_from <= seq) return;  // Never replayed anyway.
  if (half.tail.load() + 8 + w.out().size() > half_bytes_) {
    // Its blocks are about to be freed: a recovery must stop before it.
    half.drop_from.store(drop_from == 0 ? seq : std::min(drop_from, seq));
    return;
  }
  AppendRecordLocked(w.out());
}

uint64_t RecoveryLog::used_bytes() const {
  MutexLock lock(mu_);
  return Writing().tail.load();
}

bool RecoveryLog::dropped() const {
  MutexLock lock(mu_);
  return Writing().drop_from.load() != 0;
}

}  // namespace ckptfs
