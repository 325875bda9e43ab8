// End-to-end tests of the `capplan` command line: the built binary runs as a real process; we
// check its exit status, its JSON fields (README "JSON output") and its error messages.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "planner/catalog.h"
#include "planner/compare.h"
#include "planner/json.h"
#include "planner/plan_io.h"
#include "support/run_program.h"

namespace {

using CliRun = capplan::test::ProgramRun;

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Runs `capplan ARGS` in the source folder (so tests/data paths work) and captures both streams.
CliRun run_cli(const std::string& args) { return capplan::test::run_program(CAPPLAN_CLI, args); }

bool has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// A refused command: exit status 2 and `message` in what it printed on stderr.
::testing::AssertionResult refused(const CliRun& r, const std::string& message) {
  if (r.status == 2 && has(r.err, message)) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "status " << r.status << ", expected 2 and '" << message
                                       << "' on stderr:\n" << r.err;
}

const char* kSeedEstimate =
    "estimate --model gpt3-175b --cluster p4d.24xlarge --nodes 120 --dp 15 --tp 8 --pp 8 "
    "--mbs 1 --gbs 1920 --zero 1 --recompute selective --sp --tokens 300e9";

// Expectation: the CLI exposes the search's limits: every candidate of "cheapest within 30 days"
// trains in at most 30 days, the JSON says which limits applied, and bad limits exit 2.
TEST(Cli, PlanLimitsDeadlineBudgetAndMemoryMargin) {
  const std::string base = "plan --model gpt3-175b --cluster p4d.24xlarge --nodes 60:240 --gbs 1536 --tokens 300e9 ";
  const CliRun r = run_cli(base + "--objective cost --deadline-days 30 --json");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(has(r.out, "\"deadline_days\": 30,")) << r.out.substr(0, 400);
  EXPECT_TRUE(has(r.out, "\"memory_margin\": 0.05")) << r.out.substr(0, 400);
  size_t at = 0, seen = 0;
  while ((at = r.out.find("\"days_to_train\":", at)) != std::string::npos) {
    at += std::string("\"days_to_train\":").size();
    EXPECT_LE(std::stod(r.out.substr(at, 20)), 30.0);
    ++seen;
  }
  EXPECT_GT(seen, 0u);
  const CliRun text = run_cli(base + "--budget-usd 2.6e6 --top 3");
  ASSERT_EQ(text.status, 0) << text.err;
  EXPECT_TRUE(has(text.out, "limits: cost at most $2600000; keep 5 % of GPU memory free")) << text.out;
  EXPECT_TRUE(refused(run_cli(base + "--memory-margin 0.9"), "--memory-margin: expected a fraction from 0 to 0.5"));
  EXPECT_TRUE(refused(run_cli("plan --model gpt3-13b --cluster dgx-a100-80gb --nodes 4 --gbs 512 --budget-usd 1e6"),
                      "--budget-usd: dgx-a100-80gb has no price, so no budget can be checked"));
}

}  // namespace

TEST(Cli, EstimateJsonHasEveryContractField) {
  const CliRun r = run_cli(std::string(kSeedEstimate) + " --json");
  ASSERT_EQ(r.status, 0) << r.err;
  for (const char* key :
       {"\"layout\"", "\"dp\": 15", "\"tp\": 8", "\"pp\": 8", "\"vp\": 1", "\"mbs\": 1",
        "\"num_microbatches\": 128", "\"zero\": 1", "\"recompute\": \"selective\"",
        "\"offload\": false", "\"sp\": true", "\"order\": \"DPT\"", "\"schedule\": \"1f1b\"",
        "\"fits\"", "\"memory_per_gpu_bytes\"", "\"weights\"", "\"gradients\"", "\"optimizer\"",
        "\"activations\"", "\"buffers\"", "\"total\"", "\"capacity\"", "\"step_time_s\"",
        "\"breakdown_s\"", "\"compute\"", "\"recompute\"", "\"bubble\"", "\"tp_comm\"",
        "\"pp_comm\"", "\"dp_comm\"", "\"offload\"", "\"samples_per_s\"", "\"tokens_per_s\"",
        "\"model_tflops_per_gpu\"", "\"hardware_tflops_per_gpu\"", "\"mfu\"",
        "\"days_to_train\"", "\"cost_usd\"", "\"gpus\": 960", "\"nodes\": 120",
        "\"tokens\": 300000000000", "\"host_memory_per_node_bytes\": 0", "\"host_memory_capacity_bytes\""})
    EXPECT_TRUE(has(r.out, key)) << key << "\n" << r.out;
  EXPECT_EQ(r.out.front(), '{');
}

TEST(Cli, EstimateTableIsHumanReadable) {
  const CliRun r = run_cli(kSeedEstimate);
  ASSERT_EQ(r.status, 0) << r.err;
  for (const char* part : {"gpt3-175b on 120 x p4d.24xlarge", "fits", "step time", "bubble",
                           "samples/s", "MFU", "days", "$"})
    EXPECT_TRUE(has(r.out, part)) << part << "\n" << r.out;
}

