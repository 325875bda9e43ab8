// Per-layer analytical profile of a decoder-only transformer: parameters, forward FLOPs and
// activation bytes per layer, per TP rank, as Megatron-LM splits the model (column-parallel QKV and
// FFN-in, row-parallel attention-out and FFN-out, vocab-parallel embedding and LM head).
// It counts what a user needs to plan; the cost model (cost_model.cpp) turns it into time and memory.
#include "planner/profile.h"

#include <algorithm>

namespace capplan {

namespace {

double element_bytes(Precision p) { return p == Precision::Fp32 ? 4.0 : 2.0; }

}  // namespace

double AttentionShape::column_out_split() const {
  double sum = 0;
  for (const LinearShape& l : linears)
    if (l.split == TpSplit::Column) sum += l.out;
  return sum;
}

double attention_kv_width(const ModelSpec& model) {
  if (model.mla.enabled()) return double(model.heads) * (model.qk_head_dim() + model.v_head_dim());
  return 2.0 * model.kv_heads_or_default() * model.head_dim_or_default();
}

AttentionShape attention_shape(const ModelSpec& model) {
  AttentionShape a;
  const double h = model.hidden, heads = model.heads;
  a.q = heads * model.qk_head_dim();
  a.out = heads * model.v_head_dim();
  if (!model.mla.enabled()) {
    // Q is heads x head_dim, K and V kv_heads x head_dim (grouped-query attention: Ainslie et al.
    // 2023), one column-parallel GEMM over the layer's input; the output projection row-parallel.
    a.k = a.v = double(model.kv_heads_or_default()) * model.head_dim_or_default();
    a.linears = {{h, a.q + a.k + a.v, TpSplit::Column}, {a.out, h, TpSplit::Row}};
    a.column_in = h;
    return a;
  }
  // Latent attention (DeepSeek-V2 Sec 2.1.2-2.1.3, Eq. 9-19): c_Q = W_DQ h (q_lora_rank), Q =
  // W_UQ norm(c_Q) over the heads' qk features; [c_KV, k_R] = W_DKV h (kv_lora_rank + the shared
  // rotary key part), [K_C, V] = W_UKV norm(c_KV) per head; every head's key is its K_C with the
  // shared k_R, so the core reads heads x qk keys and heads x v values.
  const MlaSpec& m = model.mla;
  const double ql = m.q_lora_rank, kvl = m.kv_lora_rank, rope = m.qk_rope_head_dim;
  a.k = a.q;
  a.v = a.out;
  if (ql > 0) {
    a.linears.push_back({h, ql, TpSplit::Duplicated});
    a.linears.push_back({ql, a.q, TpSplit::Column});
  } else {
    a.linears.push_back({h, a.q, TpSplit::Column});
  }
  a.linears.push_back({h, kvl + rope, TpSplit::Duplicated});
  a.linears.push_back({kvl, heads * (m.qk_nope_head_dim + m.v_head_dim), TpSplit::Column});
  a.linears.push_back({a.out, h, TpSplit::Row});
  a.latent = ql + kvl + rope;
  a.latent_normed = ql + kvl;
  a.latent_norm_params = ql + kvl;
  a.column_in = (ql > 0 ? ql : h) + kvl;
  return a;
}

namespace {

// One block's figures: parameters per tp rank and whole, those a token goes through, forward FLOPs
// and kept activation bytes per micro-batch (per rank).
struct BlockFigures {
  double params_rank = 0, params_total = 0, active_total = 0, flops = 0, act = 0;
};
struct Blocks {
  BlockFigures dense, moe;  // a block with the dense MLP and one with the experts
  double norm_params = 0, dropout = 0;
};

Blocks block_figures(const ModelSpec& model, double t, double s, double b, double e) {
  const double h = model.hidden;
  const double f = model.ffn_hidden_or_default();
  const double a = model.heads;
  const AttentionShape attn = attention_shape(model);
  const bool gated = model.ffn == Ffn::Swiglu;
  // GPT-2/3 style models (GeLU, LayerNorm) carry biases and dropout; Llama style (SwiGLU, RMSNorm)
  // carry neither (Touvron et al. 2023).
  const bool biases = model.norm == Norm::LayerNorm;
  const double norm_params = biases ? 2 * h : h;  // LayerNorm has gain and bias, RMSNorm gain only
  Blocks out;
  out.norm_params = norm_params;

  // Matrix parameters of one block: the attention's linear layers (attention_shape: Q and O are
  // h x q, q = heads x head_dim, h unless head_dim is set apart; K and V h x kv; latent attention's
  // down- and up-projections), the FFN two (GeLU) or three (SwiGLU) h x f matrices (Vaswani et al.
  // 2017; Shazeer 2020 for SwiGLU). Latent attention's down-projections and latent norms are whole
  // on every tp rank.
  double attn_matrix = 0, attn_matrix_rank = 0;
  for (const LinearShape& l : attn.linears) attn_matrix += l.params(), attn_matrix_rank += l.params_per_rank(t);
  const double ffn_matrix = (gated ? 3 : 2) * h * f;
  const double attn_bias_split = biases ? attn.column_out_split() : 0;  // column-parallel
  const double bias_split = attn_bias_split + (biases ? (gated ? 2 : 1) * f : 0);
  const double bias_repl = biases ? 2 * h : 0;  // row-parallel output biases, replicated
  BlockFigures& dense = out.dense;
  dense.params_rank = attn_matrix_rank + (ffn_matrix + bias_split) / t + bias_repl +
                                   2 * norm_params + attn.latent_norm_params;
  dense.params_total = dense.active_total =
      attn_matrix + ffn_matrix + bias_split + bias_repl + 2 * norm_params + attn.latent_norm_params;

  // Forward FLOPs of one block (multiply-add = 2): GEMMs 2*b*s*(matrix params) plus the attention
  // core, Q K^T and softmax(.) V, 2 * 2*b*s*s*q (Narayanan et al. 2021, Sec 5.1: 24bsh^2 + 4bs^2h
  // for f = 4h and q = h; causal masking is not subtracted, as in their Eq. 3); with latent
  // attention Q K^T over heads x qk and P V over heads x v, 4 b s^2 x attention_core_width().
  const double cw = model.attention_core_width();
  dense.flops = 2 * b * s * (attn_matrix + ffn_matrix) + 4 * b * s * s * cw;

  // Activations kept for backward, no recompute, no sequence parallelism (Korthikanti et al. 2022,
  // Sec 4.1, Eq. 1-2: sbh(10 + 24/t + 5as/(ht)) bytes in 16-bit). Generalised: the attention part
  // stores Q, K, V and the out-projection input (2q + 2kv per token); the FFN stores its GEMM
  // inputs (2f for GeLU: GeLU input and FFN-out input; 3f for SwiGLU: gate, up, product);
  // dropout masks are one byte per element. Latent attention keeps its latents (the norms'
  // inputs) and the normalised latents (the up-projections' inputs), whole on every tp rank.
  const double dropout = out.dropout = biases ? 1.0 : 0.0;
  const double repl_per_token = e * h /*QKV input*/ + e * h /*FFN input*/ + 2 * e * h /*norms*/ +
                                2 * dropout * h /*2 residual dropout masks*/ +
                                e * (attn.latent + attn.latent_normed);
  const double split_per_token =
      (attn.q + attn.k) * e /*Q,K*/ + attn.v * e /*V*/ + attn.out * e /*out-proj input*/ +
      (gated ? 3 : 2) * f * e;
  const double scores_per_token = (e + dropout * (1 + e)) * a * s;  // softmax out, mask, dropout out
  dense.act = b * s * (repl_per_token + (split_per_token + scores_per_token) / t);

  // Mixture of experts: the MLP of an MoE block is `experts` MLPs of width f_e (no biases, as in
  // Mixtral and DeepSeek-V3) plus `shared` ones, and a router h x experts (Fedus et al. 2022
  // Sec 2.1). A token runs the router, top_k routed and the shared experts (Jiang et al. 2024
  // Sec 2.1: 12.9B of Mixtral 8x7B's 46.7B are active). Activations: the FFN inputs of the
  // (top_k + shared) expert copies of each token, their permuted input (h per copy) and the
  // router's fp32 logits.
  const MoeSpec& moe = model.moe;
  const double fe = model.expert_ffn_hidden_or_default();
  const double n_exp = moe.experts, k_active = moe.top_k_or_default() + moe.shared_experts;
  const double expert_matrix = (gated ? 3 : 2) * h * fe;
  const double router = h * n_exp;
  const double attn_rest_rank =
      attn_matrix_rank + attn_bias_split / t + bias_repl + 2 * norm_params + attn.latent_norm_params;
  BlockFigures& mb = out.moe;
  mb.params_rank =
      attn_rest_rank + router + (n_exp + moe.shared_experts) * expert_matrix / t;
  mb.params_total = attn_matrix + attn_bias_split + bias_repl + 2 * norm_params +
                                        attn.latent_norm_params + router +
                                        (n_exp + moe.shared_experts) * expert_matrix;
  mb.active_total = mb.params_total - (n_exp - moe.top_k_or_default()) * expert_matrix;
  mb.flops = 2 * b * s * (attn_matrix + router + k_active * expert_matrix) + 4 * b * s * s * cw;
  mb.act =
      dense.act - b * s * (gated ? 3 : 2) * f * e / t +
      b * s * k_active * ((gated ? 3 : 2) * fe * e / t + h * e) + b * s * n_exp * 4;
  return out;
}

}  // namespace

ModelProfile profile_model(const ModelSpec& model, int tp, int seq_len, int mbs,
                           Precision precision) {
  ModelProfile out;
  tp = std::max(tp, 1);
  const double h = model.hidden;
  const double v = model.vocab;
  const double s = seq_len > 0 ? seq_len : model.seq_len;
  const double b = std::max(mbs, 1);
  const double t = tp;
  const double e = element_bytes(precision);
  const Blocks blocks = block_figures(model, t, s, b, e);
  const BlockFigures& dense = blocks.dense;
  const BlockFigures& moe_block = blocks.moe;
  const MoeSpec& moe = model.moe;
  const double norm_params = blocks.norm_params, dropout = blocks.dropout;
  const double cw = model.attention_core_width();

  const double embed_params_total = v * h + (model.position == PositionEmbedding::Learned ? s * h : 0);
  out.layers.push_back({"embedding", "embedding", v * h / t + (model.position == PositionEmbedding::Learned ? s * h : 0),
                        0.0, b * s * h * (dropout + 0.0)});
  // A layer with a sliding window scores each query against the window's w keys, not s: its core
  // is 4 b s w q (Beltagy et al. 2020, Longformer Sec 3: local attention is linear in s).
  const double w = model.local_span();  // a chunk of C tokens: each query against at most C keys
  const double local_saving = w > 0 && w < s ? 4 * b * s * (s - w) * cw : 0.0;
  double blocks_total = 0, blocks_active = 0, blocks_flops = 0;
  for (int i = 0; i < model.layers; ++i) {
    const double saved = model.is_local_layer(i, int(s)) ? local_saving : 0.0;
    if (moe.is_moe_layer(i)) {
      out.layers.push_back({"block." + std::to_string(i), "transformer", moe_block.params_rank,
                            (moe_block.flops - saved) / t, moe_block.act});
      blocks_total += moe_block.params_total;
      blocks_active += moe_block.active_total;
      blocks_flops += moe_block.flops - saved;
    } else {
      out.layers.push_back({"block." + std::to_string(i), "transformer", dense.params_rank,
                            (dense.flops - saved) / t, dense.act});
      blocks_total += dense.params_total;
      blocks_active += dense.active_total;
      blocks_flops += dense.flops - saved;
    }
  }
  if (!moe.enabled()) {  // the dense sums exactly as they have always been formed
    blocks_total = blocks_active = model.layers * dense.params_total;
    blocks_flops = model.layers * (dense.flops - model.local_layer_share(int(s)) * local_saving);
  }
  out.layers.push_back({"final_norm", "norm", norm_params, 0.0, b * s * h * e});
  const double head_params_total = model.tied_embeddings ? 0 : v * h;
  // LM head GEMM 2*b*s*h*V; the fp32 logits for the cross-entropy are kept (4 bytes per element).
  out.layers.push_back({"lm_head", "head", v * h / t,  // tied: the last stage holds a copy
                        2 * b * s * h * v / t, 4 * b * s * v / t});

  // Multi-token prediction (DeepSeek-V3 Sec 2.2, Megatron-Core MultiTokenPredictionLayer): per
  // module the layer `layers + k` would be, eh_proj [2h -> h] split by columns, enorm, hnorm and
  // the final norm; forward the layer, the projection and the shared head's GEMM.
  double mtp_flops = 0;
  for (int k = 0; k < model.mtp_layers; ++k) {
    const int i = model.layers + k;
    const double saved = model.is_local_layer(i, int(s)) ? local_saving : 0.0;
    const BlockFigures& blk = moe.is_moe_layer(i) ? moe_block : dense;
    const double proj = 2 * h * h;
    const double flops = blk.flops - saved + 2 * b * s * proj + 2 * b * s * h * v;
    out.mtp.push_back({"mtp." + std::to_string(k), "mtp", blk.params_rank + proj / t + 3 * norm_params, flops / t,
                       blk.act + b * s * 5 * h * e + 4 * b * s * v / t});
    out.mtp_params += blk.params_total + proj + 3 * norm_params;
    mtp_flops += flops;
  }

  out.total_params = embed_params_total + blocks_total + norm_params + head_params_total;
  out.active_params = embed_params_total + blocks_active + norm_params + head_params_total;
  // Model FLOPs per token: forward + backward = 3 x forward, GEMMs and attention core, LM head
  // included (Narayanan et al. 2021 Eq. 3 without the recompute pass: 72Bslh^2(1+s/6h+V/12lh)),
  // and the multi-token prediction modules' (work of the step, though not of the model it keeps).
  const double fwd_per_token = (blocks_flops + 2 * b * s * h * v + mtp_flops) / (b * s);
  out.forward_flops_per_token = fwd_per_token;
  out.flops_per_token = 3 * fwd_per_token;
  return out;
}

}  // namespace capplan
