// `capplan calibrate RUNDIR... --out cluster.yaml`: fits the cluster's global efficiencies to the
// per-term times of measured `capplan run` folders (launch/calibrate.h), prints each run's
// residual before and after, and writes the calibrated cluster file atomically.
#include <cstdio>

#include "cli_common.h"
#include "launch/calibrate.h"
#include "planner/atomic_file.h"

namespace capplan::cli {

int cmd_calibrate(int argc, char** argv) {
  const std::vector<FlagSpec> flags = {
      {"out", true, "the calibrated cluster file to write (required)", "FILE"}, json_flag()};
  Diagnostics diags;
  const Args args = parse_args(argc, argv, flags, diags, 1024);
  if (args.help()) {
    print_help("calibrate", "RUNDIR [RUNDIR ...] --out cluster.yaml [--json]", flags);
    return kExitOk;
  }
  if (args.positional().empty())
    diags.error(kCommandLine, 0, 0, "RUNDIR", "missing the run folders (written by capplan run --dir)");
  if (!args.has("out") || args.get("out").empty())
    diags.error(kCommandLine, 0, 0, "--out", "missing the cluster file to write", "--out cluster.yaml");
  if (diags.has_errors()) return report(diags);

  const Loaded<rt::Calibration> loaded = rt::calibrate_runs(args.positional());
  if (!loaded.ok()) return report(loaded.diagnostics);
  report(loaded.diagnostics);  // warnings
  const rt::Calibration& c = *loaded.value;
  const std::string out = args.get("out");
  if (const std::string err = write_file_atomic(out, rt::calibration_cluster_yaml(c)); !err.empty()) {
    std::fprintf(stderr, "%s: error: %s\n", out.c_str(), err.c_str());
    return kExitFailure;
  }
  if (!args.has("json")) {
    std::printf("%s\nwrote %s\n", rt::calibration_text(c).c_str(), out.c_str());
    return kExitOk;
  }
  JsonWriter w;
  w.begin_object();
  w.field("out", out).field("residuals", c.residuals);
  w.field("before_rms", c.before_rms).field("after_rms", c.after_rms);
  w.key("fitted").begin_array();
  for (const std::string& f : c.fitted) w.value(f);
  w.end_array();
  w.key("folded").begin_array();
  for (const std::string& f : c.folded) w.value(f);
  w.end_array();
  // "fit": the fitted efficiencies; "efficiency": the cluster file's (at most 1, see "folded").
  for (const auto& [key, e] : {std::pair{"fit", &c.after}, std::pair{"efficiency", &c.cluster.efficiency}}) {
    w.key(key).begin_object();
    for (const auto& [name, v] : {std::pair{"gemm", e->gemm}, std::pair{"memory", e->memory},
                                  std::pair{"intra_node", e->intra_node}, std::pair{"inter_node", e->inter_node}})
      if (v) w.field(name, *v);
    w.end_object();
  }
  w.key("runs").begin_array();
  for (const rt::CalibrationRun& r : c.runs) {
    w.begin_object();
    w.field("dir", r.dir).field("layout", r.layout);
    w.field("before_rms", r.before_rms).field("after_rms", r.after_rms);
    w.field("measured_step_s", r.measured_step_s).field("before_step_s", r.before_step_s);
    w.field("after_step_s", r.after_step_s);
    w.key("terms").begin_array();
    for (const rt::CalibrationTerm& t : r.terms) {
      w.begin_object();
      w.field("term", t.term).field("measured_s", t.measured_s).field("before_s", t.before_s);
      w.field("after_s", t.after_s);
      w.end_object();
    }
    w.end_array();
    w.end_object();
  }
  w.end_array();
  w.end_object();
  std::printf("%s\n", w.str().c_str());
  return kExitOk;
}

}  // namespace capplan::cli
