// The analytical cost model: memory per GPU by kind and time per training step by term, for one
// layout of one scenario. Every formula cites its source in cost_model.cpp. It does not search
// (search.h) and does not simulate contention between groups (simulator/).
#pragma once

#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "planner/spec.h"

namespace capplan {

// Everything about a training job except its layout.
struct Scenario {
  ModelSpec model;
  ClusterSpec cluster;
  TrainingSpec training;
  int nodes = 0;
  int gpus = 0;  // 0 = nodes * gpus_per_node; fewer lets a run use part of a node

  int seq_len() const { return training.seq_len > 0 ? training.seq_len : model.seq_len; }
  int total_gpus() const { return gpus > 0 ? gpus : nodes * cluster.gpus_per_node; }
  // The attention kernel the step runs: the one asked for (--attention, `training: attention`),
  // else the framework's, where this GPU and head size run it; a framework's FlashAttention that
  // cannot run here falls back to the fused softmax (attention_fallback says why).
  Attention attention() const;
  // Why the framework's attention is not the one the step runs (empty when it is, or when the
  // attention was asked for).
  std::string attention_fallback() const;
};

struct MemoryBytes {  // per GPU, bytes
  double weights = 0;
  double gradients = 0;
  double optimizer = 0;    // fp32 master weights + Adam moments, after ZeRO sharding
  double activations = 0;  // peak, for the micro-batches the schedule keeps in flight
  double buffers = 0;      // communication buckets, workspace, allocator margin
  double total = 0;
  double capacity = 0;     // the GPU's memory
};

struct TimeBreakdown {  // seconds per step on the critical path (hidden time not counted)
  double compute = 0;
  double recompute = 0;
  double bubble = 0;
  double tp_comm = 0;
  double pp_comm = 0;
  double dp_comm = 0;
  double optimizer = 0;
  double offload = 0;
  double ep_comm = 0;  // exposed expert-parallel all-to-alls (MoE dispatch and combine)
  double cp_comm = 0;  // exposed part of the context-parallel ring's K/V exchange
  double sum() const {
    return compute + recompute + bubble + tp_comm + pp_comm + dp_comm + optimizer + offload +
           ep_comm + cp_comm;
  }
};

struct Estimate {
  Layout layout;
  int64_t num_microbatches = 0;
  bool fits = false;
  std::string reason;  // why it does not fit; empty when it fits
  MemoryBytes memory_per_gpu_bytes;
  // Host memory per node that offloading takes (activations, weights, optimizer state, gradient
  // shards of its GPUs), and the usable part of the node's (80 % of host_memory_gib; 0: unknown).
  double host_memory_per_node_bytes = 0;
  double host_memory_capacity_bytes = 0;
  double step_time_s = 0;
  TimeBreakdown breakdown_s;
  // Of compute and recompute, the time in the linear layers' and the LM head's GEMMs (the matrix
  // multiplies a backend runs, the attention core not included; under fp8 with their inputs'
  // casts, which the model prices with them), on the same stage: to set beside a run's measured
  // `gemm` phase. NaN for an MoE model.
  double gemm_s = 0;
  double bubble_fraction = 0;  // bubble / step time
  double samples_per_s = 0;
  double tokens_per_s = 0;
  double model_tflops_per_gpu = 0;     // 6N-style model FLOPs incl. attention, no recompute
  double hardware_tflops_per_gpu = 0;  // with recompute
  // With a whole forward of the layers recomputed whatever the layout recomputes: Megatron's
  // Eq. 3 count (Narayanan et al. 2021, Appendix: 96 = four passes of 24), the convention of
  // published TFLOP/s that "include the recompute"; hardware_tflops_per_gpu under full recompute.
  double eq3_tflops_per_gpu = 0;
  double mfu = 0;                      // model_tflops_per_gpu / peak
  double tokens = 0;                   // tokens to train
  bool tokens_defaulted = false;       // true when 20 tokens per parameter was assumed
  double days_to_train = 0;
  double cost_usd = 0;  // NaN when the cluster has no price
  int gpus = 0;
  int nodes = 0;
  // The band from the uncertainty of the model's constants (band_spreads() below), 10th and 90th
  // percentiles: p10 is the faster (cheaper) end. Days and dollars scale with the step time.
  double step_time_s_p10 = 0, step_time_s_p90 = 0;
  double days_to_train_p10 = 0, days_to_train_p90 = 0;
  double cost_usd_p10 = 0, cost_usd_p90 = 0;  // NaN when the cluster has no price
  bool as_good_as_best = false;  // plan: its band overlaps the best candidate's
  std::string framework;         // the implementation it was costed for (FrameworkSpec::name)
  // The training knobs it was costed with (the attention is the effective one,
  // Scenario::attention; attention_fallback says why it is not the framework's, or is empty).
  Attention attention = Attention::Fused;
  std::string attention_fallback;
  Precision precision = Precision::Bf16;
  Optimizer optimizer = Optimizer::Adam;
  bool offload_params = false, offload_optimizer = false;
};

// Relative spread (one standard deviation) of each uncertain input of an estimate, and where it
// comes from. The band propagates them one at a time (step time at +sigma and -sigma, half the
// difference as that input's share) and adds them and the framework's residual in quadrature.
// With a device profile the inputs are its measured times: their spreads are the profile's round
// spread (DeviceProfile::spread), propagated to first order over the terms they price, and a
// profile of CPU ranks has the local model's measured residual in place of the framework's.
struct BandSpreads {
  double gemm = 0;        // GEMM efficiency
  double memory = 0;      // HBM efficiency of the memory-bound kernels
  double network = 0;     // NVLink and NIC efficiency of the collectives
  double flash = 0;       // FlashAttention's rate (under attention flash)
  double framework = 0;   // the implementation's residual (FrameworkSpec::residual_spread)
};
BandSpreads band_spreads(const Scenario& scenario);

// Bytes of model state per parameter for mixed-precision Adam, before any ZeRO sharding: 16-bit
// weights (fp32 when training in fp32); gradients in fp16 or, with bf16, accumulated and reduced in
// fp32 (Megatron-LM); fp32 master weights + Adam moments, 12 bytes (8 in fp32 training, where the
// weights are the master copy). Rajbhandari et al. 2020 (ZeRO) Sec 3.1. The estimate uses these.
struct StateBytesPerParam {
  double weights = 0;
  double gradients = 0;
  double optimizer = 0;
};
StateBytesPerParam state_bytes_per_param(Precision precision);
// As above for a training spec: SGD keeps no optimizer state; fp8 adds the weights' fp8 copy.
StateBytesPerParam state_bytes_per_param(const TrainingSpec& training);

// Checks the layout against the scenario's hard constraints (dp*tp*pp == GPUs, tp divides heads
// and kv_heads, pp*vp <= layers, vp only with Interleaved, gbs divisible by dp*mbs, order a
// permutation of DPT, zero in 0..3, ...). Returns the first violated constraint, named, or nullopt.
std::optional<std::string> check_layout(const Scenario& scenario, const Layout& layout);
// The first layout knob the implementation does not have (tp, pp, cp or ep above 1, activation
// offload, sequence parallelism, selective recompute, a ZeRO stage, a pipeline schedule;
// FrameworkSpec), named, or nullopt. check_layout
// includes it; the search offers no such layout.
std::optional<std::string> framework_lacks(const FrameworkSpec& framework, const Layout& layout);
// The training knobs against the hardware, before any layout (check_layout includes it): fp8
// without fp8 tensor cores, FlashAttention on a GPU or head size it does not support, offload
// without host memory. `field` is the training key (precision, attention, offload_params, ...).
struct TrainingProblem {
  std::string field;
  std::string message;
};
std::optional<TrainingProblem> check_training(const Scenario& scenario);
// Why context parallelism (cp > 1) does not run on `gpu`, or empty where it does: its ring
// attention needs FlashAttention or cuDNN's fused attention (Ampere and newer), or a CPU rank of
// capplan-train. check_layout refuses cp > 1 elsewhere with it, and the search offers none.
std::string context_parallel_missing(const GpuSpec& gpu);
// Whether the optimizer steps on the host: optimizer offload (ZeRO-Offload), or parameter offload
// under ZeRO-3 (ZeRO-Infinity, FSDP cpu_offload: the step runs where the parameter shards live).
// Its state is then in host memory, not on the GPU.
bool optimizer_steps_on_host(const TrainingSpec& training, const Layout& layout);

// Memory and step time of a valid layout (call check_layout first; an invalid layout returns an
// Estimate with fits = false and the constraint as reason). A layout that does not fit in memory
// still gets its times, so a user can see what it would cost.
Estimate estimate(const Scenario& scenario, const Layout& layout);

// Per-task durations behind the estimate, for the discrete-event simulator: the simulator and the
// cost model use the same numbers, so they cannot silently disagree.
struct ChunkCosts {  // one model chunk (a stage, or one of its vp virtual stages), one micro-batch
  int first_layer = 0;
  int num_layers = 0;
  bool has_embedding = false;
  bool has_head = false;
  double forward_s = 0;          // compute stream, without TP collectives
  double backward_input_s = 0;   // input-gradient GEMMs and memory-bound backward work
  double backward_weight_s = 0;  // weight-gradient GEMMs
  double recompute_s = 0;        // extra forward work before backward (0 without recompute)
  double tp_comm_forward_s = 0;  // TP collectives in forward (blocking, on the critical path)
  double tp_comm_backward_s = 0;
  // Expert-parallel all-to-alls (dispatch + combine of the chunk's MoE layers, blocking) and the
  // exposed part of the context-parallel ring, forward and backward; 0 without ep / cp.
  double ep_comm_forward_s = 0, ep_comm_backward_s = 0;
  double cp_comm_forward_s = 0, cp_comm_backward_s = 0;
  int moe_layers = 0;            // layers of the chunk with experts (average over the model)
  double offload_s = 0;          // device -> host of this micro-batch's activations (PCIe)
  double reload_s = 0;           // host -> device before backward
  double activation_bytes = 0;   // kept from this chunk's forward until its backward
};

struct StepCosts {
  std::vector<ChunkCosts> chunks;  // pp * vp entries; chunk c runs on stage c % pp
  double p2p_s = 0;                // one micro-batch's activation (or its gradient) to the next stage
  // Of p2p_s, the receiving rank's copy (pp_comm); the rest is its wait for the message and a core
  // where CPU ranks outnumber the cores (bubble). Unset (infinite): all of p2p_s.
  double p2p_copy_s = std::numeric_limits<double>::infinity();
  double p2p_bytes = 0;
  double dp_comm_s = 0;            // gradient all-reduce (or ZeRO collectives), whole step, unhidden
  double dp_bytes = 0;
  int dp_buckets = 1;              // gradient buckets, issued as backward proceeds
  bool dp_overlap = true;          // false: one reduction after the stage's last backward (the framework's)
  // The fraction of its time a bucket hidden behind compute still costs (the cost model's
  // overlap prior for collectives beside GEMMs): charged per GPU on the time its buckets overlap
  // its compute stream.
  double dp_hidden_cost = 0;
  // ZeRO-3 with flat-unit ring collectives (Zero3Comm::Ring): the part the layer-by-layer prefetch
  // does not hide, whole step; replayed as waits on the compute stream. < 0: rank-share mode.
  double zero3_exposed_s = -1;
  double optimizer_s = 0;
  // pp > 1 with tied embeddings: the exchange of the word embedding's gradient between the first
  // and the last stage after both finish their backward, before their optimizer steps (blocking).
  double embedding_sync_s = 0;
  double weights_bytes = 0;        // per GPU, same meaning as MemoryBytes
  // Mixture of experts: one dispatch (or combine) all-to-all, bytes sent per rank and its time;
  // four per MoE layer and micro-batch (two forward, two backward). 0 without ep.
  double ep_alltoall_bytes = 0;
  double ep_alltoall_s = 0;
  // Context parallelism: one ring step's K/V block (bytes per rank), its transfer to the next
  // rank and the attention of one step it hides behind, per layer; cp - 1 transfers per layer
  // forward. Backward: K, V and their gradients (twice the bytes) behind one step of the
  // attention's backward; with full recompute the recompute runs the forward ring again.
  int cp = 1;
  double cp_block_bytes = 0;
  double cp_transfer_s = 0;
  double cp_attention_step_s = 0;
  double cp_transfer_backward_s = 0;
  double cp_attention_step_backward_s = 0;
  bool cp_ring_in_recompute = false;
  // CPU ranks of a device profile that knows its host's cores: the cores of one node, which its
  // ranks' compute-stream tasks time-share (processor sharing, cost_model_cores.cpp); 0 = a
  // device each (GPUs, the datasheet path). core_seconds_per_s: a core-second of work per
  // second of the profile's times (cores / ranks when the profile was itself measured with more
  // ranks than cores, else 1). host_efficiency: the fraction of the processor-sharing ideal the
  // node's ranks reach side by side where they outnumber its cores (measured; 1: the ideal).
  int host_cores = 0;
  double core_seconds_per_s = 1;
  double host_efficiency = 1;
  // dp_comm_s is the exchange the device profile timed among as many ranks on the host's shared
  // cores: the host's time already, which the simulator does not stretch again.
  bool dp_comm_on_shared_cores = false;
};

StepCosts step_costs(const Scenario& scenario, const Layout& layout);

// One kernel as the cost model times it on the scenario's GPU (with its device profile when the
// cluster has one): a GEMM C[m, n] = A[m, k] B[k, n], and a memory-bound kernel moving `bytes`.
double gemm_time_s(const Scenario& scenario, double m, double n, double k);
double memory_time_s(const Scenario& scenario, double bytes);

}  // namespace capplan
