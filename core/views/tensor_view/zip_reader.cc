#include "core/views/tensor_view/zip_reader.h"

#include <algorithm>
#include <string_view>

namespace ckptfs::zip {
namespace {

constexpr uint32_t kEndSignature = 0x06054b50;
constexpr uint32_t kEnd64Signature = 0x06064b50;
constexpr uint32_t kEnd64LocatorSignature = 0x07064b50;
constexpr uint32_t kDirectorySignature = 0x02014b50;
constexpr uint32_t kLocalSignature = 0x04034b50;
constexpr size_t kEndBytes = 22;
constexpr size_t kEnd64Bytes = 56;
constexpr size_t kLocatorBytes = 20;
constexpr size_t kDirectoryEntryBytes = 46;
constexpr size_t kLocalHeaderBytes = 30;
constexpr size_t kMaxComment = 0xFFFF;

Status Bad(std::string why) { return Status::Error(EBADMSG, "zip: " + why); }

uint64_t Le(std::string_view s, size_t at, size_t n) {
  uint64_t v = 0;
  for (size_t i = n; i-- > 0;) v = v << 8 | static_cast<uint8_t>(s[at + i]);
  return v;
}

Result<std::string> ReadRange(const ReadAt& read, uint64_t size, uint64_t offset, uint64_t length) {
  if (offset > size || length > size - offset) return Bad("a record runs past the end");
  std::string out(static_cast<size_t>(length), '\0');
  Status st = read(offset, out.size(), out.data());
  if (!st.ok()) return st;
  return out;
}

// The zip64 extra field of a directory entry fills in the fields saturated at 0xFFFFFFFF.
Status ApplyZip64(std::string_view extra, Entry& e, bool usize, bool csize, bool offset) {
  for (size_t at = 0; at + 4 <= extra.size();) {
    const uint64_t id = Le(extra, at, 2), len = Le(extra, at + 2, 2);
    if (at + 4 + len > extra.size()) return Bad("extra field runs past its entry");
    if (id == 1) {
      size_t p = at + 4;
      for (auto [want, field] : {std::pair{usize, &e.size}, {csize, &e.compressed_size},
                                 {offset, &e.header_offset}}) {
        if (!want) continue;
        if (p + 8 > at + 4 + len) return Bad("short zip64 field");
        *field = Le(extra, p, 8);
        p += 8;
      }
      return Status::Ok();
    }
    at += 4 + len;
  }
  if (usize || csize || offset) return Bad("zip64 field missing");
  return Status::Ok();
}

}  // namespace

Result<std::vector<Entry>> ReadDirectory(const ReadAt& read, uint64_t size) {
  if (size < kEndBytes) return Bad("too short for an archive");
  const uint64_t tail_len = std::min<uint64_t>(size, kEndBytes + kMaxComment + kLocatorBytes);
  Result<std::string> tail = ReadRange(read, size, size - tail_len, tail_len);
  if (!tail.ok()) return tail.status();
  size_t end = std::string_view::npos;
  for (size_t at = tail->size() - kEndBytes + 1; at-- > 0;) {
    if (Le(*tail, at, 4) == kEndSignature) {
      end = at;
      break;
    }
  }
  if (end == std::string_view::npos) return Bad("no end of central directory");
  uint64_t entries = Le(*tail, end + 10, 2);
  uint64_t dir_size = Le(*tail, end + 12, 4);
  uint64_t dir_offset = Le(*tail, end + 16, 4);
  if (entries == 0xFFFF || dir_size == 0xFFFFFFFF || dir_offset == 0xFFFFFFFF) {
    if (end < kLocatorBytes || Le(*tail, end - kLocatorBytes, 4) != kEnd64LocatorSignature) {
      return Bad("zip64 locator missing");
    }
    const uint64_t end64_at = Le(*tail, end - kLocatorBytes + 8, 8);
    Result<std::string> end64 = ReadRange(read, size, end64_at, kEnd64Bytes);
    if (!end64.ok()) return end64.status();
    if (Le(*end64, 0, 4) != kEnd64Signature) return Bad("bad zip64 end record");
    entries = Le(*end64, 32, 8);
    dir_size = Le(*end64, 40, 8);
    dir_offset = Le(*end64, 48, 8);
  }
  if (dir_size > kMaxDirectoryBytes) return Bad("central directory too large");
  if (entries > dir_size / kDirectoryEntryBytes) return Bad("more entries than the directory holds");
  Result<std::string> dir = ReadRange(read, size, dir_offset, dir_size);
  if (!dir.ok()) return dir.status();
  std::vector<Entry> out;
  out.reserve(static_cast<size_t>(entries));
  size_t at = 0;
  for (uint64_t i = 0; i < entries; ++i) {
    if (at + kDirectoryEntryBytes > dir->size() || Le(*dir, at, 4) != kDirectorySignature) {
      return Bad("bad central directory entry");
    }
    const size_t name_len = Le(*dir, at + 28, 2), extra_len = Le(*dir, at + 30, 2),
                 comment_len = Le(*dir, at + 32, 2);
    if (at + kDirectoryEntryBytes + name_len + extra_len + comment_len > dir->size()) {
      return Bad("central directory entry runs past the directory");
    }
    Entry e;
    e.method = static_cast<uint16_t>(Le(*dir, at + 10, 2));
    e.compressed_size = Le(*dir, at + 20, 4);
    e.size = Le(*dir, at + 24, 4);
    e.header_offset = Le(*dir, at + 42, 4);
    e.name = dir->substr(at + kDirectoryEntryBytes, name_len);
    Status st = ApplyZip64(std::string_view(*dir).substr(at + kDirectoryEntryBytes + name_len, extra_len),
                           e, e.size == 0xFFFFFFFF, e.compressed_size == 0xFFFFFFFF,
                           e.header_offset == 0xFFFFFFFF);
    if (!st.ok()) return st;
    out.push_back(std::move(e));
    at += kDirectoryEntryBytes + name_len + extra_len + comment_len;
  }
  return out;
}

Result<uint64_t> DataOffset(const ReadAt& read, uint64_t size, const Entry& entry) {
  Result<std::string> header = ReadRange(read, size, entry.header_offset, kLocalHeaderBytes);
  if (!header.ok()) return header.status();
  if (Le(*header, 0, 4) != kLocalSignature) return Bad("bad local header of " + entry.name);
  const uint64_t data = entry.header_offset + kLocalHeaderBytes + Le(*header, 26, 2) + Le(*header, 28, 2);
  if (data > size || entry.compressed_size > size - data) return Bad(entry.name + " runs past the end");
  return data;
}

}  // namespace ckptfs::zip
