// RecoveryLog: what the next worker of a mount needs to publish everything a crashed worker had
// sealed and not yet made durable. It lives in shared memory beside the cache's blocks (the
// arena's memory file, core/memory/arena.h), which outlive the worker.
//
// Every journal entry (core/tree/journal.h) is logged with the paths it names, as the namespace was
// when it was journaled, before the operation that journaled it is answered; a sealed version
// names the blocks of its snapshot, which nobody changes while the entry is pending. The log
// learns which entries are durable before their blocks are freed, and which were cancelled
// before theirs are. Replayed in order on the next worker, the pending entries bring its
// namespace to what the crashed worker had sealed, and its journal then publishes them.
//
// Two halves: appends go to the active one. A recovering worker reads the active half, logs what
// it replays in the other, and only then makes that one active: a worker that dies during a
// recovery leaves the same records to the next. A record is complete before the tail covers it;
// when a half is full, later records are dropped and the recovery replays the records before
// the first dropped one (a prefix of the close order, as after a crash of the backing store).
//
// Thread-safe: Append and the observers take a leaf lock of their own. The memory is untrusted
// input to a recovering worker: decoding is bounded and checked.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <string_view>
#include <string>
#include <utility>
#include <vector>

#include "core/base/status.h"
#include "core/base/thread_annotations.h"
#include "core/tree/journal.h"
#include "core/tree/logged_entry.h"
#include "iouring/shared_mapping.h"

namespace ckptfs {

// The pending entries of a log, in order.
struct LoggedState {
  std::vector<LoggedEntry> entries{};
  bool dropped = false;  // Records were dropped (a half was full): entries is a prefix.
};

class RecoveryLog final : public EntryLog {
 public:
  // Over `length` bytes of shared memory at `memory` (not owned), which a previous worker may
  // have used; zeros for a new mount.
  RecoveryLog(char* memory, uint64_t length);
  // The log at `offset` of the shared memory file `fd`, `length` bytes, mapped (and unmapped
  // with it).
  static Result<std::unique_ptr<RecoveryLog>> Map(int fd, uint64_t offset, uint64_t length);
  // Whether the log in `length` bytes at `memory` (of a worker that may have died) can be taken
  // over: a log this version wrote, whose pending records decode. EINVAL saying why when not
  // (a new worker would find nothing, or too little, to recover). Reads only.
  static Status Readable(char* memory, uint64_t length);
  // The same for the log at `offset` of the shared memory file `fd`, mapped read-only.
  static Status MappedReadable(int fd, uint64_t offset, uint64_t length);
  RecoveryLog(const RecoveryLog&) = delete;
  RecoveryLog& operator=(const RecoveryLog&) = delete;

  // What the active half holds pending (after a crash: what its worker had not made durable).
  // EINVAL when it is not a log this code wrote.
  Result<LoggedState> Pending() const EXCLUDES(mu_);
  // Starts logging into the other half, emptied; the active half stays as it is until Commit.
  void BeginRecovery() EXCLUDES(mu_);
  // Makes the half written since BeginRecovery the active one.
  void Commit() EXCLUDES(mu_);
  // Empties the active half (a worker that took over by a handoff: nothing is pending).
  void Reset() EXCLUDES(mu_);

  void Append(const LoggedEntry& entry) override EXCLUDES(mu_);
  // -o replicas: the run of this worker's versions at its partners (its journal's seqs are that
  // run's), kept with the entries it appends from now on.
  void SetRun(uint64_t run) EXCLUDES(mu_);
  // The run whose seqs the pending entries carry (0: unknown).
  uint64_t pending_run() const EXCLUDES(mu_);
  // Every entry with seq <= `seq` is durable or cancelled.
  void Durable(uint64_t seq) EXCLUDES(mu_);
  // Entry `seq` is cancelled: it needs no replay.
  void Cancelled(uint64_t seq) EXCLUDES(mu_);

  // Bytes in the half being written, and records dropped since it was last emptied.
  uint64_t used_bytes() const EXCLUDES(mu_);
  bool dropped() const EXCLUDES(mu_);

 private:
  struct Half;
  struct Header;
  Half& Writing() const REQUIRES(mu_);
  void AppendRecordLocked(const std::string& record) REQUIRES(mu_);
  // Empties `half`; in shared memory, its pages past the first 2 MiB go back to the system.
  void EmptyLocked(Half& half) REQUIRES(mu_);

  SharedMapping mapping_;  // When made by Map.
  Header* header_;
  char* halves_[2];
  uint64_t half_bytes_;
  mutable Mutex mu_;
  int writing_ GUARDED_BY(mu_) = 0;  // The half appends go to.
  uint64_t last_seq_ GUARDED_BY(mu_) = 0;  // Newest seq appended to it.
  uint64_t run_ GUARDED_BY(mu_) = 0;
};

// Encodes and decodes one entry's record (exposed for tests).
std::string EncodeLoggedEntry(const LoggedEntry& entry);
Result<LoggedEntry> DecodeLoggedEntry(std::string_view record);

}  // namespace ckptfs
