// GPT forward and backward by hand over the Backend interface, with Megatron-style tensor
// parallelism (Shoeybi et al. 2019, Sec 3): the "f" operator is the identity in forward and a TP
// all-reduce of the input gradient in backward (before column-parallel layers); the "g" operator
// is a TP all-reduce in forward (after row-parallel layers) and the identity in backward.
#include "train/gpt.h"

#include "io/data.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <stdexcept>
#include <vector>

namespace capplan::rt {

struct Gpt::LayerParams {
  int64_t ln1_w = -1, ln1_b = -1, wqkv = -1, wo = -1, ln2_w = -1, ln2_b = -1, wfc = -1, wproj = -1;
  // MoE layers: router and shared MLP in the flat buffer, local experts in the expert buffer.
  int64_t router = -1, shared_fc = -1, shared_proj = -1, experts = -1;
};

struct Gpt::LayerActs {
  float *ln1_mean = nullptr, *ln1_rstd = nullptr, *h1 = nullptr, *qkv = nullptr, *probs = nullptr,
        *attn = nullptr, *x2 = nullptr, *ln2_mean = nullptr, *ln2_rstd = nullptr, *h2 = nullptr,
        *fc = nullptr, *act = nullptr;  // fc: SwiGLU's [gate | up], or GELU'(h2 Wfc^T) for GELU
};

struct Gpt::Slot {
  std::vector<float*> resid;     // nl + 1 buffers [R, C]: input of layer i, resid[nl] = output
                                 // (with offload: the shared device set, see host_resid)
  std::vector<float> host_resid; // offload: this micro-batch's resid, (nl + 1) * R * C, host
  std::vector<LayerActs> acts;   // per layer (empty with full recompute)
  std::vector<int32_t> tokens;   // first stage: the micro-batch's tokens (embedding backward)
  float* dfinal = nullptr;       // last stage: gradient w.r.t. resid[nl], from the loss
};

namespace {

// One splitmix64 output for state `z` (planner/random.h): a hash of z.
uint64_t mix64(uint64_t z) { return splitmix64(&z); }

// Standard normal for element `index` of tensor `id`: Box-Muller on two hashed uniforms.
float hash_normal(uint64_t seed, uint64_t id, uint64_t index) {
  const uint64_t base = mix64(seed ^ mix64(id * 0xD1B54A32D192ED03ull));
  const uint64_t a = mix64(base ^ (2 * index)), b = mix64(base ^ (2 * index + 1));
  const double u1 = (double(a >> 11) + 1.0) * 0x1.0p-53;  // (0, 1]
  const double u2 = double(b >> 11) * 0x1.0p-53;
  return float(std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2));
}

enum TensorKind : uint64_t {
  kWte = 1, kWpe, kWq, kWk, kWv, kWo, kWgate, kWup, kWdown, kRouter, kSharedGate, kSharedUp,
  kSharedDown
};
uint64_t tensor_id(int layer, TensorKind kind) { return uint64_t(layer + 1) * 64 + kind; }
// Expert e's tensors of a layer: the same kinds as the dense MLP's, apart for each expert.
uint64_t expert_tensor_id(int layer, int expert, TensorKind kind) {
  return tensor_id(layer, kind) + (uint64_t(expert + 1) << 32);
}

}  // namespace

float init_normal(uint64_t seed, uint64_t id, uint64_t index) { return hash_normal(seed, id, index); }

std::string gpt_check_config(const GptConfig& c) {
  const ModelSpec& m = c.model;
  const int kv = m.kv_heads_or_default();
  if (m.layers <= 0 || m.hidden <= 0 || m.heads <= 0 || m.vocab <= 0)
    return "layers, hidden, heads and vocab must be > 0";
  if (m.head_dim <= 0 && m.hidden % m.heads != 0) return "heads must divide hidden (or head_dim be set)";
  if (kv <= 0 || m.heads % kv != 0) return "kv_heads must divide heads";
  if (c.seq_len <= 0) return "seq_len must be > 0";
  if (m.local_span() > 0 && m.local_span() < c.seq_len) {
    const bool window = m.sliding_window > 0;
    return std::string(window ? "the model's sliding window of " : "the model's attention chunks of ") +
           std::to_string(m.local_span()) + (window ? " tokens is" : " tokens are") + " shorter than the sequence of " +
           std::to_string(c.seq_len) + ": capplan-train's attention has " + (window ? "no window" : "no chunks") +
           " (train at a sequence of at most " + std::to_string(m.local_span()) + ")";
  }
  if (m.mla.enabled())
    return "the model has multi-head latent attention (mla.kv_lora_rank " + std::to_string(m.mla.kv_lora_rank) +
           "): capplan-train's attention projects queries, keys and values from the hidden state";
  if (m.mtp_layers > 0)
    return "the model has multi-token prediction (mtp_layers " + std::to_string(m.mtp_layers) +
           "): capplan-train trains the next-token loss only";
  if (c.mbs <= 0) return "mbs must be > 0";
  if (c.tp_size <= 0 || m.heads % c.tp_size != 0)
    return "tp " + std::to_string(c.tp_size) + " does not divide heads " + std::to_string(m.heads);
  if (kv % c.tp_size != 0)
    return "tp " + std::to_string(c.tp_size) + " does not divide kv_heads " + std::to_string(kv);
  if (m.ffn_hidden_or_default() % c.tp_size != 0)
    return "tp " + std::to_string(c.tp_size) + " does not divide ffn_hidden " +
           std::to_string(m.ffn_hidden_or_default());
  if (m.position == PositionEmbedding::Rope && m.head_dim_or_default() % 2 != 0)
    return "RoPE needs an even head dimension";
  if (c.layer_begin < 0 || c.layer_end > m.layers || c.layer_begin >= c.layer_end)
    return "empty or out-of-range layer range for this pipeline stage";
  if (c.slots <= 0) return "slots must be > 0";
  if (c.shared_params && c.zero >= 2) return "a replica's shared weights need ZeRO 0 or 1";
  if (c.defer_weight_grads && (c.zero >= 2 || (c.sp && c.tp_size > 1) || c.slots > 1 ||
                               c.layer_begin != 0 || c.layer_end != m.layers))
    return "deferred weight gradients need one stage, one micro-batch in flight, ZeRO 0 or 1 "
           "and no sequence parallelism";
  if (c.cp_size < 1) return "cp must be >= 1";
  if (c.cp_size > 1) {
    if (c.seq_len % (2 * c.cp_size) != 0)
      return "cp " + std::to_string(c.cp_size) + ": the sequence of " + std::to_string(c.seq_len) +
             " tokens does not split into 2 * cp = " + std::to_string(2 * c.cp_size) +
             " equal chunks (the load-balanced causal split)";
    if (c.sp) return "cp > 1 with sequence parallelism (--sp) is not supported";
    if (!c.cp || c.cp->size() != c.cp_size) return "cp > 1 needs the cp group";
  }
  if (std::string why = moe_check_config(c.moe, m.hidden, c.tp_size, c.ep ? c.ep->size() : 1);
      !why.empty())
    return why;
  if (c.moe.experts > 0 && c.sp) return "mixture-of-experts layers with --sp are not supported";
  if (c.moe.experts > 0 && c.zero >= 2) return "mixture-of-experts layers need ZeRO 0 or 1";
  if (c.sp && (int64_t(c.mbs) * c.seq_len) % c.tp_size != 0)
    return "sequence parallelism needs mbs * seq_len divisible by tp";
  if (m.vocab > 65536 * 1024) return "vocab too large";
  return {};
}

