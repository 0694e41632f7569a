#include "core/views/tensor_view/pickle_reader.h"

#include <gtest/gtest.h>

#include <string>

#include "core/views/tensor_view/dcp_metadata.h"
#include "tensor_view_corpus.h"

namespace ckptfs::pickle {
namespace {

using namespace std::string_literals;


TEST(PickleReader, ReadsAProtocol0PickleIntoInertValues) {
  const std::string bytes = Corpus("protocol0.pkl");
  ASSERT_FALSE(bytes.empty());
  Result<Pickle> p = Pickle::Read(bytes);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  const std::vector<Ref>* a = p->Sequence(p->Get(p->root(), "a"));
  ASSERT_NE(a, nullptr);
  ASSERT_EQ(a->size(), 5u);
  int64_t one;
  EXPECT_TRUE(p->Int((*a)[0], &one));
  EXPECT_EQ(one, 1);
  EXPECT_EQ(p->at((*a)[1]).kind, Kind::kFloat);
  EXPECT_DOUBLE_EQ(p->at((*a)[1]).real, 2.5);
  const std::vector<Ref>* b = p->Sequence(p->Get(p->root(), "b"));
  ASSERT_NE(b, nullptr);
  int64_t minus4;
  EXPECT_TRUE(p->Int((*b)[1], &minus4));
  EXPECT_EQ(minus4, -4);
  EXPECT_EQ(p->at((*b)[2]).kind, Kind::kBigInt);
}

TEST(PickleReader, ReadsADcpMetadataAsTensorsShardsAndItems) {
  Result<DcpCheckpoint> ck = ReadDcpMetadata(Corpus("dcp.metadata"));
  ASSERT_TRUE(ck.ok()) << ck.status().ToString();
  std::map<std::string, const DcpTensor*> tensors;
  for (const DcpTensor& t : ck->tensors) tensors[t.fqn] = &t;
  ASSERT_TRUE(tensors.count("model.layer.weight"));
  EXPECT_EQ(tensors["model.layer.weight"]->shape, (std::vector<uint64_t>{6, 4}));
  EXPECT_EQ(tensors["model.layer.weight"]->dtype, "float32");
  EXPECT_EQ(tensors["model.layer.bias"]->dtype, "bfloat16");
  EXPECT_EQ(tensors["optim.state.0.step"]->shape, std::vector<uint64_t>{});
  ASSERT_EQ(tensors["model.layer.weight"]->shards.size(), 1u);
  EXPECT_EQ(tensors["model.layer.weight"]->shards[0].stored.file, "__0_0.distcp");
  std::set<std::string> items;
  for (const DcpItem& i : ck->items) items.insert(i.fqn);
  EXPECT_EQ(items, (std::set<std::string>{"iteration", "name", "optim.lr"}));
  EXPECT_TRUE(ck->skipped.empty());
}

TEST(PickleReader, RunsNothingAndKeepsGlobalsAsNames) {
  // os.system("x") as a pickle, in protocol 0 and 2: a REDUCE of a GLOBAL is only recorded.
  for (const std::string& bytes : {"cos\nsystem\n(S'x'\ntR."s, "\x80\x02" "cos\nsystem\nX\x01\x00\x00\x00x\x85R."s}) {
    Result<Pickle> p = Pickle::Read(bytes);
    ASSERT_TRUE(p.ok()) << p.status().ToString();
    EXPECT_EQ(p->at(p->root()).kind, Kind::kObject);
    EXPECT_TRUE(p->IsGlobal(p->at(p->root()).callable, "os", "system"));
  }
  // A quoted string that needs unescaping is refused, not decoded.
  EXPECT_FALSE(Pickle::Read("S'\\x41'\n."s).ok());
}

TEST(PickleReader, RefusesTruncatedAndOversizedInputWithAReason) {
  const std::string bytes = Corpus("dcp.metadata");
  for (size_t cut : {size_t{0}, size_t{1}, size_t{10}, bytes.size() / 2, bytes.size() - 1}) {
    Result<Pickle> p = Pickle::Read(std::string_view(bytes).substr(0, cut));
    EXPECT_FALSE(p.ok()) << cut;
    EXPECT_EQ(p.status().err(), EBADMSG);
  }
  // A string whose length runs past the end.
  EXPECT_FALSE(Pickle::Read("\x80\x04X\xff\xff\xff\x7f" "abc."s).ok());
  // More values than allowed.
  Limits small;
  small.max_values = 10;
  EXPECT_FALSE(Pickle::Read(bytes, small).ok());
}

TEST(PickleReader, BoundsMarksAndItemsOfHostileInput) {
  // A MARK bomb.
  EXPECT_FALSE(Pickle::Read(std::string(100000, '(') + "N.").ok());
  // A list appended to itself through the memo: values refer to each other by index, no loop.
  const std::string cycle = "\x80\x02]q\x00h\x00" "a."s;
  Result<Pickle> p = Pickle::Read(cycle);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_EQ(p->at(p->root()).items, std::vector<Ref>{p->root()});
  // DUP repeated grows items only within the budget.
  Limits small;
  small.max_values = 1000;
  std::string dups = std::string("\x80\x02]") + std::string(1, '(');
  for (int i = 0; i < 5000; ++i) dups += 'N';
  dups += "e.";
  EXPECT_FALSE(Pickle::Read(dups, small).ok());
}

}  // namespace
}  // namespace ckptfs::pickle
