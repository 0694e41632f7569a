#include "core/tensor_view/tensor_views.h"

#include <fcntl.h>
#include <limits.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <utility>

#include "core/tensor_view/dcp_metadata.h"
#include "core/tensor_view/pickle_reader.h"
#include "core/tensor_view/tensor_grid.h"
#include "core/tensor_view/torch_save.h"

namespace ckptfs {
namespace {

constexpr const char* kInfoName = "info.json";
constexpr const char* kZgroupName = ".zgroup";
constexpr size_t kMaxViews = 64;
constexpr size_t kMaxViewNodes = size_t{1} << 22;
constexpr const char* kDistcpSuffix = ".distcp";

// A run of a view file's bytes: [start, start + length) of the file is bytes [offset, ...) of
// source `source`, or zeros when source < 0.
struct Range {
  uint64_t start = 0;
  int32_t source = -1;
  uint64_t offset = 0;
  uint64_t length = 0;
};

struct ViewNode {
  std::string name;
  uint32_t parent = 0;
  bool dir = false;
  std::map<std::string, uint32_t> children;
  bool info = false;  // info.json: made at each getattr and open (durability changes).
  std::string text;
  std::vector<Range> ranges;
  uint64_t size = 0;
};

bool EndsWith(const std::string& s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

Status ReadSource(const FileContent& content, uint64_t offset, size_t length, char* out) {
  Result<size_t> n = content.ReadInto(offset, length, out);
  if (!n.ok()) return n.status();
  if (*n != length) return Status::Error(EBADMSG, "a stored range runs past its file");
  return Status::Ok();
}

}  // namespace

std::string EncodeViewName(const std::string& fqn) {
  static const char* kHex = "0123456789ABCDEF";
  std::string out;
  for (size_t i = 0; i < fqn.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(fqn[i]);
    if (c == '%' || c == '/' || c == '\0' || (i == 0 && c == '.')) {
      out += '%';
      out += kHex[c >> 4];
      out += kHex[c & 15];
    } else {
      out += static_cast<char>(c);
    }
  }
  if (out == kInfoName) out = "info%2Ejson";
  if (out.size() > NAME_MAX) {
    char hash[20];
    std::snprintf(hash, sizeof hash, "~%016zx", std::hash<std::string>{}(fqn));
    out = out.substr(0, 200) + hash;
  }
  return out;
}

std::string DecodeViewName(const std::string& name) {
  std::string out;
  for (size_t i = 0; i < name.size(); ++i) {
    unsigned value = 0;
    if (name[i] == '%' && i + 2 < name.size() &&
        std::from_chars(name.data() + i + 1, name.data() + i + 3, value, 16).ptr == name.data() + i + 3) {
      out += static_cast<char>(value);
      i += 2;
    } else {
      out += name[i];
    }
  }
  return out;
}

class TensorViews::View {
 public:
  uint64_t serial = 0;
  uint64_t dir_ino = 0;
  InodeRef dir;
  std::string path;
  // The files it reads (the .metadata first) and their versions when it was built.
  std::vector<InodeRef> sources;
  std::vector<std::string> source_names;
  std::vector<uint64_t> versions;
  std::vector<ViewNode> nodes;
  uint32_t uid = 0, gid = 0;
  timespec time{};
  // info.json without the durability of each entry, and the sources each entry reads.
  nlohmann::json info;
  std::vector<std::vector<int32_t>> info_sources;

  uint64_t Ino(uint32_t node) const { return kTensorViewInoBit | serial << 32 | node; }

  uint32_t Add(uint32_t parent, std::string name, ViewNode node) {
    node.name = name;
    node.parent = parent;
    nodes.push_back(std::move(node));
    const auto index = static_cast<uint32_t>(nodes.size() - 1);
    nodes[parent].children[std::move(name)] = index;
    return index;
  }
  uint32_t AddText(uint32_t parent, std::string name, std::string text) {
    ViewNode n;
    n.size = text.size();
    n.text = std::move(text);
    return Add(parent, std::move(name), std::move(n));
  }

  // info.json with each entry's durability now.
  std::string InfoText() const {
    nlohmann::json out = info;
    std::vector<bool> durable(sources.size());
    for (size_t i = 0; i < sources.size(); ++i) {
      MutexLock lock(sources[i]->mu);
      durable[i] = sources[i]->durable_version == sources[i]->version;
    }
    size_t k = 0;
    for (const char* list : {"tensors", "items"}) {
      for (nlohmann::json& entry : out[list]) {
        bool all = true;
        for (int32_t s : info_sources[k]) all = all && durable[static_cast<size_t>(s)];
        entry["durable"] = all;
        ++k;
      }
    }
    return out.dump(1) + "\n";
  }