float* Gpt::alloc(int64_t n, bool activation) {
  float* p = be_.allocate(n);
  if (!p) throw std::bad_alloc();
  owned_.push_back(p);
  owned_bytes_ += n * int64_t(sizeof(float));
  if (activation) activation_bytes_ += n * int64_t(sizeof(float));
  return p;
}

Gpt::Gpt(const GptConfig& config, Backend& backend, Communicator& tp)
    : cfg_(config), be_(backend), tp_(tp) {
  if (std::string err = gpt_check_config(cfg_); !err.empty()) throw std::invalid_argument(err);
  set_dimensions();
  if (cfg_.cp_size > 1) ring_ = std::make_unique<RingAttention>(be_, *cfg_.cp, cp_positions(Tfull_, cfg_.cp_size, cfg_.cp_rank));
  lay_out_params();
  allocate_params_and_grads();
  allocate_activations();
  const int64_t before_scratch = owned_bytes_;
  allocate_scratch();
  working_bytes_ = owned_bytes_ - before_scratch;
}

void Gpt::set_dimensions() {
  const ModelSpec& m = cfg_.model;
  C_ = m.hidden;
  H_ = m.heads;
  KV_ = m.kv_heads_or_default();
  D_ = m.head_dim_or_default();
  F_ = m.ffn_hidden_or_default();
  V_ = m.vocab;
  Tfull_ = cfg_.seq_len;
  T_ = cfg_.seq_len / std::max(1, cfg_.cp_size);
  {
    const std::vector<int32_t> pos = cp_positions(Tfull_, std::max(1, cfg_.cp_size), cfg_.cp_rank);
    for (int t = 0; t < T_; ++t)
      if (t == 0 || pos[size_t(t)] != pos[size_t(t) - 1] + 1)
        position_runs_.push_back({t, pos[size_t(t)], 1});
      else
        position_runs_.back().length += 1;
  }
  B_ = cfg_.mbs;
  R_ = B_ * T_;
  sp_ = cfg_.sp && cfg_.tp_size > 1;
  Rl_ = sp_ ? R_ / cfg_.tp_size : R_;
  row0_ = sp_ ? cfg_.tp_rank * Rl_ : 0;
  const int tps = cfg_.tp_size, tpr = cfg_.tp_rank;
  Hl_ = H_ / tps;
  KVl_ = KV_ / tps;
  Fl_ = F_ / tps;
  swiglu_ = m.ffn == Ffn::Swiglu;
  Fc_ = swiglu_ ? 2 * Fl_ : Fl_;
  Vl_ = (V_ + tps - 1) / tps;  // the last TP rank's tail past vocab is padding
  vocab_begin_ = tpr * Vl_;
  S_ = (Hl_ + 2 * KVl_) * D_;
  nl_ = cfg_.layer_end - cfg_.layer_begin;
  norm_ = m.norm == Norm::RmsNorm ? NormKind::RmsNorm : NormKind::LayerNorm;
  rope_ = m.position == PositionEmbedding::Rope;
}

// Every tensor's place in the flat parameter buffer, unit by unit (ZeRO-2/3 gather and reduce
// per unit), padded to a multiple of dp.
void Gpt::lay_out_params() {
  const int tpr = cfg_.tp_rank;
  const bool ln = norm_ == NormKind::LayerNorm;

  auto add = [&](const std::string& name, int64_t n, bool decay, bool replicated,
                 bool counted = true) {
    ParamInfo p;
    p.name = name;
    p.offset = num_params_;
    p.numel = n;
    p.decay = decay;
    p.tp_replicated = replicated;
    p.norm_counted = counted && (!replicated || tpr == 0);
    infos_.push_back(p);
    num_params_ += n;
    return p.offset;
  };
  unit_begin_.push_back(0);
  if (first_stage()) {
    off_wte_ = add("wte", int64_t(Vl_) * C_, true, false);
    if (!rope_) off_wpe_ = add("wpe", int64_t(Tfull_) * C_, true, true);
  }
  layers_.resize(size_t(nl_));
  for (int i = 0; i < nl_; ++i) {
    const std::string p = "layers." + std::to_string(cfg_.layer_begin + i) + ".";
    LayerParams& L = layers_[size_t(i)];
    unit_begin_.push_back(num_params_);
    L.ln1_w = add(p + "ln1.w", C_, false, true);
    if (ln) L.ln1_b = add(p + "ln1.b", C_, false, true);
    L.wqkv = add(p + "wqkv", int64_t(S_) * C_, true, false);
    L.wo = add(p + "wo", int64_t(C_) * Hl_ * D_, true, false);
    L.ln2_w = add(p + "ln2.w", C_, false, true);
    if (ln) L.ln2_b = add(p + "ln2.b", C_, false, true);
    const int l = cfg_.layer_begin + i;
    moe_.emplace_back();
    if (!cfg_.moe.is_moe_layer(l)) {
      L.wfc = add(p + "wfc", int64_t(Fc_) * C_, true, false);
      L.wproj = add(p + "wproj", int64_t(C_) * Fl_, true, false);
      continue;
    }
    moe_.back() = std::make_unique<MoeBlock>(cfg_.moe, be_, tp_, cfg_.ep, cfg_.cp, C_, tpr,
                                             cfg_.tp_size, swiglu_, R_, cfg_.slots);
    const MoeBlock& mb = *moe_.back();
    // The router is the same on every TP rank (its input is), so are its gradients.
    L.router = add(p + "router", int64_t(cfg_.moe.experts) * C_, true, true);
    if (mb.shared_local() > 0) {
      L.shared_fc = add(p + "shared.wfc", int64_t(mb.shared_fc_rows()) * C_, true, false);
      L.shared_proj = add(p + "shared.wproj", int64_t(C_) * mb.shared_local(), true, false);
    }
    L.experts = enum_;
    for (int le = 0; le < cfg_.moe.local_experts(); ++le) {
      const int e = cfg_.moe.ep_rank * cfg_.moe.local_experts() + le;
      const std::string q = p + "experts." + std::to_string(e) + ".";
      ParamInfo fc{q + "wfc", enum_, int64_t(mb.fc_rows()) * C_, true, false, true};
      ParamInfo proj{q + "wproj", enum_ + fc.numel, int64_t(C_) * mb.ffn_local(), true, false,
                     true};
      einfos_.push_back(fc);
      einfos_.push_back(proj);
      enum_ += fc.numel + proj.numel;
    }
  }
  const int64_t epad = std::max(1, cfg_.expert_pad_multiple);
  epadded_ = enum_ > 0 ? (enum_ + epad - 1) / epad * epad : 0;
  unit_begin_.push_back(num_params_);
  if (last_stage()) {
    off_lnf_w_ = add("lnf.w", C_, false, true);
    if (ln) off_lnf_b_ = add("lnf.b", C_, false, true);
    // Tied LM head: the same tensor as the first stage's embedding. With pp > 1 the last stage
    // holds a copy whose gradient is summed with the first stage's; it is counted there only.
    if (!first_stage()) off_wte_ = add("wte.tied", int64_t(Vl_) * C_, true, false, false);
  }
  const int64_t pad = std::max(1, cfg_.param_pad_multiple);
  padded_params_ = (num_params_ + pad - 1) / pad * pad;
  unit_begin_.push_back(num_params_);
}

