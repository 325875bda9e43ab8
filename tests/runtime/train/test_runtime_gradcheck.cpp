// Gradient check of every parameter tensor of the GPT model against central finite differences,
// on tiny models covering both families (GELU + LayerNorm + learned positions; SwiGLU + RMSNorm +
// RoPE + grouped-query attention). Also: layout-independent initialisation, rank placement by
// order, the learning-rate schedule, and capplan-train's flags and --help text.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <random>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "train/backend.h"
#include "train/communicator.h"
#include "train/gpt.h"
#include "train/optimizer.h"
#include "train/ring_attention.h"
#include "train/trainer.h"

namespace capplan::rt {
namespace {

ModelSpec tiny_model(bool llama) {
  ModelSpec m;
  m.name = llama ? "tiny-llama" : "tiny-gpt";
  m.layers = 2;
  m.hidden = 16;
  m.heads = 4;
  m.vocab = 23;
  m.seq_len = 6;
  if (llama) {
    m.kv_heads = 2;
    m.ffn = Ffn::Swiglu;
    m.ffn_hidden = 24;
    m.norm = Norm::RmsNorm;
    m.position = PositionEmbedding::Rope;
  }
  return m;
}

// One stage holding every layer of `m`, micro-batches of `mbs` sequences, weights from `seed`.
GptConfig tiny_config(const ModelSpec& m, uint64_t seed, int mbs = 2) {
  GptConfig c;
  c.model = m;
  c.seq_len = m.seq_len;
  c.mbs = mbs;
  c.layer_end = m.layers;
  c.seed = seed;
  return c;
}

struct Fixture {
  std::unique_ptr<Backend> be = make_cpu_backend(2);
  std::unique_ptr<Communicator> tp = make_self_communicator();
  std::unique_ptr<Gpt> gpt;
  std::vector<int32_t> tokens, targets;
  int rows = 0;

