// `capplan plan`: searches every valid layout for a node count or a range of node counts, ranks
// them by an objective and prints the best ones, the days-vs-dollars Pareto front and the
// breakdown of the best. `--save FILE` writes the best candidate as a plan.yaml.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <sstream>

#include "cli_common.h"
#include "planner/json_writer.h"
#include "planner/plan_io.h"
#include "planner/search.h"
#include "planner/spec_io.h"

namespace capplan::cli {

namespace {

std::vector<FlagSpec> plan_flags() {
  std::vector<FlagSpec> flags = concat(
      scenario_flags(/*node_range=*/true),
      {{"objective", true, "rank by time | cost | throughput (default time)", "O"},
       {"top", true, "candidates to show (default 10)", "K"},
       {"fix", true, "pin knobs, e.g. tp=8,pp=16,recompute=full", "K=V,..."},
       {"threads", true, "search threads (default: all cores)", "N"},
       {"all", false, "also rank layouts that do not fit in memory or the limits", ""},
       {"deadline-days", true, "only layouts that train within D days (with --objective cost: the cheapest that does)", "D"},
       {"budget-usd", true, "only layouts that cost at most $B (with the time objective: the fastest that does)", "B"},
       {"memory-margin", true, "fraction of GPU memory kept free, 0 to 0.5 (default 0.05: 79.0 of 80 GiB does not fit)", "F"},
       {"save", true, "write the best candidate as a plan file", "FILE"},
       json_flag()});
  for (const auto& ext : plan_extensions()) flags = concat(flags, ext.flags);
  return flags;
}

// --save FILE: the best candidate as a plan file; an exit status.
int save_best(const Args& args, const ScenarioArgs& scenario, const SearchResult& result) {
  if (result.candidates.empty()) {
    std::cerr << "capplan plan: no candidate to save\n";
    return kExitFailure;
  }
  Plan plan;
  plan.model_ref = scenario.model_ref;
  plan.cluster_ref = scenario.cluster_ref;
  plan.scenario = scenario.scenario;
  plan.scenario.training = training_of(scenario.scenario.training, result.candidates.front());  // --framework any
  plan.scenario.nodes = result.candidates.front().nodes;
  plan.layout = result.candidates.front().layout;
  plan.created_by = "capplan " CAPPLAN_VERSION " plan";
  const std::string error = save_plan(plan, args.get("save"));
  if (!error.empty()) {
    std::cerr << "capplan plan: " << error << "\n";
    return kExitFailure;
  }
  return kExitOk;
}

// plan --framework any: each preset's best, with its objective against the best of all.
std::string framework_bests_table(const std::vector<FrameworkBest>& bests, Objective objective) {
  std::ostringstream os;
  const bool priced = std::any_of(bests.begin(), bests.end(),
                                  [](const FrameworkBest& f) { return f.best && std::isfinite(f.best->cost_usd); });
  os << "best of each framework (its own attention); x best: its " << objective_measure(objective, priced)
     << " over the best's\n";
  char line[256];
  std::snprintf(line, sizeof line, "  %-17s %-9s %-4s %5s %9s %10s %8s %14s %7s  %s\n", "framework", "attention",
                "fits", "nodes", "step s", "samples/s", "days", "cost", "x best", "layout");
  os << line;
  for (const FrameworkBest& f : bests) {
    if (!f.best) {
      std::snprintf(line, sizeof line, "  %-17s %-9s %-4s %5s %9s %10s %8s %14s %7s  ", f.framework.c_str(), "-", "-",
                    "-", "-", "-", "-", "-", "-");
      os << line << "no layout: " << f.reason << "\n";
      continue;
    }
    const Estimate& e = *f.best;
    const std::string ratio = std::isfinite(f.vs_best) ? fmt_fixed(f.vs_best, 2) : "-";
    std::snprintf(line, sizeof line, "  %-17s %-9s %-4s %5d %9s %10s %8s %14s %7s  %s", f.framework.c_str(),
                  to_string(e.attention), e.fits ? "yes" : "no", e.nodes, fmt_fixed(e.step_time_s, 3).c_str(),
                  fmt_fixed(e.samples_per_s, 2).c_str(), fmt_fixed(e.days_to_train, 1).c_str(),
                  fmt_money(e.cost_usd).c_str(), ratio.c_str(), layout_summary(e.layout).c_str());
    os << line;
    if (!e.fits) os << " (does not fit: " << e.reason << ")";
    // As in the candidates' table: its band overlaps the best one's.
    if (e.fits && e.as_good_as_best && &f != &bests.front()) os << "  ~best";
    os << "\n";
  }
  return os.str();
}

void write_framework_bests_json(JsonWriter& w, const std::vector<FrameworkBest>& bests) {
  w.key("best_per_framework").begin_array();
  for (const FrameworkBest& f : bests) {
    w.begin_object();
    w.field("framework", f.framework);
    w.field("vs_best", f.vs_best);
    if (f.best) {
      w.key("best");
      write_estimate_json(w, *f.best);
    } else {
      w.null("best");
      w.field("reason", f.reason);
    }
    w.end_object();
  }
  w.end_array();
}

std::string result_json(const SearchResult& result, const SearchOptions& options) {
  JsonWriter w;
  w.begin_object();
  w.key("candidates").begin_array();
  for (const Estimate& e : result.candidates) write_estimate_json(w, e);
  w.end_array();
  w.key("pareto").begin_array();
  for (const Estimate& e : result.pareto) write_estimate_json(w, e);
  w.end_array();
  if (!result.per_framework.empty()) write_framework_bests_json(w, result.per_framework);
  w.field("evaluated", result.evaluated);
  w.field("search_time_s", result.search_time_s);
  w.field("cancelled", result.cancelled);
  w.field("objective", to_string(options.objective));
  w.key("limits").begin_object();
  w.field("deadline_days", options.deadline_days);
  w.field("budget_usd", options.budget_usd);
  w.field("memory_margin", options.memory_margin);
  w.end_object();
  w.end_object();
  return w.str();
}

// The ranked candidates, the Pareto front and the best layout, as text.
void print_result(const Args& args, const ScenarioArgs& sc, const SearchResult& result, const SearchOptions& options) {
  const ScenarioArgs* scenario = &sc;
  Scenario shown = scenario->scenario;
  const bool range = scenario->nodes_min != scenario->nodes_max;
  const std::string title =
      range ? shown.model.name + " on " + std::to_string(scenario->nodes_min) + " to " +
                  std::to_string(scenario->nodes_max) + " x " + shown.cluster.name + " (" +
                  shown.cluster.gpu.name + ")"
            : scenario_title(shown);
  std::printf("%s: %lld layouts evaluated in %.3f s, ranked by %s\n", title.c_str(),
              static_cast<long long>(result.evaluated), result.search_time_s,
              to_string(options.objective));
  if (range)
    std::printf("node counts searched: %d to %d\n", scenario->nodes_min, scenario->nodes_max);
  if (options.objective == Objective::Cost && !(shown.cluster.price_per_node_hour_usd > 0))
    std::printf("note: %s has no price, so cost cannot rank; set price_per_node_hour_usd in a "
                "cluster file\n",
                shown.cluster.name.c_str());
  if (const std::string why = shown.attention_fallback(); !why.empty()) std::printf("note: %s\n", why.c_str());
  if (result.candidates.empty() == false && result.candidates.front().tokens_defaulted)
    std::printf("note: --tokens not given; 20 tokens per parameter assumed (%s tokens)\n",
                fmt_si(result.candidates.front().tokens).c_str());
  if (options.deadline_days > 0 || options.budget_usd > 0 || options.memory_margin > 0) {
    std::string limits = "limits:";
    if (options.deadline_days > 0) limits += " train within " + shortest_number(options.deadline_days) + " days;";
    if (options.budget_usd > 0) limits += " cost at most $" + shortest_number(options.budget_usd) + ";";
    limits += " keep " + shortest_number(options.memory_margin * 100) + " % of GPU memory free";
    std::printf("%s\n", limits.c_str());
  }
  if (result.candidates.empty()) {
    if (options.deadline_days > 0 || options.budget_usd > 0)
      std::printf("\nno layout fits in memory within the limits above; try more nodes, a later "
                  "deadline, a larger budget, or --all to see the closest ones with the reason\n");
    else
      std::printf("\nno layout fits in memory; try more nodes, --fix recompute=full, or --all to "
                  "see the closest ones\n");
    // --framework any: each preset's best layout, memory aside, and why it does not fit.
    if (!result.per_framework.empty())
      std::printf("\n%s", framework_bests_table(result.per_framework, options.objective).c_str());
    return;
  }
  std::printf("\n%s", candidates_table(result.candidates).c_str());
  if (!result.per_framework.empty())
    std::printf("\n%s", framework_bests_table(result.per_framework, options.objective).c_str());
  if (result.pareto.size() > 1) {
    std::printf("\nPareto front, days vs dollars (one layout per node count):\n%s",
                candidates_table(result.pareto).c_str());
  }
  const Estimate& best = result.candidates.front();
  shown.nodes = best.nodes;
  if (scenario->nodes_min != scenario->nodes_max) shown.gpus = 0;
  std::printf("\nbest layout:\n%s", estimate_text(shown, best).c_str());
  if (args.has("save")) std::printf("\nsaved the best layout to %s\n", args.get("save").c_str());
}

}  // namespace

int cmd_plan(int argc, char** argv) {
  const std::vector<FlagSpec> flags = plan_flags();
  Diagnostics diags;
  const Args args = parse_args(argc, argv, flags, diags);
  if (args.help()) {
    print_help("plan",
               "--model M --cluster C (--nodes N | --nodes A:B) [--gpus N] --gbs G [--tokens N] "
               "[--objective time|cost|throughput] [--deadline-days D] [--budget-usd B] "
               "[--memory-margin F] [--top K] [--fix tp=8,...] [--save FILE] [--json]",
               flags);
    return kExitOk;
  }
  auto scenario = scenario_from_args(args, diags, /*node_range=*/true);
  SearchOptions options;
  if (args.has("objective")) {
    if (auto o = parse_objective(args.get("objective")))
      options.objective = *o;
    else
      diags.error(kCommandLine, 0, 0, "--objective",
                  "expected time, cost or throughput, found '" + args.get("objective") + "'");
  }
  if (auto k = int_flag(args, "top", diags, 1, 100000)) options.top = int(*k);
  if (auto t = int_flag(args, "threads", diags, 1, 1024)) options.threads = int(*t);
  if (args.has("fix")) {
    if (auto pins = pins_from_text(args.get("fix"), diags)) options.pins = *pins;
  }
  options.include_infeasible = args.has("all");
  if (auto d = number_flag(args, "deadline-days", diags, 0, 1e9)) options.deadline_days = *d;
  if (auto b = number_flag(args, "budget-usd", diags, 0, 1e15)) options.budget_usd = *b;
  if (args.has("memory-margin")) {
    const std::optional<double> f = parse_number(args.get("memory-margin"));
    if (!f || !(*f >= 0 && *f <= 0.5))
      diags.error(kCommandLine, 0, 0, "--memory-margin",
                  "expected a fraction from 0 to 0.5 (0.05 = 5 %), found '" + args.get("memory-margin") + "'");
    else
      options.memory_margin = *f;
  }
  if (scenario && options.budget_usd > 0 && !(scenario->scenario.cluster.price_per_node_hour_usd > 0))
    diags.error(kCommandLine, 0, 0, "--budget-usd",
                scenario->scenario.cluster.name + " has no price, so no budget can be checked; set "
                "price_per_node_hour_usd in a cluster file");
  if (diags.has_errors() || !scenario) return report(diags);
  report(diags);
  options.nodes_min = scenario->nodes_min;
  options.nodes_max = scenario->nodes_max;
  options.gpus = scenario->scenario.gpus;

  const bool any_framework = args.has("framework") && args.get("framework") == "any";
  SearchResult result = any_framework ? search_frameworks(scenario->scenario, options)
                                      : search(scenario->scenario, options);
  if (!result.limit.empty()) {
    diags.error(kCommandLine, 0, 0, "--nodes", result.limit);
    return report(diags);
  }
  if (result.candidates.empty()) {
    if (auto why = pins_unsatisfiable(scenario->scenario, options)) {
      if (args.has("fix"))
        diags.error(kCommandLine, 0, 0, "--fix", "no layout satisfies the pins: " + *why);
      else
        diags.error(kCommandLine, 0, 0, "--nodes", "no valid layout: " + *why);
      return report(diags);
    }
  }
  for (const auto& ext : plan_extensions()) {
    if (!ext.after_search) continue;
    const int status = ext.after_search(args, *scenario, result, diags);
    report(diags);
    if (status != kExitOk) return status;
  }

  if (args.has("save")) {
    if (const int status = save_best(args, *scenario, result); status != kExitOk) return status;
  }

  if (args.has("json")) {
    std::printf("%s\n", result_json(result, options).c_str());
    return kExitOk;
  }

  print_result(args, *scenario, result, options);
  return kExitOk;
}

}  // namespace capplan::cli
