#include "core/recovery/kernel_state_record.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstring>
#include <unordered_map>
#include <unordered_set>

#include "core/backing/backing_store.h"
#include "core/memory/arena.h"
#include "core/tree/namespace.h"

namespace ckptfs {

struct KernelStateRecord::Header {
  uint64_t magic;
  uint32_t version;
  std::atomic<uint64_t> next_stamp;
  // Entries ever used since the last Clear: those beyond are free and never touched, so that
  // the record takes memory as far as it is used.
  std::atomic<uint32_t> nodes_used;
  std::atomic<uint32_t> handles_used;
};

struct KernelStateRecord::NodeEntry {
  std::atomic<uint32_t> in_use;      // Stored last when added, first when removed.
  std::atomic<uint32_t> name_state;  // Odd while the parent and name are being rewritten.
  uint64_t ino;
  uint64_t parent;
  uint32_t directory;
  std::atomic<uint32_t> content;  // BeginContent was called.
  uint32_t other_file;
  uint32_t mode, uid, gid;
  std::atomic<uint64_t> size;
  std::atomic<uint64_t> valid_from;  // Stamps older than this are not this content's.
  uint64_t base_length;
  uint32_t spill_length;
  char spill[kMaxSpillName];
  uint32_t name_length;
  char name[kMaxName];
};

struct KernelStateRecord::HandleEntry {
  std::atomic<uint64_t> fh;  // 0: free. Stored last when added.
  uint64_t ino;
  int64_t flags;
  uint64_t request;
};

struct KernelStateRecord::SlotTag {
  std::atomic<uint64_t> stamp;  // 0: no tag. Cleared first and stored last.
  std::atomic<uint64_t> ino;
  std::atomic<uint64_t> index;
};

namespace {

constexpr uint64_t kMagic = 0x636b70746673534b;  // "ckptfsSK"
constexpr uint32_t kVersion = 2;  // 2: nodes by parent and name, not by path.

// A place a worker records: a name in a directory, or none.
bool ValidPlace(uint64_t parent, const std::string& name) {
  return name.empty() ? parent == 0 : parent != 0 && CheckName(name).ok();
}
constexpr uint64_t kHeaderBytes = 4096;

uint64_t NodesOffset() { return kHeaderBytes; }

}  // namespace

static_assert(std::atomic<uint64_t>::is_always_lock_free);

uint64_t KernelStateRecord::Bytes(uint64_t capacity_blocks) {
  return kHeaderBytes + kNodes * sizeof(NodeEntry) + kHandles * sizeof(HandleEntry) +
         capacity_blocks * sizeof(SlotTag);
}

KernelStateRecord::KernelStateRecord(char* memory, uint64_t capacity_blocks)
    : header_(reinterpret_cast<Header*>(memory)),
      nodes_(reinterpret_cast<NodeEntry*>(memory + NodesOffset())),
      handles_(reinterpret_cast<HandleEntry*>(memory + NodesOffset() + kNodes * sizeof(NodeEntry))),
      tags_(reinterpret_cast<SlotTag*>(memory + NodesOffset() + kNodes * sizeof(NodeEntry) +
                                       kHandles * sizeof(HandleEntry))),
      capacity_blocks_(capacity_blocks) {
  static_assert(sizeof(Header) <= kHeaderBytes);
  if (header_->magic != kMagic || header_->version != kVersion) {
    // A new mount (zeros, left as they are), or a record of another version: nothing in it is
    // recoverable.
    if (header_->magic == kMagic) {
      spdlog::warn("the kernel state record was written by a version of ckptfs that records "
                   "nodes otherwise ({}): the nodes and open files it kept go stale",
                   header_->version);
    }
    if (header_->magic != 0) std::memset(static_cast<void*>(memory), 0, Bytes(capacity_blocks));
    header_->magic = kMagic;
    header_->version = kVersion;
    header_->next_stamp.store(1);
    header_->nodes_used.store(0);
    header_->handles_used.store(0);
  }
  header_->nodes_used.store(static_cast<uint32_t>(NodesUsed()));
  header_->handles_used.store(static_cast<uint32_t>(HandlesUsed()));
  MutexLock lock(mu_);
  // What a previous worker left stays readable until Clear.
  for (int i = static_cast<int>(NodesUsed()) - 1; i >= 0; --i) {
    if (nodes_[i].in_use.load() == 0) free_nodes_.push_back(i);
  }
  for (int i = static_cast<int>(HandlesUsed()) - 1; i >= 0; --i) {
    if (handles_[i].fh.load() == 0) free_handles_.push_back(i);
  }
}

size_t KernelStateRecord::NodesUsed() const {
  return std::min<size_t>(header_->nodes_used.load(), kNodes);
}

size_t KernelStateRecord::HandlesUsed() const {
  return std::min<size_t>(header_->handles_used.load(), kHandles);
}

int KernelStateRecord::TakeEntry(std::vector<int>& free, std::atomic<uint32_t>& used,
                                  size_t capacity) {
  if (!free.empty()) {
    const int entry = free.back();
    free.pop_back();
    return entry;
  }
  const uint32_t next = used.load();
  if (next >= capacity) return -1;
  used.store(next + 1, std::memory_order_release);
  return static_cast<int>(next);
}

Result<std::unique_ptr<KernelStateRecord>> KernelStateRecord::Map(int fd, uint64_t offset,
                                                                  uint64_t capacity_blocks) {
  const uint64_t length = Bytes(capacity_blocks);
  Result<SharedMapping> mapping = SharedMapping::OfFile(
      fd, offset, length, SharedMapping::Access::kReadWrite, "mapping the kernel state record");
  if (!mapping.ok()) return mapping.status();
  auto record = std::make_unique<KernelStateRecord>(mapping->data(), capacity_blocks);
  record->mapping_ = std::move(*mapping);
  return record;
}

bool KernelStateRecord::HasRoom(size_t nodes, size_t handles) const {
  MutexLock lock(mu_);
  const size_t nodes_in_use = NodesUsed() - free_nodes_.size();
  const size_t handles_in_use = HandlesUsed() - free_handles_.size();
  return (nodes == 0 || nodes_in_use + nodes <= kNodes / 2) &&
         (handles == 0 || handles_in_use + handles <= kHandles / 2);
}

int KernelStateRecord::AddNode(uint64_t ino, bool directory, uint64_t parent,
                               const std::string& name) {
  if (!ValidPlace(parent, name)) return -1;
  int node;
  {
    MutexLock lock(mu_);
    node = TakeEntry(free_nodes_, header_->nodes_used, kNodes);
    if (node < 0) return -1;
  }
  NodeEntry& e = nodes_[node];
  e.ino = ino;
  e.directory = directory;
  e.content.store(0);
  e.size.store(0);
  e.valid_from.store(0);
  e.name_state.store(0);
  e.parent = parent;
  std::memcpy(e.name, name.data(), name.size());
  e.name_length = static_cast<uint32_t>(name.size());
  e.in_use.store(1, std::memory_order_release);
  return node;
}

void KernelStateRecord::SetName(int node, uint64_t parent, const std::string& name) {
  NodeEntry& e = nodes_[node];
  const uint32_t state = e.name_state.load(std::memory_order_relaxed);
  e.name_state.store(state + 1, std::memory_order_release);
  // Not a name: none (the node is not found again), rather than a wrong one.
  const bool valid = ValidPlace(parent, name);
  e.parent = valid ? parent : 0;
  const size_t length = valid ? name.size() : 0;
  std::memcpy(e.name, name.data(), length);
  e.name_length = static_cast<uint32_t>(length);
  e.name_state.store(state + 2, std::memory_order_release);
}

void KernelStateRecord::RemoveNode(int node) {
  nodes_[node].in_use.store(0, std::memory_order_release);
  MutexLock lock(mu_);
  free_nodes_.push_back(node);
}

uint64_t KernelStateRecord::NextStamp() {
  return header_->next_stamp.fetch_add(1, std::memory_order_acq_rel);
}

uint64_t KernelStateRecord::BeginContent(int node, uint64_t size, const Base& base, uint32_t mode,
                                         uint32_t uid, uint32_t gid) {
  NodeEntry& e = nodes_[node];
  const uint64_t stamp = NextStamp();
  e.content.store(0, std::memory_order_release);
  e.mode = mode;
  e.uid = uid;
  e.gid = gid;
  e.size.store(size);
  // A spill file's name too long to keep: not recoverable, rather than wrong.
  const bool spill_fits = base.spill.size() <= kMaxSpillName;
  e.other_file = base.other_file || !spill_fits;
  e.spill_length = spill_fits ? static_cast<uint32_t>(base.spill.size()) : 0;
  std::memcpy(e.spill, base.spill.data(), e.spill_length);
  e.base_length = base.length;
  e.valid_from.store(stamp, std::memory_order_release);
  e.content.store(1, std::memory_order_release);
  return stamp;
}

void KernelStateRecord::EndContent(int node) {
  nodes_[node].content.store(0, std::memory_order_release);
}

void KernelStateRecord::SetSize(int node, uint64_t size) {
  nodes_[node].size.store(size, std::memory_order_release);
}

void KernelStateRecord::Tag(uint64_t slot, uint64_t ino, uint64_t index, uint64_t stamp) {
  if (slot >= capacity_blocks_) return;
  SlotTag& t = tags_[slot];
  t.stamp.store(0, std::memory_order_release);
  t.ino.store(ino, std::memory_order_relaxed);
  t.index.store(index, std::memory_order_relaxed);
  t.stamp.store(stamp, std::memory_order_release);
}

int KernelStateRecord::AddHandle(uint64_t fh, uint64_t ino, int flags, uint64_t request) {
  if (fh == 0) return -1;
  int handle;
  {
    MutexLock lock(mu_);
    handle = TakeEntry(free_handles_, header_->handles_used, kHandles);
    if (handle < 0) return -1;
  }
  HandleEntry& e = handles_[handle];
  e.ino = ino;
  e.flags = flags;
  e.request = request;
  e.fh.store(fh, std::memory_order_release);
  return handle;
}

void KernelStateRecord::RemoveHandle(int handle) {
  handles_[handle].fh.store(0, std::memory_order_release);
  MutexLock lock(mu_);
  free_handles_.push_back(handle);
}

void KernelStateRecord::Clear() {
  MutexLock lock(mu_);
  free_nodes_.clear();
  free_handles_.clear();
  for (size_t i = 0; i < NodesUsed(); ++i) {
    nodes_[i].in_use.store(0, std::memory_order_release);
  }
  for (size_t i = 0; i < HandlesUsed(); ++i) {
    handles_[i].fh.store(0, std::memory_order_release);
  }
  header_->nodes_used.store(0, std::memory_order_release);
  header_->handles_used.store(0, std::memory_order_release);
}

KernelStateRecord::Entries KernelStateRecord::InUse() const {
  Entries in_use;
  const size_t nodes_used = NodesUsed();
  for (size_t i = 0; i < nodes_used; ++i) {
    if (nodes_[i].in_use.load(std::memory_order_acquire) != 0) in_use.nodes.push_back(i);
  }
  const size_t handles_used = HandlesUsed();
  for (size_t i = 0; i < handles_used; ++i) {
    if (handles_[i].fh.load(std::memory_order_acquire) != 0) in_use.handles.push_back(i);
  }
  return in_use;
}

void KernelStateRecord::Remove(const Entries& entries) {
  for (int node : entries.nodes) RemoveNode(node);
  for (int handle : entries.handles) RemoveHandle(handle);
}

KernelStateRecord::State KernelStateRecord::Read() const {
  State out;
  struct Recorded {
    size_t node;          // Its index in out.nodes.
    uint64_t valid_from;  // Its content's oldest stamp.
  };
  std::unordered_map<uint64_t, Recorded> with_content;  // By ino.
  std::unordered_map<std::string, uint64_t> content_places;  // Parent and name -> ino.
  // Keeps the content of the file whose record began later; the other becomes a plain node.
  auto keep_newer = [&](uint64_t earlier_ino, Node& n, uint64_t valid_from) {
    Recorded& earlier = with_content[earlier_ino];
    if (earlier.valid_from >= valid_from) {
      n.content = false;
      return;
    }
    out.nodes[earlier.node].content = false;
    with_content.erase(earlier_ino);
  };
  const size_t nodes_used = NodesUsed();
  for (size_t i = 0; i < nodes_used; ++i) {
    const NodeEntry& e = nodes_[i];
    if (e.in_use.load(std::memory_order_acquire) == 0) continue;
    const uint32_t length = e.name_length;
    Node n;
    n.ino = e.ino;
    n.directory = e.directory != 0;
    n.parent = e.parent;
    if (e.name_state.load(std::memory_order_acquire) % 2 != 0 || length > kMaxName ||
        e.ino == 0 || e.directory > 1) {
      ++out.refused;
      continue;
    }
    n.name.assign(e.name, length);
    if (!ValidPlace(n.parent, n.name)) {
      ++out.refused;
      continue;
    }
    const std::string place = std::to_string(n.parent) + "/" + n.name;
    n.content = !n.directory && e.content.load(std::memory_order_acquire) == 1;
    if (n.content) {
      n.size = e.size.load();
      n.mode = e.mode & 07777;
      n.uid = e.uid;
      n.gid = e.gid;
      n.base.other_file = e.other_file != 0;
      const uint32_t spill_length = e.spill_length;
      if (spill_length > kMaxSpillName || e.other_file > 1) {
        ++out.refused;
        continue;
      }
      n.base.spill.assign(e.spill, spill_length);
      n.base.length = e.base_length;
      if ((!n.base.spill.empty() && !IsSpillFileName(n.base.spill)) ||
          (n.base.spill.empty() && !n.base.other_file && n.size > capacity_blocks_ * kBlockSize) ||
          n.size > (1ull << 60) || n.base.length > (1ull << 60)) {
        ++out.refused;  // Not what a worker wrote.
        continue;
      }
      const uint64_t valid_from = e.valid_from.load();
      if (with_content.count(n.ino) > 0) keep_newer(n.ino, n, valid_from);
      if (auto same = content_places.find(place);
          n.content && !n.name.empty() && same != content_places.end() &&
          with_content.count(same->second) > 0) {
        keep_newer(same->second, n, valid_from);
      }
      if (n.content) {
        with_content.emplace(n.ino, Recorded{out.nodes.size(), valid_from});
        if (!n.name.empty()) content_places[place] = n.ino;
      }
    }
    out.nodes.push_back(std::move(n));
  }
  // Each file's newest block per index stamped since its content was recorded.
  std::unordered_map<uint64_t, std::unordered_map<uint64_t, std::pair<uint64_t, uint64_t>>> best;
  for (uint64_t slot = 0; slot < capacity_blocks_ && !with_content.empty(); ++slot) {
    const SlotTag& t = tags_[slot];
    const uint64_t stamp = t.stamp.load(std::memory_order_acquire);
    if (stamp == 0) continue;
    const uint64_t ino = t.ino.load(std::memory_order_relaxed);
    const uint64_t index = t.index.load(std::memory_order_relaxed);
    auto file = with_content.find(ino);
    if (file == with_content.end() || stamp < file->second.valid_from) continue;
    const Node& n = out.nodes[file->second.node];
    if (n.base.other_file || index >= (n.size + kBlockSize - 1) / kBlockSize) continue;
    auto [it, added] = best[ino].try_emplace(index, stamp, slot);
    if (!added && it->second.first < stamp) it->second = {stamp, slot};
  }
  for (auto& [ino, blocks] : best) {
    Node& n = out.nodes[with_content[ino].node];
    for (const auto& [index, stamped] : blocks) n.blocks.emplace_back(index, stamped.second);
    std::sort(n.blocks.begin(), n.blocks.end());
  }
  const size_t handles_used = HandlesUsed();
  std::unordered_set<uint64_t> handles_seen;
  for (size_t i = 0; i < handles_used; ++i) {
    const HandleEntry& e = handles_[i];
    const uint64_t fh = e.fh.load(std::memory_order_acquire);
    if (fh == 0 || !handles_seen.insert(fh).second) continue;
    out.handles.push_back({fh, e.ino, static_cast<int>(e.flags), e.request});
  }
  return out;
}

std::string KernelStateRecord::State::PathOf(const Node& n) const {
  if (directories_.empty()) {
    for (size_t i = 0; i < nodes.size(); ++i) {
      if (nodes[i].directory) directories_.emplace(nodes[i].ino, i);
    }
  }
  std::string path = n.name;
  // At most one step per node: a cycle (not what a worker wrote) ends it.
  uint64_t parent = n.parent;
  for (size_t steps = 0; !path.empty() && parent != kRootIno; ++steps) {
    auto dir = directories_.find(parent);
    if (dir == directories_.end() || nodes[dir->second].name.empty() || steps == nodes.size()) {
      return {};
    }
    path = nodes[dir->second].name + "/" + path;
    parent = nodes[dir->second].parent;
  }
  return path;
}

}  // namespace ckptfs
