// The cross-backend harness (after ggml's test-backend-ops): every kernel of backend.h run on the
// same random inputs on a reference backend and on a backend under test, outputs compared with a
// stated tolerance. The error of one output is max |test - ref| / max(max |ref|, 1e-6): relative
// to the tensor's scale, so values near zero in a large tensor do not blow it up.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "train/backend.h"

namespace capplan::rt::testing {

struct KernelResult {
  std::string kernel;  // "matmul NT", "attention_backward", ...
  double error = 0;    // as above
  bool ok = false;
};

inline double tensor_error(const std::vector<float>& ref, const std::vector<float>& got) {
  double scale = 0, diff = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    scale = std::max(scale, double(std::fabs(ref[i])));
    const double d = std::fabs(double(got[i]) - double(ref[i]));
    diff = std::isnan(d) ? INFINITY : std::max(diff, d);
  }
  return diff / std::max(scale, 1e-6);
}

// Device buffers of one backend, freed at the end of the scope.
class Buffers {
 public:
  explicit Buffers(Backend& be) : be_(be) {}
  ~Buffers() {
    for (float* p : owned_) be_.release(p);
  }
  float* up(const std::vector<float>& host) {
    float* p = be_.allocate(int64_t(host.size()));
    be_.from_host(p, host.data(), int64_t(host.size()));
    owned_.push_back(p);
    return p;
  }
  float* zeros(int64_t n) {
    owned_.push_back(be_.allocate(n));
    return owned_.back();
  }
  std::vector<float> down(const float* p, int64_t n) {
    std::vector<float> h(static_cast<size_t>(n));
    be_.to_host(h.data(), p, n);
    return h;
  }

 private:
  Backend& be_;
  std::vector<float*> owned_;
};

inline std::vector<float> random_vector(std::mt19937_64& rng, int64_t n, float lo = -1, float hi = 1) {
  std::uniform_real_distribution<float> u(lo, hi);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = u(rng);
  return v;
}

// One kernel case: `run` gets a backend, uploads its inputs (the same for both backends: it
// draws them from a generator seeded the same way), runs the kernel and returns the outputs.
using KernelCase = std::function<std::vector<std::vector<float>>(Backend&, std::mt19937_64&)>;

struct NamedCase {
  std::string name;
  KernelCase run;
};

