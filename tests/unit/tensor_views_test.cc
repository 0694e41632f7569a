// Tests of the tensor view in the Filesystem (core, no FUSE) over a real temporary backing
// directory: a real DCP checkpoint (tensor_view_corpus/: the .metadata and .distcp of one save,
// and the bytes its tensors must read as) written through the Filesystem, read through
// CKPT/.tensors while staged and once durable, rewritten, removed, and refused changes.
#include "core/views/tensor_view/tensor_views.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <sys/xattr.h>

#include <chrono>
#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "core/filesystem/filesystem.h"
#include "core/integrity/checksum_record.h"
#include "core/memory/crc32c.h"
#include "checksum_record_of.h"
#include "core_test_util.h"
#include "tensor_view_corpus.h"

namespace ckptfs {
namespace {

using namespace std::chrono_literals;
using namespace testing_util;

class TensorViewsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    FsOptions o;
    o.flush_delay = 3600s;  // Staged until Sync.
    fs_ = StartFs(backing_.path(), o);
    ASSERT_NE(fs_, nullptr);
    ASSERT_TRUE(Mkdir("ck").ok());
  }
  void TearDown() override {
    if (fs_) (void)fs_->Shutdown();
  }
  Result<Attr> Mkdir(const std::string& path) {
    auto p = ParentOf(*fs_, path);
    if (!p.ok()) return p.status();
    return fs_->Mkdir(p->first, p->second, 0755, Me());
  }
  void SaveCheckpoint() {
    ASSERT_TRUE(WriteFile(*fs_, "ck/__0_0.distcp", Corpus("shard.distcp")).ok());
    ASSERT_TRUE(WriteFile(*fs_, "ck/.metadata", Corpus("dcp.metadata")).ok());
  }
  nlohmann::json Info() {
    Result<std::string> text = ReadFile(*fs_, "ck/.tensors/info.json");
    EXPECT_TRUE(text.ok()) << text.status().ToString();
    return nlohmann::json::parse(text.ok() ? *text : "{}");
  }
  // The entry of `fqn` among info.json's tensors.
  nlohmann::json Tensor(const nlohmann::json& info, const std::string& fqn) {
    for (const nlohmann::json& t : info["tensors"]) {
      if (t["fqn"] == fqn) return t;
    }
    return nullptr;
  }

  TempDir backing_;
  std::unique_ptr<Filesystem> fs_;
};

TEST_F(TensorViewsTest, InfoJsonShowsEachSourcesCrc32cFromItsRecordOrWhyItHasNone) {
  // Staged: not durable, no checksum yet.
  SaveCheckpoint();
  nlohmann::json staged = Info()["sources"];
  EXPECT_EQ(staged["__0_0.distcp"]["no_checksum"], "not durable yet") << staged.dump();
  EXPECT_TRUE(staged["__0_0.distcp"]["crc32c"].is_null());
  // Found on the backing store: the shard's record read from its attribute (one chunk: its
  // CRC32C), a hand-edited record on .metadata named as malformed, the view never crashing.
  ASSERT_EQ(mkdir((backing_ / "found").c_str(), 0755), 0);
  const std::string shard = Corpus("shard.distcp");
  WriteHostFile(backing_ / "found/__0_0.distcp", shard);
  WriteHostFile(backing_ / "found/.metadata", Corpus("dcp.metadata"));
  Crc32c crc;
  crc.Update(shard.data(), shard.size());
  const std::string record =
      FormatChecksumRecord(ChecksumRecord{kMinChecksumChunk, shard.size(), {crc.value()}});
  ASSERT_EQ(setxattr((backing_ / "found/__0_0.distcp").c_str(), kChecksumXattr, record.data(),
                     record.size(), 0), 0);
  const std::string garbage = "crc32c chunk=8388608 size=1 sums=zz";
  ASSERT_EQ(setxattr((backing_ / "found/.metadata").c_str(), kChecksumXattr, garbage.data(),
                     garbage.size(), 0), 0);
  for (int i = 0; i < 2; ++i) {  // The second from what the inodes keep.
    Result<std::string> text = ReadFile(*fs_, "found/.tensors/info.json");
    ASSERT_TRUE(text.ok()) << text.status().ToString();
    nlohmann::json sources = nlohmann::json::parse(*text)["sources"];
    EXPECT_EQ(sources["__0_0.distcp"]["durable"], true) << sources.dump();
    EXPECT_EQ(sources["__0_0.distcp"]["crc32c"], fmt::format("{:08x}", crc.value()));
    EXPECT_FALSE(sources["__0_0.distcp"].contains("last_verification"));
    EXPECT_TRUE(sources[".metadata"]["crc32c"].is_null());
    EXPECT_EQ(sources[".metadata"]["no_checksum"],
              "malformed checksum record: a sum is not 8 lowercase hex digits");
  }
}

