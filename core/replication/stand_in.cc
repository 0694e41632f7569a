#include "core/replication/stand_in.h"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>

#include <algorithm>

#include "core/backing/durable_write.h"
#include "core/base/commit_markers.h"
#include "core/integrity/checksum.h"
#include "core/replication/replication_policy.h"
#include "core/replication/stand_in_record.h"
#include "core/replication/wire.h"

namespace ckptfs::replication {
namespace {

constexpr int kDirFlags = O_RDONLY | O_DIRECTORY | O_NOFOLLOW;
// How much of a renamed marker's old name is read at a time to compare it with the marker.
constexpr uint64_t kDataChunkToCompare = 1 << 20;

const char* WhyNot(policy::StandIn verdict) {
  switch (verdict) {
    case policy::StandIn::kUnseen:
      return "it died before it saw the request, so what the commit needs of it is unknown";
    case policy::StandIn::kNotReplicated:
      return "data it had sealed when it saw the request is not held here";
    case policy::StandIn::kNothingHeld:
      return "it never replicated to this member";
    case policy::StandIn::kComplete:
      break;
  }
  return "";
}

}  // namespace

StandInWriter::StandInWriter(Env& env, int root_fd, int staging_fd, PartnerStore& store,
                             std::vector<std::string> markers)
    : env_(env),
      root_fd_(root_fd),
      staging_fd_(staging_fd),
      store_(store),
      markers_(std::move(markers)) {}

Status StandInWriter::Complete(const OwnerRun& owner, std::optional<uint64_t> sealed_at_sight) {
  const std::optional<uint64_t> covered = store_.CoveredOf(owner);
  const policy::StandIn verdict = policy::MayStandIn(sealed_at_sight, covered);
  if (verdict != policy::StandIn::kComplete) {
    return Status::Error(verdict == policy::StandIn::kNothingHeld ? ENODATA : EHOSTDOWN,
                         "cannot complete the part of node " + owner.node +
                                        " (run " + owner.run + "): " + WhyNot(verdict));
  }
  MutexLock lock(mu_);
  if (Status st = WriteThrough(owner, *sealed_at_sight); !st.ok()) return st;
  // A worker of the dead member's node that recovers this run must not publish these again.
  if (Status st = Record(owner, *sealed_at_sight, 0); !st.ok()) return st;
  // Durable now: the memory goes back to the partners' replicas.
  store_.DropDurable(owner, *sealed_at_sight);
  return Status::Ok();
}

Status StandInWriter::WriteThrough(const OwnerRun& owner, uint64_t through) {
  uint64_t& written = written_[owner];
  for (const Replica& r : store_.Through(owner, through)) {
    const size_t slash = r.path.rfind('/');
    const std::string base = slash == std::string::npos ? r.path : r.path.substr(slash + 1);
    if (!policy::StandInWrites(r.seq, written, through,
                               policy::IsCommitMarker(base, markers_))) {
      continue;
    }
    if (Status st = WriteOne(r); !st.ok()) return st;
    written = r.seq;
    store_.CountCompleted();
    spdlog::info("replication: made {} durable for dead node {} (its version {}, seq {})", r.path,
                 owner.node, r.version, r.seq);
  }
  written = std::max(written, through);
  return Status::Ok();
}

Status StandInWriter::Record(const OwnerRun& owner, uint64_t through, uint64_t markers) {
  auto [it, first] = recorded_.try_emplace(owner);
  StandInRecord& recorded = it->second;
  // Another partner may have stood in for the run before (replicas=2): never say less than it.
  if (first) {
    Result<StandInRecord> on_store = ReadStandInRecord(env_, root_fd_, owner.node, owner.run);
    if (on_store.ok()) recorded = *on_store;
  }
  const StandInRecord wanted{std::max(recorded.through, through),
                             std::max(recorded.markers, markers)};
  if (wanted == recorded) return Status::Ok();
  if (Status st = WriteStandInRecord(env_, root_fd_, staging_fd_, owner.node, owner.run, wanted);
      !st.ok()) {
    return Status::Error(st.err(), "cannot record what was made durable for dead node " +
                                       owner.node + ": " + st.ToString());
  }
  recorded = wanted;
  return Status::Ok();
}

std::vector<HeldDeadMarker> StandInWriter::DeadMarkersToCommit(
    const std::string& self, const std::vector<std::string>& live) {
  std::vector<HeldDeadMarker> markers;
  for (const OwnerRun& owner : store_.Owners()) {
    const bool comes_back = std::find(live.begin(), live.end(), owner.node) != live.end();
    const bool chosen = policy::MarkerStandInOf(owner.node, live) == self;
    if (!chosen || comes_back) continue;
    // Another partner may have published some already (it died since, or the live members
    // changed): the record on the backing store says.
    Result<StandInRecord> record = ReadStandInRecord(env_, root_fd_, owner.node, owner.run);
    if (!record.ok()) {
      spdlog::warn("replication: cannot read the stand-in record of dead node {} (run {}): {}",
                   owner.node, owner.run, record.status().ToString());
      continue;
    }
    const std::optional<uint64_t> covered = store_.CoveredOf(owner);
    for (const Replica& r : store_.Through(owner, UINT64_MAX)) {
      const size_t slash = r.path.rfind('/');
      const std::string base = slash == std::string::npos ? r.path : r.path.substr(slash + 1);
      if (!policy::IsCommitMarker(base, markers_)) continue;
      const policy::DeadMarker action =
          policy::DeadMarkerAction(chosen, comes_back, r.seq, covered, record->markers);
      if (action == policy::DeadMarker::kCommit) markers.push_back({owner, r.seq, r.path});
    }
  }
  return markers;
}

Status StandInWriter::PublishDeadMarker(const HeldDeadMarker& marker) {
  MutexLock lock(mu_);
  std::vector<Replica> held = store_.Through(marker.owner, marker.seq);
  if (held.empty() || held.back().seq != marker.seq) {
    return Status::Error(ENODATA, "the marker " + marker.path + " of dead node " +
                                      marker.owner.node + " is no longer held here");
  }
  if (Status st = WriteThrough(marker.owner, marker.seq - 1); !st.ok()) return st;
  if (Status st = Record(marker.owner, marker.seq - 1, marker.seq); !st.ok()) return st;
  const Replica& published = held.back();
  if (Status st = WriteOne(published); !st.ok()) return st;
  store_.CountCompleted();
  spdlog::info("replication: published the commit marker {} of dead node {} (seq {}{})",
               marker.path, marker.owner.node, marker.seq,
               published.renamed_from.empty() ? "" : ", renamed from " + published.renamed_from);
  if (!published.renamed_from.empty()) {
    // Published; a name left behind is reported, not retried (a retry would publish again).
    if (Status st = RemoveRenamedSource(published); !st.ok()) {
      spdlog::warn("replication: {} of dead node {} stays beside its marker {}: {}",
                   published.renamed_from, marker.owner.node, marker.path, st.ToString());
    }
  }
  store_.DropDurable(marker.owner, marker.seq);
  return Status::Ok();
}

Status StandInWriter::RemoveRenamedSource(const Replica& marker) {
  if (!IsValidReplicaPath(marker.renamed_from)) {
    return Status::Error(EINVAL, "invalid path " + marker.renamed_from);
  }
  std::string base;
  Result<int> parent = OpenParent(marker.renamed_from, &base, /*make=*/false);
  if (!parent.ok()) return parent.status().err() == ENOENT ? Status::Ok() : parent.status();
  Result<int> file = env_.Open(*parent, base, O_RDONLY | O_NOFOLLOW);
  Status st = file.ok() ? Status::Ok() : file.status();
  bool same = false;
  if (file.ok()) {
    struct stat there {};
    st = env_.Stat(*file, "", &there);
    same = st.ok() && S_ISREG(there.st_mode) &&
           static_cast<uint64_t>(there.st_size) == marker.size;
    std::string bytes;
    for (uint64_t at = 0; same && at < marker.size; at += bytes.size()) {
      bytes.resize(std::min<uint64_t>(marker.size - at, kDataChunkToCompare));
      st = env_.Read(*file, bytes.data(), bytes.size(), at);
      same = st.ok() && bytes.compare(0, bytes.size(), marker.bytes.get() + at, bytes.size()) == 0;
    }
    env_.Close(*file);
  }
  if (st.ok() && same) {
    st = env_.Unlink(*parent, base);
    const int dir = *parent;
    if (st.ok()) st = env_.Sync(std::span<const int>(&dir, 1), false)[0];
    if (st.ok()) {
      spdlog::info("replication: removed {}, which dead node {} renamed to {}",
                   marker.renamed_from, marker.owner.node, marker.path);
    }
  } else if (st.ok()) {
    spdlog::info("replication: {} is left: it holds other bytes than the version dead node {} "
                 "renamed to {} (a later version of its name)",
                 marker.renamed_from, marker.owner.node, marker.path);
  }
  env_.Close(*parent);
  return st.err() == ENOENT ? Status::Ok() : st;
}

Result<int> StandInWriter::OpenParent(const std::string& path, std::string* base, bool make) {
  Result<int> dir = env_.Open(root_fd_, ".", kDirFlags);
  size_t start = 0;
  for (size_t slash; dir.ok() && (slash = path.find('/', start)) != std::string::npos;
       start = slash + 1) {
    const std::string part = path.substr(start, slash - start);
    Result<int> next = env_.Open(*dir, part, kDirFlags);
    if (!next.ok() && next.status().err() == ENOENT && make) {
      Status made = env_.Mkdir(*dir, part, 0755);
      if (made.ok() || made.err() == EEXIST) {
        // The new directory's name is durable with its parent.
        const int parent = *dir;
        (void)env_.Sync(std::span<const int>(&parent, 1), false);
        next = env_.Open(*dir, part, kDirFlags);
      } else {
        next = made;
      }
    }
    env_.Close(*dir);
    dir = next;
  }
  *base = path.substr(start);
  return dir;
}

Status StandInWriter::RecordChecksum(int fd, const Replica& r) {
  if (!xattrs_supported_) return Status::Ok();
  ChunkedChecksum sum(r.size);
  sum.Update(r.bytes.get(), r.size);
  Status st = env_.SetXattr(fd, kChecksumXattr, FormatChecksumRecord(std::move(sum).Finish()));
  if (st.err() == ENOTSUP) {
    xattrs_supported_ = false;
    spdlog::warn("replication: the backing store keeps no user extended attributes ({}): files "
                 "written for dead members get no checksum record",
                 st.ToString());
    return Status::Ok();
  }
  return st;
}

Status StandInWriter::WriteOne(const Replica& r) {
  if (!IsValidReplicaPath(r.path)) return Status::Error(EINVAL, "invalid path " + r.path);
  std::string base;
  Result<int> parent = OpenParent(r.path, &base, /*make=*/true);
  if (!parent.ok()) return parent.status();
  const std::string temp = ".stand-in." + r.owner.node + "." + std::to_string(++temp_counter_);
  Status st = WriteFileDurably(
      env_, staging_fd_, temp, *parent, base, 0600,
      [&](int fd) REQUIRES(mu_) {
        Status written = r.size > 0 ? env_.WriteAt(fd, r.bytes.get(), r.size, 0) : Status::Ok();
        if (written.ok()) written = env_.Chmod(fd, "", r.mode & 07777);
        if (written.ok()) written = RecordChecksum(fd, r);
        return written;
      },
      DirSync::kSync);
  env_.Close(*parent);
  if (!st.ok()) {
    return Status::Error(st.err(), "cannot make " + r.path + " of dead node " + r.owner.node +
                                       " durable: " + st.ToString());
  }
  return Status::Ok();
}

}  // namespace ckptfs::replication
