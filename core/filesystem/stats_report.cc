#include "core/filesystem/stats_report.h"

#include <algorithm>

#include <atomic>
#include <cstdint>
#include <utility>

namespace ckptfs {
namespace {

// The stats' counters reported as they are, by key.
constexpr std::pair<const char*, std::atomic<uint64_t> Stats::*> kCounters[] = {
    {"bytes_written", &Stats::bytes_written},
    {"bytes_read", &Stats::bytes_read},
    {"bytes_flushed", &Stats::bytes_flushed},
    {"files_flushed", &Stats::files_flushed},
    {"bytes_checksummed", &Stats::bytes_checksummed},
    {"bytes_summed_at_flush", &Stats::bytes_summed_at_flush},
    {"bytes_read_back", &Stats::bytes_read_back},
    {"checksum_mismatches", &Stats::checksum_mismatches},
    {"read_files_verified", &Stats::read_files_verified},
    {"read_mismatches", &Stats::read_mismatches},
    {"read_files_unrecorded", &Stats::read_files_unrecorded},
    {"bytes_verified_for_reads", &Stats::bytes_verified_for_reads},
    {"forked_writer_opens", &Stats::forked_writer_opens},
    {"bytes_landed", &Stats::bytes_landed},
    {"files_read_ahead", &Stats::files_read_ahead},
    {"versions_skipped", &Stats::versions_skipped},
    {"flush_batches", &Stats::flush_batches},
    {"flush_errors", &Stats::flush_errors},
    {"spill_errors", &Stats::spill_errors},
    {"taken_over_in_memory", &Stats::taken_over_in_memory},
    {"taken_over_from_files", &Stats::taken_over_from_files},
    {"recovered_versions", &Stats::recovered_versions},
    {"recovered_bytes", &Stats::recovered_bytes},
    {"recovered_handles", &Stats::recovered_handles},
    {"recovered_open_bytes", &Stats::recovered_open_bytes},
    {"kernel_record_refused", &Stats::kernel_record_refused},
};

}  // namespace

std::string StatsReport::Json() const {
  nlohmann::json j;
  uint64_t pending_bytes, pending_entries;
  std::string last_error;
  nlohmann::json zarr_arrays;
  {
    NamespaceLock lock(ns.mutex());
    zarr_arrays = zarr.StatsLocked();
    pending_bytes = journal.pending_bytes();
    pending_entries = journal.pending_entries();
    Status flush_error = flusher.last_error();
    last_error = flush_error.ok() ? "" : flush_error.ToString();
  }
  double busy_s = static_cast<double>(stats.flush_busy_ns.load()) / 1e9;
  j["backend"] = flusher.backend_name();
  j["cache_size"] = config.cache_size;
  // What files hold: blocks held ahead to land writes in are free memory to them.
  const size_t used = arena.used_blocks();
  j["memory_used"] = (used - std::min(used, arena.held_ahead_blocks())) * kBlockSize;
  j["memory_mapped"] = arena.mapped_blocks() * kBlockSize;
  j["memory_prefaulted"] = arena.prefaulted_bytes();
  j["prefault_running"] = config.prefault && !arena.prefault_done();
  j["memory_given_back"] = arena.given_back_bytes();
  j["writers_waiting"] = arena.waiting_writers();
  j["dirty_bytes"] = pending_bytes;
  j["pending_entries"] = pending_entries;
  j["flush_throughput"] =
      busy_s > 0 ? static_cast<double>(stats.bytes_flushed.load()) / busy_s : 0.0;
  j["evicted_bytes"] = stats.evicted_blocks.load() * kBlockSize;
  j["spilled_bytes"] = stats.spilled_blocks.load() * kBlockSize;
  const Status spill_error = flusher.spill_error();
  j["spill_error"] = spill_error.ok() ? "" : spill_error.ToString();
  j["cache_shared"] = arena.shared();
  for (const auto& [key, counter] : kCounters) j[key] = (stats.*counter).load();
  j["last_error"] = last_error;
  j["zarr_fine_grid"] = zarr_arrays;
  j["tensor_views"] = tensors.size();
  j["flush_seconds"] = stats.flush_seconds.ToJson();
  j["save_to_durable_seconds"] = stats.save_to_durable_seconds.ToJson();
  if (request_stats) j["fuse_request_seconds"] = request_stats();
  if (uploader) {
    const UploadProgress p = uploader->Progress();
    j["remote"] = {
        {"location", config.remote},
        {"handed_over", p.handed_over},
        {"uploaded_in_order", p.done_in_order},
        {"pending_files", p.pending_files},
        {"failed_files", p.failed_files},
        {"corrupt_files", stats.remote_corrupt_files.load()},
        {"pending_bytes", p.pending_bytes},
        {"bytes_uploaded", stats.remote_bytes_uploaded.load()},
        {"files_uploaded", stats.remote_files_uploaded.load()},
        {"retries", stats.remote_retries.load()},
        {"errors", stats.remote_errors.load()},
        {"last_error", p.last_error.ok() ? "" : p.last_error.ToString()},
        {"directories_listed", stats.remote_directories_listed.load()},
        {"files_fetched", stats.remote_files_fetched.load()},
        {"bytes_fetched", stats.remote_bytes_fetched.load()},
        {"names_refused", stats.remote_names_refused.load()},
        {"local_files_replaced", stats.remote_local_files_replaced.load()},
        {"files_evicted", stats.remote_files_evicted.load()},
        {"bytes_evicted", stats.remote_bytes_evicted.load()},
    };
  }
  if (shared) {
    nlohmann::json group = shared->StatusJson();
    group["held_markers"] = flusher.held_markers();
    group["commits_published"] = stats.commits_published.load();
    group["commits_failed"] = stats.commits_failed.load();
    Status failure = flusher.last_commit_failure();
    group["last_commit_error"] = failure.ok() ? "" : failure.ToString();
    j["shared"] = std::move(group);
  }
  if (replicator) {
    const replication::ReplicatorStatus r = replicator->Status();
    const uint64_t sealed = journal.last_seq();
    const uint64_t replicated = std::min(r.replicated_seq, sealed);
    nlohmann::json partners = nlohmann::json::array();
    for (const replication::PartnerStatus& p : r.partners) {
      partners.push_back({{"node", p.node},
                          {"endpoint", p.endpoint},
                          {"connected", p.link.connected},
                          {"replicas_stored", p.link.replicas_stored},
                          {"bytes_stored", p.link.bytes_stored},
                          {"offers_full", p.link.offers_full},
                          {"replicas_unsendable", p.link.replicas_unsendable},
                          {"queued", p.link.queued},
                          {"last_error", p.link.last_error}});
    }
    nlohmann::json held_for = nlohmann::json::array();
    for (const auto& [owner, counts] : r.held_by_owner) {
      held_for.push_back({{"node", owner}, {"replicas", counts.first}, {"bytes", counts.second}});
    }
    j["replication"] = {
        {"replicas", r.replicas},
        {"endpoint", r.endpoint},
        {"sealed_seq", sealed},
        {"replicated_seq", replicated},
        {"durable_seq", journal.durable_seq()},
        {"not_replicated_entries", sealed - replicated},
        {"queued_versions", r.queued_versions},
        {"partners", std::move(partners)},
        {"held_replicas", r.held.replicas},
        {"held_bytes", r.held.bytes},
        {"held_limit", r.held.limit},
        {"received_replicas", r.held.received},
        {"completed_for_dead", r.held.completed_for_dead},
        {"dropped_replicas", r.held.dropped},
        {"offers_refused_full", r.held.refused_full},
        {"held_for", std::move(held_for)},
        {"connections_accepted", r.connections_accepted},
        {"connections_refused", r.connections_refused},
    };
  }
  if (worker_info) {
    j["worker"] = nlohmann::json::parse(worker_info(), nullptr, /*allow_exceptions=*/false);
  }
  return j.dump(2) + "\n";
}

}  // namespace ckptfs
