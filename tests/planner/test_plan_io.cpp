// plan.yaml: write then read gives the same plan; bad plans are diagnosed; writes are atomic.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <unistd.h>

#include "planner/catalog.h"
#include "planner/plan_io.h"
#include "planner/spec_io.h"

using namespace capplan;

namespace {

std::string temp_dir() {
  const auto dir = std::filesystem::temp_directory_path() /
                   ("capplan-test-plan-io-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  return dir.string();
}

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

Plan sample_plan() {
  Plan p;
  p.model_ref = "llama2-70b";
  p.cluster_ref = "my file.yaml";
  p.scenario.model = *load_model("llama2-70b").value;
  p.scenario.cluster = *load_cluster("p4de.24xlarge").value;
  p.scenario.cluster.efficiency.gemm = 0.55;
  p.scenario.cluster.efficiency.flash = 0.5;
  p.scenario.cluster.source = "a: source with \"quotes\" and # hash";
  p.scenario.nodes = 16;
  p.scenario.gpus = 120;
  p.scenario.training.gbs = 960;
  p.scenario.training.seq_len = 4096;
  p.scenario.training.tokens = 2e12;
  p.scenario.training.precision = Precision::Bf16;
  p.layout = {.dp = 15, .tp = 8, .pp = 1, .vp = 1, .mbs = 2, .zero = 3,
              .recompute = Recompute::Full, .offload = true, .sp = true, .order = "PDT",
              .schedule = Schedule::GPipe};
  p.created_by = "capplan test";
  return p;
}

}  // namespace

TEST(PlanIo, RoundTripsEveryField) {
  const Plan p = sample_plan();
  const auto back = parse_plan_yaml(plan_to_yaml(p), "mem.yaml");
  ASSERT_TRUE(back.ok()) << back.diagnostics.to_string() << plan_to_yaml(p);
  const Plan& q = *back.value;
  EXPECT_EQ(q.model_ref, p.model_ref);
  EXPECT_EQ(q.cluster_ref, p.cluster_ref);
  EXPECT_EQ(q.created_by, p.created_by);
  EXPECT_EQ(q.scenario.nodes, 16);
  EXPECT_EQ(q.scenario.gpus, 120);
  EXPECT_EQ(q.scenario.training.gbs, 960);
  EXPECT_EQ(q.scenario.training.seq_len, 4096);
  EXPECT_DOUBLE_EQ(q.scenario.training.tokens, 2e12);
  EXPECT_EQ(q.scenario.model.kv_heads, 8);
  EXPECT_EQ(q.scenario.model.ffn, Ffn::Swiglu);
  EXPECT_FALSE(q.scenario.model.tied_embeddings);
  EXPECT_EQ(q.scenario.cluster.gpu.name, "A100-SXM4-80GB");
  EXPECT_DOUBLE_EQ(q.scenario.cluster.price_per_node_hour_usd, 40.9657);
  EXPECT_DOUBLE_EQ(*q.scenario.cluster.efficiency.gemm, 0.55);
  EXPECT_DOUBLE_EQ(*q.scenario.cluster.efficiency.flash, 0.5);
  EXPECT_EQ(q.scenario.cluster.source, p.scenario.cluster.source);
  EXPECT_EQ(q.layout.dp, 15);
  EXPECT_EQ(q.layout.tp, 8);
  EXPECT_EQ(q.layout.mbs, 2);
  EXPECT_EQ(q.layout.zero, 3);
  EXPECT_EQ(q.layout.recompute, Recompute::Full);
  EXPECT_TRUE(q.layout.offload);
  EXPECT_TRUE(q.layout.sp);
  EXPECT_EQ(q.layout.order, "PDT");
  EXPECT_EQ(q.layout.schedule, Schedule::GPipe);
  // Writing the read plan gives the same text: nothing is lost or reformatted.
  EXPECT_EQ(plan_to_yaml(q), plan_to_yaml(p));
  EXPECT_FALSE(q.scenario.cluster.gpu.cpu_rank);
  // A plan of CPU ranks (capplan run's RUNDIR/plan.yaml) keeps the mark.
  Plan cpu = p;
  cpu.scenario.cluster.gpu.cpu_rank = true;
  const auto cpu_back = parse_plan_yaml(plan_to_yaml(cpu), "cpu.yaml");
  ASSERT_TRUE(cpu_back.ok()) << cpu_back.diagnostics.to_string();
  EXPECT_TRUE(cpu_back.value->scenario.cluster.gpu.cpu_rank);
  // An H100 plan keeps the figures of its FlashAttention kernels.
  Plan h100 = p;
  h100.scenario.cluster = *load_cluster("p5.48xlarge").value;
  const auto h100_back = parse_plan_yaml(plan_to_yaml(h100), "h100.yaml");
  ASSERT_TRUE(h100_back.ok()) << h100_back.diagnostics.to_string();
  const GpuSpec& g = h100_back.value->scenario.cluster.gpu;
  EXPECT_DOUBLE_EQ(g.flash_peak_fraction, 0.374);
  EXPECT_DOUBLE_EQ(g.fa3_peak_fraction, 0.655);
  EXPECT_DOUBLE_EQ(g.cudnn_attention_peak_fraction, 0.607);
}

TEST(PlanIo, SaveIsAtomicAndLeavesNoTemporaryFiles) {
  const std::string dir = temp_dir();
  const std::string path = dir + "/plan.yaml";
  ASSERT_EQ(save_plan(sample_plan(), path), "");
  const auto loaded = load_plan(path);
  ASSERT_TRUE(loaded.ok()) << loaded.diagnostics.to_string();
  EXPECT_EQ(loaded.value->layout.dp, 15);
  int files = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    (void)e;
    ++files;
  }
  EXPECT_EQ(files, 1);
  std::filesystem::remove_all(dir);
}

