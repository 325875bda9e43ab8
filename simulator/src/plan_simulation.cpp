// Step simulation of a plan (Scenario + Layout): costs from the planner's step_costs(), and the
// re-ranking of search candidates by simulated step time (capplan plan --refine K), and the
// inputs of a run simulation taken from a plan.
#include <algorithm>
#include <limits>

#include <cmath>

#include "planner/profile.h"
#include "planner/search.h"
#include "simulator/run_simulation.h"
#include "simulator/step_simulation.h"

namespace capplan {
namespace {
constexpr double kInf = std::numeric_limits<double>::infinity();
}  // namespace

StepSimulation simulate_step(const Scenario& scenario, const Layout& layout,
                             const StepSimulationOptions& options) {
  if (auto err = check_layout(scenario, layout)) {
    StepSimulation out;
    out.error = *err;
    return out;
  }
  const StepCosts costs = step_costs(scenario, layout);
  return simulate_step(costs, layout, scenario.cluster.gpus_per_node,
                       layout.num_microbatches(scenario.training.gbs), options);
}

std::vector<double> refine_by_simulation(const Scenario& scenario, std::vector<Estimate>& candidates,
                                         int k, std::vector<std::string>* errors) {
  k = std::clamp(k, 0, int(candidates.size()));
  std::vector<std::pair<double, int>> timed;
  StepSimulationOptions opts;
  opts.record_timeline = false;
  for (int i = 0; i < k; ++i) {
    Scenario sc = scenario;
    sc.training = training_of(scenario.training, candidates[size_t(i)]);  // search_frameworks' candidates
    if (candidates[size_t(i)].nodes > 0) sc.nodes = candidates[size_t(i)].nodes;
    if (candidates[size_t(i)].gpus > 0) sc.gpus = candidates[size_t(i)].gpus;
    const StepSimulation sim = simulate_step(sc, candidates[size_t(i)].layout, opts);
    timed.push_back({sim.error.empty() ? sim.step_time_s : kInf, i});
    if (!sim.error.empty() && errors) errors->push_back(sim.error);
  }
  std::stable_sort(timed.begin(), timed.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<Estimate> reordered;
  std::vector<double> times;
  for (const auto& [t, i] : timed) {
    reordered.push_back(candidates[size_t(i)]);
    times.push_back(t);
  }
  for (int i = k; i < int(candidates.size()); ++i) reordered.push_back(candidates[size_t(i)]);
  candidates.swap(reordered);
  return times;
}

RunInputs run_inputs(const Scenario& scenario, double step_time_s) {
  RunInputs in;
  in.step_time_s = step_time_s;
  const ModelProfile prof = profile_model(scenario.model, 1, scenario.seq_len(), 1,
                                          scenario.training.precision);
  double tokens = scenario.training.tokens;
  if (tokens <= 0) tokens = 20.0 * prof.total_params;  // Hoffmann et al. 2022, as estimate()
  const double tokens_per_step = double(scenario.training.gbs) * scenario.seq_len();
  in.steps = tokens_per_step > 0 ? std::ceil(tokens / tokens_per_step) : 0;
  in.nodes = scenario.nodes > 0 ? scenario.nodes
                                : (scenario.total_gpus() + scenario.cluster.gpus_per_node - 1) /
                                      std::max(1, scenario.cluster.gpus_per_node);
  in.price_per_node_hour_usd = scenario.cluster.price_per_node_hour_usd;
  const double bytes_per_param = scenario.training.precision == Precision::Fp32 ? 16.0 : 14.0;
  in.checkpoint_bytes = bytes_per_param * prof.total_params;
  return in;
}

}  // namespace capplan
