// The GPT decoder trained by capplan-train, built from a planner ModelSpec: token embedding
// (vocab-parallel over TP) + learned positions or RoPE, pre-norm blocks (LayerNorm or RMSNorm)
// with causal attention (GQA when kv_heads < heads; heads split over TP, QKV column-parallel,
// out-projection row-parallel), GELU or SwiGLU MLP (up/gate column-parallel, down row-parallel),
// final norm, LM head tied to the embedding and a vocab-parallel cross-entropy. Linear layers have
// no bias. A Gpt holds the layers [layer_begin, layer_end) of one pipeline stage; forward and
// backward are written by hand. Data-parallel communication is the trainer's, except ZeRO-2/3's
// per-layer weight gathers and gradient reduce-scatters (GptConfig::zero).
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "planner/spec.h"
#include "train/backend.h"
#include "train/communicator.h"
#include "train/moe.h"
#include "train/ring_attention.h"

namespace capplan::rt {

struct GptConfig {
  ModelSpec model;
  int seq_len = 0;  // T, tokens per sequence
  int mbs = 1;      // B, sequences per micro-batch
  int tp_rank = 0, tp_size = 1;
  int pp_rank = 0, pp_size = 1;
  int layer_begin = 0, layer_end = 0;  // this stage's layers; [0, layers) for a single stage
  uint64_t seed = 0;                   // global initialisation seed (layout independent)
  int slots = 1;                       // micro-batches whose activations can be held at once
  Recompute recompute = Recompute::None;
  int param_pad_multiple = 1;  // flat buffers are padded with zeros to a multiple (ZeRO shards)
  bool sp = false;       // sequence parallelism over the TP group (needs tp > 1 to matter)
  bool offload = false;  // keep checkpointed activations (layer inputs) of in-flight micro-batches
                         // in host memory between their forward and backward
  // ZeRO stage (Rajbhandari et al. 2020) as far as the model's buffers go; `dp` is the DP group.
  // 0 and 1: whole parameter and gradient buffers. 2: this rank keeps only its 1/dp shard of the
  // accumulated gradients; each layer's gradients go to one reusable bucket that is
  // reduce-scattered into the shards right after that layer's backward (embedding and final-norm
  // gradients: once per step, see flush_gradients). 3: also only the parameter shard; a layer's
  // full weights are all-gathered into one reusable buffer before its forward and again before
  // its backward (the embedding and final norm once per step, in zero_grads).
  int zero = 0;
  Communicator* dp = nullptr;  // needed for zero >= 2
  // Rows per chunk of the LM head and cross-entropy (the logits buffer holds one chunk);
  // 0: about 8 MiB of logits, at least 128 rows.
  int head_chunk_rows = 0;
  // A replica (zero <= 1): reads its weights from this buffer, another Gpt's params() of the
  // same config, instead of owning them; it keeps its own gradients and activations.
  float* shared_params = nullptr;
  // forward() and backward() leave some weight-gradient GEMMs to the caller, in deferred(): the
  // LM head's for its last chunk of rows and the four of this stage's first layer (the last it
  // reaches). They only feed the optimizer, so threads that finish their part of a batch early
  // can take them over (one stage, no SP, ZeRO <= 1). The embedding's gradient then adds the
  // head's last chunk after its own rows, not before: the same terms in another order.
  bool defer_weight_grads = false;
  // Context parallelism (train/ring_attention.h): this rank holds seq_len / cp_size tokens of
  // each sequence (chunks cp_rank and 2 cp_size - 1 - cp_rank of 2 cp_size), in that order;
  // attention runs as a ring over `cp` (the cp group, needed when cp_size > 1). seq_len stays
  // the whole sequence.
  int cp_rank = 0, cp_size = 1;
  Communicator* cp = nullptr;
  // Mixture-of-experts layers (train/moe.h); experts = 0: every layer has the dense MLP.
  MoeConfig moe;
  Communicator* ep = nullptr;    // the expert-parallel group (moe.ep_size ranks)
  int expert_pad_multiple = 1;   // the expert buffer is padded to a multiple (its DP group)
};

// A Linear's three GEMMs as the model runs them, for `rows` rows: the weight W is kept [out, in]
// (as PyTorch's nn.Linear keeps it) and its gradient accumulates over the micro-batches. forward
// y = x W^T, input gradient dx = dy W, weight gradient dW += dy^T x. The device profile times
// these same calls (capplan-train measure).
struct LinearGemms {
  Backend* be;
  int rows, in, out;
  void forward(float* y, const float* x, const float* w) const {
    be->matmul(y, x, w, rows, out, in, false, true, false);
  }
  void input_gradient(float* dx, const float* dy, const float* w) const {
    be->matmul(dx, dy, w, rows, in, out, false, false, false);
  }
  void weight_gradient(float* dw, const float* dy, const float* x) const {
    be->matmul(dw, dy, x, out, in, rows, true, false, true);
  }
};

// Rows per chunk of the LM head (Gpt::forward runs the head, the loss and the head's gradients a
// chunk at a time, so that a chunk's logits stay in cache): `configured` where it is set, else
// about 8 MiB of fp32 logits (`vocab` per rank), at least 128 rows for the GEMMs' sake; at most
// `rows`.
inline int lm_head_chunk_rows(int rows, int vocab, int configured = 0) {
  if (configured > 0) return std::min(rows, configured);
  return std::min(rows, std::max(128, (2 << 20) / std::max(1, vocab) / 64 * 64));
}

// A weight-gradient GEMM put off by Gpt::backward: c[M, N] += a^T b, a [K, M], b [K, N].
struct DeferredGemm {
  float* c;
  const float* a;
  const float* b;
  int M, N, K;
  double flops() const { return 2.0 * M * N * K; }
  void run(Backend& be) const { LinearGemms{&be, K, N, M}.weight_gradient(c, a, b); }
};

// One parameter tensor of this rank inside the flat parameter buffer.
struct ParamInfo {
  std::string name;  // "wte", "wpe", "layers.3.wqkv", "lnf.w", ...
  int64_t offset = 0;
  int64_t numel = 0;
  bool decay = false;         // AdamW weight decay applies (matrices and embeddings, not norms)
  bool tp_replicated = false; // identical copy on every TP rank (norms, positions)
  bool norm_counted = true;   // counted in the global gradient norm on this rank: each distinct
                              // element exactly once over the TP and PP groups
};

// One flat buffer of parameters with its gradients, as the optimizer updates it: the model's
// dense buffer, or its expert buffer (reduced over another DP group).
struct ParamBuffer {
  float* params = nullptr;  // nullptr with zero 3 (param_shard holds this rank's part)
  float* grads = nullptr;   // nullptr with zero >= 2 (grad_shard holds the reduced shard)
  int64_t padded = 0;       // elements, a multiple of the DP group's size
  const std::vector<ParamInfo>* infos = nullptr;
  int zero = 0;
  int64_t shard_numel = 0;
  float* grad_shard = nullptr;
  float* param_shard = nullptr;
};

// The seeded normal the weights are drawn from: element `index` of tensor `id`.
float init_normal(uint64_t seed, uint64_t id, uint64_t index);

// Checks the parts of a spec the runtime needs (tp divides heads and kv_heads and ffn_hidden,
// even head_dim for RoPE, ...). Empty string when fine, else the reason.
std::string gpt_check_config(const GptConfig& config);

class Gpt {
 public:
  Gpt(const GptConfig& config, Backend& backend, Communicator& tp);
  ~Gpt();
  Gpt(const Gpt&) = delete;
  Gpt& operator=(const Gpt&) = delete;

