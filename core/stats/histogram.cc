#include "core/stats/histogram.h"

#include <algorithm>
#include <cassert>

namespace ckptfs {

Histogram::Histogram(std::span<const double> bounds) : bounds_(bounds) {
  assert(bounds.size() <= kMaxBuckets && std::is_sorted(bounds.begin(), bounds.end()));
}

void Histogram::Observe(std::chrono::nanoseconds duration) {
  const int64_t ns = std::max<int64_t>(duration.count(), 0);
  const double seconds = static_cast<double>(ns) / 1e9;
  const size_t bucket = static_cast<size_t>(
      std::lower_bound(bounds_.begin(), bounds_.end(), seconds) - bounds_.begin());
  counts_[bucket].fetch_add(1, std::memory_order_relaxed);
  sum_ns_.fetch_add(static_cast<uint64_t>(ns), std::memory_order_relaxed);
}

uint64_t Histogram::count() const {
  uint64_t total = 0;
  for (size_t i = 0; i <= bounds_.size(); ++i) total += counts_[i].load(std::memory_order_relaxed);
  return total;
}

nlohmann::json Histogram::ToJson() const {
  nlohmann::json le = nlohmann::json::array(), counts = nlohmann::json::array();
  uint64_t cumulative = 0;
  for (size_t i = 0; i <= bounds_.size(); ++i) {
    cumulative += counts_[i].load(std::memory_order_relaxed);
    if (i < bounds_.size()) le.push_back(bounds_[i]);
    counts.push_back(cumulative);
  }
  const double sum = static_cast<double>(sum_ns_.load(std::memory_order_relaxed)) / 1e9;
  return {{"le", std::move(le)}, {"counts", std::move(counts)}, {"sum", sum}};
}

}  // namespace ckptfs
