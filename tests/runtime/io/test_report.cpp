// `capplan-train report`: every rule fires on a crafted metrics file, and stays quiet on a healthy
// one; text and --json outputs; bad input.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <functional>
#include <fstream>

#include "io/metrics.h"
#include "io/report.h"
#include "planner/json.h"

namespace fs = std::filesystem;
using namespace capplan;
using namespace capplan::rt;

namespace {

struct Phases {
  double fwd = 0.4, bwd = 0.8, opt = 0.1, comm = 0.05, data = 0.02;
};

// A run of `n` steps; loss(i) gives each step's loss.
std::vector<std::string> run_lines(int n, const std::function<double(int)>& loss, Phases ph = {},
                                   double cpu_util = 0.9, const std::string& status = "ok") {
  std::vector<std::string> lines;
  StartRecord s;
  s.model = "gpt-tiny";
  s.world = 2;
  s.dp = 2;
  lines.push_back(json_dump({{"type", "start"}, {"model", s.model}, {"world", 2}, {"dp", 2}}, false));
  for (int i = 1; i <= n; ++i) {
    const double total = ph.fwd + ph.bwd + ph.opt + ph.comm + ph.data + 0.03;
    lines.push_back(json_dump({{"type", "step"}, {"step", i}, {"loss", json_number(loss(i))},
                               {"tokens_per_s", 1000.0}, {"step_time_s", total}, {"mfu", 0.25},
                               {"peak_flops_source", "measured: test"}, {"forward_s", ph.fwd},
                               {"backward_s", ph.bwd}, {"optimizer_s", ph.opt}, {"dp_comm_s", ph.comm},
                               {"data_s", ph.data}, {"gemm_s", 0.35}},
                              false));
    lines.push_back(json_dump({{"type", "system"}, {"rank", 0}, {"cpu_util", cpu_util},
                               {"rss_bytes", int64_t(100) << 20}},
                              false));
  }
  if (!status.empty())
    lines.push_back(json_dump({{"type", "summary"}, {"status", status},
                               {"reason", status == "ok" ? "" : "rank 1 exited"}},
                              false));
  return lines;
}

std::vector<std::string> rules_fired(const Report& r) {
  std::vector<std::string> out;
  for (const auto& f : r.findings) out.push_back(f.rule);
  return out;
}

Report analyze(const std::vector<std::string>& lines) {
  Diagnostics d;
  Report r = report_analyze_lines(lines, ReportRules{}, &d);
  EXPECT_TRUE(d.empty()) << d.to_string();
  return r;
}

auto decreasing = [](int i) { return 6.0 - 0.1 * i; };

}  // namespace

TEST(Report, HealthyRunHasNoFindings) {
  Report r = analyze(run_lines(20, decreasing));
  EXPECT_TRUE(r.findings.empty()) << report_to_text(r);
  EXPECT_EQ(r.summary.steps, 20);
  EXPECT_DOUBLE_EQ(r.summary.loss_first, 5.9);
  EXPECT_DOUBLE_EQ(r.summary.loss_last, 4.0);
  EXPECT_DOUBLE_EQ(r.summary.mean_tokens_per_s, 1000.0);
  // Expectation: step time 1.4 s, forward 0.4 s -> share 0.4 / 1.4.
  EXPECT_NEAR(r.summary.share_forward, 0.4 / 1.4, 1e-12);
  EXPECT_NEAR(r.summary.share_other, 0.03 / 1.4, 1e-12);
  // 0.35 s of each 1.4 s step in GEMMs.
  EXPECT_NEAR(r.summary.share_gemm, 0.35 / 1.4, 1e-12);
  EXPECT_NE(report_to_text(r).find("GEMMs: 25.0% of the step time"), std::string::npos)
      << report_to_text(r);
  EXPECT_EQ(r.summary.status, "ok");
}

// Files written before gemm_s was recorded: no GEMM share and no GEMM line.
TEST(Report, StepsWithoutGemmTimeLeaveTheShareUnknown) {
  std::vector<std::string> lines = run_lines(5, decreasing);
  for (auto& l : lines) {
    const auto at = l.find(",\"gemm_s\":0.35");
    if (at != std::string::npos) l.erase(at, std::string(",\"gemm_s\":0.35").size());
  }
  Report r = analyze(lines);
  EXPECT_TRUE(std::isnan(r.summary.share_gemm));
  EXPECT_EQ(report_to_text(r).find("GEMMs:"), std::string::npos) << report_to_text(r);
}

