// Value types describing what is trained (ModelSpec), on what (GpuSpec, ClusterSpec), how much
// (TrainingSpec) and how it is laid out over GPUs (Layout). Plain data, no I/O: loading with
// diagnostics is in spec_io.h, the built-in presets in catalog.h.
#pragma once

#include <cmath>
#include <cstdint>
#include <optional>
#include <memory>
#include <string>

namespace capplan {

struct DeviceProfile;

enum class Ffn { Gelu, Swiglu };
enum class Norm { LayerNorm, RmsNorm };
enum class PositionEmbedding { Learned, Rope };
// Fp8: Transformer Engine style - fp8 GEMMs (E4M3 forward, E5M2 gradients), bf16 everywhere else.
enum class Precision { Bf16, Fp16, Fp32, Fp8 };
enum class Recompute { None, Selective, Full };
enum class Schedule { GPipe, OneFOneB, Interleaved };
// How the attention core is implemented: Eager (Hugging Face style: scores materialised, mask,
// softmax and dropout as separate memory passes), Fused (Megatron's fused scale-mask-softmax, the
// scores still materialised), Flash (FlashAttention-2/3: no s^2 tensor, backward recomputes the
// scores).
enum class Attention { Eager, Fused, Flash };
// The FlashAttention kernel an implementation calls under Attention::Flash: Fa2 (Dao 2023's
// flash-attn 2 package, PyTorch's scaled_dot_product_attention flash backend), Fa3 (Shah et al.
// 2024, Hopper only), Cudnn (cuDNN's fused flash attention, which Transformer Engine prefers on
// Hopper and newer), Fa1 (Dao et al. 2022's first FlashAttention, flash-attn 0.x/1.x: the same
// memory, at half FlashAttention-2's rate). A GPU without a figure for the kernel runs
// FlashAttention-2.
enum class FlashKernel { Fa2, Fa3, Cudnn, Fa1 };
// The first FlashAttention's speed against FlashAttention-2's on the same GPU: "around 2x speedup
// compared to FlashAttention", 25-40 % of the A100's peak against 50-73 % (Dao 2023,
// "FlashAttention-2", abstract and Sec 4.1). One figure for every GPU and head size.
constexpr double kFlashAttention1RelativeRate = 0.5;
// Adam: fp32 master weights and two fp32 moments (12 bytes per parameter in mixed precision).
// Sgd: plain SGD, no state beyond the weights in the training precision (the PyTorch FSDP runs
// trained in fp16 "including the optimizer").
enum class Optimizer { Adam, Sgd };
// ZeRO-3 / FSDP parameter traffic: Ring = one NCCL all-gather / reduce-scatter per wrapped layer
// (PyTorch FSDP flat parameters) at the node's NIC bandwidth, prefetched behind the neighbouring
// layer's compute; RankShare = every rank fetches the remote shards itself at its own share of
// the NICs (DeepSpeed ZeRO-3's per-parameter partitions, Rajbhandari et al. 2021 Sec 6.1).
enum class Zero3Comm { Ring, RankShare };
// When ZeRO-3 / FSDP issues a unit's all-gather in the backward (PyTorch FSDP BackwardPrefetch):
// Pre before the current unit's gradient computation, Post after it (before its reduce-scatter),
// None from the unit's own pre-backward hook, behind the previous unit's reduce-scatter.
enum class Zero3BackwardPrefetch { Pre, Post, None };
// What ZeRO-3 gathers at once: a whole transformer layer (FSDP transformer_auto_wrap_policy,
// DeepSpeed's layer prefetch) or one weight matrix (FSDP's size-based auto-wrap policy, which
// wraps every Linear of at least 1e8 parameters as its own unit).
enum class Zero3Unit { Layer, Linear };
// How DeepSpeed's ZeRO-3 (rank-share mode) issues its collectives, each paying a ring's latency:
// Module = one all-gather of a module's parameters (coalesced) and one reduce-scatter per
// gradient bucket (DeepSpeed 0.5.6+, pull requests 1188 and 1453); Tensor = one all-gather and
// one reduce-scatter per parameter tensor (DeepSpeed up to 0.5.5: partition_parameters.py
// `_allgather_param`, `_reduce_scatter_gradient`).
enum class Zero3Collectives { Module, Tensor };

// Mixture-of-experts feed-forward (Shazeer et al. 2017; Fedus et al. 2022, Switch Transformer;
// Jiang et al. 2024, Mixtral; DeepSeek-AI 2024, DeepSeek-V3): in an MoE layer the MLP is replaced
// by `experts` MLPs of width expert_ffn_hidden, of which a router picks top_k per token, plus
// `shared_experts` MLPs every token goes through. experts = 0: a dense model.
struct MoeSpec {
  int experts = 0;            // routed experts per MoE layer; 0 = dense (no MoE)
  int top_k = 0;              // routed experts per token; 0 = 1 when experts > 0
  int expert_ffn_hidden = 0;  // width of one expert's MLP; 0 = the model's ffn_hidden
  int shared_experts = 0;     // always-active experts of width expert_ffn_hidden (DeepSeek, Qwen-MoE)
  // Tokens an expert takes per batch, as a multiple of its even share (top_k * tokens / experts);
  // tokens over it are dropped (GShard, Switch). 0 = dropless (Megatron-Core's default).
  double capacity_factor = 0;
  int moe_layer_freq = 1;      // every moe_layer_freq-th layer (after the dense ones) is MoE
  int first_dense_layers = 0;  // leading layers with a dense MLP (DeepSeek's first_k_dense_replace)

