// `capplan validate FILE.yaml`: predicted vs measured for each run of a file of measured runs
// (format: tests/data/calibration-runs.yaml, or the published-runs format of tests/data/published/),
// the error per run and the mean absolute percentage error, separately for calibration and
// held-out runs.
#include <cstdio>

#include "cli_common.h"
#include "planner/validate.h"

namespace capplan::cli {

namespace {

void write_summary(JsonWriter& w, const ValidationSummary& s) {
  w.begin_object();
  w.field("runs", s.runs).field("mape_pct", s.mape_pct).field("max_abs_pct", s.max_abs_pct);
  w.field("worst_id", s.worst_id);
  w.end_object();
}

}  // namespace

int cmd_validate(int argc, char** argv) {
  const std::vector<FlagSpec> flags = {json_flag()};
  Diagnostics diags;
  const Args args = parse_args(argc, argv, flags, diags, 16);
  if (args.help()) {
    print_help("validate", "FILE.yaml [FILE.yaml ...] [--json]", flags);
    return kExitOk;
  }
  if (args.positional().empty())
    diags.error(kCommandLine, 0, 0, "", "missing the file of measured runs (FILE.yaml)");
  if (diags.has_errors()) return report(diags);

  const Loaded<ValidationReport> loaded = validate_files(args.positional());
  if (!loaded.ok()) return report(loaded.diagnostics);
  report(loaded.diagnostics);  // warnings
  const ValidationReport& r = *loaded.value;
  if (!args.has("json")) {
    std::printf("%s", format_validation_report(r).c_str());
    return kExitOk;
  }
  JsonWriter w;
  w.begin_object();
  w.field("file", r.file);
  w.key("runs").begin_array();
  for (const ValidationResult& v : r.results) {
    w.begin_object();
    w.field("id", v.run.id).field("source", v.run.source).field("calibration", v.run.calibration);
    w.field("family", v.run.family).field("framework", v.run.scenario.training.framework.name);
    w.field("assumptions", v.run.assumptions);
    w.field("measure", to_string(v.run.measure));
    w.field("measured", v.run.measured).field("predicted", v.predicted);
    w.field("error_pct", v.error_pct);
    w.key("estimate");
    write_estimate_json(w, v.estimate);
    w.end_object();
  }
  w.end_array();
  w.key("calibration");
  write_summary(w, r.calibration);
  w.key("held_out");
  write_summary(w, r.held_out);
  w.key("all");
  write_summary(w, r.all);
  w.key("families").begin_object();
  for (const FamilySummary& f : r.families) {
    w.key(f.family);
    write_summary(w, f.summary);
  }
  w.end_object();
  // Per framework preset, over its calibration runs: what residual_spread is taken from.
  w.key("frameworks").begin_object();
  for (const FrameworkSummary& f : r.frameworks) {
    w.key(f.framework).begin_object();
    w.field("runs", f.summary.runs).field("mape_pct", f.summary.mape_pct).field("max_abs_pct", f.summary.max_abs_pct);
    w.field("worst_id", f.summary.worst_id).field("step_rms_pct", f.step_rms_pct);
    w.end_object();
  }
  w.end_object();
  w.end_object();
  std::printf("%s\n", w.str().c_str());
  return kExitOk;
}

}  // namespace capplan::cli
