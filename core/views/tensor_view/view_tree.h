// ViewTree: the nodes of one tensor view (core/views/tensor_view/tensor_views.h) as its builders
// make them: directories, fixed texts, info.json, and files whose bytes are ranges of the
// checkpoint's files (its sources) or zeros. Node 0 is the root. Built once, then only read.
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/base/status.h"
#include "core/memory/file_content.h"

namespace ckptfs {

// [start, start + length) of a view file is bytes [offset, ...) of source `source`, or zeros
// when source < 0.
struct ViewRange {
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
  std::string text;   // A fixed text (when it has no ranges).
  std::vector<ViewRange> ranges;
  uint64_t size = 0;
};

// A file of the checkpoint's directory as a build reads it: its bytes when the build began.
struct ViewSource {
  std::string name;
  FileContent content;
};

inline constexpr size_t kMaxViewNodes = size_t{1} << 22;
inline constexpr const char* kViewInfoName = "info.json";
inline constexpr const char* kZgroupName = ".zgroup";
inline constexpr const char* kZgroupText = "{\n \"zarr_format\": 2\n}\n";  // A zarr v2 group.

class ViewTree {
 public:
  ViewTree();

  uint32_t AddDir(uint32_t parent, const std::string& name);
  uint32_t AddText(uint32_t parent, const std::string& name, std::string text);
  uint32_t AddRanges(uint32_t parent, const std::string& name, uint64_t size, std::vector<ViewRange> ranges);
  uint32_t AddInfo(uint32_t parent);
  bool Has(uint32_t parent, const std::string& name) const { return nodes[parent].children.count(name) > 0; }
  // Whether `more` nodes would pass kMaxViewNodes.
  bool Full(size_t more) const { return nodes.size() + more > kMaxViewNodes; }

  std::vector<ViewNode> nodes;
  // What info.json shows. An entry (object) with "_sources" (indexes of sources) is shown with
  // "durable" instead: whether all of them are durable.
  nlohmann::json info;
};

// A fully qualified name (or a key) as a file name: '%', '/' and NUL, a leading '.', and the
// names of the view's own files percent-encoded (so DecodeViewName gives it back); names longer
// than NAME_MAX are cut and given a hash (info.json keeps the name).
std::string EncodeViewName(const std::string& fqn);
std::string DecodeViewName(const std::string& name);

// Reads exactly [offset, offset + length) of `content`; EBADMSG when it is shorter.
Status ReadSourceRange(const FileContent& content, uint64_t offset, size_t length, char* out);

// `j` as the text of a view's file: indented, and bytes of its strings that are no UTF-8 (names
// from a pickle are any bytes) replaced by U+FFFD.
std::string JsonText(const nlohmann::json& j, int indent = 4);

// A zarr v2 .zarray of an uncompressed C-order array.
std::string ZarrayText(const std::vector<uint64_t>& shape, const std::vector<uint64_t>& chunks,
                       const std::string& dtype);

}  // namespace ckptfs
