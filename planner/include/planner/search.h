// Exhaustive layout search: every valid (dp, tp, pp, cp, ep, vp, mbs, zero, recompute, offload, sp,
// order, schedule) for a GPU count or a range of node counts, pruned by memory, ranked by an
// objective. ep is searched for MoE models (divisors of the experts inside dp*cp); cp > 1 where
// each rank keeps at least kMinCpTokens of the sequence (or where it is pinned).
// Deterministic, multi-threaded, cancellable. Knows nothing of Qt.
#pragma once

#include <cstdint>
#include <functional>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "planner/cost_model.h"
#include "planner/limits.h"

namespace capplan {

// Time: fewest days to train; Cost: fewest dollars (GPU-days when the price is unknown);
// Throughput: most tokens per GPU-second (the best use of each GPU, whatever the node count).
enum class Objective { Time, Cost, Throughput };
const char* to_string(Objective v);
std::optional<Objective> parse_objective(const std::string& s);

// What the objective minimises, for an estimate, as the search ranks: days to train (time),
// dollars, or GPU-days where the cluster has no price (cost), GPU-seconds per step (throughput:
// at the scenario's global batch, the inverse of samples per GPU-second).
double objective_score(const Estimate& e, Objective objective);
// What that score counts, in words: "days", "dollars" ("GPU-days" where the cluster has no
// price), "GPU-seconds per step".
const char* objective_measure(Objective objective, bool priced);

// Knobs the user pinned (e.g. --fix tp=8,pp=16); unset ones are searched.
struct LayoutPins {
  std::optional<int> dp, tp, pp, vp, mbs, zero;
  std::optional<int> ep, cp;
  std::optional<Recompute> recompute;
  std::optional<bool> offload, sp;
  std::optional<std::string> order;
  std::optional<Schedule> schedule;
};

struct SearchOptions {
  int nodes_min = 0;  // search node counts nodes_min..nodes_max (inclusive)
  int nodes_max = 0;
  int gpus = 0;       // 0 = nodes * gpus_per_node; set only when nodes_min == nodes_max
  Objective objective = Objective::Time;
  int top = 10;       // candidates kept
  LayoutPins pins;
  int threads = 0;    // 0 = hardware concurrency
  bool include_infeasible = false;  // keep non-fitting layouts in the ranking (GUI "show all")
  // Limits beside the objective; a layout over one is ranked as not fitting, with the reason.
  // With the cost objective, deadline_days gives "the cheapest plan that finishes within D days";
  // with the time objective, budget_usd gives "the fastest plan under $B".
  double deadline_days = 0;  // 0 = none; days to train at most this
  double budget_usd = 0;     // 0 = none; dollars at most this (needs the cluster's price)
  // Memory safety margin, a fraction of the GPU's memory kept free: a layout fits only when its
  // memory per GPU is at most (1 - memory_margin) x capacity. 0.05 flags 79.0 of 80 GiB.
  double memory_margin = 0.05;
};

// Why `e` breaks the options' limits (memory margin, deadline, budget), in words; empty when it
// keeps them. `priced`: the cluster has a price (the budget applies only then).
std::string limits_broken(const Estimate& e, const SearchOptions& options, bool priced);

// The best layout one framework preset found (plan --framework any): `best` is its first
// candidate, which does not fit when none does (its `reason` says why); absent when the preset
// has no layout at all on these GPUs, with `reason` saying why (FSDP's dp alone cannot split a
// batch the GPU count does not divide, for one).
struct FrameworkBest {
  std::string framework;
  std::optional<Estimate> best;
  std::string reason;
  // Its objective_score over the best fitting preset's (1 for that one); NaN where it has no
  // fitting layout. Set by merge_framework_bests.
  double vs_best = std::numeric_limits<double>::quiet_NaN();
};

struct SearchResult {
  std::vector<Estimate> candidates;  // best first, by objective, ties broken by a stable key
  std::vector<Estimate> pareto;      // best layout per node count on the days-vs-dollars front
  int64_t evaluated = 0;             // layouts whose cost was evaluated (memory, and time when
                                     // it fits; orders of a layout that does not fit are skipped)
  double search_time_s = 0;
  bool cancelled = false;            // candidates then hold the best found so far
  // Non-empty: the search went over one of ResourceLimits (limits.h) and stopped (or did not
  // start); says which limit and by how much. Candidates hold the best found before it stopped.
  std::string limit;
  // search_frameworks only: each preset's own best layout, ranked by the objective (see there).
  std::vector<FrameworkBest> per_framework;
};

// progress(done, total) is called from worker threads (one call at a time) after each work unit,
// a (node count, tp, pp) combination; return false to cancel.
using SearchProgress = std::function<bool(int64_t done, int64_t total)>;

// Context parallelism below this many tokens per rank is not searched (pin cp to cost it): its
// ring transfers stop hiding behind the attention of short blocks, and Megatron-Core's guidance
// is CP for sequences of 8K and more (2 ranks of 4K).
constexpr int kMinCpTokens = 4096;

SearchResult search(const Scenario& scenario, const SearchOptions& options,
                    const SearchProgress& progress = {});

// `plan --framework any`: the search once per framework preset (configs/frameworks/, each with
// its own default attention), the candidates ranked together by the objective and the Pareto
// front taken over all of them. Each candidate's `framework` names its preset. `per_framework`
// holds every preset's own best, fitting ones first by the objective, then those where none fits
// (their best by the objective, memory aside, with the reason), then the presets with no layout; so a preset the top candidates crowd out is still
// answered for ("how much slower is FSDP here?").
SearchResult search_frameworks(const Scenario& scenario, const SearchOptions& options,
                               const SearchProgress& progress = {});

// Adds `part`'s presets to `into`, keeping each preset's better best (one that fits, then the
// objective), ranks them as search_frameworks does, and sets each one's vs_best and its best's
// as_good_as_best against the first (its band overlapping the best one's): the GUI searches a
// node range one count at a time and merges.
void merge_framework_bests(std::vector<FrameworkBest>& into, const std::vector<FrameworkBest>& part,
                           Objective objective);

// The training a candidate was costed with: `asked`, or, for a candidate of another framework
// (search_frameworks), that framework's preset and the attention the candidate took. What a
// plan saved, simulated, exported or run from the candidate must carry.
TrainingSpec training_of(const TrainingSpec& asked, const Estimate& candidate);

// When the pins rule out every layout, feasible in memory or not (tp not dividing the GPU count
// or the heads, pp over the layers, ...), the reason in words; nullopt when some layout
// satisfies them. Without pins, the reason no layout exists at all (more GPUs than the batch,
// heads and layers can use, or no product of allowed degrees equal to the GPU count). Runs a
// search of the pinned layouts, so call it when a search found nothing.
std::optional<std::string> pins_unsatisfiable(const Scenario& scenario, const SearchOptions& options);
// Its reason, for a search already known to have no layout at all, fitting or not (without
// running that search again).
std::string no_layout_reason(const Scenario& scenario, const SearchOptions& options);

}  // namespace capplan
