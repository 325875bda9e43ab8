// The cross-backend harness run CPU against CPU (one thread against three: the same kernels
// split differently), shown to catch a wrong kernel, and the CUDA kernels' math checked on the
// host: the per-element functions they call (train/kernel_math.h) and the fused attention's
// algorithm (tiles of 32 keys, online softmax, log-sum-exp kept for a backward that recomputes
// the probabilities) against the CPU backend, which keeps the full softmax.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "runtime/train/cross_backend.h"
#include "train/kernel_math.h"

namespace capplan::rt {
namespace {

using testing::compare_backends;
using testing::random_vector;

// Expectation: every kernel within 1e-5 (fp32) of the one-thread CPU backend. The three-thread
// backend splits rows and columns over threads; each output element still sums the same terms in
// the same order, so most kernels agree bitwise and none is off by more than rounding.
TEST(CrossBackend, CpuThreeThreadsAgainstCpuOneThread) {
  auto ref = make_cpu_backend(1);
  auto test = make_cpu_backend(3);
  const auto results = compare_backends(*ref, *test, 1e-5);
  ASSERT_GE(results.size(), 14u);
  for (const auto& r : results)
    EXPECT_TRUE(r.ok) << r.kernel << ": Expectation error <= 1e-5, Actual result " << r.error;
}

// The CPU backend with GELU's output off by 0.1 %: a backend under test with one wrong kernel.
class WrongGelu final : public Backend {
 public:
  WrongGelu() : be_(make_cpu_backend(1)) {}
  std::string name() const override { return "wrong-gelu"; }
  int threads() const override { return 1; }
  float* allocate(int64_t n) override { return be_->allocate(n); }
  void release(float* p) override { be_->release(p); }
  void fill(float* p, float v, int64_t n) override { be_->fill(p, v, n); }
  void copy(float* d, const float* s, int64_t n) override { be_->copy(d, s, n); }
  void to_host(float* h, const float* s, int64_t n) override { be_->to_host(h, s, n); }
  void from_host(float* d, const float* h, int64_t n) override { be_->from_host(d, h, n); }
  void matmul(float* c, const float* a, const float* b, int M, int N, int K, bool ta, bool tb, bool acc) override {
    be_->matmul(c, a, b, M, N, K, ta, tb, acc);
  }
  void add(float* y, const float* x, int64_t n) override { be_->add(y, x, n); }
  void scale(float* y, float s, int64_t n) override { be_->scale(y, s, n); }
  void norm_forward(NormKind k, float* o, float* m, float* r, const float* x, const float* w, const float* b,
                    int rows, int C) override {
    be_->norm_forward(k, o, m, r, x, w, b, rows, C);
  }
  void norm_backward(NormKind k, float* dx, float* dw, float* db, const float* dout, const float* x, const float* w,
                     const float* m, const float* r, int rows, int C) override {
    be_->norm_backward(k, dx, dw, db, dout, x, w, m, r, rows, C);
  }
  void attention_forward(float* o, float* p, const float* qkv, const AttentionShape& s) override {
    be_->attention_forward(o, p, qkv, s);
  }
  void attention_backward(float* d, const float* dout, const float* qkv, const float* p,
                          const AttentionShape& s) override {
    be_->attention_backward(d, dout, qkv, p, s);
  }
  void rope(float* qkv, const AttentionShape& s, bool inv) override { be_->rope(qkv, s, inv); }
  void gelu_forward(float* out, float* x, int64_t n) override {
    be_->gelu_forward(out, x, n);
    be_->scale(out, 1.001f, n);
  }
  void gelu_backward(float* dx, const float* dg, const float* dout, int64_t n) override {
    be_->gelu_backward(dx, dg, dout, n);
  }
  void swiglu_forward(float* o, const float* fc, int rows, int F) override { be_->swiglu_forward(o, fc, rows, F); }
  void swiglu_backward(float* d, const float* fc, const float* dout, int rows, int F) override {
    be_->swiglu_backward(d, fc, dout, rows, F);
  }
  void embedding_forward(float* o, const int32_t* t, const float* wte, const float* wpe, int rows, int T, int C,
                         int vb, int vl) override {
    be_->embedding_forward(o, t, wte, wpe, rows, T, C, vb, vl);
  }
  void embedding_backward(float* dwte, float* dwpe, const float* dout, const int32_t* t, int rows, int T, int C,
                          int vb, int vl) override {
    be_->embedding_backward(dwte, dwpe, dout, t, rows, T, C, vb, vl);
  }
  void xent_row_max(float* m, const float* l, int rows, int Vl, int vb, int v) override {
    be_->xent_row_max(m, l, rows, Vl, vb, v);
  }
  void xent_sum_exp(float* s, float* tl, float* l, const float* m, const int32_t* t, int rows, int Vl, int vb,
                    int v) override {
    be_->xent_sum_exp(s, tl, l, m, t, rows, Vl, vb, v);
  }
  void xent_backward(float* l, const float* s, const int32_t* t, float sc, int rows, int Vl, int vb, int v) override {
    be_->xent_backward(l, s, t, sc, rows, Vl, vb, v);
  }
  void adamw(float* p, const float* g, float* m, float* v, int64_t n, const AdamWStep& st) override {
    be_->adamw(p, g, m, v, n, st);
  }
  double sum_squares(const float* x, int64_t n) override { return be_->sum_squares(x, n); }
  void run_tasks(int n, const std::function<void(int)>& task) override { be_->run_tasks(n, task); }
  double gemm_seconds() const override { return be_->gemm_seconds(); }

