// HeldMarkers: the commit markers a shared mount (-o shared) keeps off the backing store until
// every other member has made durable what it sealed before them (core/shared/shared_commit.h).
//
// The flusher holds a marker where it would publish it: a sealed version under a marker name
// (its data durable in the staging directory), or a rename to a marker name (not applied). It
// posts the marker's commit, and publishes the marker once the commit succeeded and everything
// this mount journaled before it is durable. A marker whose commit failed is never published.
//
// Order per target (a directory and a name): publishing a marker drops the older markers held
// for the same target; a later journal entry that changes a held marker's target, or a held
// rename's source, drops the marker: the name now holds what that later entry made.
//
// Not thread-safe: the flusher guards it with its lock.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/base/status.h"
#include "core/integrity/checksum_record.h"
#include "core/tree/journal.h"

namespace ckptfs {

struct HeldMarker {
  EntryRef entry;
  std::string staged_name;  // A publish: its file in the staging directory.
  ChecksumRecord checksum;  // A publish: of its bytes (the manifest keeps it without xattrs).
  std::string path;         // In the mount, for messages.
  std::string commit_id;    // Empty until posted.
  std::optional<Status> outcome;
  bool finishing = false;  // Taken by TakeDecided: being published, or reported failed.
};

class HeldMarkers {
 public:
  // Whether entry `e` publishes a marker: a sealed version with a name in `markers`, or a rename
  // to such a name.
  static bool IsMarker(const JournalEntry& e, const std::vector<std::string>& markers);

  // Holds `entry` (once: a batch retried after a failed directory sync holds nothing again),
  // with its staged file and the checksum of its bytes (a publish) and its path in the mount.
  void Add(EntryRef entry, std::string staged_name, std::string path,
           ChecksumRecord checksum = {});
  // The held markers not posted yet: (seq, path).
  std::vector<std::pair<uint64_t, std::string>> Unposted() const;
  // Records how posting the marker `seq` went: its commit id, or why it could not be posted
  // (its outcome then).
  void Posted(uint64_t seq, const Result<std::string>& id);
  // Records the outcome of commit `id`; ignored when no held marker has that id (dropped).
  void Decide(const std::string& id, const Status& outcome);

  // Drops and returns the held markers whose target (or source) the later entry `e` changes.
  std::vector<HeldMarker> SupersededBy(const JournalEntry& e);
  // The decided markers that may be finished now, in journal order, each once: failed ones, and
  // succeeded ones with seq <= `durable_seq` (this mount's own earlier data durable). They stay
  // held until Finished.
  std::vector<HeldMarker> TakeDecided(uint64_t durable_seq);
  // Marker `seq` was published (`outcome` ok) or will never be: remembers the outcome, and after
  // a publication drops and returns the older markers held for its targets.
  std::vector<HeldMarker> Finished(uint64_t seq, const Status& outcome);

  // Removes and returns the markers not finishing (at unmount: they will never be published).
  std::vector<HeldMarker> TakeUndecided();

  // Whether a marker with seq <= `seq` is still held.
  bool HeldUpTo(uint64_t seq) const;
  // The outcome of the newest finished marker with seq <= `seq` when it failed; ok otherwise.
  Status FailureUpTo(uint64_t seq) const;
  size_t size() const { return held_.size(); }

 private:
  using Target = std::pair<const Inode*, std::string>;
  static std::vector<Target> TargetsOf(const JournalEntry& e);
  // Drops and returns the markers held before `seq`, not finishing, with a target in `targets`.
  std::vector<HeldMarker> DropOlder(uint64_t seq, const std::vector<Target>& targets);

  std::map<uint64_t, HeldMarker> held_;  // By seq.
  std::map<uint64_t, Status> finished_;  // The latest outcomes by seq (bounded).
};

}  // namespace ckptfs
