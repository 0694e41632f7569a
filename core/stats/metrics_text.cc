#include "core/stats/metrics_text.h"

#include <cmath>
#include <cstdio>
#include <string_view>

namespace ckptfs {
namespace {

enum class Kind {
  kCounter, kGauge, kFlag, kCount, kMilliseconds, kMicroseconds, kHistogram, kLabel, kNone
};

// One field of the stats: where it is ("shared.held_markers"), the metric it becomes and how.
//   kCounter, kGauge: a number as it is;  kFlag: 1 when true or a non-empty string (an error);
//   kCount: the length of an array;  kMilliseconds, kMicroseconds: a gauge in seconds;
//   kHistogram: a histogram
//   object;  kLabel: a label of ckptfs_info;  kNone: shown otherwise (below) or not a figure.
struct Field {
  const char* key;
  const char* metric;
  Kind kind;
  const char* help;
};

const Field kFields[] = {
    {"backend", "backend", Kind::kLabel, ""},
    {"cache_size", "ckptfs_cache_size_bytes", Kind::kGauge, "Memory for file data (cache_size)."},
    {"memory_used", "ckptfs_memory_used_bytes", Kind::kGauge, "Cache memory holding file data."},
    {"memory_mapped", "ckptfs_memory_mapped_bytes", Kind::kGauge,
     "Cache memory taken from the system."},
    {"memory_prefaulted", "ckptfs_memory_prefaulted_bytes", Kind::kGauge,
     "Cache memory faulted in ahead of use (prefault=on)."},
    {"prefault_running", "ckptfs_prefault_running", Kind::kFlag,
     "1 while the cache is being faulted in."},
    {"memory_given_back", "ckptfs_memory_given_back_bytes_total", Kind::kCounter,
     "Idle cache memory given back to the system when it ran short."},
    {"writers_waiting", "ckptfs_writers_waiting", Kind::kGauge,
     "Writes waiting for cache memory."},
    {"dirty_bytes", "ckptfs_dirty_bytes", Kind::kGauge, "Bytes sealed and not yet durable."},
    {"pending_entries", "ckptfs_pending_entries", Kind::kGauge,
     "Files and namespace changes not yet durable."},
    {"bytes_written", "ckptfs_written_bytes_total", Kind::kCounter,
     "Bytes accepted from writers."},
    {"bytes_read", "ckptfs_read_bytes_total", Kind::kCounter, "Bytes served to readers."},
    {"bytes_flushed", "ckptfs_flushed_bytes_total", Kind::kCounter,
     "Bytes of the file versions made durable."},
    {"files_flushed", "ckptfs_flushed_files_total", Kind::kCounter,
     "File versions made durable under their names."},
    {"bytes_checksummed", "ckptfs_checksummed_bytes_total", Kind::kCounter,
     "Bytes of file versions summed (CRC32C) before they were flushed."},
    {"bytes_summed_at_flush", "ckptfs_summed_at_flush_bytes_total", Kind::kCounter,
     "Of the bytes summed, those read again at flush rather than summed as they were written."},
    {"bytes_landed", "ckptfs_landed_bytes_total", Kind::kCounter,
     "Bytes of writes their files took in the blocks they were read into (not copied)."},
    {"forked_writer_opens", "ckptfs_forked_writer_opens_total", Kind::kCounter,
     "Write-only opens served through the page cache: their writer's memory is forked."},
    {"files_read_ahead", "ckptfs_read_ahead_files_total", Kind::kCounter,
     "Small backing files read ahead of a loader going through their directory in order."},
    {"bytes_read_back", "ckptfs_read_back_bytes_total", Kind::kCounter,
     "Bytes read back from the backing store and checked before publication (verify=markers)."},
    {"checksum_mismatches", "ckptfs_checksum_mismatches_total", Kind::kCounter,
     "File versions read back that did not match their checksum (verify=markers)."},
    {"read_files_verified", "ckptfs_read_verified_files_total", Kind::kCounter,
     "Backing files checked against their checksums before reads were served (verify=reads)."},
    {"read_mismatches", "ckptfs_read_mismatches_total", Kind::kCounter,
     "Backing files that did not match their checksums: their reads fail (verify=reads)."},
    {"read_files_unrecorded", "ckptfs_read_unrecorded_files_total", Kind::kCounter,
     "Backing files without a checksum record, served unchecked (verify=reads)."},
    {"bytes_verified_for_reads", "ckptfs_read_verified_bytes_total", Kind::kCounter,
     "Bytes of backing files read to check them before reads were served (verify=reads)."},
    {"versions_skipped", "ckptfs_skipped_versions_total", Kind::kCounter,
     "File versions superseded before they were flushed."},
    {"flush_batches", "ckptfs_flush_batches_total", Kind::kCounter, "Flush batches applied."},
    {"flush_errors", "ckptfs_flush_errors_total", Kind::kCounter, "Flush batches that failed."},
    {"flush_throughput", "ckptfs_flush_throughput_bytes_per_second", Kind::kGauge,
     "Bytes flushed per second of flushing, since the worker started."},
    {"evicted_bytes", "ckptfs_evicted_bytes_total", Kind::kCounter,
     "Durable bytes dropped from memory."},
    {"spilled_bytes", "ckptfs_spilled_bytes_total", Kind::kCounter,
     "Bytes of open files moved out of memory to the staging directory."},
    {"spill_errors", "ckptfs_spill_errors_total", Kind::kCounter,
     "Spills of open files that failed (retried while writers wait for memory)."},
    {"spill_error", "ckptfs_spill_failing", Kind::kFlag,
     "1 while writers wait for memory that a failing spill cannot free (see the stats' "
     "spill_error)."},
    {"cache_shared", "ckptfs_cache_shared", Kind::kFlag,
     "1 when the cache lives in memory the supervisor holds."},
    {"taken_over_in_memory", "ckptfs_taken_over_in_memory_bytes", Kind::kGauge,
     "Unsealed bytes this worker took over in the cache's shared memory."},
    {"taken_over_from_files", "ckptfs_taken_over_from_files_bytes", Kind::kGauge,
     "Unsealed bytes this worker took over from handoff files."},
    {"recovered_versions", "ckptfs_recovered_versions", Kind::kGauge,
     "Sealed versions a crashed worker left, recovered by this one."},
    {"recovered_bytes", "ckptfs_recovered_bytes", Kind::kGauge, "Bytes of those versions."},
    {"recovered_handles", "ckptfs_recovered_handles", Kind::kGauge,
     "Open handles a crashed worker left, taken over by this one."},
    {"recovered_open_bytes", "ckptfs_recovered_open_bytes", Kind::kGauge,
     "Bytes of the files among them open for writing."},
    {"kernel_record_refused", "ckptfs_kernel_record_refused_total", Kind::kCounter,
     "Lookups and opens refused (ENFILE): the kernel state record had no room for them."},
    {"last_error", "ckptfs_flush_failing", Kind::kFlag,
     "1 while flushes fail (they are retried; see the stats' last_error)."},
    {"zarr_fine_grid", "ckptfs_zarr_fine_grid_arrays", Kind::kCount,
     "Zarr arrays shown with the fine grid."},
    {"tensor_views", "ckptfs_tensor_views", Kind::kGauge, "Tensor views (.tensors) built."},
    {"flush_seconds", "ckptfs_flush_seconds", Kind::kHistogram,
     "Per file made durable: the time its flush batch took."},
    {"save_to_durable_seconds", "ckptfs_save_to_durable_seconds", Kind::kHistogram,
     "Per file made durable: the time from its close or fsync to durable."},
    {"fuse_request_seconds", "ckptfs_fuse_request_seconds", Kind::kNone, ""},
    {"shared", "", Kind::kNone, ""},
    {"remote", "", Kind::kNone, ""},
    {"remote.location", "", Kind::kNone, ""},
    {"remote.handed_over", "ckptfs_remote_handed_over_files_total", Kind::kCounter,
     "File versions handed to the uploader once durable in the backing directory."},
    {"remote.uploaded_in_order", "ckptfs_remote_uploaded_in_order_files_total", Kind::kCounter,
     "Of those, from the first on without a gap: on the object store."},
    {"remote.pending_files", "ckptfs_remote_pending_files", Kind::kGauge,
     "File versions not yet on the object store."},
    {"remote.pending_bytes", "ckptfs_remote_pending_bytes", Kind::kGauge,
     "Bytes not yet on the object store."},
    {"remote.bytes_uploaded", "ckptfs_remote_uploaded_bytes_total", Kind::kCounter,
     "Bytes put on the object store."},
    {"remote.files_uploaded", "ckptfs_remote_uploaded_files_total", Kind::kCounter,
     "Objects completed on the object store."},
    {"remote.retries", "ckptfs_remote_retries_total", Kind::kCounter,
     "Requests to the object store retried."},
    {"remote.errors", "ckptfs_remote_errors_total", Kind::kCounter,
     "Upload steps that failed after their retries (started again after a back-off)."},
    {"remote.failed_files", "ckptfs_remote_failed_files", Kind::kGauge,
     "File versions given up for good (refused for their checksum, or too often)."},
    {"remote.corrupt_files", "ckptfs_remote_corrupt_files_total", Kind::kCounter,
     "Uploads given up because the local bytes no longer match their checksum record."},
    {"remote.local_files_replaced", "ckptfs_remote_replaced_local_files_total", Kind::kCounter,
     "Files of a reused backing directory replaced by the store's newer object of their name."},
    {"remote.last_error", "ckptfs_remote_failing", Kind::kFlag,
     "1 while the last request to the object store failed."},
    {"remote.directories_listed", "ckptfs_remote_listed_directories_total", Kind::kCounter,
     "Directories listed from the object store (once each per mount)."},
    {"remote.files_fetched", "ckptfs_remote_fetched_files_total", Kind::kCounter,
     "Files fetched from the object store into the backing directory."},
    {"remote.bytes_fetched", "ckptfs_remote_fetched_bytes_total", Kind::kCounter,
     "Bytes fetched from the object store."},
    {"remote.names_refused", "ckptfs_remote_refused_names_total", Kind::kCounter,
     "Names the object store listed that are not one plain name of their directory."},
    {"remote.files_evicted", "ckptfs_remote_evicted_files_total", Kind::kCounter,
     "Files on the object store evicted from the backing directory (local_size)."},
    {"remote.bytes_evicted", "ckptfs_remote_evicted_bytes_total", Kind::kCounter,
     "Bytes of those files."},
    {"worker", "", Kind::kNone, ""},
    {"shared.node", "node", Kind::kLabel, ""},
    {"shared.incarnation", "", Kind::kNone, ""},
    {"shared.members", "ckptfs_members", Kind::kCount,
     "Live members of the shared backing directory."},
    {"shared.pending_commits", "ckptfs_pending_commits", Kind::kCount,
     "Commits of this mount waiting for other members."},
    {"shared.acks_owed", "ckptfs_acks_owed", Kind::kGauge,
     "Commits of other members this mount has yet to acknowledge."},
    {"shared.held_markers", "ckptfs_held_markers", Kind::kGauge,
     "Commit markers held until their commit is decided."},
    {"shared.commits_published", "ckptfs_commits_published_total", Kind::kCounter,
     "Commit markers published after every member acknowledged."},
    {"shared.commits_failed", "ckptfs_commits_failed_total", Kind::kCounter,
     "Commit markers never published: their commit failed."},
    {"shared.last_commit_error", "ckptfs_commit_failing", Kind::kFlag,
     "1 when the latest commit failed."},
    {"replication", "", Kind::kNone, ""},
    {"replication.replicas", "ckptfs_replicas", Kind::kGauge,
     "Partners that hold each sealed version in memory (-o replicas)."},
    {"replication.endpoint", "", Kind::kNone, ""},
    {"replication.sealed_seq", "", Kind::kNone, ""},
    {"replication.replicated_seq", "", Kind::kNone, ""},
    {"replication.durable_seq", "", Kind::kNone, ""},
    {"replication.not_replicated_entries", "ckptfs_not_replicated_entries", Kind::kGauge,
     "Entries sealed and neither in the partners' memory nor durable yet."},
    {"replication.queued_versions", "ckptfs_replication_queued_versions", Kind::kGauge,
     "Sealed versions not durable yet, kept for the partners."},
    {"replication.partners", "ckptfs_replication_partners", Kind::kCount,
     "Partners this member replicates to."},
    {"replication.held_replicas", "ckptfs_replicas_held", Kind::kGauge,
     "Partners' versions this member holds in memory."},
    {"replication.held_bytes", "ckptfs_replicas_held_bytes", Kind::kGauge,
     "Bytes of partners' versions this member holds."},
    {"replication.held_limit", "ckptfs_replica_memory_bytes", Kind::kGauge,
     "The most this member holds of partners' versions (replica_memory)."},
    {"replication.received_replicas", "ckptfs_replicas_received_total", Kind::kCounter,
     "Partners' versions received."},
    {"replication.dropped_replicas", "ckptfs_replicas_dropped_total", Kind::kCounter,
     "Partners' versions dropped once their owner made them durable."},
    {"replication.completed_for_dead", "ckptfs_replicas_completed_for_dead_total", Kind::kCounter,
     "Dead partners' versions made durable to complete their commits."},
    {"replication.offers_refused_full", "ckptfs_replica_offers_refused_full_total",
     Kind::kCounter, "Offers refused because replica_memory was full (offered again later)."},
    {"replication.held_for", "", Kind::kNone, ""},
    {"replication.connections_accepted", "ckptfs_replication_connections_accepted_total",
     Kind::kCounter, "Members that connected and proved the group secret."},
    {"replication.connections_refused", "ckptfs_replication_connections_refused_total",
     Kind::kCounter, "Connections refused: no proof of the group secret, or not the protocol."},
    {"worker.pid", "", Kind::kNone, ""},
    {"worker.supervisor_pid", "", Kind::kNone, ""},
    {"worker.binary", "", Kind::kNone, ""},
    {"worker.version", "version", Kind::kLabel, ""},
    {"worker.number", "ckptfs_worker_number", Kind::kGauge,
     "Workers started before the one serving."},
    {"worker.handoffs", "ckptfs_worker_handoffs_total", Kind::kCounter,
     "Workers replaced after handing over (upgrades, restarts)."},
    {"worker.crashes", "ckptfs_worker_crashes_total", Kind::kCounter,
     "Workers that died without handing over."},
    {"worker.resent_requests", "ckptfs_worker_resent_requests", Kind::kGauge,
     "Requests the kernel sent this worker again after its predecessor died."},
    {"worker.io_uring_requests", "ckptfs_worker_io_uring_requests", Kind::kGauge,
     "Requests this worker served over FUSE over io_uring (-o io_uring=on)."},
    {"worker.request_poll_us", "ckptfs_worker_request_poll_max_seconds", Kind::kMicroseconds,
     "The longest window this worker's threads poll for the next small request (-o request_poll)."},
    {"worker.request_poll_window_us", "ckptfs_worker_request_poll_window_seconds",
     Kind::kMicroseconds, "The polling window now."},
    {"worker.request_polls", "ckptfs_worker_request_polls", Kind::kGauge,
     "Windows this worker polled for a request."},
    {"worker.requests_caught_polling", "ckptfs_worker_requests_caught_polling", Kind::kGauge,
     "Requests this worker found while polling."},
    {"worker.request_polls_contended", "ckptfs_worker_request_polls_contended", Kind::kGauge,
     "Polling windows this worker ended because another thread wanted the CPU."},
    {"worker.request_polling_seconds", "ckptfs_worker_request_polling_seconds", Kind::kGauge,
     "Time this worker spent polling for requests."},
    {"worker.takeover_ms", "ckptfs_worker_takeover_seconds", Kind::kMilliseconds,
     "How long the requests waited while this worker took over."},
    {"worker.uptime_s", "ckptfs_worker_uptime_seconds", Kind::kGauge,
     "Time since this worker started."},
    {"worker.upgrade_error", "ckptfs_upgrade_failing", Kind::kFlag,
     "1 when the latest upgrade failed."},
};

const Field* FindField(std::string_view key) {
  for (const Field& f : kFields) {
    if (key == f.key) return &f;
  }
  return nullptr;
}

// A number in the exposition format (Go's float syntax; integers exactly).
std::string Number(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value > 0 ? "+Inf" : "-Inf";
  char buf[40];
  if (value == std::floor(value) && std::fabs(value) < 1e15) {
    std::snprintf(buf, sizeof buf, "%.0f", value);
  } else {
    std::snprintf(buf, sizeof buf, "%.9g", value);
  }
  return buf;
}

// A label value with \, " and newlines escaped.
std::string LabelValue(const std::string& text) {
  std::string out;
  for (char c : text) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

// Whether `h` is a histogram object of core/stats/histogram.h: bounds, one count more, a sum.
bool IsHistogram(const nlohmann::json& h) {
  if (!h.is_object() || !h.contains("le") || !h.contains("counts") || !h["le"].is_array() ||
      !h["counts"].is_array() || h["counts"].size() != h["le"].size() + 1 ||
      !h.value("sum", nlohmann::json()).is_number()) {
    return false;
  }
  const nlohmann::json& counts = h["counts"];
  for (size_t i = 0; i < counts.size(); ++i) {
    if (!counts[i].is_number() || (i < h["le"].size() && !h["le"][i].is_number())) return false;
  }
  return true;
}

class Writer {
 public:
  // `mountpoint`: the label of every sample, so that the metrics of several mounts of a node
  // (several files of one textfile collector) stay apart.
  explicit Writer(const std::string& mountpoint)
      : mountpoint_label_("mountpoint=\"" + LabelValue(mountpoint) + "\"") {}
  void Header(const char* metric, const char* type, const char* help) {
    text_ += std::string("# HELP ") + metric + " " + help + "\n";
    text_ += std::string("# TYPE ") + metric + " " + type + "\n";
  }
  void Sample(const std::string& metric, const std::string& labels, double value) {
    text_ += metric + "{" + mountpoint_label_ + (labels.empty() ? "" : "," + labels) + "} " +
             Number(value) + "\n";
  }
  // The samples of a histogram object of core/stats/histogram.h (IsHistogram).
  void Histogram(const std::string& metric, const std::string& labels, const nlohmann::json& h) {
    const std::string sep = labels.empty() ? "" : labels + ",";
    const nlohmann::json& counts = h["counts"];
    for (size_t i = 0; i < counts.size(); ++i) {
      const std::string le = i < h["le"].size() ? Number(h["le"][i].get<double>()) : "+Inf";
      Sample(metric + "_bucket", sep + "le=\"" + le + "\"", counts[i].get<double>());
    }
    Sample(metric + "_sum", labels, h["sum"].get<double>());
    Sample(metric + "_count", labels, counts.back().get<double>());
  }
  const std::string& text() const { return text_; }

 private:
  const std::string mountpoint_label_;
  std::string text_;
};

// One field's metric; false when its value has the wrong type.
bool Render(const Field& f, const nlohmann::json& value, Writer* w) {
  switch (f.kind) {
    case Kind::kCounter:
    case Kind::kGauge:
    case Kind::kMilliseconds:
    case Kind::kMicroseconds:
      if (!value.is_number()) return false;
      w->Header(f.metric, f.kind == Kind::kCounter ? "counter" : "gauge", f.help);
      w->Sample(f.metric, "",
                value.get<double>() / (f.kind == Kind::kMilliseconds   ? 1e3
                                       : f.kind == Kind::kMicroseconds ? 1e6
                                                                       : 1.0));
      return true;
    case Kind::kFlag:
      if (!value.is_boolean() && !value.is_string()) return false;
      w->Header(f.metric, "gauge", f.help);
      w->Sample(f.metric, "",
                value.is_boolean() ? value.get<bool>() : !value.get<std::string>().empty());
      return true;
    case Kind::kCount:
      if (!value.is_array()) return false;
      w->Header(f.metric, "gauge", f.help);
      w->Sample(f.metric, "", static_cast<double>(value.size()));
      return true;
    case Kind::kHistogram:
      if (!IsHistogram(value)) return false;
      w->Header(f.metric, "histogram", f.help);
      w->Histogram(f.metric, "", value);
      return true;
    case Kind::kLabel:
    case Kind::kNone:
      return true;
  }
  return true;
}

// The metrics of the members of a shared backing directory, labelled by node.
void RenderMembers(const nlohmann::json& members, Writer* w) {
  if (!members.is_array() || members.empty()) return;
  struct PerMember {
    const char* key;
    const char* metric;
    double scale;
    const char* help;
  };
  const PerMember kPerMember[] = {
      {"beat_age_ms", "ckptfs_member_heartbeat_age_seconds", 1e-3,
       "Time since the member's heartbeat last changed, on this node's clock."},
      {"flush_lag_entries", "ckptfs_member_flush_lag_entries", 1,
       "Entries the member sealed and has not made durable."},
      {"pending_bytes", "ckptfs_member_pending_bytes", 1,
       "Bytes the member has not made durable."}};
  for (const PerMember& p : kPerMember) {
    w->Header(p.metric, "gauge", p.help);
    for (const nlohmann::json& m : members) {
      if (!m.is_object() || !m.value("node", nlohmann::json()).is_string() ||
          !m.value(p.key, nlohmann::json()).is_number()) {
        continue;
      }
      w->Sample(p.metric, "node=\"" + LabelValue(m["node"].get<std::string>()) + "\"",
                m[p.key].get<double>() * p.scale);
    }
  }
}

void RenderRequests(const nlohmann::json& requests, Writer* w) {
  if (!requests.is_object() || requests.empty()) return;
  const char* metric = "ckptfs_fuse_request_seconds";
  w->Header(metric, "histogram",
            "FUSE requests by operation: from reading each to answering it.");
  for (const auto& [operation, histogram] : requests.items()) {
    if (IsHistogram(histogram)) {
      w->Histogram(metric, "operation=\"" + LabelValue(operation) + "\"", histogram);
    }
  }
}

}  // namespace

std::string MetricsText(const nlohmann::json& stats, const std::string& mountpoint,
                        std::vector<std::string>* unknown) {
  Writer w(mountpoint);
  w.Header("ckptfs_up", "gauge", "1 when the mount's figures could be read.");
  w.Sample("ckptfs_up", "", 1);
  std::string info_labels;
  auto visit = [&](const std::string& prefix, const nlohmann::json& object) {
    for (const auto& [key, value] : object.items()) {
      const std::string path = prefix + key;
      const Field* f = FindField(path);
      if (!f) {
        if (unknown) unknown->push_back(path);
        continue;
      }
      if (f->kind == Kind::kLabel && value.is_string()) {
        info_labels += std::string(info_labels.empty() ? "" : ",") + f->metric + "=\"" +
                       LabelValue(value.get<std::string>()) + "\"";
      }
      if (!Render(*f, value, &w) && unknown) unknown->push_back(path + " (wrong type)");
    }
  };
  if (!stats.is_object()) return w.text();
  visit("", stats);
  for (const char* group : {"shared", "replication", "worker"}) {
    if (stats.contains(group) && stats[group].is_object()) {
      visit(std::string(group) + ".", stats[group]);
    }
  }
  if (stats.contains("shared") && stats["shared"].is_object()) {
    RenderMembers(stats["shared"].value("members", nlohmann::json()), &w);
  }
  RenderRequests(stats.value("fuse_request_seconds", nlohmann::json()), &w);
  w.Header("ckptfs_info", "gauge", "The mount's flush backend, version and node, as labels.");
  w.Sample("ckptfs_info", info_labels, 1);
  return w.text();
}

std::vector<std::string> MetricsTextKeys() {
  std::vector<std::string> keys;
  for (const Field& f : kFields) keys.emplace_back(f.key);
  return keys;
}

std::string MetricsDownText(const std::string& mountpoint) {
  Writer w(mountpoint);
  w.Header("ckptfs_up", "gauge", "1 when the mount's figures could be read.");
  w.Sample("ckptfs_up", "", 0);
  return w.text();
}

}  // namespace ckptfs
