#include "core/tensor_view/zip_reader.h"

#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <sstream>

#include "core/tensor_view/torch_save.h"

namespace ckptfs {
namespace {

std::string Corpus(const std::string& name) {
  std::ifstream in(std::string(CKPTFS_TENSOR_VIEW_CORPUS) + "/" + name, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

zip::ReadAt Reader(const std::string& bytes) {
  return [&bytes](uint64_t offset, size_t length, char* out) {
    if (offset > bytes.size() || length > bytes.size() - offset) return Status::Error(EIO, "past the end");
    std::memcpy(out, bytes.data() + offset, length);
    return Status::Ok();
  };
}

TEST(ZipReader, FindsTheStoredEntriesOfATorchSaveFile) {
  const std::string bytes = Corpus("state_dict.pt");
  Result<TorchArchive> archive = ReadTorchArchive(Reader(bytes), bytes.size());
  ASSERT_TRUE(archive.ok()) << archive.status().ToString();
  EXPECT_EQ(archive->prefix, "state_dict/");
  Result<std::string> pkl = ReadDataPickle(*archive, Reader(bytes), bytes.size());
  ASSERT_TRUE(pkl.ok()) << pkl.status().ToString();
  Result<pickle::Pickle> p = pickle::Pickle::Read(*pkl);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  // model.tail is base[5:9] of arange(20): offset 5 in its storage, 4 floats.
  pickle::Ref model = p->Get(p->root(), "model");
  ASSERT_NE(model, pickle::kNoRef);
  Result<PickledTensor> tail = TensorAt(*p, p->Get(model, "tail"));
  ASSERT_TRUE(tail.ok()) << tail.status().ToString();
  EXPECT_EQ(tail->storage_offset, 5u);
  EXPECT_EQ(tail->shape, std::vector<uint64_t>{4});
  EXPECT_TRUE(tail->Contiguous());
  const zip::Entry* storage = archive->Storage(tail->storage_key);
  ASSERT_NE(storage, nullptr);
  Result<uint64_t> at = zip::DataOffset(Reader(bytes), bytes.size(), *storage);
  ASSERT_TRUE(at.ok());
  float values[4];
  std::memcpy(values, bytes.data() + *at + 5 * sizeof(float), sizeof values);
  EXPECT_EQ(values[0], 5.0f);
  EXPECT_EQ(values[3], 8.0f);
  // A Parameter is the tensor it wraps.
  Result<PickledTensor> w = TensorAt(*p, p->Get(model, "w"));
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  EXPECT_EQ(w->shape, (std::vector<uint64_t>{2, 3}));
}

TEST(ZipReader, RefusesWhatIsNoArchiveOrRunsPastItsEnd) {
  const std::string junk(1000, 'x');
  EXPECT_EQ(zip::ReadDirectory(Reader(junk), junk.size()).status().err(), EBADMSG);
  const std::string bytes = Corpus("state_dict.pt");
  // Cut anywhere, the directory no longer reads (or no longer points inside).
  for (size_t cut : {size_t{10}, bytes.size() / 2, bytes.size() - 30}) {
    std::string part = bytes.substr(0, cut);
    Result<std::vector<zip::Entry>> dir = zip::ReadDirectory(Reader(part), part.size());
    EXPECT_FALSE(dir.ok()) << cut;
  }
}

}  // namespace
}  // namespace ckptfs