void Gpt::allocate_params_and_grads() {
  const int dps = cfg_.dp ? cfg_.dp->size() : 1;
  if (cfg_.zero >= 2 && !cfg_.dp) throw std::invalid_argument("ZeRO-2/3 need the DP group");
  if (padded_params_ % dps != 0)
    throw std::invalid_argument("parameter buffer not padded to a multiple of dp");
  shard_ = padded_params_ / dps;
  shard_begin_ = cfg_.zero >= 1 && cfg_.dp ? shard_ * cfg_.dp->rank() : 0;
  int64_t max_layer = 1;
  for (int u = 1; u <= nl_; ++u)
    max_layer = std::max(max_layer, unit_begin_[size_t(u) + 1] - unit_begin_[size_t(u)]);
  const int64_t edge[2] = {unit_begin_[1] - unit_begin_[0],
                           unit_begin_[size_t(nl_) + 2] - unit_begin_[size_t(nl_) + 1]};
  const int64_t fb = int64_t(sizeof(float));
  if (cfg_.zero >= 3) {
    pshard_ = alloc(shard_, false);
    wbuf_ = alloc(max_layer, false);
    param_buffer_bytes_ = max_layer * fb;
    for (int e = 0; e < 2; ++e)
      if (edge[e] > 0) {
        wedge_[e] = alloc(edge[e], false);
        param_buffer_bytes_ += edge[e] * fb;
      }
    param_bytes_ = shard_ * fb;
  } else if (cfg_.shared_params) {
    params_ = cfg_.shared_params;
  } else {
    params_ = alloc(padded_params_, false);
    param_bytes_ = padded_params_ * fb;
  }
  if (cfg_.zero >= 2) {
    gshard_ = alloc(shard_, false);
    gbuf_ = alloc(max_layer, false);
    grad_buffer_bytes_ = max_layer * fb;
    for (int e = 0; e < 2; ++e)
      if (edge[e] > 0) {
        gedge_[e] = alloc(edge[e], false);
        grad_buffer_bytes_ += edge[e] * fb;
      }
    grad_bytes_ = shard_ * fb;
  } else {
    grads_ = alloc(padded_params_, false);
    grad_bytes_ = padded_params_ * fb;
  }
  if (epadded_ > 0) {
    eparams_ = alloc(epadded_, false);
    egrads_ = alloc(epadded_, false);
    param_bytes_ += epadded_ * fb;
    grad_bytes_ += epadded_ * fb;
  }

}

void Gpt::make_acts(LayerActs& a) {
  a.ln1_mean = alloc(Rl_, true);
  a.ln1_rstd = alloc(Rl_, true);
  a.h1 = alloc(int64_t(R_) * C_, true);
  a.qkv = alloc(int64_t(R_) * S_, true);
  // Selective recompute (Korthikanti et al. 2022): the [B, Hl, T, T] softmax is not kept per
  // micro-batch but recomputed from qkv in backward; every layer shares one buffer.
  // Ring attention (cp > 1) keeps no softmax, only its log-sum-exp [B, Hl, T] in `probs`; the
  // backend says what its own attention keeps.
  const int64_t probs_numel = be_.attention_state_numel(AttentionShape{B_, T_, Hl_, KVl_, D_});
  if (ring_) {
    a.probs = alloc(int64_t(B_) * Hl_ * T_, true);
  } else if (cfg_.recompute == Recompute::Selective) {
    if (!shared_probs_) shared_probs_ = alloc(probs_numel, true);
    a.probs = shared_probs_;
  } else {
    a.probs = alloc(probs_numel, true);
  }
  a.attn = alloc(int64_t(R_) * Hl_ * D_, true);
  a.x2 = alloc(int64_t(Rl_) * C_, true);
  a.ln2_mean = alloc(Rl_, true);
  a.ln2_rstd = alloc(Rl_, true);
  a.h2 = alloc(int64_t(R_) * C_, true);
  a.fc = alloc(int64_t(R_) * Fc_, true);
  a.act = alloc(int64_t(R_) * Fl_, true);
}

