// Read-back of files just written and synced, checked against the records of their bytes in
// memory: what -o verify=markers does before it publishes them. The files are read from the
// backing store itself where its filesystem allows (O_DIRECT: from the device, or from the
// server of a network filesystem, never from this machine's page cache), all of them at once
// through the Env's batched reads (io_uring: kReadBackSpansInFlight in flight), and summed per
// span while the next spans are read; span sums are joined into the record's chunks.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "core/integrity/checksum_record.h"
#include "core/integrity/verifier.h"
#include "iouring/env.h"

namespace ckptfs {

// Bytes of one read; a power of two, so that it divides every record's chunk of at least as much.
inline constexpr size_t kReadBackSpan = size_t{4} << 20;
// Reads in flight at once; as many more are being summed (memory: 2x this many spans).
inline constexpr size_t kReadBackSpansInFlight = 8;

struct ReadBackFile {
  int fd = -1;                             // The file, open in any mode; not used for reading.
  const ChecksumRecord* record = nullptr;  // Of its bytes as they were in memory.
};

struct ReadBackOutcome {
  // kOk, kMismatch (the first differing chunk), or kError (the failed call).
  Verification verification;
  // Read through the page cache: the backing filesystem has no O_DIRECT.
  bool from_page_cache = false;
};

// Reads every file of `files` from the backing store through a descriptor of its own and checks
// it against its record. One outcome per file, in order. Called by the owner of `env`'s batches.
std::vector<ReadBackOutcome> ReadBackFiles(Env& env, std::span<const ReadBackFile> files);

}  // namespace ckptfs
