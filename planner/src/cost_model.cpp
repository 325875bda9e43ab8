// The analytical cost model: memory per GPU by kind and the time of one training step by term.
// Compute is counted GEMM by GEMM at a roofline that sums arithmetic and memory traffic (so small
// GEMMs run slower), memory-bound kernels at HBM bandwidth, collectives over the links each group
// crosses (placement.cpp), and the pipeline schedule on top. It does not model contention between
// different groups or kernel overlap inside a stream; the simulator replays the same per-chunk costs.
#include "planner/cost_model.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>

#include "cost_model_detail.h"
#include "planner/profile.h"

namespace capplan {
namespace detail {

// ---- Global constants ------------------------------------------------------------------------
// Fraction of tensor-core peak reached by the arithmetic of a large fp16/bf16 GEMM on a GPU whose
// file gives no measured figure (the A100 value). cuBLAS reaches 250-270 of 312 TFLOP/s on large
// A100 GEMMs (NVIDIA Deep Learning Performance Guide, "Matrix Multiplication Background", 2023);
// the memory term below brings smaller GEMMs down from there. The one figure set on the
// calibration runs of both validation files (their MAPE, `capplan validate` of both: 0.770
// 4.34 %, 0.775 4.32 %, 0.780 4.39 %; README "Validation").
constexpr double kGemmEfficiency = 0.775;
// The A100's measured large-GEMM fraction of peak (gemm_peak_fraction in its GPU file).
constexpr double kA100GemmPeakFraction = 0.85;
// A GPU's measured large-GEMM fraction of peak (gemm_peak_fraction in its file) times this share
// gives the arithmetic efficiency of gemm_s(): the measured fraction already contains the operand
// traffic that gemm_s() adds separately. One figure for every GPU, the A100's.
constexpr double kGemmArithmeticShare = kGemmEfficiency / kA100GemmPeakFraction;
// GEMM tile of cuBLAS's large-matrix kernels (128 x 128 output tiles on Ampere and Hopper; NVIDIA
// Deep Learning Performance Guide, "Tile and wave quantization"): M and N are padded to whole
// tiles (applied on GPUs whose file gives their SM count).
constexpr double kGemmTile = 128;
// FlashAttention's backward runs 2.5x the forward's FLOPs (five matmuls against two, recomputing
// the scores) at a lower rate: on H100 SXM5 at head size 128 and long sequences the backward
// reaches 0.87 of the forward's FLOP/s for FlashAttention-2 (322 against 370 TFLOP/s),
// FlashAttention-3 (561 / 648) and cuDNN (516 / 595) alike (Shah et al. 2024, "FlashAttention-3",
// Fig. 4-5 forward and backward speed, 16k).
constexpr double kFlashBwdFlopsRatio = 2.5;
constexpr double kFlashBwdRate = 0.87;
// A causal mask's kernel runs below the unmasked one on shorter sequences (the diagonal blocks are
// computed whole and the rows' work is uneven): at head size 128 on H100, FlashAttention-2, -3
// and cuDNN with the causal mask run at s / (s + 512) of their unmasked rate: the model's rate is
// within 8.0 % of theirs (root mean square 4.0 %) from 1k to 16k (FA3 423, 521, 579, 602, 616 TFLOP/s at 1k-16k against 648;
// FA2 260, 298, 319, 333, 335 against 370; cuDNN 410, 484, 518, 529, 539 against 600; Shah et
// al. 2024 Fig. 5; test CostModelStack.FlashCausalRampFollowsThePublishedKernelSpeeds), one
// figure for the three.
constexpr double kFlashCausalRampTokens = 512;
// The kernels' figures are at head size 128. At 64 each runs slower (fewer FLOPs per byte of Q, K
// and V staged on chip): without a mask at 16k tokens on H100, FlashAttention-2 324 against 370
// TFLOP/s, FlashAttention-3 497 against 648, cuDNN 413 against 595 (Shah et al. 2024, Fig. 4).
// Between 64 and 128 the factor is interpolated; at or above 128 it is 1 (no figure for every
// kernel at 256).
namespace {
// The head size FlashAttention runs at: the query-key head's (latent attention's value heads,
// narrower, are padded to it, as transformers' DeepSeek modules do for flash_attention_2).
int flash_head_dim(const ModelSpec& model) { return std::max(model.qk_head_dim(), model.v_head_dim()); }
double flash_head_factor(FlashKernel k, double head_dim) {
  const double at64 = k == FlashKernel::Fa3 ? 497.0 / 648 : k == FlashKernel::Cudnn ? 413.0 / 595 : 324.0 / 370;
  const double x = std::clamp((head_dim - 64) / 64, 0.0, 1.0);
  return at64 + (1 - at64) * x;
}
}  // namespace
// Host memory bandwidth per node reached by a CPU optimizer step (ZeRO-Offload's CPU Adam, FSDP's
// CPU-offloaded step): two-socket servers stream 150-300 GB/s (STREAM triad); 100 GB/s reached.
constexpr double kHostMemory_Bps = 100e9;
// The local model's residual for profiles of CPU ranks (band_spreads below has the measurement).
constexpr double kCpuProfileResidual = 0.083;
// Fraction of HBM bandwidth reached by streaming kernels (STREAM-like copies reach ~90 % on A100,
// fused elementwise / softmax / LayerNorm kernels a little less).
constexpr double kMemoryEfficiency = 0.80;
// NCCL bus bandwidth as a fraction of the link figure: nccl-tests all_reduce_perf reaches ~230 of
// 300 GB/s per direction on DGX A100 NVLink and ~80-90 % of InfiniBand line rate.
constexpr double kIntraNodeEfficiency = 0.77;
constexpr double kInterNodeEfficiency = 0.85;
// One ring step's latency (NCCL LL/Simple protocol step, order of microseconds).
constexpr double kIntraNodeLatency_s = 2e-6;
constexpr double kInterNodeLatency_s = 6e-6;
// PCIe Gen4 x16: 32 GB/s per direction nominal (the default when the cluster gives none); pinned
// cudaMemcpyAsync reaches ~25 GB/s of it (NVIDIA bandwidthTest), hence 0.8.
constexpr double kPcieDefault_gbyte_per_s = 32.0;
constexpr double kPcieEfficiency = 0.8;
// The fixed per-GPU reservation (CUDA context, cuBLAS workspace, NCCL channels: ~1 GiB in
// nvidia-smi on an idle PyTorch + NCCL process) and the allocator's fragmentation margin are the
// framework's (FrameworkSpec::reserved_gib, allocator_margin). A CPU rank of capplan-train has
// neither: no GPU runtime, and every buffer allocated once at start (runtime/train, Gpt and
// Optimizer constructors), so its peak is its state and activations.
// Mixed-precision Adam: fp32 master weights + two fp32 moments = 12 bytes per parameter
// (Rajbhandari et al. 2020, ZeRO, Sec 3.1: K = 12); fp32 training keeps moments only (8).
// Optimizer step traffic: read grad, master, m, v (16 B), write master, m, v (12 B), and under
// mixed precision write the 16-bit weight (2 B) = 30 bytes per parameter at HBM bandwidth (28 in
// fp32, whose master weights are the weights: capplan-train's CPU step, as its profile counts it).
constexpr double kAdamTrafficBytesPerParam = 30.0;
// Collectives on a side stream beside the GEMMs (ZeRO-3's parameter and gradient traffic, the
// data-parallel gradient buckets of PyTorch DDP and Megatron-Core's overlap_grad_reduce, the
// tensor-parallel collectives Megatron-LM issues asynchronously): while they run, NCCL's kernels
// take SMs (one per channel) and HBM bandwidth from the compute, and overlapped compute slows
// down, by up to ~1.4x in the measurements of Rashidi et al. 2021 (ACE, ISCA, Sec 3). A
// collective hidden behind compute is charged this fraction of its time (a stated prior, one
// figure for all of them).
constexpr double kHiddenCollectiveCost = 0.5;
// What collectives of `total_s` cost when `hidden_s` of them runs beside compute: the rest
// exposed, the hidden part at kHiddenCollectiveCost of its time.
constexpr double with_hidden_cost(double total_s, double hidden_s) {
  return total_s - (1.0 - kHiddenCollectiveCost) * hidden_s;
}
// Gradient buckets per stage and step (ZeRO 0-2): Megatron-LM and DDP use ~25-40 MB buckets;
// eight per stage keeps the last, always exposed bucket small without modelling bucket latency.
constexpr int kDpBuckets = 8;
// Activation offload may use this fraction of the node's host memory (the rest: OS, data loader,
// pinned staging buffers).
constexpr double kHostMemoryUsable = 0.8;

Constants constants_for(const Scenario& sc) {
  const ClusterSpec& cl = sc.cluster;
  const Precision p = sc.training.precision;
  Constants c;
  c.peak_flops = cl.gpu.peak_tflops(p) * 1e12;
  if (c.peak_flops <= 0 && p == Precision::Bf16) c.peak_flops = cl.gpu.peak_tflops_fp16 * 1e12;
  const double gpu_eff = cl.gpu.gemm_peak_fraction > 0 ? cl.gpu.gemm_peak_fraction * kGemmArithmeticShare
                                                       : kGemmEfficiency;
  c.gemm_eff = cl.efficiency.gemm.value_or(gpu_eff);
  // FlashAttention runs in 16 bits (bf16/fp16) also under fp8 training, at the measured rate of
  // the kernel that runs on this GPU for the one the implementation calls (FlashAttention-2 where
  // the GPU has no figure for it); a cluster's efficiency.flash replaces the figure (where
  // FlashAttention runs at all).
  c.flash_kernel = cl.gpu.flash_kernel_run(sc.training.framework.flash_kernel);
  const double flash_fraction = cl.gpu.flash_fraction(sc.training.framework.flash_kernel);
  c.flash_eff = flash_fraction > 0 ? cl.efficiency.flash.value_or(flash_fraction) : 0.0;
  c.flash_flops = c.flash_eff * cl.gpu.peak_tflops_16bit() * 1e12;
  c.sms = cl.gpu.sms;
  c.host_Bps = kHostMemory_Bps;
  if (!cl.gpu.cpu_rank) {
    c.reserved_bytes = sc.training.framework.reserved_gib * 1024.0 * 1024.0 * 1024.0;
    c.allocator_margin = sc.training.framework.allocator_margin;
  }
  c.hbm_Bps = cl.gpu.memory_gbyte_per_s * 1e9 * cl.efficiency.memory.value_or(kMemoryEfficiency);
  c.intra_Bps = cl.intra_node_gbyte_per_s * 1e9 * cl.efficiency.intra_node.value_or(kIntraNodeEfficiency);
  c.inter_node_Bps =
      cl.inter_node_gbit_per_s / 8.0 * 1e9 * cl.efficiency.inter_node.value_or(kInterNodeEfficiency);
  if (c.intra_Bps <= 0) c.intra_Bps = c.inter_node_Bps;  // no NVLink figure: PCIe/NIC path
  c.intra_lat_s = cl.intra_node_latency_us > 0 ? cl.intra_node_latency_us * 1e-6 : kIntraNodeLatency_s;
  c.inter_lat_s = cl.inter_node_latency_us > 0 ? cl.inter_node_latency_us * 1e-6 : kInterNodeLatency_s;
  c.pcie_Bps = (cl.pcie_gbyte_per_s > 0 ? cl.pcie_gbyte_per_s : kPcieDefault_gbyte_per_s) * 1e9 *
               kPcieEfficiency;
  const StateBytesPerParam state = state_bytes_per_param(sc.training);
  c.elem_bytes = p == Precision::Fp32 ? 4.0 : 2.0;
  c.grad_bytes = state.gradients;
  c.gemm_elem_bytes = p == Precision::Fp8 ? 1.0 : c.elem_bytes;
  if (const DeviceProfile* dev = cl.device_profile.get()) {
    // Measured on this device (capplan profile --measure): the GEMM line, the bandwidth of the
    // memory-bound kernels and the fitted all-reduce of the node's group size replace the
    // datasheet figures and their efficiencies.
    c.profile = dev;
    c.peak_flops = dev->gemm_peak_gflops * 1e9;
    c.gemm_eff = 1.0;
    c.gemm_t0_s = dev->gemm_overhead_us * 1e-6;
    c.hbm_Bps = dev->memory_gbyte_per_s * 1e9;
    // The optimizer step at the measured rate of the runtime's own step over operands from
    // memory (capplan-train measure's "adamw"), where the profile has it.
    for (const KernelTiming& k : dev->kernels) {
      if (k.seconds <= 0 || k.bytes <= 0) continue;
      if (k.name == "adamw") c.optimizer_Bps = k.bytes / k.seconds;
      if (k.name == "gradient norm") c.norm_Bps = k.bytes / k.seconds;
      if (k.name == "gradient norm after exchange") c.norm_warm_Bps = k.bytes / k.seconds;
    }
    if (const CollectiveFit* f = dev->fit("all-reduce", cl.gpus_per_node)) {
      c.intra_Bps = f->bandwidth_gbyte_per_s * 1e9;
      // allreduce_s() charges 2 (n-1) ring steps of latency.
      c.intra_lat_s = f->ranks > 1 ? f->latency_us * 1e-6 / (2.0 * (f->ranks - 1)) : c.intra_lat_s;
    }
    // CPU ranks: a run's ranks have the host's cores over their number as backend threads, which
    // the profile's ranks may not have had (one rank on 2 cores has two threads; the profile's
    // two ranks one each). The ranks' compute scales by the threads (rank_threads_scale); their
    // copies and collectives do not.
    if (sc.total_gpus() > 0)
      scale_rank_compute(c, rank_threads_scale(*dev, gpus_on_a_node(cl.gpus_per_node, sc.total_gpus())));
  }
  return c;
}

void scale_rank_compute(Constants& c, double scale) {
  c.profile_time_scale *= scale;
  c.peak_flops /= scale;
  c.gemm_t0_s *= scale;
  c.hbm_Bps /= scale;
  c.optimizer_Bps /= scale;
  c.norm_Bps /= scale;
  c.norm_warm_Bps /= scale;
}

namespace {

// Time of one GEMM C[M,N] = A[M,K] B[K,N] (`count` of them, as one batched call): arithmetic 2MNK
// at gemm_eff x peak plus its operand and result traffic e(MK + KN + MN) at HBM bandwidth, added
// rather than overlapped (a roofline with a soft knee: large GEMMs approach gemm_eff, thin ones
// are bandwidth-bound). Tile quantisation (NVIDIA Deep Learning Performance Guide): M and N are
// padded to whole 128 x 128 output tiles. Wave quantisation (tiles in whole waves of one per SM)
// is not charged: cuBLAS picks among tile shapes and split-K variants to fill the last wave, and
// charging the textbook waves made the calibration runs of small models 5-8 % too slow.
// Over-counts traffic for GEMMs whose operands stay in L2.
double gemm_s(const Constants& c, double m, double n, double k, double count = 1) {
  if (c.profile) {
    // Measured shape: its time; any other: the device's fitted line.
    const double measured = c.profile->gemm_seconds(m, n, k);
    if (measured > 0) return count * measured * c.profile_time_scale;
    return count * c.gemm_t0_s + 2.0 * m * n * k * count / c.peak_flops;
  }
  const double mp = c.sms > 0 ? std::ceil(m / kGemmTile) * kGemmTile : m;
  const double np = c.sms > 0 ? std::ceil(n / kGemmTile) * kGemmTile : n;
  const double flops = 2.0 * mp * np * k * count;
  const double bytes = c.gemm_elem_bytes * (m * k + k * n) + c.elem_bytes * m * n;
  return flops / (c.peak_flops * c.gemm_eff) + count * bytes / c.hbm_Bps;
}

double mem_s(const Constants& c, double bytes) { return bytes / c.hbm_Bps; }

}  // namespace

double profile_kernel_seconds(const Constants& c, const std::string& name) {
  return c.profile ? c.profile->kernel_seconds(name) * c.profile_time_scale : 0.0;
}

double gemm_seconds(const Constants& c, double m, double n, double k, double count) {
  return gemm_s(c, m, n, k, count);
}
double memory_seconds(const Constants& c, double bytes) { return mem_s(c, bytes); }

double adam_traffic_bytes(double weight_bytes) {
  constexpr double kWeightCopyBytes = 2;  // the 16-bit weight kAdamTrafficBytesPerParam writes
  return weight_bytes < 4 ? kAdamTrafficBytesPerParam : kAdamTrafficBytesPerParam - kWeightCopyBytes;
}

namespace {

// The per-micro-batch terms of one layout's block, embedding and head, in named steps over the
// shapes of one TP rank.
class LayerTerms {
 public:
  LayerTerms(const Scenario& sc, const Constants& c, int tp, int mbs, bool sp)
      : sc(sc), c(c), md(sc.model), fw(sc.training.framework), attn(sc.attention()),
        tp(tp), mbs(mbs), h(md.hidden), f(md.ffn_hidden_or_default()), a(md.heads), as(attention_shape(md)),
        dqk(md.qk_head_dim()), dv(md.v_head_dim()), cw(md.attention_core_width()), v(md.vocab), s(sc.seq_len()), b(mbs), tpd(tp),
        e(c.elem_bytes), gated(md.ffn == Ffn::Swiglu),
        dropout(md.norm == Norm::LayerNorm),  // GPT-style models train with dropout
        drop(dropout ? 1.0 : 0.0), fused(fw.fused_kernels), tok(b * s), seqpar(sp && tp > 1),
        // Replicated (non-TP) token work is split by tp under sequence parallelism (Korthikanti
        // Sec 4.2.2).
        repl(seqpar ? 1.0 / tpd : 1.0), c16(c) {
    // The attention core stays in 16 bits under fp8 training (Transformer Engine casts only the
    // linear layers' GEMMs).
    if (sc.training.precision == Precision::Fp8) {
      const GpuSpec& g = sc.cluster.gpu;
      c16.peak_flops = g.peak_tflops_16bit() * 1e12;
      c16.gemm_elem_bytes = 2;
    }
  }

  MicroTerms run(Recompute recompute) {
    linear_gemms();
    attention_core();
    layer_times();
    activations(recompute);
    tp_collectives(recompute);
    embedding_and_head();
    parameters();
    return t;
  }

