// What the replication tests over real TCP share: a wait for a condition the partner's threads
// make true (eventually.h), and a sealed version of given bytes.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstring>
#include <memory>
#include <string>
#include <thread>

#include "core/replication/partner_link.h"
#include "eventually.h"

namespace ckptfs::replication::testing_util {

// The run (wire.h) the tests' members number their versions in.
inline constexpr const char* kRun = "0123456789abcdef";

// Version `seq` (file version seq * 10) of ckpt/file<seq>, holding `bytes`.
inline std::shared_ptr<const Outgoing> Version(uint64_t seq, std::string bytes) {
  auto data = std::make_shared<std::string>(std::move(bytes));
  auto v = std::make_shared<Outgoing>();
  v->seq = seq;
  v->version = seq * 10;
  v->path = "ckpt/file" + std::to_string(seq);
  v->size = data->size();
  v->read = [data](uint64_t offset, size_t length, char* out) -> Result<size_t> {
    size_t n = std::min<size_t>(length, data->size() - offset);
    std::memcpy(out, data->data() + offset, n);
    return n;
  };
  return v;
}

}  // namespace ckptfs::replication::testing_util
