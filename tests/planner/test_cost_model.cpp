// The cost model term by term on hand-derivable cases: memory of a tiny model, ZeRO sharding,
// recompute, pipeline bubbles, ring all-reduce over NVLink and across nodes, placement, and the
// agreement of step_costs() with estimate().
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "model_fixtures.h"
#include "planner/cost_model.h"
#include "planner/profile.h"
#include "planner/search.h"
#include "planner/spec_io.h"

namespace capplan {
namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

void report(const char* what, double expected, double actual) {
  std::printf("Expectation: %s = %.9g  Actual: %.9g\n", what, expected, actual);
}

Layout layout(int dp, int tp, int pp, int mbs) {
  Layout l;
  l.dp = dp;
  l.tp = tp;
  l.pp = pp;
  l.mbs = mbs;
  return l;
}

// Tiny model parameters, counted by hand: a block has 4h^2 + 8h^2 matrices, 9h biases and two
// LayerNorms (4h): 49984 for h = 64; embedding 1000*64 + positions 32*64 = 66048; final norm 128.
constexpr double kTinyParams = 2 * 49984 + 66048 + 128;

TEST(CostModel, MemoryOfTinyModelCountedByHand) {
  const Scenario sc = test::scenario(test::tiny_model(), 1, 2);
  const Estimate e = estimate(sc, layout(1, 1, 1, 2));
  ASSERT_TRUE(e.reason.empty()) << e.reason;
  const MemoryBytes& m = e.memory_per_gpu_bytes;
  // Mixed-precision Adam in bf16: 2 B weights, 4 B (fp32 main) gradients, 12 B optimizer state
  // per parameter.
  report("weights", 2 * kTinyParams, m.weights);
  EXPECT_DOUBLE_EQ(m.weights, 2 * kTinyParams);
  report("gradients", 4 * kTinyParams, m.gradients);
  EXPECT_DOUBLE_EQ(m.gradients, 4 * kTinyParams);
  EXPECT_DOUBLE_EQ(m.optimizer, 12 * kTinyParams);
  // Activations, one micro-batch of b = 2 in flight: per layer s b h (34 + 5 a s / h) =
  // 4096 * 44 = 180224 B, two layers; the embedding's dropout mask s b h = 4096 B; the fp32 logits
  // 4 s b V = 256000 B while the loss is back-propagated.
  const double act = 2 * 180224.0 + 4096 + 256000;
  report("activations", act, m.activations);
  EXPECT_DOUBLE_EQ(m.activations, act);
  // Buffers: 1 GiB fixed reservation + 5 % allocator margin of the rest.
  const double rest = 18 * kTinyParams + act;
  EXPECT_DOUBLE_EQ(m.buffers, kGiB + 0.05 * rest);
  EXPECT_DOUBLE_EQ(m.total, rest + m.buffers);
  EXPECT_DOUBLE_EQ(m.capacity, 80 * kGiB);
  EXPECT_TRUE(e.fits);

  // The same run on CPU ranks of capplan-train (cpu_rank: no GPU runtime, every buffer allocated
  // once): no reservation and no allocator margin; the state and activations are unchanged.
  Scenario cpu = sc;
  cpu.cluster.gpu.cpu_rank = true;
  const MemoryBytes& c = estimate(cpu, layout(1, 1, 1, 2)).memory_per_gpu_bytes;
  EXPECT_DOUBLE_EQ(c.weights, m.weights);
  EXPECT_DOUBLE_EQ(c.activations, m.activations);
  EXPECT_DOUBLE_EQ(c.buffers, 0);
  EXPECT_DOUBLE_EQ(c.total, rest);

  // ZeRO-2 and ZeRO-3 on CPU ranks (dp 2): capplan-train's buffers, one layer's (49984) and the
  // embedding's (66048) and final norm's (128) parameters, for the gradients (4 B under bf16) and
  // with ZeRO-3 for the gathered weights too (2 B).
  Scenario cpu2 = test::scenario(test::tiny_model(), 2, 4);
  cpu2.cluster.gpu.cpu_rank = true;
  const double units = 49984.0 + 66048 + 128;
  for (const int z : {2, 3}) {
    Layout l = layout(2, 1, 1, 2);
    l.zero = z;
    const Estimate ez = estimate(cpu2, l);
    ASSERT_TRUE(ez.reason.empty()) << ez.reason;
    EXPECT_DOUBLE_EQ(ez.memory_per_gpu_bytes.buffers, units * (z == 3 ? 6 : 4)) << "zero " << z;
  }
}

TEST(CostModel, FullRecomputeKeepsOnlyLayerInputs) {
  const Scenario sc = test::scenario(test::tiny_model(), 1, 2);
  Layout l = layout(1, 1, 1, 2);
  l.recompute = Recompute::Full;
  const Estimate e = estimate(sc, l);
  // Kept: 2 s b h per layer (Korthikanti Sec 4.3) = 8192 B x 2, embedding mask 4096; working set:
  // the larger of one layer's full activations 180224 while it is recomputed and the logits
  // 256000 (the LM head's forward, loss and backward free them before the first recompute).
  const double act = 2 * 8192.0 + 4096 + std::max(180224.0, 256000.0);
  report("activations with full recompute", act, e.memory_per_gpu_bytes.activations);
  EXPECT_DOUBLE_EQ(e.memory_per_gpu_bytes.activations, act);
  EXPECT_GT(e.breakdown_s.recompute, 0);
  EXPECT_GT(e.hardware_tflops_per_gpu, e.model_tflops_per_gpu);

  // On CPU ranks capplan-train allocates the recomputed layer and the logits once at start, so
  // both are held: the working set is their sum. Selective recompute holds one scores buffer,
  // what it drops from each layer: 5 a s / h x s b h = 40960 B (180224 - 34 s b h).
  Scenario cpu = sc;
  cpu.cluster.gpu.cpu_rank = true;
  EXPECT_DOUBLE_EQ(estimate(cpu, l).memory_per_gpu_bytes.activations, 2 * 8192.0 + 4096 + 180224 + 256000);
  Layout sel = l;
  sel.recompute = Recompute::Selective;
  const double kept_selective = 2 * (180224.0 - 40960) + 4096;
  EXPECT_DOUBLE_EQ(estimate(sc, sel).memory_per_gpu_bytes.activations, kept_selective + 256000);
  EXPECT_DOUBLE_EQ(estimate(cpu, sel).memory_per_gpu_bytes.activations, kept_selective + 40960 + 256000);
}

TEST(CostModel, ZeroStagesShardOverDataParallelGroup) {
  const Scenario sc = test::scenario(test::tiny_model(), 4, 8);
  for (int z = 0; z <= 3; ++z) {
    Layout l = layout(4, 1, 1, 2);
    l.zero = z;
    const Estimate e = estimate(sc, l);
    ASSERT_TRUE(e.reason.empty()) << e.reason;
    const MemoryBytes& m = e.memory_per_gpu_bytes;
    std::printf("Expectation: zero %d shards optimizer%s%s by 4\n", z, z >= 2 ? ", gradients" : "",
                z >= 3 ? ", weights" : "");
    EXPECT_DOUBLE_EQ(m.optimizer, 12 * kTinyParams / (z >= 1 ? 4 : 1));
    EXPECT_DOUBLE_EQ(m.gradients, 4 * kTinyParams / (z >= 2 ? 4 : 1));
    EXPECT_DOUBLE_EQ(m.weights, 2 * kTinyParams / (z >= 3 ? 4 : 1));
  }
}

double pipeline_time(const Estimate& e) {
  const TimeBreakdown& b = e.breakdown_s;
  return b.compute + b.recompute + b.tp_comm + b.pp_comm + b.bubble;
}

// Compute-stream work of stage s per micro-batch (all its chunks), from step_costs().
double stage_work(const StepCosts& c, int pp, int s) {
  double w = 0;
  for (size_t g = size_t(s); g < c.chunks.size(); g += size_t(pp)) {
    const ChunkCosts& ch = c.chunks[g];
    w += ch.forward_s + ch.backward_input_s + ch.backward_weight_s + ch.recompute_s + ch.tp_comm_forward_s +
         ch.tp_comm_backward_s;
  }
  return w;
}

TEST(CostModel, BubbleFractionOneFOneBAndGPipe) {
  // p = 4, m = 8: the last stage (LM head) paces; the fill is the work of the stages before it,
  // sum_{s<3} w_s, which for equal stages is (p-1) w: bubble / pipeline time = (p-1)/(m+p-1) = 3/11
  // (Narayanan et al. 2021 Sec 2.2.1). Here stage 0 also embeds, so the fill is that sum exactly;
  // with a 10-token vocabulary the stages are nearly equal and the fraction is 3/11 within 2 %.
  for (int vocab : {1000, 10}) {
    ModelSpec md = test::tiny_model(8);
    md.vocab = vocab;
    Scenario sc = test::scenario(md, 4, 8);
    // Sends free (the tiny model's stages take about a microsecond, as long as one send's
    // latency), so that only compute decides which stage paces.
    sc.cluster.intra_node_latency_us = 1e-9;
    sc.cluster.intra_node_gbyte_per_s = 1e9;
    for (Schedule s : {Schedule::OneFOneB, Schedule::GPipe}) {
      Layout l = layout(1, 1, 4, 1);
      l.schedule = s;
      const Estimate e = estimate(sc, l);
      ASSERT_TRUE(e.reason.empty()) << e.reason;
      EXPECT_EQ(e.num_microbatches, 8);
      const StepCosts c = step_costs(sc, l);
      const double fill = stage_work(c, 4, 0) + stage_work(c, 4, 1) + stage_work(c, 4, 2);
      report("fill = w0 + w1 + w2", fill, e.breakdown_s.bubble);
      EXPECT_NEAR(e.breakdown_s.bubble, fill, 1e-12 * fill);
      const double frac = e.breakdown_s.bubble / pipeline_time(e);
      report("bubble fraction p=4 m=8 (equal stages)", 3.0 / 11.0, frac);
      if (vocab == 10) EXPECT_NEAR(frac, 3.0 / 11.0, 0.02 * 3.0 / 11.0);
      else EXPECT_LT(frac, 3.0 / 11.0);  // a heavy last stage: the fill is shorter than its pace
    }
  }
}

TEST(CostModel, BubbleFractionInterleavedDividesByVp) {
  // p = 4, m = 8, vp = 2: the fill shrinks to (sum_{s<3} w_s)/vp, for equal stages (p-1)/vp
  // slots: (3/2)/(8 + 3/2) = 3/19 (within 2 % with a 10-token vocabulary).
  ModelSpec md = test::tiny_model(8);
  md.vocab = 10;
  Scenario sc = test::scenario(md, 4, 8);
  sc.cluster.intra_node_latency_us = 1e-9;  // sends free, as above
  sc.cluster.intra_node_gbyte_per_s = 1e9;
  Layout l = layout(1, 1, 4, 1);
  l.schedule = Schedule::Interleaved;
  l.vp = 2;
  const Estimate e = estimate(sc, l);
  ASSERT_TRUE(e.reason.empty()) << e.reason;
  const StepCosts c = step_costs(sc, l);
  const double fill = (stage_work(c, 4, 0) + stage_work(c, 4, 1) + stage_work(c, 4, 2)) / 2;
  EXPECT_NEAR(e.breakdown_s.bubble, fill, 1e-12 * fill);
  const double frac = e.breakdown_s.bubble / pipeline_time(e);
  report("bubble fraction p=4 m=8 vp=2", 3.0 / 19.0, frac);
  EXPECT_NEAR(frac, 3.0 / 19.0, 0.02 * 3.0 / 19.0);
}

TEST(CostModel, GPipeHoldsAllMicrobatchesOneFOneBOnlyP) {
  const Scenario sc = test::scenario(test::tiny_model(8), 4, 16);
  Layout a = layout(1, 1, 4, 1);
  Layout b = a;
  b.schedule = Schedule::GPipe;
  const double act_1f1b = estimate(sc, a).memory_per_gpu_bytes.activations;
  const double act_gpipe = estimate(sc, b).memory_per_gpu_bytes.activations;
  // Per micro-batch (b = 1) a layer keeps s b h (34 + 5 a s / h) = 2048 * 44 = 90112 B; each
  // stage has 2 layers. 1F1B: stage 0 peaks with p = 4 micro-batches (+ its embedding mask of
  // 2048 B each). GPipe: every stage holds all m = 16; the last one also the fp32 logits
  // 4 s b V = 128000 B, so it peaks.
  const double layers_mb = 2 * 90112.0;
  report("1F1B peak activations (stage 0)", 4 * (layers_mb + 2048), act_1f1b);
  report("GPipe peak activations (last stage)", 16 * layers_mb + 128000, act_gpipe);
  EXPECT_DOUBLE_EQ(act_1f1b, 4 * (layers_mb + 2048));
  EXPECT_DOUBLE_EQ(act_gpipe, 16 * layers_mb + 128000);
}

TEST(CostModel, InterleavedStageZeroHoldsKorthikantiFactor) {
  // p = 2, vp = 2, 8 layers (2 per chunk), m = 4: stage 0 holds (p-1)*2 + (vp-1)*p + 1 = 5 chunk
  // micro-batches = 10 layer-micro-batches = L/p * p * (1 + (p-1)/(p vp)) = 4 * 2 * 1.25
  // (Korthikanti et al. 2022 Sec 4.2.3), plus the embedding mask of the 5 / vp micro-batches.
  const Scenario sc = test::scenario(test::tiny_model(8), 2, 4);
  Layout l = layout(1, 1, 2, 1);
  l.schedule = Schedule::Interleaved;
  l.vp = 2;
  const Estimate e = estimate(sc, l);
  ASSERT_TRUE(e.reason.empty()) << e.reason;
  const double expected = 10 * 90112.0 + 2.5 * 2048;
  report("interleaved stage-0 activations", expected, e.memory_per_gpu_bytes.activations);
  EXPECT_DOUBLE_EQ(e.memory_per_gpu_bytes.activations, expected);
}

// Cluster with exact link figures: efficiency 1, fixed latencies.
Scenario exact_links(int gpus, int64_t gbs) {
  Scenario sc = test::scenario(test::tiny_model(), gpus, gbs);
  sc.cluster.efficiency.intra_node = 1.0;
  sc.cluster.efficiency.inter_node = 1.0;
  sc.cluster.intra_node_latency_us = 10;
  sc.cluster.inter_node_latency_us = 20;
  return sc;
}

TEST(CostModel, RingAllReduceInsideANode) {
  // dp = 8 on one node: 2(n-1)/n * S / B + 2(n-1) * latency, B = 300 GB/s, S = 2 B per parameter
  // (fp16 gradients).
  Scenario sc = exact_links(8, 8);
  sc.training.precision = Precision::Fp16;
  const StepCosts c = step_costs(sc, layout(8, 1, 1, 1));
  const double S = 2 * kTinyParams;
  const double expected = 2.0 * 7 / 8 * S / 300e9 + 2 * 7 * 10e-6;
  report("ring all-reduce, 8 GPUs, NVLink", expected, c.dp_comm_s);
  EXPECT_DOUBLE_EQ(c.dp_bytes, S);
  EXPECT_NEAR(c.dp_comm_s, expected, expected * 1e-12);
}

TEST(CostModel, HierarchicalAllReduceAcrossNodes) {
  // dp = 16 over 2 nodes of 8: the ring is limited by the NIC, 100 Gb/s = 12.5 GB/s per node
  // shared by one group of 8 (8/8 of it); latency: 7 steps inside each node, 1 between nodes, x2.
  Scenario sc = exact_links(16, 16);
  sc.training.precision = Precision::Fp16;
  const StepCosts c = step_costs(sc, layout(16, 1, 1, 1));
  const double S = 2 * kTinyParams;
  const double expected = 2.0 * 15 / 16 * S / 12.5e9 + 2 * (7 * 10e-6 + 1 * 20e-6);
  report("hierarchical all-reduce, 2 x 8 GPUs", expected, c.dp_comm_s);
  EXPECT_NEAR(c.dp_comm_s, expected, expected * 1e-12);
}

TEST(CostModel, PlacementOrderDecidesWhichLinksTensorParallelCrosses) {
  // tp = 8, dp = 2 on 2 nodes: "DPT" packs each TP group in a node; "TDP" spreads it over both.
  ModelSpec m = test::tiny_model();
  m.hidden = 1024;  // large enough for bandwidth, not latency, to dominate
  m.heads = 8;
  m.seq_len = 512;
  Scenario sc = test::scenario(m, 16, 16);
  Layout inside = layout(2, 8, 1, 1);
  Layout across = inside;
  across.order = "TDP";
  const Estimate a = estimate(sc, inside);
  const Estimate b = estimate(sc, across);
  ASSERT_TRUE(a.reason.empty()) << a.reason;
  std::printf("Expectation: TP over NVLink (%.3g s) faster than across nodes (%.3g s)\n",
              a.breakdown_s.tp_comm, b.breakdown_s.tp_comm);
  EXPECT_LT(a.breakdown_s.tp_comm * 5, b.breakdown_s.tp_comm);
  EXPECT_DOUBLE_EQ(a.breakdown_s.compute, b.breakdown_s.compute);
}

TEST(CostModel, TensorGroupsStraddlingNodesPayTheNic) {
  // tp = 6 on 8-GPU nodes: ranks 6..11 form a TP group across two nodes, so the TP collectives
  // of the step run at NIC speed; on 6-GPU nodes every group stays on NVLink.
  ModelSpec m = test::tiny_model();
  m.hidden = 1536;
  m.heads = 12;
  m.seq_len = 512;
  Scenario eight = test::scenario(m, 24, 24);
  Scenario six = eight;
  six.cluster.gpus_per_node = 6;
  six.nodes = 4;
  const Layout l = layout(4, 6, 1, 1);
  const Estimate a = estimate(eight, l);
  const Estimate b = estimate(six, l);
  ASSERT_TRUE(a.reason.empty()) << a.reason;
  ASSERT_TRUE(b.reason.empty()) << b.reason;
  std::printf("Expectation: straddling TP (%.3g s) much slower than TP inside a node (%.3g s)\n",
              a.breakdown_s.tp_comm, b.breakdown_s.tp_comm);
  EXPECT_GT(a.breakdown_s.tp_comm, 5 * b.breakdown_s.tp_comm);
}

TEST(CostModel, SmallGemmsRunFurtherFromPeak) {
  // The GEMM roofline adds operand traffic to arithmetic: a block with h = 256 is bandwidth-bound,
  // one with h = 8192 approaches the 0.80 x 312 TFLOP/s arithmetic ceiling without reaching it.
  auto tflops = [](int hidden, int heads) {
    ModelSpec m = test::tiny_model(2);
    m.hidden = hidden;
    m.heads = heads;
    m.seq_len = 2048;
    m.vocab = 1024;
    const Scenario sc = test::scenario(m, 1, 8);  // 8 micro-batches amortise the optimizer step
    return estimate(sc, layout(1, 1, 1, 1)).hardware_tflops_per_gpu;
  };
  const double small = tflops(256, 4), big = tflops(8192, 64);
  std::printf("Expectation: h=256 well below h=8192 < 249.6 TFLOP/s  Actual: %.1f, %.1f\n", small, big);
  EXPECT_LT(small * 2, big);
  EXPECT_LT(big, 0.80 * 312);
  EXPECT_GT(big, 0.45 * 312);
}

TEST(CostModel, AHeadSizeApartWidensTheAttentionNotTheResidualStream) {
  // The tiny model's 4 heads at 32 instead of 64 / 4 = 16: Q, K and V go from 3 x 64 to 3 x 128
  // columns and the output projection's input from 64 to 128, so a block gains 2 h (q - h) +
  // 2 h (kv - h) = 4 x 64 x 64 matrix parameters and (q + 2 kv) - 3 h = 192 Q, K, V biases:
  // 16576 a block, 33152 for two. The residual stream, the FFN and the embedding stay as they are.
  const ModelSpec base = test::tiny_model(2);
  ModelSpec wide = base;
  wide.head_dim = 32;
  const double base_params = profile_model(base, 1, 32, 1).total_params;
  const double wide_params = profile_model(wide, 1, 32, 1).total_params;
  report("parameters added by head_dim 32", 33152, wide_params - base_params);
  EXPECT_DOUBLE_EQ(wide_params - base_params, 33152);
  EXPECT_DOUBLE_EQ(base_params, kTinyParams);
  // The estimate's weights grow by the same share, and the wider projections and attention core
  // take longer. Expectation: weights in proportion to the parameters; a longer step.
  const Estimate eb = estimate(test::scenario(base, 1, 8), layout(1, 1, 1, 1));
  const Estimate ew = estimate(test::scenario(wide, 1, 8), layout(1, 1, 1, 1));
  ASSERT_TRUE(eb.reason.empty() && ew.reason.empty()) << eb.reason << ew.reason;
  report("weights ratio", wide_params / base_params,
         ew.memory_per_gpu_bytes.weights / eb.memory_per_gpu_bytes.weights);
  EXPECT_NEAR(ew.memory_per_gpu_bytes.weights / eb.memory_per_gpu_bytes.weights, wide_params / base_params, 1e-12);
  EXPECT_GT(ew.step_time_s, eb.step_time_s);
  // A head size set equal to hidden / heads changes nothing.
  ModelSpec same = base;
  same.head_dim = 16;
  EXPECT_DOUBLE_EQ(estimate(test::scenario(same, 1, 8), layout(1, 1, 1, 1)).step_time_s, eb.step_time_s);
}

// The tiny model with latent attention: 4 heads, a query latent of 16, a key-value latent of 8,
// query-key heads of 16 + 8 rotary features, value heads of 16.
ModelSpec tiny_latent(int layers) {
  ModelSpec m = test::tiny_model(layers);
  m.mla.q_lora_rank = 16;
  m.mla.kv_lora_rank = 8;
  m.mla.qk_nope_head_dim = 16;
  m.mla.qk_rope_head_dim = 8;
  m.mla.v_head_dim = 16;
  return m;
}

TEST(CostModel, LatentAttentionAllReducesItsLatentsAndRecomputesItsUpProjections) {
  // tp 2 x pp 2, 4 layers, blocking collectives. Each stage's layer all-reduces h forward twice
  // (the output projection's and the FFN's); backward the FFN's input gradient (h) and the
  // attention's column-parallel inputs, the normalised latents: (16 + 8) / 64 = 0.375 of one.
  // Expectation: the first stage's backward, 2 layers x (1 + 0.375) all-reduces, against its
  // forward's 2 x 2 + the embedding's 1.
  Scenario sc = test::scenario(tiny_latent(4), 4, 8);
  sc.training.framework.tp_async_bwd = false;
  Layout l = layout(1, 2, 2, 1);
  l.recompute = Recompute::None;
  const StepCosts c = step_costs(sc, l);
  ASSERT_EQ(c.chunks.size(), 2u);
  const double ar = c.chunks.front().tp_comm_forward_s / 5;
  ASSERT_GT(ar, 0);
  report("first stage's backward all-reduces", 2 * 1.375, c.chunks.front().tp_comm_backward_s / ar);
  EXPECT_NEAR(c.chunks.front().tp_comm_backward_s, 2 * 1.375 * ar, 1e-12 * ar);

  // recompute_mla_up_proj keeps neither Q, K (4 x 24 each) nor V (4 x 16) a token: 2 layers x
  // 32 tokens x 256 x 2 bytes = 32768 bytes less with one micro-batch in flight (pp 1), and the
  // backward runs the two up-projections again.
  const Scenario one = test::scenario(tiny_latent(2), 1, 8);
  const Estimate base = estimate(one, layout(1, 1, 1, 1));
  Scenario up = one;
  up.training.framework.recompute_mla_up_proj = true;
  const Estimate recomputed = estimate(up, layout(1, 1, 1, 1));
  ASSERT_TRUE(base.reason.empty() && recomputed.reason.empty()) << base.reason << recomputed.reason;
  const double kept_less = base.memory_per_gpu_bytes.activations - recomputed.memory_per_gpu_bytes.activations;
  report("activations kept less (B)", 32768, kept_less);
  EXPECT_NEAR(kept_less, 32768, 1e-6);
  EXPECT_GT(recomputed.breakdown_s.recompute, base.breakdown_s.recompute);
  // Without latent attention the key changes nothing.
  Scenario plain = test::scenario(test::tiny_model(2), 1, 8);
  const double plain_act = estimate(plain, layout(1, 1, 1, 1)).memory_per_gpu_bytes.activations;
  plain.training.framework.recompute_mla_up_proj = true;
  EXPECT_EQ(estimate(plain, layout(1, 1, 1, 1)).memory_per_gpu_bytes.activations, plain_act);

  // FlashAttention-2 pads the value heads to the query-key head (P V at 4 x 24, not 4 x 16);
  // FlashAttention-3 takes them apart. At equal kernel rates FA2's step is the longer; without
  // latent attention the two are the same.
  auto flash_step = [](const ModelSpec& m, FlashKernel k) {
    Scenario sc = test::scenario(m, 1, 8);
    sc.training.attention = Attention::Flash;
    sc.training.framework.flash_kernel = k;
    sc.cluster.gpu.fa3_peak_fraction = sc.cluster.gpu.flash_peak_fraction;
    return estimate(sc, layout(1, 1, 1, 1)).breakdown_s.compute;
  };
  ModelSpec wide = tiny_latent(2);  // head sizes of 128 and more, where both kernels run at their figure
  wide.mla.qk_nope_head_dim = 128, wide.mla.qk_rope_head_dim = 64, wide.mla.v_head_dim = 128;
  EXPECT_GT(flash_step(wide, FlashKernel::Fa2), flash_step(wide, FlashKernel::Fa3));
  ModelSpec plain_wide = test::tiny_model(2);
  plain_wide.head_dim = 128;
  EXPECT_DOUBLE_EQ(flash_step(plain_wide, FlashKernel::Fa2), flash_step(plain_wide, FlashKernel::Fa3));
  // FlashAttention runs at the query-key head (16 + 8 = 24, a multiple of 8); at 17 + 8 it does
  // not, and the message names the fields.
  Scenario odd = test::scenario(tiny_latent(2), 1, 8);
  odd.model.mla.qk_nope_head_dim = 17;
  odd.training.attention = Attention::Flash;
  const Estimate refused = estimate(odd, layout(1, 1, 1, 1));
  EXPECT_NE(refused.reason.find("qk_nope_head_dim + qk_rope_head_dim"), std::string::npos) << refused.reason;
}

TEST(CostModel, LatentAttentionUnderSequenceParallelismGathersItsLatents) {
  // tp 2 x pp 2 with sp, 4 layers of h = 64, blocking collectives, no recompute. Without latents
  // a layer moves 2 all-reduce volumes forward (two gather / reduce-scatter pairs) and 3 backward
  // (the pairs and the re-gathered norm outputs). With them the attention gathers the normalised
  // latents and the rotary key part, g = (16 + 8 + 8) / 64 = 0.5 of h: forward 1.5 + 0.5 g =
  // 1.75, backward 1.5 + 0.5 g + the re-gather 0.5 + 0.5 x 24 / 64 = 2.4375. Expectation: the
  // first stage (2 layers and the embedding's one) forward (2 x 1.75 + 1) / (2 x 2 + 1) = 0.9 of
  // the plain model's, backward 2 x 2.4375 / (2 x 3) = 0.8125.
  auto first = [](const ModelSpec& m) {
    Scenario sc = test::scenario(m, 4, 8);
    sc.training.framework.tp_async_bwd = false;
    Layout l = layout(1, 2, 2, 1);
    l.sp = true;
    l.recompute = Recompute::None;
    return step_costs(sc, l).chunks.front();
  };
  const ChunkCosts latent = first(tiny_latent(4)), plain = first(test::tiny_model(4));
  ASSERT_GT(plain.tp_comm_forward_s, 0);
  report("forward collectives, latent / plain", 0.9, latent.tp_comm_forward_s / plain.tp_comm_forward_s);
  EXPECT_NEAR(latent.tp_comm_forward_s / plain.tp_comm_forward_s, 0.9, 1e-9);
  report("backward collectives, latent / plain", 0.8125, latent.tp_comm_backward_s / plain.tp_comm_backward_s);
  EXPECT_NEAR(latent.tp_comm_backward_s / plain.tp_comm_backward_s, 0.8125, 1e-9);
  // The duplicated down-projections run on the rank's own half of the tokens: sp saves the latent
  // model more forward time than the plain one (whose saving is the split norms and residuals).
  auto forward = [](const ModelSpec& m, bool sp) {
    Scenario sc = test::scenario(m, 4, 8);
    Layout l = layout(1, 2, 2, 1);
    l.sp = sp;
    l.recompute = Recompute::None;
    return step_costs(sc, l).chunks.front().forward_s;
  };
  const double saved_latent = forward(tiny_latent(4), false) - forward(tiny_latent(4), true);
  const double saved_plain = forward(test::tiny_model(4), false) - forward(test::tiny_model(4), true);
  EXPECT_GT(saved_latent, saved_plain);
}

TEST(CostModel, MultiTokenPredictionRunsOnTheLastStageBesideTheHead) {
  // A 1024-wide model of 4 layers at pp 2 with one multi-token prediction module: the module's
  // layer joins the last stage's two, its head pass and eh_proj join the head, and the first
  // stage does not change. From 4- and 6-layer runs without the module: L = one layer's forward
  // (the last stage's difference), H = the head's (the last stage less 2 L). Expectation: the last
  // stage's forward with the module = 3 L + 2 H + eh_proj's GEMM and passes, which lie between 0
  // and one layer's forward.
  ModelSpec m = test::tiny_model(4);
  m.hidden = 1024, m.heads = 16, m.vocab = 32000, m.seq_len = 1024, m.tied_embeddings = false;
  auto costs = [&](int layers, int mtp) {
    ModelSpec x = m;
    x.layers = layers, x.mtp_layers = mtp;
    Layout l = layout(1, 1, 2, 1);
    l.recompute = Recompute::None;
    return step_costs(test::scenario(x, 2, 8), l);
  };
  const StepCosts none = costs(4, 0), six = costs(6, 0), with = costs(4, 1);
  ASSERT_EQ(with.chunks.size(), 2u);
  EXPECT_EQ(with.chunks.front().num_layers, 2);
  EXPECT_EQ(with.chunks.back().num_layers, 3);
  EXPECT_DOUBLE_EQ(with.chunks.front().forward_s, none.chunks.front().forward_s);
  EXPECT_DOUBLE_EQ(with.chunks.front().backward_input_s, none.chunks.front().backward_input_s);
  const double L = six.chunks.back().forward_s - none.chunks.back().forward_s;
  const double H = none.chunks.back().forward_s - 2 * L;
  ASSERT_GT(L, 0);
  ASSERT_GT(H, 0);
  const double extra = with.chunks.back().forward_s - (3 * L + 2 * H);
  // In FLOPs eh_proj is 4 h^2 a token against a layer's 24 h^2 + 4 s h: 0.14 of it.
  report("eh_proj and the module's passes over one layer's forward (FLOPs: 0.14)", 4.0 / 28.0, extra / L);
  EXPECT_GT(extra, 0);
  EXPECT_LT(extra, L);
  EXPECT_GT(with.chunks.back().backward_input_s + with.chunks.back().backward_weight_s,
            six.chunks.back().backward_input_s + six.chunks.back().backward_weight_s);

  // The step: slower, the last stage pacing; the model's size the same, its FLOPs more (the
  // module's work is the step's). An untied embedding gets a copy on the last stage for the
  // module's lookup, and the two copies' gradients are summed across the pipeline's ends.
  Layout l = layout(1, 1, 2, 1);
  const Estimate e0 = estimate(test::scenario(m, 2, 8), l);
  ModelSpec with_mtp = m;
  with_mtp.mtp_layers = 1;
  const Estimate e1 = estimate(test::scenario(with_mtp, 2, 8), l);
  ASSERT_TRUE(e0.reason.empty() && e1.reason.empty()) << e0.reason << e1.reason;
  EXPECT_GT(e1.step_time_s, e0.step_time_s);
  EXPECT_GT(e1.breakdown_s.pp_comm, e0.breakdown_s.pp_comm);
  EXPECT_GT(e1.model_tflops_per_gpu * e1.step_time_s, e0.model_tflops_per_gpu * e0.step_time_s);
  // With tied embeddings the sum happens anyway: the module adds no transfer.
  ModelSpec tied = m, tied_mtp = with_mtp;
  tied.tied_embeddings = tied_mtp.tied_embeddings = true;
  EXPECT_DOUBLE_EQ(estimate(test::scenario(tied_mtp, 2, 8), l).breakdown_s.pp_comm,
                   estimate(test::scenario(tied, 2, 8), l).breakdown_s.pp_comm);
}

TEST(CostModelStack, FlashSkipsTheBlocksOutsideASlidingWindow) {
  // FlashAttention with a window of w scores s w - w (w - 1) / 2 causal pairs instead of
  // s (s + 1) / 2, at the same rate. Expectation: the compute a window saves is in proportion to
  // the pairs it drops (w = 512 against w = 1024 at s = 4096); with every 2nd of 4 layers global it
  // saves half as much; the fused softmax materialises every score whatever the window: nothing.
  ModelSpec m = test::tiny_model(4);
  m.hidden = 512;
  m.heads = 8;
  m.seq_len = 4096;
  auto compute = [&](int window, int global_every, Attention a) {
    ModelSpec w = m;
    w.sliding_window = window;
    w.global_every = global_every;
    Scenario sc = test::scenario(w, 1, 8);
    sc.training.attention = a;
    return estimate(sc, layout(1, 1, 1, 1)).breakdown_s.compute;
  };
  const double s = 4096;
  auto dropped = [&](double w) { return 1 - (s * w - w * (w - 1) / 2) / (s * (s + 1) / 2); };
  const double none = compute(0, 0, Attention::Flash);
  const double saved512 = none - compute(512, 0, Attention::Flash);
  const double saved1024 = none - compute(1024, 0, Attention::Flash);
  report("saved(512) / saved(1024)", dropped(512) / dropped(1024), saved512 / saved1024);
  ASSERT_GT(saved1024, 0);
  EXPECT_NEAR(saved512 / saved1024, dropped(512) / dropped(1024), 1e-9);
  const double half = none - compute(512, 2, Attention::Flash);
  EXPECT_NEAR(half, saved512 / 2, 1e-9 * saved512);
  EXPECT_DOUBLE_EQ(compute(512, 0, Attention::Fused), compute(0, 0, Attention::Fused));
  EXPECT_DOUBLE_EQ(compute(4096, 0, Attention::Flash), none);  // the window covers the sequence

  // Chunks of C tokens (Llama 4) score C (C + 1) / 2 pairs each: at s = 4096, 4 chunks of 1024
  // keep 4 x 1024 x 1025 / 2 of the 4096 x 4097 / 2 causal pairs, and 3 chunks of 1365 and a
  // rest of 1 keep 3 x 1365 x 1366 / 2 + 1. Expectation: the compute they save in proportion to
  // the pairs they drop, against the window of 512's.
  auto chunked = [&](int chunk) {
    ModelSpec c = m;
    c.attention_chunk = chunk;
    Scenario sc = test::scenario(c, 1, 8);
    sc.training.attention = Attention::Flash;
    return estimate(sc, layout(1, 1, 1, 1)).breakdown_s.compute;
  };
  const double all = s * (s + 1) / 2;
  const double drop1024 = 1 - 4 * 1024.0 * 1025 / 2 / all, drop1365 = 1 - (3 * 1365.0 * 1366 / 2 + 1) / all;
  report("saved(chunks of 1024) / saved(window 512)", drop1024 / dropped(512), (none - chunked(1024)) / saved512);
  EXPECT_NEAR((none - chunked(1024)) / saved512, drop1024 / dropped(512), 1e-9);
  EXPECT_NEAR((none - chunked(1365)) / saved512, drop1365 / dropped(512), 1e-9);
  EXPECT_DOUBLE_EQ(chunked(4096), none);  // one chunk is causal attention
}

TEST(CostModel, StepCostsAgreeWithEstimate) {
  const Scenario sc = test::scenario(test::tiny_model(8), 8, 32);
  Layout l = layout(2, 2, 2, 2);
  l.recompute = Recompute::Selective;
  l.sp = true;
  const Estimate e = estimate(sc, l);
  ASSERT_TRUE(e.reason.empty()) << e.reason;
  const StepCosts c = step_costs(sc, l);
  ASSERT_EQ(c.chunks.size(), 2u);
  // m = 32 / (2 * 2) = 8 micro-batches; the stage with the longest micro-batch sets the pace
  // and the step's compute is m times its compute.
  const ChunkCosts* pace = nullptr;
  double pace_total = -1;
  int layers = 0;
  for (const ChunkCosts& ch : c.chunks) {
    const double total = ch.forward_s + ch.backward_input_s + ch.backward_weight_s + ch.recompute_s +
                         ch.tp_comm_forward_s + ch.tp_comm_backward_s;
    if (total > pace_total) {
      pace_total = total;
      pace = &ch;
    }
    layers += ch.num_layers;
  }
  EXPECT_EQ(layers, 8);
  EXPECT_TRUE(c.chunks.front().has_embedding);
  EXPECT_TRUE(c.chunks.back().has_head);
  const double compute = pace->forward_s + pace->backward_input_s + pace->backward_weight_s;
  report("step compute = m x pacing chunk compute", 8 * compute, e.breakdown_s.compute);
  EXPECT_NEAR(e.breakdown_s.compute, 8 * compute, 1e-12 * e.breakdown_s.compute);
  EXPECT_NEAR(e.breakdown_s.recompute, 8 * pace->recompute_s, 1e-12 * e.breakdown_s.compute);
  EXPECT_NEAR(e.breakdown_s.tp_comm, 8 * (pace->tp_comm_forward_s + pace->tp_comm_backward_s),
              1e-12 * e.breakdown_s.compute);
  // The last stage paces and sends once per micro-batch (only backward: Megatron-LM's last stage
  // has no next stage), plus 2 (p-1) sends as the first and last micro-batches cross the pipeline,
  // plus the tied embedding's gradient summed between the end stages.
  EXPECT_NEAR(e.breakdown_s.pp_comm, (8 * 1 + 2 * 1) * c.p2p_s + c.embedding_sync_s, 1e-15);
  EXPECT_GT(c.p2p_s, 0);
  EXPECT_GT(c.embedding_sync_s, 0);
  EXPECT_DOUBLE_EQ(c.weights_bytes, e.memory_per_gpu_bytes.weights);
}

TEST(CostModel, LmHeadAndCrossEntropyCollectivesOnTheLastStage) {
  // tp 2 x pp 2, 4 layers, no recompute: each stage's layers make 2 all-reduces forward and 2
  // backward; the first stage adds the embedding's (forward); the last adds the LM head's
  // input-gradient all-reduce (backward) and the vocab-parallel cross-entropy's three all-reduces
  // of one fp32 value per token (forward), smaller than a layer's. Every collective blocks (as in
  // capplan-train and Megatron-LM before September 2021; the asynchronous ones are tested below).
  Scenario sc = test::scenario(test::tiny_model(4), 4, 8);
  sc.training.framework.tp_async_bwd = false;
  Layout l = layout(1, 2, 2, 1);
  l.recompute = Recompute::None;
  const StepCosts c = step_costs(sc, l);
  ASSERT_EQ(c.chunks.size(), 2u);
  const ChunkCosts& first = c.chunks.front();
  const ChunkCosts& last = c.chunks.back();
  ASSERT_TRUE(last.has_head);
  const double ar = first.tp_comm_backward_s / 4;  // a layer's all-reduce
  ASSERT_GT(ar, 0);
  EXPECT_NEAR(first.tp_comm_forward_s, 5 * ar, 1e-12 * ar);
  report("last stage backward: 4 + the head's 1 all-reduce", 5 * ar, last.tp_comm_backward_s);
  EXPECT_NEAR(last.tp_comm_backward_s, 5 * ar, 1e-12 * ar);
  const double xent = (last.tp_comm_forward_s - 4 * ar) / 3;
  report("one cross-entropy all-reduce (s)", ar, xent);
  EXPECT_GT(xent, 0);
  EXPECT_LT(xent, ar);
  // Under sp the head's input is all-gathered forward and its gradient reduce-scattered
  // backward: half an all-reduce each.
  l.sp = true;
  const StepCosts s = step_costs(sc, l);
  const double ar_sp = s.chunks.front().tp_comm_forward_s / 5;
  EXPECT_NEAR(s.chunks.back().tp_comm_forward_s - 4 * ar_sp - 3 * xent, 0.5 * ar_sp, 1e-9 * ar_sp);
  EXPECT_NEAR(s.chunks.back().tp_comm_backward_s - s.chunks.front().tp_comm_backward_s, 0.5 * ar_sp,
              1e-9 * ar_sp);
  // Without tp there is nothing to reduce.
  const StepCosts one = step_costs(sc, layout(2, 1, 2, 1));
  EXPECT_EQ(one.chunks.back().tp_comm_forward_s + one.chunks.back().tp_comm_backward_s, 0.0);
}

TEST(CostModel, UnevenLayersGoToMiddleChunks) {
  const Scenario sc = test::scenario(test::tiny_model(10), 4, 4);
  const StepCosts c = step_costs(sc, layout(1, 1, 4, 1));
  ASSERT_EQ(c.chunks.size(), 4u);
  // 10 layers over 4 stages: 2 each plus 2 remainders on stages 1 and 2.
  EXPECT_EQ(c.chunks[0].num_layers, 2);
  EXPECT_EQ(c.chunks[1].num_layers, 3);
  EXPECT_EQ(c.chunks[2].num_layers, 3);
  EXPECT_EQ(c.chunks[3].num_layers, 2);
  EXPECT_EQ(c.chunks[3].first_layer, 8);
}

TEST(CostModel, CheckLayoutNamesTheViolatedConstraint) {
  const Scenario sc = test::scenario(test::tiny_model(), 8, 16);
  auto msg = [&](Layout l) { return check_layout(sc, l).value_or(""); };
  EXPECT_NE(msg(layout(1, 8, 1, 1)).find("must divide heads"), std::string::npos);
  EXPECT_NE(msg(layout(2, 2, 1, 1)).find("must equal the GPU count 8"), std::string::npos);
  EXPECT_NE(msg(layout(8, 1, 1, 3)).find("divisible by dp*mbs"), std::string::npos);
  const Scenario deep = test::scenario(test::tiny_model(8), 8, 16);
  Layout vp = layout(4, 1, 2, 1);
  vp.vp = 2;
  EXPECT_NE(check_layout(deep, vp).value_or("").find("needs schedule interleaved"), std::string::npos);
  vp.vp = 5;
  vp.schedule = Schedule::Interleaved;
  EXPECT_NE(check_layout(deep, vp).value_or("").find("must be <= layers"), std::string::npos);
  Layout z = layout(4, 1, 2, 1);
  z.zero = 2;
  EXPECT_NE(msg(z).find("pp = 1"), std::string::npos);
  Layout o = layout(8, 1, 1, 1);
  o.order = "DDT";
  EXPECT_NE(msg(o).find("permutation"), std::string::npos);
  EXPECT_FALSE(check_layout(sc, layout(8, 1, 1, 2)).has_value());
  const Estimate bad = estimate(sc, layout(2, 2, 1, 1));
  EXPECT_FALSE(bad.fits);
  EXPECT_FALSE(bad.reason.empty());
}

TEST(CostModel, TooSmallGpuDoesNotFitButStillGetsATime) {
  const Scenario sc = test::scenario(test::tiny_model(), 1, 2, /*memory_gib=*/0.5);
  const Estimate e = estimate(sc, layout(1, 1, 1, 2));
  EXPECT_FALSE(e.fits);
  EXPECT_NE(e.reason.find("GiB"), std::string::npos) << e.reason;
  EXPECT_GT(e.step_time_s, 0);
}

TEST(CostModel, CostIsNanWithoutPriceAndScalesWithNodes) {
  Scenario sc = test::scenario(test::tiny_model(), 8, 8);
  sc.training.tokens = 1e9;
  const Estimate e = estimate(sc, layout(8, 1, 1, 1));
  EXPECT_TRUE(std::isnan(e.cost_usd));
  EXPECT_FALSE(e.tokens_defaulted);
  EXPECT_NEAR(e.days_to_train, 1e9 / e.tokens_per_s / 86400, 1e-9);
  sc.cluster.price_per_node_hour_usd = 10;
  const Estimate p = estimate(sc, layout(8, 1, 1, 1));
  // 1 node x 10 $/h x hours.
  EXPECT_NEAR(p.cost_usd, 10 * p.days_to_train * 24, 1e-6);
  sc.training.tokens = 0;
  const Estimate d = estimate(sc, layout(8, 1, 1, 1));
  EXPECT_TRUE(d.tokens_defaulted);
  EXPECT_DOUBLE_EQ(d.tokens, 20 * kTinyParams);
}

TEST(CostModel, OffloadKeepsTwoLayersOnTheGpu) {
  // Layer-by-layer offload keeps the layer computing and the one being copied: what stays on the
  // GPU does not grow with the layers per stage or the micro-batches in flight.
  Scenario sc = test::scenario(test::tiny_model(8), 4, 16);
  Scenario deep = test::scenario(test::tiny_model(16), 4, 16);
  Layout l = layout(1, 1, 4, 1);
  const double plain = estimate(sc, l).memory_per_gpu_bytes.activations;
  const double plain_deep = estimate(deep, l).memory_per_gpu_bytes.activations;
  l.offload = true;
  const Estimate off = estimate(sc, l);
  const double off_deep = estimate(deep, l).memory_per_gpu_bytes.activations;
  report("offloaded stage-0 activations, 4 layers per stage vs 2", off.memory_per_gpu_bytes.activations,
         off_deep);
  EXPECT_GT(plain_deep, 1.5 * plain);
  EXPECT_DOUBLE_EQ(off_deep, off.memory_per_gpu_bytes.activations);
  EXPECT_LT(off.memory_per_gpu_bytes.activations, plain);
  // Host memory too small for what is offloaded: does not fit, and says why.
  sc.cluster.host_memory_gib = 1e-6;
  const Estimate host = estimate(sc, l);
  EXPECT_FALSE(host.fits);
  EXPECT_NE(host.reason.find("host memory"), std::string::npos) << host.reason;
}

}  // namespace
}  // namespace capplan

