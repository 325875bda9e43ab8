// The CUDA backend: every kernel of backend.h on one GPU, on fp32 buffers carved from one device
// pool allocated at start (no cudaMalloc per step). GEMMs go to cuBLAS (fp32 accumulation; the
// operands in bf16, fp16 or fp32 as the precision says); the other kernels are written here and
// compute in fp32. Every kernel is deterministic: no atomics, fixed reduction trees, so the same
// inputs give the same bits (what a kill and --resume auto relies on). All work runs on the
// legacy default stream, so the communicator's streams (created blocking) order against it.
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "train/kernel_math.h"
#include "train/cuda_backend.h"

namespace capplan::rt {
namespace {

std::string cuda_where(const char* file, int line) {
  const char* base = std::strrchr(file, '/');
  return std::string(base ? base + 1 : file) + ":" + std::to_string(line);
}

#define CAPPLAN_CUDA(call)                                                                 \
  do {                                                                                     \
    const cudaError_t err_ = (call);                                                       \
    if (err_ != cudaSuccess)                                                               \
      throw std::runtime_error(cuda_where(__FILE__, __LINE__) + ": " #call ": " +         \
                               cudaGetErrorString(err_));                                  \
  } while (0)
#define CAPPLAN_CUBLAS(call)                                                               \
  do {                                                                                     \
    const cublasStatus_t st_ = (call);                                                     \
    if (st_ != CUBLAS_STATUS_SUCCESS)                                                      \
      throw std::runtime_error(cuda_where(__FILE__, __LINE__) + ": " #call ": " +         \
                               cublasGetStatusString(st_));                                \
  } while (0)
#define CAPPLAN_LAUNCHED() CAPPLAN_CUDA(cudaGetLastError())

constexpr int kThreads = 256;
constexpr int kMaxHeadDim = 128;  // attention: a lane holds head_dim / 32 accumulators (<= 4)
constexpr int kTile = 32;         // attention: keys (queries) per shared-memory tile, one per lane
constexpr int kRowsPerBlock = 4;  // attention: query (key) rows per block, one warp each

inline int blocks_for(int64_t n, int threads = kThreads) {
  return int(std::min<int64_t>((n + threads - 1) / threads, 65535 * 8));
}

// ---- reductions: fixed shuffle trees (deterministic) -----------------------------------------

__device__ inline float warp_sum(float x) {
  for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
  return x;
}
__device__ inline double warp_sum_d(double x) {
  for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
  return x;
}
__device__ inline float warp_max(float x) {
  for (int o = 16; o > 0; o >>= 1) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, o));
  return x;
}
// Block of kThreads: every thread gets the block's sum (max).
__device__ float block_sum(float x, float* shared /* [32] */) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  x = warp_sum(x);
  __syncthreads();
  if (lane == 0) shared[warp] = x;
  __syncthreads();
  x = lane < warps ? shared[lane] : 0.0f;
  return warp_sum(x);
}
__device__ float block_max(float x, float* shared) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  x = warp_max(x);
  __syncthreads();
  if (lane == 0) shared[warp] = x;
  __syncthreads();
  x = lane < warps ? shared[lane] : -INFINITY;
  return warp_max(x);
}

// ---- element-wise ------------------------------------------------------------------------------

#define GRID_STRIDE(i, n) \
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < (n); i += int64_t(blockDim.x) * gridDim.x)

__global__ void fill_kernel(float* p, float v, int64_t n) { GRID_STRIDE(i, n) p[i] = v; }
__global__ void add_kernel(float* y, const float* x, int64_t n) { GRID_STRIDE(i, n) y[i] += x[i]; }
__global__ void scale_kernel(float* y, float s, int64_t n) { GRID_STRIDE(i, n) y[i] *= s; }

__global__ void gelu_fwd_kernel(float* out, float* x, int64_t n) {
  GRID_STRIDE(i, n) {
    float y, dy;
    gelu_tanh(x[i], &y, &dy);
    out[i] = y;
    x[i] = dy;
  }
}
__global__ void gelu_bwd_kernel(float* dx, const float* dgelu, const float* dout, int64_t n) {
  GRID_STRIDE(i, n) dx[i] = dgelu[i] * dout[i];
}
__global__ void swiglu_fwd_kernel(float* out, const float* fc, int64_t rows, int F) {
  GRID_STRIDE(i, rows * F) {
    const int64_t r = i / F, j = i % F;
    out[i] = swiglu(fc[r * 2 * F + j], fc[r * 2 * F + F + j]);
  }
}
__global__ void swiglu_bwd_kernel(float* dfc, const float* fc, const float* dout, int64_t rows, int F) {
  GRID_STRIDE(i, rows * F) {
    const int64_t r = i / F, j = i % F;
    swiglu_backward_1(fc[r * 2 * F + j], fc[r * 2 * F + F + j], dout[i], &dfc[r * 2 * F + j],
                      &dfc[r * 2 * F + F + j]);
  }
}
__global__ void adamw_kernel(float* param, const float* grad, float* m, float* v, int64_t n, AdamWStep st) {
  GRID_STRIDE(i, n) adamw_1(param[i], grad[i], m[i], v[i], st);
}

// ---- norms: one warp per row -------------------------------------------------------------------

__global__ void norm_fwd_kernel(bool ln, float* out, float* mean, float* rstd, const float* x, const float* w,
                                const float* b, int rows, int C) {
  const int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
  if (row >= rows) return;
  const float* xr = x + int64_t(row) * C;
  float s = 0;
  for (int c = lane; c < C; c += 32) s += xr[c];
  const float mu = ln ? warp_sum(s) / C : 0.0f;
  float q = 0;
  for (int c = lane; c < C; c += 32) q += (xr[c] - mu) * (xr[c] - mu);
  const float rs = 1.0f / sqrtf(warp_sum(q) / C + kNormEps);
  float* o = out + int64_t(row) * C;
  for (int c = lane; c < C; c += 32) o[c] = ln ? (xr[c] - mu) * rs * w[c] + b[c] : xr[c] * rs * w[c];
  if (lane == 0) {
    rstd[row] = rs;
    if (ln && mean) mean[row] = mu;
  }
}