TEST_F(TensorViewsTest, WithVerifyReadsATensorReadFromASourceThatDoesNotMatchItsRecordIsEio) {
  // Two checkpoints found on the backing store, their shards with the record of the saved bytes;
  // one shard has a byte changed since, outside the tensors' bytes.
  const std::string shard = Corpus("shard.distcp");
  const std::string changed = [&] {
    std::string c = shard;
    c[0] ^= 0x01;
    return c;
  }();
  const std::string record = FormatChecksumRecord(RecordOf(shard));
  for (const auto& [dir, bytes] : {std::pair{"clean", &shard}, std::pair{"changed", &changed}}) {
    ASSERT_EQ(mkdir((backing_ / dir).c_str(), 0755), 0);
    const std::string path = backing_ / (std::string(dir) + "/__0_0.distcp");
    WriteHostFile(path, *bytes);
    ASSERT_EQ(setxattr(path.c_str(), kChecksumXattr, record.data(), record.size(), 0), 0);
    WriteHostFile(backing_ / (std::string(dir) + "/.metadata"), Corpus("dcp.metadata"));
  }
  // Without verify=reads the changed bytes are served.
  Result<std::string> unchecked = ReadFile(*fs_, "changed/.tensors/model.layer.weight/0.0");
  ASSERT_TRUE(unchecked.ok()) << unchecked.status().ToString();
  ASSERT_TRUE(fs_->Shutdown().ok());

  FsOptions o;
  o.verify = VerifyMode::kReads;
  fs_ = StartFs(backing_.path(), o);
  ASSERT_NE(fs_, nullptr);
  Result<std::string> clean = ReadFile(*fs_, "clean/.tensors/model.layer.weight/0.0");
  ASSERT_TRUE(clean.ok()) << clean.status().ToString();
  EXPECT_TRUE(SameBytes(*clean, Corpus("weight.raw")));
  EXPECT_EQ(StatOf(*fs_, "read_files_verified"), 1u);
  for (const char* tensor : {"model.layer.weight/0.0", "model.layer.bias/0"}) {
    Result<std::string> failed = ReadFile(*fs_, std::string("changed/.tensors/") + tensor);
    EXPECT_EQ(failed.status().err(), EIO) << tensor << ": " << failed.status().ToString();
  }
  EXPECT_EQ(StatOf(*fs_, "read_mismatches"), 1u);  // Checked once, failed for every read.
  nlohmann::json sources =
      nlohmann::json::parse(ReadFile(*fs_, "changed/.tensors/info.json").value())["sources"];
  EXPECT_EQ(sources["__0_0.distcp"]["last_verification"]["result"], "mismatch") << sources.dump();
  EXPECT_EQ(sources["__0_0.distcp"]["last_verification"]["by"], "reads");
}