  bool enabled() const { return experts > 0; }
  int top_k_or_default() const { return top_k > 0 ? top_k : 1; }
  // Layer i (0-based) has an MoE MLP: i >= first_dense_layers and
  // (i - first_dense_layers) % moe_layer_freq == 0.
  bool is_moe_layer(int i) const {
    return enabled() && i >= first_dense_layers && moe_layer_freq > 0 &&
           (i - first_dense_layers) % moe_layer_freq == 0;
  }
  int moe_layers(int layers) const {
    if (!enabled() || moe_layer_freq <= 0 || layers <= first_dense_layers) return 0;
    return (layers - first_dense_layers + moe_layer_freq - 1) / moe_layer_freq;
  }
};

// Multi-head latent attention (DeepSeek-AI 2024, "DeepSeek-V2", arXiv:2405.04434, Sec 2.1.2-2.1.3):
// keys and values are up-projected per head from a shared latent of kv_lora_rank features (the
// down-projection also gives qk_rope_head_dim rotary features shared by every head), and queries
// from a latent of q_lora_rank features (0: straight from the hidden state). A query-key head is
// qk_nope_head_dim + qk_rope_head_dim wide, a value head v_head_dim. kv_lora_rank = 0: none. The
// names are those of the Hugging Face configs (DeepseekV2Config, DeepseekV3Config).
struct MlaSpec {
  int q_lora_rank = 0;       // latent of the queries; 0 = queries projected from the hidden state
  int kv_lora_rank = 0;      // latent of the keys and values; > 0 enables latent attention
  int qk_nope_head_dim = 0;  // per head, the query-key features without rotary embedding
  int qk_rope_head_dim = 0;  // per head, the rotary query-key features (one shared key part)
  int v_head_dim = 0;        // per head, the value features

