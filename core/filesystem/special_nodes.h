// Special nodes: nodes the namespace does not hold, each served by its provider: the control
// directory `.ckptfs` and its files (ControlNodes), the nodes of tensor views (TensorViewNodes).
// Filesystem looks the provider up once per operation, by the node's number (or the entry's
// directory), in a SpecialNodeRegistry; a node no provider serves is the namespace's.
//
// Thread-safe: any FUSE worker thread may call any method, without the namespace lock (a tensor
// view's provider takes it).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/base/status.h"
#include "core/tree/inode.h"
#include "core/tree/namespace.h"
#include "core/views/control_files.h"
#include "core/views/tensor_view/tensor_views.h"

namespace ckptfs {

// An open file of a special node.
class SpecialFile {
 public:
  virtual ~SpecialFile() = default;
  virtual Result<ReadData> Read(uint64_t offset, size_t size) = 0;
  // Returns the bytes taken.
  virtual Result<size_t> Write(std::string_view data) = 0;
  // The node the next worker opens again for this handle after a handoff; nullopt when the
  // handle is not handed over (its next request fails with EBADF and the file is opened again).
  virtual std::optional<uint64_t> HandedOverIno() const = 0;
};

class SpecialNodes {
 public:
  // What an open gives the kernel.
  struct Opened {
    Attr attr;
    std::unique_ptr<SpecialFile> file;
    bool direct_io = false;   // Every read and write of the handle comes here.
    bool keep_cache = false;  // The kernel's cached pages of the file are still right.
  };
  // A change of the tree or of a node's attributes or size.
  enum class Change { kSetAttr, kUnlink, kRmdir, kRename, kLink, kLinkInto, kCreate, kMknod };

  virtual ~SpecialNodes() = default;
  // Whether node `ino` is one of this provider's.
  virtual bool Serves(uint64_t ino) const = 0;
  // Whether entry `name` of directory `parent` is one of this provider's (`parent` may be a
  // namespace directory holding the provider's top directory).
  virtual bool ServesEntry(uint64_t parent, const std::string& name) const = 0;

  // Entry `name` of `parent` (ServesEntry).
  virtual Result<Attr> Lookup(uint64_t parent, const std::string& name) = 0;
  virtual Result<Attr> GetAttr(uint64_t ino) = 0;
  // The entries of directory `ino`, "." and ".." included.
  virtual Result<std::vector<DirEntry>> List(uint64_t ino) = 0;
  virtual Result<Opened> Open(uint64_t ino, int flags) = 0;
  // Why `change` fails: of node `node` (kSetAttr, kLink), or of entry `name` of directory
  // `node` (the others; kLinkInto: a link made there). Special nodes never change.
  virtual Status Refuse(Change change, uint64_t node, const std::string& name) const = 0;
};

// The control directory and its files (core/views/control_files.h).
class ControlNodes final : public SpecialNodes {
 public:
  // `source` must outlive this; `start` is the files' times.
  ControlNodes(ControlFiles::Source& source, timespec start) : files_(source, start) {}
  bool Serves(uint64_t ino) const override { return IsControl(ino); }
  bool ServesEntry(uint64_t parent, const std::string& name) const override {
    return IsControlEntry(parent, name);
  }
  Result<Attr> Lookup(uint64_t parent, const std::string& name) override;
  Result<Attr> GetAttr(uint64_t ino) override { return files_.AttrOf(ino); }
  Result<std::vector<DirEntry>> List(uint64_t ino) override;
  Result<Opened> Open(uint64_t ino, int flags) override;
  Status Refuse(Change change, uint64_t node, const std::string& name) const override;

 private:
  ControlFiles files_;
};

// The read-only nodes of tensor views (core/views/tensor_view/tensor_views.h).
class TensorViewNodes final : public SpecialNodes {
 public:
  // `views` must outlive this.
  // Checks the bytes a view's read takes of a source's backing file (verify=reads), before the
  // read is answered; an error fails the read.
  using SourceCheck = std::function<Status(Inode&, const std::shared_ptr<BackingFile>&)>;
  // `views` must outlive this; `check` may be empty (reads are not checked).
  explicit TensorViewNodes(TensorViews& views, SourceCheck check = {})
      : views_(views), check_(std::move(check)) {}
  bool Serves(uint64_t ino) const override { return IsTensorViewIno(ino); }
  bool ServesEntry(uint64_t parent, const std::string&) const override {
    return IsTensorViewIno(parent);
  }
  Result<Attr> Lookup(uint64_t parent, const std::string& name) override {
    return views_.Lookup(parent, name);
  }
  Result<Attr> GetAttr(uint64_t ino) override { return views_.GetAttr(ino); }
  Result<std::vector<DirEntry>> List(uint64_t ino) override { return views_.List(ino); }
  Result<Opened> Open(uint64_t ino, int flags) override;
  // EROFS: a view of a checkpoint is read-only.
  Status Refuse(Change change, uint64_t node, const std::string& name) const override;

 private:
  TensorViews& views_;
  const SourceCheck check_;
};

// The providers of special nodes, asked in the order added.
class SpecialNodeRegistry {
 public:
  void Add(std::unique_ptr<SpecialNodes> provider) { providers_.push_back(std::move(provider)); }
  // The provider of node `ino`, or null (a node of the namespace).
  SpecialNodes* ForNode(uint64_t ino) const;
  // The provider of entry `name` of directory `parent`, or null.
  SpecialNodes* ForEntry(uint64_t parent, const std::string& name) const;

 private:
  std::vector<std::unique_ptr<SpecialNodes>> providers_;
};

}  // namespace ckptfs
