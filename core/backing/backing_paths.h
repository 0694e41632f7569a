// Every path ckptfs keeps under the backing directory, named in one place:
//
//   BACKING/.ckptfs/                       the reserved name (in the mount: the control directory)
//     staging/                             versions written before they are published
//       spill-<worker>-<n>                 a file's bytes spilled while memory was short
//                                          (core/flush/reclaim.h)
//       handoff-<ino>                      an open file handed to the next worker at an upgrade
//                                          (core/recovery/handoff.h)
//       <node>/                            -o shared: a member's own staging directory
//     shared/                              -o shared (core/shared/shared_dir.h):
//       members/<node>                     each member's heartbeat file (core/shared/membership.h)
//       commits/<id>/                      a marker's commit: request, ack.<node>
//                                          (core/shared/shared_commit.h)
//     stood-in/<node>.<run>                -o replicas: how far a partner made a dead member's run
//                                          durable for it (core/replication/stand_in_record.h)
//     rescue-<time>-<pid>/                 files that could not be flushed at unmount
//                                          (core/recovery/rescue.h; /var/tmp/ckptfs-rescue-... when
//                                          the backing directory cannot hold them)
//   BACKING/DIR/.ckptfs-checksums.json     the checksum records of DIR's files, on a backing
//                                          filesystem without user extended attributes
//                                          (core/integrity/checksum_manifest.h)
//   BACKING/DIR/NAME  with user.ckptfs.remote  a placeholder of an object listed on the store and
//                                          not fetched yet: a sparse file of the object's size
//                                          (core/remote/remote_reader.h)
//   BACKING/DIR/NAME  with user.ckptfs.stored  a file this mount uploaded or fetched: the ETag of
//                                          the object it matches on the store, with its size and
//                                          mtime then (core/remote/remote_read_policy.h)
#pragma once

#include <cstddef>
#include <string_view>

namespace ckptfs {

inline constexpr const char* kReservedName = ".ckptfs";
inline constexpr const char* kStagingDirName = "staging";
inline constexpr const char* kSharedDirName = "shared";
inline constexpr const char* kMembersDirName = "members";
inline constexpr const char* kCommitsDirName = "commits";
inline constexpr const char* kStoodInDirName = "stood-in";
inline constexpr std::string_view kHandoffPrefix = "handoff-";
inline constexpr std::string_view kSpillPrefix = "spill-";
inline constexpr size_t kMaxSpillName = 64;
inline constexpr std::string_view kRescuePrefix = "rescue-";
inline constexpr const char* kChecksumManifestName = ".ckptfs-checksums.json";
// The extended attribute that marks a placeholder; its value is the object's ETag.
inline constexpr const char* kRemotePlaceholderAttr = "user.ckptfs.remote";
// The extended attribute recording the object on the store a local file matches
// (policy::FormatStoredVersion).
inline constexpr const char* kStoredVersionAttr = "user.ckptfs.stored";

}  // namespace ckptfs
