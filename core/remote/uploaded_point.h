// UploadedPoint: the journal point up to which everything is on the store (the level `uploaded`
// of a shared member on a store: what the others' commits wait for), from what each flush report
// handed to the uploader. Pure bookkeeping: no clock, no I/O; not thread-safe (its owner locks).
#pragma once

#include <algorithm>
#include <cstdint>
#include <deque>

namespace ckptfs {

class UploadedPoint {
 public:
  // A flush report whose entries end at journal point `seq` was handed over: `handed_over`
  // versions (and removals) in all so far, the report's last.
  void HandedOver(uint64_t seq, uint64_t handed_over) { pending_.push_back({seq, handed_over}); }

  // Every entry up to the result is on the store, given `durable`, the journal's durable point
  // read before `done`, the versions done in order from the first (UploadProgress::done_in_order).
  // Everything up to `durable` was handed over before it was read (reports are handed over before
  // the journal completes their entries): with nothing pending, that is the point.
  uint64_t Point(uint64_t durable, uint64_t done) {
    while (!pending_.empty() && pending_.front().handed_over <= done) {
      uploaded_ = std::max(uploaded_, pending_.front().seq);
      pending_.pop_front();
    }
    return pending_.empty() ? durable : std::min(durable, uploaded_);
  }

 private:
  struct Report {
    uint64_t seq;
    uint64_t handed_over;
  };
  std::deque<Report> pending_;  // Oldest first.
  uint64_t uploaded_ = 0;       // The last point of the reports found done.
};

}  // namespace ckptfs
