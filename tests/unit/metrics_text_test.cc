// The stats as Prometheus metrics: every figure of a real mount's stats (a Filesystem that
// flushed a file, in the shared mode, with a worker's figures and request latencies) has a
// metric, and the text keeps the exposition format's rules. promtool checks the served text in
// tests/mount/test_deploy.py.
#include "core/stats/metrics_text.h"

#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <regex>
#include <sstream>

#include "core_test_util.h"
#include "fs/session_hooks.h"
#include "fs/worker.h"

namespace ckptfs {
namespace {

using testing_util::FsOptions;
using testing_util::StartFs;
using testing_util::TempDir;

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

TEST(MetricsTextTest, EveryFigureOfARealMountsStatsHasAMetric) {
  TempDir backing;
  FsOptions o;
  o.node = "node-a";
  std::unique_ptr<Filesystem> fs = StartFs(backing.path(), o);
  ASSERT_NE(fs, nullptr);
  ControlBlock block;
  fs->SetWorkerInfo([&block] { return WorkerInfo(block, MonotonicNanos()); });
  fs->SetRequestStats(RequestLatencyJson);
  ASSERT_TRUE(testing_util::WriteFile(*fs, "/model.pt", std::string(1 << 20, 'x')).ok());
  ASSERT_TRUE(fs->Sync().ok());

  std::vector<std::string> unknown;
  const std::string text = MetricsText(nlohmann::json::parse(fs->StatsJson()), "/mnt", &unknown);
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
  ASSERT_TRUE(fs->Shutdown().ok());
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

}  // namespace
}  // namespace ckptfs
