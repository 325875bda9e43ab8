// Shared pieces of the capplan commands: flag parsing with every error listed at once, building
// a Scenario and a Layout from the common flags, printing diagnostics, and the JSON and table
// forms of an Estimate. A command is `int cmd_<name>(int argc, char** argv)` with argv[0] the
// command name; it returns 0 on success, 2 on bad input or an invalid layout, 1 otherwise.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "planner/format.h"
#include <vector>

#include "planner/json_writer.h"
#include "planner/cost_model.h"
#include "planner/diagnostics.h"
#include "planner/flags.h"
#include "planner/search.h"

namespace capplan::cli {

inline constexpr int kExitOk = 0;
inline constexpr int kExitFailure = 1;
inline constexpr int kExitBadInput = 2;

// The flag parser (FlagSpec, Args, parse_args, int_flag, number_flag, require_flag) is
// planner/flags.h's, shared with capplan-train.

// --model --cluster --nodes --gpus --gbs --seq --tokens --precision
std::vector<FlagSpec> scenario_flags(bool node_range = false);
// --dp --tp --pp --vp --mbs --zero --recompute --offload --sp --order --schedule
std::vector<FlagSpec> layout_flags();
// --json
FlagSpec json_flag();
std::vector<FlagSpec> concat(std::vector<FlagSpec> a, const std::vector<FlagSpec>& b);

struct ScenarioArgs {
  Scenario scenario;        // nodes = nodes_min when a range is given
  int nodes_min = 0;
  int nodes_max = 0;
  std::string model_ref;    // as given on the command line
  std::string cluster_ref;
  bool cluster_loaded = false;  // --cluster named a cluster that loaded
};

// Loads --model and --cluster (preset or file) and reads the scenario flags. With
// `node_range`, --nodes accepts "A:B". --gbs is required unless `gbs_required` is false.
// With profile_of_cluster, --device-profile must come from the cluster's GPU and is attached to it;
// without (capplan run: it describes this machine), it is left to device_profile_flag().
std::optional<ScenarioArgs> scenario_from_args(const Args& args, Diagnostics& diags,
                                               bool node_range = false,
                                               bool gbs_required = true, bool profile_of_cluster = true);
// The profile --device-profile names, loaded (errors into diags); null when the flag is absent.
std::shared_ptr<const DeviceProfile> device_profile_flag(const Args& args, Diagnostics& diags);
// Reads the layout flags (--dp, --tp, --pp required; the rest default as in spec.h).
std::optional<Layout> layout_from_args(const Args& args, Diagnostics& diags);
// --plan FILE: a plan file (plan_io.h) or an embedded plan name ("default").
FlagSpec plan_file_flag();
struct ScenarioAndLayout {
  ScenarioArgs scenario;
  Layout layout;
};
// The scenario and layout of `--plan FILE`, or of the scenario and layout flags (not both: a
// flag given with --plan is an error naming it).
std::optional<ScenarioAndLayout> scenario_and_layout_from_args(const Args& args,
                                                               Diagnostics& diags);
// --fix tp=8,pp=16,recompute=full,... for plan.
std::optional<LayoutPins> pins_from_text(const std::string& text, Diagnostics& diags);

// Prints diagnostics to stderr as file:line:col: error: ...; returns kExitBadInput when any is
// an error, else kExitOk.
int report(const Diagnostics& diags);
// Prints "usage: capplan <command> <synopsis>" and the flags with their help to stdout.
void print_help(const std::string& command, const std::string& synopsis,
                const std::vector<FlagSpec>& flags);

// The JSON object of one estimate, with the fields README "JSON output" lists.
void write_estimate_json(JsonWriter& w, const Estimate& e);
std::string estimate_json(const Estimate& e);

// Human-readable: a one-line layout, the memory and time breakdowns, throughput, days, cost.
std::string estimate_text(const Scenario& scenario, const Estimate& e);
// The ranked candidates, one row each.
std::string candidates_table(const std::vector<Estimate>& candidates);
// "GPT-3 175B on 120 x p4d.24xlarge (960 x A100-SXM4-40GB)"
std::string scenario_title(const Scenario& scenario);


// Extension point of `capplan plan`: another command file can add flags and a step that runs
// after the search, before output (e.g. re-ranking the top candidates by simulation). Register
// from a static initialiser; `after_search` returns an exit status, kExitOk to go on.
struct PlanExtension {
  std::vector<FlagSpec> flags;
  std::function<int(const Args& args, const ScenarioArgs& scenario, SearchResult& result,
                    Diagnostics& diags)>
      after_search;
};
void register_plan_extension(PlanExtension extension);
const std::vector<PlanExtension>& plan_extensions();

}  // namespace capplan::cli
