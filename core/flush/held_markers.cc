#include "core/flush/held_markers.h"

#include <algorithm>

#include "core/base/commit_markers.h"

namespace ckptfs {
namespace {

// Outcomes remembered for FailureUpTo.
constexpr size_t kMaxFinished = 256;

}  // namespace

bool HeldMarkers::IsMarker(const JournalEntry& e, const std::vector<std::string>& markers) {
  using Kind = JournalEntry::Kind;
  if (e.kind == Kind::kRename) return policy::IsCommitMarker(e.new_name, markers);
  if (e.kind != Kind::kPublish) return false;
  return std::any_of(e.names.begin(), e.names.end(), [&](const Inode::Name& n) {
    return policy::IsCommitMarker(n.name, markers);
  });
}

std::vector<HeldMarkers::Target> HeldMarkers::TargetsOf(const JournalEntry& e) {
  using Kind = JournalEntry::Kind;
  std::vector<Target> targets;
  switch (e.kind) {
    case Kind::kPublish:
      for (const Inode::Name& n : e.names) targets.emplace_back(n.parent.get(), n.name);
      break;
    case Kind::kRename:
      targets.emplace_back(e.parent.get(), e.name);
      targets.emplace_back(e.new_parent.get(), e.new_name);
      break;
    case Kind::kLink:
      targets.emplace_back(e.new_parent.get(), e.new_name);
      break;
    case Kind::kSetAttr:
      break;
    default:
      targets.emplace_back(e.parent.get(), e.name);
  }
  return targets;
}

void HeldMarkers::Add(EntryRef entry, std::string staged_name, std::string path,
                      ChecksumRecord checksum) {
  const uint64_t seq = entry->seq;
  if (held_.count(seq)) return;
  HeldMarker& m = held_[seq];
  m.entry = std::move(entry);
  m.staged_name = std::move(staged_name);
  m.path = std::move(path);
  m.checksum = std::move(checksum);
}

std::vector<std::pair<uint64_t, std::string>> HeldMarkers::Unposted() const {
  std::vector<std::pair<uint64_t, std::string>> out;
  for (const auto& [seq, m] : held_) {
    if (m.commit_id.empty() && !m.outcome) out.emplace_back(seq, m.path);
  }
  return out;
}

void HeldMarkers::Posted(uint64_t seq, const Result<std::string>& id) {
  auto it = held_.find(seq);
  if (it == held_.end()) return;
  if (id.ok()) {
    it->second.commit_id = *id;
  } else {
    it->second.outcome = id.status();
  }
}

void HeldMarkers::Decide(const std::string& id, const Status& outcome) {
  for (auto& [seq, m] : held_) {
    if (m.commit_id == id && !m.outcome) m.outcome = outcome;
  }
}

std::vector<HeldMarker> HeldMarkers::DropOlder(uint64_t seq, const std::vector<Target>& targets) {
  std::vector<HeldMarker> dropped;
  for (auto it = held_.begin(); it != held_.end() && it->first < seq;) {
    if (it->second.finishing) {
      ++it;
      continue;
    }
    const std::vector<Target> mine = TargetsOf(*it->second.entry);
    bool overlaps = std::any_of(mine.begin(), mine.end(), [&](const Target& t) {
      return std::find(targets.begin(), targets.end(), t) != targets.end();
    });
    if (overlaps) {
      dropped.push_back(std::move(it->second));
      it = held_.erase(it);
    } else {
      ++it;
    }
  }
  return dropped;
}

std::vector<HeldMarker> HeldMarkers::SupersededBy(const JournalEntry& e) {
  if (held_.empty()) return {};
  return DropOlder(e.seq, TargetsOf(e));
}

std::vector<HeldMarker> HeldMarkers::TakeDecided(uint64_t durable_seq) {
  std::vector<HeldMarker> out;
  for (auto& [seq, m] : held_) {
    if (m.finishing || !m.outcome) continue;
    if (m.outcome->ok() && seq > durable_seq) continue;
    m.finishing = true;
    out.push_back(m);
  }
  return out;
}

std::vector<HeldMarker> HeldMarkers::Finished(uint64_t seq, const Status& outcome) {
  auto it = held_.find(seq);
  if (it == held_.end()) return {};
  const EntryRef entry = it->second.entry;
  held_.erase(it);
  finished_[seq] = outcome;
  while (finished_.size() > kMaxFinished) finished_.erase(finished_.begin());
  if (!outcome.ok()) return {};
  return DropOlder(seq, TargetsOf(*entry));
}

std::vector<HeldMarker> HeldMarkers::TakeUndecided() {
  std::vector<HeldMarker> out;
  for (auto it = held_.begin(); it != held_.end();) {
    if (it->second.finishing) {
      ++it;
      continue;
    }
    finished_[it->first] = Status::Error(ECANCELED, it->second.path + ": not published");
    out.push_back(std::move(it->second));
    it = held_.erase(it);
  }
  return out;
}

bool HeldMarkers::HeldUpTo(uint64_t seq) const {
  return !held_.empty() && held_.begin()->first <= seq;
}

Status HeldMarkers::FailureUpTo(uint64_t seq) const {
  auto it = finished_.upper_bound(seq);
  if (it == finished_.begin()) return Status::Ok();
  return std::prev(it)->second;
}

}  // namespace ckptfs
