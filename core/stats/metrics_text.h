// The figures of a mount's stats (Filesystem::StatsJson, `.ckptfs/stats`) as Prometheus metrics in
// the text exposition format (version 0.0.4): counters and gauges with their units in their names,
// the histograms of core/stats/histogram.h as histograms. Pure: fs/metrics_server.h serves it.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace ckptfs {

// The content type of the text exposition format.
inline constexpr const char* kMetricsContentType = "text/plain; version=0.0.4; charset=utf-8";

// Renders `stats` of the mount on `mountpoint` (a label of every sample); fields of the wrong
// type are left out. Every field it does not know (a figure added to the stats but not here) is
// named in *unknown ("shared.node" for nested ones) when `unknown` is given.
std::string MetricsText(const nlohmann::json& stats, const std::string& mountpoint,
                        std::vector<std::string>* unknown = nullptr);

// The stats keys MetricsText knows, named as in *unknown (core/stats/stats_schema.json lists the
// same).
std::vector<std::string> MetricsTextKeys();

// The metrics of a mount that cannot be read now (its worker is being replaced, or the mount is
// gone): only ckptfs_up 0 and why, so that a scrape tells "down" from "no data".
std::string MetricsDownText(const std::string& mountpoint);

}  // namespace ckptfs
