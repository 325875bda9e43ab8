// Hostile and oversized input through the `capplan` command line, run as a real process under
// `timeout`: every case ends with exit status 2 and a message naming the file (or flag) and the
// reason; none crashes (status > 128), hangs (status 124) or runs an injected command.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include "support/run_program.h"
#include "support/test_files.h"

namespace {

namespace fs = std::filesystem;

using CliRun = capplan::test::ProgramRun;

// `capplan ARGS` in the source folder, killed after `timeout_s` (status 124 = it hung).
CliRun run_cli(const std::string& args, int timeout_s = 30) {
  return capplan::test::run_program(CAPPLAN_CLI, args, timeout_s);
}

bool has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

::testing::AssertionResult refused(const CliRun& r, const std::string& message) {
  if (r.status == 2 && has(r.err, message)) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "status " << r.status << ", expected 2 and '" << message
                                       << "' on stderr:\n" << r.err << "\nstdout:\n"
                                       << r.out.substr(0, 2000);
}

std::string q(const fs::path& p) {
  std::string quoted = "'";  // appended piecewise: GCC 12 misreports `"'" + std::string` (-Wrestrict)
  quoted += p.string();
  quoted += '\'';
  return quoted;
}

// ---- names that would inject a command ----

// Expectation: the Hugging Face config whose `_name_or_path` holds a newline and a command is
// refused at load by every command that takes --model, naming the field; nothing is exported.
TEST(Robustness, ControlCharactersInANameAreRefusedAtLoad) {
  const std::string model = "--model tests/data/bad/hf_config_hostile_name.json";
  const std::string layout = " --cluster p4d.24xlarge --nodes 1 --dp 8 --tp 1 --pp 1 --mbs 1 "
                             "--gbs 64";
  const std::string msg =
      "tests/data/bad/hf_config_hostile_name.json:2:20: error: _name_or_path: must not contain "
      "control characters";
  for (const std::string fmt : {"sbatch", "megatron", "smp", "deepspeed"}) {
    const CliRun r = run_cli("export " + model + layout + " --format " + fmt);
    EXPECT_TRUE(refused(r, msg)) << fmt;
    EXPECT_FALSE(has(r.out, "touch PWNED")) << r.out;
  }
  const fs::path dir = capplan::test::scratch_dir("hostile_plan");
  EXPECT_TRUE(refused(run_cli("plan " + model + " --cluster p4d.24xlarge --nodes 1 --gbs 64 "
                              "--save " + q(dir / "plan.yaml")),
                      msg));
  EXPECT_FALSE(fs::exists(dir / "plan.yaml"));
  EXPECT_TRUE(refused(run_cli("profile " + model), msg));
}

// ---- files that are not regular files, or too large ----

TEST(Robustness, ValidateRefusesDevicesFifosAndFolders) {
  const fs::path dir = capplan::test::scratch_dir("nonregular");
  const fs::path fifo = dir / "runs.fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  // Expectation: /dev/zero is refused before a byte is read (it was std::bad_alloc, exit 134);
  // a FIFO with no writer is refused at once (it hung); a folder is named as one.
  EXPECT_TRUE(refused(run_cli("validate /dev/zero", 10),
                      "/dev/zero: error: cannot read the file: not a regular file (a character device)"));
  EXPECT_TRUE(refused(run_cli("validate " + q(fifo), 10), "not a regular file (a FIFO)"));
  EXPECT_TRUE(refused(run_cli("validate " + q(dir), 10), "not a regular file (a folder)"));
  for (const char* cmd : {"profile --model ", "estimate --cluster p4d.24xlarge --nodes 1 --dp 8 "
                                              "--tp 1 --pp 1 --mbs 1 --gbs 64 --model "}) {
    EXPECT_TRUE(refused(run_cli(std::string(cmd) + q(fifo), 10), "not a regular file")) << cmd;
    EXPECT_TRUE(refused(run_cli(std::string(cmd) + "/dev/zero", 10), "not a regular file")) << cmd;
  }
  EXPECT_TRUE(refused(run_cli("simulate --plan " + q(fifo), 10), "not a regular file"));
  EXPECT_TRUE(refused(run_cli("simulate --plan /dev/zero", 10), "not a regular file"));
}

// Expectation: a runs file whose `model:` names a symlink to /dev/zero is refused naming the
// model (the reference resolver read the whole target to test that it existed: bad_alloc).
TEST(Robustness, RunsFileModelSymlinkToADeviceIsRefused) {
  const fs::path dir = capplan::test::scratch_dir("symlinked_model");
  fs::create_symlink("/dev/zero", dir / "model.yaml");
  std::ofstream(dir / "runs.yaml")
      << "runs:\n  - id: r1\n    source: test\n    calibration: true\n    model: model.yaml\n"
         "    cluster: dgx-a100-80gb\n    gbs: 512\n    precision: bf16\n"
         "    layout: {dp: 8, tp: 1, pp: 1, mbs: 1}\n    measured: {iteration_time_s: 1.0}\n";
  const CliRun r = run_cli("validate " + q(dir / "runs.yaml"), 10);
  EXPECT_TRUE(refused(r, "runs.yaml:5:12: error: runs[0].model: not a regular file (a character device)"));
}

// Expectation: a file over the 64 MiB input limit is refused with the limit named, without
// being read (a sparse file: no disk is used).
TEST(Robustness, InputFilesOverTheLimitAreRefused) {
  const fs::path dir = capplan::test::scratch_dir("huge");
  const fs::path big = dir / "model.yaml";
  { std::ofstream(big) << "name: big\n"; }
  fs::resize_file(big, (int64_t(64) << 20) + 1);
  const std::string msg = "file too large: 67108865 bytes, over the limit of 64 MiB";
  EXPECT_TRUE(refused(run_cli("profile --model " + q(big)), msg));
  EXPECT_TRUE(refused(run_cli("validate " + q(big)), msg));
  EXPECT_TRUE(refused(run_cli("simulate --plan " + q(big)), msg));
}

// ---- many keys ----

// Writes a model file of the six required keys and then `keys` more, every other one a repeat
// of `layers` (line 7, 9, ...) and the rest unknown (`k1` on line 8, ...).
fs::path many_keys_model(const std::string& folder, int keys) {
  const fs::path file = capplan::test::scratch_dir(folder) / "model.yaml";
  std::ofstream f(file);
  f << "name: x\nlayers: 2\nhidden: 64\nheads: 4\nvocab: 100\nseq_len: 16\n";
  for (int i = 0; i < keys; ++i) {
    if (i % 2 == 0) f << "layers: " << i << "\n";
    else f << "k" << i << ": 1\n";
  }
  return file;
}

// Expectation: 90,000 keys (180,013 nodes, under the 200,000-node limit; every other key a
// repeat of `layers`, the rest unknown) are checked in one linear pass: the first 100 problems
// are listed, the other 89,900 counted in one line (the pairwise check took minutes at this size).
TEST(Robustness, RepeatedKeysAreFoundInOnePass) {
  const fs::path file = many_keys_model("many_keys", 90000);
  const CliRun r = run_cli("profile --model " + q(file), 30);
  EXPECT_TRUE(refused(r, "model.yaml:7:1: error: model.layers: given more than once (the first one is used)"));
  EXPECT_TRUE(has(r.err, "model.yaml:8:1: error: model.k1: unknown key")) << r.err.substr(0, 2000);
  EXPECT_TRUE(has(r.err, "error: model: 89900 more unknown or repeated keys not listed (at most 100 are "
                         "listed per map)"))
      << r.err.substr(r.err.size() > 2000 ? r.err.size() - 2000 : 0);
  size_t lines = 0;
  for (char c : r.err) lines += c == '\n';
  EXPECT_EQ(lines, 101u);
}

// Expectation: 1,000,000 keys are refused by the streaming node count before any node tree is
// built, at the node over the limit: the root map is node 1 and the key and value on line L are
// nodes 2L and 2L + 1, so node 200,001 is the value `1` of `k99993: 1` on line 100,000, column 9.
// The message names the limit; it is the only line (no tree, so no key diagnostics).
TEST(Robustness, TooManyYamlNodesAreRefusedBeforeTheTree) {
  const fs::path file = many_keys_model("huge_keys", 1000000);
  const CliRun r = run_cli("profile --model " + q(file), 30);
  EXPECT_TRUE(refused(r, "model.yaml:100000:9: error: too many YAML nodes: more than 200000 (the "
                         "limit for one input file"));
  size_t lines = 0;
  for (char c : r.err) lines += c == '\n';
  EXPECT_EQ(lines, 1u) << r.err.substr(0, 2000);
  // The same limit for every loader of YAML: a plan and a runs file.
  EXPECT_TRUE(refused(run_cli("simulate --plan " + q(file)), "too many YAML nodes"));
  EXPECT_TRUE(refused(run_cli("validate " + q(file)), "too many YAML nodes"));
}

// ---- flags and values the search must refuse ----

TEST(Robustness, PinsAndRangesAreChecked) {
  const std::string plan = "plan --model gpt3-175b --cluster p4d.24xlarge --gbs 64 ";
  // Expectation: a knob pinned twice is refused (it silently took the last value).
  EXPECT_TRUE(refused(run_cli(plan + "--nodes 1 --fix tp=8,tp=4"),
                      "<command line>: error: --fix: tp: pinned twice (tp=8, then tp=4)"));
  // Expectation: tp=3 cannot divide 8 GPUs: an impossible pin, exit 2 with the reason (it said
  // "no layout fits in memory" with exit 0).
  EXPECT_TRUE(refused(run_cli(plan + "--nodes 1 --fix tp=3"),
                      "--fix: no layout satisfies the pins: tp=3 does not divide 8 GPUs"));
  EXPECT_TRUE(refused(run_cli(plan + "--nodes 1 --fix pp=200"),
                      "pp=200 is more than the model's 96 layers"));
  // Expectation: more GPUs than any layout of the model and batch can use is exit 2 with the
  // bound (it said "no layout fits in memory; try more nodes" with exit 0).
  EXPECT_TRUE(refused(run_cli(plan + "--nodes 100000"),
                      "--nodes: no valid layout: 800000 GPUs are more than any layout of this model and batch "
                      "can use: at most 589824 (dp at most the global batch 64, tp at most 96"));
  // A pin that is possible but does not fit in memory is still exit 0 with the advice.
  const CliRun fits = run_cli(plan + "--nodes 1 --fix tp=8");
  EXPECT_EQ(fits.status, 0) << fits.err;
  EXPECT_TRUE(has(fits.out, "no layout fits in memory")) << fits.out;
  // Expectation: a node range over the limit is refused at once, naming the limit (it ran for
  // hours).
  const CliRun range = run_cli(plan + "--nodes 1:1000000", 20);
  EXPECT_TRUE(refused(range, "--nodes: the node range 1:1000000 holds 1000000 node counts, over "
                             "the limit of 100000 per search"));
  EXPECT_LT(range.wall_s, 10.0);
}

// Expectation: 1e-300 GB/s passes "> 0" but made every time infinite ("internal: the task graph
// did not run to completion"): refused with the field's range.
TEST(Robustness, AbsurdlySmallClusterFiguresAreRefused) {
  const std::string f = "tests/data/bad/cluster_tiny_bandwidth.yaml";
  const std::string msg = f + ":4:25: error: cluster.intra_node_gbyte_per_s: must be >= 0.001 and <= 1000000, found 1e-300";
  EXPECT_TRUE(refused(run_cli("simulate --model gpt3-175b --cluster " + f +
                              " --nodes 1 --dp 1 --tp 8 --pp 1 --mbs 1 --gbs 8"),
                      msg));
  EXPECT_TRUE(refused(run_cli("plan --model gpt3-175b --cluster " + f + " --nodes 1 --gbs 8"), msg));
}

// ---- simulations that would not end or not fit in memory ----

// Expectation: 8 stages x 1,000,000 micro-batches is ~80 M tasks (~150 GB: it aborted on
// std::bad_alloc): refused before anything is allocated, with the figure and the limit.
TEST(Robustness, StepSimulationIsBoundedByTasks) {
  const CliRun r = run_cli("simulate --model gpt3-175b --cluster p4d.24xlarge --nodes 1 --dp 1 "
                           "--tp 1 --pp 8 --mbs 1 --gbs 1000000", 20);
  EXPECT_TRUE(refused(r, "the step's task graph would hold about 80000128 tasks (pp 8 x vp 1 x "
                         "1000000 micro-batches x 10), over the limit of 10000000 simulated tasks"));
  const CliRun refine = run_cli("plan --model gpt3-175b --cluster p4d.24xlarge --nodes 120 "
                                "--gbs 16000000 --refine 2", 60);
  EXPECT_TRUE(refused(refine, "--refine: the step's task graph would hold about"));
}

// Expectation: node MTBF 20 h on 120 nodes (job MTBF 10 min) ran for minutes, because the sweep
// up to 16x Young/Daly meets ~10^6 interruptions per interval: now the intervals that would go
// over the Monte-Carlo limit are skipped and said so, and the answer comes at once; MTBF 1e-9 h
// is "expected never to complete".
TEST(Robustness, RunSimulationIsBoundedByWork) {
  const CliRun r = run_cli("simulate --plan default --run --node-mtbf-hours 20 --trials 10", 30);
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(has(r.out, "points not simulated: at those intervals the job is interrupted so "
                         "often that the Monte-Carlo would go over its limit of 20000000 events"))
      << r.out;
  const CliRun json = run_cli("simulate --plan default --run --node-mtbf-hours 20 --trials 10 --json", 30);
  ASSERT_EQ(json.status, 0) << json.err;
  EXPECT_TRUE(has(json.out, "\"mean_days\": null")) << "skipped sweep points are null";
  EXPECT_TRUE(refused(run_cli("simulate --plan default --run --node-mtbf-hours 1e-9", 30),
                      "--run: expected never to complete: the job's MTBF of 8.33e-12 h (node MTBF "
                      "1e-09 h over 120 nodes) is shorter than one checkpoint interval"));
  EXPECT_TRUE(refused(run_cli("simulate --plan default --run --node-mtbf-hours 2 --trials 1000", 30),
                      "Monte-Carlo events"));
}

}  // namespace
