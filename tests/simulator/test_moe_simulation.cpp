// Expert all-to-alls and context-ring transfers in the step simulation: on the compute stream of
// their chunk, in the timeline, in the breakdown, and sharing the node's NICs with other traffic.
#include <gtest/gtest.h>

#include <algorithm>

#include "planner/spec_io.h"
#include "simulator/step_simulation.h"

namespace capplan {
namespace {

StepCosts one_chunk(double f, double bi, double bw, double ep_f, double ep_b) {
  StepCosts c;
  c.chunks.resize(1);
  ChunkCosts& ch = c.chunks[0];
  ch.num_layers = 1;
  ch.has_embedding = ch.has_head = true;
  ch.forward_s = f;
  ch.backward_input_s = bi;
  ch.backward_weight_s = bw;
  ch.ep_comm_forward_s = ep_f;
  ch.ep_comm_backward_s = ep_b;
  ch.activation_bytes = 1e6;
  return c;
}

int count(const StepSimulation& sim, SimTaskKind k) {
  return int(std::count_if(sim.timeline.begin(), sim.timeline.end(),
                           [&](const SimEvent& e) { return e.kind == k; }));
}

TEST(MoeSimulation, AllToAllsRunOnTheComputeStreamOfEachMicrobatch) {
  // Expectation: pp 1, m = 2 micro-batches of forward 2 + all-to-all 1, backward 2 + 2 +
  // all-to-all 1: the step is 2 x 8 = 16 s, of which ep_comm 4 s; 2 forward and 2 backward
  // all-to-all events.
  Layout l;
  l.dp = 2;
  l.ep = 2;
  StepSimulationOptions o;
  o.contention = false;
  const StepSimulation sim = simulate_step(one_chunk(2, 2, 2, 1, 1), l, 8, 2, o);
  ASSERT_TRUE(sim.error.empty()) << sim.error;
  std::printf("Expectation: step 16 s, ep_comm 4 s; Actual result: %g s, %g s\n", sim.step_time_s,
              sim.breakdown_s.ep_comm);
  EXPECT_NEAR(sim.step_time_s, 16.0, 1e-9);
  EXPECT_NEAR(sim.breakdown_s.ep_comm, 4.0, 1e-9);
  EXPECT_EQ(count(sim, SimTaskKind::EpAllToAll), 4);
  for (const SimEvent& e : sim.timeline)
    if (e.kind == SimTaskKind::EpAllToAll) EXPECT_EQ(e.stream, SimStream::Compute);
  EXPECT_STREQ(to_string(SimTaskKind::EpAllToAll), "ep-all-to-all");
  EXPECT_NE(chrome_trace_json(sim).find("ep-all-to-all"), std::string::npos);
}

TEST(MoeSimulation, AllToAllsShareTheNicWithGradientBuckets) {
  // One GPU per node: the expert group and the data-parallel group both leave the node. On the
  // last micro-batch each gradient bucket is reduced while the next backward piece's all-to-all
  // runs, both through the node's NICs: with contention the step is longer than without.
  Layout l;
  l.dp = 2;
  l.ep = 2;
  StepCosts c = one_chunk(1, 1, 1, 0.5, 0.5);
  c.dp_comm_s = 8;
  c.dp_bytes = 1e9;
  c.dp_buckets = 4;
  c.dp_overlap = true;
  StepSimulationOptions free_links;
  free_links.contention = false;
  const StepSimulation a = simulate_step(c, l, 1, 1, free_links);
  const StepSimulation b = simulate_step(c, l, 1, 1);
  ASSERT_TRUE(a.error.empty() && b.error.empty()) << a.error << b.error;
  std::printf("Expectation: contention lengthens the step; Actual result: %g s without, %g s with\n",
              a.step_time_s, b.step_time_s);
  EXPECT_GT(b.step_time_s, a.step_time_s * 1.01);
}

TEST(MoeSimulation, ContextRingStepsOnTheTimelineAgreeWithTheEstimate) {
  // A tiny dense model with cp 4 on 4 one-GPU nodes with 1 Gbit/s NICs: the ring's transfers
  // outlast the attention (cost_model_moe.cpp), so cp-ring tasks show after every forward and
  // backward, and the simulated step matches the estimate (one stage: no pipeline effects).
  ModelSpec m;
  m.name = "tiny";
  m.layers = 4;
  m.hidden = 64;
  m.heads = 4;
  m.vocab = 1000;
  m.seq_len = 32;
  Scenario sc;
  sc.model = m;
  sc.cluster = *load_cluster("p4d.24xlarge").value;
  sc.cluster.gpus_per_node = 1;
  sc.cluster.inter_node_gbit_per_s = 1;
  sc.gpus = 4;
  sc.nodes = 4;
  sc.training.gbs = 4;
  Layout l;
  l.cp = 4;
  ASSERT_EQ(check_layout(sc, l), std::nullopt);
  const Estimate e = estimate(sc, l);
  const StepSimulation sim = simulate_step(sc, l);
  ASSERT_TRUE(sim.error.empty()) << sim.error;
  EXPECT_EQ(count(sim, SimTaskKind::CpRing), 8);  // 4 micro-batches, forward and backward
  EXPECT_GT(e.breakdown_s.cp_comm, 0.0);
  std::printf("Expectation: simulated = estimated; Actual result: step %g vs %g s, cp_comm %g vs %g s\n",
              sim.step_time_s, e.step_time_s, sim.breakdown_s.cp_comm, e.breakdown_s.cp_comm);
  EXPECT_NEAR(sim.breakdown_s.cp_comm, e.breakdown_s.cp_comm, 1e-9 + 1e-6 * e.breakdown_s.cp_comm);
  EXPECT_NEAR(sim.step_time_s, e.step_time_s, 0.02 * e.step_time_s);
}

}  // namespace
}  // namespace capplan
