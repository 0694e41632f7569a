// The checksum record of bytes as the daemon takes it (ChunkedChecksum), for tests.
#pragma once

#include <string>
#include <utility>

#include "core/integrity/checksum.h"

namespace ckptfs::testing_util {

inline ChecksumRecord RecordOf(const std::string& bytes) {
  ChunkedChecksum sum(bytes.size());
  sum.Update(bytes.data(), bytes.size());
  return std::move(sum).Finish();
}

}  // namespace ckptfs::testing_util
