// Plan export: the JSON files parse (through yaml-cpp, JSON being YAML 1.2) and carry the plan's
// knobs under the target's names; the shell scripts pass `bash -n`.
#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <filesystem>
#include <string>
#include <vector>

#include <sys/wait.h>

#include "planner/export.h"
#include "planner/plan_io.h"
#include "planner/spec_io.h"
#include "support/test_files.h"

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
  // The head size is Megatron's default (hidden / heads): no --kv-channels.
  EXPECT_EQ(f.text.find("--kv-channels"), std::string::npos) << f.text;
}

TEST(Export, MegatronArgsCarryAHeadSizeSetApart) {
  // Expectation: 96 heads of 256 over 12288 (not 128) is Megatron-LM's --kv-channels 256.
  Plan p = gpt3_plan();
  p.scenario.model.head_dim = 256;
  const ExportedFile f = export_megatron_args(p);
  EXPECT_NE(f.text.find("--kv-channels 256"), std::string::npos) << f.text;
}

TEST(Export, MegatronArgsCarryLatentAttention) {
  // Expectation: DeepSeek-V3's latent attention is Megatron-Core's --multi-latent-attention with
  // its ranks and head sizes (--qk-head-dim is the part without rotary features) and the latents'
  // norms; no query latent writes no --q-lora-rank. The sbatch script, whose capplan-train has no
  // latent attention, says so.
  Plan p = gpt3_plan();
  p.scenario.model.mla = {1536, 512, 128, 64, 128};
  const ExportedFile f = export_megatron_args(p);
  for (const char* needle : {"--multi-latent-attention", "--q-lora-rank 1536", "--kv-lora-rank 512", "--qk-head-dim 128",
                             "--qk-pos-emb-head-dim 64", "--v-head-dim 128", "--qk-layernorm"})
    EXPECT_NE(f.text.find(needle), std::string::npos) << needle << "\n" << f.text;
  p.scenario.model.mla.q_lora_rank = 0;
  EXPECT_EQ(export_megatron_args(p).text.find("--q-lora-rank"), std::string::npos);
  const ExportedFile sb = export_sbatch(p);
  ASSERT_FALSE(sb.notes.empty());
  EXPECT_NE(sb.notes.back().find("latent attention"), std::string::npos) << sb.notes.back();
  EXPECT_EQ(export_megatron_args(gpt3_plan()).text.find("latent"), std::string::npos);
}

TEST(Export, MegatronArgsCarryMultiTokenPrediction) {
  // Expectation: one multi-token prediction module is Megatron-Core's --mtp-num-layers 1; a model
  // without one writes no such flag; the sbatch script, whose capplan-train trains the next-token
  // loss only, says so.
  Plan p = gpt3_plan();
  p.scenario.model.mtp_layers = 1;
  const ExportedFile f = export_megatron_args(p);
  EXPECT_NE(f.text.find("--mtp-num-layers 1"), std::string::npos) << f.text;
  EXPECT_EQ(export_megatron_args(gpt3_plan()).text.find("--mtp"), std::string::npos);
  const ExportedFile sb = export_sbatch(p);
  ASSERT_FALSE(sb.notes.empty());
  EXPECT_NE(sb.notes.back().find("multi-token prediction (mtp_layers)"), std::string::npos) << sb.notes.back();
}

