// A seeded mutational fuzz test of the readers of untrusted checkpoint files: the pickle reader,
// the DCP metadata reader, the zip reader and the torch.save reader, over the real files of
// tensor_view_corpus/ mutated (bytes flipped, set, cut, inserted, repeated). Each must return a
// value or an error; the sanitizer builds check that nothing reads out of bounds or leaks.
// CKPTFS_FUZZ_SECONDS (default 3 per seed file) bounds the time.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <random>

#include "core/tensor_view/dcp_metadata.h"
#include "core/tensor_view/pickle_reader.h"
#include "core/tensor_view/torch_save.h"
#include "core/tensor_view/zip_reader.h"
#include "tensor_view_corpus.h"

namespace ckptfs {
namespace {


std::string Mutate(std::string s, std::mt19937_64& rng) {
  const int edits = 1 + static_cast<int>(rng() % 4);
  for (int i = 0; i < edits && !s.empty(); ++i) {
    const size_t at = rng() % s.size();
    switch (rng() % 6) {
      case 0: s[at] = static_cast<char>(s[at] ^ (1 << (rng() % 8))); break;
      case 1: s[at] = static_cast<char>(rng()); break;
      case 2: s.resize(at); break;
      case 3: s.insert(at, 1, static_cast<char>(rng())); break;
      case 4: s.insert(at, s.substr(at, 1 + rng() % 16)); break;
      default: {  // A length-like field set large.
        const uint32_t big = static_cast<uint32_t>(rng());
        for (size_t b = 0; b < 4 && at + b < s.size(); ++b) s[at + b] = static_cast<char>(big >> (8 * b));
      }
    }
  }
  return s;
}

// Walks every value as the view would: tensors looked for everywhere.
void ReadAsTheViewWould(const std::string& bytes) {
  pickle::Limits limits;
  limits.max_values = 1 << 16;
  Result<pickle::Pickle> p = pickle::Pickle::Read(bytes, limits);
  if (p.ok()) {
    for (pickle::Ref r = 0; r < p->size(); ++r) (void)TensorAt(*p, r);
  }
  (void)ReadDcpMetadata(bytes);
  zip::ReadAt read = MemoryReader(bytes);
  Result<TorchArchive> archive = ReadTorchArchive(read, bytes.size());
  if (!archive.ok()) return;
  for (const zip::Entry& e : archive->entries) (void)zip::DataOffset(read, bytes.size(), e);
  Result<std::string> pkl = ReadDataPickle(*archive, read, bytes.size());
  if (pkl.ok()) ReadAsTheViewWould(*pkl);
}

class TensorViewFuzz : public ::testing::TestWithParam<const char*> {};

TEST_P(TensorViewFuzz, MutatedCheckpointFilesGiveAValueOrAnErrorNeverACrash) {
  const std::string seed = Corpus(GetParam());
  ASSERT_FALSE(seed.empty());
  const char* env = std::getenv("CKPTFS_FUZZ_SECONDS");
  const auto budget = std::chrono::duration<double>(env ? std::atof(env) : 3.0);
  std::mt19937_64 rng(std::hash<std::string>{}(GetParam()));
  const auto start = std::chrono::steady_clock::now();
  size_t runs = 0;
  ReadAsTheViewWould(seed);
  while (std::chrono::steady_clock::now() - start < budget) {
    ReadAsTheViewWould(Mutate(seed, rng));
    ++runs;
  }
  EXPECT_GT(runs, 0u);
  RecordProperty("runs", static_cast<int>(runs));
}

INSTANTIATE_TEST_SUITE_P(Seeds, TensorViewFuzz,
                         ::testing::Values("dcp.metadata", "shard.distcp", "state_dict.pt", "protocol0.pkl"),
                         [](const auto& info) {
                           std::string name = info.param;
                           for (char& c : name) if (!isalnum(static_cast<unsigned char>(c))) c = '_';
                           return name;
                         });

}  // namespace
}  // namespace ckptfs
