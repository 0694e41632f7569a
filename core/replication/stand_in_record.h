// The record a partner leaves on the backing store once it stood in for a dead member's run
// (stand_in.h): BACKING/.ckptfs/stood-in/<node>.<run>, the text "<through>\n", or
// "<through> <markers>\n" once it published commit markers of that run for the dead committer.
// It says that every version of that run up to `through` that is not a commit marker is durable,
// written by the partner (or was superseded before it needed to be), and that the markers up to
// `markers` were published by it (or will never be). A worker of the same node that recovers
// that run's versions from its cache memory (core/filesystem/worker_takeover.h) publishes none of
// those
// again (policy::RecoveryRepublishes), then removes the record. The file is written whole under
// a temporary name and renamed (never torn); its content is untrusted and bounded.
//
// Records of runs nobody recovers (the node came back without its cache memory, or with nothing
// pending) would stay for ever: once a worker of the node has recovered what its log held (or
// found nothing), that log holds its own run's entries only, and no worker will ever recover an
// earlier run of the node, so it removes the node's records of every other run
// (RemoveStandInRecordsOfOtherRuns). Its own run's record stays: a partner that judged it dead
// writes it, and the worker that recovers after it reads it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "core/base/status.h"
#include "iouring/env.h"

namespace ckptfs::replication {

// What a record says (0: nothing).
struct StandInRecord {
  uint64_t through = 0;  // Every version up to it but commit markers is durable.
  uint64_t markers = 0;  // Every commit marker up to it was published (or never will be).
  bool operator==(const StandInRecord&) const = default;
};

// Makes the record of `node`'s run `run` say `record`, durably (temporary file in `staging_fd`,
// fdatasync, rename, directory fsync), making .ckptfs/stood-in when missing.
Status WriteStandInRecord(Env& env, int root_fd, int staging_fd, const std::string& node,
                          const std::string& run, StandInRecord record);
// What the record of `node`'s run `run` says; zeros when there is none. EINVAL when it is not a
// record as WriteStandInRecord writes it.
Result<StandInRecord> ReadStandInRecord(Env& env, int root_fd, const std::string& node,
                                        const std::string& run);
// Removes it (nothing when there is none).
Status RemoveStandInRecord(Env& env, int root_fd, const std::string& node,
                           const std::string& run);
// The run whose record of `node` the file `name` of .ckptfs/stood-in is; nullopt when it is not
// one (another node's, or no record's name).
std::optional<std::string> RunOfStandInRecord(std::string_view name, std::string_view node);
// Removes the records of `node` of every run but `keep` (empty: of every run); other names are
// left alone. The first error of a removal, the others tried all the same.
Status RemoveStandInRecordsOfOtherRuns(Env& env, int root_fd, const std::string& node,
                                       const std::string& keep);

}  // namespace ckptfs::replication
