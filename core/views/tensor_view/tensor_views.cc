#include "core/views/tensor_view/tensor_views.h"

#include <fcntl.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <ctime>
#include <nlohmann/json.hpp>
#include <utility>

#include "core/base/nanos.h"
#include "core/base/serve_policy.h"
#include "core/integrity/checksum.h"
#include "core/integrity/checksum_record.h"
#include "core/integrity/verifier.h"
#include "core/views/tensor_view/dcp_metadata.h"
#include "core/views/tensor_view/dcp_view.h"
#include "core/views/tensor_view/torch_save_view.h"
#include "core/views/tensor_view/view_tree.h"

namespace ckptfs {
namespace {

constexpr size_t kMaxViews = 64;
constexpr size_t kMaxViewSources = 65536;  // Each holds a backing descriptor while shown.

// The files a view reads: DCP's, and torch.save files by their usual names.
bool IsDcpData(const std::string& name) { return name.ends_with(".distcp"); }
bool IsTorchSave(const std::string& name) {
  return name.ends_with(".pt") || name.ends_with(".pth") || name.ends_with(".bin");
}

// Replaces each "_sources" of `j` by "durable": whether all those sources are.
void ShowDurability(nlohmann::json& j, const std::vector<bool>& durable) {
  if (j.is_array()) {
    for (nlohmann::json& item : j) ShowDurability(item, durable);
    return;
  }
  if (!j.is_object()) return;
  if (auto it = j.find("_sources"); it != j.end()) {
    bool all = true;
    for (const nlohmann::json& s : *it) all = all && durable.at(s.get<size_t>());
    j.erase(it);
    j["durable"] = all;
  }
  for (auto& [key, value] : j.items()) ShowDurability(value, durable);
}

// `unix_ns` as ISO 8601 UTC to the millisecond.
std::string UtcText(int64_t unix_ns) {
  const time_t seconds = static_cast<time_t>(unix_ns / 1000000000);
  tm utc{};
  gmtime_r(&seconds, &utc);
  char text[32];
  const size_t n = std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%S", &utc);
  return fmt::format("{}.{:03d}Z", std::string_view(text, n), (unix_ns / 1000000) % 1000);
}

}  // namespace

class TensorViews::View {
 public:
  uint64_t serial = 0;
  uint64_t dir_ino = 0;
  InodeRef dir;
  std::string path;
  size_t dir_entries = 0;  // The directory's entries when built: a new file makes a new view.
  // The files it reads and what they were when it was built (ViewRange::source indexes them).
  std::vector<InodeRef> sources;
  std::vector<std::string> source_names;
  std::vector<Stamp> stamps;
  ViewTree tree;
  uint32_t uid = 0, gid = 0;
  timespec time{};
  Env* env = nullptr;  // Reads the sources' checksum records.

  uint64_t Ino(uint32_t node) const { return kTensorViewInoBit | serial << 32 | node; }

  // info.json with each entry's durability now, and each source file's checksum and the
  // daemon's last check of it.
  std::string InfoText() const {
    std::vector<bool> durable(sources.size());
    nlohmann::json files = nlohmann::json::object();
    for (size_t i = 0; i < sources.size(); ++i) {
      bool is_durable = false;
      files[source_names[i]] = SourceIntegrity(i, &is_durable);
      durable[i] = is_durable;
    }
    nlohmann::json out = tree.info;
    ShowDurability(out, durable);
    out["sources"] = std::move(files);
    return JsonText(out, 1);
  }

