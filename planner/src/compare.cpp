// Plans side by side: costing each plan of a comparison, the deltas against the baseline, and the
// comparison file (plans embedded, read with every diagnostic in one pass, written atomically).
#include "planner/compare.h"

#include <cmath>
#include <sstream>

#include "plan_reader.h"
#include "yaml_reader.h"

namespace capplan {
namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

struct Figure {
  const char* key;
  const char* label;
  const char* unit;
  double (*of)(const Estimate&);
};

// The cost is NaN for a cluster without a price: its delta is then unknown, not 0.
const Figure kFigures[] = {
    {"memory.total_gib", "memory per GPU", "GiB", [](const Estimate& e) { return e.memory_per_gpu_bytes.total / kGiB; }},
    {"memory.weights_gib", "weights", "GiB", [](const Estimate& e) { return e.memory_per_gpu_bytes.weights / kGiB; }},
    {"memory.gradients_gib", "gradients", "GiB", [](const Estimate& e) { return e.memory_per_gpu_bytes.gradients / kGiB; }},
    {"memory.optimizer_gib", "optimizer state", "GiB", [](const Estimate& e) { return e.memory_per_gpu_bytes.optimizer / kGiB; }},
    {"memory.activations_gib", "activations", "GiB", [](const Estimate& e) { return e.memory_per_gpu_bytes.activations / kGiB; }},
    {"memory.buffers_gib", "buffers", "GiB", [](const Estimate& e) { return e.memory_per_gpu_bytes.buffers / kGiB; }},
    {"time.step_s", "step time", "s", [](const Estimate& e) { return e.step_time_s; }},
    // The band from the model's error (p10 the faster end), as estimate() gives it.
    {"time.step_s_p10", "step time p10", "s", [](const Estimate& e) { return e.step_time_s_p10; }},
    {"time.step_s_p90", "step time p90", "s", [](const Estimate& e) { return e.step_time_s_p90; }},
    {"time.compute_s", "compute", "s", [](const Estimate& e) { return e.breakdown_s.compute; }},
    {"time.recompute_s", "recompute", "s", [](const Estimate& e) { return e.breakdown_s.recompute; }},
    {"time.bubble_s", "pipeline bubble", "s", [](const Estimate& e) { return e.breakdown_s.bubble; }},
    {"time.tp_comm_s", "tp communication", "s", [](const Estimate& e) { return e.breakdown_s.tp_comm; }},
    {"time.pp_comm_s", "pp communication", "s", [](const Estimate& e) { return e.breakdown_s.pp_comm; }},
    {"time.dp_comm_s", "dp communication", "s", [](const Estimate& e) { return e.breakdown_s.dp_comm; }},
    {"time.optimizer_s", "optimizer step", "s", [](const Estimate& e) { return e.breakdown_s.optimizer; }},
    {"time.offload_s", "offload", "s", [](const Estimate& e) { return e.breakdown_s.offload; }},
    {"mfu_percent", "MFU", "%", [](const Estimate& e) { return e.mfu * 100.0; }},
    {"gpus", "GPUs", "GPUs", [](const Estimate& e) { return double(e.gpus); }},
    {"days", "days to train", "days", [](const Estimate& e) { return e.days_to_train; }},
    {"days_p10", "days p10", "days", [](const Estimate& e) { return e.days_to_train_p10; }},
    {"days_p90", "days p90", "days", [](const Estimate& e) { return e.days_to_train_p90; }},
    {"cost_usd", "cost", "USD", [](const Estimate& e) { return e.cost_usd; }},
    {"cost_usd_p10", "cost p10", "USD", [](const Estimate& e) { return e.cost_usd_p10; }},
    {"cost_usd_p90", "cost p90", "USD", [](const Estimate& e) { return e.cost_usd_p90; }},
};

std::string indented(const std::string& text, const std::string& pad) {
  std::ostringstream os;
  std::istringstream is(text);
  for (std::string line; std::getline(is, line);) os << (line.empty() ? "" : pad) << line << "\n";
  return os.str();
}

}  // namespace

const std::vector<std::string>& compared_figure_keys() {
  static const std::vector<std::string> keys = [] {
    std::vector<std::string> k;
    for (const Figure& f : kFigures) k.emplace_back(f.key);
    return k;
  }();
  return keys;
}

