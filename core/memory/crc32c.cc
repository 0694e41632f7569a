#include "core/memory/crc32c.h"

#include <isa-l/crc.h>

#include <algorithm>
#include <array>

namespace ckptfs {
namespace {

// ISA-L takes an int length; larger spans go in pieces of this many bytes.
constexpr size_t kMaxPiece = size_t{1} << 30;

uint32_t RawUpdate(uint32_t state, const char* data, size_t length) {
  const auto* bytes = reinterpret_cast<const unsigned char*>(data);
  while (length > 0) {
    const size_t piece = std::min(length, kMaxPiece);
    state = crc32_iscsi(const_cast<unsigned char*>(bytes), static_cast<int>(piece), state);
    bytes += piece;
    length -= piece;
  }
  return state;
}

// A linear map over GF(2) of 32-bit CRC states: column j is the image of bit j.
using Gf2Matrix = std::array<uint32_t, 32>;

uint32_t Apply(const Gf2Matrix& m, uint32_t v) {
  uint32_t out = 0;
  for (int j = 0; v != 0; ++j, v >>= 1) {
    if (v & 1) out ^= m[j];
  }
  return out;
}

Gf2Matrix Compose(const Gf2Matrix& outer, const Gf2Matrix& inner) {
  Gf2Matrix out;
  for (int j = 0; j < 32; ++j) out[j] = Apply(outer, inner[j]);
  return out;
}

// kZeroShifts[k]: the raw CRC state after 2^k zero bytes, as a map of the state before. The map
// of one zero byte is read off ISA-L itself; the others are its powers.
struct ZeroShifts {
  static constexpr int kLevels = 64;
  std::array<Gf2Matrix, kLevels> shifts;

  ZeroShifts() {
    const char zero = 0;
    for (int j = 0; j < 32; ++j) shifts[0][j] = RawUpdate(uint32_t{1} << j, &zero, 1);
    for (int k = 1; k < kLevels; ++k) shifts[k] = Compose(shifts[k - 1], shifts[k - 1]);
  }

  uint32_t ShiftByZeros(uint32_t state, uint64_t length) const {
    for (int k = 0; length != 0; ++k, length >>= 1) {
      if (length & 1) state = Apply(shifts[k], state);
    }
    return state;
  }
};

const ZeroShifts& Shifts() {
  static const ZeroShifts shifts;
  return shifts;
}

}  // namespace

void Crc32c::Update(const char* data, size_t length) { state_ = RawUpdate(state_, data, length); }

void Crc32c::UpdateZeros(uint64_t length) { state_ = Shifts().ShiftByZeros(state_, length); }

// With the pre- and post-inverted CRC, crc(A B) = Z(crc(A)) ^ crc(B), where Z is the raw update
// by |B| zero bytes (the inversions cancel out, Z being linear).
uint32_t Crc32cConcat(uint32_t crc_a, uint32_t crc_b, uint64_t length_b) {
  return Shifts().ShiftByZeros(crc_a, length_b) ^ crc_b;
}

}  // namespace ckptfs
