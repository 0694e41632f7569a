// Tests of ZarrGrid: which .zarray texts qualify for a fine grid, the virtual grid chosen, the
// mapping of virtual chunks to byte ranges of real chunks (checked against a brute-force model of
// C-order chunk layout), the .zarray rewriting, and a fuzz of the parser path.
#include "core/views/zarr_grid.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <map>
#include <numeric>
#include <random>
#include <string>

namespace ckptfs {
namespace {

constexpr uint64_t kMiB = 1 << 20;

// A .zarray as zarr writes it (json.dumps(indent=4, sort_keys=True)).
std::string Zarray(const std::vector<uint64_t>& shape, const std::vector<uint64_t>& chunks,
                   const std::string& dtype = "<f4", const std::string& fill = "null",
                   const std::string& compressor = "null", const std::string& order = "C",
                   const std::string& extra = "") {
  auto list = [](const std::vector<uint64_t>& v) {
    std::string out = "[";
    for (size_t i = 0; i < v.size(); ++i) out += (i ? ",\n        " : "\n        ") + std::to_string(v[i]);
    return out + "\n    ]";
  };
  return "{\n    \"chunks\": " + list(chunks) + ",\n    \"compressor\": " + compressor +
         ",\n    \"dtype\": \"" + dtype + "\",\n    \"fill_value\": " + fill +
         ",\n    \"filters\": null,\n    \"order\": \"" + order + "\",\n    \"shape\": " +
         list(shape) + ",\n" + extra + "    \"zarr_format\": 2\n}";
}

TEST(ZarrGridTest, DistributedOptimizerShardIsSplitIntoMiBChunks) {
  // Two ranks' shards of 3,000,000 float32 (not a multiple of 1 MiB), one real chunk each.
  auto g = ZarrGrid::Parse(Zarray({6000000}, {3000000}), kMiB);
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  // Two real chunks along the only axis, and 3,000,000 is not a multiple of 262,144: the split
  // must divide the real chunk, so a smaller divisor is chosen.
  EXPECT_EQ(g->virtual_chunks(), std::vector<uint64_t>({250000}));
  EXPECT_LE(g->virtual_chunk_bytes(), kMiB);
  EXPECT_GE(g->virtual_chunk_bytes() * 16, kMiB);

  auto single = ZarrGrid::Parse(Zarray({3000000}, {3000000}), kMiB);
  ASSERT_TRUE(single.ok());
  EXPECT_EQ(single->virtual_chunks(), std::vector<uint64_t>({262144}));
  // The last virtual chunk reaches past the real chunk: only its first part is stored.
  auto last = single->Virtual("11");
  ASSERT_TRUE(last);
  EXPECT_EQ(last->real_key, "0");
  EXPECT_EQ(last->offset, 11 * kMiB);
  EXPECT_EQ(last->stored, 3000000 * 4 - 11 * kMiB);
  EXPECT_FALSE(single->Virtual("12"));
  EXPECT_TRUE(single->IsRealKey("0"));
  EXPECT_FALSE(single->IsRealKey("1"));
}

TEST(ZarrGridTest, ArraysThatDoNotQualifyAreRefused) {
  const auto shape = std::vector<uint64_t>{4096, 4096};
  const auto chunks = std::vector<uint64_t>{1024, 4096};
  EXPECT_TRUE(ZarrGrid::Parse(Zarray(shape, chunks), kMiB).ok());
  EXPECT_FALSE(ZarrGrid::Parse(Zarray(shape, chunks), 0).ok()) << "zarr_chunk=0 turns it off";
  EXPECT_FALSE(ZarrGrid::Parse(Zarray(shape, chunks, "<f4", "null", "{\"id\": \"blosc\"}"), kMiB).ok());
  EXPECT_FALSE(ZarrGrid::Parse(Zarray(shape, chunks, "<f4", "null", "null", "F"), kMiB).ok());
  EXPECT_FALSE(ZarrGrid::Parse(Zarray(shape, chunks, "|O"), kMiB).ok());
  EXPECT_FALSE(ZarrGrid::Parse(Zarray(shape, chunks, "<U8"), kMiB).ok());
  EXPECT_FALSE(ZarrGrid::Parse(Zarray(shape, chunks, "<c8"), kMiB).ok());
  EXPECT_FALSE(ZarrGrid::Parse(Zarray(shape, {128, 128}), kMiB).ok()) << "small chunks";
  EXPECT_FALSE(ZarrGrid::Parse(Zarray(shape, chunks, "<f2", "1.5"), kMiB).ok());
  EXPECT_FALSE(ZarrGrid::Parse(Zarray(shape, chunks, "<i2", "70000"), kMiB).ok());
  EXPECT_FALSE(ZarrGrid::Parse(Zarray(shape, chunks, "<f4", "null", "null", "C",
                                      "    \"dimension_separator\": \"/\",\n"), kMiB).ok())
      << "nested chunk directories of a 2-D array";
  EXPECT_TRUE(ZarrGrid::Parse(Zarray({1 << 22}, {1 << 22}, "<f4", "null", "null", "C",
                                     "    \"dimension_separator\": \"/\",\n"), kMiB).ok())
      << "a 1-D array has no nested directories";
  // No divisor of a prime chunk length keeps virtual chunks near the threshold.
  EXPECT_FALSE(ZarrGrid::Parse(Zarray({2 * 1000003}, {1000003}), kMiB).ok());
  for (const char* bad : {"", "{", "[]", "null", "{\"chunks\": [1]}", "{\"zarr_format\": 2}"}) {
    EXPECT_FALSE(ZarrGrid::Parse(bad, kMiB).ok()) << bad;
  }
  // The largest .zarray ckptfs reads (1 MiB), nested as deep as it goes.
  std::string deep = std::string(512 * 1024, '[') + std::string(512 * 1024, ']');
  EXPECT_EQ(ZarrGrid::Parse(deep, kMiB).status().err(), EBADMSG);
  EXPECT_EQ(ZarrGrid::Parse("{\"a\": " + deep + "}", kMiB).status().err(), EBADMSG);
}

TEST(ZarrGridTest, FillValuesBecomeElementBytes) {
  const auto shape = std::vector<uint64_t>{1 << 20};
  auto nan = ZarrGrid::Parse(Zarray(shape, shape, "<f4", "\"NaN\""), kMiB);
  ASSERT_TRUE(nan.ok());
  float f;
  std::memcpy(&f, nan->fill().data(), 4);
  EXPECT_TRUE(std::isnan(f));
  EXPECT_FALSE(nan->zero_fill());
  auto big = ZarrGrid::Parse(Zarray(shape, shape, ">i4", "258"), kMiB);
  ASSERT_TRUE(big.ok());
  EXPECT_EQ(big->fill(), std::string("\0\0\1\2", 4));
  auto zero = ZarrGrid::Parse(Zarray(shape, shape, "<f8", "0.0"), kMiB);
  ASSERT_TRUE(zero.ok());
  EXPECT_TRUE(zero->zero_fill());
  EXPECT_EQ(zero->fill().size(), 8u);
}

// Brute force: the byte offset of element `index` (global coordinates) inside its real chunk,
// and the real chunk's key.
std::pair<std::string, uint64_t> RealPlace(const std::vector<uint64_t>& index,
                                           const std::vector<uint64_t>& chunks, size_t itemsize) {
  std::string key;
  uint64_t linear = 0;
  for (size_t d = 0; d < index.size(); ++d) {
    key += (d ? "." : "") + std::to_string(index[d] / chunks[d]);
    linear = linear * chunks[d] + index[d] % chunks[d];
  }
  return {key, linear * itemsize};
}

// Every virtual chunk maps to a contiguous range of one real chunk that holds exactly its
// elements in C order, the ranges of one real chunk never overlap, and VirtualKey inverts it.
void CheckMapping(const std::vector<uint64_t>& shape, const std::vector<uint64_t>& chunks,
                  uint64_t threshold) {
  SCOPED_TRACE(::testing::PrintToString(shape) + " / " + ::testing::PrintToString(chunks));
  auto g = ZarrGrid::Parse(Zarray(shape, chunks), threshold);
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  const auto& v = g->virtual_chunks();
  const size_t n = shape.size();
  EXPECT_LE(g->virtual_chunk_bytes(), threshold);
  std::vector<uint64_t> grid(n);
  for (size_t d = 0; d < n; ++d) grid[d] = (shape[d] + v[d] - 1) / v[d];
  std::map<std::string, std::vector<bool>> used;
  std::vector<uint64_t> vi(n, 0);
  while (true) {
    std::string key;
    for (size_t d = 0; d < n; ++d) key += (d ? "." : "") + std::to_string(vi[d]);
    auto vc = g->Virtual(key);
    ASSERT_TRUE(vc) << key;
    auto back = g->VirtualKey(vc->real_key, vc->sub);
    ASSERT_TRUE(back);
    EXPECT_EQ(*back, key);
    auto& subs = used[vc->real_key];
    subs.resize(g->subs_per_chunk());
    EXPECT_FALSE(subs[vc->sub]) << key << " shares a range";
    subs[vc->sub] = true;
    // Element j (C order inside the virtual chunk) sits at vc->offset + 4 j when stored.
    std::vector<uint64_t> local(n, 0);
    for (uint64_t j = 0;; ++j) {
      std::vector<uint64_t> global(n);
      for (size_t d = 0; d < n; ++d) global[d] = vi[d] * v[d] + local[d];
      auto [real_key, offset] = RealPlace(global, chunks, 4);
      if (4 * j < vc->stored) {
        ASSERT_EQ(real_key, vc->real_key) << key << " element " << j;
        ASSERT_EQ(offset, vc->offset + 4 * j) << key << " element " << j;
      }
      size_t d = n;
      while (d > 0 && ++local[d - 1] == v[d - 1]) local[--d] = 0;
      if (d == 0) {
        EXPECT_EQ(4 * (j + 1), vc->length);
        break;
      }
    }
    size_t d = n;
    while (d > 0 && ++vi[d - 1] == grid[d - 1]) vi[--d] = 0;
    if (d == 0) break;
  }
  std::string past = std::to_string(grid[0]);
  for (size_t d = 1; d < n; ++d) past += ".0";
  EXPECT_FALSE(g->Virtual(past)) << "one past the grid";
}

TEST(ZarrGridTest, VirtualChunksAreExactRangesOfRealChunks) {
  const uint64_t t = 4096;  // Small threshold: small arrays exercise every case.
  CheckMapping({5000}, {5000}, t);             // One real chunk, split does not divide it.
  CheckMapping({10000}, {4000}, t);            // Several real chunks: split divides 4000.
  CheckMapping({80, 30}, {40, 30}, t);         // Split axis 0 (rows of 120 bytes).
  CheckMapping({6, 2000}, {4, 2000}, t);       // A row is larger: split axis 1.
  CheckMapping({3, 5, 700}, {2, 5, 700}, t);   // Split the middle axis, edge chunks on axis 0.
  CheckMapping({2, 3, 4096}, {2, 3, 4096}, t); // Split the last axis.
}

TEST(ZarrGridTest, KeysOutsideTheGridOrMalformedAreNotChunks) {
  auto g = ZarrGrid::Parse(Zarray({80, 30}, {40, 30}), 4096);
  ASSERT_TRUE(g.ok());
  for (const char* key : {"", "0", "0.0.0", "00.0", "-1.0", "1.x", "1.0 ", "99999999999999999999.0",
                          ".zarray", "0.0.partial"}) {
    EXPECT_FALSE(g->Virtual(key)) << key;
    EXPECT_FALSE(g->IsRealKey(key)) << key;
  }
  EXPECT_TRUE(g->Virtual("0.0"));
  EXPECT_TRUE(g->IsRealKey("1.0"));
  EXPECT_FALSE(g->IsRealKey("2.0"));
  EXPECT_FALSE(g->Virtual("4.0")) << "80 rows in chunks of 20";
  EXPECT_FALSE(g->VirtualKey("5.0", 0));
}

TEST(ZarrGridTest, ZarrayTextIsRewrittenOnlyInItsChunks) {
  std::string real = Zarray({6000000}, {3000000}, "<f4", "null", "null", "C",
                            "    \"dimension_separator\": \".\",\n");
  auto g = ZarrGrid::Parse(real, kMiB);
  ASSERT_TRUE(g.ok());
  std::string shown = g->VirtualText(real);
  EXPECT_EQ(shown, Zarray({6000000}, {g->virtual_chunks()[0]}, "<f4", "null", "null", "C",
                          "    \"dimension_separator\": \".\",\n"));
  auto back = g->RealText(shown);
  ASSERT_TRUE(back);
  EXPECT_EQ(*back, real);
  EXPECT_FALSE(g->RealText(real)) << "real chunks are not virtual ones";
  // A string value that looks like the key is left alone; a nested "chunks" key too.
  EXPECT_FALSE(ReplaceChunks(R"({"a": "chunks", "b": {"chunks": [1]}})", {1}, {2}));
  EXPECT_EQ(*ReplaceChunks(R"({"a": "chunks", "chunks": [ 7 , 8 ]})", {7, 8}, {1, 2}),
            R"({"a": "chunks", "chunks": [ 1 , 2 ]})");
  // A duplicate key would make the textual and the parsed meaning differ.
  EXPECT_FALSE(ReplaceChunks(R"({"chunks": [7], "chunks": [8]})", {7}, {1}));
}

// Random mutations of valid .zarray texts: the parser never crashes, and whatever it accepts
// maps every virtual key it knows inside one real chunk.
TEST(ZarrGridTest, FuzzedZarrayTextsNeverBreakTheParser) {
  std::mt19937_64 rng(20261130);
  const std::vector<std::string> seeds = {
      Zarray({6000000}, {3000000}), Zarray({80, 30}, {40, 30}), Zarray({3, 5, 700}, {2, 5, 700}),
      Zarray({1 << 21}, {1 << 21}, ">f8", "\"-Infinity\"")};
  const std::string alphabet = "{}[],:\"0123456789-.eE \n\\abcnrtu/<>|fiC";
  size_t accepted = 0;
  for (int iter = 0; iter < 20000; ++iter) {
    std::string text = seeds[rng() % seeds.size()];
    int edits = 1 + static_cast<int>(rng() % 4);
    for (int e = 0; e < edits && !text.empty(); ++e) {
      size_t pos = rng() % text.size();
      switch (rng() % 4) {
        case 0: text[pos] = alphabet[rng() % alphabet.size()]; break;
        case 1: text.erase(pos, 1 + rng() % 8); break;
        case 2: text.insert(pos, std::string(1 + rng() % 3, alphabet[rng() % alphabet.size()])); break;
        default: text.insert(pos, std::to_string(rng())); break;
      }
    }
    auto g = ZarrGrid::Parse(text, 4096);
    if (!g.ok()) continue;
    ++accepted;
    ASSERT_LE(g->virtual_chunk_bytes(), 4096u) << text;
    std::string shown = g->VirtualText(text);
    auto again = g->RealText(shown);
    ASSERT_TRUE(again) << text;
    ASSERT_EQ(*again, text);
    for (uint64_t k = 0; k < 50; ++k) {
      auto vc = g->Virtual(std::to_string(k) + std::string(g->chunks().size() > 1 ? ".0" : "") +
                           std::string(g->chunks().size() > 2 ? ".0" : ""));
      if (!vc) break;
      ASSERT_LE(vc->offset + vc->stored, g->chunk_bytes()) << text;
      ASSERT_LT(vc->sub, g->subs_per_chunk()) << text;
    }
  }
  EXPECT_GT(accepted, 100u) << "the fuzzer should also reach accepted texts";
}

}  // namespace
}  // namespace ckptfs