__global__ void norm_bwd_kernel(bool ln, float* dx, const float* dout, const float* x, const float* w,
                                const float* mean, const float* rstd, int rows, int C) {
  const int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
  if (row >= rows) return;
  const float mu = ln ? mean[row] : 0.0f, rs = rstd[row];
  const float* xr = x + int64_t(row) * C;
  const float* dy = dout + int64_t(row) * C;
  float a1 = 0, a2 = 0;
  for (int c = lane; c < C; c += 32) {
    const float dxhat = dy[c] * w[c];
    a1 += dxhat;
    a2 += dxhat * ((xr[c] - mu) * rs);
  }
  const float m1 = ln ? warp_sum(a1) / C : 0.0f, m2 = warp_sum(a2) / C;
  float* d = dx + int64_t(row) * C;
  for (int c = lane; c < C; c += 32) d[c] += rs * (dy[c] * w[c] - m1 - (xr[c] - mu) * rs * m2);
}

// dw, db over rows in two passes: block (column tile, row chunk) writes partial sums, then one
// thread per column adds the chunks in order.
constexpr int kNormChunk = 256;
__global__ void norm_param_partial_kernel(bool ln, float* part_w, float* part_b, const float* dout, const float* x,
                                          const float* mean, const float* rstd, int rows, int C) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x, chunk = blockIdx.y;
  if (c >= C) return;
  const int r0 = chunk * kNormChunk, r1 = min(rows, r0 + kNormChunk);
  float sw = 0, sb = 0;
  for (int r = r0; r < r1; ++r) {
    const float dy = dout[int64_t(r) * C + c];
    sw += dy * (x[int64_t(r) * C + c] - (ln ? mean[r] : 0.0f)) * rstd[r];
    sb += dy;
  }
  part_w[int64_t(chunk) * C + c] = sw;
  if (ln) part_b[int64_t(chunk) * C + c] = sb;
}
__global__ void norm_param_sum_kernel(bool ln, float* dw, float* db, const float* part_w, const float* part_b,
                                      int chunks, int C) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= C) return;
  float sw = 0, sb = 0;
  for (int k = 0; k < chunks; ++k) {
    sw += part_w[int64_t(k) * C + c];
    if (ln) sb += part_b[int64_t(k) * C + c];
  }
  dw[c] += sw;
  if (ln) db[c] += sb;
}

// ---- attention: fused, tiled, online softmax (no [T, T] buffer) ---------------------------------
// Assumes D <= kMaxHeadDim (checked on the host). A block is kRowsPerBlock warps on consecutive
// query rows of one (batch, head); the keys and values come through shared memory in tiles of 32,
// lane j scoring key j of the tile; each lane accumulates output elements d = lane + 32 i.
// Shared-memory rows are padded to D + 1 floats so that lane j reading row j hits its own bank.

struct AttnArgs {
  const float* qkv;
  int B, T, Hl, KVl, D, S;  // S = qkv row stride
  float scale;              // 1 / sqrt(D)
};

__device__ inline void load_tile(float* dst, const float* base, int S, int row0, int T, int D) {
  // dst[kTile][D + 1] <- rows row0 .. row0 + kTile - 1 of base (stride S), zero past T.
  for (int i = threadIdx.x; i < kTile * D; i += blockDim.x) {
    const int r = i / D, d = i % D;
    dst[r * (D + 1) + d] = row0 + r < T ? base[int64_t(row0 + r) * S + d] : 0.0f;
  }
}

// out [rows, Hl * D]; lse [B, Hl, T] = max + log(sum exp) of each query row's scaled scores.
__global__ void attention_fwd_kernel(float* out, float* lse, AttnArgs a) {
  extern __shared__ float smem[];
  const int D = a.D, pitch = D + 1;
  float* ks = smem;                   // [kTile][pitch]
  float* vs = ks + kTile * pitch;     // [kTile][pitch]
  float* qs = vs + kTile * pitch;     // [kRowsPerBlock][D]
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int bh = blockIdx.y, b = bh / a.Hl, h = bh % a.Hl, g = h / (a.Hl / a.KVl);
  const int t0 = blockIdx.x * kRowsPerBlock, t = t0 + warp;
  const float* base = a.qkv + int64_t(b) * a.T * a.S;
  const float* kbase = base + (a.Hl + g) * D;
  const float* vbase = base + (a.Hl + a.KVl + g) * D;
  if (t < a.T)
    for (int d = lane; d < D; d += 32) qs[warp * D + d] = base[int64_t(t) * a.S + h * D + d];
  OnlineSoftmax sm;
  float acc[kMaxHeadDim / 32];
#pragma unroll
  for (int i = 0; i < kMaxHeadDim / 32; ++i) acc[i] = 0.0f;
  const int last_key = min(a.T - 1, t0 + kRowsPerBlock - 1);
  for (int j0 = 0; j0 <= last_key; j0 += kTile) {
    __syncthreads();
    load_tile(ks, kbase, a.S, j0, a.T, D);
    load_tile(vs, vbase, a.S, j0, a.T, D);
    __syncthreads();
    if (t >= a.T) continue;
    const int j = j0 + lane;
    float s = -INFINITY;
    if (j <= t) {
      float dot = 0;
      for (int d = 0; d < D; ++d) dot += qs[warp * D + d] * ks[lane * pitch + d];
      s = dot * a.scale;
    }
    const float m_new = fmaxf(sm.max, warp_max(s));
    const float p = j <= t ? expf(s - m_new) : 0.0f;
    const float corr = sm.rescale(m_new, warp_sum(p));
#pragma unroll
    for (int i = 0; i < kMaxHeadDim / 32; ++i) {
      if (32 * i >= D) break;  // uniform over the warp: no idle shuffles past D
      const int d = lane + 32 * i;
      float x = acc[i] * corr;
      for (int jj = 0; jj < kTile; ++jj) {
        const float pj = __shfl_sync(0xffffffffu, p, jj);
        if (d < D) x += pj * vs[jj * pitch + d];
      }
      acc[i] = x;
    }
  }
  if (t >= a.T) return;
  float* o = out + (int64_t(b) * a.T + t) * a.Hl * D + h * D;
#pragma unroll
  for (int i = 0; i < kMaxHeadDim / 32; ++i) {
    const int d = lane + 32 * i;
    if (d < D) o[d] = acc[i] / sm.sum;
  }
  if (lane == 0) lse[int64_t(bh) * a.T + t] = sm.log_sum_exp();
}