TEST_F(TensorViewsTest, AStagedCheckpointsTensorsReadAsSavedAndBecomeDurableWithSync) {
  SaveCheckpoint();
  nlohmann::json info = Info();
  nlohmann::json weight = Tensor(info, "model.layer.weight");
  ASSERT_FALSE(weight.is_null()) << info.dump();
  EXPECT_EQ(weight["shape"], nlohmann::json::parse("[6, 4]"));
  EXPECT_EQ(weight["dtype"], "<f4");
  EXPECT_EQ(weight["durable"], false);
  EXPECT_EQ(Tensor(info, "model.layer.bias")["dtype"], "<u2");
  EXPECT_EQ(Tensor(info, "model.layer.bias")["torch_dtype"], "bfloat16");
  Result<std::string> chunk = ReadFile(*fs_, "ck/.tensors/model.layer.weight/0.0");
  ASSERT_TRUE(chunk.ok()) << chunk.status().ToString();
  EXPECT_TRUE(SameBytes(*chunk, Corpus("weight.raw")));
  chunk = ReadFile(*fs_, "ck/.tensors/model.layer.bias/0");
  ASSERT_TRUE(chunk.ok()) << chunk.status().ToString();
  EXPECT_TRUE(SameBytes(*chunk, Corpus("bias.raw")));
  Result<std::string> zarray = ReadFile(*fs_, "ck/.tensors/model.layer.weight/.zarray");
  ASSERT_TRUE(zarray.ok());
  EXPECT_EQ(nlohmann::json::parse(*zarray)["chunks"], nlohmann::json::parse("[6, 4]"));
  // Found by name, never listed; its files have no blocks.
  Result<Attr> ck = Resolve(*fs_, "ck");
  Result<std::vector<DirEntry>> listed = ListDir(*fs_, ck->ino);
  ASSERT_TRUE(listed.ok());
  EXPECT_EQ(listed->size(), 2u);  // .metadata and __0_0.distcp.
  for (const DirEntry& e : *listed) EXPECT_NE(e.name, kTensorViewName);
  Result<Attr> file = Resolve(*fs_, "ck/.tensors/model.layer.weight/0.0");
  ASSERT_TRUE(file.ok());
  EXPECT_TRUE(file->no_blocks);
  EXPECT_EQ(file->size, 96u);
  ASSERT_TRUE(fs_->Sync().ok());
  EXPECT_EQ(Tensor(Info(), "model.layer.weight")["durable"], true);
  EXPECT_EQ(StatOf(*fs_, "tensor_views"), 1u);
}

TEST_F(TensorViewsTest, NothingIsMadeChangedOrRemovedInTheView) {
  SaveCheckpoint();
  Result<Attr> view = Resolve(*fs_, "ck/.tensors");
  ASSERT_TRUE(view.ok()) << view.status().ToString();
  Result<Attr> chunk = Resolve(*fs_, "ck/.tensors/model.layer.weight/0.0");
  ASSERT_TRUE(chunk.ok());
  Result<Attr> ck = Resolve(*fs_, "ck");
  EXPECT_EQ(fs_->Mkdir(view->ino, "d", 0755, Me()).status().err(), EROFS);
  EXPECT_EQ(fs_->Create(view->ino, "f", 0644, O_CREAT | O_WRONLY, Me()).status().err(), EROFS);
  EXPECT_EQ(fs_->Open(chunk->ino, O_RDWR).status().err(), EROFS);
  EXPECT_EQ(fs_->Unlink(view->ino, "info.json").err(), EROFS);
  EXPECT_EQ(fs_->Rmdir(view->ino, "model.layer.weight").err(), EROFS);
  EXPECT_EQ(fs_->Rename(view->ino, "info.json", ck->ino, "x", 0).err(), EROFS);
  EXPECT_EQ(fs_->Link(chunk->ino, ck->ino, "x").status().err(), EROFS);
  SetAttrRequest truncate;
  truncate.size = 0;
  EXPECT_EQ(fs_->SetAttr(chunk->ino, truncate).status().err(), EROFS);
}

TEST_F(TensorViewsTest, AFileRewrittenMakesTheOldViewStaleAndTheNextLookupShowsTheNewOne) {
  SaveCheckpoint();
  Result<Attr> before = Resolve(*fs_, "ck/.tensors/model.layer.weight/0.0");
  ASSERT_TRUE(before.ok());
  Result<OpenFile> open = fs_->Open(before->ino, O_RDONLY);
  ASSERT_TRUE(open.ok());
  ASSERT_TRUE(WriteFile(*fs_, "ck/__0_0.distcp", Corpus("shard.distcp")).ok());
  EXPECT_EQ(fs_->Read(open->handle, 0, 96).status().err(), ESTALE);
  EXPECT_TRUE(fs_->Release(open->handle).ok());
  Result<Attr> after = Resolve(*fs_, "ck/.tensors/model.layer.weight/0.0");
  ASSERT_TRUE(after.ok());
  EXPECT_NE(after->ino, before->ino);
  EXPECT_EQ(fs_->GetAttr(before->ino).status().err(), ESTALE);
  Result<std::string> chunk = ReadFile(*fs_, "ck/.tensors/model.layer.weight/0.0");
  ASSERT_TRUE(chunk.ok());
  EXPECT_TRUE(SameBytes(*chunk, Corpus("weight.raw")));
}

