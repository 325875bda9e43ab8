// CPU backend: fp32 kernels over a ThreadPool. Large GEMMs are split by output rows over the pool,
// each block one single-threaded cblas_sgemm call (OpenBLAS is told to use one thread, so no
// second thread pool competes for the cores); attention runs one task per (batch, head) with
// small GEMMs inside. Every reduction has a fixed order for a given thread count.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <mutex>
#include <numeric>
#include <stdexcept>
#include <vector>

#include "train/backend.h"
#include "train/thread_pool.h"

#ifdef CAPPLAN_HAVE_CBLAS
#include <cblas.h>
#endif

namespace capplan::rt {
namespace {

// Row-major C[M,N] = alpha * op(A) op(B) + beta * C with leading dimensions, in the calling thread.
void gemm_serial(bool ta, bool tb, int M, int N, int K, float alpha, const float* A, int lda,
                 const float* B, int ldb, float beta, float* C, int ldc) {
  if (M <= 0 || N <= 0) return;
#ifdef CAPPLAN_HAVE_CBLAS
  // OpenBLAS's OpenMP build keeps its thread count per calling thread (an OpenMP ICV), so each
  // pool worker says "one thread" once; otherwise every worker's GEMM would start its own team
  // and oversubscribe the cores. The pthread build keeps one global count: the call is harmless.
  static thread_local const bool single_threaded = (openblas_set_num_threads(1), true);
  (void)single_threaded;
  // OpenBLAS implements beta = 0 as a separate pass that zeroes C before the kernel adds A B
  // to it; its generic loop is slower than memset (bench_cpu_backend's BM_SgemmBetaZero: per
  // call, -1 % to +8 % on the step's large shapes, +16 % on attention's 64-row blocks). Zeroing
  // here and passing beta = 1 skips that pass with a bitwise-identical result.
  if (beta == 0.0f) {
    for (int i = 0; i < M; ++i) std::memset(C + int64_t(i) * ldc, 0, sizeof(float) * size_t(N));
    beta = 1.0f;
  }
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, M, N,
              K, alpha, A, lda, B, ldb, beta, C, ldc);
#else
  for (int i = 0; i < M; ++i) {
    float* c = C + int64_t(i) * ldc;
    for (int j = 0; j < N; ++j) c[j] = beta == 0 ? 0.0f : c[j] * beta;
    for (int k = 0; k < K; ++k) {
      const float a = alpha * (ta ? A[int64_t(k) * lda + i] : A[int64_t(i) * lda + k]);
      if (tb) {
        for (int j = 0; j < N; ++j) c[j] += a * B[int64_t(j) * ldb + k];
      } else {
        const float* b = B + int64_t(k) * ldb;
        for (int j = 0; j < N; ++j) c[j] += a * b[j];
      }
    }
  }
#endif
}

constexpr float kNormEps = 1e-5f;
constexpr int kCausalBlock = 64;  // query rows per block in causal attention
constexpr float kGeluK = 0.7978845608028654f;  // sqrt(2 / pi)

// Element-wise kernels are compiled twice (x86-64-v3: AVX2 + FMA, and baseline x86-64) and
// picked at load time.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define CAPPLAN_CLONES __attribute__((target_clones("arch=x86-64-v3", "default")))
#else
#define CAPPLAN_CLONES
#endif

// Reductions keep 8 partial results (element j goes to lane j % 8) combined pairwise at the end:
// a fixed order, so the result does not depend on the instruction set, and the adds are
// independent (a single running sum is a chain of dependent adds, ~4 cycles each). Written with
// GCC vector types: one 8-lane vector is a ymm register on x86-64-v3 and two xmm otherwise.
#define CAPPLAN_INLINE inline __attribute__((always_inline))
typedef float f32x8 __attribute__((vector_size(32)));
typedef double f64x4 __attribute__((vector_size(32)));

CAPPLAN_INLINE f32x8 load8(const float* p) {
  f32x8 v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}
CAPPLAN_INLINE f32x8 splat8(float x) { return f32x8{x, x, x, x, x, x, x, x}; }
CAPPLAN_INLINE float combine8(f32x8 a) {
  return ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7]));
}

CAPPLAN_INLINE float sum_of(const float* x, int n) {
  f32x8 acc = {};
  int j = 0;
  for (; j + 8 <= n; j += 8) acc += load8(x + j);
  for (; j < n; ++j) acc[j % 8] += x[j];
  return combine8(acc);
}

// sum (x[j] - mu)^2
CAPPLAN_INLINE float sum_sq_dev(const float* x, float mu, int n) {
  f32x8 acc = {};
  const f32x8 m = splat8(mu);
  int j = 0;
  for (; j + 8 <= n; j += 8) {
    const f32x8 d = load8(x + j) - m;
    acc += d * d;
  }
  for (; j < n; ++j) acc[j % 8] += (x[j] - mu) * (x[j] - mu);
  return combine8(acc);
}