// dq (overwritten, in dqkv's q part) and delta[b, h, t] = dout_t . out_t, with out recomputed
// from lse (pass 1), then dq = scale * sum_j p_j (dp_j - delta) k_j (pass 2).
__global__ void attention_dq_kernel(float* dqkv, float* delta, const float* dout, const float* lse, AttnArgs a) {
  extern __shared__ float smem[];
  const int D = a.D, pitch = D + 1;
  float* ks = smem;
  float* vs = ks + kTile * pitch;
  float* qs = vs + kTile * pitch;           // [kRowsPerBlock][D]
  float* dos = qs + kRowsPerBlock * D;      // [kRowsPerBlock][D]
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int bh = blockIdx.y, b = bh / a.Hl, h = bh % a.Hl, g = h / (a.Hl / a.KVl);
  const int t0 = blockIdx.x * kRowsPerBlock, t = t0 + warp;
  const float* base = a.qkv + int64_t(b) * a.T * a.S;
  const float* kbase = base + (a.Hl + g) * D;
  const float* vbase = base + (a.Hl + a.KVl + g) * D;
  const int ldo = a.Hl * D;
  if (t < a.T)
    for (int d = lane; d < D; d += 32) {
      qs[warp * D + d] = base[int64_t(t) * a.S + h * D + d];
      dos[warp * D + d] = dout[(int64_t(b) * a.T + t) * ldo + h * D + d];
    }
  const float L = t < a.T ? lse[int64_t(bh) * a.T + t] : 0.0f;
  const int last_key = min(a.T - 1, t0 + kRowsPerBlock - 1);
  float acc[kMaxHeadDim / 32];
  float dlt = 0;
  for (int pass = 0; pass < 2; ++pass) {
#pragma unroll
    for (int i = 0; i < kMaxHeadDim / 32; ++i) acc[i] = 0.0f;
    for (int j0 = 0; j0 <= last_key; j0 += kTile) {
      __syncthreads();
      load_tile(ks, kbase, a.S, j0, a.T, D);
      load_tile(vs, vbase, a.S, j0, a.T, D);
      __syncthreads();
      if (t >= a.T) continue;
      const int j = j0 + lane;
      float w = 0;  // pass 0: p_j; pass 1: p_j (dp_j - delta)
      if (j <= t) {
        float dot = 0, dp = 0;
        for (int d = 0; d < D; ++d) {
          dot += qs[warp * D + d] * ks[lane * pitch + d];
          dp += dos[warp * D + d] * vs[lane * pitch + d];
        }
        const float p = expf(dot * a.scale - L);
        w = pass == 0 ? p : p * (dp - dlt);
      }
      const float* src = pass == 0 ? vs : ks;
#pragma unroll
      for (int i = 0; i < kMaxHeadDim / 32; ++i) {
        if (32 * i >= D) break;  // uniform over the warp: no idle shuffles past D
        const int d = lane + 32 * i;
        float x = acc[i];
        for (int jj = 0; jj < kTile; ++jj) {
          const float wj = __shfl_sync(0xffffffffu, w, jj);
          if (d < D) x += wj * src[jj * pitch + d];
        }
        acc[i] = x;
      }
    }
    if (pass == 0) {  // delta = dout . out
      float part = 0;
#pragma unroll
      for (int i = 0; i < kMaxHeadDim / 32; ++i) {
        const int d = lane + 32 * i;
        if (d < D && t < a.T) part += dos[warp * D + d] * acc[i];
      }
      dlt = warp_sum(part);
    }
  }
  if (t >= a.T) return;
  if (lane == 0) delta[int64_t(bh) * a.T + t] = dlt;
  float* dq = dqkv + (int64_t(b) * a.T + t) * a.S + h * D;
#pragma unroll
  for (int i = 0; i < kMaxHeadDim / 32; ++i) {
    const int d = lane + 32 * i;
    if (d < D) dq[d] = acc[i] * a.scale;
  }
}

// dk, dv (overwritten) per key row j of KV group g: over the group's heads and queries t >= j,
// dv_j = sum p_tj dout_t, dk_j = scale * sum p_tj (dp_tj - delta_t) q_t. Queries come through
// shared memory in tiles of 32 (q and dout), lane i taking query i of the tile.
__global__ void attention_dkv_kernel(float* dqkv, const float* dout, const float* lse, const float* delta,
                                     AttnArgs a) {
  extern __shared__ float smem[];
  const int D = a.D, pitch = D + 1;
  float* qs = smem;                       // [kTile][pitch]
  float* dos = qs + kTile * pitch;        // [kTile][pitch]
  float* kv = dos + kTile * pitch;        // [kRowsPerBlock][2][D]: k_j, v_j
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int bg = blockIdx.y, b = bg / a.KVl, g = bg % a.KVl, group = a.Hl / a.KVl;
  const int j0 = blockIdx.x * kRowsPerBlock, j = j0 + warp;
  const float* base = a.qkv + int64_t(b) * a.T * a.S;
  const int ldo = a.Hl * D;
  float* kj = kv + warp * 2 * D;
  float* vj = kj + D;
  if (j < a.T)
    for (int d = lane; d < D; d += 32) {
      kj[d] = base[int64_t(j) * a.S + (a.Hl + g) * D + d];
      vj[d] = base[int64_t(j) * a.S + (a.Hl + a.KVl + g) * D + d];
    }
  float dk[kMaxHeadDim / 32], dv[kMaxHeadDim / 32];
#pragma unroll
  for (int i = 0; i < kMaxHeadDim / 32; ++i) dk[i] = dv[i] = 0.0f;
  for (int h = g * group; h < (g + 1) * group; ++h) {
    const float* lse_h = lse + (int64_t(b) * a.Hl + h) * a.T;
    const float* delta_h = delta + (int64_t(b) * a.Hl + h) * a.T;
    for (int q0 = (j0 / kTile) * kTile; q0 < a.T; q0 += kTile) {
      __syncthreads();
      load_tile(qs, base + h * D, a.S, q0, a.T, D);
      load_tile(dos, dout + int64_t(b) * a.T * ldo + h * D, ldo, q0, a.T, D);
      __syncthreads();
      if (j >= a.T) continue;
      const int t = q0 + lane;
      float p = 0, ds = 0;
      if (t < a.T && t >= j) {
        float dot = 0, dp = 0;
        for (int d = 0; d < D; ++d) {
          dot += qs[lane * pitch + d] * kj[d];
          dp += dos[lane * pitch + d] * vj[d];
        }
        p = expf(dot * a.scale - lse_h[t]);
        ds = p * (dp - delta_h[t]);
      }
#pragma unroll
      for (int i = 0; i < kMaxHeadDim / 32; ++i) {
        if (32 * i >= D) break;  // uniform over the warp: no idle shuffles past D
        const int d = lane + 32 * i;
        float xk = dk[i], xv = dv[i];
        for (int ii = 0; ii < kTile; ++ii) {
          const float pi = __shfl_sync(0xffffffffu, p, ii), dsi = __shfl_sync(0xffffffffu, ds, ii);
          if (d < D) {
            xv += pi * dos[ii * pitch + d];
            xk += dsi * qs[ii * pitch + d];
          }
        }
        dk[i] = xk;
        dv[i] = xv;
      }
    }
  }
  if (j >= a.T) return;
  float* dkr = dqkv + (int64_t(b) * a.T + j) * a.S + (a.Hl + g) * D;
  float* dvr = dqkv + (int64_t(b) * a.T + j) * a.S + (a.Hl + a.KVl + g) * D;
#pragma unroll
  for (int i = 0; i < kMaxHeadDim / 32; ++i) {
    const int d = lane + 32 * i;
    if (d < D) {
      dkr[d] = dk[i] * a.scale;
      dvr[d] = dv[i];
    }
  }
}

