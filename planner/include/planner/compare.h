// Plans side by side: a baseline plan and others (another candidate, another cluster, another
// model), each costed with estimate(), and every figure's difference from the baseline: memory per
// GPU by kind, the step time by term, days and dollars. The comparison file (YAML) embeds the plans
// themselves, so it reopens the same without the files they came from. The GUI's Compare view and
// `capplan compare` both call it; it neither searches nor simulates.
#pragma once

#include <string>
#include <vector>

#include "planner/cost_model.h"
#include "planner/diagnostics.h"
#include "planner/plan_io.h"

namespace capplan {

struct ComparisonEntry {
  std::string label;  // what the user calls it ("baseline", "p5.48xlarge", "Llama 2 70B"); not empty
  Plan plan;
};

struct Comparison {
  std::vector<ComparisonEntry> plans;  // plans[0] is the baseline; the deltas are against it
};

// One figure of a plan beside the baseline's.
struct FigureDelta {
  std::string key;    // "memory.total_gib", "time.compute_s", "days", "cost_usd", ... (kComparedFigures)
  std::string label;  // "memory per GPU", "compute", "days", "cost"
  std::string unit;   // "GiB", "s", "days", "USD", "%", "GPUs"
  double baseline = 0;
  double value = 0;
  double delta = 0;     // value - baseline; NaN when either is unknown (an unpriced cluster's cost)
  double relative = 0;  // delta / |baseline|; NaN when the baseline is 0 or unknown
};

struct ComparedPlan {
  std::string label;
  Estimate estimate;                // estimate(plan.scenario, plan.layout)
  std::vector<FigureDelta> figures; // in the order of compared_figure_keys(); all 0 for the baseline
};

struct ComparisonResult {
  std::vector<ComparedPlan> plans;  // one per Comparison::plans entry, the baseline first
};

// The figures compared, in order: memory per GPU (total, weights, gradients, optimizer,
// activations, buffers, in GiB), the step time with its band (p10, p90) and its terms (compute,
// recompute, bubble, tp_comm, pp_comm, dp_comm, optimizer, offload, in seconds), MFU (%), GPUs,
// days and cost (USD), each with its band.
const std::vector<std::string>& compared_figure_keys();

// Costs every plan and its deltas against plans[0]. An empty comparison gives an empty result.
ComparisonResult compare_plans(const Comparison& comparison);

// The comparison file:
//   comparison: 1            # format version
//   plans:                   # the first is the baseline
//     - label: baseline
//       plan: { a plan map, as plan.yaml holds it }
std::string comparison_to_yaml(const Comparison& comparison);
// Every problem of the file in one pass, each naming file, line and the key path
// ("plans[1].plan.layout.tp"); no value unless the whole file is good.
Loaded<Comparison> parse_comparison_yaml(const std::string& text, const std::string& file);
Loaded<Comparison> load_comparison(const std::string& path);
// Atomic write (temporary name, fsync, rename); returns an error message, empty on success.
std::string save_comparison(const Comparison& comparison, const std::string& path);

}  // namespace capplan