  bool enabled() const { return kv_lora_rank > 0; }
};

struct ModelSpec {
  std::string name;
  int layers = 0;
  int hidden = 0;      // d_model
  int heads = 0;       // attention (query) heads
  int vocab = 0;
  int seq_len = 0;     // default sequence length; TrainingSpec::seq_len overrides
  int ffn_hidden = 0;  // 0 = 4 * hidden
  int kv_heads = 0;    // 0 = heads (multi-head); fewer = grouped-query attention
  int head_dim = 0;    // width of one head; 0 = hidden / heads (Gemma, Qwen3 and Mistral NeMo set it apart)
  // Sliding-window (local) attention: a query attends to the last `sliding_window` tokens, itself
  // included; 0 = every layer attends to the whole causal prefix. With a window, every
  // `global_every`-th layer (layers i with (i + 1) % global_every == 0) still attends to the whole
  // prefix (Gemma 2: 2, Gemma 3: 6); 0 = every layer local (Mistral 7B v0.1, Phi-3 mini).
  int sliding_window = 0;
  int global_every = 0;
  // Chunked (local) attention (Llama 4, transformers' Llama4TextAttention with
  // attention_chunk_size): the sequence is cut into chunks of `attention_chunk` tokens from its
  // start and a query attends causally within its own chunk; the layers that do are chosen by
  // global_every as with a window (Llama 4: every 4th layer global). 0 = none; a model has a
  // window or chunks, not both.
  int attention_chunk = 0;
  Ffn ffn = Ffn::Gelu;
  bool tied_embeddings = true;
  Norm norm = Norm::LayerNorm;
  PositionEmbedding position = PositionEmbedding::Learned;
  MoeSpec moe;         // experts = 0: dense
  MlaSpec mla;         // kv_lora_rank = 0: queries, keys and values projected from the hidden state
  // Multi-token prediction (DeepSeek-AI 2024, "DeepSeek-V3", arXiv:2412.19437, Sec 2.2; Gloeckle
  // et al. 2024): `mtp_layers` modules in sequence after the last layer, the k-th predicting token
  // i + k + 1. Each one RMS-normalises the previous depth's hidden state and the embedding of token
  // i + k, projects the two (2 hidden -> hidden), runs one transformer layer (of the kind layer
  // `layers + k` would be: MoE past first_dense_layers) and the model's final norm, output head and
  // cross-entropy (the embedding and the head shared with the model). Trained with the model,
  // dropped at inference; its parameters are counted apart from the model's (the DeepSeek-V3
  // report: 671B and 14B of MTP in the Hugging Face checkpoint, which stores its own embedding and
  // head copies). 0 = none. Hugging Face: num_nextn_predict_layers; Megatron-Core --mtp-num-layers.
  int mtp_layers = 0;
  std::string source;  // where the figures come from (paper, config file path)