// ---- RoPE, embedding, cross-entropy ------------------------------------------------------------

// cos/sin tables [T][D/2] as the CPU backend computes them (double, then rounded).
__global__ void rope_kernel(float* qkv, const float* cs, const float* sn, int64_t rows, int T, int heads, int D,
                            int S, float sign) {
  const int half = D / 2;
  GRID_STRIDE(i, rows * heads * half) {
    const int64_t r = i / (int64_t(heads) * half);
    const int h = int(i / half % heads), k = int(i % half), t = int(r % T);
    float* x = qkv + r * S + h * D;
    rope_pair(x[k], x[k + half], cs[int64_t(t) * half + k], sign * sn[int64_t(t) * half + k]);
  }
}

__global__ void embedding_fwd_kernel(float* out, const int32_t* tokens, const float* wte, const float* wpe,
                                     int64_t rows, int T, int C, int vocab_begin, int vocab_local) {
  GRID_STRIDE(i, rows * C) {
    const int64_t r = i / C, c = i % C, id = int64_t(tokens[r]) - vocab_begin;
    float x = (id >= 0 && id < vocab_local) ? wte[id * C + c] : 0.0f;
    if (wpe) x += wpe[(r % T) * C + c];
    out[i] = x;
  }
}
// One block per distinct token of this rank: its rows (increasing) added in order, as the CPU.
__global__ void embedding_bwd_wte_kernel(float* dwte, const float* dout, const int32_t* ids,
                                         const int32_t* offsets, const int32_t* rows_of, int C) {
  const int u = blockIdx.x;
  float* w = dwte + int64_t(ids[u]) * C;
  for (int c = threadIdx.x; c < C; c += blockDim.x) {
    float x = w[c];
    for (int k = offsets[u]; k < offsets[u + 1]; ++k) x += dout[int64_t(rows_of[k]) * C + c];
    w[c] = x;
  }
}
__global__ void embedding_bwd_wpe_kernel(float* dwpe, const float* dout, int rows, int T, int C) {
  GRID_STRIDE(i, int64_t(T) * C) {
    const int64_t t = i / C, c = i % C;
    float x = dwpe[i];
    for (int64_t r = t; r < rows; r += T) x += dout[r * C + c];
    dwpe[i] = x;
  }
}

__global__ void xent_max_kernel(float* row_max, const float* logits, int Vl, int valid) {
  __shared__ float red[32];
  const float* l = logits + int64_t(blockIdx.x) * Vl;
  float m = -INFINITY;
  for (int j = threadIdx.x; j < valid; j += blockDim.x) m = fmaxf(m, l[j]);
  m = block_max(m, red);
  if (threadIdx.x == 0) row_max[blockIdx.x] = m;
}
__global__ void xent_sum_kernel(float* sum_exp, float* target_logit, float* logits, const float* row_max,
                                const int32_t* targets, int Vl, int vocab_begin, int valid) {
  __shared__ float red[32];
  const int r = blockIdx.x;
  float* l = logits + int64_t(r) * Vl;
  const int64_t id = int64_t(targets[r]) - vocab_begin;
  if (threadIdx.x == 0) target_logit[r] = (id >= 0 && id < valid) ? l[id] : 0.0f;
  __syncthreads();  // the target's logit is read before it is overwritten
  const float mx = row_max[r];
  float s = 0;
  for (int j = threadIdx.x; j < valid; j += blockDim.x) {
    const float e = expf(l[j] - mx);
    l[j] = e;
    s += e;
  }
  s = block_sum(s, red);
  if (threadIdx.x == 0) sum_exp[r] = s;
}
__global__ void xent_bwd_kernel(float* logits, const float* sum_exp, const int32_t* targets, float scale, int rows,
                                int Vl, int vocab_begin, int valid) {
  GRID_STRIDE(i, int64_t(rows) * Vl) {
    const int64_t r = i / Vl, j = i % Vl;
    float x = j < valid ? logits[i] * (scale / sum_exp[r]) : 0.0f;
    if (j == int64_t(targets[r]) - vocab_begin && j < valid) x -= scale;
    logits[i] = x;
  }
}

// Sum of squares in double: a fixed grid of partial sums, then one block adds them in order.
constexpr int kSumBlocks = 256;
__global__ void sum_sq_partial_kernel(double* part, const float* x, int64_t n) {
  __shared__ double red[32];
  double s = 0;
  GRID_STRIDE(i, n) s += double(x[i]) * double(x[i]);
  s = warp_sum_d(s);
  if (threadIdx.x % 32 == 0) red[threadIdx.x / 32] = s;
  __syncthreads();
  if (threadIdx.x < 32) {
    double y = threadIdx.x < blockDim.x / 32 ? red[threadIdx.x] : 0.0;
    y = warp_sum_d(y);
    if (threadIdx.x == 0) part[blockIdx.x] = y;
  }
}
__global__ void sum_sq_final_kernel(double* out, const double* part, int n) {
  if (threadIdx.x != 0) return;
  double s = 0;
  for (int i = 0; i < n; ++i) s += part[i];
  *out = s;
}