void Gpt::allocate_activations() {
  const bool full_recompute = cfg_.recompute == Recompute::Full;
  slots_.resize(size_t(cfg_.slots));
  std::vector<float*> shared_resid;  // offload: one device set used by every slot in turn
  if (cfg_.offload)
    for (int i = 0; i <= nl_; ++i) shared_resid.push_back(alloc(int64_t(Rl_) * C_, true));
  for (Slot& s : slots_) {
    if (cfg_.offload) {
      s.resid = shared_resid;
      s.host_resid.assign(size_t(nl_ + 1) * Rl_ * C_, 0.0f);
      host_activation_bytes_ += int64_t(s.host_resid.size() * sizeof(float));
    } else {
      for (int i = 0; i <= nl_; ++i) s.resid.push_back(alloc(int64_t(Rl_) * C_, true));
    }
    if (!full_recompute) {
      s.acts.resize(size_t(nl_));
      for (LayerActs& a : s.acts) make_acts(a);
    }
    if (last_stage()) s.dfinal = alloc(int64_t(Rl_) * C_, true);
    s.tokens.assign(size_t(R_), 0);
  }
  if (full_recompute) {
    shared_acts_.resize(1);
    make_acts(shared_acts_[0]);
  }
}

void Gpt::allocate_scratch() {
  dres_ = alloc(int64_t(Rl_) * C_, false);
  if (cfg_.defer_weight_grads) {
    dy_mlp_ = alloc(int64_t(R_) * C_, false);
    dy_attn_ = alloc(int64_t(R_) * C_, false);
  }
  if (sp_) {
    yfull_ = alloc(int64_t(R_) * C_, false);
    dfull_ = alloc(int64_t(R_) * C_, false);
    dhl_ = alloc(int64_t(Rl_) * C_, false);
  }
  dh_ = alloc(int64_t(R_) * C_, false);
  dqkv_ = alloc(int64_t(R_) * S_, false);
  dattn_ = alloc(int64_t(R_) * Hl_ * D_, false);
  dfc_ = alloc(int64_t(R_) * Fc_, false);
  dact_ = alloc(int64_t(R_) * Fl_, false);
  if (last_stage()) {
    head_rows_ = lm_head_chunk_rows(R_, Vl_, cfg_.head_chunk_rows);
    logits_ = alloc(int64_t(head_rows_) * Vl_, false);
    hf_ = alloc(int64_t(R_) * C_, false);
    lnf_mean_ = alloc(Rl_, false);
    lnf_rstd_ = alloc(Rl_, false);
    stats_ = alloc(3 * int64_t(R_), false);
  }
}

Gpt::~Gpt() {
  for (float* p : owned_) be_.release(p);
}

