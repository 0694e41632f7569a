#include "core/views/tensor_view/dcp_metadata.h"

#include <map>
#include <utility>

#include "core/views/tensor_view/pickle_reader.h"

namespace ckptfs {
namespace {

using pickle::Kind;
using pickle::Pickle;
using pickle::Ref;

constexpr std::string_view kMetadataModule = "torch.distributed.checkpoint.metadata";

Status Bad(std::string why) { return Status::Error(EBADMSG, "DCP metadata: " + why); }

// A torch.Size (an object made from one tuple of ints) or a plain tuple/list of ints.
bool SizeOf(const Pickle& p, Ref r, std::vector<uint64_t>* out) {
  if (r < p.size() && p.at(r).kind == Kind::kObject) {
    if (!p.IsGlobal(p.at(r).callable, "torch", "Size")) return false;
    const std::vector<Ref>* args = p.Sequence(p.at(r).args);
    if (!args || args->size() != 1) return false;
    r = (*args)[0];
  }
  return p.Sizes(r, out);
}

bool IsClass(const Pickle& p, Ref r, std::string_view module, std::string_view name) {
  return r < p.size() && p.at(r).kind == Kind::kObject && p.IsGlobal(p.at(r).callable, module, name);
}

// TensorProperties pickles its fields as a tuple (dtype first); older ones as a dict.
std::string DtypeOf(const Pickle& p, Ref properties) {
  Ref dtype = p.Attr(properties, "dtype");
  if (dtype == pickle::kNoRef && properties < p.size()) {
    const std::vector<Ref>* fields = p.Sequence(p.at(properties).state);
    if (fields && !fields->empty()) dtype = (*fields)[0];
  }
  if (dtype >= p.size() || p.at(dtype).kind != Kind::kGlobal || p.at(dtype).text != "torch") return "";
  return std::string(p.at(dtype).name);
}

bool StoredRangeOf(const Pickle& p, Ref info, StoredRange* out) {
  int64_t offset, length;
  if (!p.String(p.Attr(info, "relative_path"), &out->file) || !p.Int(p.Attr(info, "offset"), &offset) ||
      !p.Int(p.Attr(info, "length"), &length) || offset < 0 || length < 0) {
    return false;
  }
  out->offset = static_cast<uint64_t>(offset);
  out->length = static_cast<uint64_t>(length);
  const Ref transforms = p.Attr(info, "transform_descriptors");
  const std::vector<Ref>* list = transforms == pickle::kNoRef ? nullptr : p.Sequence(transforms);
  out->transformed = list && !list->empty();
  return true;
}

}  // namespace

Result<DcpCheckpoint> ReadDcpMetadata(std::string_view bytes) {
  Result<Pickle> read = Pickle::Read(bytes);
  if (!read.ok()) return read.status();
  const Pickle& p = *read;
  if (!IsClass(p, p.root(), kMetadataModule, "Metadata")) return Bad("no Metadata object");
  const Ref sd = p.Attr(p.root(), "state_dict_metadata");
  const Ref storage = p.Attr(p.root(), "storage_data");
  if (sd >= p.size() || p.at(sd).kind != Kind::kDict) return Bad("no state_dict_metadata");
  if (storage >= p.size() || p.at(storage).kind != Kind::kDict) return Bad("no storage_data");

  // Where each (fqn, chunk offsets) was written.
  std::map<std::pair<std::string, std::vector<uint64_t>>, StoredRange> ranges;
  const std::vector<Ref>& pairs = p.at(storage).items;
  for (size_t i = 0; i + 1 < pairs.size(); i += 2) {
    std::pair<std::string, std::vector<uint64_t>> key;
    StoredRange range;
    const Ref index = pairs[i];
    if (!p.String(p.Attr(index, "fqn"), &key.first) || !StoredRangeOf(p, pairs[i + 1], &range)) {
      return Bad("bad storage_data entry");
    }
    const Ref offset = p.Attr(index, "offset");
    if (offset != pickle::kNoRef && p.at(offset).kind != Kind::kNone && !SizeOf(p, offset, &key.second)) {
      return Bad("bad storage_data offset of " + key.first);
    }
    ranges.emplace(std::move(key), std::move(range));
  }

  DcpCheckpoint out;
  const std::vector<Ref>& entries = p.at(sd).items;
  for (size_t i = 0; i + 1 < entries.size(); i += 2) {
    std::string fqn;
    if (!p.String(entries[i], &fqn)) return Bad("a key that is no string");
    const Ref meta = entries[i + 1];
    if (IsClass(p, meta, kMetadataModule, "BytesStorageMetadata")) {
      auto it = ranges.find({fqn, {}});
      if (it == ranges.end()) {
        out.skipped.push_back({fqn, "no stored range"});
        continue;
      }
      out.items.push_back({fqn, it->second});
      continue;
    }
    if (!IsClass(p, meta, kMetadataModule, "TensorStorageMetadata")) {
      out.skipped.push_back({fqn, "unknown kind of entry"});
      continue;
    }
    DcpTensor t;
    t.fqn = fqn;
    t.dtype = DtypeOf(p, p.Attr(meta, "properties"));
    if (!SizeOf(p, p.Attr(meta, "size"), &t.shape)) return Bad("bad size of " + fqn);
    const std::vector<Ref>* chunks = p.Sequence(p.Attr(meta, "chunks"));
    if (!chunks) return Bad("no chunks of " + fqn);
    std::string why;
    for (Ref c : *chunks) {
      DcpShard shard;
      if (!SizeOf(p, p.Attr(c, "offsets"), &shard.offsets) || !SizeOf(p, p.Attr(c, "sizes"), &shard.sizes) ||
          shard.offsets.size() != t.shape.size() || shard.sizes.size() != t.shape.size()) {
        return Bad("bad chunk of " + fqn);
      }
      for (size_t a = 0; a < t.shape.size(); ++a) {
        if (shard.offsets[a] > t.shape[a] || shard.sizes[a] > t.shape[a] - shard.offsets[a]) {
          return Bad("a chunk of " + fqn + " lies outside its shape");
        }
      }
      auto it = ranges.find({fqn, shard.offsets});
      if (it == ranges.end()) {
        why = "a chunk has no stored range";
        break;
      }
      shard.stored = it->second;
      t.shards.push_back(std::move(shard));
    }
    if (why.empty() && t.dtype.empty()) why = "unknown dtype";
    if (!why.empty()) {
      out.skipped.push_back({fqn, why});
      continue;
    }
    out.tensors.push_back(std::move(t));
  }
  return out;
}

}  // namespace ckptfs
