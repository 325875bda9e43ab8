// Search throughput: layouts evaluated per second and the wall time of a full search for GPT-3
// 175B on 1024 A100 GPUs (128 DGX A100 nodes, gbs 1536), with 1 thread and with all threads; and
// for the mixture-of-experts Mixtral 8x22B on 1024 H100 GPUs (128 p5.48xlarge, gbs 1024), where
// ep is searched too, with 1 thread and with all threads.
// Prints figures; asserts nothing (timings are never test assertions).
#include <benchmark/benchmark.h>

#include <cstdio>
#include <thread>

#include "planner/search.h"
#include "planner/spec_io.h"

namespace {

capplan::Scenario gpt3_on_1024() {
  capplan::Scenario sc;
  sc.model = *capplan::load_model("gpt3-175b").value;
  sc.cluster = *capplan::load_cluster("dgx-a100-80gb").value;
  sc.nodes = 128;
  sc.training.gbs = 1536;
  sc.training.tokens = 300e9;
  return sc;
}

void BM_Search175bOn1024(benchmark::State& state) {
  const capplan::Scenario sc = gpt3_on_1024();
  capplan::SearchOptions opt;
  opt.threads = int(state.range(0));
  opt.top = 10;
  int64_t evaluated = 0;
  double wall = 0;
  for (auto _ : state) {
    capplan::SearchResult r = capplan::search(sc, opt);
    evaluated += r.evaluated;
    wall += r.search_time_s;
    benchmark::DoNotOptimize(r.candidates.data());
  }
  state.counters["layouts_per_s"] =
      benchmark::Counter(double(evaluated), benchmark::Counter::kIsRate);
  state.counters["layouts_per_search"] = double(evaluated) / double(state.iterations());
  state.counters["search_wall_s"] = wall / double(state.iterations());
}
BENCHMARK(BM_Search175bOn1024)->Arg(1)->Arg(0)->Unit(benchmark::kMillisecond)->UseRealTime();

// Range of node counts: 64..160 DGX A100 nodes, Pareto front of days vs GPU-days.
void BM_SearchNodeRange(benchmark::State& state) {
  const capplan::Scenario sc = gpt3_on_1024();
  capplan::SearchOptions opt;
  opt.nodes_min = 64;
  opt.nodes_max = 160;
  int64_t evaluated = 0;
  for (auto _ : state) {
    capplan::SearchResult r = capplan::search(sc, opt);
    evaluated += r.evaluated;
    benchmark::DoNotOptimize(r.pareto.data());
  }
  state.counters["layouts_per_s"] =
      benchmark::Counter(double(evaluated), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_SearchNodeRange)->Unit(benchmark::kMillisecond)->UseRealTime()->Iterations(1);

// Mixture of experts: every ep dividing the 8 experts inside dp * cp, through the MoE terms.
void BM_SearchMixtral8x22bOn1024(benchmark::State& state) {
  capplan::Scenario sc;
  sc.model = *capplan::load_model("mixtral-8x22b").value;
  sc.cluster = *capplan::load_cluster("p5.48xlarge").value;
  sc.nodes = 128;
  sc.training.gbs = 1024;
  sc.training.tokens = 1e12;
  capplan::SearchOptions opt;
  opt.threads = int(state.range(0));
  opt.top = 10;
  int64_t evaluated = 0;
  double wall = 0;
  for (auto _ : state) {
    capplan::SearchResult r = capplan::search(sc, opt);
    evaluated += r.evaluated;
    wall += r.search_time_s;
    benchmark::DoNotOptimize(r.candidates.data());
  }
  state.counters["layouts_per_s"] =
      benchmark::Counter(double(evaluated), benchmark::Counter::kIsRate);
  state.counters["layouts_per_search"] = double(evaluated) / double(state.iterations());
  state.counters["search_wall_s"] = wall / double(state.iterations());
}
BENCHMARK(BM_SearchMixtral8x22bOn1024)->Arg(1)->Arg(0)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
