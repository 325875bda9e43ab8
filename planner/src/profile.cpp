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

ModelProfile profile_model(const ModelSpec& model, int tp, int seq_len, int mbs,
                           Precision precision) {
  ModelProfile out;
  tp = std::max(tp, 1);
  const double h = model.hidden;
  const double f = model.ffn_hidden_or_default();
  const double a = model.heads;
  const double kv = double(model.kv_heads_or_default()) * model.head_dim_or_default();  // K (or V) width
  const double q = model.attention_width();  // Q width and the output projection's input: heads x head_dim
  const double v = model.vocab;
  const double s = seq_len > 0 ? seq_len : model.seq_len;
  const double b = std::max(mbs, 1);
  const double t = tp;
  const double e = element_bytes(precision);
  const bool gated = model.ffn == Ffn::Swiglu;
  // GPT-2/3 style models (GeLU, LayerNorm) carry biases and dropout; Llama style (SwiGLU, RMSNorm)
  // carry neither (Touvron et al. 2023).
  const bool biases = model.norm == Norm::LayerNorm;
  const double norm_params = biases ? 2 * h : h;  // LayerNorm has gain and bias, RMSNorm gain only

  // Matrix parameters of one block: Q and O are h x q (q = heads x head_dim, h unless head_dim is
  // set apart), K and V are h x kv, the FFN is two (GeLU) or three (SwiGLU) h x f matrices
  // (Vaswani et al. 2017; Shazeer 2020 for SwiGLU).
  const double attn_matrix = 2 * h * q + 2 * h * kv;
  const double ffn_matrix = (gated ? 3 : 2) * h * f;
  const double bias_split = biases ? (q + 2 * kv) + (gated ? 2 : 1) * f : 0;  // column-parallel
  const double bias_repl = biases ? 2 * h : 0;  // row-parallel output biases, replicated
  const double block_params_rank =
      (attn_matrix + ffn_matrix + bias_split) / t + bias_repl + 2 * norm_params;
  const double block_params_total = attn_matrix + ffn_matrix + bias_split + bias_repl + 2 * norm_params;

  // Forward FLOPs of one block (multiply-add = 2): GEMMs 2*b*s*(matrix params) plus the attention
  // core, Q K^T and softmax(.) V, 2 * 2*b*s*s*q (Narayanan et al. 2021, Sec 5.1: 24bsh^2 + 4bs^2h
  // for f = 4h and q = h; causal masking is not subtracted, as in their Eq. 3).
  const double block_flops = 2 * b * s * (attn_matrix + ffn_matrix) + 4 * b * s * s * q;

  // Activations kept for backward, no recompute, no sequence parallelism (Korthikanti et al. 2022,
  // Sec 4.1, Eq. 1-2: sbh(10 + 24/t + 5as/(ht)) bytes in 16-bit). Generalised: the attention part
  // stores Q, K, V and the out-projection input (2q + 2kv per token); the FFN stores its GEMM
  // inputs (2f for GeLU: GeLU input and FFN-out input; 3f for SwiGLU: gate, up, product);
  // dropout masks are one byte per element.
  const double dropout = biases ? 1.0 : 0.0;
  const double repl_per_token = e * h /*QKV input*/ + e * h /*FFN input*/ + 2 * e * h /*norms*/ +
                                2 * dropout * h /*2 residual dropout masks*/;
  const double split_per_token =
      (q + kv) * e /*Q,K*/ + kv * e /*V*/ + q * e /*out-proj input*/ +
      (gated ? 3 : 2) * f * e;
  const double scores_per_token = (e + dropout * (1 + e)) * a * s;  // softmax out, mask, dropout out
  const double block_act = b * s * (repl_per_token + (split_per_token + scores_per_token) / t);

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
  const double attn_rest_rank = (attn_matrix + (biases ? q + 2 * kv : 0)) / t + bias_repl + 2 * norm_params;
  const double moe_block_params_rank =
      attn_rest_rank + router + (n_exp + moe.shared_experts) * expert_matrix / t;
  const double moe_block_params_total = attn_matrix + (biases ? q + 2 * kv : 0) + bias_repl +
                                        2 * norm_params + router + (n_exp + moe.shared_experts) * expert_matrix;
  const double moe_block_active_total = moe_block_params_total - (n_exp - moe.top_k_or_default()) * expert_matrix;
  const double moe_block_flops = 2 * b * s * (attn_matrix + router + k_active * expert_matrix) + 4 * b * s * s * q;
  const double moe_block_act =
      block_act - b * s * (gated ? 3 : 2) * f * e / t +
      b * s * k_active * ((gated ? 3 : 2) * fe * e / t + h * e) + b * s * n_exp * 4;

  const double embed_params_total = v * h + (model.position == PositionEmbedding::Learned ? s * h : 0);
  out.layers.push_back({"embedding", "embedding", v * h / t + (model.position == PositionEmbedding::Learned ? s * h : 0),
                        0.0, b * s * h * (dropout + 0.0)});
  // A layer with a sliding window scores each query against the window's w keys, not s: its core
  // is 4 b s w q (Beltagy et al. 2020, Longformer Sec 3: local attention is linear in s).
  const double w = model.sliding_window;
  const double local_saving = w > 0 && w < s ? 4 * b * s * (s - w) * q : 0.0;
  double blocks_total = 0, blocks_active = 0, blocks_flops = 0;
  for (int i = 0; i < model.layers; ++i) {
    const double saved = model.is_local_layer(i, int(s)) ? local_saving : 0.0;
    if (moe.is_moe_layer(i)) {
      out.layers.push_back({"block." + std::to_string(i), "transformer", moe_block_params_rank,
                            (moe_block_flops - saved) / t, moe_block_act});
      blocks_total += moe_block_params_total;
      blocks_active += moe_block_active_total;
      blocks_flops += moe_block_flops - saved;
    } else {
      out.layers.push_back({"block." + std::to_string(i), "transformer", block_params_rank,
                            (block_flops - saved) / t, block_act});
      blocks_total += block_params_total;
      blocks_active += block_params_total;
      blocks_flops += block_flops - saved;
    }
  }
  if (!moe.enabled()) {  // the dense sums exactly as they have always been formed
    blocks_total = blocks_active = model.layers * block_params_total;
    blocks_flops = model.layers * (block_flops - model.local_layer_share(int(s)) * local_saving);
  }
  out.layers.push_back({"final_norm", "norm", norm_params, 0.0, b * s * h * e});
  const double head_params_total = model.tied_embeddings ? 0 : v * h;
  // LM head GEMM 2*b*s*h*V; the fp32 logits for the cross-entropy are kept (4 bytes per element).
  out.layers.push_back({"lm_head", "head", v * h / t,  // tied: the last stage holds a copy
                        2 * b * s * h * v / t, 4 * b * s * v / t});

  out.total_params = embed_params_total + blocks_total + norm_params + head_params_total;
  out.active_params = embed_params_total + blocks_active + norm_params + head_params_total;
  // Model FLOPs per token: forward + backward = 3 x forward, GEMMs and attention core, LM head
  // included (Narayanan et al. 2021 Eq. 3 without the recompute pass: 72Bslh^2(1+s/6h+V/12lh)).
  const double fwd_per_token = (blocks_flops + 2 * b * s * h * v) / (b * s);
  out.forward_flops_per_token = fwd_per_token;
  out.flops_per_token = 3 * fwd_per_token;
  return out;
}

}  // namespace capplan
