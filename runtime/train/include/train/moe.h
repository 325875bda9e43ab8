// The mixture-of-experts block of capplan-train: it replaces the MLP of every moe_layer_freq-th
// layer after the first_dense_layers. A router GEMM and a softmax over the experts pick each token's top_k experts (gate = the
// expert's softmax probability, as Switch and GShard); each expert takes at most
// capacity_factor * tokens * top_k / experts of a rank's tokens per micro-batch, in the order of
// (choice, token), the rest of its tokens dropped (capacity_factor 0: none dropped); the experts
// live on the ep ranks, tokens go to them and come back by all-to-all-v over the ep group
// (Lepikhin et al. 2021, GShard; Fedus et al. 2022, Switch Transformer); shared experts (DeepSeek-
// MoE, Dai et al. 2024) see every token. An auxiliary load-balancing loss coeff * E * sum_e f_e P_e
// (Switch, eq. 4: f_e the share of the token choices routed to e, P_e the mean router probability
// of e) is added to the objective. Expert and shared MLPs are split over TP like the dense MLP.
// The routing, the token permutations and the combine run on the host; the GEMMs and activations
// on the Backend. Not here: expert-choice or sigmoid routing, token dropping by score.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "train/backend.h"
#include "train/communicator.h"

namespace capplan::rt {

struct MoeConfig {
  int experts = 0;             // E; 0 = no MoE layers
  int top_k = 1;               // experts per token
  int ffn_hidden = 0;          // hidden width of one expert's MLP
  int shared_experts = 0;      // shared experts, each ffn_hidden wide, seen by every token
  double capacity_factor = 0;  // tokens an expert takes per micro-batch, as a multiple of an
                               // even share (tokens * top_k / E); 0 = no limit
  // Layer l (0-based) is an MoE layer when l >= first_dense_layers and
  // (l - first_dense_layers) % layer_freq == 0 (planner/spec.h's MoeSpec::is_moe_layer).
  int layer_freq = 1;
  int first_dense_layers = 0;
  double aux_loss_coeff = 0.01;  // coefficient of the load-balancing loss (Switch: 1e-2)
  int ep_rank = 0, ep_size = 1;  // the experts [ep_rank E / ep, (ep_rank + 1) E / ep) are here
  bool is_moe_layer(int layer) const {
    return experts > 0 && layer_freq > 0 && layer >= first_dense_layers &&
           (layer - first_dense_layers) % layer_freq == 0;
  }
  int local_experts() const { return experts / ep_size; }
};

// The parts of a config the block needs (top_k <= experts, ep divides experts, tp divides the
// expert width, ...): empty when fine, else the reason.
std::string moe_check_config(const MoeConfig& c, int hidden, int tp_size, int ep_group_size);

// The weights of one MoE layer: router [E, C] and shared MLP (fc [Fs_c, C], proj [C, Fs_l]; Fs =
// shared_experts * ffn_hidden, split over TP) in the model's flat buffer; the local experts in
// the expert buffer, expert after expert: fc [Fe_c, C] then proj [C, Fe_l]. Fe_c = 2 Fe_l for
// SwiGLU ([gate | up]), Fe_l otherwise; Fe_l = ffn_hidden / tp. Gradients alike.
struct MoeWeights {
  const float *router = nullptr, *shared_fc = nullptr, *shared_proj = nullptr,
              *experts = nullptr;
  float *d_router = nullptr, *d_shared_fc = nullptr, *d_shared_proj = nullptr,
        *d_experts = nullptr;
};

class MoeBlock {
 public:
  // rows: tokens per micro-batch on this rank; cp (may be null): the context-parallel group,
  // over which the load-balancing statistics of a micro-batch are summed; ep: the expert group.
  MoeBlock(const MoeConfig& config, Backend& backend, Communicator& tp, Communicator* ep,
           Communicator* cp, int hidden, int tp_rank, int tp_size, bool swiglu, int rows,
           int slots);
  ~MoeBlock();
  MoeBlock(const MoeBlock&) = delete;
  MoeBlock& operator=(const MoeBlock&) = delete;

  int64_t expert_numel() const { return int64_t(cfg_.local_experts()) * per_expert_; }
  int64_t per_expert_numel() const { return per_expert_; }
  int fc_rows() const { return Fc_; }     // Fe_c
  int ffn_local() const { return Fl_; }   // Fe_l
  int shared_fc_rows() const { return Fsc_; }
  int shared_local() const { return Fsl_; }

  // y [rows, C] = this rank's TP-partial output of the block for input h [rows, C] (identical
  // on every TP rank). aux_scale weighs this micro-batch's load-balancing loss in the objective
  // (the trainer's mbs / gbs); returns the loss's value (unweighted).
  double forward(int slot, const float* h, float* y, const MoeWeights& w, float aux_scale);
  // dh [rows, C] (overwritten) = TP-partial gradient of the input from dy [rows, C]; adds the
  // weight gradients. Uses slot's forward state.
  void backward(int slot, const float* dy, float* dh, const MoeWeights& w);

  // Last forward's routing on `slot`: tokens each global expert was chosen for (before the
  // capacity) and tokens dropped on this rank.
  const std::vector<int64_t>& chosen(int slot) const;
  int64_t dropped(int slot) const;
  // Last forward's routing on `slot`: per token and choice, the expert (-1 - expert when the
  // capacity dropped it); [rows, top_k].
  std::vector<int> routing(int slot) const;

 private:
  struct Slot;
  void route(Slot& s, const float* h, const MoeWeights& w);
  double balance_loss(Slot& s);
  void plan_dispatch(Slot& s);
  void mlp_forward(float* y, const float* x, const float* fc_w, const float* proj_w, float* fc,
                   float* act, int n, int Fl, int Fc, bool accumulate);
  void mlp_backward(float* dx, const float* dy, const float* x, const float* fc_w,
                    const float* proj_w, float* d_fc_w, float* d_proj_w, const float* fc,
                    const float* act, int n, int Fl, int Fc);
  float* device(float*& p, int64_t& have, int64_t n);
  // rows (in send order) -> the ep ranks and back; counts in rows per rank.
  void exchange(const std::vector<float>& send, const std::vector<int64_t>& send_rows,
                std::vector<float>& recv, const std::vector<int64_t>& recv_rows);

  MoeConfig cfg_;
  Backend& be_;
  Communicator& tp_;
  Communicator* ep_;
  Communicator* cp_;
  int C_, tp_rank_, swiglu_, R_, E_, El_, K_, Fl_, Fc_, Fsl_, Fsc_;
  int64_t per_expert_ = 0;
  std::vector<Slot> state_;
  std::vector<float*> owned_;
  float *logits_ = nullptr, *dlogits_ = nullptr, *scratch_ = nullptr, *dfc_ = nullptr,
        *dact_ = nullptr;
  int64_t dfc_have_ = 0, dact_have_ = 0;
};

}  // namespace capplan::rt
