// The run contract between the launcher and the trainer: what one `capplan-train` run does, as a
// value (TrainOptions), as the command-line flags that carry it (to_argv), and read back from
// them (parse, the flag parser of planner/flags.h, every mistake in one pass). The launcher builds
// the options and passes to_argv() to mpirun; capplan-train parses them; both use these names.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "planner/diagnostics.h"
#include "planner/flags.h"
#include "planner/spec.h"

namespace capplan::rt {

// AdamW with a warm-up + cosine learning-rate schedule and gradient clipping (train/optimizer.h).
struct OptimizerConfig {
  double lr = 3e-4;           // peak learning rate
  double min_lr_ratio = 0.1;  // cosine decays to lr * min_lr_ratio at the last step
  int64_t warmup_steps = 0;   // linear warm-up from lr / warmup_steps
  int64_t total_steps = 1;    // cosine period (warm-up included)
  double beta1 = 0.9, beta2 = 0.95, eps = 1e-8;
  double weight_decay = 0.1;  // decoupled, on matrices and embeddings only
  double clip = 1.0;          // max global gradient L2 norm; <= 0 = no clipping
  int zero = 0;               // 0 to 3 (stages 2 and 3: the model holds the shards, gpt.h)
};

struct TrainOptions {
  std::string model;          // preset name, YAML file or config.json (planner's load_model)
  Layout layout;              // dp, tp, pp, cp, ep, vp, mbs, zero, recompute, order, schedule
  int64_t gbs = 0;            // global batch in sequences; 0 = dp * mbs
  int64_t steps = 10;
  int seq_len = 0;            // --seq; 0 = the model's seq_len
  OptimizerConfig optimizer;  // lr, warm-up, decay, clipping (total_steps = steps)
  // Mixture-of-experts models: the weight of the load-balancing loss (Switch Transformer's
  // alpha; Megatron-Core's --moe-aux-loss-coeff).
  double moe_aux_loss_coeff = 0.01;
  uint64_t seed = 1234;
  std::string data = "synthetic";
  std::string checkpoint_dir;     // empty = no checkpoints
  int64_t checkpoint_every = 0;   // steps; 0 = only at the end when checkpoint_dir is set
  std::string resume = "auto";    // auto | never | PATH of a step folder
  // --resume auto when every completed checkpoint fails verification: start from step 0 (true)
  // or refuse with the list of what failed (false).
  bool allow_fresh_start = false;
  // Training flags a resumed run may change from what the checkpoint recorded (snake_case keys
  // of resume_overridable_keys()); any other difference is refused.
  std::vector<std::string> resume_override;
  std::string metrics;            // JSON-lines file written by rank 0; empty = none
  int threads = 0;                // per rank; 0 = cores on the node / ranks on the node
  // auto: with tp = pp = 1 and ZeRO <= 1, the threads split each micro-batch into
  // gcd(mbs, threads) parts, each run through the whole model by its own threads (gradients
  // summed at the end of the step); otherwise, or with "kernel", they split every kernel.
  std::string thread_split = "auto";
  // auto: CUDA when this build has it and a GPU is visible, else the CPU; cpu; cuda (refused,
  // exit 2, without a device). One rank per GPU, the GPU chosen by the node-local rank.
  std::string backend = "auto";
  // bf16 | fp16 | fp32; empty = fp32 on the CPU, bf16 on a GPU (fp16 on one without bf16).
  std::string precision;
  int64_t kill_at_step = 0;       // fault injection for tests: the last rank SIGKILLs itself
                                  // after this many steps (0 = never)
  std::string dump_grads;         // tests: write step 1's DP-summed gradients, un-sharded, here

  // The flags that make capplan-train run these options (without the program name): the model,
  // the layout, gbs, steps, seed and data always; the rest when they differ from the defaults
  // (the checkpoint flags with a checkpoint folder). parse(to_argv()) gives these options back.
  std::vector<std::string> to_argv() const;
  // Reads capplan-train's flags (argv[0] is the program). Every mistake (unknown flags, bad
  // numbers, values out of range, combinations that cannot run) is a diagnostic naming the flag,
  // with file "<command line>"; `out` holds what could be read.
  static Diagnostics parse(int argc, const char* const* argv, TrainOptions* out);
};

// The training flags a checkpoint records beside the layout ("gbs", "seed", "lr", ...), and the
// ones --resume-override may name (the optimizer's hyper-parameters, steps and data: the restored
// state stays valid; gbs and seed fix the data order, so they cannot be overridden). A changed
// `steps` is always allowed, with a warning: extending a run is what resuming is for.
const std::vector<std::string>& resume_checked_keys();
const std::vector<std::string>& resume_overridable_keys();

// Every flag `capplan-train` takes, and the text `--help` prints.
const std::vector<FlagSpec>& train_flag_specs();
const std::vector<std::string>& train_flags();  // their names, without the leading --
std::string train_usage();

}  // namespace capplan::rt