TEST(PlanIo, FailedWriteKeepsTheOldFile) {
  const std::string dir = temp_dir();
  const std::string path = dir + "/keep.yaml";
  ASSERT_EQ(write_file_atomic(path, "old\n"), "");
  // A target in a folder that does not exist cannot be written; the message names the path.
  const std::string error = write_file_atomic(dir + "/missing/keep.yaml", "new\n");
  EXPECT_NE(error.find("missing/keep.yaml"), std::string::npos) << error;
  EXPECT_EQ(slurp(path), "old\n");
  std::filesystem::remove_all(dir);
}

TEST(PlanIo, AFrameworkThatIsNoPresetTravelsInThePlan) {
  // Expectation: a preset is written by its name; an implementation from a framework file (or a
  // preset with a key changed) is written whole under training.framework, and the plan reads back
  // to the same spec, so a saved plan opens again wherever it goes. Every preset's spec also
  // reads back from framework_to_yaml as it was.
  for (const CatalogEntry& e : catalog_frameworks()) {
    const FrameworkSpec preset = *load_framework(e.name).value;
    const auto back = parse_framework_yaml(framework_to_yaml(preset), "f.yaml");
    ASSERT_TRUE(back.ok()) << e.name << ": " << back.diagnostics.to_string() << framework_to_yaml(preset);
    EXPECT_TRUE(*back.value == preset) << e.name << "\n" << framework_to_yaml(preset);
    // Every key a preset's file sets is written (the writer's list keeps up with the reader's).
    const std::string written = "\n" + framework_to_yaml(preset);
    std::istringstream lines(e.text);
    for (std::string line; std::getline(lines, line);) {
      const size_t colon = line.find(':');
      if (line.empty() || line[0] == '#' || line[0] == ' ' || colon == std::string::npos) continue;
      EXPECT_NE(written.find("\n" + line.substr(0, colon + 1) + " "), std::string::npos) << e.name << ": " << line;
    }
  }
  Plan p = sample_plan();
  p.scenario.training.framework = *load_framework("megatron-core").value;
  const std::string preset_text = plan_to_yaml(p);
  EXPECT_NE(preset_text.find("  framework: megatron-core\n"), std::string::npos) << preset_text;

  FrameworkSpec own = *load_framework("megatron-core").value;
  own.name = "megatron-core-ep-overlap";
  own.ep_overlap = true;
  own.zero_stages = 0b0011;
  own.schedules = 0b010;
  own.source = "a file: with \"quotes\"";
  p.scenario.training.framework = own;
  const std::string text = plan_to_yaml(p);
  EXPECT_NE(text.find("  framework:\n    name: megatron-core-ep-overlap\n"), std::string::npos) << text;
  const auto back = parse_plan_yaml(text, "own.yaml");
  ASSERT_TRUE(back.ok()) << back.diagnostics.to_string() << text;
  EXPECT_TRUE(back.value->scenario.training.framework == own) << text;
  EXPECT_EQ(plan_to_yaml(*back.value), text);
  // A preset's name with a key changed is not the preset: written whole too.
  FrameworkSpec changed = *load_framework("fsdp").value;
  changed.zero3_backward_prefetch = Zero3BackwardPrefetch::None;
  p.scenario.training.framework = changed;
  const auto changed_back = parse_plan_yaml(plan_to_yaml(p), "changed.yaml");
  ASSERT_TRUE(changed_back.ok()) << changed_back.diagnostics.to_string();
  EXPECT_TRUE(changed_back.value->scenario.training.framework == changed);

  // A mistake in the inline spec is named at its line under training.framework.
  std::string bad = text;
  const size_t at = bad.find("    ep_overlap: true");
  ASSERT_NE(at, std::string::npos);
  bad.replace(at, std::string("    ep_overlap: true").size(), "    ep_overlap: often");
  const auto refused = parse_plan_yaml(bad, "bad.yaml");
  ASSERT_FALSE(refused.ok());
  const Diagnostic& d = refused.diagnostics.items().at(0);
  EXPECT_EQ(d.path, "training.framework.ep_overlap") << d.to_string();
  EXPECT_EQ(d.line, 1 + int(std::count(bad.begin(), bad.begin() + long(at), '\n'))) << d.to_string();

  // A framework file named by a path is found beside the plan.
  const std::string dir = temp_dir() + "/beside";
  std::filesystem::create_directories(dir);
  {
    std::ofstream f(dir + "/my-stack.yaml");
    f << framework_to_yaml(own);
  }
  const auto by_path = parse_plan_yaml(
      "model: gpt2-124m\ncluster: p3.16xlarge\nnodes: 2\ntraining: {gbs: 64, framework: my-stack.yaml}\n"
      "layout: {dp: 16, tp: 1, pp: 1}\n",
      dir + "/plan.yaml");
  ASSERT_TRUE(by_path.ok()) << by_path.diagnostics.to_string();
  EXPECT_TRUE(by_path.value->scenario.training.framework == own);
  std::filesystem::remove_all(dir);
}

