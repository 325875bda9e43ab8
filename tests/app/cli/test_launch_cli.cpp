// `capplan run` on bad input, run as a real process: a layout needing more ranks than allowed, a
// missing capplan-train, an unwritable run directory, a missing plan file, --plan mixed with
// layout flags. Each is a clear `<file>:line:col: error:` line and exit status 2, nothing started.
// A fake mpirun (a shell script writing metrics lines) checks the --plan path without MPI.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "planner/plan_io.h"
#include "planner/spec_io.h"
#include "support/test_files.h"
#include "launch/launch.h"

namespace capplan::rt {
namespace {

namespace fs = std::filesystem;

struct CliResult {
  int exit_code = -1;
  std::string out, err;
};

CliResult run_capplan(std::vector<std::string> args) {
  args.insert(args.begin(), CAPPLAN_EXE);
  CliResult r;
  const ProcessResult p = run_process(args, {}, [&](OutputStream s, const std::string& line) {
    (s == OutputStream::Stdout ? r.out : r.err) += line + "\n";
  });
  EXPECT_TRUE(p.started) << p.error;
  r.exit_code = p.exit_code;
  return r;
}

std::string temp_dir(const std::string& name) { return capplan::test::scratch_dir(name).string(); }
using capplan::test::read_text;

// Flags shared by the tests: a stated peak keeps them from timing a GEMM.
std::vector<std::string> with(std::vector<std::string> a) {
  a.insert(a.begin(), {"run", "--peak-gflops", "50"});
  return a;
}

// Expectation: without --max-ranks, a layout over this machine's limit (max(8, 2 x cores)) is
// refused with exit 2, naming the count; the record says not-started.
TEST(LaunchCli, TooManyRanksExitsTwoNamingTheCount) {
  const std::string dir = temp_dir("ranks");
  const CliResult r = run_capplan(with({"--model", "gpt3-175b", "--cluster", "p4d.24xlarge",
                                        "--nodes", "120", "--dp", "15", "--tp", "8", "--pp", "8",
                                        "--mbs", "1", "--gbs", "1920", "--scale-down", "--dir", dir}));
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("<command line>: error: layout: the layout needs 960 ranks"), std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("this machine allows"), std::string::npos) << r.err;
  EXPECT_NE(read_text(dir + "/run.json").find("\"status\": \"not-started\""), std::string::npos);
  fs::remove_all(dir);
}

// Expectation: a context-parallel layout's message states its cp as well (the ranks are
// dp x tp x pp x cp): 16 x 1 x 1 x 2 = 32 ranks, over this machine's limit, exit 2.
TEST(LaunchCli, TooManyRanksStatesTheContextParallelDegree) {
  const std::string dir = temp_dir("ranks-cp");
  const CliResult r = run_capplan(with({"--model", "gpt2-124m", "--cluster", "p4d.24xlarge", "--nodes", "4",
                                        "--dp", "16", "--tp", "1", "--pp", "1", "--cp", "2", "--mbs", "1",
                                        "--gbs", "64", "--scale-down", "--dir", dir}));
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("the layout needs 32 ranks (dp 16 x tp 1 x pp 1 x cp 2)"), std::string::npos) << r.err;
  fs::remove_all(dir);
}

// Expectation: --max-ranks 8 shrinks the same 960-rank layout with shrink_layout (tp 8 -> 2,
// pp 8 -> 2, dp 15 -> 8 / 4 = 2) instead of refusing it: the dry run's command starts 8 ranks
// with --dp 2 --tp 2 --pp 2, and the output says what changed.
TEST(LaunchCli, MaxRanksShrinksTheLayout) {
  const std::string dir = temp_dir("shrink");
  const CliResult r = run_capplan(with({"--model", "gpt3-175b", "--cluster", "p4d.24xlarge",
                                        "--nodes", "120", "--dp", "15", "--tp", "8", "--pp", "8",
                                        "--mbs", "1", "--gbs", "1920", "--scale-down", "--max-ranks",
                                        "8", "--dry-run", "--train-bin", "/bin/true", "--dir", dir}));
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("layout dp 15 tp 8 pp 8 (960 ranks) -> dp 2 tp 2 pp 2 (8 ranks)"), std::string::npos)
      << r.out;
  const std::string command = read_text(dir + "/command.txt");
  EXPECT_NE(command.find("-np 8 "), std::string::npos) << command;
  EXPECT_NE(command.find("--dp 2 --tp 2 --pp 2"), std::string::npos) << command;
  fs::remove_all(dir);
}

TEST(LaunchCli, MissingTrainerAndUnwritableDirExitTwoTogether) {
  const CliResult r = run_capplan(with({"--model", "gpt2-124m", "--cluster", "p4d.24xlarge",
                                        "--nodes", "1", "--gpus", "2", "--dp", "2", "--tp", "1",
                                        "--pp", "1", "--mbs", "1", "--gbs", "8", "--scale-down",
                                        "--train-bin", "/nonexistent/capplan-train", "--dir",
                                        "/proc/capplan-no-such-dir/run"}));
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("error: capplan-train: capplan-train '/nonexistent/capplan-train' does not exist"),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("error: dir: run directory: cannot create '/proc/capplan-no-such-dir'"),
            std::string::npos)
      << r.err;
}

