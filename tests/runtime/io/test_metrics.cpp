// Metrics JSON lines, the /proc sampler, the GEMM probe and the FLOPs formula.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <clocale>
#include <cstdio>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <thread>

#include "io/metrics.h"
#include "io/metrics_schema.h"
#include "planner/json.h"

namespace fs = std::filesystem;
using namespace capplan::rt;
using capplan::Json;
using capplan::json_double;
using capplan::json_parse;
using capplan::json_string;

namespace {

std::vector<std::string> read_lines(const fs::path& p) {
  std::ifstream in(p);
  std::vector<std::string> out;
  for (std::string l; std::getline(in, l);) out.push_back(l);
  return out;
}

Json parse_or_fail(const std::string& line) {
  std::string err;
  const auto v = json_parse(line, &err);
  EXPECT_TRUE(v.has_value()) << err << " in: " << line;
  EXPECT_TRUE(v && v->is_object()) << line;
  return v ? *v : Json();
}

}  // namespace

// Expectation: a step record with a NaN loss and MFU and an infinite grad norm writes null for
// each (strict JSON has no literal for them) and reads back as not finite; the line stays one
// JSON object, with a '.' even under a comma-decimal LC_NUMERIC (when the locale is installed).
// A number too large for a double is a parse error with the reason, not an exception out of the
// parser (found by the manifest fuzzer: a checkpoint manifest with "8...8E8...8" in it).
TEST(JsonParse, NumberOutOfRangeIsAnErrorNotACrash) {
  std::string err;
  EXPECT_FALSE(json_parse("{\"step\": 1E999999}", &err).has_value());
  EXPECT_NE(err.find("number overflow"), std::string::npos) << err;
  err.clear();
  EXPECT_FALSE(json_parse("{\"step\": 1,", &err).has_value());
  EXPECT_NE(err.find("line 1"), std::string::npos) << err;
  EXPECT_TRUE(json_parse("{\"step\": 1E30}", &err).has_value());
}

TEST(MetricsWriter, NonFiniteNumbersAreNullWhateverTheLocale) {
  const fs::path p = fs::temp_directory_path() / ("capplan_rt_metrics_nan_" + std::to_string(::getpid()) + ".jsonl");
  const char* old = std::setlocale(LC_NUMERIC, nullptr);
  const std::string saved = old ? old : "C";
  std::setlocale(LC_NUMERIC, "de_DE.UTF-8");
  {
    MetricsWriter w;
    std::string err;
    ASSERT_TRUE(w.open(p.string(), &err)) << err;
    StepRecord r;
    r.step = 7;
    r.loss = std::nan("");
    r.mfu = std::nan("");
    r.grad_norm = -INFINITY;
    r.step_time_s = 0.25;
    r.bubble_fraction = 0.125;
    w.write_step(r);
  }
  std::setlocale(LC_NUMERIC, saved.c_str());
  const auto lines = read_lines(p);
  ASSERT_GE(lines.size(), 1u);
  const Json v = parse_or_fail(lines[0]);
  EXPECT_TRUE(v.at("loss").is_null()) << lines[0];
  EXPECT_TRUE(v.at("grad_norm").is_null()) << lines[0];
  EXPECT_TRUE(std::isnan(json_double(v, "loss", 0)));
  EXPECT_EQ(json_double(v, "step_time_s", 0), 0.25);
  EXPECT_EQ(json_double(v, capplan::rt::metrics_schema::kBubbleFraction, 0), 0.125);
  EXPECT_EQ(lines[0].find("0,25"), std::string::npos) << lines[0];
  fs::remove(p);
}

TEST(MetricsWriter, EveryLineIsJsonWithTheFields) {
  const fs::path p = fs::temp_directory_path() / ("capplan_rt_metrics_" + std::to_string(::getpid()) + ".jsonl");
  {
    MetricsWriter w;
    std::string err;
    ASSERT_TRUE(w.open(p.string(), &err)) << err;
    StartRecord s;
    s.model = "gpt-tiny";
    s.world = 2;
    s.dp = 2;
    s.rank_hosts = {"node-a", "node-a"};
    w.write_start(s);
    StepRecord r;
    r.step = 1;
    r.loss = 5.5;
    r.tokens_per_s = 1234;
    r.mfu = std::nan("");
    r.peak_flops_source = "unknown";
    w.write_step(r);
    // Flushed per line: the file already holds both lines before close.
    EXPECT_EQ(read_lines(p).size(), 2u);
    w.write_record({{"type", "system"}, {"rank", 1}});
    SummaryRecord sum;
    sum.status = "failed";
    sum.reason = "rank 1: token 300 >= vocab 256";
    w.write_summary(sum);
  }
  auto lines = read_lines(p);
  ASSERT_EQ(lines.size(), 4u);
  auto start = parse_or_fail(lines[0]);
  EXPECT_EQ(json_string(start, "type"), "start");
  ASSERT_TRUE(start.contains("rank_hosts"));
  EXPECT_EQ(start.at("rank_hosts").size(), 2u);
  auto step = parse_or_fail(lines[1]);
  for (const char* k : {"step", "loss", "tokens_per_s", "lr", "grad_norm", "step_time_s",
                        "model_flops_per_s", "mfu", "peak_flops_source", "forward_s",
                        "backward_s", "optimizer_s", "dp_comm_s", "data_s", "gemm_s", "bubble_fraction"})
    EXPECT_TRUE(step.contains(k)) << k;
  EXPECT_EQ(json_string(step, "type"), "step");
  auto summary = parse_or_fail(lines[3]);
  EXPECT_EQ(json_string(summary, "status"), "failed");
  EXPECT_EQ(json_string(summary, "reason"), "rank 1: token 300 >= vocab 256");
  fs::remove(p);
}

