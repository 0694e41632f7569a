// ZipReader: the entries of a zip archive (the container torch.save writes) and where each stored
// entry's bytes start. Reads only the end records, the central directory and one local header,
// through a callback, so the archive may be a range of a larger file. Untrusted input: every
// offset and length is checked against the archive, the directory's size is bounded.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/base/status.h"

namespace ckptfs::zip {

// Reads `length` bytes at `offset` of the archive into `out` (the caller keeps within `size`).
using ReadAt = std::function<Status(uint64_t offset, size_t length, char* out)>;

struct Entry {
  std::string name;
  uint16_t method = 0;  // 0: stored (its bytes are the file's), else compressed.
  uint64_t compressed_size = 0;
  uint64_t size = 0;
  uint64_t header_offset = 0;  // Of its local header.
};

inline constexpr uint64_t kMaxDirectoryBytes = 64ull << 20;

// The central directory of an archive of `size` bytes (zip64 included).
Result<std::vector<Entry>> ReadDirectory(const ReadAt& read, uint64_t size);
// Where `entry`'s bytes start in the archive, checked to lie inside it.
Result<uint64_t> DataOffset(const ReadAt& read, uint64_t size, const Entry& entry);

}  // namespace ckptfs::zip