 private:
  void linear_gemms() {
    // GEMMs of one block per TP rank (Megatron column/row split, Shoeybi et al. 2019 Sec 3): the
    // attention's linears (attention_shape: Q, K, V and the output projection; latent attention's
    // down-projections whole on every rank), the FFN's in (gate + up) and out.
    fwd_gemm = qkv_gemm = fc_in_gemm = 0;
    std::vector<LinearShape> linears = as.linears;
    linears.push_back({h, (gated ? 2 : 1) * f, TpSplit::Column});
    linears.push_back({f, h, TpSplit::Row});
    const size_t attention_linears = as.linears.size();
    double whole_in = 0, split_in = 0;  // the GEMMs' inputs per token: whole, and split over tp
    bwd_in_gemm = bwd_w_gemm = 0;
    for (size_t i = 0; i < linears.size(); ++i) {
      const LinearShape& l = linears[i];
      const double in = l.in_per_rank(tpd), out = l.out_per_rank(tpd);
      // Under sp a duplicated layer (latent attention's down-projections) runs on the rank's own
      // s / t tokens, before the latents are gathered (Megatron-Core MLASelfAttention).
      const double rows = l.split == TpSplit::Duplicated ? tok * repl : tok;
      const double gemm = gemm_s(c, rows, out, in);
      fwd_gemm += gemm;
      if (l.split == TpSplit::Column) (i < attention_linears ? qkv_gemm : fc_in_gemm) += gemm;
      (l.split == TpSplit::Row ? split_in : whole_in) += l.in * rows / tok;
      // Measured times differ by shape: the input gradient dX = dY W^T is [tok, in] over the
      // layer's output width, the weight gradient dW = X^T dY is [in, out] over the tokens.
      bwd_in_gemm += gemm_s(c, rows, in, out);
      bwd_w_gemm += gemm_s(c, in, out, rows);
    }
    // fp8 (Transformer Engine): each linear layer's input is cast to fp8 (read 2 bytes, write 1)
    // before its GEMM (column-parallel inputs are whole, row-parallel ones split over tp); outputs
    // stay bf16; the weights' fp8 copies are cached across micro-batches (TE is_first_microbatch).
    if (sc.training.precision == Precision::Fp8) fwd_gemm += mem_s(c, 3.0 * tok * (whole_in + split_in / tpd));
    // The roofline prices a GEMM by its FLOPs and bytes, the same for the backward's two.
    if (!c.profile) bwd_in_gemm = bwd_w_gemm = fwd_gemm;
  }

  void attention_core() {
    const double heads_rank = b * a / tpd;
    const double scores = heads_rank * s * s;
    if (attn == Attention::Flash) {
      // FlashAttention-2/3 (Dao 2023; Shah et al. 2024): one kernel, scores never leave on-chip
      // memory; causal masking skips the upper triangle's blocks, so half of the 4 b s^2 h FLOPs
      // run, at the measured rate of the framework's kernel on this GPU (GpuSpec::flash_fraction)
      // times the causal mask's s / (s + 512) and the head size's factor (flash_head_factor);
      // the backward recomputes the scores: 2.5x the forward's FLOPs at 0.87 of its rate. Memory
      // traffic: Q, K, V read and O written once (counted with the token work below).
      // A sliding window of w tokens (FlashAttention-2's window_size) skips the blocks outside it:
      // its layers score s w - w (w - 1) / 2 query-key pairs against the causal s (s + 1) / 2
      // (the local layers' share of the layers, the rest whole), at the same rate; chunks of C
      // score C (C + 1) / 2 each (ModelSpec::local_pairs_share).
      // FlashAttention-2 takes one head size for Q, K and V: latent attention's narrower value
      // heads run padded to the query-key head (transformers' DeepSeek-V2/V3 modules pad V for
      // flash_attention_2), so P V costs heads x dqk, as with the first FlashAttention;
      // FlashAttention-3 (head sizes 192 / 128) and cuDNN's fused attention take the two apart.
      const bool one_head_size = c.flash_kernel == FlashKernel::Fa2 || c.flash_kernel == FlashKernel::Fa1;
      const double core_w = one_head_size && dv < dqk ? a * dqk : cw;
      const double core_flops = 0.5 * 4 * b * s * s * core_w / tpd * window_pairs_share();
      const double rate = c.flash_flops * s / (s + kFlashCausalRampTokens) * flash_head_factor(c.flash_kernel, flash_head_dim(md));
      core_fwd_s = core_flops / rate;
      core_bwd_s = kFlashBwdFlopsRatio * core_flops / (rate * kFlashBwdRate);
      core_mem = tok * (as.q + as.k + as.v) / tpd * e + tok * as.out / tpd * e;
      core_mem_bwd = 2 * core_mem;
    } else {
      // Attention core as batched GEMMs per head: Q K^T [s,d]x[d,s] and P V [s,s]x[s,d] (the
      // query-key head dqk and the value head dv, both head_dim unless latent attention sets them).
      const double core_gemm = gemm_s(c16, s, s, dqk, heads_rank) + gemm_s(c16, s, dv, s, heads_rank);
      core_fwd_s = core_gemm;
      core_bwd_s = 2 * core_gemm;  // two input-gradient GEMMs per forward GEMM
      // Memory-bound passes over the a*s*s scores. Fused (Megatron's scale-mask-softmax kernel):
      // read + write 2e forward, 3e backward (reads y and dy, writes dx). Eager (Hugging Face /
      // minGPT modules: scale, causal mask, softmax as three kernels): 6e forward, 7e backward
      // (softmax 3e, mask and scale 2e each). Dropout on the probabilities reads, writes and stores
      // a mask (2e + 1) either way.
      const bool eager = attn == Attention::Eager;
      core_mem = scores * ((eager ? 6 : 2) * e + (dropout ? 2 * e + 1 : 0));
      core_mem_bwd = scores * ((eager ? 7 : 3) * e + (dropout ? 2 * e + 1 : 0));
      // Eager modules split and merge heads with a contiguous copy of Q, K, V and the context.
      if (eager) {
        core_mem += tok * (as.q + as.k + as.v + as.out) / tpd * 2 * e;
        core_mem_bwd += tok * (as.q + as.k + as.v + as.out) / tpd * 2 * e;
      }
    }
    // The runtime's own attention kernels, measured for this model's heads: their times, traffic
    // included, scaled to this layout (profile_attention_scale) rather than dropped for the
    // roofline of per-head GEMMs (whose fitted per-GEMM overhead belongs to large GEMMs).
    const DeviceProfile* dev = c.profile;
    if (const double scale = profile_attention_scale(dev, a, b, tpd, s); scale > 0) {
      const double fwd = profile_kernel_seconds(c, "attention forward");
      const double bwd = profile_kernel_seconds(c, "attention backward");
      // Selective recompute's forward on operands from memory (measured as such; a profile
      // without it takes the forward's time).
      const double rec = profile_kernel_seconds(c, "attention recompute");
      if (fwd > 0) core_fwd_s = fwd * scale, core_mem = 0;
      if (bwd > 0) core_bwd_s = bwd * scale, core_mem_bwd = 0;
      if (rec > 0) core_recompute_s = rec * scale;
    }
  }

  // The causal query-key pairs FlashAttention scores with the model's sliding window or chunks, as
  // a share of those without them, over the layers (1 without either or where it covers the
  // sequence). Chunks run as independent sequences (FlashAttention's variable-length batch).
  double window_pairs_share() const {
    const double share = md.local_layer_share(int(s));
    if (share <= 0) return 1.0;
    return 1 - share + share * md.local_pairs_share(int(s));
  }

  void layer_times() {
    // Memory-bound forward traffic (bytes) of the token-wise kernels. Fused (Megatron-LM fused
    // kernels): two LayerNorms (read + write e each), two bias-dropout-residual adds (read 2e, write
    // e, mask 1), GeLU (with its bias) reads and writes f/tp per token, SwiGLU reads 2f, writes f.
    // Unfused (one PyTorch kernel per op): dropout (2e + 1) and the residual add (3e) apart, and
    // the activation as `activation_kernels` elementwise kernels (2e each; SwiGLU's silu and
    // product as two, 5e); all on b*s*h replicated elements (split under sp).
    const double resid_fwd = fused ? 3 * e + (dropout ? 1 : 0) : (dropout ? 2 * e + 1 : 0) + 3 * e;
    const double token_mem = tok * h * repl * (2 * 2 * e + 2 * resid_fwd);
    // The activation's kernels: fused bias-GeLU (Megatron) or nn.GELU are one pass; Hugging Face's
    // gelu_new (tanh approximation written out) is eight (activation_kernels in the preset).
    const double act_passes = fused ? 1.0 : double(std::max(1, fw.activation_kernels));
    const double act_fn_mem = tok * f / tpd * (gated ? (fused ? 3 : 5) * e : 2 * e * act_passes);
    const double fwd_mem = core_mem + token_mem + act_fn_mem;
    // Backward kernels read the saved input and the incoming gradient and write the outgoing one:
    // LayerNorm 3e (2e forward); bias-dropout-residual 2e + 1 fused (the residual gradient passes
    // through), dropout 2e + 1 plus the add's 3e unfused; GeLU 3e fused, gelu_new's chain 2x its
    // forward unfused; SwiGLU 5e fused (reads gate, up, dy; writes two gradients), 8e unfused.
    const double resid_bwd = fused ? 2 * e + (dropout ? 1 : 0) : (dropout ? 2 * e + 1 : 0) + 3 * e;
    const double token_mem_bwd = tok * h * repl * (2 * 3 * e + 2 * resid_bwd);
    const double act_fn_mem_bwd = tok * f / tpd * (gated ? (fused ? 5 : 8) * e : (act_passes > 1 ? 4 * e * act_passes : 3 * e));
    const double bwd_mem = core_mem_bwd + token_mem_bwd + act_fn_mem_bwd;

    t.layer_attn_core_fwd_s = core_fwd_s + mem_s(c, attn == Attention::Flash ? 0.0 : core_mem);
    t.layer_attn_fwd_full_s = core_fwd_s + mem_s(c, core_mem);
    t.layer_attn_bwd_full_s = core_bwd_s + mem_s(c, core_mem_bwd);
    t.layer_fwd_s = fwd_gemm + core_fwd_s + mem_s(c, fwd_mem);
    // Backward: each weight GEMM has an input-gradient and a weight-gradient GEMM of the same shape
    // class and FLOPs; the attention core as above.
    t.layer_bwd_in_s = bwd_in_gemm + core_bwd_s + mem_s(c, bwd_mem);
    t.layer_bwd_w_s = bwd_w_gemm;
    t.layer_gemm_s = fwd_gemm + bwd_in_gemm + bwd_w_gemm;
    // The core's FLOPs as the counts take them (profile.cpp: 4 b s^2 q, 4 b s w q in a window),
    // over the layers.
    const double window_keys = 1 - md.local_layer_share(int(s)) * (1 - std::min(1.0, md.local_span() / s));
    double split_params = 0, whole_params = 0;  // the linears' matrices: split over tp, and whole on each rank
    for (const LinearShape& l : as.linears) (l.split == TpSplit::Duplicated ? whole_params : split_params) += l.params();
    t.layer_gemm_flops = 2 * tok * ((split_params + (gated ? 3 : 2) * f * h) / tpd + whole_params * repl) +
                         4 * b * s * s * cw / tpd * window_keys;
    t.layer_attn_core_flops = 4 * b * s * s * cw / tpd * window_keys;
  }

  void activations(Recompute recompute) {
    // Activations per micro-batch (profile.cpp, Korthikanti et al. 2022 Eq. 2; under sp the
    // replicated 10sbh part is split too, Eq. 4: sbh(34/t + 5as/(ht))). FlashAttention keeps no
    // s^2 tensor, only its output (counted with the projections) and the fp32 log-sum-exp per head
    // and token; unfused gelu_new keeps three more f-wide intermediates (tanh argument, tanh, x^3).
    // Latent attention's latents and their normalised copies are whole on every tp rank.
    const double repl_tok = (e * h + e * h + 2 * e * h + 2 * drop * h + e * (as.latent + as.latent_normed)) * repl;
    const double split_tok = (as.q + as.k) * e + as.v * e + as.out * e + (gated ? 3 : 2) * f * e +
                             (!fused && !gated && fw.activation_kernels > 1 ? 3 * f * e : 0.0);
    const double score_tok = attn == Attention::Flash ? 4 * a : (e + drop * (1 + e)) * a * s;
    t.layer_act_full_bytes = tok * (repl_tok + (split_tok + score_tok) / tpd);
    // DeepSpeed's partition_activations splits a full recompute's kept layer input over the tp
    // ranks and all-gathers it before the recompute (half an all-reduce's volume).
    partition = fw.partition_activations && tp > 1 && !seqpar;
    switch (recompute) {
      case Recompute::None:
        t.layer_act_kept_bytes = t.layer_act_full_bytes;
        t.layer_recompute_s = 0;
        break;
      case Recompute::Selective:  // drop the attention core's scores (Korthikanti Sec 4.3)
        t.layer_act_kept_bytes = tok * (repl_tok + split_tok / tpd + (attn == Attention::Flash ? score_tok / tpd : 0.0));
        t.layer_recompute_s = attn == Attention::Flash ? 0.0
                              : core_recompute_s >= 0 ? core_recompute_s
                                                      : t.layer_attn_core_fwd_s;
        break;
      case Recompute::Full:  // keep only the layer input, 2sbh (/t under sp) (Korthikanti Sec 4.3)
        t.layer_act_kept_bytes = tok * e * h * repl / (partition ? tpd : 1.0);
        t.layer_recompute_s = t.layer_fwd_s;
        t.layer_recompute_gemm_s = fwd_gemm;
        break;
    }
    // recompute_mla_up_proj: the heads' Q, K and V are not kept; the backward runs the
    // up-projections (latent attention's column-parallel linears) again from the kept latents.
    if (fw.recompute_mla_up_proj && md.mla.enabled() && recompute != Recompute::Full) {
      t.layer_act_kept_bytes -= tok * (as.q + as.k + as.v) / tpd * e;
      t.layer_recompute_s += qkv_gemm;
    }
  }

  void tp_collectives(Recompute recompute) {
    // TP: two all-reduces (or under sp an all-gather + reduce-scatter pair, same volume) in forward
    // and two in backward per layer (Shoeybi et al. 2019 Fig. 4; Korthikanti Sec 4.2.2); a full
    // recompute repeats the forward's two. Under sp the backward all-gathers the layer-norm outputs
    // again for the weight gradients (Korthikanti Sec 4.2.2: the all-gather is recomputed rather
    // than stored): two more all-gathers = one all-reduce's volume. capplan-train, which a device
    // profile prices, keeps the gathered norm outputs for the weight gradients instead (Gpt's
    // activations hold every rank's rows of them), so it gathers nothing more.
    // With latent attention the attention's backward all-reduces the input gradients of its
    // column-parallel layers, the normalised latents (q_lora_rank + kv_lora_rank wide; the hidden
    // state where queries have no latent): column_in / h of one all-reduce; the duplicated
    // down-projections' input gradients are whole on every rank (Megatron-Core MLASelfAttention).
    // Under sp the down-projections run on the rank's own tokens and the attention gathers what
    // its column-parallel layers read, the normalised latents and the shared rotary key part
    // (`gathered` of h, half an all-reduce's volume in h-wide units times that), instead of the
    // hidden state; the backward reduce-scatters their gradients the same way and gathers the
    // latents again for the up-projections' weight gradients (column_in / h of a half).
    t.tp_bytes = tok * h * e;
    const bool latent = md.mla.enabled();
    const double gathered = latent ? (as.column_in + md.mla.qk_rope_head_dim) / h : 1.0;
    const double attn_fwd = seqpar ? 0.5 + 0.5 * gathered : 1.0;
    t.tp_collectives_fwd = tp > 1 ? 1 + attn_fwd : 0;
    const double attn_bwd = seqpar ? 0.5 + 0.5 * gathered : as.column_in / h;
    const double regather = seqpar && !c.profile ? 0.5 + 0.5 * (latent ? as.column_in / h : 1.0) : 0.0;
    t.tp_collectives_bwd =
        tp > 1 ? (1 + attn_bwd + (recompute == Recompute::Full ? t.tp_collectives_fwd : 0) + regather +
                  (partition && recompute == Recompute::Full ? 0.5 : 0.0))
               : 0;
    // The LM head on the last stage (Megatron-LM parallel_lm_logits): its input is copied to the
    // tp ranks (copy_to_tensor_model_parallel_region), whose backward all-reduces the input
    // gradient; under sp the input is all-gathered in the forward and its gradient
    // reduce-scattered in the backward (half an all-reduce's volume each). The vocab-parallel
    // cross-entropy then all-reduces three fp32 values per token: the row maximum, the target's
    // logit and the sum of exponentials (Megatron-LM _VocabParallelCrossEntropy.forward).
    // capplan-train does the same, its last two in one call (Gpt::forward), so the model counts one
    // small all-reduce per micro-batch more than it makes.
    // Megatron-LM from September 2021 (ColumnParallelLinearWithAsyncAllreduce; 2022:
    // LinearWithGradAccumulationAndAsyncCommunication) issues the input-gradient all-reduce of
    // each column-parallel linear (Q, K, V and the FFN's input) asynchronously and computes the
    // weight gradient meanwhile; under sp the input's all-gather runs beside the input-gradient
    // GEMM and the reduce-scatter beside the weight-gradient GEMM. Each such collective can hide
    // behind that GEMM (same FLOPs as the linear's forward GEMM); capplan-train's collectives
    // block (a device profile or a CPU rank: none hidden).
    async_tp = fw.tp_async_bwd && tp > 1 && !c.profile && !sc.cluster.gpu.cpu_rank;
    if (async_tp) {
      t.tp_async_cover_s[0] = qkv_gemm;
      t.tp_async_cover_s[1] = fc_in_gemm;
    }
    // Each multi-token prediction module (mtp_modules below) runs the head's again, and eh_proj's.
    const double k = md.mtp_layers;
    t.head_tp_collectives_fwd = tp > 1 ? (1 + k) * (seqpar ? 0.5 : 0.0) + k * (0.5 + (seqpar ? 1.0 : 0.0)) : 0.0;
    t.head_tp_collectives_bwd = tp > 1 ? (1 + k) * (seqpar ? 0.5 : 1.0) + k * (seqpar ? 1.0 : 2.0) : 0.0;
    t.xent_collectives = tp > 1 ? 3 * (1 + k) : 0;
    t.xent_bytes = tok * 4;
  }

  void embedding_and_head() {
    // Embedding: a gather and position add (memory-bound, ~3 passes over b*s*h), one TP all-reduce
    // for the vocab-parallel lookup (counted in the stage's TP time by evaluate()).
    t.embed_fwd_s = mem_s(c, 3 * tok * h * e);
    t.embed_bwd_s = mem_s(c, 3 * tok * h * e) + mem_s(c, 2 * e * v * h / tpd);  // grad scatter + zero
    t.embed_act_bytes = tok * h * drop * repl;
    // LM head: GEMM [b*s, h] x [h, V/t] forward, two in backward; cross-entropy over fp32 logits
    // (read e, write 4 for the upcast, softmax read + write 8; backward ~ the same).
    const double logits = tok * v / tpd;
    const double head_gemm = gemm_s(c, tok, v / tpd, h);
    t.head_fwd_s = head_gemm + mem_s(c, logits * (e + 12) + 4 * tok * h * e);
    // The logits go through the same autograd function as the column-parallel linears
    // (parallel_lm_logits): the head's backward collective can hide behind its weight gradient.
    if (async_tp) t.tp_async_head_cover_s = head_gemm;
    const double head_bwd_gemm = c.profile ? gemm_s(c, tok, h, v / tpd) + gemm_s(c, h, v / tpd, tok)
                                           : 2 * gemm_s(c, tok, v / tpd, h);
    t.head_bwd_s = head_bwd_gemm + mem_s(c, logits * (4 + 4 + e));
    t.head_gemm_s = head_gemm + head_bwd_gemm;
    t.head_act_bytes = logits * 4;
    mtp_modules();
  }

