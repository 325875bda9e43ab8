// Run simulation (run_simulation.h). Interruptions (node failures of all nodes together, plus
// spot reclaims) arrive as a Poisson process; since it is memoryless, each attempt draws the time
// to the next interruption afresh. An attempt computes for `interval`, writes a checkpoint,
// repeats; an interruption loses everything since the last completed checkpoint and costs a
// restart. Interruptions during a restart are not modelled (they would lengthen it slightly).
#include "simulator/run_simulation.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <sstream>

#include "planner/format.h"
#include "planner/limits.h"
#include "planner/random.h"
#include "planner/stats.h"


namespace capplan {
namespace {

// "20 h", "9.1 min", "4.0 s", "8e-12 h": a duration for a message.
std::string fmt_hours(double h) {
  if (h >= 1 || h <= 0 || !std::isfinite(h)) return fmt_general(h, 3) + " h";
  if (h * 60 >= 1) return fmt_general(h * 60, 3) + " min";
  if (h * 3600 >= 1e-3) return fmt_general(h * 3600, 3) + " s";
  return fmt_general(h, 3) + " h";
}


uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

}  // namespace

Xoshiro256::Xoshiro256(uint64_t seed) {
  uint64_t x = seed;
  for (auto& s : s_) s = splitmix64(&x);
}

uint64_t Xoshiro256::next() {
  const uint64_t result = rotl(s_[1] * 5, 7) * 9;
  const uint64_t t = s_[1] << 17;
  s_[2] ^= s_[0];
  s_[3] ^= s_[1];
  s_[1] ^= s_[2];
  s_[0] ^= s_[3];
  s_[2] ^= t;
  s_[3] = rotl(s_[3], 45);
  return result;
}

double Xoshiro256::uniform01() { return double(next() >> 11) * 0x1.0p-53; }

double Xoshiro256::exponential(double mean) { return -mean * std::log1p(-uniform01()); }

double simulate_one_run(double work_h, double interval_h, double checkpoint_h, double restart_h,
                        double mtti_h, Xoshiro256& rng, double* lost_h, int* failures,
                        int64_t* events_left) {
  double done = 0, wall = 0;
  const double segment = interval_h + checkpoint_h;
  while (true) {
    if (events_left && (*events_left)-- <= 0) return std::numeric_limits<double>::infinity();
    const double remaining = work_h - done;
    if (remaining <= 0) break;
    const double writes = std::max(0.0, std::ceil(remaining / interval_h - 1e-12) - 1);
    const double to_finish = remaining + checkpoint_h * writes;
    const double t = std::isfinite(mtti_h) ? rng.exponential(mtti_h) : std::numeric_limits<double>::infinity();
    if (t >= to_finish) {
      wall += to_finish;
      break;
    }
    const double k = std::floor(t / segment);
    done += k * interval_h;
    wall += t + restart_h;
    if (lost_h) *lost_h += t - k * segment;
    if (failures) ++*failures;
  }
  return wall;
}

// Expected interruptions of one trial at checkpoint interval I: the run is ceil(W / I) segments
// of I hours of work plus C to write; interruptions arrive at rate 1 / M, so a segment of S
// hours needs exp(S / M) attempts on average (the time to S failure-free hours of a Poisson
// process), exp(S / M) - 1 of them interrupted. Counts the events simulate_one_run() loops over.
double expected_interruptions(double work_h, double interval_h, double checkpoint_h, double mtti_h) {
  if (!std::isfinite(mtti_h)) return 0;
  const double segments = std::max(1.0, std::ceil(work_h / interval_h));
  return segments * std::expm1((std::min(interval_h, work_h) + checkpoint_h) / mtti_h);
}

namespace {

// Why the options or inputs cannot be simulated; empty when they can.
std::string check_run_inputs(const RunInputs& in, const RunOptions& opt) {
  if (!(opt.node_mtbf_hours > 0)) return "node_mtbf_hours: must be > 0";
  if (opt.checkpoint_interval_min < 0 || !std::isfinite(opt.checkpoint_interval_min))
    return "checkpoint_interval_min: must be >= 0 (0 = Young/Daly)";
  if (opt.restart_min < 0 || !std::isfinite(opt.restart_min)) return "restart_min: must be >= 0";
  if (!(opt.storage_gbyte_per_s > 0)) return "storage_gbyte_per_s: must be > 0";
  if (opt.spot_interruptions_per_day < 0) return "spot_interruptions_per_day: must be >= 0";
  if (opt.trials < 1 || opt.trials > 10000000) return "trials: must be in 1..10000000";
  if (!(in.step_time_s > 0) || !(in.steps > 0) || in.nodes < 1) return "plan: step time, steps and nodes must be > 0";
  return {};
}

// The trials at one checkpoint interval, all from the same seed (common random numbers across
// intervals), within one budget of Monte-Carlo events (ResourceLimits::max_monte_carlo_events).
struct Trials {
  double work_h = 0, checkpoint_h = 0, restart_h = 0, mtbf_h = 0;
  const RunOptions& opt;
  int64_t events_left = ResourceLimits::max_monte_carlo_events;