// A run whose threads split the batch carries split_wait_s: its share of the step and a line;
// a run without it (HealthyRunHasNoFindings' lines) has neither.
TEST(Report, BatchSplitWaitShare) {
  std::vector<std::string> lines = run_lines(5, decreasing);
  for (auto& l : lines) {
    const auto at = l.find(",\"gemm_s\":0.35");
    if (at != std::string::npos) l.insert(at, ",\"split_wait_s\":0.07");
  }
  Report r = analyze(lines);
  EXPECT_NEAR(r.summary.share_split_wait, 0.07 / 1.4, 1e-12);
  EXPECT_NE(report_to_text(r).find("threads: 5.0% of the step waiting for each other"),
            std::string::npos)
      << report_to_text(r);
  Report plain = analyze(run_lines(5, decreasing));
  EXPECT_TRUE(std::isnan(plain.summary.share_split_wait));
  EXPECT_EQ(report_to_text(plain).find("threads:"), std::string::npos) << report_to_text(plain);
}

TEST(Report, DataLoadingDominates) {
  Phases ph;
  ph.data = 1.0;  // 1.0 of 2.38 s = 42% > 25%
  Report r = analyze(run_lines(20, decreasing, ph));
  ASSERT_EQ(rules_fired(r), std::vector<std::string>{"DataLoadingDominates"}) << report_to_text(r);
  EXPECT_NE(r.findings[0].evidence.find("42.0%"), std::string::npos) << r.findings[0].evidence;
}

TEST(Report, LowCpuUtilisation) {
  Report r = analyze(run_lines(20, decreasing, {}, 0.2));
  ASSERT_EQ(rules_fired(r), std::vector<std::string>{"LowCPUUtilization"}) << report_to_text(r);
  EXPECT_NE(r.findings[0].evidence.find("20.0%"), std::string::npos) << r.findings[0].evidence;
}

TEST(Report, CommunicationOutweighsCompute) {
  Phases ph;
  ph.comm = 1.5;  // > forward + backward = 1.2
  Report r = analyze(run_lines(20, decreasing, ph));
  ASSERT_EQ(rules_fired(r), std::vector<std::string>{"CommunicationOutweighsCompute"})
      << report_to_text(r);
  EXPECT_NE(r.findings[0].evidence.find("ratio 1.25"), std::string::npos) << r.findings[0].evidence;
}

TEST(Report, LossNotDecreasing) {
  Report r = analyze(run_lines(20, [](int i) { return 5.0 + 0.001 * (i % 3); }));
  ASSERT_EQ(rules_fired(r), std::vector<std::string>{"LossNotDecreasing"}) << report_to_text(r);
  // Too few steps: the rule does not judge.
  EXPECT_TRUE(analyze(run_lines(5, [](int) { return 5.0; })).findings.empty());
}

TEST(Report, NonFiniteLoss) {
  Report r = analyze(run_lines(20, [](int i) { return i >= 12 ? std::nan("") : 6.0 - 0.1 * i; }));
  ASSERT_EQ(rules_fired(r), std::vector<std::string>{"NonFiniteLoss"}) << report_to_text(r);
  EXPECT_NE(r.findings[0].evidence.find("NaN at step 12"), std::string::npos) << r.findings[0].evidence;
  EXPECT_NE(r.findings[0].evidence.find("9 of 20"), std::string::npos) << r.findings[0].evidence;
}

TEST(Report, FailedOrKilledRun) {
  Report failed = analyze(run_lines(20, decreasing, {}, 0.9, "failed"));
  ASSERT_EQ(rules_fired(failed), std::vector<std::string>{"RunFailed"});
  EXPECT_NE(failed.findings[0].evidence.find("rank 1 exited"), std::string::npos);
  Report killed = analyze(run_lines(20, decreasing, {}, 0.9, ""));
  ASSERT_EQ(rules_fired(killed), std::vector<std::string>{"RunFailed"});
  EXPECT_EQ(killed.summary.status, "missing");
}