// Activation offload: after the forward, the micro-batch's checkpointed activations (each
// layer's input) leave the device pool for the host pool, freeing the shared device set.
void Gpt::offload(Slot& s) {
  if (!cfg_.offload) return;
  const auto t0 = std::chrono::steady_clock::now();
  const int64_t n = int64_t(Rl_) * C_;
  for (int i = 0; i <= nl_; ++i)
    be_.to_host(s.host_resid.data() + size_t(i) * n, s.resid[size_t(i)], n);
  offload_s_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

const ParamInfo* Gpt::find_param(const std::string& name) const {
  for (const ParamInfo& p : infos_)
    if (p.name == name) return &p;
  return nullptr;
}

int64_t Gpt::boundary_numel() const { return int64_t(Rl_) * C_; }

// Sequence parallelism (Korthikanti et al. 2022): the residual stream and the norms hold this TP
// rank's block of rows; "g" becomes an all-gather of rows before the column-parallel GEMMs and
// "g-bar" a reduce-scatter of rows after the row-parallel ones (and the reverse in backward).
// Without it these are the plain identity / all-reduce of Megatron's f and g.

// full [R, C] whose rows [row0, row0 + Rl) were written by this rank -> every rank's rows.
void Gpt::gather_rows_in_place(float* full) {
  if (sp_) tp_.all_gather(full + int64_t(row0_) * C_, full, int64_t(Rl_) * C_);
}
// Gradient of this rank's rows [Rl, C] -> the full [R, C] (dfull_), or itself without SP.
const float* Gpt::gather_rows(const float* local) {
  if (!sp_) return local;
  tp_.all_gather(local, dfull_, int64_t(Rl_) * C_);
  return dfull_;
}
// Partial sums over TP of a full [R, C] -> this rank's rows of the sum, in `local` (which is
// `partial` itself without SP).
void Gpt::reduce_rows(float* partial, float* local) {
  if (sp_)
    tp_.reduce_scatter_sum(partial, local, int64_t(Rl_) * C_);
  else
    tp_.all_reduce_sum(partial, int64_t(R_) * C_);
}

void Gpt::finish_backward() {
  if (!sp_) return;
  // Norm weights saw only this rank's rows: sum their gradients over TP (positions are computed
  // from the gathered gradient on every rank already). With ZeRO-2/3 the layers' norms were
  // summed in their bucket (reduce_unit).
  for (const ParamInfo& p : infos_) {
    const int u = unit_of(p.offset);
    if (cfg_.zero >= 2 && u >= 1 && u <= nl_) continue;
    if (p.tp_replicated && p.name != "wpe") tp_.all_reduce_sum(gd(p.offset), p.numel);
  }
}

ParamBuffer Gpt::dense_buffer() {
  return {params_, grads_, padded_params_, &infos_, cfg_.zero, shard_, gshard_, pshard_};
}

ParamBuffer Gpt::expert_buffer() {
  return {eparams_, egrads_, epadded_, &einfos_, cfg_.zero, 0, nullptr, nullptr};
}


std::vector<int> Gpt::routing() const {
  std::vector<int> r;
  for (const auto& m : moe_)
    if (m) {
      const std::vector<int> layer = m->routing(cur_slot_);
      r.insert(r.end(), layer.begin(), layer.end());
    }
  return r;
}

MoeWeights Gpt::moe_weights(int i) {
  const LayerParams& L = layers_[size_t(i)];
  MoeWeights w;
  w.router = wt(L.router);
  w.d_router = gd(L.router);
  if (L.shared_fc >= 0) {
    w.shared_fc = wt(L.shared_fc);
    w.shared_proj = wt(L.shared_proj);
    w.d_shared_fc = gd(L.shared_fc);
    w.d_shared_proj = gd(L.shared_proj);
  }
  w.experts = eparams_ + L.experts;
  w.d_experts = egrads_ + L.experts;
  return w;
}

void Gpt::zero_grads() {
  aux_loss_ = 0;
  dropped_ = 0;
  if (egrads_) be_.fill(egrads_, 0.0f, epadded_);
  if (grads_) be_.fill(grads_, 0.0f, padded_params_);
  for (int e = 0; e < 2; ++e) {
    const int u = e == 0 ? 0 : nl_ + 1;
    const int64_t n = unit_begin_[size_t(u) + 1] - unit_begin_[size_t(u)];
    if (gedge_[e]) be_.fill(gedge_[e], 0.0f, n);
    // ZeRO-3: the embedding and final norm are gathered once per step (weights change only in
    // the optimizer step between two calls).
    if (wedge_[e]) {
      const std::vector<int64_t> counts = unit_counts(u);
      const int64_t b = std::max(unit_begin_[size_t(u)], shard_begin_);
      cfg_.dp->all_gather_v(counts[size_t(cfg_.dp->rank())] > 0 ? pshard_ + (b - shard_begin_)
                                                                 : pshard_,
                            wedge_[e], counts);
    }
  }
  if (gshard_) {
    be_.fill(gshard_, 0.0f, shard_);
    int64_t max_layer = 1;
    for (int u = 1; u <= nl_; ++u)
      max_layer = std::max(max_layer, unit_begin_[size_t(u) + 1] - unit_begin_[size_t(u)]);
    be_.fill(gbuf_, 0.0f, max_layer);
  }
  w_layer_ = -1;
  g_layer_ = -1;
}

int Gpt::unit_of(int64_t offset) const {
  for (int u = 0; u <= nl_ + 1; ++u)
    if (offset < unit_begin_[size_t(u) + 1]) return u;
  throw std::out_of_range("parameter offset past the buffer");
}

std::vector<int64_t> Gpt::unit_counts(int u) const {
  const int64_t a = unit_begin_[size_t(u)], b = unit_begin_[size_t(u) + 1];
  std::vector<int64_t> counts(size_t(cfg_.dp->size()));
  for (size_t r = 0; r < counts.size(); ++r) {
    const int64_t lo = std::max(a, int64_t(r) * shard_),
                  hi = std::min(b, int64_t(r + 1) * shard_);
    counts[r] = std::max<int64_t>(0, hi - lo);
  }
  return counts;
}

const float* Gpt::wt(int64_t offset) const {
  if (cfg_.zero < 3) return params_ + offset;
  const int u = unit_of(offset);
  const int64_t rel = offset - unit_begin_[size_t(u)];
  if (u == 0) return wedge_[0] + rel;
  if (u == nl_ + 1) return wedge_[1] + rel;
  if (w_layer_ != u - 1) throw std::logic_error("layer weights used before they were gathered");
  return wbuf_ + rel;
}

float* Gpt::gd(int64_t offset) {
  if (cfg_.zero < 2) return grads_ + offset;
  const int u = unit_of(offset);
  const int64_t rel = offset - unit_begin_[size_t(u)];
  if (u == 0) return gedge_[0] + rel;
  if (u == nl_ + 1) return gedge_[1] + rel;
  if (g_layer_ != u - 1) throw std::logic_error("layer gradients outside that layer's backward");
  return gbuf_ + rel;
}

// ZeRO-3: all-gather layer i's weights (each rank holds the part of the layer inside its shard)
// into the layer buffer, unless it holds them already (a backward right after the forward of
// the same layer, or the recompute before a backward).
void Gpt::acquire_layer(int i) {
  if (cfg_.zero < 3 || w_layer_ == i) return;
  const int u = i + 1;
  const std::vector<int64_t> counts = unit_counts(u);
  const int64_t b = std::max(unit_begin_[size_t(u)], shard_begin_);
  cfg_.dp->all_gather_v(
      counts[size_t(cfg_.dp->rank())] > 0 ? pshard_ + (b - shard_begin_) : pshard_, wbuf_, counts);
  w_layer_ = i;
}

// ZeRO-2/3: the bucket of unit u (this micro-batch's gradients of those elements) is summed over
// DP into the owning ranks' shards (Rajbhandari et al. 2020, Sec 5.2) and zeroed for reuse.
void Gpt::reduce_unit(int u, float* buf) {
  const std::vector<int64_t> counts = unit_counts(u);
  const int64_t a = unit_begin_[size_t(u)], n = unit_begin_[size_t(u) + 1] - a;
  const int64_t mine = counts[size_t(cfg_.dp->rank())];
  cfg_.dp->reduce_scatter_sum_v(buf, buf, counts);  // in place: this rank's sum at buf[0, mine)
  if (mine > 0) be_.add(gshard_ + (std::max(a, shard_begin_) - shard_begin_), buf, mine);
  be_.fill(buf, 0.0f, n);
}

void Gpt::flush_gradients() {
  if (cfg_.zero < 2) return;
  if (gedge_[0]) reduce_unit(0, gedge_[0]);
  if (gedge_[1]) reduce_unit(nl_ + 1, gedge_[1]);
}

void Gpt::init_params() {
  const uint64_t seed = cfg_.seed;
  const int tpr = cfg_.tp_rank;
  const float std_w = 0.02f;
  const float std_out = 0.02f / std::sqrt(2.0f * cfg_.model.layers);
  std::vector<float> host(size_t(padded_params_), 0.0f), expert_host(size_t(epadded_), 0.0f);
  auto ptr = [&](int64_t off) { return host.data() + off; };
  // Rows `row0 + i` (i < rows) of a global [*, cols] tensor into dst.
  auto rows_of = [&](float* dst, uint64_t id, int64_t row0, int64_t rows, int64_t cols, float sd) {
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t c = 0; c < cols; ++c)
        dst[i * cols + c] = sd * hash_normal(seed, id, uint64_t((row0 + i) * cols + c));
  };
  // Columns [col0, col0 + cols) of a global [rows, full_cols] tensor into dst [rows, cols].
  auto cols_of = [&](float* dst, uint64_t id, int64_t rows, int64_t full_cols, int64_t col0,
                     int64_t cols, float sd) {
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c)
        dst[r * cols + c] = sd * hash_normal(seed, id, uint64_t(r * full_cols + col0 + c));
  };
  if (off_wte_ >= 0) {
    const int64_t valid = std::max<int64_t>(0, std::min<int64_t>(Vl_, V_ - vocab_begin_));
    rows_of(ptr(off_wte_), tensor_id(-1, kWte), vocab_begin_, valid, C_, std_w);
  }
  if (off_wpe_ >= 0) rows_of(ptr(off_wpe_), tensor_id(-1, kWpe), 0, Tfull_, C_, std_w);
  auto ones = [&](int64_t off) {
    if (off >= 0) std::fill(ptr(off), ptr(off) + C_, 1.0f);
  };
  for (int i = 0; i < nl_; ++i) {
    const int l = cfg_.layer_begin + i;
    const LayerParams& L = layers_[size_t(i)];
    ones(L.ln1_w);
    ones(L.ln2_w);
    float* qkv = ptr(L.wqkv);
    rows_of(qkv, tensor_id(l, kWq), int64_t(tpr) * Hl_ * D_, int64_t(Hl_) * D_, C_, std_w);
    qkv += int64_t(Hl_) * D_ * C_;
    rows_of(qkv, tensor_id(l, kWk), int64_t(tpr) * KVl_ * D_, int64_t(KVl_) * D_, C_, std_w);
    qkv += int64_t(KVl_) * D_ * C_;
    rows_of(qkv, tensor_id(l, kWv), int64_t(tpr) * KVl_ * D_, int64_t(KVl_) * D_, C_, std_w);
    cols_of(ptr(L.wo), tensor_id(l, kWo), C_, int64_t(H_) * D_, int64_t(tpr) * Hl_ * D_,
            int64_t(Hl_) * D_, std_out);
    if (moe_[size_t(i)]) {
      const MoeBlock& mb = *moe_[size_t(i)];
      rows_of(ptr(L.router), tensor_id(l, kRouter), 0, cfg_.moe.experts, C_, std_w);
      // An MLP of width `local` on this TP rank (of `full`): [gate |] up rows, down columns.
      auto mlp = [&](float* fc, float* proj, uint64_t gate, uint64_t up, uint64_t down,
                     int local, int full) {
        if (swiglu_) {
          rows_of(fc, gate, int64_t(tpr) * local, local, C_, std_w);
          fc += int64_t(local) * C_;
        }
        rows_of(fc, up, int64_t(tpr) * local, local, C_, std_w);
        cols_of(proj, down, C_, full, int64_t(tpr) * local, local, std_out);
      };
      if (L.shared_fc >= 0)
        mlp(ptr(L.shared_fc), ptr(L.shared_proj), tensor_id(l, kSharedGate),
            tensor_id(l, kSharedUp), tensor_id(l, kSharedDown), mb.shared_local(),
            cfg_.moe.shared_experts * cfg_.moe.ffn_hidden);
      for (int le = 0; le < cfg_.moe.local_experts(); ++le) {
        const int e = cfg_.moe.ep_rank * cfg_.moe.local_experts() + le;
        float* fc = expert_host.data() + L.experts + le * mb.per_expert_numel();
        mlp(fc, fc + int64_t(mb.fc_rows()) * C_, expert_tensor_id(l, e, kWgate),
            expert_tensor_id(l, e, kWup), expert_tensor_id(l, e, kWdown), mb.ffn_local(),
            cfg_.moe.ffn_hidden);
      }
      continue;
    }
    float* fc = ptr(L.wfc);
    if (swiglu_) {
      rows_of(fc, tensor_id(l, kWgate), int64_t(tpr) * Fl_, Fl_, C_, std_w);
      fc += int64_t(Fl_) * C_;
    }
    rows_of(fc, tensor_id(l, kWup), int64_t(tpr) * Fl_, Fl_, C_, std_w);
    cols_of(ptr(L.wproj), tensor_id(l, kWdown), C_, F_, int64_t(tpr) * Fl_, Fl_, std_out);
  }
  if (eparams_) be_.from_host(eparams_, expert_host.data(), epadded_);
  ones(off_lnf_w_);
  if (params_)
    be_.from_host(params_, host.data(), num_params_);
  else
    be_.from_host(pshard_, host.data() + shard_begin_, shard_);
}

