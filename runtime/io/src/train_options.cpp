// capplan-train's options: the flags (one table for the parser and the launcher), parse() over
// planner/flags.h's parser and to_argv(), its inverse.
#include "io/train_options.h"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "planner/json_writer.h"
#include "planner/spec_io.h"

namespace capplan::rt {

const std::vector<FlagSpec>& train_flag_specs() {
  static const std::vector<FlagSpec> f = {
      {"model", true, "preset name, YAML file or Hugging Face config.json (required)", "M"},
      {"dp", true, "data-parallel degree (default 1)", "N"},
      {"tp", true, "tensor-parallel degree (default 1)", "N"},
      {"pp", true, "pipeline-parallel degree (default 1)", "N"},
      {"cp", true, "context-parallel degree: the sequence split over N ranks (default 1)", "N"},
      {"ep", true, "expert-parallel degree, inside dp * cp (default 1)", "N"},
      {"moe-aux-loss-coeff", true, "weight of the MoE load-balancing loss (default 0.01)", "X"},
      {"vp", true, "model chunks per pipeline stage (with --schedule interleaved)", "N"},
      {"mbs", true, "sequences per micro-batch (default 1)", "N"},
      {"gbs", true, "global batch in sequences (default dp * mbs)", "N"},
      {"seq", true, "tokens per sequence (default: the model's)", "N"},
      {"zero", true, "ZeRO stage 0|1|2|3 (default 0)", "Z"},
      {"recompute", true, "none | selective | full", "R"},
      {"sp", false, "sequence parallelism over the tp group", ""},
      {"offload", false, "keep checkpointed activations in host memory between passes", ""},
      {"order", true, "placement of the axes over ranks, right-most fastest (or cluster|spread)", "O"},
      {"schedule", true, "gpipe | 1f1b | interleaved (default 1f1b)", "S"},
      {"steps", true, "optimizer steps (default 10)", "N"},
      {"lr", true, "peak learning rate (default 3e-4)", "X"},
      {"min-lr-ratio", true, "cosine floor as a share of lr (default 0.1)", "X"},
      {"warmup", true, "linear warm-up steps (default 0)", "N"},
      {"weight-decay", true, "decoupled weight decay (default 0.1)", "X"},
      {"clip", true, "max global gradient norm (default 1.0; 0 = none)", "X"},
      {"beta1", true, "Adam beta1 (default 0.9)", "X"},
      {"beta2", true, "Adam beta2 (default 0.95)", "X"},
      {"seed", true, "seed of the weights and the synthetic data (default 1234)", "N"},
      {"data", true, "token shard folder, or synthetic (default)", "DIR"},
      {"checkpoint-dir", true, "checkpoint folder (default: none)", "DIR"},
      {"checkpoint-every", true, "steps between checkpoints", "N"},
      {"resume", true, "auto | never | PATH of a step folder (default auto)", "R"},
      {"allow-fresh-start", false, "with --resume auto: start from step 0 when every checkpoint fails", ""},
      {"resume-override", true, "recorded training flags a resumed run may change", "K,..."},
      {"metrics", true, "JSON-lines metrics file (rank 0)", "FILE"},
      {"threads", true, "threads per rank", "N"},
      {"thread-split", true, "auto | kernel", "S"},
      {"backend", true, "auto | cpu | cuda (default auto: CUDA when a GPU is visible)", "B"},
      {"precision", true, "bf16 | fp16 | fp32 (default: fp32 on the CPU, bf16 on a GPU)", "P"},
      {"kill-at-step", true, "tests: the last rank kills itself after step N", "N"},
      {"dump-grads", true, "tests: write step 1's gradients here", "FILE"},
  };
  return f;
}

const std::vector<std::string>& train_flags() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> n;
    for (const auto& f : train_flag_specs()) n.push_back(f.name);
    return n;
  }();
  return names;
}

const std::vector<std::string>& resume_checked_keys() {
  static const std::vector<std::string> k = {"gbs",   "seed",  "lr",    "min_lr_ratio",
                                             "warmup", "weight_decay", "clip", "beta1",
                                             "beta2", "steps", "data"};
  return k;
}

const std::vector<std::string>& resume_overridable_keys() {
  static const std::vector<std::string> k = {"lr",    "min_lr_ratio", "warmup", "weight_decay",
                                             "clip",  "beta1",        "beta2",  "steps", "data"};
  return k;
}

