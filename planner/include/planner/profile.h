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
};

// tp splits heads and FFN as Megatron does; `precision` sets activation element size. An MoE
// block's params are those of all its experts (per TP rank, before any ep split), its FLOPs those
// of top_k routed plus the shared experts, and its activations those of the tokens its experts
// take (top_k + shared per token).
ModelProfile profile_model(const ModelSpec& model, int tp, int seq_len, int mbs,
                           Precision precision = Precision::Bf16);

}  // namespace capplan