CAPPLAN_INLINE float dot_of(const float* a, const float* b, int n) {
  f32x8 acc = {};
  int j = 0;
  for (; j + 8 <= n; j += 8) acc += load8(a + j) * load8(b + j);
  for (; j < n; ++j) acc[j % 8] += a[j] * b[j];
  return combine8(acc);
}

// exp(x) for x in float range, branch-free so loops over it vectorise: Cephes expf (Moshier 1984)
// range reduction x = n ln2 + r with ln2 split in two parts, degree-6 polynomial on
// |r| <= ln2 / 2 (relative error ~2e-7, vs ~1e-7 for libm), 2^n built in the exponent bits.
// Inputs are clamped to [-87.3, 88.3], so exp(-inf) gives ~1e-38 instead of 0.
inline float fast_exp(float x) {
  x = x < -87.3f ? -87.3f : x;
  x = x > 88.3f ? 88.3f : x;
  const float n = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;  // round to nearest
  const float r = x - n * 0.693359375f + n * 2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  const float y = p * r * r + r + 1.0f;
  int32_t bits = (int32_t(n) + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof(scale));
  return y * scale;
}

// tanh(u) = 1 - 2 / (exp(2u) + 1): exact limits +-1, absolute error ~1e-7 near 0.
inline float fast_tanh(float u) { return 1.0f - 2.0f / (fast_exp(2.0f * u) + 1.0f); }

// out = gelu(x), x = gelu'(x): one tanh for both, so the backward is a product.
CAPPLAN_CLONES void gelu_fwd_range(float* __restrict out, float* __restrict x, int64_t b,
                                   int64_t e) {
  for (int64_t i = b; i < e; ++i) {
    const float v = x[i];
    const float th = fast_tanh(kGeluK * (v + 0.044715f * v * v * v));
    out[i] = 0.5f * v * (1.0f + th);
    x[i] = 0.5f * (1.0f + th) +
           0.5f * v * (1.0f - th * th) * kGeluK * (1.0f + 3.0f * 0.044715f * v * v);
  }
}

CAPPLAN_CLONES void gelu_bwd_range(float* __restrict dx, const float* __restrict dgelu,
                                   const float* __restrict dout, int64_t b, int64_t e) {
  for (int64_t i = b; i < e; ++i) dx[i] = dgelu[i] * dout[i];
}

CAPPLAN_CLONES void swiglu_fwd_row(float* out, const float* gate, const float* up, int F) {
  for (int j = 0; j < F; ++j) {
    const float sg = 1.0f / (1.0f + fast_exp(-gate[j]));
    out[j] = gate[j] * sg * up[j];
  }
}

CAPPLAN_CLONES void swiglu_bwd_row(float* dgate, float* dup, const float* gate, const float* up,
                                   const float* dy, int F) {
  for (int j = 0; j < F; ++j) {
    const float g = gate[j], sg = 1.0f / (1.0f + fast_exp(-g));
    dup[j] = dy[j] * g * sg;
    dgate[j] = dy[j] * up[j] * sg * (1.0f + g * (1.0f - sg));
  }
}

// row[j] = exp(row[j] - mx) for j < n; returns the sum (8 partial sums, fixed order).
CAPPLAN_CLONES float exp_shift_sum(float* row, float mx, int n) {
  for (int j = 0; j < n; ++j) row[j] = fast_exp(row[j] - mx);
  return sum_of(row, n);
}

// Largest element, NaNs skipped (a NaN logit still makes the exp-sum, hence the loss, NaN).
CAPPLAN_CLONES float max_of(const float* row, int n) {
  const float inf = std::numeric_limits<float>::infinity();
  f32x8 acc = splat8(-inf);
  int j = 0;
  for (; j + 8 <= n; j += 8) {
    const f32x8 v = load8(row + j);
    acc = v > acc ? v : acc;
  }
  for (; j < n; ++j) acc[j % 8] = row[j] > acc[j % 8] ? row[j] : acc[j % 8];
  float mx = acc[0];
  for (int k = 1; k < 8; ++k) mx = acc[k] > mx ? acc[k] : mx;
  return mx;
}

// One row of LayerNorm (ln) or RMSNorm: statistics, then out = xhat * w (+ b).
CAPPLAN_CLONES void norm_fwd_row(bool ln, float* o, float* mean, float* rstd, const float* x,
                                 const float* w, const float* bias, int C) {
  const float mu = ln ? sum_of(x, C) / C : 0.0f;
  const float rs = 1.0f / std::sqrt(sum_sq_dev(x, mu, C) / C + kNormEps);
  if (ln) {
    for (int c = 0; c < C; ++c) o[c] = (x[c] - mu) * rs * w[c] + bias[c];
    if (mean) *mean = mu;
  } else {
    for (int c = 0; c < C; ++c) o[c] = x[c] * rs * w[c];
  }
  *rstd = rs;
}