TEST(MetricsWriter, SummaryWrittenEvenWhenTheTrainerForgets) {
  const fs::path p = fs::temp_directory_path() / ("capplan_rt_metrics_abort_" + std::to_string(::getpid()) + ".jsonl");
  {
    MetricsWriter w;
    std::string err;
    ASSERT_TRUE(w.open(p.string(), &err));
    w.write_step(StepRecord{});
  }
  auto lines = read_lines(p);
  ASSERT_EQ(lines.size(), 2u);
  auto v = parse_or_fail(lines[1]);
  EXPECT_EQ(json_string(v, "type"), "summary");
  EXPECT_EQ(json_string(v, "status"), "aborted");
  fs::remove(p);
}

TEST(MetricsWriter, AppendKeepsTheEarlierRun) {
  const fs::path p = fs::temp_directory_path() / ("capplan_rt_metrics_append_" + std::to_string(::getpid()) + ".jsonl");
  std::string err;
  {
    MetricsWriter w;
    ASSERT_TRUE(w.open(p.string(), &err));
    w.write_step(StepRecord{});
    w.write_summary(SummaryRecord{});
  }
  {
    MetricsWriter w;
    ASSERT_TRUE(w.open(p.string(), &err, /*append=*/true));
    w.write_step(StepRecord{});
    w.write_summary(SummaryRecord{});
  }
  EXPECT_EQ(read_lines(p).size(), 4u);
  {
    MetricsWriter w;
    ASSERT_TRUE(w.open(p.string(), &err));  // a fresh run truncates
    w.write_summary(SummaryRecord{});
  }
  EXPECT_EQ(read_lines(p).size(), 1u);
  fs::remove(p);
}

TEST(ProcSample, ReadsThisProcess) {
  auto a = proc_sample_self();
  ASSERT_TRUE(a.ok);
  EXPECT_GT(a.rss_bytes, 0);
  // Burn some CPU: CPU time must not go backwards and usually grows.
  volatile double x = 0;
  for (int i = 0; i < 2000000; ++i) x = x + std::sqrt(double(i));
  auto b = proc_sample_self();
  EXPECT_GE(b.cpu_time_s, a.cpu_time_s);
  EXPECT_GE(b.io_write_bytes, a.io_write_bytes);
}

TEST(SystemSampler, ProducesSamples) {
  // Expectation: at the default 500 ms interval, waiting up to 10 s yields at least one sample
  // line (no timing assertion beyond "some sample arrives"), each a JSON "system" record.
  SystemSampler s(3, 2, 500, [](Json& j) { j["gpu_util"] = 0.5; });
  s.start();
  std::vector<std::string> lines;
  for (int i = 0; i < 1000 && lines.empty(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    auto got = s.drain();
    lines.insert(lines.end(), got.begin(), got.end());
  }
  s.stop();
  ASSERT_GE(lines.size(), 1u);
  auto v = parse_or_fail(lines[0]);
  EXPECT_EQ(json_string(v, "type"), "system");
  EXPECT_EQ(json_double(v, "rank", -1), 3);
  EXPECT_GT(json_double(v, "rss_bytes", 0), 0);
  EXPECT_GE(json_double(v, "cpu_util", -1), 0);
  EXPECT_TRUE(v.contains("io_read_bytes"));
  EXPECT_EQ(json_double(v, "gpu_util", 0), 0.5);
  s.stop();  // idempotent
}

TEST(PeakProbe, MeasuresWithTheGivenGemm) {
  int calls = 0;
  GemmFn naive = [&](int m, int n, int k, const float* a, const float* b, float* c) {
    ++calls;
    for (int i = 0; i < m; ++i)
      for (int j = 0; j < n; ++j) {
        float s = 0;
        for (int p = 0; p < k; ++p) s += a[i * k + p] * b[p * n + j];
        c[i * n + j] = s;
      }
  };
  auto p = measure_peak_flops(naive, 64, 3, 1);
  EXPECT_EQ(calls, 4);  // warm-up + 3
  EXPECT_GT(p.flops_per_s, 0);
  EXPECT_NE(p.source.find("measured"), std::string::npos) << p.source;
  EXPECT_EQ(measure_peak_flops(nullptr).source, "unknown");
}

TEST(ModelFlops, PalmFormula) {
  // Expectation: N = 124e6, L = 12, d = 768, T = 1024: 6N + 12 L d T = 744e6 + 113,246,208.
  EXPECT_DOUBLE_EQ(model_flops_per_token(124000000, 12, 1024, 768), 744e6 + 113246208.0);
}
