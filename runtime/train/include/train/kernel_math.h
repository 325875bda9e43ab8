// The per-element math of the CUDA backend's kernels, written once for the device and the host:
// the kernels call these, and the host-side tests check them against the CPU backend (so their
// formulas are tested on a machine without a GPU). Plain fp32 unless stated; no CUDA header needed.
#pragma once

#include <cmath>

#if defined(__CUDACC__)
#define CAPPLAN_HD __host__ __device__ inline
#else
#define CAPPLAN_HD inline
#endif

#include "train/backend.h"

namespace capplan::rt {

constexpr float kNormEps = 1e-5f;  // LayerNorm / RMSNorm epsilon, as the CPU backend

// GELU, tanh approximation (Hendrycks & Gimpel 2016): y = x/2 (1 + tanh(k (x + 0.044715 x^3))),
// k = sqrt(2/pi); dy = dy/dx from the same tanh.
CAPPLAN_HD void gelu_tanh(float x, float* y, float* dy) {
  const float k = 0.7978845608028654f;
  const float th = tanhf(k * (x + 0.044715f * x * x * x));
  *y = 0.5f * x * (1.0f + th);
  *dy = 0.5f * (1.0f + th) + 0.5f * x * (1.0f - th * th) * k * (1.0f + 3.0f * 0.044715f * x * x);
}

// SwiGLU (Shazeer 2020): silu(gate) * up, and its gradients w.r.t. gate and up.
CAPPLAN_HD float swiglu(float gate, float up) { return gate / (1.0f + expf(-gate)) * up; }
CAPPLAN_HD void swiglu_backward_1(float gate, float up, float dy, float* dgate, float* dup) {
  const float sg = 1.0f / (1.0f + expf(-gate));
  *dup = dy * gate * sg;
  *dgate = dy * up * sg * (1.0f + gate * (1.0f - sg));
}

// AdamW on one element (Loshchilov & Hutter 2019, Algorithm 2), as the CPU backend.
CAPPLAN_HD void adamw_1(float& param, float grad, float& m, float& v, const AdamWStep& st) {
  const float g = grad * st.grad_scale;
  m = st.beta1 * m + (1.0f - st.beta1) * g;
  v = st.beta2 * v + (1.0f - st.beta2) * g * g;
  const float mhat = m / st.bias_correction1, vhat = v / st.bias_correction2;
  param -= st.lr * (mhat / (sqrtf(vhat) + st.eps) + st.weight_decay * param);
}

// Rotary embedding of one pair (x1, x2) = (x[i], x[i + D/2]) by an angle with cosine c and sine
// s (the inverse rotation passes -s).
CAPPLAN_HD void rope_pair(float& x1, float& x2, float c, float s) {
  const float a = x1, b = x2;
  x1 = a * c - b * s;
  x2 = a * s + b * c;
}
// cos / sin tables [T][D/2]: angle = t * 10000^(-2i/D), in double and then rounded (as the CPU).
inline void rope_tables(int T, int D, float* cs, float* sn) {
  const int half = D / 2;
  for (int t = 0; t < T; ++t)
    for (int i = 0; i < half; ++i) {
      const double angle = t * std::pow(10000.0, -2.0 * i / D);
      cs[t * half + i] = float(std::cos(angle));
      sn[t * half + i] = float(std::sin(angle));
    }
}

// The running state of an online softmax (Milakov & Gimelshein 2018; FlashAttention, Dao et al.
// 2022): after blocks of scores, `max` is the largest score seen and `sum` = sum exp(s - max).
// A new block with maximum m_block and block_sum = sum exp(s - m_new), m_new = max(max,
// m_block), rescales the old sum by exp(max - m_new); rescale() returns that factor, which the
// caller applies to its running output. The first block has max = -inf and factor 0.
struct OnlineSoftmax {
  float max = -INFINITY, sum = 0.0f;
  CAPPLAN_HD float rescale(float m_new, float block_sum) {
    const float corr = max == -INFINITY ? 0.0f : expf(max - m_new);
    sum = sum * corr + block_sum;
    max = m_new;
    return corr;
  }
  CAPPLAN_HD float log_sum_exp() const { return max + logf(sum); }
};

}  // namespace capplan::rt