// d += d/dx of one row: rs * (dy w - mean(dy w) - xhat * mean(dy w xhat)); the first mean is
// dropped for RMSNorm.
CAPPLAN_CLONES void norm_bwd_row(bool ln, float* __restrict d, const float* __restrict dy,
                                 const float* __restrict x, const float* __restrict w, float mu,
                                 float rs, int C) {
  f32x8 a1 = {}, a2 = {};
  const f32x8 m = splat8(mu), r = splat8(rs);
  int c = 0;
  for (; c + 8 <= C; c += 8) {
    const f32x8 dxhat = load8(dy + c) * load8(w + c);
    a1 += dxhat;
    a2 += dxhat * ((load8(x + c) - m) * r);
  }
  for (; c < C; ++c) {
    const float dxhat = dy[c] * w[c];
    a1[c % 8] += dxhat;
    a2[c % 8] += dxhat * ((x[c] - mu) * rs);
  }
  const float m1 = ln ? combine8(a1) / C : 0.0f, m2 = combine8(a2) / C;
  for (c = 0; c < C; ++c) d[c] += rs * (dy[c] * w[c] - m1 - (x[c] - mu) * rs * m2);
}

// dw[c] += dy xhat, db[c] += dy for columns [cb, ce) of one row.
CAPPLAN_CLONES void norm_param_grad_row(bool ln, float* __restrict dw, float* __restrict db,
                                        const float* __restrict dy, const float* __restrict x,
                                        float mu, float rs, int cb, int ce) {
  for (int c = cb; c < ce; ++c) dw[c] += dy[c] * (x[c] - mu) * rs;
  if (ln)
    for (int c = cb; c < ce; ++c) db[c] += dy[c];
}

// sum of x^2 in double, 8 partial sums (lanes 0-3 in lo, 4-7 in hi).
CAPPLAN_CLONES double sum_sq_double(const float* x, int64_t b, int64_t e) {
  f64x4 lo = {}, hi = {};
  int64_t i = b;
  for (; i + 8 <= e; i += 8) {
    const f32x8 v = load8(x + i);
    const f64x4 a = __builtin_convertvector(__builtin_shufflevector(v, v, 0, 1, 2, 3), f64x4);
    const f64x4 c = __builtin_convertvector(__builtin_shufflevector(v, v, 4, 5, 6, 7), f64x4);
    lo += a * a;
    hi += c * c;
  }
  for (; i < e; ++i) {
    const int k = int((i - b) % 8);
    if (k < 4)
      lo[k] += double(x[i]) * double(x[i]);
    else
      hi[k - 4] += double(x[i]) * double(x[i]);
  }
  return ((lo[0] + lo[1]) + (lo[2] + lo[3])) + ((hi[0] + hi[1]) + (hi[2] + hi[3]));
}

// Softmax backward of one causal row in place: d = p * (d - sum(p d)) over [0, n).
CAPPLAN_CLONES void softmax_bwd_row(float* d, const float* p, int n) {
  const float dot = dot_of(p, d, n);
  for (int u = 0; u < n; ++u) d[u] = p[u] * (d[u] - dot);
}

CAPPLAN_CLONES void scale_range(float* row, float s, int n) {
  for (int j = 0; j < n; ++j) row[j] *= s;
}

CAPPLAN_CLONES void adamw_range(float* param, const float* grad, float* m, float* v, int64_t b,
                                int64_t e, float lr, float beta1, float beta2, float eps, float wd,
                                float bc1, float bc2, float gs) {
  for (int64_t i = b; i < e; ++i) {
    const float g = grad[i] * gs;
    m[i] = beta1 * m[i] + (1.0f - beta1) * g;
    v[i] = beta2 * v[i] + (1.0f - beta2) * g * g;
    const float mhat = m[i] / bc1, vhat = v[i] / bc2;
    param[i] -= lr * (mhat / (std::sqrt(vhat) + eps) + wd * param[i]);
  }
}

class CpuBackend final : public Backend {
 public:
  explicit CpuBackend(int threads) : pool_(threads) {
#ifdef CAPPLAN_HAVE_CBLAS
    openblas_set_num_threads(1);
#endif
  }
  std::string name() const override { return "cpu"; }
  int threads() const override { return pool_.size(); }

  float* allocate(int64_t n) override {
    const size_t bytes = ((size_t(std::max<int64_t>(n, 1)) * sizeof(float) + 63) / 64) * 64;
    float* p = static_cast<float*>(std::aligned_alloc(64, bytes));
    if (p) std::memset(p, 0, bytes);
    return p;
  }
  void release(float* p) override { std::free(p); }
  void fill(float* p, float value, int64_t n) override {
    pool_.parallel_for(n, [&](int64_t b, int64_t e, int) { std::fill(p + b, p + e, value); });
  }
  void copy(float* dst, const float* src, int64_t n) override {
    if (n > 0) std::memcpy(dst, src, size_t(n) * sizeof(float));
  }
  void to_host(float* host, const float* src, int64_t n) override { copy(host, src, n); }
  void from_host(float* dst, const float* host, int64_t n) override { copy(dst, host, n); }

