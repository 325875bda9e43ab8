// Pipeline schedules as tables of actions per stage: GPipe (all forward, then all backward), 1F1B
// (PipeDream-Flush, Narayanan et al. 2021 Sec 2.2.1) and interleaved 1F1B with vp model chunks per
// stage (Sec 2.2.2). Shared by the simulator (timelines) and the runtime (execution order).
#pragma once

#include <string>
#include <vector>

#include "planner/spec.h"

namespace capplan {

enum class Pass { Forward, Backward };

struct PipelineAction {
  int microbatch = 0;
  int chunk = 0;  // model chunk on this stage, 0..vp-1 (global chunk = chunk * pp + stage)
  Pass pass = Pass::Forward;
};

// Per stage (index 0..pp-1), the actions in execution order. Every (microbatch, chunk, pass)
// appears exactly once per stage, each backward after its forward. Interleaved requires
// num_microbatches % pp == 0 (as in Megatron-LM); returns an empty table otherwise.
std::vector<std::vector<PipelineAction>> build_schedule(Schedule schedule, int pp, int vp,
                                                        int num_microbatches);

// Micro-batches whose activations a stage holds at its peak under the schedule (for memory).
// For Interleaved the count is of (micro-batch, chunk) pairs, each holding 1/vp of the stage.
int peak_inflight_microbatches(Schedule schedule, int pp, int vp, int num_microbatches, int stage);

}  // namespace capplan