  const GptConfig& config() const { return cfg_; }
  bool first_stage() const { return cfg_.pp_rank == 0; }
  bool last_stage() const { return cfg_.pp_rank == cfg_.pp_size - 1; }

  // Flat device buffers in the order of param_infos(), padded_params() long (zero tail).
  int64_t num_params() const { return num_params_; }
  int64_t padded_params() const { return padded_params_; }
  float* params() { return params_; }  // nullptr with zero 3
  float* grads() { return grads_; }    // nullptr with zero >= 2
  // ZeRO shards of the flat buffer: [shard_begin, shard_begin + shard_numel) on this DP rank.
  int64_t shard_begin() const { return shard_begin_; }
  int64_t shard_numel() const { return shard_; }
  float* grad_shard() { return gshard_; }   // zero >= 2: accumulated, DP-summed gradients
  float* param_shard() { return pshard_; }  // zero 3: this rank's parameters
  // Gradient of the element at flat `offset` of the embedding or final norm (tied embedding sync).
  float* grad_at(int64_t offset) { return gd(offset); }
  // zero >= 2, after the step's last backward, finish_backward and the tied-embedding sync:
  // reduce-scatters the embedding / final-norm gradients into the shards. No-op otherwise.
  void flush_gradients();
  // Bytes held for parameters and gradients across steps (whole buffers, or the ZeRO shards), and
  // the reusable gathered-weight / gradient-bucket buffers besides them (zero >= 2; one layer plus
  // the embedding and final norm).
  int64_t param_bytes() const { return param_bytes_; }  // 0 for a replica (shared_params)
  int64_t grad_bytes() const { return grad_bytes_; }
  int64_t param_buffer_bytes() const { return param_buffer_bytes_; }
  int64_t grad_buffer_bytes() const { return grad_buffer_bytes_; }
  const std::vector<ParamInfo>& param_infos() const { return infos_; }
  ParamBuffer dense_buffer();
  // The local experts of the MoE layers ("layers.3.experts.5.wfc", ...), apart from the dense
  // buffer: their gradients are reduced over the expert-data-parallel group, not over DP.
  // Padded to expert_pad_multiple; empty (0 elements) without MoE layers.
  ParamBuffer expert_buffer();
  int64_t expert_numel() const { return enum_; }
  float* expert_params() { return eparams_; }
  float* expert_grads() { return egrads_; }
  const std::vector<ParamInfo>& expert_infos() const { return einfos_; }
  // The load-balancing losses of the forwards since zero_grads(), each weighted as in the
  // objective (sum over MoE layers and micro-batches of aux * mbs / gbs).
  double aux_loss() const { return aux_loss_; }
  // Token choices the experts' capacity dropped in the forwards since zero_grads() (summed over
  // MoE layers and micro-batches; a choice is one of a token's top_k experts).
  int64_t dropped() const { return dropped_; }
  // The last forward's routing (MoeBlock::routing) of every MoE layer, layer after layer.
  std::vector<int> routing() const;
  const ParamInfo* find_param(const std::string& name) const;
  // Normal(0, 0.02) matrices (out-projections / sqrt(2 * layers), GPT-2), norms 1 and 0. Element
  // i of a global tensor is a hash of (seed, tensor, i): every layout gets the same weights.
  void init_params();
  void zero_grads();