  void matmul(float* c, const float* a, const float* b, int M, int N, int K, bool ta, bool tb,
              bool accumulate) override {
    const int lda = ta ? M : K;
    const int ldb = tb ? K : N;
    const float beta = accumulate ? 1.0f : 0.0f;
    const auto t0 = std::chrono::steady_clock::now();
    // Blocks of whole output rows; at least 16 rows so tiny GEMMs stay on one thread.
    const int64_t blocks = std::min<int64_t>(pool_.size(), std::max(1, M / 16));
    pool_.parallel_for(blocks, [&](int64_t bb, int64_t be, int) {
      for (int64_t blk = bb; blk < be; ++blk) {
        const int64_t m0 = M * blk / blocks, m1 = M * (blk + 1) / blocks;
        const float* ap = ta ? a + m0 : a + m0 * K;
        gemm_serial(ta, tb, int(m1 - m0), N, K, 1.0f, ap, lda, b, ldb, beta, c + m0 * N, N);
      }
    });
    gemm_s_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  void add(float* y, const float* x, int64_t n) override {
    pool_.parallel_for(n, [&](int64_t b, int64_t e, int) {
      for (int64_t i = b; i < e; ++i) y[i] += x[i];
    });
  }
  void scale(float* y, float s, int64_t n) override {
    pool_.parallel_for(n, [&](int64_t b, int64_t e, int) {
      for (int64_t i = b; i < e; ++i) y[i] *= s;
    });
  }

  void norm_forward(NormKind kind, float* out, float* mean, float* rstd, const float* x,
                    const float* w, const float* bias, int rows, int C) override {
    pool_.parallel_for(rows, [&](int64_t rb, int64_t re, int) {
      for (int64_t r = rb; r < re; ++r)
        norm_fwd_row(kind == NormKind::LayerNorm, out + r * C, mean ? mean + r : nullptr,
                     rstd + r, x + r * C, w, bias, C);
    });
  }

  void norm_backward(NormKind kind, float* dx, float* dw, float* db, const float* dout,
                     const float* x, const float* w, const float* mean, const float* rstd,
                     int rows, int C) override {
    const bool ln = kind == NormKind::LayerNorm;
    pool_.parallel_for(rows, [&](int64_t rb, int64_t re, int) {
      for (int64_t r = rb; r < re; ++r)
        norm_bwd_row(ln, dx + r * C, dout + r * C, x + r * C, w, ln ? mean[r] : 0.0f, rstd[r],
                     C);
    });
    pool_.parallel_for(C, [&](int64_t cb, int64_t ce, int) {
      for (int64_t r = 0; r < rows; ++r)
        norm_param_grad_row(ln, dw, db, dout + r * C, x + r * C, ln ? mean[r] : 0.0f, rstd[r],
                            int(cb), int(ce));
    });
  }

  void attention_forward(float* out, float* probs, const float* qkv,
                         const AttentionShape& s) override {
    const int S = s.qkv_stride(), T = s.T, D = s.D, group = s.Hl / s.KVl;
    const float sc = 1.0f / std::sqrt(float(D));
    pool_.parallel_for(int64_t(s.B) * s.Hl, [&](int64_t ib, int64_t ie, int) {
      for (int64_t i = ib; i < ie; ++i) {
        const int64_t b = i / s.Hl;
        const int h = int(i % s.Hl), g = h / group;
        const float* base = qkv + b * T * S;
        const float* q = base + h * D;
        const float* k = base + (s.Hl + g) * D;
        const float* v = base + (s.Hl + s.KVl + g) * D;
        float* p = probs + i * T * T;
        // Blocks of kCausalBlock query rows only see keys [0, t1): the masked upper triangle is
        // skipped, ~(1 + kCausalBlock / T) / 2 of the full T x T work.
        for (int t0 = 0; t0 < T; t0 += kCausalBlock) {
          const int t1 = std::min(T, t0 + kCausalBlock), rows = t1 - t0;
          float* pb = p + int64_t(t0) * T;
          gemm_serial(false, true, rows, t1, D, sc, q + int64_t(t0) * S, S, k, S, 0.0f, pb, T);
          for (int t = t0; t < t1; ++t) {
            float* row = p + int64_t(t) * T;
            const float sum = exp_shift_sum(row, max_of(row, t + 1), t + 1);
            scale_range(row, 1.0f / sum, t + 1);
            std::fill(row + t + 1, row + T, 0.0f);
          }
          gemm_serial(false, false, rows, D, t1, 1.0f, pb, T, v, S, 0.0f,
                      out + (b * T + t0) * s.Hl * D + h * D, s.Hl * D);
        }
      }
    });
  }

  void attention_backward(float* dqkv, const float* dout, const float* qkv, const float* probs,
                          const AttentionShape& s) override {
    const int S = s.qkv_stride(), T = s.T, D = s.D, group = s.Hl / s.KVl;
    const float sc = 1.0f / std::sqrt(float(D));
    float* scratch = block_scratch(size_t(T) * T);
    pool_.parallel_for(int64_t(s.B) * s.KVl, [&](int64_t ib, int64_t ie, int thread) {
      float* dp = scratch + size_t(thread) * T * T;
      for (int64_t i = ib; i < ie; ++i) {
        const int64_t b = i / s.KVl;
        const int g = int(i % s.KVl);
        const float* base = qkv + b * T * S;
        float* dbase = dqkv + b * T * S;
        const float* k = base + (s.Hl + g) * D;
        const float* v = base + (s.Hl + s.KVl + g) * D;
        float* dk = dbase + (s.Hl + g) * D;
        float* dv = dbase + (s.Hl + s.KVl + g) * D;
        for (int t = 0; t < T; ++t) {
          std::fill(dk + int64_t(t) * S, dk + int64_t(t) * S + D, 0.0f);
          std::fill(dv + int64_t(t) * S, dv + int64_t(t) * S + D, 0.0f);
        }
        for (int h = g * group; h < (g + 1) * group; ++h) {
          const float* q = base + h * D;
          float* dq = dbase + h * D;
          const float* p = probs + (b * s.Hl + h) * T * T;
          const float* dO = dout + b * T * s.Hl * D + h * D;
          const int ldo = s.Hl * D;
          for (int t0 = 0; t0 < T; t0 += kCausalBlock) {  // query rows [t0, t1), keys [0, t1)
            const int t1 = std::min(T, t0 + kCausalBlock), rows = t1 - t0;
            const float* pb = p + int64_t(t0) * T;
            float* db = dp + int64_t(t0) * T;
            const float* dOb = dO + int64_t(t0) * ldo;
            gemm_serial(false, true, rows, t1, D, 1.0f, dOb, ldo, v, S, 0.0f, db, T);  // dP = dO V^T
            gemm_serial(true, false, t1, D, rows, 1.0f, pb, T, dOb, ldo, 1.0f, dv, S);  // dV += P^T dO
            for (int t = t0; t < t1; ++t) {  // softmax backward: dS = P (dP - sum(P dP))
              const float* pr = p + int64_t(t) * T;
              float* dr = dp + int64_t(t) * T;
              softmax_bwd_row(dr, pr, t + 1);
              for (int u = t + 1; u < t1; ++u) dr[u] = 0;
            }
            gemm_serial(false, false, rows, D, t1, sc, db, T, k, S, 0.0f, dq + int64_t(t0) * S,
                        S);  // dQ = s dS K
            gemm_serial(true, false, t1, D, rows, sc, db, T, q + int64_t(t0) * S, S, 1.0f, dk,
                        S);  // dK += s dS^T Q
          }
        }
      }
    });
  }

  // The blocks of ring attention (train/ring_attention.h) as attention_forward and
  // attention_backward run the whole sequence: one task per (sequence, head) forward and per
  // (sequence, KV group) backward, query rows in blocks of kCausalBlock, the scores and their
  // products by GEMM. A cp rank's positions are sorted (its two chunks in order), so the keys a
  // query may see are a prefix of the block's: a query block multiplies against the prefix its
  // last query sees and masks the rest row by row. The forward folds each block into the running
  // softmax (Milakov and Gimelshein 2018, "Online normalizer calculation for softmax"; Dao et al.
  // 2022, FlashAttention, Alg. 1). Unsorted positions take the host loops of the base class.
  void attention_block_forward(float* acc, float* row_max, float* row_sum, const float* qkv,
                               const float* kv, const int32_t* q_pos, const int32_t* k_pos,
                               const AttentionShape& s) override {
    if (!std::is_sorted(q_pos, q_pos + s.T) || !std::is_sorted(k_pos, k_pos + s.T)) {
      Backend::attention_block_forward(acc, row_max, row_sum, qkv, kv, q_pos, k_pos, s);
      return;
    }
    const int S = s.qkv_stride(), T = s.T, D = s.D, KVS = 2 * s.KVl * D, O = s.Hl * D;
    const int group = s.Hl / s.KVl;
    const float sc = 1.0f / std::sqrt(float(D));
    const std::vector<int> visible = visible_prefixes(q_pos, k_pos, T);
    float* scratch = block_scratch(size_t(kCausalBlock) * T);
    pool_.parallel_for(int64_t(s.B) * s.Hl, [&](int64_t ib, int64_t ie, int thread) {
      float* sb = scratch + size_t(thread) * kCausalBlock * T;
      for (int64_t i = ib; i < ie; ++i) {
        const int64_t b = i / s.Hl;
        const int hd = int(i % s.Hl), g = hd / group;
        const float* q = qkv + b * T * S + hd * D;
        const float* k = kv + b * T * KVS + g * D;
        const float* v = kv + b * T * KVS + (s.KVl + g) * D;
        float* a = acc + b * T * O + hd * D;
        float* m = row_max + (b * s.Hl + hd) * T;
        float* l = row_sum + (b * s.Hl + hd) * T;
        for (int t0 = 0; t0 < T; t0 += kCausalBlock) {
          const int t1 = std::min(T, t0 + kCausalBlock), rows = t1 - t0, n = visible[size_t(t1 - 1)];
          if (n == 0) continue;  // the whole block is in these queries' future
          gemm_serial(false, true, rows, n, D, sc, q + int64_t(t0) * S, S, k, KVS, 0.0f, sb, n);
          for (int t = t0; t < t1; ++t) {
            float* row = sb + int64_t(t - t0) * n;
            const int nt = visible[size_t(t)];
            if (nt == 0) {
              std::fill(row, row + n, 0.0f);
              continue;
            }
            const float m_new = std::max(m[t], max_of(row, nt));
            const float keep = std::exp(m[t] - m_new);  // 0 while m is still -inf
            const float sum = exp_shift_sum(row, m_new, nt);
            std::fill(row + nt, row + n, 0.0f);
            scale_range(a + int64_t(t) * O, keep, D);
            l[t] = l[t] * keep + sum;
            m[t] = m_new;
          }
          gemm_serial(false, false, rows, D, n, 1.0f, sb, n, v, KVS, 1.0f, a + int64_t(t0) * O, O);
        }
      }
    });
  }

  // out = acc / row_sum, lse = row_max + log(row_sum), in place of the base class's host copies.
  void attention_block_finish(float* out, float* lse, const float* acc, const float* row_max,
                              const float* row_sum, const AttentionShape& s) override {
    const int T = s.T, D = s.D, O = s.Hl * D;
    pool_.parallel_for(int64_t(s.B) * s.Hl, [&](int64_t ib, int64_t ie, int) {
      for (int64_t i = ib; i < ie; ++i) {
        const int64_t b = i / s.Hl;
        const int hd = int(i % s.Hl);
        for (int t = 0; t < T; ++t) {
          const int64_t st = i * T + t, row = (b * T + t) * O + hd * D;
          const float inv = 1.0f / row_sum[st];  // every query sees at least itself: row_sum > 0
          for (int d = 0; d < D; ++d) out[row + d] = acc[row + d] * inv;
          lse[st] = row_max[st] + std::log(row_sum[st]);
        }
      }
    });
  }

  void attention_block_backward(float* dqkv, float* dkv, const float* dout, const float* out,
                                const float* lse, const float* qkv, const float* kv,
                                const int32_t* q_pos, const int32_t* k_pos,
                                const AttentionShape& s) override {
    if (!std::is_sorted(q_pos, q_pos + s.T) || !std::is_sorted(k_pos, k_pos + s.T)) {
      Backend::attention_block_backward(dqkv, dkv, dout, out, lse, qkv, kv, q_pos, k_pos, s);
      return;
    }
    const int S = s.qkv_stride(), T = s.T, D = s.D, KVS = 2 * s.KVl * D, O = s.Hl * D;
    const int group = s.Hl / s.KVl;
    const float sc = 1.0f / std::sqrt(float(D));
    const std::vector<int> visible = visible_prefixes(q_pos, k_pos, T);
    float* scratch = block_scratch(2 * size_t(kCausalBlock) * T);
    // One task per (sequence, KV group): the heads of a group add into the same dK and dV rows.
    pool_.parallel_for(int64_t(s.B) * s.KVl, [&](int64_t ib, int64_t ie, int thread) {
      float* pb = scratch + 2 * size_t(thread) * kCausalBlock * T;  // P
      float* db = pb + size_t(kCausalBlock) * T;                     // dP, then dS
      for (int64_t i = ib; i < ie; ++i) {
        const int64_t b = i / s.KVl;
        const int g = int(i % s.KVl);
        const float* k = kv + b * T * KVS + g * D;
        const float* v = kv + b * T * KVS + (s.KVl + g) * D;
        float* dk = dkv + b * T * KVS + g * D;
        float* dv = dkv + b * T * KVS + (s.KVl + g) * D;
        for (int hd = g * group; hd < (g + 1) * group; ++hd) {
          const float* q = qkv + b * T * S + hd * D;
          float* dq = dqkv + b * T * S + hd * D;
          const float* dO = dout + b * T * O + hd * D;
          const float* o = out + b * T * O + hd * D;
          const float* e = lse + (b * s.Hl + hd) * T;
          for (int t0 = 0; t0 < T; t0 += kCausalBlock) {
            const int t1 = std::min(T, t0 + kCausalBlock), rows = t1 - t0, n = visible[size_t(t1 - 1)];
            if (n == 0) continue;
            gemm_serial(false, true, rows, n, D, sc, q + int64_t(t0) * S, S, k, KVS, 0.0f, pb, n);  // scores
            gemm_serial(false, true, rows, n, D, 1.0f, dO + int64_t(t0) * O, O, v, KVS, 0.0f, db, n);  // dP = dO V^T
            for (int t = t0; t < t1; ++t) {  // P = exp(score - lse), dS = P (dP - delta) / sqrt(D)
              float* pr = pb + int64_t(t - t0) * n;
              float* dr = db + int64_t(t - t0) * n;
              const int nt = visible[size_t(t)];
              const float delta = dot_of(dO + int64_t(t) * O, o + int64_t(t) * O, D);
              exp_shift_sum(pr, e[t], nt);
              for (int u = 0; u < nt; ++u) dr[u] = pr[u] * (dr[u] - delta) * sc;
              std::fill(pr + nt, pr + n, 0.0f);
              std::fill(dr + nt, dr + n, 0.0f);
            }
            gemm_serial(false, false, rows, D, n, 1.0f, db, n, k, KVS, 1.0f, dq + int64_t(t0) * S, S);  // dQ += dS K
            gemm_serial(true, false, n, D, rows, 1.0f, db, n, q + int64_t(t0) * S, S, 1.0f, dk, KVS);  // dK += dS^T Q
            gemm_serial(true, false, n, D, rows, 1.0f, pb, n, dO + int64_t(t0) * O, O, 1.0f, dv, KVS);  // dV += P^T dO
          }
        }
      }
    });
  }

  // RoPE at the given positions (a cp rank's, or 0 .. T - 1 for rope()): the base class's
  // arithmetic (angle in double, cos and sin in float) in place, the table kept while the
  // positions and head size stay the same.
  void rope_at(float* qkv, const AttentionShape& s, const int32_t* positions, bool inverse) override {
    const int T = s.T, D = s.D, half = D / 2, S = s.qkv_stride();
    if (rope_at_D_ != D || !std::equal(rope_at_pos_.begin(), rope_at_pos_.end(), positions, positions + T)) {
      rope_at_pos_.assign(positions, positions + T);
      rope_at_cos_.resize(size_t(T) * half);
      rope_at_sin_.resize(size_t(T) * half);
      for (int t = 0; t < T; ++t)
        for (int i = 0; i < half; ++i) {
          const double angle = positions[t] * std::pow(10000.0, -2.0 * i / D);
          rope_at_cos_[size_t(t) * half + i] = float(std::cos(angle));
          rope_at_sin_[size_t(t) * half + i] = float(std::sin(angle));
        }
      rope_at_D_ = D;
    }
    const int heads = s.Hl + s.KVl;
    const float sign = inverse ? -1.0f : 1.0f;
    pool_.parallel_for(int64_t(s.B) * T, [&](int64_t rb, int64_t re, int) {
      for (int64_t r = rb; r < re; ++r) {
        const int t = int(r % T);
        const float* cs = rope_at_cos_.data() + size_t(t) * half;
        const float* sn = rope_at_sin_.data() + size_t(t) * half;
        for (int h = 0; h < heads; ++h) {
          float* x = qkv + r * S + h * D;
          for (int i = 0; i < half; ++i) {
            const float c = cs[i], si = sign * sn[i];
            const float x1 = x[i], x2 = x[i + half];
            x[i] = x1 * c - x2 * si;
            x[i + half] = x1 * si + x2 * c;
          }
        }
      }
    });
  }

  // RoPE over positions 0 .. T - 1: rope_at's kernel and table.
  void rope(float* qkv, const AttentionShape& s, bool inverse) override {
    if (int(rope_positions_.size()) != s.T) {
      rope_positions_.resize(size_t(std::max(s.T, 0)));
      std::iota(rope_positions_.begin(), rope_positions_.end(), 0);
    }
    rope_at(qkv, s, rope_positions_.data(), inverse);
  }

  void gelu_forward(float* out, float* x, int64_t n) override {
    pool_.parallel_for(n, [&](int64_t b, int64_t e, int) { gelu_fwd_range(out, x, b, e); });
  }
  void gelu_backward(float* dx, const float* dgelu, const float* dout, int64_t n) override {
    pool_.parallel_for(n,
                       [&](int64_t b, int64_t e, int) { gelu_bwd_range(dx, dgelu, dout, b, e); });
  }
  void swiglu_forward(float* out, const float* fc, int rows, int F) override {
    pool_.parallel_for(rows, [&](int64_t rb, int64_t re, int) {
      for (int64_t r = rb; r < re; ++r)
        swiglu_fwd_row(out + r * F, fc + r * 2 * F, fc + r * 2 * F + F, F);
    });
  }
  void swiglu_backward(float* dfc, const float* fc, const float* dout, int rows, int F) override {
    pool_.parallel_for(rows, [&](int64_t rb, int64_t re, int) {
      for (int64_t r = rb; r < re; ++r)
        swiglu_bwd_row(dfc + r * 2 * F, dfc + r * 2 * F + F, fc + r * 2 * F, fc + r * 2 * F + F,
                       dout + r * F, F);
    });
  }

  void embedding_forward(float* out, const int32_t* tokens, const float* wte, const float* wpe,
                         int rows, int T, int C, int vocab_begin, int vocab_local) override {
    pool_.parallel_for(rows, [&](int64_t rb, int64_t re, int) {
      for (int64_t r = rb; r < re; ++r) {
        float* o = out + r * C;
        const int64_t id = int64_t(tokens[r]) - vocab_begin;
        if (id >= 0 && id < vocab_local)
          std::memcpy(o, wte + id * C, sizeof(float) * C);
        else
          std::fill(o, o + C, 0.0f);
        if (wpe) {
          const float* p = wpe + (r % T) * C;
          for (int c = 0; c < C; ++c) o[c] += p[c];
        }
      }
    });
  }
  void embedding_backward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens,
                          int rows, int T, int C, int vocab_begin, int vocab_local) override {
    pool_.parallel_for(C, [&](int64_t cb, int64_t ce, int) {
      for (int64_t r = 0; r < rows; ++r) {
        const float* d = dout + r * C;
        const int64_t id = int64_t(tokens[r]) - vocab_begin;
        if (id >= 0 && id < vocab_local) {
          float* w = dwte + id * C;
          for (int64_t c = cb; c < ce; ++c) w[c] += d[c];
        }
        if (dwpe) {
          float* p = dwpe + (r % T) * C;
          for (int64_t c = cb; c < ce; ++c) p[c] += d[c];
        }
      }
    });
  }

