#include "core/integrity/verifier.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <memory>
#include <vector>

#include "core/integrity/checksum.h"

namespace ckptfs {

const char* VerdictName(Verification::Verdict verdict) {
  switch (verdict) {
    case Verification::Verdict::kOk: return "ok";
    case Verification::Verdict::kMismatch: return "mismatch";
    case Verification::Verdict::kNoChecksum: return "no_checksum";
    case Verification::Verdict::kError: return "error";
  }
  return "?";
}

Result<ChecksumRecord> ReadChecksumRecord(Env& env, int fd) {
  Result<std::string> text = env.GetXattr(fd, kChecksumXattr, kMaxChecksumRecordBytes);
  if (!text.ok() && text.status().err() == ERANGE) {
    return Status::Error(EINVAL, "malformed checksum record: longer than " +
                                     std::to_string(kMaxChecksumRecordBytes) + " bytes");
  }
  if (!text.ok()) return text.status();
  return ParseChecksumRecord(*text);
}

Verification VerifyAgainstRecord(Env& env, int fd, const ChecksumRecord& record,
                                 const std::function<void(uint64_t)>& on_read) {
  Verification v;
  v.recorded_size = record.size;
  struct stat st {};
  if (Status s = env.Stat(fd, "", &st); !s.ok()) {
    v.verdict = Verification::Verdict::kError;
    v.reason = s.ToString();
    return v;
  }
  v.size = static_cast<uint64_t>(st.st_size);
  ChunkedChecksum sum(v.size, record.chunk);
  const auto buffer = std::make_unique_for_overwrite<char[]>(kVerifyReadBytes);
  for (uint64_t offset = 0; offset < v.size;) {
    const size_t span = static_cast<size_t>(std::min<uint64_t>(v.size - offset, kVerifyReadBytes));
    if (Status s = env.Read(fd, buffer.get(), span, offset); !s.ok()) {
      v.verdict = Verification::Verdict::kError;
      v.reason = s.ToString();
      return v;
    }
    offset += span;
    sum.Update(buffer.get(), span);
    if (on_read) on_read(span);
  }
  const std::vector<uint32_t> sums = std::move(sum).Finish().sums;
  size_t chunk = 0;
  while (chunk < sums.size() && chunk < record.sums.size() && sums[chunk] == record.sums[chunk]) {
    ++chunk;
  }
  if (chunk == sums.size() && chunk == record.sums.size() && v.size == record.size) return v;
  v.verdict = Verification::Verdict::kMismatch;
  v.first_differing_begin = chunk * record.chunk;
  v.first_differing_end =
      std::min(v.first_differing_begin + record.chunk, std::max(v.size, record.size));
  return v;
}

Verification VerifyFile(Env& env, int data_fd, int record_fd,
                        const std::function<void(uint64_t)>& on_read) {
  Result<ChecksumRecord> record = ReadChecksumRecord(env, record_fd);
  if (record.ok()) return VerifyAgainstRecord(env, data_fd, *record, on_read);
  Verification v;
  v.verdict = Verification::Verdict::kNoChecksum;
  switch (record.status().err()) {
    case ENODATA:
      v.reason = "no checksum record (not published by ckptfs, or published without one)";
      break;
    case ENOTSUP:
      v.reason = "no checksum record (the filesystem keeps no user extended attributes)";
      break;
    case EINVAL:
      v.reason = record.status().message();
      break;
    default:
      v.verdict = Verification::Verdict::kError;
      v.reason = record.status().ToString();
  }
  return v;
}

}  // namespace ckptfs