TEST(LaunchCli, MissingPlanFileAndMixedFlagsExitTwo) {
  const CliResult r = run_capplan(with({"--plan", "/nonexistent/plan.yaml", "--dp", "2"}));
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("/nonexistent/plan.yaml"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("--dp cannot be combined with it"), std::string::npos) << r.err;
}

// Expectation: --dry-run prepares RUNDIR (model, plan, command) and starts nothing: the fake
// mpirun would leave args.txt behind, and must not.
TEST(LaunchCli, DryRunWritesTheCommandAndStartsNothing) {
  const std::string dir = temp_dir("dry");
  const std::string fake = dir + "/fake-mpirun";
  {
    std::ofstream f(fake);
    f << "#!/bin/sh\necho \"$@\" > \"$(dirname \"$0\")/args.txt\"\n";
  }
  fs::permissions(fake, fs::perms::owner_all);
  const CliResult r = run_capplan(with({"--model", "gpt2-124m", "--cluster", "p4d.24xlarge", "--nodes",
                                        "1", "--gpus", "2", "--dp", "1", "--tp", "2", "--pp", "1",
                                        "--mbs", "1", "--gbs", "8", "--scale-down", "--dry-run",
                                        "--mpirun", fake, "--train-bin", "/bin/true", "--dir",
                                        dir + "/run"}));
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("capplan run: 2 ranks (dp 1 x tp 2 x pp 1), "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("command: " + fake + " "), std::string::npos) << r.out;
  EXPECT_TRUE(fs::exists(dir + "/run/model.yaml"));
  EXPECT_TRUE(fs::exists(dir + "/run/plan.yaml"));
  EXPECT_TRUE(fs::exists(dir + "/run/command.txt"));
  EXPECT_FALSE(fs::exists(dir + "/args.txt"));
  fs::remove_all(dir);
}

TEST(LaunchCli, BadFlagValueExitsTwo) {
  const CliResult r = run_capplan(with({"--plan", "x.yaml", "--steps", "zero"}));
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("--steps"), std::string::npos) << r.err;
}

// Expectation: a plan file goes through to the mpirun command (its layout and the scaled model),
// and the fake job's metrics come back as measured figures in run.json; exit 0.
TEST(LaunchCli, PlanFileThroughAFakeMpirun) {
  const std::string dir = temp_dir("plan");
  Plan plan;
  plan.model_ref = "gpt2-124m";
  plan.cluster_ref = "p4d.24xlarge";
  plan.scenario.model = *load_model("gpt2-124m").value;
  plan.scenario.cluster = *load_cluster("p4d.24xlarge").value;
  plan.scenario.nodes = 1;
  plan.scenario.gpus = 4;
  plan.scenario.training.gbs = 16;
  plan.layout.dp = 2;
  plan.layout.tp = 2;
  plan.layout.mbs = 2;
  plan.created_by = "test";
  ASSERT_EQ(save_plan(plan, dir + "/plan.yaml"), "");
  // The fake mpirun: records its arguments, then writes two step records to the --metrics file.
  const std::string fake = dir + "/fake-mpirun";
  {
    std::ofstream f(fake);
    f << "#!/bin/sh\n"
         "echo \"$@\" > \"$(dirname \"$0\")/args.txt\"\n"
         "while [ $# -gt 1 ]; do [ \"$1\" = --metrics ] && m=\"$2\"; shift; done\n"
         "for i in 1 2; do echo \"{\\\"type\\\":\\\"step\\\",\\\"step\\\":$i,\\\"loss\\\":5.5,"
         "\\\"step_time_s\\\":0.5,\\\"forward_s\\\":0.1,\\\"backward_s\\\":0.2}\" >> \"$m\"; done\n";
  }
  fs::permissions(fake, fs::perms::owner_all);
  const CliResult r = run_capplan(with({"--plan", dir + "/plan.yaml", "--scale-down", "--steps", "2",
                                        "--mpirun", fake, "--train-bin", "/bin/true", "--dir",
                                        dir + "/run", "--json"}));
  EXPECT_EQ(r.exit_code, 0) << r.err;
  const std::string args = read_text(dir + "/args.txt");
  EXPECT_NE(args.find("-np 4 /bin/true --model " + dir + "/run/model.yaml --dp 2 --tp 2 --pp 1"),
            std::string::npos)
      << args;
  EXPECT_NE(args.find("--mbs 1"), std::string::npos) << args;  // scale-down: one sequence per micro-batch
  const auto json = parse_metrics_line(r.out);  // stdout is the run record
  ASSERT_TRUE(json.has_value()) << r.out;
  EXPECT_EQ(json->string("status"), "succeeded");
  EXPECT_DOUBLE_EQ(json->number("measured.steps"), 2);
  EXPECT_DOUBLE_EQ(json->number("measured.step_time_s"), 0.5);
  EXPECT_EQ(json->string("model_ref"), "gpt2-124m");
  EXPECT_DOUBLE_EQ(json->number("run.layout.tp"), 2);
  EXPECT_EQ(read_text(dir + "/run/command.txt").find(fake), 0u);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace capplan::rt