TEST_F(TensorViewsTest, TheViewAppearsWhenMetadataIsClosedAndGoesWithTheCheckpoint) {
  ASSERT_TRUE(WriteFile(*fs_, "ck/__0_0.distcp", Corpus("shard.distcp")).ok());
  Result<uint64_t> metadata = CreatePath(*fs_, "ck/.metadata");
  ASSERT_TRUE(metadata.ok());
  ASSERT_TRUE(WriteHandle(*fs_, *metadata, 0, Corpus("dcp.metadata")).ok());
  EXPECT_EQ(Resolve(*fs_, "ck/.tensors").status().err(), ENOENT);
  ASSERT_TRUE(Close(*fs_, *metadata).ok());
  EXPECT_TRUE(Resolve(*fs_, "ck/.tensors").ok());
  Result<Attr> ck = Resolve(*fs_, "ck");
  ASSERT_TRUE(fs_->Unlink(ck->ino, ".metadata").ok());
  EXPECT_EQ(Resolve(*fs_, "ck/.tensors").status().err(), ENOENT);
  // Plain directories have none.
  EXPECT_EQ(Resolve(*fs_, ".tensors").status().err(), ENOENT);
}

TEST_F(TensorViewsTest, AHostileMetadataGivesAViewWithoutTensorsThatSaysWhy) {
  std::string hostile = Corpus("dcp.metadata");
  hostile.resize(hostile.size() / 2);
  ASSERT_TRUE(WriteFile(*fs_, "ck/.metadata", hostile).ok());
  nlohmann::json info = Info();
  EXPECT_TRUE(info["tensors"].empty());
  EXPECT_NE(info["error"].get<std::string>().find("pickle"), std::string::npos) << info.dump();
}

// A torch.save tensor whose shape does not fit its storage was listed as an object with no
// reason (a dimension beyond 2^48), or shown over the wrong bytes (a size or an offset that
// wrapped past 2^64).
TEST_F(TensorViewsTest, ATorchSaveTensorWhoseShapeDoesNotFitItsStorageIsSkippedWithTheReason) {
  ASSERT_TRUE(WriteFile(*fs_, "ck/misfit.pt", Corpus("misfit.pt")).ok());
  nlohmann::json info = Info();
  ASSERT_EQ(info["files"].size(), 1u) << info.dump();
  const nlohmann::json& file = info["files"][0];
  ASSERT_EQ(file["tensors"].size(), 1u) << file.dump();
  EXPECT_EQ(file["tensors"][0]["key"], "fits");
  EXPECT_TRUE(file["objects"].empty()) << file.dump();
  std::map<std::string, std::string> skipped;
  for (const nlohmann::json& s : file["skipped"]) skipped[s["key"]] = s["reason"];
  EXPECT_EQ(skipped, (std::map<std::string, std::string>{
                         {"past_end", "runs past its storage"},
                         {"far_offset", "it ends past 2^64 bytes of its storage"},
                         {"too_many_elements", "more than 2^64 elements"},
                         {"too_long", "a dimension larger than 2^48"}}));
  for (const auto& [key, reason] : skipped) {
    EXPECT_EQ(Resolve(*fs_, "ck/.tensors/misfit.pt/" + key).status().err(), ENOENT) << key;
  }
  Result<std::string> fits = ReadFile(*fs_, "ck/.tensors/misfit.pt/fits/0.0");
  ASSERT_TRUE(fits.ok()) << fits.status().ToString();
  const float elements[] = {0, 1, 2, 3};
  EXPECT_TRUE(
      SameBytes(*fits, std::string(reinterpret_cast<const char*>(elements), sizeof elements)));
}

}  // namespace
}  // namespace ckptfs
