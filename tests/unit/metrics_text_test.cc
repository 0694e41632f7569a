// The stats as Prometheus metrics: every figure of a real mount's stats (a Filesystem that
// flushed a file and shows a zarr array with the fine grid, in the shared mode, with a worker's
// figures and request latencies) has a metric, and the text keeps the exposition format's rules.
// promtool checks the served text in tests/mount/test_deploy.py.
//
// The stats keys are defined once, in core/stats/stats_schema.json: a real mount's stats hold
// exactly its keys with its types, and the metrics know exactly those keys. The Python readers
// check each stats file they read against the same schema (tests/support/ckptfs_testing/stats.py).
#include "core/stats/metrics_text.h"

#include <gtest/gtest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>

#include "core_test_util.h"
#include "moto_server.h"
#include "fs/session_hooks.h"
#include "fs/worker.h"

namespace ckptfs {
namespace {

using testing_util::FsOptions;
using testing_util::StartFs;
using testing_util::TempDir;
using testing_util::WriteHostFile;

// The samples of `text`: "name{labels}" -> value; fails the test on a line that is neither a
// sample nor a HELP/TYPE comment.
std::map<std::string, double> Samples(const std::string& text) {
  static const std::regex kSample(
      R"(([a-zA-Z_:][a-zA-Z0-9_:]*(\{([^"}]|"([^"\\]|\\.)*")*\})?) (\S+))");
  std::map<std::string, double> out;
  std::istringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) {
    if (line.rfind("# HELP ", 0) == 0 || line.rfind("# TYPE ", 0) == 0) continue;
    std::smatch m;
    if (!std::regex_match(line, m, kSample)) {
      ADD_FAILURE() << "not a sample: " << line;
      continue;
    }
    EXPECT_EQ(out.count(m[1]), 0u) << "twice: " << line;
    out[m[1]] = m[5] == "+Inf" ? INFINITY : std::stod(m[5]);
  }
  return out;
}

// The stats of a real mount: a Filesystem in the shared mode that flushed a 1 MiB file and shows
// a zarr array with the fine grid, with a worker's figures and request latencies.
nlohmann::json RealMountStats() {
  TempDir backing;
  // A zarr array whose 2 MiB chunks are shown as a fine grid, its first chunk on the store.
  EXPECT_EQ(mkdir((backing.path() + "/arr").c_str(), 0755), 0);
  WriteHostFile(backing.path() + "/arr/.zarray",
                R"({"chunks": [524288], "compressor": null, "dtype": "<f4", "fill_value": 0.0,)"
                R"( "filters": null, "order": "C", "shape": [1048576], "zarr_format": 2})");
  WriteHostFile(backing.path() + "/arr/0", std::string(2 << 20, 'z'));
  // A remote tier on a real S3 server: its figures are part of the stats.
  testing_util::MotoServer s3;
  EXPECT_TRUE(s3.ready() && s3.CreateBucket("stats-bucket")) << CKPTFS_MOTO_SERVER;
  setenv("AWS_ACCESS_KEY_ID", "stats-test-key", 1);
  setenv("AWS_SECRET_ACCESS_KEY", "stats-test-secret", 1);
  // Replication: its figures too (no partner: a member alone).
  const std::string secret = backing.path() + ".key";
  WriteHostFile(secret, "the secret of the stats test's group");
  EXPECT_EQ(chmod(secret.c_str(), 0600), 0);
  FsOptions o;
  o.node = "node-a";
  o.replicas = 1;
  o.replication_secret = secret;
  o.replication_address = "127.0.0.1";
  o.remote = "s3://stats-bucket/run";
  o.remote_endpoint = s3.endpoint();
  std::unique_ptr<Filesystem> fs = StartFs(backing.path(), o);
  if (fs == nullptr) {
    ADD_FAILURE() << "no Filesystem";
    return nlohmann::json::object();
  }
  ControlBlock block;
  fs->SetWorkerInfo([&block] { return WorkerInfo(block, MonotonicNanos()); });
  fs->SetRequestStats(RequestLatencyJson);
  EXPECT_TRUE(testing_util::WriteFile(*fs, "/model.pt", std::string(1 << 20, 'x')).ok());
  EXPECT_TRUE(testing_util::ReadFile(*fs, "/arr/.zarray").ok());
  EXPECT_TRUE(fs->Sync().ok());
  nlohmann::json stats = nlohmann::json::parse(fs->StatsJson());
  EXPECT_TRUE(fs->Shutdown().ok());
  unlink(secret.c_str());
  return stats;
}

