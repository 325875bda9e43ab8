// AdamW step with the DP gradient reduction (see optimizer.h for why both modes reduce alike).
#include "train/optimizer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <stdexcept>

namespace capplan::rt {

double learning_rate(const OptimizerConfig& c, int64_t step) {
  if (c.warmup_steps > 0 && step < c.warmup_steps)
    return c.lr * double(step + 1) / double(c.warmup_steps);
  const double min_lr = c.lr * c.min_lr_ratio;
  const int64_t decay = std::max<int64_t>(1, c.total_steps - c.warmup_steps);
  const double progress = std::clamp(double(step - c.warmup_steps) / double(decay), 0.0, 1.0);
  return min_lr + (c.lr - min_lr) * 0.5 * (1.0 + std::cos(M_PI * progress));
}

Optimizer::Optimizer(const OptimizerConfig& config, Gpt& model, Backend& backend,
                     Communicator& dp, Communicator& tp, Communicator& pp)
    : Optimizer(config, model.dense_buffer(), backend, dp, tp, pp) {}

Optimizer::Optimizer(const OptimizerConfig& config, const ParamBuffer& buffer, Backend& backend,
                     Communicator& dp, Communicator& tp, Communicator& pp)
    : cfg_(config), buf_(buffer), be_(backend), dp_(dp), tp_(tp), pp_(pp) {
  padded_ = buf_.padded;
  if (padded_ % dp_.size() != 0)
    throw std::invalid_argument("parameter buffer not padded to a multiple of dp");
  shard_ = padded_ / dp_.size();
  if (cfg_.zero >= 1) {
    shard_begin_ = shard_ * dp_.rank();
    state_numel_ = shard_;
  } else {
    shard_begin_ = 0;
    state_numel_ = padded_;
  }
  if (cfg_.zero >= 2 && (buf_.zero != cfg_.zero || buf_.shard_numel != shard_))
    throw std::invalid_argument(
        "ZeRO-2/3: the model must be built with the same stage and DP group");
  m_ = be_.allocate(state_numel_);
  v_ = be_.allocate(state_numel_);
  // ZeRO-0/1: the gradients are reduce-scattered in place, so this rank's DP-summed shard is the
  // start of the model's gradient buffer (no second buffer; without DP peers it is the whole
  // buffer). ZeRO-2/3: the model accumulates the reduced shard itself.
  gshard_ = cfg_.zero < 2 ? buf_.grads : buf_.grad_shard;
  if (!m_ || !v_ || !gshard_) throw std::bad_alloc();
}

Optimizer::~Optimizer() {
  be_.release(m_);
  be_.release(v_);
}

OptimizerStats Optimizer::step(int64_t step) {
  OptimizerStats st;
  double total = reduce_gradients(&st.comm_s);
  tp_.all_reduce_sum(&total, 1);
  pp_.all_reduce_sum(&total, 1);
  st.grad_norm = std::sqrt(total);
  st.lr = learning_rate(cfg_, step);
  update(step, st.grad_norm, &st.comm_s);
  return st;
}

double Optimizer::reduce_gradients(double* comm_s) {
  using clock = std::chrono::steady_clock;
  const int64_t my_begin = shard_ * dp_.rank(), my_end = my_begin + shard_;
  if (cfg_.zero < 2) {  // ZeRO-2/3 reduced each bucket during the backward already
    const auto t0 = clock::now();
    dp_.reduce_scatter_sum(buf_.grads, gshard_, shard_);  // in place: gshard_ is grads
    *comm_s += std::chrono::duration<double>(clock::now() - t0).count();
  }
  // Global norm: this shard's counted elements, then the DP partials summed in rank order (so
  // the value does not depend on the reduction algorithm).
  double local = 0;
  for (const ParamInfo& p : *buf_.infos) {
    if (!p.norm_counted) continue;
    const int64_t b = std::max(p.offset, my_begin), e = std::min(p.offset + p.numel, my_end);
    if (b < e) local += be_.sum_squares(gshard_ + (b - my_begin), e - b);
  }
  std::vector<double> parts(size_t(dp_.size()));
  dp_.all_gather(&local, parts.data(), 1);
  double total = 0;
  for (double x : parts) total += x;
  return total;
}

void Optimizer::update(int64_t step, double grad_norm, double* comm_s) {
  using clock = std::chrono::steady_clock;
  float* grads = buf_.grads;
  float* params = buf_.params;
  const int64_t my_begin = shard_ * dp_.rank(), my_end = my_begin + shard_;
  AdamWStep a;
  a.lr = float(learning_rate(cfg_, step));
  a.beta1 = float(cfg_.beta1);
  a.beta2 = float(cfg_.beta2);
  a.eps = float(cfg_.eps);
  a.bias_correction1 = float(1.0 - std::pow(cfg_.beta1, double(step + 1)));
  a.bias_correction2 = float(1.0 - std::pow(cfg_.beta2, double(step + 1)));
  a.grad_scale = float(((cfg_.clip > 0 && grad_norm > cfg_.clip) ? cfg_.clip / grad_norm : 1.0) / loss_scale_);
  // Update the flat range [begin, end) whose gradients start at g (flat index begin).
  auto apply = [&](int64_t begin, int64_t end, const float* g) {
    for (const ParamInfo& p : *buf_.infos) {
      const int64_t b = std::max(p.offset, begin), e = std::min(p.offset + p.numel, end);
      if (b >= e) continue;
      a.weight_decay = p.decay ? float(cfg_.weight_decay) : 0.0f;
      float* w = cfg_.zero >= 3 ? buf_.param_shard + (b - my_begin) : params + b;
      be_.adamw(w, g + (b - begin), m_ + (b - shard_begin_), v_ + (b - shard_begin_),
                e - b, a);
    }
  };
  if (cfg_.zero >= 1) {
    apply(my_begin, my_end, gshard_);
    if (cfg_.zero < 3) {  // ZeRO-3 keeps the shard; layers gather their weights when used
      const auto t0 = clock::now();
      dp_.all_gather(params + my_begin, params, shard_);
      *comm_s += std::chrono::duration<double>(clock::now() - t0).count();
    }
  } else {
    const auto t0 = clock::now();
    // Move the shard from the start of the buffer to its own block (no overlap unless it is
    // already there), then gather the other blocks around it.
    if (my_begin != 0) be_.copy(grads + my_begin, gshard_, shard_);
    dp_.all_gather(grads + my_begin, grads, shard_);
    *comm_s += std::chrono::duration<double>(clock::now() - t0).count();
    apply(0, padded_, grads);
  }
}

}  // namespace capplan::rt
