// Checksums of file contents: CRC32C (core/memory/crc32c.h) per chunk of a file, as its checksum
// record keeps them (core/integrity/checksum_record.h).
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/base/status.h"
#include "core/integrity/checksum_record.h"
#include "core/memory/crc32c.h"
#include "core/memory/file_content.h"

namespace ckptfs {

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

// The checksum record of `content`: the sums its bytes got as they were written, joined into
// chunks; bytes not summed then are summed now (memory blocks in place, base file bytes read
// through the base's Env), and their number added to `*summed_now` when given. Fails only when
// a base file cannot be read.
Result<ChecksumRecord> ChecksumOf(const FileContent& content, uint64_t* summed_now = nullptr);

// The CRC32C of the whole file `record` is of, joined from its chunks' sums (0 when empty): the
// value `crc32c` tools and object stores show for the file.
uint32_t WholeFileCrc32c(const ChecksumRecord& record);

}  // namespace ckptfs