  // Multi-token prediction (ModelSpec::mtp_layers; DeepSeek-V3 Sec 2.2, Megatron-Core
  // MultiTokenPredictionLayer): each module runs on the last stage after the model's last layer.
  // Its transformer layer is one of the stage's layers (StepEvaluation::layers_on); the rest is
  // charged to the head here: the shifted tokens' embedding lookup, enorm and hnorm, the
  // concatenation, eh_proj [tok, 2h] x [2h, h/t] (column-parallel, its output gathered over tp),
  // the final norm, and the shared LM head with its cross-entropy again. Memory passes per token,
  // in h-wide elements: forward the lookup 3, the two norms 4, the concatenation 4, the final norm
  // 2; backward twice the norms' and the concatenation's and the lookup's gradient scatter 3. The
  // forward keeps the two norms' inputs, the projection's input (2h) and the final norm's input,
  // and the module's fp32 logits, live beside the model's own at the start of the backward (the
  // losses are formed in the forward). TP: the gather of eh_proj's output in the forward and the
  // all-reduce of its 2h-wide input gradient in the backward (under sp the column-parallel
  // layer's input gathered and its gradient reduce-scattered instead: 2h wide, one all-reduce
  // volume each way), and the head's collectives again.
  void mtp_modules() {
    const double k = md.mtp_layers;
    if (k <= 0) return;
    const double logits = tok * v / tpd;
    const double proj = gemm_s(c, tok, h / tpd, 2 * h);
    const double proj_bwd = c.profile ? gemm_s(c, tok, 2 * h, h / tpd) + gemm_s(c, 2 * h, h / tpd, tok) : 2 * proj;
    const double head_fwd = t.head_fwd_s, head_bwd = t.head_bwd_s, head_gemm = t.head_gemm_s;
    t.head_fwd_s += k * (head_fwd + proj + mem_s(c, 13 * tok * h * e * repl));
    t.head_bwd_s += k * (head_bwd + proj_bwd + mem_s(c, 23 * tok * h * e * repl));
    t.head_gemm_s += k * (head_gemm + proj + proj_bwd);
    t.head_act_bytes += k * (logits * 4 + tok * 5 * h * e * repl);
  }

  void parameters() {
    // Per-rank parameters from the profile of a one-block copy (every block is the same).
    ModelSpec one = md;
    one.layers = 1;
    const ModelProfile prof = profile_model(one, tp, sc.seq_len(), mbs, sc.training.precision);
    t.layer_params = prof.layers[1].params;
    t.embed_params = prof.layers.front().params;
    t.final_norm_params = prof.layers[prof.layers.size() - 2].params;
    t.head_params = prof.layers.back().params + t.final_norm_params;
    // Multi-token prediction's eh_proj (split by columns) and three norms per module (mtp_modules).
    t.mtp_head_params = md.mtp_layers * (2 * h * h / tpd + 3 * t.final_norm_params);
    // The largest matrix of a rank's layer (ZeRO-3 units of one linear layer), and the first
    // (Q, K, V; latent attention's query down-projection).
    t.layer_matrix_params = f * h / tpd;
    for (const LinearShape& l : as.linears) t.layer_matrix_params = std::max(t.layer_matrix_params, l.params_per_rank(tpd));
    t.layer_qkv_params = as.linears.front().params_per_rank(tpd);
    // Megatron's scatter/gather optimisation sends 1/t of the activation between stages and
    // all-gathers it over NVLink (Narayanan et al. 2021 Sec 4.1); under sp it is already split.
    // Without it every tp rank sends the whole activation.
    t.p2p_bytes = (fw.p2p_scatter_gather || seqpar) ? tok * h * e / tpd : tok * h * e;
  }

  const Scenario& sc;
  const Constants& c;
  const ModelSpec& md;
  const FrameworkSpec& fw;
  const Attention attn;
  const int tp, mbs;
  const double h, f, a;
  const AttentionShape as;  // the attention's linears and widths (whole, not per rank)
  const double dqk, dv, cw;  // query-key and value head sizes; the core's FLOPs / 4 b s^2
  const double v, s, b, tpd, e;
  const bool gated, dropout;
  const double drop;   // 1 with dropout masks
  const bool fused;    // fused elementwise kernels
  const double tok;
  const bool seqpar;
  const double repl;
  Constants c16;
  MicroTerms t;
  double fwd_gemm = 0;  // the four linear layers' forward GEMMs
  double qkv_gemm = 0, fc_in_gemm = 0;  // of which the column-parallel ones
  double bwd_in_gemm = 0, bwd_w_gemm = 0;  // and their input- and weight-gradient GEMMs
  double core_fwd_s = 0, core_bwd_s = 0, core_mem = 0, core_mem_bwd = 0;  // attention core
  double core_recompute_s = -1;  // a profile's measured recompute of the core (-1: the forward's)
  bool partition = false;  // checkpoints partitioned over tp (DeepSpeed partition_activations)
  bool async_tp = false;   // the backward's column-parallel collectives beside GEMMs (tp_async_bwd)
};

}  // namespace

MicroTerms micro_terms(const Scenario& sc, const Constants& c, int tp, int mbs, bool sp,
                       Recompute recompute) {
  return LayerTerms(sc, c, tp, mbs, sp).run(recompute);
}

MicroTerms layout_micro_terms(const Scenario& sc, const Constants& c, const Layout& ly) {
  return with_batch_split(sc, c, ly, micro_terms(sc, c, ly.tp, ly.mbs, ly.sp, ly.recompute));
}

MicroTerms with_batch_split(const Scenario& sc, const Constants& c, const Layout& ly, MicroTerms mt) {
  const int split = c.profile ? cpu_batch_split(sc, *c.profile, ly) : 1;
  if (split <= 1) return mt;
  // A part's threads are 1 / split of the rank's: the profile's times scale by split more.
  Constants part_c = c;
  scale_rank_compute(part_c, split);
  const MicroTerms part = micro_terms(sc, part_c, ly.tp, ly.mbs / split, ly.sp, ly.recompute);
  // The parts run side by side: a micro-batch takes one part's time. Its FLOPs, bytes and
  // memory stay the whole micro-batch's.
  for (double MicroTerms::*f :
       {&MicroTerms::layer_fwd_s, &MicroTerms::layer_bwd_in_s, &MicroTerms::layer_bwd_w_s,
        &MicroTerms::layer_recompute_s, &MicroTerms::layer_attn_core_fwd_s, &MicroTerms::layer_gemm_s,
        &MicroTerms::layer_recompute_gemm_s, &MicroTerms::head_gemm_s, &MicroTerms::embed_fwd_s,
        &MicroTerms::embed_bwd_s, &MicroTerms::head_fwd_s, &MicroTerms::head_bwd_s,
        &MicroTerms::layer_attn_fwd_full_s, &MicroTerms::layer_attn_bwd_full_s})
    mt.*f = part.*f;
  return mt;
}

double profile_attention_scale(const DeviceProfile* dev, int heads, double mbs, double tp, double seq) {
  if (!dev || dev->heads != heads || dev->seq <= 0 || dev->mbs <= 0 || dev->tp <= 0) return -1;
  const double at_profile = double(dev->mbs) * (double(heads) / dev->tp) * double(dev->seq) * dev->seq;
  return mbs * (heads / tp) * seq * seq / at_profile;
}

int chunk_layers(int layers, int chunks, int c) {
  const int base = layers / chunks;
  const int rem = layers % chunks;
  return base + ((c >= 1 && c <= rem) ? 1 : 0);
}

int stage_blocks(const ModelSpec& model, int pp, int vp, int stage) {
  return stage_layers(model.layers, pp, vp, stage) + (stage == pp - 1 ? model.mtp_layers : 0);
}

int stage_layers(int layers, int pp, int vp, int stage) {
  const int chunks = pp * vp;
  const int base = layers / chunks;
  const int rem = layers % chunks;
  int extra = rem >= stage ? std::min(vp, (rem - stage) / pp + 1) : 0;
  if (stage == 0 && rem >= 0) extra = std::max(0, extra - 1);  // chunk 0 gets no remainder
  return vp * base + extra;
}

double meeting_among_s(const DeviceProfile* dev, int ranks, int group, double own, Meeting kind,
                       bool after_compute) {
  if (!dev || dev->backend != "cpu" || dev->cores <= 0 || group < 2) return own;
  if (ranks > dev->cores)
    return std::max(own, kind == Meeting::Exchange ? dev->shared_handoff_s(ranks, /*lockstep=*/true)
                                                   : dev->shared_allreduce_s(ranks, group));
  if (kind == Meeting::Exchange && after_compute && dev->lockstep.exchange_bytes > 0) {
    // The profile timed a context ring's own exchange in lockstep: the swap's time and the wait for
    // the neighbour. This exchange takes its own time and that wait (the measured meeting less the
    // measured swap's own time at its bytes).
    // (Without a timed send/recv, the measured meeting as it is.)
    const double swap = dev->collective_seconds("send-recv", 2, dev->lockstep.exchange_bytes);
    return swap > 0 ? own + std::max(0.0, dev->lockstep.exchange_s - swap) : std::max(own, dev->lockstep.exchange_s);
  }
  // Sequence parallelism's pair where the profile timed it in lockstep (capplan-train measure): the
  // gather and the ring reduce-scatter move the bytes of the all-reduce they replace but meet
  // twice (on a 2-core KVM guest, in one profile, 0.084 ms a pair against 0.076 an all-reduce;
  // tp 2's runs beside it spent 14.5 ms a step in them under sp, 13.1 without).
  if (kind == Meeting::SequenceParallel && after_compute && dev->lockstep.sp_bytes > 0)
    return std::max(own, dev->lockstep.sp_s);
  return after_compute ? std::max(own, dev->lockstep.allreduce_s) : own;
}

double lockstep_meeting_s(const Scenario& sc, const Constants& c, const Layout& ly, int group, double own,
                          Meeting kind, bool after_compute) {
  return meeting_among_s(c.profile, gpus_on_a_node(sc.cluster.gpus_per_node, ly.gpus()), group, own, kind,
                         after_compute);
}

namespace {

// Chunk-micro-batches whose activations stage `s` holds at its peak. GPipe: all m (Huang et al.
// 2019). 1F1B: p - s in flight (Narayanan et al. 2021 Sec 2.2.1). Interleaved: Megatron's warm-up
// of (p - s - 1) * 2 + (vp - 1) * p forward chunks plus the one in progress, which at s = 0 gives
// Korthikanti's factor (1 + (p-1)/(p vp)) in layer units (Sec 4.2.3).
int64_t inflight_chunks(Schedule sch, int pp, int vp, int64_t m, int s) {
  switch (sch) {
    case Schedule::GPipe: return m * vp;
    case Schedule::OneFOneB: return std::min<int64_t>(m, pp - s) * vp;
    case Schedule::Interleaved:
      return std::min<int64_t>(m * vp, int64_t(pp - s - 1) * 2 + int64_t(vp - 1) * pp + 1);
  }
  return m;
}

struct StageCost {
  double compute = 0, recompute = 0, tp = 0, tp_bwd = 0, p2p = 0, bwd = 0, fwd = 0;
  int sends = 0;
  double offload = 0;  // exposed activation copies per micro-batch
  double offload_bwd_chunk = 0;  // exposed copy back to the GPU per chunk backward
  double ep = 0, cp = 0;  // expert all-to-alls and exposed context ring (cost_model_moe.cpp)
  double work() const { return compute + recompute + tp + ep + cp; }  // compute-stream time per micro-batch
  double total() const { return work() + p2p + offload; }
};

// One tensor-parallel all-reduce of CPU ranks in lockstep: at least the profile's measured time for
// an all-reduce that ranks meeting in it every half layer spend in it (its own time and the wait
// for the last rank; taking turns on the host's cores where the host's ranks outnumber them, for
// that many ranks in groups of tp, else with a core each; cost_model_cores.cpp), else the
// collective's own time `own`.
// `after_compute` false: a collective that follows another with only a short elementwise pass
// between them (the cross-entropy's), where the ranks arrive together: with a core each it takes
// its own time; taking turns on the cores it still waits for its partner's turn.
double lockstep_allreduce_s(const Scenario& sc, const Constants& c, const Layout& ly, double own,
                            bool after_compute = true) {
  return lockstep_meeting_s(sc, c, ly, ly.tp, own, Meeting::AllReduce, after_compute);
}

// How much of a layer's backward collectives hides per micro-batch where they run beside GEMMs
// (MicroTerms::tp_async_cover_s): each column-parallel linear's collective (one all-reduce's
// volume, `ar`) as far as its GEMM lasts. Under sp the volume is two halves, the all-gather beside
// the input-gradient GEMM and the reduce-scatter beside the weight-gradient GEMM, each as long as
// `cover`.
double async_tp_hidden_s(const MicroTerms& mt, double ar, bool sp) {
  double hidden = 0;
  for (const double cover : mt.tp_async_cover_s)
    if (cover > 0) hidden += sp ? 2 * std::min(0.5 * ar, cover) : std::min(ar, cover);
  return hidden;
}

// One pipeline send of a micro-batch's activation or gradient: its bytes at the placement's
// point-to-point link. CPU ranks with a core each on one host (a device profile's lockstep timed
// it): capplan-train posts the send as the sender's compute ends, and the receiver takes it after
// its own compute, as a context ring's exchange around each segment is timed in lockstep; the
// transfer then also waits that meeting's wait (meeting_among_s, Meeting::Exchange). pp 2 on 2
// cores, 256 KB: each receive 0.13-0.14 ms (mean over a run's 48 of either direction) against
// 0.054 priced by the link and 0.060 for the profile's cold send-recv; the lockstep exchange around
// each segment 0.093-0.150 ms in this host's profiles.
double pipeline_transfer_s(const Scenario& sc, const Constants& c, const Layout& ly, const Placement& pl,
                           const MicroTerms& mt) {
  const double own = pl.p2p_lat_s + mt.p2p_bytes / pl.p2p_Bps;
  const DeviceProfile* dev = c.profile;
  if (!dev || dev->backend != "cpu" || dev->cores <= 0 || pl.pp.nodes > 1 || dev->lockstep.exchange_bytes <= 0)
    return own;
  const int on_host = gpus_on_a_node(sc.cluster.gpus_per_node, ly.gpus());
  if (on_host > dev->cores) return own;  // shared cores: the hand-off (cost_model_cores.cpp)
  return meeting_among_s(dev, on_host, 2, own, Meeting::Exchange, /*after_compute=*/true);
}

// One layout's step time and memory, in named steps over shared inputs: the pace of the pipeline
// from its stages' costs, the data-parallel traffic, the optimizer and weight streaming, the
// memory of the stages that can peak, and the per-chunk costs the simulator replays.
class StepEvaluation {
 public:
  StepEvaluation(const Scenario& sc, const Constants& c, const Layout& ly, int64_t m, const MicroTerms& mt,
                 const Placement& pl, const TpCollectiveTimes& tpt)
      : sc(sc), c(c), ly(ly), m(m), mt(mt), pl(pl), fw(sc.training.framework), tr(sc.training),
        pp(ly.pp), vp(ly.vp), L(sc.model.layers), tp_ar(tpt.layer), tp_ar_own(tpt.layer_own),
        layer_tp_bwd(with_hidden_cost(mt.tp_collectives_bwd * tp_ar, async_tp_hidden_s(mt, tp_ar, ly.sp && ly.tp > 1))),
        head_tp_fwd(mt.head_tp_collectives_fwd * tp_ar + mt.xent_collectives * tpt.xent),
        head_tp_bwd(with_hidden_cost(mt.head_tp_collectives_bwd * tp_ar,
                                     std::min(mt.head_tp_collectives_bwd * tp_ar, mt.tp_async_head_cover_s))),
        p2p(pp > 1 ? pipeline_transfer_s(sc, c, ly, pl, mt) : 0.0),
        vpd(ly.schedule == Schedule::Interleaved ? double(vp) : 1.0), md(double(m)), dp(ly.dp),
        w_elem(c.elem_bytes), g_elem(c.grad_bytes), nl_first(stage_blocks(sc.model, pp, vp, 0)),
        nl_second(pp > 1 ? stage_blocks(sc.model, pp, vp, 1) : nl_first),
        nl_last(stage_blocks(sc.model, pp, vp, pp - 1)) {}

  void run(Evaluation& out, StepCosts* steps) {
    pace();
    data_parallel();
    optimizer_and_weight_streaming();
    memory();
    tb.offload += md * crit.offload;
    share_cores();
    best.capacity = sc.cluster.gpu.memory_bytes();

    out.mem = best;
    out.time = tb;
    out.gemm_s = gemm;
    out.step_s = tb.sum();
    out.fits = best.total <= best.capacity;
    out.host_bytes_per_node = host_bytes * gpus_on_a_node(sc.cluster.gpus_per_node, sc.total_gpus());
    out.host_capacity_bytes = sc.cluster.host_memory_gib * 1024.0 * 1024.0 * 1024.0 * kHostMemoryUsable;
    out.host_bytes_per_node += host_state_bytes * gpus_on_a_node(sc.cluster.gpus_per_node, sc.total_gpus());
    if ((ly.offload || tr.offload_params || tr.offload_optimizer) && out.host_capacity_bytes > 0 &&
        out.host_bytes_per_node > out.host_capacity_bytes)
      out.fits = false;
    out.critical_stage = crit_s;
    out.cp_hidden_share = cp_hidden_share;
    out.memory_stage = mem_s_idx;
    if (steps) chunk_costs(*steps);
  }