std::string train_usage() {
  return R"(usage: mpirun -np N capplan-train --model M [flags]   (N = dp * tp * pp * cp ranks)
       capplan-train data prepare --text FILE... --out DIR [--shard-bytes N]
       capplan-train report FILE

model and layout (the names of capplan estimate):
  --model M                 preset name, YAML file or Hugging Face config.json (required)
  --dp N, --tp N, --pp N    data, tensor and pipeline parallel degrees (default 1)
  --vp N                    model chunks per pipeline stage (with --schedule interleaved)
  --cp N                    context parallelism: each sequence split over N ranks in 2N chunks,
                            attention as a ring (default 1)
  --ep N                    expert parallelism: an MoE layer's experts spread over N ranks of
                            the dp * cp group, tokens exchanged by all-to-all (default 1)
  --moe-aux-loss-coeff X    weight of the MoE load-balancing loss (default 0.01)
  --mbs N                   sequences per micro-batch (default 1)
  --gbs N                   global batch in sequences (default dp * mbs; gbs / (dp * mbs)
                            micro-batches per step)
  --seq N                   tokens per sequence (default: the model's)
  --zero 0|1|2|3            ZeRO stage: shard optimizer state, + gradients, + weights (default 0)
  --recompute none|selective|full
  --sp                      sequence parallelism over the TP group
  --offload                 keep checkpointed activations in host memory between passes
  --order DPT|...|cluster|spread   placement of the axes over ranks, right-most fastest
  --schedule gpipe|1f1b|interleaved   pipeline schedule (default 1f1b)
training:
  --steps N (default 10)    --lr X (3e-4)             --warmup N (0)
  --min-lr-ratio X (0.1)    --weight-decay X (0.1)    --clip X (1.0; 0 = none)
  --beta1 X (0.9)           --beta2 X (0.95)          --seed N (1234)
data, checkpoints, metrics:
  --data DIR|synthetic      token shards (llm.c .bin layout), or random tokens (default)
  --checkpoint-dir DIR      --checkpoint-every N      --resume auto|never|PATH (default auto)
  --allow-fresh-start       with --resume auto: start from step 0 when every completed
                            checkpoint fails verification (default: refuse, listing them)
  --resume-override K,...   let a resumed run change these recorded training flags: lr,
                            min_lr_ratio, warmup, weight_decay, clip, beta1, beta2, steps, data
  --metrics FILE            JSON lines: steps, system samples every 500 ms, summary
threads:
  --threads N               per rank (default: the CPUs of this process / ranks on the node)
  --thread-split auto|kernel   auto: with tp = pp = 1 and ZeRO <= 1 the threads split each
                            micro-batch (one part each); kernel: they split every kernel
backend:
  --backend auto|cpu|cuda   auto (default): CUDA when this build has it and a GPU is visible,
                            one rank per GPU chosen by the node-local rank; else the CPU
  --precision bf16|fp16|fp32   what the GPU's GEMMs multiply in, accumulating in fp32
                            (default bf16, fp16 on a GPU without bf16; the CPU: fp32 only)
testing aids:
  --kill-at-step N          the last rank kills itself (SIGKILL) after step N
  --dump-grads FILE         write step 1's gradients, summed over DP and un-sharded
)";
}

std::vector<std::string> TrainOptions::to_argv() const {
  const TrainOptions defaults;
  const OptimizerConfig& o = optimizer;
  const OptimizerConfig& od = defaults.optimizer;
  const Layout& l = layout;
  std::vector<std::string> a;
  auto flag = [&](const char* name, const std::string& value) {
    a.push_back(std::string("--") + name);
    a.push_back(value);
  };
  auto number = [&](const char* name, double v, double fallback) {
    if (v != fallback) flag(name, shortest_number(v));
  };
  flag("model", model);
  flag("dp", std::to_string(l.dp));
  flag("tp", std::to_string(l.tp));
  flag("pp", std::to_string(l.pp));
  if (l.cp != 1) flag("cp", std::to_string(l.cp));
  if (l.ep != 1) flag("ep", std::to_string(l.ep));
  flag("vp", std::to_string(l.vp));
  flag("mbs", std::to_string(l.mbs));
  flag("gbs", std::to_string(gbs > 0 ? gbs : int64_t(l.dp) * l.mbs));
  flag("zero", std::to_string(l.zero));
  flag("recompute", to_string(l.recompute));
  if (l.offload) a.push_back("--offload");
  if (l.sp) a.push_back("--sp");
  flag("order", l.order);
  flag("schedule", to_string(l.schedule));
  if (seq_len > 0) flag("seq", std::to_string(seq_len));
  flag("steps", std::to_string(steps));
  flag("seed", std::to_string(seed));
  number("lr", o.lr, od.lr);
  number("min-lr-ratio", o.min_lr_ratio, od.min_lr_ratio);
  if (o.warmup_steps != od.warmup_steps) flag("warmup", std::to_string(o.warmup_steps));
  number("weight-decay", o.weight_decay, od.weight_decay);
  number("clip", o.clip, od.clip);
  number("beta1", o.beta1, od.beta1);
  number("beta2", o.beta2, od.beta2);
  number("moe-aux-loss-coeff", moe_aux_loss_coeff, defaults.moe_aux_loss_coeff);
  flag("data", data);
  if (!checkpoint_dir.empty()) {
    flag("checkpoint-dir", checkpoint_dir);
    if (checkpoint_every > 0) flag("checkpoint-every", std::to_string(checkpoint_every));
    flag("resume", resume);
  } else if (resume != defaults.resume) {
    flag("resume", resume);
  }
  if (allow_fresh_start) a.push_back("--allow-fresh-start");
  if (!resume_override.empty()) {
    std::string keys;
    for (const auto& k : resume_override) keys += (keys.empty() ? "" : ",") + k;
    flag("resume-override", keys);
  }
  if (!metrics.empty()) flag("metrics", metrics);
  if (threads > 0) flag("threads", std::to_string(threads));
  if (thread_split != defaults.thread_split) flag("thread-split", thread_split);
  if (backend != defaults.backend) flag("backend", backend);
  if (!precision.empty()) flag("precision", precision);
  if (kill_at_step > 0) flag("kill-at-step", std::to_string(kill_at_step));
  if (!dump_grads.empty()) flag("dump-grads", dump_grads);
  return a;
}

