// Tests of CRC32C: check values, pieces, zeros and joined sums.
#include "core/memory/crc32c.h"

#include <gtest/gtest.h>

#include <random>
#include <string>

#include "core_test_util.h"
#include "crc32c_of.h"

namespace ckptfs {
namespace {

using testing_util::Crc32cOf;

TEST(Crc32cTest, GivesTheCastagnoliCheckValues) {
  EXPECT_EQ(Crc32cOf(""), 0u);
  EXPECT_EQ(Crc32cOf("123456789"), 0xe3069283u);  // The CRC-32C check value (RFC 3720).
  EXPECT_EQ(Crc32cOf(std::string(32, '\0')), 0x8a9136aau);  // RFC 3720 B.4: 32 bytes of zeros.
  EXPECT_EQ(Crc32cOf(std::string(32, '\xff')), 0x62a8ab43u);  // RFC 3720 B.4: 32 bytes of ones.
}

TEST(Crc32cTest, UpdatesInPiecesEqualOneUpdateOfTheWhole) {
  const std::string bytes = testing_util::Pattern(7, 3 << 20);
  std::mt19937_64 rng(1);
  for (int round = 0; round < 20; ++round) {
    Crc32c crc;
    for (size_t at = 0; at < bytes.size();) {
      size_t piece = std::min<size_t>(bytes.size() - at, rng() % (300 << 10) + 1);
      crc.Update(bytes.data() + at, piece);
      at += piece;
    }
    EXPECT_EQ(crc.value(), Crc32cOf(bytes));
  }
}

TEST(Crc32cTest, ZerosSumAsZeroBytes) {
  for (uint64_t n : {uint64_t{0}, uint64_t{1}, uint64_t{4095}, uint64_t{9} << 20}) {
    Crc32c crc;
    crc.Update("ab", 2);
    crc.UpdateZeros(n);
    EXPECT_EQ(crc.value(), Crc32cOf("ab" + std::string(n, '\0'))) << n;
  }
}

TEST(Crc32cTest, TheSumsOfTwoPartsJoinIntoTheSumOfTheWhole) {
  const std::string bytes = testing_util::Pattern(8, (9 << 20) + 3);
  std::mt19937_64 rng(2);
  for (size_t cut : {size_t{0}, size_t{1}, size_t{4096}, size_t{8} << 20, bytes.size() - 1,
                     bytes.size(), static_cast<size_t>(rng() % bytes.size())}) {
    const std::string a = bytes.substr(0, cut);
    const std::string b = bytes.substr(cut);
    EXPECT_EQ(Crc32cConcat(Crc32cOf(a), Crc32cOf(b), b.size()), Crc32cOf(bytes)) << cut;
  }
}

}  // namespace
}  // namespace ckptfs
