// Plan export to SageMaker model parallel, Megatron-LM, DeepSpeed and Slurm. Each writer maps the
// plan's knobs onto the target's documented names and lists in `notes` what the target cannot
// express (e.g. virtual pipeline stages in SMP v1), so nothing is dropped silently.
#include "planner/json.h"
#include "planner/json_writer.h"
#include "planner/export.h"
#include "planner/rank_mapping.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <sstream>

#include "planner/catalog.h"
#include "planner/cost_model.h"
#include "planner/shell_quote.h"
#include "planner/spec_io.h"
#include "yaml_reader.h"

namespace capplan {
namespace {

// A value of an `#SBATCH --opt=VALUE` line: sbatch reads these lines itself, so no character
// may end the line or the word; anything but [A-Za-z0-9._-] becomes '_'.
std::string sbatch_word(const std::string& s) {
  std::string out;
  for (unsigned char c : s)
    out += (std::isalnum(c) || c == '.' || c == '_' || c == '-') ? char(c) : '_';
  return out.empty() ? std::string("capplan") : out;
}

// Double-quoted for bash with `$NAME` and `${NAME}` still expanded (the run folder may name
// $SLURM_JOB_ID) and every other `$`, backtick, quote and backslash escaped, so no command
// substitution can run.
std::string shell_quote_expanding(const std::string& s) {
  auto name_char = [](char c, bool first) {
    return c == '_' || (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') ||
           (!first && c >= '0' && c <= '9');
  };
  std::string out = "\"";
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    if (c == '$') {
      size_t j = i + 1;
      const bool braced = j < s.size() && s[j] == '{';
      if (braced) ++j;
      size_t k = j;
      while (k < s.size() && name_char(s[k], k == j)) ++k;
      const bool ok = k > j && (!braced || (k < s.size() && s[k] == '}'));
      if (ok) {
        const size_t end = braced ? k + 1 : k;
        out.append(s, i, end - i);
        i = end - 1;
        continue;
      }
      out += "\\$";
    } else if (c == '"' || c == '\\' || c == '`') {
      out += '\\';
      out += c;
    } else {
      out += c;
    }
  }
  return out + "\"";
}

// One line: "gpt3-175b on 120 x p4d.24xlarge: dp=8 tp=8 pp=15 ...", for file headers.
std::string plan_summary(const Plan& plan) {
  const Scenario& s = plan.scenario;
  const Layout& l = plan.layout;
  std::ostringstream o;
  o << (s.model.name.empty() ? "model" : s.model.name) << " on " << s.nodes << " x "
    << (s.cluster.name.empty() ? "cluster" : s.cluster.name) << ": dp=" << l.dp << " tp=" << l.tp
    << " pp=" << l.pp << (l.cp > 1 ? " cp=" + std::to_string(l.cp) : std::string())
    << (l.ep > 1 ? " ep=" + std::to_string(l.ep) : std::string()) << " vp=" << l.vp << " mbs=" << l.mbs << " gbs=" << s.training.gbs
    << " zero=" << l.zero << " recompute=" << to_string(l.recompute)
    << " offload=" << (l.offload ? "on" : "off") << " sp=" << (l.sp ? "on" : "off")
    << " order=" << l.order << " schedule=" << to_string(l.schedule);
  return o.str();
}

int64_t microbatches(const Plan& plan) {
  return plan.layout.num_microbatches(plan.scenario.training.gbs);
}

}  // namespace

const char* to_string(ExportFormat v) {
  switch (v) {
    case ExportFormat::SmpOptions: return "smp";
    case ExportFormat::Megatron: return "megatron";
    case ExportFormat::DeepSpeed: return "deepspeed";
    case ExportFormat::Sbatch: return "sbatch";
  }
  return "?";
}

std::optional<ExportFormat> parse_export_format(const std::string& s) {
  for (ExportFormat f : {ExportFormat::SmpOptions, ExportFormat::Megatron, ExportFormat::DeepSpeed,
                         ExportFormat::Sbatch}) {
    if (s == to_string(f)) return f;
  }
  return std::nullopt;
}

int64_t plan_training_steps(const Plan& plan) {
  const int64_t gbs = plan.scenario.training.gbs;
  const int seq = plan.scenario.seq_len();
  double tokens = plan.scenario.training.tokens;
  if (tokens <= 0 || gbs <= 0 || seq <= 0) return 0;
  return static_cast<int64_t>(std::ceil(tokens / (double(gbs) * seq)));
}

ExportedFile export_smp_options(const Plan& plan) {
  // Names from the SageMaker model parallelism library v1 "Configuration parameters" page.
  const Layout& l = plan.layout;
  const Scenario& s = plan.scenario;
  ExportedFile f;
  f.file_name = "smp_options.json";
  std::string placement = l.order;
  if (l.order == "DPT") placement = "cluster";
  if (l.order == "TPD") placement = "spread";
  // SMP v1: "simple" is GPipe; "interleaved" alternates forward and backward passes (1F1B).
  const char* pipeline = l.schedule == Schedule::GPipe ? "simple" : "interleaved";
  if (l.schedule == Schedule::Interleaved && l.vp > 1)
    f.notes.push_back("SMP v1 has no virtual pipeline stages: vp=" + std::to_string(l.vp) +
                      " is exported as plain 1F1B (\"interleaved\")");
  if (l.zero == 2)
    f.notes.push_back("zero=2 (gradient sharding) is exported as shard_optimizer_state only");
  if (l.sp)
    f.notes.push_back("sequence parallelism: SMP v1 has no switch; tensor parallelism covers it");
  if (l.recompute != Recompute::None)
    f.notes.push_back(std::string("activation checkpointing (") + to_string(l.recompute) +
                      ") is set in the training script: smp.set_activation_checkpointing(module) "
                      "on each transformer layer");
  if (l.ep > 1 || l.cp > 1 || s.model.moe.enabled())
    f.notes.push_back("SMP v1 has no expert or context parallelism: ep=" + std::to_string(l.ep) +
                      " and cp=" + std::to_string(l.cp) + " are not exported");
  Json parameters = {{"pipeline_parallel_degree", l.pp},
                     {"tensor_parallel_degree", l.tp},
                     {"microbatches", microbatches(plan)},
                     {"placement_strategy", placement},
                     {"pipeline", pipeline},
                     {"optimize", "speed"},
                     {"auto_partition", true},
                     {"default_partition", 0},
                     {"ddp", true},
                     {"shard_optimizer_state", l.zero >= 1 && l.zero < 3}};
  if (l.zero == 3) parameters["sharded_data_parallel_degree"] = l.dp;
  parameters["offload_activations"] = l.offload;
  if (l.offload) parameters["activation_loading_horizon"] = 4;
  parameters["bf16"] = s.training.precision == Precision::Bf16;
  parameters["fp16"] = s.training.precision == Precision::Fp16;
  const Json j = {
      {"smdistributed", {{"modelparallel", {{"enabled", true}, {"parameters", std::move(parameters)}}}}},
      {"mpi", {{"enabled", true}, {"processes_per_host", s.cluster.gpus_per_node}}},
      {"capplan",
       {{"instance_type", s.cluster.name},
        {"instance_count", s.nodes},
        {"data_parallel_degree", l.dp},
        {"micro_batch_size", l.mbs},
        {"global_batch_size", s.training.gbs},
        {"activation_checkpointing", to_string(l.recompute)},
        {"summary", plan_summary(plan)}}}};
  f.text = json_dump(j) + "\n";
  return f;
}

namespace {

// The order's letters without the axes of one position (C with cp = 1, E with ep = 1).
std::string placed_letters(const std::string& order, const Layout& l) {
  std::string r;
  for (char ch : order)
    if (!((ch == 'C' && l.cp == 1) || (ch == 'E' && l.ep == 1))) r.push_back(ch);
  return r;
}

// Megatron-Core's mixture-of-experts and context-parallel arguments (megatron/training/
// arguments.py: --num-experts, --moe-router-topk, --moe-ffn-hidden-size, --moe-layer-freq,
// --moe-shared-expert-intermediate-size, --moe-expert-capacity-factor,
// --expert-model-parallel-size, --overlap-moe-expert-parallel-comm, --context-parallel-size).
template <class Add>
void megatron_moe_cp_args(const Plan& plan, Add&& add, std::vector<std::string>& notes) {
  const Layout& l = plan.layout;
  const ModelSpec& m = plan.scenario.model;
  if (m.moe.enabled()) {
    const MoeSpec& e = m.moe;
    add("--num-experts", std::to_string(e.experts));
    add("--moe-router-topk", std::to_string(e.top_k_or_default()));
    add("--moe-ffn-hidden-size", std::to_string(m.expert_ffn_hidden_or_default()));
    if (e.shared_experts > 0)
      add("--moe-shared-expert-intermediate-size",
          std::to_string(e.shared_experts * m.expert_ffn_hidden_or_default()));
    if (e.first_dense_layers > 0 || e.moe_layer_freq > 1) {
      // A per-layer pattern: 1 = MoE, 0 = dense.
      std::string pattern = "[";
      for (int i = 0; i < m.layers; ++i) pattern += std::string(i ? "," : "") + (e.is_moe_layer(i) ? "1" : "0");
      add("--moe-layer-freq", pattern + "]");
    }
    if (e.capacity_factor > 0) {
      add("--moe-expert-capacity-factor", shortest_number(e.capacity_factor));
      add("--moe-pad-expert-input-to-capacity");
    }
    add("--moe-token-dispatcher-type", "alltoall");
    add("--moe-grouped-gemm");
  }
  if (l.ep > 1) add("--expert-model-parallel-size", std::to_string(l.ep));
  // Paired passes (FrameworkSpec::ep_overlap): Megatron-Core's combined 1F1B. Its guide advises
  // against it under full recompute, where the cost model pairs nothing either (the backward
  // repeats the forward's all-to-alls before its own).
  if (l.ep > 1 && plan.scenario.training.framework.ep_overlap) {
    if (l.recompute == Recompute::Full)
      notes.push_back("ep_overlap: --overlap-moe-expert-parallel-comm left out under full recompute (Megatron-Core's "
                      "guide advises against the two together; the plan is costed without paired all-to-alls)");
    else
      add("--overlap-moe-expert-parallel-comm");
  }
  if (l.cp > 1) {
    add("--context-parallel-size", std::to_string(l.cp));
    add("--cp-comm-type", "p2p");
    if (plan.scenario.attention() != Attention::Flash)
      notes.push_back("context parallelism in Megatron-Core runs Transformer Engine's fused attention");
  }
}

}  // namespace

ExportedFile export_megatron_args(const Plan& plan) {
  // Flag names from Megatron-LM's megatron/training/arguments.py.
  const Layout& l = plan.layout;
  const Scenario& s = plan.scenario;
  const ModelSpec& m = s.model;
  ExportedFile f;
  f.file_name = "megatron_args.sh";
  std::vector<std::string> a;
  auto add = [&](const std::string& flag, const std::string& value = {}) {
    a.push_back(value.empty() ? flag : flag + " " + shell_quote(value));
  };
  add("--num-layers", std::to_string(m.layers));
  add("--hidden-size", std::to_string(m.hidden));
  add("--num-attention-heads", std::to_string(m.heads));
  add("--ffn-hidden-size", std::to_string(m.ffn_hidden_or_default()));
  // Megatron-LM's --kv-channels is the head size (default hidden / heads).
  if (m.head_dim > 0 && m.head_dim * m.heads != m.hidden) add("--kv-channels", std::to_string(m.head_dim));
  if (m.mla.enabled()) {
    // Megatron-Core's MLASelfAttention; --qk-layernorm normalises its latents (DeepSeek-V2 Eq. 9-12
    // as DeepSeek's models train it); --qk-head-dim is the heads' part without rotary features.
    add("--multi-latent-attention");
    if (m.mla.q_lora_rank > 0) add("--q-lora-rank", std::to_string(m.mla.q_lora_rank));
    add("--kv-lora-rank", std::to_string(m.mla.kv_lora_rank));
    add("--qk-head-dim", std::to_string(m.mla.qk_nope_head_dim));
    add("--qk-pos-emb-head-dim", std::to_string(m.mla.qk_rope_head_dim));
    add("--v-head-dim", std::to_string(m.mla.v_head_dim));
    add("--qk-layernorm");
  }
  // Megatron-Core's MultiTokenPredictionBlock on the last pipeline stage (its loss weighted by
  // --mtp-loss-scaling-factor, default 0.1; DeepSeek-V3 Sec 4.2 used 0.3, then 0.1).
  if (m.mtp_layers > 0) add("--mtp-num-layers", std::to_string(m.mtp_layers));
  if (m.kv_heads > 0 && m.kv_heads != m.heads) {
    add("--group-query-attention");
    add("--num-query-groups", std::to_string(m.kv_heads));
  }
  if (m.ffn == Ffn::Swiglu) add("--swiglu");
  if (m.norm == Norm::RmsNorm) add("--normalization", "RMSNorm");
  if (m.position == PositionEmbedding::Rope) add("--position-embedding-type", "rope");
  if (!m.tied_embeddings) add("--untie-embeddings-and-output-weights");
  add("--seq-length", std::to_string(s.seq_len()));
  add("--max-position-embeddings", std::to_string(std::max(s.seq_len(), m.seq_len)));
  add("--micro-batch-size", std::to_string(l.mbs));
  add("--global-batch-size", std::to_string(s.training.gbs));
  if (s.training.tokens > 0 && s.seq_len() > 0)
    add("--train-samples", shortest_number(std::ceil(s.training.tokens / s.seq_len())));
  add("--tensor-model-parallel-size", std::to_string(l.tp));
  add("--pipeline-model-parallel-size", std::to_string(l.pp));
  if (l.schedule == Schedule::Interleaved && l.vp > 1 && l.pp * l.vp > 0)
    add("--num-layers-per-virtual-pipeline-stage", std::to_string(m.layers / (l.pp * l.vp)));
  megatron_moe_cp_args(plan, add, f.notes);
  if (l.sp && l.tp > 1) add("--sequence-parallel");
  if (l.recompute == Recompute::Full) {
    add("--recompute-granularity", "full");
    add("--recompute-method", "uniform");
    add("--recompute-num-layers", "1");
  } else if (l.recompute == Recompute::Selective) {
    add("--recompute-granularity", "selective");
  }
  if (l.zero >= 1) add("--use-distributed-optimizer");
  if (s.training.precision == Precision::Bf16) add("--bf16");
  if (s.training.precision == Precision::Fp16) add("--fp16");
  if (s.training.precision == Precision::Fp8) {
    // Transformer Engine fp8: E4M3 forward, E5M2 gradients; bf16 elsewhere.
    add("--bf16");
    add("--transformer-impl", "transformer_engine");
    add("--fp8-format", "hybrid");
  }
  const Attention attn = s.attention();
  if (attn == Attention::Flash) add("--use-flash-attn");
  if (attn == Attention::Eager) f.notes.push_back("attention eager is Hugging Face's kernel; Megatron-LM uses its fused softmax");
  if (s.training.framework.dp_overlap) add("--overlap-grad-reduce");
  if (s.training.framework.param_gather_overlap && l.zero >= 1) add("--overlap-param-gather");
  if (s.training.offload_optimizer || s.training.offload_params)
    f.notes.push_back("offload_params / offload_optimizer have no Megatron-LM flag in this export (DeepSpeed does)");
  // Megatron's default rank order varies TP fastest, then DP, then PP ("PDT" here);
  // --use-tp-pp-dp-mapping varies TP, then PP, then DP ("DPT").
  // With cp and ep: Megatron-Core's tp-cp-ep-dp-pp ("PDECT" here) or tp-cp-ep-pp-dp ("DPECT");
  // letters of one position do not matter.
  const std::string placed = placed_letters(full_order(l.order), l);
  if (placed == placed_letters("DPECT", l) && l.order != "PDT" && placed != placed_letters("PDECT", l))
    add("--use-tp-pp-dp-mapping");
  else if (placed != placed_letters("PDECT", l))
    f.notes.push_back("order " + l.order + " has no Megatron-LM equivalent; Megatron uses PDT "
                      "(default) or DPT (--use-tp-pp-dp-mapping)" +
                      std::string(l.ep > 1 || l.cp > 1 ? ", with C and E as PDECT or DPECT" : ""));
  if (l.schedule == Schedule::GPipe && l.pp > 1)
    f.notes.push_back("Megatron-LM always runs 1F1B with pp > 1; the GPipe schedule is not exported");
  if (l.zero >= 2)
    f.notes.push_back("zero=" + std::to_string(l.zero) +
                      " exported as --use-distributed-optimizer (optimizer state and main "
                      "gradients sharded over dp)");
  if (l.offload) f.notes.push_back("activation offload has no Megatron-LM flag in this export");
  f.notes.push_back("vocab " + std::to_string(m.vocab) + " comes from the tokenizer arguments");

  std::ostringstream o;
  o << "#!/usr/bin/env bash\n"
    << "# Megatron-LM arguments for " << detail::comment_text(plan_summary(plan)) << "\n"
    << "# Launch: torchrun --nnodes " << s.nodes << " --nproc-per-node " << s.cluster.gpus_per_node
    << " pretrain_gpt.py \"${MEGATRON_ARGS[@]}\" <data and tokenizer arguments>\n"
    << "MEGATRON_ARGS=(\n";
  for (const std::string& line : a) o << "  " << line << "\n";
  o << ")\n";
  f.text = o.str();
  return f;
}

namespace {

// DeepSpeed-MoE sets its experts in the model code, not in the config JSON
// (deepspeed.moe.layer.MoE(hidden_size, expert, num_experts, ep_size, k, capacity_factor,
// drop_tokens, use_residual)); ring context parallelism has no DeepSpeed equivalent.
void deepspeed_moe_cp_notes(const Plan& plan, std::vector<std::string>& notes) {
  const Layout& l = plan.layout;
  const ModelSpec& m = plan.scenario.model;
  if (m.moe.enabled()) {
    const MoeSpec& e = m.moe;
    std::string call = "deepspeed.moe.layer.MoE(hidden_size=" + std::to_string(m.hidden) +
                       ", expert=<MLP of width " + std::to_string(m.expert_ffn_hidden_or_default()) +
                       ">, num_experts=" + std::to_string(e.experts) + ", ep_size=" +
                       std::to_string(l.ep) + ", k=" + std::to_string(e.top_k_or_default());
    if (e.capacity_factor > 0) call += ", capacity_factor=" + shortest_number(e.capacity_factor);
    else call += ", drop_tokens=False";
    if (e.shared_experts > 0) call += ", use_residual=True";
    call += ")";
    notes.push_back("experts are set in the model code: " + call +
                    (e.shared_experts > 1 ? "; use_residual is one dense MLP beside the experts, " +
                                                std::to_string(e.shared_experts) + " shared experts wide"
                                          : std::string()));
  }
  if (l.cp > 1)
    notes.push_back("cp=" + std::to_string(l.cp) +
                    ": DeepSpeed has no ring context parallelism; DeepSpeed-Ulysses splits the "
                    "sequence with all-to-alls over the heads instead (not exported)");
}

}  // namespace

ExportedFile export_deepspeed_config(const Plan& plan) {
  // Keys from DeepSpeed's configuration JSON reference. train_batch_size =
  // train_micro_batch_size_per_gpu * gradient_accumulation_steps * data-parallel size.
  const Layout& l = plan.layout;
  const Scenario& s = plan.scenario;
  ExportedFile f;
  f.file_name = "deepspeed_config.json";
  if (l.tp > 1 || l.pp > 1)
    f.notes.push_back("tp=" + std::to_string(l.tp) + " and pp=" + std::to_string(l.pp) +
                      " are set in Megatron-DeepSpeed's arguments (see the Megatron export), not here");
  if (l.pp > 1 && l.zero >= 2)
    f.notes.push_back("DeepSpeed's pipeline engine supports ZeRO stage 0 or 1 only; zero=" +
                      std::to_string(l.zero) + " needs pp=1");
  Json zero = {{"stage", l.zero}};
  // ZeRO-Offload / ZeRO-Infinity (DeepSpeed docs: offload_optimizer, offload_param; the
  // parameters only under stage 3).
  if (optimizer_steps_on_host(s.training, l))
    zero["offload_optimizer"] = {{"device", "cpu"}, {"pin_memory", true}};
  if (s.training.offload_params && l.zero == 3) zero["offload_param"] = {{"device", "cpu"}, {"pin_memory", true}};
  deepspeed_moe_cp_notes(plan, f.notes);
  zero["overlap_comm"] = true;
  zero["contiguous_gradients"] = true;
  zero["reduce_bucket_size"] = 500000000;
  const Json j = {{"train_batch_size", s.training.gbs},
                  {"train_micro_batch_size_per_gpu", l.mbs},
                  {"gradient_accumulation_steps", microbatches(plan)},
                  {"gradient_clipping", 1.0},
                  {"steps_per_print", 10},
                  {"bf16", {{"enabled", s.training.precision == Precision::Bf16}}},
                  {"fp16",
                   {{"enabled", s.training.precision == Precision::Fp16},
                    {"loss_scale", 0},
                    {"initial_scale_power", 16}}},
                  {"zero_optimization", std::move(zero)},
                  {"activation_checkpointing",
                   {{"partition_activations", l.recompute != Recompute::None && l.tp > 1},
                    {"cpu_checkpointing", l.offload},
                    {"contiguous_memory_optimization", false},
                    {"synchronize_checkpoint_boundary", false},
                    {"profile", false}}},
                  {"wall_clock_breakdown", false}};
  f.text = json_dump(j) + "\n";
  return f;
}

namespace {

// What the parts of the job script share.
struct SbatchJob {
  std::string name;
  int64_t steps = 0;
  int ranks = 1, per_node = 1, nodes = 1;
  bool preset = false;  // the model is a catalog preset, named on the command line
};

// The #SBATCH lines.
void write_sbatch_header(std::ostringstream& o, const Plan& plan, const SbatchOptions& opt, const SbatchJob& jb) {
  const int ranks = jb.ranks, per_node = jb.per_node, nodes = jb.nodes;
  const std::string& job = jb.name;
  o << "#!/bin/bash\n"
    << "# " << detail::comment_text(plan_summary(plan)) << "\n"
    << "#SBATCH --job-name=" << sbatch_word(job) << "\n"
    << "#SBATCH --nodes=" << nodes << "\n"
    << "#SBATCH --ntasks=" << ranks << "\n"
    << "#SBATCH --ntasks-per-node=" << std::min(ranks, per_node) << "\n"
    ;
  if (opt.request_gpus) o << "#SBATCH --gpus-per-node=" << per_node << "\n";
  if (opt.exclusive) o << "#SBATCH --exclusive\n";
  o << "#SBATCH --output=%x-%j.out\n";
  if (!opt.partition.empty()) o << "#SBATCH --partition=" << sbatch_word(opt.partition) << "\n";
  if (!opt.account.empty()) o << "#SBATCH --account=" << sbatch_word(opt.account) << "\n";
  // A Slurm time is digits, ':' and '-' only; anything else never reaches the script.
  const bool time_ok = !opt.time_limit.empty() &&
                       opt.time_limit.find_first_not_of("0123456789:-") == std::string::npos;
  if (time_ok) o << "#SBATCH --time=" << opt.time_limit << "\n";
  else if (opt.time_limit_hours > 0) o << "#SBATCH --time=" << opt.time_limit_hours << ":00:00\n";
  if (opt.requeue >= 0) {
    // The run directory does not depend on the job's attempt, so a requeued job resumes from
    // the checkpoints of the attempt before; the output file collects every attempt.
    o << "#SBATCH --requeue\n"
      << "#SBATCH --open-mode=append\n";
  }
}

// RUN_DIR, the model file and TRAIN_ARGS (the given arguments, or the plan's layout).
void write_train_args(std::ostringstream& o, const Plan& plan, const SbatchOptions& opt, const SbatchJob& jb) {
  const Layout& l = plan.layout;
  const Scenario& s = plan.scenario;
  const int64_t steps = jb.steps;
  const bool preset = jb.preset;
  o << "set -euo pipefail\n\n";
  if (opt.run_dir_literal) o << "RUN_DIR=" << shell_quote(opt.run_dir) << "\n";
  else o << "RUN_DIR=" << shell_quote_expanding(opt.run_dir) << "\n";
  o << "mkdir -p \"$RUN_DIR\"\n";
  std::string model_arg;
  if (preset) {
    model_arg = shell_quote(plan.model_ref);
  } else if (!opt.train_args.empty()) {
    model_arg = "\"$RUN_DIR/model.yaml\"";  // the given arguments name their own model file
  } else {
    o << "cat > \"$RUN_DIR/model.yaml\" <<'CAPPLAN_MODEL_EOF'\n"
      << model_to_yaml(s.model) << "CAPPLAN_MODEL_EOF\n";
    model_arg = "\"$RUN_DIR/model.yaml\"";
  }
  if (!opt.train_args.empty()) {
    o << "\nTRAIN_ARGS=(\n";
    for (const auto& a : opt.train_args) o << "  " << shell_quote(a) << "\n";
    o << ")\n\n";
  } else {
    o << "\nTRAIN_ARGS=(\n"
      << "  --model " << model_arg << "\n"
      << "  --dp " << l.dp << " --tp " << l.tp << " --pp " << l.pp << " --vp " << l.vp << "\n";
    if (l.cp > 1 || l.ep > 1) o << "  --cp " << l.cp << " --ep " << l.ep << "\n";
    o
      << "  --mbs " << l.mbs << " --gbs " << s.training.gbs << "\n"
      << "  --zero " << l.zero << " --recompute " << to_string(l.recompute) << "\n";
    if (l.offload) o << "  --offload\n";
    if (l.sp) o << "  --sp\n";
    o << "  --order " << shell_quote(l.order) << " --schedule " << to_string(l.schedule) << "\n";
    if (steps > 0) o << "  --steps " << steps << "\n";
    o << "  --data " << shell_quote(opt.data) << "\n"
      << "  --checkpoint-dir \"$RUN_DIR/checkpoints\" --checkpoint-every " << opt.checkpoint_every
      << " --resume auto\n"
      << "  --metrics \"$RUN_DIR/metrics.jsonl\"\n"
      << ")\n\n";
  }
}

// The command that starts capplan-train: one rank per node (the health check) or the training
// layout.
std::string sbatch_launcher(const SbatchOptions& opt, const SbatchJob& jb, bool per_node_one) {
  const int ranks = jb.ranks, per_node = jb.per_node;
  std::string cmd;
  if (opt.use_mpirun) {
    cmd = "mpirun";
    for (const auto& a : opt.mpirun_args) {
      cmd += ' ';  // appended piecewise: GCC 12 misreports `" " + std::string` (-Wrestrict)
      cmd += shell_quote(a);
    }
    cmd += per_node_one ? " -np \"$SLURM_JOB_NUM_NODES\" --map-by ppr:1:node"
                        : " -np " + std::to_string(ranks) + " --map-by ppr:" +
                              std::to_string(std::min(ranks, per_node)) + ":node";
  } else {
    cmd = per_node_one ? "srun --mpi=pmix --ntasks-per-node=1 --ntasks=\"$SLURM_JOB_NUM_NODES\""
                       : "srun --mpi=pmix";
  }
  return cmd + " " + shell_quote(opt.train_binary);
}

// requeue_or_exit: requeue the job (Slurm starts it again, on healthy nodes, with the same
// RUN_DIR) while fewer than MAX_REQUEUE requeues were made.
void write_requeue(std::ostringstream& o, const SbatchOptions& opt) {
  if (opt.requeue >= 0) {
    o << "ATTEMPT=\"${SLURM_RESTART_COUNT:-0}\"\n"
      << "MAX_REQUEUE=" << opt.requeue << "\n"
      << "echo \"capplan: attempt $((ATTEMPT + 1)) of job $SLURM_JOB_ID on $SLURM_JOB_NODELIST at $(date -u +%Y-%m-%dT%H:%M:%S.%3NZ)\"\n"
      << "# Requeue this job (Slurm starts it again, on healthy nodes, with the same RUN_DIR).\n"
      << "requeue_or_exit() {\n"
      << "  if [ \"$ATTEMPT\" -lt \"$MAX_REQUEUE\" ]; then\n"
      << "    echo \"capplan: requeue $((ATTEMPT + 1)) of $MAX_REQUEUE: $2\"\n"
      << "    if scontrol requeue \"$SLURM_JOB_ID\"; then sleep 600; fi  # the requeue ends this attempt\n"
      << "    echo \"capplan: scontrol requeue failed\"\n"
      << "  fi\n"
      << "  echo \"capplan: stopped after $((ATTEMPT + 1)) attempts ($MAX_REQUEUE requeues allowed): $2\"\n"
      << "  exit \"$1\"\n"
      << "}\n\n";
  }
}

// The health check before training, draining the nodes that fail it.
void write_health_check(std::ostringstream& o, const SbatchOptions& opt, const SbatchJob& jb) {
  auto launcher = [&](bool per_node_one) { return sbatch_launcher(opt, jb, per_node_one); };
  if (!opt.health_args.empty()) {
    o << "HEALTH_ARGS=(\n";
    for (const auto& a : opt.health_args) o << "  " << shell_quote(a) << "\n";
    o << ")\n"
      << "HEALTH_TAG=\"$SLURM_JOB_ID-${SLURM_RESTART_COUNT:-0}\"\n"
      << "if ! " << launcher(true) << " health \"${HEALTH_ARGS[@]}\" \\\n"
      << "     --out \"$RUN_DIR/health-$HEALTH_TAG.json\" --failed-nodes \"$RUN_DIR/health-failed-$HEALTH_TAG.tsv\"; then\n"
      << "  echo \"capplan: health check failed at $(date -u +%Y-%m-%dT%H:%M:%S.%3NZ)\"\n"
      << "  # Drain each node that failed, so that Slurm gives the job other nodes.\n"
      << "  if [ -f \"$RUN_DIR/health-failed-$HEALTH_TAG.tsv\" ]; then\n"
      << "    while IFS=$'\\t' read -r node why; do\n"
      << "      [ -n \"$node\" ] || continue\n"
      << "      echo \"capplan: draining $node: $why\"\n"
      << "      scontrol update NodeName=\"$node\" State=DRAIN Reason=\"$why\" || true\n"
      << "    done < \"$RUN_DIR/health-failed-$HEALTH_TAG.tsv\"\n"
      << "  fi\n"
      << "  usable=$(sinfo -h -N -p \"$SLURM_JOB_PARTITION\" -o '%t' | grep -cE '^(idle|mix|alloc)' || true)\n";
    if (opt.requeue >= 0) {
      o << "  if [ \"$usable\" -ge \"$SLURM_JOB_NUM_NODES\" ]; then requeue_or_exit 3 \"health check failed\"; fi\n"
        << "  echo \"capplan: stopped: health check failed and only $usable healthy nodes remain for $SLURM_JOB_NUM_NODES\"\n";
    } else {
      o << "  echo \"capplan: stopped: health check failed ($usable healthy nodes remain)\"\n";
    }
    o << "  exit 3\n"
      << "fi\n\n";
  }
}

void write_training(std::ostringstream& o, const SbatchOptions& opt, const SbatchJob& jb) {
  auto launcher = [&](bool per_node_one) { return sbatch_launcher(opt, jb, per_node_one); };
  if (opt.requeue >= 0) {
    o << "echo \"capplan: training starts at $(date -u +%Y-%m-%dT%H:%M:%S.%3NZ)\"\n"
      << "set +e\n"
      << launcher(false) << " \"${TRAIN_ARGS[@]}\"\n"
      << "rc=$?\n"
      << "set -e\n"
      << "echo \"capplan: training ended with exit status $rc at $(date -u +%Y-%m-%dT%H:%M:%S.%3NZ)\"\n"
      << "if [ \"$rc\" -ne 0 ]; then requeue_or_exit \"$rc\" \"training failed with exit status $rc\"; fi\n"
      << "echo \"capplan: training finished\"\n";
  } else {
    o << launcher(false) << " \"${TRAIN_ARGS[@]}\"\n";
  }
}

}  // namespace

ExportedFile export_sbatch(const Plan& plan, const SbatchOptions& opt) {
  const Layout& l = plan.layout;
  const Scenario& s = plan.scenario;
  ExportedFile f;
  f.file_name = "capplan_train.sbatch";
  SbatchJob jb;
  jb.name = opt.job_name.empty() ? "capplan-" + (s.model.name.empty() ? std::string("run") : s.model.name)
                                 : opt.job_name;
  jb.steps = opt.steps > 0 ? opt.steps : plan_training_steps(plan);
  jb.ranks = l.gpus();
  jb.per_node = s.cluster.gpus_per_node > 0 ? s.cluster.gpus_per_node : 1;
  jb.nodes = s.nodes > 0 ? s.nodes : (jb.ranks + jb.per_node - 1) / jb.per_node;
  jb.preset = !plan.model_ref.empty() && find_catalog_model(plan.model_ref) != nullptr;
  std::ostringstream o;
  write_sbatch_header(o, plan, opt, jb);
  write_train_args(o, plan, opt, jb);
  write_requeue(o, opt);
  write_health_check(o, opt, jb);
  write_training(o, opt, jb);
  f.text = o.str();
  if (s.model.mla.enabled())
    f.notes.push_back("capplan-train projects queries, keys and values from the hidden state: it refuses " +
                      s.model.name + "'s latent attention (mla), so this script stops at its first step; "
                      "export --format megatron for Megatron-Core's --multi-latent-attention");
  if (s.model.mtp_layers > 0)
    f.notes.push_back("capplan-train trains the next-token loss only: it refuses " + s.model.name +
                      "'s multi-token prediction (mtp_layers), so this script stops at its first step; "
                      "export --format megatron for Megatron-Core's --mtp-num-layers");
  return f;
}

ExportedFile export_plan(const Plan& plan, ExportFormat format) {
  ExportedFile f;
  // The stack each format configures, and the framework presets that cost it (sbatch launches
  // capplan-train, which runs any plan).
  std::vector<std::string> costed_by;
  const char* stack = "";
  switch (format) {
    case ExportFormat::SmpOptions:
      f = export_smp_options(plan), stack = "SageMaker model parallelism v1", costed_by = {"smp-v1"};
      break;
    case ExportFormat::Megatron:
      f = export_megatron_args(plan), stack = "Megatron-LM",
      costed_by = {"megatron-lm", "megatron-lm-2020", "megatron-lm-2021", "megatron-core"};
      break;
    case ExportFormat::DeepSpeed:
      f = export_deepspeed_config(plan), stack = "DeepSpeed", costed_by = {"deepspeed"};
      break;
    case ExportFormat::Sbatch: return export_sbatch(plan);
  }
  const std::string& fw = plan.scenario.training.framework.name;
  if (std::find(costed_by.begin(), costed_by.end(), fw) == costed_by.end()) {
    std::string presets;
    for (const std::string& c : costed_by) presets += (presets.empty() ? "" : " or ") + c;
    f.notes.insert(f.notes.begin(), "the plan was costed for framework " + fw + "; this is " + stack +
                                        "'s configuration of its layout, whose step time differs (estimate it with "
                                        "--framework " + presets + ")");
  }
  return f;
}

}  // namespace capplan