TEST(PlanIo, ReferencesAreLoadedFromPresets) {
  const auto p = parse_plan_yaml(
      "model: gpt2-124m\ncluster: p3.16xlarge\nnodes: 2\ntraining: {gbs: 64}\n"
      "layout: {dp: 16, tp: 1, pp: 1}\n",
      "ref.yaml");
  ASSERT_TRUE(p.ok()) << p.diagnostics.to_string();
  EXPECT_EQ(p.value->model_ref, "gpt2-124m");
  EXPECT_EQ(p.value->scenario.model.layers, 12);
  EXPECT_EQ(p.value->scenario.cluster.gpu.name, "V100-SXM2-16GB");
  EXPECT_EQ(p.value->layout.schedule, Schedule::OneFOneB);  // default
}

TEST(PlanIo, BadPlanNamesEveryProblem) {
  const std::string path = std::string(CAPPLAN_SOURCE_DIR) + "/tests/data/bad/plan_bad_layout.yaml";
  const auto p = load_plan(path);
  ASSERT_FALSE(p.ok());
  // Expectation: zero 5 out of 0..3 (line 10) and the unknown key schedul (line 11).
  ASSERT_EQ(p.diagnostics.items().size(), 2u) << p.diagnostics.to_string();
  EXPECT_EQ(p.diagnostics.items()[0].path, "layout.zero");
  EXPECT_EQ(p.diagnostics.items()[0].line, 10);
  EXPECT_EQ(p.diagnostics.items()[1].path, "layout.schedul");
  EXPECT_EQ(p.diagnostics.items()[1].line, 11);
  EXPECT_EQ(p.diagnostics.items()[1].hint, "did you mean 'schedule'?");
}

TEST(PlanIo, UnknownPresetInAPlanPointsAtThePlanLine) {
  const auto p = parse_plan_yaml("nodes: 1\nmodel: gpt3-176b\ncluster: p4d.24xlarge\n"
                                 "training: {gbs: 8}\nlayout: {dp: 8, tp: 1, pp: 1}\n",
                                 "p.yaml");
  ASSERT_FALSE(p.ok());
  const Diagnostic& d = p.diagnostics.items().at(0);
  EXPECT_EQ(d.file, "p.yaml");
  EXPECT_EQ(d.line, 2);
  EXPECT_EQ(d.path, "model");
  EXPECT_EQ(d.hint, "did you mean 'gpt3-175b'?");
}

TEST(PlanIo, PrecisionFollowsTheGpu) {
  // V100 has no bf16: without `precision` the plan trains in fp16; asking for bf16 is an error.
  const std::string base =
      "model: gpt2-124m\ncluster: p3.16xlarge\nnodes: 1\nlayout: {dp: 8, tp: 1, pp: 1}\n";
  const auto fp16 = parse_plan_yaml(base + "training: {gbs: 64}\n", "v.yaml");
  ASSERT_TRUE(fp16.ok()) << fp16.diagnostics.to_string();
  EXPECT_EQ(fp16.value->scenario.training.precision, Precision::Fp16);
  const auto bf16 = parse_plan_yaml(base + "training: {gbs: 64, precision: bf16}\n", "v.yaml");
  ASSERT_FALSE(bf16.ok());
  EXPECT_EQ(bf16.diagnostics.items().at(0).path, "training.precision");
  EXPECT_EQ(bf16.diagnostics.items().at(0).line, 5);
}
