// A seeded mutational fuzz test of the readers of untrusted checkpoint files: the pickle reader,
// the DCP metadata reader, the zip reader and the torch.save reader, and the view builders over
// what they read, over the real files of tensor_view_corpus/ mutated (bytes flipped, set, cut,
// inserted, repeated). Each must return a value or an error (a view, or one that lists what it
// skipped); the sanitizer builds check that nothing reads out of bounds or leaks.
// CKPTFS_FUZZ_SECONDS (default 3 per seed file) bounds the time.
#include <gtest/gtest.h>
#include <spdlog/spdlog.h>

#include <chrono>
#include <map>
#include <cstdlib>
#include <cstring>
#include <random>

#include "core/file_content.h"
#include "core/tensor_view/dcp_metadata.h"
#include "core/tensor_view/dcp_view.h"
#include "core/tensor_view/torch_save_view.h"
#include "core_test_util.h"
#include "iouring/posix_env.h"
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

// The views of a checkpoint directory holding `name` = `bytes` beside the other seed files, as
// the mount builds them (the file read from a real file, as from the backing store).
void BuildViewsOver(const std::string& name, const std::string& bytes, Env& env, const std::string& dir) {
  std::vector<ViewSource> sources;
  for (const auto& [file, seed] : {std::pair{".metadata", "dcp.metadata"}, {"__0_0.distcp", "shard.distcp"},
                                   {"state_dict.pt", "state_dict.pt"}}) {
    const std::string content = file == name ? bytes : Corpus(seed);
    const std::string path = dir + "/" + file;
    testing_util::WriteHostFile(path, content);
    Result<int> fd = env.Open(AT_FDCWD, path, O_RDONLY, 0);
    ASSERT_TRUE(fd.ok());
    sources.push_back({file, FileContent(std::make_shared<BackingFile>(env, *fd), content.size())});
  }
  ViewTree tree;
  std::string metadata(static_cast<size_t>(sources[0].content.size()), '\0');
  if (ReadSourceRange(sources[0].content, 0, metadata.size(), metadata.data()).ok()) {
    Result<DcpCheckpoint> ck = ReadDcpMetadata(metadata);
    if (ck.ok()) AddDcpView("fuzz", *ck, sources, tree);
  }
  AddTorchSaveView("fuzz", sources, 2, tree);
  EXPECT_LE(tree.nodes.size(), kMaxViewNodes);
  EXPECT_FALSE(JsonText(tree.info).empty());
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

class TensorViewBuilderFuzz : public ::testing::TestWithParam<const char*> {};

TEST_P(TensorViewBuilderFuzz, MutatedCheckpointFilesGiveAViewThatSkipsWhatItCannotShowNeverACrash) {
  const std::map<std::string, std::string> as_file{
      {"dcp.metadata", ".metadata"}, {"shard.distcp", "__0_0.distcp"}, {"state_dict.pt", "state_dict.pt"}};
  auto it = as_file.find(GetParam());
  ASSERT_NE(it, as_file.end());
  const std::string seed = Corpus(GetParam());
  spdlog::set_level(spdlog::level::warn);  // Each skipped tensor is logged at info.
  testing_util::TempDir dir;
  PosixEnv env;
  const char* seconds = std::getenv("CKPTFS_FUZZ_SECONDS");
  const auto budget = std::chrono::duration<double>(seconds ? std::atof(seconds) : 3.0);
  std::mt19937_64 rng(std::hash<std::string>{}(GetParam()) + 1);
  const auto start = std::chrono::steady_clock::now();
  BuildViewsOver(it->second, seed, env, dir.path());
  while (std::chrono::steady_clock::now() - start < budget) BuildViewsOver(it->second, Mutate(seed, rng), env, dir.path());
}

INSTANTIATE_TEST_SUITE_P(Seeds, TensorViewFuzz,
                         ::testing::Values("dcp.metadata", "shard.distcp", "state_dict.pt", "protocol0.pkl"),
                         [](const auto& info) {
                           std::string name = info.param;
                           for (char& c : name) if (!isalnum(static_cast<unsigned char>(c))) c = '_';
                           return name;
                         });
INSTANTIATE_TEST_SUITE_P(Seeds, TensorViewBuilderFuzz,
                         ::testing::Values("dcp.metadata", "shard.distcp", "state_dict.pt"),
                         [](const auto& info) {
                           std::string name = info.param;
                           for (char& c : name) if (!isalnum(static_cast<unsigned char>(c))) c = '_';
                           return name;
                         });

}  // namespace
}  // namespace ckptfs
