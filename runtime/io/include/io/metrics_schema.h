// The metrics file's schema, in one place: capplan-train writes one JSON object per line
// (MetricsWriter), and the report and the launcher read them back, all with these names. A line's
// "type" names the record; numbers that are not finite are null (planner/json.h). Times are in
// seconds of one step, on rank 0 unless said otherwise.
#pragma once

namespace capplan::rt::metrics_schema {

// The record types: "start" once per run (a resumed run writes another), "step" once per
// optimizer step, "system" per-rank /proc samples, "placement" per rank after the start record,
// "summary" last (also on failure: status "failed" or "aborted").
inline constexpr char kType[] = "type", kStart[] = "start", kStep[] = "step", kSystem[] = "system";
inline constexpr char kPlacement[] = "placement", kSummary[] = "summary";

// start: the model and layout, the threads, the hosts of the ranks (rank_hosts[r]), the peak the
// MFU is against (per rank; null = unknown) and the step resumed from (-1 = fresh start).
inline constexpr char kModel[] = "model", kParameters[] = "parameters", kWorld[] = "world", kDp[] = "dp";
inline constexpr char kTp[] = "tp", kPp[] = "pp", kZero[] = "zero", kMbs[] = "mbs", kGbs[] = "gbs";
inline constexpr char kSeq[] = "seq_len", kThreads[] = "threads", kBatchSplit[] = "batch_split";
inline constexpr char kBackend[] = "backend", kRankHosts[] = "rank_hosts", kPeakFlopsPerS[] = "peak_flops_per_s";
inline constexpr char kPeakFlopsSource[] = "peak_flops_source", kResumedFromStep[] = "resumed_from_step";

// step: the loss (global mean; null when NaN), global tokens/s, per-rank model FLOP/s and MFU
// (null when the peak is unknown), the phases, the batch split's wait (only with it) and the
// pipeline bubble (mean over ranks; null with pp = 1). The step time, the passes and the terms
// are those of rank terms_rank (the rank with the most compute), and the terms add up to it: step_time_s = compute_s + recompute_s + tp_comm_s + pp_comm_s + bubble_s + dp_comm_s +
// ep_comm_s + cp_comm_s + optimizer_s + offload_s + data_s + remainder_s (forward_s and backward_s are the walls of the
// two passes, with the terms inside them; gemm_s and split_wait_s lie within compute_s).
inline constexpr char kStepNumber[] = "step", kLoss[] = "loss", kTokensPerS[] = "tokens_per_s", kLr[] = "lr";
inline constexpr char kGradNorm[] = "grad_norm", kStepTimeS[] = "step_time_s", kModelFlopsPerS[] = "model_flops_per_s";
inline constexpr char kMfu[] = "mfu", kForwardS[] = "forward_s", kBackwardS[] = "backward_s";
inline constexpr char kOptimizerS[] = "optimizer_s", kDpCommS[] = "dp_comm_s", kDataS[] = "data_s", kGemmS[] = "gemm_s";
inline constexpr char kSplitWaitS[] = "split_wait_s", kBubbleFraction[] = "bubble_fraction";
inline constexpr char kComputeS[] = "compute_s", kRecomputeS[] = "recompute_s", kTpCommS[] = "tp_comm_s";
inline constexpr char kPpCommS[] = "pp_comm_s", kBubbleS[] = "bubble_s", kOffloadS[] = "offload_s";
inline constexpr char kRemainderS[] = "remainder_s", kEpCommS[] = "ep_comm_s", kCpCommS[] = "cp_comm_s";
inline constexpr char kTermsRank[] = "terms_rank";
// After the step, outside its time (only where it was measured): how long a cache line took from
// one core to the other between the node's first two ranks, one way, in nanoseconds
// (CoreLatencyProbe, train/communicator.h; rank 0's node).
inline constexpr char kCoreLatencyNs[] = "core_latency_ns";
// The terms that add up to step_time_s, in the order above.
inline constexpr const char* kStepParts[] = {kComputeS, kRecomputeS, kTpCommS,   kPpCommS,    kBubbleS, kDpCommS,
                                             kEpCommS,  kCpCommS,    kOptimizerS, kOffloadS, kDataS,   kRemainderS};

// system: per rank, time since the sampler started, CPU use, resident and I/O bytes.
inline constexpr char kRank[] = "rank", kTimeS[] = "time_s", kCpuUtil[] = "cpu_util";
inline constexpr char kCpuCoresUsed[] = "cpu_cores_used", kRssBytes[] = "rss_bytes";
inline constexpr char kIoReadBytes[] = "io_read_bytes", kIoWriteBytes[] = "io_write_bytes";

// placement: where each rank runs (rank, host, local_rank, dp, pp, tp) and the bytes it
// allocated, by kind.
inline constexpr char kHost[] = "host", kLocalRank[] = "local_rank", kParamBytes[] = "param_bytes";
inline constexpr char kGradBytes[] = "grad_bytes", kBuffersBytes[] = "buffers_bytes", kOptimizerBytes[] = "optimizer_bytes";
inline constexpr char kActivationDeviceBytes[] = "activation_device_bytes";
inline constexpr char kActivationWorkingBytes[] = "activation_working_bytes";  // shared working buffers
inline constexpr char kActivationHostBytes[] = "activation_host_bytes", kSplitGradBytes[] = "split_grad_bytes";

// summary: "ok", "failed" or "aborted", why, and the run's totals.
inline constexpr char kStatus[] = "status", kReason[] = "reason", kSteps[] = "steps", kWallS[] = "wall_s";
inline constexpr char kFinalLoss[] = "final_loss", kMeanTokensPerS[] = "mean_tokens_per_s";

}  // namespace capplan::rt::metrics_schema