namespace {

void read_resume_override(const std::string& value, TrainOptions& o, Diagnostics& d) {
  std::istringstream is(value);
  for (std::string k; std::getline(is, k, ',');) {
    std::replace(k.begin(), k.end(), '-', '_');
    const auto& ok = resume_overridable_keys();
    const auto& checked = resume_checked_keys();
    if (std::find(ok.begin(), ok.end(), k) != ok.end()) {
      o.resume_override.push_back(k);
    } else if (std::find(checked.begin(), checked.end(), k) != checked.end()) {
      flag_error(d, "resume-override", "'" + k + "' cannot be overridden: the order of the training data depends on it",
                 "start a new run (another --checkpoint-dir) to change it");
    } else {
      const std::string close = closest_match(k, ok);
      flag_error(d, "resume-override",
                 "unknown key '" + k + "' (expected one of lr, min_lr_ratio, warmup, weight_decay, clip, beta1, "
                 "beta2, steps, data)",
                 close.empty() ? "" : "did you mean '" + close + "'?");
    }
  }
}

// The rules that need several flags at once.
void check_combinations(const TrainOptions& o, Diagnostics& d) {
  const int64_t per = int64_t(o.layout.dp) * o.layout.mbs;
  if (o.gbs % per != 0)
    flag_error(d, "gbs",
               std::to_string(o.gbs) + " is not divisible by dp * mbs = " + std::to_string(o.layout.dp) + " * " +
                   std::to_string(o.layout.mbs) + " = " + std::to_string(per),
               "gradient accumulation needs gbs / (dp * mbs) micro-batches per step");
  const int dpcp = o.layout.dp * o.layout.cp;
  if (dpcp % o.layout.ep != 0)
    flag_error(d, "ep",
               "ep " + std::to_string(o.layout.ep) + " does not divide dp * cp = " + std::to_string(o.layout.dp) +
                   " * " + std::to_string(o.layout.cp) + " = " + std::to_string(dpcp),
               "the expert-parallel group lives inside the dp * cp ranks");
  if (o.layout.cp > 1 && o.layout.sp)
    flag_error(d, "cp", "context parallelism with sequence parallelism (--sp) is not supported");
  if (o.layout.ep > 1 && o.layout.zero >= 2)
    flag_error(d, "ep", "expert parallelism needs --zero 0 or 1 (the experts' gradients are reduced apart)");
  if (o.layout.sp && o.layout.tp == 1)
    flag_error(d, "sp", "sequence parallelism splits the sequence over the tp group: it needs --tp > 1");
  if (o.allow_fresh_start && o.resume != "auto") flag_error(d, "allow-fresh-start", "only applies with --resume auto");
  if (o.layout.vp > 1 && (o.layout.pp == 1 || o.layout.schedule != Schedule::Interleaved))
    flag_error(d, "vp",
               "vp " + std::to_string(o.layout.vp) + " model chunks per stage need --pp > 1 and --schedule interleaved");
}

}  // namespace