 private:
  std::unique_ptr<Backend> be_;
};

// Expectation: the harness flags the GELU case (error ~1e-3 > 1e-5) and only that one.
TEST(CrossBackend, HarnessCatchesAWrongKernel) {
  auto ref = make_cpu_backend(1);
  WrongGelu wrong;
  int failed = 0;
  for (const auto& r : compare_backends(*ref, wrong, 1e-5)) {
    if (r.kernel.rfind("gelu", 0) == 0) {
      EXPECT_FALSE(r.ok) << r.kernel << ": error " << r.error;
      EXPECT_GT(r.error, 5e-4);
    } else {
      EXPECT_TRUE(r.ok) << r.kernel << ": error " << r.error;
    }
    failed += !r.ok;
  }
  EXPECT_EQ(failed, 1);
}

// ---- the CUDA kernels' math on the host --------------------------------------------------------

// Expectation: the online softmax over tiles of 32 gives the two-pass log-sum-exp, and the
// output rescaled tile by tile equals the softmax-weighted sum, within fp32 rounding (1e-6).
TEST(KernelMath, OnlineSoftmaxOverTilesMatchesTwoPass) {
  std::mt19937_64 rng(3);
  const auto s = random_vector(rng, 100, -20, 20);
  const auto v = random_vector(rng, 100);
  double mx = -INFINITY, sum = 0, weighted = 0;
  for (float x : s) mx = std::max(mx, double(x));
  for (size_t j = 0; j < s.size(); ++j) {
    sum += std::exp(s[j] - mx);
    weighted += std::exp(s[j] - mx) * v[j];
  }
  OnlineSoftmax sm;
  float acc = 0;
  for (size_t j0 = 0; j0 < s.size(); j0 += 32) {
    const size_t j1 = std::min(s.size(), j0 + 32);
    float m_tile = -INFINITY;
    for (size_t j = j0; j < j1; ++j) m_tile = std::max(m_tile, s[j]);
    const float m_new = std::max(sm.max, m_tile);
    float block = 0, block_acc = 0;
    for (size_t j = j0; j < j1; ++j) {
      block += std::exp(s[j] - m_new);
      block_acc += std::exp(s[j] - m_new) * v[j];
    }
    acc = acc * sm.rescale(m_new, block) + block_acc;
  }
  EXPECT_NEAR(sm.log_sum_exp(), mx + std::log(sum), 1e-6 * std::fabs(mx + std::log(sum)));
  EXPECT_NEAR(acc / sm.sum, weighted / sum, 1e-6);
}

// The fused kernels' algorithm on the host, loop for loop: forward by tiles of 32 keys with the
// online softmax, keeping lse; backward recomputing p = exp(s - lse), with delta = dout . out.
void fused_attention_host(const std::vector<float>& qkv, const std::vector<float>& dout, const AttentionShape& a,
                          std::vector<float>& out, std::vector<float>& dqkv) {
  const int S = a.qkv_stride(), D = a.D, group = a.Hl / a.KVl;
  const float scale = 1.0f / std::sqrt(float(D));
  out.assign(size_t(a.B) * a.T * a.Hl * D, 0.0f);
  dqkv.assign(qkv.size(), 0.0f);
  std::vector<float> lse(size_t(a.B) * a.Hl * a.T), delta(lse.size());
  auto q_at = [&](int b, int t, int h) { return &qkv[(size_t(b) * a.T + t) * S + size_t(h) * D]; };
  auto k_at = [&](int b, int t, int g) { return &qkv[(size_t(b) * a.T + t) * S + size_t(a.Hl + g) * D]; };
  auto v_at = [&](int b, int t, int g) { return &qkv[(size_t(b) * a.T + t) * S + size_t(a.Hl + a.KVl + g) * D]; };
  auto o_at = [&](std::vector<float>& o, int b, int t, int h) { return &o[(size_t(b) * a.T + t) * a.Hl * D + size_t(h) * D]; };
  auto dot = [&](const float* x, const float* y) {
    float s = 0;
    for (int d = 0; d < D; ++d) s += x[d] * y[d];
    return s;
  };
  for (int b = 0; b < a.B; ++b)
    for (int h = 0; h < a.Hl; ++h)
      for (int t = 0; t < a.T; ++t) {
        const int g = h / group;
        OnlineSoftmax sm;
        std::vector<float> acc(size_t(D), 0.0f);
        for (int j0 = 0; j0 <= t; j0 += 32) {
          float s[32], m_tile = -INFINITY;
          for (int l = 0; l < 32; ++l) {
            const int j = j0 + l;
            s[l] = j <= t ? dot(q_at(b, t, h), k_at(b, j, g)) * scale : -INFINITY;
            m_tile = std::max(m_tile, s[l]);
          }
          const float m_new = std::max(sm.max, m_tile);
          float p[32], block = 0;
          for (int l = 0; l < 32; ++l) block += p[l] = j0 + l <= t ? std::exp(s[l] - m_new) : 0.0f;
          const float corr = sm.rescale(m_new, block);
          for (int d = 0; d < D; ++d) {
            float x = acc[size_t(d)] * corr;
            for (int l = 0; l < 32 && j0 + l <= t; ++l) x += p[l] * v_at(b, j0 + l, g)[d];
            acc[size_t(d)] = x;
          }
        }
        float* o = o_at(out, b, t, h);
        for (int d = 0; d < D; ++d) o[d] = acc[size_t(d)] / sm.sum;
        lse[(size_t(b) * a.Hl + h) * a.T + t] = sm.log_sum_exp();
      }
  std::vector<float> dout_copy = dout;
  for (int b = 0; b < a.B; ++b)
    for (int h = 0; h < a.Hl; ++h)
      for (int t = 0; t < a.T; ++t) {
        const size_t i = (size_t(b) * a.Hl + h) * a.T + t;
        delta[i] = dot(o_at(dout_copy, b, t, h), o_at(out, b, t, h));
        const int g = h / group;
        float* dq = &dqkv[(size_t(b) * a.T + t) * S + size_t(h) * D];
        for (int j = 0; j <= t; ++j) {
          const float p = std::exp(dot(q_at(b, t, h), k_at(b, j, g)) * scale - lse[i]);
          const float dp = dot(o_at(dout_copy, b, t, h), v_at(b, j, g));
          for (int d = 0; d < D; ++d) dq[d] += p * (dp - delta[i]) * k_at(b, j, g)[d] * scale;
        }
      }
  for (int b = 0; b < a.B; ++b)
    for (int g = 0; g < a.KVl; ++g)
      for (int j = 0; j < a.T; ++j) {
        float* dk = &dqkv[(size_t(b) * a.T + j) * S + size_t(a.Hl + g) * D];
        float* dv = &dqkv[(size_t(b) * a.T + j) * S + size_t(a.Hl + a.KVl + g) * D];
        for (int h = g * group; h < (g + 1) * group; ++h)
          for (int t = j; t < a.T; ++t) {
            const size_t i = (size_t(b) * a.Hl + h) * a.T + t;
            const float p = std::exp(dot(q_at(b, t, h), k_at(b, j, g)) * scale - lse[i]);
            const float dp = dot(o_at(dout_copy, b, t, h), v_at(b, j, g));
            for (int d = 0; d < D; ++d) {
              dv[d] += p * o_at(dout_copy, b, t, h)[d];
              dk[d] += p * (dp - delta[i]) * q_at(b, t, h)[d] * scale;
            }
          }
      }
}

// Expectation: the fused algorithm's output and gradients equal the CPU backend's (full softmax
// kept) within 1e-5 of each tensor's scale, for heads = kv heads and for GQA, T = 70 (three
// tiles, the last one partial).
TEST(KernelMath, FusedAttentionAlgorithmMatchesCpuBackend) {
  auto cpu = make_cpu_backend(1);
  for (int kvl : {4, 2}) {
    const AttentionShape s{2, 70, 4, kvl, 16};
    std::mt19937_64 rng(11);
    const int64_t rows = int64_t(s.B) * s.T;
    const auto qkv = random_vector(rng, rows * s.qkv_stride(), -2, 2);
    const auto dout = random_vector(rng, rows * s.Hl * s.D);
    std::vector<float> out, dqkv;
    fused_attention_host(qkv, dout, s, out, dqkv);
    testing::Buffers b(*cpu);
    float* dq = b.up(qkv);
    float* o = b.zeros(rows * s.Hl * s.D);
    float* p = b.zeros(cpu->attention_state_numel(s));
    float* d = b.up(dout);
    float* dx = b.zeros(rows * s.qkv_stride());
    cpu->attention_forward(o, p, dq, s);
    cpu->attention_backward(dx, d, dq, p, s);
    EXPECT_LE(testing::tensor_error(b.down(o, rows * s.Hl * s.D), out), 1e-5) << "KVl " << kvl;
    EXPECT_LE(testing::tensor_error(b.down(dx, rows * s.qkv_stride()), dqkv), 1e-5) << "KVl " << kvl;
  }
}

// Expectation: GELU, SwiGLU (both gradients), AdamW and RoPE as the kernels compute them, per
// element on the host, equal the CPU backend within 1e-5 relative (the CPU's exp is a polynomial,
// the kernels' the library's: both within a few ulp).
TEST(KernelMath, ElementwiseFunctionsMatchCpuBackend) {
  auto cpu = make_cpu_backend(1);
  testing::Buffers b(*cpu);
  std::mt19937_64 rng(5);
  const int64_t n = 2000;
  const auto x = random_vector(rng, n, -6, 6);
  float* xd = b.up(x);
  float* out = b.zeros(n);
  cpu->gelu_forward(out, xd, n);
  std::vector<float> y(static_cast<size_t>(n)), dy(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) gelu_tanh(x[size_t(i)], &y[size_t(i)], &dy[size_t(i)]);
  EXPECT_LE(testing::tensor_error(b.down(out, n), y), 1e-5);
  EXPECT_LE(testing::tensor_error(b.down(xd, n), dy), 1e-5);

  const int rows = 10, F = 100;
  const auto fc = random_vector(rng, int64_t(rows) * 2 * F, -6, 6);
  const auto g = random_vector(rng, int64_t(rows) * F);
  float* fcd = b.up(fc);
  float* gd = b.up(g);
  float* sw = b.zeros(int64_t(rows) * F);
  float* dfc = b.zeros(int64_t(rows) * 2 * F);
  cpu->swiglu_forward(sw, fcd, rows, F);
  cpu->swiglu_backward(dfc, fcd, gd, rows, F);
  std::vector<float> sw_h(size_t(rows) * F), dfc_h(size_t(rows) * 2 * F);
  for (int r = 0; r < rows; ++r)
    for (int j = 0; j < F; ++j) {
      const size_t gi = size_t(r) * 2 * F + j, ui = gi + F;
      sw_h[size_t(r) * F + j] = swiglu(fc[gi], fc[ui]);
      swiglu_backward_1(fc[gi], fc[ui], g[size_t(r) * F + j], &dfc_h[gi], &dfc_h[ui]);
    }
  EXPECT_LE(testing::tensor_error(b.down(sw, int64_t(rows) * F), sw_h), 1e-5);
  EXPECT_LE(testing::tensor_error(b.down(dfc, int64_t(rows) * 2 * F), dfc_h), 1e-5);

  auto p = random_vector(rng, n), gr = random_vector(rng, n), m = random_vector(rng, n, -0.1f, 0.1f),
       v = random_vector(rng, n, 0, 0.1f);
  float *pd = b.up(p), *grd = b.up(gr), *md = b.up(m), *vd = b.up(v);
  AdamWStep st;
  st.lr = 3e-3f;
  st.weight_decay = 0.1f;
  st.bias_correction1 = 0.1f;
  st.bias_correction2 = 0.05f;
  st.grad_scale = 0.7f;
  cpu->adamw(pd, grd, md, vd, n, st);
  for (int64_t i = 0; i < n; ++i) adamw_1(p[size_t(i)], gr[size_t(i)], m[size_t(i)], v[size_t(i)], st);
  EXPECT_LE(testing::tensor_error(b.down(pd, n), p), 1e-6);
  EXPECT_LE(testing::tensor_error(b.down(md, n), m), 1e-6);
  EXPECT_LE(testing::tensor_error(b.down(vd, n), v), 1e-6);

  const AttentionShape s{1, 9, 2, 1, 8};
  const auto qkv = random_vector(rng, int64_t(s.T) * s.qkv_stride());
  float* qd = b.up(qkv);
  cpu->rope(qd, s, false);
  std::vector<float> cs(size_t(s.T) * 4), sn(cs.size()), r = qkv;
  rope_tables(s.T, s.D, cs.data(), sn.data());
  for (int t = 0; t < s.T; ++t)
    for (int h = 0; h < s.Hl + s.KVl; ++h)
      for (int i = 0; i < 4; ++i) {
        float* row = &r[size_t(t) * s.qkv_stride() + size_t(h) * s.D];
        rope_pair(row[i], row[i + 4], cs[size_t(t) * 4 + i], sn[size_t(t) * 4 + i]);
      }
  EXPECT_LE(testing::tensor_error(b.down(qd, int64_t(s.T) * s.qkv_stride()), r), 1e-6);
}

}  // namespace
}  // namespace capplan::rt
