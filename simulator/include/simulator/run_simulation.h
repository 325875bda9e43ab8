// Monte-Carlo simulation of a whole training run with node failures, checkpoints and restarts
// (and optional spot interruptions): how long will it really take, and what will it cost? Seeded
// and deterministic (xoshiro256** seeded by splitmix64, no standard-library distributions). It
// does not simulate steps: the failure-free step time comes from the step simulation or the
// estimate.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "planner/cost_model.h"

namespace capplan {

// Deterministic pseudo-random numbers: xoshiro256** 1.0 (Blackman & Vigna 2018), seeded from one
// 64-bit value through splitmix64, as its authors recommend. Same sequence on every platform.
class Xoshiro256 {
 public:
  explicit Xoshiro256(uint64_t seed);
  uint64_t next();
  double uniform01();                     // [0, 1) with 53 random bits
  double exponential(double mean);        // inverse CDF: -mean * log(1 - u)

 private:
  uint64_t s_[4];
};

struct RunOptions {
  // Node MTBF: Llama 3 (Dubey et al. 2024, Sec 3.3.4) saw 419 unexpected interruptions in 54 days
  // on 16,384 H100 GPUs (2,048 nodes): 2,048 * 54 * 24 / 419 = 6,335 node-hours per failure.
  double node_mtbf_hours = 6335;
  double checkpoint_interval_min = 0;  // 0 = the Young/Daly interval sqrt(2 * C * MTBF_job)
  double restart_min = 20;             // re-queue, health check, node replacement, reload (assumed)
  double storage_gbyte_per_s = 10;     // aggregate checkpoint write bandwidth (assumed; FSx for
                                       // Lustre gives 0.125-1 GB/s per TiB provisioned)
  double spot_interruptions_per_day = 0;  // whole-job rate of spot reclaims; 0 = on-demand
  int trials = 1000;
  uint64_t seed = 1;
};

// What the run simulation needs from a plan.
struct RunInputs {
  double step_time_s = 0;        // failure-free
  double steps = 0;              // optimizer steps to train `tokens`
  int nodes = 0;
  double price_per_node_hour_usd = 0;  // 0 = unknown
  double checkpoint_bytes = 0;   // model + optimizer state written per checkpoint
};

// Steps = tokens / (gbs * seq_len); checkpoint = 14 bytes per parameter (bf16/fp16 weights + fp32
// master weights and two Adam moments, as Megatron-LM saves them; 16 for fp32 training).
RunInputs run_inputs(const Scenario& scenario, double step_time_s);

struct RunSimulation {
  double failure_free_days = 0;
  double checkpoint_write_s = 0;
  double checkpoint_interval_min = 0;   // used
  double young_daly_interval_min = 0;   // sqrt(2 * C * M), M = node MTBF / nodes (and spot)
  double job_mtbf_hours = 0;
  double mean_days = 0, median_days = 0, p10_days = 0, p90_days = 0;
  double mean_cost_usd = 0, median_cost_usd = 0, p10_cost_usd = 0, p90_cost_usd = 0;  // NaN: no price
  double mean_failures = 0;
  double mean_lost_work_hours = 0;      // compute redone after failures
  double mean_checkpoint_hours = 0;
  double mean_restart_hours = 0;
  double best_interval_min = 0;         // lowest mean days: 33-point sweep 1/16x..16x Young/Daly, refined
  double best_interval_mean_days = 0;
  std::vector<std::pair<double, double>> interval_sweep;  // (interval min, mean days); NaN days:
                                                          // not simulated (over the work limit)
  // Sweep points (of 33 + 11) not simulated: their expected interruptions would go over
  // ResourceLimits::max_monte_carlo_events (intervals far above the job's MTBF).
  int sweep_points_skipped = 0;
  std::string error;
};

RunSimulation simulate_run(const RunInputs& inputs, const RunOptions& options);

// One trial (exposed for tests): returns wall-clock hours; adds to lost/failures when given.
// With `events_left`, each interruption (and the final stretch) takes one from it; at 0 the trial
// stops and returns infinity.
double simulate_one_run(double work_h, double interval_h, double checkpoint_h, double restart_h,
                        double mean_time_to_interrupt_h, Xoshiro256& rng, double* lost_h = nullptr,
                        int* failures = nullptr, int64_t* events_left = nullptr);

// Expected interruptions of one trial at checkpoint interval `interval_h`:
// ceil(work / interval) x (exp((interval + checkpoint) / MTTI) - 1).
double expected_interruptions(double work_h, double interval_h, double checkpoint_h, double mtti_h);

}  // namespace capplan