  void xent_row_max(float* row_max, const float* logits, int rows, int Vl, int vocab_begin,
                    int vocab) override {
    const int valid = std::clamp(vocab - vocab_begin, 0, Vl);
    pool_.parallel_for(rows, [&](int64_t rb, int64_t re, int) {
      for (int64_t r = rb; r < re; ++r) row_max[r] = max_of(logits + r * Vl, valid);
    });
  }
  void xent_sum_exp(float* sum_exp, float* target_logit, float* logits, const float* row_max,
                    const int32_t* targets, int rows, int Vl, int vocab_begin,
                    int vocab) override {
    const int valid = std::clamp(vocab - vocab_begin, 0, Vl);
    pool_.parallel_for(rows, [&](int64_t rb, int64_t re, int) {
      for (int64_t r = rb; r < re; ++r) {
        float* l = logits + r * Vl;
        const int64_t id = int64_t(targets[r]) - vocab_begin;
        target_logit[r] = (id >= 0 && id < valid) ? l[id] : 0.0f;
        sum_exp[r] = exp_shift_sum(l, row_max[r], valid);
      }
    });
  }
  void xent_backward(float* logits, const float* sum_exp, const int32_t* targets, float scale,
                     int rows, int Vl, int vocab_begin, int vocab) override {
    const int valid = std::clamp(vocab - vocab_begin, 0, Vl);
    pool_.parallel_for(rows, [&](int64_t rb, int64_t re, int) {
      for (int64_t r = rb; r < re; ++r) {
        float* l = logits + r * Vl;
        scale_range(l, scale / sum_exp[r], valid);
        for (int j = valid; j < Vl; ++j) l[j] = 0;
        const int64_t id = int64_t(targets[r]) - vocab_begin;
        if (id >= 0 && id < valid) l[id] -= scale;
      }
    });
  }