  // Elements of the activation passed between pipeline stages: mbs * seq_len * hidden (/ tp
  // with sequence parallelism: each TP rank passes its rows).
  int64_t boundary_numel() const;
  // Forward of one micro-batch into `slot` (< slots). The first stage embeds `tokens` [B * T]
  // (host); the others read `input` [B, T, hidden]. Non-last stages write `output`. The last
  // stage computes the cross-entropy against `targets` [B * T] (host) and, at once, its gradient
  // scaled by `loss_scale`; it returns the sum of the token losses (0 on other stages).
  double forward(int slot, const int32_t* tokens, const float* input, float* output,
                 const int32_t* targets, float loss_scale);
  // Backward of the micro-batch in `slot`, accumulating into grads(). Non-last stages take the
  // gradient of their output in `dout`; non-first stages write the gradient of their input.
  void backward(int slot, const float* dout, float* dinput);
  // After the last backward of a step: with SP, sums the norm-weight gradients over TP.
  void finish_backward();
  // The GEMMs the last forward and backward deferred (defer_weight_grads), largest first; each
  // must run (on any backend) after that backward and before the next forward of this model.
  const std::vector<DeferredGemm>& deferred() const { return deferred_; }

  // Seconds since construction spent recomputing activations in backward (recompute, the
  // communication inside it excluded) and moving activations to and from the host (offload).
  double recompute_seconds() const { return recompute_s_; }
  double offload_seconds() const { return offload_s_; }

  // Bytes of activations held in the device pool (all slots) and, with offload, in host memory.
  int64_t activation_bytes() const { return activation_bytes_; }
  int64_t host_activation_bytes() const { return host_activation_bytes_; }
  // Bytes of the working buffers every micro-batch shares (a layer's backward gradients, the LM
  // head's logits chunk and the final norm's output): the rest of the activation memory.
  int64_t working_bytes() const { return working_bytes_; }

 private:
  struct LayerParams;
  struct LayerActs;
  struct Slot;
  // The constructor's steps: the dimensions on this rank, the flat parameter layout, the
  // parameter and gradient buffers (whole, or ZeRO shards and buckets), the activations of each
  // in-flight slot, and the backward and LM-head scratch.
  void set_dimensions();
  void lay_out_params();
  void allocate_params_and_grads();
  void make_acts(LayerActs& a);
  void allocate_activations();
  void allocate_scratch();
  void layer_forward(int l, LayerActs& a, const float* x, float* out);
  void layer_backward(int l, LayerActs& a, const float* x, float* dres);
  void offload(Slot& s);
  void gather_rows_in_place(float* full);
  const float* gather_rows(const float* local);
  void reduce_rows(float* partial, float* local);
  // ZeRO-2/3 units: 0 = embedding (first stage), 1 + i = layer i, nl + 1 = final norm and tied
  // head; unit u is the flat range [unit_begin_[u], unit_begin_[u + 1]).
  int unit_of(int64_t offset) const;
  std::vector<int64_t> unit_counts(int u) const;  // its intersection with each rank's shard
  const float* wt(int64_t offset) const;  // parameter element at a flat offset
  float* gd(int64_t offset);              // its gradient
  void acquire_layer(int i);              // zero 3: gather layer i's weights
  void reduce_unit(int u, float* buf);    // zero >= 2: bucket -> shards, bucket zeroed

