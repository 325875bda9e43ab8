// The parts of `capplan run --slurm` that need no cluster: the attempts and goodput read from a
// job's output lines and metrics records (hand-made, so every figure is derivable), and the job
// script export_sbatch writes for it (bash -n, quoting of odd paths, the requeue and health steps).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

#include "planner/export.h"
#include "planner/plan_io.h"
#include "io/train_options.h"
#include "launch/launch.h"
#include "support/test_files.h"

namespace capplan::rt {
namespace {

namespace fs = std::filesystem;

MetricsRecord record(const std::string& json) {
  auto r = parse_metrics_line(json);
  EXPECT_TRUE(r.has_value()) << json;
  return r.value_or(MetricsRecord{});
}

std::vector<MetricsRecord> steps(int from, int to, double step_time_s) {
  std::vector<MetricsRecord> out;
  for (int s = from; s <= to; ++s)
    out.push_back(record("{\"type\":\"step\",\"step\":" + std::to_string(s) + ",\"loss\":1,\"step_time_s\":" +
                         std::to_string(step_time_s) + "}"));
  return out;
}

// Attempt 1 trains steps 1-25 at 0.1 s and is killed; attempt 2 resumes from the checkpoint at
// step 20 and trains 21-40 at 0.2 s.
struct TwoAttempts {
  std::vector<std::string> lines = {
      "capplan: attempt 1 of job 7 on n1 at 2026-01-01T00:00:00.000Z",
      "capplan: training starts at 2026-01-01T00:00:01.000Z",
      "capplan: training ended with exit status 137 at 2026-01-01T00:00:05.000Z",
      "capplan: requeue 1 of 2: training failed with exit status 137",
      "capplan: attempt 2 of job 7 on n1 at 2026-01-01T00:00:15.000Z",
      "capplan: training starts at 2026-01-01T00:00:16.000Z",
      "capplan: training ended with exit status 0 at 2026-01-01T00:00:22.000Z",
  };
  std::vector<MetricsRecord> records;
  TwoAttempts() {
    records.push_back(record("{\"type\":\"start\",\"resumed_from_step\":-1}"));
    for (auto& r : steps(1, 25, 0.1)) records.push_back(r);
    records.push_back(record("{\"type\":\"start\",\"resumed_from_step\":20}"));
    for (auto& r : steps(21, 40, 0.2)) records.push_back(r);
  }
};

TEST(SlurmRecord, AttemptsFromTheScriptLinesAndTheMetrics) {
  const TwoAttempts t;
  const auto a = slurm_attempts(t.lines, t.records);
  ASSERT_EQ(a.size(), 2u);
  EXPECT_EQ(a[0].attempt, 1);
  EXPECT_EQ(a[0].resumed_from_step, 0);  // -1 in the metrics: not resumed
  EXPECT_EQ(a[0].first_step, 1);
  EXPECT_EQ(a[0].last_step, 25);
  EXPECT_EQ(a[0].exit_code, 137);
  EXPECT_EQ(a[0].outcome, "failed (exit status 137)");
  EXPECT_EQ(a[1].resumed_from_step, 20);
  EXPECT_EQ(a[1].first_step, 21);
  EXPECT_EQ(a[1].last_step, 40);
  EXPECT_EQ(a[1].outcome, "finished");
  EXPECT_NEAR(a[1].step_time_sum_s, 20 * 0.2, 1e-9);
}

TEST(SlurmRecord, GoodputCountsEachFinalStepOnceAndPricesTheFailure) {
  const TwoAttempts t;
  const auto a = slurm_attempts(t.lines, t.records);
  const Goodput g = compute_goodput(a, t.records, "2026-01-01T00:00:30Z");
  // Expectation: productive = steps 1-20 of attempt 1 (20 x 0.1) + 21-40 of attempt 2 (20 x 0.2)
  // = 6 s; wall = first start (00:00) to the last trainer's end (00:22) = 22 s.
  EXPECT_NEAR(g.productive_s, 6.0, 1e-9);
  EXPECT_NEAR(g.wall_s, 22.0, 1e-9);
  EXPECT_NEAR(g.ratio, 6.0 / 22.0, 1e-12);
  ASSERT_EQ(g.failures, 1);
  ASSERT_EQ(g.per_failure.size(), 1u);
  const FailureCost& f = g.per_failure[0];
  EXPECT_EQ(f.attempt, 1);
  // restart: trainer 1 ended 00:05, trainer 2 started 00:16 -> 11 s.
  EXPECT_NEAR(f.restart_s, 11.0, 1e-9);
  // reload: trainer 2 ran 6 s, of which 4 s were steps -> 2 s.
  EXPECT_NEAR(f.reload_s, 2.0, 1e-9);
  // recomputed: steps 21-25 of attempt 1 (5 x 0.1 s).
  EXPECT_EQ(f.recomputed_steps, 5);
  EXPECT_NEAR(f.recomputed_s, 0.5, 1e-9);
}

TEST(SlurmRecord, HealthFailureLinesNameNodeAndCheck) {
  const std::vector<std::string> lines = {
      "capplan: attempt 1 of job 8 on n1 at 2026-01-01T00:00:00.000Z",
      "health: FAILED on node n1: free_disk: free in '/c': 0.1 MiB, expected >= 2.0 MiB (two checkpoints of 1.0 MiB)",
      "capplan: health check failed at 2026-01-01T00:00:02.000Z",
  };
  const auto a = slurm_attempts(lines, {});
  ASSERT_EQ(a.size(), 1u);
  EXPECT_EQ(a[0].outcome, "health check failed");
  EXPECT_EQ(a[0].resumed_from_step, -1);  // the trainer never started
  ASSERT_EQ(a[0].health_failures.size(), 1u);
  EXPECT_EQ(a[0].health_failures[0].rfind("node n1: free_disk: free in '/c': 0.1 MiB, expected >= 2.0 MiB", 0), 0u);
}

int bash_syntax_check(const std::string& text, const std::string& name) {
  const auto dir = capplan::test::scratch_dir("slurm-script");
  const std::string path = (dir / name).string();
  std::ofstream(path) << text;
  return std::system(("bash -n '" + path + "' 2>&1").c_str());
}

TEST(SlurmScript, RequeueAndHealthStepsQuoteEveryUserString) {
  Loaded<Plan> plan = load_plan("default");
  ASSERT_TRUE(plan.ok()) << plan.diagnostics.to_string();
  SbatchOptions o;
  o.run_dir = "/shared/run dir 'q' $(touch PWNED)";
  o.run_dir_literal = true;
  o.requeue = 2;
  o.use_mpirun = true;
  o.request_gpus = false;
  o.train_binary = "/opt/capplan $(x)/capplan-train";
  o.train_args = {"--model", o.run_dir + "/model.yaml", "--resume", "auto"};
  o.health_args = {"--checkpoint-dir", o.run_dir + "/checkpoints"};
  o.time_limit = "01:30:00";
  const std::string text = export_sbatch(*plan.value, o).text;
  EXPECT_EQ(bash_syntax_check(text, "job.sbatch"), 0) << text;
  EXPECT_NE(text.find("#SBATCH --requeue\n"), std::string::npos);
  EXPECT_NE(text.find("#SBATCH --open-mode=append\n"), std::string::npos);
  EXPECT_NE(text.find("#SBATCH --time=01:30:00\n"), std::string::npos);
  EXPECT_EQ(text.find("--gpus-per-node"), std::string::npos);
  EXPECT_NE(text.find("MAX_REQUEUE=2\n"), std::string::npos);
  // User strings in single quotes, where bash expands nothing.
  EXPECT_NE(text.find("RUN_DIR='/shared/run dir '\\''q'\\'' $(touch PWNED)'\n"), std::string::npos) << text;
  EXPECT_NE(text.find("  '/shared/run dir '\\''q'\\'' $(touch PWNED)/model.yaml'\n"), std::string::npos) << text;
  EXPECT_NE(text.find("'/opt/capplan $(x)/capplan-train' health \"${HEALTH_ARGS[@]}\""), std::string::npos) << text;
  EXPECT_NE(text.find("scontrol update NodeName=\"$node\" State=DRAIN Reason=\"$why\""), std::string::npos);
  EXPECT_NE(text.find("scontrol requeue \"$SLURM_JOB_ID\""), std::string::npos);
}

TEST(SlurmScript, PlainExportIsUnchangedByTheSlurmOptions) {
  Loaded<Plan> plan = load_plan("default");
  ASSERT_TRUE(plan.ok());
  const std::string text = export_sbatch(*plan.value).text;
  EXPECT_NE(text.find("#SBATCH --gpus-per-node=8\n"), std::string::npos) << text;
  EXPECT_NE(text.find("#SBATCH --exclusive\n"), std::string::npos);
  EXPECT_EQ(text.find("--requeue"), std::string::npos);
  EXPECT_EQ(text.find("health"), std::string::npos);
  EXPECT_NE(text.find("RUN_DIR=\"runs/$SLURM_JOB_ID\""), std::string::npos);
}

// Expectation: the trainer arguments a plain `export --format sbatch` writes (TRAIN_ARGS, built
// from the plan in the planner, which cannot see capplan-train's options) are exactly what
// capplan-train reads: bash expands the array (with RUN_DIR and SLURM_JOB_ID set), and
// TrainOptions::parse accepts it without a diagnostic and gives back the plan's layout, batch,
// data, checkpoint and metrics paths. So the script and the trainer cannot drift apart, for every
// knob the script writes (offload, sp, each schedule, a preset and a model file).
TEST(SlurmScript, PlainExportTrainerArgumentsParseAsTheTrainsOptions) {
  Loaded<Plan> base = load_plan("default");
  ASSERT_TRUE(base.ok());
  const fs::path dir = test::scratch_dir("sbatch-contract");
  std::vector<Plan> plans(3, *base.value);
  plans[1].layout.offload = true;
  plans[1].layout.schedule = Schedule::GPipe;
  plans[1].layout.recompute = Recompute::Full;
  plans[2].layout.sp = plans[2].layout.tp > 1;
  plans[2].layout.zero = 0;
  plans[2].model_ref = (dir / "my model.yaml").string();  // not a preset: the script writes the model
  for (size_t i = 0; i < plans.size(); ++i) {
    const Plan& plan = plans[i];
    const std::string script = export_sbatch(plan).text;
    const size_t begin = script.find("TRAIN_ARGS=(");
    const size_t end = script.find(")\n", begin);
    ASSERT_NE(begin, std::string::npos) << script;
    ASSERT_NE(end, std::string::npos) << script;
    const fs::path part = dir / ("args-" + std::to_string(i) + ".sh");
    std::ofstream(part) << "RUN_DIR=/runs/7\n" << script.substr(begin, end + 2 - begin)
                        << "printf '%s\\n' \"${TRAIN_ARGS[@]}\"\n";
    const fs::path out = dir / ("args-" + std::to_string(i) + ".txt");
    ASSERT_EQ(std::system(("bash '" + part.string() + "' > '" + out.string() + "'").c_str()), 0) << script;
    std::vector<std::string> argv = {"capplan-train"};
    std::istringstream lines(test::read_text(out));
    for (std::string a; std::getline(lines, a);) argv.push_back(a);
    std::vector<const char*> cargv;
    for (const auto& a : argv) cargv.push_back(a.c_str());
    TrainOptions o;
    const Diagnostics d = TrainOptions::parse(int(cargv.size()), cargv.data(), &o);
    ASSERT_FALSE(d.has_errors()) << d.to_string() << "\n" << test::read_text(out);
    const Layout& l = plan.layout;
    EXPECT_EQ(o.layout.dp, l.dp);
    EXPECT_EQ(o.layout.tp, l.tp);
    EXPECT_EQ(o.layout.pp, l.pp);
    EXPECT_EQ(o.layout.vp, l.vp);
    EXPECT_EQ(o.layout.mbs, l.mbs);
    EXPECT_EQ(o.layout.zero, l.zero);
    EXPECT_EQ(o.layout.recompute, l.recompute);
    EXPECT_EQ(o.layout.offload, l.offload);
    EXPECT_EQ(o.layout.sp, l.sp);
    EXPECT_EQ(o.layout.order, l.order);
    EXPECT_EQ(o.layout.schedule, l.schedule);
    EXPECT_EQ(o.gbs, plan.scenario.training.gbs);
    EXPECT_EQ(o.steps, plan_training_steps(plan));
    EXPECT_EQ(o.data, "synthetic");
    EXPECT_EQ(o.model, i == 2 ? "/runs/7/model.yaml" : plan.model_ref);
    EXPECT_EQ(o.checkpoint_dir, "/runs/7/checkpoints");
    EXPECT_EQ(o.metrics, "/runs/7/metrics.jsonl");
    EXPECT_EQ(o.resume, "auto");
  }
}

}  // namespace
}  // namespace capplan::rt
