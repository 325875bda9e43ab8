// `capplan simulate`: discrete-event simulation of one training step of a layout (the flags of
// `capplan estimate`, or --plan plan.yaml), with --trace for a Chrome/Perfetto timeline and --run
// for a Monte-Carlo of the whole run with failures. Also adds `--refine K` to `capplan plan`.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>

#include "cli_common.h"
#include "planner/limits.h"
#include "planner/plan_io.h"
#include "simulator/run_simulation.h"
#include "simulator/step_simulation.h"

namespace capplan::cli {
namespace {

std::vector<FlagSpec> simulate_flags() {
  return {
      {"trace", true, "write the step timeline as Chrome trace-event JSON (Perfetto)", "FILE"},
      {"no-contention", false, "every transfer takes its cost-model time (no link sharing)", ""},
      {"run", false, "also simulate the whole run with failures, checkpoints and restarts", ""},
      {"node-mtbf-hours", true, "node mean time between failures (default 6335, Llama 3)", "H"},
      {"checkpoint-interval-min", true, "minutes between checkpoints (default: Young/Daly)", "M"},
      {"restart-min", true, "minutes to re-queue, replace a node and reload (default 20)", "R"},
      {"storage-gbyte-per-s", true, "aggregate checkpoint write bandwidth (default 10)", "B"},
      {"spot-interruptions-per-day", true, "spot reclaims of the job per day (default 0)", "X"},
      {"trials", true, "Monte-Carlo runs (default 1000)", "N"},
      {"seed", true, "random seed (default 1)", "S"},
  };
}

void write_breakdown(JsonWriter& w, const TimeBreakdown& b) {
  w.begin_object();
  w.field("compute", b.compute).field("recompute", b.recompute).field("bubble", b.bubble);
  w.field("tp_comm", b.tp_comm).field("pp_comm", b.pp_comm).field("dp_comm", b.dp_comm);
  w.field("optimizer", b.optimizer).field("offload", b.offload);
  w.field("ep_comm", b.ep_comm).field("cp_comm", b.cp_comm);
  w.end_object();
}

void write_run_json(JsonWriter& w, const RunSimulation& r, const RunOptions& o) {
  w.begin_object();
  w.field("trials", o.trials).field("seed", int64_t(o.seed));
  w.field("node_mtbf_hours", o.node_mtbf_hours).field("job_mtbf_hours", r.job_mtbf_hours);
  w.field("restart_min", o.restart_min).field("checkpoint_write_s", r.checkpoint_write_s);
  w.field("checkpoint_interval_min", r.checkpoint_interval_min);
  w.field("young_daly_interval_min", r.young_daly_interval_min);
  w.field("best_interval_min", r.best_interval_min);
  w.field("best_interval_mean_days", r.best_interval_mean_days);
  w.field("failure_free_days", r.failure_free_days);
  w.field("mean_days", r.mean_days).field("median_days", r.median_days);
  w.field("p10_days", r.p10_days).field("p90_days", r.p90_days);
  w.field("mean_cost_usd", r.mean_cost_usd).field("median_cost_usd", r.median_cost_usd);
  w.field("p10_cost_usd", r.p10_cost_usd).field("p90_cost_usd", r.p90_cost_usd);
  w.field("mean_failures", r.mean_failures).field("mean_lost_work_hours", r.mean_lost_work_hours);
  w.field("mean_restart_hours", r.mean_restart_hours);
  w.field("mean_checkpoint_hours", r.mean_checkpoint_hours);
  w.field("sweep_points_skipped", r.sweep_points_skipped);
  w.key("interval_sweep").begin_array();
  for (const auto& [interval, days] : r.interval_sweep) {
    w.begin_object().field("interval_min", interval).field("mean_days", days).end_object();
  }
  w.end_array();
  w.end_object();
}

std::string pct(double v) { return fmt_fixed(100 * v, 1) + " %"; }

// The run simulation's flags; a warning when they are given without --run.
RunOptions run_options_from_args(const Args& args, Diagnostics& diags) {
  RunOptions run_opts;
  if (auto v = number_flag(args, "node-mtbf-hours", diags, 0, 1e12)) run_opts.node_mtbf_hours = *v;
  if (auto v = number_flag(args, "checkpoint-interval-min", diags, 0, 1e9)) run_opts.checkpoint_interval_min = *v;
  if (args.has("restart-min")) {
    if (auto v = number_flag(args, "restart-min", diags, -1e-300, 1e9)) run_opts.restart_min = *v;
  }
  if (auto v = number_flag(args, "storage-gbyte-per-s", diags, 0, 1e9)) run_opts.storage_gbyte_per_s = *v;
  if (args.has("spot-interruptions-per-day")) {
    if (auto v = number_flag(args, "spot-interruptions-per-day", diags, -1e-300, 1e6))
      run_opts.spot_interruptions_per_day = *v;
  }
  if (auto v = int_flag(args, "trials", diags, 1, 10000000)) run_opts.trials = int(*v);
  if (auto v = int_flag(args, "seed", diags, 0, INT64_MAX)) run_opts.seed = uint64_t(*v);
  const bool run_flags_given = args.has("node-mtbf-hours") || args.has("checkpoint-interval-min") ||
                               args.has("restart-min") || args.has("trials") || args.has("seed") ||
                               args.has("storage-gbyte-per-s") || args.has("spot-interruptions-per-day");
  if (run_flags_given && !args.has("run")) {
    diags.warning(kCommandLine, 0, 0, "--run", "run options given without --run; they are ignored");
  }
  return run_opts;
}

std::string simulation_json(const Scenario& scenario, const Layout& layout, const StepSimulation& sim,
                            const StepSimulationOptions& opts, const Estimate& est, const RunSimulation* run,
                            const RunOptions& run_opts) {
  const int64_t m = layout.num_microbatches(scenario.training.gbs);
  JsonWriter w;
  w.begin_object();
  w.key("layout").begin_object();
  w.field("dp", layout.dp).field("tp", layout.tp).field("pp", layout.pp).field("cp", layout.cp);
  w.field("ep", layout.ep).field("vp", layout.vp);
  w.field("mbs", layout.mbs).field("num_microbatches", m).field("zero", layout.zero);
  w.field("recompute", to_string(layout.recompute)).field("offload", layout.offload);
  w.field("sp", layout.sp).field("order", layout.order).field("schedule", to_string(layout.schedule));
  w.end_object();
  w.field("contention", opts.contention);
  w.field("step_time_s", sim.step_time_s);
  w.key("breakdown_s");
  write_breakdown(w, sim.breakdown_s);
  w.field("bubble_fraction", sim.bubble_fraction);
  w.field("critical_stage", sim.critical_stage);
  w.field("breakdown_stage", sim.breakdown_stage);
  w.key("stage_rank").begin_array();
  for (int r : sim.stage_rank) w.value(r);
  w.end_array();
  w.key("busy_fraction_per_gpu").begin_array();
  for (double b : sim.busy_fraction_per_gpu) w.value(b);
  w.end_array();
  w.key("peak_activation_bytes_per_stage").begin_array();
  for (double b : sim.peak_activation_bytes_per_stage) w.value(b);
  w.end_array();
  w.key("activation_bytes_over_time_per_stage").begin_array();
  for (const auto& series : sim.activation_bytes_over_time) {
    w.begin_array();
    for (const auto& [t, bytes] : series) w.begin_array().value(t).value(bytes).end_array();
    w.end_array();
  }
  w.end_array();
  w.field("events", sim.num_events);
  w.key("estimate").begin_object();
  w.field("fits", est.fits).field("reason", est.reason);
  w.field("memory_per_gpu_bytes_total", est.memory_per_gpu_bytes.total);
  w.field("memory_capacity_bytes", est.memory_per_gpu_bytes.capacity);
  w.field("step_time_s", est.step_time_s);
  w.key("breakdown_s");
  write_breakdown(w, est.breakdown_s);
  w.field("bubble_fraction", est.bubble_fraction);
  w.end_object();
  if (run) {
    w.key("run");
    write_run_json(w, *run, run_opts);
  }
  w.end_object();
  return w.str();
}

void print_simulation(const Scenario& scenario, const Layout& layout, const StepSimulation& sim,
                      const StepSimulationOptions& opts, const Estimate& est) {
  const int64_t m = layout.num_microbatches(scenario.training.gbs);
  std::printf("%s\n", scenario_title(scenario).c_str());
  const std::string cp_ep = (layout.cp > 1 ? " cp=" + std::to_string(layout.cp) : std::string()) +
                            (layout.ep > 1 ? " ep=" + std::to_string(layout.ep) : std::string());
  std::printf("layout: dp=%d tp=%d pp=%d%s vp=%d mbs=%d m=%lld zero=%d recompute=%s%s%s order=%s schedule=%s\n",
              layout.dp, layout.tp, layout.pp, cp_ep.c_str(), layout.vp, layout.mbs, (long long)m, layout.zero,
              to_string(layout.recompute), layout.offload ? " offload" : "", layout.sp ? " sp" : "",
              layout.order.c_str(), to_string(layout.schedule));
  // The timeline of a layout that would run out of memory is still shown (what it would cost),
  // but never without saying so.
  const MemoryBytes& mem = est.memory_per_gpu_bytes;
  std::printf("fits: %s (%s of %s GiB per GPU)%s%s\n", est.fits ? "yes" : "NO", fmt_gib(mem.total).c_str(),
              fmt_gib(mem.capacity).c_str(), est.fits || est.reason.empty() ? "" : ": ", est.fits ? "" : est.reason.c_str());
  std::printf("\n%-12s %12s %12s\n", "step", "simulated", "estimate");
  std::printf("%-12s %12s %12s\n", "time (s)", fmt_fixed(sim.step_time_s, 4).c_str(),
              fmt_fixed(est.step_time_s, 4).c_str());
  const TimeBreakdown& a = sim.breakdown_s;
  const TimeBreakdown& b = est.breakdown_s;
  const std::pair<const char*, std::pair<double, double>> rows[] = {
      {"compute", {a.compute, b.compute}},     {"recompute", {a.recompute, b.recompute}},
      {"bubble", {a.bubble, b.bubble}},        {"tp_comm", {a.tp_comm, b.tp_comm}},
      {"pp_comm", {a.pp_comm, b.pp_comm}},     {"dp_comm", {a.dp_comm, b.dp_comm}},
      {"optimizer", {a.optimizer, b.optimizer}}, {"offload", {a.offload, b.offload}},
      {"ep_comm", {a.ep_comm, b.ep_comm}},     {"cp_comm", {a.cp_comm, b.cp_comm}},
  };
  for (const auto& [name, v] : rows) {
    if ((name == std::string("ep_comm") && layout.ep == 1) || (name == std::string("cp_comm") && layout.cp == 1))
      continue;
    std::printf("  %-10s %12s %12s\n", name, fmt_fixed(v.first, 4).c_str(), fmt_fixed(v.second, 4).c_str());
  }
  std::printf("%-12s %12s %12s\n", "bubble", pct(sim.bubble_fraction).c_str(), pct(est.bubble_fraction).c_str());
  std::printf("(simulated breakdown on the pacing stage %d)\n", sim.breakdown_stage);
  std::printf("\nper stage (simulated GPU = dp 0, tp 0; critical stage %d; %lld events%s):\n",
              sim.critical_stage, (long long)sim.num_events, opts.contention ? ", with contention" : "");
  std::printf("  %5s %6s %6s %8s %14s\n", "stage", "rank", "node", "busy", "peak act GiB");
  for (size_t s = 0; s < sim.stage_rank.size(); ++s) {
    std::printf("  %5zu %6d %6d %8s %14s\n", s, sim.stage_rank[s], sim.stage_node[s],
                pct(sim.busy_fraction_per_gpu[s]).c_str(),
                fmt_gib(sim.peak_activation_bytes_per_stage[s]).c_str());
  }
}

void print_run_simulation(const RunSimulation& run, const RunOptions& run_opts) {
  std::printf("\nrun: %d trials, seed %llu, node MTBF %s h -> job MTBF %s h, restart %s min\n",
              run_opts.trials, (unsigned long long)run_opts.seed, fmt_fixed(run_opts.node_mtbf_hours, 0).c_str(),
              fmt_fixed(run.job_mtbf_hours, 1).c_str(), fmt_fixed(run_opts.restart_min, 1).c_str());
  std::printf("  checkpoint write %s s every %s min (Young/Daly sqrt(2 C M) = %s min; best found %s min)\n",
              fmt_fixed(run.checkpoint_write_s, 1).c_str(), fmt_fixed(run.checkpoint_interval_min, 1).c_str(),
              fmt_fixed(run.young_daly_interval_min, 1).c_str(), fmt_fixed(run.best_interval_min, 1).c_str());
  std::printf("  failure-free %s days; with failures mean %s, median %s, p10 %s, p90 %s days\n",
              fmt_fixed(run.failure_free_days, 2).c_str(), fmt_fixed(run.mean_days, 2).c_str(),
              fmt_fixed(run.median_days, 2).c_str(), fmt_fixed(run.p10_days, 2).c_str(),
              fmt_fixed(run.p90_days, 2).c_str());
  std::printf("  cost mean %s, median %s, p10 %s, p90 %s\n", fmt_money(run.mean_cost_usd).c_str(),
              fmt_money(run.median_cost_usd).c_str(), fmt_money(run.p10_cost_usd).c_str(),
              fmt_money(run.p90_cost_usd).c_str());
  std::printf("  failures %s, lost work %s h, restarts %s h, checkpoints %s h (means per run)\n",
              fmt_fixed(run.mean_failures, 1).c_str(), fmt_fixed(run.mean_lost_work_hours, 1).c_str(),
              fmt_fixed(run.mean_restart_hours, 1).c_str(), fmt_fixed(run.mean_checkpoint_hours, 1).c_str());
  if (run.sweep_points_skipped > 0)
    std::printf("  interval sweep: %d of 44 points not simulated: at those intervals the job is "
                "interrupted so often that the Monte-Carlo would go over its limit of %lld events\n",
                run.sweep_points_skipped,
                static_cast<long long>(ResourceLimits::max_monte_carlo_events));
}

}  // namespace

int cmd_simulate(int argc, char** argv) {
  const std::vector<FlagSpec> flags =
      concat(concat(concat(scenario_flags(), layout_flags()), {plan_file_flag(), json_flag()}),
             simulate_flags());
  Diagnostics diags;
  const Args args = parse_args(argc, argv, flags, diags);
  if (args.help()) {
    print_help("simulate",
               "(--plan FILE | --model M --cluster C --nodes N --dp D --tp T --pp P --mbs B --gbs G "
               "[options]) [--trace out.json] [--run ...] [--json]",
               flags);
    return kExitOk;
  }
  if (diags.has_errors()) return report(diags);

  auto job = scenario_and_layout_from_args(args, diags);
  if (diags.has_errors() || !job) return report(diags);
  const Scenario scenario = job->scenario.scenario;
  const Layout layout = job->layout;

  const RunOptions run_opts = run_options_from_args(args, diags);
  if (diags.has_errors()) return report(diags);
  report(diags);  // warnings

  if (auto broken = check_layout(scenario, layout)) {
    Diagnostics d;
    d.error(args.has("plan") ? args.get("plan") : kCommandLine, 0, 0, "layout", "invalid layout: " + *broken);
    return report(d);
  }
  if (layout.num_microbatches(scenario.training.gbs) < 1) {
    Diagnostics d;
    d.error(kCommandLine, 0, 0, "num_microbatches", "must be >= 1: gbs must be a multiple of dp * mbs");
    return report(d);
  }

  StepSimulationOptions opts;
  opts.contention = !args.has("no-contention");
  opts.record_timeline = true;
  const StepSimulation sim = simulate_step(scenario, layout, opts);
  if (!sim.error.empty()) {
    Diagnostics d;
    d.error(kCommandLine, 0, 0, "layout", sim.error);
    return report(d);
  }
  const Estimate est = estimate(scenario, layout);

  if (args.has("trace")) {
    const std::string err = write_file_atomic(args.get("trace"), chrome_trace_json(sim));
    if (!err.empty()) {
      std::fprintf(stderr, "%s: error: --trace: %s\n", args.get("trace").c_str(), err.c_str());
      return kExitFailure;
    }
  }

  RunSimulation run;
  if (args.has("run")) {
    run = simulate_run(run_inputs(scenario, sim.step_time_s), run_opts);
    if (!run.error.empty()) {
      Diagnostics d;
      d.error(kCommandLine, 0, 0, "--run", run.error);
      return report(d);
    }
  }

  if (args.has("json")) {
    std::printf("%s\n", simulation_json(scenario, layout, sim, opts, est, args.has("run") ? &run : nullptr, run_opts).c_str());
    return kExitOk;
  }
  print_simulation(scenario, layout, sim, opts, est);
  if (args.has("trace")) std::printf("\ntrace: %s (%zu events; open in https://ui.perfetto.dev)\n",
                                     args.get("trace").c_str(), sim.timeline.size());
  if (args.has("run")) print_run_simulation(run, run_opts);
  return kExitOk;
}

namespace {

// `capplan plan --refine K`: re-rank the top K candidates by simulated step time.
const bool kRefineRegistered = [] {
  PlanExtension ext;
  ext.flags = {{"refine", true, "re-rank the top K candidates by simulated step time", "K"}};
  ext.after_search = [](const Args& args, const ScenarioArgs& sa, SearchResult& result,
                        Diagnostics& diags) {
    if (!args.has("refine")) return kExitOk;
    const auto k = int_flag(args, "refine", diags, 1, 1000000);
    if (!k) return kExitBadInput;
    std::vector<std::string> refused;
    const auto times = refine_by_simulation(sa.scenario, result.candidates, int(*k), &refused);
    if (!refused.empty()) {
      diags.error(kCommandLine, 0, 0, "--refine", refused.front());
      return kExitBadInput;
    }
    std::fprintf(stderr, "refined: top %zu candidates re-ranked by simulated step time\n", times.size());
    for (size_t i = 0; i < times.size(); ++i) {
      const Estimate& e = result.candidates[i];
      std::fprintf(stderr, "  %zu. dp=%d tp=%d pp=%d vp=%d mbs=%d %s: simulated %s s, estimate %s s\n", i + 1,
                   e.layout.dp, e.layout.tp, e.layout.pp, e.layout.vp, e.layout.mbs,
                   to_string(e.layout.schedule), fmt_fixed(times[i], 4).c_str(),
                   fmt_fixed(e.step_time_s, 4).c_str());
    }
    return kExitOk;
  };
  register_plan_extension(std::move(ext));
  return true;
}();

}  // namespace
}  // namespace capplan::cli
