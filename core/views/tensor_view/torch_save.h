// What a torch.save file holds, read without running it: its zip entries (core/views/tensor_view/
// zip_reader.h), its pickle (core/views/tensor_view/pickle_reader.h) and, for each tensor in it,
// the storage entry and the elements of that storage it spans. Also the dtypes torch names and how
// a zarr v2 array holds each.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/base/status.h"
#include "core/views/tensor_view/pickle_reader.h"
#include "core/views/tensor_view/zip_reader.h"

namespace ckptfs {

// A torch dtype as a zarr v2 array holds it: dtypes numpy lacks (bfloat16, the float8s) are held
// as unsigned integers of their size (`raw`), their bits unchanged.
struct DtypeInfo {
  std::string torch;  // "float32", "bfloat16", ...
  std::string zarr;   // "<f4", "<u2", ...
  size_t itemsize = 0;
  bool raw = false;
};
std::optional<DtypeInfo> DtypeNamed(std::string_view torch_name);

// A tensor as torch.save pickles it (_rebuild_tensor_v2/v3, or a Parameter around one).
struct PickledTensor {
  DtypeInfo dtype;
  std::vector<uint64_t> shape;
  std::vector<int64_t> stride;
  std::string storage_key;      // Its storage is the zip entry <prefix>data/<key>.
  uint64_t storage_offset = 0;  // In elements.
  uint64_t numel() const;
  // Its bytes, and where they end in its storage (in bytes); TensorAt checks that the end counts
  // in 64 bits.
  uint64_t bytes() const { return numel() * dtype.itemsize; }
  uint64_t storage_end() const { return (storage_offset + numel()) * dtype.itemsize; }
  // Row-major and dense: its bytes are one range of the storage.
  bool Contiguous() const;
};
// The tensor `r` is. EINVAL when `r` is no tensor (no call of torch's tensor or parameter
// rebuilders); EBADMSG, with why, when it is one that cannot be shown (malformed, of a dtype not
// served, or spanning more than 2^64 bytes of its storage).
Result<PickledTensor> TensorAt(const pickle::Pickle& p, pickle::Ref r);

// A torch.save archive: its entries, where data.pkl and the storages are.
struct TorchArchive {
  std::vector<zip::Entry> entries;
  std::string prefix;  // Of data.pkl, e.g. "archive/".
  // The stored (uncompressed) entry of storage `key`, or null.
  const zip::Entry* Storage(const std::string& key) const;
  const zip::Entry* Find(const std::string& name) const;
};
inline constexpr uint64_t kMaxDataPickleBytes = 256ull << 20;
// Reads the archive's directory; EBADMSG when it is no torch.save archive (or a big-endian one).
Result<TorchArchive> ReadTorchArchive(const zip::ReadAt& read, uint64_t size);
// The bytes of data.pkl.
Result<std::string> ReadDataPickle(const TorchArchive& archive, const zip::ReadAt& read, uint64_t size);

}  // namespace ckptfs
