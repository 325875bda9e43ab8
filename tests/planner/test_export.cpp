// Plan export: the JSON files parse (through yaml-cpp, JSON being YAML 1.2) and carry the plan's
// knobs under the target's names; the shell scripts pass `bash -n`.
#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

#include "planner/export.h"

namespace capplan {
namespace {

// GPT-3 175B on 120 x p4d.24xlarge (960 A100-40GB), the layout shape SageMaker published.
Plan gpt3_plan() {
  Plan p;
  p.model_ref = "my-models/gpt3.yaml";  // a user file, so the sbatch script embeds the model
  ModelSpec& m = p.scenario.model;
  m.name = "gpt3-175b";
  m.layers = 96;
  m.hidden = 12288;
  m.heads = 96;
  m.vocab = 50257;
  m.seq_len = 2048;
  ClusterSpec& c = p.scenario.cluster;
  c.name = "p4d.24xlarge";
  c.gpus_per_node = 8;
  p.scenario.nodes = 120;
  p.scenario.training.gbs = 1536;
  p.scenario.training.tokens = 300e9;
  Layout& l = p.layout;
  l.dp = 8;
  l.tp = 8;
  l.pp = 15;
  l.mbs = 1;
  l.zero = 1;
  l.recompute = Recompute::Full;
  l.sp = true;
  l.order = "DPT";
  l.schedule = Schedule::OneFOneB;
  return p;
}

int bash_syntax_check(const std::string& text, const std::string& name) {
  const std::string path = std::string(CAPPLAN_BINARY_DIR) + "/test_export_" + name;
  {
    std::ofstream out(path);
    out << text;
  }
  const std::string cmd = "bash -n '" + path + "' 2>&1";
  const int rc = std::system(cmd.c_str());
  std::remove(path.c_str());
  return rc;
}

TEST(Export, SmpOptionsParsesAndCarriesLayout) {
  const ExportedFile f = export_smp_options(gpt3_plan());
  YAML::Node root;
  ASSERT_NO_THROW(root = YAML::Load(f.text)) << f.text;
  const YAML::Node p = root["smdistributed"]["modelparallel"]["parameters"];
  ASSERT_TRUE(p.IsMap()) << f.text;
  EXPECT_EQ(p["pipeline_parallel_degree"].as<int>(), 15);
  EXPECT_EQ(p["tensor_parallel_degree"].as<int>(), 8);
  // Expectation: microbatches = gbs / (dp * mbs) = 1536 / 8 = 192.
  EXPECT_EQ(p["microbatches"].as<int>(), 192);
  // DPT is SageMaker's "cluster" placement.
  EXPECT_EQ(p["placement_strategy"].as<std::string>(), "cluster");
  EXPECT_TRUE(p["shard_optimizer_state"].as<bool>());
  EXPECT_TRUE(p["ddp"].as<bool>());
  EXPECT_FALSE(p["offload_activations"].as<bool>());
  EXPECT_EQ(p["pipeline"].as<std::string>(), "interleaved");  // SMP's name for 1F1B
  EXPECT_EQ(root["mpi"]["processes_per_host"].as<int>(), 8);
  EXPECT_EQ(root["capplan"]["instance_count"].as<int>(), 120);
  EXPECT_EQ(root["capplan"]["activation_checkpointing"].as<std::string>(), "full");
  // Recompute cannot be set in smp_options: the note says how to set it.
  bool noted = false;
  for (const auto& n : f.notes) noted |= n.find("set_activation_checkpointing") != std::string::npos;
  EXPECT_TRUE(noted);
}

TEST(Export, SmpSpreadGpipeAndZero3) {
  Plan p = gpt3_plan();
  p.layout.order = "TPD";
  p.layout.schedule = Schedule::GPipe;
  p.layout.zero = 3;
  p.layout.offload = true;
  const YAML::Node root = YAML::Load(export_smp_options(p).text);
  const YAML::Node params = root["smdistributed"]["modelparallel"]["parameters"];
  EXPECT_EQ(params["placement_strategy"].as<std::string>(), "spread");
  EXPECT_EQ(params["pipeline"].as<std::string>(), "simple");
  EXPECT_FALSE(params["shard_optimizer_state"].as<bool>());
  EXPECT_EQ(params["sharded_data_parallel_degree"].as<int>(), 8);
  EXPECT_TRUE(params["offload_activations"].as<bool>());
}

TEST(Export, DeepSpeedParsesWithConsistentBatch) {
  const ExportedFile f = export_deepspeed_config(gpt3_plan());
  YAML::Node root;
  ASSERT_NO_THROW(root = YAML::Load(f.text)) << f.text;
  const int gbs = root["train_batch_size"].as<int>();
  const int mbs = root["train_micro_batch_size_per_gpu"].as<int>();
  const int gas = root["gradient_accumulation_steps"].as<int>();
  // DeepSpeed's rule: train_batch_size = mbs * gas * dp = 1 * 192 * 8.
  EXPECT_EQ(gbs, mbs * gas * 8);
  EXPECT_EQ(root["zero_optimization"]["stage"].as<int>(), 1);
  EXPECT_TRUE(root["bf16"]["enabled"].as<bool>());
  EXPECT_FALSE(root["fp16"]["enabled"].as<bool>());
  EXPECT_TRUE(root["activation_checkpointing"]["partition_activations"].as<bool>());
}

TEST(Export, DeepSpeedNotesZero2WithPipeline) {
  Plan p = gpt3_plan();
  p.layout.zero = 2;
  const ExportedFile f = export_deepspeed_config(p);
  bool noted = false;
  for (const auto& n : f.notes) noted |= n.find("ZeRO stage 0 or 1") != std::string::npos;
  EXPECT_TRUE(noted);
}

TEST(Export, MegatronArgsAreShellValidAndComplete) {
  Plan p = gpt3_plan();
  p.layout.schedule = Schedule::Interleaved;
  p.layout.vp = 2;
  p.layout.pp = 12;
  p.layout.dp = 10;  // 10 * 8 * 12 = 960
  const ExportedFile f = export_megatron_args(p);
  EXPECT_EQ(bash_syntax_check(f.text, "megatron.sh"), 0) << f.text;
  for (const char* needle :
       {"--tensor-model-parallel-size 8", "--pipeline-model-parallel-size 12",
        "--num-layers 96", "--hidden-size 12288", "--micro-batch-size 1",
        "--global-batch-size 1536", "--sequence-parallel", "--recompute-granularity full",
        "--use-distributed-optimizer", "--bf16", "--use-tp-pp-dp-mapping",
        // Expectation: 96 layers / (pp 12 * vp 2) = 4 layers per virtual stage.
        "--num-layers-per-virtual-pipeline-stage 4",
        // Expectation: 300e9 tokens / 2048 = 146484375 samples.
        "--train-samples 146484375"}) {
    EXPECT_NE(f.text.find(needle), std::string::npos) << needle << "\n" << f.text;
  }
}

TEST(Export, SbatchIsShellValidAndRunsCapplanTrain) {
  const ExportedFile f = export_sbatch(gpt3_plan());
  EXPECT_EQ(bash_syntax_check(f.text, "train.sbatch"), 0) << f.text;
  EXPECT_EQ(f.text.rfind("#!/bin/bash", 0), 0u);
  for (const char* needle :
       {"#SBATCH --nodes=120", "#SBATCH --ntasks=960", "#SBATCH --ntasks-per-node=8",
        "srun --mpi=pmix capplan-train", "--dp 8 --tp 8 --pp 15", "--zero 1 --recompute full",
        "--sp", "--order DPT --schedule 1f1b", "--resume auto",
        // Expectation: ceil(300e9 / (1536 * 2048)) = 95368 steps.
        "--steps 95368",
        // A user file is embedded, so the script does not depend on the path on the cluster.
        "layers: 96", "CAPPLAN_MODEL_EOF"}) {
    EXPECT_NE(f.text.find(needle), std::string::npos) << needle << "\n" << f.text;
  }
}

TEST(Export, SbatchWithMpirunAndQuotedNames) {
  Plan p = gpt3_plan();
  SbatchOptions o;
  o.use_mpirun = true;
  o.job_name = "it's a job";
  o.partition = "gpu";
  o.time_limit_hours = 48;
  const ExportedFile f = export_sbatch(p, o);
  EXPECT_EQ(bash_syntax_check(f.text, "mpirun.sbatch"), 0) << f.text;
  EXPECT_NE(f.text.find("mpirun -np 960"), std::string::npos) << f.text;
  EXPECT_NE(f.text.find("#SBATCH --time=48:00:00"), std::string::npos) << f.text;
}

TEST(Export, TrainingStepsAndFormatNames) {
  Plan p = gpt3_plan();
  EXPECT_EQ(plan_training_steps(p), 95368);
  p.scenario.training.tokens = 0;
  EXPECT_EQ(plan_training_steps(p), 0);  // unknown, not guessed
  for (ExportFormat fmt : {ExportFormat::SmpOptions, ExportFormat::Megatron,
                           ExportFormat::DeepSpeed, ExportFormat::Sbatch}) {
    EXPECT_EQ(parse_export_format(to_string(fmt)), fmt);
    EXPECT_FALSE(export_plan(gpt3_plan(), fmt).text.empty());
  }
  EXPECT_FALSE(parse_export_format("yaml").has_value());
}

}  // namespace
}  // namespace capplan