  // Mean days; each trial's days into `days`, the lost hours and failures summed, when given.
  double run(double interval_min, std::vector<double>* days, double* lost_h, int* failures) {
    Xoshiro256 rng(opt.seed);
    double sum = 0;
    for (int i = 0; i < opt.trials; ++i) {
      const double h = simulate_one_run(work_h, interval_min / 60.0, checkpoint_h, restart_h, mtbf_h, rng, lost_h,
                                        failures, &events_left);
      sum += h / 24.0;
      if (days) days->push_back(h / 24.0);
    }
    return sum / opt.trials;
  }
  // A sweep point is simulated only when its expected events fit in what is left of the budget
  // (twice the expectation: the mean of a few trials can run above it).
  bool affordable(double interval_min) const {
    const double events =
        opt.trials * (1.0 + expected_interruptions(work_h, interval_min / 60.0, checkpoint_h, mtbf_h));
    return 2.0 * events < double(events_left);
  }
};

// Bound the Monte-Carlo work before doing it: a job whose checkpoint interval fails on average
// more often than it succeeds by orders of magnitude is expected never to complete; one that
// completes but needs more simulated interruptions than the limit is refused with the figure.
std::string check_affordable(const RunInputs& in, const RunOptions& opt, const RunSimulation& r, const Trials& t) {
  const double limit = double(ResourceLimits::max_monte_carlo_events);
  const double interval_h = r.checkpoint_interval_min / 60.0;
  const double per_segment = std::expm1((std::min(interval_h, t.work_h) + t.checkpoint_h) / r.job_mtbf_hours);
  const double events = opt.trials * (1.0 + expected_interruptions(t.work_h, interval_h, t.checkpoint_h, r.job_mtbf_hours));
  std::ostringstream os;
  if (!(per_segment < 1e4)) {
    os << "expected never to complete: the job's MTBF of " << fmt_hours(r.job_mtbf_hours) << " (node MTBF "
       << fmt_hours(opt.node_mtbf_hours) << " over " << in.nodes << " nodes) is shorter than one checkpoint interval of "
       << fmt_hours(interval_h) << " plus " << fmt_hours(t.checkpoint_h)
       << " to write it: each interval would be interrupted about " << fmt_count(per_segment)
       << " times before one completes";
  } else if (events > limit) {
    os << "the run simulation would need about " << fmt_count(events) << " Monte-Carlo events ("
       << fmt_count(events / opt.trials - 1) << " interruptions per trial x " << opt.trials
       << " trials), over the limit of " << ResourceLimits::max_monte_carlo_events << "; use fewer --trials";
  }
  return os.str();
}

// Sweep intervals geometrically around Young/Daly (1/16x .. 16x), each with the same seed, then
// refine between the best point's neighbours (ratio 16^(1/16) each side) on a finer grid; points
// over what is left of the event budget are skipped (reported as not simulated).
void sweep_intervals(RunSimulation& r, Trials& t) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double center = std::max(r.young_daly_interval_min, 0.5);
  r.best_interval_min = r.checkpoint_interval_min;
  r.best_interval_mean_days = r.mean_days;
  const int points = 33;
  for (int i = 0; i < points; ++i) {
    const double interval = center * std::pow(16.0, (2.0 * i / (points - 1)) - 1.0);
    if (!t.affordable(interval)) {
      r.interval_sweep.push_back({interval, nan});
      ++r.sweep_points_skipped;
      continue;
    }
    const double mean = t.run(interval, nullptr, nullptr, nullptr);
    r.interval_sweep.push_back({interval, mean});
    if (mean < r.best_interval_mean_days) {
      r.best_interval_mean_days = mean;
      r.best_interval_min = interval;
    }
  }
  const double coarse_best = r.best_interval_min;
  const double step = std::pow(16.0, 2.0 / (points - 1));
  for (int i = 1; i < 12; ++i) {
    const double interval = coarse_best * std::pow(step, -1.0 + 2.0 * i / 12);
    if (!t.affordable(interval)) {
      ++r.sweep_points_skipped;
      continue;
    }
    const double mean = t.run(interval, nullptr, nullptr, nullptr);
    if (mean < r.best_interval_mean_days) {
      r.best_interval_mean_days = mean;
      r.best_interval_min = interval;
    }
  }
}

}  // namespace