  int ffn_hidden_or_default() const { return ffn_hidden > 0 ? ffn_hidden : 4 * hidden; }
  int expert_ffn_hidden_or_default() const {
    return moe.expert_ffn_hidden > 0 ? moe.expert_ffn_hidden : ffn_hidden_or_default();
  }
  int kv_heads_or_default() const { return kv_heads > 0 ? kv_heads : heads; }
  // Transformer layers a training step runs: the model's and the multi-token prediction modules'.
  int trained_layers() const { return layers + mtp_layers; }
  int head_dim_or_default() const { return head_dim > 0 ? head_dim : heads > 0 ? hidden / heads : 0; }
  // Width of the queries and of the attention output projection's input: heads x head_dim, the
  // hidden size unless head_dim is set apart from it.
  int attention_width() const { return heads * head_dim_or_default(); }
  // Width of one query-key head and of one value head: head_dim_or_default() both, unless latent
  // attention sets them (qk_nope_head_dim + qk_rope_head_dim, v_head_dim).
  int qk_head_dim() const { return mla.enabled() ? mla.qk_nope_head_dim + mla.qk_rope_head_dim : head_dim_or_default(); }
  int v_head_dim() const { return mla.enabled() ? mla.v_head_dim : head_dim_or_default(); }
  // The attention core's FLOPs per query-key pair, over 4: Q K^T takes 2 heads x qk and P V
  // 2 heads x v, i.e. 4 x heads x (qk + v) / 2 (attention_width() without latent attention).
  double attention_core_width() const { return heads * 0.5 * (qk_head_dim() + v_head_dim()); }
  // The keys a local layer's query reaches at most: the window's, or the chunk's.
  int local_span() const { return sliding_window > 0 ? sliding_window : attention_chunk; }
  // Whether layer i (0-based) attends within its window or chunk at sequence `seq`: only where
  // that is shorter than the sequence.
  bool is_local_layer(int i, int seq) const {
    return local_span() > 0 && local_span() < seq && (global_every <= 0 || (i + 1) % global_every != 0);
  }
  // The layers that attend within their window or chunk at sequence `seq` (those is_local_layer
  // names), and their share of the layers.
  int local_layers(int seq) const {
    if (layers <= 0 || local_span() <= 0 || local_span() >= seq) return 0;
    return global_every > 0 ? layers - layers / global_every : layers;
  }
  double local_layer_share(int seq) const { return layers > 0 ? double(local_layers(seq)) / layers : 0.0; }
  // The causal query-key pairs a local layer scores at sequence `seq`, as a share of causal
  // attention's seq (seq + 1) / 2: with a window w, seq w - w (w - 1) / 2; with chunks of C, each
  // whole chunk C (C + 1) / 2 and the rest r (r + 1) / 2. 1 where the span covers the sequence.
  double local_pairs_share(int seq) const {
    const double s = seq, w = local_span();
    if (w <= 0 || w >= s) return 1.0;
    const double all = s * (s + 1) / 2;
    if (sliding_window > 0) return (s * w - w * (w - 1) / 2) / all;
    const double whole = std::floor(s / w), r = s - whole * w;
    return (whole * w * (w + 1) / 2 + r * (r + 1) / 2) / all;
  }
};

struct GpuSpec {
  std::string name;
  double memory_gib = 0;
  double peak_tflops_fp16 = 0;  // dense tensor-core peak
  double peak_tflops_bf16 = 0;  // 0 = not supported (e.g. V100)
  double peak_tflops_fp32 = 0;  // non-tensor-core fp32
  double peak_tflops_fp8 = 0;   // dense fp8 tensor-core peak; 0 = no fp8 (before Hopper)
  double memory_gbyte_per_s = 0;
  // Measured fraction of the 16-bit peak that cuBLAS reaches on large GEMMs (a published
  // microbenchmark, cited in the GPU's file); 0 = unknown (the cost model's A100 figure is used).
  double gemm_peak_fraction = 0;
  // Measured fraction of the 16-bit peak FlashAttention-2's forward reaches on long sequences
  // without a mask, at head size 128 (a published kernel benchmark, cited in the GPU's file);
  // 0 = FlashAttention does not run on this GPU (it needs Ampere or newer).
  double flash_peak_fraction = 0;
  // The same for FlashAttention-3 and for cuDNN's fused attention; 0 = no figure (the kernel
  // does not run on this GPU, or nothing is published): FlashAttention-2's figure is used.
  double fa3_peak_fraction = 0;
  double cudnn_attention_peak_fraction = 0;
  // The kernel that runs when an implementation calls `k` here: `k` where this GPU has a figure
  // for it, otherwise FlashAttention-2 (FA3 is written for Hopper; Transformer Engine calls FA2
  // on Ampere).
  FlashKernel flash_kernel_run(FlashKernel k) const {
    if (k == FlashKernel::Fa3 && fa3_peak_fraction > 0) return k;
    if (k == FlashKernel::Cudnn && cudnn_attention_peak_fraction > 0) return k;
    if (k == FlashKernel::Fa1) return k;  // wherever FlashAttention-2 runs, at its rate scaled
    return FlashKernel::Fa2;
  }
  // The forward fraction of peak of that kernel (0: no FlashAttention on this GPU).
  double flash_fraction(FlashKernel k) const {
    if (flash_peak_fraction <= 0) return 0.0;
    switch (flash_kernel_run(k)) {
      case FlashKernel::Fa3: return fa3_peak_fraction;
      case FlashKernel::Cudnn: return cudnn_attention_peak_fraction;
      case FlashKernel::Fa1: return flash_peak_fraction * kFlashAttention1RelativeRate;
      case FlashKernel::Fa2: break;
    }
    return flash_peak_fraction;
  }
  int sms = 0;                  // streaming multiprocessors (wave quantisation); 0 = unknown
  // A CPU rank of capplan-train's CPU backend rather than a GPU: it keeps no GPU runtime's fixed
  // reservation and no caching allocator's margin (the runtime allocates every buffer once).
  bool cpu_rank = false;
  std::string source;