// The cases: shapes small enough for the CPU, odd sizes on purpose (rows not a multiple of the
// GPU's tiles, a head dim that is not a multiple of 32, vocab padding).
inline std::vector<NamedCase> kernel_cases() {
  std::vector<NamedCase> c;
  const int M = 37, N = 29, K = 45;
  for (int t = 0; t < 4; ++t) {
    const bool ta = t & 1, tb = t & 2;
    c.push_back({std::string("matmul ") + (ta ? "T" : "N") + (tb ? "T" : "N") + " accumulate",
                 [=](Backend& be, std::mt19937_64& rng) {
                   Buffers b(be);
                   float* a = b.up(random_vector(rng, int64_t(M) * K));
                   float* w = b.up(random_vector(rng, int64_t(K) * N));
                   float* out = b.up(random_vector(rng, int64_t(M) * N));
                   be.matmul(out, a, w, M, N, K, ta, tb, true);
                   return std::vector<std::vector<float>>{b.down(out, int64_t(M) * N)};
                 }});
  }
  c.push_back({"add, scale, fill", [](Backend& be, std::mt19937_64& rng) {
                 Buffers b(be);
                 const int64_t n = 1000;
                 float* y = b.up(random_vector(rng, n));
                 float* x = b.up(random_vector(rng, n));
                 float* z = b.zeros(n);
                 be.add(y, x, n);
                 be.scale(y, 0.37f, n);
                 be.fill(z, 2.5f, n - 3);
                 be.copy(x, y, n / 2);
                 return std::vector<std::vector<float>>{b.down(y, n), b.down(z, n), b.down(x, n)};
               }});
  for (NormKind kind : {NormKind::LayerNorm, NormKind::RmsNorm}) {
    const bool ln = kind == NormKind::LayerNorm;
    c.push_back({ln ? "layernorm forward + backward" : "rmsnorm forward + backward",
                 [=](Backend& be, std::mt19937_64& rng) {
                   Buffers b(be);
                   const int rows = 300, C = 72;  // 300 rows: more than one chunk of the GPU's dw sums
                   float* x = b.up(random_vector(rng, int64_t(rows) * C, -2, 3));
                   float* w = b.up(random_vector(rng, C, 0.5f, 1.5f));
                   float* bias = b.up(random_vector(rng, C));
                   float* out = b.zeros(int64_t(rows) * C);
                   float* mean = b.zeros(rows);
                   float* rstd = b.zeros(rows);
                   be.norm_forward(kind, out, mean, rstd, x, w, bias, rows, C);
                   float* dout = b.up(random_vector(rng, int64_t(rows) * C));
                   float* dx = b.up(random_vector(rng, int64_t(rows) * C));
                   float* dw = b.up(random_vector(rng, C));
                   float* db = b.up(random_vector(rng, C));
                   be.norm_backward(kind, dx, dw, ln ? db : nullptr, dout, x, w, mean, rstd, rows, C);
                   return std::vector<std::vector<float>>{b.down(out, int64_t(rows) * C), b.down(rstd, rows),
                                                          b.down(dx, int64_t(rows) * C), b.down(dw, C),
                                                          b.down(db, C)};
                 }});
  }
  // Attention: GPT-2 style (heads = kv heads) and GQA, T not a multiple of 32 or 4; D = 24.
  for (int kvl : {4, 2}) {
    c.push_back({"attention forward + backward (Hl 4, KVl " + std::to_string(kvl) + ")",
                 [=](Backend& be, std::mt19937_64& rng) {
                   Buffers b(be);
                   const AttentionShape s{2, 45, 4, kvl, 24};
                   const int64_t rows = int64_t(s.B) * s.T, S = s.qkv_stride();
                   float* qkv = b.up(random_vector(rng, rows * S, -2, 2));
                   float* out = b.zeros(rows * s.Hl * s.D);
                   float* probs = b.zeros(be.attention_state_numel(s));
                   be.attention_forward(out, probs, qkv, s);
                   float* dout = b.up(random_vector(rng, rows * s.Hl * s.D));
                   float* dqkv = b.up(random_vector(rng, rows * S));  // overwritten
                   be.attention_backward(dqkv, dout, qkv, probs, s);
                   return std::vector<std::vector<float>>{b.down(out, rows * s.Hl * s.D), b.down(dqkv, rows * S)};
                 }});
  }
  c.push_back({"rope forward + inverse", [](Backend& be, std::mt19937_64& rng) {
                 Buffers b(be);
                 const AttentionShape s{2, 19, 4, 2, 16};
                 const int64_t n = int64_t(s.B) * s.T * s.qkv_stride();
                 float* qkv = b.up(random_vector(rng, n));
                 be.rope(qkv, s, false);
                 const auto fwd = b.down(qkv, n);
                 be.rope(qkv, s, true);
                 return std::vector<std::vector<float>>{fwd, b.down(qkv, n)};
               }});
  c.push_back({"gelu forward + backward", [](Backend& be, std::mt19937_64& rng) {
                 Buffers b(be);
                 const int64_t n = 777;
                 float* x = b.up(random_vector(rng, n, -5, 5));
                 float* out = b.zeros(n);
                 be.gelu_forward(out, x, n);
                 float* dout = b.up(random_vector(rng, n));
                 float* dx = b.zeros(n);
                 be.gelu_backward(dx, x, dout, n);
                 return std::vector<std::vector<float>>{b.down(out, n), b.down(x, n), b.down(dx, n)};
               }});
  c.push_back({"swiglu forward + backward", [](Backend& be, std::mt19937_64& rng) {
                 Buffers b(be);
                 const int rows = 13, F = 40;
                 float* fc = b.up(random_vector(rng, int64_t(rows) * 2 * F, -4, 4));
                 float* out = b.zeros(int64_t(rows) * F);
                 be.swiglu_forward(out, fc, rows, F);
                 float* dout = b.up(random_vector(rng, int64_t(rows) * F));
                 float* dfc = b.zeros(int64_t(rows) * 2 * F);
                 be.swiglu_backward(dfc, fc, dout, rows, F);
                 return std::vector<std::vector<float>>{b.down(out, int64_t(rows) * F),
                                                        b.down(dfc, int64_t(rows) * 2 * F)};
               }});
  c.push_back({"embedding forward + backward (vocab slice)", [](Backend& be, std::mt19937_64& rng) {
                 Buffers b(be);
                 const int rows = 40, T = 8, C = 24, vocab_begin = 10, vocab_local = 20;
                 std::vector<int32_t> tokens(static_cast<size_t>(rows));
                 std::uniform_int_distribution<int> tok(0, 39);  // half of them off this slice
                 for (int32_t& t : tokens) t = tok(rng);
                 tokens[1] = tokens[7] = tokens[30] = 15;  // repeats add in order
                 float* wte = b.up(random_vector(rng, int64_t(vocab_local) * C));
                 float* wpe = b.up(random_vector(rng, int64_t(T) * C));
                 float* out = b.zeros(int64_t(rows) * C);
                 be.embedding_forward(out, tokens.data(), wte, wpe, rows, T, C, vocab_begin, vocab_local);
                 float* dout = b.up(random_vector(rng, int64_t(rows) * C));
                 float* dwte = b.up(random_vector(rng, int64_t(vocab_local) * C));
                 float* dwpe = b.up(random_vector(rng, int64_t(T) * C));
                 be.embedding_backward(dwte, dwpe, dout, tokens.data(), rows, T, C, vocab_begin, vocab_local);
                 return std::vector<std::vector<float>>{b.down(out, int64_t(rows) * C),
                                                        b.down(dwte, int64_t(vocab_local) * C),
                                                        b.down(dwpe, int64_t(T) * C)};
               }});
  c.push_back({"cross-entropy max, sum of exp, backward (padded vocab slice)", [](Backend& be, std::mt19937_64& rng) {
                 Buffers b(be);
                 const int rows = 11, Vl = 50, vocab_begin = 50, vocab = 97;  // 47 valid, 3 padding
                 std::vector<int32_t> targets(static_cast<size_t>(rows));
                 std::uniform_int_distribution<int> tok(0, vocab - 1);
                 for (int32_t& t : targets) t = tok(rng);
                 float* logits = b.up(random_vector(rng, int64_t(rows) * Vl, -6, 6));
                 float* mx = b.zeros(rows);
                 float* sums = b.zeros(2 * rows);
                 be.xent_row_max(mx, logits, rows, Vl, vocab_begin, vocab);
                 be.xent_sum_exp(sums, sums + rows, logits, mx, targets.data(), rows, Vl, vocab_begin, vocab);
                 const auto exps = b.down(logits, int64_t(rows) * Vl);
                 be.xent_backward(logits, sums, targets.data(), 0.125f, rows, Vl, vocab_begin, vocab);
                 return std::vector<std::vector<float>>{b.down(mx, rows), b.down(sums, 2 * rows), exps,
                                                        b.down(logits, int64_t(rows) * Vl)};
               }});
  c.push_back({"adamw and sum of squares", [](Backend& be, std::mt19937_64& rng) {
                 Buffers b(be);
                 const int64_t n = 5000;
                 float* p = b.up(random_vector(rng, n));
                 float* g = b.up(random_vector(rng, n));
                 float* m = b.up(random_vector(rng, n, -0.1f, 0.1f));
                 float* v = b.up(random_vector(rng, n, 0.0f, 0.1f));
                 AdamWStep st;
                 st.lr = 1e-2f;
                 st.weight_decay = 0.1f;
                 st.bias_correction1 = 0.19f;
                 st.bias_correction2 = 0.0975f;
                 st.grad_scale = 0.5f;
                 be.adamw(p, g, m, v, n, st);
                 const double ss = be.sum_squares(g, n);
                 return std::vector<std::vector<float>>{b.down(p, n), b.down(m, n), b.down(v, n), {float(ss)}};
               }});
  return c;
}

// Every case on both backends with the same seed; one result per case (the worst output).
inline std::vector<KernelResult> compare_backends(Backend& ref, Backend& test, double tolerance,
                                                  uint64_t seed = 7) {
  std::vector<KernelResult> out;
  for (const NamedCase& k : kernel_cases()) {
    std::mt19937_64 r1(seed), r2(seed);
    const auto a = k.run(ref, r1);
    const auto b = k.run(test, r2);
    KernelResult r{k.name, 0, true};
    for (size_t i = 0; i < a.size(); ++i) r.error = std::max(r.error, tensor_error(a[i], b[i]));
    r.ok = r.error <= tolerance;
    out.push_back(r);
  }
  return out;
}

}  // namespace capplan::rt::testing
