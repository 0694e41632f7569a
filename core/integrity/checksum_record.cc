#include "core/integrity/checksum_record.h"

#include <cerrno>
#include <charconv>
#include <cstdio>

namespace ckptfs {
namespace {

constexpr uint64_t kMinParsedChunk = uint64_t{1} << 20;
constexpr uint64_t kMaxParsedChunk = uint64_t{1} << 42;

Status Malformed(std::string_view why) {
  return Status::Error(EINVAL, "malformed checksum record: " + std::string(why));
}

// Parses `text` whole as an unsigned number of base `base` with at most `max_digits` digits;
// decimal numbers without leading zeros, hex ones in lowercase.
template <typename T>
bool ParseNumber(std::string_view text, int base, size_t max_digits, T* out) {
  if (text.empty() || text.size() > max_digits) return false;
  if (base == 10 && text.size() > 1 && text[0] == '0') return false;
  for (char c : text) {
    const bool digit = c >= '0' && c <= '9';
    const bool hex = base == 16 && c >= 'a' && c <= 'f';
    if (!digit && !hex) return false;
  }
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), *out, base);
  return ec == std::errc() && end == text.data() + text.size();
}

// Takes "<key><value> " from the front of `text`.
bool TakeField(std::string_view* text, std::string_view key, std::string_view* value) {
  if (!text->starts_with(key)) return false;
  text->remove_prefix(key.size());
  const size_t end = text->find(' ');
  if (end == std::string_view::npos) return false;
  *value = text->substr(0, end);
  text->remove_prefix(end + 1);
  return true;
}

}  // namespace

uint64_t ChecksumChunkFor(uint64_t size) {
  uint64_t chunk = kMinChecksumChunk;
  while (size / chunk + (size % chunk != 0) > kMaxChecksumChunks) chunk *= 2;
  return chunk;
}

std::string FormatChecksumRecord(const ChecksumRecord& record) {
  std::string text = "crc32c chunk=" + std::to_string(record.chunk) +
                     " size=" + std::to_string(record.size) + " sums=";
  for (size_t i = 0; i < record.sums.size(); ++i) {
    char sum[10];
    std::snprintf(sum, sizeof sum, "%s%08x", i == 0 ? "" : ",", record.sums[i]);
    text += sum;
  }
  return text;
}

Result<ChecksumRecord> ParseChecksumRecord(std::string_view text) {
  if (text.size() > kMaxChecksumRecordBytes) return Malformed("too long");
  ChecksumRecord record;
  std::string_view chunk, size, sums;
  if (!text.starts_with("crc32c ")) return Malformed("not crc32c");
  text.remove_prefix(7);
  if (!TakeField(&text, "chunk=", &chunk) || !ParseNumber(chunk, 10, 20, &record.chunk) ||
      record.chunk < kMinParsedChunk || record.chunk > kMaxParsedChunk ||
      (record.chunk & (record.chunk - 1)) != 0) {
    return Malformed("chunk is not a power of two from 1 MiB to 4 TiB");
  }
  if (!TakeField(&text, "size=", &size) || !ParseNumber(size, 10, 20, &record.size)) {
    return Malformed("size is not a number");
  }
  if (!text.starts_with("sums=")) return Malformed("no sums at the end");
  sums = text.substr(5);
  const uint64_t chunks = record.size / record.chunk + (record.size % record.chunk != 0);
  if (chunks > kMaxChecksumChunks) return Malformed("too many chunks");
  while (!sums.empty()) {
    if (record.sums.size() == chunks) return Malformed("more sums than chunks");
    if (!record.sums.empty()) {
      if (sums[0] != ',') return Malformed("sums not separated by commas");
      sums.remove_prefix(1);
    }
    uint32_t sum = 0;
    if (sums.size() < 8 || !ParseNumber(sums.substr(0, 8), 16, 8, &sum)) {
      return Malformed("a sum is not 8 lowercase hex digits");
    }
    record.sums.push_back(sum);
    sums.remove_prefix(8);
  }
  if (record.sums.size() != chunks) return Malformed("fewer sums than chunks");
  return record;
}

}  // namespace ckptfs
