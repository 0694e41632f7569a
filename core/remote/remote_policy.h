// The remote tier's policy, pure: which failures of a request are retried and after how long,
// and how a file is cut into the parts of a multipart upload.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <string_view>

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

// The wait before retry number `retry` (1 for the first): 100 ms doubling, at most 10 s, and
// `jitter` (in [0, 1)) of it taken off so that parallel parts do not retry in step.
inline std::chrono::milliseconds RetryDelay(unsigned retry, double jitter) {
  const unsigned shift = std::min(retry == 0 ? 0u : retry - 1, 10u);
  const int64_t full = std::min<int64_t>(int64_t{100} << shift, 10'000);
  return std::chrono::milliseconds(full - static_cast<int64_t>(static_cast<double>(full) *
                                                               std::clamp(jitter, 0.0, 0.5)));
}

// Requests of the mount check are retried this many times; uploads are retried until they
// succeed or fail for good (kFail), their last error shown in stats meanwhile.
inline constexpr unsigned kCheckRetries = 2;

// S3's limits on multipart uploads: at most 10,000 parts, each at least 5 MiB but the last.
inline constexpr uint64_t kMinPartSize = 5ull << 20;
inline constexpr uint64_t kMaxPartSize = 5ull << 30;
inline constexpr uint64_t kMaxParts = 10'000;

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

}  // namespace ckptfs::policy
