// AdamW with a warm-up + cosine learning-rate schedule, global-norm gradient clipping, and the
// data-parallel gradient reduction, plain or ZeRO-1 (Rajbhandari et al. 2020: each DP rank keeps
// Adam moments for its 1/dp shard of the flat parameter buffer only).
//
// Both modes reduce gradients the same way, a reduce-scatter over the DP group followed by an
// all-gather (the ring all-reduce's two halves, which is what MPI_Allreduce does for large
// buffers), so every element's sum, norm and update are computed identically: ZeRO-1 and plain DP
// give bitwise-equal weights. Plain DP all-gathers the reduced gradients and updates all weights;
// ZeRO-1 updates its shard and all-gathers the weights. ZeRO-2 finds the reduced gradient shard
// already accumulated by the model (one reduce-scatter per layer bucket and micro-batch, gpt.h);
// ZeRO-3 also updates the model's parameter shard in place and gathers nothing here.
#pragma once

#include <cstdint>
#include <vector>

#include "io/train_options.h"
#include "train/backend.h"
#include "train/communicator.h"
#include "train/gpt.h"

namespace capplan::rt {

// OptimizerConfig (the hyper-parameters) is part of the run contract, io/train_options.h.

// Learning rate at 0-based `step`: lr * (step + 1) / warmup during warm-up, then
// min + (lr - min) * (1 + cos(pi * progress)) / 2 (Loshchilov & Hutter 2017, SGDR, one cycle).
double learning_rate(const OptimizerConfig& c, int64_t step);

struct OptimizerStats {
  double grad_norm = 0;  // global L2 norm before clipping
  double lr = 0;
  double comm_s = 0;     // time in DP collectives
};

class Optimizer {
 public:
  // The model's flat buffers must be padded to a multiple of dp.size().
  Optimizer(const OptimizerConfig& config, Gpt& model, Backend& backend, Communicator& dp,
            Communicator& tp, Communicator& pp);
  // The same over one flat buffer (the model's expert buffer, with its own DP group).
  Optimizer(const OptimizerConfig& config, const ParamBuffer& buffer, Backend& backend,
            Communicator& dp, Communicator& tp, Communicator& pp);
  ~Optimizer();
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  // Reduces the accumulated gradients over DP (they already carry 1 / global tokens), clips and
  // applies AdamW for 0-based `step`. Leaves grads() holding garbage; the caller zeroes them.
  OptimizerStats step(int64_t step);
  // The two halves of step(), for several model chunks on one rank (interleaved pipeline):
  // reduce this chunk's gradients over DP and return the sum of squares of its counted elements
  // (DP partials summed in rank order; the caller sums chunks, then over TP and PP) ...
  double reduce_gradients(double* comm_s);
  // ... then clip with the global norm and apply AdamW for 0-based `step`.
  void update(int64_t step, double grad_norm, double* comm_s);
  // The gradients hold loss_scale x their value (fp16 loss scaling): update() divides it out.
  void set_loss_scale(double loss_scale) { loss_scale_ = loss_scale; }

  // Adam moments held by this rank: the whole buffer (zero 0) or its shard (zero 1).
  int64_t state_numel() const { return state_numel_; }
  // Bytes this optimizer allocated: the two moments (the DP-reduced gradient shard lives in the
  // model's gradient buffer).
  int64_t state_bytes() const { return 2 * state_numel_ * int64_t(sizeof(float)); }
  float* m() { return m_; }
  float* v() { return v_; }
  int64_t shard_begin() const { return shard_begin_; }  // flat index of state element 0

 private:
  double loss_scale_ = 1.0;
  OptimizerConfig cfg_;
  ParamBuffer buf_;
  Backend& be_;
  Communicator &dp_, &tp_, &pp_;
  int64_t padded_ = 0, shard_ = 0, shard_begin_ = 0, state_numel_ = 0;
  float *m_ = nullptr, *v_ = nullptr, *gshard_ = nullptr;
};

}  // namespace capplan::rt
