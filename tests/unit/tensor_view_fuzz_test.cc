// A seeded mutational fuzz test of the readers of untrusted checkpoint files: the pickle reader,
// the DCP metadata reader, the zip reader and the torch.save reader, and the view builders over
// what they read, over the real files of tensor_view_corpus/ mutated (bytes flipped, set, cut,
// inserted, repeated). Each must return a value or an error (a view, or one that lists what it
// skipped); the sanitizer builds (scripts/test.sh runs this test under ASan+UBSan) check that
// nothing reads out of bounds or leaks. The unmutated files must give what they hold.
//
// Each test tries CKPTFS_FUZZ_RUNS mutated inputs (default kReaderRuns or kBuilderRuns) drawn from
// the seed CKPTFS_FUZZ_SEED (default: one per test and file). It prints both, and the file each
// input is written to before it is tried: a crash or a failure leaves that input there.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "core/memory/file_content.h"
#include "core/views/tensor_view/dcp_metadata.h"
#include "core/views/tensor_view/dcp_view.h"
#include "core/views/tensor_view/pickle_reader.h"
#include "core/views/tensor_view/torch_save.h"
#include "core/views/tensor_view/torch_save_view.h"
#include "core/views/tensor_view/zip_reader.h"
#include "core_test_util.h"
#include "iouring/posix_env.h"
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

// Mutated inputs per seed file (CKPTFS_FUZZ_RUNS overrides both).
constexpr uint64_t kReaderRuns = 20000;
constexpr uint64_t kBuilderRuns = 1000;
// Enough runs that some mutated inputs give one outcome and some the other (read or refused; the
// view as the seed's or changed): the mutations reach past the readers' first checks.
constexpr uint64_t kRunsForBothOutcomes = 1000;

uint64_t FromEnv(const char* name, uint64_t otherwise) {
  const char* text = std::getenv(name);
  return text != nullptr && *text != '\0' ? std::strtoull(text, nullptr, 10) : otherwise;
}

// A seed file's name as a test's parameter name.
std::string ParamName(const char* file) {
  std::string name = file;
  for (char& c : name) {
    if (!isalnum(static_cast<unsigned char>(c))) c = '_';
  }
  return name;
}

// The file each input of a test is written to before it is tried. The test prints its path
// (with the seed and the number of runs); it is removed at the end of a test that did not fail.
class InputFile {
 public:
  InputFile(const std::string& test, uint64_t seed, uint64_t runs)
      : path_(::testing::TempDir() + "ckptfs-fuzz-" + test + ".input") {
    fd_ = open(path_.c_str(), O_CREAT | O_TRUNC | O_WRONLY | O_CLOEXEC, 0644);
    EXPECT_GE(fd_, 0) << path_ << ": " << std::strerror(errno);
    std::printf("fuzz: seed %llu (CKPTFS_FUZZ_SEED replays it), %llu runs (CKPTFS_FUZZ_RUNS); each "
                "input is written to %s before it is tried, and left there if the test fails or "
                "crashes\n",
                static_cast<unsigned long long>(seed), static_cast<unsigned long long>(runs),
                path_.c_str());
    std::fflush(stdout);
  }
  ~InputFile() {
    if (fd_ >= 0) close(fd_);
    if (!::testing::Test::HasFailure()) unlink(path_.c_str());
  }
  InputFile(const InputFile&) = delete;
  InputFile& operator=(const InputFile&) = delete;

  void Write(const std::string& input) {
    ASSERT_EQ(pwrite(fd_, input.data(), input.size(), 0), static_cast<ssize_t>(input.size()))
        << path_ << ": " << std::strerror(errno);
    ASSERT_EQ(ftruncate(fd_, static_cast<off_t>(input.size())), 0) << std::strerror(errno);
  }

 private:
  std::string path_;
  int fd_ = -1;
};

std::string Shape(const std::vector<uint64_t>& shape) {
  std::string out = "[";
  for (size_t i = 0; i < shape.size(); ++i) out += (i ? "," : "") + std::to_string(shape[i]);
  return out + "]";
}