 private:
  // One stage's costs per micro-batch.
  StageCost stage_cost(int s) const {
    StageCost st;
    const double nl = layers_on(s);
    st.fwd = nl * mt.layer_fwd_s;
    st.bwd = nl * (mt.layer_bwd_in_s + mt.layer_bwd_w_s);
    st.compute = st.fwd + st.bwd;
    st.recompute = nl * mt.layer_recompute_s;
    st.tp = nl * (mt.tp_collectives_fwd * tp_ar + layer_tp_bwd);
    st.tp_bwd = nl * layer_tp_bwd;
    st.ep = nl * (mt.layer_ep_comm_fwd_s + mt.layer_ep_comm_bwd_s);
    st.cp = nl * (mt.layer_cp_comm_fwd_s + mt.layer_cp_comm_bwd_s);
    if (s == 0) {
      st.compute += mt.embed_fwd_s + mt.embed_bwd_s;
      st.fwd += mt.embed_fwd_s;
      st.tp += ly.tp > 1 ? tp_ar : 0.0;
    }
    if (s == pp - 1) {
      st.compute += mt.head_fwd_s + mt.head_bwd_s;
      st.fwd += mt.head_fwd_s;
      st.bwd += mt.head_bwd_s;
      st.tp += head_tp_fwd + head_tp_bwd;
      st.tp_bwd += head_tp_bwd;
    }
    if (!fw.grad_accumulation_fusion && m > 1) {
      // Unfused gradient accumulation (PyTorch autograd into .grad, DeepSpeed): every micro-batch
      // after the first adds its weight gradients to the accumulator in a separate kernel that
      // reads the new gradient (16 bits) and reads and writes the accumulator, per parameter of
      // the stage (Megatron-LM fuses it into the weight-gradient GEMM: gradient_accumulation_fusion).
      // A tied LM head on the embedding's stage shares its gradient: counted once.
      const double acc = accumulation_s(stage_params(s));
      st.bwd += acc;
      st.compute += acc;
    }
    // Each chunk sends its output forward and its input gradient backward once per micro-batch,
    // except at the ends of the model: the first stage's first chunk sends nothing backward and the
    // last stage's last chunk nothing forward (Megatron-LM p2p_communication). A send blocks the
    // sender until it completes; it is not overlapped with compute in the 1F1B steady state.
    // Where a receive blocks for the transfer too (p2p_blocking_recv: DeepSpeed's pipeline engine
    // sends with a broadcast, or send/recv, in the two stages' group with async_op=False, so both
    // ranks' streams wait for it, deepspeed/runtime/pipe/p2p.py; and its TrainSchedule receives the
    // next micro-batch before it sends the previous one, schedule.py), the stage also waits out each
    // message it receives: as many as it sends, so a middle stage's stream waits for four transfers
    // per micro-batch instead of two.
    st.sends = pp > 1 ? 2 * vp - (s == 0 ? 1 : 0) - (s == pp - 1 ? 1 : 0) : 0;
    const double transfers = fw.p2p_blocking_recv ? 2.0 : 1.0;
    st.p2p = transfers * st.sends * p2p;
    if (ly.offload) {
      // Activation offload layer by layer on the PCIe stream (Megatron-LM / Transformer Engine
      // CPU offloading): a chunk's copy to host runs beside its forward and the copy back beside
      // its backward, and the next compute waits for both the copy and the blocking send, so per
      // chunk and direction the stage loses max(send, copy - compute) instead of the send:
      // x_f = max(0, off - f - tp_f) and x_b = max(0, off - (b + recompute + tp_b)) per
      // micro-batch, spread over the vp chunks. Exposed copies are charged to offload, the sends
      // only where they are longer than the copy.
      //
      // A copy that blocks the host (offload_sync: PyTorch save_on_cpu's pack hook is a plain
      // copy_ to pinned memory, its unpack a copy on the current stream, torch/autograd/graph.py)
      // runs in series with the compute stream both ways: all of it is exposed, and the sends with it.
      const double off = (nl * mt.layer_act_kept_bytes + (s == 0 ? mt.embed_act_bytes : 0.0)) / c.pcie_Bps;
      const bool serial = fw.offload_sync;
      const double xf = serial ? off / vp : std::max(0.0, off - st.fwd - (st.tp - st.tp_bwd)) / vp;
      const double xb = serial ? off / vp : std::max(0.0, off - (st.compute - st.fwd) - st.recompute - st.tp_bwd) / vp;
      const int nf = pp > 1 ? vp - (s == pp - 1 ? 1 : 0) : 0;  // chunks that send forward
      const int nb = pp > 1 ? vp - (s == 0 ? 1 : 0) : 0;       // chunks that send backward
      st.offload = vp * (xf + xb);
      st.offload_bwd_chunk = xb;
      st.p2p = transfers * (serial ? (nf + nb) * p2p : nf * std::max(0.0, p2p - xf) + nb * std::max(0.0, p2p - xb));
    }
    if (ep_overlapped()) st.ep = overlapped_ep(st, s, nl);
    return st;
  }

  // The share of a stage's all-to-all time it exposes per micro-batch (overlapped_ep).
  double exposed_ep_share(int s) const {
    const double whole = layers_on(s) * (mt.layer_ep_comm_fwd_s + mt.layer_ep_comm_bwd_s);
    return whole > 0 ? stage_cost(s).ep / whole : 1.0;
  }

  // Expert all-to-alls overlapped across paired micro-batches (FrameworkSpec::ep_overlap): where
  // there are all-to-alls (an MoE model over ep > 1 ranks; this evaluation sees the dense slice of
  // it, cost_model_moe.cpp), under a 1F1B or interleaved schedule and without full recompute.
  // capplan-train's all-to-alls block (a device profile or a CPU rank: none paired), as its
  // tensor-parallel collectives do.
  bool ep_overlapped() const {
    return fw.ep_overlap && mt.layer_ep_comm_fwd_s + mt.layer_ep_comm_bwd_s > 0 &&
           ly.schedule != Schedule::GPipe && ly.recompute != Recompute::Full && !c.profile &&
           !sc.cluster.gpu.cpu_rank;
  }

  // A stage's exposed all-to-all time per micro-batch when the schedule runs one micro-batch's
  // forward beside another's backward (Megatron-Core's combined 1F1B; DeepSeek-V3 report
  // Sec 3.2.1, Fig. 4): the forward's dispatch and combine (a) hide behind the paired backward's
  // computation (b, with its recompute) and the backward's (a_b) behind the forward's (f),
  //   pair = max(0, a_f - b) + max(0, a_b - f) + kHiddenCollectiveCost x (what hides),
  // the hidden part charged as every collective beside compute is. A pass has no partner in the
  // warm-up and the cool-down: the stage's first u = min(m, p - s) forwards (1F1B; the interleaved
  // schedule's warm-up chunks, inflight_chunks) and its last u backwards keep their all-to-alls
  // whole. Per micro-batch on average: (u (a_f + a_b) + (m vp - u) pair) / (m vp) in chunk units.
  double overlapped_ep(const StageCost& st, int s, double nl) const {
    const double a_f = nl * mt.layer_ep_comm_fwd_s, a_b = nl * mt.layer_ep_comm_bwd_s;
    if (a_f + a_b <= 0) return 0.0;
    const double f = st.fwd, b = st.compute - st.fwd + st.recompute;
    const double hidden = std::min(a_f, b) + std::min(a_b, f);
    const double pair = with_hidden_cost(a_f + a_b, hidden);
    const double passes = md * vp;
    const double alone = std::min(passes, double(inflight_chunks(ly.schedule, pp, vp, m, s)));
    return (alone * (a_f + a_b) + (passes - alone) * pair) / passes;
  }

  // Unfused gradient accumulation of `params` per micro-batch on average (stage_cost): every
  // micro-batch after the first reads the new 16-bit gradient and reads and writes the accumulator.
  double accumulation_s(double params) const {
    return mem_s(c, params * (c.elem_bytes + 2 * c.grad_bytes)) * double(m - 1) / double(m);
  }

  // A device profile of CPU ranks that knows its host's cores: ranks outnumbering them time-share
  // them (cost_model_cores.cpp). The host's work is its share of every rank's compute-stream work
  // (the ranks of a stage all do that stage's; each rank runs the optimizer step), which is
  // exact for one host and the mean share for several.
  void share_cores() {
    const DeviceProfile* dev = c.profile;
    optimizer_own = tb.optimizer;
    if (!dev || dev->cores <= 0 || dev->backend != "cpu") return;
    const int ranks = ly.gpus();
    const int on_host = gpus_on_a_node(sc.cluster.gpus_per_node, ranks);
    if (on_host <= dev->cores && dev->ranks <= dev->cores) return;  // a core each: nothing shared
    // Where the ranks outnumber the cores a pipeline's transfer takes the longer of its copy at
    // the shared cores' speed and the profile's measured hand-off; of that, the receiving rank's
    // copy at a core's speed is pp_comm and the rest its wait for the message and a core, bubble
    // (cost_model_cores.cpp). The simulator's transfers take all of it.
    const double copy_stretch = shared_copy_stretch(on_host, dev->cores, dev->ranks);
    // Tensor-parallel ranks meet every half layer. The ranks of a context ring or an expert group
    // reach this evaluation through the dense slice (cp = ep = 1, cost_model_moe.cpp): they compute
    // whole attention blocks and layers between their exchanges and share the cores as
    // data-parallel ranks do (dp 2 x cp 2 on 2 cores computed 241-315 ms a step in four
    // benchmark runs, 296-344 so priced; 303-314 with the ring's measured attention), their
    // exchanges priced there.
    const bool lockstep = ranks_in_lockstep(ly);
    // Stages in lockstep poll in their all-reduces yielding the core, so a stage whose message
    // has come gets a core sooner than beside stages that compute whole passes: the profile's
    // hand-off beside pairs in lockstep (1.1 against 1.6 ms among 4 ranks on 2 cores, 2.8 against
    // 6.1 among 8, in one profile).
    const double handoff_s = pp > 1 && on_host > dev->cores ? dev->shared_handoff_s(on_host, lockstep) : -1.0;
    pp_handoff_factor = p2p > 0 && handoff_s > 0 ? std::max(copy_stretch, handoff_s / p2p) : copy_stretch;
    double stages = 0;
    std::vector<double> work(size_t(pp), 0.0);  // each stage's compute-stream work per micro-batch
    for (int s = 0; s < pp; ++s) {
      const StageCost st = stage_cost(s);
      work[size_t(s)] = st.compute + st.recompute;
      stages += md * work[size_t(s)];
    }
    const double all = double(ranks) / pp * stages + double(ranks) * tb.optimizer;
    // The transfers' part beyond their copies at a core's speed (pp_comm; share_host_cores).
    const double transfers = std::max(0.0, tb.pp_comm - embedding_sync);
    const double handoff = (pp_handoff_factor - profile_core_share(dev->cores, dev->ranks)) * transfers;
    const double stretch = lockstep && on_host > dev->cores ? dev->shared_compute_stretch(on_host, ly.tp) : 1.0;
    // The ranks side by side reach a measured fraction of the processor-sharing ideal: the cores
    // do that much less work.
    const double efficiency = host_efficiency(*dev, on_host);
    const PipelineWalk walk = pipeline_walk(work, on_host, dev->cores * efficiency);
    const double passes = tb.compute + tb.recompute;
    HostSharing host{.host_busy_s = all * on_host / ranks,
                     .ranks_on_host = on_host,
                     .cores = dev->cores,
                     .profile_ranks = dev->ranks,
                     .lockstep = lockstep,
                     .handoff_s = handoff,
                     .pp_transfers_s = transfers,
                     .lockstep_stretch = std::max(1.0, stretch),
                     .pipeline_s = walk.total_s,
                     .fill_drain_stretch = walk.fill_drain_stretch,
                     .free_efficiency = efficiency,
                     // A context ring's waits for a neighbour still computing are not the cores' work.
                     .hidden_wait_s = tb.cp_comm * mt.cp_wait_share,
                     .dp_comm_on_shared_cores = dp_on_shared_cores,
                     .optimizer_stretch = on_host > dev->cores && !norm_sum_last()
                                              ? dev->shared_optimizer_stretch(on_host)
                                              : 1.0};
    fill_collectives(host, *dev, on_host);
    const TimeBreakdown shared = share_host_cores(tb, host);
    if (host.hidden_wait_s > 0 && tb.cp_comm > 0) {  // what hiding took off the step
      HostSharing plain = host;
      plain.hidden_wait_s = 0;
      cp_hidden_share = std::clamp((share_host_cores(tb, plain).sum() - shared.sum()) / tb.cp_comm, 0.0, 1.0);
    }
    tb = shared;
    if (passes > 0) gemm *= (tb.compute + tb.recompute) / passes;  // the GEMMs stretch with the passes
  }

  // The fill and drain of a tensor-parallel pipeline on shared cores run fewer stages than the
  // steady state: slot k of the fill has k + 1 stages active (the drain the same in reverse), so
  // its all-reduces meet among those stages' ranks, at the profile's measured meeting for that
  // many (with a core each where they do not outnumber the cores) rather than the whole host's.
  // The bubble's collectives are the critical stage's share of its work per micro-batch (pace()
  // builds the fill from the stages' work), and they take the mean meeting over the fill's slots.
  // tp 2 x pp 2 on 2 cores (4 ranks): the fill and drain run one stage's 2 ranks, a core each.
  void fill_collectives(HostSharing& host, const DeviceProfile& dev, int on_host) const {
    if (!host.lockstep || pp < 2 || tp_ar <= 0 || tb.bubble <= 0) return;
    // pace()'s pacing stage: its compute-stream work per micro-batch, the collectives' share of it.
    const double work = crit.work();
    if (work <= 0 || crit.tp <= 0) return;
    // Without a measured meeting on the shared cores the steady state's all-reduces are their own
    // time, not the host's meeting: the fill stretches whole, collectives and all.
    if (dev.shared_allreduce_s(on_host, ly.tp) <= 0) return;
    double fill = 0;
    for (int a = 1; a < pp; ++a)
      fill += meeting_among_s(&dev, int(std::lround(double(a) * on_host / pp)), ly.tp, tp_ar_own, Meeting::AllReduce);
    fill /= pp - 1;
    host.bubble_tp_s = tb.bubble * crit.tp / work;
    host.fill_tp_factor = std::min(1.0, fill / tp_ar);
  }

  // The fraction of processor sharing's ideal that `on_host` CPU ranks reach side by side where
  // they outnumber the host's cores: the profile's measurement (its reader holds it in (0, 1]),
  // interpolated in the ranks; 1 where they do not outnumber them or it was not measured.
  static double host_efficiency(const DeviceProfile& dev, int on_host) {
    const double e = on_host > dev.cores ? dev.shared_free_efficiency(on_host) : -1.0;
    return e > 0 ? e : 1.0;
  }

  // The pipeline walked through the 1F1B schedule's slots, the slot's active ranks sharing the
  // host's cores (cost_model_cores.cpp); `work`: each stage's compute-stream work per micro-batch.
  // Slot k runs stages 0 .. a_k - 1 (the fill reaches stage k; in the drain the last stages
  // finish first), each stage's r ranks on the host with a chunk's work. Processor sharing
  // (Kleinrock 1967) runs k unfinished tasks each at min(1, c / k) of a core, so the slot ends
  // when its longest task does: with the tasks' works sorted, v_1 <= ... <= v_N,
  //   slot = sum_i (v_i - v_{i-1}) max(1, (N - i + 1) / c).
  // `total_s`: the walk's time (0 without a pipeline). `fill_drain_stretch`: how much longer the
  // fill and drain (the slots with fewer than pp stages active) take so than with a core for each
  // rank: dp 2 x tp 2 x pp 2 on 2 cores runs one stage's 4 ranks in them, at half a core each (2;
  // 1 for tp 2 x pp 2's 2 ranks).
  struct PipelineWalk {
    double total_s = 0, fill_drain_stretch = 1;
  };
  PipelineWalk pipeline_walk(const std::vector<double>& work, int on_host, double cores) const {
    if (pp < 2) return {};
    const double r = double(on_host) / pp;  // ranks of a stage on the host
    std::vector<double> shared(size_t(pp) + 1, 0.0), own(size_t(pp) + 1, 0.0);  // by a, the active stages
    for (int a = 1; a <= pp; ++a) {
      std::vector<double> v(work.begin(), work.begin() + a);
      std::sort(v.begin(), v.end());
      double prev = 0;
      for (int i = 0; i < a; ++i) {
        shared[size_t(a)] += (v[size_t(i)] - prev) / vpd * std::max(1.0, double(a - i) * r / cores);
        prev = v[size_t(i)];
      }
      own[size_t(a)] = v.back() / vpd;
    }
    const int64_t n = m * int64_t(vpd) + pp - 1;
    PipelineWalk w;
    double fill_drain = 0, fill_drain_own = 0;
    for (int64_t k = 0; k < n; ++k) {
      const size_t a = size_t(std::min({k + 1, int64_t(pp), n - k}));
      w.total_s += shared[a];
      if (a < size_t(pp)) fill_drain += shared[a], fill_drain_own += own[a];
    }
    if (fill_drain_own > 0) w.fill_drain_stretch = std::max(1.0, fill_drain / fill_drain_own);
    return w;
  }

  // Parameters of `nl` layers and of the embedding and the LM head where a stage or chunk holds
  // them. A tied LM head shares the embedding's weights when both are in one piece; across pieces
  // the last holds a copy (Megatron-LM). Multi-token prediction's modules sit with the head, and
  // look up the embedding there: across pieces the last holds a copy of it too (Megatron-Core
  // builds the embedding on the last stage for them and sums its gradient with the first's).
  double piece_params(double nl, bool embedding, bool head) const {
    double p = nl * mt.layer_params;
    if (embedding) p += mt.embed_params;
    if (head) {
      p += (embedding && sc.model.tied_embeddings ? mt.final_norm_params : mt.head_params) + mt.mtp_head_params;
      if (!embedding && !sc.model.tied_embeddings && sc.model.mtp_layers > 0) p += mt.embed_params;
    }
    return p;
  }
  double stage_params(int s) const { return piece_params(layers_on(s), s == 0, s == pp - 1); }

  void pace() {
    // Pace of the pipeline. In the steady state of 1F1B every stage runs one forward and one
    // backward per slot, so the slowest stage c sets the pace: m slots of its work plus sends. The
    // fill and drain are not paced by c: the first micro-batch reaches c after the forwards of the
    // stages before it, the last one leaves stage 0 after their backwards, and the stages after c
    // hold up c's first backward only by what exceeds the (p - 1 - c) forwards c runs meanwhile:
    //   T(c) = m (w_c + n_c p2p) + [sum_{s<c} w_s + max(0, sum_{s>c} w_s - (p-1-c) f_c)] / vp
    //          + 2 (p - 1) p2p / vp,
    // with w_s the compute-stream work of stage s per micro-batch, n_c its sends and f_c its
    // forward. Interleaving divides the fill by vp (each chunk is 1/vp of the stage; Narayanan et
    // al. 2021 Sec 2.2.2). For equal stages T = (m + (p-1)/vp) w + ..., the textbook bubble. Each
    // T(c) is a lower bound on the step (a path through the schedule's dependency graph); the
    // step is their maximum over the stages that can pace (first, second with the most remainder
    // layers, last with the LM head). The simulator, replaying the same per-chunk costs, agrees
    // within 2 % (tests/simulator/test_plan_simulation.cpp). Under-counts the stalls of interleaving
    // when the chunks of one stage hold different numbers of layers (pp * vp not dividing L): up to
    // ~11 % in the simulator, not modelled here.
    const double sum_work = sc.model.trained_layers() *
                                (mt.layer_fwd_s + mt.layer_bwd_in_s + mt.layer_bwd_w_s + mt.layer_recompute_s +
                                 mt.tp_collectives_fwd * tp_ar + layer_tp_bwd + mt.layer_ep_comm_fwd_s +
                                 mt.layer_ep_comm_bwd_s + mt.layer_cp_comm_fwd_s + mt.layer_cp_comm_bwd_s) +
                      mt.embed_fwd_s + mt.embed_bwd_s + (ly.tp > 1 ? tp_ar : 0.0) + mt.head_fwd_s + mt.head_bwd_s +
                      head_tp_fwd + head_tp_bwd;
    double best_T = -1;
    s0 = stage_cost(0);
    {
      const int cands[3] = {0, std::min(1, pp - 1), pp - 1};
      for (int k = 0; k < 3; ++k) {
        const int s = cands[k];
        if (k > 0 && (s == 0 || (k == 2 && s == cands[1]))) continue;
        const StageCost st = k == 0 ? s0 : stage_cost(s);
        const double before = s == 0 ? 0.0 : s0.work();
        const double after = std::max(0.0, sum_work - before - st.work());
        const double fill = (before + std::max(0.0, after - (pp - 1 - s) * st.fwd)) / vpd;
        const double T = md * st.total() + fill;
        if (T > best_T) {
          best_T = T;
          best_fill = fill;
          crit = st;
          crit_s = s;
        }
      }
    }
    tb.compute = md * crit.compute;
    tb.recompute = md * crit.recompute;
    // The GEMMs within the pacing stage's compute and recompute (the linear layers' and the LM
    // head's), worked out once here rather than in every stage_cost.
    gemm = md * (layers_on(crit_s) * (mt.layer_gemm_s + mt.layer_recompute_gemm_s) +
                 (crit_s == pp - 1 ? mt.head_gemm_s : 0.0));
    tb.tp_comm = md * crit.tp;
    tb.ep_comm = md * crit.ep;
    tb.cp_comm = md * crit.cp;
    tb.pp_comm = md * crit.p2p + (pp > 1 ? 2.0 * (pp - 1) * p2p / vpd : 0.0);
    tb.bubble = best_fill;
    // A tied LM head across stages: the last stage's copy of the word embedding and the first
    // stage's own each get half of its gradient, and the two stages sum them (an all-reduce over
    // Megatron-LM's embedding group of the first and last stage, per tp rank its vocab-parallel
    // shard, after the backward and before the optimizer; Shoeybi et al. 2019 Sec 3 ties the
    // embedding to the output layer; Megatron-LM training.py / finalize_model_grads
    // `_allreduce_word_embedding_grads`; DeepSpeed's pipeline engine reduces tied modules'
    // gradients the same way, `_exec_reduce_tied_grads`). Not overlapped: both wait for it.
    // Multi-token prediction's copy of an untied embedding on the last stage is summed the same way.
    if (pp > 1 && (sc.model.tied_embeddings || sc.model.mtp_layers > 0)) {
      Links ends = pl.pp;
      ends.n = 2;
      ends.nodes = pl.pp.nodes > 1 ? 2 : 1;
      ends.per_node = 3 - ends.nodes;
      const double bytes =
          (sc.model.tied_embeddings ? mt.head_params - mt.final_norm_params : mt.embed_params) * g_elem;
      // Two members: each sends its gradient to the other and both receive at once (capplan-train
      // sync_tied_embedding sends a copy it has just made), the bytes a ring all-reduce of two
      // moves each way. A device profile's measured point-to-point time where it has one.
      const double exchange = ends.profile && ends.nodes == 1 ? ends.profile->collective_seconds("send-recv", 2, bytes)
                                                               : -1.0;
      embedding_sync = exchange > 0 ? exchange : allreduce_s(ends, bytes);
      tb.pp_comm += embedding_sync;
    }
  }

