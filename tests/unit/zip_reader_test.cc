#include "core/views/tensor_view/zip_reader.h"

#include <gtest/gtest.h>

#include <cstring>

#include "core/views/tensor_view/torch_save.h"
#include "tensor_view_corpus.h"

namespace ckptfs {
namespace {



TEST(ZipReader, FindsTheStoredEntriesOfATorchSaveFile) {
  const std::string bytes = Corpus("state_dict.pt");
  Result<TorchArchive> archive = ReadTorchArchive(MemoryReader(bytes), bytes.size());
  ASSERT_TRUE(archive.ok()) << archive.status().ToString();
  EXPECT_EQ(archive->prefix, "state_dict/");
  Result<std::string> pkl = ReadDataPickle(*archive, MemoryReader(bytes), bytes.size());
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
  Result<uint64_t> at = zip::DataOffset(MemoryReader(bytes), bytes.size(), *storage);
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
  EXPECT_EQ(zip::ReadDirectory(MemoryReader(junk), junk.size()).status().err(), EBADMSG);
  const std::string bytes = Corpus("state_dict.pt");
  // Cut anywhere, the directory no longer reads (or no longer points inside).
  for (size_t cut : {size_t{10}, bytes.size() / 2, bytes.size() - 30}) {
    std::string part = bytes.substr(0, cut);
    Result<std::vector<zip::Entry>> dir = zip::ReadDirectory(MemoryReader(part), part.size());
    EXPECT_FALSE(dir.ok()) << cut;
  }
}

}  // namespace
}  // namespace ckptfs