void Gpt::layer_forward(int i, LayerActs& a, const float* x, float* out) {
  const LayerParams& L = layers_[size_t(i)];
  acquire_layer(i);
  const float* nob = nullptr;
  const AttentionShape sh{B_, T_, Hl_, KVl_, D_};
  const int64_t nl = int64_t(Rl_) * C_;
  be_.norm_forward(norm_, a.h1 + int64_t(row0_) * C_, a.ln1_mean, a.ln1_rstd, x, wt(L.ln1_w),
                   L.ln1_b >= 0 ? wt(L.ln1_b) : nob, Rl_, C_);
  gather_rows_in_place(a.h1);
  LinearGemms{&be_, R_, C_, S_}.forward(a.qkv, a.h1, wt(L.wqkv));
  if (ring_) {
    if (rope_) be_.rope_at(a.qkv, sh, ring_->positions().data(), false);
    ring_->forward(a.attn, a.probs, a.qkv, sh);
  } else {
    if (rope_) be_.rope(a.qkv, sh, false);
    be_.attention_forward(a.attn, a.probs, a.qkv, sh);
  }
  float* y = sp_ ? yfull_ : a.x2;
  LinearGemms{&be_, R_, Hl_ * D_, C_}.forward(y, a.attn, wt(L.wo));
  reduce_rows(y, a.x2);  // g
  be_.add(a.x2, x, nl);
  be_.norm_forward(norm_, a.h2 + int64_t(row0_) * C_, a.ln2_mean, a.ln2_rstd, a.x2, wt(L.ln2_w),
                   L.ln2_b >= 0 ? wt(L.ln2_b) : nob, Rl_, C_);
  gather_rows_in_place(a.h2);
  if (moe_[size_t(i)]) {
    // The load-balancing loss of a micro-batch weighs mbs / gbs = loss scale * tokens (the LM
    // loss's per-token scale is 1 / (gbs * seq_len)).
    const float aux_scale = slot_scale_[size_t(cur_slot_)] * float(B_) * float(Tfull_);
    float* y = sp_ ? yfull_ : out;
    const double aux = moe_[size_t(i)]->forward(cur_slot_, a.h2, y, moe_weights(i), aux_scale);
    if (counting_aux_) {
      aux_loss_ += aux * aux_scale;
      dropped_ += moe_[size_t(i)]->dropped(cur_slot_);
    }
    reduce_rows(y, out);  // g
    be_.add(out, a.x2, nl);
    return;
  }
  LinearGemms{&be_, R_, C_, Fc_}.forward(a.fc, a.h2, wt(L.wfc));
  if (swiglu_)
    be_.swiglu_forward(a.act, a.fc, R_, Fl_);
  else
    be_.gelu_forward(a.act, a.fc, int64_t(R_) * Fl_);
  y = sp_ ? yfull_ : out;
  LinearGemms{&be_, R_, Fl_, C_}.forward(y, a.act, wt(L.wproj));
  reduce_rows(y, out);  // g
  be_.add(out, a.x2, nl);
}