  double memory_bytes() const { return memory_gib * 1024.0 * 1024.0 * 1024.0; }
  // The 16-bit tensor-core peak: bf16 where the GPU has it, else fp16 (V100).
  double peak_tflops_16bit() const { return peak_tflops_bf16 > 0 ? peak_tflops_bf16 : peak_tflops_fp16; }
  // Peak for a precision; 0 when the GPU does not support it.
  double peak_tflops(Precision p) const {
    switch (p) {
      case Precision::Bf16: return peak_tflops_bf16;
      case Precision::Fp16: return peak_tflops_fp16;
      case Precision::Fp32: return peak_tflops_fp32;
      case Precision::Fp8: return peak_tflops_fp8;
    }
    return 0;
  }
};

// Optional per-cluster overrides of the cost model's global efficiency constants (cost_model.h).
struct EfficiencyOverrides {
  std::optional<double> gemm;        // peak fraction reached by large GEMMs
  std::optional<double> memory;      // fraction of HBM bandwidth reached by memory-bound kernels
  std::optional<double> intra_node;  // fraction of NVLink bandwidth reached by collectives
  std::optional<double> inter_node;  // fraction of NIC bandwidth reached by collectives
  // Fraction of the 16-bit peak FlashAttention's forward reaches without a mask on long
  // sequences, in place of the GPU's figure for the framework's kernel.
  std::optional<double> flash;
};

struct ClusterSpec {
  std::string name;
  int gpus_per_node = 0;
  GpuSpec gpu;
  double intra_node_gbyte_per_s = 0;   // per GPU, per direction (NVLink/NVSwitch)
  double inter_node_gbit_per_s = 0;    // per node, all NICs together, per direction
  double price_per_node_hour_usd = 0;  // 0 = unknown (cost reported as unknown)
  double intra_node_latency_us = 0;    // 0 = cost model default
  double inter_node_latency_us = 0;    // 0 = cost model default
  double pcie_gbyte_per_s = 0;         // host<->GPU per GPU per direction; 0 = cost model default
  double host_memory_gib = 0;          // per node; 0 = unknown
  EfficiencyOverrides efficiency;
  std::string source;
  // Measured kernel and collective times of this cluster's GPU (device_profile.h); when set the
  // cost model uses them instead of the datasheet figures and efficiencies.
  std::shared_ptr<const DeviceProfile> device_profile;
};

// A training implementation's known behaviour (configs/frameworks/*.yaml): what the cost model
// must know about the software stack besides the layout. Each field's source is in the file.
struct FrameworkSpec {
  std::string name = "megatron-lm";
  Attention attention = Attention::Fused;  // default attention kernel
  FlashKernel flash_kernel = FlashKernel::Fa2;  // the kernel behind Attention::Flash
  // LayerNorm, bias + GeLU and bias + dropout + residual as single fused kernels (Megatron);
  // false: one PyTorch kernel per elementwise op (Hugging Face / minGPT modules).
  bool fused_kernels = true;
  // Elementwise kernels of the MLP activation when unfused: 1 for nn.GELU, 8 for Hugging Face's
  // gelu_new (0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) written out op by op).
  int activation_kernels = 1;
  // Data-parallel gradient reduction overlapped with the backward in buckets (DDP, FSDP,
  // Megatron-Core overlap_grad_reduce); false: one reduction after the last backward.
  bool dp_overlap = false;
  // ZeRO-1/2: the all-gather of updated weights overlapped with the next forward
  // (Megatron-Core overlap_param_gather); false: exposed after the optimizer step.
  bool param_gather_overlap = false;
  // Pipeline sends split over the tp ranks and re-gathered over NVLink (Narayanan et al. 2021
  // Sec 4.1); false: every tp rank sends the whole activation.
  bool p2p_scatter_gather = true;
  // A pipeline receive blocks its rank for the transfer as a send does (DeepSpeed's pipeline
  // engine: blocking broadcast or send/recv between the two stages); false: received data arrives
  // beside the compute (Megatron-LM's batched isend/irecv).
  bool p2p_blocking_recv = false;
  // The backward of a column-parallel linear (Q, K, V and the FFN's input) launches the
  // all-reduce of its input gradient (under sp: the all-gather of its input and the reduce-scatter
  // of the input gradient) asynchronously beside its weight-gradient (and input-gradient) GEMM
  // (Megatron-LM ColumnParallelLinearWithAsyncAllreduce, merged 2021-09-02; on by default for
  // tp > 1); false: every tensor-parallel collective blocks the compute stream.
  bool tp_async_bwd = true;
  // ZeRO-1 all-reduces the whole gradients before each rank steps its shard, then all-gathers the
  // updated 16-bit weights: one and a half all-reduces' volume (DeepSpeed's stage 1 runs with
  // contiguous_gradients off, the default up to v0.4.4 and forced from v0.4.5, so reduce_ipg_grads
  // takes buffered_reduce_fallback's dist.all_reduce; deepspeed/runtime/zero/stage2.py and
  // engine.py, v0.4-v0.9). false: a reduce-scatter of the gradients (Rajbhandari et al. 2020
  // Sec 7.2.1; Megatron's distributed optimizer).
  bool zero1_grad_allreduce = false;
  Zero3Comm zero3_comm = Zero3Comm::Ring;
  int zero3_prefetch_layers = 1;   // units gathered ahead of the one computing (ZeRO-3 / FSDP)
  Zero3Unit zero3_unit = Zero3Unit::Layer;
  Zero3BackwardPrefetch zero3_backward_prefetch = Zero3BackwardPrefetch::Pre;
  Zero3Collectives zero3_collectives = Zero3Collectives::Module;  // rank-share mode only
  // The weight-gradient GEMM accumulates into the fp32 gradient buffer itself (Megatron-LM
  // --gradient-accumulation-fusion); false: each micro-batch after the first adds its gradients
  // into the accumulator with a separate elementwise kernel (PyTorch autograd, DeepSpeed).
  bool grad_accumulation_fusion = true;
  // Gradients allocated as the backward produces them and freed by zero_grad(set_to_none)
  // (plain PyTorch, FSDP): with one micro-batch per step they are not live at the activation
  // peak. false: one gradient buffer for the whole run (Megatron-LM, DeepSpeed).
  bool lazy_grads = false;
  // Checkpointed activations split over the tp ranks and all-gathered before the recompute
  // (DeepSpeed partition_activations).
  bool partition_activations = false;
  // Activation offload whose copy to host blocks the host thread (PyTorch save_on_cpu: the pack
  // hook's copy_ is synchronous): the copies run in series with the compute stream, and at the end
  // of each layer's forward the host has nothing queued, so no ZeRO-3 gather is issued ahead of it.
  bool offload_sync = false;
  // A host-side SGD step over 16-bit (fp16) parameters (FSDP cpu_offload keeps the shards and
  // their gradients on the CPU): torch.optim's elementwise kernels on `host_step_threads` threads
  // per rank at `host_sgd_fp16_gelem_per_s` G elements/s per thread. 0 = bound by host memory
  // bandwidth only.
  int host_step_threads = 0;
  double host_sgd_fp16_gelem_per_s = 0;
  // Layout knobs the implementation has: sequence parallelism (Korthikanti et al. 2022) and
  // selective recompute of the attention core; the search offers only these.
  bool sequence_parallel = true;
  bool selective_recompute = true;
  // The parallelisms, ZeRO stages, pipeline schedules and activation offload the implementation
  // has: the search offers only these and check_layout refuses the others. Every one by default:
  // megatron-lm, the default preset, costs every layout (capplan run prices capplan-train, which
  // runs them all, with it).
  bool tensor_parallel = true;
  bool pipeline_parallel = true;
  bool context_parallel = true;
  bool expert_parallel = true;
  bool activation_offload = true;
  unsigned zero_stages = 0b1111;  // bit z: ZeRO stage z (0: plain data parallelism)
  unsigned schedules = 0b111;     // bit int(Schedule): the pipeline schedules
  bool has_zero(int z) const { return z >= 0 && z < 4 && (zero_stages >> z & 1u) != 0; }
  bool has_schedule(Schedule s) const { return (schedules >> int(s) & 1u) != 0; }
  // Mixture of experts: the experts' activation-function output discarded after the forward and
  // recomputed from its kept inputs in the backward (Megatron-Core --recompute-modules moe_act;
  // DeepSeek-V3 report Sec 3.3.3, "we cache the inputs of the SwiGLU operator and recompute its
  // output in the backward pass").
  bool recompute_moe_act = false;
  // Multi-head latent attention: the up-projections' outputs (the heads' Q, K and V) discarded
  // after the forward and recomputed from the kept normalised latents in the backward
  // (Megatron-Core --recompute-modules mla_up_proj; DeepSeek-V3 report Sec 3.2.3, "we recompute
  // all RMSNorm operations and MLA up-projections during back-propagation"). No effect without
  // latent attention.
  bool recompute_mla_up_proj = false;
  // Mixture of experts under fp8 training, as DeepSeek-V3 (report Sec 3.3.2-3.3.3): the experts'
  // cached linear inputs (the dispatched tokens, the SwiGLU inputs) kept in fp8 with one fp32
  // scale per 128 elements, and the dispatch all-to-all and the gradient before the
  // down-projections sent in fp8; the combines stay 16-bit. No effect without fp8 precision.
  bool fp8_moe = false;
  // Mixture of experts with expert parallelism: the dispatch and combine all-to-alls of one
  // micro-batch's forward run beside the computation of another micro-batch's backward, and the
  // backward's beside the forward's (Megatron-Core --overlap-moe-expert-parallel-comm, its
  // "combined 1F1B" schedule; DeepSeek-V3 report Sec 3.2.1 and Fig. 4, DualPipe's pairing of a
  // forward and a backward chunk). Only 1F1B pairs passes (not GPipe), and not under full
  // recompute (whose backward repeats the forward's all-to-alls before its own).
  bool ep_overlap = false;
  double allocator_margin = 0.05;  // caching-allocator fragmentation, fraction of the rest
  // Relative spread (one standard deviation) of the model's step time for this implementation:
  // the root mean square of its calibration runs' step-time errors, as `capplan validate` prints
  // it per framework (a prior where it has none). The defaults here are the megatron-lm preset's
  // (configs/frameworks/megatron-lm.yaml), field for field: a plan that names no framework is
  // costed as one that names it.
  double residual_spread = 0.04;
  double reserved_gib = 1.0;       // CUDA context, cuBLAS workspace, NCCL channels
  std::string source;
  bool operator==(const FrameworkSpec&) const = default;
};

struct TrainingSpec {
  int64_t gbs = 0;      // global batch, sequences per optimizer step
  int seq_len = 0;      // 0 = the model's seq_len
  double tokens = 0;    // tokens to train; 0 = 20 per parameter (Hoffmann et al. 2022)
  Precision precision = Precision::Bf16;  // mixed precision with fp32 master weights and Adam
  FrameworkSpec framework;                // the implementation (default megatron-lm)
  std::optional<Attention> attention;     // unset = the framework's default
  Optimizer optimizer = Optimizer::Adam;
  bool offload_params = false;     // 16-bit weights kept in host memory, streamed per layer (ZeRO-Infinity, FSDP cpu_offload)
  bool offload_optimizer = false;  // optimizer state and master weights in host memory, step on the CPU (ZeRO-Offload)

