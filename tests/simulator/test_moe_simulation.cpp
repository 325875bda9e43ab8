// Expert all-to-alls and context-ring steps in the step simulation: the all-to-alls on the compute
// stream of their chunk, each ring transfer on the ring stream beside one step's block attention;
// in the timeline, in the breakdown, and sharing the node's NICs with other traffic.
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

// A tiny model on p4d.24xlarge GPUs, `gpus` of them on `nodes` nodes, trained at `gbs`.
Scenario tiny_scenario(int hidden, int seq, int gpus, int nodes, int64_t gbs) {
  ModelSpec m;
  m.name = "tiny";
  m.layers = 4;
  m.hidden = hidden;
  m.heads = 4;
  m.vocab = 1000;
  m.seq_len = seq;
  Scenario sc;
  sc.model = m;
  sc.cluster = *load_cluster("p4d.24xlarge").value;
  sc.gpus = gpus;
  sc.nodes = nodes;
  sc.training.gbs = gbs;
  return sc;
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
  for (const SimEvent& e : sim.timeline) {
    if (e.kind == SimTaskKind::EpAllToAll) {
      EXPECT_EQ(e.stream, SimStream::Compute);
    }
  }
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

// One chunk of one layer with cp 4 (pp 1, one micro-batch): forward 10 s of which 4 steps of
// block attention of t_a each, backward-input 12 s of which 4 steps of t_ab, backward-weight 4 s;
// ring transfers t_x forward and t_xb backward per step.
StepCosts ring_chunk(double t_a, double t_x, double t_ab, double t_xb) {
  StepCosts c = one_chunk(10, 12, 4, 0, 0);
  c.cp = 4;
  c.cp_attention_step_s = t_a;
  c.cp_transfer_s = t_x;
  c.cp_attention_step_backward_s = t_ab;
  c.cp_transfer_backward_s = t_xb;
  return c;
}

std::vector<SimEvent> events_of(const StepSimulation& sim, SimTaskKind k) {
  std::vector<SimEvent> out;
  for (const SimEvent& e : sim.timeline)
    if (e.kind == k) out.push_back(e);
  return out;
}

TEST(MoeSimulation, ContextRingExposesTransferMinusAttentionPerStep) {
  // Expectation (attention shorter than a transfer): forward = 10 - 4 x 1 = 6 s of the rest, then
  // 4 attention steps of 1 s; steps 0-2 each wait for their 3 s transfer, so the forward ends at
  // 6 + 3 x 3 + 1 = 16 s, exposed 3 x (3 - 1) = 6 s. Backward: 12 - 4 x 2 = 4 s, then steps
  // of 2 s behind transfers of 5 s: exposed 3 x (5 - 2) = 9 s, ends at 16 + 4 + 3 x 5 + 2 = 37 s;
  // backward-weight to 41 s. cp_comm = 6 + 9 = 15 s, compute = 26 s, step 41 s. The transfers
  // start with their steps: forward at 6, 9, 12 s.
  Layout l;
  l.cp = 4;
  const StepSimulation sim = simulate_step(ring_chunk(1, 3, 2, 5), l, 8, 1);
  ASSERT_TRUE(sim.error.empty()) << sim.error;
  std::printf("Expectation: step 41 s, cp_comm 15 s, compute 26 s; Actual result: %g s, %g s, %g s\n",
              sim.step_time_s, sim.breakdown_s.cp_comm, sim.breakdown_s.compute);
  EXPECT_NEAR(sim.step_time_s, 41.0, 1e-9);
  EXPECT_NEAR(sim.breakdown_s.cp_comm, 15.0, 1e-9);
  EXPECT_NEAR(sim.breakdown_s.compute, 26.0, 1e-9);
  EXPECT_NEAR(sim.breakdown_s.bubble, 0.0, 1e-9);
  const std::vector<SimEvent> ring = events_of(sim, SimTaskKind::CpRing);
  ASSERT_EQ(ring.size(), 6u);  // cp - 1 = 3 forward, 3 backward
  const double starts[6] = {6, 9, 12, 20, 25, 30};
  const double lengths[6] = {3, 3, 3, 5, 5, 5};
  for (size_t i = 0; i < ring.size(); ++i) {
    EXPECT_EQ(ring[i].stream, SimStream::Ring);
    EXPECT_EQ(ring[i].ring_step, int(i % 3));
    EXPECT_NEAR(ring[i].start_s, starts[i], 1e-9) << i;
    EXPECT_NEAR(ring[i].end_s - ring[i].start_s, lengths[i], 1e-9) << i;
  }
  // Each forward attention step is its own task on the compute stream, 1 s long.
  int steps = 0;
  for (const SimEvent& e : events_of(sim, SimTaskKind::Forward)) {
    if (e.ring_step < 0) continue;
    ++steps;
    EXPECT_NEAR(e.end_s - e.start_s, 1.0, 1e-9);
    EXPECT_EQ(e.stream, SimStream::Compute);
  }
  EXPECT_EQ(steps, 4);
  EXPECT_STREQ(to_string(SimStream::Ring), "cp-ring");
  EXPECT_NE(chrome_trace_json(sim).find("cp-ring mb0 ring 2"), std::string::npos);
}

TEST(MoeSimulation, ContextRingHiddenWhenAttentionOutlastsTheTransfer) {
  // Expectation (attention longer than a transfer: t_a 2 s > t_x 1 s, t_ab 2.5 s > t_xb 2 s):
  // every transfer ends inside its step's attention, nothing is exposed: step = 10 + 12 + 4 =
  // 26 s, cp_comm 0; the 6 transfers still show on the ring stream.
  Layout l;
  l.cp = 4;
  const StepSimulation sim = simulate_step(ring_chunk(2, 1, 2.5, 2), l, 8, 1);
  ASSERT_TRUE(sim.error.empty()) << sim.error;
  std::printf("Expectation: step 26 s, cp_comm 0 s; Actual result: %g s, %g s\n", sim.step_time_s,
              sim.breakdown_s.cp_comm);
  EXPECT_NEAR(sim.step_time_s, 26.0, 1e-9);
  EXPECT_NEAR(sim.breakdown_s.cp_comm, 0.0, 1e-12);
  EXPECT_EQ(events_of(sim, SimTaskKind::CpRing).size(), 6u);
}

TEST(MoeSimulation, ContextRingSharesTheNicWithGradientBuckets) {
  // One GPU per node, dp 2 x cp 2: the ring and the gradients' dp*cp group both leave the node.
  // On the last micro-batch each bucket is reduced while the next backward piece's ring transfer
  // runs, both through the node's NICs: with contention more of the ring is exposed.
  Layout l;
  l.dp = 2;
  l.cp = 2;
  StepCosts c = ring_chunk(0.1, 1, 0.1, 2);
  c.cp = 2;
  // Short backward pieces (0.4 / 4 s input gradients, of which 2 x 0.025 s ring attention; 0.1 / 4
  // s weight gradients), so each 2 s bucket is still running when the next piece's ring starts.
  c.chunks[0].backward_input_s = 0.4;
  c.chunks[0].backward_weight_s = 0.1;
  c.dp_comm_s = 8;
  c.dp_bytes = 1e9;
  c.dp_buckets = 4;
  StepSimulationOptions free_links;
  free_links.contention = false;
  const StepSimulation a = simulate_step(c, l, 1, 1, free_links);
  const StepSimulation b = simulate_step(c, l, 1, 1);
  ASSERT_TRUE(a.error.empty() && b.error.empty()) << a.error << b.error;
  // Without contention: forward (1 - 0.1) = 0.9 s and backward 4 pieces of (2 - 0.1) / 4 exposed.
  std::printf("Expectation: cp_comm 0.9 + 1.9 = 2.8 s without contention, more with; Actual result: %g s, %g s\n",
              a.breakdown_s.cp_comm, b.breakdown_s.cp_comm);
  EXPECT_NEAR(a.breakdown_s.cp_comm, 0.9 + 1.9, 1e-9);
  EXPECT_GT(b.breakdown_s.cp_comm, a.breakdown_s.cp_comm * 1.05);
  EXPECT_GT(b.step_time_s, a.step_time_s);
}

TEST(MoeSimulation, RingStepsCountTowardsTheTaskLimit) {
  // Expectation: 40,000 micro-batches of one chunk are 400,000 tasks without cp, but with cp 64
  // each forward and backward holds 2 x 64 more (10 + 256 = 266 per micro-batch: 10.6 M), over
  // the 10 M limit: refused, naming the ring steps, before anything is built.
  Layout l;
  l.cp = 64;
  StepCosts c = ring_chunk(1, 1, 1, 1);
  c.cp = 64;
  const StepSimulation sim = simulate_step(c, l, 8, 40000);
  std::printf("Expectation: refused over the task limit; Actual result: %s\n", sim.error.c_str());
  EXPECT_NE(sim.error.find("x 266 with cp 64's ring steps"), std::string::npos) << sim.error;
  EXPECT_NE(sim.error.find("over the limit of 10000000 simulated tasks"), std::string::npos) << sim.error;
  c.cp = 1;
  Layout dense;
  EXPECT_TRUE(simulate_step(c, dense, 8, 40000, {true, false, true}).error.empty());
}

TEST(MoeSimulation, ContextRingStepsOnTheTimelineAgreeWithTheEstimate) {
  // A tiny dense model with cp 4 on 4 one-GPU nodes with 1 Gbit/s NICs: the ring's transfers
  // outlast the attention (cost_model_moe.cpp), so cp - 1 = 3 cp-ring steps show in every
  // forward and every backward (the last micro-batch's backward: one ring per gradient-bucket
  // piece), and the exposed part the simulation finds is the estimate's cp_comm (one stage: no
  // pipeline effects).
  Scenario sc = tiny_scenario(64, 32, 4, 4, 4);
  sc.cluster.gpus_per_node = 1;
  sc.cluster.inter_node_gbit_per_s = 1;
  Layout l;
  l.cp = 4;
  ASSERT_EQ(check_layout(sc, l), std::nullopt);
  const Estimate e = estimate(sc, l);
  const StepSimulation sim = simulate_step(sc, l);
  ASSERT_TRUE(sim.error.empty()) << sim.error;
  const StepCosts costs = step_costs(sc, l);
  ASSERT_EQ(costs.cp, 4);
  EXPECT_GT(costs.cp_transfer_s, costs.cp_attention_step_s);
  // 4 micro-batches: 3 forward steps each, 3 per backward piece (1 piece, or one per bucket on
  // the last micro-batch when the framework overlaps the gradient reduction with the backward).
  const int last_pieces = costs.dp_overlap && costs.dp_comm_s > 0 ? std::max(1, costs.dp_buckets) : 1;
  EXPECT_EQ(count(sim, SimTaskKind::CpRing), 4 * 3 + 3 * 3 + 3 * last_pieces);
  for (const SimEvent& e : sim.timeline) {
    if (e.kind == SimTaskKind::CpRing) {
      EXPECT_EQ(e.stream, SimStream::Ring);
    }
  }
  EXPECT_GT(e.breakdown_s.cp_comm, 0.0);
  std::printf("Expectation: simulated = estimated; Actual result: step %g vs %g s, cp_comm %g vs %g s\n",
              sim.step_time_s, e.step_time_s, sim.breakdown_s.cp_comm, e.breakdown_s.cp_comm);
  EXPECT_NEAR(sim.breakdown_s.cp_comm, e.breakdown_s.cp_comm, 1e-9 + 1e-6 * e.breakdown_s.cp_comm);
  EXPECT_NEAR(sim.step_time_s, e.step_time_s, 0.02 * e.step_time_s);
}

TEST(MoeSimulation, PairedAllToAllsOnTheTimelineAgreeWithTheEstimate) {
  // ep_overlap (Megatron-Core's combined 1F1B): the replay blocks each chunk's compute stream for
  // its share of what the stage exposes, so on one stage the simulated ep_comm is the estimate's,
  // and both are below the blocking all-to-alls' (the same layout without it). With pp 2 the
  // replay's fill and drain take the shares too, so the steps agree within the simulator's usual
  // few per cent.
  for (const int pp : {1, 2}) {
    Scenario sc = tiny_scenario(256, 256, 8, 1, 64);
    sc.model.moe.experts = 8;
    sc.model.moe.top_k = 2;
    sc.model.moe.expert_ffn_hidden = 512;
    Layout l;
    l.dp = 8 / pp, l.pp = pp, l.ep = 8 / pp;
    ASSERT_EQ(check_layout(sc, l), std::nullopt);
    const Estimate blocking = estimate(sc, l);
    sc.training.framework.ep_overlap = true;
    const Estimate e = estimate(sc, l);
    const StepSimulation sim = simulate_step(sc, l);
    ASSERT_TRUE(sim.error.empty()) << sim.error;
    std::printf("Expectation pp %d: simulated = estimated, below %g s; Actual result: step %g vs %g s, ep_comm %g vs %g s\n",
                pp, blocking.breakdown_s.ep_comm, sim.step_time_s, e.step_time_s, sim.breakdown_s.ep_comm,
                e.breakdown_s.ep_comm);
    EXPECT_LT(e.breakdown_s.ep_comm, blocking.breakdown_s.ep_comm);
    EXPECT_GT(count(sim, SimTaskKind::EpAllToAll), 0);
    if (pp == 1) EXPECT_NEAR(sim.breakdown_s.ep_comm, e.breakdown_s.ep_comm, 1e-9 + 1e-6 * e.breakdown_s.ep_comm);
    EXPECT_NEAR(sim.step_time_s, e.step_time_s, 0.03 * e.step_time_s);
  }
}

}  // namespace
}  // namespace capplan
