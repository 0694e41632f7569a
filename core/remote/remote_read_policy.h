// The read path's policy, pure: which names a listing of the store may show in a directory,
// how an object is cut into the ranges fetched in parallel, when a listing is taken again, and
// the times the store gives.
//
// Contract of the read path (core/remote/remote_reader.h): a directory of the mount that was
// found on the backing directory is listed from the store once per mount, on first need (a
// lookup or a listing in it), with ListObjectsV2 and a delimiter: its objects become
// placeholders in the backing directory (core/backing/backing_paths.h: kRemotePlaceholderAttr),
// its common prefixes directories. A name already in the backing directory is judged by
// JudgeListedOverLocal: a local file that another node's newer object replaced on the store
// becomes a placeholder of that object. A directory made through this mount is never listed:
// what it holds is what this mount writes.
#pragma once

#include <algorithm>
#include <cstdint>
#include <ctime>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ckptfs::policy {

// A name longer than this is refused (NAME_MAX of the local filesystems).
inline constexpr size_t kMaxListedName = 255;
// S3 keys are at most 1,024 bytes; a key or prefix the store lists longer than that is refused.
inline constexpr size_t kMaxListedKey = 1024;
// Keys asked for per page of a listing: with keys of 1 KiB, an answer stays under the 1 MiB the
// XML parser takes.
inline constexpr unsigned kListPageKeys = 500;
// Entries of one directory at most: the rest is not shown (and said once in the log).
inline constexpr uint64_t kMaxListedEntries = 200'000;

// The key prefix whose objects and common prefixes are the entries of directory `relative_dir`
// (relative to the mount root, "" for the root) under the mount's `prefix` (no leading or trailing
// '/', may be empty).
inline std::string DirectoryKeyPrefix(std::string_view prefix, std::string_view relative_dir) {
  std::string out(prefix);
  if (!out.empty()) out += '/';
  if (!relative_dir.empty()) {
    out += relative_dir;
    out += '/';
  }
  return out;
}

enum class ListedVerdict { kShow, kSkip, kRefuse };

// What the entry the store listed as `key` (an object's key, or a common prefix with its trailing
// '/' when `common_prefix`) in the listing of `dir_prefix` becomes: shown under `*name`; skipped
// (the directory's own "folder" object, or a private name: `reserved` at the top, `manifest`
// anywhere); refused (hostile or broken: not under `dir_prefix`, an empty, "." or ".." name, a
// name with a '/' or a NUL, a name over 255 bytes, a key over 1,024). Never followed: a name
// shown is one component made in the listed directory, nowhere else.
inline ListedVerdict JudgeListed(std::string_view key, bool common_prefix,
                                 std::string_view dir_prefix, bool top, std::string_view reserved,
                                 std::string_view manifest, std::string* name) {
  if (key.size() > kMaxListedKey || key.substr(0, dir_prefix.size()) != dir_prefix) {
    return ListedVerdict::kRefuse;
  }
  std::string_view rest = key.substr(dir_prefix.size());
  if (common_prefix) {
    if (rest.empty() || rest.back() != '/') return ListedVerdict::kRefuse;
    rest.remove_suffix(1);
  } else if (rest.empty()) {
    return ListedVerdict::kSkip;  // A "folder" object some tools make: not a file.
  }
  if (rest.empty() || rest == "." || rest == ".." || rest.size() > kMaxListedName ||
      rest.find('/') != rest.npos || rest.find('\0') != rest.npos) {
    return ListedVerdict::kRefuse;
  }
  if ((top && rest == reserved) || rest == manifest) return ListedVerdict::kSkip;
  *name = std::string(rest);
  return ListedVerdict::kShow;
}

// A listing of several pages is not a snapshot: a commit marker found on one page may have been
// uploaded after an earlier page was read, so that page may miss the marker's data. A marker is
// shown only by a listing that started after it was seen: such a listing is taken again once.
inline bool ListAgain(bool found_marker, unsigned pages, bool second_listing) {
  return found_marker && pages > 1 && !second_listing;
}

