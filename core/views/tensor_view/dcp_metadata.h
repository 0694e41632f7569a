// What a PyTorch DCP checkpoint (Megatron/NeMo torch_dist included) holds, read from its pickled
// `.metadata` without running it: each tensor's global shape, dtype and saved shards (boxes of
// the global tensor) with the file range each was written to, and the byte items.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/base/status.h"

namespace ckptfs {

inline constexpr const char* kDcpMetadataName = ".metadata";
inline constexpr uint64_t kMaxDcpMetadataBytes = 256ull << 20;

// A range of a file of the checkpoint's directory.
struct StoredRange {
  std::string file;
  uint64_t offset = 0;
  uint64_t length = 0;
  bool transformed = false;  // Written through a stream transform (compressed...): not raw.
};

struct DcpShard {
  std::vector<uint64_t> offsets, sizes;
  StoredRange stored;  // A torch.save of the shard (or its raw bytes).
};

struct DcpTensor {
  std::string fqn;
  std::string dtype;  // torch's name.
  std::vector<uint64_t> shape;
  std::vector<DcpShard> shards;
};

struct DcpItem {
  std::string fqn;
  StoredRange stored;
};

struct DcpCheckpoint {
  std::vector<DcpTensor> tensors;
  std::vector<DcpItem> items;  // Byte entries: a pickled object each.
  // What is listed but not served, and why.
  std::vector<std::pair<std::string, std::string>> skipped;
};

// EBADMSG when the text is no DCP metadata pickle.
Result<DcpCheckpoint> ReadDcpMetadata(std::string_view pickle_bytes);

}  // namespace ckptfs
