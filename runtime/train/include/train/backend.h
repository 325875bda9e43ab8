// The compute backend interface of capplan-train: memory and every kernel the GPT model needs, on
// raw device pointers, row-major, fp32. The CPU backend (cblas GEMMs, other kernels as loops over a
// ThreadPool) is always built; a CUDA/cuBLAS backend implements the same interface. Kernels are
// deterministic: the same inputs and thread count give bitwise-identical outputs.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

namespace capplan::rt {

enum class NormKind { LayerNorm, RmsNorm };

// Shapes used below: rows = tokens in a micro-batch (B * T); C = hidden; D = head dim;
// Hl, KVl = query and key/value heads on this TP rank; the fused QKV row of one token is
// [q (Hl * D) | k (KVl * D) | v (KVl * D)].
struct AttentionShape {
  int B = 0, T = 0, Hl = 0, KVl = 0, D = 0;
  int qkv_stride() const { return (Hl + 2 * KVl) * D; }
};

// AdamW (Loshchilov & Hutter 2019, Algorithm 2) on n elements. lr already includes the schedule;
// bias corrections 1 - beta^t are passed in. grad_scale multiplies the gradient first (clipping).
struct AdamWStep {
  float lr = 0, beta1 = 0.9f, beta2 = 0.95f, eps = 1e-8f, weight_decay = 0;
  float bias_correction1 = 1, bias_correction2 = 1, grad_scale = 1;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;
  virtual int threads() const = 0;

  // Device memory, zero-filled. Freed with release().
  virtual float* allocate(int64_t n) = 0;
  virtual void release(float* p) = 0;
  virtual void fill(float* p, float value, int64_t n) = 0;
  virtual void copy(float* dst, const float* src, int64_t n) = 0;  // device to device
  virtual void to_host(float* host, const float* src, int64_t n) = 0;
  virtual void from_host(float* dst, const float* host, int64_t n) = 0;

  // c[M, N] (+)= op(a) * op(b); a is [M, K] ([K, M] when trans_a), b is [K, N] ([N, K] when
  // trans_b); all dense row-major. accumulate: c += instead of c =.
  virtual void matmul(float* c, const float* a, const float* b, int M, int N, int K, bool trans_a,
                      bool trans_b, bool accumulate) = 0;
  virtual void add(float* y, const float* x, int64_t n) = 0;  // y += x
  virtual void scale(float* y, float s, int64_t n) = 0;       // y *= s

  // Norm over the last dimension: out = (x - mean) * rstd * w + b (LayerNorm, Ba et al. 2016) or
  // x * rstd * w (RMSNorm, Zhang & Sennrich 2019; mean is left untouched, b ignored). eps 1e-5.
  virtual void norm_forward(NormKind kind, float* out, float* mean, float* rstd, const float* x,
                            const float* w, const float* b, int rows, int C) = 0;
  // dx += d/dx; dw += sum over rows; db += sum over rows (LayerNorm only).
  virtual void norm_backward(NormKind kind, float* dx, float* dw, float* db, const float* dout,
                             const float* x, const float* w, const float* mean, const float* rstd,
                             int rows, int C) = 0;

  // Floats of the `probs` buffer attention_forward keeps for the backward: the CPU backend keeps
  // the softmax rows [B, Hl, T, T]; a fused (FlashAttention-style) backend keeps one log-sum-exp
  // per query row, [B, Hl, T], and recomputes the rows in the backward.
  virtual int64_t attention_state_numel(const AttentionShape& s) const {
    return int64_t(s.B) * s.Hl * s.T * s.T;
  }
  // The device, for the start record ("" for the CPU): name, driver and CUDA versions.
  virtual std::string device_description() const { return ""; }

  // Causal self-attention per (batch, head), heads h use KV group h / (Hl / KVl).
  // probs: attention_state_numel() floats (the CPU's [B, Hl, T, T] softmax rows, zero above the
  // diagonal), out: [rows, Hl * D].
  virtual void attention_forward(float* out, float* probs, const float* qkv,
                                 const AttentionShape& s) = 0;
  // dqkv = gradient w.r.t. qkv (overwritten). Uses `probs` from the forward.
  virtual void attention_backward(float* dqkv, const float* dout, const float* qkv,
                                  const float* probs, const AttentionShape& s) = 0;
  // Rotary embedding (Su et al. 2021, "rotate half" pairing (i, i + D/2), base 10000) of the q and
  // k parts of qkv in place; inverse = rotate by -angle (the backward of the forward rotation).
  virtual void rope(float* qkv, const AttentionShape& s, bool inverse) = 0;

