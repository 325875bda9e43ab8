// The CPU backend's kernels on the shape of the speed comparison with PyTorch (4 layers, d 256,
// 4 heads, seq 128, vocab 4096, batch 8 -> 1,024 rows), 2 threads: every GEMM shape of a step,
// the GEMM sequence of a whole step (the floor under capplan-train's step time: the metrics'
// gemm_s), attention, norms, GELU, cross-entropy and AdamW, OpenBLAS's beta = 0 against memset
// + beta = 1, and a core's FMA ceiling to read them against. Figures are printed by Google Benchmark (GEMMs also as FLOP/s); nothing is
// asserted.
//
//   build/tests/bench/bench_cpu_backend [--benchmark_filter=Gemm]
#include <benchmark/benchmark.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "train/backend.h"

#ifdef CAPPLAN_HAVE_CBLAS
#include <cblas.h>
#endif

using namespace capplan::rt;

namespace {

constexpr int kThreads = 2;
constexpr int B = 8, T = 128, H = 4, D = 64, C = 256, R = B * T, F = 4 * C, S = 3 * C, V = 4096;

Backend& backend() {
  static std::unique_ptr<Backend> be = make_cpu_backend(kThreads);
  return *be;
}

// A zero-filled device buffer of n floats, released at scope exit, filled with a small ramp so
// no kernel runs on zeros or denormals.
struct Buffer {
  float* p;
  explicit Buffer(int64_t n) : p(backend().allocate(n)) {
    std::vector<float> host(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) host[size_t(i)] = 0.01f * float(i % 97) - 0.48f;
    backend().from_host(p, host.data(), n);
  }
  ~Buffer() { backend().release(p); }
};

struct Gemm {
  int M, N, K;
  bool ta, tb, accumulate;
};

// The GEMMs of one training step of the shape above, in the order the model issues them
// (forward of 4 layers, the head and its two gradient GEMMs, backward of 4 layers).
std::vector<Gemm> step_gemms() {
  std::vector<Gemm> g;
  for (int l = 0; l < 4; ++l)
    g.insert(g.end(), {{R, S, C, false, true, false},
                       {R, C, C, false, true, false},
                       {R, F, C, false, true, false},
                       {R, C, F, false, true, false}});
  g.insert(g.end(), {{R, V, C, false, true, false},
                     {V, C, R, true, false, true},
                     {R, C, V, false, false, false}});
  for (int l = 0; l < 4; ++l)
    g.insert(g.end(), {{R, F, C, false, false, false},
                       {C, F, R, true, false, true},
                       {F, C, R, true, false, true},
                       {R, C, F, false, false, false},
                       {R, C, C, false, false, false},
                       {C, C, R, true, false, true},
                       {S, C, R, true, false, true},
                       {R, C, S, false, false, false}});
  return g;
}

void run_gemms(benchmark::State& state, const std::vector<Gemm>& gemms) {
  Buffer a(int64_t(V) * R), b(int64_t(V) * R), c(int64_t(V) * R);
  double flops = 0;
  for (const Gemm& g : gemms) flops += 2.0 * g.M * g.N * g.K;
  for (auto _ : state)
    for (const Gemm& g : gemms)
      backend().matmul(c.p, a.p, b.p, g.M, g.N, g.K, g.ta, g.tb, g.accumulate);
  state.counters["FLOP/s"] =
      benchmark::Counter(flops * double(state.iterations()), benchmark::Counter::kIsRate);
}

// One GEMM shape of the step: index into step_gemms() (0-3 forward of a layer, 16-18 the head,
// 19-26 backward of a layer).
void BM_Gemm(benchmark::State& state) {
  const Gemm g = step_gemms()[size_t(state.range(0))];
  state.SetLabel(std::to_string(g.M) + "x" + std::to_string(g.N) + "x" + std::to_string(g.K) +
                 (g.ta ? " t" : " n") + (g.tb ? "t" : "n"));
  run_gemms(state, {g});
}
BENCHMARK(BM_Gemm)->DenseRange(0, 3)->DenseRange(16, 26)->Unit(benchmark::kMillisecond);

void BM_GemmsOfOneStep(benchmark::State& state) { run_gemms(state, step_gemms()); }
BENCHMARK(BM_GemmsOfOneStep)->Unit(benchmark::kMillisecond);

void BM_Attention(benchmark::State& state) {
  const AttentionShape sh{B, T, H, H, D};
  Buffer qkv(int64_t(R) * S), probs(int64_t(B) * H * T * T), out(int64_t(R) * C),
      dout(int64_t(R) * C), dqkv(int64_t(R) * S);
  const bool backward = state.range(0) == 1;
  state.SetLabel(backward ? "backward" : "forward");
  backend().attention_forward(out.p, probs.p, qkv.p, sh);
  for (auto _ : state) {
    if (backward)
      backend().attention_backward(dqkv.p, dout.p, qkv.p, probs.p, sh);
    else
      backend().attention_forward(out.p, probs.p, qkv.p, sh);
  }
}
BENCHMARK(BM_Attention)->Arg(0)->Arg(1)->Unit(benchmark::kMicrosecond);

void BM_LayerNorm(benchmark::State& state) {
  Buffer x(int64_t(R) * C), y(int64_t(R) * C), dx(int64_t(R) * C), w(C), b(C), dw(C), db(C),
      mean(R), rstd(R);
  const bool backward = state.range(0) == 1;
  state.SetLabel(backward ? "backward" : "forward");
  backend().norm_forward(NormKind::LayerNorm, y.p, mean.p, rstd.p, x.p, w.p, b.p, R, C);
  for (auto _ : state) {
    if (backward)
      backend().norm_backward(NormKind::LayerNorm, dx.p, dw.p, db.p, y.p, x.p, w.p, mean.p, rstd.p,
                              R, C);
    else
      backend().norm_forward(NormKind::LayerNorm, y.p, mean.p, rstd.p, x.p, w.p, b.p, R, C);
  }
}
BENCHMARK(BM_LayerNorm)->Arg(0)->Arg(1)->Unit(benchmark::kMicrosecond);

void BM_Gelu(benchmark::State& state) {
  const int64_t n = int64_t(R) * F;
  Buffer x(n), y(n), dx(n);
  const bool backward = state.range(0) == 1;
  state.SetLabel(backward ? "backward" : "forward");
  for (auto _ : state) {
    if (backward)
      backend().gelu_backward(dx.p, x.p, y.p, n);
    else
      backend().gelu_forward(y.p, x.p, n);
  }
  state.SetItemsProcessed(int64_t(state.iterations()) * n);
}
BENCHMARK(BM_Gelu)->Arg(0)->Arg(1)->Unit(benchmark::kMicrosecond);

// The loss on the whole micro-batch's logits: row max, exp and sum, gradient in place.
void BM_CrossEntropy(benchmark::State& state) {
  Buffer logits(int64_t(R) * V), stats(3 * int64_t(R));
  std::vector<int32_t> targets(static_cast<size_t>(R));
  for (int r = 0; r < R; ++r) targets[size_t(r)] = (r * 31) % V;
  for (auto _ : state) {
    backend().xent_row_max(stats.p, logits.p, R, V, 0, V);
    backend().xent_sum_exp(stats.p + R, stats.p + 2 * R, logits.p, stats.p, targets.data(), R, V,
                           0, V);
    backend().xent_backward(logits.p, stats.p + R, targets.data(), 1.0f / R, R, V, 0, V);
  }
  state.SetItemsProcessed(int64_t(state.iterations()) * R * V);
}
BENCHMARK(BM_CrossEntropy)->Unit(benchmark::kMicrosecond);

// AdamW and the gradient norm over the model's 4.2 M parameters.
void BM_OptimizerStep(benchmark::State& state) {
  const int64_t n = 4'200'000;
  Buffer p(n), g(n), m(n), v(n);
  AdamWStep st;
  st.lr = 1e-4f;
  for (auto _ : state) {
    benchmark::DoNotOptimize(backend().sum_squares(g.p, n));
    backend().adamw(p.p, g.p, m.p, v.p, n, st);
  }
  state.SetItemsProcessed(int64_t(state.iterations()) * n);
}
BENCHMARK(BM_OptimizerStep)->Unit(benchmark::kMicrosecond);

#ifdef CAPPLAN_HAVE_CBLAS
// One single-threaded cblas_sgemm with beta = 0 (OpenBLAS zeroes C in a pass of its own before
// adding A B) against memset of C and beta = 1 (what the backend does): arg 1 selects the way
// (0 OpenBLAS's beta = 0, 1 memset + beta = 1), arg 2 the shape (a batch-split part's shapes,
// then attention's 64-row blocks); the two ways of a shape run one after the other.
void BM_SgemmBetaZero(benchmark::State& state) {
  struct Shape { int M, N, K; bool tb; };
  const Shape shapes[] = {{512, 768, 256, true}, {512, 1024, 256, true}, {512, 256, 1024, false},
                          {512, 4096, 256, true}, {64, 64, 64, true},    {64, 128, 64, true},
                          {64, 64, 128, false}};
  const bool pre_zero = state.range(0) == 1;
  const Shape sh = shapes[state.range(1)];
  std::vector<float> a(size_t(sh.M) * sh.K, 0.5f), b(size_t(sh.K) * sh.N, 0.25f),
      c(size_t(sh.M) * sh.N);
  openblas_set_num_threads(1);
  for (auto _ : state) {
    float beta = 0.0f;
    if (pre_zero) {
      std::memset(c.data(), 0, sizeof(float) * c.size());
      beta = 1.0f;
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, sh.tb ? CblasTrans : CblasNoTrans, sh.M, sh.N, sh.K,
                1.0f, a.data(), sh.K, b.data(), sh.tb ? sh.K : sh.N, beta, c.data(), sh.N);
    benchmark::DoNotOptimize(c.data());
  }
  state.SetLabel(std::to_string(sh.M) + "x" + std::to_string(sh.N) + "x" + std::to_string(sh.K) +
                 (pre_zero ? " memset + beta 1" : " beta 0"));
  state.counters["FLOP/s"] = benchmark::Counter(2.0 * sh.M * sh.N * sh.K *
                                                    double(state.iterations()),
                                                benchmark::Counter::kIsRate);
}
BENCHMARK(BM_SgemmBetaZero)
    ->ArgsProduct({{0, 1}, {0, 1, 2, 3, 4, 5, 6}})
    ->Unit(benchmark::kMicrosecond);
#endif

#if defined(__x86_64__) && defined(__GNUC__)
// The FMA ceiling of a core: 10 independent chains of 8-lane fused multiply-adds in registers
// (two FMA pipes x 4 cycles latency need 8), nothing from memory. GEMM figures above are to be
// read against it; per thread, so ->Threads(2) shows whether two cores keep their clock.
__attribute__((target("avx2,fma"), noinline)) float fma_chains(int64_t n) {
  typedef float v8 __attribute__((vector_size(32)));
  const v8 mul = v8{} + 0.9999999f, add = v8{} + 1e-7f;
  v8 a0 = v8{} + 1.0f, a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0, a7 = a0, a8 = a0,
     a9 = a0;  // named, so they stay in registers
  for (int64_t i = 0; i < n; ++i) {
    a0 = __builtin_ia32_vfmaddps256(a0, mul, add);
    a1 = __builtin_ia32_vfmaddps256(a1, mul, add);
    a2 = __builtin_ia32_vfmaddps256(a2, mul, add);
    a3 = __builtin_ia32_vfmaddps256(a3, mul, add);
    a4 = __builtin_ia32_vfmaddps256(a4, mul, add);
    a5 = __builtin_ia32_vfmaddps256(a5, mul, add);
    a6 = __builtin_ia32_vfmaddps256(a6, mul, add);
    a7 = __builtin_ia32_vfmaddps256(a7, mul, add);
    a8 = __builtin_ia32_vfmaddps256(a8, mul, add);
    a9 = __builtin_ia32_vfmaddps256(a9, mul, add);
  }
  const v8 sum = ((a0 + a1) + (a2 + a3)) + ((a4 + a5) + (a6 + a7)) + (a8 + a9);
  return sum[0];
}

void BM_FmaPeak(benchmark::State& state) {
  if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma")) {
    state.SkipWithError("no AVX2 + FMA on this CPU");
    return;
  }
  int64_t kIters = 1 << 20;
  benchmark::DoNotOptimize(kIters);  // no hoisting of the call out of the loop
  for (auto _ : state) {
    benchmark::DoNotOptimize(kIters);
    benchmark::DoNotOptimize(fma_chains(kIters));
  }
  state.counters["FLOP/s"] = benchmark::Counter(double(kIters) * 10 * 8 * 2 *
                                                    double(state.iterations()),
                                                benchmark::Counter::kIsRate);
}
BENCHMARK(BM_FmaPeak)->Threads(1)->Threads(2)->UseRealTime();
#endif

}  // namespace

BENCHMARK_MAIN();