// Expectation: the text names the implementation it was costed for, as the user set it or as the
// framework preset's defaults give it (fsdp: FlashAttention through PyTorch's SDPA).
TEST(Cli, EstimateTableNamesTheStack) {
  const std::string base = "estimate --model gpt3-1.3b --cluster p4d.24xlarge --nodes 1 --dp 8 --tp 1 --pp 1 "
                           "--mbs 1 --gbs 64 ";
  const CliRun fsdp = run_cli(base + "--framework fsdp --zero 3 --offload-params");
  ASSERT_EQ(fsdp.status, 0) << fsdp.err;
  EXPECT_TRUE(has(fsdp.out, "stack        framework fsdp  attention flash  precision bf16  optimizer adam  "
                            "offload-params on  offload-optimizer off\n")) << fsdp.out;
  // What offloading puts in host memory, per node, beside the usable host memory (p4d: 1152 GiB,
  // 80 % usable): the 8 GPUs' shards of weights (2 B), gradients (4 B) and Adam state (12 B), 18 B
  // per parameter of the model in all: 18 x 1.32 G = 22.1 GiB.
  EXPECT_TRUE(has(fsdp.out, "host/node    22.1 GiB offloaded, of 921.6 GiB usable\n")) << fsdp.out;
  const CliRun core = run_cli(base + "--framework megatron-core --precision fp16 --optimizer sgd");
  ASSERT_EQ(core.status, 0) << core.err;
  EXPECT_TRUE(has(core.out, "stack        framework megatron-core  attention flash  precision fp16  optimizer sgd  "
                            "offload-params off  offload-optimizer off\n")) << core.out;
  EXPECT_FALSE(has(core.out, "host/node")) << core.out;  // nothing offloaded
}

TEST(Cli, PartOfANodeWithGpus) {
  // One GPU of an 8-GPU machine: gpus 1, nodes 1.
  const CliRun r = run_cli(
      "estimate --model gpt2-124m --cluster p4d.24xlarge --gpus 1 --dp 1 --tp 1 --pp 1 --mbs 8 "
      "--gbs 64 --json");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(has(r.out, "\"gpus\": 1")) << r.out;
  EXPECT_TRUE(has(r.out, "\"nodes\": 1")) << r.out;
  EXPECT_TRUE(has(r.out, "\"tokens_defaulted\": true")) << r.out;
}

TEST(Cli, InvalidLayoutExitsTwoNamingTheConstraint) {
  // Expectation: dp*tp*pp = 8 != 960 GPUs.
  const CliRun r = run_cli(
      "estimate --model gpt3-175b --cluster p4d.24xlarge --nodes 120 --dp 1 --tp 8 --pp 1 "
      "--mbs 1 --gbs 1536");
  EXPECT_EQ(r.status, 2);
  EXPECT_TRUE(has(r.err, "<command line>: error: layout: invalid layout")) << r.err;
  EXPECT_TRUE(r.out.empty());
}

TEST(Cli, EveryFlagErrorIsListedAtOnce) {
  const CliRun r = run_cli(
      "estimate --model gpt3-175b --cluster p4d.24xlarge --nodes -3 --dp x --tp 8 --pp 8 "
      "--mbs 0 --gbs 1536 --recompute sometimes --ordr DPT");
  EXPECT_EQ(r.status, 2);
  for (const char* part :
       {"--nodes: must be > 0, found -3", "--dp: expected a whole number, found 'x'",
        "--mbs: must be > 0, found 0", "--recompute: expected none, selective or full",
        "--ordr: unknown flag (did you mean '--order'?)"})
    EXPECT_TRUE(has(r.err, part)) << part << "\n" << r.err;
}

TEST(Cli, BadModelFileExitsTwoWithFileLineKey) {
  const CliRun r = run_cli(
      "estimate --model tests/data/bad/model_unknown_key.yaml --cluster p4d.24xlarge --nodes 1 "
      "--dp 8 --tp 1 --pp 1 --mbs 1 --gbs 8");
  EXPECT_EQ(r.status, 2);
  EXPECT_TRUE(has(r.err, "tests/data/bad/model_unknown_key.yaml:3:1: error: model.hiden: unknown "
                         "key (did you mean 'hidden'?)"))
      << r.err;
  EXPECT_TRUE(has(r.err, "model.hidden: missing required key")) << r.err;
}

// Every bad file under tests/data/bad exits 2 from the CLI and names its file and a line.
class CliBadFile : public ::testing::TestWithParam<const char*> {};

TEST_P(CliBadFile, ExitsTwoNamingFileAndLine) {
  const std::string file = std::string("tests/data/bad/") + GetParam();
  const bool cluster = file.find("cluster_") != std::string::npos;
  const std::string args =
      cluster ? "estimate --model gpt2-124m --cluster " + file +
                    " --nodes 1 --dp 8 --tp 1 --pp 1 --mbs 1 --gbs 8"
              : "profile --model " + file;
  const CliRun r = run_cli(args);
  EXPECT_EQ(r.status, 2) << r.err;
  EXPECT_TRUE(has(r.err, file + ":")) << r.err;
  EXPECT_TRUE(has(r.err, ": error: ")) << r.err;
  EXPECT_TRUE(r.out.empty()) << r.out;
}

INSTANTIATE_TEST_SUITE_P(OnePerMistake, CliBadFile,
                         ::testing::Values("model_malformed.yaml", "model_unknown_key.yaml",
                                           "model_missing_key.yaml", "model_wrong_type.yaml",
                                           "model_zero.yaml", "model_negative.yaml",
                                           "model_huge.yaml", "model_heads_not_dividing.yaml",
                                           "cluster_nan.yaml", "cluster_unknown_gpu.yaml",
                                           "hf_config_bad.json"));

TEST(Cli, UnknownPresetAndMissingFile) {
  EXPECT_TRUE(refused(run_cli("profile --model gpt3-176b"), "did you mean 'gpt3-175b'?"));
  EXPECT_TRUE(refused(run_cli("profile --model tests/data/bad/does-not-exist.yaml"),
                      "tests/data/bad/does-not-exist.yaml: error: no such file"));
  EXPECT_TRUE(refused(run_cli("validate tests/data/bad/does-not-exist.yaml"),
                      "does-not-exist.yaml"));
}