TEST(CostModel, StateBytesPerParamByPrecision) {
  // Expectation (ZeRO Sec 3.1, Megatron-LM's fp32 gradient accumulation with bf16):
  // fp16 2 + 2 + 12 = 16 B/param; bf16 2 + 4 + 12 = 18; fp32 4 + 4 + 8 = 16.
  const capplan::StateBytesPerParam fp16 = capplan::state_bytes_per_param(capplan::Precision::Fp16);
  const capplan::StateBytesPerParam bf16 = capplan::state_bytes_per_param(capplan::Precision::Bf16);
  const capplan::StateBytesPerParam fp32 = capplan::state_bytes_per_param(capplan::Precision::Fp32);
  EXPECT_DOUBLE_EQ(fp16.weights + fp16.gradients + fp16.optimizer, 16.0);
  EXPECT_DOUBLE_EQ(bf16.weights + bf16.gradients + bf16.optimizer, 18.0);
  EXPECT_DOUBLE_EQ(fp32.weights + fp32.gradients + fp32.optimizer, 16.0);
  EXPECT_DOUBLE_EQ(bf16.gradients, 4.0);
}

namespace capplan {
namespace {

Scenario preset_scenario(const char* model, const char* cluster, int nodes, int64_t gbs) {
  Scenario sc;
  sc.model = *load_model(model).value;
  sc.cluster = *load_cluster(cluster).value;
  sc.nodes = nodes;
  sc.training.gbs = gbs;
  return sc;
}

// GPT-3 175B in fp16 (gbs 64) on `nodes` nodes of `cluster`, costed for `framework`.
Scenario gpt3_175b_fp16(const char* cluster, int nodes, const char* framework) {
  Scenario sc = preset_scenario("gpt3-175b", cluster, nodes, 64);
  sc.training.precision = Precision::Fp16;
  sc.training.framework = *load_framework(framework).value;
  return sc;
}

// tp 8 x pp 4 x dp, mbs 1, full recompute: the stack tests' layout of GPT-3 175B.
Layout tp8_pp4(int dp = 1) {
  Layout l;
  l.dp = dp;
  l.tp = 8;
  l.pp = 4;
  l.mbs = 1;
  l.recompute = Recompute::Full;
  return l;
}

TEST(CostModelStack, FlashKeepsNoScoresAndIsFasterThanFusedAtLongSequences) {
  // Expectation: at seq 8192 the fused kernel keeps 5as/h bytes of scores per token and runs
  // passes over them; FlashAttention keeps none and skips the causal half, so both the
  // activations and the step are smaller.
  Scenario sc = preset_scenario("llama3-8b", "p5.48xlarge", 1, 64);
  Layout l;
  l.dp = 8;
  l.mbs = 1;
  l.zero = 1;
  sc.training.attention = Attention::Fused;
  const Estimate fused = estimate(sc, l);
  sc.training.attention = Attention::Flash;
  const Estimate flash = estimate(sc, l);
  std::printf("Expectation flash < fused. Actual activations %.1f vs %.1f GiB, step %.3f vs %.3f s\n",
              flash.memory_per_gpu_bytes.activations / 1073741824.0,
              fused.memory_per_gpu_bytes.activations / 1073741824.0, flash.step_time_s, fused.step_time_s);
  EXPECT_LT(flash.memory_per_gpu_bytes.activations, 0.7 * fused.memory_per_gpu_bytes.activations);
  EXPECT_LT(flash.step_time_s, fused.step_time_s);
}

TEST(CostModelStack, FlashKernelSetsTheAttentionRate) {
  // Expectation, from the kernels' published speeds (Shah et al. 2024, Fig. 4-5: H100 SXM5, head
  // size 128, no mask, 16k tokens; FlashAttention-2 370 TFLOP/s, FlashAttention-3 648, cuDNN
  // about 600): one GPU's step differs between two kernels only in the attention core, whose
  // causal forward runs 2 b s^2 h FLOPs per layer at the kernel's rate times s / (s + 512) and
  // whose backward 2.5x those at 0.87 of that rate. gpt3-1.3b (head size 128) at seq 2048, mbs 1,
  // one micro-batch per GPU, no recompute.
  Scenario sc = preset_scenario("gpt3-1.3b", "p5.48xlarge", 1, 8);
  sc.training.attention = Attention::Flash;
  Layout l;
  l.dp = 8;
  l.mbs = 1;
  auto step = [&](FlashKernel k) {
    sc.training.framework.flash_kernel = k;
    const Estimate e = estimate(sc, l);
    EXPECT_TRUE(e.reason.empty()) << e.reason;
    return e.step_time_s;
  };
  const double h = sc.model.hidden, layers = sc.model.layers;
  // At 2k and 8k tokens: the longer the sequence, the nearer the masked kernel runs to its rate.
  for (const int seq : {2048, 8192}) {
    sc.training.seq_len = seq;
    const double fa2 = step(FlashKernel::Fa2), fa3 = step(FlashKernel::Fa3), cudnn = step(FlashKernel::Cudnn);
    const double s = seq;
    const double work = layers * 2.0 * s * s * h * (1.0 + 2.5 / 0.87) * (s + 512) / s;  // FLOPs at rate 1
    const double expect_fa2_fa3 = work * (1 / 370e12 - 1 / 648e12);
    const double expect_fa2_cudnn = work * (1 / 370e12 - 1 / 600e12);
    report("step(FA2) - step(FA3) (s)", expect_fa2_fa3, fa2 - fa3);
    report("step(FA2) - step(cuDNN) (s)", expect_fa2_cudnn, fa2 - cudnn);
    EXPECT_NEAR(fa2 - fa3, expect_fa2_fa3, 0.01 * expect_fa2_fa3) << seq;
    EXPECT_NEAR(fa2 - cudnn, expect_fa2_cudnn, 0.01 * expect_fa2_cudnn) << seq;
  }
  sc.training.seq_len = 2048;
  // At head size 64 the kernels run at their published speeds for it (FA2 324, FA3 497 TFLOP/s
  // without a mask at 16k; gpt2-1.5b: 1600 / 25 heads).
  {
    Scenario small = preset_scenario("gpt2-1.5b", "p5.48xlarge", 1, 8);
    small.training.attention = Attention::Flash;
    ASSERT_EQ(small.model.head_dim_or_default(), 64);
    auto small_step = [&](FlashKernel k) {
      small.training.framework.flash_kernel = k;
      const Estimate e = estimate(small, l);
      EXPECT_TRUE(e.reason.empty()) << e.reason;
      return e.step_time_s;
    };
    const double s = small.model.seq_len;
    const double work = small.model.layers * 2.0 * s * s * small.model.hidden * (1.0 + 2.5 / 0.87) * (s + 512) / s;
    const double expect = work * (1 / 324e12 - 1 / 497e12);
    const double got = small_step(FlashKernel::Fa2) - small_step(FlashKernel::Fa3);
    report("head size 64: step(FA2) - step(FA3) (s)", expect, got);
    EXPECT_NEAR(got, expect, 0.01 * expect);
  }
  // On A100 neither FlashAttention-3 nor cuDNN has a figure (FA3 is written for Hopper;
  // Transformer Engine calls FlashAttention-2 on Ampere): every kernel costs FlashAttention-2.
  sc.cluster = *load_cluster("p4d.24xlarge").value;
  EXPECT_DOUBLE_EQ(step(FlashKernel::Fa3), step(FlashKernel::Fa2));
  EXPECT_DOUBLE_EQ(step(FlashKernel::Cudnn), step(FlashKernel::Fa2));
  // The first FlashAttention runs at half FlashAttention-2's rate (Dao 2023: "around 2x", 25-40 %
  // of the A100's peak against 50-73 %): its attention core takes twice FA2's, 0.70 x 312 TFLOP/s.
  {
    const double s = sc.training.seq_len;
    const double work = layers * 2.0 * s * s * h * (1.0 + 2.5 / 0.87) * (s + 512) / s;
    const double expect = work * (1 / (0.35 * 312e12) - 1 / (0.70 * 312e12));
    const double got = step(FlashKernel::Fa1) - step(FlashKernel::Fa2);
    report("A100: step(FA1) - step(FA2) (s)", expect, got);
    EXPECT_NEAR(got, expect, 0.01 * expect);
  }
  // So at head size 64 as well: the kernel that runs is FlashAttention-2, with its own head-size
  // factor, not the one of the kernel asked for.
  {
    Scenario small = preset_scenario("gpt2-1.5b", "p4d.24xlarge", 1, 8);
    small.training.attention = Attention::Flash;
    auto small_step = [&](FlashKernel k) {
      small.training.framework.flash_kernel = k;
      const Estimate e = estimate(small, l);
      EXPECT_TRUE(e.reason.empty()) << e.reason;
      return e.step_time_s;
    };
    EXPECT_DOUBLE_EQ(small_step(FlashKernel::Cudnn), small_step(FlashKernel::Fa2));
    EXPECT_DOUBLE_EQ(small_step(FlashKernel::Fa3), small_step(FlashKernel::Fa2));
  }
  // megatron-core calls cuDNN's kernel, the other presets FlashAttention-2.
  EXPECT_EQ(load_framework("megatron-core").value->flash_kernel, FlashKernel::Cudnn);
  for (const char* fw : {"megatron-lm", "deepspeed", "fsdp", "smp-v1"})
    EXPECT_EQ(load_framework(fw).value->flash_kernel, FlashKernel::Fa2) << fw;
}

TEST(CostModelStack, FlashCausalRampFollowsThePublishedKernelSpeeds) {
  // Expectation: the causal forward speeds Shah et al. 2024 (Fig. 5) publish for H100 SXM5 at
  // head size 128, FlashAttention-2, -3 and cuDNN at 1k-16k tokens (TFLOP/s, causal FLOPs), and
  // what the model runs each kernel's attention core at: the GPU's figure times s / (s + 512).
  // The model's rate is read from the step: one GPU's step differs between two overrides of the
  // figure, f and 2f, by the attention core alone, whose forward and backward take
  // L 2 s^2 h (1 + 2.5 / 0.87) / rate. Measured: each within 8.0 % (cuDNN at 16k), 4.0 % root
  // mean square, the band's spread for the kernel's rate (band_spreads: 0.04).
  struct Kernel {
    FlashKernel k;
    double figure;
    double published[5];
  };
  const Kernel kernels[] = {{FlashKernel::Fa2, 0.374, {260, 298, 319, 333, 335}},
                            {FlashKernel::Fa3, 0.655, {423, 521, 579, 602, 616}},
                            {FlashKernel::Cudnn, 0.607, {410, 484, 518, 529, 539}}};
  const int seqs[] = {1024, 2048, 4096, 8192, 16384};
  Scenario sc = preset_scenario("gpt3-1.3b", "p5.48xlarge", 1, 8);
  ASSERT_EQ(sc.model.head_dim_or_default(), 128);
  sc.training.attention = Attention::Flash;
  Layout l;
  l.dp = 8;
  l.mbs = 1;
  double sum_sq = 0;
  int n = 0;
  for (const Kernel& kr : kernels) {
    sc.training.framework.flash_kernel = kr.k;
    for (int i = 0; i < 5; ++i) {
      sc.training.seq_len = seqs[i];
      auto step = [&](double f) {
        Scenario v = sc;
        v.cluster.efficiency.flash = f;
        return estimate(v, l).step_time_s;
      };
      const double s = seqs[i];
      const double flops = sc.model.layers * 2.0 * s * s * sc.model.hidden * (1.0 + 2.5 / 0.87);
      const double rate = 0.5 * flops / (step(kr.figure) - step(2 * kr.figure)) / 1e12;
      const double dev = rate / kr.published[i] - 1;
      std::printf("%s at %5d tokens: model %.0f TFLOP/s, published %.0f, %+.1f %%\n", to_string(kr.k), seqs[i], rate,
                  kr.published[i], 100 * dev);
      EXPECT_LT(std::abs(dev), 0.085) << to_string(kr.k) << " " << seqs[i];
      sum_sq += dev * dev;
      ++n;
    }
  }
  const double rms = std::sqrt(sum_sq / n);
  std::printf("root mean square %.1f %%\n", 100 * rms);
  EXPECT_LT(rms, 0.045);
}

TEST(CostModelStack, BandPropagatesEachSpreadInQuadrature) {
  // Expectation (README "The band"): each uncertain input moves the step by half the difference
  // between its -sigma and +sigma ends, one input at a time (GEMM efficiency 5 % where the GPU has
  // a measured figure, memory-bound kernels 10 %, collectives 10 %, FlashAttention's rate 4 %),
  // those shares and the framework's residual (megatron-core 10 %) add in quadrature, and
  // p10 / p90 = step -/+ 1.2816 sigma; days and dollars scale with the step. The inputs' own
  // values are the documented ones for H100 on p5.48xlarge: GEMM 0.75 x 0.775 / 0.85, HBM 0.80,
  // NVLink 0.77, EFA 0.85, cuDNN's flash attention 0.607 of peak.
  Scenario sc = preset_scenario("llama3-8b", "p5.48xlarge", 1, 64);
  sc.training.framework = *load_framework("megatron-core").value;
  sc.training.seq_len = 8192;
  sc.training.tokens = 1e11;
  Layout l;
  l.dp = 8;
  l.mbs = 1;
  l.zero = 3;
  const Estimate e = estimate(sc, l);
  ASSERT_TRUE(e.reason.empty()) << e.reason;
  const double t = e.step_time_s;
  auto step = [&](double fg, double fm, double fn, double fa) {
    Scenario v = sc;
    v.cluster.efficiency.gemm = 0.75 * 0.775 / 0.85 * fg;
    v.cluster.efficiency.memory = 0.80 * fm;
    v.cluster.efficiency.intra_node = 0.77 * fn;
    v.cluster.efficiency.inter_node = 0.85 * fn;
    v.cluster.efficiency.flash = 0.607 * fa;
    return estimate(v, l).step_time_s;
  };
  EXPECT_NEAR(step(1, 1, 1, 1), t, 1e-12 * t);  // the documented values are the ones in use
  const double dg = 0.5 * (step(0.95, 1, 1, 1) - step(1.05, 1, 1, 1));
  const double dm = 0.5 * (step(1, 0.90, 1, 1) - step(1, 1.10, 1, 1));
  const double dn = 0.5 * (step(1, 1, 0.90, 1) - step(1, 1, 1.10, 1));
  const double da = 0.5 * (step(1, 1, 1, 0.96) - step(1, 1, 1, 1.04));
  const double sigma = std::sqrt(dg * dg + dm * dm + dn * dn + da * da + (0.10 * t) * (0.10 * t));
  std::printf("shares of the step %.3f s: GEMM %.4f, memory %.4f, network %.4f, flash %.4f, framework %.4f\n", t,
              dg, dm, dn, da, 0.10 * t);
  EXPECT_GT(da, 0.005 * t);  // attention at 8k tokens is a share of the step worth its own term
  report("step p90 (s)", t + 1.2816 * sigma, e.step_time_s_p90);
  EXPECT_NEAR(e.step_time_s_p90, t + 1.2816 * sigma, 1e-9 * t);
  EXPECT_NEAR(e.step_time_s_p10, t - 1.2816 * sigma, 1e-9 * t);
  EXPECT_NEAR(e.days_to_train_p90 / e.days_to_train, e.step_time_s_p90 / t, 1e-12);
  EXPECT_NEAR(e.cost_usd_p10 / e.cost_usd, e.step_time_s_p10 / t, 1e-12);
  // Without flash the attention's rate is no input of the band.
  sc.training.attention = Attention::Fused;
  EXPECT_EQ(band_spreads(sc).flash, 0.0);
  sc.training.attention = Attention::Flash;
  EXPECT_EQ(band_spreads(sc).flash, 0.04);
  sc.cluster = *load_cluster("p6-b200.48xlarge").value;  // no kernel benchmark in our sources
  EXPECT_EQ(band_spreads(sc).flash, 0.15);
}

TEST(CostModelStack, EagerAndUnfusedKernelsCostMoreThanFused) {
  // The same layout under smp-v1 (Hugging Face modules: eager attention, one kernel per
  // elementwise op, whole-activation pipeline sends) is slower than under megatron-lm.
  Scenario sc = preset_scenario("gpt3-175b", "p4d.24xlarge", 120, 960);
  Layout l;
  l.dp = 15;
  l.tp = 8;
  l.pp = 8;
  l.zero = 1;
  l.recompute = Recompute::Full;
  const Estimate megatron = estimate(sc, l);
  sc.training.framework = *load_framework("smp-v1").value;
  const Estimate smp = estimate(sc, l);
  ASSERT_TRUE(smp.reason.empty() || smp.fits) << smp.reason;
  EXPECT_GT(smp.step_time_s, megatron.step_time_s * 1.05);
  EXPECT_GT(smp.breakdown_s.pp_comm, megatron.breakdown_s.pp_comm);
}

TEST(CostModelStack, Megatron2021AddsEachMicroBatchsWeightGradientsInAKernelOfItsOwn) {
  // Expectation: the Megatron-LM of 2021 (no gradient accumulation fusion) adds each micro-batch's
  // 16-bit weight gradients to the sum after the first, reading both and writing the sum: 6 bytes a
  // parameter at the HBM's 2039 GB/s x 0.80. GPT-3 1.3B on one DGX A100, dp 8, fp16, 8 micro-batches
  // of one sequence: the step is (8 - 1) x 6 x P / (2039e9 x 0.80) longer than under megatron-lm,
  // which fuses the sum into the weight-gradient GEMM, with P the model's parameters (its tied
  // embedding counted once); every other term is the same.
  Scenario sc = preset_scenario("gpt3-1.3b", "dgx-a100-80gb", 1, 64);
  sc.training.precision = Precision::Fp16;
  Layout l;
  l.dp = 8;
  l.mbs = 1;
  const Estimate fused = estimate(sc, l);
  ASSERT_TRUE(fused.reason.empty()) << fused.reason;
  ASSERT_EQ(fused.num_microbatches, 8);
  sc.training.framework = *load_framework("megatron-lm-2021").value;
  EXPECT_FALSE(sc.training.framework.grad_accumulation_fusion);
  const Estimate unfused = estimate(sc, l);
  const double params = profile_model(sc.model, 1, sc.model.seq_len, 1).total_params;
  const double want = 7 * 6 * params / (2039e9 * 0.80);
  report("step difference (s)", want, unfused.step_time_s - fused.step_time_s);
  EXPECT_NEAR(unfused.step_time_s - fused.step_time_s, want, 1e-9 * want);
  EXPECT_NEAR(unfused.breakdown_s.compute - fused.breakdown_s.compute, want, 1e-9 * want);
  EXPECT_EQ(unfused.breakdown_s.dp_comm, fused.breakdown_s.dp_comm);
  EXPECT_EQ(unfused.breakdown_s.optimizer, fused.breakdown_s.optimizer);
}

TEST(CostModelStack, BadKnobsAreRefusedWithTheReason) {
  Scenario sc = preset_scenario("gpt3-1.3b", "p4d.24xlarge", 1, 64);
  Layout l;
  l.dp = 8;
  sc.training.precision = Precision::Fp8;
  auto err = check_layout(sc, l);
  ASSERT_TRUE(err.has_value());
  EXPECT_NE(err->find("fp8"), std::string::npos) << *err;
  sc.training.precision = Precision::Bf16;
  Scenario v100 = preset_scenario("gpt3-1.3b", "p3.16xlarge", 1, 64);
  v100.training.precision = Precision::Fp16;
  v100.training.attention = Attention::Flash;
  err = check_layout(v100, l);
  ASSERT_TRUE(err.has_value());
  EXPECT_NE(err->find("does not run on V100"), std::string::npos) << *err;
  sc.cluster.host_memory_gib = 0;
  sc.training.offload_optimizer = true;
  err = check_layout(sc, l);
  ASSERT_TRUE(err.has_value());
  EXPECT_NE(err->find("host_memory_gib"), std::string::npos) << *err;
  EXPECT_FALSE(load_framework("megatron-lmm").ok());
}

TEST(CostModelStack, AFrameworksFlashFallsBackToFusedWhereItCannotRun) {
  // Expectation: a framework whose attention is FlashAttention (megatron-core) runs the fused
  // softmax where FlashAttention cannot run (V100; a head size of 320), so its estimate there is the
  // same as with attention fused asked for, says why, and is not refused; an explicit flash is
  // refused (BadKnobsAreRefusedWithTheReason). On A100 at head size 128 nothing falls back.
  Layout l;
  l.dp = 8;
  Scenario v100 = preset_scenario("gpt3-1.3b", "p3.16xlarge", 1, 64);
  v100.training.precision = Precision::Fp16;
  v100.training.framework = *load_framework("megatron-core").value;
  ASSERT_EQ(v100.training.framework.attention, Attention::Flash);
  EXPECT_FALSE(check_layout(v100, l).has_value());
  EXPECT_EQ(v100.attention(), Attention::Fused);
  const Estimate fell_back = estimate(v100, l);
  EXPECT_EQ(fell_back.attention, Attention::Fused);
  EXPECT_NE(fell_back.attention_fallback.find("megatron-core's flash (FlashAttention-2/3) does not run on V100"),
            std::string::npos)
      << fell_back.attention_fallback;
  Scenario asked = v100;
  asked.training.attention = Attention::Fused;
  const Estimate fused = estimate(asked, l);
  EXPECT_EQ(fused.attention_fallback, "");
  EXPECT_EQ(fell_back.step_time_s, fused.step_time_s);
  EXPECT_EQ(fell_back.memory_per_gpu_bytes.total, fused.memory_per_gpu_bytes.total);

  Scenario wide = preset_scenario("gpt3-1.3b", "p4d.24xlarge", 1, 64);
  wide.training.framework = v100.training.framework;
  EXPECT_EQ(wide.attention(), Attention::Flash);
  EXPECT_EQ(estimate(wide, l).attention_fallback, "");
  wide.model.hidden = 320 * 8;  // heads of 320
  wide.model.heads = 8;
  EXPECT_EQ(wide.attention(), Attention::Fused);
  EXPECT_NE(wide.attention_fallback().find("multiples of 8 up to 256; this model's is 320"), std::string::npos)
      << wide.attention_fallback();
}

TEST(CostModelStack, ContextParallelismNeedsTheRingAttentionKernels) {
  // Expectation: cp 2 runs where Transformer Engine's ring attention does (A100: FlashAttention)
  // and on CPU ranks (capplan-train's own ring); on a V100 check_layout refuses it, naming the
  // GPU, and a search there offers no cp > 1 even where the sequence would allow it.
  Layout l;
  l.dp = 4;
  l.cp = 2;
  Scenario a100 = preset_scenario("llama3-8b", "p4d.24xlarge", 1, 64);  // 8k tokens: cp searched
  a100.training.framework = *load_framework("megatron-core").value;
  EXPECT_FALSE(check_layout(a100, l).has_value()) << *check_layout(a100, l);
  Scenario v100 = preset_scenario("llama3-8b", "p3.16xlarge", 1, 64);
  v100.training.precision = Precision::Fp16;
  v100.training.framework = a100.training.framework;
  const auto err = check_layout(v100, l);
  ASSERT_TRUE(err.has_value());
  EXPECT_NE(err->find("cp = 2: context parallelism runs Transformer Engine's ring attention (FlashAttention or cuDNN "
                      "fused attention), which does not run on V100-SXM2-16GB"),
            std::string::npos)
      << *err;
  Scenario cpu = v100;
  cpu.cluster.gpu.cpu_rank = true;
  EXPECT_FALSE(check_layout(cpu, l).has_value());
  SearchOptions opt;
  opt.nodes_min = opt.nodes_max = 1;
  opt.top = 100000;
  opt.include_infeasible = true;
  const SearchResult on_a100 = search(a100, opt), on_v100 = search(v100, opt);
  auto most_cp = [](const SearchResult& r) {
    int most = 0;
    for (const Estimate& e : r.candidates) most = std::max(most, e.layout.cp);
    return most;
  };
  ASSERT_FALSE(on_v100.candidates.empty());
  EXPECT_GT(most_cp(on_a100), 1);
  EXPECT_EQ(most_cp(on_v100), 1);
}

TEST(CostModelStack, BlockingReceivesDoubleTheSteadyStatesTransfers) {
  // Expectation: pp 2 with m = 8 micro-batches; each stage sends one message per micro-batch, and
  // the fill and drain cross the stage boundary twice: pp_comm = (m + 2) x p2p. When a receive
  // blocks for the transfer as a send does (DeepSpeed's pipeline engine), the stage also waits
  // out the message it receives per micro-batch: (2 m + 2) x p2p, and the step grows by m x p2p.
  Scenario sc = test::scenario(test::tiny_model(4), 8, 32);
  const Layout l = layout(4, 1, 2, 1);
  const Estimate base = estimate(sc, l);
  ASSERT_TRUE(base.reason.empty()) << base.reason;
  ASSERT_EQ(base.num_microbatches, 8);
  sc.training.framework.p2p_blocking_recv = true;
  const Estimate blocking = estimate(sc, l);
  const double p2p = step_costs(sc, l).p2p_s;
  ASSERT_GT(p2p, 0);
  EXPECT_NEAR(base.breakdown_s.pp_comm, 10 * p2p + step_costs(sc, l).embedding_sync_s, 1e-12);
  const double sync = step_costs(sc, l).embedding_sync_s;
  report("pp_comm with blocking receives (s)", 18 * p2p + sync, blocking.breakdown_s.pp_comm);
  EXPECT_NEAR(blocking.breakdown_s.pp_comm, 18 * p2p + sync, 1e-12);
  EXPECT_NEAR(blocking.step_time_s - base.step_time_s, 8 * p2p, 1e-12);
}

TEST(CostModelStack, DeepSpeedsPipelineSendsATensorParallelRanksShareOfTheActivation) {
  // DeepSpeed's PipelineEngine splits every activation and gradient it sends between stages over
  // the tensor-parallel group and all-gathers it on arrival (is_pipe_partitioned,
  // is_grad_partitioned): each rank sends s x b x h x 2 / tp bytes, as Megatron-LM's scatter /
  // gather does, not the whole activation. GPT-3 175B on p4d nodes, tp 8 x pp 4, mbs 1, fp16.
  Scenario sc = gpt3_175b_fp16("p4d.24xlarge", 4, "deepspeed");
  const Layout l = tp8_pp4();
  ASSERT_FALSE(check_layout(sc, l).has_value());
  const double share = 2048.0 * 12288 * 2 / 8;
  const StepCosts ds = step_costs(sc, l);
  report("bytes a rank sends per micro-batch", share, ds.p2p_bytes);
  EXPECT_EQ(ds.p2p_bytes, share);
  sc.training.framework.p2p_scatter_gather = false;  // every rank sending the whole activation
  const StepCosts whole = step_costs(sc, l);
  EXPECT_EQ(whole.p2p_bytes, 8 * share);
  EXPECT_GT(whole.p2p_s, 4 * ds.p2p_s);
}

TEST(CostModelStack, DeepSpeedsZeroOneAllReducesTheGradientsBeforeGatheringTheWeights) {
  // DeepSpeed's stage 1 forces contiguous_gradients off, so each gradient bucket goes through
  // buffered_reduce_fallback's dist.all_reduce (deepspeed/runtime/zero/stage2.py, v0.4-v0.9), and
  // step() all-gathers the updated fp16 partitions: an all-reduce plus an all-gather, where a
  // reduce-scatter plus an all-gather is one all-reduce's volume. GPT-3 175B on 8 p4d nodes,
  // tp 8 x pp 4 x dp 2 (one rank per node in each dp group), fp16: grads and weights 2 bytes, so
  // the all-reduce is twice the reduce-scatter and the exchange costs 1.5 times as much.
  const Scenario sc = gpt3_175b_fp16("p4d.24xlarge", 8, "deepspeed");
  ASSERT_TRUE(sc.training.framework.zero1_grad_allreduce);
  Layout l = tp8_pp4(2);
  l.zero = 1;
  ASSERT_FALSE(check_layout(sc, l).has_value());
  Scenario scatter = sc;
  scatter.training.framework.zero1_grad_allreduce = false;
  const double ar = step_costs(sc, l).dp_comm_s, rs = step_costs(scatter, l).dp_comm_s;
  ASSERT_GT(rs, 0);
  report("ZeRO-1 exchange, all-reduce + all-gather over reduce-scatter + all-gather", 1.5, ar / rs);
  EXPECT_NEAR(ar / rs, 1.5, 1e-9);
  EXPECT_GT(estimate(sc, l).breakdown_s.dp_comm, estimate(scatter, l).breakdown_s.dp_comm);
  // Only stage 1: ZeRO-0 all-reduces either way, ZeRO-2 keeps its reduce-scatter.
  for (const int zero : {0, 2}) {
    l.zero = zero;
    l.pp = zero == 2 ? 1 : 4;  // the pipeline engine refuses ZeRO-2
    l.dp = zero == 2 ? 8 : 2;
    ASSERT_FALSE(check_layout(sc, l).has_value()) << zero;
    const double knob = step_costs(sc, l).dp_comm_s;
    ASSERT_GT(knob, 0) << zero;  // an exchange to compare
    EXPECT_EQ(knob, step_costs(scatter, l).dp_comm_s) << zero;
  }
}

TEST(CostModelStack, AsyncTensorParallelCollectivesHideBehindTheColumnLinearsGemms) {
  // Expectation: Megatron-LM from September 2021 runs the input-gradient all-reduce of the two
  // column-parallel linears (Q, K, V and the FFN's input) beside their weight-gradient GEMMs. On
  // GPT-3 175B at tp 8 (mbs 1, seq 2048) each of those GEMMs outlasts the all-reduce of the
  // layer's activation (ar), so both hide whole and each still costs half its time: a layer's
  // backward collectives cost one ar less, on a middle stage nl x ar (= half its forward's two per
  // layer), the forward's unchanged. Under sp the all-gather and reduce-scatter halves hide the
  // same. capplan-train blocks on every collective (a CPU rank): nothing hides.
  Scenario sc = gpt3_175b_fp16("dgx-a100-80gb", 4, "megatron-lm");
  ASSERT_TRUE(sc.training.framework.tp_async_bwd);
  Layout l = tp8_pp4();
  for (const bool sp : {false, true}) {
    l.sp = sp;
    ASSERT_FALSE(check_layout(sc, l).has_value());
    Scenario blocking = sc;
    blocking.training.framework.tp_async_bwd = false;
    const ChunkCosts a = step_costs(sc, l).chunks[1];
    const ChunkCosts b = step_costs(blocking, l).chunks[1];
    ASSERT_FALSE(b.has_embedding || b.has_head);
    const double nl = 96 / 4;
    const double ar = b.tp_comm_forward_s / (2 * nl);
    ASSERT_GT(ar, 0);
    EXPECT_EQ(a.tp_comm_forward_s, b.tp_comm_forward_s);
    report(sp ? "backward collectives saved per middle stage, sp (s)"
              : "backward collectives saved per middle stage (s)",
           nl * ar, b.tp_comm_backward_s - a.tp_comm_backward_s);
    EXPECT_NEAR(b.tp_comm_backward_s - a.tp_comm_backward_s, nl * ar, 1e-12);
    EXPECT_LT(estimate(sc, l).step_time_s, estimate(blocking, l).step_time_s);
    // The LM head's input-gradient collective (an all-reduce, under sp a reduce-scatter: half of
    // one) hides behind the logits' weight-gradient GEMM on the last stage: half of it is saved.
    const ChunkCosts la = step_costs(sc, l).chunks.back();
    const ChunkCosts lb = step_costs(blocking, l).chunks.back();
    ASSERT_TRUE(la.has_head);
    EXPECT_NEAR(lb.tp_comm_backward_s - la.tp_comm_backward_s, nl * ar + 0.5 * (sp ? 0.5 : 1.0) * ar, 1e-12);
    Scenario runtime = sc;
    runtime.cluster.gpu.cpu_rank = true;
    Scenario runtime_blocking = blocking;
    runtime_blocking.cluster.gpu.cpu_rank = true;
    const double runtime_bwd = step_costs(runtime, l).chunks[1].tp_comm_backward_s;
    ASSERT_GT(runtime_bwd, 0);
    EXPECT_EQ(runtime_bwd, step_costs(runtime_blocking, l).chunks[1].tp_comm_backward_s);
  }
}

TEST(CostModelStack, HiddenDataParallelBucketsStillCostHalfTheirTime) {
  // Expectation: GPT-3 1.3B on one p4d node, dp 8, mbs 4, with the gradient all-reduce D in 8
  // buckets overlapped with the backward (megatron-core's overlap_grad_reduce): the backward of the
  // last micro-batch outlasts 7/8 D, so only the last bucket is exposed, and the 7 hidden ones
  // cost the overlap prior, half their time: dp_comm = D/8 + 0.5 x 7D/8 = 9D/16. Reduced after
  // the last backward instead (dp_overlap false), all of D is exposed.
  Scenario sc = preset_scenario("gpt3-1.3b", "p4d.24xlarge", 1, 64);
  sc.training.framework = *load_framework("megatron-core").value;
  sc.training.framework.param_gather_overlap = false;
  Layout l;
  l.dp = 8;
  l.mbs = 4;
  ASSERT_FALSE(check_layout(sc, l).has_value());
  const StepCosts c = step_costs(sc, l);
  ASSERT_GT(c.dp_comm_s, 0);
  EXPECT_EQ(c.dp_hidden_cost, 0.5);
  const Estimate e = estimate(sc, l);
  report("dp_comm with 7 of 8 buckets hidden (s)", 9.0 / 16 * c.dp_comm_s, e.breakdown_s.dp_comm);
  EXPECT_NEAR(e.breakdown_s.dp_comm, 9.0 / 16 * c.dp_comm_s, 1e-9 * c.dp_comm_s);
  sc.training.framework.dp_overlap = false;
  EXPECT_NEAR(estimate(sc, l).breakdown_s.dp_comm, c.dp_comm_s, 1e-9 * c.dp_comm_s);
  EXPECT_EQ(step_costs(sc, l).dp_hidden_cost, 0.0);
}

TEST(CostModelStack, SgdKeepsNoOptimizerState) {
  TrainingSpec t;
  t.precision = Precision::Fp16;
  t.optimizer = Optimizer::Sgd;
  const StateBytesPerParam b = state_bytes_per_param(t);
  EXPECT_EQ(b.optimizer, 0.0);
  EXPECT_EQ(b.weights, 2.0);
  t.optimizer = Optimizer::Adam;
  EXPECT_EQ(state_bytes_per_param(t).optimizer, 12.0);
}

// ZeRO-3 as PyTorch FSDP runs it, on one 8-GPU node (ring over NVLink): an all-gather of S bytes
// takes 7/8 S / B + 7 x 2 us with B = 300 GB/s x 0.77 (placement.cpp, golden tests above).
double ring8_allgather_s(double bytes) { return 7.0 / 8.0 * bytes / (300e9 * 0.77) + 7 * 2e-6; }

Scenario fsdp_scenario(const ModelSpec& m, int64_t gbs) {
  Scenario sc = test::scenario(m, 8, gbs);
  sc.training.precision = Precision::Fp16;  // 2-byte gradients: a reduce-scatter moves what a gather does
  sc.training.optimizer = Optimizer::Sgd;
  sc.cluster.host_memory_gib = 1024;
  sc.training.framework.zero3_comm = Zero3Comm::Ring;
  return sc;
}

Layout fsdp_layout(int mbs) {
  Layout l;
  l.dp = 8;
  l.mbs = mbs;
  l.zero = 3;
  l.recompute = Recompute::Full;
  return l;
}

TEST(CostModelZero3, UnitsInsideTheCheckpointAreGatheredAgainForTheRecompute) {
  // Expectation: with size-based units (each Linear inside the checkpointed layer) the recomputed
  // forward gathers every layer once more; without prefetch nothing overlaps, so the exposed
  // traffic grows by exactly one layer gather per layer and micro-batch:
  //   dp(linear) - dp(layer) = m L x allgather(2 P_layer), P_layer = 49984 (tiny block), L = 4, m = 2.
  Scenario sc = fsdp_scenario(test::tiny_model(4), 32);
  sc.training.framework.zero3_prefetch_layers = 0;
  sc.training.framework.zero3_unit = Zero3Unit::Layer;
  const Estimate layer = estimate(sc, fsdp_layout(2));
  sc.training.framework.zero3_unit = Zero3Unit::Linear;
  const Estimate linear = estimate(sc, fsdp_layout(2));
  ASSERT_TRUE(layer.reason.empty()) << layer.reason;
  const double expected = 2 * 4 * ring8_allgather_s(2 * 49984.0);
  report("extra exposed gathers of the recompute (s)", expected, linear.breakdown_s.dp_comm - layer.breakdown_s.dp_comm);
  EXPECT_NEAR(linear.breakdown_s.dp_comm - layer.breakdown_s.dp_comm, expected, 1e-12);
  // Selective recompute keeps the units' gathers as they are (nothing inside a checkpoint).
  Layout none = fsdp_layout(2);
  none.recompute = Recompute::None;
  sc.training.framework.zero3_unit = Zero3Unit::Layer;
  const double dp_layer_none = estimate(sc, none).breakdown_s.dp_comm;
  sc.training.framework.zero3_unit = Zero3Unit::Linear;
  EXPECT_DOUBLE_EQ(estimate(sc, none).breakdown_s.dp_comm, dp_layer_none);
}

TEST(CostModelZero3, HostSgdInFp16RunsAtTheFrameworksKernelRate) {
  // Expectation: FSDP cpu_offload steps SGD on the CPU over each rank's shard, P / dp parameters
  // with P = 4 x 49984 + 66048 + 128 = 266112 (tiny model, 4 layers): at 1e-3 G elements/s on one
  // thread that is 33264 / 1e6 = 0.033264 s (far above the memory-bound 33264 x 6 B x 8 / 100 GB/s),
  // a quarter of it on four threads, and no PCIe copy around the step (the shards come up inside
  // the gathers).
  Scenario sc = fsdp_scenario(test::tiny_model(4), 32);
  sc.training.offload_params = true;
  sc.training.framework.host_sgd_fp16_gelem_per_s = 1e-3;
  sc.training.framework.host_step_threads = 1;
  const Estimate one = estimate(sc, fsdp_layout(2));
  ASSERT_TRUE(one.reason.empty()) << one.reason;
  const double shard = (4 * 49984.0 + 66048 + 128) / 8;
  report("host SGD step, 1 thread (s)", shard / 1e6, one.breakdown_s.optimizer);
  EXPECT_NEAR(one.breakdown_s.optimizer, shard / 1e6, 1e-12);
  sc.training.framework.host_step_threads = 4;
  EXPECT_NEAR(estimate(sc, fsdp_layout(2)).breakdown_s.optimizer, shard / 4e6, 1e-12);
  // bf16 has a vectorised CPU path: the step is bound by host memory bandwidth only.
  sc.training.precision = Precision::Bf16;
  EXPECT_LT(estimate(sc, fsdp_layout(2)).breakdown_s.optimizer, shard / 4e6 / 10);
}

// The smallest host memory (GiB, as a cluster file gives it) that holds `bytes` per node within
// the usable 80 %, nudged by `factor`.
double host_gib_for(double bytes, double factor) { return bytes / 0.8 * factor / (1024.0 * 1024.0 * 1024.0); }

TEST(CostModelZero3, OffloadedParametersKeepTheStepsStateInHostMemory) {
  // Expectation: FSDP cpu_offload with Adam in bf16 (ring mode, dp 8, one node of 8 GPUs) keeps
  // no weights, gradient shards or optimizer state on the GPU: the step runs on the CPU, so each
  // GPU's shard of P = 266112 parameters (33264) needs 2 + 4 + 12 = 18 bytes per parameter of
  // host memory, 8 x 18 x 33264 = 4790016 bytes per node. A host of just that (within its usable
  // 80 %) fits; one 0.1 % smaller does not. The optimizer state is counted once, on the host.
  Scenario sc = fsdp_scenario(test::tiny_model(4), 32);
  sc.training.precision = Precision::Bf16;
  sc.training.optimizer = Optimizer::Adam;
  sc.training.offload_params = true;
  const double host = 8 * 18 * (4 * 49984.0 + 66048 + 128) / 8;
  sc.cluster.host_memory_gib = host_gib_for(host, 1.001);
  const Estimate e = estimate(sc, fsdp_layout(2));
  ASSERT_TRUE(e.reason.empty()) << e.reason;
  const MemoryBytes& m = e.memory_per_gpu_bytes;
  EXPECT_DOUBLE_EQ(m.weights, 0);
  EXPECT_DOUBLE_EQ(m.gradients, 0);
  EXPECT_DOUBLE_EQ(m.optimizer, 0);
  EXPECT_TRUE(e.fits) << e.reason;
  sc.cluster.host_memory_gib = host_gib_for(host, 0.999);
  EXPECT_FALSE(estimate(sc, fsdp_layout(2)).fits);

  // Optimizer offload on a pipeline (dp 4 x pp 2, ZeRO-1): a GPU holds its own stage's state on
  // the host, the larger stage's (stage 0: 2 layers and the embeddings, 166016 parameters), not
  // the two stages' together: 8 GPUs x 12 B x 166016 / 4 = 3984384 bytes per node.
  Scenario pipe = sc;
  pipe.training.offload_params = false;
  pipe.training.offload_optimizer = true;
  Layout l;
  l.dp = 4;
  l.pp = 2;
  l.mbs = 2;
  l.zero = 1;
  const double stage0 = 8 * 12 * (2 * 49984.0 + 66048) / 4;
  pipe.cluster.host_memory_gib = host_gib_for(stage0, 1.001);
  const Estimate p = estimate(pipe, l);
  ASSERT_TRUE(p.reason.empty()) << p.reason;
  EXPECT_DOUBLE_EQ(p.memory_per_gpu_bytes.optimizer, 0);
  EXPECT_TRUE(p.fits) << p.reason;
  pipe.cluster.host_memory_gib = host_gib_for(stage0, 0.999);
  EXPECT_FALSE(estimate(pipe, l).fits);

  // ZeRO-Offload on ZeRO-2 (Ren et al. 2021): the gradient shards go down with the optimizer
  // state; the GPU keeps the 16-bit weights. dp 8: 8 x (4 + 12) B x P / 8 = 16 P per node.
  Scenario z2 = sc;
  z2.training.offload_params = false;
  z2.training.offload_optimizer = true;
  Layout l2 = fsdp_layout(2);
  l2.zero = 2;
  const double host2 = 16 * (4 * 49984.0 + 66048 + 128);
  z2.cluster.host_memory_gib = host_gib_for(host2, 1.001);
  const Estimate e2 = estimate(z2, l2);
  ASSERT_TRUE(e2.reason.empty()) << e2.reason;
  EXPECT_DOUBLE_EQ(e2.memory_per_gpu_bytes.gradients, 0);
  EXPECT_DOUBLE_EQ(e2.memory_per_gpu_bytes.optimizer, 0);
  EXPECT_DOUBLE_EQ(e2.memory_per_gpu_bytes.weights, 2 * (4 * 49984.0 + 66048 + 128));
  EXPECT_DOUBLE_EQ(e2.host_memory_per_node_bytes, host2);
  z2.cluster.host_memory_gib = host_gib_for(host2, 0.999);
  EXPECT_FALSE(estimate(z2, l2).fits);
}

TEST(CostModelZero3, BlockingActivationOffloadRunsInSeriesWithCompute) {
  // Expectation: save_on_cpu's blocking copies are not hidden: per micro-batch the layer inputs
  // (2 s b h bytes each under full recompute) and the embedding's dropout mask (s b h) go down
  // and come back over PCIe at 32 GB/s x 0.8: offload = m x 2 x (L 2sbh + sbh) / 25.6 GB/s with
  // s 32, b 2, h 64, L 4, m 2.
  Scenario sc = fsdp_scenario(test::tiny_model(4), 32);
  sc.training.framework.offload_sync = true;
  Layout l = fsdp_layout(2);
  l.offload = true;
  const Estimate e = estimate(sc, l);
  ASSERT_TRUE(e.reason.empty()) << e.reason;
  const double sbh = 32.0 * 2 * 64;
  const double expected = 2 * 2 * (4 * 2 * sbh + sbh) / 25.6e9;
  report("blocking activation offload (s)", expected, e.breakdown_s.offload);
  EXPECT_NEAR(e.breakdown_s.offload, expected, 1e-15);
}

// Four layers with compute long enough to hide every ZeRO-3 gather and reduce-scatter on the
// test node (h 1024, 16 heads, seq 2048; with fsdp_layout(8), one micro-batch of 8).
Scenario fsdp_long_compute_scenario() {
  ModelSpec m = test::tiny_model(4);
  m.hidden = 1024;
  m.heads = 16;
  m.seq_len = 2048;
  return fsdp_scenario(m, 64);
}

TEST(CostModelZero3, BlockingOffloadExposesEachLayersFirstGather) {
  // Expectation: with compute long enough to hide every gather (h 1024, seq 2048, mbs 8), a host
  // that waits at the end of each layer's forward issues the next layer's first unit (its Q, K, V
  // projection, 3 h^2 parameters) on an idle GPU: L - 1 more gathers exposed per micro-batch
  // instead of hidden at the overlap cost 0.5, so dp_comm grows by m (L - 1) x 0.5 x
  // allgather(2 x 3 h^2), L = 4, m = 1.
  Scenario sc = fsdp_long_compute_scenario();
  sc.training.framework.zero3_unit = Zero3Unit::Linear;
  Layout l = fsdp_layout(8);
  l.offload = true;
  const Estimate async = estimate(sc, l);
  sc.training.framework.offload_sync = true;
  const Estimate sync = estimate(sc, l);
  ASSERT_TRUE(sync.reason.empty()) << sync.reason;
  const double expected = 3 * 0.5 * ring8_allgather_s(2 * 3 * 1024.0 * 1024.0);
  report("first gathers exposed by the blocking offload (s)", expected,
         sync.breakdown_s.dp_comm - async.breakdown_s.dp_comm);
  EXPECT_NEAR(sync.breakdown_s.dp_comm - async.breakdown_s.dp_comm, expected, 1e-12);
}

TEST(CostModelZero3, WithoutBackwardPrefetchTheBackwardOverlapsNothing) {
  // Expectation: with compute long enough to hide every gather and reduce-scatter (h 1024, seq
  // 2048, mbs 8, whole-layer units, no recompute), BACKWARD_PRE exposes one gather per pass and the
  // last reduce-scatter. Without backward prefetch each layer's gather queues behind the previous
  // layer's reduce-scatter on the one NCCL stream: L - 1 more gathers and reduce-scatters are
  // exposed instead of hidden at the overlap cost 0.5, so dp_comm grows by
  // m (L - 1) x 0.5 x (ag + rs) with ag = rs = allgather(2 P_layer), L = 4, m = 1. Post issues the
  // gather before the reduce-scatter, which then hides behind the next layer: m (L - 1) x 0.5 x ag.
  Scenario sc = fsdp_long_compute_scenario();
  Layout l = fsdp_layout(8);
  l.recompute = Recompute::None;
  const Estimate pre = estimate(sc, l);
  ASSERT_TRUE(pre.reason.empty()) << pre.reason;
  sc.training.framework.zero3_backward_prefetch = Zero3BackwardPrefetch::None;
  const Estimate none = estimate(sc, l);
  sc.training.framework.zero3_backward_prefetch = Zero3BackwardPrefetch::Post;
  const Estimate post = estimate(sc, l);
  const double layer_params = 12.0 * 1024 * 1024 + 13 * 1024;  // 4h^2 + 8h^2 weights, 13 h biases and norms
  const double ag = ring8_allgather_s(2 * layer_params);
  report("backward exposed without prefetch (s)", 3 * 0.5 * 2 * ag, none.breakdown_s.dp_comm - pre.breakdown_s.dp_comm);
  EXPECT_NEAR(none.breakdown_s.dp_comm - pre.breakdown_s.dp_comm, 3 * 0.5 * 2 * ag, 1e-9);
  EXPECT_NEAR(post.breakdown_s.dp_comm - pre.breakdown_s.dp_comm, 3 * 0.5 * ag, 1e-9);
  // The total traffic is the same; only what is hidden differs.
  EXPECT_GT(none.step_time_s, post.step_time_s);
  EXPECT_GT(post.step_time_s, pre.step_time_s);
  // Memory: without backward prefetch the backward holds one gathered layer fewer (2 bytes per
  // parameter, plus the allocator's margin on it).
  const double fewer = 2 * layer_params * (1 + sc.training.framework.allocator_margin);
  EXPECT_NEAR(pre.memory_per_gpu_bytes.total - none.memory_per_gpu_bytes.total, fewer, 1e-6 * fewer);
  EXPECT_NEAR(post.memory_per_gpu_bytes.total, none.memory_per_gpu_bytes.total, 1e-6 * fewer);
}

TEST(CostModelZero3, RankShareCollectivesEachPayARingsLatency) {
  // Expectation: DeepSpeed's ZeRO-3 (rank-share mode) pays one flat ring's latency per collective.
  // dp 16 on two 8-GPU nodes: 15 ring steps, one across the nodes (6 us), 14 inside one (2 us),
  // 34 us per collective. The tiny model (4 GPT layers with biases, learned positions, tied head):
  //   per tensor: 4 x 12 + 2 (embeddings) + 2 (final norm) = 52 gathers each way, 52 reductions;
  //   per module: 4 x 6 + 2 + 1 = 27 gathers each way, one 5e8-element gradient bucket.
  // Per tensor issues 2 x (52 - 27) + (52 - 1) = 101 collectives more per micro-batch; the tiny
  // model's compute hides none of them at these sizes, so dp_comm grows by m x 101 x 34 us (m = 2).
  Scenario sc = test::scenario(test::tiny_model(4), 16, 64);
  sc.training.precision = Precision::Fp16;
  sc.training.framework.zero3_comm = Zero3Comm::RankShare;
  Layout l;
  l.dp = 16;
  l.mbs = 2;
  l.zero = 3;
  l.recompute = Recompute::Full;
  sc.training.framework.zero3_collectives = Zero3Collectives::Module;
  const Estimate module = estimate(sc, l);
  ASSERT_TRUE(module.reason.empty()) << module.reason;
  sc.training.framework.zero3_collectives = Zero3Collectives::Tensor;
  const Estimate tensor = estimate(sc, l);
  const double busy = module.breakdown_s.compute + module.breakdown_s.recompute;
  ASSERT_GT(module.breakdown_s.dp_comm, busy);  // so the overlap hides the same part of both
  const double expected = 2 * 101 * 34e-6;
  report("per-tensor collectives' extra latency (s)", expected, tensor.breakdown_s.dp_comm - module.breakdown_s.dp_comm);
  EXPECT_NEAR(tensor.breakdown_s.dp_comm - module.breakdown_s.dp_comm, expected, 1e-9);
  // On one node the ring has no slow step: the same 101 collectives cost 15 x 2 us each.
  sc.cluster.gpus_per_node = 16;
  sc.nodes = 1;
  const double one_node = estimate(sc, l).breakdown_s.dp_comm;
  sc.training.framework.zero3_collectives = Zero3Collectives::Module;
  EXPECT_NEAR(one_node - estimate(sc, l).breakdown_s.dp_comm, 2 * 101 * 15 * 2e-6, 1e-9);
}

TEST(CostModelStack, SeedCaseWithSmpV1FromThePresetsPhysics) {
  // SageMaker measured 32 samples/s for GPT-3 175B on 120 p4d.24xlarge with SMP v1. With the
  // smp-v1 preset (no sequence parallelism, no selective recompute, eager HF kernels) the best
  // plan must land in 24-44 samples/s, and at 240 nodes in 18-35 days for 300B tokens.
  for (int nodes : {120, 240}) {
    Scenario sc = preset_scenario("gpt3-175b", "p4d.24xlarge", nodes, 1536);
    sc.training.tokens = 300e9;
    sc.training.framework = *load_framework("smp-v1").value;
    SearchOptions opt;
    opt.nodes_min = opt.nodes_max = nodes;
    opt.top = 1;
    const SearchResult r = search(sc, opt);
    ASSERT_FALSE(r.candidates.empty());
    const Estimate& best = r.candidates.front();
    std::printf("Expectation %s. Actual: %.1f samples/s, %.1f days at %d nodes\n",
                nodes == 120 ? "24-44 samples/s" : "18-35 days", best.samples_per_s, best.days_to_train, nodes);
    if (nodes == 120) {
      EXPECT_GE(best.samples_per_s, 24.0);
      EXPECT_LE(best.samples_per_s, 44.0);
    } else {
      EXPECT_GE(best.days_to_train, 18.0);
      EXPECT_LE(best.days_to_train, 35.0);
    }
    EXPECT_FALSE(best.layout.sp);
    EXPECT_NE(best.layout.recompute, Recompute::Selective);
  }
}

}  // namespace
}  // namespace capplan
