// Simulator speed: one step of GPT-3 175B on 1024 A100 GPUs (128 p4d.24xlarge) with 64
// micro-batches, for 1F1B, interleaved 1F1B and a deep pipeline, with and without the recorded
// timeline (events/s and wall time per step); and the Monte-Carlo of 1000 runs of a 30-day job.
// Prints figures; asserts nothing (targets: a step < 1 s, 1000 runs < 5 s).
#include <benchmark/benchmark.h>

#include "planner/spec_io.h"
#include "simulator/run_simulation.h"
#include "simulator/step_simulation.h"

namespace {

capplan::Scenario gpt3_on_1024(int64_t gbs) {
  capplan::Scenario sc;
  sc.model = *capplan::load_model("gpt3-175b").value;
  sc.cluster = *capplan::load_cluster("p4d.24xlarge").value;
  sc.nodes = 128;
  sc.training.gbs = gbs;
  sc.training.tokens = 300e9;
  return sc;
}

// range(0): 0 = dp8 tp8 pp16 1F1B, 1 = same interleaved vp=3, 2 = dp2 tp8 pp64... (m = 64 each)
capplan::Layout layout_for(int which) {
  capplan::Layout l;
  l.tp = 8;
  l.mbs = 1;
  if (which == 0) {
    l.dp = 8;
    l.pp = 16;
  } else if (which == 1) {
    l.dp = 8;
    l.pp = 16;
    l.vp = 3;
    l.schedule = capplan::Schedule::Interleaved;
  } else {
    l.dp = 4;
    l.pp = 32;
    l.recompute = capplan::Recompute::Full;
  }
  return l;
}

void BM_SimulateStep1024Gpus64Microbatches(benchmark::State& state) {
  const capplan::Layout l = layout_for(int(state.range(0)));
  const capplan::Scenario sc = gpt3_on_1024(int64_t(l.dp) * l.mbs * 64);
  capplan::StepSimulationOptions opt;
  opt.record_timeline = state.range(1) != 0;
  int64_t events = 0;
  double step = 0;
  for (auto _ : state) {
    const capplan::StepSimulation s = capplan::simulate_step(sc, l, opt);
    if (!s.error.empty()) {
      state.SkipWithError(s.error.c_str());
      return;
    }
    events += s.num_events;
    step = s.step_time_s;
    benchmark::DoNotOptimize(s.step_time_s);
  }
  state.counters["events_per_s"] = benchmark::Counter(double(events), benchmark::Counter::kIsRate);
  state.counters["events_per_step"] = double(events) / double(state.iterations());
  state.counters["simulated_step_s"] = step;
}
BENCHMARK(BM_SimulateStep1024Gpus64Microbatches)
    ->ArgNames({"layout", "timeline"})
    ->Args({0, 1})
    ->Args({0, 0})
    ->Args({1, 1})
    ->Args({2, 1})
    ->Unit(benchmark::kMillisecond);

void BM_MonteCarlo1000Runs30Days(benchmark::State& state) {
  capplan::RunInputs in;
  in.step_time_s = 10;
  in.steps = 30 * 86400 / 10;  // 30 days failure-free
  in.nodes = 128;
  in.price_per_node_hour_usd = 32.77;
  in.checkpoint_bytes = 14 * 175e9;
  capplan::RunOptions o;
  o.trials = 1000;
  o.node_mtbf_hours = 6335;
  double mean_days = 0;
  for (auto _ : state) {
    const capplan::RunSimulation r = capplan::simulate_run(in, o);
    mean_days = r.mean_days;
    benchmark::DoNotOptimize(r.mean_days);
  }
  // One call runs the 1000 trials at the chosen interval, 33 sweep points and 11 refinement
  // points of 1000 each.
  state.counters["runs_per_call"] = 1000.0 * 45;
  state.counters["mean_days"] = mean_days;
}
BENCHMARK(BM_MonteCarlo1000Runs30Days)->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
