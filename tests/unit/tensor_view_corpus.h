// The seed files of tests/unit/tensor_view_corpus/ (real files the real libraries wrote; see its
// make_corpus.py), and a zip::ReadAt over bytes in memory.
#pragma once

#include <cstring>
#include <fstream>
#include <sstream>
#include <string>

#include "core/views/tensor_view/zip_reader.h"

namespace ckptfs {

inline std::string Corpus(const std::string& name) {
  std::ifstream in(std::string(CKPTFS_TENSOR_VIEW_CORPUS) + "/" + name, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// Reads `bytes`, which must outlive it; EIO past its end.
inline zip::ReadAt MemoryReader(const std::string& bytes) {
  return [&bytes](uint64_t offset, size_t length, char* out) {
    if (offset > bytes.size() || length > bytes.size() - offset) return Status::Error(EIO, "past the end");
    std::memcpy(out, bytes.data() + offset, length);
    return Status::Ok();
  };
}

}  // namespace ckptfs
