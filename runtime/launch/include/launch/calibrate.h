// `capplan calibrate RUNDIR...`: fits a cluster's global efficiencies (GEMM, memory bandwidth,
// intra- and inter-node links; planner/spec.h EfficiencyOverrides) to the per-term times that
// `capplan run` measured, by least squares over every measured term of every run, and gives the
// cluster spec with them. It reads the run folders only; writing the cluster file is the caller's.
#pragma once

#include <string>
#include <vector>

#include "launch/launch.h"
#include "planner/diagnostics.h"
#include "planner/plan_io.h"
#include "planner/spec.h"

namespace capplan::rt {

// One term of one run: what was measured and what the cost model predicts before and after.
struct CalibrationTerm {
  std::string term;  // compute, recompute, bubble, tp_comm, pp_comm, dp_comm, optimizer, offload
  double measured_s = 0, before_s = 0, after_s = 0;
};

struct CalibrationRun {
  std::string dir;     // RUNDIR as given
  std::string layout;  // "dp 2 tp 1 pp 1, zero 0, recompute none, 1f1b"
  std::vector<CalibrationTerm> terms;
  double measured_step_s = 0, before_step_s = 0, after_step_s = 0;
  // Root mean square of the weighted term residuals (predicted - measured) / (measured + floor).
  double before_rms = 0, after_rms = 0;
};

struct Calibration {
  ClusterSpec cluster;             // the runs' cluster with the fitted efficiencies and a source
  EfficiencyOverrides before, after;  // the efficiencies the runs were predicted with, and the fit
  std::vector<std::string> fitted;    // efficiencies the terms depend on (the others are kept)
  std::vector<std::string> at_bound;  // fitted ones that stopped at a bound of the fit (0.001, 10)
  // Fitted above 1: the cluster file has the rate they scale (GEMM peak, memory bandwidth, link
  // bandwidth) multiplied by them and an efficiency of 1, the most a cluster file holds.
  std::vector<std::string> folded;
  std::vector<CalibrationRun> runs;
  int residuals = 0;                  // measured terms in the fit
  double before_rms = 0, after_rms = 0;  // over every term of every run
};

// Residual weight: a term's error counts relative to its measured time plus this floor, so that
// terms of a millisecond do not outweigh the step (the fidelity target is 20 % or 2 ms a term).
inline constexpr double kCalibrationFloorS = 2e-3;

// Reads each RUNDIR's plan.yaml (the run on its cluster spec), run.json (status) and
// metrics.jsonl (the measured terms). Errors, each naming the run: a missing or corrupt file, a
// run that did not succeed, a run without per-term times, runs of different clusters (another
// cluster spec or other hosts). No run folder is changed.
Loaded<Calibration> calibrate_runs(const std::vector<std::string>& run_dirs);

// The calibrated cluster file (the format of configs/clusters/*.yaml), with a comment block
// saying what it was fitted on and the residuals.
std::string calibration_cluster_yaml(const Calibration& c);
// The per-run table the CLI prints: residual before and after, and each run's step.
std::string calibration_text(const Calibration& c);

}  // namespace capplan::rt
