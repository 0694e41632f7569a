// ControlBlock: the memory a mount's supervisor (fs/supervisor.h) shares with each of its workers
// (fs/worker.h), a memfd the supervisor makes and every worker inherits. It outlives any worker:
// what one worker leaves there, the next finds.
//
// Who writes what: the supervisor writes its fields only while no worker runs (before it starts
// one); a worker writes the INIT request (the first worker), an upgrade request or its failure,
// and the handoff image, whose length the supervisor reads only after that worker has exited or
// said its image is complete (kHandedOverSignal, fs/worker.h). No field is written by both sides
// while the other may read it.
#pragma once

#include <linux/limits.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

#include "core/base/status.h"
#include "core/recovery/handoff.h"

namespace ckptfs {

struct ControlBlock {
  static constexpr uint64_t kMagic = 0x636b707466734342;  // "ckptfsCB"
  static constexpr uint32_t kLayout = 1;

  uint64_t magic = 0;
  uint32_t layout = 0;
  // Supervisor: the number of the worker it starts (0 for the first), and what befell the
  // workers before it.
  uint32_t worker = 0;
  uint64_t handoffs = 0;  // Workers replaced after handing over (upgrades, restarts).
  uint64_t crashes = 0;   // Workers that died without handing over.
  // CLOCK_MONOTONIC when the previous worker stopped answering requests (the start of its
  // handoff, written by that worker; or its death, written by the supervisor); 0: none.
  int64_t previous_stopped_ns = 0;
  char binary[PATH_MAX] = {};     // The binary of the worker it starts.
  // Why the latest upgrade failed: its handoff (written by the worker, which serves on) or the
  // new binary (written by the supervisor, whose old binary took over again).
  char upgrade_error[1024] = {};
  // The first worker: the kernel's INIT request.
  uint32_t init_length = 0;
  char init[1024] = {};
  // A worker asked to be replaced: by this binary (empty: the same).
  char requested_binary[PATH_MAX] = {};
  // A worker that handed over: the image's length (its bytes follow the block, at kImageOffset);
  // the next worker sets it to 0 once it has restored the image.
  uint64_t image_length = 0;
};

// Times in the block: CLOCK_MONOTONIC (the steady clock), one clock for every process.
inline int64_t MonotonicNanos() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// Where the handoff image starts, and the size of the whole mapping (sparse: pages are used only
// as far as an image reaches).
inline constexpr size_t kImageOffset = 1 << 20;
inline constexpr size_t kControlMappingSize = kImageOffset + kMaxHandoffImage;
static_assert(sizeof(ControlBlock) <= kImageOffset);

// A mapped control block and its memfd.
struct ControlMapping {
  int fd = -1;
  ControlBlock* block = nullptr;

  char* image() const { return reinterpret_cast<char*>(block) + kImageOffset; }
  std::string_view image_text() const {
    return {image(), static_cast<size_t>(std::min<uint64_t>(block->image_length,
                                                            kMaxHandoffImage))};
  }
};

// The supervisor: a new memfd with an initialised block (close-on-exec; the supervisor passes it
// on explicitly).
Result<ControlMapping> CreateControlBlock();
// A worker: maps the block of memfd `fd`; EINVAL when it is not one (wrong size, magic or layout).
Result<ControlMapping> MapControlBlock(int fd);

// Copies `text` into the fixed field `field` (NUL-terminated); false when it does not fit.
template <size_t N>
bool SetField(char (&field)[N], std::string_view text) {
  if (text.size() >= N) return false;
  text.copy(field, text.size());
  field[text.size()] = '\0';
  return true;
}
// The text of a fixed field, up to its first NUL.
template <size_t N>
std::string FieldText(const char (&field)[N]) {
  return std::string(field, strnlen(field, N));
}

}  // namespace ckptfs
