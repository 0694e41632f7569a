// Clock: the time the flush policy runs on: when versions are sealed and become due, how long a
// failed flush backs off, and the prefault's quiet period. The daemon reads the steady clock;
// tests move a ManualClock themselves instead of waiting.
#pragma once

#include <atomic>
#include <chrono>

namespace ckptfs {

class Clock {
 public:
  using time_point = std::chrono::steady_clock::time_point;
  using duration = std::chrono::steady_clock::duration;

  virtual ~Clock() = default;
  virtual time_point Now() const = 0;

  // The process's steady clock.
  static Clock& Steady();
};

class SteadyClock final : public Clock {
 public:
  time_point Now() const override { return std::chrono::steady_clock::now(); }
};

inline Clock& Clock::Steady() {
  static SteadyClock clock;
  return clock;
}

// A clock that stands still until Advance moves it. Thread-safe.
class ManualClock final : public Clock {
 public:
  time_point Now() const override { return time_point(duration(ticks_.load())); }
  void Advance(duration by) { ticks_ += by.count(); }

 private:
  // Starts a day after the epoch, as a steady clock would, so that "long ago" is expressible.
  std::atomic<duration::rep> ticks_{std::chrono::duration_cast<duration>(std::chrono::hours(24))
                                        .count()};
};

}  // namespace ckptfs
