// A device profile: kernel and collective times measured on one device (`capplan profile
// --measure`, which runs the runtime's own kernels there), with the curves fitted to them. The
// cost model uses it instead of its datasheet roofline (`--device-profile FILE`): a GEMM of a
// measured shape takes its measured time, any other GEMM the fitted line t = t0 + FLOPs / peak,
// memory-bound kernels the measured bandwidth, collectives of a measured group size the fitted
// bandwidth and latency.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "planner/diagnostics.h"
#include "planner/spec.h"

namespace capplan {

struct GemmTiming {
  std::string name;  // e.g. "qkv forward", "fc2 weight-gradient"
  int64_t m = 0, n = 0, k = 0;
  double seconds = 0;  // median of the repeats
};

// The context-parallel ring whose attention a profile times ("ring attention forward" and
// "... backward": one rank of a ring of this many over the profile's sequence); a cp layout's
// attention is scaled from it.
constexpr int kProfileRingCp = 2;

struct KernelTiming {
  std::string name;  // layernorm forward, gelu backward, attention forward, ...
  double bytes = 0;  // bytes read and written by the kernel as the cost model counts them
  double seconds = 0;
};

struct CollectiveTiming {
  // all-reduce, reduce-scatter, all-gather, send-recv; all-gather-v (cold only): capplan-train's
  // ZeRO-3 gather, each rank's part from its shard out of place into the layer buffer (both from
  // memory: the layer's compute runs between two gathers into it)
  std::string op;
  int ranks = 0;
  double bytes = 0;  // per rank (the buffer each rank passes)
  double seconds = 0;
  // Timed on buffers that come from memory (each call takes the next of copies filling the
  // last-level cache twice), as a data-parallel collective finds the gradients or weights a pass
  // left behind; otherwise on one buffer, warm in the caches, as an activation just computed is.
  bool cold = false;
};

// t = latency + bus_bytes / bandwidth for one collective and group size, bus_bytes being what a
// ring moves per rank (2 (n-1)/n B for an all-reduce, (n-1)/n B for the others, B point to point).
struct CollectiveFit {
  std::string op;
  int ranks = 0;
  double bandwidth_gbyte_per_s = 0;
  double latency_us = 0;
};

// How long an all-reduce of `allreduce_bytes` (a layer's activation) holds CPU ranks that meet in
// it after each half of a layer's forward and of its backward while computing the layer's GEMMs,
// as tensor-parallel ranks do: its own time and the wait for the last rank of its group to
// arrive. 0 bytes: not measured.
struct LockstepTiming {
  int group = 0;  // ranks meeting in each all-reduce (0: all the ranks measured)
  double allreduce_bytes = 0;
  double allreduce_s = 0;
  // The ranks' time in their compute meanwhile (a layer's GEMMs and kernels between its
  // collectives) over the same compute's time on a core of their own
  // (>= 1; 0: not measured): where more ranks are runnable than there are cores between two
  // collectives, a rank's compute itself stretches.
  double compute_stretch = 0;
  std::string how;
  // With a core each and 2 ranks: the same for a context ring's exchange of `exchange_bytes` (a
  // point-to-point swap of the K and V block, posted before the segment and received after it,
  // as capplan-train's RingAttention makes it) in place of the all-reduce. 0 bytes: not measured.
  double exchange_bytes = 0;
  double exchange_s = 0;
  // The optimizer's gradient exchange (as SharedExchangeTiming's, in the group's ranks) of
  // `gradient_exchange_bytes` per rank, made right after the segments' compute as capplan-train
  // makes it after a step's backward, every group at once: the slowest rank's time, the median of
  // the rounds. 0 bytes: not measured.
  double gradient_exchange_bytes = 0;
  double gradient_exchange_s = 0;
  // The same for ZeRO-1's exchange (capplan-train's Optimizer with --zero 1): the reduce-scatter
  // and the norm's gather right after compute, then the all-gather of the weights after AdamW's
  // sweep over the rank's shard; the collectives' time (the step's left out). 0: not measured.
  double zero1_exchange_s = 0;
  // With a core each: the same for sequence parallelism's pair of collectives (Korthikanti et al.
  // 2022 Sec 4.2.2: the sequence-split activation all-gathered before the segment and the
  // segment's output reduce-scattered after it, each rank's part `sp_bytes`, as capplan-train runs
  // them under --sp) in place of the all-reduce: the time the rank computing longest spends in one
  // such pair. 0 bytes: not measured.
  double sp_bytes = 0;
  double sp_s = 0;
};

// The data-parallel gradient exchange as capplan-train's optimizer calls it (an in-place
// reduce-scatter, the gradient norm's gather, an in-place all-gather) of `bytes` per rank, in
// groups of `group` consecutive ranks, every group of the host's ranks at once, on buffers from
// memory: measured where the ranks outnumber the cores, so the time is already the shared cores'.
struct SharedExchangeTiming {
  int group = 0;
  double bytes = 0;
  double seconds = 0;
};

// How the host's cores run `ranks` CPU ranks, more than they number, each running a layer's
// forward and backward GEMMs: the fraction of the processor-sharing ideal (n ranks on c cores each at c/n of a
// core) they reach computing side by side (against `cores` of them computing alone while the
// others sleep); the lockstep all-reduce in groups of each measured
// size (the ranks split into groups of consecutive ranks, every group meeting at once, as a
// layout's tensor-parallel groups do); and how long a pipeline's hand-off of the same activation
// takes there (one rank sends it to another that waits in the runtime's nap while the others
// compute; half a ping-pong's round trip).
struct SharedCoresTiming {
  int ranks = 0;
  double free_efficiency = 0;
  double handoff_s = 0;                  // 0: not measured
  std::vector<LockstepTiming> lockstep;  // by group size, ascending
  std::string how;
  double handoff_lockstep_s = 0;         // the hand-off beside pairs in lockstep; 0: not measured
  std::vector<SharedExchangeTiming> exchange{};  // by group size, then bytes; empty: not measured
  // The optimizer step of every rank at once right after their gradient exchange among all of
  // them, as capplan-train's ranks of a data-parallel layout take it (AdamW over
  // `optimizer_bytes` as the "adamw" kernel counts them): the ranks' mean time in it, and the
  // same step's with a core each (the first `cores` ranks while the others sleep). 0 bytes: not
  // measured.
  double optimizer_bytes = 0;
  double optimizer_s = 0;
  double optimizer_alone_s = 0;
};

// How far the measurements moved between the profile's rounds (capplan-train measure repeats its
// whole list of GEMMs, kernels and collectives `rounds` times and keeps each timing's median): the
// relative standard deviation over the rounds of each round's summed GEMM, kernel and collective
// times. The host's own noise while it was measured; an estimate's band carries it
// (band_spreads). 0 rounds: not recorded (profiles written before it).
struct RoundSpread {
  int rounds = 0;
  double gemms = 0, kernels = 0, collectives = 0;
};

// CPU ranks: how long a cache line took from one core to the other between the first two ranks,
// one way, in nanoseconds (capplan-train's CoreLatencyProbe, runtime/train communicator.h), over
// the samples taken while the profile measured (before each round and around the lockstep timing)
// or after each step of a run: the median, least and most. The ranks' collectives on one host move
// through the caches at this latency, and on a virtual machine the hypervisor moves it (on a 2-core
// KVM host between about 30 and 160 ns, seconds apart). samples 0: not measured (a GPU, one rank,
// ranks taking turns on the cores, or a profile written before it).
struct CoreLatency {
  int samples = 0;
  double median_ns = 0, min_ns = 0, max_ns = 0;
  int apart = 0;  // samples more than twofold above or below the median
  // A profile's: the samples right before and right after its lockstep timing (which prices the
  // tensor-parallel all-reduce and the context ring); 0: not measured.
  double lockstep_before_ns = 0, lockstep_after_ns = 0;
};
// The finite, positive samples' median, least and most, and how many lie apart from the median.
CoreLatency summarize_core_latency(const std::vector<double>& samples_ns);
// Whether two of these latencies lie more than twofold apart, both measured (finite and
// positive): the host's two placements differ about fivefold, a placement's own samples by far
// less. The one rule for a sample apart, a move during the profile's lockstep timing (which
// capplan-train measure then takes again) and a move between a profile and a run.
bool core_latency_moved(double a_ns, double b_ns);

// The backend threads capplan-train gives each of `ranks_on_host` CPU ranks on `cores` cores
// (its own run and capplan-train measure alike): the cores over the ranks, at least 1.
inline int cpu_rank_threads(int cores, int ranks_on_host) { return std::max(1, cores / std::max(1, ranks_on_host)); }

struct DeviceProfile {
  std::string device;       // what it was measured on ("cpu: <model name>, 2 cores" or the GPU's name)
  std::string gpu;          // the GpuSpec name this device stands for ("cpu-rank" for CPU ranks)
  std::string backend;      // cpu | cuda
  std::string created_utc;  // ISO 8601
  std::string how;          // how it was measured, in words
  int ranks = 1;            // ranks that shared the device while it was measured
  // CPU ranks: the host's cores (online when measured), which the ranks of a run time-share when
  // they outnumber them (cost_model_cores.cpp); 0 for a GPU, or a profile that does not say.
  int cores = 0;
  // CPU ranks: the backend threads each rank measured with (capplan-train measure: the cores over
  // the ranks, at least 1); 0: not recorded (max(1, cores / ranks) is taken).
  int threads = 0;
  // The largest resident set of one rank while it measured (bytes; 0: not recorded). `capplan
  // profile --measure` bounds the ranks of its shared-core runs by the host's available memory
  // with it.
  double peak_rank_bytes = 0;
  // CPU ranks in lockstep with a core each (the profile's `ranks`; capplan-train measure).
  LockstepTiming lockstep;
  // CPU ranks: how the host's cores run more ranks than they number (capplan-train measure
  // --shared-cores; capplan profile --measure takes twice and four times the cores), by ranks,
  // ascending.
  std::vector<SharedCoresTiming> shared;
  RoundSpread spread;
  CoreLatency core_latency;
  // The shape the per-kernel times were taken at.
  std::string model;
  int hidden = 0, heads = 0, ffn_hidden = 0, vocab = 0, seq = 0, mbs = 0, tp = 1;
  int head_dim = 0;  // 0: hidden / heads (a profile that does not say)
  int head_dim_or_default() const { return head_dim > 0 ? head_dim : heads > 0 ? hidden / heads : 0; }
  // The backend threads each rank measured with (`threads`, or what capplan-train measure gave
  // them before it recorded it).
  int threads_or_default() const { return threads > 0 ? threads : cpu_rank_threads(cores, ranks); }
  std::vector<GemmTiming> gemms;
  std::vector<KernelTiming> kernels;
  std::vector<CollectiveTiming> collectives;
  // Fitted curves.
  double gemm_peak_gflops = 0;      // per rank: the slope of the GEMM line
  double gemm_overhead_us = 0;      // per GEMM: its intercept
  double memory_gbyte_per_s = 0;    // per rank: memory-bound kernels
  std::vector<CollectiveFit> fits;