// What the readers make of `bytes`, walking every value as the view would (tensors looked for
// everywhere), one line each: "pickle" when it is one, and each tensor in it ("tensor DTYPE
// SHAPE in storage KEY from element N"; a Parameter and the tensor it holds are both tensors); a
// DCP .metadata's tensors ("metadata FQN DTYPE SHAPE") and byte items ("item FQN"); "archive" for
// a torch.save archive, and what its data.pkl gives (after "data.pkl: ").
std::vector<std::string> ReadAsTheViewWould(const std::string& bytes,
                                            const std::string& prefix = "") {
  std::vector<std::string> found;
  pickle::Limits limits;
  limits.max_values = 1 << 16;
  Result<pickle::Pickle> p = pickle::Pickle::Read(bytes, limits);
  if (p.ok()) {
    found.push_back(prefix + "pickle");
    for (pickle::Ref r = 0; r < p->size(); ++r) {
      Result<PickledTensor> t = TensorAt(*p, r);
      if (!t.ok()) continue;
      found.push_back(prefix + "tensor " + t->dtype.torch + " " + Shape(t->shape) + " in storage " +
                      t->storage_key + " from element " + std::to_string(t->storage_offset));
    }
  }
  Result<DcpCheckpoint> ck = ReadDcpMetadata(bytes);
  if (ck.ok()) {
    for (const DcpTensor& t : ck->tensors) {
      found.push_back(prefix + "metadata " + t.fqn + " " + t.dtype + " " + Shape(t.shape));
    }
    for (const DcpItem& item : ck->items) found.push_back(prefix + "item " + item.fqn);
  }
  zip::ReadAt read = MemoryReader(bytes);
  Result<TorchArchive> archive = ReadTorchArchive(read, bytes.size());
  if (!archive.ok()) return found;
  found.push_back(prefix + "archive");
  for (const zip::Entry& e : archive->entries) (void)zip::DataOffset(read, bytes.size(), e);
  Result<std::string> pkl = ReadDataPickle(*archive, read, bytes.size());
  if (pkl.ok()) {
    for (std::string& line : ReadAsTheViewWould(*pkl, prefix + "data.pkl: ")) {
      found.push_back(std::move(line));
    }
  }
  return found;
}

// What the readers make of seed file `file` (or a mutation of it) = `bytes`. A .distcp file is
// also read as the view reads it: each range of it the seed .metadata names (after "FQN: ").
std::vector<std::string> ReadFileAsTheViewWould(const std::string& file, const std::string& bytes) {
  std::vector<std::string> found = ReadAsTheViewWould(bytes);
  if (file != "shard.distcp") return found;
  static const Result<DcpCheckpoint> ck = ReadDcpMetadata(Corpus("dcp.metadata"));
  EXPECT_TRUE(ck.ok()) << ck.status().ToString();
  if (!ck.ok()) return found;
  std::vector<std::pair<std::string, StoredRange>> ranges;
  for (const DcpTensor& t : ck->tensors) {
    for (const DcpShard& shard : t.shards) ranges.push_back({t.fqn, shard.stored});
  }
  for (const DcpItem& item : ck->items) ranges.push_back({item.fqn, item.stored});
  for (const auto& [fqn, range] : ranges) {
    if (range.offset > bytes.size()) continue;
    const std::string shard = bytes.substr(range.offset, range.length);
    for (std::string& line : ReadAsTheViewWould(shard, fqn + ": ")) {
      found.push_back(std::move(line));
    }
  }
  return found;
}

// What each unmutated seed file gives (tensor_view_corpus/make_corpus.py made them).
const std::map<std::string, std::vector<std::string>>& SeedFilesGive() {
  static const std::map<std::string, std::vector<std::string>> gives{
      {"dcp.metadata",
       {"pickle", "metadata model.layer.weight float32 [6,4]",
        "metadata model.layer.bias bfloat16 [4]", "metadata optim.state.0.step float32 []",
        "metadata optim.state.0.exp_avg float32 [6,4]", "item optim.lr", "item iteration",
        "item name"}},
      {"shard.distcp",  // Whole, nothing (archives one after another); each range an archive.
       {"model.layer.weight: archive", "model.layer.weight: data.pkl: pickle",
        "model.layer.weight: data.pkl: tensor float32 [6,4] in storage 0 from element 0",
        "model.layer.bias: archive", "model.layer.bias: data.pkl: pickle",
        "model.layer.bias: data.pkl: tensor bfloat16 [4] in storage 0 from element 0",
        "optim.state.0.step: archive", "optim.state.0.step: data.pkl: pickle",
        "optim.state.0.step: data.pkl: tensor float32 [] in storage 0 from element 0",
        "optim.state.0.exp_avg: archive", "optim.state.0.exp_avg: data.pkl: pickle",
        "optim.state.0.exp_avg: data.pkl: tensor float32 [6,4] in storage 0 from element 0",
        "optim.lr: archive", "optim.lr: data.pkl: pickle", "iteration: archive",
        "iteration: data.pkl: pickle", "name: archive", "name: data.pkl: pickle"}},
      {"state_dict.pt",  // model.w (a Parameter), model.tail (base[5:9]), an exp_avg.
       {"archive", "data.pkl: pickle", "data.pkl: tensor float32 [2,3] in storage 0 from element 0",
        "data.pkl: tensor float32 [2,3] in storage 0 from element 0",
        "data.pkl: tensor float32 [4] in storage 1 from element 5",
        "data.pkl: tensor bfloat16 [3] in storage 2 from element 0"}},
      {"protocol0.pkl", {"pickle"}},  // No tensors.
  };
  return gives;
}

