// Runs in the compiled format of published measurements (each run with `hardware:`,
// `parallelism:`, `batch:` and `result:` maps, the free text of the papers beside the numbers:
// shared/validation's calibration files): each is turned into a ValidationRun, every value the
// source leaves open taken by a stated rule and written into the run's `assumptions`.
#pragma once

#include <yaml-cpp/yaml.h>

#include <optional>
#include <string>
#include <vector>

#include "planner/diagnostics.h"
#include "planner/validate.h"

namespace capplan::detail {

// True where a run's map is in the published format (it has `hardware`, `parallelism` or `result`).
bool is_published_run(const YAML::Node& run);

// The run, or nothing with a warning at the run's line naming the key that could not be used (a
// run without the figures a prediction needs is left out of the report, not an error of the file).
// Values of the wrong kind (a text where a number belongs) are errors at their line.
std::optional<ValidationRun> read_published_run(const YAML::Node& run, const std::string& file,
                                                const std::string& prefix, Diagnostics& diags);

// The source families of the published runs that name none: the runs citing the same source are
// one family, named by the dash-separated words their ids begin with (megatron-readme2020-dgxa100-8b
// and megatron-readme2020-dgxa100-1b: "megatron-readme2020-dgxa100"); a source of one run by its
// id up to the first dash.
void name_published_families(std::vector<ValidationRun>& runs);

}  // namespace capplan::detail
