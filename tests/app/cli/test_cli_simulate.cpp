// `capplan simulate` and `capplan plan --refine` end to end: the built binary runs as a process;
// we check exit status, the JSON fields README "capplan simulate" lists, the trace file, determinism of the
// run Monte-Carlo for a seed, and that bad input exits 2 with a message naming the field.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "support/run_program.h"

namespace {

using Result = capplan::test::ProgramRun;

std::string read_all(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

Result capplan(const std::string& args) { return capplan::test::run_program(CAPPLAN_CLI, args); }

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

const std::string kLayout =
    "simulate --model gpt3-13b --cluster p4d.24xlarge --nodes 8 --dp 4 --tp 4 --pp 4 --mbs 1 --gbs 256";

TEST(CliSimulate, JsonHasTheContractFields) {
  const Result r = capplan(kLayout + " --json");
  ASSERT_EQ(r.status, 0) << r.err;
  for (const char* key : {"\"step_time_s\"", "\"breakdown_s\"", "\"bubble_fraction\"", "\"busy_fraction_per_gpu\"",
                          "\"peak_activation_bytes_per_stage\"", "\"compute\"", "\"pp_comm\"", "\"dp_comm\"",
                          "\"estimate\"", "\"activation_bytes_over_time_per_stage\"", "\"critical_stage\"",
                          "\"breakdown_stage\""}) {
    EXPECT_TRUE(contains(r.out, key)) << key;
  }
  EXPECT_FALSE(contains(r.out, "\"run\""));
}

// Expectation: a layout that would run out of memory is still simulated, and says so (the text
// had no word of it), in the text and in the JSON's estimate.
TEST(CliSimulate, SaysWhetherTheLayoutFits) {
  const std::string oom =
      "simulate --model llama3-8b --cluster p5.48xlarge --nodes 1 --dp 8 --tp 1 --pp 1 --mbs 1 --gbs 64";
  const Result text = capplan(oom);
  ASSERT_EQ(text.status, 0) << text.err;
  EXPECT_TRUE(contains(text.out, "\nfits: NO (")) << text.out;
  EXPECT_TRUE(contains(text.out, "GiB per GPU on stage 0, the GPU has 80.0 GiB\n")) << text.out;
  const Result json = capplan(oom + " --json");
  ASSERT_EQ(json.status, 0) << json.err;
  EXPECT_TRUE(contains(json.out, "\"fits\": false")) << json.out.substr(0, 400);
  const Result fits = capplan(kLayout);
  ASSERT_EQ(fits.status, 0) << fits.err;
  EXPECT_TRUE(contains(fits.out, "\nfits: yes (")) << fits.out;
}

TEST(CliSimulate, TraceFileIsChromeTraceJson) {
  const std::string path = std::filesystem::temp_directory_path().string() + "/capplan-sim-trace-" +
                           std::to_string(::getpid()) + ".json";
  const Result r = capplan(kLayout + " --trace '" + path + "'");
  ASSERT_EQ(r.status, 0) << r.err;
  const std::string trace = read_all(path);
  EXPECT_TRUE(contains(trace, "\"traceEvents\""));
  EXPECT_TRUE(contains(trace, "\"ph\":\"X\",\"name\":\"forward mb0\""));
  EXPECT_TRUE(contains(trace, "\"name\":\"thread_name\""));
  std::filesystem::remove(path);
}

TEST(CliSimulate, RunIsDeterministicForASeed) {
  const std::string run = kLayout + " --json --run --trials 200 --seed 7 --node-mtbf-hours 2000 --tokens 20e9";
  const Result a = capplan(run);
  const Result b = capplan(run);
  ASSERT_EQ(a.status, 0) << a.err;
  for (const char* key : {"\"mean_days\"", "\"median_days\"", "\"p10_days\"", "\"p90_days\"", "\"mean_cost_usd\"",
                          "\"mean_lost_work_hours\"", "\"young_daly_interval_min\"", "\"best_interval_min\""}) {
    EXPECT_TRUE(contains(a.out, key)) << key;
  }
  EXPECT_EQ(a.out, b.out);
  const Result c = capplan(kLayout + " --json --run --trials 200 --seed 8 --node-mtbf-hours 2000 --tokens 20e9");
  EXPECT_NE(a.out, c.out);
}

// The number after "key": in a JSON text (first occurrence).
double json_number(const std::string& json, const std::string& key) {
  const size_t at = json.find("\"" + key + "\"");
  if (at == std::string::npos) return -1;
  return std::strtod(json.c_str() + json.find(':', at) + 1, nullptr);
}

TEST(CliSimulate, PlanFileGivesTheSameStepAsFlags) {
  const std::string path = std::filesystem::temp_directory_path().string() + "/capplan-sim-plan-" +
                           std::to_string(::getpid()) + ".yaml";
  {
    std::ofstream plan(path);
    plan << "model: gpt3-13b\ncluster: p4d.24xlarge\nnodes: 8\ntraining:\n  gbs: 256\n"
            "layout:\n  dp: 4\n  tp: 4\n  pp: 4\n  mbs: 1\n  recompute: selective\n  order: PDT\n";
  }
  const Result from_plan = capplan("simulate --plan '" + path + "' --json");
  const Result from_flags = capplan(kLayout + " --recompute selective --order PDT --json");
  ASSERT_EQ(from_plan.status, 0) << from_plan.err;
  ASSERT_EQ(from_flags.status, 0) << from_flags.err;
  const double a = json_number(from_plan.out, "step_time_s");
  EXPECT_GT(a, 0);
  EXPECT_EQ(a, json_number(from_flags.out, "step_time_s"));
  std::filesystem::remove(path);
}

TEST(CliSimulate, BadInputExits2NamingTheField) {
  struct Bad {
    std::string args, expect;
  };
  const Bad cases[] = {
      {"simulate --model gpt3-13b --cluster p4d.24xlarge --nodes 8 --dp 3 --tp 4 --pp 4 --mbs 1 --gbs 256",
       "dp*tp*pp"},
      {kLayout.substr(0, kLayout.find("--mbs")) + "--mbs 0 --gbs 256", "--mbs"},
      {kLayout + " --run --node-mtbf-hours -5", "--node-mtbf-hours"},
      {kLayout + " --run --trials 0", "--trials"},
      {"simulate --plan tests/data/does-not-exist.yaml", "does-not-exist.yaml"},
      {"simulate --plan tests/data/bad/plan_simulate_gpu_mismatch.yaml", "plan_simulate_gpu_mismatch.yaml"},
      {"simulate --plan tests/data/bad/plan_simulate_zero_microbatches.yaml", "divisible"},
      {"simulate --plan tests/data/bad/plan_bad_layout.yaml", "plan_bad_layout.yaml:"},
      {"simulate --plan tests/data/bad/plan_simulate_gpu_mismatch.yaml --dp 4", "cannot be combined with --plan"},
  };
  for (const Bad& b : cases) {
    const Result r = capplan(b.args);
    EXPECT_EQ(r.status, 2) << b.args << "\n" << r.err;
    EXPECT_TRUE(contains(r.err, "error")) << b.args << "\n" << r.err;
    EXPECT_TRUE(contains(r.err, b.expect)) << b.args << "\n" << r.err;
  }
}

TEST(CliSimulate, PlanRefineReranksBySimulation) {
  const Result r = capplan("plan --model gpt3-13b --cluster p4d.24xlarge --nodes 8 --gbs 256 --top 3 --refine 3 --json");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(contains(r.err, "re-ranked by simulated step time"));
  EXPECT_TRUE(contains(r.out, "\"candidates\""));
  EXPECT_EQ(capplan("plan --model gpt3-13b --cluster p4d.24xlarge --nodes 8 --gbs 256 --refine 0").status, 2);
}

}  // namespace