TEST(Export, MegatronArgsPairTheAllToAllsWhereThePlanDoes) {
  // Expectation: a framework with ep_overlap over ep > 1 is Megatron-Core's
  // --overlap-moe-expert-parallel-comm; under full recompute, which Megatron-Core's guide advises against
  // (nor does the cost model pair anything there), the flag is left out with a note; without
  // ep_overlap, or with ep 1, no flag.
  Plan p;
  p.scenario.model = *load_model("mixtral-8x7b").value;
  p.scenario.cluster = *load_cluster("p5.48xlarge").value;
  p.scenario.nodes = 8;
  p.scenario.training.gbs = 256;
  p.scenario.training.framework = *load_framework("megatron-core").value;
  p.layout = {.dp = 16, .tp = 1, .pp = 4, .ep = 8, .vp = 1, .mbs = 1, .zero = 1,
              .recompute = Recompute::Selective, .order = "DPT"};
  const char* flag = "--overlap-moe-expert-parallel-comm";
  EXPECT_EQ(export_megatron_args(p).text.find(flag), std::string::npos);
  p.scenario.training.framework.ep_overlap = true;
  const ExportedFile on = export_megatron_args(p);
  EXPECT_NE(on.text.find(flag), std::string::npos) << on.text;
  EXPECT_EQ(bash_syntax_check(on.text, "megatron_args.sh"), 0) << on.text;
  p.layout.recompute = Recompute::Full;
  const ExportedFile full = export_megatron_args(p);
  EXPECT_EQ(full.text.find(flag), std::string::npos) << full.text;
  bool noted = false;
  for (const std::string& n : full.notes) noted |= n.find("left out under full recompute") != std::string::npos;
  EXPECT_TRUE(noted);
  p.layout.recompute = Recompute::None;
  p.layout.ep = 1;
  EXPECT_EQ(export_megatron_args(p).text.find(flag), std::string::npos);
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

// Expectation: exporting a plan to a stack other than the one it was costed for says so first
// (an FSDP plan as Megatron-LM arguments), and the stacks that cost it are named; a plan of the
// format's own stack, and the sbatch of capplan-train (which runs any plan), get no such note.
TEST(Export, AnotherStacksExportSaysWhichFrameworkCostedThePlan) {
  Plan p = gpt3_plan();
  p.scenario.training.framework.name = "fsdp";
  const ExportedFile megatron = export_plan(p, ExportFormat::Megatron);
  ASSERT_FALSE(megatron.notes.empty());
  EXPECT_EQ(megatron.notes.front(),
            "the plan was costed for framework fsdp; this is Megatron-LM's configuration of its layout, whose "
            "step time differs (estimate it with --framework megatron-lm or megatron-lm-2020 or megatron-lm-2021 or "
            "megatron-core)");
  const ExportedFile ds = export_plan(p, ExportFormat::DeepSpeed);
  ASSERT_FALSE(ds.notes.empty());
  EXPECT_NE(ds.notes.front().find("this is DeepSpeed's configuration"), std::string::npos) << ds.notes.front();
  auto names_framework = [](const ExportedFile& f) {
    for (const std::string& n : f.notes)
      if (n.find("the plan was costed for framework") != std::string::npos) return true;
    return false;
  };
  EXPECT_FALSE(names_framework(export_plan(p, ExportFormat::Sbatch)));
  p.scenario.training.framework.name = "megatron-core";
  EXPECT_FALSE(names_framework(export_plan(p, ExportFormat::Megatron)));
  p.scenario.training.framework.name = "smp-v1";
  EXPECT_FALSE(names_framework(export_plan(p, ExportFormat::SmpOptions)));
}

}  // namespace
}  // namespace capplan