// ---- the pool ----------------------------------------------------------------------------------

// One cudaMalloc at start; first-fit over an offset-ordered free list, neighbours merged on
// release. Blocks are 256-byte aligned.
class DevicePool {
 public:
  DevicePool(int64_t bytes, const CudaDeviceInfo& dev) : size_(bytes), dev_(dev) {
    CAPPLAN_CUDA(cudaMalloc(&base_, size_t(bytes)));
    free_[0] = bytes;
  }
  ~DevicePool() { cudaFree(base_); }
  void* take(int64_t bytes) {
    bytes = std::max<int64_t>(256, (bytes + 255) / 256 * 256);
    for (auto it = free_.begin(); it != free_.end(); ++it) {
      if (it->second < bytes) continue;
      const int64_t off = it->first, left = it->second - bytes;
      free_.erase(it);
      if (left > 0) free_[off + bytes] = left;
      used_[off] = bytes;
      in_use_ += bytes;
      peak_ = std::max(peak_, in_use_);
      return static_cast<char*>(base_) + off;
    }
    const double mib = 1024.0 * 1024.0;
    char msg[512];
    std::snprintf(msg, sizeof(msg),
                  "out of device memory: asked for %.1f MiB more with %.1f MiB in use; the pool holds %.1f MiB "
                  "(device %d, %s: %.1f GiB in all)",
                  bytes / mib, in_use_ / mib, size_ / mib, dev_.index, dev_.name.c_str(),
                  dev_.memory_bytes / (mib * 1024));
    throw std::runtime_error(msg);
  }
  void give(void* p) {
    if (!p) return;
    const int64_t off = static_cast<char*>(p) - static_cast<char*>(base_);
    auto u = used_.find(off);
    if (u == used_.end()) throw std::invalid_argument("release: not a block of the device pool");
    int64_t start = off, len = u->second;
    in_use_ -= len;
    used_.erase(u);
    auto next = free_.lower_bound(start);
    if (next != free_.end() && next->first == start + len) {
      len += next->second;
      next = free_.erase(next);
    }
    if (next != free_.begin()) {
      auto prev = std::prev(next);
      if (prev->first + prev->second == start) {
        start = prev->first;
        len += prev->second;
        free_.erase(prev);
      }
    }
    free_[start] = len;
  }
  int64_t size() const { return size_; }

 private:
  void* base_ = nullptr;
  int64_t size_ = 0, in_use_ = 0, peak_ = 0;
  std::map<int64_t, int64_t> free_, used_;  // offset -> bytes
  CudaDeviceInfo dev_;
};

std::string version_text(int v) { return std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10); }

// ---- the backend -------------------------------------------------------------------------------