// Whether `info` is what a view's info.json holds: an object of the builders' lists ("skipped"
// and "files" always, "tensors" and "items" when there are some).
bool IsViewInfo(const nlohmann::json& info) {
  if (!info.is_object() || !info.contains("skipped") || !info.contains("files")) return false;
  for (const auto& [key, value] : info.items()) {
    if (!value.is_array()) return false;
    if (key != "tensors" && key != "items" && key != "skipped" && key != "files") return false;
  }
  return true;
}

// The views of a checkpoint directory holding `name` = `bytes` beside the other seed files, as
// the mount builds them (the file read from a real file, as from the backing store). Returns its
// info.json read back, which must be an object of the builders' lists.
nlohmann::json BuildViewsOver(const std::string& name, const std::string& bytes, Env& env,
                              const std::string& dir) {
  std::vector<ViewSource> sources;
  for (const auto& [file, seed] : {std::pair{".metadata", "dcp.metadata"}, {"__0_0.distcp", "shard.distcp"},
                                   {"state_dict.pt", "state_dict.pt"}}) {
    const std::string content = file == name ? bytes : Corpus(seed);
    const std::string path = dir + "/" + file;
    testing_util::WriteHostFile(path, content);
    Result<int> fd = env.Open(AT_FDCWD, path, O_RDONLY, 0);
    EXPECT_TRUE(fd.ok()) << fd.status().ToString();
    if (!fd.ok()) return nullptr;
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
  const std::string text = JsonText(tree.info);
  nlohmann::json info = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  EXPECT_TRUE(IsViewInfo(info)) << "info.json: " << text.substr(0, 4096);
  return info;
}

// A view's info.json as lines: each tensor ("tensor FQN DTYPE SHAPE"), byte item ("item FQN"),
// torch.save file ("file NAME") and its tensors ("file NAME: tensor KEY DTYPE SHAPE"), and each
// thing skipped ("skipped ...").
std::vector<std::string> ViewLines(const nlohmann::json& info) {
  if (!IsViewInfo(info)) return {};
  std::vector<std::string> lines;
  auto tensor = [](const nlohmann::json& t, const char* name) {
    return "tensor " + t.at(name).get<std::string>() + " " +
           t.at("torch_dtype").get<std::string>() + " " +
           Shape(t.at("shape").get<std::vector<uint64_t>>());
  };
  for (const nlohmann::json& t : info.value("tensors", nlohmann::json::array())) {
    lines.push_back(tensor(t, "fqn"));
  }
  for (const nlohmann::json& item : info.value("items", nlohmann::json::array())) {
    lines.push_back("item " + item.at("fqn").get<std::string>());
  }
  for (const nlohmann::json& file : info.at("files")) {
    const std::string name = file.at("file").get<std::string>();
    lines.push_back("file " + name);
    for (const nlohmann::json& t : file.at("tensors")) {
      lines.push_back("file " + name + ": " + tensor(t, "key"));
    }
  }
  for (const nlohmann::json& skipped : info.at("skipped")) {
    lines.push_back("skipped " + skipped.dump());
  }
  return lines;
}

// What the view of the unmutated seed files shows (tensor_view_corpus/make_corpus.py made them).
const std::vector<std::string> kSeedView{
    "tensor model.layer.weight float32 [6,4]", "tensor model.layer.bias bfloat16 [4]",
    "tensor optim.state.0.step float32 []", "tensor optim.state.0.exp_avg float32 [6,4]",
    "item optim.lr", "item iteration", "item name", "file state_dict.pt",
    "file state_dict.pt: tensor model/w float32 [2,3]",
    "file state_dict.pt: tensor model/tail float32 [4]",
    "file state_dict.pt: tensor optimizer/state/0/exp_avg bfloat16 [3]"};

class TensorViewFuzz : public ::testing::TestWithParam<const char*> {};

TEST_P(TensorViewFuzz, MutatedCheckpointFilesGiveAValueOrAnErrorNeverACrash) {
  const std::string seed_file = Corpus(GetParam());
  ASSERT_FALSE(seed_file.empty());
  const uint64_t seed = FromEnv("CKPTFS_FUZZ_SEED", std::hash<std::string>{}(GetParam()));
  const uint64_t runs = FromEnv("CKPTFS_FUZZ_RUNS", kReaderRuns);
  InputFile input("readers-" + ParamName(GetParam()), seed, runs);
  input.Write(seed_file);
  EXPECT_EQ(ReadFileAsTheViewWould(GetParam(), seed_file), SeedFilesGive().at(GetParam()));
  std::mt19937_64 rng(seed);
  uint64_t read = 0, refused = 0;
  for (uint64_t run = 0; run < runs && !HasFailure(); ++run) {
    const std::string mutated = Mutate(seed_file, rng);
    input.Write(mutated);
    (ReadFileAsTheViewWould(GetParam(), mutated).empty() ? refused : read) += 1;
  }
  RecordProperty("read", std::to_string(read));
  RecordProperty("refused", std::to_string(refused));
  if (runs >= kRunsForBothOutcomes) {
    EXPECT_GT(read, 0u);
    EXPECT_GT(refused, 0u);
  }
}

class TensorViewBuilderFuzz : public ::testing::TestWithParam<const char*> {};

TEST_P(TensorViewBuilderFuzz, MutatedCheckpointFilesGiveAViewThatSkipsWhatItCannotShowNeverACrash) {
  const std::map<std::string, std::string> as_file{
      {"dcp.metadata", ".metadata"}, {"shard.distcp", "__0_0.distcp"}, {"state_dict.pt", "state_dict.pt"}};
  auto it = as_file.find(GetParam());
  ASSERT_NE(it, as_file.end());
  const std::string seed_file = Corpus(GetParam());
  spdlog::set_level(spdlog::level::warn);  // Each skipped tensor is logged at info.
  testing_util::TempDir dir;
  PosixEnv env;
  const uint64_t seed = FromEnv("CKPTFS_FUZZ_SEED", std::hash<std::string>{}(GetParam()) + 1);
  const uint64_t runs = FromEnv("CKPTFS_FUZZ_RUNS", kBuilderRuns);
  InputFile input("builders-" + ParamName(GetParam()), seed, runs);
  input.Write(seed_file);
  EXPECT_EQ(ViewLines(BuildViewsOver(it->second, seed_file, env, dir.path())), kSeedView);
  std::mt19937_64 rng(seed);
  uint64_t same = 0, changed = 0;
  for (uint64_t run = 0; run < runs && !HasFailure(); ++run) {
    const std::string mutated = Mutate(seed_file, rng);
    input.Write(mutated);
    const nlohmann::json info = BuildViewsOver(it->second, mutated, env, dir.path());
    (ViewLines(info) == kSeedView ? same : changed) += 1;
  }
  RecordProperty("same", std::to_string(same));
  RecordProperty("changed", std::to_string(changed));
  if (runs >= kRunsForBothOutcomes) {
    EXPECT_GT(same, 0u);
    EXPECT_GT(changed, 0u);
  }
}

INSTANTIATE_TEST_SUITE_P(Seeds, TensorViewFuzz,
                         ::testing::Values("dcp.metadata", "shard.distcp", "state_dict.pt", "protocol0.pkl"),
                         [](const auto& info) { return ParamName(info.param); });
INSTANTIATE_TEST_SUITE_P(Seeds, TensorViewBuilderFuzz,
                         ::testing::Values("dcp.metadata", "shard.distcp", "state_dict.pt"),
                         [](const auto& info) { return ParamName(info.param); });

}  // namespace
}  // namespace ckptfs