  void adamw(float* param, const float* grad, float* m, float* v, int64_t n,
             const AdamWStep& st) override {
    pool_.parallel_for(n, [&](int64_t b, int64_t e, int) {
      adamw_range(param, grad, m, v, b, e, st.lr, st.beta1, st.beta2, st.eps, st.weight_decay,
                  st.bias_correction1, st.bias_correction2, st.grad_scale);
    });
  }
  double sum_squares(const float* x, int64_t n) override {
    std::vector<double> part(size_t(pool_.size()), 0.0);
    pool_.parallel_for(n, [&](int64_t b, int64_t e, int t) {
      part[size_t(t)] = sum_sq_double(x, b, e);
    });
    double total = 0;
    for (double p : part) total += p;
    return total;
  }
  void run_tasks(int n, const std::function<void(int)>& task) override {
    if (n > pool_.size()) throw std::invalid_argument("run_tasks: more tasks than threads");
    pool_.parallel_for(n, [&](int64_t b, int64_t e, int) {
      for (int64_t i = b; i < e; ++i) task(int(i));
    });
  }
  double gemm_seconds() const override { return gemm_s_; }

 private:
  // For each query row of a block, how many of the block's keys it may see (k_pos <= q_pos): with
  // the keys sorted by position, a prefix.
  static std::vector<int> visible_prefixes(const int32_t* q_pos, const int32_t* k_pos, int T) {
    std::vector<int> n(size_t(std::max(T, 0)));
    for (int t = 0; t < T; ++t) n[size_t(t)] = int(std::upper_bound(k_pos, k_pos + T, q_pos[t]) - k_pos);
    return n;
  }
  // `per_thread` floats of scratch for each thread of the pool (the attention kernels' score
  // blocks), grown as needed and kept.
  float* block_scratch(size_t per_thread) {
    std::lock_guard<std::mutex> lock(scratch_mutex_);
    if (scratch_.size() < size_t(pool_.size()) * per_thread) scratch_.resize(size_t(pool_.size()) * per_thread);
    return scratch_.data();
  }

  ThreadPool pool_;
  double gemm_s_ = 0;
  std::mutex scratch_mutex_;
  std::vector<float> scratch_;
  std::vector<int32_t> rope_positions_;  // 0 .. T - 1 for rope()
  std::vector<int32_t> rope_at_pos_;
  std::vector<float> rope_at_cos_, rope_at_sin_;
  int rope_at_D_ = -1;
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend(int threads) {
  return std::make_unique<CpuBackend>(threads);
}

}  // namespace capplan::rt
