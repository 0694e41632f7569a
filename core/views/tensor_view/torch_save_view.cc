#include "core/views/tensor_view/torch_save_view.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <optional>
#include <set>

#include "core/views/tensor_view/pickle_reader.h"
#include "core/views/tensor_view/tensor_grid.h"
#include "core/views/tensor_view/torch_save.h"

namespace ckptfs {
namespace {

using pickle::Kind;
using pickle::Pickle;
using pickle::Ref;

constexpr size_t kMaxDepth = 64;
// What one file may add to the view, and to its list of skipped keys (a hostile pickle can
// refer to one container from many places).
constexpr size_t kMaxNodesPerFile = size_t{1} << 18;
constexpr size_t kMaxSkippedListed = 1000;
constexpr size_t kMaxObjectsListed = 10000;
constexpr size_t kMaxShownText = 256;

class TorchSaveBuilder {
 public:
  TorchSaveBuilder(const std::string& path, const std::vector<ViewSource>& sources, int32_t index,
                   ViewTree& tree)
      : path_(path), source_(index), file_(sources[static_cast<size_t>(index)]), tree_(tree) {}

  void Build() {
    if (!tree_.info.contains("skipped")) tree_.info["skipped"] = nlohmann::json::array();
    if (!tree_.info.contains("files")) tree_.info["files"] = nlohmann::json::array();
    const std::string name = EncodeViewName(file_.name);
    if (tree_.Has(0, name)) return Skip("its name is taken");
    const uint64_t size = file_.content.size();
    read_ = [this](uint64_t offset, size_t length, char* out) {
      return ReadSourceRange(file_.content, offset, length, out);
    };
    Result<TorchArchive> archive = ReadTorchArchive(read_, size);
    if (!archive.ok()) return Skip(archive.status().message());
    archive_ = std::move(*archive);
    Result<std::string> data_pkl = ReadDataPickle(archive_, read_, size);
    if (!data_pkl.ok()) return Skip(data_pkl.status().message());
    Result<Pickle> p = Pickle::Read(*data_pkl);
    if (!p.ok()) return Skip(p.status().message());
    p_ = &*p;
    entry_ = {{"file", file_.name}, {"path", name}, {"tensors", nlohmann::json::array()},
              {"objects", nlohmann::json::array()}, {"skipped", nlohmann::json::array()},
              {"_sources", {source_}}};
    if (tree_.Full(2)) return Skip("the view has too many files");
    nodes_limit_ = tree_.nodes.size() + kMaxNodesPerFile;
    Walk(p_->root(), 0, name, "", 0);
    tree_.info["files"].push_back(std::move(entry_));
  }

 private:
  void SkipKey(const std::string& key, const std::string& why) {
    if (skipped_ == kMaxSkippedListed) entry_["more_skipped"] = true;
    if (skipped_++ < kMaxSkippedListed) entry_["skipped"].push_back({{"key", key}, {"reason", why}});
  }
  bool Full(size_t more) const { return tree_.Full(more) || tree_.nodes.size() + more > nodes_limit_; }

  void Skip(const std::string& why) {
    spdlog::info("{}/{}: not shown in its tensor view: {}", path_, file_.name, why);
    tree_.info["skipped"].push_back({{"file", file_.name}, {"reason", why}});
  }

  // The entries of a container: (key, value) pairs; nullopt when `r` is none.
  std::optional<std::vector<std::pair<std::string, Ref>>> Entries(Ref r) const {
    const pickle::Value& v = p_->at(r);
    std::vector<std::pair<std::string, Ref>> out;
    if (v.kind == Kind::kList || v.kind == Kind::kTuple) {
      for (size_t i = 0; i < v.items.size(); ++i) out.push_back({std::to_string(i), v.items[i]});
      return out;
    }
    const bool ordered = v.kind == Kind::kObject && p_->IsGlobal(v.callable, "collections", "OrderedDict");
    if (v.kind != Kind::kDict && !ordered) return std::nullopt;
    const size_t pairs = v.kind == Kind::kDict ? v.items.size() : v.appended_from;
    for (size_t i = 0; i + 1 < pairs; i += 2) {
      const pickle::Value& key = p_->at(v.items[i]);
      std::string name;
      if (key.kind == Kind::kString) {
        name = std::string(key.text);
      } else if (key.kind == Kind::kInt) {
        name = std::to_string(key.number);
      } else {
        name = "?";  // A key of another type: the entry is listed, not shown.
      }
      out.push_back({std::move(name), v.items[i + 1]});
    }
    return out;
  }

  std::string TypeOf(const pickle::Value& v) const {
    switch (v.kind) {
      case Kind::kNone: return "None";
      case Kind::kBool: return "bool";
      case Kind::kInt: case Kind::kBigInt: return "int";
      case Kind::kFloat: return "float";
      case Kind::kString: return "str";
      case Kind::kBytes: return "bytes";
      case Kind::kSet: return "set";
      case Kind::kGlobal: return "global " + std::string(v.text) + "." + std::string(v.name);
      case Kind::kPersistentId: return "persistent id";
      case Kind::kObject: {
        const pickle::Value& c = p_->at(v.callable);
        return c.kind == Kind::kGlobal ? std::string(c.text) + "." + std::string(c.name) : "object";
      }
      default: return "container";
    }
  }

