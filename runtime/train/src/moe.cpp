// The mixture-of-experts block (see moe.h): routing and capacity on the host, token dispatch and
// combine by all-to-all-v over the ep group, expert and shared MLPs on the Backend, and the
// backward of all of it, load-balancing loss included.
#include "train/moe.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <stdexcept>

namespace capplan::rt {

struct MoeBlock::Slot {
  const float* h = nullptr;  // the forward's input (the model keeps it until the backward)
  float aux_scale = 0;
  std::vector<float> probs;   // [R, E] router softmax
  std::vector<int> choice;    // [R, K] chosen experts, most probable first
  std::vector<int> order;     // kept choices (t * K + j) in send order: (expert, j, t)
  std::vector<int64_t> send_rows, recv_rows;  // per ep rank
  std::vector<int64_t> recv_counts;           // [ep, El]: rows from rank r for local expert
  std::vector<int64_t> to_expert;             // received row -> row in expert order
  std::vector<int64_t> expert_rows;           // [El]
  std::vector<float> y_ret;                   // [sent, C] the experts' outputs, send order
  std::vector<double> f, P;                   // load-balancing statistics per expert
  std::vector<int64_t> chosen;
  int64_t dropped = 0, received = 0;
  double tokens = 0;  // of the micro-batch, over the cp ranks
  float *x = nullptr, *fc = nullptr, *act = nullptr, *sfc = nullptr, *sact = nullptr;
  int64_t x_have = 0, fc_have = 0, act_have = 0;
};

const std::vector<int64_t>& MoeBlock::chosen(int slot) const { return state_.at(size_t(slot)).chosen; }
int64_t MoeBlock::dropped(int slot) const { return state_.at(size_t(slot)).dropped; }

std::vector<int> MoeBlock::routing(int slot) const {
  const Slot& s = state_.at(size_t(slot));
  std::vector<int> r(s.choice.size());
  for (size_t a = 0; a < r.size(); ++a) r[a] = -1 - s.choice[a];
  for (int a : s.order) r[size_t(a)] = s.choice[size_t(a)];
  return r;
}

std::string moe_check_config(const MoeConfig& c, int hidden, int tp_size, int ep_group_size) {
  if (c.experts <= 0) return {};
  const std::string E = std::to_string(c.experts);
  if (c.top_k < 1 || c.top_k > c.experts)
    return "moe.top_k " + std::to_string(c.top_k) + " must be in 1 .. experts " + E;
  if (c.ffn_hidden <= 0) return "moe.expert_ffn_hidden must be > 0";
  if (c.ffn_hidden % tp_size != 0)
    return "tp " + std::to_string(tp_size) + " does not divide moe.expert_ffn_hidden " +
           std::to_string(c.ffn_hidden);
  if (c.shared_experts < 0) return "moe.shared_experts must be >= 0";
  if (c.capacity_factor < 0) return "moe.capacity_factor must be >= 0";
  if (c.layer_freq < 1) return "moe.moe_layer_freq must be >= 1";
  if (c.ep_size < 1 || c.experts % c.ep_size != 0)
    return "ep " + std::to_string(c.ep_size) + " does not divide the " + E + " experts";
  if (c.ep_size != ep_group_size) return "the ep group does not have ep ranks";
  if (c.ep_rank < 0 || c.ep_rank >= c.ep_size) return "ep rank out of range";
  if (hidden <= 0) return "hidden must be > 0";
  return {};
}

MoeBlock::MoeBlock(const MoeConfig& config, Backend& backend, Communicator& tp, Communicator* ep,
                   Communicator* cp, int hidden, int tp_rank, int tp_size, bool swiglu, int rows,
                   int slots)
    : cfg_(config), be_(backend), tp_(tp), ep_(ep), cp_(cp), C_(hidden), tp_rank_(tp_rank),
      swiglu_(swiglu), R_(rows) {
  if (std::string why = moe_check_config(cfg_, hidden, tp_size, ep ? ep->size() : 1); !why.empty())
    throw std::invalid_argument(why);
  E_ = cfg_.experts;
  El_ = cfg_.local_experts();
  K_ = cfg_.top_k;
  Fl_ = cfg_.ffn_hidden / tp_size;
  Fc_ = swiglu ? 2 * Fl_ : Fl_;
  Fsl_ = cfg_.shared_experts * cfg_.ffn_hidden / tp_size;
  Fsc_ = swiglu ? 2 * Fsl_ : Fsl_;
  per_expert_ = int64_t(Fc_) * C_ + int64_t(C_) * Fl_;
  state_.resize(size_t(std::max(1, slots)));
  auto alloc = [&](int64_t n) {
    float* p = be_.allocate(std::max<int64_t>(n, 1));
    if (!p) throw std::bad_alloc();
    owned_.push_back(p);
    return p;
  };
  logits_ = alloc(int64_t(R_) * E_);
  dlogits_ = alloc(int64_t(R_) * E_);
  scratch_ = alloc(int64_t(R_) * C_);
  for (Slot& s : state_)
    if (Fsl_ > 0) {
      s.sfc = alloc(int64_t(R_) * Fsc_);
      s.sact = alloc(int64_t(R_) * Fsl_);
    }
}

MoeBlock::~MoeBlock() {
  for (float* p : owned_) be_.release(p);
  for (Slot& s : state_)
    for (float* p : {s.x, s.fc, s.act})
      if (p) be_.release(p);
  for (float* p : {dfc_, dact_})
    if (p) be_.release(p);
}

// A device buffer of at least n elements (grown, contents dropped, when it is smaller).
float* MoeBlock::device(float*& p, int64_t& have, int64_t n) {
  if (n > have || !p) {
    if (p) be_.release(p);
    have = std::max<int64_t>(n, 1);
    p = be_.allocate(have);
    if (!p) throw std::bad_alloc();
  }
  return p;
}

void MoeBlock::exchange(const std::vector<float>& send, const std::vector<int64_t>& send_rows,
                        std::vector<float>& recv, const std::vector<int64_t>& recv_rows) {
  int64_t total = 0;
  for (int64_t n : recv_rows) total += n;
  recv.assign(size_t(total * C_), 0.0f);
  if (!ep_ || ep_->size() == 1) {
    std::copy(send.begin(), send.end(), recv.begin());
    return;
  }
  std::vector<int64_t> sc(send_rows.size()), rc(recv_rows.size());
  for (size_t r = 0; r < sc.size(); ++r) sc[r] = send_rows[r] * C_;
  for (size_t r = 0; r < rc.size(); ++r) rc[r] = recv_rows[r] * C_;
  ep_->all_to_all_v(send.data(), sc, recv.data(), rc);
}

void MoeBlock::mlp_forward(float* y, const float* x, const float* fc_w, const float* proj_w,
                           float* fc, float* act, int n, int Fl, int Fc, bool accumulate) {
  be_.matmul(fc, x, fc_w, n, Fc, C_, false, true, false);
  if (swiglu_)
    be_.swiglu_forward(act, fc, n, Fl);
  else
    be_.gelu_forward(act, fc, int64_t(n) * Fl);  // fc becomes GELU'(fc)
  be_.matmul(y, act, proj_w, n, C_, Fl, false, true, accumulate);
}

void MoeBlock::mlp_backward(float* dx, const float* dy, const float* x, const float* fc_w,
                            const float* proj_w, float* d_fc_w, float* d_proj_w, const float* fc,
                            const float* act, int n, int Fl, int Fc) {
  float* dact = device(dact_, dact_have_, int64_t(n) * Fl);
  float* dfc = device(dfc_, dfc_have_, int64_t(n) * Fc);
  be_.matmul(dact, dy, proj_w, n, Fl, C_, false, false, false);
  be_.matmul(d_proj_w, dy, act, C_, Fl, n, true, false, true);
  if (swiglu_)
    be_.swiglu_backward(dfc, fc, dact, n, Fl);
  else
    be_.gelu_backward(dfc, fc, dact, int64_t(n) * Fl);
  be_.matmul(d_fc_w, dfc, x, Fc, C_, n, true, false, true);
  be_.matmul(dx, dfc, fc_w, n, C_, Fc, false, false, false);
}

// The router: logits = h Wr^T, softmax over the experts, each token's top_k choices.
void MoeBlock::route(Slot& s, const float* h, const MoeWeights& w) {
  const int R = R_, E = E_, K = K_, C = C_;
  // Softmax in double; top-k by probability (ties: the lower expert id).
  be_.matmul(logits_, h, w.router, R, E, C, false, true, false);
  std::vector<float> logits(size_t(R) * E);
  be_.to_host(logits.data(), logits_, int64_t(R) * E);
  s.probs.assign(size_t(R) * E, 0.0f);
  s.choice.assign(size_t(R) * K, 0);
  std::vector<int> idx(static_cast<size_t>(E));
  for (int t = 0; t < R; ++t) {
    const float* l = logits.data() + size_t(t) * E;
    float* p = s.probs.data() + size_t(t) * E;
    const float mx = *std::max_element(l, l + E);
    double sum = 0;
    for (int e = 0; e < E; ++e) sum += std::exp(double(l[e]) - mx);
    for (int e = 0; e < E; ++e) p[e] = float(std::exp(double(l[e]) - mx) / sum);
    std::iota(idx.begin(), idx.end(), 0);
    std::partial_sort(idx.begin(), idx.begin() + K, idx.end(),
                      [&](int a, int b) { return p[a] > p[b] || (p[a] == p[b] && a < b); });
    for (int j = 0; j < K; ++j) s.choice[size_t(t) * K + j] = idx[size_t(j)];
  }
}

// The load-balancing loss (Switch Transformer): coeff * E * sum_e f_e P_e over the micro-batch.
double MoeBlock::balance_loss(Slot& s) {
  const int R = R_, E = E_, K = K_;
  // Load-balancing statistics over the micro-batch (summed over the cp ranks' tokens).
  std::vector<double> stats(size_t(2 * E + 1), 0.0);
  for (int t = 0; t < R; ++t) {
    for (int e = 0; e < E; ++e) stats[size_t(E + e)] += s.probs[size_t(t) * E + e];
    for (int j = 0; j < K; ++j) stats[size_t(s.choice[size_t(t) * K + j])] += 1;
  }
  stats[size_t(2 * E)] = R;
  if (cp_ && cp_->size() > 1) cp_->all_reduce_sum(stats.data(), int64_t(stats.size()));
  const double ntot = stats[size_t(2 * E)];
  s.tokens = ntot;
  s.f.assign(size_t(E), 0.0);
  s.P.assign(size_t(E), 0.0);
  s.chosen.assign(size_t(E), 0);
  double aux = 0;
  for (int e = 0; e < E; ++e) {
    s.chosen[size_t(e)] = int64_t(stats[size_t(e)]);
    s.f[size_t(e)] = stats[size_t(e)] / (ntot * K);
    s.P[size_t(e)] = stats[size_t(E + e)] / ntot;
    aux += s.f[size_t(e)] * s.P[size_t(e)];
  }
  aux *= cfg_.aux_loss_coeff * E;
  return aux;
}

// Which choices each expert keeps (capacity), the send order, and the row counts to and from
// each ep rank.
void MoeBlock::plan_dispatch(Slot& s) {
  const int R = R_, E = E_, K = K_;
  const int ep = cfg_.ep_size;
  // Capacity: each expert keeps its first `cap` choices in (choice rank, token) order.
  const int64_t cap = cfg_.capacity_factor > 0
                          ? int64_t(std::ceil(cfg_.capacity_factor * double(R) * K / E))
                          : std::numeric_limits<int64_t>::max();
  std::vector<int64_t> taken(size_t(E), 0);
  std::vector<std::vector<int>> by_expert(static_cast<size_t>(E));
  s.dropped = 0;
  for (int j = 0; j < K; ++j)
    for (int t = 0; t < R; ++t) {
      const int e = s.choice[size_t(t) * K + j];
      if (taken[size_t(e)] < cap) {
        taken[size_t(e)] += 1;
        by_expert[size_t(e)].push_back(t * K + j);
      } else {
        s.dropped += 1;
      }
    }
  // Send order: expert by expert (so by ep rank, then local expert), each in priority order.
  s.order.clear();
  std::vector<int64_t> counts(static_cast<size_t>(E));
  for (int e = 0; e < E; ++e) {
    counts[size_t(e)] = int64_t(by_expert[size_t(e)].size());
    s.order.insert(s.order.end(), by_expert[size_t(e)].begin(), by_expert[size_t(e)].end());
  }
  s.recv_counts.assign(size_t(ep) * El_, 0);
  if (ep_ && ep > 1)
    ep_->all_to_all(counts.data(), s.recv_counts.data(), El_);
  else
    s.recv_counts = counts;
  s.send_rows.assign(size_t(ep), 0);
  s.recv_rows.assign(size_t(ep), 0);
  for (int r = 0; r < ep; ++r)
    for (int le = 0; le < El_; ++le) {
      s.send_rows[size_t(r)] += counts[size_t(r * El_ + le)];
      s.recv_rows[size_t(r)] += s.recv_counts[size_t(r * El_ + le)];
    }
}

double MoeBlock::forward(int slot, const float* h, float* y, const MoeWeights& w, float aux_scale) {
  Slot& s = state_.at(size_t(slot));
  s.h = h;
  s.aux_scale = aux_scale;
  const int R = R_, E = E_, K = K_, C = C_;
  const int ep = cfg_.ep_size;
  route(s, h, w);
  const double aux = balance_loss(s);
  plan_dispatch(s);
  // Dispatch.
  std::vector<float> hh(size_t(R) * C), send(s.order.size() * size_t(C)), recv;
  be_.to_host(hh.data(), h, int64_t(R) * C);
  for (size_t i = 0; i < s.order.size(); ++i) {
    const int t = s.order[i] / K;
    std::copy(hh.begin() + int64_t(t) * C, hh.begin() + int64_t(t + 1) * C,
              send.begin() + int64_t(i) * C);
  }
  exchange(send, s.send_rows, recv, s.recv_rows);
  // Received rows come by (source rank, local expert); the experts want them by (local
  // expert, source rank).
  s.expert_rows.assign(size_t(El_), 0);
  for (int r = 0; r < ep; ++r)
    for (int le = 0; le < El_; ++le) s.expert_rows[size_t(le)] += s.recv_counts[size_t(r * El_ + le)];
  std::vector<int64_t> start(size_t(El_), 0);
  for (int le = 1; le < El_; ++le) start[size_t(le)] = start[size_t(le) - 1] + s.expert_rows[size_t(le) - 1];
  s.received = int64_t(recv.size()) / C;
  s.to_expert.assign(size_t(s.received), 0);
  {
    int64_t i = 0;
    std::vector<int64_t> at = start;
    for (int r = 0; r < ep; ++r)
      for (int le = 0; le < El_; ++le)
        for (int64_t k = 0; k < s.recv_counts[size_t(r * El_ + le)]; ++k) s.to_expert[size_t(i++)] = at[size_t(le)]++;
  }
  std::vector<float> xe(recv.size());
  for (int64_t i = 0; i < s.received; ++i)
    std::copy(recv.begin() + i * C, recv.begin() + (i + 1) * C, xe.begin() + s.to_expert[size_t(i)] * C);
  const int64_t n = s.received;
  float* x = device(s.x, s.x_have, n * C);
  float* fc = device(s.fc, s.fc_have, n * Fc_);
  float* act = device(s.act, s.act_have, n * Fl_);
  if (n > 0) be_.from_host(x, xe.data(), n * C);
  std::vector<float> ye(size_t(n) * C);
  if (n > 0) {
    float* yd = be_.allocate(n * C);
    if (!yd) throw std::bad_alloc();
    for (int le = 0; le < El_; ++le) {
      const int64_t m = s.expert_rows[size_t(le)], o = start[size_t(le)];
      if (m == 0) continue;
      const float* we = w.experts + int64_t(le) * per_expert_;
      mlp_forward(yd + o * C, x + o * C, we, we + int64_t(Fc_) * C, fc + o * Fc_, act + o * Fl_,
                  int(m), Fl_, Fc_, false);
    }
    be_.to_host(ye.data(), yd, n * C);
    be_.release(yd);
  }
  // Combine: back to the senders, each output scaled by its gate and added to its token.
  std::vector<float> back(ye.size());
  for (int64_t i = 0; i < n; ++i)
    std::copy(ye.begin() + s.to_expert[size_t(i)] * C, ye.begin() + (s.to_expert[size_t(i)] + 1) * C,
              back.begin() + i * C);
  exchange(back, s.recv_rows, s.y_ret, s.send_rows);
  std::vector<float> yh(size_t(R) * C, 0.0f);
  for (size_t i = 0; i < s.order.size(); ++i) {
    const int a = s.order[i], t = a / K;
    const float g = s.probs[size_t(t) * E + s.choice[size_t(a)]];
    const float* src = s.y_ret.data() + i * size_t(C);
    float* dst = yh.data() + size_t(t) * C;
    for (int c = 0; c < C; ++c) dst[c] += g * src[c];
  }
  be_.from_host(y, yh.data(), int64_t(R) * C);
  if (Fsl_ > 0)
    mlp_forward(y, h, w.shared_fc, w.shared_proj, s.sfc, s.sact, R, Fsl_, Fsc_, true);
  return aux;
}

void MoeBlock::backward(int slot, const float* dy, float* dh, const MoeWeights& w) {
  Slot& s = state_.at(size_t(slot));
  const int R = R_, E = E_, K = K_, C = C_;
  std::vector<float> dyh(size_t(R) * C);
  be_.to_host(dyh.data(), dy, int64_t(R) * C);
  // Gate gradients: dy . (expert output), summed over the TP partials.
  std::vector<float> dgate(size_t(R) * K, 0.0f);
  std::vector<float> send(s.order.size() * size_t(C)), recv;
  for (size_t i = 0; i < s.order.size(); ++i) {
    const int a = s.order[i], t = a / K;
    const float* yr = s.y_ret.data() + i * size_t(C);
    const float* d = dyh.data() + size_t(t) * C;
    float dot = 0;
    for (int c = 0; c < C; ++c) dot += d[c] * yr[c];
    dgate[size_t(a)] = dot;
    const float g = s.probs[size_t(t) * E + s.choice[size_t(a)]];
    float* out = send.data() + i * size_t(C);
    for (int c = 0; c < C; ++c) out[c] = g * d[c];
  }
  tp_.all_reduce_sum(dgate.data(), int64_t(dgate.size()));
  // The experts' backward on the gradients of their outputs, dispatched as in the forward.
  exchange(send, s.send_rows, recv, s.recv_rows);
  const int64_t n = s.received;
  std::vector<float> dxe(size_t(n) * C), back(size_t(n) * C);
  if (n > 0) {
    std::vector<float> dye(size_t(n) * C);
    for (int64_t i = 0; i < n; ++i)
      std::copy(recv.begin() + i * C, recv.begin() + (i + 1) * C, dye.begin() + s.to_expert[size_t(i)] * C);
    float* dyd = be_.allocate(n * C);
    float* dxd = be_.allocate(n * C);
    if (!dyd || !dxd) throw std::bad_alloc();
    be_.from_host(dyd, dye.data(), n * C);
    int64_t o = 0;
    for (int le = 0; le < El_; ++le) {
      const int64_t m = s.expert_rows[size_t(le)];
      if (m > 0) {
        const float* we = w.experts + int64_t(le) * per_expert_;
        float* dwe = w.d_experts + int64_t(le) * per_expert_;
        mlp_backward(dxd + o * C, dyd + o * C, s.x + o * C, we, we + int64_t(Fc_) * C, dwe,
                     dwe + int64_t(Fc_) * C, s.fc + o * Fc_, s.act + o * Fl_, int(m), Fl_, Fc_);
      }
      o += m;
    }
    be_.to_host(dxe.data(), dxd, n * C);
    be_.release(dyd);
    be_.release(dxd);
    for (int64_t i = 0; i < n; ++i)
      std::copy(dxe.begin() + s.to_expert[size_t(i)] * C,
                dxe.begin() + (s.to_expert[size_t(i)] + 1) * C, back.begin() + i * C);
  }
  std::vector<float> dx_ret;
  exchange(back, s.recv_rows, dx_ret, s.send_rows);
  std::vector<float> dhh(size_t(R) * C, 0.0f);
  for (size_t i = 0; i < s.order.size(); ++i) {
    const int t = s.order[i] / K;
    const float* src = dx_ret.data() + i * size_t(C);
    float* dst = dhh.data() + size_t(t) * C;
    for (int c = 0; c < C; ++c) dst[c] += src[c];
  }
  // Router: d loss / d p[t, e] = the gate gradient of a kept choice + the load-balancing term
  // coeff * E * f_e / tokens (weighted by aux_scale), then through the softmax.
  std::vector<float> dlog(size_t(R) * E);
  const double ntot = s.tokens;
  std::vector<double> aux_g(static_cast<size_t>(E));
  for (int e = 0; e < E; ++e)
    aux_g[size_t(e)] = cfg_.aux_loss_coeff * E * s.f[size_t(e)] / ntot * s.aux_scale;
  std::vector<double> dp(static_cast<size_t>(E));
  for (int t = 0; t < R; ++t) {
    for (int e = 0; e < E; ++e) dp[size_t(e)] = aux_g[size_t(e)];
    for (int j = 0; j < K; ++j) dp[size_t(s.choice[size_t(t) * K + j])] += dgate[size_t(t) * K + j];
    const float* p = s.probs.data() + size_t(t) * E;
    double dot = 0;
    for (int e = 0; e < E; ++e) dot += p[e] * dp[size_t(e)];
    for (int e = 0; e < E; ++e) dlog[size_t(t) * E + e] = float(p[e] * (dp[size_t(e)] - dot));
  }
  be_.from_host(dh, dhh.data(), int64_t(R) * C);
  be_.from_host(dlogits_, dlog.data(), int64_t(R) * E);
  be_.matmul(w.d_router, dlogits_, s.h, E, C, R, true, false, true);
  // The router's input gradient is the same on every TP rank: added once (the caller sums the
  // TP partials).
  if (tp_rank_ == 0) {
    be_.matmul(scratch_, dlogits_, w.router, R, C, E, false, false, false);
    be_.add(dh, scratch_, int64_t(R) * C);
  }
  if (Fsl_ > 0) {
    mlp_backward(scratch_, dy, s.h, w.shared_fc, w.shared_proj, w.d_shared_fc, w.d_shared_proj,
                 s.sfc, s.sact, R, Fsl_, Fsc_);
    be_.add(dh, scratch_, int64_t(R) * C);
  }
}

}  // namespace capplan::rt