  // Measured time of a GEMM of this shape (the mean when several share it), or negative when
  // not measured.
  double gemm_seconds(double m, double n, double k) const;
  // Measured time of the kernel of this name, or negative when not measured.
  double kernel_seconds(const std::string& name) const;
  // Ranks sharing the host's cores (the shared measurements, interpolated linearly in the ranks
  // between the two measured counts around `ranks`, the nearest beyond them), or -1 when not
  // measured: how long an all-reduce of ranks in lockstep in groups of `group` holds them (the
  // measured group size nearest to it), and a pipeline's hand-off (with `lockstep`, the one
  // measured beside ranks in lockstep where the profile has it: a tensor-parallel pipeline's);
  // and the fraction of the processor-sharing ideal the ranks reach computing side by side.
  double shared_allreduce_s(int ranks, int group) const;
  double shared_free_efficiency(int ranks) const;
  // How much longer a rank's optimizer step takes where `ranks` ranks take theirs at once right
  // after their gradient exchange on the shared cores than with a core each (SharedCoresTiming's
  // optimizer_s over optimizer_alone_s, interpolated in ranks); -1: not measured.
  double shared_optimizer_stretch(int ranks) const;
  double shared_compute_stretch(int ranks, int group) const;
  double shared_handoff_s(int ranks, bool lockstep = false) const;
  // The gradient exchange of `bytes` per rank in groups of `group` among exactly `ranks` ranks on
  // the shared cores (SharedExchangeTiming), linear in the bytes between the measured sizes and
  // beyond the largest two; -1 where that many ranks or that group size was not measured.
  double shared_exchange_s(int ranks, int group, double bytes) const;
  // How much longer the gradient exchange in groups of `group` among `ranks` ranks on the host
  // takes right after compute than the same exchange timed on its own (the lockstep's
  // gradient_exchange over shared_exchange_s where the ranks outnumber the cores, else the 2-rank
  // lockstep's over the cold "gradient-exchange" collective): >= 1; 1 where either is not measured.
  // `zero1`: ZeRO-1's exchange (zero1_exchange_s) where the lockstep timed it, else ZeRO-0's.
  double exchange_after_compute(int ranks, int group, bool zero1 = false) const;
  // The fitted collective of `op` with the group size nearest to `ranks`; nullptr when none.
  const CollectiveFit* fit(const std::string& op, int ranks) const;
  // The measured time of `op` among `ranks` ranks for a buffer of `bytes`, interpolated linearly
  // between the two measured sizes around it (beyond the largest: the last two sizes' line; below
  // the smallest: its time); -1 when that op was not measured with that many ranks. `cold`: the
  // times on buffers from memory where the profile has them (else the warm ones).
  double collective_seconds(const std::string& op, int ranks, double bytes, bool cold = false) const;
};

// Least-squares fits of a profile's curves from its timings (what `profile --measure` calls after
// measuring): the GEMM line over the GEMMs, the bandwidth over the kernels, each collective's line.
void fit_device_profile(DeviceProfile& p);

std::string device_profile_yaml(const DeviceProfile& p);
Loaded<DeviceProfile> parse_device_profile_yaml(const std::string& text, const std::string& file);
Loaded<DeviceProfile> load_device_profile(const std::string& path);

// A profile used with a scenario must come from the scenario's GPU and from the model's block
// shape (hidden, heads, FFN width): an error naming both otherwise, empty when it applies.
std::string device_profile_mismatch(const DeviceProfile& p, const ModelSpec& model, const ClusterSpec& cluster,
                                    const std::string& file);

}  // namespace capplan
