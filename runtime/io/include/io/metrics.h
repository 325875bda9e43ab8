// Run metrics for capplan-train as JSON lines (one object per line, flushed per line): a start
// record, per-step records, per-rank system samples, and a final summary (also on failure), with
// the names of io/metrics_schema.h.
// SystemSampler reads this process's /proc files every 500 ms on a background thread; the GEMM
// probe measures the CPU's fp32 peak once. No MPI: the trainer gathers sampler lines to rank 0.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <limits>
#include <cstdio>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "planner/json_fwd.h"

namespace capplan::rt {

struct StartRecord {  // "type":"start"
  std::string model;            // model name
  int64_t parameters = 0;
  int world = 1, dp = 1, tp = 1, pp = 1, zero = 0, mbs = 1;
  int64_t gbs = 0;
  int seq_len = 0;
  int threads = 0;              // per rank
  int batch_split = 1;          // parts each micro-batch is split into over the threads (1: the
                                // threads split every kernel instead)
  std::string backend;          // "cpu", "cuda"
  std::vector<std::string> rank_hosts;  // rank r runs on rank_hosts[r] (rank mapping)
  double peak_flops_per_s = 0;  // per rank; 0 = unknown
  std::string peak_flops_source;
  int64_t resumed_from_step = -1;  // -1 = fresh start
};

struct StepRecord {  // "type":"step"
  int64_t step = 0;
  double loss = 0;              // global mean over the global batch
  double tokens_per_s = 0;      // global
  double lr = 0;
  double grad_norm = 0;
  double step_time_s = 0;
  double model_flops_per_s = 0; // per rank
  double mfu = 0;               // model_flops_per_s / peak; NaN when the peak is unknown
  std::string peak_flops_source;
  double forward_s = 0, backward_s = 0;  // walls of the passes (the terms below inside them)
  // The terms of the step (of rank terms_rank, the rank with the most compute: the critical
  // path), which add up to step_time_s (io/metrics_schema.h): compute
  // is the passes less everything else timed in them; recompute and offload exclude the
  // communication inside them; bubble is the pipeline's waiting for a neighbour, pp_comm the
  // moving of its messages; tp_comm and dp_comm are all of the step's TP and DP communication.
  double compute_s = 0, recompute_s = 0, tp_comm_s = 0, pp_comm_s = 0, bubble_s = 0;
  double dp_comm_s = 0, optimizer_s = 0, offload_s = 0, data_s = 0, remainder_s = 0;
  double ep_comm_s = 0, cp_comm_s = 0;  // MoE all-to-alls (ep group), the context-parallel ring (cp group)
  int terms_rank = 0;  // the world rank whose step time, passes and terms these are
  double gemm_s = 0;  // of the step, time in the backend's GEMMs (rank terms_rank, its first thread;
                      // inside fwd/bwd)
  // Batch split over threads only (else NaN, not written): time rank 0's threads spent waiting
  // for each other at the end of the parts, mean over the threads (inside backward).
  double split_wait_s = std::numeric_limits<double>::quiet_NaN();
  // Pipeline bubble: the share of the micro-batch phase the ranks spent waiting for their
  // neighbours, mean over ranks; NaN (written as null) with pp = 1.
  double bubble_fraction = std::numeric_limits<double>::quiet_NaN();
  // After the step, outside its time: the cores' one-way cache-line latency between the first
  // two ranks of rank 0's node, in ns (train/communicator.h CoreLatencyProbe); NaN (not written)
  // where it was not measured.
  double core_latency_ns = std::numeric_limits<double>::quiet_NaN();
};

struct SummaryRecord {  // "type":"summary"
  std::string status = "ok";  // "ok", "failed", "aborted"
  std::string reason;         // why it failed; empty when ok
  int64_t steps = 0;          // steps completed in this run
  double wall_s = 0;
  double final_loss = 0;
  double mean_tokens_per_s = 0;
};

// Rank 0's writer. Every line is written with one fwrite and flushed. If the object is destroyed
// without write_summary(), it writes a summary with status "aborted".
class MetricsWriter {
 public:
  MetricsWriter() = default;
  ~MetricsWriter();
  MetricsWriter(const MetricsWriter&) = delete;
  MetricsWriter& operator=(const MetricsWriter&) = delete;

  // Truncates the file, or with `append` (a resumed run) adds to it: the report then takes each
  // step from the newest run that recorded it.
  bool open(const std::string& path, std::string* error, bool append = false);
  bool is_open() const { return file_ != nullptr; }
  void write_start(const StartRecord& r);
  void write_step(const StepRecord& r);
  void write_line(const std::string& json);  // e.g. system samples gathered from the ranks
  void write_record(const Json& record);     // one line
  void write_summary(const SummaryRecord& r);
  void close();

 private:
  std::FILE* file_ = nullptr;
  bool summary_written_ = false;
};

// What /proc says about this process at one instant.
struct ProcSample {
  double time_s = 0;          // CLOCK_MONOTONIC
  double cpu_time_s = 0;      // utime + stime (/proc/self/stat fields 14, 15)
  int64_t rss_bytes = 0;      // VmRSS (/proc/self/status)
  int64_t io_read_bytes = 0;  // read_bytes (/proc/self/io; storage-level), else rchar
  int64_t io_write_bytes = 0; // write_bytes, else wchar
  bool ok = false;
};
ProcSample proc_sample_self();

// Samples this process every `interval_ms` on its own thread into JSON lines:
// {"type":"system","rank":r,"time_s":t (since start),"cpu_util":u,"cpu_cores_used":c,
//  "rss_bytes":..,"io_read_bytes":..,"io_write_bytes":.. [,extra fields]}
// cpu_util = (delta CPU time / delta wall time) / cores_expected, in [0, ~1]; cores_expected is the
// trainer's thread count (default: CPUs in this process's affinity mask). I/O bytes are cumulative.
class SystemSampler {
 public:
  using ExtraFields = std::function<void(Json&)>;  // GPU utilisation/memory, when present
  SystemSampler(int rank, int cores_expected = 0, int interval_ms = 500, ExtraFields extra = {});
  ~SystemSampler();  // stops
  void start();
  void stop();
  std::vector<std::string> drain();  // lines sampled since the last drain, oldest first

 private:
  void run();
  int rank_, interval_ms_;
  double cores_expected_;
  ExtraFields extra_;
  std::thread thread_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  bool running_ = false;
  std::vector<std::string> lines_;
};

// A measured fp32 peak: the best of `repeats` runs of an n x n x n GEMM through `gemm`
// (C = A * B, row-major, the backend's own GEMM), 2 n^3 FLOPs each. It under-states the
// datasheet peak (memory effects, thread start-up) and is stated as "measured", never guessed.
struct PeakFlops {
  double flops_per_s = 0;  // 0 = unknown
  std::string source;      // "measured: fp32 GEMM probe 1024^3, best of 5, 2 threads"
};
using GemmFn = std::function<void(int m, int n, int k, const float* a, const float* b, float* c)>;
PeakFlops measure_peak_flops(const GemmFn& gemm, int n = 1024, int repeats = 5, int threads = 0);

// Model FLOPs per token for training (forward + backward): 6 * N + 12 * layers * attention_width *
// seq_len, attention_width = heads x head_dim, the hidden size unless the head size is set apart
// (PaLM, Chowdhery et al. 2022, appendix B: 12 L H Q T; llm.c's estimate_mfu uses the same).
// Over-counts the attention term by ~2x for causal attention (the masked half is counted) and
// excludes recompute.
double model_flops_per_token(int64_t parameters, int layers, int seq_len, int attention_width);

}  // namespace capplan::rt