namespace capplan {
namespace {

namespace fs = std::filesystem;

// Names that would run a command if any generated file let them out of their quotes or comments.
const std::vector<std::string> kHostileNames = {
    "org/gpt2\ntouch PWNED\n#", "x$(touch PWNED)y", "x`touch PWNED`y", "a'b\"c; touch PWNED #",
    "x\r\ntouch PWNED", "${IFS}$(touch${IFS}PWNED)", "\\\"; touch PWNED; echo \\\""};

int run_shell(const std::string& cmd) {
  const int rc = std::system(cmd.c_str());
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : 128;
}

// Files named PWNED anywhere under `dir`.
int pwned_files(const fs::path& dir) {
  int n = 0;
  for (const auto& e : fs::recursive_directory_iterator(dir))
    if (e.path().filename() == "PWNED") ++n;
  return n;
}

// A sandbox folder with `srun`, `mpirun` and `torchrun` stubs that only record their arguments.
fs::path sandbox(const std::string& name) {
  const fs::path d = fs::path(CAPPLAN_BINARY_DIR) / "test_export_sandbox" / name;
  fs::remove_all(d);
  fs::create_directories(d / "bin");
  for (const char* stub : {"srun", "mpirun", "torchrun"}) {
    std::ofstream s(d / "bin" / stub);
    s << "#!/bin/sh\nprintf '%s\\n' \"$(basename \"$0\")\" \"$@\" >> \"$STUB_LOG\"\n";
    s.close();
    fs::permissions(d / "bin" / stub, fs::perms::owner_all);
  }
  return d;
}

// Expectation: every format exported with a hostile model, cluster, job, partition, data and
// run-folder name passes `bash -n` (scripts) or parses (JSON); running the scripts in a sandbox
// with srun/mpirun/torchrun stubbed runs the stub and nothing else (no file named PWNED), and the
// hostile text reaches the stub as one intact argument.
TEST(ExportHostileNames, EveryFormatQuotesEveryName) {
  int case_no = 0;
  for (const std::string& name : kHostileNames) {
    SCOPED_TRACE("name: " + name);
    Plan p = gpt3_plan();
    p.scenario.model.name = name;
    p.scenario.cluster.name = name;
    p.model_ref = name;
    p.cluster_ref = name;
    for (ExportFormat fmt : {ExportFormat::SmpOptions, ExportFormat::DeepSpeed}) {
      const ExportedFile f = export_plan(p, fmt);
      YAML::Node root;
      EXPECT_NO_THROW(root = YAML::Load(f.text)) << f.text;
      if (fmt == ExportFormat::SmpOptions) {
        EXPECT_EQ(root["capplan"]["instance_type"].as<std::string>(), name);
      }
    }
    const fs::path box = sandbox("case" + std::to_string(case_no++));
    const std::string env = "cd '" + box.string() + "' && env -i PATH='" + (box / "bin").string() +
                            ":/usr/bin:/bin' STUB_LOG='" + (box / "stub.log").string() +
                            "' SLURM_JOB_ID=42 ";
    // Megatron: source the arguments and start the (stubbed) launcher the header names.
    const ExportedFile meg = export_megatron_args(p);
    EXPECT_EQ(bash_syntax_check(meg.text, "hostile_megatron.sh"), 0) << meg.text;
    { std::ofstream(box / "megatron_args.sh") << meg.text; }
    EXPECT_EQ(run_shell(env + "bash -c 'source ./megatron_args.sh && torchrun pretrain_gpt.py "
                              "\"${MEGATRON_ARGS[@]}\"'"),
              0)
        << meg.text;
    // sbatch, with srun and with mpirun, every option a hostile string too.
    for (bool mpirun : {false, true}) {
      SbatchOptions o;
      o.use_mpirun = mpirun;
      o.job_name = name;
      o.partition = name;
      o.data = name;
      o.run_dir = "runs/" + name + "/$SLURM_JOB_ID";
      p.model_ref = mpirun ? "gpt3-175b" : name;  // a preset: --model is the (quoted) name
      const ExportedFile sb = export_sbatch(p, o);
      EXPECT_EQ(bash_syntax_check(sb.text, "hostile.sbatch"), 0) << sb.text;
      { std::ofstream(box / "train.sbatch") << sb.text; }
      fs::remove(box / "stub.log");
      EXPECT_EQ(run_shell(env + "bash ./train.sbatch"), 0) << sb.text;
      const std::string log = capplan::test::read_text(box / "stub.log");
      EXPECT_EQ(log.rfind(mpirun ? "mpirun\n" : "srun\n", 0), 0u) << log;
      EXPECT_NE(log.find("\n--data\n" + name + "\n"), std::string::npos) << log;
      // The run folder was created under its literal name, with $SLURM_JOB_ID expanded (a
      // `${NAME}` in the folder is expanded too: the folder may name the job's variables).
      if (name.find('$') == std::string::npos) {
        EXPECT_TRUE(fs::is_directory(box / "runs" / name / "42")) << sb.text;
      }
    }
    EXPECT_EQ(pwned_files(box), 0) << "a generated script ran an injected command";
  }
}

// Expectation: a saved plan with hostile names (no control characters: those are refused at
// load) reads back with every name intact; with a newline the comment header stays one line.
TEST(ExportHostileNames, SavedPlansLoadBack) {
  for (const std::string& name : kHostileNames) {
    SCOPED_TRACE("name: " + name);
    Plan p = gpt3_plan();
    p.scenario.cluster = *load_cluster("p4d.24xlarge").value;
    p.scenario.model.name = name;
    p.scenario.cluster.name = name + " cluster";
    p.scenario.cluster.gpu.name = "gpu " + name;
    p.created_by = name;
    const std::string yaml = plan_to_yaml(p);
    const Loaded<Plan> back = parse_plan_yaml(yaml, "hostile.yaml");
    bool control = false;
    for (unsigned char c : name) control = control || c < 0x20;
    if (control) {
      ASSERT_FALSE(back.ok()) << yaml;
      EXPECT_NE(back.diagnostics.to_string().find("model.name: must not contain control characters"),
                std::string::npos)
          << back.diagnostics.to_string();
      EXPECT_EQ(back.diagnostics.to_string().find("malformed YAML"), std::string::npos)
          << back.diagnostics.to_string();
      continue;
    }
    ASSERT_TRUE(back.ok()) << back.diagnostics.to_string() << "\n" << yaml;
    EXPECT_EQ(back.value->scenario.model.name, name);
    EXPECT_EQ(back.value->scenario.cluster.name, name + " cluster");
    EXPECT_EQ(back.value->scenario.cluster.gpu.name, "gpu " + name);
    EXPECT_EQ(back.value->created_by, name);
  }
}

}  // namespace
}  // namespace capplan