class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(const CudaBackendOptions& o) : opt_(o) {
    CAPPLAN_CUDA(cudaSetDevice(o.device));
    dev_ = cuda_device_info(o.device);
    if (o.precision == GemmPrecision::Bf16 && !dev_.bf16)
      throw std::runtime_error("--precision bf16: device " + std::to_string(o.device) + " (" + dev_.name +
                               ", compute capability " + std::to_string(dev_.cc_major) + "." +
                               std::to_string(dev_.cc_minor) +
                               ") has no bf16 tensor cores (they start at 8.0); use --precision fp16");
    int64_t bytes = o.pool_bytes;
    if (bytes <= 0) {
      const int64_t reserve = std::max<int64_t>(int64_t(1536) << 20, dev_.memory_bytes / 16);
      bytes = dev_.free_bytes - reserve;
    }
    if (bytes <= 0 || bytes > dev_.free_bytes)
      throw std::runtime_error("device pool of " + std::to_string(bytes >> 20) + " MiB asked for, device " +
                               std::to_string(o.device) + " (" + dev_.name + ") has " +
                               std::to_string(dev_.free_bytes >> 20) + " MiB free");
    pool_ = std::make_unique<DevicePool>(bytes, dev_);
    CAPPLAN_CUBLAS(cublasCreate(&cublas_));
    CAPPLAN_CUBLAS(cublasSetStream(cublas_, 0));
    const int64_t ws = int64_t(32) << 20;
    workspace_ = pool_->take(ws);
    CAPPLAN_CUBLAS(cublasSetWorkspace(cublas_, workspace_, size_t(ws)));
    CAPPLAN_CUBLAS(cublasSetMathMode(cublas_, CUBLAS_DEFAULT_MATH));
    sum_part_ = static_cast<double*>(pool_->take((kSumBlocks + 1) * sizeof(double)));
    CAPPLAN_CUDA(cudaMallocHost(&host_sum_, sizeof(double)));
  }
  ~CudaBackend() override {
    for (auto& e : events_) {
      cudaEventDestroy(e.first);
      cudaEventDestroy(e.second);
    }
    if (host_sum_) cudaFreeHost(host_sum_);
    if (cublas_) cublasDestroy(cublas_);
  }

  std::string name() const override { return "cuda"; }
  int threads() const override { return 1; }
  std::string device_description() const override {
    return dev_.name + " (device " + std::to_string(dev_.index) + ", compute capability " +
           std::to_string(dev_.cc_major) + "." + std::to_string(dev_.cc_minor) + ", " +
           std::to_string(dev_.memory_bytes >> 20) + " MiB; driver CUDA " + dev_.driver_version + ", runtime CUDA " +
           dev_.runtime_version + "; GEMMs " + precision_text() + ", pool " + std::to_string(pool_->size() >> 20) +
           " MiB)";
  }
  int64_t attention_state_numel(const AttentionShape& s) const override { return int64_t(s.B) * s.Hl * s.T; }

  float* allocate(int64_t n) override {
    float* p = static_cast<float*>(pool_->take(std::max<int64_t>(n, 1) * int64_t(sizeof(float))));
    CAPPLAN_CUDA(cudaMemsetAsync(p, 0, size_t(std::max<int64_t>(n, 1)) * sizeof(float), 0));
    return p;
  }
  void release(float* p) override { pool_->give(p); }
  void fill(float* p, float value, int64_t n) override {
    if (n <= 0) return;
    fill_kernel<<<blocks_for(n), kThreads>>>(p, value, n);
    CAPPLAN_LAUNCHED();
  }
  void copy(float* dst, const float* src, int64_t n) override {
    if (n > 0) CAPPLAN_CUDA(cudaMemcpyAsync(dst, src, size_t(n) * sizeof(float), cudaMemcpyDeviceToDevice, 0));
  }
  void to_host(float* host, const float* src, int64_t n) override {
    if (n > 0) CAPPLAN_CUDA(cudaMemcpy(host, src, size_t(n) * sizeof(float), cudaMemcpyDeviceToHost));
  }
  void from_host(float* dst, const float* host, int64_t n) override {
    if (n > 0) CAPPLAN_CUDA(cudaMemcpy(dst, host, size_t(n) * sizeof(float), cudaMemcpyHostToDevice));
  }

  // Row-major c[M, N] = op(a) op(b) is column-major c^T[N, M] = op(b)^T op(a)^T: cuBLAS gets b
  // first, with the row-major leading dimensions.
  void matmul(float* c, const float* a, const float* b, int M, int N, int K, bool ta, bool tb,
              bool accumulate) override {
    if (M == 0 || N == 0) return;
    const float alpha = 1.0f, beta = accumulate ? 1.0f : 0.0f;
    cublasComputeType_t compute = CUBLAS_COMPUTE_32F_PEDANTIC;
    if (opt_.precision == GemmPrecision::Bf16) compute = CUBLAS_COMPUTE_32F_FAST_16BF;
    if (opt_.precision == GemmPrecision::Fp16) compute = CUBLAS_COMPUTE_32F_FAST_16F;
    auto& ev = next_event_pair();
    CAPPLAN_CUDA(cudaEventRecord(ev.first, 0));
    CAPPLAN_CUBLAS(cublasGemmEx(cublas_, tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N, N, M, K,
                                &alpha, b, CUDA_R_32F, tb ? K : N, a, CUDA_R_32F, ta ? M : K, &beta, c, CUDA_R_32F,
                                N, compute, CUBLAS_GEMM_DEFAULT));
    CAPPLAN_CUDA(cudaEventRecord(ev.second, 0));
  }
  void add(float* y, const float* x, int64_t n) override {
    if (n <= 0) return;
    add_kernel<<<blocks_for(n), kThreads>>>(y, x, n);
    CAPPLAN_LAUNCHED();
  }
  void scale(float* y, float s, int64_t n) override {
    if (n <= 0) return;
    scale_kernel<<<blocks_for(n), kThreads>>>(y, s, n);
    CAPPLAN_LAUNCHED();
  }

  void norm_forward(NormKind kind, float* out, float* mean, float* rstd, const float* x, const float* w,
                    const float* b, int rows, int C) override {
    if (rows <= 0) return;
    norm_fwd_kernel<<<(rows + 7) / 8, kThreads>>>(kind == NormKind::LayerNorm, out, mean, rstd, x, w, b, rows, C);
    CAPPLAN_LAUNCHED();
  }
  void norm_backward(NormKind kind, float* dx, float* dw, float* db, const float* dout, const float* x,
                     const float* w, const float* mean, const float* rstd, int rows, int C) override {
    if (rows <= 0) return;
    const bool ln = kind == NormKind::LayerNorm;
    norm_bwd_kernel<<<(rows + 7) / 8, kThreads>>>(ln, dx, dout, x, w, mean, rstd, rows, C);
    CAPPLAN_LAUNCHED();
    const int chunks = (rows + kNormChunk - 1) / kNormChunk;
    float* part = scratch(0, 2 * int64_t(chunks) * C);
    norm_param_partial_kernel<<<dim3((C + 127) / 128, chunks), 128>>>(ln, part, part + int64_t(chunks) * C, dout,
                                                                     x, mean, rstd, rows, C);
    CAPPLAN_LAUNCHED();
    norm_param_sum_kernel<<<(C + 127) / 128, 128>>>(ln, dw, db, part, part + int64_t(chunks) * C, chunks, C);
    CAPPLAN_LAUNCHED();
  }

  void attention_forward(float* out, float* lse, const float* qkv, const AttentionShape& s) override {
    const AttnArgs a = attn_args(qkv, s);
    const size_t shm = sizeof(float) * (2 * kTile * (s.D + 1) + kRowsPerBlock * s.D);
    attention_fwd_kernel<<<dim3((s.T + kRowsPerBlock - 1) / kRowsPerBlock, s.B * s.Hl), 32 * kRowsPerBlock, shm>>>(
        out, lse, a);
    CAPPLAN_LAUNCHED();
  }
  void attention_backward(float* dqkv, const float* dout, const float* qkv, const float* lse,
                          const AttentionShape& s) override {
    const AttnArgs a = attn_args(qkv, s);
    float* delta = scratch(1, int64_t(s.B) * s.Hl * s.T);
    const dim3 grid_q((s.T + kRowsPerBlock - 1) / kRowsPerBlock, s.B * s.Hl);
    const size_t shm_q = sizeof(float) * (2 * kTile * (s.D + 1) + 2 * kRowsPerBlock * s.D);
    attention_dq_kernel<<<grid_q, 32 * kRowsPerBlock, shm_q>>>(dqkv, delta, dout, lse, a);
    CAPPLAN_LAUNCHED();
    const dim3 grid_k((s.T + kRowsPerBlock - 1) / kRowsPerBlock, s.B * s.KVl);
    const size_t shm_k = sizeof(float) * (2 * kTile * (s.D + 1) + 2 * kRowsPerBlock * s.D);
    attention_dkv_kernel<<<grid_k, 32 * kRowsPerBlock, shm_k>>>(dqkv, dout, lse, delta, a);
    CAPPLAN_LAUNCHED();
  }
  void rope(float* qkv, const AttentionShape& s, bool inverse) override {
    const int half = s.D / 2;
    if (rope_T_ != s.T || rope_D_ != s.D) {
      std::vector<float> cs(size_t(s.T) * half), sn(size_t(s.T) * half);
      rope_tables(s.T, s.D, cs.data(), sn.data());
      float* dev = scratch(2, 2 * int64_t(s.T) * half);
      CAPPLAN_CUDA(cudaMemcpy(dev, cs.data(), cs.size() * sizeof(float), cudaMemcpyHostToDevice));
      CAPPLAN_CUDA(cudaMemcpy(dev + cs.size(), sn.data(), sn.size() * sizeof(float), cudaMemcpyHostToDevice));
      rope_T_ = s.T;
      rope_D_ = s.D;
    }
    const float* cs = scratch_[2].first;
    const int64_t rows = int64_t(s.B) * s.T;
    const int heads = s.Hl + s.KVl;
    rope_kernel<<<blocks_for(rows * heads * half), kThreads>>>(qkv, cs, cs + int64_t(s.T) * half, rows, s.T,
                                                               heads, s.D, s.qkv_stride(), inverse ? -1.0f : 1.0f);
    CAPPLAN_LAUNCHED();
  }

  void gelu_forward(float* out, float* x, int64_t n) override {
    if (n <= 0) return;
    gelu_fwd_kernel<<<blocks_for(n), kThreads>>>(out, x, n);
    CAPPLAN_LAUNCHED();
  }
  void gelu_backward(float* dx, const float* dgelu, const float* dout, int64_t n) override {
    if (n <= 0) return;
    gelu_bwd_kernel<<<blocks_for(n), kThreads>>>(dx, dgelu, dout, n);
    CAPPLAN_LAUNCHED();
  }
  void swiglu_forward(float* out, const float* fc, int rows, int F) override {
    if (rows <= 0) return;
    swiglu_fwd_kernel<<<blocks_for(int64_t(rows) * F), kThreads>>>(out, fc, rows, F);
    CAPPLAN_LAUNCHED();
  }
  void swiglu_backward(float* dfc, const float* fc, const float* dout, int rows, int F) override {
    if (rows <= 0) return;
    swiglu_bwd_kernel<<<blocks_for(int64_t(rows) * F), kThreads>>>(dfc, fc, dout, rows, F);
    CAPPLAN_LAUNCHED();
  }

  void embedding_forward(float* out, const int32_t* tokens, const float* wte, const float* wpe, int rows, int T,
                         int C, int vocab_begin, int vocab_local) override {
    const int32_t* tok = device_ints(tokens, rows, 3);
    embedding_fwd_kernel<<<blocks_for(int64_t(rows) * C), kThreads>>>(out, tok, wte, wpe, rows, T, C, vocab_begin,
                                                                      vocab_local);
    CAPPLAN_LAUNCHED();
  }
  // The token ids live on the host (the trainer's micro-batch): the rows of each distinct id of
  // this rank are grouped there, so the device adds them without atomics, in row order.
  void embedding_backward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens, int rows, int T,
                          int C, int vocab_begin, int vocab_local) override {
    std::vector<int32_t> host(static_cast<size_t>(rows));
    if (is_device(tokens))
      CAPPLAN_CUDA(cudaMemcpy(host.data(), tokens, host.size() * sizeof(int32_t), cudaMemcpyDeviceToHost));
    else
      std::copy(tokens, tokens + rows, host.begin());
    std::map<int32_t, std::vector<int32_t>> by_id;
    for (int r = 0; r < rows; ++r) {
      const int64_t id = int64_t(host[size_t(r)]) - vocab_begin;
      if (id >= 0 && id < vocab_local) by_id[int32_t(id)].push_back(r);
    }
    std::vector<int32_t> ids, offsets{0}, rows_of;
    for (const auto& [id, rs] : by_id) {
      ids.push_back(id);
      rows_of.insert(rows_of.end(), rs.begin(), rs.end());
      offsets.push_back(int32_t(rows_of.size()));
    }
    if (!ids.empty()) {
      std::vector<int32_t> packed(ids);
      packed.insert(packed.end(), offsets.begin(), offsets.end());
      packed.insert(packed.end(), rows_of.begin(), rows_of.end());
      const int32_t* dev = device_ints(packed.data(), int(packed.size()), 4, true);
      embedding_bwd_wte_kernel<<<int(ids.size()), kThreads>>>(dwte, dout, dev, dev + ids.size(),
                                                              dev + ids.size() + offsets.size(), C);
      CAPPLAN_LAUNCHED();
    }
    if (dwpe) {
      embedding_bwd_wpe_kernel<<<blocks_for(int64_t(T) * C), kThreads>>>(dwpe, dout, rows, T, C);
      CAPPLAN_LAUNCHED();
    }
  }

  void xent_row_max(float* row_max, const float* logits, int rows, int Vl, int vocab_begin, int vocab) override {
    if (rows <= 0) return;
    xent_max_kernel<<<rows, kThreads>>>(row_max, logits, Vl, std::clamp(vocab - vocab_begin, 0, Vl));
    CAPPLAN_LAUNCHED();
  }
  void xent_sum_exp(float* sum_exp, float* target_logit, float* logits, const float* row_max,
                    const int32_t* targets, int rows, int Vl, int vocab_begin, int vocab) override {
    if (rows <= 0) return;
    const int32_t* tg = device_ints(targets, rows, 5);
    xent_sum_kernel<<<rows, kThreads>>>(sum_exp, target_logit, logits, row_max, tg, Vl, vocab_begin,
                                        std::clamp(vocab - vocab_begin, 0, Vl));
    CAPPLAN_LAUNCHED();
  }
  void xent_backward(float* logits, const float* sum_exp, const int32_t* targets, float scale, int rows, int Vl,
                     int vocab_begin, int vocab) override {
    if (rows <= 0) return;
    const int32_t* tg = device_ints(targets, rows, 5);
    xent_bwd_kernel<<<blocks_for(int64_t(rows) * Vl), kThreads>>>(logits, sum_exp, tg, scale, rows, Vl, vocab_begin,
                                                                  std::clamp(vocab - vocab_begin, 0, Vl));
    CAPPLAN_LAUNCHED();
  }

  void adamw(float* param, const float* grad, float* m, float* v, int64_t n, const AdamWStep& st) override {
    if (n <= 0) return;
    adamw_kernel<<<blocks_for(n), kThreads>>>(param, grad, m, v, n, st);
    CAPPLAN_LAUNCHED();
  }
  double sum_squares(const float* x, int64_t n) override {
    if (n <= 0) return 0;
    sum_sq_partial_kernel<<<kSumBlocks, kThreads>>>(sum_part_, x, n);
    CAPPLAN_LAUNCHED();
    sum_sq_final_kernel<<<1, 32>>>(sum_part_ + kSumBlocks, sum_part_, kSumBlocks);
    CAPPLAN_LAUNCHED();
    CAPPLAN_CUDA(cudaMemcpy(host_sum_, sum_part_ + kSumBlocks, sizeof(double), cudaMemcpyDeviceToHost));
    return *host_sum_;
  }
  void run_tasks(int n, const std::function<void(int)>& task) override {
    if (n > 1) throw std::invalid_argument("run_tasks: the CUDA backend runs one task at a time");
    if (n == 1) task(0);
  }
  // GEMM time on the device, from events around each cuBLAS call (waits for the queued work).
  double gemm_seconds() const override {
    CAPPLAN_CUDA(cudaDeviceSynchronize());
    for (size_t i = 0; i < events_used_; ++i) {
      float ms = 0;
      CAPPLAN_CUDA(cudaEventElapsedTime(&ms, events_[i].first, events_[i].second));
      gemm_s_ += ms / 1e3;
    }
    events_used_ = 0;
    return gemm_s_;
  }

 private:
  std::string precision_text() const {
    switch (opt_.precision) {
      case GemmPrecision::Bf16: return "bf16 x bf16 -> fp32";
      case GemmPrecision::Fp16: return "fp16 x fp16 -> fp32";
      default: return "fp32";
    }
  }
  std::pair<cudaEvent_t, cudaEvent_t>& next_event_pair() {
    if (events_used_ == events_.size()) {
      if (events_.size() >= 4096) gemm_seconds();  // folds the pending pairs, frees them for reuse
      if (events_used_ == events_.size()) {
        cudaEvent_t e0, e1;
        CAPPLAN_CUDA(cudaEventCreate(&e0));
        CAPPLAN_CUDA(cudaEventCreate(&e1));
        events_.push_back({e0, e1});
      }
    }
    return events_[events_used_++];
  }
  AttnArgs attn_args(const float* qkv, const AttentionShape& s) const {
    if (s.D > kMaxHeadDim || s.D < 1 || s.KVl < 1 || s.Hl % s.KVl != 0)
      throw std::invalid_argument("attention: head dim " + std::to_string(s.D) + " (at most " +
                                  std::to_string(kMaxHeadDim) + ") or heads " + std::to_string(s.Hl) + "/" +
                                  std::to_string(s.KVl) + " not supported by the CUDA kernel");
    return AttnArgs{qkv, s.B, s.T, s.Hl, s.KVl, s.D, s.qkv_stride(), 1.0f / std::sqrt(float(s.D))};
  }
  // Scratch buffers from the pool, one per use, grown (re-carved) only when a larger one is asked.
  float* scratch(int slot, int64_t n) {
    auto& [p, cap] = scratch_[slot];
    if (cap < n) {
      if (p) pool_->give(p);
      p = static_cast<float*>(pool_->take(n * int64_t(sizeof(float))));
      cap = n;
    }
    return p;
  }
  static bool is_device(const void* p) {
    cudaPointerAttributes at{};
    if (cudaPointerGetAttributes(&at, p) != cudaSuccess) {
      cudaGetLastError();
      return false;
    }
    return at.type == cudaMemoryTypeDevice || at.type == cudaMemoryTypeManaged;
  }
  // Token ids from the host are copied into a scratch slot (the copy is synchronous, so the host
  // vector may change right after); ids already on the device are used as they are.
  const int32_t* device_ints(const int32_t* p, int n, int slot, bool force_copy = false) {
    if (!force_copy && is_device(p)) return p;
    int32_t* dev = reinterpret_cast<int32_t*>(scratch(slot, std::max(n, 1)));
    if (n > 0) CAPPLAN_CUDA(cudaMemcpy(dev, p, size_t(n) * sizeof(int32_t), cudaMemcpyHostToDevice));
    return dev;
  }

  CudaBackendOptions opt_;
  CudaDeviceInfo dev_;
  std::unique_ptr<DevicePool> pool_;
  cublasHandle_t cublas_ = nullptr;
  void* workspace_ = nullptr;
  double* sum_part_ = nullptr;
  double* host_sum_ = nullptr;
  std::pair<float*, int64_t> scratch_[6] = {};
  int rope_T_ = -1, rope_D_ = -1;
  mutable std::vector<std::pair<cudaEvent_t, cudaEvent_t>> events_;
  mutable size_t events_used_ = 0;
  mutable double gemm_s_ = 0;
};

}  // namespace