TEST(Cli, StackKnobsRefuseWhatCannotRun) {
  // Each gets exit 2 and a message naming the flag and the reason.
  const std::string base = "estimate --model gpt3-1.3b --cluster p4d.24xlarge --nodes 1 --dp 8 --tp 1 --pp 1 "
                           "--mbs 1 --gbs 64 ";
  EXPECT_TRUE(refused(run_cli(base + "--framework megatron-lmm"), "--framework: no framework preset or file named 'megatron-lmm'"));
  // A framework file's mistake names the file, the line and the key.
  EXPECT_TRUE(refused(run_cli(base + "--framework tests/data/bad/framework_not_boolean.yaml"),
                      "tests/data/bad/framework_not_boolean.yaml:5:23: error: framework.zero1_grad_allreduce: "
                      "expected true or false, found 'maybe'"));
  EXPECT_TRUE(refused(run_cli(base + "--attention sdpa"), "--attention: expected eager, fused or flash, found 'sdpa'"));
  EXPECT_TRUE(refused(run_cli(base + "--precision fp8"), "--precision: fp8 is not supported by A100-SXM4-40GB"));
  EXPECT_TRUE(refused(run_cli("estimate --model gpt3-1.3b --cluster p3.16xlarge --nodes 1 --dp 8 --tp 1 --pp 1 "
                              "--mbs 1 --gbs 64 --attention flash"),
                      "--attention: flash (FlashAttention-2/3) does not run on V100-SXM2-16GB"));
  EXPECT_TRUE(refused(run_cli("estimate --model tests/data/good/model_head_dim_320.yaml --cluster p4d.24xlarge "
                              "--nodes 1 --dp 8 --tp 1 --pp 1 --mbs 1 --gbs 64 --attention flash"),
                      "--attention: flash supports head sizes that are multiples of 8 up to 256; this model's is 320"));
  EXPECT_TRUE(refused(run_cli("estimate --model gpt3-1.3b --cluster dgx-a100-80gb --nodes 1 --dp 8 --tp 1 --pp 1 "
                              "--mbs 1 --gbs 64 --offload-optimizer"),
                      "--offload-optimizer: the cluster dgx-a100-80gb has no host_memory_gib"));
  EXPECT_TRUE(refused(run_cli(base + "--framework smp-v1 --recompute selective"),
                      "framework smp-v1 has no selective recompute"));
  // Parallelisms, ZeRO stages, schedules and offload the implementation does not have.
  const std::string four = "estimate --model gpt3-1.3b --cluster p4d.24xlarge --nodes 1 --mbs 1 --gbs 64 ";
  EXPECT_TRUE(refused(run_cli(four + "--dp 4 --tp 2 --pp 1 --framework fsdp"),
                      "framework fsdp has no tensor parallelism (tp must be 1)"));
  EXPECT_TRUE(refused(run_cli(four + "--dp 4 --tp 1 --pp 2 --framework fsdp"),
                      "framework fsdp has no pipeline parallelism (pp must be 1)"));
  EXPECT_TRUE(refused(run_cli(base + "--zero 1 --framework fsdp"), "framework fsdp has no ZeRO stage 1 (zero 0, 2, 3)"));
  EXPECT_TRUE(refused(run_cli(four + "--dp 4 --tp 1 --pp 2 --schedule gpipe --framework deepspeed"),
                      "framework deepspeed has no pipeline schedule gpipe (schedule 1f1b)"));
  EXPECT_TRUE(refused(run_cli(base + "--zero 2 --framework smp-v1"), "framework smp-v1 has no ZeRO stage 2 (zero 0, 1)"));
  EXPECT_TRUE(refused(run_cli(base + "--offload --framework megatron-lm-2020"),
                      "framework megatron-lm-2020 has no activation offload (offload must be off)"));
  // A search pinned to one of them says which, and exits 2.
  EXPECT_TRUE(refused(run_cli("plan --model gpt3-1.3b --cluster p4d.24xlarge --nodes 1 --gbs 64 --framework fsdp "
                              "--fix tp=2"),
                      "--fix: no layout satisfies the pins: framework fsdp has no tensor parallelism (tp must be 1)"));
  // Pinned sequence parallelism or selective recompute the framework lacks are named too.
  EXPECT_TRUE(refused(run_cli("plan --model gpt3-1.3b --cluster p4d.24xlarge --nodes 1 --gbs 64 --framework smp-v1 "
                              "--fix recompute=selective"),
                      "--fix: no layout satisfies the pins: framework smp-v1 has no selective recompute"));
  EXPECT_TRUE(refused(run_cli("plan --model gpt3-1.3b --cluster p4d.24xlarge --nodes 1 --gbs 64 --framework fsdp "
                              "--fix sp=true"),
                      "--fix: no layout satisfies the pins: framework fsdp has no sequence parallelism (sp)"));
  // An unpinned search that finds no split says that the framework has none of tp and pp.
  EXPECT_TRUE(refused(run_cli("plan --model gpt3-175b --cluster p4d.24xlarge --nodes 120 --gbs 1536 --framework fsdp"),
                      "tp at most 1, pp at most 1 (framework fsdp has no tensor or pipeline parallelism)"));
  // What it has is accepted.
  const CliRun ok = run_cli(base + "--zero 3 --framework fsdp");
  EXPECT_EQ(ok.status, 0) << ok.err;
}

