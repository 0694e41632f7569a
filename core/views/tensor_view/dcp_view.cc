#include "core/views/tensor_view/dcp_view.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <optional>

#include "core/views/tensor_view/pickle_reader.h"
#include "core/views/tensor_view/tensor_grid.h"
#include "core/views/tensor_view/torch_save.h"

namespace ckptfs {
namespace {

class DcpBuilder {
 public:
  DcpBuilder(const std::string& path, const std::vector<ViewSource>& sources, ViewTree& tree)
      : path_(path), sources_(sources), tree_(tree) {}

  void Build(const DcpCheckpoint& ck) {
    for (const auto& [fqn, why] : ck.skipped) Skip(fqn, why);
    for (const DcpTensor& t : ck.tensors) {
      std::string why = AddTensor(t);
      if (!why.empty()) Skip(t.fqn, why);
    }
    for (const DcpItem& item : ck.items) {
      std::string why = AddItem(item);
      if (!why.empty()) Skip(item.fqn, why);
    }
  }

 private:
  void Skip(const std::string& fqn, const std::string& why) {
    spdlog::info("{}: {} not shown in its tensor view: {}", path_, fqn, why);
    tree_.info["skipped"].push_back({{"fqn", fqn}, {"reason", why}});
  }

  int32_t SourceNamed(const std::string& name) const {
    for (size_t i = 0; i < sources_.size(); ++i) {
      if (sources_[i].name == name) return static_cast<int32_t>(i);
    }
    return -1;
  }

  // Where the elements of `shard`, stored as a torch.save of one tensor (or as its raw bytes),
  // start in its file; or why it cannot be served.
  static Result<uint64_t> ShardData(const DcpShard& shard, const DtypeInfo& dtype, const FileContent& content) {
    const StoredRange& r = shard.stored;
    if (r.offset > content.size() || r.length > content.size() - r.offset) {
      return Status::Error(EBADMSG, r.file + " is shorter than .metadata says");
    }
    uint64_t numel = 1;
    for (uint64_t s : shard.sizes) numel *= s;
    char magic[4] = {};
    if (r.length >= 4) {
      Status st = ReadSourceRange(content, r.offset, 4, magic);
      if (!st.ok()) return st;
    }
    if (std::string_view(magic, 4) != std::string_view("PK\x03\x04", 4)) {
      if (r.length == numel * dtype.itemsize) return r.offset;
      return Status::Error(EBADMSG, "a shard is neither a torch.save archive nor raw bytes");
    }
    zip::ReadAt read = [&](uint64_t offset, size_t length, char* out) {
      return ReadSourceRange(content, r.offset + offset, length, out);
    };
    Result<TorchArchive> archive = ReadTorchArchive(read, r.length);
    if (!archive.ok()) return archive.status();
    Result<std::string> data_pkl = ReadDataPickle(*archive, read, r.length);
    if (!data_pkl.ok()) return data_pkl.status();
    Result<pickle::Pickle> p = pickle::Pickle::Read(*data_pkl);
    if (!p.ok()) return p.status();
    Result<PickledTensor> pt = TensorAt(*p, p->root());
    if (!pt.ok()) return pt.status();
    if (pt->dtype.torch != dtype.torch || pt->shape != shard.sizes || !pt->Contiguous()) {
      return Status::Error(EBADMSG, "a shard's tensor differs from .metadata (or is not dense)");
    }
    const zip::Entry* storage = archive->Storage(pt->storage_key);
    if (!storage) return Status::Error(EBADMSG, "a shard's storage is missing or compressed");
    Result<uint64_t> at = zip::DataOffset(read, r.length, *storage);
    if (!at.ok()) return at.status();
    if (pt->storage_end() > storage->size) {
      return Status::Error(EBADMSG, "a shard's tensor runs past its storage");
    }
    return r.offset + *at + pt->storage_offset * dtype.itemsize;
  }

