// Launching a plan on this machine and putting measured beside predicted: a cluster spec that
// describes this machine, the scale-down that shrinks a plan's model until it runs here in seconds
// while keeping its layout, the `mpirun ... capplan-train ...` argument vector, the run itself
// (streamed, cancellable), the metrics tail-reader for live charts, and the run record
// (RUNDIR/run.json + run.txt). The same run can go to a Slurm cluster instead (submitted with
// sbatch, followed with squeue / scontrol / sacct, requeued and resumed after a failure). Used by
// `capplan run` and the GUI's Run page. It does not train (capplan-train does), and links
// neither MPI nor Qt.
#pragma once

#include <atomic>
#include <cmath>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "planner/cost_model.h"
#include "planner/device_profile.h"
#include "planner/diagnostics.h"
#include "planner/plan_io.h"
#include "io/train_options.h"
#include "launch/launch_process.h"
#include "planner/spec.h"

namespace capplan::rt {

inline constexpr double kUnknown = NAN;  // a figure nobody measured or predicted

// ---------------------------------------------------------------- this machine

struct LocalMachine {
  int cores = 0;                  // online CPUs
  double ram_bytes = 0;           // MemTotal (/proc/meminfo)
  double available_bytes = 0;     // MemAvailable when probed
  double gemm_peak_gflops = 0;    // fp32, whole machine; 0 = unknown
  std::string gemm_peak_source;   // "measured: ...", "stated: ...", "unknown"
  double memory_gbyte_per_s = 0;  // copy bandwidth (bytes read + written per second); 0 = unknown
  std::string memory_source;
};

// Reads /proc. With `measure`, times an fp32 GEMM (cblas when built with it, else a blocked loop)
// and a large memcpy, once per process (~0.5 s; later calls reuse the figures).
LocalMachine probe_local_machine(bool measure = true);
// The same, measuring only what is asked for (a stated figure needs no measurement).
LocalMachine probe_local_machine(bool measure_gemm, bool measure_memory);

// A one-node "cluster" whose GPUs are the `ranks` MPI ranks sharing this machine. Each rank gets
// 1/ranks of the measured GEMM peak, of the copy bandwidth and of the RAM (MemTotal); the
// "network" is Open MPI's shared-memory transport, modelled as half the copy bandwidth per rank
// (a send copies into a shared buffer and the receiver copies out). The peaks are achieved
// figures, so the cost model's GEMM and memory efficiencies are set to 1. It over-states what
// oversubscribed ranks (ranks > cores) get, since they also time-share the cores.
ClusterSpec local_cluster_spec(const LocalMachine& machine, int ranks);

// ---------------------------------------------------------------- scale-down

struct ScaleDownOptions {
  int seq_len = 64;             // upper bound on the sequence (rounded up to a multiple of tp with sp)
  int head_dim = 16;            // lower bound; hidden = heads * head_dim, grown to >= min_hidden
  int min_hidden = 64;
  int vocab = 256;              // byte-level, so `capplan-train data prepare` shards fit
  int layers_per_chunk = 1;     // layers = pp * vp * layers_per_chunk, at least min_layers
  int min_layers = 2;           // so that a block feeds a block even without pipelining
  int max_microbatches = 0;     // 0 = max(2 * pp, 4), kept a multiple of pp for interleaved
};

// A scenario and layout that can run here, and what changed, in words.
struct ScaledRun {
  Scenario scenario;                 // on local_cluster_spec(), nodes = 1, gpus = dp * tp * pp
  Layout layout;
  std::vector<std::string> changes;  // "layers 96 -> 8 (pp 8 x vp 1 chunks, 1 layer each)", ...
};

// Keeps dp, tp, pp, vp, schedule, order, zero, recompute, offload and sp; shrinks layers (to whole
// layers per model chunk), heads and kv_heads (to multiples of tp, grouped-query kept when it was
// there), hidden and ffn_hidden (divisible by heads and tp), vocab (multiple of tp), seq (multiple
// of tp when sp), mbs to 1 and gbs to dp * num_microbatches, with num_microbatches capped but
// still >= pp (pipeline steady state) and a multiple of pp for interleaved. Precision -> fp32.
ScaledRun scale_down(const Scenario& original, const Layout& layout, const ClusterSpec& local,
                     const ScaleDownOptions& options = {});

// A layout cut down to at most `max_ranks` ranks for a local run, and what changed, in words. A
// layout that already fits is returned as it is, with no changes. Otherwise tp and pp are cut to 2
// at most (then to 1, pp first, while tp x pp alone is over the limit) and dp to what the rest
// allows (at least 1); schedule, vp, zero, recompute, offload, sp and order are kept where they
// still apply: vp = 1 and 1F1B instead of interleaved when pp becomes 1, sp off when tp becomes 1.
// The GUI's Run page and `capplan run --max-ranks` both call it.
struct ShrunkLayout {
  Layout layout;
  std::vector<std::string> changes;  // "layout dp 15 tp 8 pp 8 (960 ranks) -> dp 2 tp 2 pp 2 (8 ranks) ..."
};
ShrunkLayout shrink_layout(const Layout& layout, int max_ranks);

// The same scenario moved to this machine without shrinking the model (precision -> fp32).
ScaledRun run_as_is(const Scenario& original, const Layout& layout, const ClusterSpec& local);

// A model file capplan-train's `--model` reads back (the planner's model YAML schema).
std::string model_yaml(const ModelSpec& model);

// ---------------------------------------------------------------- the command

struct TrainCommand {
  std::string mpirun = "mpirun";
  std::string train_binary = "capplan-train";
  bool as_root = false;           // adds --allow-run-as-root (Open MPI refuses root otherwise)
  std::string hostfile;           // non-empty: mpirun --hostfile FILE (ranks over several hosts)
  TrainOptions options;           // what capplan-train runs (model: the YAML of model_yaml())
};

// ["mpirun", ("--allow-run-as-root"), "--oversubscribe", "--bind-to", "none", "-np", "N",
//  "capplan-train", options.to_argv()...]: one element per argument, no shell involved.
std::vector<std::string> build_train_argv(const TrainCommand& command);

// capplan-train: $CAPPLAN_TRAIN, else next to `self_exe` (the same folder: build/bin/ in a build
// tree), else `build_hint` (the path the build put it at), else PATH. Empty when none exists.
std::string locate_train_binary(const std::string& self_exe, const std::string& build_hint = {});
std::string self_executable();  // /proc/self/exe

// The text corpus the repository ships for local runs (configs/corpus/sqlite-api: SQLite's public-domain C
// interface documentation, 498 KB, as one byte-level shard; source and licence in its README):
// $CAPPLAN_CORPUS when set, else the source tree's copy (the path the build recorded). Empty when
// that folder holds no shard. A run on it learns (its loss falls well below ln 256 within a few
// dozen steps), where `synthetic` tokens cannot.
std::string locate_default_corpus();
// `--data` as the user gave it: "corpus" (and empty) -> locate_default_corpus(), falling back to
// "synthetic" when the corpus is not there; "synthetic" or a shard folder as they are.
std::string resolve_run_data(const std::string& data);

// ---------------------------------------------------------------- metrics

// One metrics line, flattened: nested objects become "outer.inner" keys. Nulls (numbers that were
// not finite) are left out, so number() gives its fallback, unknown by default; the strings "NaN"
// / "Infinity" / "-Infinity" of older files are read back as numbers.
struct MetricsRecord {
  std::string type;  // "start", "step", "system", "summary"; empty when absent
  std::map<std::string, double> numbers;
  std::map<std::string, std::string> strings;
  double number(const std::string& key, double fallback = kUnknown) const;
  std::string string(const std::string& key) const;
};
// nullopt when the line is not a JSON object.
std::optional<MetricsRecord> parse_metrics_line(const std::string& line);

// Reads the complete lines appended to a file since the last call (a GUI timer or the launcher
// polls it while capplan-train writes). A missing file reads as empty; a truncated or replaced
// file starts over from its beginning. Not thread-safe: one reader per object.
class MetricsTail {
 public:
  explicit MetricsTail(std::string path) : path_(std::move(path)) {}
  std::vector<std::string> read_new_lines();
  std::vector<MetricsRecord> read_new_records();  // the new lines that parse
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  uint64_t offset_ = 0;
  uint64_t inode_ = 0;
  std::string partial_;
};

struct MeasuredRun {
  int steps = 0;         // step records seen
  int warmup_steps = 0;  // first steps left out of the medians (allocation, page faults, caches)
  double step_time_s = kUnknown;  // median after warm-up
  double tokens_per_s = kUnknown; // median after warm-up
  double first_loss = kUnknown, last_loss = kUnknown;
  std::map<std::string, double> phase_s;  // median per phase ("forward", "backward", ...)
  // Pipeline bubble: the share of the micro-batch phase the ranks spent waiting for their
  // neighbours (mean over ranks, median over steps after warm-up), from the step records'
  // "bubble_fraction". Unknown with pp = 1.
  double bubble_fraction = kUnknown;
  // The cores' cache-line latency sampled after each step after warm-up (the step records'
  // "core_latency_ns"; CPU ranks with a core each): samples 0 where the run did not measure it.
  CoreLatency core_latency;
  std::vector<double> peak_rss_bytes_per_rank;  // from system samples; empty when none
  double max_process_rss_bytes = kUnknown;      // largest process of the job (wait4), see ProcessResult
  // Bytes by kind ("weights", "gradients", "optimizer", "activations", "offloaded") as the
  // trainer allocated them, largest over the ranks that report: from "placement" or "memory"
  // metrics records ({"rank":r, "param_bytes":.., "grad_bytes":.., "optimizer_bytes":..,
  // "activation_device_bytes":.., "activation_host_bytes":..}). Empty when there are none.
  std::map<std::string, double> memory_bytes;
  std::string memory_source;
  double peak_flops_per_s = kUnknown;  // per rank, as the trainer measured it
  std::string peak_flops_source;
  std::string summary_status;  // from the summary record: "ok", "failed", "aborted"; empty if none
  std::string summary_reason;
};
MeasuredRun summarize_metrics(const std::vector<MetricsRecord>& records);
MeasuredRun read_measured(const std::string& metrics_file);  // all of it

// ---------------------------------------------------------------- run record

struct SimulatedStep {
  double step_time_s = kUnknown;
  TimeBreakdown breakdown_s;
  double bubble_fraction = kUnknown;
};

// ---------------------------------------------------------------- Slurm jobs

struct SlurmStateChange {
  std::string time_utc;  // when capplan saw it (ISO 8601)
  std::string state;     // Slurm's: PENDING, RUNNING, COMPLETING, REQUEUED, COMPLETED, FAILED, ...
  std::string reason;    // Slurm's reason (Priority, Resources, BeginTime, NonZeroExitCode, ...)
  int restarts = 0;      // Slurm's requeue count at that moment
};

// One start of the job script (Slurm's SLURM_RESTART_COUNT + 1), from the lines the script writes
// to its output file and the trainer's metrics.
struct SlurmAttempt {
  int attempt = 0;                 // 1-based
  std::string started_utc;         // the script began (after the queue)
  std::string train_started_utc;   // the health check passed and the trainer started
  std::string train_ended_utc;     // the trainer exited (empty when it did not)
  int exit_code = -1;              // the trainer's exit status (-1: unknown, or it did not run)
  std::string outcome;             // "finished", "failed", "health check failed", "running", ...
  int64_t resumed_from_step = -1;  // the step the trainer resumed from (0: from scratch; -1: did not start)
  int64_t first_step = 0, last_step = 0;  // steps this attempt recorded (0: none)
  double step_time_sum_s = 0;      // sum of its steps' step_time_s
  std::vector<std::string> health_failures;  // "node: check: measured vs expected"
};

// The effective training time ratio: productive step time over wall time, and what each failure
// cost: the wait until the next attempt trained again (requeue, queue, health check), the
// trainer's time outside its steps (start-up, checkpoint load and saves), and the steps done
// after the checkpoint that the next attempt resumed from (recomputed).
struct FailureCost {
  int attempt = 0;               // the attempt that failed
  double restart_s = kUnknown;   // its trainer's end -> the next attempt's trainer start
  double reload_s = kUnknown;    // the next attempt's trainer time outside steps
  int64_t recomputed_steps = 0;
  double recomputed_s = 0;       // their step time
};
struct Goodput {
  double wall_s = kUnknown;          // first attempt's start -> the end of the job
  double productive_s = kUnknown;    // each final step's step time, once
  double ratio = kUnknown;           // productive / wall
  int failures = 0;
  std::vector<FailureCost> per_failure;
  // The run simulation's prediction for this plan with the same failure count: work over work +
  // checkpoint writes + failures x (restart + half a checkpoint interval lost); see run_record_text.
  double predicted_ratio = kUnknown;
  std::string predicted_basis;
};

struct SlurmJob {
  std::string job_id;
  std::string partition, account, time_limit;  // as submitted (empty = Slurm's default)
  int nodes = 0;
  int requeue_limit = 0;
  std::string script;                          // RUNDIR/job.sbatch
  std::string output_file;                     // RUNDIR/slurm-JOBID.out
  std::vector<SlurmStateChange> states;        // every change, in order
  std::string final_state, final_reason, exit_code;  // Slurm's, at the end
  int restarts = 0;                            // Slurm's requeue count at the end
  std::vector<SlurmAttempt> attempts;
  std::vector<std::string> drained;            // "node: reason" the job script drained
};

enum class RunStatus { NotStarted, Running, Succeeded, Failed, Cancelled };
const char* to_string(RunStatus s);
// The current time as the records write it: ISO 8601 UTC, "2026-12-01T10:20:00Z".
std::string utc_now();  // "not-started", "running", "succeeded", "failed", "cancelled"

struct RunRecord {
  RunStatus status = RunStatus::NotStarted;
  std::string reason;            // why it failed or was cancelled; empty when it succeeded
  std::vector<std::string> command;
  std::string run_dir;
  std::string started_utc, finished_utc;  // ISO 8601
  double wall_time_s = 0;
  int exit_code = -1;
  int term_signal = 0;