TEST(MetricsTextTest, EveryFigureOfARealMountsStatsHasAMetric) {
  std::vector<std::string> unknown;
  const std::string text = MetricsText(RealMountStats(), "/mnt", &unknown);
  EXPECT_TRUE(unknown.empty()) << "stats without a metric: " << ::testing::PrintToString(unknown);
  std::map<std::string, double> samples = Samples(text);
  EXPECT_EQ(samples[R"(ckptfs_up{mountpoint="/mnt"})"], 1);
  EXPECT_EQ(samples[R"(ckptfs_written_bytes_total{mountpoint="/mnt"})"], 1 << 20);
  EXPECT_EQ(samples[R"(ckptfs_flushed_bytes_total{mountpoint="/mnt"})"], 1 << 20);
  EXPECT_EQ(samples[R"(ckptfs_members{mountpoint="/mnt"})"], 1);
  EXPECT_EQ(samples.count(R"(ckptfs_member_heartbeat_age_seconds{mountpoint="/mnt",node="node-a"})"),
            1u);
  EXPECT_EQ(samples.count(
                R"(ckptfs_info{mountpoint="/mnt",backend="io_uring",node="node-a",version=")" +
                std::string(CKPTFS_VERSION) + "\"}"),
            1u)
      << text;
  // The file went through one flush: one observation in each histogram, its +Inf bucket.
  EXPECT_EQ(samples[R"(ckptfs_flush_seconds_count{mountpoint="/mnt"})"], 1);
  EXPECT_EQ(samples[R"(ckptfs_flush_seconds_bucket{mountpoint="/mnt",le="+Inf"})"], 1);
  EXPECT_EQ(samples[R"(ckptfs_save_to_durable_seconds_count{mountpoint="/mnt"})"], 1);
}

TEST(MetricsTextTest, HistogramBucketsAreCumulativeAndEndInTheCount) {
  Histogram h(kRequestBuckets);
  for (int us : {10, 60, 60, 200, 3000, 20'000'000}) h.Observe(std::chrono::microseconds(us));
  std::map<std::string, double> samples =
      Samples(MetricsText({{"flush_seconds", h.ToJson()}}, "/m"));
  double previous = 0;
  for (double le : kRequestBuckets) {
    std::ostringstream bound;
    bound << le;
    const double count =
        samples.at(R"(ckptfs_flush_seconds_bucket{mountpoint="/m",le=")" + bound.str() + "\"}");
    EXPECT_GE(count, previous) << le;
    previous = count;
  }
  EXPECT_EQ(samples.at(R"(ckptfs_flush_seconds_bucket{mountpoint="/m",le="5e-05"})"), 1);
  EXPECT_EQ(samples.at(R"(ckptfs_flush_seconds_bucket{mountpoint="/m",le="0.0001"})"), 3);
  EXPECT_EQ(samples.at(R"(ckptfs_flush_seconds_bucket{mountpoint="/m",le="10"})"), 5);
  EXPECT_EQ(samples.at(R"(ckptfs_flush_seconds_bucket{mountpoint="/m",le="+Inf"})"), 6);
  EXPECT_EQ(samples.at(R"(ckptfs_flush_seconds_count{mountpoint="/m"})"), 6);
  EXPECT_NEAR(samples.at(R"(ckptfs_flush_seconds_sum{mountpoint="/m"})"), 20.00333, 1e-6);
}

TEST(MetricsTextTest, HostileStatsAreLeftOutNeverRenderedAsTheyCame) {
  nlohmann::json stats = {{"bytes_written", "lots"},
                          {"flush_seconds", {{"le", {1}}, {"counts", {1}}, {"sum", 1}}},
                          {"shared", {{"members", {{{"node", "a\"}\nb"}, {"beat_age_ms", 5}}}}}},
                          {"no_such_figure", 1}};
  std::vector<std::string> unknown;
  const std::string text = MetricsText(stats, "/mnt/\"x\"\n", &unknown);
  std::map<std::string, double> samples = Samples(text);
  EXPECT_EQ(samples.count(R"(ckptfs_written_bytes_total{mountpoint="/mnt/\"x\"\n"})"), 0u);
  EXPECT_EQ(samples.count(R"(ckptfs_flush_seconds_count{mountpoint="/mnt/\"x\"\n"})"), 0u);
  EXPECT_EQ(samples.at(
                R"(ckptfs_member_heartbeat_age_seconds{mountpoint="/mnt/\"x\"\n",node="a\"}\nb"})"),
            0.005);
  EXPECT_EQ(unknown, (std::vector<std::string>{"bytes_written (wrong type)",
                                               "flush_seconds (wrong type)", "no_such_figure"}));
  EXPECT_EQ(Samples(MetricsText("not an object", "/m")).size(), 1u);
}

TEST(MetricsTextTest, AMountThatCannotBeReadIsDown) {
  EXPECT_EQ(Samples(MetricsDownText("/m")),
            (std::map<std::string, double>{{R"(ckptfs_up{mountpoint="/m"})", 0}}));
}

// The schema (core/stats/stats_schema.json).
nlohmann::json Schema() {
  std::ifstream in(CKPTFS_STATS_SCHEMA);
  return nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
}

bool IsSchemaHistogram(const nlohmann::json& v) {
  if (!v.is_object() || v.size() != 3 || !v.contains("le") || !v.contains("counts") ||
      !v.contains("sum") || !v["le"].is_array() || !v["counts"].is_array() ||
      !v["sum"].is_number() || v["counts"].size() != v["le"].size() + 1) {
    return false;
  }
  for (const nlohmann::json& bound : v["le"]) {
    if (!bound.is_number()) return false;
  }
  for (const nlohmann::json& count : v["counts"]) {
    if (!count.is_number_integer()) return false;
  }
  return true;
}