  std::string AddTensor(const DcpTensor& t) {
    std::optional<DtypeInfo> dtype = DtypeNamed(t.dtype);
    if (!dtype) return "dtype " + t.dtype + " not served";
    std::vector<Box> boxes;
    std::vector<int32_t> shard_source;
    std::vector<uint64_t> shard_base;
    std::vector<int32_t> used;
    std::vector<std::string> files;
    for (const DcpShard& shard : t.shards) {
      if (shard.stored.transformed) return "stored through a transform (compressed or encrypted)";
      const int32_t source = SourceNamed(shard.stored.file);
      if (source < 0) return shard.stored.file + " is missing";
      Result<uint64_t> base = ShardData(shard, *dtype, sources_[static_cast<size_t>(source)].content);
      if (!base.ok()) return base.status().message();
      boxes.push_back({shard.offsets, shard.sizes});
      shard_source.push_back(source);
      shard_base.push_back(*base);
      if (std::find(used.begin(), used.end(), source) == used.end()) {
        used.push_back(source);
        files.push_back(shard.stored.file);
      }
    }
    const TensorGrid grid = ChooseGrid(t.shape, boxes);
    const std::string name = EncodeViewName(t.fqn);
    if (tree_.Full(grid.total_chunks() + 3)) return "the view has too many files";
    if (tree_.Has(0, name)) return "its name is taken";
    uint64_t chunk_bytes = dtype->itemsize;
    for (uint64_t c : grid.chunks) chunk_bytes *= c;
    // Every chunk's ranges first: a tensor is shown whole or not at all.
    std::vector<std::pair<std::string, std::vector<ViewRange>>> chunks;
    std::vector<uint64_t> index(t.shape.size(), 0);
    for (uint64_t k = 0; k < grid.total_chunks(); ++k) {
      std::optional<std::vector<Piece>> pieces = ChunkPieces(t.shape, dtype->itemsize, grid, index, boxes);
      if (!pieces) return "its shards make chunks of too many pieces";
      std::vector<ViewRange> ranges;
      uint64_t at = 0;
      for (const Piece& p : *pieces) {
        ViewRange r{at, -1, 0, p.length};
        if (p.shard != Piece::kZeros) {
          r.source = shard_source[static_cast<size_t>(p.shard)];
          r.offset = shard_base[static_cast<size_t>(p.shard)] + p.offset;
        }
        ranges.push_back(r);
        at += p.length;
      }
      chunks.push_back({ChunkKey(index), std::move(ranges)});
      for (size_t a = index.size(); a-- > 0;) {
        if (++index[a] < grid.counts[a]) break;
        index[a] = 0;
      }
    }
    const uint32_t d = tree_.AddDir(0, name);
    tree_.AddText(d, ".zarray", ZarrayText(t.shape, grid.chunks, dtype->zarr));
    nlohmann::json attrs = {{"fqn", t.fqn}, {"torch_dtype", t.dtype}, {"grid", grid.name()},
                            {"shards", t.shards.size()}, {"files", files}};
    if (dtype->raw) attrs["stored_as"] = "the raw bits of " + t.dtype + " as " + dtype->zarr;
    if (grid.kind == TensorGrid::Kind::kFinest) {
      attrs["note"] = "the shards form no regular grid: each chunk is a cell of the finest grid of their boundaries";
    } else if (grid.kind == TensorGrid::Kind::kWhole) {
      attrs["note"] = "the shards' finest grid has too many cells: one chunk of the whole tensor";
    }
    tree_.AddText(d, ".zattrs", JsonText(attrs));
    for (auto& [key, ranges] : chunks) tree_.AddRanges(d, key, chunk_bytes, std::move(ranges));
    uint64_t bytes = dtype->itemsize;
    for (uint64_t s : t.shape) bytes *= s;
    tree_.info["tensors"].push_back({{"fqn", t.fqn}, {"path", name}, {"shape", t.shape},
                                     {"dtype", dtype->zarr}, {"torch_dtype", t.dtype},
                                     {"bytes", bytes}, {"shards", t.shards.size()},
                                     {"grid", grid.name()}, {"_sources", used}});
    return "";
  }

  std::string AddItem(const DcpItem& item) {
    if (item.stored.transformed) return "stored through a transform (compressed or encrypted)";
    const int32_t source = SourceNamed(item.stored.file);
    if (source < 0) return item.stored.file + " is missing";
    const FileContent& content = sources_[static_cast<size_t>(source)].content;
    if (item.stored.offset > content.size() || item.stored.length > content.size() - item.stored.offset) {
      return item.stored.file + " is shorter than .metadata says";
    }
    const std::string name = EncodeViewName(item.fqn);
    if (tree_.Full(1)) return "the view has too many files";
    if (tree_.Has(0, name)) return "its name is taken";
    tree_.AddRanges(0, name, item.stored.length, {{0, source, item.stored.offset, item.stored.length}});
    tree_.info["items"].push_back({{"fqn", item.fqn}, {"path", name}, {"bytes", item.stored.length},
                                   {"_sources", {source}}});
    return "";
  }

  const std::string& path_;
  const std::vector<ViewSource>& sources_;
  ViewTree& tree_;
};

}  // namespace

void AddDcpView(const std::string& path, const DcpCheckpoint& ck, const std::vector<ViewSource>& sources,
                ViewTree& tree) {
  DcpBuilder(path, sources, tree).Build(ck);
}

}  // namespace ckptfs
