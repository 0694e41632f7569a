#include "core/integrity/verifier.h"

#include <fcntl.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <memory>
#include <vector>

#include "core/integrity/checksum.h"
#include "core/integrity/checksum_manifest.h"

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

namespace {

// The record of `fd` in the manifest of the directory it is in (found by its path in
// /proc/self/fd); ENODATA when there is none or the file has no path (removed).
Result<ChecksumRecord> ManifestRecordOfFd(Env& env, int fd) {
  Result<std::string> path = env.ReadLink(AT_FDCWD, "/proc/self/fd/" + std::to_string(fd));
  if (!path.ok() || !path->starts_with("/") || path->ends_with(" (deleted)")) {
    return Status::Error(ENODATA, "no path");
  }
  const size_t slash = path->rfind('/');
  Result<int> dir = env.Open(AT_FDCWD, slash == 0 ? "/" : path->substr(0, slash),
                             O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (!dir.ok()) return Status::Error(ENODATA, "no directory");
  Result<ChecksumRecord> record = ManifestRecordOf(env, *dir, path->substr(slash + 1));
  env.Close(*dir);
  return record;
}

}  // namespace

Result<ChecksumRecord> ReadChecksumRecord(Env& env, int fd) {
  Result<std::string> text = env.GetXattr(fd, kChecksumXattr, kMaxChecksumRecordBytes);
  if (!text.ok() && text.status().err() == ERANGE) {
    return Status::Error(EINVAL, "malformed checksum record: longer than " +
                                     std::to_string(kMaxChecksumRecordBytes) + " bytes");
  }
  if (!text.ok() && (text.status().err() == ENODATA || text.status().err() == ENOTSUP)) {
    Result<ChecksumRecord> listed = ManifestRecordOfFd(env, fd);
    if (listed.ok() || listed.status().err() != ENODATA) return listed;
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
  return CompareWithRecord(record, v.size, std::move(sum).Finish().sums);
}

Verification CompareWithRecord(const ChecksumRecord& record, uint64_t size,
                               const std::vector<uint32_t>& sums) {
  Verification v;
  v.recorded_size = record.size;
  v.size = size;
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
    case EFBIG:
      v.reason = record.status().message();
      break;
    default:
      v.verdict = Verification::Verdict::kError;
      v.reason = record.status().ToString();
  }
  return v;
}

}  // namespace ckptfs
