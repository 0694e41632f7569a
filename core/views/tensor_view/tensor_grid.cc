#include "core/views/tensor_view/tensor_grid.h"

#include <algorithm>
#include <numeric>
#include <set>

namespace ckptfs {
namespace {

uint64_t CeilDiv(uint64_t a, uint64_t b) { return (a + b - 1) / b; }

void Append(std::vector<Piece>& out, Piece p) {
  if (p.length == 0) return;
  if (!out.empty()) {
    Piece& last = out.back();
    if (last.shard == p.shard && (p.shard == Piece::kZeros || last.offset + last.length == p.offset)) {
      last.length += p.length;
      return;
    }
  }
  out.push_back(p);
}

// The byte offset in shard `s` (row-major) of global element `g` (inside the shard).
uint64_t OffsetIn(const Box& s, const std::vector<uint64_t>& g, size_t itemsize) {
  uint64_t off = 0;
  for (size_t a = 0; a < g.size(); ++a) off = off * s.sizes[a] + (g[a] - s.offsets[a]);
  return off * itemsize;
}

}  // namespace

uint64_t TensorGrid::total_chunks() const {
  uint64_t n = 1;
  for (uint64_t c : counts) n *= c;
  return n;
}

const char* TensorGrid::name() const {
  switch (kind) {
    case Kind::kShards: return "shards";
    case Kind::kFinest: return "finest";
    default: return "whole";
  }
}

TensorGrid ChooseGrid(const std::vector<uint64_t>& shape, const std::vector<Box>& shards) {
  TensorGrid grid;
  for (size_t a = 0; a < shape.size(); ++a) {
    std::set<uint64_t> internal;
    for (const Box& s : shards) {
      for (uint64_t b : {s.offsets[a], s.offsets[a] + s.sizes[a]}) {
        if (b > 0 && b < shape[a]) internal.insert(b);
      }
    }
    uint64_t chunk = std::max<uint64_t>(shape[a], 1);
    if (!internal.empty()) {
      const uint64_t first = *internal.begin();
      bool regular = shape[a] - *internal.rbegin() <= first;
      uint64_t i = 1, g = 0;
      for (uint64_t b : internal) {
        regular = regular && b == i++ * first;
        g = std::gcd(g, b);
      }
      chunk = regular ? first : g;
      if (!regular) grid.kind = TensorGrid::Kind::kFinest;
    }
    grid.chunks.push_back(chunk);
    grid.counts.push_back(std::max<uint64_t>(CeilDiv(shape[a], chunk), 1));
  }
  // Each shard one chunk, or the shards' boundaries only give the grid.
  for (const Box& s : shards) {
    for (size_t a = 0; a < shape.size(); ++a) {
      const uint64_t c = grid.chunks[a];
      if (s.offsets[a] % c != 0 || !(s.sizes[a] == c || s.offsets[a] + s.sizes[a] == shape[a])) {
        grid.kind = TensorGrid::Kind::kFinest;
      }
    }
  }
  if (grid.total_chunks() > kMaxChunks) {
    grid.kind = TensorGrid::Kind::kWhole;
    for (size_t a = 0; a < shape.size(); ++a) {
      grid.chunks[a] = std::max<uint64_t>(shape[a], 1);
      grid.counts[a] = 1;
    }
  }
  return grid;
}

std::optional<std::vector<Piece>> ChunkPieces(const std::vector<uint64_t>& shape, size_t itemsize,
                                              const TensorGrid& grid, const std::vector<uint64_t>& index,
                                              const std::vector<Box>& shards) {
  const size_t n = shape.size();
  std::vector<Piece> out;
  if (n == 0) {
    if (shards.empty()) return std::vector<Piece>{{Piece::kZeros, 0, itemsize}};
    return std::vector<Piece>{{0, 0, itemsize}};
  }
  std::vector<uint64_t> origin(n);
  for (size_t a = 0; a < n; ++a) origin[a] = index[a] * grid.chunks[a];
  // A shard that is this chunk exactly: one range.
  for (size_t s = 0; s < shards.size(); ++s) {
    bool same = true;
    for (size_t a = 0; a < n && same; ++a) {
      same = shards[s].offsets[a] == origin[a] && shards[s].sizes[a] == grid.chunks[a];
    }
    if (same) {
      uint64_t bytes = itemsize;
      for (uint64_t c : grid.chunks) bytes *= c;
      return std::vector<Piece>{{static_cast<int64_t>(s), 0, bytes}};
    }
  }
  const size_t last = n - 1;
  const uint64_t row_items = grid.chunks[last];
  uint64_t rows = 1;
  for (size_t a = 0; a < last; ++a) rows *= grid.chunks[a];
  if (rows > kMaxRowVisits / std::max<size_t>(shards.size(), 1)) return std::nullopt;
  std::vector<uint64_t> r(last, 0);  // The row's position inside the chunk.
  std::vector<uint64_t> g(n);
  struct Run {
    uint64_t from, to;
    size_t shard;
  };
  std::vector<Run> runs;
  for (uint64_t row = 0; row < rows; ++row) {
    bool inside = true;
    for (size_t a = 0; a < last; ++a) {
      g[a] = origin[a] + r[a];
      inside = inside && g[a] < shape[a];
    }
    const uint64_t from = origin[last];
    const uint64_t to = inside ? std::min(from + row_items, shape[last]) : from;
    runs.clear();
    for (size_t s = 0; s < shards.size() && to > from; ++s) {
      const Box& b = shards[s];
      bool holds = true;
      for (size_t a = 0; a < last && holds; ++a) holds = g[a] >= b.offsets[a] && g[a] < b.offsets[a] + b.sizes[a];
      const uint64_t lo = std::max(from, b.offsets[last]);
      const uint64_t hi = std::min(to, b.offsets[last] + b.sizes[last]);
      if (holds && lo < hi) runs.push_back({lo, hi, s});
    }
    std::sort(runs.begin(), runs.end(), [](const Run& x, const Run& y) { return x.from < y.from; });
    uint64_t at = from;
    for (const Run& run : runs) {
      if (run.to <= at) continue;
      const uint64_t lo = std::max(at, run.from);
      Append(out, {Piece::kZeros, 0, (lo - at) * itemsize});
      g[last] = lo;
      Append(out, {static_cast<int64_t>(run.shard), OffsetIn(shards[run.shard], g, itemsize),
                   (run.to - lo) * itemsize});
      at = run.to;
    }
    Append(out, {Piece::kZeros, 0, (from + row_items - at) * itemsize});
    for (size_t a = last; a-- > 0;) {
      if (++r[a] < grid.chunks[a]) break;
      r[a] = 0;
    }
  }
  return out;
}

std::string ChunkKey(const std::vector<uint64_t>& index) {
  if (index.empty()) return "0";
  std::string key;
  for (size_t a = 0; a < index.size(); ++a) {
    if (a > 0) key += '.';
    key += std::to_string(index[a]);
  }
  return key;
}

}  // namespace ckptfs