  // GELU, tanh approximation (Hendrycks & Gimpel 2016, as GPT-2). The forward also replaces x
  // by GELU'(x), computed from the same tanh, which is all the backward needs: dx = x' * dout.
  virtual void gelu_forward(float* out, float* x, int64_t n) = 0;
  virtual void gelu_backward(float* dx, const float* dgelu, const float* dout, int64_t n) = 0;
  // SwiGLU (Shazeer 2020): fc row = [gate (F) | up (F)], out = silu(gate) * up, [rows, F].
  virtual void swiglu_forward(float* out, const float* fc, int rows, int F) = 0;
  virtual void swiglu_backward(float* dfc, const float* fc, const float* dout, int rows, int F) = 0;

  // out[r] = wte[tokens[r] - vocab_begin] when this rank holds the row (else 0), + wpe[r % T]
  // when wpe is not null.
  virtual void embedding_forward(float* out, const int32_t* tokens, const float* wte,
                                 const float* wpe, int rows, int T, int C, int vocab_begin,
                                 int vocab_local) = 0;
  virtual void embedding_backward(float* dwte, float* dwpe, const float* dout,
                                  const int32_t* tokens, int rows, int T, int C, int vocab_begin,
                                  int vocab_local) = 0;

  // Vocab-parallel cross-entropy in three steps so that only [rows] vectors cross TP ranks.
  // logits: [rows, Vl] for global vocab ids [vocab_begin, vocab_begin + Vl); ids >= vocab are
  // padding and ignored. (1) row max over this rank; (2) with the global max: the sum of
  // exp(logit - max) and the target's logit (0 when not on this rank); logits are overwritten by
  // exp(logit - max); (3) with the global sum, in place: scale * (softmax - onehot(target)).
  virtual void xent_row_max(float* row_max, const float* logits, int rows, int Vl, int vocab_begin,
                            int vocab) = 0;
  virtual void xent_sum_exp(float* sum_exp, float* target_logit, float* logits,
                            const float* row_max, const int32_t* targets, int rows, int Vl,
                            int vocab_begin, int vocab) = 0;
  virtual void xent_backward(float* logits, const float* sum_exp, const int32_t* targets,
                             float scale, int rows, int Vl, int vocab_begin, int vocab) = 0;

  virtual void adamw(float* param, const float* grad, float* m, float* v, int64_t n,
                     const AdamWStep& step) = 0;
  // Sum of squares accumulated in double, in a fixed order for a given thread count.
  virtual double sum_squares(const float* x, int64_t n) = 0;

  // Runs task(0) ... task(n - 1) at once, one per thread of this backend (n <= threads()), and
  // returns when all are done: independent streams of work such as model replicas that each
  // hold their own backend. A task must not call this backend's kernels.
  virtual void run_tasks(int n, const std::function<void(int)>& task) = 0;

  // Wall time the calling thread has spent in matmul() since the backend was made (seconds):
  // the GEMM share of a step, which bounds how fast any trainer on the same GEMMs can be.
  virtual double gemm_seconds() const = 0;

  // Context parallelism (train/ring_attention.h). s.T is the rows per sequence on this rank;
  // positions are host arrays of s.T global token positions (the same for every sequence).
  // These have host-loop defaults over to_host / from_host (backend_context.cpp) that any
  // backend can use as they are; a backend may override them with its own kernels.
  //
  // RoPE as rope(), at the given positions instead of 0 .. T - 1.
  virtual void rope_at(float* qkv, const AttentionShape& s, const int32_t* positions,
                       bool inverse);
  // One block of ring attention: the queries of qkv (this rank's rows) against the keys and
  // values of `kv` [B, T, 2 * KVl * D] (k then v per row, held by some rank of the ring), causal
  // by position (a key attends when k_pos <= q_pos), folded into the running softmax: acc
  // [rows, Hl * D] (unnormalised output), row_max and row_sum [B, Hl, T] (start: 0, -inf, 0).
  virtual void attention_block_forward(float* acc, float* row_max, float* row_sum,
                                       const float* qkv, const float* kv, const int32_t* q_pos,
                                       const int32_t* k_pos, const AttentionShape& s);
  // out = acc / row_sum and lse = row_max + log(row_sum) [B, Hl, T].
  virtual void attention_block_finish(float* out, float* lse, const float* acc,
                                      const float* row_max, const float* row_sum,
                                      const AttentionShape& s);
  // The backward of one block: with P = exp(q.k / sqrt(D) - lse) and delta = rowsum(dout * out),
  // dq (the q columns of dqkv) += dS K / sqrt(D), dkv's k part += dS^T Q / sqrt(D), its v part
  // += P^T dout, where dS = P (dout V^T - delta) (Dao et al. 2022, FlashAttention, Alg. 2).
  virtual void attention_block_backward(float* dqkv, float* dkv, const float* dout,
                                        const float* out, const float* lse, const float* qkv,
                                        const float* kv, const int32_t* q_pos,
                                        const int32_t* k_pos, const AttentionShape& s);
};

// The CPU backend with `threads` threads (>= 1). GEMMs go to cblas (single-threaded per call,
// split over the pool by output rows) when built with OpenBLAS, else to plain loops.
std::unique_ptr<Backend> make_cpu_backend(int threads);

}  // namespace capplan::rt