TEST(Cli, APlanCarriesAFrameworkThatIsNoPreset) {
  // tests/data/good/plan_own_framework.yaml was saved by `plan --framework FILE --save` from a
  // framework file (megatron-core with ep_overlap: true) that is not beside it: the plan holds the
  // spec, so estimate and simulate cost it as it was planned, and saving it again keeps it.
  const CliRun est = run_cli("estimate --plan tests/data/good/plan_own_framework.yaml");
  ASSERT_EQ(est.status, 0) << est.err;
  EXPECT_TRUE(has(est.out, "framework megatron-core-ep-overlap")) << est.out;
  const CliRun sim = run_cli("simulate --plan tests/data/good/plan_own_framework.yaml");
  ASSERT_EQ(sim.status, 0) << sim.err;
  const capplan::Loaded<capplan::Plan> plan =
      capplan::load_plan(std::string(CAPPLAN_SOURCE_DIR) + "/tests/data/good/plan_own_framework.yaml");
  ASSERT_TRUE(plan.ok()) << plan.diagnostics.to_string();
  EXPECT_TRUE(plan.value->scenario.training.framework.ep_overlap);
  EXPECT_EQ(plan.value->scenario.training.framework.name, "megatron-core-ep-overlap");
}

TEST(Cli, AFrameworksFlashFallsBackWhereTheGpuCannotRunIt) {
  // megatron-core's attention is FlashAttention, which V100 lacks: without --attention the step is
  // costed with the fused softmax, and plan and estimate say so; --attention flash is refused
  // (StackKnobsRefuseWhatCannotRun).
  const CliRun plan = run_cli("plan --model gpt3-1.3b --cluster p3.16xlarge --nodes 1 --gbs 64 --framework megatron-core --top 1");
  ASSERT_EQ(plan.status, 0) << plan.err;
  EXPECT_TRUE(has(plan.out, "note: megatron-core's flash (FlashAttention-2/3) does not run on V100-SXM2-16GB (it needs "
                            "Ampere or newer); costed with fused"))
      << plan.out;
  const std::string estimate = "estimate --model gpt3-1.3b --cluster p3.16xlarge --nodes 1 --dp 8 --tp 1 --pp 1 --mbs 1 "
                               "--gbs 64 --framework megatron-core";
  const CliRun text = run_cli(estimate);
  ASSERT_EQ(text.status, 0) << text.err;
  EXPECT_TRUE(has(text.out, "attention fused")) << text.out;
  EXPECT_TRUE(has(text.out, "note         megatron-core's flash")) << text.out;
  const CliRun json = run_cli(estimate + " --json");
  ASSERT_EQ(json.status, 0) << json.err;
  EXPECT_TRUE(has(json.out, "\"attention\": \"fused\"")) << json.out;
  EXPECT_TRUE(has(json.out, "\"attention_fallback\": \"megatron-core's flash")) << json.out;
  // Context parallelism is Transformer Engine's ring attention, which V100 cannot run either.
  EXPECT_TRUE(refused(run_cli("estimate --model gpt3-1.3b --cluster p3.16xlarge --nodes 1 --dp 4 --tp 1 --pp 1 --cp 2 "
                              "--mbs 1 --gbs 64 --framework megatron-core"),
                      "cp = 2: context parallelism runs Transformer Engine's ring attention"));
  EXPECT_TRUE(refused(run_cli("plan --model gpt3-1.3b --cluster p3.16xlarge --nodes 1 --gbs 64 --framework megatron-core "
                              "--fix cp=2"),
                      "--fix: no layout satisfies the pins: cp=2: context parallelism runs Transformer Engine's ring "
                      "attention (FlashAttention or cuDNN fused attention), which does not run on V100-SXM2-16GB (it "
                      "needs Ampere or newer)"));
  // Where flash runs, nothing falls back.
  const CliRun a100 = run_cli("estimate --model gpt3-1.3b --cluster p4d.24xlarge --nodes 1 --dp 8 --tp 1 --pp 1 --mbs 1 "
                              "--gbs 64 --framework megatron-core --json");
  ASSERT_EQ(a100.status, 0) << a100.err;
  EXPECT_TRUE(has(a100.out, "\"attention\": \"flash\"")) << a100.out;
  EXPECT_TRUE(has(a100.out, "\"attention_fallback\": \"\"")) << a100.out;
}

TEST(Cli, UnknownCommandSuggests) {
  EXPECT_TRUE(refused(run_cli("estimte"), "did you mean 'estimate'?"));
}

TEST(Cli, PlanJsonAndSave) {
  const std::string save = std::filesystem::temp_directory_path().string() + "/capplan-cli-plan-" +
                           std::to_string(::getpid()) + ".yaml";
  const CliRun r = run_cli(
      "plan --model gpt3-1.3b --cluster p4d.24xlarge --nodes 2 --gbs 512 --tokens 26e9 "
      "--top 3 --threads 2 --json --save " + save);
  ASSERT_EQ(r.status, 0) << r.err;
  for (const char* key : {"\"candidates\": [", "\"pareto\": [", "\"evaluated\":",
                          "\"search_time_s\":", "\"step_time_s\""})
    EXPECT_TRUE(has(r.out, key)) << key;
  // The saved plan reads back and holds a layout for all 16 GPUs.
  const auto plan = capplan::load_plan(save);
  ASSERT_TRUE(plan.ok()) << plan.diagnostics.to_string();
  EXPECT_EQ(plan.value->layout.gpus(), 16);
  EXPECT_EQ(plan.value->model_ref, "gpt3-1.3b");
  std::filesystem::remove(save);
}

