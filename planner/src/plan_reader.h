// Private: reading one plan out of a YAML map, for plan.yaml itself and for the files that embed
// plans (a comparison). Not a public header: yaml-cpp stays private to the planner library.
#pragma once

#include <yaml-cpp/yaml.h>

#include <optional>
#include <string>

#include "planner/diagnostics.h"
#include "planner/plan_io.h"

namespace capplan::detail {

// `prefix` goes before every key path in the diagnostics ("plans[1].plan." -> "plans[1].plan.layout.tp").
// Without `keep_invalid`, nullopt when the map holds an error; with it, the values as written.
std::optional<Plan> read_plan_map(const YAML::Node& map, const std::string& file,
                                  const std::string& prefix, bool keep_invalid, Diagnostics& d);

}  // namespace capplan::detail