  explicit Fixture(const ModelSpec& m, Recompute recompute = Recompute::None,
                   int head_chunk_rows = 0) {
    GptConfig c = tiny_config(m, 7);
    c.head_chunk_rows = head_chunk_rows;
    c.recompute = recompute;
    gpt = std::make_unique<Gpt>(c, *be, *tp);
    gpt->init_params();
    rows = c.mbs * c.seq_len;
    std::mt19937 rng(3);
    for (int i = 0; i < rows; ++i) {
      tokens.push_back(int32_t(rng() % uint32_t(m.vocab)));
      targets.push_back(int32_t(rng() % uint32_t(m.vocab)));
    }
  }
  // Mean token loss; with `grads`, also its gradient in gpt->grads().
  double loss(bool grads) {
    gpt->zero_grads();
    const double sum = gpt->forward(0, tokens.data(), nullptr, nullptr, targets.data(),
                                    1.0f / float(rows));
    if (grads) gpt->backward(0, nullptr, nullptr);
    return sum / rows;
  }
};

// Directional check per tensor: for a unit direction u mixing the gradient's own direction and a
// random one, (L(p + eps u) - L(p - eps u)) / (2 eps) must match g . u.
// Tolerance: the loss is accumulated from fp32 token losses (relative rounding ~1e-7 of L ~ 3);
// divided by 2 eps = 2e-2 that bounds the noise near 1.5e-5 (measured: below 5e-6 on the norm
// tensors), and the truncation error of central differences, O(eps^2 |L'''|), measured at most
// 6e-4 |g| (the embedding). We allow 2e-3 relative + 2e-5 absolute; a wrong or missing term in a
// backward formula moves these directional derivatives by far more (tens of percent).
void check_gradients(Fixture& f) {
  f.loss(true);
  const int64_t n = f.gpt->num_params();
  std::vector<float> grads(static_cast<size_t>(n)), params(static_cast<size_t>(n));
  f.be->to_host(grads.data(), f.gpt->grads(), n);
  f.be->to_host(params.data(), f.gpt->params(), n);
  std::mt19937 rng(11);
  std::normal_distribution<double> normal;
  const double eps = 1e-2;
  for (const ParamInfo& p : f.gpt->param_infos()) {
    std::vector<double> u(size_t(p.numel));
    double gnorm = 0, rnorm = 0;
    std::vector<double> r(size_t(p.numel));
    for (int64_t i = 0; i < p.numel; ++i) {
      gnorm += double(grads[size_t(p.offset + i)]) * grads[size_t(p.offset + i)];
      r[size_t(i)] = normal(rng);
      rnorm += r[size_t(i)] * r[size_t(i)];
    }
    gnorm = std::sqrt(gnorm);
    rnorm = std::sqrt(rnorm);
    ASSERT_GT(gnorm, 0.0) << p.name << ": gradient is zero";
    double unorm = 0;
    for (int64_t i = 0; i < p.numel; ++i) {
      u[size_t(i)] = grads[size_t(p.offset + i)] / gnorm + r[size_t(i)] / rnorm;
      unorm += u[size_t(i)] * u[size_t(i)];
    }
    unorm = std::sqrt(unorm);
    double analytic = 0;
    for (int64_t i = 0; i < p.numel; ++i) {
      u[size_t(i)] /= unorm;
      analytic += grads[size_t(p.offset + i)] * u[size_t(i)];
    }
    auto shifted = [&](double s) {
      std::vector<float> q = params;
      for (int64_t i = 0; i < p.numel; ++i)
        q[size_t(p.offset + i)] = float(params[size_t(p.offset + i)] + s * u[size_t(i)]);
      f.be->from_host(f.gpt->params(), q.data(), n);
      return f.loss(false);
    };
    const double numeric = (shifted(eps) - shifted(-eps)) / (2 * eps);
    f.be->from_host(f.gpt->params(), params.data(), n);
    std::printf("%-16s Expectation: d/du = %.6e  Actual result: %.6e\n", p.name.c_str(), numeric,
                analytic);
    EXPECT_NEAR(analytic, numeric, 2e-3 * std::abs(numeric) + 2e-5) << p.name;
  }
}

TEST(RuntimeGradCheck, GeluLayerNormLearnedPositions) {
  Fixture f(tiny_model(false));
  check_gradients(f);
}

TEST(RuntimeGradCheck, SwigluRmsNormRopeGroupedQuery) {
  Fixture f(tiny_model(true));
  check_gradients(f);
}

// Heads whose size is set apart from hidden / heads (as Gemma's and Qwen3's are): 4 heads of 6
// over a 16-wide stream, so Q and the output projection's input are 24 wide; and of 2 (8 wide).
TEST(RuntimeGradCheck, HeadSizeApartFromHiddenOverHeads) {
  for (const int head_dim : {6, 2}) {
    for (const bool llama : {true, false}) {
      ModelSpec m = tiny_model(llama);
      m.head_dim = head_dim;
      SCOPED_TRACE(m.name + " head_dim " + std::to_string(head_dim));
      Fixture f(m);
      ASSERT_EQ(f.gpt->find_param("layers.0.wo")->numel, int64_t(m.hidden) * m.heads * head_dim);
      check_gradients(f);
    }
  }
}

// Causal attention works on blocks of 64 query rows; 70 positions make a full block and a
// partial one, so the block boundary of the masked-triangle skipping is checked.
TEST(RuntimeGradCheck, CausalAttentionAcrossQueryBlocks) {
  ModelSpec m = tiny_model(true);
  m.seq_len = 70;
  Fixture f(m);
  check_gradients(f);
}

// The LM head and loss run over chunks of rows: 12 rows in chunks of 5 (5, 5, 2) pass the
// gradient check and agree with one chunk of 12 (the same sums, accumulated over chunks).
TEST(RuntimeGradCheck, HeadChunksMatchOneChunk) {
  for (bool llama : {false, true}) {
    Fixture chunked(tiny_model(llama), Recompute::None, 5);
    check_gradients(chunked);
    Fixture whole(tiny_model(llama), Recompute::None, 12);
    const double a = chunked.loss(true), b = whole.loss(true);
    EXPECT_NEAR(a, b, 1e-6 * std::abs(b));
    const int64_t n = whole.gpt->num_params();
    std::vector<float> ga(static_cast<size_t>(n)), gb(static_cast<size_t>(n));
    chunked.be->to_host(ga.data(), chunked.gpt->grads(), n);
    whole.be->to_host(gb.data(), whole.gpt->grads(), n);
    double diff = 0, norm = 0;
    for (int64_t i = 0; i < n; ++i) {
      diff += (double(ga[size_t(i)]) - gb[size_t(i)]) * (double(ga[size_t(i)]) - gb[size_t(i)]);
      norm += double(gb[size_t(i)]) * gb[size_t(i)];
    }
    EXPECT_LT(std::sqrt(diff), 1e-6 * std::sqrt(norm)) << (llama ? "llama" : "gpt");
    EXPECT_GT(norm, 0.0);
  }
}

// Full recompute rebuilds each layer's activations in backward from the same inputs and
// operations, selective recompute the attention softmax: gradients bitwise identical to keeping
// them.
TEST(RuntimeGradCheck, RecomputeIsBitwiseIdentical) {
  for (auto [llama, mode] : {std::pair{false, Recompute::Full}, std::pair{true, Recompute::Full},
                             std::pair{false, Recompute::Selective},
                             std::pair{true, Recompute::Selective}}) {
    Fixture a(tiny_model(llama)), b(tiny_model(llama), mode);
    EXPECT_EQ(a.loss(true), b.loss(true));
    const int64_t n = a.gpt->num_params();
    std::vector<float> ga(static_cast<size_t>(n)), gb(static_cast<size_t>(n));
    a.be->to_host(ga.data(), a.gpt->grads(), n);
    b.be->to_host(gb.data(), b.gpt->grads(), n);
    EXPECT_EQ(ga, gb);
  }
}

// The batch split over threads: a replica reads its owner's weights, and the weight-gradient
// GEMMs of the LM head's last chunk and of the first layer are left to the caller (deferred()),
// largest first. Run after each backward, on another backend, they give bitwise the gradients of
// an undeferred model, over two accumulated micro-batches and under full recompute, except the
// embedding's, which adds the same terms in another order (the head's last chunk after the
// embedding's own rows): within 1e-6 of its norm. Before they run, the first layer's tensors
// hold only the first micro-batch's share.
TEST(RuntimeGradCheck, DeferredWeightGradientsGiveTheSameGradients) {
  for (auto [llama, mode] : {std::pair{false, Recompute::None}, std::pair{true, Recompute::Full}}) {
    const ModelSpec m = tiny_model(llama);
    auto be = make_cpu_backend(1), other = make_cpu_backend(1);
    auto tp = make_self_communicator();
    GptConfig c = tiny_config(m, 7);
    c.recompute = mode;
    c.head_chunk_rows = 5;  // 12 rows: chunks of 5, 5 and 2, the last one deferred
    Gpt plain(c, *be, *tp);
    plain.init_params();
    GptConfig d = c;
    d.defer_weight_grads = true;
    d.shared_params = plain.params();
    Gpt deferred(d, *be, *tp);
    EXPECT_EQ(deferred.params(), plain.params());
    EXPECT_EQ(deferred.param_bytes(), 0);
    const int rows = c.mbs * c.seq_len;
    std::vector<int32_t> tok(size_t(2 * rows));
    for (size_t i = 0; i < tok.size(); ++i) tok[i] = int32_t((i * 5 + 1) % size_t(m.vocab));
    plain.zero_grads();
    deferred.zero_grads();
    const int64_t n = plain.num_params();
    std::vector<float> ga(static_cast<size_t>(n)), gb(static_cast<size_t>(n));
    for (int mb = 0; mb < 2; ++mb) {
      const int32_t* x = tok.data() + mb * rows;
      const int32_t* y = tok.data() + (1 - mb) * rows;
      EXPECT_EQ(plain.forward(0, x, nullptr, nullptr, y, 0.01f),
                deferred.forward(0, x, nullptr, nullptr, y, 0.01f));
      plain.backward(0, nullptr, nullptr);
      deferred.backward(0, nullptr, nullptr);
      const std::vector<DeferredGemm>& list = deferred.deferred();
      ASSERT_EQ(list.size(), 5u);
      for (size_t i = 1; i < list.size(); ++i) EXPECT_GE(list[i - 1].flops(), list[i].flops());
      if (mb == 0) {  // nothing added yet to the first layer's weight gradients
        be->to_host(gb.data(), deferred.grads(), n);
        const ParamInfo* w = deferred.find_param("layers.0.wfc");
        ASSERT_NE(w, nullptr);
        for (int64_t i = 0; i < w->numel; ++i) ASSERT_EQ(gb[size_t(w->offset + i)], 0.0f);
      }
      for (const DeferredGemm& g : list)
        other->matmul(g.c, g.a, g.b, g.M, g.N, g.K, true, false, true);
    }
    be->to_host(ga.data(), plain.grads(), n);
    be->to_host(gb.data(), deferred.grads(), n);
    const ParamInfo* wte = plain.find_param("wte");
    ASSERT_NE(wte, nullptr);
    double diff = 0, norm = 0;
    for (int64_t i = 0; i < n; ++i) {
      const bool in_wte = i >= wte->offset && i < wte->offset + wte->numel;
      if (!in_wte) {
        ASSERT_EQ(ga[size_t(i)], gb[size_t(i)]) << "element " << i;
        continue;
      }
      diff += std::pow(double(ga[size_t(i)]) - gb[size_t(i)], 2);
      norm += std::pow(double(ga[size_t(i)]), 2);
    }
    EXPECT_LE(std::sqrt(diff), 1e-6 * std::sqrt(norm));
    EXPECT_GT(norm, 0.0);
  }
}

// Offload with full recompute, two micro-batches in flight (F0 F1 B0 B1, as GPipe runs them):
// the checkpointed layer inputs live in host memory between forward and backward, so the device
// pool holds one set instead of one per slot, and the gradients are bitwise those of no offload.
// Expectation: device activation bytes drop by (slots - 1) * (layers + 1) * rows * hidden * 4.
TEST(RuntimeGradCheck, OffloadIsBitwiseIdenticalAndShrinksTheDevicePool) {
  auto run = [](bool offload, std::vector<float>* grads) {
    auto be = make_cpu_backend(2);
    auto tp = make_self_communicator();
    const ModelSpec m = tiny_model(true);
    GptConfig c = tiny_config(m, 7);
    c.slots = 2;
    c.recompute = Recompute::Full;
    c.offload = offload;
    Gpt g(c, *be, *tp);
    g.init_params();
    g.zero_grads();
    const int rows = c.mbs * c.seq_len;
    std::vector<int32_t> tok(size_t(2 * rows));
    for (size_t i = 0; i < tok.size(); ++i) tok[i] = int32_t((i * 7 + 3) % size_t(m.vocab));
    g.forward(0, tok.data(), nullptr, nullptr, tok.data() + rows, 0.01f);
    g.forward(1, tok.data() + rows, nullptr, nullptr, tok.data(), 0.01f);
    g.backward(0, nullptr, nullptr);
    g.backward(1, nullptr, nullptr);
    grads->resize(size_t(g.num_params()));
    be->to_host(grads->data(), g.grads(), g.num_params());
    return std::pair{g.activation_bytes(), g.host_activation_bytes()};
  };
  std::vector<float> ga, gb;
  const auto [dev_a, host_a] = run(false, &ga);
  const auto [dev_b, host_b] = run(true, &gb);
  EXPECT_EQ(ga, gb);
  const ModelSpec m = tiny_model(true);
  const int64_t set = int64_t(m.layers + 1) * 2 * m.seq_len * m.hidden * 4;
  EXPECT_EQ(host_a, 0);
  EXPECT_EQ(host_b, 2 * set);
  EXPECT_EQ(dev_a - dev_b, set);
}

// The working buffers (a layer's backward gradients, the LM head's logits chunk) are allocated
// once and shared by every micro-batch in flight, and counted apart from the kept activations.
// Expectation: three slots instead of one grow the kept pool only; a head chunk of 4 rows instead
// of the whole micro-batch's 12 shrinks the working buffers by (12 - 4) rows of vocab-wide logits.
TEST(RuntimeGradCheck, WorkingBuffersAreSharedByEveryMicroBatchAndCountedApart) {
  const ModelSpec m = tiny_model(false);
  auto bytes = [&](int slots, int head_chunk_rows) {
    auto be = make_cpu_backend(1);
    auto tp = make_self_communicator();
    GptConfig c = tiny_config(m, 5);
    c.slots = slots;
    c.head_chunk_rows = head_chunk_rows;
    Gpt g(c, *be, *tp);
    return std::pair{g.activation_bytes(), g.working_bytes()};
  };
  const auto [kept1, work1] = bytes(1, 0);
  const auto [kept3, work3] = bytes(3, 0);
  const auto [kept_chunked, work_chunked] = bytes(1, 4);
  EXPECT_GT(work1, 0);
  EXPECT_EQ(work3, work1);
  EXPECT_EQ(kept3, 3 * kept1);
  EXPECT_EQ(kept_chunked, kept1);
  const int64_t rows = 2 * m.seq_len;  // mbs 2
  EXPECT_EQ(work1 - work_chunked, (rows - 4) * int64_t(m.vocab) * 4);
}

// ZeRO-2/3 on one DP rank: the per-layer buckets reduced into the gradient shard (and, with
// ZeRO-3, the weights gathered per layer from the parameter shard, also under full recompute)
// give bitwise the gradients of the whole buffers. Expectation: equal vectors.
TEST(RuntimeGradCheck, ZeroBucketsAndGatheredLayersEqualWholeBuffers) {
  for (const Recompute rc : {Recompute::None, Recompute::Full}) {
    auto run = [rc](int zero, std::vector<float>* grads, std::vector<float>* weights) {
      auto be = make_cpu_backend(1);
      auto tp = make_self_communicator();
      auto dp = make_self_communicator();
      const ModelSpec m = tiny_model(true);
      GptConfig c = tiny_config(m, 11);
      c.recompute = rc;
      c.zero = zero;
      c.dp = dp.get();
      Gpt g(c, *be, *tp);
      g.init_params();
      g.zero_grads();
      const int rows = c.mbs * c.seq_len;
      std::vector<int32_t> tok(size_t(2 * rows));
      for (size_t i = 0; i < tok.size(); ++i) tok[i] = int32_t((i * 5 + 1) % size_t(m.vocab));
      g.forward(0, tok.data(), nullptr, nullptr, tok.data() + rows, 0.01f);
      g.backward(0, nullptr, nullptr);
      g.finish_backward();
      g.flush_gradients();
      grads->resize(size_t(g.num_params()));
      weights->resize(size_t(g.num_params()));
      be->to_host(grads->data(), zero >= 2 ? g.grad_shard() : g.grads(), g.num_params());
      be->to_host(weights->data(), zero >= 3 ? g.param_shard() : g.params(), g.num_params());
      EXPECT_EQ(g.grads() == nullptr, zero >= 2);
      EXPECT_EQ(g.params() == nullptr, zero >= 3);
    };
    std::vector<float> g0, w0, g2, w2, g3, w3;
    run(0, &g0, &w0);
    run(2, &g2, &w2);
    run(3, &g3, &w3);
    EXPECT_EQ(g0, g2);
    EXPECT_EQ(g0, g3);
    EXPECT_EQ(w0, w3);
  }
}

// ---- mixture of experts ----

// A tiny MoE model: both layers' MLPs are 4 experts (top-2, width 8) and one shared expert.
ModelSpec tiny_moe_model(bool llama) {
  ModelSpec m = tiny_model(llama);
  m.name = "tiny-moe";
  m.moe.experts = 4;
  m.moe.top_k = 2;
  m.moe.expert_ffn_hidden = 8;
  m.moe.shared_experts = 1;
  return m;
}

MoeConfig moe_config(const ModelSpec& m, double capacity_factor) {
  MoeConfig c;
  c.experts = m.moe.experts;
  c.top_k = m.moe.top_k;
  c.ffn_hidden = m.moe.expert_ffn_hidden;
  c.shared_experts = m.moe.shared_experts;
  c.capacity_factor = capacity_factor;
  c.aux_loss_coeff = 0.1;  // large, so that the load-balancing term's gradient is checked too
  return c;
}

// Directional finite differences (as check_gradients) of the whole objective, the mean token loss
// plus the load-balancing loss, for every tensor of the dense buffer (router and shared experts
// included) and of the expert buffer. The routing (top-2 and the capacity's drops) is a step
// function of the router's logits: the difference is taken over a step on which no token's
// routing changes (checked; eps from 1e-2 down by 4x), where the objective is smooth. The router
// is scaled up 20x so that its probabilities, hence gates and load-balancing term, are far from
// uniform (at 150x the softmax is so sharp that the central difference's truncation error,
// O(eps^2), passes the tolerance). With capacity 1.0 some choices are dropped (asserted).
void check_moe_gradients(double capacity_factor) {
  const ModelSpec m = tiny_moe_model(true);
  auto be = make_cpu_backend(2);
  auto tp = make_self_communicator();
  GptConfig c = tiny_config(m, 7);
  c.moe = moe_config(m, capacity_factor);
  Gpt g(c, *be, *tp);
  g.init_params();
  const int rows = c.mbs * c.seq_len;
  std::mt19937 rng(3);
  std::vector<int32_t> tokens, targets;
  for (int i = 0; i < rows; ++i) {
    tokens.push_back(int32_t(rng() % uint32_t(m.vocab)));
    targets.push_back(int32_t(rng() % uint32_t(m.vocab)));
  }
  const int64_t n = g.num_params(), ne = g.expert_numel();
  ASSERT_GT(ne, 0);
  std::vector<float> params(static_cast<size_t>(n)), experts(static_cast<size_t>(ne));
  be->to_host(params.data(), g.params(), n);
  be->to_host(experts.data(), g.expert_params(), ne);
  for (const ParamInfo& p : g.param_infos())
    if (p.name.find("router") != std::string::npos)
      for (int64_t i = 0; i < p.numel; ++i) params[size_t(p.offset + i)] *= 20.0f;
  be->from_host(g.params(), params.data(), n);
  auto objective = [&](bool grads) {
    g.zero_grads();
    const double sum = g.forward(0, tokens.data(), nullptr, nullptr, targets.data(), 1.0f / float(rows));
    if (grads) g.backward(0, nullptr, nullptr);
    return sum / rows + g.aux_loss();  // aux_scale = loss scale * rows = 1
  };
  objective(true);
  if (capacity_factor > 0)
    EXPECT_GT(g.dropped(), 0) << "capacity 1.0 with top-2 of 4 experts drops some choices";
  else
    EXPECT_EQ(g.dropped(), 0);
  EXPECT_GT(g.aux_loss(), 0.0);
  std::vector<float> gd(static_cast<size_t>(n)), ge(static_cast<size_t>(ne));
  be->to_host(gd.data(), g.grads(), n);
  be->to_host(ge.data(), g.expert_grads(), ne);
  const std::vector<int> routing = g.routing();
  ASSERT_EQ(routing.size(), size_t(2 * rows * 2));  // 2 layers x rows x top-2
  std::mt19937 urng(11);
  std::normal_distribution<double> normal;
  auto check = [&](const ParamInfo& p, std::vector<float>& base, const std::vector<float>& grad,
                   float* device, int64_t count) {
    std::vector<double> u(size_t(p.numel));
    double gnorm = 0, rnorm = 0;
    std::vector<double> r(size_t(p.numel));
    for (int64_t i = 0; i < p.numel; ++i) {
      gnorm += double(grad[size_t(p.offset + i)]) * grad[size_t(p.offset + i)];
      r[size_t(i)] = normal(urng);
      rnorm += r[size_t(i)] * r[size_t(i)];
    }
    gnorm = std::sqrt(gnorm);
    rnorm = std::sqrt(rnorm);
    ASSERT_GT(gnorm, 0.0) << p.name << ": gradient is zero";
    double unorm = 0, analytic = 0;
    for (int64_t i = 0; i < p.numel; ++i) {
      u[size_t(i)] = grad[size_t(p.offset + i)] / gnorm + r[size_t(i)] / rnorm;
      unorm += u[size_t(i)] * u[size_t(i)];
    }
    unorm = std::sqrt(unorm);
    for (int64_t i = 0; i < p.numel; ++i) {
      u[size_t(i)] /= unorm;
      analytic += grad[size_t(p.offset + i)] * u[size_t(i)];
    }
    bool same_routing = true;
    auto shifted = [&](double sh) {
      std::vector<float> q = base;
      for (int64_t i = 0; i < p.numel; ++i)
        q[size_t(p.offset + i)] = float(base[size_t(p.offset + i)] + sh * u[size_t(i)]);
      be->from_host(device, q.data(), count);
      const double v = objective(false);
      same_routing = same_routing && g.routing() == routing;
      return v;
    };
    // A shift that changes a token's experts (or what the capacity drops) crosses a step of the
    // objective: the difference is then taken over a shorter step, until none changes.
    double eps = 1e-2, numeric = 0;
    for (int tries = 0; tries < 6; ++tries, eps /= 4) {
      same_routing = true;
      numeric = (shifted(eps) - shifted(-eps)) / (2 * eps);
      if (same_routing) break;
    }
    be->from_host(device, base.data(), count);
    ASSERT_TRUE(same_routing) << p.name << ": every shift changed the routing";
    std::printf("%-22s Expectation: d/du = %.6e  Actual result: %.6e\n", p.name.c_str(), numeric,
                analytic);
    EXPECT_NEAR(analytic, numeric, 2e-3 * std::abs(numeric) + 2e-5) << p.name;
  };
  int routers = 0, shared = 0;
  for (const ParamInfo& p : g.param_infos()) {
    routers += p.name.find("router") != std::string::npos;
    shared += p.name.find("shared") != std::string::npos;
    check(p, params, gd, g.params(), n);
  }
  for (const ParamInfo& p : g.expert_infos()) check(p, experts, ge, g.expert_params(), ne);
  EXPECT_EQ(routers, 2);
  EXPECT_EQ(shared, 4);
  EXPECT_EQ(g.expert_infos().size(), 2u * 4 * 2);  // 2 layers x 4 experts x (fc, proj)
}

TEST(RuntimeGradCheck, MixtureOfExpertsDropless) { check_moe_gradients(0.0); }
TEST(RuntimeGradCheck, MixtureOfExpertsWithCapacity) { check_moe_gradients(1.0); }

// ---- ring attention ----

// The blocks of ring attention for cp = 2 (rank r holds chunks r and 3 - r of 4), each rank's
// queries folded over every rank's keys and values in ring order, as RingAttention runs them
// (the messages aside, which the cp runs under mpirun cover): Expectation: the output equals the
// dense causal attention of the whole sequence (within 2e-6), and the gradient, assembled from
// the blocks' backward (dK, dV summed over the ranks that saw the block), passes a directional
// finite-difference check of L = sum(out * w) and equals the dense backward (within 1e-5).
// `host_loops`: the Backend base class's host loops (what a backend without its own block kernels
// runs) instead of the CPU backend's GEMM kernels.
void check_ring_attention(bool host_loops, int T) {
  auto be = make_cpu_backend(2);
  Backend& base = *be;
  auto block_forward = [&](auto&&... a) {
    if (host_loops) base.Backend::attention_block_forward(a...);
    else base.attention_block_forward(a...);
  };
  auto block_finish = [&](auto&&... a) {
    if (host_loops) base.Backend::attention_block_finish(a...);
    else base.attention_block_finish(a...);
  };
  auto block_backward = [&](auto&&... a) {
    if (host_loops) base.Backend::attention_block_backward(a...);
    else base.attention_block_backward(a...);
  };
  const int B = 2, Hl = 4, KVl = 2, D = 8, cp = 2, Tl = T / cp;
  const AttentionShape full{B, T, Hl, KVl, D}, local{B, Tl, Hl, KVl, D};
  const int S = full.qkv_stride(), KVS = 2 * KVl * D, O = Hl * D;
  std::mt19937 rng(5);
  std::normal_distribution<float> normal;
  std::vector<float> qkv(size_t(B) * T * S), w(size_t(B) * T * O);
  for (float& x : qkv) x = normal(rng);
  for (float& x : w) x = normal(rng);
  std::vector<std::vector<int32_t>> pos;
  for (int r = 0; r < cp; ++r) pos.push_back(cp_positions(T, cp, r));
  if (T == 16) {
    EXPECT_EQ(pos[0], (std::vector<int32_t>{0, 1, 2, 3, 12, 13, 14, 15}));
  }
  // Rows of each rank: its positions in every sequence.
  auto take = [&](const std::vector<float>& src, int width, int r) {
    std::vector<float> out(size_t(B) * Tl * width);
    for (int b = 0; b < B; ++b)
      for (int j = 0; j < Tl; ++j)
        std::copy_n(src.begin() + (int64_t(b) * T + pos[size_t(r)][size_t(j)]) * width, width,
                    out.begin() + (int64_t(b) * Tl + j) * width);
    return out;
  };
  auto kv_of = [&](const std::vector<float>& q) {
    std::vector<float> kv(size_t(B) * Tl * KVS);
    for (int64_t i = 0; i < int64_t(B) * Tl; ++i)
      std::copy_n(q.begin() + i * S + O, KVS, kv.begin() + i * KVS);
    return kv;
  };
  // Forward and backward of the ring; returns the loss and fills the full-layout gradient.
  auto ring = [&](const std::vector<float>& x, std::vector<float>* grad,
                  std::vector<float>* out_full) {
    std::vector<std::vector<float>> q(cp), kv(cp), out(cp), lse(cp);
    for (int r = 0; r < cp; ++r) {
      q[size_t(r)] = take(x, S, r);
      kv[size_t(r)] = kv_of(q[size_t(r)]);
    }
    double loss = 0;
    for (int r = 0; r < cp; ++r) {
      std::vector<float> acc(size_t(B) * Tl * O, 0.0f), mx(size_t(B) * Hl * Tl, -INFINITY),
          sm(size_t(B) * Hl * Tl, 0.0f);
      for (int step = 0; step < cp; ++step) {
        const int src = (r - step + cp) % cp;
        block_forward(acc.data(), mx.data(), sm.data(), q[size_t(r)].data(),
                                    kv[size_t(src)].data(), pos[size_t(r)].data(),
                                    pos[size_t(src)].data(), local);
      }
      out[size_t(r)].resize(acc.size());
      lse[size_t(r)].resize(mx.size());
      block_finish(out[size_t(r)].data(), lse[size_t(r)].data(), acc.data(),
                   mx.data(), sm.data(), local);
      const std::vector<float> wr = take(w, O, r);
      for (size_t i = 0; i < wr.size(); ++i) loss += double(out[size_t(r)][i]) * wr[i];
      if (out_full)
        for (int b = 0; b < B; ++b)
          for (int j = 0; j < Tl; ++j)
            std::copy_n(out[size_t(r)].begin() + (int64_t(b) * Tl + j) * O, O,
                        out_full->begin() + (int64_t(b) * T + pos[size_t(r)][size_t(j)]) * O);
    }
    if (!grad) return loss;
    grad->assign(qkv.size(), 0.0f);
    std::vector<std::vector<float>> dq(cp), dkv(cp);
    for (int r = 0; r < cp; ++r) {
      dq[size_t(r)].assign(size_t(B) * Tl * S, 0.0f);
      dkv[size_t(r)].assign(size_t(B) * Tl * KVS, 0.0f);
    }
    for (int r = 0; r < cp; ++r) {
      const std::vector<float> wr = take(w, O, r);
      for (int step = 0; step < cp; ++step) {
        const int src = (r - step + cp) % cp;
        block_backward(dq[size_t(r)].data(), dkv[size_t(src)].data(), wr.data(),
                                     out[size_t(r)].data(), lse[size_t(r)].data(),
                                     q[size_t(r)].data(), kv[size_t(src)].data(),
                                     pos[size_t(r)].data(), pos[size_t(src)].data(), local);
      }
    }
    for (int r = 0; r < cp; ++r)
      for (int b = 0; b < B; ++b)
        for (int j = 0; j < Tl; ++j) {
          const int64_t li = int64_t(b) * Tl + j, fi = int64_t(b) * T + pos[size_t(r)][size_t(j)];
          std::copy_n(dq[size_t(r)].begin() + li * S, O, grad->begin() + fi * S);
          std::copy_n(dkv[size_t(r)].begin() + li * KVS, KVS, grad->begin() + fi * S + O);
        }
    return loss;
  };
  std::vector<float> grad, out_ring(size_t(B) * T * O), out_dense(size_t(B) * T * O),
      probs(size_t(B) * Hl * T * T);
  ring(qkv, &grad, &out_ring);
  be->attention_forward(out_dense.data(), probs.data(), qkv.data(), full);
  for (size_t i = 0; i < out_dense.size(); ++i)
    ASSERT_NEAR(out_ring[i], out_dense[i], 2e-6) << "output element " << i;
  std::vector<float> dense_grad(qkv.size());
  be->attention_backward(dense_grad.data(), w.data(), qkv.data(), probs.data(), full);
  for (size_t i = 0; i < grad.size(); ++i)
    ASSERT_NEAR(grad[i], dense_grad[i], 1e-5) << "gradient element " << i;
  // Directional check along the gradient mixed with a random direction.
  std::vector<double> u(qkv.size());
  double gn = 0, rn = 0, un = 0, analytic = 0;
  std::vector<double> r(qkv.size());
  for (size_t i = 0; i < u.size(); ++i) {
    gn += double(grad[i]) * grad[i];
    r[i] = normal(rng);
    rn += r[i] * r[i];
  }
  for (size_t i = 0; i < u.size(); ++i) {
    u[i] = grad[i] / std::sqrt(gn) + r[i] / std::sqrt(rn);
    un += u[i] * u[i];
  }
  for (size_t i = 0; i < u.size(); ++i) {
    u[i] /= std::sqrt(un);
    analytic += grad[i] * u[i];
  }
  const double eps = 1e-2;
  auto shifted = [&](double sh) {
    std::vector<float> x = qkv;
    for (size_t i = 0; i < x.size(); ++i) x[i] = float(qkv[i] + sh * u[i]);
    return ring(x, nullptr, nullptr);
  };
  const double numeric = (shifted(eps) - shifted(-eps)) / (2 * eps);
  std::printf("ring attention (%s) Expectation: d/du = %.6e  Actual result: %.6e\n",
              host_loops ? "host loops" : "CPU kernels", numeric, analytic);
  EXPECT_NEAR(analytic, numeric, 2e-3 * std::abs(numeric) + 2e-5);
}

TEST(RuntimeGradCheck, RingAttentionBlocks) { check_ring_attention(false, 16); }
TEST(RuntimeGradCheck, RingAttentionBlocksOnHostLoops) { check_ring_attention(true, 16); }
// 80 rows per rank: the CPU kernels' query blocks of 64 rows and a remainder of 16, whose
// visible keys end inside the key block.
TEST(RuntimeGradCheck, RingAttentionBlocksOverSeveralQueryBlocks) { check_ring_attention(false, 160); }

// The ring without a communicator (what capplan-train measure times): rank r of cp 2 runs every
// block with its own K and V at each owner's positions. Reference: the dense causal attention of
// a whole sequence whose rows at every rank's positions carry this rank's K and V, and whose
// rows at rank r's positions carry its queries. Expectation (each rank): the output equals the
// dense one at rank r's rows (within 2e-6); dQ equals the dense dQ there and dK, dV the sum of
// the dense dK, dV over every owner's rows (the block's gradient accumulated, within 1e-5), with
// the output gradient zero at the other rows.
TEST(RuntimeGradCheck, RingAttentionWithoutCommunicatorRunsEveryBlock) {
  auto be = make_cpu_backend(2);
  const int B = 2, Hl = 4, KVl = 2, D = 8, cp = 2, T = 16, Tl = T / cp;
  const AttentionShape full{B, T, Hl, KVl, D}, local{B, Tl, Hl, KVl, D};
  const int S = full.qkv_stride(), KVS = 2 * KVl * D, O = Hl * D;
  std::mt19937 rng(9);
  std::normal_distribution<float> normal;
  for (int r = 0; r < cp; ++r) {
    std::vector<float> q(size_t(B) * Tl * S), dout(size_t(B) * Tl * O);
    for (float& x : q) x = normal(rng);
    for (float& x : dout) x = normal(rng);
    const std::vector<int32_t> mine = cp_positions(T, cp, r);
    std::vector<float> qkv_full(size_t(B) * T * S), dout_full(size_t(B) * T * O, 0.0f);
    for (float& x : qkv_full) x = normal(rng);  // queries at the other rows: not looked at
    for (int b = 0; b < B; ++b)
      for (int j = 0; j < Tl; ++j) {
        const int64_t li = int64_t(b) * Tl + j;
        for (int owner = 0; owner < cp; ++owner) {  // K and V at every owner's positions
          const int64_t fi = int64_t(b) * T + cp_positions(T, cp, owner)[size_t(j)];
          std::copy_n(q.begin() + li * S + O, KVS, qkv_full.begin() + fi * S + O);
        }
        const int64_t fi = int64_t(b) * T + mine[size_t(j)];
        std::copy_n(q.begin() + li * S, O, qkv_full.begin() + fi * S);
        std::copy_n(dout.begin() + li * O, O, dout_full.begin() + fi * O);
      }
    RingAttention ring(*be, cp, r, T);
    EXPECT_EQ(ring.positions(), mine);
    std::vector<float> out(size_t(B) * Tl * O), lse(size_t(B) * Hl * Tl), dqkv(q.size());
    ring.forward(out.data(), lse.data(), q.data(), local);
    ring.backward(dqkv.data(), dout.data(), out.data(), lse.data(), q.data(), local);
    std::vector<float> out_full(size_t(B) * T * O), probs(size_t(B) * Hl * T * T), dfull(qkv_full.size());
    be->attention_forward(out_full.data(), probs.data(), qkv_full.data(), full);
    be->attention_backward(dfull.data(), dout_full.data(), qkv_full.data(), probs.data(), full);
    double worst_out = 0, worst_grad = 0;
    for (int b = 0; b < B; ++b)
      for (int j = 0; j < Tl; ++j) {
        const int64_t li = int64_t(b) * Tl + j, fi = int64_t(b) * T + mine[size_t(j)];
        for (int i = 0; i < O; ++i) {
          worst_out = std::max(worst_out, double(std::abs(out[size_t(li * O + i)] - out_full[size_t(fi * O + i)])));
          worst_grad = std::max(worst_grad, double(std::abs(dqkv[size_t(li * S + i)] - dfull[size_t(fi * S + i)])));
        }
        for (int i = 0; i < KVS; ++i) {
          double sum = 0;
          for (int owner = 0; owner < cp; ++owner)
            sum += dfull[size_t((int64_t(b) * T + cp_positions(T, cp, owner)[size_t(j)]) * S + O + i)];
          worst_grad = std::max(worst_grad, std::abs(double(dqkv[size_t(li * S + O + i)]) - sum));
        }
      }
    std::printf("ring without a communicator, rank %d Expectation: output within 2e-6, gradient within 1e-5 of "
                "the dense attention  Actual result: %.2e, %.2e\n",
                r, worst_out, worst_grad);
    EXPECT_LT(worst_out, 2e-6);
    EXPECT_LT(worst_grad, 1e-5);
  }
}

// RoPE at explicit positions (the chunks a cp rank holds) equals rope() of the whole sequence at
// those rows: Expectation: equal within 1e-6.
TEST(RuntimeGradCheck, RopeAtPositionsEqualsWholeSequence) {
  auto be = make_cpu_backend(1);
  const int B = 1, T = 16, Hl = 2, KVl = 1, D = 8;
  const AttentionShape full{B, T, Hl, KVl, D};
  const int S = full.qkv_stride();
  std::vector<float> x(size_t(T) * S);
  std::mt19937 rng(2);
  std::normal_distribution<float> normal;
  for (float& v : x) v = normal(rng);
  std::vector<float> whole = x;
  be->rope(whole.data(), full, false);
  const std::vector<int32_t> pos = cp_positions(T, 2, 1);  // chunks 1 and 2 of 4
  std::vector<float> part(pos.size() * size_t(S));
  for (size_t j = 0; j < pos.size(); ++j)
    std::copy_n(x.begin() + int64_t(pos[j]) * S, S, part.begin() + int64_t(j) * S);
  // The CPU backend's kernel, then the base class's host loop (what the CUDA backend runs): both
  // equal the whole sequence's rows, and each other bit for bit.
  std::vector<float> host = part;
  be->rope_at(part.data(), AttentionShape{B, int(pos.size()), Hl, KVl, D}, pos.data(), false);
  be->Backend::rope_at(host.data(), AttentionShape{B, int(pos.size()), Hl, KVl, D}, pos.data(), false);
  for (size_t j = 0; j < pos.size(); ++j)
    for (int c = 0; c < S; ++c) {
      ASSERT_NEAR(part[j * size_t(S) + size_t(c)], whole[size_t(pos[j]) * S + size_t(c)], 1e-6);
      ASSERT_EQ(part[j * size_t(S) + size_t(c)], host[j * size_t(S) + size_t(c)]);
    }
}

// Initialisation is a function of (seed, tensor, element): the rank of TP 2 holding the second
// half of the heads gets exactly the rows of the full QKV weight a single rank has there.
TEST(RuntimeInit, TensorParallelSliceEqualsFullTensorRows) {
  for (const int head_dim : {0, 6}) {
  ModelSpec m = tiny_model(false);
  m.head_dim = head_dim;  // 0: hidden / heads
  auto be = make_cpu_backend(1);
  auto self = make_self_communicator();
  GptConfig c = tiny_config(m, 5, 1);
  Gpt full(c, *be, *self);
  full.init_params();
  c.tp_size = 2;
  c.tp_rank = 1;
  Gpt half(c, *be, *self);
  half.init_params();
  const ParamInfo* pf = full.find_param("layers.1.wqkv");
  const ParamInfo* ph = half.find_param("layers.1.wqkv");
  ASSERT_TRUE(pf && ph);
  const int C = m.hidden, D = m.head_dim_or_default(), H = m.heads;
  // Full rows: q heads 0..3, k heads 0..3, v heads 0..3; rank 1 of 2: q 2..3, k 2..3, v 2..3.
  for (int part = 0; part < 3; ++part)
    for (int row = 0; row < (H / 2) * D; ++row)
      for (int col = 0; col < C; ++col) {
        const int64_t frow = int64_t(part) * H * D + (H / 2) * D + row;
        const int64_t hrow = int64_t(part) * (H / 2) * D + row;
        ASSERT_EQ(full.params()[pf->offset + frow * C + col], half.params()[ph->offset + hrow * C + col]);
      }
  }
}

// Expectation (order "DPT", dp 2, pp 2, tp 2): rank = (d * 2 + p) * 2 + t, so rank 5 = (1, 0, 1);
// with "TPD" the dp coordinate varies fastest: rank 5 = t 1, p 0, d 1 -> (d 1, p 0, t 1) as well,
// and rank 1 = (d 1, p 0, t 0).
TEST(RuntimePlacement, OrderRightMostFastest) {
  Layout l;
  l.dp = 2;
  l.pp = 2;
  l.tp = 2;
  l.order = "DPT";
  RankCoords c = rank_to_coords(5, l);
  EXPECT_EQ(c.dp, 1);
  EXPECT_EQ(c.pp, 0);
  EXPECT_EQ(c.tp, 1);
  c = rank_to_coords(1, l);
  EXPECT_EQ(c.tp, 1);
  EXPECT_EQ(c.dp, 0);
  l.order = "TPD";
  c = rank_to_coords(1, l);
  EXPECT_EQ(c.dp, 1);
  EXPECT_EQ(c.tp, 0);
  for (int r = 0; r < 8; ++r) EXPECT_EQ(coords_to_rank(rank_to_coords(r, l), l), r);
}

// Expectation: lr 1e-3, warm-up 10, 110 steps, min ratio 0.1: step 0 -> 1e-4; step 9 -> 1e-3;
// step 60 (half way through the cosine) -> 0.55e-3; step 110 -> 1e-4.
TEST(RuntimeOptimizer, WarmupCosineSchedule) {
  OptimizerConfig c;
  c.lr = 1e-3;
  c.warmup_steps = 10;
  c.total_steps = 110;
  c.min_lr_ratio = 0.1;
  EXPECT_NEAR(learning_rate(c, 0), 1e-4, 1e-12);
  EXPECT_NEAR(learning_rate(c, 9), 1e-3, 1e-12);
  EXPECT_NEAR(learning_rate(c, 60), 0.55e-3, 1e-12);
  EXPECT_NEAR(learning_rate(c, 110), 1e-4, 1e-12);
}


// `capplan-train --help` names every flag the parser takes, and the parser takes every flag the
// help names (those of `data prepare` aside); --thread-split takes auto or kernel only.
TEST(RuntimeTrainArgs, HelpAndParserAgree) {
  const std::string usage = train_usage();
  for (const std::string& f : train_flags())
    EXPECT_NE(usage.find("--" + f + " "), std::string::npos) << "--" << f << " not in --help";
  std::set<std::string> named;
  for (size_t i = usage.find("--"); i != std::string::npos; i = usage.find("--", i + 2)) {
    size_t j = i + 2;
    while (j < usage.size() && (std::islower(static_cast<unsigned char>(usage[j])) ||
                                std::isdigit(static_cast<unsigned char>(usage[j])) ||
                                usage[j] == '-'))
      ++j;
    named.insert(usage.substr(i + 2, j - i - 2));
  }
  for (const char* prepare : {"text", "out", "shard-bytes"}) named.erase(prepare);
  for (const std::string& f : named)
    EXPECT_NE(std::find(train_flags().begin(), train_flags().end(), f), train_flags().end())
        << "--help names --" << f << ", which the parser does not take";
  TrainOptions o;
  const char* ok[] = {"capplan-train", "--model", "m.yaml", "--thread-split", "kernel"};
  EXPECT_FALSE(TrainOptions::parse(5, ok, &o).has_errors());
  EXPECT_EQ(o.thread_split, "kernel");
  TrainOptions bad;
  const char* wrong[] = {"capplan-train", "--model", "m.yaml", "--thread-split", "rows"};
  const Diagnostics d = TrainOptions::parse(5, wrong, &bad);
  ASSERT_TRUE(d.has_errors());
  EXPECT_NE(d.to_string().find("--thread-split: expected auto or kernel, found 'rows'"),
            std::string::npos)
      << d.to_string();
}

}  // namespace
}  // namespace capplan::rt