// The record a local file keeps of the object it matches on the store (kStoredVersionAttr,
// core/backing/backing_paths.h), written when this mount uploaded it or fetched it whole: the
// object's ETag, and the file's size and mtime then, one a line.
inline std::string FormatStoredVersion(std::string_view etag, uint64_t size, int64_t mtime_ns) {
  std::string out(etag);
  out += '\n';
  out += std::to_string(size);
  out += '\n';
  out += std::to_string(mtime_ns);
  return out;
}

// Record values longer than this are refused (an ETag is at most 1 KiB here).
inline constexpr size_t kMaxStoredVersion = 1100;

// The ETag that record `text` (read back from a local file: untrusted, checked) gives for the file
// as it is now (`size` bytes, `mtime_ns`); nullopt when it is broken, has no ETag, or describes
// another version of the file (its size or mtime changed since: the record is not of these
// bytes).
inline std::optional<std::string> StoredEtagOf(std::string_view text, uint64_t size,
                                               int64_t mtime_ns) {
  if (text.size() > kMaxStoredVersion) return std::nullopt;
  const size_t first = text.find('\n');
  if (first == text.npos || first == 0) return std::nullopt;
  const size_t second = text.find('\n', first + 1);
  if (second == text.npos) return std::nullopt;
  const std::string_view etag = text.substr(0, first);
  if (etag.find('\0') != etag.npos) return std::nullopt;
  if (text.substr(first + 1, second - first - 1) != std::to_string(size) ||
      text.substr(second + 1) != std::to_string(mtime_ns)) {
    return std::nullopt;
  }
  return std::string(etag);
}

// Whether two ETags name the same object version; stores quote them ("\"abc\""), and some
// listings drop the quotes. An empty ETag is the same as none.
inline std::string_view BareEtag(std::string_view etag) {
  if (etag.size() >= 2 && etag.front() == '"' && etag.back() == '"') {
    etag = etag.substr(1, etag.size() - 2);
  }
  return etag;
}
inline bool SameEtag(std::string_view a, std::string_view b) {
  return !BareEtag(a).empty() && BareEtag(a) == BareEtag(b);
}

// What this mount still has to send to the store about a path.
enum class PendingChange { kNone, kUpload, kRemoval };

enum class ListedOverLocal { kKeepLocal, kPlaceholder, kSkip };

// What a listing does with the object listed (ETag `listed_etag`) under a name that the backing
// directory holds (`exists`; a regular file when `regular`, with `recorded`: the ETag its record,
// or its placeholder's mark, names; `records_kept`: false where the backing filesystem keeps no
// records, having no user extended attributes), and about which `pending` is still to be sent:
//  - its removal pending: kSkip (the object is on its way out of the store; it never comes back);
//  - no local entry: kPlaceholder;
//  - an upload pending (this mount's version is newer than any on the store), not a regular
//    file, or no records kept (nothing to tell an old local file from a new one): kKeepLocal;
//  - no ETag listed: kKeepLocal (nothing to compare with);
//  - a regular file whose record names the listed object: kKeepLocal (it is that object);
//  - a regular file whose record names another object, or that has no record (written by a mount
//    without the record, or its record lost in a crash): kPlaceholder over it. The store's
//    object wins, since nothing of the local file is still to be sent: it is an older version,
//    or at worst the same bytes, fetched again.
inline ListedOverLocal JudgeListedOverLocal(bool exists, bool regular, bool records_kept,
                                            const std::optional<std::string>& recorded,
                                            std::string_view listed_etag, PendingChange pending) {
  if (pending == PendingChange::kRemoval) return ListedOverLocal::kSkip;
  if (!exists) return ListedOverLocal::kPlaceholder;
  if (pending == PendingChange::kUpload || !regular || !records_kept) {
    return ListedOverLocal::kKeepLocal;
  }
  if (BareEtag(listed_etag).empty()) return ListedOverLocal::kKeepLocal;
  if (recorded && SameEtag(*recorded, listed_etag)) return ListedOverLocal::kKeepLocal;
  return ListedOverLocal::kPlaceholder;
}

// A placeholder's mark (kRemotePlaceholderAttr): its object's ETag, a line break, its key.
inline constexpr size_t kMaxPlaceholderEtag = 128;
inline constexpr size_t kMaxPlaceholderMark = kMaxPlaceholderEtag + 1 + kMaxListedKey;
inline std::string PlaceholderMark(std::string_view etag, std::string_view key) {
  return std::string(etag) + "\n" + std::string(key);
}
// The key a mark names; nullopt for a mark without a line break.
inline std::optional<std::string_view> PlaceholderMarkKey(std::string_view mark) {
  const size_t split = mark.find('\n');
  if (split == mark.npos) return std::nullopt;
  return mark.substr(split + 1);
}

