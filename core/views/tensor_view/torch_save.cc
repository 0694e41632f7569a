#include "core/views/tensor_view/torch_save.h"

#include <algorithm>
#include <array>

namespace ckptfs {
namespace {

using pickle::Kind;
using pickle::Pickle;
using pickle::Ref;

Status NotATensor(std::string why) { return Status::Error(EINVAL, "not a tensor: " + why); }
// A tensor that cannot be shown, and why.
Status Unshown(std::string why) { return Status::Error(EBADMSG, why); }

// torch's typed storage classes, by the dtype they hold.
constexpr std::array<std::pair<std::string_view, std::string_view>, 12> kStorageTypes{{
    {"FloatStorage", "float32"}, {"DoubleStorage", "float64"}, {"HalfStorage", "float16"},
    {"BFloat16Storage", "bfloat16"}, {"LongStorage", "int64"}, {"IntStorage", "int32"},
    {"ShortStorage", "int16"}, {"CharStorage", "int8"}, {"ByteStorage", "uint8"},
    {"BoolStorage", "bool"}, {"ComplexFloatStorage", "complex64"},
    {"ComplexDoubleStorage", "complex128"},
}};

}  // namespace

std::optional<DtypeInfo> DtypeNamed(std::string_view name) {
  static const std::array<DtypeInfo, 19> kDtypes{{
      {"float32", "<f4", 4, false}, {"float64", "<f8", 8, false}, {"float16", "<f2", 2, false},
      {"bfloat16", "<u2", 2, true}, {"int64", "<i8", 8, false}, {"int32", "<i4", 4, false},
      {"int16", "<i2", 2, false}, {"int8", "|i1", 1, false}, {"uint8", "|u1", 1, false},
      {"bool", "|b1", 1, false}, {"complex64", "<c8", 8, false}, {"complex128", "<c16", 16, false},
      {"uint16", "<u2", 2, false}, {"uint32", "<u4", 4, false}, {"uint64", "<u8", 8, false},
      {"float8_e4m3fn", "|u1", 1, true}, {"float8_e5m2", "|u1", 1, true},
      {"float8_e4m3fnuz", "|u1", 1, true}, {"float8_e5m2fnuz", "|u1", 1, true},
  }};
  for (const DtypeInfo& d : kDtypes) {
    if (d.torch == name) return d;
  }
  return std::nullopt;
}

uint64_t PickledTensor::numel() const {
  uint64_t n = 1;
  for (uint64_t s : shape) n *= s;
  return n;
}

bool PickledTensor::Contiguous() const {
  if (stride.size() != shape.size()) return false;
  uint64_t expected = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    if (shape[i] != 1 && (stride[i] < 0 || static_cast<uint64_t>(stride[i]) != expected)) {
      return false;
    }
    expected *= shape[i];
  }
  return true;
}

