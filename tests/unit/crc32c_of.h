// The CRC32C of a string in one call, for tests.
#pragma once

#include <cstdint>
#include <string_view>

#include "core/memory/crc32c.h"

namespace ckptfs::testing_util {

inline uint32_t Crc32cOf(std::string_view bytes) {
  Crc32c crc;
  crc.Update(bytes.data(), bytes.size());
  return crc.value();
}

}  // namespace ckptfs::testing_util
