// The local tier's eviction policy, pure (-o local_size, core/remote/local_tier.h): which files
// already on the store leave the backing directory when it holds more than local_size.
#pragma once

#include <algorithm>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace ckptfs::policy {

// A file of the backing directory that is on the store as the backing directory holds it.
struct ResidentFile {
  std::string path;    // Relative to the backing directory.
  uint64_t bytes = 0;
  uint64_t seq = 0;    // When it reached the store (or was fetched from it), in order.
};

// The checkpoint a path belongs to: its first component; "" for a file at the top (trackers,
// markers: tiny, read first at a restart, never evicted).
inline std::string_view CheckpointOf(std::string_view path) {
  const size_t slash = path.find('/');
  return slash == path.npos ? std::string_view() : path.substr(0, slash);
}

// The indexes of `files` to evict, in order, so that their bytes and `pending_bytes` (files not on
// the store yet, never evicted) fit in `local_size`: whole checkpoints, the one whose newest file
// reached the store first going first (so the newest checkpoints are kept longest), each
// checkpoint's files oldest first; files at the top never. Fewer (or none) when even that does
// not fit.
inline std::vector<size_t> ChooseEvictions(const std::vector<ResidentFile>& files,
                                           uint64_t pending_bytes, uint64_t local_size) {
  uint64_t held = pending_bytes;
  for (const ResidentFile& f : files) held += f.bytes;
  if (held <= local_size) return {};
  std::map<std::string_view, uint64_t> newest;  // Checkpoint -> its newest file's seq.
  for (const ResidentFile& f : files) {
    const std::string_view checkpoint = CheckpointOf(f.path);
    if (!checkpoint.empty()) newest[checkpoint] = std::max(newest[checkpoint], f.seq);
  }
  std::vector<size_t> order;
  for (size_t i = 0; i < files.size(); ++i) {
    if (!CheckpointOf(files[i].path).empty()) order.push_back(i);
  }
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    const uint64_t na = newest[CheckpointOf(files[a].path)];
    const uint64_t nb = newest[CheckpointOf(files[b].path)];
    if (na != nb) return na < nb;
    return files[a].seq < files[b].seq;
  });
  std::vector<size_t> evict;
  for (size_t i : order) {
    if (held <= local_size) break;
    evict.push_back(i);
    held -= files[i].bytes;
  }
  return evict;
}

}  // namespace ckptfs::policy
