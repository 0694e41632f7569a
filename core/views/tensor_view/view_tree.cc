#include "core/views/tensor_view/view_tree.h"

#include <limits.h>

#include <charconv>
#include <cstdio>
#include <functional>
#include <utility>

namespace ckptfs {

std::string EncodeViewName(const std::string& fqn) {
  static const char* kHex = "0123456789ABCDEF";
  std::string out;
  for (size_t i = 0; i < fqn.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(fqn[i]);
    if (c == '%' || c == '/' || c == '\0' || (i == 0 && c == '.')) {
      out += '%';
      out += kHex[c >> 4];
      out += kHex[c & 15];
    } else {
      out += static_cast<char>(c);
    }
  }
  if (out == kViewInfoName) out = "info%2Ejson";
  if (out.empty()) out = "%";  // Never an encoding of a name: "%" is always followed by two digits.
  if (out.size() > NAME_MAX) {
    char hash[20];
    std::snprintf(hash, sizeof hash, "~%016zx", std::hash<std::string>{}(fqn));
    out = out.substr(0, 200) + hash;
  }
  return out;
}

std::string DecodeViewName(const std::string& name) {
  std::string out;
  for (size_t i = 0; i < name.size(); ++i) {
    unsigned value = 0;
    if (name[i] == '%' && i + 2 < name.size() &&
        std::from_chars(name.data() + i + 1, name.data() + i + 3, value, 16).ptr == name.data() + i + 3) {
      out += static_cast<char>(value);
      i += 2;
    } else {
      out += name[i];
    }
  }
  return out;
}

ViewTree::ViewTree() {
  ViewNode root;
  root.dir = true;
  nodes.push_back(std::move(root));
}

uint32_t ViewTree::AddDir(uint32_t parent, const std::string& name) {
  ViewNode n;
  n.name = name;
  n.parent = parent;
  n.dir = true;
  nodes.push_back(std::move(n));
  const auto index = static_cast<uint32_t>(nodes.size() - 1);
  nodes[parent].children[name] = index;
  return index;
}

uint32_t ViewTree::AddText(uint32_t parent, const std::string& name, std::string text) {
  const uint32_t index = AddRanges(parent, name, text.size(), {});
  nodes[index].text = std::move(text);
  return index;
}

uint32_t ViewTree::AddRanges(uint32_t parent, const std::string& name, uint64_t size,
                             std::vector<ViewRange> ranges) {
  ViewNode n;
  n.name = name;
  n.parent = parent;
  n.size = size;
  n.ranges = std::move(ranges);
  nodes.push_back(std::move(n));
  const auto index = static_cast<uint32_t>(nodes.size() - 1);
  nodes[parent].children[name] = index;
  return index;
}

uint32_t ViewTree::AddInfo(uint32_t parent) {
  const uint32_t index = AddRanges(parent, kViewInfoName, 0, {});
  nodes[index].info = true;
  return index;
}

Status ReadSourceRange(const FileContent& content, uint64_t offset, size_t length, char* out) {
  Result<size_t> n = content.ReadInto(offset, length, out);
  if (!n.ok()) return n.status();
  if (*n != length) return Status::Error(EBADMSG, "a stored range runs past its file");
  return Status::Ok();
}

std::string JsonText(const nlohmann::json& j, int indent) {
  return j.dump(indent, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

std::string ZarrayText(const std::vector<uint64_t>& shape, const std::vector<uint64_t>& chunks,
                       const std::string& dtype) {
  nlohmann::json zarray = {{"zarr_format", 2}, {"shape", shape}, {"chunks", chunks},
                           {"dtype", dtype}, {"compressor", nullptr}, {"fill_value", 0},
                           {"order", "C"}, {"filters", nullptr}, {"dimension_separator", "."}};
  return JsonText(zarray);
}

}  // namespace ckptfs