Diagnostics TrainOptions::parse(int argc, const char* const* argv, TrainOptions* out) {
  Diagnostics d;
  TrainOptions& o = *out;
  const Args args = parse_args(argc, argv, train_flag_specs(), d, 0, RepeatedFlags::LastWins);
  const int64_t big = int64_t(1) << 40;
  auto integer = [&](const char* name, int64_t min, int64_t max, auto& field) {
    if (const auto x = int_flag(args, name, d, min, max)) field = static_cast<std::decay_t<decltype(field)>>(*x);
  };
  // A number in [lo, hi]: number_flag's forms and messages; its lower bound is exclusive, so a
  // bound of 0 that is allowed is checked here.
  auto real = [&](const char* name, double lo, double hi, double& field) {
    if (const auto x = number_flag(args, name, d, -INFINITY, hi)) {
      if (*x < lo) flag_error(d, name, "must be >= " + shortest_number(lo) + ", found " + args.get(name));
      else field = *x;
    }
  };
  o.model = args.get("model", o.model);
  integer("dp", 1, 1 << 20, o.layout.dp);
  integer("tp", 1, 1 << 20, o.layout.tp);
  integer("pp", 1, 1 << 20, o.layout.pp);
  integer("cp", 1, 1 << 20, o.layout.cp);
  integer("ep", 1, 1 << 20, o.layout.ep);
  integer("vp", 1, 1 << 20, o.layout.vp);
  integer("mbs", 1, 1 << 20, o.layout.mbs);
  integer("gbs", 1, big, o.gbs);
  integer("steps", 1, big, o.steps);
  integer("seq", 1, 1 << 20, o.seq_len);
  integer("threads", 1, 1024, o.threads);
  integer("warmup", 0, big, o.optimizer.warmup_steps);
  integer("checkpoint-every", 0, big, o.checkpoint_every);
  integer("kill-at-step", 0, big, o.kill_at_step);
  integer("seed", 0, INT64_MAX, o.seed);
  integer("zero", 0, 3, o.layout.zero);
  real("lr", 0, 10, o.optimizer.lr);
  real("min-lr-ratio", 0, 1, o.optimizer.min_lr_ratio);
  real("weight-decay", 0, 10, o.optimizer.weight_decay);
  real("clip", 0, 1e9, o.optimizer.clip);
  real("beta1", 0, 0.999999, o.optimizer.beta1);
  real("beta2", 0, 0.999999, o.optimizer.beta2);
  real("moe-aux-loss-coeff", 0, 1e3, o.moe_aux_loss_coeff);
  if (args.has("offload")) o.layout.offload = true;
  if (args.has("sp")) o.layout.sp = true;
  if (args.has("allow-fresh-start")) o.allow_fresh_start = true;
  o.data = args.get("data", o.data);
  o.checkpoint_dir = args.get("checkpoint-dir", o.checkpoint_dir);
  o.resume = args.get("resume", o.resume);
  o.metrics = args.get("metrics", o.metrics);
  o.dump_grads = args.get("dump-grads", o.dump_grads);
  if (args.has("resume-override")) read_resume_override(args.get("resume-override"), o, d);
  if (args.has("thread-split")) {
    const std::string v = args.get("thread-split");
    if (v == "auto" || v == "kernel") o.thread_split = v;
    else flag_error(d, "thread-split", "expected auto or kernel, found '" + v + "'");
  }
  if (args.has("backend")) {
    const std::string v = args.get("backend");
    if (v == "auto" || v == "cpu" || v == "cuda") o.backend = v;
    else flag_error(d, "backend", "expected auto, cpu or cuda, found '" + v + "'");
  }
  if (args.has("precision")) {
    const std::string v = args.get("precision");
    if (v == "bf16" || v == "fp16" || v == "fp32") o.precision = v;
    else flag_error(d, "precision", "expected bf16, fp16 or fp32, found '" + v + "'");
  }
  if (o.backend == "cpu" && !o.precision.empty() && o.precision != "fp32")
    flag_error(d, "precision", "the CPU backend computes in fp32, found '" + o.precision + "'",
               "use --backend cuda for bf16 or fp16");
  if (args.has("recompute")) {
    if (auto r = parse_recompute(args.get("recompute"))) o.layout.recompute = *r;
    else flag_error(d, "recompute", "expected none, selective or full, found '" + args.get("recompute") + "'");
  }
  if (args.has("order")) {
    if (auto r = parse_order(args.get("order"))) o.layout.order = *r;
    else flag_error(d, "order", "expected a permutation of D, P, T, with C and E optional (or cluster, spread), found '" + args.get("order") + "'");
  }
  if (args.has("schedule")) {
    if (auto r = parse_schedule(args.get("schedule"))) o.layout.schedule = *r;
    else flag_error(d, "schedule", "expected gpipe, 1f1b or interleaved, found '" + args.get("schedule") + "'");
  }
  if (o.model.empty()) flag_error(d, "model", "is required (a preset name, a YAML file or a config.json)");
  if (o.resume.empty()) flag_error(d, "resume", "expected auto, never or a checkpoint folder");
  if (o.gbs == 0) o.gbs = int64_t(o.layout.dp) * o.layout.mbs;
  check_combinations(o, d);
  o.optimizer.total_steps = o.steps;
  o.optimizer.zero = o.layout.zero;
  return d;
}

}  // namespace capplan::rt