  GptConfig cfg_;
  Backend& be_;
  Communicator& tp_;
  int C_, H_, KV_, D_, F_, V_, T_, B_, R_, Hl_, KVl_, Fl_, Fc_, Vl_, S_, vocab_begin_, nl_;
  bool sp_ = false;
  int Rl_ = 0, row0_ = 0;  // rows of the residual stream on this rank (all R_ without SP)
  int Tfull_ = 0;          // seq_len; T_ = the tokens of a sequence on this rank (cp)
  std::unique_ptr<RingAttention> ring_;  // cp > 1
  // The runs of consecutive positions on this rank: (first row in a sequence, position, length).
  struct PositionRun {
    int row, position, length;
  };
  std::vector<PositionRun> position_runs_;
  int head_rows_ = 0;      // rows per chunk of the LM head and loss
  float *yfull_ = nullptr, *dfull_ = nullptr, *dhl_ = nullptr;  // SP scratch
  NormKind norm_;
  bool rope_, swiglu_;
  std::vector<ParamInfo> infos_;
  int64_t num_params_ = 0;
  int64_t padded_params_ = 0;
  float* params_ = nullptr;
  float* grads_ = nullptr;
  std::vector<LayerParams> layers_;  // offsets into the flat buffers
  std::vector<int64_t> unit_begin_;
  int64_t shard_ = 0, shard_begin_ = 0;
  float *gshard_ = nullptr, *pshard_ = nullptr;
  float *wbuf_ = nullptr, *gbuf_ = nullptr;  // one layer's gathered weights / gradient bucket
  float *wedge_[2] = {nullptr, nullptr}, *gedge_[2] = {nullptr, nullptr};  // units 0, nl + 1
  int w_layer_ = -1, g_layer_ = -1;  // layer whose weights / gradients the buffers hold
  int64_t param_bytes_ = 0, grad_bytes_ = 0, param_buffer_bytes_ = 0, grad_buffer_bytes_ = 0;
  int64_t off_wte_ = -1, off_wpe_ = -1, off_lnf_w_ = -1, off_lnf_b_ = -1;
  std::vector<Slot> slots_;
  std::vector<LayerActs> shared_acts_;  // recompute: one set reused by every layer
  std::vector<float*> owned_;           // every activation / scratch allocation
  float* shared_probs_ = nullptr;       // selective recompute: one softmax buffer for all
  std::vector<DeferredGemm> deferred_;
  double recompute_s_ = 0, offload_s_ = 0;
  float *dy_mlp_ = nullptr, *dy_attn_ = nullptr;  // deferral: the first layer's output gradients
  float *dres_ = nullptr, *dh_ = nullptr, *dqkv_ = nullptr, *dattn_ = nullptr, *dfc_ = nullptr,
        *dact_ = nullptr, *logits_ = nullptr, *hf_ = nullptr, *lnf_mean_ = nullptr,
        *lnf_rstd_ = nullptr, *stats_ = nullptr;
  int64_t activation_bytes_ = 0;
  int64_t host_activation_bytes_ = 0;
  int64_t owned_bytes_ = 0;  // everything alloc() handed out
  int64_t working_bytes_ = 0;
  float* alloc(int64_t n, bool activation);
  // Mixture of experts: one block per MoE layer (null for dense layers), the expert buffer.
  std::vector<std::unique_ptr<MoeBlock>> moe_;
  std::vector<ParamInfo> einfos_;
  int64_t enum_ = 0, epadded_ = 0;
  float *eparams_ = nullptr, *egrads_ = nullptr;
  int cur_slot_ = 0;
  std::vector<float> slot_scale_;  // per slot: the loss scale of its forward
  double aux_loss_ = 0;
  int64_t dropped_ = 0;
  bool counting_aux_ = true;
  MoeWeights moe_weights(int i);
};

}  // namespace capplan::rt