  // What info.json shows of source `i`: whether it is durable, its whole CRC32C from its
  // record, and the daemon's last check of its stored bytes. The record of a version is read
  // from its backing file once (then kept on the inode), never the file's bytes.
  nlohmann::json SourceIntegrity(size_t i, bool* durable) const {
    Inode& inode = *sources[i];
    const uint64_t version = stamps[i].version;
    std::optional<std::string> record;
    std::shared_ptr<BackingFile> to_read;
    std::optional<Inode::StoredCheck> check;
    std::string why_none;
    {
      MutexLock lock(inode.mu);
      *durable = inode.durable_version == inode.version;
      const bool current = inode.version == version;
      if (*durable && current) {
        const std::shared_ptr<BackingFile>& base = inode.content.base();
        if (inode.checksum && inode.checksum->version == version &&
            (inode.checksum->from_flusher || inode.checksum->read_from.lock() == base)) {
          record = inode.checksum->record;
          why_none = inode.checksum->why_none;
        } else if (base && !base->spill()) {
          to_read = base;
        }
      }
      if (current && inode.last_check && inode.last_check->version == version) {
        check = *inode.last_check;
      }
    }
    if (to_read) {
      Result<ChecksumRecord> read = ReadChecksumRecord(*env, to_read->fd());
      record = read.ok() ? FormatChecksumRecord(*read) : std::string();
      const int err = read.ok() ? 0 : read.status().err();
      if (err != 0 && err != ENODATA && err != ENOTSUP) why_none = read.status().message();
      MutexLock lock(inode.mu);
      if (inode.version == version) {
        inode.checksum =
            Inode::ChecksumNote{version, *record, to_read, /*from_flusher=*/false, why_none};
      }
    }
    if (why_none.empty()) why_none = *durable ? "no checksum record" : "not durable yet";
    nlohmann::json j = {{"durable", *durable}, {"crc32c", nullptr}};
    if (record && !record->empty()) {
      Result<ChecksumRecord> parsed = ParseChecksumRecord(*record);
      if (parsed.ok()) {
        j["crc32c"] = fmt::format("{:08x}", WholeFileCrc32c(*parsed));
        j["checksum_chunks"] = parsed->sums.size();
      } else {
        why_none = parsed.status().message();
      }
    }
    if (j["crc32c"].is_null()) j["no_checksum"] = why_none;
    if (check) {
      j["last_verification"] = {{"result", check->matched ? "ok" : "mismatch"},
                                {"by", check->by},
                                {"at", UtcText(check->at_unix_ns)}};
    }
    return j;
  }