// Whether `v` is of the schema's `type` (its "types" say what each means).
bool OfType(const nlohmann::json& v, const std::string& type) {
  auto all = [&](auto of) {
    if (!v.is_array()) return false;
    for (const nlohmann::json& item : v) {
      if (!of(item)) return false;
    }
    return true;
  };
  if (type == "string") return v.is_string();
  if (type == "integer") return v.is_number_integer();
  if (type == "number") return v.is_number();
  if (type == "boolean") return v.is_boolean();
  if (type == "integers") return all([](const nlohmann::json& i) { return i.is_number_integer(); });
  if (type == "strings") return all([](const nlohmann::json& i) { return i.is_string(); });
  if (type == "histogram") return IsSchemaHistogram(v);
  if (type == "histograms") {
    if (!v.is_object()) return false;
    for (const auto& [name, h] : v.items()) {
      if (!IsSchemaHistogram(h)) return false;
    }
    return true;
  }
  if (type == "object") return v.is_object();
  if (type == "objects") return all([](const nlohmann::json& i) { return i.is_object(); });
  return false;
}

// Appends to `out` each difference between the object `value` (at `where`) and the schema's
// `keys`: a key written that the schema lacks, a key of the schema not written, a value of
// another type; into objects and every item of arrays of objects.
void Differences(const nlohmann::json& keys, const nlohmann::json& value, const std::string& where,
                 std::vector<std::string>* out) {
  for (const auto& [key, v] : value.items()) {
    if (!keys.contains(key)) {
      out->push_back(where + key + " is written but not in the schema");
      continue;
    }
    const nlohmann::json& spec = keys[key];
    const std::string type = spec.value("type", "");
    if (!OfType(v, type)) {
      out->push_back(where + key + " is not of type " + type + ": " + v.dump());
    } else if (type == "object") {
      Differences(spec.at("keys"), v, where + key + ".", out);
    } else if (type == "objects") {
      for (const nlohmann::json& item : v) Differences(spec.at("keys"), item, where + key + "[].", out);
    }
  }
  for (const auto& [key, spec] : keys.items()) {
    if (!value.contains(key)) out->push_back(where + key + " is in the schema but not written");
  }
}

// The schema's keys as MetricsText names them ("shared.node"); the items of arrays left out.
void KeyPaths(const nlohmann::json& keys, const std::string& where, std::set<std::string>* out) {
  for (const auto& [key, spec] : keys.items()) {
    out->insert(where + key);
    if (spec.value("type", "") == "object") KeyPaths(spec.at("keys"), where + key + ".", out);
  }
}

TEST(StatsSchemaTest, EveryKeyHasATypeAndAMeaning) {
  const nlohmann::json schema = Schema();
  ASSERT_TRUE(schema.is_object() && schema.contains("keys")) << CKPTFS_STATS_SCHEMA;
  std::vector<std::pair<std::string, nlohmann::json>> todo{{"", schema["keys"]}};
  size_t keys = 0;
  while (!todo.empty()) {
    auto [where, level] = todo.back();
    todo.pop_back();
    for (const auto& [key, spec] : level.items()) {
      ++keys;
      EXPECT_TRUE(schema["types"].contains(spec.value("type", ""))) << where << key;
      EXPECT_FALSE(spec.value("meaning", "").empty()) << where << key;
      if (spec.contains("keys")) todo.emplace_back(where + key + ".", spec["keys"]);
    }
  }
  EXPECT_GT(keys, 50u);
}

TEST(StatsSchemaTest, ARealMountWritesExactlyTheSchemasKeysWithTheirTypes) {
  const nlohmann::json stats = RealMountStats();
  ASSERT_FALSE(stats.value("zarr_fine_grid", nlohmann::json::array()).empty())
      << "no zarr array to check the keys of: " << stats.dump(2);
  ASSERT_FALSE(stats.value("shared", nlohmann::json::object())
                   .value("members", nlohmann::json::array())
                   .empty())
      << "no member to check the keys of: " << stats.dump(2);
  std::vector<std::string> differences;
  Differences(Schema()["keys"], stats, "", &differences);
  EXPECT_TRUE(differences.empty()) << ::testing::PrintToString(differences) << "\n"
                                   << stats.dump(2);
}

TEST(StatsSchemaTest, TheMetricsKnowExactlyTheSchemasKeys) {
  std::set<std::string> schema_keys;
  KeyPaths(Schema()["keys"], "", &schema_keys);
  const std::vector<std::string> known = MetricsTextKeys();
  EXPECT_EQ(std::set<std::string>(known.begin(), known.end()), schema_keys);
  EXPECT_EQ(known.size(), schema_keys.size()) << "a key twice in the metrics' table";
}

}  // namespace
}  // namespace ckptfs