  void Object(const std::string& key, const pickle::Value& v) {
    if (objects_ == kMaxObjectsListed) entry_["more_objects"] = true;
    if (objects_++ >= kMaxObjectsListed) return;
    nlohmann::json o = {{"key", key}, {"type", TypeOf(v)}};
    switch (v.kind) {
      case Kind::kBool: o["value"] = v.number != 0; break;
      case Kind::kInt: o["value"] = v.number; break;
      case Kind::kFloat: o["value"] = v.real; break;
      case Kind::kNone: o["value"] = nullptr; break;
      case Kind::kString:
        if (v.text.size() <= kMaxShownText) o["value"] = std::string(v.text);
        break;
      default: break;
    }
    entry_["objects"].push_back(std::move(o));
  }

  // Shows value `r` as entry `name` of view directory `dir`, its key path being `key`.
  void Walk(Ref r, uint32_t dir, const std::string& name, const std::string& key, size_t depth) {
    if (depth > kMaxDepth) return SkipKey(key, "nested too deep");
    const pickle::Value& v = p_->at(r);
    if (v.kind == Kind::kObject) {
      Result<PickledTensor> t = TensorAt(*p_, r);
      if (t.ok()) return AddTensor(*t, dir, name, key);
      if (t.status().err() != EINVAL) return SkipKey(key, t.status().message());
    }
    std::optional<std::vector<std::pair<std::string, Ref>>> entries = Entries(r);
    if (!entries) return Object(key, v);
    if (tree_.Has(dir, name) || Full(2)) return SkipKey(key, "its name is taken or the view is full");
    if (!on_path_.insert(r).second) return SkipKey(key, "it contains itself");
    const uint32_t d = tree_.AddDir(dir, name);
    tree_.AddText(d, kZgroupName, kZgroupText);
    for (const auto& [k, value] : *entries) {
      const std::string child_key = key.empty() ? k : key + "/" + k;
      if (k == "?") {
        SkipKey(child_key, "a key that is no string or int");
        continue;
      }
      Walk(value, d, EncodeViewName(k), child_key, depth + 1);
    }
    on_path_.erase(r);
  }

  void AddTensor(const PickledTensor& t, uint32_t dir, const std::string& name, const std::string& key) {
    auto skip = [&](const std::string& why) { SkipKey(key, why); };
    if (!t.Contiguous()) return skip("not dense in row-major order");
    const zip::Entry* storage = archive_.Storage(t.storage_key);
    if (!storage) return skip("its storage is missing or compressed");
    const uint64_t bytes = t.bytes();
    if (t.storage_end() > storage->size) return skip("runs past its storage");
    Result<uint64_t> at = zip::DataOffset(read_, file_.content.size(), *storage);
    if (!at.ok()) return skip(at.status().message());
    if (tree_.Has(dir, name) || Full(4)) return skip("its name is taken or the view is full");
    std::vector<uint64_t> chunks;
    for (uint64_t s : t.shape) chunks.push_back(std::max<uint64_t>(s, 1));
    const uint32_t d = tree_.AddDir(dir, name);
    tree_.AddText(d, ".zarray", ZarrayText(t.shape, chunks, t.dtype.zarr));
    nlohmann::json attrs = {{"key", key}, {"torch_dtype", t.dtype.torch}, {"file", file_.name}};
    if (t.dtype.raw) attrs["stored_as"] = "the raw bits of " + t.dtype.torch + " as " + t.dtype.zarr;
    tree_.AddText(d, ".zattrs", JsonText(attrs));
    if (bytes > 0) {
      tree_.AddRanges(d, ChunkKey(std::vector<uint64_t>(t.shape.size(), 0)), bytes,
                      {{0, source_, *at + t.storage_offset * t.dtype.itemsize, bytes}});
    }
    std::string path = name;
    for (uint32_t up = dir; up != 0; up = tree_.nodes[up].parent) path = tree_.nodes[up].name + "/" + path;
    entry_["tensors"].push_back({{"key", key}, {"path", path}, {"shape", t.shape}, {"dtype", t.dtype.zarr},
                                 {"torch_dtype", t.dtype.torch}, {"bytes", bytes}});
  }

  const std::string& path_;
  const int32_t source_;
  const ViewSource& file_;
  ViewTree& tree_;
  zip::ReadAt read_;
  TorchArchive archive_;
  const Pickle* p_ = nullptr;
  nlohmann::json entry_;
  size_t nodes_limit_ = 0;
  size_t skipped_ = 0;
  size_t objects_ = 0;
  std::set<Ref> on_path_;  // The containers being walked: one met again is a cycle.
};

}  // namespace

void AddTorchSaveView(const std::string& path, const std::vector<ViewSource>& sources, int32_t index,
                      ViewTree& tree) {
  TorchSaveBuilder(path, sources, index, tree).Build();
}

}  // namespace ckptfs
