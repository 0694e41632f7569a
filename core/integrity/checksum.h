// Checksums of file contents: CRC32C (Castagnoli; the checksum of iSCSI, ext4's metadata and S3's
// x-amz-checksum-crc32c), computed with ISA-L's crc32_iscsi, per chunk of a file as its checksum
// record keeps them (core/integrity/checksum_record.h).
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/base/status.h"
#include "core/integrity/checksum_record.h"
#include "core/memory/file_content.h"

namespace ckptfs {

// A running CRC32C: Update in order, then value().
class Crc32c {
 public:
  void Update(const char* data, size_t length);
  void UpdateZeros(uint64_t length);
  uint32_t value() const { return ~state_; }

 private:
  uint32_t state_ = 0xFFFFFFFF;
};

// The checksum record of a file of `size` bytes, fed its bytes in order.
class ChunkedChecksum {
 public:
  explicit ChunkedChecksum(uint64_t size) : ChunkedChecksum(size, ChecksumChunkFor(size)) {}
  // With the chunk of a record read back (a power of two), not the one chosen for `size`.
  ChunkedChecksum(uint64_t size, uint64_t chunk);
  // The next `length` bytes of the file; all of them together at most `size`.
  void Update(const char* data, size_t length);
  void UpdateZeros(uint64_t length);
  // The record; `size` bytes must have been fed.
  ChecksumRecord Finish() &&;

 private:
  // Ends the current chunk when it is full.
  void EndFullChunk();

  ChecksumRecord record_;
  uint64_t fed_ = 0;
  Crc32c chunk_;
};

// The checksum record of `content`: its memory blocks in place, its base file's bytes read
// through the base's Env. Fails only when a base file cannot be read.
Result<ChecksumRecord> ChecksumOf(const FileContent& content);

}  // namespace ckptfs