RunSimulation simulate_run(const RunInputs& in, const RunOptions& opt) {
  RunSimulation r;
  r.error = check_run_inputs(in, opt);
  if (!r.error.empty()) return r;

  Trials t{in.step_time_s * in.steps / 3600.0, 0, opt.restart_min / 60.0, 0, opt};
  r.failure_free_days = t.work_h / 24.0;
  r.checkpoint_write_s = in.checkpoint_bytes / (opt.storage_gbyte_per_s * 1e9);
  t.checkpoint_h = r.checkpoint_write_s / 3600.0;
  const double rate_per_h = in.nodes / opt.node_mtbf_hours + opt.spot_interruptions_per_day / 24.0;
  r.job_mtbf_hours = 1.0 / rate_per_h;
  t.mtbf_h = r.job_mtbf_hours;
  // Young 1974: the first-order optimum checkpoint interval is sqrt(2 * C * M).
  r.young_daly_interval_min = std::sqrt(2.0 * t.checkpoint_h * r.job_mtbf_hours) * 60.0;
  r.checkpoint_interval_min =
      opt.checkpoint_interval_min > 0 ? opt.checkpoint_interval_min : std::max(r.young_daly_interval_min, 1e-3);
  r.error = check_affordable(in, opt, r, t);
  if (!r.error.empty()) return r;

  std::vector<double> days;
  days.reserve(size_t(opt.trials));
  double lost_h = 0;
  int failures = 0;
  r.mean_days = t.run(r.checkpoint_interval_min, &days, &lost_h, &failures);
  if (t.events_left <= 0) {
    r.error = "the run simulation went over the limit of " + std::to_string(ResourceLimits::max_monte_carlo_events) +
              " Monte-Carlo events (interruptions over all trials); use fewer --trials";
    return r;
  }
  std::sort(days.begin(), days.end());
  r.median_days = percentile(days, 0.5);
  r.p10_days = percentile(days, 0.1);
  r.p90_days = percentile(days, 0.9);
  r.mean_failures = double(failures) / opt.trials;
  r.mean_lost_work_hours = lost_h / opt.trials;
  r.mean_restart_hours = r.mean_failures * t.restart_h;
  r.mean_checkpoint_hours = std::max(0.0, r.mean_days * 24 - t.work_h - r.mean_lost_work_hours - r.mean_restart_hours);
  const double price = in.price_per_node_hour_usd;
  auto usd = [&](double d) { return price > 0 ? d * 24.0 * in.nodes * price : std::numeric_limits<double>::quiet_NaN(); };
  r.mean_cost_usd = usd(r.mean_days);
  r.median_cost_usd = usd(r.median_days);
  r.p10_cost_usd = usd(r.p10_days);
  r.p90_cost_usd = usd(r.p90_days);
  sweep_intervals(r, t);
  return r;
}

}  // namespace capplan
