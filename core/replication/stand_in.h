// StandInWriter: a partner's completion of a dead member's part of commits (-o shared,replicas=N).
// When membership declares a member dead, each partner that holds its replicas writes them on the
// backing store in the dead member's close order (its seqs), each one made durable under a
// temporary name in this member's staging directory and then renamed into place (no torn file
// under a final name), the directories on the way made when missing and synced after the rename;
// the commit is then acknowledged on the dead member's behalf (core/shared/shared_commit.h).
// Whether it may is policy::MayStandIn: only when the dead member said this partner covers
// everything it had sealed when it saw the request; a commit that needs data the member never
// replicated fails as without replicas. A dead member's own commit markers are never written
// there (policy::StandInWrites).
//
// A dead committer (it died before it published a marker it had sealed and replicated): the one
// partner policy::MarkerStandInOf names lists the markers it holds (DeadMarkersToCommit), commits
// each on the dead member's behalf (core/shared/shared_commit.h: PostForDead), and once that
// succeeded publishes it (PublishDeadMarker): the dead member's versions before it first, then
// the stand-in record naming the marker, then the marker, so that no marker is ahead of its
// data and a returning node publishes it never again (a crash between the record and the marker
// loses the marker, never doubles it). A marker the dead member published by a rename (DCP's
// `.metadata.tmp` renamed to `.metadata`) was sent as the marker's replica with the renamed
// file's content and its old name (policy::RenameSentAsMarker): it is written as any marker, and
// the rename is then replayed to its end in the journal's order: the old name, left on the
// backing store by the dead member or by this writer, is removed when it holds the bytes the
// rename moved (a later version of that name stays).
//
// Written files get the mode the dead member's file had, this daemon's owner, and a checksum
// record (core/integrity/checksum_record.h) of the bytes held, when the backing store keeps
// extended attributes; their bytes are the dead member's. Each version written counts in
// PartnerStoreTotals::completed_for_dead.
//
// Once it completed a run up to a point, it records that on the backing store
// (stand_in_record.h), so that the dead member's node, when it comes back and recovers that
// run's versions, does not publish them again.
//
// Thread-safe: one lock around each completion (the commits thread calls it).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/base/status.h"
#include "core/base/thread_annotations.h"
#include "core/replication/partner_store.h"
#include "core/replication/stand_in_record.h"
#include "iouring/env.h"

namespace ckptfs::replication {

// A dead committer's commit marker held here, as its replica.
struct HeldDeadMarker {
  OwnerRun owner;
  uint64_t seq = 0;  // In the owner's run.
  std::string path;  // Relative to the backing directory.
  auto operator<=>(const HeldDeadMarker&) const = default;
};

class StandInWriter {
 public:
  // `root_fd` (the backing directory), `staging_fd` (this member's staging directory), `env` and
  // `store` must outlive it. `markers`: the commit markers (config.commit_markers).
  StandInWriter(Env& env, int root_fd, int staging_fd, PartnerStore& store,
                std::vector<std::string> markers);

  // Completes dead `owner`'s part of a commit that needs its entries up to `sealed_at_sight`
  // (nullopt: the owner left no sealed point for it). Ok once every held replica it needs is
  // durable in place, so the commit may be acknowledged for it; when policy::MayStandIn refuses
  // (final: the owner is dead), ENODATA when the owner never told this member what it covers
  // (not its partner), EHOSTDOWN saying why otherwise; the Env's error when a write failed
  // (nothing is under a final name that was not whole; call again to retry).
  Status Complete(const OwnerRun& owner, std::optional<uint64_t> sealed_at_sight) EXCLUDES(mu_);

  // The held markers of dead committers that this member, `self`, is to commit now, in owner run
  // and seq order: of owners whose node has no member in `live` (the live members' node names,
  // this one's included), those policy::DeadMarkerAction says kCommit for. The Env's error when a
  // stand-in record cannot be read (nothing of that run is listed).
  std::vector<HeldDeadMarker> DeadMarkersToCommit(const std::string& self,
                                                  const std::vector<std::string>& live)
      EXCLUDES(mu_);
  // Publishes `marker`, whose commit succeeded: its owner's held versions before it (each once,
  // in close order), then the stand-in record naming it, then it, each durable. Ok once it is in
  // place; the Env's error otherwise (nothing torn under a final name; call again to retry).
  Status PublishDeadMarker(const HeldDeadMarker& marker) EXCLUDES(mu_);

 private:
  // Writes `owner`'s held versions up to `through` not written yet, each once, markers not.
  Status WriteThrough(const OwnerRun& owner, uint64_t through) REQUIRES(mu_);
  // Makes `owner`'s stand-in record say at least `through` and `markers`.
  Status Record(const OwnerRun& owner, uint64_t through, uint64_t markers) REQUIRES(mu_);
  // Writes `r` durably at its path (temporary file, fdatasync, rename, directory fsync).
  Status WriteOne(const Replica& r) REQUIRES(mu_);
  // Keeps the checksum record of `r`'s bytes with the file `fd` (nothing when the backing
  // store keeps no user extended attributes).
  Status RecordChecksum(int fd, const Replica& r) REQUIRES(mu_);
  // Removes the name a published renamed marker was renamed from, when the backing store holds
  // there the very bytes the rename moved (what the dead member, or this writer, made durable
  // before the rename), and makes the removal durable; a file of other bytes there is a later
  // version of that name, and stays. Ok when the name is absent.
  Status RemoveRenamedSource(const Replica& marker) REQUIRES(mu_);
  // Opens the directory of `path` under the backing directory, making the missing ones when
  // `make` (else ENOENT); the caller closes it. `*base` receives the last component.
  Result<int> OpenParent(const std::string& path, std::string* base, bool make) REQUIRES(mu_);

  Env& env_;
  const int root_fd_;
  const int staging_fd_;
  PartnerStore& store_;
  const std::vector<std::string> markers_;
  Mutex mu_;
  // Per dead owner run: every version it needs up to this seq was written.
  std::map<OwnerRun, uint64_t> written_ GUARDED_BY(mu_);
  // Per dead owner run: what its stand-in record (stand_in_record.h) says, as written here.
  std::map<OwnerRun, StandInRecord> recorded_ GUARDED_BY(mu_);
  uint64_t temp_counter_ GUARDED_BY(mu_) = 0;
  bool xattrs_supported_ GUARDED_BY(mu_) = true;
};

}  // namespace ckptfs::replication