// dres holds the gradient of the layer's output on entry and of its input `x` on return (this
// rank's rows with SP).
void Gpt::layer_backward(int i, LayerActs& a, const float* x, float* dres) {
  const LayerParams& L = layers_[size_t(i)];
  acquire_layer(i);
  g_layer_ = i;
  const AttentionShape sh{B_, T_, Hl_, KVl_, D_};
  float* dhl = sp_ ? dhl_ : dh_;
  // Weight gradient c += dy^T act. Deferred for the first layer: dfc_ and dqkv_ are not written
  // again in this backward, and the output gradients, which are, are copied.
  const bool defer = cfg_.defer_weight_grads && i == 0;
  auto wgrad = [&](float* c, const float* dy, const float* act, int M, int N, float* keep) {
    if (!defer) return LinearGemms{&be_, R_, N, M}.weight_gradient(c, dy, act);
    if (keep) {
      be_.copy(keep, dy, int64_t(R_) * M);
      dy = keep;
    }
    deferred_.push_back({c, dy, act, M, N, R_});
  };
  // MLP: out = x2 + act(h2 Wfc^T) Wproj^T
  const float* dy = gather_rows(dres);
  if (moe_[size_t(i)]) {
    moe_[size_t(i)]->backward(cur_slot_, dy, dh_, moe_weights(i));
  } else {
    LinearGemms{&be_, R_, Fl_, C_}.input_gradient(dact_, dy, wt(L.wproj));
    wgrad(gd(L.wproj), dy, a.act, C_, Fl_, dy_mlp_);
    if (swiglu_)
      be_.swiglu_backward(dfc_, a.fc, dact_, R_, Fl_);
    else
      be_.gelu_backward(dfc_, a.fc, dact_, int64_t(R_) * Fl_);
    wgrad(gd(L.wfc), dfc_, a.h2, Fc_, C_, nullptr);
    LinearGemms{&be_, R_, C_, Fc_}.input_gradient(dh_, dfc_, wt(L.wfc));
  }
  reduce_rows(dh_, dhl);  // f
  be_.norm_backward(norm_, dres, gd(L.ln2_w), L.ln2_b >= 0 ? gd(L.ln2_b) : nullptr, dhl, a.x2,
                    wt(L.ln2_w), a.ln2_mean, a.ln2_rstd, Rl_, C_);
  // Attention: x2 = x + attn(h1 Wqkv^T) Wo^T
  if (cfg_.recompute == Recompute::Selective && !ring_) {
    const auto t0 = std::chrono::steady_clock::now();
    be_.attention_forward(dattn_, a.probs, a.qkv, sh);
    recompute_s_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  dy = gather_rows(dres);
  LinearGemms{&be_, R_, Hl_ * D_, C_}.input_gradient(dattn_, dy, wt(L.wo));
  wgrad(gd(L.wo), dy, a.attn, C_, Hl_ * D_, dy_attn_);
  if (ring_) {
    ring_->backward(dqkv_, dattn_, a.attn, a.probs, a.qkv, sh);
    if (rope_) be_.rope_at(dqkv_, sh, ring_->positions().data(), true);
  } else {
    be_.attention_backward(dqkv_, dattn_, a.qkv, a.probs, sh);
    if (rope_) be_.rope(dqkv_, sh, true);
  }
  wgrad(gd(L.wqkv), dqkv_, a.h1, S_, C_, nullptr);
  LinearGemms{&be_, R_, C_, S_}.input_gradient(dh_, dqkv_, wt(L.wqkv));
  reduce_rows(dh_, dhl);  // f
  be_.norm_backward(norm_, dres, gd(L.ln1_w), L.ln1_b >= 0 ? gd(L.ln1_b) : nullptr, dhl, x,
                    wt(L.ln1_w), a.ln1_mean, a.ln1_rstd, Rl_, C_);
  if (cfg_.zero >= 2) {
    if (sp_)  // norm weights saw this rank's rows only (see finish_backward)
      for (int64_t off : {L.ln1_w, L.ln1_b, L.ln2_w, L.ln2_b})
        if (off >= 0) tp_.all_reduce_sum(gd(off), C_);
    reduce_unit(i + 1, gbuf_);
  }
}

double Gpt::forward(int slot, const int32_t* tokens, const float* input, float* output,
                    const int32_t* targets, float loss_scale) {
  Slot& s = slots_.at(size_t(slot));
  deferred_.clear();
  cur_slot_ = slot;
  slot_scale_.resize(slots_.size(), 0.0f);
  slot_scale_[size_t(slot)] = loss_scale;
  counting_aux_ = true;
  const int64_t n = int64_t(Rl_) * C_;
  if (first_stage() && sp_) {
    std::copy(tokens, tokens + R_, s.tokens.begin());
    be_.embedding_forward(yfull_, s.tokens.data(), wt(off_wte_), nullptr, R_, T_, C_,
                          vocab_begin_, Vl_);
    reduce_rows(yfull_, s.resid[0]);
    if (off_wpe_ >= 0)  // positions of this rank's rows, in runs of consecutive positions
      for (int r = row0_; r < row0_ + Rl_;) {
        const int len = std::min(row0_ + Rl_ - r, T_ - r % T_);
        be_.add(s.resid[0] + int64_t(r - row0_) * C_, wt(off_wpe_) + int64_t(r % T_) * C_,
                int64_t(len) * C_);
        r += len;
      }
  } else if (first_stage()) {
    std::copy(tokens, tokens + R_, s.tokens.begin());
    // Positions are added on TP rank 0 only, so the all-reduce adds them once.
    const float* wpe = (off_wpe_ >= 0 && cfg_.tp_rank == 0) ? wt(off_wpe_) : nullptr;
    be_.embedding_forward(s.resid[0], s.tokens.data(), wt(off_wte_), ring_ ? nullptr : wpe, R_,
                          T_, C_, vocab_begin_, Vl_);
    if (ring_ && wpe)  // this rank's chunks are not positions 0 .. T - 1
      for (int b = 0; b < B_; ++b)
        for (const PositionRun& run : position_runs_)
          be_.add(s.resid[0] + (int64_t(b) * T_ + run.row) * C_, wpe + int64_t(run.position) * C_,
                  int64_t(run.length) * C_);
    tp_.all_reduce_sum(s.resid[0], n);
  } else {
    be_.copy(s.resid[0], input, n);
  }
  for (int i = 0; i < nl_; ++i) {
    LayerActs& a = s.acts.empty() ? shared_acts_[0] : s.acts[size_t(i)];
    layer_forward(i, a, s.resid[size_t(i)], s.resid[size_t(i) + 1]);
  }
  if (!last_stage()) {
    be_.copy(output, s.resid[size_t(nl_)], n);
    offload(s);
    return 0.0;
  }
  // Final norm, tied head, vocab-parallel cross-entropy and its gradient.
  const float* x = s.resid[size_t(nl_)];
  be_.norm_forward(norm_, hf_ + int64_t(row0_) * C_, lnf_mean_, lnf_rstd_, x, wt(off_lnf_w_),
                   off_lnf_b_ >= 0 ? wt(off_lnf_b_) : nullptr, Rl_, C_);
  gather_rows_in_place(hf_);
  // The head runs over chunks of rows: a chunk's logits stay in cache from the head GEMM through
  // the loss to the two gradient GEMMs (and the logits buffer holds one chunk, not R_ rows).
  // stats_ = [row max (R_) | per chunk: sum of exp (rc), target logit (rc)].
  float* row_max = stats_;
  for (int r0 = 0; r0 < R_; r0 += head_rows_) {
    const int rc = std::min(head_rows_, R_ - r0);
    const float* h = hf_ + int64_t(r0) * C_;
    const LinearGemms head{&be_, rc, C_, Vl_};  // the tied embedding as the LM head
    float* sums = stats_ + R_ + 2 * int64_t(r0);
    head.forward(logits_, h, wt(off_wte_));
    be_.xent_row_max(row_max + r0, logits_, rc, Vl_, vocab_begin_, V_);
    tp_.all_reduce_max(row_max + r0, rc);
    be_.xent_sum_exp(sums, sums + rc, logits_, row_max + r0, targets + r0, rc, Vl_, vocab_begin_,
                     V_);
    tp_.all_reduce_sum(sums, 2 * int64_t(rc));
    be_.xent_backward(logits_, sums, targets + r0, loss_scale, rc, Vl_, vocab_begin_, V_);
    if (cfg_.defer_weight_grads && r0 + rc == R_)  // the logits of the last chunk stay put
      deferred_.push_back({gd(off_wte_), logits_, h, Vl_, C_, rc});
    else
      head.weight_gradient(gd(off_wte_), logits_, h);
    head.input_gradient(dh_ + int64_t(r0) * C_, logits_, wt(off_wte_));
  }
  std::vector<float> host(3 * size_t(R_));
  be_.to_host(host.data(), stats_, 3 * int64_t(R_));
  double loss_sum = 0;
  for (int r0 = 0; r0 < R_; r0 += head_rows_) {
    const int rc = std::min(head_rows_, R_ - r0);
    const float* sums = host.data() + R_ + 2 * size_t(r0);
    for (int i = 0; i < rc; ++i)  // loss = log(sum exp(l - max)) + max - l[target]
      loss_sum += std::log(double(sums[i])) + double(host[size_t(r0 + i)]) - double(sums[rc + i]);
  }
  float* dhl = sp_ ? dhl_ : dh_;
  reduce_rows(dh_, dhl);  // f
  be_.fill(s.dfinal, 0.0f, n);
  be_.norm_backward(norm_, s.dfinal, gd(off_lnf_w_), off_lnf_b_ >= 0 ? gd(off_lnf_b_) : nullptr,
                    dhl, x, wt(off_lnf_w_), lnf_mean_, lnf_rstd_, Rl_, C_);
  offload(s);
  return loss_sum;
}

void Gpt::backward(int slot, const float* dout, float* dinput) {
  Slot& s = slots_.at(size_t(slot));
  const int64_t n = int64_t(Rl_) * C_;
  cur_slot_ = slot;
  counting_aux_ = false;  // a full recompute's forwards are not counted again
  if (cfg_.offload) {  // bring this micro-batch's checkpointed activations back
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i <= nl_; ++i)
      be_.from_host(s.resid[size_t(i)], s.host_resid.data() + size_t(i) * n, n);
    offload_s_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  be_.copy(dres_, last_stage() ? s.dfinal : dout, n);
  for (int i = nl_ - 1; i >= 0; --i) {
    LayerActs* a;
    if (s.acts.empty()) {  // full recompute: rebuild this layer's activations from its input
      a = &shared_acts_[0];
      const auto t0 = std::chrono::steady_clock::now();
      const double comm0 = tp_.comm_seconds() + (cfg_.dp ? cfg_.dp->comm_seconds() : 0.0);
      layer_forward(i, *a, s.resid[size_t(i)], dh_);
      const double comm = tp_.comm_seconds() + (cfg_.dp ? cfg_.dp->comm_seconds() : 0.0) - comm0;
      recompute_s_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() - comm;
    } else {
      a = &s.acts[size_t(i)];
    }
    layer_backward(i, *a, s.resid[size_t(i)], dres_);
  }
  if (first_stage()) {
    const float* dy = gather_rows(dres_);
    be_.embedding_backward(gd(off_wte_), off_wpe_ >= 0 && !ring_ ? gd(off_wpe_) : nullptr, dy,
                           s.tokens.data(), R_, T_, C_, vocab_begin_, Vl_);
    if (ring_ && off_wpe_ >= 0)
      for (int b = 0; b < B_; ++b)
        for (const PositionRun& run : position_runs_)
          be_.add(gd(off_wpe_) + int64_t(run.position) * C_, dy + (int64_t(b) * T_ + run.row) * C_,
                  int64_t(run.length) * C_);
  } else {
    be_.copy(dinput, dres_, n);
  }
  auto larger = [](const DeferredGemm& x, const DeferredGemm& y) { return x.flops() > y.flops(); };
  std::stable_sort(deferred_.begin(), deferred_.end(), larger);
}

}  // namespace capplan::rt