  Attr AttrOf(uint32_t index) const {
    const ViewNode& n = nodes[index];
    Attr a;
    a.ino = Ino(index);
    a.mode = n.dir ? (S_IFDIR | 0555) : (S_IFREG | 0444);
    a.nlink = n.dir ? 2 : 1;
    a.uid = uid;
    a.gid = gid;
    a.size = n.info ? InfoText().size() : n.size;
    a.atime = a.mtime = a.ctime = time;
    a.no_blocks = true;
    return a;
  }
};

struct TensorViews::OpenView {
  std::shared_ptr<const View> view;
  uint32_t node = 0;
  std::string text;  // info.json as opened.
};

namespace {

// Builds a view's nodes from a DCP checkpoint.
class DcpBuilder {
 public:
  DcpBuilder(TensorViews::View& view, const std::vector<TensorViews::SourceFile>& files)
      : view_(view), files_(files) {}

  void Build(const DcpCheckpoint& ck) {
    view_.info = {{"format", "dcp"}, {"checkpoint", view_.path}, {"tensors", nlohmann::json::array()},
                  {"items", nlohmann::json::array()}, {"skipped", nlohmann::json::array()}};
    view_.info_sources.clear();
    for (const auto& [fqn, why] : ck.skipped) Skip(fqn, why);
    for (const DcpTensor& t : ck.tensors) {
      std::string why = AddTensor(t);
      if (!why.empty()) Skip(t.fqn, why);
    }
    for (const DcpItem& item : ck.items) {
      std::string why = AddItem(item);
      if (!why.empty()) Skip(item.fqn, why);
    }
    view_.AddText(0, kZgroupName, "{\n \"zarr_format\": 2\n}\n");
    ViewNode info;
    info.info = true;
    view_.Add(0, kInfoName, std::move(info));
  }

 private:
  void Skip(const std::string& fqn, const std::string& why) {
    spdlog::info("{}/{}: {} not shown: {}", view_.path, kTensorViewName, fqn, why);
    view_.info["skipped"].push_back({{"fqn", fqn}, {"reason", why}});
  }

  int32_t SourceNamed(const std::string& name) const {
    for (size_t i = 0; i < files_.size(); ++i) {
      if (files_[i].name == name) return static_cast<int32_t>(i + 1);  // 0 is the .metadata.
    }
    return -1;
  }

