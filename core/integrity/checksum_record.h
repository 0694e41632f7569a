// The checksum record kept with each published file on the backing store, in the extended
// attribute `user.ckptfs.checksum`: the CRC32C of each chunk of the file's bytes as the trainer
// wrote them, as the text
//   "crc32c chunk=<chunk bytes> size=<file bytes> sums=<8 hex digits>,<8 hex digits>,..."
// The chunk size is a power of two of at least kMinChecksumChunk, so that a mismatch is placed
// to within a chunk, a file's record stays small (at most kMaxChecksumChunks sums), and a chunk
// can be an object store's upload part, its sum that part's checksum.
// Records are read back from files anyone may have edited: parsing is strict and bounded.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/base/status.h"

namespace ckptfs {

inline constexpr char kChecksumXattr[] = "user.ckptfs.checksum";
inline constexpr uint64_t kMinChecksumChunk = uint64_t{8} << 20;
inline constexpr size_t kMaxChecksumChunks = 128;
// No valid record is longer; a longer attribute is refused unread.
inline constexpr size_t kMaxChecksumRecordBytes = 80 + 9 * kMaxChecksumChunks;

// The chunk size of a file of `size` bytes: the smallest power of two of at least
// kMinChecksumChunk that cuts it into at most kMaxChecksumChunks chunks.
uint64_t ChecksumChunkFor(uint64_t size);

struct ChecksumRecord {
  uint64_t chunk = kMinChecksumChunk;
  uint64_t size = 0;
  std::vector<uint32_t> sums;  // One per chunk: ceil(size / chunk) of them.

  bool operator==(const ChecksumRecord&) const = default;
};

std::string FormatChecksumRecord(const ChecksumRecord& record);
// EINVAL, with what is wrong, for anything but a record as FormatChecksumRecord writes it
// (chunk a power of two in [1 MiB, 2^42], as many sums as chunks, at most kMaxChecksumChunks).
Result<ChecksumRecord> ParseChecksumRecord(std::string_view text);

}  // namespace ckptfs