  // ZeRO-3 in rank-share mode: sets dp_s. Weights all-gathered for forward and again for
  // backward, gradients reduce-scattered, per micro-batch: 1.5x an all-reduce each time
  // (Rajbhandari et al. 2020 Sec 7.2.2). Every parameter is partitioned over all dp ranks and each
  // rank fetches the remote shards itself, so across nodes a rank gets its own share of the NICs,
  // NIC / gpus_per_node (the "bandwidth-centric partitioning" of ZeRO-Infinity, Rajbhandari et al.
  // 2021 Sec 6.1), not the hierarchical ring of an all-reduce.
  void rank_share_zero3() {
    Links z3 = pl.dp;
    if (z3.nodes > 1) {
      const int gpus_in_node = gpus_on_a_node(sc.cluster.gpus_per_node, sc.total_gpus());
      z3.bw_Bps = c.inter_node_Bps / gpus_in_node;
    }
    // Each collective pays a ring's latency (ring_latency_s), and DeepSpeed issues many: per
    // module of the stage, or per parameter tensor (zero3_collectives), each pass.
    const Zero3Calls calls = zero3_calls();
    const double experts =
        mt.layer_expert_params * mt.expert_gather_share * std::max(layers_on(0), layers_on(pp - 1));
    dp_s = md * (2 * allgather_s(z3, (params_crit + experts) * w_elem) +
                 reducescatter_s(z3, grad_bytes + experts * g_elem) +
                 (2 * (calls.gathers - 1) + (calls.reductions - 1)) * ring_latency_s(z3));
  }

  // ZeRO-3 in ring mode: sets dp_s (all its traffic) and z3_exposed (what the step waits for).
  void ring_zero3() {
    // ZeRO-3 as PyTorch FSDP runs it (Zhao et al. 2023 Sec 3): each unit's flat parameter is
    // all-gathered (NCCL ring over the dp group, at the links placement() gives it) before its
    // forward and again before its backward, and its gradient reduce-scattered after its
    // backward, per micro-batch. The collectives run on their own stream, `prefetch` layers
    // ahead: layer i+1's gather runs during layer i's forward, and during layer i's backward
    // (after its recompute) the gather of layer i-1 and the reduce-scatter of layer i. What a
    // layer's compute cannot cover is exposed; the first gather of each pass always is
    // (zero3_backward_prefetch: pre; post and none below). Without prefetch (0) nothing overlaps.
    //  - Units smaller than the checkpointed layer (zero3_unit: linear) lie inside the region
    //    torch.utils.checkpoint recomputes: the recomputed forward gathers them again and frees
    //    them after it (reshard_after_forward), and the backward's pre-backward hook gathers
    //    them once more (FSDP _rebuild_full_params / _free_full_params), so a step with full
    //    recompute gathers each weight three times instead of two.
    //  - Parameters offloaded to the host: each gather first copies the rank's shard up over
    //    PCIe on the same stream (FSDP _rebuild_full_params: p.data.to(device) inside the
    //    all_gather stream, before _all_gather_base), in series with the gather.
    //  - Activation offload that blocks the host (offload_sync): after each layer's forward the
    //    host waits for the GPU, so the next layer's first unit (its Q, K, V projection, or the
    //    whole layer) is gathered on an idle GPU: exposed once per layer, not once per pass.
    const double nl = layers_on(0);
    const double z3_layer = zero3_layer_params();
    // The rank's shards copied up: the dense weights' over dp, the experts' over their group.
    const double shard_up =
        tr.offload_params ? (mt.layer_params / dp + mt.layer_expert_params / mt.expert_group) * w_elem / c.pcie_Bps
                          : 0.0;
    const double ag = allgather_s(pl.dp, z3_layer * w_elem) + shard_up;
    const double rs = reducescatter_s(pl.dp, z3_layer * g_elem);
    const double regather = fw.zero3_unit == Zero3Unit::Linear && ly.recompute == Recompute::Full ? 1.0 : 0.0;
    const StageCost& st = s0;
    const double f_layer = nl > 0 ? st.fwd / nl : 0.0;
    const double b_layer = nl > 0 ? (st.compute - st.fwd + st.recompute) / nl : 0.0;
    const double outer = allgather_s(pl.dp, (mt.embed_params + mt.head_params + mt.mtp_head_params) * w_elem);
    const double ag_bwd = (1.0 + regather) * ag + rs;  // a layer's backward traffic
    // A forward pass over a layer whose first unit is gathered on an idle GPU (its Q, K, V
    // projection, or the whole layer; with its shard's copy up where parameters are offloaded)
    // exposes that gather and what of the rest the layer's forward does not cover.
    const double first_unit = fw.zero3_unit == Zero3Unit::Linear ? mt.layer_qkv_params : z3_layer;
    const double g1 = std::min(ag, allgather_s(pl.dp, first_unit * w_elem) +
                                       (tr.offload_params ? first_unit * w_elem / dp / c.pcie_Bps : 0.0));
    const double first_waits = g1 + std::max(0.0, ag - g1 - f_layer);
    const double fwd_layer_exposed = fw.offload_sync && ly.offload ? first_waits : std::max(0.0, ag - f_layer);
    double per_mb;
    if (fw.zero3_prefetch_layers == 0) {
      per_mb = nl * (ag + ag_bwd);
    } else if (fw.zero3_backward_prefetch == Zero3BackwardPrefetch::Pre) {
      per_mb = ag + (nl - 1) * fwd_layer_exposed + ag + (nl - 1) * std::max(0.0, ag_bwd - b_layer) + rs;
    } else {
      // Post / None: every rank's collectives share one NCCL stream (ProcessGroupNCCL), so a
      // gather issued from a unit's own pre-backward hook queues behind the reduce-scatter of
      // the unit before it, which waits for that unit's gradients: the backward overlaps
      // nothing ("no overlap": PyTorch FSDP BackwardPrefetch docs; the traces in PyTorch
      // pull request 70235, Zhao 2021). Post issues the next gather before the reduce-scatter,
      // which then runs beside the next unit's compute; the gather stays exposed. The recompute's gathers
      // keep the forward's implicit prefetch: the first unit of each layer waits (first_waits),
      // the rest overlap the recomputed forward.
      const double rs_exposed = fw.zero3_backward_prefetch == Zero3BackwardPrefetch::Post
                                    ? (nl - 1) * std::max(0.0, rs - b_layer) + rs  // the last has no next
                                    : nl * rs;
      per_mb = ag + (nl - 1) * fwd_layer_exposed + nl * (regather * first_waits + ag) + rs_exposed;
    }
    const double per_mb_all = nl * (ag + ag_bwd);
    dp_s = md * (per_mb_all + 3 * outer);
    z3_exposed = md * (with_hidden_cost(std::max(per_mb, per_mb_all), std::max(0.0, per_mb_all - per_mb)) + 3 * outer);
  }

  // The collectives DeepSpeed's ZeRO-3 issues per micro-batch over the critical stage: an
  // all-gather per module (its parameters coalesced) or per parameter tensor in each of the forward
  // and the backward, and a reduce-scatter per gradient bucket or per parameter tensor. A
  // Megatron-style layer has six modules: two norms, the fused Q, K, V projection, the output
  // projection and the MLP's two (gate and up fused); each holds a weight and, in GPT-style models,
  // a bias. DeepSpeed's reduce bucket is 5e8 elements (reduce_bucket_size's default,
  // deepspeed/runtime/zero/config.py).
  struct Zero3Calls {
    double gathers = 1, reductions = 1;
  };
  Zero3Calls zero3_calls() const {
    const bool biases = sc.model.norm == Norm::LayerNorm;
    const double norm_tensors = biases ? 2 : 1, matrix_tensors = biases ? 2 : 1;
    const int crit_stage = stage_params(0) >= stage_params(pp - 1) ? 0 : pp - 1;
    const double nl = layers_on(crit_stage);
    // Outside the layers: the word and position embeddings on the first stage, the final norm
    // and an untied LM head on the last.
    double outer_modules = 0, outer_tensors = 0;
    if (crit_stage == 0) {
      const double pos = sc.model.position == PositionEmbedding::Learned ? 1 : 0;
      outer_modules += 1 + pos, outer_tensors += 1 + pos;
    }
    if (crit_stage == pp - 1) {
      const double head = (pp > 1 || !sc.model.tied_embeddings) ? 1 : 0;
      outer_modules += 1 + head, outer_tensors += norm_tensors + head;
    }
    Zero3Calls k;
    if (fw.zero3_collectives == Zero3Collectives::Tensor) {
      k.gathers = nl * (2 * norm_tensors + 4 * matrix_tensors) + outer_tensors;
      k.reductions = k.gathers;
    } else {
      constexpr double kReduceBucketElements = 5e8;
      k.gathers = nl * 6 + outer_modules;
      k.reductions = std::ceil(params_crit / kReduceBucketElements);
    }
    k.gathers = std::max(1.0, k.gathers), k.reductions = std::max(1.0, k.reductions);
    return k;
  }

  // ZeRO-2/3 as capplan-train runs them, which is what a device profile's collectives time (its
  // ranks' MPI or NCCL calls, each blocking: runtime/train/include/train/communicator.h). The flat
  // parameter buffer is cut into units (the embedding, each layer, the final norm and an untied
  // head: Gpt::lay_out_params) and into dp equal shards; a unit's collective moves to or from each
  // rank the part of it that lies in that rank's shard (Gpt::unit_counts), so a unit inside one
  // shard is all sent to one rank. A ring's p - 1 steps each move the largest of the blocks
  // (Patarasuk and Yuan 2009), so a unit whose largest block is c elements takes the measured
  // time of an even collective of p * c elements. Per step, pp = 1:
  //  - ZeRO-2: after each micro-batch's backward of a layer, its gradients are reduce-scattered
  //    into the shards (Gpt::reduce_unit); the embedding's and final norm's once per step
  //    (Gpt::flush_gradients); after the optimizer, the updated shards are all-gathered into the
  //    full weights (optimizer.cpp).
  //  - ZeRO-3: a layer's weights are gathered before its forward and its backward unless the
  //    buffer holds them already (Gpt::acquire_layer): the backward of the last layer follows its
  //    forward, and each micro-batch after the first starts on the layer the one before ended
  //    with, so a step gathers 2 m (nl - 1) + 1 layers; the embedding and final norm once per step
  //    (Gpt::zero_grads); the reductions as ZeRO-2's; nothing gathered after the optimizer. The
  //    gathers are out of place (from the shard into the layer's buffer).
  // Nothing overlaps compute: each call blocks its rank until it is done. dp 2 on 2 cores, the
  // 4-layer, 256-wide model, 4 micro-batches: three of its four layers lie in one shard each.
  void runtime_sharded_dp() {
    const int nl = static_cast<int>(layers_on(0));
    const double tail_unit = sc.model.tied_embeddings ? mt.final_norm_params : mt.head_params;
    const double shard = std::ceil((mt.embed_params + nl * mt.layer_params + tail_unit) / dp);
    // The largest part of the unit [begin, begin + n) inside one rank's shard: the unit itself
    // where one shard holds it, else the larger of its two end pieces, or a whole shard it spans.
    auto largest = [&](double begin, double n) {
      if (n <= 0) return 0.0;
      const double first = std::floor(begin / shard), last = std::floor((begin + n - 1) / shard);
      if (first == last) return n;
      return std::max({(first + 1) * shard - begin, begin + n - last * shard, last - first >= 2 ? shard : 0.0});
    };
    auto rs = [&](double part) { return reducescatter_s(pl.dp, dp * part * g_elem); };
    // A gather goes from the shard into the layer's buffer, so the rank whose part is largest also
    // copies that part across, read and written at the profile's memory bandwidth. One layer of
    // the model above held by one of 2 ranks, through the runtime's communicator, from memory
    // (tests/bench/bench_unit_collectives, two runs): the gather 1.18-1.31 ms, priced as the even
    // in-place gather 0.95-1.04 + the copy 0.33-0.40; the reduction 1.42-1.52, priced as the even
    // reduce-scatter 1.73-1.89 (one direction of the pair moves, not both).
    // Where the profile timed the runtime's own gather (all-gather-v), that time has the copy in it.
    auto ag = [&](double part) {
      const double t = runtime_gather_s(pl.dp, dp * part * w_elem);
      return t > 0 ? t : allgather_s(pl.dp, dp * part * w_elem) + mem_s(c, 2 * part * w_elem);
    };
    // Most layers lie inside one shard, and each of those costs the same: priced once.
    const double rs_layer = rs(mt.layer_params), ag_layer = ly.zero >= 3 ? ag(mt.layer_params) : 0.0;
    const double embed = largest(0, mt.embed_params);
    double begin = mt.embed_params;
    dp_s = rs(embed);
    for (int i = 0; i < nl; ++i, begin += mt.layer_params) {
      const double part = largest(begin, mt.layer_params);
      const bool whole = part == mt.layer_params;
      dp_s += md * (whole ? rs_layer : rs(part));
      if (ly.zero >= 3) {
        const double gathers = (1.0 + (md - 1.0) * (i > 0 ? 1.0 : 0.0)) + md * (i < nl - 1 ? 1.0 : 0.0);
        dp_s += gathers * (whole ? ag_layer : ag(part));
      }
    }
    const double tail = largest(begin, tail_unit);
    dp_s += rs(tail);
    if (ly.zero >= 3) {
      dp_s += ag(embed) + ag(tail);
    } else {
      param_gather_s = allgather_s(pl.dp, dp * shard * w_elem);
      dp_s += param_gather_s;
    }
    z3_exposed = dp_s;
  }


  // capplan-train's gradient exchange of `bytes` per rank as its optimizer calls it, timed by the
  // device profile (-1: not timed for this group). Where CPU ranks outnumber the host's cores, the
  // exchange the profile timed among as many ranks on those cores, in groups of the dp group's
  // size, all at once (SharedExchangeTiming): the host's time already, which share_host_cores does
  // not stretch again (dp_on_shared_cores). Measured on 2 cores with the 4-layer, 256-wide model
  // (one profile against the medians of one benchmark run): 16.9 MB among 4 ranks 13.7 ms (dp 4
  // exchanged in 14.2, 15.6 priced from 2 ranks' time by the core share and the ring's bytes), among
  // 8 22.5 (dp 8 25.3, 36.5 so priced); pairs among 8 (dp 2 x tp 2 x pp 2) 4.1 ms for 4.2 MB (4.0
  // measured, 8.0 so priced).
  //
  // Either time is the exchange timed on its own; capplan-train makes it right after a step's
  // backward, with the caches full of the compute's data, and there it takes longer: by the
  // profile's measured ratio (DeviceProfile::exchange_after_compute, the same 16 MiB exchange made
  // right after the lockstep segments' compute over it timed alone). On this 2-core AMD EPYC host
  // the benchmark's exchanges ran 1.06-1.46x their time alone in training (dp 2 6.1 ms against 4.9,
  // dp 8 21.8 against 15.9), and the exchange right after a layer's compute 1.06-1.34x in three
  // 2-rank profiles. Among 8 ranks the profiles measured it below 1 in every group (taken as 1), so
  // dp 8's excess is not this: it keeps its shared-cores time.
  //
  // ZeRO-1 gathers the weights only after AdamW's sweep over the rank's shard (Optimizer::update),
  // where the lockstep timed that exchange too its own ratio (zero1_exchange_s): dp 2 on the Intel
  // host (two benchmark runs) spent 9.1 and 9.5 ms in it against 6.9 and 7.4 at ZeRO-0's ratio.
  double exchange_s(double bytes, bool zero1 = false) {
    const DeviceProfile* dev = c.profile;
    if (dev && dev->backend == "cpu" && dev->cores > 0 && pl.dp.nodes == 1) {
      const int on_host = gpus_on_a_node(sc.cluster.gpus_per_node, ly.gpus());
      const double after = dev->exchange_after_compute(on_host, pl.dp.n, zero1);
      const double t = on_host > dev->cores ? dev->shared_exchange_s(on_host, pl.dp.n, bytes) : -1.0;
      if (t > 0) {
        dp_on_shared_cores = true;
        return t * after;
      }
      const double alone = runtime_exchange_s(pl.dp, bytes);
      return alone > 0 ? alone * after : alone;
    }
    return runtime_exchange_s(pl.dp, bytes);
  }