ComparisonResult compare_plans(const Comparison& comparison) {
  ComparisonResult out;
  if (comparison.plans.empty()) return out;
  for (const ComparisonEntry& entry : comparison.plans) {
    ComparedPlan p;
    p.label = entry.label;
    p.estimate = estimate(entry.plan.scenario, entry.plan.layout);
    out.plans.push_back(std::move(p));
  }
  const Estimate& base = out.plans.front().estimate;
  for (ComparedPlan& p : out.plans) {
    for (const Figure& f : kFigures) {
      FigureDelta d;
      d.key = f.key;
      d.label = f.label;
      d.unit = f.unit;
      d.baseline = f.of(base);
      d.value = f.of(p.estimate);
      const bool known = std::isfinite(d.baseline) && std::isfinite(d.value);
      d.delta = known ? d.value - d.baseline : NAN;
      d.relative = known && d.baseline != 0 ? d.delta / std::abs(d.baseline) : NAN;
      p.figures.push_back(d);
    }
  }
  return out;
}

std::string comparison_to_yaml(const Comparison& comparison) {
  std::ostringstream os;
  os << "# capplan comparison: " << comparison.plans.size() << " plans, the first is the baseline\n";
  os << "comparison: 1\n";
  os << "plans:\n";
  for (const ComparisonEntry& e : comparison.plans) {
    os << "  - label: " << detail::yaml_quote(e.label) << "\n";
    os << "    plan:\n" << indented(plan_to_yaml(e.plan), "      ");
  }
  return os.str();
}

Loaded<Comparison> parse_comparison_yaml(const std::string& text, const std::string& file) {
  Loaded<Comparison> out;
  Diagnostics& d = out.diagnostics;
  YAML::Node root;
  if (!detail::parse_yaml_text(text, file, root, d)) return out;
  if (!root.IsMap()) {
    const detail::Position p = detail::position_of(root);
    d.error(file, p.line ? p.line : 1, p.column ? p.column : 1, "",
            "expected a comparison (a map with comparison: 1 and plans)");
    return out;
  }
  Comparison c;
  detail::MapReader r(root, file, "", d);
  int version = 0;
  r.integer("comparison", version, true, detail::Limits{0, true, 1});
  const YAML::Node plans = r.child("plans");
  if (!plans.IsDefined()) {
    r.missing("plans", "a list of {label, plan}, the baseline first");
  } else if (!plans.IsSequence() || plans.size() == 0) {
    r.error_at(plans, "plans", "expected a non-empty list of {label, plan}, the baseline first");
  } else {
    for (size_t i = 0; i < plans.size(); ++i) {
      const std::string prefix = "plans[" + std::to_string(i) + "].";
      const YAML::Node item = plans[i];
      if (!item.IsMap()) {
        const detail::Position p = detail::position_of(item);
        d.error(file, p.line, p.column, prefix.substr(0, prefix.size() - 1),
                "expected a map with label and plan");
        continue;
      }
      ComparisonEntry e;
      detail::MapReader ir(item, file, prefix, d);
      if (ir.text("label", e.label, true) && e.label.empty())
        ir.error_at(ir.child("label"), "label", "must not be empty");
      const YAML::Node plan = ir.child("plan");
      if (!plan.IsDefined()) {
        ir.missing("plan", "a plan map, as plan.yaml holds it");
      } else if (auto p = detail::read_plan_map(plan, file, prefix + "plan.", false, d)) {
        e.plan = *p;
      }
      ir.finish();
      c.plans.push_back(std::move(e));
    }
  }
  r.finish();
  if (!d.has_errors()) out.value = std::move(c);
  return out;
}

Loaded<Comparison> load_comparison(const std::string& path) {
  std::string text, error;
  if (!detail::read_text_file(path, text, error)) {
    Loaded<Comparison> out;
    out.diagnostics.error(path, 0, 0, "", error);
    return out;
  }
  return parse_comparison_yaml(text, path);
}

std::string save_comparison(const Comparison& comparison, const std::string& path) {
  return write_file_atomic(path, comparison_to_yaml(comparison));
}

}  // namespace capplan
