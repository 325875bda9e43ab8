// Discrete-event simulation of one training step of a plan: one representative data-parallel
// replica's pipeline in detail (one GPU per stage: dp rank 0, tp rank 0; the other TP ranks of a
// stage do the same work at the same time), with each GPU's streams and the links its transfers
// cross (each node's NICs, each GPU's NVLink port) shared fairly between concurrent transfers, so
// contention between stages placed on one node shows. Durations come from capplan::step_costs()
// (planner/cost_model.h); this module adds ordering, overlap and contention, not a second cost model.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "planner/cost_model.h"

namespace capplan {

// Streams of a simulated GPU (Chrome trace tid).
// Ring: the context ring's K/V transfers, each beside one step's block attention on Compute.
enum class SimStream { Compute = 0, Comm = 1, SendNext = 2, SendPrev = 3, Pcie = 4, Gather = 5, Ring = 6 };
constexpr int kSimStreams = 7;

enum class SimTaskKind {
  Forward,
  Recompute,
  BackwardInput,   // input-gradient GEMMs and memory-bound backward work
  BackwardWeight,  // weight-gradient GEMMs
  TpComm,          // TP collectives of a chunk, aggregated (blocking, on the compute stream)
  SendForward,     // activation to the next stage
  SendBackward,    // activation gradient to the previous stage
  DpComm,          // a gradient bucket's all-reduce (ZeRO-3: a chunk's reduce-scatter)
  ZeroAllGather,   // ZeRO-3: weights all-gathered before a chunk's forward or backward
  Optimizer,
  Offload,         // activations device -> host over PCIe
  Reload,          // host -> device before backward
  EpAllToAll,      // expert dispatch + combine all-to-alls of a chunk's MoE layers (blocking)
  CpRing,          // one step of the context ring: the K/V block to the next cp rank (Ring stream)
  EmbeddingSync,   // the tied embedding's gradient summed between the first and last stage (blocking)
};
const char* to_string(SimStream s);
const char* to_string(SimTaskKind k);

struct SimEvent {
  int stage = 0;
  int rank = 0;            // global rank of the simulated GPU (dp 0, tp 0 of the stage)
  SimStream stream = SimStream::Compute;
  SimTaskKind kind = SimTaskKind::Forward;
  int microbatch = -1;     // -1 when not about one micro-batch
  int chunk = -1;          // global model chunk (chunk * pp + stage), -1 when none
  int bucket = -1;         // DP bucket, -1 when none
  // Context ring: the step (0 .. cp - 1) of a block-attention compute task, or the step a
  // transfer runs beside (0 .. cp - 2, bringing the block of step + 1); -1 when none.
  int ring_step = -1;
  double start_s = 0;
  double end_s = 0;
};

struct StepSimulationOptions {
  bool contention = true;       // false: every transfer takes its step_costs() duration
  bool record_timeline = true;  // false: only the summary figures (faster, for --refine)
  bool blocking_p2p = true;     // the sender's next compute waits for its send (Megatron-LM)
};

struct StepSimulation {
  double step_time_s = 0;
  // Same terms as Estimate::breakdown_s, on the pacing GPU (breakdown_stage); they sum to
  // step_time_s, its idle time to the end of the step counted as bubble.
  TimeBreakdown breakdown_s;
  double bubble_fraction = 0;   // breakdown_s.bubble / step_time_s
  int critical_stage = 0;       // the stage whose GPU finishes last
  // The stage that sets the pace, as the estimate's breakdown (planner/src/cost_model.cpp): the
  // least bubble, that is the most work of its own (compute, recompute, TP collectives,
  // optimizer, the transfers it waits for); among equals, the one that finishes last. On equal
  // stages it is critical_stage; on uneven ones (pp not dividing the layers) a heavy stage, not
  // the light one that waits for it.
  int breakdown_stage = 0;
  std::vector<int> stage_rank;  // global rank of each simulated GPU
  std::vector<int> stage_node;  // its node
  std::vector<double> busy_fraction_per_gpu;  // compute-stream occupancy / step time, per stage
  std::vector<double> peak_activation_bytes_per_stage;
  // Per stage, activation bytes on the GPU over time: (time_s, bytes) at every change.
  std::vector<std::vector<std::pair<double, double>>> activation_bytes_over_time;
  std::vector<SimEvent> timeline;  // every task with non-zero duration, by start time
  int64_t num_events = 0;          // tasks simulated (including zero-length ones)
  std::string error;               // non-empty when the inputs could not be simulated
};

// Global rank of (d, p, t) under a placement order: the right-most letter varies fastest.
int placement_rank(const std::string& order, const Layout& layout, int d, int p, int t);

// Simulates one step from explicit per-task costs (tests use hand-written ones).
// gpus_per_node places ranks on nodes; num_microbatches is gbs / (dp * mbs).
StepSimulation simulate_step(const StepCosts& costs, const Layout& layout, int gpus_per_node,
                             int64_t num_microbatches, const StepSimulationOptions& options = {});

// Simulates one step of a plan with the costs from step_costs(scenario, layout).
StepSimulation simulate_step(const Scenario& scenario, const Layout& layout,
                             const StepSimulationOptions& options = {});

// The timeline in the Chrome trace-event format (Perfetto, chrome://tracing): one pid per GPU,
// one tid per stream, complete events ("ph": "X") named by kind and micro-batch, in microseconds.
std::string chrome_trace_json(const StepSimulation& sim);

// Re-ranks candidates by simulated step time (capplan plan --refine K): the first k are
// simulated and sorted by it, the rest keep their order after them. Returns the simulated times
// of the first k, in the new order. A candidate that cannot be simulated (over the task limit)
// gets an infinite time and its reason in `errors` (one per refused candidate, when given).
std::vector<double> refine_by_simulation(const Scenario& scenario, std::vector<Estimate>& candidates,
                                         int k, std::vector<std::string>* errors = nullptr);

}  // namespace capplan