  // What ZeRO-3 gathers a layer at a time, in the dense group's traffic: its dense weights and
  // its routed experts (an MoE layer's local experts, gathered with the layer over their expert
  // data-parallel group of dp * cp / ep ranks, as Megatron-FSDP shards them; in dense-group bytes
  // of the same time, MicroTerms::expert_gather_share).
  double zero3_layer_params() const { return mt.layer_params + mt.layer_expert_params * mt.expert_gather_share; }
  // The unit in flight: a layer, or its largest matrix (zero3_unit: linear), the experts of an
  // MoE layer being one unit (each expert's matrices fall under a size-based wrap policy's
  // threshold, so they are wrapped with their parent).
  double zero3_unit_params() const {
    return fw.zero3_unit == Zero3Unit::Linear ? std::max(mt.layer_matrix_params, mt.layer_expert_params)
                                              : mt.layer_params + mt.layer_expert_params;
  }

  // ZeRO-2/3 priced as capplan-train runs them (runtime_sharded_dp); check_layout keeps them to
  // pp = 1.
  bool sharded_by_runtime() const { return ly.zero >= 2 && ly.dp > 1 && pl.dp.profile; }

  // capplan-train's last collective before the optimizer step is the gradient norm's sum over the
  // tensor-parallel, pipeline-parallel or expert groups where any has more than one rank (Run::step
  // sums it over each after the data-parallel exchange), else the data-parallel exchange itself.
  // The profile's optimizer step on shared cores is timed right after the exchange
  // (SharedCoresTiming::optimizer_s); after the norm's sum the ranks' steps kept their dedicated
  // time in the runs measured (cost_model_cores.cpp).
  bool norm_sum_last() const { return ly.tp > 1 || pp > 1 || ly.ep > 1; }

  // Between its two halves capplan-train's ZeRO-0 moves each rank's reduced shard from the start
  // of the gradient buffer, where the in-place reduce-scatter left it, to the rank's own block
  // (Optimizer::update), on every rank of the group but its first, and the first waits for them in
  // the all-gather: the critical rank's exchange takes a copy of a shard more, read and written at
  // the profile's memory-bound bandwidth (capplan-train measure's kernels, as measured: the CPU
  // backend's copy is one memcpy, not split over a rank's threads as its compute is), at the shared
  // cores' speed where the ranks outnumber them. dp 2 on 2 cores, 8.5 MB a shard: 1.1 ms, where
  // the exchange as the profile times it (without the move) priced 6.7-6.9 ms against 8.3-9.2
  // measured.
  double shard_move_s() const {
    const DeviceProfile* dev = c.profile;
    if (!dev || dev->memory_gbyte_per_s <= 0 || pl.dp.n < 2) return 0.0;
    const double move = 2.0 * grad_bytes / pl.dp.n / (dev->memory_gbyte_per_s * 1e9);
    if (dev->backend != "cpu" || dev->cores <= 0 || !dp_on_shared_cores) return move;
    // The exchange was timed among the host's ranks (exchange_s, called before it, says so): the
    // host's time, which the move is not in.
    return move * shared_copy_stretch(gpus_on_a_node(sc.cluster.gpus_per_node, ly.gpus()), dev->cores, dev->ranks);
  }

  void data_parallel() {
    // Data-parallel gradient synchronisation on the stage with most parameters.
    params_crit = std::max(stage_params(0), stage_params(pp - 1));
    grad_bytes = params_crit * g_elem;
    ring_z3 = fw.zero3_comm == Zero3Comm::Ring;
    if (ly.dp > 1) {
      if (ly.zero == 0 && pl.dp.profile) {
        // A device profile times capplan-train, whose optimizer exchanges the gradients as a
        // reduce-scatter and an in-place all-gather of them (runtime/train/src/optimizer.cpp), the
        // two halves of a ring all-reduce (Patarasuk and Yuan 2009), not as one MPI_Allreduce:
        // each half at its measured time. dp 2 on 2 cores, 16.9 MB of gradients: 4.5 + 2.9 ms
        // against 6.7 for the all-reduce, 7.5-8.6 ms measured. Where the profile timed the
        // exchange as the optimizer calls it (runtime_exchange_s), that time: the calls one after
        // another, the norm's gather between them waiting for the slower rank's reduce-scatter.
        const double exchange = exchange_s(grad_bytes);
        dp_s = exchange > 0 ? exchange : reducescatter_s(pl.dp, grad_bytes) + allgather_s(pl.dp, grad_bytes);
        dp_s += shard_move_s();
      } else if (ly.zero == 0) {
        dp_s = allreduce_s(pl.dp, grad_bytes);
      } else if (sharded_by_runtime()) {
        runtime_sharded_dp();
      } else if (ly.zero <= 2) {
        // Reduce-scatter of gradients + all-gather of updated 16-bit weights: one all-reduce's
        // volume when both have the same width (Rajbhandari et al. 2020 Sec 7.2.1).
        param_gather_s = allgather_s(pl.dp, params_crit * w_elem);
        // DeepSpeed's stage 1 all-reduces the gradients instead (zero1_grad_allreduce).
        const double rs = zero12_grad_reduction_s(pl.dp, grad_bytes, ly.zero, fw);
        dp_s = rs + param_gather_s;
        // capplan-train's ZeRO-1 makes the same three calls as its ZeRO-0 (the weights gathered
        // in place of the gradients, as wide): the profile's exchange where it timed it, the
        // gather's part in the proportion of the two calls.
        const double exchange = ly.zero == 1 && w_elem == g_elem ? exchange_s(grad_bytes, /*zero1=*/true) : -1;
        if (exchange > 0 && dp_s > 0) {
          param_gather_s *= exchange / dp_s;
          dp_s = exchange;
        }
        if (ly.zero == 2 && m > 1) {
          // ZeRO-2 keeps only its shard of the gradients, so each micro-batch's gradients are
          // reduce-scattered after its own backward, not once per step ("gradient reduction is
          // required after every backward because of gradient partitioning", DeepSpeed issue 2252;
          // capplan-train's Gpt::reduce_unit, layer by layer). The last micro-batch's is the
          // reduction above. Each earlier one runs during its backward where the framework
          // overlaps the reduction with it, exposed only where it outlasts that backward, and in
          // full where the framework reduces after the backward. On 2 cores (dp 2, 4 micro-batches
          // of the 4-layer, 256-wide model) ZeRO-2's dp_comm measured 47-53 ms against ZeRO-1's
          // 7-15 ms.
          const double each = fw.dp_overlap ? std::max(0.0, rs - (crit.bwd + crit.recompute)) : rs;
          dp_s += (md - 1) * each;
        }
      } else if (ring_z3) {
        ring_zero3();
      } else {
        rank_share_zero3();
      }
    }
    double dp_exposed = dp_s;
    if (sharded_by_runtime()) {
      // capplan-train blocks on each call: all of it is exposed (runtime_sharded_dp).
    } else if (ly.zero == 3 && ring_z3) {
      dp_exposed = z3_exposed;
    } else if (ly.zero == 3) {
      // Prefetched layer by layer on a side stream; the part compute covers is charged
      // kHiddenCollectiveCost of its time (contention for SMs and HBM, above).
      const double busy = tb.compute + tb.recompute + tb.tp_comm;
      dp_exposed = with_hidden_cost(dp_s, std::min(dp_s, busy));
    } else if (!fw.dp_overlap) {
      // One reduction after the last backward (Megatron-LM's local DDP, DeepSpeed's pipeline
      // engine): all of it exposed, except the weight all-gather the framework overlaps with the
      // next forward (Megatron-Core overlap_param_gather: one bucket of it stays exposed).
      dp_exposed = dp_s - (fw.param_gather_overlap ? param_gather_s * (1.0 - 1.0 / kDpBuckets) : 0.0);
    } else {
      // Bucketed all-reduce (PyTorch DDP, Li et al. 2020; Megatron-LM overlap_grad_reduce): the
      // gradients of each chunk are complete during its last micro-batch's backward, in kDpBuckets
      // buckets over the whole stage (chunk by chunk, the chunks whose last backward comes first
      // taking the remainder), bucket j of a chunk ready after (j+1)/n_k of that backward (after
      // its recompute). The buckets run one after another on one communication stream, each
      // taking D / kDpBuckets. Stage 0 ends its compute last, so its buckets set the exposed time:
      // relative to the end of its compute, chunk k (in order of its last backward, r = 0 .. vp-1)
      // ends its last backward (vp - 1 - r) * p chunk-backwards of the pacing stage earlier (the
      // interleaved drain runs the last p micro-batches of one chunk after another, each followed
      // by its send or its exposed copy back from the host). Exposed =
      // max(0, when the last bucket ends). For vp = 1 this is max(D / B, D - (B-1)/B * backward):
      // the first bucket waits for its share of the backward.
      const double rest0 = (s0.compute - s0.fwd + s0.tp_bwd) / vpd;  // a chunk's backward after recompute
      const double pace_chunk_bwd = (crit.compute - crit.fwd + crit.recompute + crit.tp_bwd) / vpd +
                                    std::max(pp > 1 ? p2p : 0.0, crit.offload_bwd_chunk);
      const int nvp = ly.schedule == Schedule::Interleaved ? vp : 1;
      const double bucket_s = dp_s / kDpBuckets;
      double t = -std::numeric_limits<double>::infinity();
      for (int r = 0; r < nvp; ++r) {
        const int nb = kDpBuckets / nvp + (r < kDpBuckets % nvp ? 1 : 0);
        const double gap = double(nvp - 1 - r) * pp * pace_chunk_bwd;
        for (int j = 0; j < nb; ++j) {
          const double ready = -gap - rest0 * (1.0 - double(j + 1) / nb);
          t = std::max(t, ready) + bucket_s;
        }
      }
      // What the buckets hide still costs kHiddenCollectiveCost of its time (NCCL's kernels beside
      // the backward's GEMMs, as for ZeRO-3's and the tensor-parallel collectives).
      const double exposed =
          std::max(0.0, t - (fw.param_gather_overlap ? param_gather_s * (1.0 - 1.0 / kDpBuckets) : 0.0));
      dp_exposed = with_hidden_cost(std::max(dp_s, exposed), std::max(0.0, dp_s - exposed));
    }
    tb.dp_comm = dp_exposed;
  }

  void optimizer_and_weight_streaming() {
    const double opt_params = params_crit / (ly.zero >= 1 ? dp : 1.0);
    // Optimizer step: Adam streams 30 bytes per parameter (above), SGD reads the gradient and the
    // weight and writes the weight (3 x 2 bytes in 16 bits).
    const double step_traffic = tr.optimizer == Optimizer::Sgd ? 3 * w_elem : adam_traffic_bytes(w_elem);
    const int gpus_in_node = gpus_on_a_node(sc.cluster.gpus_per_node, sc.total_gpus());
    // FSDP's ring mode streams the offloaded shards up inside its gathers (data_parallel above)
    // and copies each gradient shard down on the reduction stream after its reduce-scatter
    // (FSDP _post_backward_hook: _cpu_grad.copy_(grad, non_blocking=True)), hidden by the rest
    // of the backward; other modes copy before and after the step.
    const bool fsdp_offload = this->fsdp_offload();
    if (optimizer_steps_on_host(tr, ly)) {
      // ZeRO-Offload (Ren et al. 2021) / FSDP cpu_offload: the step runs on the CPU over the
      // node's host memory bandwidth, shared by its GPUs, after the gradients come down over PCIe
      // and before the updated 16-bit weights go back up (not overlapped).
      double host_step = opt_params * step_traffic * gpus_in_node / c.host_Bps;
      if (tr.optimizer == Optimizer::Sgd && tr.precision == Precision::Fp16 && fw.host_step_threads > 0 &&
          fw.host_sgd_fp16_gelem_per_s > 0) {
        // torch.optim.SGD over fp16 CPU tensors runs ATen's elementwise kernels, which convert
        // every element to float and back in scalar code (no vectorised Half path): compute-bound
        // at the framework's measured rate per thread, on the threads each rank is given.
        host_step = std::max(host_step, opt_params / (fw.host_sgd_fp16_gelem_per_s * 1e9 * fw.host_step_threads));
      }
      tb.optimizer = host_step + (fsdp_offload ? 0.0 : opt_params * (g_elem + w_elem) / c.pcie_Bps);
    } else {
      tb.optimizer = opt_params * step_traffic / (c.optimizer_Bps > 0 ? c.optimizer_Bps : c.hbm_Bps);
      if (c.norm_Bps > 0) {
        // capplan-train, whose step a profile measured (Optimizer::reduce_gradients): each rank
        // first sums the squares of its shard of the gradients, 1 / (dp x cp) of them, for the
        // global norm; right after the reduce-scatter wrote the shard (ZeRO-0 and -1 over more
        // than one rank) at the measured rate of a read from the caches, otherwise from memory.
        // The pacing stage's, whose terms the breakdown gives as capplan-train's record gives the
        // busiest rank's; each distinct element counted once, so not the last stage's copy of a
        // tied embedding (pp 2 here: 1.6 M of its 2.6 M gradients).
        double counted = stage_params(crit_s);
        if (pp > 1 && crit_s == pp - 1 && sc.model.tied_embeddings) counted -= mt.head_params - mt.final_norm_params;
        const double group = dp * ly.cp;
        const bool warm = ly.zero < 2 && group > 1 && c.norm_warm_Bps > 0;
        tb.optimizer += counted / group * g_elem / (warm ? c.norm_warm_Bps : c.norm_Bps);
      }
    }
    if (tr.offload_params && !fsdp_offload) {
      // Parameters live in host memory and each layer's weights (its shard under ZeRO-3) come up
      // over PCIe before each of its forward and backward passes, a layer ahead of its compute: a
      // stage loses what the copy does not hide, per layer and micro-batch.
      const double nl = layers_on(0);
      const double per_layer = mt.layer_params * w_elem / (ly.zero >= 3 ? dp : 1.0) / c.pcie_Bps;
      const StageCost& st = s0;
      const double f_layer = nl > 0 ? st.fwd / nl : 0.0;
      const double b_layer = nl > 0 ? (st.compute - st.fwd + st.recompute) / nl : 0.0;
      tb.offload += md * nl * (std::max(0.0, per_layer - f_layer) + std::max(0.0, per_layer - b_layer));
    }
  }

  void memory() {
    // Memory, by kind, on the stages that can peak: 0 (most micro-batches in flight), 1 and last.
    const StateBytesPerParam state = state_bytes_per_param(sc.training);
    // The step runs on the host (optimizer_and_weight_streaming): the optimizer state lives there,
    // and FSDP's gradient shards too (copied down after each reduce-scatter into its CPU gradient).
    const bool host_optimizer = optimizer_steps_on_host(tr, ly);
    double best_total = -1;
    const int mem_cands[3] = {0, std::min(1, pp - 1), pp - 1};
    for (int k = 0; k < 3; ++k) {
      const int s = mem_cands[k];
      if (k > 0 && (s == 0 || (k == 2 && s == mem_cands[1]))) continue;
      MemoryBytes mb;
      const double params = stage_params(s);
      double host_state = 0;  // this stage's state in host memory, per GPU
      mb.weights = params * state.weights / (ly.zero >= 3 ? dp : 1.0);
      if (tr.offload_params) {
        // Only the layers being computed and prefetched are on the GPU (their shards under ZeRO-3
        // are gathered into the prefetch buffers counted below).
        host_state += mb.weights;
        mb.weights = ly.zero >= 3 ? 0.0 : 2 * mt.layer_params * state.weights;
      }
      mb.optimizer = host_optimizer ? 0.0 : params * state.optimizer / (ly.zero >= 1 ? dp : 1.0);
      if (host_optimizer) host_state += params * state.optimizer / (ly.zero >= 1 ? dp : 1.0);
      mb.gradients = params * g_elem / (ly.zero >= 2 ? dp : 1.0);
      // The gradient shards go down to the host step as they are reduced: FSDP's (each unit's
      // unsharded gradient is among the buffers below), and ZeRO-Offload's on ZeRO-2/3 (Ren et al.
      // 2021, Sec 4.1: the GPU keeps the 16-bit parameters; gradients, optimizer state and the
      // step are on the CPU).
      if (fsdp_offload() || (tr.offload_optimizer && ly.zero >= 2)) {
        host_state += mb.gradients;
        mb.gradients = 0;
      }
      host_state_bytes = std::max(host_state_bytes, host_state);
      // Lazily allocated gradients with one micro-batch per step: the backward frees activations
      // as fast as it creates gradients, so at the activation peak (the start of the backward)
      // no gradient exists yet; they count only where they exceed the activations.
      const bool grads_after_peak = fw.lazy_grads && m == 1;
      const double nl = layers_on(s);
      // Paired passes (ep_overlapped) run one forward ahead of the plain schedule's warm-up, so its
      // chunk's activations are kept beside the rest (Megatron-Core combined 1F1B; DualPipe keeps
      // p + 1 micro-batches' activations, DeepSeek-V3 report Table 2).
      const int64_t chunks_inflight = std::min<int64_t>(
          m * vp, inflight_chunks(ly.schedule, pp, vp, m, s) + (ep_overlapped() ? 1 : 0));
      const double kept_per_chunk = nl / vp * mt.layer_act_kept_bytes;
      const double mb_inflight = double(chunks_inflight) / vp;
      double kept = double(chunks_inflight) * kept_per_chunk;
      if (s == 0) kept += mb_inflight * mt.embed_act_bytes;
      // Working set: one layer's full activations while it is recomputed and back-propagated, plus
      // the fp32 logits on the last stage.
      // The two are never live together: on the last stage the LM head's forward, loss and
      // backward run back to back and free the logits before the first layer is recomputed.
      double working = (ly.recompute != Recompute::None ? mt.layer_act_full_bytes : 0.0);
      if (s == pp - 1) working = std::max(working, mt.head_act_bytes);
      if (sc.cluster.gpu.cpu_rank) {
        // capplan-train allocates its working buffers once at start (Gpt::allocate_activations):
        // a full recompute's layer, the one scores buffer every layer's selective recompute
        // rebuilds, and the logits are held together, so they add up.
        const double rebuilt = ly.recompute == Recompute::Full        ? mt.layer_act_full_bytes
                               : ly.recompute == Recompute::Selective ? mt.layer_act_full_bytes - mt.layer_act_kept_bytes
                                                                      : 0.0;
        working = rebuilt + (s == pp - 1 ? mt.head_act_bytes : 0.0);
      }
      if (ly.offload) {
        // Copied out layer by layer after each layer's forward and back one layer ahead of its
        // backward: the layer being computed and the one being copied stay on the GPU. (The time of
        // the copies is in the stage's pace, stage_cost above.)
        const double on_gpu = std::min(kept, 2 * mt.layer_act_kept_bytes);
        host_bytes = std::max(host_bytes, kept - on_gpu);
        kept = on_gpu;
      }
      mb.activations = kept + working;
      if (grads_after_peak) mb.gradients = std::max(0.0, mb.gradients - mb.activations);
      // ZeRO-3: the gathered unit computing and the ones prefetched (and, in backward, the unit's
      // unsharded gradient before its reduce-scatter); a unit is a layer or its largest matrix.
      // Without backward prefetch (post, none) the backward, where the activations peak, holds
      // only the unit it computes: the next is gathered after this one's gradients (post: its
      // parameters freed first, BackwardPrefetch docs).
      const double unit = zero3_unit_params();
      const int ahead =
          fw.zero3_backward_prefetch == Zero3BackwardPrefetch::Pre ? fw.zero3_prefetch_layers : 0;
      double zero3_prefetch = ly.zero >= 3 ? (1 + ahead) * unit * w_elem + unit * g_elem : 0.0;
      if (sc.cluster.gpu.cpu_rank && ly.zero >= 2) {
        // capplan-train (Gpt::allocate_params_and_grads): ZeRO-2/3 reduce each unit through one
        // layer-sized gradient buffer and buffers of the embedding and of the final norm (with an
        // untied head), all allocated at start; ZeRO-3 gathers into weight buffers of the same
        // sizes. (ZeRO-3 and ZeRO-2 run without a pipeline: both ends are on the rank.)
        const double tail = sc.model.tied_embeddings ? mt.final_norm_params : mt.head_params;
        zero3_prefetch = (mt.layer_params + mt.embed_params + tail) * (g_elem + (ly.zero >= 3 ? w_elem : 0.0));
      }
      const double sub = mb.weights + mb.gradients + mb.optimizer + mb.activations + zero3_prefetch;
      mb.buffers = c.reserved_bytes + zero3_prefetch + c.allocator_margin * sub;
      mb.total = mb.weights + mb.gradients + mb.optimizer + mb.activations + mb.buffers;
      if (mb.total > best_total) {
        best_total = mb.total;
        best = mb;
        mem_s_idx = s;
      }
    }
  }

