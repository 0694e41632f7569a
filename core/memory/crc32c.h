// CRC32C (Castagnoli; the checksum of iSCSI, ext4's metadata and S3's x-amz-checksum-crc32c),
// computed with ISA-L's crc32_iscsi, and joined: the CRC of A then B from the CRCs of A and B.
#pragma once

#include <cstddef>
#include <cstdint>

namespace ckptfs {

// A running CRC32C: Update in order, then value().
class Crc32c {
 public:
  void Update(const char* data, size_t length);
  // As Update with `length` zero bytes, in O(log length).
  void UpdateZeros(uint64_t length);
  uint32_t value() const { return ~state_; }

 private:
  uint32_t state_ = 0xFFFFFFFF;
};

// The CRC32C of bytes A followed by bytes B, given crc(A), crc(B) and B's length, in
// O(log length_b).
uint32_t Crc32cConcat(uint32_t crc_a, uint32_t crc_b, uint64_t length_b);

}  // namespace ckptfs
