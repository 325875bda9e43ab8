// The context-parallel kernels of the Backend interface (positioned RoPE and the blocks of ring
// attention) as host loops: inputs are copied to host memory, computed over run_tasks() threads
// and copied back, so every backend has them; a backend with its own kernels overrides them.
// Causality is by global token position, so any split of the sequence over ranks works.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "train/backend.h"

namespace capplan::rt {
namespace {

std::vector<float> host_copy(Backend& be, const float* src, int64_t n) {
  std::vector<float> h(size_t(std::max<int64_t>(n, 0)));
  if (n > 0) be.to_host(h.data(), src, n);
  return h;
}

// The keys a query at position q attends to: those with k_pos <= q. When the keys are sorted by
// position (a cp rank's two chunks are) they are a prefix, [0, visible): the loops stop there
// instead of computing and masking the rest. Otherwise all T are visited and masked one by one.
int visible_keys(const int32_t* k_pos, int T, bool sorted, int32_t q) {
  return sorted ? int(std::upper_bound(k_pos, k_pos + T, q) - k_pos) : T;
}

// Runs body(i) for i in [0, n) over the backend's threads, in contiguous ranges.
template <class F>
void for_each_index(Backend& be, int64_t n, const F& body) {
  const int parts = int(std::max<int64_t>(1, std::min<int64_t>(be.threads(), n)));
  be.run_tasks(parts, [&](int p) {
    for (int64_t i = n * p / parts; i < n * (p + 1) / parts; ++i) body(i);
  });
}

}  // namespace

void Backend::rope_at(float* qkv, const AttentionShape& s, const int32_t* positions,
                      bool inverse) {
  const int T = s.T, D = s.D, half = D / 2, S = s.qkv_stride(), heads = s.Hl + s.KVl;
  const int64_t n = int64_t(s.B) * T * S;
  std::vector<float> h = host_copy(*this, qkv, n);
  // The angles of rope(): position * 10000^(-2i / D) in double, then cos and sin in float.
  std::vector<float> cs(size_t(T) * half), sn(size_t(T) * half);
  for (int t = 0; t < T; ++t)
    for (int i = 0; i < half; ++i) {
      const double angle = positions[t] * std::pow(10000.0, -2.0 * i / D);
      cs[size_t(t) * half + i] = float(std::cos(angle));
      sn[size_t(t) * half + i] = float(std::sin(angle));
    }
  const float sign = inverse ? -1.0f : 1.0f;
  for_each_index(*this, int64_t(s.B) * T, [&](int64_t r) {
    const int t = int(r % T);
    for (int hd = 0; hd < heads; ++hd) {
      float* x = h.data() + r * S + hd * D;
      for (int i = 0; i < half; ++i) {
        const float c = cs[size_t(t) * half + i], si = sign * sn[size_t(t) * half + i];
        const float x1 = x[i], x2 = x[i + half];
        x[i] = x1 * c - x2 * si;
        x[i + half] = x1 * si + x2 * c;
      }
    }
  });
  from_host(qkv, h.data(), n);
}

void Backend::attention_block_forward(float* acc, float* row_max, float* row_sum,
                                      const float* qkv, const float* kv, const int32_t* q_pos,
                                      const int32_t* k_pos, const AttentionShape& s) {
  const int T = s.T, D = s.D, S = s.qkv_stride(), KVS = 2 * s.KVl * D, group = s.Hl / s.KVl;
  const int64_t rows = int64_t(s.B) * T, stats = int64_t(s.B) * s.Hl * T;
  const std::vector<float> q = host_copy(*this, qkv, rows * S), k = host_copy(*this, kv, rows * KVS);
  std::vector<float> a = host_copy(*this, acc, rows * s.Hl * D);
  std::vector<float> m = host_copy(*this, row_max, stats), l = host_copy(*this, row_sum, stats);
  const float sc = 1.0f / std::sqrt(float(D));
  const float inf = std::numeric_limits<float>::infinity();
  const bool sorted = std::is_sorted(k_pos, k_pos + T);
  for_each_index(*this, int64_t(s.B) * s.Hl, [&](int64_t i) {
    const int64_t b = i / s.Hl;
    const int hd = int(i % s.Hl), g = hd / group;
    // The block's keys transposed ([D, T]) so that a query's scores are axpys over the keys.
    std::vector<float> kt(static_cast<size_t>(D) * T), score(static_cast<size_t>(T));
    for (int u = 0; u < T; ++u)
      for (int d = 0; d < D; ++d) kt[size_t(d) * T + u] = k[size_t((b * T + u) * KVS + g * D + d)];
    for (int t = 0; t < T; ++t) {
      const float* qr = q.data() + (b * T + t) * S + hd * D;
      const int n = visible_keys(k_pos, T, sorted, q_pos[t]);
      std::fill(score.begin(), score.begin() + n, 0.0f);
      for (int d = 0; d < D; ++d) {
        const float x = qr[d] * sc;
        const float* kd = kt.data() + size_t(d) * T;
        for (int u = 0; u < n; ++u) score[size_t(u)] += x * kd[u];
      }
      float mx = -inf;
      for (int u = 0; u < n; ++u) {
        if (k_pos[u] > q_pos[t]) score[size_t(u)] = -inf;
        mx = std::max(mx, score[size_t(u)]);
      }
      if (mx == -inf) continue;  // the whole block is in this query's future
      const size_t st = size_t((b * s.Hl + hd) * T + t);
      const float m_new = std::max(m[st], mx);
      const float keep = std::exp(m[st] - m_new);  // 0 when m was -inf
      float* ar = a.data() + (b * T + t) * s.Hl * D + hd * D;
      float sum = 0;
      for (int d = 0; d < D; ++d) ar[d] *= keep;
      for (int u = 0; u < n; ++u) {
        if (score[size_t(u)] == -inf) continue;
        const float e = std::exp(score[size_t(u)] - m_new);
        sum += e;
        const float* vr = k.data() + (b * T + u) * KVS + (s.KVl + g) * D;
        for (int d = 0; d < D; ++d) ar[d] += e * vr[d];
      }
      l[st] = l[st] * keep + sum;
      m[st] = m_new;
    }
  });
  from_host(acc, a.data(), rows * s.Hl * D);
  from_host(row_max, m.data(), stats);
  from_host(row_sum, l.data(), stats);
}

void Backend::attention_block_finish(float* out, float* lse, const float* acc,
                                     const float* row_max, const float* row_sum,
                                     const AttentionShape& s) {
  const int T = s.T, D = s.D;
  const int64_t rows = int64_t(s.B) * T, stats = int64_t(s.B) * s.Hl * T;
  std::vector<float> a = host_copy(*this, acc, rows * s.Hl * D);
  const std::vector<float> m = host_copy(*this, row_max, stats), l = host_copy(*this, row_sum, stats);
  std::vector<float> e(static_cast<size_t>(stats));
  for (int64_t i = 0; i < stats; ++i) {
    const int64_t b = i / (int64_t(s.Hl) * T), hd = (i / T) % s.Hl, t = i % T;
    const float inv = 1.0f / l[size_t(i)];  // every query sees at least itself: l > 0
    float* ar = a.data() + (b * T + t) * s.Hl * D + hd * D;
    for (int d = 0; d < D; ++d) ar[d] *= inv;
    e[size_t(i)] = m[size_t(i)] + std::log(l[size_t(i)]);
  }
  from_host(out, a.data(), rows * s.Hl * D);
  from_host(lse, e.data(), stats);
}

void Backend::attention_block_backward(float* dqkv, float* dkv, const float* dout,
                                       const float* out, const float* lse, const float* qkv,
                                       const float* kv, const int32_t* q_pos,
                                       const int32_t* k_pos, const AttentionShape& s) {
  const int T = s.T, D = s.D, S = s.qkv_stride(), KVS = 2 * s.KVl * D, group = s.Hl / s.KVl;
  const int64_t rows = int64_t(s.B) * T, stats = int64_t(s.B) * s.Hl * T, O = int64_t(s.Hl) * D;
  const std::vector<float> q = host_copy(*this, qkv, rows * S), k = host_copy(*this, kv, rows * KVS);
  const std::vector<float> dO = host_copy(*this, dout, rows * O), o = host_copy(*this, out, rows * O);
  const std::vector<float> e = host_copy(*this, lse, stats);
  std::vector<float> dq = host_copy(*this, dqkv, rows * S), dk = host_copy(*this, dkv, rows * KVS);
  const float sc = 1.0f / std::sqrt(float(D));
  const bool sorted = std::is_sorted(k_pos, k_pos + T);
  // One task per (sequence, KV group): the heads of a group add into the same dK and dV rows.
  for_each_index(*this, int64_t(s.B) * s.KVl, [&](int64_t i) {
    const int64_t b = i / s.KVl;
    const int g = int(i % s.KVl);
    // Keys and values transposed ([D, T]): a query's scores and dP are axpys over the keys.
    std::vector<float> kt(static_cast<size_t>(D) * T), vt(static_cast<size_t>(D) * T);
    std::vector<float> p(static_cast<size_t>(T)), ds(static_cast<size_t>(T));
    for (int u = 0; u < T; ++u)
      for (int d = 0; d < D; ++d) {
        kt[size_t(d) * T + u] = k[size_t((b * T + u) * KVS + g * D + d)];
        vt[size_t(d) * T + u] = k[size_t((b * T + u) * KVS + (s.KVl + g) * D + d)];
      }
    for (int hd = g * group; hd < (g + 1) * group; ++hd)
      for (int t = 0; t < T; ++t) {
        const float* qr = q.data() + (b * T + t) * S + hd * D;
        const float* dor = dO.data() + (b * T + t) * O + hd * D;
        const float* orow = o.data() + (b * T + t) * O + hd * D;
        float delta = 0;
        for (int d = 0; d < D; ++d) delta += dor[d] * orow[d];
        const float lse_t = e[size_t((b * s.Hl + hd) * T + t)];
        const int n = visible_keys(k_pos, T, sorted, q_pos[t]);
        std::fill(p.begin(), p.begin() + n, 0.0f);
        std::fill(ds.begin(), ds.begin() + n, 0.0f);
        for (int d = 0; d < D; ++d) {
          const float x = qr[d] * sc, y = dor[d];
          const float* kd = kt.data() + size_t(d) * T;
          const float* vd = vt.data() + size_t(d) * T;
          for (int u = 0; u < n; ++u) {
            p[size_t(u)] += x * kd[u];   // score
            ds[size_t(u)] += y * vd[u];  // dP = dO . v
          }
        }
        float* dqr = dq.data() + (b * T + t) * S + hd * D;
        for (int u = 0; u < n; ++u) {
          if (k_pos[u] > q_pos[t]) continue;
          const float pu = std::exp(p[size_t(u)] - lse_t);
          const float dsu = pu * (ds[size_t(u)] - delta) * sc;
          const float* kr = k.data() + (b * T + u) * KVS + g * D;
          float* dkr = dk.data() + (b * T + u) * KVS + g * D;
          float* dvr = dk.data() + (b * T + u) * KVS + (s.KVl + g) * D;
          for (int d = 0; d < D; ++d) {
            dqr[d] += dsu * kr[d];
            dkr[d] += dsu * qr[d];
            dvr[d] += pu * dor[d];
          }
        }
      }
  });
  from_host(dqkv, dq.data(), rows * S);
  from_host(dkv, dk.data(), rows * KVS);
}

}  // namespace capplan::rt
