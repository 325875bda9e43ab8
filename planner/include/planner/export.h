// Plan export: turns a plan (scenario + layout) into the configuration other training stacks read
// (SageMaker model parallel `smp_options`, Megatron-LM arguments, a DeepSpeed config) and a Slurm
// sbatch script that runs `capplan-train`. Text generation only: nothing is launched or validated
// against a framework's own parser; knobs a target cannot express are listed in `notes`.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "planner/plan_io.h"

namespace capplan {

enum class ExportFormat { SmpOptions, Megatron, DeepSpeed, Sbatch };

const char* to_string(ExportFormat v);  // "smp", "megatron", "deepspeed", "sbatch"
std::optional<ExportFormat> parse_export_format(const std::string& s);

struct ExportedFile {
  std::string file_name;            // suggested name: "smp_options.json", "megatron_args.sh", ...
  std::string text;                 // the file's contents
  std::vector<std::string> notes;   // knobs the target cannot express, or must be set in code
};

struct SbatchOptions {
  std::string job_name;                      // empty = "capplan-<model name>"
  std::string train_binary = "capplan-train";
  std::string partition;                     // empty = cluster default
  int time_limit_hours = 0;                  // 0 = no --time line
  int64_t steps = 0;                         // 0 = tokens / (gbs * seq_len), rounded up
  std::string data = "synthetic";            // --data DIR|synthetic
  std::string run_dir = "runs/$SLURM_JOB_ID";  // checkpoints and metrics go here (shell-expanded)
  int checkpoint_every = 1000;               // steps
  bool use_mpirun = false;                   // false: srun --mpi=pmix; true: mpirun over the allocation
  // Set by `capplan run --slurm`; the defaults give the script `export --format sbatch` writes.
  bool run_dir_literal = false;              // run_dir is a path (quoted as data), not shell text
  std::string time_limit;                    // "HH:MM:SS"; non-empty replaces time_limit_hours
  std::string account;                       // empty = no --account line
  int requeue = -1;                          // >= 0: #SBATCH --requeue, and a failed attempt
                                             // requeues the job while fewer than this many were
  bool request_gpus = true;                  // false: no --gpus-per-node line (CPU nodes)
  bool exclusive = true;                     // #SBATCH --exclusive
  std::vector<std::string> mpirun_args;      // extra mpirun arguments (use_mpirun), each quoted
  std::vector<std::string> train_args;       // non-empty: capplan-train's arguments, each quoted,
                                             // instead of those derived from the plan
  std::vector<std::string> health_args;      // non-empty: `capplan-train health` with these runs
                                             // first, one rank per node; a failure drains the node
};

// Training steps implied by the plan: ceil(tokens / (gbs * seq_len)); 0 when unknown.
int64_t plan_training_steps(const Plan& plan);

// SageMaker model parallelism (smdistributed.modelparallel v1) `distribution` argument as JSON:
// {"smdistributed": {"modelparallel": {"enabled": true, "parameters": {...}}}, "mpi": {...}}.
ExportedFile export_smp_options(const Plan& plan);
// Megatron-LM `pretrain_gpt.py` arguments, one per line, as a bash array in a sourceable script.
ExportedFile export_megatron_args(const Plan& plan);
// DeepSpeed config JSON (batch sizes, precision, ZeRO stage, activation checkpointing).
ExportedFile export_deepspeed_config(const Plan& plan);
// Slurm batch script running `capplan-train` with the plan's layout on every node.
ExportedFile export_sbatch(const Plan& plan, const SbatchOptions& options = {});

ExportedFile export_plan(const Plan& plan, ExportFormat format);

}  // namespace capplan
