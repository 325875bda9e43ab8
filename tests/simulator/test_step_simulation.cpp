// Step simulation (simulator/step_simulation.h) on hand-written costs: golden bubble fractions,
// a 2-stage timeline written out by hand, bucketed DP overlap, link contention that follows the
// placement order, activation memory over time, offload, the Chrome trace, and bad input.
#include <gtest/gtest.h>

#include <algorithm>
#include <clocale>
#include <cstdlib>
#include <optional>
#include <cmath>
#include <cstdio>

#include "planner/json.h"
#include "simulator/step_simulation.h"
#include "support/test_files.h"

namespace capplan {
namespace {

// One chunk's times: forward f, backward split into input-gradient bi and weight-gradient bw.
void set_times(ChunkCosts& ch, double f, double bi, double bw) {
  ch.forward_s = f;
  ch.backward_input_s = bi;
  ch.backward_weight_s = bw;
}

// Equal chunks of 1 GB of activations each.
StepCosts equal_costs(int chunks, double f, double bi, double bw, double p2p = 0) {
  StepCosts c;
  c.chunks.resize(size_t(chunks));
  for (ChunkCosts& ch : c.chunks) {
    set_times(ch, f, bi, bw);
    ch.activation_bytes = 1e9;
  }
  c.p2p_s = p2p;
  return c;
}

Layout pipeline(int pp, Schedule s, int vp = 1) {
  Layout l;
  l.pp = pp;
  l.vp = vp;
  l.schedule = s;
  return l;
}

// CPU ranks time-sharing their host's cores (StepCosts::host_cores, processor sharing).
// Expectation: 2 stages on 1 core, m=4, f=1, b=2 per chunk: whenever one stage waits for the
// other (the fill, the drain) the other has work and takes the whole core, so the core is never
// idle and step = all the work / 1 core = 2 x 4 x 3 = 24 s, against (m+p-1)(f+b) = 15 s with a
// core each and 2 x 15 = 30 s if the bubbles were stretched too.
TEST(StepSimulation, StagesSharingOneCoreTakeAllTheirWork) {
  StepCosts c = equal_costs(2, 1, 1, 1);
  const auto own = simulate_step(c, pipeline(2, Schedule::OneFOneB), 8, 4);
  c.host_cores = 1;
  const auto shared = simulate_step(c, pipeline(2, Schedule::OneFOneB), 8, 4);
  ASSERT_TRUE(shared.error.empty()) << shared.error;
  std::printf("Expectation 15 s with a core each, 24 s on one core; Actual result %.4f s, %.4f s\n",
              own.step_time_s, shared.step_time_s);
  EXPECT_NEAR(own.step_time_s, 15.0, 1e-9);
  EXPECT_NEAR(shared.step_time_s, 24.0, 1e-9);
  // Expectation: 4 data-parallel ranks (one stage) on 2 cores, m=4: each at half a core, the
  // compute doubles: 2 x 4 x 3 = 24 s; on 4 cores 12 s.
  StepCosts d = equal_costs(1, 1, 1, 1);
  Layout dp4 = pipeline(1, Schedule::OneFOneB);
  dp4.dp = 4;
  d.host_cores = 4;
  EXPECT_NEAR(simulate_step(d, dp4, 4, 4).step_time_s, 12.0, 1e-9);
  d.host_cores = 2;
  const auto dp4_shared = simulate_step(d, dp4, 4, 4);
  std::printf("Expectation 24 s, compute 24 s; Actual result %.4f s, compute %.4f s\n", dp4_shared.step_time_s,
              dp4_shared.breakdown_s.compute);
  EXPECT_NEAR(dp4_shared.step_time_s, 24.0, 1e-9);
  EXPECT_NEAR(dp4_shared.breakdown_s.compute, 24.0, 1e-9);
}

TEST(StepSimulation, OneFOneBBubbleIsGolden) {
  // Expectation: p=4, m=8, f=1, b=2 → step = (m+p-1)(f+b) = 33 s, bubble = (p-1)/(m+p-1) = 3/11.
  const auto sim = simulate_step(equal_costs(4, 1, 1, 1), pipeline(4, Schedule::OneFOneB), 8, 8);
  ASSERT_TRUE(sim.error.empty()) << sim.error;
  std::printf("Expectation 33 s, 3/11 = %.4f; Actual result %.4f s, %.4f\n", 3.0 / 11, sim.step_time_s,
              sim.bubble_fraction);
  EXPECT_NEAR(sim.step_time_s, 33.0, 1e-9);
  EXPECT_NEAR(sim.bubble_fraction, 3.0 / 11, 1e-9);
  EXPECT_NEAR(sim.breakdown_s.compute, 24.0, 1e-9);
  EXPECT_NEAR(sim.breakdown_s.sum(), sim.step_time_s, 1e-9);
  for (double busy : sim.busy_fraction_per_gpu) EXPECT_NEAR(busy, 8.0 / 11, 1e-9);
}

TEST(StepSimulation, GPipeBubbleIsGoldenAndMNotMultipleOfP) {
  // Expectation: p=4, m=6 → bubble = (p-1)/(m+p-1) = 3/9 for GPipe and 1F1B alike.
  for (Schedule s : {Schedule::GPipe, Schedule::OneFOneB}) {
    const auto sim = simulate_step(equal_costs(4, 1, 1, 1), pipeline(4, s), 8, 6);
    ASSERT_TRUE(sim.error.empty()) << sim.error;
    EXPECT_NEAR(sim.step_time_s, 27.0, 1e-9) << to_string(s);
    EXPECT_NEAR(sim.bubble_fraction, 3.0 / 9, 1e-9) << to_string(s);
  }
}

TEST(StepSimulation, InterleavedBubbleDividedByVp) {
  // Expectation: p=4, vp=2, m=8, a stage's f+b = 3 s split over 2 chunks → bubble time
  // (p-1)(f+b)/vp = 4.5 s, step = m(f+b) + 4.5 = 28.5 s.
  const auto sim = simulate_step(equal_costs(8, 0.5, 0.5, 0.5), pipeline(4, Schedule::Interleaved, 2), 8, 8);
  ASSERT_TRUE(sim.error.empty()) << sim.error;
  std::printf("Expectation 28.5 s; Actual result %.4f s\n", sim.step_time_s);
  EXPECT_NEAR(sim.step_time_s, 28.5, 1e-9);
  EXPECT_NEAR(sim.breakdown_s.bubble, 4.5, 1e-9);
}

TEST(StepSimulation, TwoStageTimelineByHand) {
  // pp=2, m=2, 1F1B, f = bi = bw = 1 s, p2p 0.5 s blocking the sender, optimizer 0.25 s:
  //   stage 0: F0 [0,1] send [1,1.5] F1 [1.5,2.5] send [2.5,3] | B0 waits for its gradient
  //            (stage 1's send ends at 5): BI [5,6] BW [6,7] | B1 BI [8.5,9.5] BW [9.5,10.5]
  //            | optimizer [10.5,10.75]
  //   stage 1: F0 [1.5,2.5] BI [2.5,3.5] BW [3.5,4.5] send [4.5,5] F1 [5,6] BI [6,7] BW [7,8]
  //            send [8,8.5] optimizer [8.5,8.75]
  StepCosts c = equal_costs(2, 1, 1, 1, 0.5);
  c.optimizer_s = 0.25;
  const auto sim = simulate_step(c, pipeline(2, Schedule::OneFOneB), 8, 2);
  ASSERT_TRUE(sim.error.empty()) << sim.error;
  struct Row { int stage; SimTaskKind kind; int mb; double start, end; };
  const std::vector<Row> expected = {
      {0, SimTaskKind::Forward, 0, 0, 1},            {0, SimTaskKind::SendForward, 0, 1, 1.5},
      {0, SimTaskKind::Forward, 1, 1.5, 2.5},        {0, SimTaskKind::SendForward, 1, 2.5, 3},
      {0, SimTaskKind::BackwardInput, 0, 5, 6},      {0, SimTaskKind::BackwardWeight, 0, 6, 7},
      {0, SimTaskKind::BackwardInput, 1, 8.5, 9.5},  {0, SimTaskKind::BackwardWeight, 1, 9.5, 10.5},
      {0, SimTaskKind::Optimizer, -1, 10.5, 10.75},  {1, SimTaskKind::Forward, 0, 1.5, 2.5},
      {1, SimTaskKind::BackwardInput, 0, 2.5, 3.5},  {1, SimTaskKind::BackwardWeight, 0, 3.5, 4.5},
      {1, SimTaskKind::SendBackward, 0, 4.5, 5},     {1, SimTaskKind::Forward, 1, 5, 6},
      {1, SimTaskKind::BackwardInput, 1, 6, 7},      {1, SimTaskKind::BackwardWeight, 1, 7, 8},
      {1, SimTaskKind::SendBackward, 1, 8, 8.5},     {1, SimTaskKind::Optimizer, -1, 8.5, 8.75},
  };
  for (const Row& r : expected) {
    auto it = std::find_if(sim.timeline.begin(), sim.timeline.end(), [&](const SimEvent& e) {
      return e.stage == r.stage && e.kind == r.kind && e.microbatch == r.mb;
    });
    ASSERT_NE(it, sim.timeline.end()) << "stage " << r.stage << " " << to_string(r.kind) << " mb" << r.mb;
    EXPECT_NEAR(it->start_s, r.start, 1e-12) << "stage " << r.stage << " " << to_string(r.kind) << " mb" << r.mb;
    EXPECT_NEAR(it->end_s, r.end, 1e-12) << "stage " << r.stage << " " << to_string(r.kind) << " mb" << r.mb;
  }
  EXPECT_EQ(sim.timeline.size(), expected.size());
  EXPECT_NEAR(sim.step_time_s, 10.75, 1e-12);
  EXPECT_EQ(sim.critical_stage, 0);
  // Stage 0 waits 0.5 s for its send, then 2.5 s and 1.5 s for gradients, each including one
  // 0.5 s transfer: pp_comm = 1.5 s, bubble = 2 + 1 = 3 s.
  EXPECT_NEAR(sim.breakdown_s.pp_comm, 1.5, 1e-12);
  EXPECT_NEAR(sim.breakdown_s.bubble, 3.0, 1e-12);
  EXPECT_NEAR(sim.breakdown_s.compute, 6.0, 1e-12);
  EXPECT_NEAR(sim.breakdown_s.optimizer, 0.25, 1e-12);
  EXPECT_NEAR(sim.breakdown_s.sum(), sim.step_time_s, 1e-12);
  // Without blocking sends the sender runs on: F1 on stage 0 starts at 1.
  StepSimulationOptions async;
  async.blocking_p2p = false;
  const auto free_running = simulate_step(c, pipeline(2, Schedule::OneFOneB), 8, 2, async);
  EXPECT_NEAR(free_running.step_time_s, 10.25, 1e-12);
}

TEST(StepSimulation, RingAllReduceExposedAfterLastBucket) {
  // Ring all-reduce of S = 1 GB over n = 4 GPUs at B = 100 GB/s with 10 us per step:
  // 2(n-1)/n * S/B + 2(n-1) * latency = 15 ms + 60 us. One bucket: all of it after backward.
  // Four buckets issued as the last weight-gradient work proceeds (0.25 s per piece): only the
  // last bucket, a quarter of the time, is exposed.
  const double n = 4, S = 1e9, B = 100e9, lat = 10e-6;
  const double ring = 2 * (n - 1) / n * S / B + 2 * (n - 1) * lat;
  StepCosts c = equal_costs(1, 1, 1, 1);
  c.dp_comm_s = ring;
  c.optimizer_s = 0.1;
  Layout l;
  l.dp = 4;
  c.dp_buckets = 1;
  auto one = simulate_step(c, l, 8, 1);
  ASSERT_TRUE(one.error.empty()) << one.error;
  EXPECT_NEAR(one.step_time_s, 3 + ring + 0.1, 1e-12);
  EXPECT_NEAR(one.breakdown_s.dp_comm, ring, 1e-12);
  c.dp_buckets = 4;
  auto four = simulate_step(c, l, 8, 1);
  EXPECT_NEAR(four.step_time_s, 3 + ring / 4 + 0.1, 1e-12);
  EXPECT_NEAR(four.breakdown_s.dp_comm, ring / 4, 1e-12);
  // Buckets are cut from the whole last backward: 4 pieces of 0.5 s, each followed by a 0.5 s
  // bucket (2 s ring / 4). The first bucket starts at 1.5 s, the comm stream then runs back to
  // back until 3.5 s while backward ends at 3 s: 0.5 s exposed, then the optimizer.
  c.dp_comm_s = 2.0;
  auto slow = simulate_step(c, l, 8, 1);
  EXPECT_NEAR(slow.step_time_s, (1 + 0.5) + 2.0 + 0.1, 1e-12);
  EXPECT_NEAR(slow.breakdown_s.dp_comm, 0.5, 1e-12);
  // ZeRO-3: per micro-batch 3 collectives of dp_comm_s / (3 m): all-gather before forward (exposed
  // at the start), before backward (prefetched during forward), reduce-scatter after backward.
  l.zero = 3;
  c.dp_comm_s = 0.3;
  auto z3 = simulate_step(c, l, 8, 1);
  ASSERT_TRUE(z3.error.empty()) << z3.error;
  EXPECT_NEAR(z3.step_time_s, 0.1 + 3 + 0.1 + 0.1, 1e-12);
  // ZeRO-3 whose exposed part the planner gives (ring mode, and capplan-train's blocking calls):
  // a wait on the compute stream after each backward, counted as dp_comm, so that the terms
  // still add up to the step.
  c.zero3_exposed_s = 0.4;
  auto given = simulate_step(c, l, 8, 1);
  ASSERT_TRUE(given.error.empty()) << given.error;
  const TimeBreakdown& b = given.breakdown_s;
  const double terms = b.compute + b.recompute + b.bubble + b.tp_comm + b.pp_comm + b.dp_comm + b.optimizer +
                       b.offload + b.ep_comm + b.cp_comm;
  std::printf("Expectation: step 3.5 s, dp_comm 0.4 s, terms adding up to the step  Actual result: %.4f, %.4f, %.4f s\n",
              given.step_time_s, b.dp_comm, terms);
  EXPECT_NEAR(given.step_time_s, 3 + 0.4 + 0.1, 1e-12);
  EXPECT_NEAR(b.dp_comm, 0.4, 1e-12);
  EXPECT_NEAR(terms, given.step_time_s, 1e-12);
}

TEST(StepSimulation, DpBucketsPricedAsConcurrentDoNotSlowEachOther) {
  // dp=2, pp=2, tp=1 on 2-GPU nodes, order DPT: both stages of a replica share a node and its NIC.
  // The cost model prices each DP group at half the NIC (all GPUs of the node at once), so the
  // two stages' buckets (demand 1/2 each) fit together: no slowdown from contention.
  StepCosts c = equal_costs(2, 1, 1, 1);
  c.dp_comm_s = 10;
  Layout l = pipeline(2, Schedule::OneFOneB);
  l.dp = 2;
  l.order = "DPT";
  StepSimulationOptions off;
  off.contention = false;
  const auto free = simulate_step(c, l, 2, 4, off);
  const auto shared = simulate_step(c, l, 2, 4);
  ASSERT_TRUE(shared.error.empty()) << shared.error;
  EXPECT_EQ(shared.stage_node[0], shared.stage_node[1]);
  EXPECT_NEAR(free.step_time_s, 25.0, 1e-9);  // stage 0's last backward ends at 15, + 10 s
  EXPECT_NEAR(shared.step_time_s, 25.0, 1e-9);
}

TEST(StepSimulation, DpBucketAndPipelineSendShareANic) {
  // pp=2, dp=2, one GPU per node, m=1, f = bi = bw = 1 s, p2p 0.5 s, one 10 s DP bucket. Each
  // transfer alone uses its whole NIC (demand 1). At 4.5 s stage 1 starts its bucket and its
  // gradient send together on its NIC: both run at half rate, so the send ends at 5.5 instead of
  // 5.0; stage 0's backward runs 5.5..7.5 and its bucket (alone on its NIC) 7.5..17.5.
  // Expectation: 17.5 s with contention, 17.0 s without.
  StepCosts c = equal_costs(2, 1, 1, 1, 0.5);
  c.dp_comm_s = 10;
  Layout l = pipeline(2, Schedule::OneFOneB);
  l.dp = 2;
  StepSimulationOptions off;
  off.contention = false;
  const auto free = simulate_step(c, l, 1, 1, off);
  const auto shared = simulate_step(c, l, 1, 1);
  ASSERT_TRUE(shared.error.empty()) << shared.error;
  std::printf("Expectation 17.0 s / 17.5 s; Actual result %.4f s / %.4f s\n", free.step_time_s,
              shared.step_time_s);
  EXPECT_NEAR(free.step_time_s, 17.0, 1e-9);
  EXPECT_NEAR(shared.step_time_s, 17.5, 1e-9);
  auto send = std::find_if(shared.timeline.begin(), shared.timeline.end(),
                           [](const SimEvent& e) { return e.kind == SimTaskKind::SendBackward; });
  ASSERT_NE(send, shared.timeline.end());
  EXPECT_NEAR(send->end_s - send->start_s, 1.0, 1e-9);
}

TEST(StepSimulation, PeakActivationMemoryFollowsSchedule) {
  // Expectation: 1 GB per micro-batch per stage; 1F1B holds p - s micro-batches on stage s,
  // GPipe holds all m.
  const auto f = simulate_step(equal_costs(4, 1, 1, 1), pipeline(4, Schedule::OneFOneB), 8, 8);
  for (int s = 0; s < 4; ++s) EXPECT_NEAR(f.peak_activation_bytes_per_stage[s], (4 - s) * 1e9, 1) << s;
  EXPECT_NEAR(f.activation_bytes_over_time[0].back().second, 0.0, 1);
  const auto g = simulate_step(equal_costs(4, 1, 1, 1), pipeline(4, Schedule::GPipe), 8, 8);
  for (int s = 0; s < 4; ++s) EXPECT_NEAR(g.peak_activation_bytes_per_stage[s], 8e9, 1) << s;
}

TEST(StepSimulation, OffloadHiddenWhenPcieIsFastExposedWhenSlow) {
  // GPipe on one stage, m = 4, f = 1, b = 2 (bi = bw = 1). Offload (0.5 s) overlaps each forward
  // and reload (0.5 s) each backward, layer by layer: all hidden, step = 4 + 8 = 12 s, and a
  // chunk's activations leave the GPU 0.5 s into its forward: the peak is one micro-batch.
  StepCosts c = equal_costs(1, 1, 1, 1);
  c.chunks[0].offload_s = 0.5;
  c.chunks[0].reload_s = 0.5;
  auto fast = simulate_step(c, pipeline(1, Schedule::GPipe), 8, 4);
  ASSERT_TRUE(fast.error.empty()) << fast.error;
  EXPECT_NEAR(fast.step_time_s, 12.0, 1e-9);
  EXPECT_NEAR(fast.breakdown_s.offload, 0.0, 1e-9);
  EXPECT_NEAR(fast.peak_activation_bytes_per_stage[0], 1e9, 1);
  // Reload 3 s against a 2 s backward: each backward exposes 1 s, as the cost model's
  // m * max(0, reload - backward) = 4 s. Step = 12 + 4 = 16 s.
  c.chunks[0].reload_s = 3;
  auto slow = simulate_step(c, pipeline(1, Schedule::GPipe), 8, 4);
  EXPECT_NEAR(slow.step_time_s, 16.0, 1e-9);
  EXPECT_NEAR(slow.breakdown_s.offload, 4.0, 1e-9);
}

TEST(StepSimulation, UnevenStagesPaceIsTheSlowestStage) {
  // Expectation: a 2x heavier middle stage sets the steady-state pace: step >= m * (its f+b).
  StepCosts c = equal_costs(4, 1, 1, 1);
  set_times(c.chunks[2], 2, 2, 2);
  const auto sim = simulate_step(c, pipeline(4, Schedule::OneFOneB), 8, 7);
  ASSERT_TRUE(sim.error.empty()) << sim.error;
  EXPECT_GE(sim.step_time_s, 7 * 6.0);
  EXPECT_LT(sim.step_time_s, 7 * 6.0 + 3 * 6.0 + 1e-9);
  EXPECT_NEAR(sim.busy_fraction_per_gpu[2], 42.0 / sim.step_time_s, 1e-9);
}

TEST(StepSimulation, BreakdownIsThePacingStageNotTheLastToFinish) {
  // pp=2, m=4, 1F1B, no sends: stage 0 f=1, b=1 (light), stage 1 f=2, b=2 (heavy, it paces).
  //   stage 1: F0 [1,3] B0 [3,5] F1 [5,7] B1 [7,9] F2 [9,11] B2 [11,13] F3 [13,15] B3 [15,17]
  //   stage 0: F0 [0,1] F1 [1,2] B0 [5,6] F2 [6,7] B1 [9,10] F3 [10,11] B2 [13,14] B3 [17,18]
  // Expectation: step 18 s = m (f1+b1) + (f0+b0), the estimate's T(c) of the heavy stage; stage 0
  // finishes last (critical), but the breakdown is stage 1's: compute 16 s, bubble 1 + 1 = 2 s
  // (the estimate's fill f0 + b0), bubble fraction 2/18, not stage 0's 10/18.
  StepCosts c = equal_costs(2, 1, 0.5, 0.5);
  set_times(c.chunks[1], 2, 1, 1);
  const auto sim = simulate_step(c, pipeline(2, Schedule::OneFOneB), 8, 4);
  ASSERT_TRUE(sim.error.empty()) << sim.error;
  std::printf("Expectation step 18 s, stage 1, compute 16 s, bubble 2 s; Actual result %.4f s, stage %d, %.4f s, "
              "%.4f s\n",
              sim.step_time_s, sim.breakdown_stage, sim.breakdown_s.compute, sim.breakdown_s.bubble);
  EXPECT_NEAR(sim.step_time_s, 18.0, 1e-12);
  EXPECT_EQ(sim.critical_stage, 0);
  EXPECT_EQ(sim.breakdown_stage, 1);
  EXPECT_NEAR(sim.breakdown_s.compute, 16.0, 1e-12);
  EXPECT_NEAR(sim.breakdown_s.bubble, 2.0, 1e-12);
  EXPECT_NEAR(sim.bubble_fraction, 2.0 / 18, 1e-12);
  EXPECT_NEAR(sim.breakdown_s.sum(), sim.step_time_s, 1e-12);
}

TEST(StepSimulation, EqualStagesBreakdownIsTheCriticalStage) {
  // Expectation: with equal stages every GPU has the same bubble, and the breakdown stays on the
  // one that finishes last (stage 0 in 1F1B).
  const auto sim = simulate_step(equal_costs(4, 1, 1, 1), pipeline(4, Schedule::OneFOneB), 8, 8);
  ASSERT_TRUE(sim.error.empty()) << sim.error;
  EXPECT_EQ(sim.breakdown_stage, sim.critical_stage);
  EXPECT_EQ(sim.critical_stage, 0);
}

TEST(StepSimulation, ChromeTraceHasOnePidPerGpuAndCompleteEvents) {
  Layout l = pipeline(2, Schedule::OneFOneB);
  l.order = "PDT";
  l.dp = 2;
  const auto sim = simulate_step(equal_costs(2, 1e-3, 1e-3, 1e-3, 1e-4), l, 8, 2);
  const std::string json = chrome_trace_json(sim);
  EXPECT_EQ(json.front(), '{');
  EXPECT_NE(json.find("\"traceEvents\""), std::string::npos);
  EXPECT_NE(json.find("\"ph\":\"X\",\"name\":\"forward mb1\""), std::string::npos);
  // PDT with dp=2: stage 1's GPU is global rank 2.
  EXPECT_NE(json.find("\"pid\":2,\"tid\":0,\"ts\":"), std::string::npos);
  EXPECT_NE(json.find("\"ts\":1000,\"dur\":100"), std::string::npos);  // microseconds
  size_t x = 0, pos = 0;
  while ((pos = json.find("\"ph\":\"X\"", pos)) != std::string::npos) ++x, ++pos;
  EXPECT_EQ(x, sim.timeline.size());
  EXPECT_EQ(std::count(json.begin(), json.end(), '{'), std::count(json.begin(), json.end(), '}'));
  EXPECT_NE(json.find("\"ph\":\"C\",\"name\":\"activations (GiB)\""), std::string::npos);
}

// A comma-decimal locale for this process: de_DE.UTF-8 compiled by localedef (package locales)
// into a scratch folder that LOCPATH points at, so no system-wide locale needs generating.
bool use_comma_locale() {
  const std::string dir = test::scratch_dir("locale").string();
  const std::string cmd = "localedef -i de_DE -f UTF-8 '" + dir + "/de_DE.UTF-8' >/dev/null 2>&1";
  if (std::system(cmd.c_str()) == 0) ::setenv("LOCPATH", dir.c_str(), 1);
  return std::setlocale(LC_ALL, "de_DE.UTF-8") != nullptr;
}

// Expectation: under LC_ALL=de_DE.UTF-8 (decimal comma: printf writes "1,5"), the exported trace
// still parses as JSON and its timestamps read back as the simulated times: with a forward of
// 1.0000126 ms, the forward of micro-batch 1 on stage 0 starts at a time with a fraction of a
// microsecond, written with a '.' (3 decimals) where printf would have written a ','.
TEST(StepSimulation, ChromeTraceParsesUnderACommaDecimalLocale) {
  ASSERT_TRUE(use_comma_locale()) << "no de_DE.UTF-8 locale: localedef (package locales) failed";
  const auto sim = simulate_step(equal_costs(2, 1.0000126e-3, 1e-3, 1e-3, 1e-4), pipeline(2, Schedule::OneFOneB), 8, 2);
  double start_us = -1;
  for (const SimEvent& e : sim.timeline) {
    if (e.kind == SimTaskKind::Forward && e.microbatch == 1 && e.stage == 0) start_us = e.start_s * 1e6;
  }
  ASSERT_GT(start_us, 0);
  ASSERT_NE(std::floor(start_us), start_us);  // a fraction to write
  char comma[32], probe[16];
  std::snprintf(probe, sizeof probe, "%.1f", 1.5);
  std::snprintf(comma, sizeof comma, "%.3f", start_us);  // what printf writes here
  const std::string text = chrome_trace_json(sim);
  std::setlocale(LC_ALL, "C");
  ::unsetenv("LOCPATH");
  EXPECT_STREQ(probe, "1,5");  // the locale was in force
  EXPECT_EQ(text.find(comma), std::string::npos) << comma;
  std::string error;
  const std::optional<Json> trace = json_parse(text, &error);
  ASSERT_TRUE(trace.has_value()) << error << "\n" << text.substr(0, 400);
  const Json* forward = nullptr;
  for (const Json& e : trace->at("traceEvents")) {
    if (e.at("ph") == "X" && e.at("name") == "forward mb1" && e.at("pid") == 0) forward = &e;
  }
  ASSERT_NE(forward, nullptr);
  EXPECT_NEAR(forward->at("ts").get<double>(), start_us, 5e-4);
}

TEST(StepSimulation, BadInputGivesNamedErrorNotCrash) {
  EXPECT_NE(simulate_step(equal_costs(2, 1, 1, 1), pipeline(2, Schedule::OneFOneB), 8, 0)
                .error.find("num_microbatches"), std::string::npos);
  EXPECT_NE(simulate_step(equal_costs(3, 1, 1, 1), pipeline(2, Schedule::OneFOneB), 8, 4)
                .error.find("chunks"), std::string::npos);
  EXPECT_NE(simulate_step(equal_costs(8, 1, 1, 1), pipeline(4, Schedule::Interleaved, 2), 8, 6)
                .error.find("multiple of pp"), std::string::npos);
  Layout bad;
  bad.pp = 0;
  EXPECT_FALSE(simulate_step(equal_costs(1, 1, 1, 1), bad, 8, 4).error.empty());
}

TEST(StepSimulation, PlacementRankRightMostLetterFastest) {
  Layout l;
  l.dp = 2;
  l.pp = 3;
  l.tp = 4;
  EXPECT_EQ(placement_rank("DPT", l, 1, 2, 3), (1 * 3 + 2) * 4 + 3);
  EXPECT_EQ(placement_rank("TPD", l, 1, 2, 3), (3 * 3 + 2) * 2 + 1);
  EXPECT_EQ(placement_rank("PDT", l, 1, 2, 3), (2 * 2 + 1) * 4 + 3);
}

}  // namespace
}  // namespace capplan