// Expectation: `plan --framework any` ranks the candidates of every framework preset together; here
// megatron-core's wins over the default framework (megatron-lm). --save keeps the best one's
// framework and attention, so that the saved plan estimates to the same step time (it had kept
// the default framework).
TEST(Cli, PlanAnyFrameworkSavesTheBestCandidatesFramework) {
  const std::string save = std::filesystem::temp_directory_path().string() + "/capplan-cli-any-" +
                           std::to_string(::getpid()) + ".yaml";
  const CliRun r = run_cli("plan --model gpt3-13b --cluster p4d.24xlarge --nodes 4 --gbs 512 --tokens 26e9 "
                           "--framework any --top 3 --json --save " + save);
  ASSERT_EQ(r.status, 0) << r.err;
  const auto json = capplan::Json::parse(r.out);
  const auto& best = json["candidates"][0];
  const std::string fw = best["framework"].get<std::string>();
  EXPECT_NE(fw, "megatron-lm");  // megatron-core's overlap and FlashAttention beat it here
  const auto plan = capplan::load_plan(save);
  ASSERT_TRUE(plan.ok()) << plan.diagnostics.to_string();
  EXPECT_EQ(plan.value->scenario.training.framework.name, fw);
  const CliRun again = run_cli("estimate --plan " + save + " --json");
  ASSERT_EQ(again.status, 0) << again.err;
  const auto e = capplan::Json::parse(again.out);
  EXPECT_EQ(e["framework"].get<std::string>(), fw);
  EXPECT_EQ(e["training"]["attention"].get<std::string>(), best["training"]["attention"].get<std::string>());
  EXPECT_NEAR(e["step_time_s"].get<double>(), best["step_time_s"].get<double>(),
              1e-9 * best["step_time_s"].get<double>());
  std::filesystem::remove(save);
}

// Expectation: `plan --framework any` answers for every preset, not only those in the top rows:
// the text gives a "best of each framework" line per preset, with its days over the best's
// (1.00 for the winner) and FSDP's reason where it has no layout (960 GPUs do not divide a batch
// of 1536, and it has only dp); the JSON's best_per_framework holds the same, best first, the
// first being the top candidate.
TEST(Cli, PlanAnyFrameworkGivesEachPresetsBest) {
  const std::string args = "plan --model gpt3-175b --cluster p4d.24xlarge --nodes 120 --gbs 1536 --tokens 300e9 "
                           "--framework any --top 3";
  const CliRun text = run_cli(args);
  ASSERT_EQ(text.status, 0) << text.err;
  EXPECT_TRUE(has(text.out, "best of each framework (its own attention); x best: its days over the best's")) << text.out;
  for (const capplan::CatalogEntry& f : capplan::catalog_frameworks())
    EXPECT_TRUE(has(text.out, "\n  " + f.name + " ")) << f.name << "\n" << text.out;
  EXPECT_TRUE(has(text.out, "no layout: no split of 960 GPUs")) << text.out;
  EXPECT_TRUE(has(text.out, "   1.00  dp ")) << text.out;
  EXPECT_TRUE(has(text.out, "  megatron-core     flash     yes    120 ")) << text.out;  // its node count
  // megatron-lm's band overlaps the best one's: marked as in the candidates' table.
  EXPECT_TRUE(has(text.out, "z1 sel sp  ~best\n")) << text.out;

  const CliRun json = run_cli(args + " --json");
  ASSERT_EQ(json.status, 0) << json.err;
  const auto j = capplan::Json::parse(json.out);
  const auto& bests = j["best_per_framework"];
  ASSERT_EQ(bests.size(), capplan::catalog_frameworks().size());
  EXPECT_EQ(bests[0]["framework"].get<std::string>(), j["candidates"][0]["framework"].get<std::string>());
  EXPECT_DOUBLE_EQ(bests[0]["best"]["step_time_s"].get<double>(), j["candidates"][0]["step_time_s"].get<double>());
  bool fsdp = false;
  double last = 0;
  for (const auto& b : bests) {
    if (b["framework"].get<std::string>() == "fsdp") {
      fsdp = true;
      EXPECT_TRUE(b["best"].is_null());
      EXPECT_TRUE(b["vs_best"].is_null());
      EXPECT_NE(b["reason"].get<std::string>().find("dp dividing the global batch"), std::string::npos);
      continue;
    }
    const double days = b["best"]["days_to_train"].get<double>();
    EXPECT_EQ(b["best"]["as_good_as_best"].get<bool>(),
              b["best"]["step_time_s_p10"].get<double>() <= bests[0]["best"]["step_time_s_p90"].get<double>());
    EXPECT_GE(days, last) << b["framework"].get<std::string>();
    EXPECT_NEAR(b["vs_best"].get<double>(), days / bests[0]["best"]["days_to_train"].get<double>(), 1e-9);
    EXPECT_EQ(b["best"]["framework"].get<std::string>(), b["framework"].get<std::string>());
    last = days;
  }
  EXPECT_TRUE(fsdp);
  // Where no layout of any preset fits (GPT-3 175B on one node), each preset's best says why it
  // does not fit, under the "no layout fits" line.
  const CliRun none = run_cli("plan --model gpt3-175b --cluster p4d.24xlarge --nodes 1 --gbs 512 --framework any");
  ASSERT_EQ(none.status, 0) << none.err;
  EXPECT_TRUE(has(none.out, "no layout fits in memory")) << none.out;
  for (const capplan::CatalogEntry& f : capplan::catalog_frameworks()) {
    const size_t at = none.out.find("\n  " + f.name + " ");
    ASSERT_NE(at, std::string::npos) << f.name << "\n" << none.out;
    const std::string row = none.out.substr(at + 1, none.out.find('\n', at + 1) - at - 1);
    EXPECT_TRUE(has(row, " no ") && has(row, "(does not fit: needs ") && has(row, "GiB per GPU")) << row;
  }
  // Without `any` there is one framework, and no such section.
  const CliRun one = run_cli("plan --model gpt3-175b --cluster p4d.24xlarge --nodes 120 --gbs 1536 --tokens 300e9 --top 3 --json");
  ASSERT_EQ(one.status, 0) << one.err;
  EXPECT_FALSE(capplan::Json::parse(one.out).contains("best_per_framework"));
}

