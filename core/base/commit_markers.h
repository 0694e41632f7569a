// Commit markers: the files (trackers, checkpoint metadata) that say a checkpoint is complete.
// They are published only after the files sealed before them are durable (and, with -o shared,
// every member's).
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace ckptfs::policy {

// The commit markers published by default only after every member's data is durable: DCP's
// `.metadata`, Megatron-core's metadata.json, the trackers latest_checkpointed_iteration.txt
// (Megatron) and latest_iteration.txt, and DLRover flash checkpoint's tracker
// (dlrover_latest.txt: CheckpointConstant.TRACER_FILE_NAME in dlrover/python/common/constants.py).
inline std::vector<std::string> DefaultCommitMarkers() {
  return {".metadata", "metadata.json", "latest_checkpointed_iteration.txt",
          "latest_iteration.txt", "dlrover_latest.txt"};
}

// Whether a file named `base_name` (the last component of its path) is a commit marker.
inline bool IsCommitMarker(std::string_view base_name, const std::vector<std::string>& markers) {
  for (const std::string& m : markers) {
    if (base_name == m) return true;
  }
  return false;
}

// Whether a rename to a commit marker's name is sent to partners as the marker's replica
// (-o shared,replicas=N): the renamed file's content under the new name, with the old name, at
// the rename's place in the close order, so that a partner can publish the marker in the rename's
// place should this member die before it (core/replication/stand_in.h). Only with replicas, for
// a regular file with no change since its last seal (its content then is the version the rename
// moves on the backing store; a later change supersedes the marker anyway).
inline bool RenameSentAsMarker(int replicas, bool regular_file, bool to_marker,
                               bool changed_since_seal) {
  return replicas > 0 && regular_file && to_marker && !changed_since_seal;
}

}  // namespace ckptfs::policy
