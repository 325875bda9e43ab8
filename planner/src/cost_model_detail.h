// Internal pieces of the cost model shared by estimate() and the search's inner loop, so that a
// searched layout and an estimated layout go through the same arithmetic. Not a public header.
#pragma once

#include <algorithm>
#include <cstdint>

#include "planner/cost_model.h"
#include "planner/device_profile.h"

namespace capplan::detail {

// The few global constants of the model, after cluster overrides (cost_model.cpp documents each).
struct Constants {
  double peak_flops = 0;      // dense tensor-core peak for the precision, FLOP/s
  double gemm_eff = 0;        // fraction of peak reached by the arithmetic of a large GEMM
  double hbm_Bps = 0;         // HBM bandwidth actually reached, bytes/s (spec x memory efficiency)
  double optimizer_Bps = 0;   // a device profile's measured optimizer step, bytes/s (0: hbm_Bps)
  // A device profile's measured gradient-norm sum of squares over a rank's gradient shard, bytes/s,
  // from memory and right after the exchange wrote it (0: not measured, not priced).
  double norm_Bps = 0, norm_warm_Bps = 0;
  double intra_Bps = 0;       // NVLink bus bandwidth per GPU per direction reached by NCCL, bytes/s
  double inter_node_Bps = 0;  // NIC bandwidth per node per direction reached by NCCL, bytes/s
  double intra_lat_s = 0;     // one ring step inside a node
  double inter_lat_s = 0;     // one ring step between nodes
  double pcie_Bps = 0;        // host <-> GPU per GPU per direction
  double elem_bytes = 2;      // bytes of an activation / weight element in the training precision
  double grad_bytes = 2;      // bytes of a gradient element (fp32 main gradients under bf16)
  double gemm_elem_bytes = 2; // bytes of a GEMM operand (1 under fp8)
  double flash_flops = 0;     // FLOP/s FlashAttention's forward reaches; 0 = not available
  double flash_eff = 0;       // the same as a fraction of the 16-bit peak
  FlashKernel flash_kernel = FlashKernel::Fa2;  // the kernel that runs (GpuSpec::flash_kernel_run)
  int sms = 0;                // SMs for wave quantisation; 0 = not modelled
  double host_Bps = 0;        // host memory bandwidth per node reached by a CPU optimizer step
  // Memory the device keeps besides the training state: the framework's fixed reservation and
  // its allocator's margin on the rest (none on a CPU rank: GpuSpec::cpu_rank).
  double reserved_bytes = 0;
  double allocator_margin = 0;
  // A device profile's measured GEMMs and fitted line (t = gemm_t0_s + FLOPs / peak_flops), or null.
  const DeviceProfile* profile = nullptr;
  double gemm_t0_s = 0;
  // A CPU profile's compute times for a rank with other backend threads than it measured with
  // (rank_threads_scale): the profile's measured GEMMs and kernels are multiplied by it, and the
  // fitted line and bandwidths above already carry it. 1: as measured.
  double profile_time_scale = 1;
};
Constants constants_for(const Scenario& scenario);

// Compute-side costs that depend only on (tp, mbs, sp, recompute): one transformer layer, one
// micro-batch, one TP rank; plus the embedding (first stage) and LM head with loss (last stage).
struct MicroTerms {
  double layer_fwd_s = 0;
  double layer_bwd_in_s = 0;
  double layer_bwd_w_s = 0;
  double layer_recompute_s = 0;
  double layer_attn_core_fwd_s = 0;   // the part selective recompute repeats
  // The GEMMs of the linear layers within layer_fwd_s + layer_bwd_in_s + layer_bwd_w_s, within
  // layer_recompute_s, and of the LM head within head_fwd_s + head_bwd_s: what a backend's
  // matrix multiply runs (capplan-train's `gemm` phase), the attention core not included.
  double layer_gemm_s = 0, layer_recompute_gemm_s = 0, head_gemm_s = 0;
  double layer_gemm_flops = 0;        // forward FLOPs per TP rank (GEMMs + attention core)
  double layer_attn_core_flops = 0;   // forward FLOPs of Q K^T and softmax V per TP rank
  double layer_act_kept_bytes = 0;    // kept from forward to backward under the recompute mode
  double layer_act_full_bytes = 0;    // without recompute (the working set a recompute rebuilds)
  double tp_collectives_fwd = 0;      // all-reduce equivalents of size tp_bytes, per layer
  double tp_collectives_bwd = 0;      // including those of a full-recompute forward
  // Where the backward's column-parallel collectives run beside GEMMs (tp_async_bwd): the GEMM
  // time each of the two (Q, K, V and the FFN's input) can hide behind, per layer; 0: none.
  double tp_async_cover_s[2] = {0, 0};
  double tp_async_head_cover_s = 0;   // the LM head's weight-gradient GEMM, for its backward collective
  double tp_bytes = 0;                // b * s * h * element bytes
  // The LM head's collectives on the last stage, per micro-batch (tp > 1): all-reduce equivalents
  // of size tp_bytes in its forward and backward, and the vocab-parallel cross-entropy's
  // all-reduces of one fp32 value per token (xent_bytes each).
  double head_tp_collectives_fwd = 0, head_tp_collectives_bwd = 0;
  double xent_collectives = 0, xent_bytes = 0;
  double embed_fwd_s = 0, embed_bwd_s = 0;
  double embed_act_bytes = 0;
  double head_fwd_s = 0, head_bwd_s = 0;
  double head_act_bytes = 0;          // fp32 logits of one micro-batch
  double layer_params = 0, embed_params = 0, head_params = 0;  // per TP rank
  double final_norm_params = 0;       // part of head_params
  // The multi-token prediction modules' own weights beside their layers (eh_proj, norms), on the
  // last stage with the head; not part of head_params (whose gradient a tied embedding shares).
  double mtp_head_params = 0;
  double layer_matrix_params = 0;     // the layer's largest weight matrix, per TP rank
  // The routed experts' parameters on a rank, per layer on average, where ZeRO-3 gathers them
  // (cost_model_moe.cpp): their state is counted there, but ZeRO-3 gathers them with their layer
  // over the expert data-parallel group (StepEvaluation's zero3_layer_params); 0 for a dense model
  // or where that group is one rank. A byte of their gathers costs expert_gather_share of a byte
  // of the dense group's: the two groups' all-gather times of the layer's experts, each at its
  // own links and ring factor.
  double layer_expert_params = 0;
  double expert_gather_share = 1;
  double expert_group = 1;  // the expert data-parallel group's ranks, dp * cp / ep: each holds 1/this of them
  double layer_qkv_params = 0;        // the Q, K, V projection: the first matrix a layer's forward uses
  double p2p_bytes = 0;               // activation sent to the next stage, per micro-batch
  // The attention core with its memory-bound passes, forward and backward (parts of layer_fwd_s
  // and layer_bwd_in_s): what context parallelism overlaps its ring exchange with.
  double layer_attn_fwd_full_s = 0, layer_attn_bwd_full_s = 0;
  // Expert- and context-parallel communication on the compute stream, per layer and micro-batch
  // (cost_model_moe.cpp); 0 for a dense layout without cp.
  double layer_ep_comm_fwd_s = 0, layer_ep_comm_bwd_s = 0;
  double layer_cp_comm_fwd_s = 0, layer_cp_comm_bwd_s = 0;
  // The part of the ring's exchange time that is a rank's wait for its neighbour to get a core,
  // where the host's ranks outnumber its cores: the cores serve other ranks meanwhile
  // (cost_model_moe.cpp context_ring, share_host_cores). 0 elsewhere.
  double cp_wait_share = 0;
};
MicroTerms micro_terms(const Scenario& scenario, const Constants& c, int tp, int mbs, bool sp,
                       Recompute recompute);

// Bandwidth and latency of the links one communication group crosses (placement.cpp rules).
struct Links {
  int n = 1;         // group size
  int per_node = 1;  // members that share a node
  int nodes = 1;     // nodes the group spans
  double bw_Bps = 0; // ring bus bandwidth available to the group, bytes/s
  // A device profile whose measured collectives time this group's (inside one node): each op its
  // own measured times, interpolated by size, where it measured the group's size; another size
  // takes the nearest measured size's times scaled by the ring's (n-1)/n (placement.cpp
  // measured_s); null otherwise.
  const DeviceProfile* profile = nullptr;
  // The group's collectives move buffers that come from memory (the data-parallel group's
  // gradients and weights, last touched a pass earlier): the profile's cold times where it has them.
  bool cold = false;
  double lat_step_intra_s = 0;
  double lat_step_inter_s = 0;
};
// The bytes an AdamW step moves per parameter for weights of `weight_bytes` bytes
// (kAdamTrafficBytesPerParam: 30 under mixed precision, 28 in fp32).
double adam_traffic_bytes(double weight_bytes);
// The GPUs (or CPU ranks) of a job of `gpus` that one node holds: a full node's `gpus_per_node`,
// or all of a smaller job; at least 1.
inline int gpus_on_a_node(int gpus_per_node, int gpus) { return std::max(1, std::min(gpus_per_node, gpus)); }
// A group of n members whose most spread-out instance spans `nodes` nodes of gpus_in_node GPUs:
// its bandwidth and latencies by placement.cpp's rule (every group of a kind runs at once).
Links links_across(const Constants& c, int n, int nodes, int gpus_in_node);
struct Placement {
  Links tp, pp, dp;
  double p2p_Bps = 0;    // per GPU, between consecutive stages
  double p2p_lat_s = 0;
};
// `order` must be a permutation of "DPT" (right-most letter varies fastest over ranks).
Placement placement(const Constants& c, int gpus_per_node, int total_gpus, int dp, int tp, int pp,
                    const char* order);

// Ring all-reduce (Patarasuk & Yuan 2009; NCCL): 2(n-1)/n * S / B plus 2 latency terms per ring
// pass; hierarchical latency: steps inside a node at intra latency, steps across nodes at inter.
double allreduce_s(const Links& l, double bytes);
// Reduce-scatter or all-gather: half of an all-reduce's volume, (n-1)/n * S / B, plus one ring
// pass of latency (ring_latency_s).
double allgather_s(const Links& l, double bytes);
double reducescatter_s(const Links& l, double bytes);
// The gradient reduction of ZeRO-1/2 before the optimizer, `bytes` of gradients: a
// reduce-scatter, or where the framework all-reduces them under ZeRO-1 (zero1_grad_allreduce,
// DeepSpeed's stage 1) an all-reduce. The updated weights' all-gather is the caller's.
double zero12_grad_reduction_s(const Links& l, double bytes, int zero, const FrameworkSpec& fw);
// capplan-train's ZeRO-3 gather of `bytes` (each rank's part from its shard, out of place into a
// layer buffer, MPI_Allgatherv) at the device profile's cold "all-gather-v" time for the group's
// size; -1 where the profile did not time it (profiles written before it was measured, or another
// group size).
double runtime_gather_s(const Links& l, double bytes);
// capplan-train's data-parallel exchange of ZeRO-0 and ZeRO-1 over `bytes` of gradients (the
// reduce-scatter in place, the gradient norm's partial sums gathered, the all-gather in place,
// Optimizer::step) at the device profile's cold "gradient-exchange" time for the group's size,
// the three calls timed as one; -1 where the profile did not time it.
double runtime_exchange_s(const Links& l, double bytes);
// One pass of a flat ring over the group: n - 1 steps, of which nodes - 1 cross a node boundary
// at the inter-node latency and the rest stay inside a node at the intra-node latency (NCCL's
// own cost model of ring all-gather and reduce-scatter: src/graph/tuning.cc, latency
// (nsteps - nInterSteps) * intraLat + nInterSteps * interLat with nsteps = nRanks - 1 and
// nInterSteps = nNodes - 1). NCCL runs these two collectives only as rings; all-reduce has a
// tree as well, whose latency grows with log2 of the nodes, hence allreduce_s's shorter term.
double ring_latency_s(const Links& l);

// Layers of chunk c (0 .. pp*vp-1) when L layers are split over pp*vp chunks: remainders go to
// chunks 1, 2, ... so that the first chunk (with the embedding) stays light.
int chunk_layers(int layers, int chunks, int c);
int stage_layers(int layers, int pp, int vp, int stage);
// The transformer layers a stage runs: stage_layers' share of the model's, and on the last stage
// the multi-token prediction modules' (ModelSpec::mtp_layers), which follow the last layer.
int stage_blocks(const ModelSpec& model, int pp, int vp, int stage);

struct Evaluation {
  MemoryBytes mem;
  TimeBreakdown time;
  double gemm_s = 0;  // Estimate::gemm_s
  double step_s = 0;
  bool fits = false;
  int critical_stage = 0;  // stage that sets the pipeline pace
  int memory_stage = 0;    // stage with the highest memory
  double host_bytes_per_node = 0;  // offloaded activations and state
  double host_capacity_bytes = 0;  // usable host memory per node; 0 = unknown (not checked)
  // Of a context ring's exchange time, the share the other ranks' work hid on shared cores
  // (StepEvaluation::share_cores): the simulator's ring transfers, which stand for all the
  // stage's ranks, are the rest.
  double cp_hidden_share = 0;
};
// A meeting of `group` CPU ranks that compute between their meetings: a tensor-parallel
// all-reduce (Meeting::AllReduce) or a context ring's exchange between two neighbours
// (Meeting::Exchange). It takes at least the device profile's measured time ranks in lockstep
// spend in one (the activation's all-reduce: its own time and the wait for the last rank), else
// the operation's own time `own`. Where the host's ranks outnumber its cores (they take turns,
// cost_model_cores.cpp): an all-reduce the profile's shared-core lockstep all-reduce in groups of
// `group`, an exchange its hand-off among that many ranks beside pairs in lockstep (two ranks
// passing a message back and forth while the others compute between meetings: the partner is as
// often waiting for a core as computing).
// `after_compute` false: ranks that arrive together (with a core each: `own`). Unchanged without
// a profile of CPU ranks that knows its cores.
// What the ranks of a group meet in: a tensor-parallel all-reduce, a context ring's exchange, or
// sequence parallelism's all-gather and reduce-scatter pair (in place of one all-reduce).
enum class Meeting { AllReduce, Exchange, SequenceParallel };
double lockstep_meeting_s(const Scenario& sc, const Constants& c, const Layout& ly, int group, double own,
                          Meeting kind = Meeting::AllReduce, bool after_compute = true);
// The time of one tensor-parallel all-reduce of a layer's activation (MicroTerms::tp_bytes) and
// of one of the cross-entropy's (xent_bytes), each at the measured lockstep time where a CPU
// profile has one. They depend on the layout only through tp, the GPU count and the placement:
// the search works them out once per micro-batch shape and placement.
struct TpCollectiveTimes {
  double layer = 0, xent = 0;
  double layer_own = 0;  // the layer's all-reduce on its own, before the lockstep meeting's rule
};
TpCollectiveTimes tp_collective_times(const Scenario& scenario, const Constants& c, const Layout& layout,
                                      const MicroTerms& mt, const Placement& pl);
// The whole model for one valid layout; fills `steps` when given (allocates), else allocation free.
// `tp`: tp_collective_times() of this layout, when the caller has them.
void evaluate(const Scenario& scenario, const Constants& c, const Layout& layout, int64_t m,
              const MicroTerms& mt, const Placement& pl, Evaluation& out, StepCosts* steps,
              const TpCollectiveTimes* tp = nullptr);

// How long a meeting of `group` CPU ranks takes among `ranks` of them on the host
// (lockstep_meeting_s for a given rank count): where they outnumber the profile's cores the
// profile's shared-core measurement (an all-reduce: its lockstep all-reduce in groups of `group`;
// an exchange: its hand-off beside pairs in lockstep), else, after compute, its lockstep
// all-reduce with a core each; at least `own`. `own` without a profile of CPU ranks that knows
// its cores.
double meeting_among_s(const DeviceProfile* dev, int ranks, int group, double own, Meeting kind,
                       bool after_compute = true);

// How much longer the ranks' copies (a collective's, a pipeline transfer's) take where
// `ranks_on_host` CPU ranks time-share `cores` cores than in a profile measured with
// `profile_ranks` ranks on them: max(1, n / c) / max(1, p / c) (processor sharing,
// cost_model_cores.cpp); 1 without cores.
double shared_copy_stretch(int ranks_on_host, int cores, int profile_ranks);
// A core's share of a profile's time: a profile measured with `profile_ranks` ranks on `cores`
// cores took max(1, p / c) seconds for each second of a core's work, so its times are scaled by
// 1 / max(1, p / c) to a core's time (processor sharing); 1 without cores.
double profile_core_share(int cores, int profile_ranks);
// A CPU rank's compute time over the profile's: capplan-train gives each of the `ranks_on_host`
// ranks cpu_rank_threads(cores, ranks_on_host) backend threads and the profile's ranks measured
// with its threads_or_default(), so the profile's times scale by their ratio
// (cost_model_cores.cpp); 1 for a GPU profile or one without cores.
double rank_threads_scale(const DeviceProfile& profile, int ranks_on_host);
// The parts capplan-train splits each micro-batch of a CPU rank into, one per group of its
// threads (cost_model_cores.cpp); 1 where it does not split: a GPU profile, one thread a rank,
// or communication inside the step.
int cpu_batch_split(const Scenario& scenario, const DeviceProfile& profile, const Layout& layout);
// micro_terms() of a layout, with a split micro-batch's compute priced as its parts run: each of
// `split` parts of mbs / split sequences on threads / split threads, side by side.
MicroTerms layout_micro_terms(const Scenario& scenario, const Constants& c, const Layout& layout);
// `unsplit` (micro_terms() at the layout's tp, mbs, sp and recompute) with its compute times
// replaced by the batch split's where the layout's ranks split (cpu_batch_split), else as it is.
MicroTerms with_batch_split(const Scenario& scenario, const Constants& c, const Layout& layout, MicroTerms unsplit);
// Scales a CPU rank's compute rates and the profile's times by `scale` (the profile's threads over
// the rank's: rank_threads_scale, or the threads of one part of a batch split); copies and
// collectives stay.
void scale_rank_compute(Constants& c, double scale);
// A kernel's measured time (DeviceProfile::kernel_seconds) for this layout's ranks: scaled by
// their threads (Constants::profile_time_scale); not positive where the profile has none.
double profile_kernel_seconds(const Constants& c, const std::string& name);

// Whether a layout's ranks meet every half layer (tensor parallelism's all-reduces), so that on
// shared cores they take turns between meetings rather than compute whole passes side by side
// (cost_model_cores.cpp): the share of the cores, the pipeline's hand-offs and a context ring's
// exchanges are priced by it.
inline bool ranks_in_lockstep(const Layout& ly) { return ly.tp > 1; }

// Ranks time-sharing the cores of one CPU host (processor sharing), for share_host_cores.
struct HostSharing {
  // The compute-stream work (compute, recompute, optimizer; core-seconds at the profile's
  // per-rank rates) of all the ranks on the host in one step.
  double host_busy_s = 0;
  int ranks_on_host = 0, cores = 0;
  int profile_ranks = 0;  // the ranks the profile was measured with on the same cores
  // The ranks meet in a collective every half layer (tp > 1), which takes the stretch as its wait.
  bool lockstep = false;
  // (>= 0) How much longer the critical rank's pipeline hand-offs take between ranks taking turns
  // on the cores than their copies at the cores' shared speed (from the profile's measurement):
  // the receiving stage's wait, bubble.
  double handoff_s = 0;
  // Of the dedicated pp_comm, the pipeline's transfers (the rest is the tied embedding's exchange
  // between the end stages). The receiving rank copies a message as soon as it wakes to it, on
  // the core it woke on: a transfer takes a core's time, not the shared cores' (its wait for that
  // core is in handoff_s).
  double pp_transfers_s = 0;
  // (>= 1) How much longer ranks in lockstep take in their compute than with a core each (the
  // profile's measurement), within the step.
  double lockstep_stretch = 1;
  // The critical rank's compute stream walked slot by slot through the pipeline's schedule with
  // the slot's active ranks sharing the cores (0: no pipeline); `fill_drain_stretch` (>= 1): how
  // much longer its fill and drain take so than with a core for each rank.
  double pipeline_s = 0, fill_drain_stretch = 1;
  // (in (0, 1]) The fraction of the processor-sharing ideal the ranks reach side by side where
  // they outnumber the cores (the profile's measurement; 1: the ideal).
  double free_efficiency = 1;
  // Of the critical rank's communication, the waits for a neighbour that the cores spend on the
  // other ranks (a context ring's): the rank's time, not the host's.
  double hidden_wait_s = 0;
  // Of the dedicated bubble, the tensor-parallel collectives' part, and the factor their time
  // takes in the fill and drain, where fewer ranks than the host's meet (<= 1; lockstep only).
  double bubble_tp_s = 0, fill_tp_factor = 1;
  // The dedicated dp_comm is the profile's exchange timed among as many ranks on the shared cores
  // (SharedExchangeTiming): the host's time already, not stretched.
  bool dp_comm_on_shared_cores = false;
  // (>= 1) How much longer a rank's optimizer step takes where the host's ranks take theirs at
  // once than with a core each (the profile's measurement; 1: not measured).
  double optimizer_stretch = 1;
};
// `dedicated` is the step as if every rank had a core of its own at the profile's per-rank rates.
// Returns the step's breakdown when the ranks share the cores (cost_model_cores.cpp has the
// formula and its source); `dedicated` itself when they do not outnumber the cores and neither
// did the profile's.
TimeBreakdown share_host_cores(const TimeBreakdown& dedicated, const HostSharing& host);

// How a device profile's attention kernels scale to a layout: they work head by head over whole
// sequences, so their time goes with mbs x the heads of a rank x s^2, and a profile measured at
// another tp, mbs or seq is scaled by the ratio of this layout's b (heads / tp) s^2 to its own.
// -1 where the profile has no shape or was measured for another number of heads.
double profile_attention_scale(const DeviceProfile* dev, int heads, double mbs, double tp, double seq);

// One GEMM and one memory-bound pass as the cost model times them (cost_model.cpp's gemm_s and
// mem_s), for the terms kept in other files.
double gemm_seconds(const Constants& c, double m, double n, double k, double count = 1);
double memory_seconds(const Constants& c, double bytes);

// Mixture of experts and context parallelism (cost_model_moe.cpp): whether a layout needs them,
// and the evaluation that adds their terms to the dense model's.
bool needs_moe_cp(const Scenario& scenario, const Layout& layout);
struct MoeCpEvaluation {
  int64_t m = 0;
  MicroTerms mt;         // per rank, per micro-batch, with the MoE and cp terms
  MicroTerms mt_finish;  // as finish_estimate counts FLOPs (whole sequence per TP rank)
  Evaluation ev;
};
MoeCpEvaluation evaluate_moe_cp(const Scenario& scenario, const Constants& c, const Layout& layout,
                                StepCosts* steps);
// The same in parts, for the search to compute each once per unit: the dense slice's scenario
// (depends on cp), the links of the real groups (on dp, tp, pp, cp, ep and the order) and the
// slice's micro terms (on tp, mbs, sp, recompute and cp).
struct MoeCpPlacement {
  Placement pl;        // tp, pp, dp (= the dp*cp group) and the stage-to-stage links
  Links cp, ep, edp;   // context ring, expert group, expert data-parallel group
};
Scenario moe_cp_slice(const Scenario& scenario, const Layout& layout);
MoeCpPlacement moe_cp_placement(const Scenario& scenario, const Constants& c, const Layout& layout);
MicroTerms moe_cp_base_terms(const Scenario& slice, const Constants& c, const Layout& layout);
// The slice's micro terms with the MoE and cp terms added, and what the rest of the evaluation
// takes from them: they depend on the base terms, the placement and the layout's tp, cp, ep, mbs
// and recompute, not on its schedule, vp, zero or offload, so the search computes them once per
// (mbs, sp, recompute, ep, order).
struct MoeCpLayerTerms {
  MicroTerms mt;
  double expert_params_per_layer = 0;  // routed experts' parameters per rank, averaged per layer
  double a2a_bytes = 0, a2a_s = 0;     // one all-to-all (16-bit), bytes per rank and time
  double cp_block_bytes = 0, cp_transfer_s = 0, cp_attention_step_s = 0;
  double cp_transfer_backward_s = 0, cp_attention_step_backward_s = 0;
};
MoeCpLayerTerms moe_cp_layer_terms(const Scenario& scenario, const Constants& c, const Layout& layout,
                                   const MoeCpPlacement& placement, const MicroTerms& base);
MoeCpEvaluation evaluate_moe_cp(const Scenario& scenario, const Scenario& slice, const Constants& c,
                                const Layout& layout, const MoeCpPlacement& placement,
                                const MicroTerms& base, StepCosts* steps);
// The rest of the evaluation from the terms: the dense slice's evaluation, then the experts'
// memory, gradient reduction and optimizer step. Allocation free when steps is null.
void evaluate_moe_cp(const Scenario& scenario, const Scenario& slice, const Constants& c, const Layout& layout,
                     const MoeCpPlacement& placement, const MoeCpLayerTerms& terms, Evaluation& ev,
                     StepCosts* steps);

// Fills the public Estimate (throughput, FLOP rates, days, dollars) from an evaluation.
void finish_estimate(const Scenario& scenario, const Constants& c, const Layout& layout, int64_t m,
                     const MicroTerms& mt, const Evaluation& ev, Estimate& est);

}  // namespace capplan::detail