// Expectation: `capplan compare` puts plan files side by side with the deltas compare_plans gives
// (the same plan twice: every delta "same"; another cluster: its days delta as the library's), saves
// a comparison that `--file` reads back to the same JSON, and a bad comparison exits 2 naming the
// file, line and key path.
TEST(Cli, CompareTwoPlansSavesAndReopens) {
  const std::string dir = std::filesystem::temp_directory_path().string() + "/capplan-cli-compare-" +
                          std::to_string(::getpid());
  std::filesystem::create_directories(dir);
  ASSERT_EQ(run_cli("plan --model gpt3-1.3b --cluster p4d.24xlarge --nodes 2 --gbs 512 --tokens 26e9 --top 1 --save " + dir + "/a.yaml").status, 0);
  ASSERT_EQ(run_cli("plan --model gpt3-1.3b --cluster p5.48xlarge --nodes 1 --gbs 512 --tokens 26e9 --top 1 --save " + dir + "/b.yaml").status, 0);
  const CliRun same = run_cli("compare " + dir + "/a.yaml " + dir + "/a.yaml");
  ASSERT_EQ(same.status, 0) << same.err;
  EXPECT_TRUE(has(same.out, "days to train")) << same.out;
  EXPECT_TRUE(has(same.out, "(same)")) << same.out;
  const CliRun two = run_cli("compare " + dir + "/a.yaml " + dir + "/b.yaml --json --save " + dir + "/c.yaml");
  ASSERT_EQ(two.status, 0) << two.err;
  capplan::Comparison c;
  c.plans = {{"a", *capplan::load_plan(dir + "/a.yaml").value}, {"b", *capplan::load_plan(dir + "/b.yaml").value}};
  const capplan::ComparisonResult expected = capplan::compare_plans(c);
  const auto json = capplan::Json::parse(two.out);
  const double days = json["plans"][1]["figures"]["days"]["delta"].get<double>();
  for (const capplan::FigureDelta& f : expected.plans[1].figures)
    if (f.key == "days") {
      EXPECT_NEAR(days, f.delta, 1e-9 * std::abs(f.delta));
    }
  EXPECT_NE(days, 0.0);
  const CliRun back = run_cli("compare --file " + dir + "/c.yaml --json");
  ASSERT_EQ(back.status, 0) << back.err;
  EXPECT_EQ(capplan::Json::parse(back.out)["plans"][1]["figures"], json["plans"][1]["figures"]);
  EXPECT_TRUE(refused(run_cli("compare --file tests/data/bad/comparison_bad_layout.yaml"),
                      "tests/data/bad/comparison_bad_layout.yaml:17:28: error: plans[1].plan.layout.tp"));
  EXPECT_TRUE(refused(run_cli("compare " + dir + "/a.yaml"), "at least one other"));
  std::filesystem::remove_all(dir);
}

TEST(Cli, PlanOverANodeRangeWithPins) {
  const CliRun r = run_cli(
      "plan --model gpt3-13b --cluster p4de.24xlarge --nodes 2:4 --gbs 256 --fix tp=8,pp=1 "
      "--objective cost --top 2 --threads 2");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(has(r.out, "node counts searched: 2 to 4")) << r.out;
  EXPECT_TRUE(has(r.out, "best layout:")) << r.out;
  const CliRun bad = run_cli(
      "plan --model gpt3-13b --cluster p4de.24xlarge --nodes 4:2 --gbs 256 --fix tp=8,pp=one,recompte=full");
  EXPECT_EQ(bad.status, 2);
  EXPECT_TRUE(has(bad.err, "--nodes: expected a range A:B")) << bad.err;
  EXPECT_TRUE(has(bad.err, "pp: expected a whole number")) << bad.err;
  EXPECT_TRUE(has(bad.err, "unknown knob 'recompte' (did you mean 'recompute'?)")) << bad.err;
}

