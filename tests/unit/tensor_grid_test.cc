#include "core/views/tensor_view/tensor_grid.h"
#include "core/views/tensor_view/view_tree.h"

#include <gtest/gtest.h>

namespace ckptfs {
namespace {

using namespace std::string_literals;

using V = std::vector<uint64_t>;

// The element index each byte of a chunk holds, worked out the slow way: -1 for zeros.
std::vector<int64_t> Expected(const V& shape, const TensorGrid& g, const V& index) {
  std::vector<int64_t> out;
  size_t cells = 1;
  for (uint64_t c : g.chunks) cells *= c;
  for (size_t k = 0; k < cells; ++k) {
    size_t rest = k;
    int64_t flat = 0;
    bool inside = true;
    for (size_t a = shape.size(); a-- > 0;) {
      const uint64_t pos = index[a] * g.chunks[a] + rest % g.chunks[a];
      rest /= g.chunks[a];
      inside = inside && pos < shape[a];
      int64_t stride = 1;
      for (size_t b = a + 1; b < shape.size(); ++b) stride *= static_cast<int64_t>(shape[b]);
      flat += static_cast<int64_t>(pos) * stride;
    }
    out.push_back(inside ? flat : -1);
  }
  return out;
}

// What the pieces give, element by element, when each shard holds its global elements row-major.
std::vector<int64_t> Served(const V& shape, const std::vector<Box>& shards, const std::vector<Piece>& pieces) {
  std::vector<int64_t> out;
  for (const Piece& p : pieces) {
    for (uint64_t e = 0; e < p.length; ++e) {
      if (p.shard == Piece::kZeros) {
        out.push_back(-1);
        continue;
      }
      const Box& b = shards[static_cast<size_t>(p.shard)];
      uint64_t rest = p.offset + e;
      int64_t flat = 0;
      for (size_t a = shape.size(); a-- > 0;) {
        const uint64_t pos = b.offsets[a] + rest % b.sizes[a];
        rest /= b.sizes[a];
        int64_t stride = 1;
        for (size_t c = a + 1; c < shape.size(); ++c) stride *= static_cast<int64_t>(shape[c]);
        flat += static_cast<int64_t>(pos) * stride;
      }
      out.push_back(flat);
    }
  }
  return out;
}

void CheckEveryChunk(const V& shape, const std::vector<Box>& shards, const TensorGrid& g) {
  V index(shape.size(), 0);
  for (uint64_t k = 0; k < g.total_chunks(); ++k) {
    std::optional<std::vector<Piece>> pieces = ChunkPieces(shape, 1, g, index, shards);
    ASSERT_TRUE(pieces.has_value());
    EXPECT_EQ(Served(shape, shards, *pieces), Expected(shape, g, index)) << ChunkKey(index);
    for (size_t a = index.size(); a-- > 0;) {
      if (++index[a] < g.counts[a]) break;
      index[a] = 0;
    }
  }
}

TEST(TensorGrid, ShardsAlongTheFirstAxisAreTheChunksEachOneRange) {
  const V shape{10, 4};
  const std::vector<Box> shards{{{0, 0}, {4, 4}}, {{4, 0}, {4, 4}}, {{8, 0}, {2, 4}}};
  TensorGrid g = ChooseGrid(shape, shards);
  EXPECT_EQ(g.kind, TensorGrid::Kind::kShards);
  EXPECT_EQ(g.chunks, (V{4, 4}));
  EXPECT_EQ(g.counts, (V{3, 1}));
  auto pieces = ChunkPieces(shape, 2, g, {1, 0}, shards);
  ASSERT_TRUE(pieces && pieces->size() == 1);
  EXPECT_EQ((*pieces)[0].shard, 1);
  EXPECT_EQ((*pieces)[0].length, 32u);
  // The edge chunk is zarr's full chunk: its last two rows are zeros.
  pieces = ChunkPieces(shape, 1, g, {2, 0}, shards);
  ASSERT_TRUE(pieces && pieces->size() == 2);
  EXPECT_EQ((*pieces)[1].shard, Piece::kZeros);
  EXPECT_EQ((*pieces)[1].length, 8u);
  CheckEveryChunk(shape, shards, g);
}

TEST(TensorGrid, ShardsAlongALaterAxisArePaddedRowByRow) {
  const V shape{3, 5};
  const std::vector<Box> shards{{{0, 0}, {3, 3}}, {{0, 3}, {3, 2}}};
  TensorGrid g = ChooseGrid(shape, shards);
  EXPECT_EQ(g.chunks, (V{3, 3}));
  CheckEveryChunk(shape, shards, g);
}

TEST(TensorGrid, UnevenShardsGetTheFinestGridOfTheirBoundaries) {
  const V shape{10, 6};
  const std::vector<Box> shards{{{0, 0}, {3, 6}}, {{3, 0}, {7, 6}}};
  TensorGrid g = ChooseGrid(shape, shards);
  EXPECT_EQ(g.kind, TensorGrid::Kind::kFinest);
  EXPECT_EQ(g.chunks, (V{3, 6}));
  CheckEveryChunk(shape, shards, g);
  const std::vector<Box> mixed{{{0, 0}, {4, 6}}, {{4, 0}, {6, 2}}, {{4, 2}, {6, 4}}};
  g = ChooseGrid(shape, mixed);
  EXPECT_EQ(g.kind, TensorGrid::Kind::kFinest);
  CheckEveryChunk(shape, mixed, g);
}

TEST(TensorGrid, HolesReadAsZerosAndScalarsAreOneChunk) {
  const V shape{8};
  const std::vector<Box> shards{{{0}, {4}}};
  TensorGrid g = ChooseGrid(shape, shards);
  EXPECT_EQ(g.chunks, V{4});
  auto held = ChunkPieces(shape, 1, g, {0}, shards);
  ASSERT_TRUE(held && held->size() == 1);
  EXPECT_EQ((*held)[0].shard, 0);
  auto hole = ChunkPieces(shape, 1, g, {1}, shards);
  ASSERT_TRUE(hole && hole->size() == 1);
  EXPECT_EQ((*hole)[0].shard, Piece::kZeros);
  EXPECT_EQ((*hole)[0].length, 4u);
  TensorGrid scalar = ChooseGrid({}, {{{}, {}}});
  EXPECT_EQ(scalar.total_chunks(), 1u);
  EXPECT_EQ(ChunkKey({}), "0");
  auto pieces = ChunkPieces({}, 4, scalar, {}, {{{}, {}}});
  ASSERT_TRUE(pieces && pieces->size() == 1);
  EXPECT_EQ((*pieces)[0].length, 4u);
}

TEST(TensorGrid, TooManyFineCellsMakeOneChunkOfTheWholeTensor) {
  const V shape{1 << 20};
  const std::vector<Box> shards{{{0}, {1}}, {{1}, {(1 << 20) - 1}}};
  TensorGrid g = ChooseGrid(shape, shards);
  EXPECT_EQ(g.kind, TensorGrid::Kind::kWhole);
  EXPECT_EQ(g.chunks, shape);
  auto pieces = ChunkPieces(shape, 2, g, {0}, shards);
  ASSERT_TRUE(pieces && pieces->size() == 2);
}

TEST(ViewNames, NamesThatAPathCannotHoldAreEncodedReversibly) {
  for (const std::string& fqn : {"decoder.layers.0.weight"s, "a/b"s, "100%"s, ".hidden"s, "info.json"s, "x\0y"s}) {
    const std::string name = EncodeViewName(fqn);
    EXPECT_EQ(name.find('/'), std::string::npos) << name;
    EXPECT_NE(name.front(), '.') << name;
    EXPECT_NE(name, "info.json");
    EXPECT_EQ(DecodeViewName(name), fqn) << name;
  }
  EXPECT_EQ(EncodeViewName("a/b"), "a%2Fb");
  EXPECT_LE(EncodeViewName(std::string(1000, 'x')).size(), 255u);
  EXPECT_NE(EncodeViewName(std::string(1000, 'x')), EncodeViewName(std::string(1001, 'x')));
}

}  // namespace
}  // namespace ckptfs
