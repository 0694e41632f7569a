#include "core/views/zarr_grid.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>

namespace ckptfs {
namespace {

using nlohmann::json;

constexpr size_t kMaxDims = 32;
constexpr uint64_t kMaxChunkBytes = 1ull << 46;
constexpr size_t kMaxKeyDigits = 19;

constexpr int kMaxNesting = 32;  // A .zarray nests 3 levels; deep texts are hostile.

uint64_t CeilDiv(uint64_t a, uint64_t b) { return a / b + (a % b != 0); }

// The deepest nesting of arrays and objects in a JSON text (strings skipped).
int NestingDepth(std::string_view text) {
  int depth = 0, deepest = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    if (in_string) {
      if (c == '\\') ++i;
      if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      deepest = std::max(deepest, ++depth);
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return deepest;
}

bool IsSpace(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

template <typename T>
std::string Bytes(T value) {
  std::string out(sizeof(T), '\0');
  std::memcpy(out.data(), &value, sizeof(T));
  return out;
}

// The bytes of one element of kind `kind` and `size` bytes holding `fill` (native byte order),
// or nothing when the value is not one ckptfs can reproduce exactly.
std::optional<std::string> FillBytes(const json& fill, char kind, size_t size) {
  if (fill.is_null()) return std::string(size, '\0');
  if (kind == 'f') {
    double v;
    if (fill.is_number()) {
      v = fill.get<double>();
    } else if (fill == "NaN") {
      v = std::numeric_limits<double>::quiet_NaN();
    } else if (fill == "Infinity") {
      v = std::numeric_limits<double>::infinity();
    } else if (fill == "-Infinity") {
      v = -std::numeric_limits<double>::infinity();
    } else {
      return std::nullopt;
    }
    if (size == 8) return Bytes(v);
    if (size == 4) return Bytes(static_cast<float>(v));
    if (size == 2 && v == 0 && !std::signbit(v)) return std::string(2, '\0');
    return std::nullopt;
  }
  if (kind == 'b') {
    if (fill.is_boolean()) return std::string(1, fill.get<bool>() ? '\1' : '\0');
    return std::nullopt;
  }
  if (!fill.is_number_integer()) return std::nullopt;
  if (kind == 'u' && fill.is_number_unsigned()) {
    uint64_t v = fill.get<uint64_t>();
    if (size < 8 && v >> (8 * size) != 0) return std::nullopt;
    return Bytes(v).substr(0, size);
  }
  int64_t v = fill.get<int64_t>();
  if (kind == 'u' && v < 0) return std::nullopt;
  if (size < 8) {
    int64_t lo = -(int64_t{1} << (8 * size - 1)), hi = (int64_t{1} << (8 * size - 1)) - 1;
    if (kind == 'u') lo = 0, hi = (int64_t{1} << (8 * size)) - 1;
    if (v < lo || v > hi) return std::nullopt;
  }
  return Bytes(v).substr(0, size);  // Little-endian host: the low bytes come first.
}

std::optional<std::vector<uint64_t>> Dims(const json& j) {
  if (!j.is_array() || j.empty() || j.size() > kMaxDims) return std::nullopt;
  std::vector<uint64_t> out;
  for (const json& d : j) {
    if (!d.is_number_unsigned()) return std::nullopt;
    out.push_back(d.get<uint64_t>());
  }
  return out;
}

}  // namespace

static_assert(std::endian::native == std::endian::little, "fill values assume a little-endian host");

Result<ZarrGrid> ZarrGrid::Parse(std::string_view text, uint64_t threshold, const ZarrGrid* keep) {
  auto no = [](const std::string& why) { return Status::Error(EINVAL, why); };
  if (threshold == 0) return no("the fine grid is off");
  if (NestingDepth(text) > kMaxNesting) return Status::Error(EBADMSG, "nested too deep");
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return Status::Error(EBADMSG, "not a JSON object");
  auto field = [&](const char* name) -> const json& {
    static const json kNull;
    auto it = j.find(name);
    return it == j.end() ? kNull : *it;
  };
  if (field("zarr_format") != 2) return no("not zarr format 2");
  if (!field("compressor").is_null()) return no("compressed");
  if (!field("filters").is_null()) return no("has filters");
  if (field("order") != "C") return no("not C order");
  ZarrGrid g;
  const json& sep = field("dimension_separator");
  if (sep.is_null() || sep == ".") {
    g.separator_ = '.';
  } else if (sep == "/") {
    g.separator_ = '/';
  } else {
    return no("unknown dimension_separator");
  }
  auto shape = Dims(field("shape"));
  auto chunks = Dims(field("chunks"));
  if (!shape || !chunks || shape->size() != chunks->size()) return no("bad shape or chunks");
  if (std::find(chunks->begin(), chunks->end(), 0) != chunks->end()) return no("empty chunks");
  if (g.separator_ == '/' && shape->size() > 1) return no("nested chunk directories");
  const json& dtype = field("dtype");
  if (!dtype.is_string()) return no("structured dtype");
  g.dtype_ = dtype.get<std::string>();
  const std::string& dt = g.dtype_;
  if (dt.size() < 3 || std::string_view("<>|").find(dt[0]) == std::string_view::npos ||
      std::string_view("biuf").find(dt[1]) == std::string_view::npos ||
      dt.find_first_not_of("0123456789", 2) != std::string::npos || dt.size() > 4) {
    return no("dtype " + dt + " is not a plain number type");
  }
  g.itemsize_ = std::stoul(dt.substr(2));
  if (g.itemsize_ != 1 && g.itemsize_ != 2 && g.itemsize_ != 4 && g.itemsize_ != 8) {
    return no("dtype " + dt + " has an unusual size");
  }
  auto fill = FillBytes(field("fill_value"), dt[1], g.itemsize_);
  if (!fill) return no("fill_value not reproducible");
  if (dt[0] == '>') std::reverse(fill->begin(), fill->end());
  g.fill_ = *fill;

  const size_t n = chunks->size();
  g.shape_ = *shape;
  g.chunks_ = *chunks;
  g.strides_.assign(n, g.itemsize_);
  for (size_t d = n - 1; d > 0; --d) {
    if (g.strides_[d] > kMaxChunkBytes / g.chunks_[d]) return no("chunks too large");
    g.strides_[d - 1] = g.strides_[d] * g.chunks_[d];
  }
  if (g.strides_[0] > kMaxChunkBytes / g.chunks_[0]) return no("chunks too large");
  g.chunk_bytes_ = g.strides_[0] * g.chunks_[0];
  if (g.chunk_bytes_ <= threshold) return no("chunks are small already");

  size_t a = 0;
  while (g.strides_[a] > threshold) ++a;  // The last axis has stride itemsize <= threshold.
  uint64_t v = std::min<uint64_t>(g.chunks_[a], threshold / g.strides_[a]);
  const bool one_chunk_along_split = CeilDiv(g.shape_[a], g.chunks_[a]) <= 1;
  if (keep && keep->chunks_ == g.chunks_ && keep->itemsize_ == g.itemsize_ &&
      (one_chunk_along_split || g.chunks_[a] % keep->vchunks_[a] == 0)) {
    v = keep->vchunks_[a];
  } else if (!one_chunk_along_split && g.chunks_[a] % v != 0) {
    while (g.chunks_[a] % v != 0) --v;
    if (v * g.strides_[a] * 16 < threshold) return no("no even split of the chunks");
  }
  g.split_axis_ = a;
  g.vchunks_ = g.chunks_;
  for (size_t d = 0; d < a; ++d) g.vchunks_[d] = 1;
  g.vchunks_[a] = v;
  g.vchunk_bytes_ = v * g.strides_[a];
  g.subs_along_split_ = CeilDiv(g.chunks_[a], v);
  g.subs_per_chunk_ = g.subs_along_split_;
  for (size_t d = 0; d < a; ++d) g.subs_per_chunk_ *= g.chunks_[d];
  if (!ReplaceChunks(text, g.chunks_, g.vchunks_)) return no("chunks not rewritable");
  return g;
}

std::string ZarrGrid::VirtualText(std::string_view real_text) const {
  auto out = ReplaceChunks(real_text, chunks_, vchunks_);
  return out ? *out : std::string(real_text);
}

std::optional<std::string> ZarrGrid::RealText(std::string_view client_text) const {
  return ReplaceChunks(client_text, vchunks_, chunks_);
}

std::optional<std::vector<uint64_t>> ZarrGrid::ParseKey(std::string_view key) const {
  std::vector<uint64_t> index;
  size_t pos = 0;
  while (true) {
    size_t end = key.find(separator_, pos);
    std::string_view part = key.substr(pos, end == std::string_view::npos ? key.npos : end - pos);
    if (part.empty() || part.size() > kMaxKeyDigits ||
        part.find_first_not_of("0123456789") != std::string_view::npos ||
        (part.size() > 1 && part[0] == '0')) {
      return std::nullopt;
    }
    index.push_back(std::stoull(std::string(part)));
    if (end == std::string_view::npos) break;
    pos = end + 1;
  }
  if (index.size() != chunks_.size()) return std::nullopt;
  return index;
}

std::string ZarrGrid::MakeKey(const std::vector<uint64_t>& index) const {
  std::string key;
  for (size_t d = 0; d < index.size(); ++d) {
    if (d > 0) key += separator_;
    key += std::to_string(index[d]);
  }
  return key;
}

std::optional<VirtualChunk> ZarrGrid::Virtual(std::string_view key) const {
  auto index = ParseKey(key);
  if (!index) return std::nullopt;
  const size_t a = split_axis_;
  std::vector<uint64_t> real(index->size());
  VirtualChunk vc;
  uint64_t local_split = 0;
  for (size_t d = 0; d < index->size(); ++d) {
    uint64_t i = (*index)[d];
    if (i >= CeilDiv(shape_[d], vchunks_[d])) return std::nullopt;
    if (d < a) {
      real[d] = i / chunks_[d];
      vc.offset += (i % chunks_[d]) * strides_[d];
      vc.sub = vc.sub * chunks_[d] + i % chunks_[d];
    } else if (d == a) {
      uint64_t first = i * vchunks_[a];
      real[d] = first / chunks_[d];
      local_split = first % chunks_[d];
      vc.offset += local_split * strides_[d];
      vc.sub = vc.sub * subs_along_split_ + local_split / vchunks_[a];
    } else {
      real[d] = i;
    }
  }
  vc.real_key = MakeKey(real);
  vc.length = vchunk_bytes_;
  vc.stored = std::min(vc.length, (chunks_[a] - local_split) * strides_[a]);
  return vc;
}

bool ZarrGrid::IsRealKey(std::string_view key) const {
  auto index = ParseKey(key);
  if (!index) return false;
  for (size_t d = 0; d < index->size(); ++d) {
    if ((*index)[d] >= CeilDiv(shape_[d], chunks_[d])) return false;
  }
  return true;
}

std::optional<std::string> ZarrGrid::VirtualKey(std::string_view real_key, size_t sub) const {
  auto real = ParseKey(real_key);
  if (!real || sub >= subs_per_chunk_) return std::nullopt;
  const size_t a = split_axis_;
  std::vector<uint64_t> index = *real;
  uint64_t first = (*real)[a] * chunks_[a] + (sub % subs_along_split_) * vchunks_[a];
  index[a] = first / vchunks_[a];
  size_t rest = sub / subs_along_split_;
  for (size_t d = a; d-- > 0;) {
    index[d] = (*real)[d] * chunks_[d] + rest % chunks_[d];
    rest /= chunks_[d];
  }
  for (size_t d = 0; d < index.size(); ++d) {
    if (index[d] >= CeilDiv(shape_[d], vchunks_[d])) return std::nullopt;
  }
  return MakeKey(index);
}

bool ZarrGrid::SameLayout(const ZarrGrid& other) const {
  return chunks_ == other.chunks_ && vchunks_ == other.vchunks_ && dtype_ == other.dtype_ &&
         separator_ == other.separator_;
}

std::optional<std::string> ReplaceChunks(std::string_view text, const std::vector<uint64_t>& from,
                                         const std::vector<uint64_t>& to) {
  size_t i = 0;
  int depth = 0;
  while (i < text.size()) {
    char c = text[i];
    if (c == '{' || c == '[') ++depth;
    if (c == '}' || c == ']') --depth;
    if (c != '"') {
      ++i;
      continue;
    }
    size_t start = ++i;
    while (i < text.size() && text[i] != '"') i += text[i] == '\\' ? 2 : 1;
    if (i >= text.size()) return std::nullopt;
    bool is_key = depth == 1 && text.substr(start, i - start) == "chunks";
    ++i;
    if (!is_key) continue;
    size_t p = i;
    while (p < text.size() && IsSpace(text[p])) ++p;
    if (p >= text.size() || text[p] != ':') continue;
    ++p;
    while (p < text.size() && IsSpace(text[p])) ++p;
    if (p >= text.size() || text[p] != '[') return std::nullopt;
    ++p;
    std::string out(text.substr(0, p));
    for (size_t d = 0; d < from.size(); ++d) {
      while (p < text.size() && IsSpace(text[p])) out += text[p++];
      size_t num = p;
      while (p < text.size() && text[p] >= '0' && text[p] <= '9') ++p;
      if (p == num || p - num > kMaxKeyDigits ||
          std::stoull(std::string(text.substr(num, p - num))) != from[d]) {
        return std::nullopt;
      }
      out += std::to_string(to[d]);
      while (p < text.size() && IsSpace(text[p])) out += text[p++];
      char want = d + 1 < from.size() ? ',' : ']';
      if (p >= text.size() || text[p] != want) return std::nullopt;
      out += text[p++];
    }
    out += text.substr(p);
    // The result must mean exactly the input with chunks replaced.
    json before = json::parse(text, nullptr, false), after = json::parse(out, nullptr, false);
    if (before.is_discarded() || after.is_discarded() || !before.is_object()) return std::nullopt;
    before["chunks"] = to;
    if (before != after) return std::nullopt;
    return out;
  }
  return std::nullopt;
}

}  // namespace ckptfs
