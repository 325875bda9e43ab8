// Validation of the cost model against measured runs: a YAML file of runs (model, cluster, layout,
// global batch and the measured figure in a stated convention) is loaded with diagnostics, each run
// is predicted in the convention of its measurement, and the errors are summarised (MAPE, max).
// The file format is documented in tests/data/calibration-runs.yaml and the README; a run may also
// be in the published-runs format of tests/data/published/ (validate_published.cpp).
#pragma once

#include <string>
#include <vector>

#include "planner/cost_model.h"
#include "planner/diagnostics.h"

namespace capplan {

// What a run's measured figure means; the prediction is computed in the same convention.
enum class Measure {
  IterationTime,   // iteration_time_s: seconds per optimizer step
  ModelTflops,     // tflops_per_gpu with tflops_includes_recompute: false (6N + attention, MFU-style)
  HardwareTflops,  // tflops_per_gpu with tflops_includes_recompute: true (Megatron Eq. 3)
  SamplesPerS,     // samples_per_s: sequences per second, whole job
  TokensPerS,      // tokens_per_s: whole job
};
const char* to_string(Measure m);

struct ValidationRun {
  std::string id;
  std::string source;       // citation of the measurement
  std::string assumptions;  // knobs the source leaves open and the value taken
  bool calibration = true;  // false: held out, not used when the global constants were chosen
  std::string family;       // source family for the per-family summary (default: id up to its first '-')
  std::string model_ref;    // preset name, or "inline"
  std::string cluster_ref;
  Scenario scenario;
  Layout layout;
  Measure measure = Measure::IterationTime;
  double measured = 0;
  int line = 0;             // where the run starts in the file
  bool published = false;   // read from the published-runs format: `assumptions` says what was taken
  // HardwareTflops counted as Megatron's Eq. 3 counts them (Narayanan et al. 2021, Appendix: 96
  // = four passes of 24), a whole forward pass recomputed whatever the run recomputed; false: the
  // FLOPs the run executed (hardware FLOPs utilisation, PaLM's HFU: a selective recompute's
  // attention core, nothing without recompute). The two agree where the run recomputes fully.
  bool tflops_count_full_recompute = false;
};

struct ValidationResult {
  ValidationRun run;
  Estimate estimate;
  double predicted = 0;    // in run.measure's convention
  double error_pct = 0;    // (predicted - measured) / measured * 100
};

struct ValidationSummary {
  int runs = 0;
  double mape_pct = 0;       // mean of |error_pct|
  double max_abs_pct = 0;
  std::string worst_id;
};

struct FamilySummary {
  std::string family;
  ValidationSummary summary;
};

// A framework preset's calibration runs: their errors, and the root mean square of their step-time
// errors (measured step / predicted step - 1; a throughput's predicted over measured), the
// figure a preset's `residual_spread` is taken from.
struct FrameworkSummary {
  std::string framework;
  ValidationSummary summary;
  double step_rms_pct = 0;
};

struct ValidationReport {
  std::string file;               // the files, joined by ", " when several were validated
  std::vector<ValidationResult> results;
  ValidationSummary calibration;  // runs marked calibration: true
  ValidationSummary held_out;     // runs marked calibration: false
  ValidationSummary all;
  std::vector<FamilySummary> families;  // per source family, in order of first appearance
  std::vector<FrameworkSummary> frameworks;  // per framework preset, its calibration runs only
};

// Parses a runs file already in memory; `file` names it in diagnostics. Every problem (unknown key,
// wrong type, unknown preset, invalid layout with its constraint) is reported with file:line:col.
Loaded<std::vector<ValidationRun>> parse_validation_yaml(const std::string& text, const std::string& file);

// Predicts every run and summarises the errors.
ValidationReport validate_runs(const std::vector<ValidationRun>& runs, const std::string& file = {});

// Loads `path` and validates it: what `capplan validate FILE.yaml` prints.
Loaded<ValidationReport> validate_file(const std::string& path);
// Several files as one report (`capplan validate A.yaml B.yaml`): every file's problems are
// reported; the summaries cover all runs.
Loaded<ValidationReport> validate_files(const std::vector<std::string>& paths);

// One line per run and the summaries, as a fixed-width table.
std::string format_validation_report(const ValidationReport& report);

}  // namespace capplan
