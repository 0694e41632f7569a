#include "core/filesystem/special_nodes.h"

namespace ckptfs {
namespace {

class ControlFile final : public SpecialFile {
 public:
  ControlFile(ControlFiles& files, ControlFiles::OpenFile open) : files_(files), open_(open) {}
  Result<ReadData> Read(uint64_t offset, size_t size) override {
    return files_.Read(open_, offset, size);
  }
  Result<size_t> Write(std::string_view data) override { return files_.Write(open_, data); }
  std::optional<uint64_t> HandedOverIno() const override { return open_.ino; }

 private:
  ControlFiles& files_;
  ControlFiles::OpenFile open_;
};

class TensorViewFile final : public SpecialFile {
 public:
  TensorViewFile(TensorViews& views, std::shared_ptr<const TensorViews::OpenView> open,
                 const TensorViewNodes::SourceCheck& check)
      : views_(views), open_(std::move(open)), check_(check) {}
  Result<ReadData> Read(uint64_t offset, size_t size) override {
    if (!check_) return views_.Read(*open_, offset, size);
    std::vector<TensorViews::BackingSource> backing;
    Result<ReadData> read = views_.Read(*open_, offset, size, &backing);
    for (const TensorViews::BackingSource& b : backing) {
      if (!read.ok()) break;
      if (Status checked = check_(*b.inode, b.file); !checked.ok()) return checked;
    }
    return read;
  }
  Result<size_t> Write(std::string_view) override {
    return Status::Error(EBADF, "a view of a checkpoint is read-only");
  }
  // Opened again after a handoff: a view is rebuilt by the next worker.
  std::optional<uint64_t> HandedOverIno() const override { return std::nullopt; }

 private:
  TensorViews& views_;
  std::shared_ptr<const TensorViews::OpenView> open_;
  const TensorViewNodes::SourceCheck& check_;  // The provider's, which outlives its files.
};

}  // namespace

Result<Attr> ControlNodes::Lookup(uint64_t parent, const std::string& name) {
  if (parent == kRootIno) return files_.AttrOf(kControlDirIno);
  return files_.Lookup(name);
}

Result<std::vector<DirEntry>> ControlNodes::List(uint64_t ino) {
  if (ino != kControlDirIno) return Status::Error(ENOTDIR, "not a directory");
  return files_.List();
}

Result<SpecialNodes::Opened> ControlNodes::Open(uint64_t ino, int flags) {
  Result<ControlFiles::OpenFile> opened = files_.Open(ino, flags);
  if (!opened.ok()) return opened.status();
  return Opened{files_.AttrOf(ino), std::make_unique<ControlFile>(files_, std::move(*opened)),
                /*direct_io=*/true};
}

Status ControlNodes::Refuse(Change change, uint64_t node, const std::string& name) const {
  switch (change) {
    case Change::kSetAttr:
      return Status::Error(EPERM, "control files are fixed");
    case Change::kUnlink:
      return Status::Error(EPERM, name);
    case Change::kRmdir:
      return Status::Error(node == kRootIno ? EPERM : ENOTDIR, name);
    case Change::kRename:
      return Status::Error(EPERM, "the control directory cannot be renamed");
    case Change::kLink:
      return Status::Error(EPERM, "hard link of a control file");
    case Change::kLinkInto:
    case Change::kCreate:
    case Change::kMknod:
      if (node == kRootIno) return Status::Error(EEXIST, name);
      return Status::Error(EPERM, "the control directory is fixed");
  }
  return Status::Error(EPERM, name);
}

Result<SpecialNodes::Opened> TensorViewNodes::Open(uint64_t ino, int flags) {
  Result<std::shared_ptr<const TensorViews::OpenView>> opened = views_.Open(ino, flags);
  if (!opened.ok()) return opened.status();
  const Attr attr = TensorViews::AttrOf(**opened);
  // A view's file never changes (a changed checkpoint gets new nodes): cached pages stay right;
  // info.json is made at each open.
  const bool generated = TensorViews::Generated(**opened);
  return Opened{attr, std::make_unique<TensorViewFile>(views_, std::move(*opened), check_),
                generated, !generated};
}

Status TensorViewNodes::Refuse(Change, uint64_t node, const std::string&) const {
  return UnknownInode(node);
}

SpecialNodes* SpecialNodeRegistry::ForNode(uint64_t ino) const {
  for (const std::unique_ptr<SpecialNodes>& p : providers_) {
    if (p->Serves(ino)) return p.get();
  }
  return nullptr;
}

SpecialNodes* SpecialNodeRegistry::ForEntry(uint64_t parent, const std::string& name) const {
  for (const std::unique_ptr<SpecialNodes>& p : providers_) {
    if (p->ServesEntry(parent, name)) return p.get();
  }
  return nullptr;
}

}  // namespace ckptfs
