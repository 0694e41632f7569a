// The XML answers of S3 (an error, InitiateMultipartUpload, CompleteMultipartUpload,
// ListMultipartUploads), parsed with expat. Untrusted: at most 1 MiB, nesting at most 32 deep,
// each field at most 4 KiB; no DTD (entity declarations are refused), nothing fetched.
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "core/base/status.h"

namespace ckptfs {

struct S3Xml {
  std::string root;  // The root element's name ("Error", "InitiateMultipartUploadResult", ...).
  // The text of the root's child elements that hold text only, by name (the first of each).
  std::map<std::string, std::string> fields;
  // The root's child elements that hold elements ("Upload" of a listing): each the text of its
  // children that hold text only, by name. At most 10,000 of them.
  struct Group {
    std::string name;
    std::map<std::string, std::string> fields;
  };
  std::vector<Group> groups;

  std::string Field(const std::string& name) const {
    auto it = fields.find(name);
    return it == fields.end() ? "" : it->second;
  }
};

// EINVAL (EPROTO for malformed XML) naming what is wrong.
Result<S3Xml> ParseS3Xml(std::string_view xml);

}  // namespace ckptfs