bool cuda_built() { return true; }

int cuda_device_count(std::string* why) {
  int n = 0;
  const cudaError_t err = cudaGetDeviceCount(&n);
  if (err != cudaSuccess) {
    if (why) *why = std::string("no CUDA device visible (cudaGetDeviceCount: ") + cudaGetErrorString(err) + ")";
    cudaGetLastError();
    return 0;
  }
  if (n == 0 && why) *why = "no CUDA device visible (cudaGetDeviceCount: 0 devices)";
  return n;
}

CudaDeviceInfo cuda_device_info(int device) {
  cudaDeviceProp p{};
  CAPPLAN_CUDA(cudaGetDeviceProperties(&p, device));
  CudaDeviceInfo d;
  d.index = device;
  d.name = p.name;
  d.cc_major = p.major;
  d.cc_minor = p.minor;
  d.memory_bytes = int64_t(p.totalGlobalMem);
  d.bf16 = p.major >= 8;
  int dv = 0, rv = 0;
  CAPPLAN_CUDA(cudaDriverGetVersion(&dv));
  CAPPLAN_CUDA(cudaRuntimeGetVersion(&rv));
  d.driver_version = version_text(dv);
  d.runtime_version = version_text(rv);
  int cur = 0;
  CAPPLAN_CUDA(cudaGetDevice(&cur));
  if (cur == device) {
    size_t fr = 0, tot = 0;
    CAPPLAN_CUDA(cudaMemGetInfo(&fr, &tot));
    d.free_bytes = int64_t(fr);
  }
  return d;
}

std::unique_ptr<Backend> make_cuda_backend(const CudaBackendOptions& options) {
  std::string why;
  const int n = cuda_device_count(&why);
  if (n == 0) throw std::runtime_error("--backend cuda: " + why);
  if (options.device < 0 || options.device >= n)
    throw std::runtime_error("--backend cuda: device " + std::to_string(options.device) + " asked for, " +
                             std::to_string(n) + " visible");
  return std::make_unique<CudaBackend>(options);
}

}  // namespace capplan::rt

namespace capplan::rt {
std::string cuda_build_status() { return CAPPLAN_CUDA_STATUS_TEXT; }
}  // namespace capplan::rt
