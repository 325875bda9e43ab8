// Pipeline schedules as per-stage action tables (schedule.h). GPipe, 1F1B (PipeDream-Flush) and
// Megatron-LM's interleaved 1F1B; warm-up counts follow Narayanan et al. 2021 Sec 2.2 and
// Megatron-LM's schedules.py. This file only orders work; durations belong to the cost model.
#include "planner/schedule.h"

#include <algorithm>

namespace capplan {
namespace {

// GPipe (Huang et al. 2019): every forward, then every backward, micro-batches in order.
std::vector<PipelineAction> gpipe_stage(int m) {
  std::vector<PipelineAction> out;
  out.reserve(size_t(2) * m);
  for (int i = 0; i < m; ++i) out.push_back({i, 0, Pass::Forward});
  for (int i = 0; i < m; ++i) out.push_back({i, 0, Pass::Backward});
  return out;
}

// 1F1B (Narayanan et al. 2021 Sec 2.2.1): stage s runs min(pp-s-1, m) warm-up forwards, then
// alternates one forward and one backward, then drains the remaining backwards.
int one_f_one_b_warmup(int pp, int stage, int m) { return std::min(pp - stage - 1, m); }

std::vector<PipelineAction> one_f_one_b_stage(int pp, int stage, int m) {
  std::vector<PipelineAction> out;
  out.reserve(size_t(2) * m);
  const int warmup = one_f_one_b_warmup(pp, stage, m);
  for (int i = 0; i < warmup; ++i) out.push_back({i, 0, Pass::Forward});
  int next_b = 0;
  for (int i = warmup; i < m; ++i) {
    out.push_back({i, 0, Pass::Forward});
    out.push_back({next_b++, 0, Pass::Backward});
  }
  while (next_b < m) out.push_back({next_b++, 0, Pass::Backward});
  return out;
}

// Interleaved 1F1B (Narayanan et al. 2021 Sec 2.2.2; Megatron-LM
// forward_backward_pipelining_with_interleaving). The k-th forward of a stage (k over m * vp
// chunk-micro-batches) works on chunk (k mod (pp*vp)) / pp and micro-batch
// (k / (pp*vp)) * pp + k mod pp; the k-th backward walks chunks in reverse. Warm-up is
// (pp - s - 1) * 2 + (vp - 1) * pp, or everything when m == pp.
int interleaved_warmup(int pp, int vp, int stage, int m) {
  const int total = m * vp;
  if (m == pp) return total;
  return std::min((pp - stage - 1) * 2 + (vp - 1) * pp, total);
}

PipelineAction interleaved_action(int k, int pp, int vp, Pass pass) {
  const int group = pp * vp;
  const int in_group = k % group;
  int chunk = in_group / pp;
  if (pass == Pass::Backward) chunk = vp - 1 - chunk;
  const int microbatch = (k / group) * pp + (k % pp);
  return {microbatch, chunk, pass};
}

std::vector<PipelineAction> interleaved_stage(int pp, int vp, int stage, int m) {
  const int total = m * vp;
  std::vector<PipelineAction> out;
  out.reserve(size_t(2) * total);
  const int warmup = interleaved_warmup(pp, vp, stage, m);
  for (int k = 0; k < warmup; ++k) out.push_back(interleaved_action(k, pp, vp, Pass::Forward));
  int next_b = 0;
  for (int k = warmup; k < total; ++k) {
    out.push_back(interleaved_action(k, pp, vp, Pass::Forward));
    out.push_back(interleaved_action(next_b++, pp, vp, Pass::Backward));
  }
  while (next_b < total) out.push_back(interleaved_action(next_b++, pp, vp, Pass::Backward));
  return out;
}

}  // namespace

std::vector<std::vector<PipelineAction>> build_schedule(Schedule schedule, int pp, int vp,
                                                        int num_microbatches) {
  const int m = num_microbatches;
  if (pp < 1 || vp < 1 || m < 1) return {};
  if (schedule == Schedule::Interleaved) {
    if (m % pp != 0) return {};
  } else if (vp != 1) {
    return {};
  }
  std::vector<std::vector<PipelineAction>> table(static_cast<size_t>(pp));
  for (int s = 0; s < pp; ++s) {
    switch (schedule) {
      case Schedule::GPipe: table[size_t(s)] = gpipe_stage(m); break;
      case Schedule::OneFOneB: table[size_t(s)] = one_f_one_b_stage(pp, s, m); break;
      case Schedule::Interleaved: table[size_t(s)] = interleaved_stage(pp, vp, s, m); break;
    }
  }
  return table;
}

// Closed forms of the tables above (checked against them in test_schedule.cpp): a stage holds
// its warm-up forwards plus the one forward that precedes its first backward. For Interleaved
// the count is of (micro-batch, chunk) pairs, each holding 1/vp of the stage's layers; on stage 0
// that is (pp-1)*2 + (vp-1)*pp + 1 = vp*pp + pp - 1 pairs, i.e. pp + (pp-1)/vp micro-batches'
// worth of the whole stage, Korthikanti et al. 2022 Sec 4.2.3's pp * (1 + (pp-1)/(pp*vp)).
int peak_inflight_microbatches(Schedule schedule, int pp, int vp, int num_microbatches,
                               int stage) {
  const int m = num_microbatches;
  if (pp < 1 || vp < 1 || m < 1 || stage < 0 || stage >= pp) return 0;
  switch (schedule) {
    case Schedule::GPipe: return m;
    case Schedule::OneFOneB: return std::min(pp - stage, m);
    case Schedule::Interleaved: {
      const int total = m * vp;
      const int warmup = interleaved_warmup(pp, vp, stage, m);
      return warmup >= total ? total : warmup + 1;
    }
  }
  return 0;
}

}  // namespace capplan
