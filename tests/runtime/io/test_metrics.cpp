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

#include "../../../runtime/io/src/json_lite.h"
#include "io/metrics.h"

namespace fs = std::filesystem;
using namespace capplan::rt;

namespace {

std::vector<std::string> read_lines(const fs::path& p) {
  std::ifstream in(p);
  std::vector<std::string> out;
  for (std::string l; std::getline(in, l);) out.push_back(l);
  return out;
}

json::Value parse_or_fail(const std::string& line) {
  json::Value v;
  std::string err;
  EXPECT_TRUE(json::parse(line, &v, &err)) << err << " in: " << line;
  EXPECT_TRUE(v.is_object()) << line;
  return v;
}

}  // namespace

TEST(JsonLine, EscapesAndNonFinite) {
  JsonLine j;
  j.add("s", "a\"b\\c\nd\x01").add("nan", std::nan("")).add("inf", -INFINITY).add("i", int64_t(-3));
  auto v = parse_or_fail(j.str());
  EXPECT_EQ(v.string_or("s", ""), "a\"b\\c\nd\x01");
  EXPECT_TRUE(std::isnan(v.number_or("nan", 0)));
  EXPECT_EQ(v.number_or("inf", 0), -INFINITY);
  EXPECT_EQ(v.number_or("i", 0), -3);
}

TEST(JsonLine, NumbersRoundTripExactlyWhateverTheLocale) {
  // Expectation: a double loss written and read back is the same double, bit for bit, so runs can
  // be compared from their metrics files; a comma-decimal LC_NUMERIC changes nothing.
  const char* old = std::setlocale(LC_NUMERIC, nullptr);
  const std::string saved = old ? old : "C";
  const bool have_de = std::setlocale(LC_NUMERIC, "de_DE.UTF-8") != nullptr;
  for (double loss : {3.4337662895295518, 0.1, 1e-300, 5.0, -2.5e17, 3.14159274f + 0.0}) {
    JsonLine j;
    j.add("loss", loss);
    EXPECT_EQ(j.str().find(','), std::string::npos) << j.str();
    EXPECT_EQ(parse_or_fail(j.str()).number_or("loss", 0), loss) << j.str();
  }
  std::setlocale(LC_NUMERIC, saved.c_str());
  if (!have_de) std::printf("note: de_DE.UTF-8 locale not installed; checked in the C locale\n");
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
    w.write_line(JsonLine().add("type", "system").add("rank", 1).str());
    SummaryRecord sum;
    sum.status = "failed";
    sum.reason = "rank 1: token 300 >= vocab 256";
    w.write_summary(sum);
  }
  auto lines = read_lines(p);
  ASSERT_EQ(lines.size(), 4u);
  auto start = parse_or_fail(lines[0]);
  EXPECT_EQ(start.string_or("type", ""), "start");
  ASSERT_NE(start.get("rank_hosts"), nullptr);
  EXPECT_EQ(start.get("rank_hosts")->arr.size(), 2u);
  auto step = parse_or_fail(lines[1]);
  for (const char* k : {"step", "loss", "tokens_per_s", "lr", "grad_norm", "step_time_s",
                        "model_flops_per_s", "mfu", "peak_flops_source", "forward_s",
                        "backward_s", "optimizer_s", "dp_comm_s", "data_s", "gemm_s"})
    EXPECT_NE(step.get(k), nullptr) << k;
  EXPECT_EQ(step.string_or("type", ""), "step");
  auto summary = parse_or_fail(lines[3]);
  EXPECT_EQ(summary.string_or("status", ""), "failed");
  EXPECT_EQ(summary.string_or("reason", ""), "rank 1: token 300 >= vocab 256");
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
  EXPECT_EQ(v.string_or("type", ""), "summary");
  EXPECT_EQ(v.string_or("status", ""), "aborted");
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
  SystemSampler s(3, 2, 500, [](JsonLine& j) { j.add("gpu_util", 0.5); });
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
  EXPECT_EQ(v.string_or("type", ""), "system");
  EXPECT_EQ(v.number_or("rank", -1), 3);
  EXPECT_GT(v.number_or("rss_bytes", 0), 0);
  EXPECT_GE(v.number_or("cpu_util", -1), 0);
  EXPECT_NE(v.get("io_read_bytes"), nullptr);
  EXPECT_EQ(v.number_or("gpu_util", 0), 0.5);
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