TEST(Cli, ProfileModelsClustersValidate) {
  CliRun r = run_cli("profile --model llama2-7b --tp 2 --json");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(has(r.out, "\"layers\": [")) << r.out;
  EXPECT_TRUE(has(r.out, "\"activation_bytes\"")) << r.out;
  EXPECT_TRUE(has(r.out, "\"tied_embeddings\": false")) << r.out;  // Llama 2 unties its output layer
  // GPT-2 ties them: the head's row shows its weights, and the table says they count once.
  r = run_cli("profile --model tests/data/good/gpt2-config.json");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(has(r.out, "gpt2-config: 124.44M parameters")) << r.out;
  EXPECT_TRUE(has(r.out, "(lm_head shares the embedding's weights: its parameters are counted once in the total;")) << r.out;
  EXPECT_TRUE(refused(run_cli("profile --model gpt3-175b --tp 5"),
                      "--tp: tp (5) must divide the model's heads (96)"));
  r = run_cli("models");
  ASSERT_EQ(r.status, 0);
  EXPECT_TRUE(has(r.out, "megatron-1t")) << r.out;
  // Each preset's shape in a line: latent attention and experts where it has them.
  EXPECT_TRUE(has(r.out, "kimi-k2-1t      1.03T parameters: 61 layers, hidden 7168, 64 heads of latent attention "
                         "(kv rank 512, heads of 192 / 128), 384 experts (top 8, 1 shared)")) << r.out;
  EXPECT_TRUE(has(r.out, "64 heads (8 kv) of 64, window 128, 128 experts (top 4)")) << r.out;
  r = run_cli("clusters --json");
  ASSERT_EQ(r.status, 0);
  EXPECT_TRUE(has(r.out, "\"name\": \"p5.48xlarge\"")) << r.out;
  r = run_cli("validate tests/data/calibration-runs.yaml --json");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(has(r.out, "\"mape_pct\"")) << r.out;
  EXPECT_TRUE(has(r.out, "\"frameworks\"")) << r.out;
  EXPECT_TRUE(has(r.out, "\"step_rms_pct\"")) << r.out;
  r = run_cli("validate tests/data/calibration-runs.yaml");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(has(r.out, "  framework megatron-lm-2021 (calibration): 16 runs, MAPE ")) << r.out;
  // The compiled files as they are: what was taken is listed under the table, the runs left out
  // are warned of on stderr, and the JSON carries each run's assumptions.
  r = run_cli("validate tests/data/published/calibration-runs-2.yaml");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(r.err.empty()) << r.err;
  EXPECT_TRUE(has(r.out, "all: 12 runs, MAPE ")) << r.out;
  EXPECT_TRUE(has(r.out, "taken for the runs in the published format:\n  megatron-readme2020-dgxa100-8b-8gpu: "
                         "framework megatron-lm-2020, cluster dgx-a100-40gb; recompute full\n")) << r.out;
  r = run_cli("validate tests/data/published/calibration-runs.yaml --json");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(has(r.err, "warning: runs[39]: run 'sagemaker-smp-175b-120xp4d' left out: model.layers is not given"))
      << r.err;
  EXPECT_TRUE(has(r.out, "\"assumptions\": \"framework megatron-lm-2021, cluster dgx-a100-80gb; recompute full; mbs "))
      << r.out;
  EXPECT_TRUE(refused(run_cli("validate tests/data/bad/validate-published-zero-degree.yaml"),
                      "validate-published-zero-degree.yaml:6:9: error: runs[0].parallelism.tp: must be > 0, found 0"));
}

TEST(Cli, FrameworksListWhatEachPresetCanRun) {
  // Expectation: `capplan frameworks` names every preset with what its implementation can run, as
  // its file says (fsdp: data parallelism only, ZeRO 0, 2 and 3); --json carries the same.
  CliRun r = run_cli("frameworks");
  ASSERT_EQ(r.status, 0) << r.err;
  for (const char* name :
       {"megatron-lm ", "megatron-lm-2020 ", "megatron-lm-2021 ", "megatron-core ", "deepspeed ", "fsdp ", "smp-v1 "})
    EXPECT_TRUE(has(r.out, name)) << name;
  EXPECT_TRUE(has(r.out, "tp no  pp no  zero 0,2,3  cp no  ep no  sp no  selective no  offload yes  attention flash"))
      << r.out;
  EXPECT_TRUE(has(r.out, "tp yes  pp 1f1b/gpipe  zero 0,1  cp no")) << r.out;  // smp-v1
  EXPECT_TRUE(has(r.out, "tp yes  pp 1f1b/interleaved  zero 0  cp no")) << r.out;  // megatron-lm-2021
  EXPECT_TRUE(has(r.out, "attention flash  flash kernel cudnn")) << r.out;   // megatron-core
  r = run_cli("frameworks --json");
  ASSERT_EQ(r.status, 0) << r.err;
  const auto j = capplan::Json::parse(r.out);
  ASSERT_EQ(j.size(), 7u);
  bool fsdp = false;
  for (const auto& f : j)
    if (f["name"] == "fsdp") {
      fsdp = true;
      EXPECT_FALSE(f["tensor_parallel"].get<bool>());
      EXPECT_EQ(f["zero_stages"], capplan::Json::parse("[0, 2, 3]"));
      EXPECT_TRUE(f["schedules"].empty());  // no pipeline, so no schedule
      EXPECT_EQ(f["flash_kernel"], "fa2");
    }
  EXPECT_TRUE(fsdp);
  EXPECT_TRUE(refused(run_cli("frameworks --tp 2"), "--tp"));
}

TEST(Cli, FrameworksNamePrintsAFileToStartOnesOwnFrom) {
  // Expectation: `capplan frameworks NAME` prints the preset's file as shipped (to copy and change
  // into a framework file, e.g. with ep_overlap: true); the copy, changed, is costed as a framework
  // of its own; a file's path prints its whole spec; a misspelt name is refused with the presets.
  CliRun r = run_cli("frameworks megatron-core");
  ASSERT_EQ(r.status, 0) << r.err;
  std::ifstream shipped(std::string(CAPPLAN_SOURCE_DIR) + "/configs/frameworks/megatron-core.yaml");
  std::stringstream text;
  text << shipped.rdbuf();
  EXPECT_EQ(r.out, text.str());
  const std::string own =
      (std::filesystem::temp_directory_path() / ("capplan-own-" + std::to_string(::getpid()) + ".yaml")).string();
  {
    std::ofstream f(own);
    std::string changed = r.out;
    const size_t at = changed.find("name: megatron-core");
    ASSERT_NE(at, std::string::npos);
    changed.replace(at, std::string("name: megatron-core").size(), "name: mcore-ep-overlap");
    f << changed << "ep_overlap: true\n";
  }
  const std::string moe = "estimate --model mixtral-8x7b --cluster p5.48xlarge --nodes 8 --dp 16 --tp 1 --pp 4 --ep 8 "
                          "--mbs 1 --gbs 256 --json --framework ";
  const CliRun preset = run_cli(moe + "megatron-core"), mine = run_cli(moe + own);
  ASSERT_EQ(preset.status, 0) << preset.err;
  ASSERT_EQ(mine.status, 0) << mine.err;
  const auto a = capplan::Json::parse(preset.out), b = capplan::Json::parse(mine.out);
  EXPECT_EQ(b["framework"], "mcore-ep-overlap");
  EXPECT_LT(b["breakdown_s"]["ep_comm"].get<double>(), a["breakdown_s"]["ep_comm"].get<double>());
  r = run_cli("frameworks " + own);
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(has(r.out, "name: mcore-ep-overlap\n")) << r.out;
  EXPECT_TRUE(has(r.out, "ep_overlap: true\n")) << r.out;
  EXPECT_TRUE(has(r.out, "zero3_backward_prefetch: pre\n")) << r.out;  // every key, defaults too
  r = run_cli("frameworks fsdp --json");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(capplan::Json::parse(r.out)["name"], "fsdp");
  EXPECT_TRUE(refused(run_cli("frameworks megatron-cor"), "did you mean 'megatron-core'?"));
  EXPECT_TRUE(refused(run_cli("frameworks megatron-core fsdp"), "unexpected argument 'fsdp'"));
  std::filesystem::remove(own);
}

