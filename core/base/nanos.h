// A timespec as nanoseconds since the epoch, and back: how recovery logs, handoffs, upload logs,
// checksum records and stored-version attributes keep a file's times.
#pragma once

#include <cstdint>
#include <ctime>

namespace ckptfs {

inline int64_t NanosOf(const timespec& t) { return int64_t{t.tv_sec} * 1'000'000'000 + t.tv_nsec; }

inline timespec TimespecOf(int64_t ns) {
  return {static_cast<time_t>(ns / 1'000'000'000), static_cast<long>(ns % 1'000'000'000)};
}

}  // namespace ckptfs