  // Where shard `shard` of `t`, stored as a torch.save of one tensor (or as its raw bytes),
  // has its elements in its file; or why it cannot be served.
  Result<uint64_t> ShardData(const DcpTensor& t, const DcpShard& shard, const DtypeInfo& dtype,
                             const FileContent& content) {
    const StoredRange& r = shard.stored;
    if (r.offset > content.size() || r.length > content.size() - r.offset) {
      return Status::Error(EBADMSG, r.file + " is shorter than .metadata says");
    }
    uint64_t numel = 1;
    for (uint64_t s : shard.sizes) numel *= s;
    char magic[4] = {};
    if (r.length >= 4) {
      Status st = ReadSource(content, r.offset, 4, magic);
      if (!st.ok()) return st;
    }
    if (std::string_view(magic, 4) != std::string_view("PK\x03\x04", 4)) {
      if (r.length == numel * dtype.itemsize) return r.offset;
      return Status::Error(EBADMSG, "a shard is neither a torch.save archive nor raw bytes");
    }
    zip::ReadAt read = [&](uint64_t offset, size_t length, char* out) {
      return ReadSource(content, r.offset + offset, length, out);
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
    if ((pt->storage_offset + numel) * dtype.itemsize > storage->size) {
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
      Result<uint64_t> base = ShardData(t, shard, *dtype, files_[static_cast<size_t>(source - 1)].content);
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
    if (view_.nodes.size() + grid.total_chunks() + 3 > kMaxViewNodes) return "the view has too many files";
    uint64_t chunk_bytes = dtype->itemsize;
    for (uint64_t c : grid.chunks) chunk_bytes *= c;
    // Every chunk's pieces first: a tensor is shown whole or not at all.
    std::vector<std::pair<std::string, std::vector<Range>>> chunks;
    std::vector<uint64_t> index(t.shape.size(), 0);
    for (uint64_t k = 0; k < grid.total_chunks(); ++k) {
      std::optional<std::vector<Piece>> pieces = ChunkPieces(t.shape, dtype->itemsize, grid, index, boxes);
      if (!pieces) return "its shards make chunks of too many pieces";
      std::vector<Range> ranges;
      uint64_t at = 0;
      for (const Piece& p : *pieces) {
        Range r{at, -1, 0, p.length};
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
    const std::string name = EncodeViewName(t.fqn);
    ViewNode dir;
    dir.dir = true;
    const uint32_t d = view_.Add(0, name, std::move(dir));
    nlohmann::json zarray = {{"zarr_format", 2}, {"shape", t.shape}, {"chunks", grid.chunks},
                             {"dtype", dtype->zarr}, {"compressor", nullptr}, {"fill_value", 0},
                             {"order", "C"}, {"filters", nullptr}, {"dimension_separator", "."}};
    view_.AddText(d, ".zarray", zarray.dump(4) + "\n");
    nlohmann::json attrs = {{"fqn", t.fqn}, {"torch_dtype", t.dtype}, {"grid", grid.name()},
                            {"shards", t.shards.size()}, {"files", files}};
    if (dtype->raw) attrs["stored_as"] = "the raw bits of " + t.dtype + " as " + dtype->zarr;
    if (grid.kind == TensorGrid::Kind::kFinest) {
      attrs["note"] = "the shards form no regular grid: each chunk is a cell of the finest grid of their boundaries";
    } else if (grid.kind == TensorGrid::Kind::kWhole) {
      attrs["note"] = "the shards' finest grid has too many cells: one chunk of the whole tensor";
    }
    view_.AddText(d, ".zattrs", attrs.dump(4) + "\n");
    for (auto& [key, ranges] : chunks) {
      ViewNode chunk;
      chunk.size = chunk_bytes;
      chunk.ranges = std::move(ranges);
      view_.Add(d, key, std::move(chunk));
    }
    uint64_t bytes = dtype->itemsize;
    for (uint64_t s : t.shape) bytes *= s;
    view_.info["tensors"].push_back({{"fqn", t.fqn}, {"path", name}, {"shape", t.shape},
                                     {"dtype", dtype->zarr}, {"torch_dtype", t.dtype},
                                     {"bytes", bytes}, {"shards", t.shards.size()},
                                     {"grid", grid.name()}});
    view_.info_sources.push_back(used);
    return "";
  }

  std::string AddItem(const DcpItem& item) {
    if (item.stored.transformed) return "stored through a transform (compressed or encrypted)";
    const int32_t source = SourceNamed(item.stored.file);
    if (source < 0) return item.stored.file + " is missing";
    const FileContent& content = files_[static_cast<size_t>(source - 1)].content;
    if (item.stored.offset > content.size() || item.stored.length > content.size() - item.stored.offset) {
      return item.stored.file + " is shorter than .metadata says";
    }
    if (view_.nodes.size() + 1 > kMaxViewNodes) return "the view has too many files";
    const std::string name = EncodeViewName(item.fqn);
    ViewNode file;
    file.size = item.stored.length;
    file.ranges.push_back({0, source, item.stored.offset, item.stored.length});
    view_.Add(0, name, std::move(file));
    view_.info["items"].push_back({{"fqn", item.fqn}, {"path", name}, {"bytes", item.stored.length}});
    view_.info_sources.push_back({source});
    return "";
  }

  TensorViews::View& view_;
  const std::vector<TensorViews::SourceFile>& files_;
};

}  // namespace

Result<TensorViews::Found> TensorViews::FindLocked(const InodeRef& dir) {
  Result<InodeRef> metadata = ns_.ChildLocked(dir, kDcpMetadataName);
  if (!metadata.ok() || (*metadata)->type != FileType::kRegular) {
    return Status::Error(ENOENT, "no checkpoint here");
  }
  {
    MutexLock lock((*metadata)->mu);
    if ((*metadata)->sealed_version != (*metadata)->version) {
      return Status::Error(ENOENT, "its .metadata is being written");
    }
  }
  std::shared_ptr<const View> current;
  {
    MutexLock lock(mu_);
    if (auto it = by_dir_.find(dir.get()); it != by_dir_.end()) current = by_serial_.at(it->second);
  }
  if (current) {
    bool same = true;
    for (size_t i = 0; i < current->sources.size() && same; ++i) {
      auto child = dir->children.find(current->source_names[i]);
      same = child != dir->children.end() && child->second == current->sources[i];
      if (same) {
        MutexLock lock(current->sources[i]->mu);
        same = current->sources[i]->version == current->versions[i];
      }
    }
    if (same) return Found{current->AttrOf(0), {}};
  }
  Found found;
  Checkpoint& ck = found.checkpoint;
  ck.dir = dir;
  ck.path = ns_.PathLocked(dir);
  ns_.LoadDirLocked(dir);
  auto take = [&](const InodeRef& inode, const std::string& name) -> std::optional<SourceFile> {
    if (!ns_.LoadOriginLocked(inode).ok()) return std::nullopt;
    MutexLock lock(inode->mu);
    return SourceFile{inode, name, inode->version, inode->content};
  };
  std::optional<SourceFile> meta = take(*metadata, kDcpMetadataName);
  if (!meta) return Status::Error(EIO, ck.path + "/.metadata cannot be read");
  ck.metadata = std::move(*meta);
  for (const auto& [name, child] : dir->children) {
    if (child->type != FileType::kRegular || !EndsWith(name, kDistcpSuffix)) continue;
    if (std::optional<SourceFile> file = take(child, name)) ck.files.push_back(std::move(*file));
  }
  return found;
}

Result<Attr> TensorViews::Build(Checkpoint ck) {
  const uint64_t meta_size = ck.metadata.content.size();
  if (meta_size > kMaxDcpMetadataBytes) return Status::Error(EFBIG, ck.path + "/.metadata is too large");
  std::string bytes(static_cast<size_t>(meta_size), '\0');
  Status st = ReadSource(ck.metadata.content, 0, bytes.size(), bytes.data());
  if (!st.ok()) return st;
  auto view = std::make_shared<View>();
  view->dir = ck.dir;
  view->dir_ino = ck.dir->ino;
  view->path = ck.path;
  {
    MutexLock lock(ck.metadata.inode->mu);
    view->uid = ck.metadata.inode->uid;
    view->gid = ck.metadata.inode->gid;
    view->time = ck.metadata.inode->mtime;
  }
  view->sources.push_back(ck.metadata.inode);
  view->source_names.push_back(ck.metadata.name);
  view->versions.push_back(ck.metadata.version);
  for (const SourceFile& f : ck.files) {
    view->sources.push_back(f.inode);
    view->source_names.push_back(f.name);
    view->versions.push_back(f.version);
  }
  ViewNode root;
  root.dir = true;
  view->nodes.push_back(std::move(root));
  Result<DcpCheckpoint> dcp = ReadDcpMetadata(bytes);
  if (!dcp.ok()) {
    // A .metadata that is not DCP's: an empty view that says why.
    spdlog::warn("{}/.metadata: {}: its {} is empty", ck.path, dcp.status().ToString(), kTensorViewName);
    view->info = {{"format", "dcp"}, {"checkpoint", ck.path}, {"tensors", nlohmann::json::array()},
                  {"items", nlohmann::json::array()}, {"error", dcp.status().message()}};
    ViewNode info;
    info.info = true;
    view->Add(0, kInfoName, std::move(info));
  } else {
    DcpBuilder(*view, ck.files).Build(*dcp);
  }
  MutexLock lock(mu_);
  view->serial = next_serial_++;
  if (auto it = by_dir_.find(ck.dir.get()); it != by_dir_.end()) by_serial_.erase(it->second);
  while (by_serial_.size() >= kMaxViews) {
    auto oldest = std::min_element(by_serial_.begin(), by_serial_.end(),
                                   [](const auto& a, const auto& b) { return a.first < b.first; });
    by_dir_.erase(oldest->second->dir.get());
    by_serial_.erase(oldest);
  }
  by_serial_[view->serial] = view;
  by_dir_[ck.dir.get()] = view->serial;
  return view->AttrOf(0);
}

Result<std::pair<std::shared_ptr<const TensorViews::View>, uint32_t>> TensorViews::Node(uint64_t ino) const {
  const uint64_t serial = (ino & ~kTensorViewInoBit) >> 32;
  const auto index = static_cast<uint32_t>(ino & 0xFFFFFFFF);
  MutexLock lock(mu_);
  auto it = by_serial_.find(serial);
  if (it == by_serial_.end() || index >= it->second->nodes.size()) {
    return Status::Error(ESTALE, "a replaced view of a checkpoint");
  }
  return std::pair{it->second, index};
}

Result<Attr> TensorViews::Lookup(uint64_t parent, const std::string& name) {
  auto node = Node(parent);
  if (!node.ok()) return node.status();
  const auto& [view, index] = *node;
  const ViewNode& dir = view->nodes[index];
  if (!dir.dir) return Status::Error(ENOTDIR, name);
  auto child = dir.children.find(name);
  if (child == dir.children.end()) return Status::Error(ENOENT, name);
  return view->AttrOf(child->second);
}

Result<Attr> TensorViews::GetAttr(uint64_t ino) {
  auto node = Node(ino);
  if (!node.ok()) return node.status();
  return node->first->AttrOf(node->second);
}

Result<std::vector<DirEntry>> TensorViews::List(uint64_t ino) {
  auto node = Node(ino);
  if (!node.ok()) return node.status();
  const auto& [view, index] = *node;
  const ViewNode& dir = view->nodes[index];
  if (!dir.dir) return Status::Error(ENOTDIR, "not a directory");
  std::vector<DirEntry> out;
  out.push_back({".", ino, S_IFDIR});
  out.push_back({"..", index == 0 ? view->dir_ino : view->Ino(dir.parent), S_IFDIR});
  for (const auto& [name, child] : dir.children) {
    out.push_back({name, view->Ino(child), view->nodes[child].dir ? uint32_t{S_IFDIR} : uint32_t{S_IFREG}});
  }
  return out;
}

Result<std::shared_ptr<const TensorViews::OpenView>> TensorViews::Open(uint64_t ino, int flags) {
  auto node = Node(ino);
  if (!node.ok()) return node.status();
  const auto& [view, index] = *node;
  if ((flags & O_ACCMODE) != O_RDONLY || (flags & O_TRUNC)) {
    return Status::Error(EROFS, "a view of a checkpoint is read-only");
  }
  if (view->nodes[index].dir) return Status::Error(EISDIR, "a directory");
  auto open = std::make_shared<OpenView>();
  open->view = view;
  open->node = index;
  if (view->nodes[index].info) open->text = view->InfoText();
  return std::shared_ptr<const OpenView>(std::move(open));
}

bool TensorViews::Generated(const OpenView& file) { return file.view->nodes[file.node].info; }

Attr TensorViews::AttrOf(const OpenView& file) {
  Attr a = file.view->AttrOf(file.node);
  if (file.view->nodes[file.node].info) a.size = file.text.size();
  return a;
}

Result<ReadData> TensorViews::Read(const OpenView& file, uint64_t offset, size_t size) {
  const View& view = *file.view;
  const ViewNode& node = view.nodes[file.node];
  ReadData out;
  if (node.info || node.ranges.empty()) {
    const std::string& text = node.info ? file.text : node.text;
    if (offset < text.size()) out.owned = text.substr(offset, size);
    return out;
  }
  if (offset >= node.size) return out;
  const uint64_t end = std::min<uint64_t>(offset + size, node.size);
  auto it = std::upper_bound(node.ranges.begin(), node.ranges.end(), offset,
                             [](uint64_t at, const Range& r) { return at < r.start; });
  --it;
  NamespaceLock lock(ns_.mutex());
  for (uint64_t at = offset; at < end; ++it) {
    const Range& r = *it;
    const uint64_t skip = at - r.start;
    const uint64_t length = std::min(r.length - skip, end - at);
    if (r.source < 0) {
      ReadSegment zeros;
      zeros.length = static_cast<size_t>(length);
      out.segments.push_back(std::move(zeros));
    } else {
      const InodeRef& src = view.sources[static_cast<size_t>(r.source)];
      Status st = ns_.LoadOriginLocked(src);
      if (!st.ok()) return st;
      MutexLock ilock(src->mu);
      if (src->version != view.versions[static_cast<size_t>(r.source)] || src->names.empty()) {
        return Status::Error(ESTALE, view.path + ": the checkpoint changed since its view was made");
      }
      for (ReadSegment& s : src->content.Read(r.offset + skip, static_cast<size_t>(length))) {
        out.segments.push_back(std::move(s));
      }
    }
    at += length;
  }
  return out;
}

size_t TensorViews::size() const {
  MutexLock lock(mu_);
  return by_serial_.size();
}

}  // namespace ckptfs