TEST(Cli, HuggingFaceConfigAsModel) {
  const CliRun r = run_cli(
      "estimate --model tests/data/good/llama2-7b-config.json --cluster p4de.24xlarge --nodes 1 "
      "--dp 8 --tp 1 --pp 1 --mbs 1 --gbs 64 --zero 3 --json");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(has(r.out, "\"fits\"")) << r.out;
}

TEST(Cli, EstimateFromAPlanFile) {
  // The embedded default plan: dp 12, tp 4, pp 20 over 120 x p4d.24xlarge.
  CliRun r = run_cli("estimate --plan default --json");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(has(r.out, "\"dp\": 12")) << r.out;
  EXPECT_TRUE(has(r.out, "\"gpus\": 960")) << r.out;
  EXPECT_TRUE(refused(run_cli("estimate --plan default --tp 4"),
                      "--tp: cannot be combined with --plan"));
  r = run_cli("estimate --plan tests/data/bad/plan_bad_layout.yaml");
  EXPECT_TRUE(refused(r, "tests/data/bad/plan_bad_layout.yaml:10:9: error: layout.zero"));
  EXPECT_TRUE(has(r.err, "tests/data/bad/plan_bad_layout.yaml:11:3: error: layout.schedul")) << r.err;
}

TEST(Cli, UnknownPriceIsNullNotAGuess) {
  // DGX systems have no hourly price in the catalog: cost_usd is null in JSON, "unknown" in text.
  const std::string args =
      "estimate --model gpt3-1.3b --cluster dgx-a100-80gb --nodes 1 --dp 8 --tp 1 --pp 1 --mbs 1 "
      "--gbs 64 --tokens 1e9";
  CliRun r = run_cli(args + " --json");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(has(r.out, "\"cost_usd\": null")) << r.out;
  r = run_cli(args);
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(has(r.out, "unknown (cluster has no price)")) << r.out;
}

TEST(Cli, MoreGpusThanTheNodesHold) {
  EXPECT_TRUE(refused(run_cli("estimate --model gpt2-124m --cluster p4d.24xlarge --nodes 1 "
                              "--gpus 12 --dp 12 --tp 1 --pp 1 --mbs 1 --gbs 12"),
                      "--gpus: more GPUs (12) than 1 nodes of 8 hold"));
}

TEST(Cli, UserClusterFileWithOnlyRequiredKeys) {
  const CliRun r = run_cli(
      "estimate --model gpt2-124m --cluster tests/data/good/cluster_minimal.yaml --nodes 2 "
      "--dp 8 --tp 1 --pp 1 --mbs 4 --gbs 64 --json");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(has(r.out, "\"gpus\": 8")) << r.out;
}

TEST(Cli, ExportWritesEachFormatFromAPlan) {
  // Expectation: the default plan (dp 12, tp 4, pp 20, ZeRO-1) as SageMaker smp_options carries the
  // degrees and the optimizer-state sharding; a DeepSpeed config carries the batch arithmetic
  // gbs = mbs * grad_accum * dp (1536 = 1 * 128 * 12); an sbatch script is shell-valid.
  CliRun r = run_cli("export --plan default --format smp");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(has(r.out, "\"pipeline_parallel_degree\": 20")) << r.out;
  EXPECT_TRUE(has(r.out, "\"tensor_parallel_degree\": 4")) << r.out;
  EXPECT_TRUE(has(r.out, "\"shard_optimizer_state\": true")) << r.out;
  r = run_cli("export --plan default --format deepspeed");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(has(r.out, "\"train_batch_size\": 1536")) << r.out;
  EXPECT_TRUE(has(r.out, "\"gradient_accumulation_steps\": 128")) << r.out;
  const std::string script = std::filesystem::temp_directory_path().string() + "/capplan-cli-export-" +
                             std::to_string(::getpid()) + ".sbatch";
  r = run_cli("export --plan default --format sbatch --out '" + script + "'");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(has(slurp(script), "capplan-train"));
  EXPECT_EQ(std::system(("bash -n '" + script + "'").c_str()), 0);
  std::filesystem::remove(script);
}

TEST(Cli, ExportBadFormatOrLayoutExitsTwo) {
  EXPECT_TRUE(refused(run_cli("export --plan default --format nope"),
                      "--format: expected smp, megatron, deepspeed or sbatch, found 'nope'"));
  EXPECT_TRUE(refused(run_cli("export --plan default"), "--format"));
  EXPECT_TRUE(refused(run_cli("export --model gpt3-13b --cluster p4d.24xlarge --nodes 8 --dp 8 "
                              "--tp 3 --pp 1 --mbs 1 --gbs 512 --format megatron"),
                      "error:"));
}
