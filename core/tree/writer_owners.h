// The owners that wrote through one open file handle, as the kernel names them: FUSE's
// lock_owner, one per process's table of descriptors (threads share it; a forked child has its
// own). The kernel sends a flush whenever any descriptor of the open file is closed; a flush by
// an owner that never wrote through the handle is not the writer's close (a forked child that
// exits, a subprocess closing what it inherited) and must not seal a version the writer is still
// writing. Changes that name no owner (a truncation at open, a new file) do not make one known:
// until a write names its owner, any flush seals, as every flush did before.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>

namespace ckptfs {

class WriterOwners {
 public:
  // Records a write by `owner`; 0: the kernel did not say (write-back of cached pages).
  void Wrote(uint64_t owner) {
    if (owner == 0) {
      unknown_ = true;
    } else if (std::find(owners_.begin(), owners_.begin() + count_, owner) ==
               owners_.begin() + count_) {
      if (count_ == owners_.size()) {
        unknown_ = true;
      } else {
        owners_[count_++] = owner;
      }
    }
  }

  // Whether a flush by `owner` is a writer's close: it wrote through the handle, or nothing
  // wrote, or a write came whose owner is not known (unnamed, or past the owners kept).
  bool Closes(uint64_t owner) const {
    return unknown_ || count_ == 0 ||
           std::find(owners_.begin(), owners_.begin() + count_, owner) !=
               owners_.begin() + count_;
  }

 private:
  std::array<uint64_t, 4> owners_{};
  size_t count_ = 0;
  bool unknown_ = false;
};

}  // namespace ckptfs