Result<PickledTensor> TensorAt(const Pickle& p, Ref r) {
  if (r >= p.size() || p.at(r).kind != Kind::kObject) return NotATensor("no object");
  const pickle::Value& call = p.at(r);
  const bool parameter = p.IsGlobal(call.callable, "torch._utils", "_rebuild_parameter") ||
                         p.IsGlobal(call.callable, "torch._utils", "_rebuild_parameter_with_state");
  const bool v3 = p.IsGlobal(call.callable, "torch._utils", "_rebuild_tensor_v3");
  if (!parameter && !v3 && !p.IsGlobal(call.callable, "torch._utils", "_rebuild_tensor_v2")) {
    return NotATensor("not rebuilt by _rebuild_tensor_v2/v3 or _rebuild_parameter");
  }
  const std::vector<Ref>* args = p.Sequence(call.args);
  if (!args) return Unshown("its arguments are no tuple");
  if (parameter) {
    if (args->empty()) return Unshown("a parameter of nothing");
    const pickle::Value& data = p.at((*args)[0]);
    if (data.kind == Kind::kObject && p.IsGlobal(data.callable, "torch._utils", "_rebuild_parameter")) {
      return Unshown("a parameter of a parameter");
    }
    Result<PickledTensor> t = TensorAt(p, (*args)[0]);
    if (t.status().err() == EINVAL) return Unshown("a parameter of no tensor");
    return t;
  }
  if (args->size() < (v3 ? 7u : 4u)) return Unshown("too few arguments");
  // The storage: persistent id ('storage', storage type, key, location, numel).
  const Ref pid = (*args)[0];
  if (p.at(pid).kind != Kind::kPersistentId) return Unshown("its storage is no persistent id");
  const std::vector<Ref>* id = p.Sequence(p.at(pid).args);
  std::string tag;
  if (!id || id->size() < 3 || !p.String((*id)[0], &tag) || tag != "storage") {
    return Unshown("its storage is an unknown persistent id");
  }
  PickledTensor t;
  if (!p.String((*id)[2], &t.storage_key)) return Unshown("its storage key is no string");
  std::string_view dtype_name;
  if (v3) {
    const pickle::Value& d = p.at((*args)[6]);
    if (d.kind != Kind::kGlobal || d.text != "torch") return Unshown("its dtype is no torch dtype");
    dtype_name = d.name;
  } else {
    const pickle::Value& type = p.at((*id)[1]);
    if (type.kind != Kind::kGlobal || type.text != "torch") {
      return Unshown("its storage type is no torch type");
    }
    for (const auto& [storage, dtype] : kStorageTypes) {
      if (type.name == storage) dtype_name = dtype;
    }
  }
  std::optional<DtypeInfo> dtype = DtypeNamed(dtype_name);
  if (!dtype) return Unshown("dtype " + std::string(dtype_name) + " not served");
  t.dtype = *dtype;
  int64_t offset;
  if (!p.Int((*args)[1], &offset) || offset < 0) {
    return Unshown("its storage offset is no int of 0 or more");
  }
  t.storage_offset = static_cast<uint64_t>(offset);
  if (!p.Sizes((*args)[2], &t.shape)) return Unshown("its shape is no tuple of ints of 0 or more");
  const std::vector<Ref>* stride = p.Sequence((*args)[3]);
  if (!stride) return Unshown("its stride is no tuple");
  for (Ref s : *stride) {
    int64_t v;
    if (!p.Int(s, &v)) return Unshown("its stride is no tuple of ints");
    t.stride.push_back(v);
  }
  if (t.shape.size() != t.stride.size()) return Unshown("its shape and stride differ in rank");
  if (t.shape.size() > 64) return Unshown("more than 64 dimensions");
  for (uint64_t s : t.shape) {
    if (s > (uint64_t{1} << 48)) return Unshown("a dimension larger than 2^48");
  }
  // storage_end() counts in 64 bits.
  uint64_t end = std::find(t.shape.begin(), t.shape.end(), 0) == t.shape.end() ? 1 : 0;
  for (uint64_t s : t.shape) {
    if (__builtin_mul_overflow(end, s, &end)) return Unshown("more than 2^64 elements");
  }
  if (__builtin_add_overflow(end, t.storage_offset, &end) ||
      __builtin_mul_overflow(end, t.dtype.itemsize, &end)) {
    return Unshown("it ends past 2^64 bytes of its storage");
  }
  return t;
}

const zip::Entry* TorchArchive::Find(const std::string& name) const {
  for (const zip::Entry& e : entries) {
    if (e.name == name) return &e;
  }
  return nullptr;
}

const zip::Entry* TorchArchive::Storage(const std::string& key) const {
  const zip::Entry* e = Find(prefix + "data/" + key);
  return e && e->method == 0 && e->compressed_size == e->size ? e : nullptr;
}

Result<TorchArchive> ReadTorchArchive(const zip::ReadAt& read, uint64_t size) {
  Result<std::vector<zip::Entry>> entries = zip::ReadDirectory(read, size);
  if (!entries.ok()) return entries.status();
  TorchArchive archive;
  archive.entries = std::move(*entries);
  const zip::Entry* pkl = nullptr;
  for (const zip::Entry& e : archive.entries) {
    constexpr std::string_view kData = "data.pkl";
    const size_t slash = e.name.find('/');
    if (slash != std::string::npos && e.name.substr(slash + 1) == kData) {
      pkl = &e;
      archive.prefix = e.name.substr(0, slash + 1);
      break;
    }
  }
  if (!pkl) return Status::Error(EBADMSG, "no data.pkl: not a torch.save archive");
  if (const zip::Entry* order = archive.Find(archive.prefix + "byteorder")) {
    if (order->method != 0 || order->size > 16) return Status::Error(EBADMSG, "bad byteorder");
    Result<uint64_t> at = zip::DataOffset(read, size, *order);
    if (!at.ok()) return at.status();
    std::string text(static_cast<size_t>(order->size), '\0');
    Status st = read(*at, text.size(), text.data());
    if (!st.ok()) return st;
    if (text != "little") return Status::Error(EBADMSG, "byteorder " + text + " not served");
  }
  return archive;
}

Result<std::string> ReadDataPickle(const TorchArchive& archive, const zip::ReadAt& read, uint64_t size) {
  const zip::Entry* pkl = archive.Find(archive.prefix + "data.pkl");
  if (!pkl || pkl->method != 0 || pkl->compressed_size != pkl->size) {
    return Status::Error(EBADMSG, "data.pkl is compressed");
  }
  if (pkl->size > kMaxDataPickleBytes) return Status::Error(EFBIG, "data.pkl too large");
  Result<uint64_t> at = zip::DataOffset(read, size, *pkl);
  if (!at.ok()) return at.status();
  std::string bytes(static_cast<size_t>(pkl->size), '\0');
  Status st = read(*at, bytes.size(), bytes.data());
  if (!st.ok()) return st;
  return bytes;
}

}  // namespace ckptfs