  std::string model_ref, cluster_ref;  // as the user gave them
  Scenario original;                   // before scale-down
  Layout original_layout;
  bool scaled_down = false;
  std::vector<std::string> changes;
  Scenario scenario;                   // what ran
  Layout layout;
  int steps = 0;
  LocalMachine machine;

  std::optional<Estimate> predicted;      // planner, for `scenario` on the local cluster spec
  std::optional<SimulatedStep> simulated; // simulator, when built with it
  MeasuredRun measured;
  std::optional<SlurmJob> slurm;          // a run submitted to Slurm (capplan run --slurm)
  std::optional<Goodput> goodput;         // runs with checkpoints and attempts (Slurm)
};

// Predicted, simulated and measured seconds per step for each term of TimeBreakdown, then the
// phases the cost model has no term for ("data (not modelled)"), "remainder" and "step". The
// measured terms are the medians of the trainer's terms (io/metrics_schema.h); the measured
// remainder is the measured step less every measured part above it, so the column adds up.
// Records that do not time the terms apart give compute = forward + backward and unknown for
// the terms they lack.
struct TermRow {
  std::string term;
  double predicted_s = kUnknown, simulated_s = kUnknown, measured_s = kUnknown;
  // The step's row: the predicted step's band (p10, p90: the model's error, Estimate); unknown on
  // the terms' rows.
  double predicted_p10_s = kUnknown, predicted_p90_s = kUnknown;
};
std::vector<TermRow> compare_terms(const RunRecord& record);

// Predicted and measured bytes per rank for each memory kind (weights, gradients, optimizer,
// activations, offloaded, buffers, total); measured is unknown where the trainer does not say.
struct MemoryRow {
  std::string kind;
  double predicted_bytes = kUnknown, measured_bytes = kUnknown;
};
std::vector<MemoryRow> compare_memory(const RunRecord& record);

// The cores' cache-line latency of a run (MeasuredRun::core_latency) beside its device profile's
// (DeviceProfile::core_latency), where the run measured it. It moved since the profile when the
// run's median is more than twice the profile's or less than half of it; during the run when a
// fifth of the run's samples (two at least) lie more than twofold from their median; while the
// profile measured when one of its samples does, or its two around the lockstep timing differ
// more than twofold. Collectives between ranks on one host move
// through the caches at this latency, so a profile measured at one and a run at the other disagree
// on them.
struct CoreLatencyComparison {
  CoreLatency run, profile;  // samples 0: not measured
  bool moved_during_profile = false, moved_since_profile = false, moved_during_run = false;
};
CoreLatencyComparison compare_core_latency(const RunRecord& record);
// Its lines for run.txt and `capplan run`; empty when the run did not measure it.
std::string core_latency_text(const CoreLatencyComparison& c);

std::string run_record_json(const RunRecord& record);
std::string run_record_text(const RunRecord& record);  // human-readable: command, changes, table
// Writes RUNDIR/run.json and RUNDIR/run.txt atomically; returns an error message, empty on success.
std::string write_run_record(const RunRecord& record);

// ---------------------------------------------------------------- earlier runs

// A run folder found under a runs folder, as its files describe it: RUNDIR/run.json (the record),
// RUNDIR/plan.yaml (the run as it ran on this machine, already scaled down) and
// RUNDIR/checkpoints. The GUI lists these after a restart and resumes from them.
struct RunListing {
  std::string run_dir;
  std::string name;          // the folder's name ("run-20261201-140512")
  std::string status;        // the record's ("Succeeded", "Cancelled", "Failed"); "unknown" without run.json
  std::string reason;
  std::string started_utc;
  int steps = 0;             // steps the run was asked for
  std::string model;         // the model's name as run
  std::optional<Plan> plan;  // RUNDIR/plan.yaml when it reads back
  int64_t checkpoint_step = -1;  // the newest checkpoint that verifies; -1: none
  bool resumable() const { return plan.has_value() && checkpoint_step >= 0; }
};

// Every folder of `runs_dir` that holds a run.json or a plan.yaml, newest first (by name, which
// starts with the date, then by start time). A missing folder lists nothing; an unreadable or
// corrupt run.json leaves its fields unknown, never throws.
std::vector<RunListing> list_runs(const std::string& runs_dir);

// An earlier run's predicted, simulated and measured figures as its record keeps them
// (RUNDIR/run.json's "comparison" and "memory_comparison"): what the GUI shows for a run chosen
// from the list. Empty where the record is missing, corrupt or has none.
struct RunComparison {
  std::vector<TermRow> terms;
  std::vector<MemoryRow> memory;
};
RunComparison read_run_comparison(const std::string& run_dir);

// ---------------------------------------------------------------- the whole run

struct LaunchRequest {
  std::string model_ref, cluster_ref;  // for the record
  Scenario scenario;
  Layout layout;
  bool scale_down = false;
  ScaleDownOptions scale_options;
  int steps = 10;
  uint64_t seed = 1234;
  std::string data = "synthetic";
  std::string run_dir;            // created when missing
  std::string train_binary;       // empty = locate_train_binary(self_executable())
  std::string train_build_hint;   // where the build put capplan-train, for locate_train_binary
  std::string mpirun;             // empty = $CAPPLAN_MPIRUN, else "mpirun" from PATH
  std::string resume = "never";   // auto | never | PATH, passed to capplan-train
  int checkpoint_every = 0;       // 0 = every ceil(steps / 4) steps, so a cancelled run can resume
  double timeout_s = 0;           // > 0: stop the job after this long; the run then failed ("timed out")
  int max_ranks = 0;              // 0 = max(8, 2 * cores): more ranks than that is refused
  bool shrink_to_max_ranks = false;  // instead of refusing, shrink_layout(layout, max_ranks) first
  int threads = 0;                // per rank; 0 = trainer default
  std::string backend = "auto";   // capplan-train --backend: auto | cpu | cuda
  bool measure_machine = true;    // time GEMM and memcpy for the local cluster spec
  double stated_gemm_peak_gflops = 0;    // > 0: use this fp32 peak (whole machine) instead
  double stated_memory_gbyte_per_s = 0;  // > 0: use this copy bandwidth instead
  std::string hostfile;           // Open MPI hostfile: ranks over these hosts (plain SSH access)
  // Measured kernel and collective times of this machine (capplan profile --measure): the
  // prediction uses them instead of the probed peak and bandwidth.
  std::shared_ptr<const DeviceProfile> device_profile;
};

struct PreparedRun {
  RunRecord record;         // status NotStarted, predicted and simulated filled
  TrainCommand train;
  std::string metrics_file; // RUNDIR/metrics.jsonl
  std::string log_file;     // RUNDIR/output.log
  double timeout_s = 0;     // from the request
};

// Checks the request (ranks allowed on this machine, check_layout on what will run, memory per
// rank against RAM, capplan-train and mpirun present, RUNDIR writable), scales it down when asked,
// predicts and simulates it, and writes RUNDIR/model.yaml, plan.yaml (the scaled run on this
// machine's cluster spec) and command.txt. Every problem
// found is a diagnostic (the CLI prints them and exits 2); nothing is started.
Loaded<PreparedRun> prepare_run(const LaunchRequest& request);

// Both are called on the thread running execute_run (a GUI posts them to its own thread).
struct RunCallbacks {
  OutputLineFn on_output;                                  // capplan-train / mpirun output lines
  std::function<void(const MetricsRecord&)> on_metrics;   // each new metrics record, in order
};

// Starts the prepared command, streams its output (also to RUNDIR/output.log) and metrics, waits,
// reads the measured figures, and writes the run record whatever happened (succeeded, failed,
// cancelled via *cancel). Returns the record as written.
RunRecord execute_run(const PreparedRun& prepared, const RunCallbacks& callbacks,
                      const std::atomic<bool>* cancel = nullptr);

// ---------------------------------------------------------------- on a Slurm cluster

struct SlurmOptions {
  std::string partition;     // empty = the cluster's default partition
  std::string account;       // empty = the user's default
  std::string time_limit;    // HH:MM:SS (or D-HH:MM:SS); empty = the partition's
  int nodes = 0;             // 0 = the plan's node count
  int requeue = 3;           // a failed attempt requeues the job while fewer than this were
  double poll_s = 1.0;       // squeue / scontrol polling period while following
  double gflops_tolerance = 0.1;  // the health check passes a node at >= this x the expected GEMM figure
};

// What `capplan run --slurm` submits: the prepared run (checks, prediction, RUNDIR), the job
// script and the sbatch command.
struct PreparedSlurmRun {
  PreparedRun run;
  SlurmOptions options;
  std::string job_script;                 // RUNDIR/job.sbatch (export_sbatch's text)
  std::vector<std::string> sbatch_argv;   // sbatch --parsable ... job.sbatch, run in RUNDIR
  double checkpoint_bytes = 0;            // one checkpoint of this run (planner's state bytes)
  std::string sbatch, squeue, scontrol, scancel, sacct, sinfo;  // resolved paths ("" = absent)
};

// prepare_run's checks and files, plus: sbatch (and squeue, scontrol, scancel) on PATH, the
// partition known to Slurm with enough nodes for the plan, a time limit of at least one
// checkpoint interval (checkpoint_every x the predicted step time), and RUNDIR/job.sbatch
// written. Every problem is a diagnostic; nothing is submitted.
Loaded<PreparedSlurmRun> prepare_slurm_run(const LaunchRequest& request, const SlurmOptions& options);

// Submits with `sbatch --parsable` (from RUNDIR, so the job's working directory is RUNDIR);
// returns the job id, or empty with *error set.
std::string submit_slurm_job(const PreparedSlurmRun& prepared, std::string* error);

struct SlurmCallbacks {
  OutputLineFn on_output;                                      // the job's output file, line by line
  std::function<void(const MetricsRecord&)> on_metrics;       // each new metrics record
  std::function<void(const SlurmStateChange&, int queue_position)> on_state;  // 0 = not pending
};

// Follows job `job_id` until it leaves the queue for good (squeue while it is queued or running,
// scontrol / sacct after), streaming its output and metrics; *cancel runs scancel and waits for
// the job to end. Writes the run record (with the job, its states, attempts and goodput)
// whatever happens, and returns it.
RunRecord follow_slurm_job(const PreparedSlurmRun& prepared, const std::string& job_id,
                           const SlurmCallbacks& callbacks, const std::atomic<bool>* cancel = nullptr);

// For --attach: the prepared run rebuilt from RUNDIR (plan.yaml, job.sbatch) and the job's
// details from Slurm; RUNDIR empty = the job's working directory as Slurm reports it.
Loaded<PreparedSlurmRun> attach_slurm_run(const std::string& job_id, const std::string& run_dir);

// The attempts and goodput of a Slurm run from its output file's "capplan: ..." lines and the
// metrics records (several attempts appended to one file). Exposed for tests.
std::vector<SlurmAttempt> slurm_attempts(const std::vector<std::string>& output_lines,
                                         const std::vector<MetricsRecord>& records);
Goodput compute_goodput(const std::vector<SlurmAttempt>& attempts, const std::vector<MetricsRecord>& records,
                        const std::string& finished_utc);

}  // namespace capplan::rt
