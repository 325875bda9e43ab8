// Per-layer profile of a model: parameters, FLOPs and activation bytes per layer, for a given tp,
// sequence length and micro-batch size. Analytical (counted from the architecture); measured kernel
// times on the local device come from the runtime's probe.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "planner/spec.h"

namespace capplan {

struct LayerProfile {
  std::string name;          // "embedding", "block.0", ..., "final_norm", "lm_head"
  std::string kind;          // "embedding" | "transformer" | "norm" | "head"
  double params = 0;         // per TP rank
  double forward_flops = 0;  // per micro-batch, per TP rank (a multiply-add counts 2)
  double activation_bytes = 0;  // kept for backward, per micro-batch, per TP rank, no recompute
};

struct ModelProfile {
  std::vector<LayerProfile> layers;
  double total_params = 0;         // whole model, all ranks (tied embedding counted once)
  // Parameters one token goes through: with MoE the top_k routed and the shared experts of each
  // MoE layer instead of all its experts; = total_params for a dense model.
  double active_params = 0;
  double flops_per_token = 0;      // forward + backward model FLOPs per token (6N + attention; N active)
  double forward_flops_per_token = 0;
  // Multi-token prediction modules (ModelSpec::mtp_layers), kept apart from `layers`, "mtp.0", ...
  // of kind "mtp": per TP rank, each module's transformer layer, its 2 hidden -> hidden projection
  // (column-parallel) and its three norms (the two inputs' and the final one); forward FLOPs of
  // the layer, the projection and the shared head's GEMM; kept activations of the layer, the
  // projection's and the norms' inputs and the head's fp32 logits. Their FLOPs are in
  // flops_per_token (the step computes them); their parameters are not in total_params or
  // active_params (the model's size as published), but in mtp_params (whole, every module; the
  // embedding and head they share not counted again).
  std::vector<LayerProfile> mtp;
  double mtp_params = 0;

  // Every row as the listings show them: the model's layers, then the multi-token prediction
  // modules after the head.
  std::vector<LayerProfile> rows() const {
    std::vector<LayerProfile> all = layers;
    all.insert(all.end(), mtp.begin(), mtp.end());
    return all;
  }
};

// How tensor parallelism splits a linear layer: column-parallel (its outputs over the tp ranks),
// row-parallel (its inputs), or duplicated (every rank holds and runs the whole layer).
enum class TpSplit { Column, Row, Duplicated };

// One linear layer of a block: `in` features to `out` features.
struct LinearShape {
  double in = 0, out = 0;
  TpSplit split = TpSplit::Column;
  double params() const { return in * out; }
  // The features one tp rank's share of the layer takes in and gives out.
  double in_per_rank(double tp) const { return split == TpSplit::Row ? in / tp : in; }
  double out_per_rank(double tp) const { return split == TpSplit::Column ? out / tp : out; }
  double params_per_rank(double tp) const { return split == TpSplit::Duplicated ? in * out : in * out / tp; }
};

// The attention half of a block as the counts and the cost model take it, whole (not per rank).
struct AttentionShape {
  // The linear layers, as Megatron splits them: Q, K, V (one column-parallel GEMM) and the output
  // projection (row-parallel); with latent attention Megatron-Core's MLASelfAttention: the
  // down-projections duplicated on every tp rank (TE parallel_mode "duplicated"), the
  // up-projections column-parallel, the output projection row-parallel.
  std::vector<LinearShape> linears;
  double q = 0, k = 0, v = 0;  // widths of the queries, keys and values the core reads
  double out = 0;              // width of the core's output, the output projection's input
  // Latent attention's tp-replicated features per token: the latents (q_lora_rank and
  // kv_lora_rank + qk_rope_head_dim wide) and the normalised latents the up-projections read.
  double latent = 0, latent_normed = 0;
  double latent_norm_params = 0;  // RMSNorm gains of the two latents
  double column_in = 0;  // the inputs of the column-parallel layers whose input gradients tp all-reduces
  double column_out_split() const;  // the column-parallel layers' outputs (split over tp)
};
AttentionShape attention_shape(const ModelSpec& model);
// The widths of the keys and the values the attention core reads, per token (attention_shape's
// k + v, without building its linears: the context ring's exchange asks for it per layout).
double attention_kv_width(const ModelSpec& model);

// tp splits heads and FFN as Megatron does; `precision` sets activation element size. An MoE
// block's params are those of all its experts (per TP rank, before any ep split), its FLOPs those
// of top_k routed plus the shared experts, and its activations those of the tokens its experts
// take (top_k + shared per token).
ModelProfile profile_model(const ModelSpec& model, int tp, int seq_len, int mbs,
                           Precision precision = Precision::Bf16);

}  // namespace capplan
