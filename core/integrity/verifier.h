// Verification of a file's bytes against its checksum record (checksum_record.h): what
// `ckptfs verify` does for each file.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/base/status.h"
#include "core/integrity/checksum_record.h"
#include "iouring/env.h"

namespace ckptfs {

// Bytes read at a time, summed while they are still in the CPU's cache; the kernel's readahead
// sees sequential reads (asking the Env to read ahead, fadvise WILLNEED, made them slower).
inline constexpr size_t kVerifyReadBytes = size_t{1} << 20;

struct Verification {
  enum class Verdict { kOk, kMismatch, kNoChecksum, kError };

  Verdict verdict = Verdict::kOk;
  uint64_t size = 0;           // The file's bytes, as read.
  uint64_t recorded_size = 0;  // The record's size; 0 without a record.
  // kMismatch: the first chunk whose sums differ, [begin, end) in bytes, up to the larger of
  // the two sizes.
  uint64_t first_differing_begin = 0;
  uint64_t first_differing_end = 0;
  // kNoChecksum and kError: why (no record, what is wrong with it, the failed call).
  std::string reason;

  bool size_differs() const { return verdict == Verdict::kMismatch && size != recorded_size; }
};

// "ok", "mismatch", "no_checksum" or "error".
const char* VerdictName(Verification::Verdict verdict);

// The record kept in the extended attribute kChecksumXattr of `fd`, or, when it has none or the
// filesystem keeps none, in the checksum manifest of the directory it is in
// (checksum_manifest.h). ENODATA when the file has none, ENOTSUP where the filesystem keeps no
// xattrs and there is no manifest entry, EINVAL saying what is wrong when the record or the
// manifest is malformed or the record longer than kMaxChecksumRecordBytes (never read whole),
// EFBIG when the manifest is too long.
Result<ChecksumRecord> ReadChecksumRecord(Env& env, int fd);

// The verdict of a file of `size` bytes whose chunks (of the record's chunk size) sum to `sums`:
// kOk, or kMismatch with the first differing chunk.
Verification CompareWithRecord(const ChecksumRecord& record, uint64_t size,
                               const std::vector<uint32_t>& sums);

// Reads `fd` from its start to its size (fstat) in spans of kVerifyReadBytes, sums it by the
// record's chunk and compares: kOk, kMismatch with the first differing chunk, or kError when
// a read fails. `on_read`, when given, is told the bytes of each span read.
Verification VerifyAgainstRecord(Env& env, int fd, const ChecksumRecord& record,
                                 const std::function<void(uint64_t)>& on_read = {});

// VerifyAgainstRecord of the bytes of `data_fd` with the record of `record_fd` (the same file,
// or the backing file of a file read through a mount); kNoChecksum when there is no usable
// record.
Verification VerifyFile(Env& env, int data_fd, int record_fd,
                        const std::function<void(uint64_t)>& on_read = {});

}  // namespace ckptfs
