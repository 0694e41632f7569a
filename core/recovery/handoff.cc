#include "core/recovery/handoff.h"

#include <sys/stat.h>

#include <nlohmann/json.hpp>
#include <unordered_set>

#include "core/memory/arena.h"

namespace ckptfs {
namespace {

using nlohmann::json;

constexpr int kImageVersion = 2;  // 1: without in_memory (read as false).
constexpr size_t kMaxRecords = 16u << 20;
constexpr uint64_t kMaxBlocks = 64ull << 20;  // 1 TiB of cache.

Status Bad(const std::string& what) { return Status::Error(EINVAL, "handoff image: " + what); }

// The unsigned field `key` of object `o`, at most `max`.
Result<uint64_t> U64(const json& o, const char* key, uint64_t max = UINT64_MAX) {
  auto it = o.find(key);
  if (it == o.end() || !it->is_number_unsigned()) return Bad(std::string("no number ") + key);
  uint64_t v = it->get<uint64_t>();
  if (v > max) return Bad(std::string(key) + " out of range");
  return v;
}

Result<int64_t> I64(const json& o, const char* key) {
  auto it = o.find(key);
  if (it == o.end() || !it->is_number_integer()) return Bad(std::string("no number ") + key);
  return it->get<int64_t>();
}

Result<bool> Bool(const json& o, const char* key) {
  auto it = o.find(key);
  if (it == o.end() || !it->is_boolean()) return Bad(std::string("no flag ") + key);
  return it->get<bool>();
}

// Names are bytes, not necessarily UTF-8 (which JSON strings are): they travel in hex.
std::string Hex(const std::string& bytes) {
  static const char kDigits[] = "0123456789abcdef";
  std::string out;
  out.reserve(bytes.size() * 2);
  for (unsigned char c : bytes) {
    out += kDigits[c >> 4];
    out += kDigits[c & 15];
  }
  return out;
}

Result<std::string> Name(const json& o, const char* key) {
  auto it = o.find(key);
  if (it == o.end() || !it->is_string()) return Bad(std::string("no name ") + key);
  const std::string& hex = it->get_ref<const std::string&>();
  if (hex.size() % 2 != 0 || hex.size() > 2 * 4096) return Bad(std::string("bad name ") + key);
  std::string out;
  for (size_t i = 0; i < hex.size(); i += 2) {
    int value = 0;
    for (char c : {hex[i], hex[i + 1]}) {
      int digit = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
      if (digit < 0) return Bad(std::string("bad name ") + key);
      value = value * 16 + digit;
    }
    out += static_cast<char>(value);
  }
  return out;
}

// The array field `key` of the image, each element an object.
Result<const json*> Objects(const json& image, const char* key) {
  auto it = image.find(key);
  if (it == image.end() || !it->is_array()) return Bad(std::string("no list ") + key);
  if (it->size() > kMaxRecords) return Bad(std::string("too many ") + key);
  for (const json& e : *it) {
    if (!e.is_object()) return Bad(std::string("an entry of ") + key + " is not an object");
  }
  return &*it;
}

#define CKPTFS_TAKE(var, expr)         \
  auto var##_result = (expr);          \
  if (!var##_result.ok()) return var##_result.status(); \
  auto var = *var##_result

// `total_blocks`: the blocks of the image so far, kept under kMaxBlocks.
Result<HandoffImage::InodeRecord> DecodeInode(const json& o, uint64_t* total_blocks) {
  HandoffImage::InodeRecord r;
  CKPTFS_TAKE(ino, U64(o, "ino"));
  CKPTFS_TAKE(parent, U64(o, "parent"));
  CKPTFS_TAKE(name, Name(o, "name"));
  CKPTFS_TAKE(lookups, U64(o, "lookups"));
  CKPTFS_TAKE(has_content, Bool(o, "has_content"));
  r.ino = ino;
  r.parent = parent;
  r.name = std::move(name);
  r.lookups = lookups;
  r.has_content = has_content;
  if (has_content) {
    CKPTFS_TAKE(size, U64(o, "size", 1ull << 60));
    CKPTFS_TAKE(mode, U64(o, "mode", 07777));
    CKPTFS_TAKE(uid, U64(o, "uid", UINT32_MAX));
    CKPTFS_TAKE(gid, U64(o, "gid", UINT32_MAX));
    CKPTFS_TAKE(mtime, I64(o, "mtime_ns"));
    CKPTFS_TAKE(ctime, I64(o, "ctime_ns"));
    r.size = size;
    r.mode = static_cast<uint32_t>(mode);
    r.uid = static_cast<uint32_t>(uid);
    r.gid = static_cast<uint32_t>(gid);
    r.mtime_ns = mtime;
    r.ctime_ns = ctime;
    r.in_memory = o.contains("in_memory");
    if (r.in_memory) {
      CKPTFS_TAKE(in_memory, Bool(o, "in_memory"));
      r.in_memory = in_memory;
    }
    if (r.in_memory) {
      // Runs [index, slot, count]: blocks index + i at slot + i.
      auto it = o.find("blocks");
      if (it == o.end() || !it->is_array()) return Bad("no list blocks");
      const uint64_t block_count = (size + kBlockSize - 1) / kBlockSize;
      for (const json& b : *it) {
        if (!b.is_array() || b.size() != 3 || !b[0].is_number_unsigned() ||
            !b[1].is_number_unsigned() || !b[2].is_number_unsigned()) {
          return Bad("a run of blocks is not [index, slot, count]");
        }
        const uint64_t index = b[0].get<uint64_t>();
        const uint64_t slot = b[1].get<uint64_t>();
        const uint64_t count = b[2].get<uint64_t>();
        if (count == 0 || index >= block_count || count > block_count - index ||
            slot > UINT64_MAX - count ||
            (!r.blocks.empty() && index <= r.blocks.back().first)) {
          return Bad("a run of blocks out of order or past the end");
        }
        if (count > kMaxBlocks - *total_blocks) return Bad("too many blocks");
        *total_blocks += count;
        for (uint64_t i = 0; i < count; ++i) r.blocks.emplace_back(index + i, slot + i);
      }
    }
  }
  if (r.ino < kFirstIno) return Bad("inode number " + std::to_string(r.ino) + " is reserved");
  if (r.name.empty() != (r.parent == 0)) return Bad("a name without a parent or the reverse");
  if (r.name.empty() && !r.has_content) return Bad("a removed file without its content");
  if (!r.name.empty()) {
    if (Status bad = CheckName(r.name); !bad.ok()) return Bad("bad name: " + bad.message());
  }
  return r;
}

Result<HandoffImage::HandleRecord> DecodeHandle(const json& o) {
  HandoffImage::HandleRecord r;
  CKPTFS_TAKE(fh, U64(o, "fh"));
  CKPTFS_TAKE(ino, U64(o, "ino"));
  CKPTFS_TAKE(flags, U64(o, "flags", INT32_MAX));
  CKPTFS_TAKE(direct, Bool(o, "direct"));
  CKPTFS_TAKE(passthrough, Bool(o, "passthrough"));
  CKPTFS_TAKE(backing_id, I64(o, "backing_id"));
  CKPTFS_TAKE(wrote, Bool(o, "wrote"));
  if (fh == 0) return Bad("file handle 0");
  if (backing_id < -1 || backing_id > INT32_MAX) return Bad("backing id out of range");
  r.fh = fh;
  r.ino = ino;
  r.flags = static_cast<int>(flags);
  r.direct = direct;
  r.passthrough = passthrough;
  r.backing_id = static_cast<int>(backing_id);
  r.wrote = wrote;
  return r;
}

Result<HandoffImage::DirHandleRecord> DecodeDirHandle(const json& o) {
  HandoffImage::DirHandleRecord r;
  CKPTFS_TAKE(fh, U64(o, "fh"));
  if (fh == 0) return Bad("directory handle 0");
  r.fh = fh;
  CKPTFS_TAKE(entries, Objects(o, "entries"));
  for (const json& e : *entries) {
    CKPTFS_TAKE(name, Name(e, "name"));
    CKPTFS_TAKE(ino, U64(e, "ino"));
    CKPTFS_TAKE(type, U64(e, "type", S_IFMT));
    if (name != "." && name != "..") {
      if (Status bad = CheckName(name); !bad.ok()) return Bad("bad entry: " + bad.message());
    }
    r.entries.push_back({std::move(name), ino, static_cast<uint32_t>(type)});
  }
  return r;
}

}  // namespace

std::string HandoffFileName(uint64_t ino) {
  return std::string(kHandoffPrefix) + std::to_string(ino);
}

std::string TakenOverSpillName(uint32_t worker, uint64_t ino) {
  return std::string(kSpillPrefix) + std::to_string(worker) + "-handoff-" + std::to_string(ino);
}

std::string EncodeHandoff(const HandoffImage& image) {
  json inodes = json::array();
  for (const HandoffImage::InodeRecord& r : image.inodes) {
    json o = {{"ino", r.ino}, {"parent", r.parent}, {"name", Hex(r.name)}, {"lookups", r.lookups},
              {"has_content", r.has_content}};
    if (r.has_content) {
      o.update({{"size", r.size}, {"mode", r.mode}, {"uid", r.uid}, {"gid", r.gid},
                {"mtime_ns", r.mtime_ns}, {"ctime_ns", r.ctime_ns}, {"in_memory", r.in_memory}});
      if (r.in_memory) {
        json blocks = json::array();
        for (size_t i = 0; i < r.blocks.size();) {
          size_t n = 1;
          while (i + n < r.blocks.size() && r.blocks[i + n].first == r.blocks[i].first + n &&
                 r.blocks[i + n].second == r.blocks[i].second + n) {
            ++n;
          }
          blocks.push_back({r.blocks[i].first, r.blocks[i].second, n});
          i += n;
        }
        o["blocks"] = std::move(blocks);
      }
    }
    inodes.push_back(std::move(o));
  }
  json handles = json::array();
  for (const HandoffImage::HandleRecord& r : image.handles) {
    handles.push_back({{"fh", r.fh}, {"ino", r.ino}, {"flags", r.flags}, {"direct", r.direct},
                       {"passthrough", r.passthrough}, {"backing_id", r.backing_id},
                       {"wrote", r.wrote}});
  }
  json dir_handles = json::array();
  for (const HandoffImage::DirHandleRecord& r : image.dir_handles) {
    json entries = json::array();
    for (const DirEntry& e : r.entries) {
      entries.push_back({{"name", Hex(e.name)}, {"ino", e.ino}, {"type", e.type_bits}});
    }
    dir_handles.push_back({{"fh", r.fh}, {"entries", std::move(entries)}});
  }
  json j = {{"version", kImageVersion}, {"inodes", std::move(inodes)},
            {"handles", std::move(handles)}, {"dir_handles", std::move(dir_handles)}};
  return j.dump();
}

Result<HandoffImage> DecodeHandoff(std::string_view text) {
  if (text.size() > kMaxHandoffImage) return Bad("larger than " + std::to_string(kMaxHandoffImage));
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return Bad("not a JSON object");
  CKPTFS_TAKE(version, U64(j, "version"));
  if (version != kImageVersion && version != 1) {
    return Bad("version " + std::to_string(version) + " unknown");
  }
  HandoffImage image;
  std::unordered_set<uint64_t> known = {kRootIno};
  CKPTFS_TAKE(inodes, Objects(j, "inodes"));
  uint64_t total_blocks = 0;
  for (const json& o : *inodes) {
    CKPTFS_TAKE(r, DecodeInode(o, &total_blocks));
    if (r.parent != 0 && !known.count(r.parent)) {
      return Bad("inode " + std::to_string(r.ino) + " comes before its parent");
    }
    if (!known.insert(r.ino).second) return Bad("inode " + std::to_string(r.ino) + " twice");
    image.inodes.push_back(std::move(r));
  }
  std::unordered_set<uint64_t> fhs;
  CKPTFS_TAKE(handles, Objects(j, "handles"));
  for (const json& o : *handles) {
    CKPTFS_TAKE(r, DecodeHandle(o));
    if (!fhs.insert(r.fh).second) return Bad("file handle listed twice");
    image.handles.push_back(r);
  }
  CKPTFS_TAKE(dir_handles, Objects(j, "dir_handles"));
  for (const json& o : *dir_handles) {
    CKPTFS_TAKE(r, DecodeDirHandle(o));
    if (!fhs.insert(r.fh).second) return Bad("directory handle listed twice");
    image.dir_handles.push_back(std::move(r));
  }
  return image;
}

}  // namespace ckptfs