TEST(Report, ResumedRunAppendedToTheSameFile) {
  // Expectation: run 1 recorded steps 1..15 and was killed (no summary); run 2 resumed from the
  // step-10 checkpoint and recorded 11..20 with summary ok. The report sees steps 1..20 once each,
  // 2 runs, status ok, and no RunFailed finding.
  auto first = run_lines(15, decreasing, {}, 0.9, "");
  auto second = run_lines(20, decreasing, {}, 0.9, "ok");
  second[0] = json_dump({{"type", "start"}, {"model", "gpt-tiny"}, {"world", 2}, {"dp", 2},
                         {"resumed_from_step", 10}},
                        false);
  std::vector<std::string> lines = first;
  lines.push_back(second[0]);
  for (size_t i = 1 + 2 * 10; i < second.size(); ++i) lines.push_back(second[i]);  // steps 11..20
  Report r = analyze(lines);
  EXPECT_EQ(r.summary.runs, 2);
  EXPECT_EQ(r.summary.steps, 20);
  EXPECT_EQ(r.summary.first_step, 1);
  EXPECT_EQ(r.summary.last_step, 20);
  EXPECT_EQ(r.summary.status, "ok");
  EXPECT_TRUE(r.findings.empty()) << report_to_text(r);
  EXPECT_NE(report_to_text(r).find("2 runs (resumed 1x)"), std::string::npos) << report_to_text(r);
}

TEST(Report, FileTextJsonAndBadLines) {
  const fs::path p = fs::temp_directory_path() / ("capplan_rt_report_" + std::to_string(::getpid()) + ".jsonl");
  {
    std::ofstream out(p);
    Phases ph;
    ph.data = 1.0;
    for (const auto& l : run_lines(20, decreasing, ph)) out << l << "\n";
    out << "{\"type\":\"step\",\"loss\":\n";  // a torn last line
  }
  auto loaded = report_analyze_file(p.string());
  ASSERT_TRUE(loaded.ok()) << loaded.diagnostics.to_string();
  ASSERT_EQ(loaded.diagnostics.items().size(), 1u);
  EXPECT_EQ(loaded.diagnostics.items()[0].line, 43);  // 1 start + 40 + 1 summary, then the torn one
  std::string text = report_to_text(*loaded.value);
  EXPECT_NE(text.find("steps: 20 (1..20)"), std::string::npos) << text;
  EXPECT_NE(text.find("DataLoadingDominates"), std::string::npos) << text;
  EXPECT_NE(text.find("advice:"), std::string::npos) << text;

  std::string arg0 = "report", arg1 = p.string(), arg2 = "--json";
  char* argv[] = {arg0.data(), arg1.data(), arg2.data()};
  testing::internal::CaptureStdout();
  testing::internal::CaptureStderr();
  EXPECT_EQ(report_main(3, argv), 0);
  const std::string out = testing::internal::GetCapturedStdout();
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find(":43: warning:"), std::string::npos) << err;
  std::string perr;
  const std::optional<Json> v = json_parse(out, &perr);
  ASSERT_TRUE(v.has_value()) << perr << out;
  ASSERT_TRUE(v->contains("findings"));
  ASSERT_EQ(v->at("findings").size(), 1u);
  EXPECT_EQ(json_string(v->at("findings")[0], "rule"), "DataLoadingDominates");
  EXPECT_EQ(json_double(v->at("summary"), "steps", 0), 20);
  fs::remove(p);
}

TEST(Report, UnreadableOrEmptyFileExitsTwo) {
  std::string arg0 = "report", arg1 = "/nonexistent/metrics.jsonl";
  char* argv[] = {arg0.data(), arg1.data()};
  testing::internal::CaptureStderr();
  EXPECT_EQ(report_main(2, argv), 2);
  std::string err = testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("/nonexistent/metrics.jsonl: error: cannot open"), std::string::npos) << err;

  const fs::path p = fs::temp_directory_path() / ("capplan_rt_report_junk_" + std::to_string(::getpid()));
  std::ofstream(p) << "not json\n";
  auto loaded = report_analyze_file(p.string());
  EXPECT_FALSE(loaded.ok());
  EXPECT_TRUE(loaded.diagnostics.has_errors());
  fs::remove(p);
}
