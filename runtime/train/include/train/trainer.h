// capplan-train's training loop: options from the command line (every mistake collected in one
// pass), MPI process groups for the layout, the GPT model on the CPU backend, data-parallel AdamW
// (plain or ZeRO-1), checkpoints with auto-resume and metrics. Rank 0 prints; every rank agrees on
// failure through a collective before exiting, so a bad input never leaves a rank hanging.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "planner/diagnostics.h"
#include "planner/spec.h"
#include "train/optimizer.h"

namespace capplan::rt {

struct TrainOptions {
  std::string model;          // preset name, YAML file or config.json (planner's load_model)
  Layout layout;              // dp, tp, pp, vp, mbs, zero, recompute, order, schedule
  int64_t gbs = 0;            // global batch in sequences; 0 = dp * mbs
  int64_t steps = 10;
  int seq_len = 0;            // 0 = the model's seq_len
  OptimizerConfig optimizer;  // lr, warm-up, decay, clipping (total_steps = steps)
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
  int64_t kill_at_step = 0;       // fault injection for tests: the last rank SIGKILLs itself
                                  // after this many steps (0 = never)
  std::string dump_grads;         // tests: write step 1's DP-summed gradients, un-sharded, here
};

// The training flags a checkpoint records beside the layout ("gbs", "seed", "lr", ...), and the
// ones --resume-override may name (the optimizer's hyper-parameters, steps and data: the restored
// state stays valid; gbs and seed fix the data order, so they cannot be overridden). A changed
// `steps` is always allowed, with a warning: extending a run is what resuming is for.
const std::vector<std::string>& resume_checked_keys();
const std::vector<std::string>& resume_overridable_keys();

// Every flag `capplan-train` takes (without the leading --), and the text `--help` prints.
const std::vector<std::string>& train_flags();
std::string train_usage();

// Parses `capplan-train` flags (argv[0] is the program). Unknown flags, bad numbers and values out
// of range are all reported, each naming the flag, with file "<command line>".
Diagnostics parse_train_args(int argc, const char* const* argv, TrainOptions* out);

// The whole `capplan-train` run (MPI must not be initialised yet; this initialises and finalises
// it). Returns the process exit status: 0 ok, 2 bad input, 1 runtime failure.
int train_main(int argc, char** argv);

}  // namespace capplan::rt