  Attention attention_or_default() const { return attention.value_or(framework.attention); }
};

// How one training step is laid out over dp * tp * pp * cp GPUs.
struct Layout {
  int dp = 1;
  int tp = 1;
  int pp = 1;
  // Context parallelism: the sequence split over cp ranks in 2*cp chunks (rank i holds chunks i
  // and 2*cp-1-i, Megatron-Core's causal load balance), attention computed as a ring.
  int cp = 1;
  // Expert parallelism: the experts of an MoE layer spread over ep ranks of the dp*cp group
  // (Megatron-Core), tokens exchanged by all-to-all; experts' gradients reduced over dp*cp/ep.
  int ep = 1;
  int vp = 1;   // virtual stages (model chunks) per pipeline stage; > 1 only with Interleaved
  int mbs = 1;  // micro-batch size, sequences
  int zero = 0; // 0..3: 1 shards optimizer state, 2 also gradients, 3 also weights (over dp)
  Recompute recompute = Recompute::None;
  bool offload = false;  // activation offload to host memory
  bool sp = false;       // sequence parallelism (needs tp > 1 to matter)
  // Permutation of D, P, T, optionally with C (context) and E (expert); right-most varies fastest
  // over ranks. A missing E goes right of D, a missing C left of T (full_order in rank_mapping.h).
  std::string order = "DPT";
  Schedule schedule = Schedule::OneFOneB;