  Attr AttrOf(uint32_t index) const {
    const ViewNode& n = tree.nodes[index];
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
  mutable std::atomic<uint64_t> read_ahead_until{0};  // Of the view file.
};

TensorViews::Stamp TensorViews::StampOf(const Inode& inode) {
  return Stamp{inode.version, inode.content.size(), NanosOf(inode.mtime)};
}

Result<TensorViews::Found> TensorViews::FindLocked(const InodeRef& dir) {
  ns_.LoadDirLocked(dir);
  // A view still current (every file it reads there and unchanged) needs no look at the rest:
  // this runs at every path walk through the view.
  std::shared_ptr<const View> current;
  {
    MutexLock lock(mu_);
    if (auto it = by_dir_.find(dir.get()); it != by_dir_.end()) current = by_serial_.at(it->second);
  }
  if (current && current->dir_entries == dir->children.size()) {
    bool same = true;
    for (size_t i = 0; i < current->sources.size() && same; ++i) {
      auto child = dir->children.find(current->source_names[i]);
      same = child != dir->children.end() && child->second == current->sources[i];
      if (same) {
        MutexLock lock(current->sources[i]->mu);
        same = StampOf(*current->sources[i]) == current->stamps[i];
      }
    }
    if (same) return Found{current->AttrOf(0), {}};
  }
  auto sealed = [](const InodeRef& inode) {
    MutexLock lock(inode->mu);
    return inode->sealed_version == inode->version;
  };
  // What the view reads: a sealed .metadata, or sealed torch.save files.
  auto metadata = dir->children.find(kDcpMetadataName);
  const bool dcp = metadata != dir->children.end() && metadata->second->type == FileType::kRegular &&
                   sealed(metadata->second);
  bool torch_save = false;
  for (const auto& [name, child] : dir->children) {
    if (IsTorchSave(name) && child->type == FileType::kRegular && sealed(child)) torch_save = true;
  }
  if (!dcp && !torch_save) return Status::Error(ENOENT, "no checkpoint here");
  Found found;
  Checkpoint& ck = found.checkpoint;
  ck.dir = dir;
  ck.path = ns_.PathLocked(dir);
  ck.dir_entries = dir->children.size();
  ck.metadata = -1;
  for (const auto& [name, child] : dir->children) {
    const bool wanted = (dcp && (name == kDcpMetadataName || IsDcpData(name))) || IsTorchSave(name);
    if (!wanted || child->type != FileType::kRegular || !sealed(child)) continue;
    if (ck.files.size() == kMaxViewSources) break;  // The rest are missing from the view.
    if (!ns_.LoadOriginLocked(child).ok()) continue;  // Its view says it is missing.
    if (name == kDcpMetadataName) ck.metadata = static_cast<int32_t>(ck.files.size());
    MutexLock lock(child->mu);
    ck.files.push_back(SourceFile{child, name, StampOf(*child), child->content});
  }
  if (dcp && ck.metadata < 0) return Status::Error(EIO, ck.path + "/.metadata cannot be read");
  return found;
}

Result<Attr> TensorViews::Build(Checkpoint ck) {
  // One build at a time: lookups that found no current view at once build it once.
  MutexLock building(build_mu_);
  {
    MutexLock lock(mu_);
    if (auto it = by_dir_.find(ck.dir.get()); it != by_dir_.end()) {
      const View& built = *by_serial_.at(it->second);
      bool same = built.dir_entries == ck.dir_entries && built.sources.size() == ck.files.size();
      for (size_t i = 0; i < ck.files.size() && same; ++i) {
        same = built.sources[i] == ck.files[i].inode && built.stamps[i] == ck.files[i].stamp;
      }
      if (same) return built.AttrOf(0);
    }
  }
  auto view = std::make_shared<View>();
  view->dir = ck.dir;
  view->dir_ino = ck.dir->ino;
  view->path = ck.path;
  view->dir_entries = ck.dir_entries;
  view->env = &env_;
  std::vector<ViewSource> sources;
  for (const SourceFile& f : ck.files) {
    view->sources.push_back(f.inode);
    view->source_names.push_back(f.name);
    view->stamps.push_back(f.stamp);
    sources.push_back(ViewSource{f.name, f.content});
  }
  // The view's owner and times: its .metadata's, else its directory's.
  const InodeRef& owner = ck.metadata >= 0 ? ck.files[static_cast<size_t>(ck.metadata)].inode : ck.dir;
  {
    MutexLock lock(owner->mu);
    view->uid = owner->uid;
    view->gid = owner->gid;
    view->time = owner->mtime;
  }
  ViewTree& tree = view->tree;
  tree.info = {{"checkpoint", ck.path}, {"format", ck.metadata >= 0 ? "dcp" : "torch.save"}};
  if (ck.metadata >= 0) {
    for (const char* list : {"tensors", "items", "skipped"}) tree.info[list] = nlohmann::json::array();
    const FileContent& content = sources[static_cast<size_t>(ck.metadata)].content;
    Result<DcpCheckpoint> dcp = Status::Error(EFBIG, ".metadata is too large");
    if (content.size() <= kMaxDcpMetadataBytes) {
      std::string bytes(static_cast<size_t>(content.size()), '\0');
      Status st = ReadSourceRange(content, 0, bytes.size(), bytes.data());
      dcp = st.ok() ? ReadDcpMetadata(bytes) : Result<DcpCheckpoint>(st);
    }
    if (dcp.ok()) {
      AddDcpView(ck.path, *dcp, sources, tree);
    } else {
      spdlog::warn("{}/.metadata: {}: its {} shows no DCP tensors", ck.path, dcp.status().ToString(),
                   kTensorViewName);
      tree.info["error"] = ".metadata: " + dcp.status().message();
    }
  }
  for (size_t i = 0; i < sources.size(); ++i) {
    if (IsTorchSave(sources[i].name)) AddTorchSaveView(ck.path, sources, static_cast<int32_t>(i), tree);
  }
  if (!tree.Has(0, kZgroupName)) tree.AddText(0, kZgroupName, kZgroupText);
  if (!tree.Has(0, kViewInfoName)) tree.AddInfo(0);
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
  if (it == by_serial_.end() || index >= it->second->tree.nodes.size()) {
    return Status::Error(ESTALE, "a replaced view of a checkpoint");
  }
  return std::pair{it->second, index};
}

Result<Attr> TensorViews::Lookup(uint64_t parent, const std::string& name) {
  auto node = Node(parent);
  if (!node.ok()) return node.status();
  const auto& [view, index] = *node;
  const ViewNode& dir = view->tree.nodes[index];
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
  const ViewNode& dir = view->tree.nodes[index];
  if (!dir.dir) return Status::Error(ENOTDIR, "not a directory");
  std::vector<DirEntry> out;
  out.push_back({".", ino, S_IFDIR});
  out.push_back({"..", index == 0 ? view->dir_ino : view->Ino(dir.parent), S_IFDIR});
  for (const auto& [name, child] : dir.children) {
    out.push_back({name, view->Ino(child), view->tree.nodes[child].dir ? uint32_t{S_IFDIR} : uint32_t{S_IFREG}});
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
  if (view->tree.nodes[index].dir) return Status::Error(EISDIR, "a directory");
  auto open = std::make_shared<OpenView>();
  open->view = view;
  open->node = index;
  if (view->tree.nodes[index].info) open->text = view->InfoText();
  return std::shared_ptr<const OpenView>(std::move(open));
}

bool TensorViews::Generated(const OpenView& file) { return file.view->tree.nodes[file.node].info; }

Attr TensorViews::AttrOf(const OpenView& file) {
  Attr a = file.view->AttrOf(file.node);
  if (file.view->tree.nodes[file.node].info) a.size = file.text.size();
  return a;
}

Status TensorViews::SegmentsLocked(const View& view, const ViewNode& node, uint64_t from, uint64_t to,
                                   std::vector<ReadSegment>& out,
                                   std::vector<BackingSource>* backing) {
  auto it = std::upper_bound(node.ranges.begin(), node.ranges.end(), from,
                             [](uint64_t at, const ViewRange& r) { return at < r.start; });
  --it;
  for (uint64_t at = from; at < to; ++it) {
    const ViewRange& r = *it;
    const uint64_t skip = at - r.start;
    const uint64_t length = std::min(r.length - skip, to - at);
    if (r.source < 0) {
      ReadSegment zeros;
      zeros.length = static_cast<size_t>(length);
      out.push_back(std::move(zeros));
    } else {
      const InodeRef& src = view.sources[static_cast<size_t>(r.source)];
      Status st = ns_.LoadOriginLocked(src);
      if (!st.ok()) return st;
      MutexLock ilock(src->mu);
      if (StampOf(*src) != view.stamps[static_cast<size_t>(r.source)] || src->names.empty()) {
        return Status::Error(ESTALE, view.path + ": the checkpoint changed since its view was made");
      }
      for (ReadSegment& s : src->content.Read(r.offset + skip, static_cast<size_t>(length))) {
        const bool listed = backing == nullptr || s.kind != ReadSegment::Kind::kBacking ||
                            std::any_of(backing->begin(), backing->end(), [&](const auto& b) {
                              return b.inode == src && b.file == s.file;
                            });
        if (!listed) backing->push_back(BackingSource{src, s.file});
        out.push_back(std::move(s));
      }
    }
    at += length;
  }
  return Status::Ok();
}

Result<ReadData> TensorViews::Read(const OpenView& file, uint64_t offset, size_t size,
                                   std::vector<BackingSource>* backing) {
  const View& view = *file.view;
  const ViewNode& node = view.tree.nodes[file.node];
  ReadData out;
  if (node.info || node.ranges.empty()) {
    const std::string& text = node.info ? file.text : node.text;
    if (offset < text.size()) out.owned = text.substr(offset, size);
    return out;
  }
  if (offset >= node.size) return out;
  const uint64_t end = std::min<uint64_t>(offset + size, node.size);
  // A reader going on past `end` has the backing files read ahead of it, a window at a time
  // (asked again once half of it is read), as plain files' direct reads do.
  uint64_t ahead_from = std::max(file.read_ahead_until.load(std::memory_order_relaxed), end);
  const uint64_t ahead_to = std::min(node.size, end + policy::kBackingReadAheadBytes);
  const bool ahead = ahead_to > ahead_from &&
                     (ahead_to - ahead_from >= policy::kBackingReadAheadBytes / 2 || ahead_to == node.size);
  std::vector<ReadSegment> to_advise;
  {
    NamespaceLock lock(ns_.mutex());
    Status st = SegmentsLocked(view, node, offset, end, out.segments, backing);
    if (!st.ok()) return st;
    if (ahead) {
      file.read_ahead_until.store(ahead_to, std::memory_order_relaxed);
      (void)SegmentsLocked(view, node, ahead_from, ahead_to, to_advise);
    }
  }
  for (const ReadSegment& s : to_advise) {
    if (s.kind == ReadSegment::Kind::kBacking) env_.Advise(s.file->fd(), s.file_offset, s.length);
  }
  return out;
}

size_t TensorViews::size() const {
  MutexLock lock(mu_);
  return by_serial_.size();
}

}  // namespace ckptfs
