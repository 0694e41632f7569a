// StatsReport: the JSON of `.ckptfs/stats` (every key described in core/stats/stats_schema.json),
// made from the parts of a mount it reads.
//
// Thread-safe: takes the namespace lock while it reads the journal and the zarr views.
#pragma once

#include <functional>
#include <nlohmann/json.hpp>
#include <string>

#include "core/base/config.h"
#include "core/base/thread_annotations.h"
#include "core/flush/flusher.h"
#include "core/memory/arena.h"
#include "core/remote/uploader.h"
#include "core/replication/replicator.h"
#include "core/shared/shared_mount.h"
#include "core/stats/stats.h"
#include "core/tree/journal.h"
#include "core/tree/namespace.h"
#include "core/views/tensor_view/tensor_views.h"
#include "core/views/zarr_views.h"

namespace ckptfs {

struct StatsReport {
  const Config& config;
  Stats& stats;
  Arena& arena;
  Journal& journal;
  Namespace& ns;
  ZarrViews& zarr;
  TensorViews& tensors;
  Flusher& flusher;
  SharedMount* shared;  // Null unless shared mode.
  const Uploader* uploader;  // Null unless -o remote.
  const replication::Replicator* replicator;  // Null unless -o replicas.
  // The daemon's parts of the report (Filesystem::SetRequestStats, SetWorkerInfo); unset: left out.
  const std::function<nlohmann::json()>& request_stats;
  const std::function<std::string()>& worker_info;

  // The report, indented, with a final newline.
  std::string Json() const EXCLUDES(ns_lock);
};

}  // namespace ckptfs
