// The remote tier's policy, pure: which failures of a request are retried and after how long,
// how a file is cut into the parts of a multipart upload, and what a restarted mount does with
// the uploads its upload log (core/remote/upload_log.h) names.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/memory/crc32c.h"

namespace ckptfs::policy {

// How a request ended below HTTP.
enum class Transport { kOk, kTimeout, kConnectFailed, kReset, kOther };

enum class RequestVerdict { kDone, kRetry, kFail };

// A request that answered `http_status` (0: none) with S3 error code `code` (empty: none), after
// `transport`. Retried: timeouts, refused or reset connections, 5xx, 429, SlowDown and
// RequestTimeout (S3 says them as 503 and 400). Failed: other 4xx (credentials, missing bucket,
// bad request), and what curl could not do at all (bad URL, TLS certificate refused).
inline RequestVerdict JudgeRequest(Transport transport, long http_status, std::string_view code) {
  switch (transport) {
    case Transport::kTimeout:
    case Transport::kConnectFailed:
    case Transport::kReset:
      return RequestVerdict::kRetry;
    case Transport::kOther:
      return RequestVerdict::kFail;
    case Transport::kOk:
      break;
  }
  if (http_status >= 200 && http_status < 300 && code.empty()) return RequestVerdict::kDone;
  if (code == "SlowDown" || code == "RequestTimeout" || code == "InternalError") {
    return RequestVerdict::kRetry;
  }
  if (http_status >= 500 || http_status == 429) return RequestVerdict::kRetry;
  return RequestVerdict::kFail;
}

// Whether S3 error `code` says the bytes sent do not match the checksum sent with them (a real
// S3 answers 400 BadDigest; InvalidDigest and XAmzContentSHA256Mismatch are its kin): failed,
// never retried as such (policy::JudgeDigestMismatch decides what the uploader does).
inline bool IsDigestMismatch(std::string_view code) {
  return code == "BadDigest" || code == "InvalidDigest" || code == "XAmzContentSHA256Mismatch";
}

enum class DigestVerdict { kSendAgain, kCorrupt, kGiveUp };

// A part (or a whole file) refused for its checksum is sent again this many times at most while
// its local bytes still match their checksum record (or there is none to check them against).
inline constexpr unsigned kMaxDigestMismatches = 3;

// What the uploader does after the store refused the bytes of a part for their checksum for the
// `mismatches`-th time (1 for the first), given whether the local bytes, read again, match the
// file's checksum record (`matches_record`; nullopt when the record covers no such range):
// bytes that no longer match it are corrupt on the local disk (kCorrupt: never sent, reported);
// bytes that match it, or that cannot be checked, were damaged on the way and are sent again,
// kMaxDigestMismatches times at most (kGiveUp after: reported, never retried forever).
inline DigestVerdict JudgeDigestMismatch(std::optional<bool> matches_record, unsigned mismatches) {
  if (matches_record && !*matches_record) return DigestVerdict::kCorrupt;
  return mismatches < kMaxDigestMismatches ? DigestVerdict::kSendAgain : DigestVerdict::kGiveUp;
}

// The wait before retry number `retry` (1 for the first): 100 ms doubling, at most 10 s, and
// `jitter` (in [0, 1)) of it taken off so that parallel parts do not retry in step.
inline std::chrono::milliseconds RetryDelay(unsigned retry, double jitter) {
  const unsigned shift = std::min(retry == 0 ? 0u : retry - 1, 10u);
  const int64_t full = std::min<int64_t>(int64_t{100} << shift, 10'000);
  return std::chrono::milliseconds(full - static_cast<int64_t>(static_cast<double>(full) *
                                                               std::clamp(jitter, 0.0, 0.5)));
}

// The kind of a failed request, for logging it once per kind: "HTTP STATUS CODE" of an answer
// (`message` as S3Client says it: "METHOD s3://BUCKET/KEY: HTTP 503 SlowDown: ..."), else the
// transport's errno text (refused, reset, timed out).
inline std::string FailureKind(int err, std::string_view message) {
  const size_t http = message.find(": HTTP ");
  if (http == message.npos) return std::strerror(err);
  std::string_view kind = message.substr(http + 2);
  return std::string(kind.substr(0, kind.find(':')));
}

// Requests of the mount check are retried this many times; uploads are retried until they
// succeed or fail for good (kFail), their last error shown in stats meanwhile.
inline constexpr unsigned kCheckRetries = 2;

// S3's limits on multipart uploads: at most 10,000 parts, each at least 5 MiB but the last.
inline constexpr uint64_t kMinPartSize = 5ull << 20;
inline constexpr uint64_t kMaxPartSize = 5ull << 30;
inline constexpr uint64_t kMaxParts = 10'000;
// The largest object S3 copies in one CopyObject; a renamed file larger than this is sent again.
inline constexpr uint64_t kMaxCopySize = 5ull << 30;

struct PartPlan {
  bool multipart = false;  // false: one PutObject of the whole file.
  uint64_t part_size = 0;
  uint64_t parts = 1;
};

// How a file of `size` bytes is uploaded with `part_size` (the option): one PutObject up to
// part_size, else parts of part_size, grown (to a whole MiB) when there would be over 10,000.
inline PartPlan PlanParts(uint64_t size, uint64_t part_size) {
  part_size = std::clamp(part_size, kMinPartSize, kMaxPartSize);
  if (size <= part_size) return {false, size, 1};
  if ((size + part_size - 1) / part_size > kMaxParts) {
    const uint64_t needed = (size + kMaxParts - 1) / kMaxParts;
    part_size = (needed + (1ull << 20) - 1) & ~((1ull << 20) - 1);
  }
  return {true, part_size, (size + part_size - 1) / part_size};
}

// The CRC32C of bytes [offset, offset + length) of a file of `size` bytes, from its checksum
// record (`sums`, one per `chunk` bytes; core/integrity/checksum_record.h), when the range is
// whole chunks (the last one may end at the end of the file); nullopt otherwise, or when the
// record does not cover the range.
inline std::optional<uint32_t> RecordedCrc32c(uint64_t chunk, uint64_t size,
                                              const std::vector<uint32_t>& sums, uint64_t offset,
                                              uint64_t length) {
  if (chunk == 0 || offset % chunk != 0 || offset > size || length > size - offset) {
    return std::nullopt;
  }
  if (length % chunk != 0 && offset + length != size) return std::nullopt;
  const uint64_t first = offset / chunk;
  const uint64_t count = (length + chunk - 1) / chunk;
  if (first + count > sums.size()) return std::nullopt;
  uint32_t crc = 0;  // The CRC32C of no bytes.
  for (uint64_t i = 0; i < count; ++i) {
    crc = Crc32cConcat(crc, sums[first + i], std::min(chunk, length - i * chunk));
  }
  return crc;
}

// A path the upload log names, relative to the backing directory: resumed only when it is one the
// mount could have published. Refused: empty, absolute, longer than 4096 bytes, with a NUL, an
// empty, "." or ".." component, or under the private area `reserved` (".ckptfs").
inline bool IsUploadablePath(std::string_view path, std::string_view reserved) {
  if (path.empty() || path.size() > 4096 || path.front() == '/') return false;
  size_t start = 0;
  while (start <= path.size()) {
    const size_t end = std::min(path.find('/', start), path.size());
    const std::string_view part = path.substr(start, end - start);
    if (part.empty() || part == "." || part == ".." || part.find('\0') != part.npos) return false;
    if (start == 0 && part == reserved) return false;
    start = end + 1;
  }
  return true;
}

// What the log of uploads holds: the versions handed over, in order, and how many of them, from
// the first, are done (uploaded, superseded or removed).
struct LoggedUploads {
  struct Version {
    std::string path;      // Relative to the backing directory.
    bool removal = false;  // Removes the object of `path` (a renamed file's old name).
    // The version handed over, as the backing directory had it (unused by removals).
    uint64_t inode = 0;
    uint64_t size = 0;
    int64_t mtime_ns = 0;
    // The file's old name when it was renamed to `path` (empty: none): its object there is
    // copied when it is this version.
    std::string copy_from;
    // Given up: its local bytes no longer match their checksum record (corrupt); the file's size
    // and mtime then.
    struct GivenUp {
      uint64_t size = 0;
      int64_t mtime_ns = 0;
    };
    std::optional<GivenUp> given_up;
    // A directory renamed from `path` to this (empty: not one): every object under `path` is
    // copied under it, then removed (unused by the other fields).
    std::string move_to;
  };
  std::vector<Version> handed_over;
  uint64_t done = 0;  // The greatest "done up to" recorded; at most handed_over.size() counts.

  // The versions still to be done, in handed-over order.
  std::vector<Version> Pending() const {
    const uint64_t skip = std::min<uint64_t>(done, handed_over.size());
    return {handed_over.begin() + static_cast<std::ptrdiff_t>(skip), handed_over.end()};
  }
};

// Whether the version handed over at `earlier` is superseded by the one of the same key handed
// over at `later` (> earlier), so only the later one is uploaded: only when nothing handed over
// between them is a barrier (`is_barrier(k)`: a commit marker or a removal), since a barrier
// must follow a version of every file handed over before it, the earlier one included.
template <typename IsBarrier>
bool SupersededBy(size_t earlier, size_t later, IsBarrier is_barrier) {
  for (size_t k = earlier + 1; k < later; ++k) {
    if (is_barrier(k)) return false;
  }
  return true;
}

enum class Resumed { kUpload, kRemove, kSkip, kHold };

// What a restarted mount does with a pending logged version of a path, in log order, given
// whether the file now under the path is that version (`same_version`; false when it is gone),
// and whether a later pending record of the same path supersedes it (`named_again`:
// SupersededBy). A removal is done. A superseded version is skipped (the later one uploads); one
// named again after a barrier goes as the file now is, like a replaced one. A version replaced
// since by one the log does not name (published as the worker died, before it was logged; the
// recovery publishes it again) is uploaded as the file now is when it is data, which only puts
// data ahead of markers, and skipped when it is a marker, whose data may not be logged yet: a
// marker reaches the store only as the version the log names, after what was logged before it.
// A version given up as corrupt whose file is still as it was then (`still_corrupt`) is held
// (kHold: never sent, the markers after it held, reported), not tried again.
inline Resumed ResumeLogged(bool removal, bool marker, bool exists, bool same_version,
                            bool named_again, bool still_corrupt) {
  if (removal) return Resumed::kRemove;
  if (named_again || !exists) return Resumed::kSkip;
  if (still_corrupt) return Resumed::kHold;
  if (same_version) return Resumed::kUpload;
  return marker ? Resumed::kSkip : Resumed::kUpload;
}

}  // namespace ckptfs::policy