  void chunk_costs(StepCosts& out_steps) const {
    StepCosts* steps = &out_steps;
    steps->chunks.clear();
    const int chunks = pp * vp;
    steps->chunks.reserve(chunks);
    int first = 0;
    // Overlapped all-to-alls (ep_overlapped): each stage's exposed share, once per stage.
    std::vector<double> ep_share(size_t(pp), 1.0);
    if (ep_overlapped())
      for (int s = 0; s < pp; ++s) ep_share[size_t(s)] = exposed_ep_share(s);
    // Chunk c holds layers in model order: chunk 0 on stage 0, chunk 1 on stage 1, ... (Megatron).
    for (int cidx = 0; cidx < chunks; ++cidx) {
      ChunkCosts ch;
      ch.first_layer = first;
      ch.num_layers = chunk_layers(L, chunks, cidx) + (cidx == chunks - 1 ? sc.model.mtp_layers : 0);
      first += ch.num_layers;
      ch.has_embedding = cidx == 0;
      ch.has_head = cidx == chunks - 1;
      const double nl = ch.num_layers;
      ch.forward_s = nl * mt.layer_fwd_s + (ch.has_embedding ? mt.embed_fwd_s : 0) +
                     (ch.has_head ? mt.head_fwd_s : 0);
      const double head_bwd_w = ch.has_head ? mt.head_bwd_s / 2 : 0;
      ch.backward_input_s = nl * mt.layer_bwd_in_s + (ch.has_embedding ? mt.embed_bwd_s : 0) +
                            (ch.has_head ? mt.head_bwd_s - head_bwd_w : 0);
      ch.backward_weight_s = nl * mt.layer_bwd_w_s + head_bwd_w;
      if (!fw.grad_accumulation_fusion && m > 1)  // stage_cost's, with the weight gradients it follows
        ch.backward_weight_s += accumulation_s(piece_params(nl, ch.has_embedding, ch.has_head));
      ch.recompute_s = nl * mt.layer_recompute_s;
      ch.tp_comm_forward_s = (nl * mt.tp_collectives_fwd + (ch.has_embedding && ly.tp > 1 ? 1 : 0)) * tp_ar +
                             (ch.has_head ? head_tp_fwd : 0.0);
      ch.tp_comm_backward_s = nl * layer_tp_bwd + (ch.has_head ? head_tp_bwd : 0.0);
      // The chunk's share of what its stage exposes on average per micro-batch, so that the replay
      // blocks its compute stream for that much.
      ch.ep_comm_forward_s = ep_share[size_t(cidx % pp)] * nl * mt.layer_ep_comm_fwd_s;
      ch.ep_comm_backward_s = ep_share[size_t(cidx % pp)] * nl * mt.layer_ep_comm_bwd_s;
      ch.cp_comm_forward_s = nl * mt.layer_cp_comm_fwd_s;
      ch.cp_comm_backward_s = nl * mt.layer_cp_comm_bwd_s;
      ch.activation_bytes = nl * mt.layer_act_kept_bytes + (ch.has_embedding ? mt.embed_act_bytes : 0);
      if (ly.offload) {
        ch.offload_s = ch.activation_bytes / c.pcie_Bps;
        ch.reload_s = ch.offload_s;
      }
      steps->chunks.push_back(ch);
    }
    steps->p2p_s = p2p * pp_handoff_factor;
    steps->p2p_bytes = pp > 1 ? mt.p2p_bytes : 0;
    steps->dp_comm_s = dp_s - (fw.param_gather_overlap && ly.zero >= 1 && ly.zero <= 2 && !sharded_by_runtime()
                                   ? param_gather_s * (1.0 - 1.0 / kDpBuckets) : 0.0);
    // capplan-train's ZeRO-2 reduces after each layer's backward and its ZeRO-3 gathers before it,
    // blocking: the simulator replays that as ZeRO-3's exposed wait, and ZeRO-2's as one task after
    // the backward.
    steps->dp_overlap = (fw.dp_overlap || ly.zero == 3) && !sharded_by_runtime();
    steps->dp_hidden_cost = steps->dp_overlap && ly.zero < 3 ? kHiddenCollectiveCost : 0.0;
    steps->zero3_exposed_s = ly.zero == 3 && (ring_z3 || sharded_by_runtime()) && ly.dp > 1 ? z3_exposed : -1.0;
    steps->dp_bytes = ly.dp > 1 ? grad_bytes : 0;
    steps->dp_buckets = kDpBuckets;
    // (tb holds the optimizer as the ranks sharing cores take it; the simulator shares the cores
    // itself, so it gets the step's own time.)
    steps->optimizer_s = optimizer_own;
    steps->embedding_sync_s = embedding_sync;
    steps->weights_bytes = best.weights;
    if (const DeviceProfile* dev = c.profile; dev && dev->cores > 0 && dev->backend == "cpu") {
      steps->host_cores = dev->cores;
      steps->core_seconds_per_s = profile_core_share(dev->cores, dev->ranks);
      steps->host_efficiency = host_efficiency(*dev, gpus_on_a_node(sc.cluster.gpus_per_node, ly.gpus()));
      steps->dp_comm_on_shared_cores = dp_on_shared_cores;
    }
    // A transfer's copy at a core's speed; the rest of p2p_s is the hand-off's wait (share_cores).
    steps->p2p_copy_s = p2p * steps->core_seconds_per_s;
  }