  int gpus() const { return dp * tp * pp * cp; }
  // The rank grid as messages state it: "dp 2 x tp 4 x pp 8", with " x cp C" where cp > 1 and
  // " (ep E)" where the experts are spread (ep lives inside dp x cp).
  std::string grid() const;
  // gbs / (dp * mbs); 0 when it does not divide.
  int64_t num_microbatches(int64_t gbs) const {
    const int64_t per = int64_t(dp) * mbs;
    return (per > 0 && gbs % per == 0) ? gbs / per : 0;
  }
};

// A layout in one short line, the knobs that differ from the defaults, `sep` between them:
// "dp 12 tp 4 pp 20 mbs 1 z1 sel sp" (cp, ep, vp above 1; zero above 0; sel or full recompute;
// offload; sp; gpipe, as 1F1B is the default and vp > 1 is the interleaved schedule). The CLI's
// and the GUI's tables both show it.
std::string layout_summary(const Layout& l, const std::string& sep = " ");

// Names used on the command line, in YAML and in JSON ("bf16", "selective", "1f1b", ...).
const char* to_string(Ffn v);
const char* to_string(Norm v);
const char* to_string(PositionEmbedding v);
const char* to_string(Precision v);
const char* to_string(Recompute v);
const char* to_string(Schedule v);
const char* to_string(Attention v);
const char* to_string(FlashKernel v);
const char* to_string(Optimizer v);
const char* to_string(Zero3Comm v);
const char* to_string(Zero3BackwardPrefetch v);
const char* to_string(Zero3Unit v);
const char* to_string(Zero3Collectives v);
std::optional<Ffn> parse_ffn(const std::string& s);
std::optional<Norm> parse_norm(const std::string& s);
std::optional<PositionEmbedding> parse_position(const std::string& s);
std::optional<Precision> parse_precision(const std::string& s);
std::optional<Recompute> parse_recompute(const std::string& s);
std::optional<Schedule> parse_schedule(const std::string& s);
std::optional<Attention> parse_attention(const std::string& s);
std::optional<FlashKernel> parse_flash_kernel(const std::string& s);
std::optional<Optimizer> parse_optimizer(const std::string& s);
std::optional<Zero3Comm> parse_zero3_comm(const std::string& s);
std::optional<Zero3Unit> parse_zero3_unit(const std::string& s);
std::optional<Zero3Collectives> parse_zero3_collectives(const std::string& s);
std::optional<Zero3BackwardPrefetch> parse_zero3_backward_prefetch(const std::string& s);
// "DPT", "TPD", "DPCT", "PDECT", ... (D, P, T once each, C and E at most once each) or SageMaker's
// names "cluster" (= DPT) and "spread" (= TPD); nullopt otherwise.
std::optional<std::string> parse_order(const std::string& s);

// What an implementation can run, in one line (`capplan frameworks`, the GUI's framework list):
// "tp no  pp no  zero 0,2,3  cp no  ep no  sp no  selective no  offload yes  attention eager".
std::string framework_layouts(const FrameworkSpec& framework);

}  // namespace capplan