// Whether `key`, read back from a placeholder's mark (a local file's attribute: bounded, but
// checked), names an object the mount under `prefix` may fetch: under the prefix, at most 1,024
// bytes, no NUL.
inline bool IsPlaceholderKey(std::string_view key, std::string_view prefix) {
  if (key.empty() || key.size() > kMaxListedKey || key.find('\0') != key.npos) return false;
  if (prefix.empty()) return true;
  return key.size() > prefix.size() + 1 && key.substr(0, prefix.size()) == prefix &&
         key[prefix.size()] == '/';
}

struct FetchRange {
  uint64_t offset = 0;
  uint64_t length = 0;
};

// The ranged GETs that fetch an object of `size` bytes, `range_size` each (the last shorter);
// none for an empty object.
inline std::vector<FetchRange> PlanFetch(uint64_t size, uint64_t range_size) {
  range_size = std::max<uint64_t>(range_size, 1);
  std::vector<FetchRange> ranges;
  for (uint64_t offset = 0; offset < size; offset += range_size) {
    ranges.push_back({offset, std::min(range_size, size - offset)});
  }
  return ranges;
}

// The time of S3's LastModified ("2026-12-04T22:02:49.000Z", ISO 8601 in UTC), as seconds and
// nanoseconds since the epoch; nullopt when it is not one.
inline std::optional<timespec> ParseS3Time(std::string_view text) {
  if (text.size() < 20 || text.size() > 40) return std::nullopt;
  auto digits = [&](size_t at, size_t n, int* out) {
    int v = 0;
    for (size_t i = at; i < at + n; ++i) {
      if (text[i] < '0' || text[i] > '9') return false;
      v = v * 10 + (text[i] - '0');
    }
    *out = v;
    return true;
  };
  int year, month, day, hour, minute, second;
  if (!digits(0, 4, &year) || text[4] != '-' || !digits(5, 2, &month) || text[7] != '-' ||
      !digits(8, 2, &day) || text[10] != 'T' || !digits(11, 2, &hour) || text[13] != ':' ||
      !digits(14, 2, &minute) || text[16] != ':' || !digits(17, 2, &second)) {
    return std::nullopt;
  }
  if (month < 1 || month > 12 || day < 1 || day > 31 || hour > 23 || minute > 59 || second > 60) {
    return std::nullopt;
  }
  size_t at = 19;
  long nanos = 0;
  if (text[at] == '.') {
    long scale = 100'000'000;
    for (++at; at < text.size() && text[at] >= '0' && text[at] <= '9'; ++at) {
      nanos += (text[at] - '0') * scale;
      scale /= 10;
    }
  }
  if (at + 1 != text.size() || text[at] != 'Z') return std::nullopt;
  // Days since the epoch of a proleptic Gregorian date (Howard Hinnant's days_from_civil).
  const int y = year - (month <= 2);
  const int era = (y >= 0 ? y : y - 399) / 400;
  const int yoe = y - era * 400;
  const int doy = (153 * (month + (month > 2 ? -3 : 9)) + 2) / 5 + day - 1;
  const int doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  const int64_t days = int64_t{era} * 146097 + doe - 719468;
  timespec t{};
  t.tv_sec = static_cast<time_t>(days * 86400 + hour * 3600 + minute * 60 + second);
  t.tv_nsec = nanos;
  return t;
}

// Decodes a key the store listed with encoding-type=url (%XX escapes, '+' for a space); nullopt
// for a broken escape.
inline std::optional<std::string> UrlDecodeKey(std::string_view text) {
  auto hex = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '+') {
      out += ' ';
    } else if (text[i] != '%') {
      out += text[i];
    } else {
      if (i + 2 >= text.size() || hex(text[i + 1]) < 0 || hex(text[i + 2]) < 0) {
        return std::nullopt;
      }
      out += static_cast<char>(hex(text[i + 1]) * 16 + hex(text[i + 2]));
      i += 2;
    }
  }
  return out;
}

}  // namespace ckptfs::policy