  const Scenario& sc;
  const Constants& c;
  const Layout& ly;
  const int64_t m;
  const MicroTerms& mt;
  const Placement& pl;
  const FrameworkSpec& fw;
  const TrainingSpec& tr;
  const int pp, vp, L;
  const double tp_ar;  // one TP all-reduce of a layer's activation
  const double tp_ar_own;  // the same on its own, before the lockstep meeting's rule
  const double layer_tp_bwd;  // a layer's backward collectives per micro-batch, less what hides
  // The LM head's collectives per micro-batch, forward and backward (MicroTerms::head_tp_*): the
  // cross-entropy's small all-reduces are in the forward.
  const double head_tp_fwd, head_tp_bwd;
  const double p2p;    // one pipeline send
  const double vpd, md, dp, w_elem, g_elem;
  // Layers on the stages that can pace or peak (first, second, last), worked out once: the search
  // asks for them several times per layout.
  const int nl_first, nl_second, nl_last;
  int layers_on(int s) const {
    return s == 0 ? nl_first : s == pp - 1 ? nl_last : s == 1 ? nl_second : stage_blocks(sc.model, pp, vp, s);
  }
  // FSDP cpu_offload in ring mode: the shards stream up inside the gathers and the gradient
  // shards go down after their reduce-scatters (ring_z3 is set by data_parallel()).
  bool fsdp_offload() const { return tr.offload_params && ly.zero == 3 && ring_z3 && ly.dp > 1; }
  // The pace: stage 0's costs, the pacing stage's, the fill and drain, the step's terms.
  StageCost s0, crit;
  int crit_s = 0;
  double best_fill = 0;
  TimeBreakdown tb;
  double gemm = 0;  // the GEMMs within tb.compute and tb.recompute (Estimate::gemm_s)
  // Data-parallel traffic on the stage with most parameters.
  double params_crit = 0, grad_bytes = 0;
  bool ring_z3 = false;
  double dp_s = 0;
  double param_gather_s = 0;  // ZeRO-1/2: the all-gather of updated weights
  bool dp_on_shared_cores = false;  // exchange_s: dp_comm timed on the host's shared cores
  double z3_exposed = 0;      // ZeRO-3 ring mode: collectives not hidden by the prefetch
  double optimizer_own = 0;   // the optimizer step at the profile's per-rank rate (before share_cores)
  double pp_handoff_factor = 1;   // share_cores: a pipeline transfer's time on the host over its own
  double cp_hidden_share = 0;     // share_cores: Evaluation::cp_hidden_share
  double embedding_sync = 0;      // pace: the tied embedding's gradient between the end stages
  // Memory of the stage that peaks; what goes to host memory per GPU.
  MemoryBytes best;
  int mem_s_idx = 0;
  double host_bytes = 0;        // offloaded activations
  double host_state_bytes = 0;  // offloaded weights and optimizer state
};

}  // namespace

TpCollectiveTimes tp_collective_times(const Scenario& sc, const Constants& c, const Layout& ly, const MicroTerms& mt,
                                      const Placement& pl) {
  TpCollectiveTimes t;
  if (ly.tp < 2) return t;
  t.layer_own = allreduce_s(pl.tp, mt.tp_bytes);
  t.layer = lockstep_meeting_s(sc, c, ly, ly.tp, t.layer_own, ly.sp ? Meeting::SequenceParallel : Meeting::AllReduce);
  t.xent = lockstep_allreduce_s(sc, c, ly, allreduce_s(pl.tp, mt.xent_bytes), false);
  return t;
}

void evaluate(const Scenario& sc, const Constants& c, const Layout& ly, int64_t m,
              const MicroTerms& mt, const Placement& pl, Evaluation& out, StepCosts* steps,
              const TpCollectiveTimes* tp) {
  StepEvaluation(sc, c, ly, m, mt, pl, tp ? *tp : tp_collective_times(sc, c, ly, mt, pl)).run(out, steps);
}

}  // namespace detail

// ---- Public API ---------------------------------------------------------------------------------

StateBytesPerParam state_bytes_per_param(const TrainingSpec& t) {
  StateBytesPerParam b = state_bytes_per_param(t.precision);
  // SGD keeps no state beyond the weights (the PyTorch FSDP runs: fp16 throughout).
  if (t.optimizer == Optimizer::Sgd) b.optimizer = 0;
  return b;
}

StateBytesPerParam state_bytes_per_param(Precision p) {
  StateBytesPerParam b;
  // fp8 (Transformer Engine): bf16 weights plus their cached fp8 copy for the GEMMs.
  b.weights = p == Precision::Fp32 ? 4.0 : (p == Precision::Fp8 ? 3.0 : 2.0);
  // bf16 training accumulates and all-reduces gradients in fp32 (Megatron-LM forces
  // accumulate_allreduce_grads_in_fp32 with --bf16: bf16 sums lose too many bits); fp16 keeps
  // 16-bit gradients (Korthikanti et al. 2022 Sec 3: 2 + 2 + 12 = 16 bytes per parameter).
  b.gradients = p == Precision::Fp16 ? 2.0 : 4.0;
  // fp32 master weights + Adam momentum and variance; fp32 training needs no separate master copy.
  b.optimizer = p == Precision::Fp32 ? 8.0 : 12.0;
  return b;
}

namespace {
// Whether FlashAttention-2/3 runs on `gpu` at head size `head_dim`: the kernels need Ampere or
// newer (the GPU file's flash_peak_fraction is 0 before it) and a head size that is a multiple of
// 8 up to 256 (FlashAttention-2 README, "Installation and features"; FA3 likewise).
bool flash_runs(const GpuSpec& gpu, int head_dim) {
  return gpu.flash_peak_fraction > 0 && head_dim <= 256 && head_dim % 8 == 0;
}
// Why it does not, or empty.
std::string flash_cannot_run(const GpuSpec& gpu, const ModelSpec& model) {
  const int head_dim = detail::flash_head_dim(model);
  if (flash_runs(gpu, head_dim)) return "";
  if (gpu.flash_peak_fraction <= 0)
    return "flash (FlashAttention-2/3) does not run on " + gpu.name + " (it needs Ampere or newer)";
  return "flash supports head sizes that are multiples of 8 up to 256; this model's is " + std::to_string(head_dim) +
         (model.mla.enabled()      ? " (qk_nope_head_dim + qk_rope_head_dim)"
          : model.head_dim > 0 ? " (head_dim)"
                               : " (hidden / heads)");
}
}  // namespace

// A framework whose default is FlashAttention runs another kernel where FlashAttention cannot
// run: Transformer Engine's DotProductAttention picks FlashAttention, else cuDNN's fused
// attention, else its unfused path by GPU and head size (transformer_engine/pytorch/attention.py,
// get_attention_backend), and Megatron-Core without Transformer Engine (--transformer-impl local,
// the path before Ampere) runs Megatron's fused scale-mask-softmax
// (megatron/core/fusions/fused_softmax.py): both keep the s x s scores, which is `fused` here.
// An explicit flash there is refused instead (check_training): the user asked for a kernel that
// does not exist on that GPU.
namespace {
bool flash_falls_back(const Scenario& sc) {
  return !sc.training.attention && sc.training.framework.attention == Attention::Flash &&
         !flash_runs(sc.cluster.gpu, detail::flash_head_dim(sc.model));
}
}  // namespace

std::string Scenario::attention_fallback() const {
  return flash_falls_back(*this) ? training.framework.name + "'s " + flash_cannot_run(cluster.gpu, model) +
                                       "; costed with fused"
                                 : "";
}

Attention Scenario::attention() const {
  return flash_falls_back(*this) ? Attention::Fused : training.attention_or_default();
}

// Megatron-Core's context parallelism is Transformer Engine's ring attention (DotProductAttention
// with a cp group: attn_forward_func_with_cp), which runs only its FlashAttention and cuDNN
// fused-attention backends, both Ampere and newer (transformer_engine/pytorch/attention.py): a
// GPU without FlashAttention (its file's flash_peak_fraction 0) has neither. A CPU rank runs
// capplan-train's own ring (runtime/train RingAttention).
std::string context_parallel_missing(const GpuSpec& gpu) {
  if (gpu.cpu_rank || gpu.flash_peak_fraction > 0) return "";
  return "context parallelism runs Transformer Engine's ring attention (FlashAttention or cuDNN fused "
         "attention), which does not run on " +
         gpu.name + " (it needs Ampere or newer)";
}

bool optimizer_steps_on_host(const TrainingSpec& training, const Layout& layout) {
  return training.offload_optimizer || (training.offload_params && layout.zero == 3);
}

std::optional<TrainingProblem> check_training(const Scenario& sc) {
  const TrainingSpec& tr = sc.training;
  const GpuSpec& g = sc.cluster.gpu;
  if (tr.precision == Precision::Fp8 && g.peak_tflops_fp8 <= 0)
    return TrainingProblem{"precision", "fp8 needs fp8 tensor cores; " + g.name +
                                            " has none (fp8 starts with Hopper: H100, H200, B200)"};
  if (tr.attention == Attention::Flash) {
    const std::string why = flash_cannot_run(g, sc.model);
    if (!why.empty()) return TrainingProblem{"attention", why + "; use fused or eager"};
  }
  if ((tr.offload_params || tr.offload_optimizer) && !(sc.cluster.host_memory_gib > 0))
    return TrainingProblem{tr.offload_params ? "offload_params" : "offload_optimizer",
                           "the cluster " + sc.cluster.name +
                               " has no host_memory_gib, so what is offloaded has nowhere to go"};
  return std::nullopt;
}

namespace {

// The expert- and context-parallel rules: ep divides the experts (each rank holds experts / ep
// whole experts, Megatron-Core) and lives inside the dp*cp group; cp splits the sequence into
// 2*cp equal chunks (Megatron-Core's causal load balance, rank i holding chunks i and 2cp-1-i).
std::optional<std::string> check_moe_layout(const Scenario& sc, const Layout& ly) {
  const ModelSpec& md = sc.model;
  if (ly.ep > 1 && !md.moe.enabled())
    return "ep = " + std::to_string(ly.ep) + " needs an MoE model (the model has no moe.experts)";
  if (md.moe.enabled() && md.moe.experts % ly.ep != 0)
    return "ep = " + std::to_string(ly.ep) + " must divide experts = " + std::to_string(md.moe.experts);
  if ((int64_t(ly.dp) * ly.cp) % ly.ep != 0)
    return "ep = " + std::to_string(ly.ep) + " must divide dp*cp = " +
           std::to_string(int64_t(ly.dp) * ly.cp) + " (the expert group lives inside the data- and context-parallel ranks)";
  if (md.moe.enabled() && ly.tp > 0 && md.expert_ffn_hidden_or_default() % ly.tp != 0)
    return "tp = " + std::to_string(ly.tp) + " must divide moe.expert_ffn_hidden = " +
           std::to_string(md.expert_ffn_hidden_or_default());
  if (ly.cp > 1) {
    const int s = sc.seq_len();
    if (s % (2 * ly.cp) != 0)
      return "cp = " + std::to_string(ly.cp) + ": 2*cp = " + std::to_string(2 * ly.cp) +
             " must divide the sequence length " + std::to_string(s) +
             " (the causal load balance splits it into 2*cp equal chunks)";
    if (const std::string why = context_parallel_missing(sc.cluster.gpu); !why.empty())
      return "cp = " + std::to_string(ly.cp) + ": " + why;
  }
  return std::nullopt;
}

}  // namespace

std::optional<std::string> framework_lacks(const FrameworkSpec& fw, const Layout& ly) {
  const std::string who = "framework " + fw.name + " has no ";
  if (ly.tp > 1 && !fw.tensor_parallel) return who + "tensor parallelism (tp must be 1)";
  if (ly.pp > 1 && !fw.pipeline_parallel) return who + "pipeline parallelism (pp must be 1)";
  if (ly.cp > 1 && !fw.context_parallel) return who + "context parallelism (cp must be 1)";
  if (ly.ep > 1 && !fw.expert_parallel) return who + "expert parallelism (ep must be 1)";
  if (ly.offload && !fw.activation_offload) return who + "activation offload (offload must be off)";
  if (ly.sp && !fw.sequence_parallel) return who + "sequence parallelism (sp)";
  if (ly.recompute == Recompute::Selective && !fw.selective_recompute)
    return who + "selective recompute (use full or none)";
  if (!fw.has_zero(ly.zero)) {
    std::string stages;
    for (int z = 0; z < 4; ++z)
      if (fw.has_zero(z)) stages += (stages.empty() ? "" : ", ") + std::to_string(z);
    return who + "ZeRO stage " + std::to_string(ly.zero) + " (zero " + stages + ")";
  }
  if (ly.pp > 1 && !fw.has_schedule(ly.schedule)) {
    std::string names;
    for (Schedule s : {Schedule::OneFOneB, Schedule::Interleaved, Schedule::GPipe})
      if (fw.has_schedule(s)) names += (names.empty() ? "" : ", ") + std::string(to_string(s));
    return who + "pipeline schedule " + to_string(ly.schedule) + " (schedule " + names + ")";
  }
  return std::nullopt;
}

std::optional<std::string> check_layout(const Scenario& sc, const Layout& ly) {
  const ModelSpec& md = sc.model;
  if (ly.dp < 1 || ly.tp < 1 || ly.pp < 1 || ly.vp < 1 || ly.mbs < 1)
    return "dp, tp, pp, vp and mbs must be >= 1";
  if (ly.cp < 1 || ly.ep < 1) return "cp and ep must be >= 1";
  if (sc.total_gpus() <= 0) return "the scenario has no GPUs (nodes and gpus are 0)";
  if (ly.cp == 1 && int64_t(ly.dp) * ly.tp * ly.pp != sc.total_gpus())
    return "dp*tp*pp = " + std::to_string(int64_t(ly.dp) * ly.tp * ly.pp) +
           " must equal the GPU count " + std::to_string(sc.total_gpus());
  if (int64_t(ly.dp) * ly.tp * ly.pp * ly.cp != sc.total_gpus())
    return "dp*tp*pp*cp = " + std::to_string(int64_t(ly.dp) * ly.tp * ly.pp * ly.cp) +
           " must equal the GPU count " + std::to_string(sc.total_gpus());
  if (auto moe = check_moe_layout(sc, ly)) return moe;
  if (md.heads <= 0 || md.layers <= 0 || md.hidden <= 0) return "the model has no layers, hidden or heads";
  if (md.heads % ly.tp != 0)
    return "tp = " + std::to_string(ly.tp) + " must divide heads = " + std::to_string(md.heads);
  if (md.kv_heads_or_default() % ly.tp != 0)
    return "tp = " + std::to_string(ly.tp) + " must divide kv_heads = " +
           std::to_string(md.kv_heads_or_default());
  if (md.ffn_hidden_or_default() % ly.tp != 0)
    return "tp = " + std::to_string(ly.tp) + " must divide ffn_hidden = " +
           std::to_string(md.ffn_hidden_or_default());
  if (int64_t(ly.pp) * ly.vp > md.layers)
    return "pp*vp = " + std::to_string(ly.pp * ly.vp) + " must be <= layers = " + std::to_string(md.layers);
  // Interleaving needs equal chunks, as in Megatron-LM (Narayanan et al. 2021 Sec 2.2.2): with
  // chunks of unequal size the schedule stalls in ways the closed form below does not capture, and
  // capplan-train refuses such a layout too.
  if (ly.vp > 1 && md.layers % (ly.pp * ly.vp) != 0)
    return "vp = " + std::to_string(ly.vp) + " must divide the layers per stage (layers = " +
           std::to_string(md.layers) + ", pp*vp = " + std::to_string(ly.pp * ly.vp) + ")";
  if (ly.vp > 1 && ly.schedule != Schedule::Interleaved) return "vp > 1 needs schedule interleaved";
  if (ly.schedule == Schedule::Interleaved && (ly.vp < 2 || ly.pp < 2))
    return "schedule interleaved needs pp >= 2 and vp >= 2";
  if (sc.training.gbs <= 0) return "gbs must be > 0";
  const int64_t m = ly.num_microbatches(sc.training.gbs);
  if (m == 0)
    return "gbs = " + std::to_string(sc.training.gbs) + " must be divisible by dp*mbs = " +
           std::to_string(int64_t(ly.dp) * ly.mbs);
  if (ly.schedule == Schedule::Interleaved && m % ly.pp != 0)
    return "schedule interleaved needs num_microbatches = " + std::to_string(m) +
           " divisible by pp = " + std::to_string(ly.pp);
  if (ly.zero < 0 || ly.zero > 3) return "zero must be 0, 1, 2 or 3";
  if (ly.zero >= 2 && ly.pp > 1) return "zero 2 and 3 need pp = 1 (gradients are sharded across micro-batches)";
  const std::string& o = ly.order;
  if (!parse_order(o) || *parse_order(o) != o)
    return "order '" + o + "' must be a permutation of D, P and T (C and E optional)";
  if (ly.sp && ly.tp < 2) return "sp (sequence parallelism) needs tp >= 2";
  if (sc.cluster.gpus_per_node <= 0) return "the cluster has no gpus_per_node";
  if (sc.cluster.gpu.peak_tflops(sc.training.precision) <= 0 &&
      !(sc.training.precision == Precision::Bf16 && sc.cluster.gpu.peak_tflops_fp16 > 0))
    return "the GPU has no peak for precision " + std::string(to_string(sc.training.precision));
  if (sc.cluster.gpu.memory_gbyte_per_s <= 0) return "the GPU has no memory bandwidth";
  if (auto t = check_training(sc)) return t->message;
  const TrainingSpec& tr = sc.training;
  if (auto lacks = framework_lacks(tr.framework, ly)) return lacks;
  if (sc.total_gpus() > sc.cluster.gpus_per_node && sc.cluster.inter_node_gbit_per_s <= 0)
    return "the job spans nodes but the cluster has no inter_node_gbit_per_s";
  if (sc.total_gpus() > 1 && sc.cluster.intra_node_gbyte_per_s <= 0 &&
      sc.cluster.inter_node_gbit_per_s <= 0)
    return "the cluster has no intra_node_gbyte_per_s for communication between GPUs";
  return std::nullopt;
}

namespace detail {

// Everything after the layout is known: throughput, FLOP rates, days and dollars.
void finish_estimate(const Scenario& sc, const Constants& c, const Layout& ly, int64_t m,
                     const MicroTerms& mt, const Evaluation& ev, Estimate& est) {
  est.layout = ly;
  est.framework = sc.training.framework.name;
  est.attention = sc.attention();
  est.attention_fallback = sc.attention_fallback();
  est.precision = sc.training.precision;
  est.optimizer = sc.training.optimizer;
  est.offload_params = sc.training.offload_params;
  est.offload_optimizer = sc.training.offload_optimizer;
  est.num_microbatches = m;
  est.fits = ev.fits;
  est.memory_per_gpu_bytes = ev.mem;
  est.host_memory_per_node_bytes = ev.host_bytes_per_node;
  est.host_memory_capacity_bytes = ev.host_capacity_bytes;
  est.breakdown_s = ev.time;
  // An MoE layer's expert GEMMs are priced in its forward and backward, not apart.
  est.gemm_s = sc.model.moe.enabled() ? std::numeric_limits<double>::quiet_NaN() : ev.gemm_s;
  est.step_time_s = ev.step_s;
  est.bubble_fraction = ev.step_s > 0 ? ev.time.bubble / ev.step_s : 0;
  const double gbs = double(sc.training.gbs), s = sc.seq_len();
  est.gpus = sc.total_gpus();
  est.nodes = sc.nodes > 0 ? sc.nodes
                           : (est.gpus + sc.cluster.gpus_per_node - 1) / std::max(1, sc.cluster.gpus_per_node);
  est.samples_per_s = gbs / ev.step_s;
  est.tokens_per_s = est.samples_per_s * s;
  const ModelProfile prof = profile_model(sc.model, 1, sc.seq_len(), 1, sc.training.precision);
  const double model_flops_step = prof.flops_per_token * gbs * s;
  // Recompute FLOPs: one more forward of every layer (full) or of the attention core (selective),
  // the multi-token prediction modules' layers included, whole model (per-rank figures x tp), per
  // sequence.
  const double full_rec_flops_step = sc.model.trained_layers() * mt.layer_gemm_flops * ly.tp * gbs / ly.mbs;
  double rec_flops_step = 0;
  if (ly.recompute == Recompute::Full)
    rec_flops_step = full_rec_flops_step;
  else if (ly.recompute == Recompute::Selective)
    rec_flops_step = sc.model.trained_layers() * mt.layer_attn_core_flops * ly.tp * gbs / ly.mbs;
  est.model_tflops_per_gpu = model_flops_step / ev.step_s / est.gpus / 1e12;
  est.hardware_tflops_per_gpu = (model_flops_step + rec_flops_step) / ev.step_s / est.gpus / 1e12;
  est.eq3_tflops_per_gpu = (model_flops_step + full_rec_flops_step) / ev.step_s / est.gpus / 1e12;
  est.mfu = c.peak_flops > 0 ? est.model_tflops_per_gpu * 1e12 / c.peak_flops : 0;
  est.tokens_defaulted = !(sc.training.tokens > 0);
  // Chinchilla: 20 tokens per parameter (Hoffmann et al. 2022) when the user gives no budget.
  est.tokens = est.tokens_defaulted ? 20.0 * prof.total_params : sc.training.tokens;
  est.days_to_train = est.tokens / est.tokens_per_s / 86400.0;
  est.cost_usd = sc.cluster.price_per_node_hour_usd > 0
                     ? est.nodes * sc.cluster.price_per_node_hour_usd * est.days_to_train * 24.0
                     : std::numeric_limits<double>::quiet_NaN();
  if (!ev.fits) {
    const double gib = 1024.0 * 1024.0 * 1024.0;
    char buf[200];
    if (ev.mem.total > ev.mem.capacity)
      std::snprintf(buf, sizeof buf, "needs %.1f GiB per GPU on stage %d, the GPU has %.1f GiB",
                    ev.mem.total / gib, ev.memory_stage, ev.mem.capacity / gib);
    else
      std::snprintf(buf, sizeof buf,
                    "what is offloaded needs %.0f GiB of host memory per node, %.0f GiB usable",
                    ev.host_bytes_per_node / gib, ev.host_capacity_bytes / gib);
    est.reason = buf;
  } else {
    est.reason.clear();
  }
}

}  // namespace detail

namespace {

// One layout through the cost model: the constants, micro-batch terms and placement it needs,
// then evaluate() (filling `steps` when given). The layout must have passed check_layout.
struct LayoutEvaluation {
  detail::Constants c;
  int64_t m = 0;
  detail::MicroTerms mt;
  detail::Evaluation ev;
};
LayoutEvaluation evaluate_layout(const Scenario& sc, const Layout& ly, StepCosts* steps) {
  LayoutEvaluation r;
  r.c = detail::constants_for(sc);
  if (detail::needs_moe_cp(sc, ly)) {  // experts or context parallelism: cost_model_moe.cpp
    detail::MoeCpEvaluation e = detail::evaluate_moe_cp(sc, r.c, ly, steps);
    r.m = e.m;
    r.mt = e.mt_finish;
    r.ev = e.ev;
    return r;
  }
  r.m = ly.num_microbatches(sc.training.gbs);
  r.mt = detail::layout_micro_terms(sc, r.c, ly);
  const detail::Placement pl = detail::placement(r.c, sc.cluster.gpus_per_node, sc.total_gpus(),
                                                 ly.dp, ly.tp, ly.pp, ly.order.c_str());
  detail::evaluate(sc, r.c, ly, r.m, r.mt, pl, r.ev, steps);
  return r;
}

}  // namespace

// Spreads of the inputs (BandSpreads): GEMM efficiency 5 % where the GPU's file gives a measured
// figure (the first file's calibration runs' residuals: MAPE 2.3 %, max 7.5 %), 15 % where it
// gives none;
// memory-bound kernels 10 % (fused-kernel bandwidth ranges over 80-90 % of STREAM); collectives
// 10 % (nccl-tests bus bandwidth spread across systems of one kind); the framework's own.
BandSpreads band_spreads(const Scenario& sc) {
  BandSpreads b;
  b.gemm = sc.cluster.gpu.gemm_peak_fraction > 0 ? 0.05 : 0.15;
  b.memory = 0.10;
  b.network = 0.10;
  // FlashAttention's rate: the rate the model gives the kernels differs from their published
  // causal speeds by 4.0 % root mean square at head size 128 (kFlashCausalRampTokens); where the GPU
  // has no kernel benchmark in our sources (no measured GEMM figure either: B200) its figures are
  // stand-ins, 15 % as for its GEMMs.
  b.flash = sc.attention() == Attention::Flash
                ? (sc.cluster.gpu.gemm_peak_fraction > 0 ? 0.04 : 0.15)
                : 0.0;
  b.framework = sc.training.framework.residual_spread;
  if (const DeviceProfile* dev = sc.cluster.device_profile.get()) {
    // Measured on the device: its kernels' times are the profile's, not efficiencies of a
    // datasheet, and they carry the profile's own noise, its round-to-round spread (RoundSpread:
    // 0 in profiles that do not record it). A profile of CPU ranks prices capplan-train on its
    // host, not the framework's implementation: its residual is the local model's over the
    // layouts capplan-train runs, measured by tests/bench/bench_local_fidelity.sh on a 2-core
    // host: 8.3 % root mean square of log(measured / predicted) step time over 528 single runs
    // (22 layouts, 8 benchmark runs of 3 rounds, each round with its own profile; each layout's
    // lowest and highest round as the benchmark printed them, its middle round taken as the ratio
    // of its medians), most of it the host's speed moving between the profile and the run (the
    // benchmark's gemm column). The benchmark now prints the figure over its own single runs:
    // 6.3 % over 66 in the next run.
    b.gemm = dev->spread.gemms;
    b.memory = dev->spread.kernels;
    b.network = dev->spread.collectives;
    b.flash = 0;
    if (dev->backend == "cpu") b.framework = detail::kCpuProfileResidual;
  }
  return b;
}

namespace {

Estimate estimate_point(const Scenario& sc, const Layout& ly);

// Adds the p10/p90 band to a point estimate (see BandSpreads).
void add_band(const Scenario& sc, const Layout& ly, Estimate& est) {
  const double t = est.step_time_s;
  est.step_time_s_p10 = est.step_time_s_p90 = t;
  est.days_to_train_p10 = est.days_to_train_p90 = est.days_to_train;
  est.cost_usd_p10 = est.cost_usd_p90 = est.cost_usd;
  if (!(t > 0) || !std::isfinite(t)) return;
  const BandSpreads sp = band_spreads(sc);
  constexpr double kZ90 = 1.2816;  // 90th percentile of the standard normal
  auto set_band = [&](double sigma) {
    est.step_time_s_p10 = std::max(0.0, t - kZ90 * sigma);
    est.step_time_s_p90 = t + kZ90 * sigma;
    est.days_to_train_p10 = est.days_to_train * est.step_time_s_p10 / t;
    est.days_to_train_p90 = est.days_to_train * est.step_time_s_p90 / t;
    est.cost_usd_p10 = est.cost_usd * est.step_time_s_p10 / t;
    est.cost_usd_p90 = est.cost_usd * est.step_time_s_p90 / t;
  };
  if (sc.cluster.device_profile) {
    // The profile's timings scale the terms they price, to first order: the GEMMs, the rest of
    // the passes (memory-bound kernels), the optimizer and the offload copies; the bubble with the
    // passes it waits for, the collectives with the measured collectives. The GEMMs' and the
    // kernels' noise is the same host's and is added as one (correlated); the collectives' and
    // the residual in quadrature.
    const TimeBreakdown& b = est.breakdown_s;
    const double passes = b.compute + b.recompute;
    const double gemm = std::clamp(est.gemm_s, 0.0, passes);
    const double g_share = passes > 0 ? gemm / passes : 0.0;
    const double host = (gemm + b.bubble * g_share) * sp.gemm +
                        (passes - gemm + b.bubble * (1 - g_share) + b.optimizer + b.offload) * sp.memory;
    const double net = (b.tp_comm + b.pp_comm + b.dp_comm + b.ep_comm + b.cp_comm) * sp.network;
    const double df = t * sp.framework;
    set_band(std::sqrt(host * host + net * net + df * df));
    return;
  }
  const detail::Constants c = detail::constants_for(sc);
  const ClusterSpec& cl = sc.cluster;
  const double mem_eff = c.hbm_Bps / (cl.gpu.memory_gbyte_per_s * 1e9);
  const double intra_eff = cl.intra_node_gbyte_per_s > 0 ? c.intra_Bps / (cl.intra_node_gbyte_per_s * 1e9) : 0;
  const double inter_eff = cl.inter_node_gbit_per_s > 0 ? c.inter_node_Bps / (cl.inter_node_gbit_per_s / 8.0 * 1e9) : 0;
  const double flash_eff = c.flash_eff;
  auto step_with = [&](double fg, double fm, double fn, double fa) {
    Scenario v = sc;
    v.cluster.efficiency.gemm = c.gemm_eff * fg;
    v.cluster.efficiency.memory = mem_eff * fm;
    if (intra_eff > 0) v.cluster.efficiency.intra_node = intra_eff * fn;
    if (inter_eff > 0) v.cluster.efficiency.inter_node = inter_eff * fn;
    if (flash_eff > 0) v.cluster.efficiency.flash = flash_eff * fa;
    return estimate_point(v, ly).step_time_s;
  };
  // A faster constant gives a shorter step: +sigma on an efficiency is the fast end.
  const double dg = 0.5 * (step_with(1 - sp.gemm, 1, 1, 1) - step_with(1 + sp.gemm, 1, 1, 1));
  const double dm = 0.5 * (step_with(1, 1 - sp.memory, 1, 1) - step_with(1, 1 + sp.memory, 1, 1));
  const double dn = 0.5 * (step_with(1, 1, 1 - sp.network, 1) - step_with(1, 1, 1 + sp.network, 1));
  const double da = sp.flash > 0 && flash_eff > 0
                        ? 0.5 * (step_with(1, 1, 1, 1 - sp.flash) - step_with(1, 1, 1, 1 + sp.flash))
                        : 0.0;
  const double df = t * sp.framework;
  set_band(std::sqrt(dg * dg + dm * dm + dn * dn + da * da + df * df));
}

Estimate estimate_point(const Scenario& sc, const Layout& ly) {
  Estimate est;
  if (auto err = check_layout(sc, ly)) {
    est.layout = ly;
    est.fits = false;
    est.reason = *err;
    est.gpus = sc.total_gpus();
    est.nodes = sc.nodes;
    est.cost_usd = std::numeric_limits<double>::quiet_NaN();
    return est;
  }
  const LayoutEvaluation r = evaluate_layout(sc, ly, nullptr);
  detail::finish_estimate(sc, r.c, ly, r.m, r.mt, r.ev, est);
  return est;
}

}  // namespace

Estimate estimate(const Scenario& sc, const Layout& ly) {
  Estimate est = estimate_point(sc, ly);
  if (est.step_time_s > 0) add_band(sc, ly, est);
  return est;
}

StepCosts step_costs(const Scenario& sc, const Layout& ly) {
  StepCosts out;
  if (check_layout(sc, ly)) return out;
  evaluate_layout(sc, ly, &out);
  return out;
}

double gemm_time_s(const Scenario& sc, double m, double n, double k) {
  return detail::gemm_s(detail::constants_for(sc), m, n, k);
}

double memory_time_s(const Scenario& sc, double bytes) { return detail::mem_s(detail::constants_for(sc), bytes); }

}  // namespace capplan
