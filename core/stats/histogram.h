// Histogram: counts of durations in fixed buckets, as Prometheus histograms show them. Observed
// lock-free from any thread; read as JSON for the stats (core/stats/metrics_text.h renders it).
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <span>

namespace ckptfs {

// Upper bounds, in seconds, of the buckets of short durations (FUSE requests).
inline constexpr double kRequestBuckets[] = {0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025,
                                             0.005,   0.01,   0.025,   0.05,   0.1,   0.25,
                                             0.5,     1,      2.5,     5,      10};
// ... and of long ones (flushes, a save's wait until it is durable).
inline constexpr double kFlushBuckets[] = {0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1,
                                           2.5,   5,     10,   30,   60,  120, 300, 600};

class Histogram {
 public:
  static constexpr size_t kMaxBuckets = 24;

  // `bounds`: ascending upper bounds in seconds, at most kMaxBuckets; the last bucket (+Inf) is
  // implicit. They must outlive the histogram (the tables above).
  explicit Histogram(std::span<const double> bounds);

  void Observe(std::chrono::nanoseconds duration);

  // Observations so far (the sum of the buckets).
  uint64_t count() const;

  // {"le": [bounds...], "counts": [cumulative count of each bound..., count], "sum": seconds}.
  // Counts never decrease between two calls; the sum may trail the counts by observations made
  // meanwhile.
  nlohmann::json ToJson() const;

 private:
  std::span<const double> bounds_;
  std::array<std::atomic<uint64_t>, kMaxBuckets + 1> counts_{};  // Not cumulative.
  std::atomic<uint64_t> sum_ns_{0};
};

}  // namespace ckptfs
