// Rules of the shared mode (-o shared), as pure functions: which names the shared directory may
// hold, when a member counts as dead, when a member may acknowledge a commit.
// core/shared/membership and core/shared/shared_commit apply them.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace ckptfs::policy {

// A node name: 1-64 of [A-Za-z0-9._-], not starting with '.' (so "." and ".." and the shared
// directory's temporary files, which start with '.', are never node names). Host names fit.
inline constexpr size_t kMaxNodeNameLength = 64;
inline bool IsValidNodeName(std::string_view name) {
  if (name.empty() || name.size() > kMaxNodeNameLength || name.front() == '.') return false;
  for (char c : name) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '.' || c == '_' || c == '-';
    if (!ok) return false;
  }
  return true;
}

// An incarnation: one run of a member, 16 lowercase hex digits chosen at random when it joins.
inline constexpr size_t kIncarnationLength = 16;
inline bool IsValidIncarnation(std::string_view text) {
  if (text.size() != kIncarnationLength) return false;
  for (char c : text) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

// A commit request's id, unique across nodes and runs: "<node>~<incarnation>~<counter>", the
// counter a decimal of at most 19 digits, counting the committer's requests from 1.
struct CommitIdParts {
  std::string node;
  std::string incarnation;
  uint64_t counter = 0;
};
inline std::string MakeCommitId(std::string_view node, std::string_view incarnation,
                                uint64_t counter) {
  return std::string(node) + "~" + std::string(incarnation) + "~" + std::to_string(counter);
}
// The parts of a valid id; false for anything else.
inline bool ParseCommitId(std::string_view id, CommitIdParts* parts) {
  size_t first = id.find('~');
  if (first == std::string_view::npos) return false;
  size_t second = id.find('~', first + 1);
  if (second == std::string_view::npos) return false;
  std::string_view node = id.substr(0, first);
  std::string_view incarnation = id.substr(first + 1, second - first - 1);
  std::string_view counter = id.substr(second + 1);
  if (!IsValidNodeName(node) || !IsValidIncarnation(incarnation)) return false;
  if (counter.empty() || counter.size() > 19 || counter.front() == '0') return false;
  uint64_t value = 0;
  for (char c : counter) {
    if (c < '0' || c > '9') return false;
    value = value * 10 + static_cast<uint64_t>(c - '0');
  }
  parts->node = std::string(node);
  parts->incarnation = std::string(incarnation);
  parts->counter = value;
  return true;
}

// Largest member or acknowledgement file read, and largest commit request (it lists the members
// it waits for); anything larger in the shared directory is ignored.
inline constexpr size_t kMaxMemberFileBytes = 4096;
inline constexpr size_t kMaxRequestFileBytes = 1u << 20;
// Most members a request may wait for, and most entries a shared directory listing is read for.
inline constexpr size_t kMaxMembers = 4096;
inline constexpr size_t kMaxCommitRequests = 4096;
// Names read from one directory of the shared area (SharedArea::List); the rest are not read.
inline constexpr size_t kMaxListedNames = 4 * kMaxCommitRequests;

// An observer judges a member dead when the member's beat counter has not changed for
// `timeout`, measured on the observer's own clock since it last saw a change (or first saw the
// member): clocks of different nodes are never compared.
inline bool MemberDead(std::chrono::steady_clock::time_point beat_changed_at,
                       std::chrono::steady_clock::time_point now,
                       std::chrono::steady_clock::duration timeout) {
  return now - beat_changed_at >= timeout;
}

// How often a member rewrites its file and reads the others': often enough that a live member
// changes its beat several times within every `timeout` window.
inline std::chrono::milliseconds BeatInterval(std::chrono::milliseconds timeout) {
  return std::max(timeout / 10, std::chrono::milliseconds(10));
}

// A member may have been judged dead by another when no beat of its own was seen in place for
// half of `timeout` (`renewed_at`: when the write of the newest beat it read back intact began).
// Observers judge after a whole `timeout` of standing still; the other half covers how late each
// side reads. Such a member rejoins as a new incarnation: it learns before anyone counts on the
// judgement.
inline bool MayHaveBeenJudgedDead(std::chrono::steady_clock::time_point renewed_at,
                                  std::chrono::steady_clock::time_point now,
                                  std::chrono::steady_clock::duration timeout) {
  return now - renewed_at >= timeout / 2;
}

// A member judged dead (or whose file vanished while its beat stood still) stays awaited by the
// commits posted within `timeout` of that judgement, and those waiting on it do not fail before
// then: a member that was only stalled rejoins within that time and acknowledges them for its
// earlier incarnation. After it, the member counts as gone.
inline bool StillAwaitedAfterDrop(std::chrono::steady_clock::time_point dropped_at,
                                  std::chrono::steady_clock::time_point now,
                                  std::chrono::steady_clock::duration timeout) {
  return now - dropped_at < timeout;
}

// A member acknowledges a request once everything it had sealed when it first saw the request
// (`sealed_at_sight`, its journal's last sequence number then) is durable.
inline bool MayAcknowledge(uint64_t durable_seq, uint64_t sealed_at_sight) {
  return durable_seq >= sealed_at_sight;
}

}  // namespace ckptfs::policy
