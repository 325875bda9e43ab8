// The plan file (plan.yaml): a scenario and a layout, with the references the user gave (preset
// names or file paths) and provenance. Written by `capplan plan --save`, read by `capplan simulate
// --plan`, `capplan run --plan` and the GUI. Writes are atomic (temp file, fsync, rename).
#pragma once

#include <string>

#include "planner/atomic_file.h"
#include "planner/cost_model.h"
#include "planner/diagnostics.h"

namespace capplan {

struct Plan {
  std::string model_ref;    // preset name or path as given; the spec itself is embedded below
  std::string cluster_ref;
  Scenario scenario;
  Layout layout;
  std::string created_by;   // "capplan 0.1.0 plan"
};

std::string plan_to_yaml(const Plan& plan);
Loaded<Plan> parse_plan_yaml(const std::string& text, const std::string& file);
Loaded<Plan> load_plan(const std::string& path);
// A plan file read as a draft: the values as written even where they break a rule, with every
// diagnostic (an autosave taken while a field held an invalid value). The value is empty only
// when the file cannot be read or is not YAML.
Loaded<Plan> load_plan_draft(const std::string& path);
// Atomic write; returns an error message or empty on success.
std::string save_plan(const Plan& plan, const std::string& path);
// A cluster spec as a cluster file (the keys of configs/clusters/*.yaml, the GPU inline), which
// load_cluster reads back.
std::string cluster_to_yaml(const ClusterSpec& cluster);

}  // namespace capplan
