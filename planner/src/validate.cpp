// Loads a file of measured training runs, predicts each with the cost model in the convention of
// its measurement, and summarises the errors. It does not fit anything: the model's constants are
// global (cost_model.cpp) and the same for every run.
#include "planner/validate.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "planner/spec_io.h"
#include "validate_published.h"
#include "yaml_reader.h"

namespace capplan {

using detail::Limits;
using detail::MapReader;

const char* to_string(Measure m) {
  switch (m) {
    case Measure::IterationTime: return "iteration_time_s";
    case Measure::ModelTflops: return "model_tflops_per_gpu";
    case Measure::HardwareTflops: return "hardware_tflops_per_gpu";
    case Measure::SamplesPerS: return "samples_per_s";
    case Measure::TokensPerS: return "tokens_per_s";
  }
  return "?";
}

namespace {

// A model or cluster given as a relative path is looked up next to the runs file first, so a
// runs file and its specs can travel together.
std::string resolve_ref(const std::string& ref, const std::string& runs_file) {
  const bool looks_like_path = ref.find('/') != std::string::npos ||
                               (ref.size() > 5 && (ref.ends_with(".yaml") || ref.ends_with(".json")));
  if (!looks_like_path || ref.empty() || ref.front() == '/') return ref;
  const size_t slash = runs_file.find_last_of('/');
  if (slash == std::string::npos) return ref;
  const std::string candidate = runs_file.substr(0, slash + 1) + ref;
  return detail::path_exists(candidate) ? candidate : ref;
}

constexpr Limits kCount{0, true, 1e7};
constexpr Limits kZero{0, false, 3};
constexpr Limits kPositive{0, true, 1e18};

template <class T>
bool merge(Loaded<T>& loaded, Diagnostics& diags, T& out) {
  diags.append(loaded.diagnostics);
  if (!loaded.ok()) return false;
  out = *loaded.value;
  return true;
}

// `model:` or `cluster:` is a preset name (or a path, as on the command line) or an inline map.
bool read_model(MapReader& r, const std::string& prefix, ValidationRun& run) {
  const YAML::Node n = r.child("model");
  if (!n.IsDefined()) {
    r.missing("model", "a preset name such as gpt3-175b, or a map");
    return false;
  }
  if (n.IsMap()) {
    run.model_ref = "inline";
    auto m = detail::read_model_map(n, r.file(), prefix + "model.", r.diagnostics());
    if (m) run.scenario.model = *m;
    return m.has_value();
  }
  if (!n.IsScalar()) {
    r.error_at(n, "model", "expected a preset name or a map");
    return false;
  }
  run.model_ref = n.Scalar();
  Loaded<ModelSpec> m = load_model(resolve_ref(run.model_ref, r.file()));
  if (!m.ok()) {
    const detail::Position p = detail::position_of(n);
    for (const Diagnostic& d : m.diagnostics.items())
      r.diagnostics().error(r.file(), p.line, p.column, prefix + "model", d.message, d.hint);
    return false;
  }
  run.scenario.model = *m.value;
  return true;
}

bool read_cluster(MapReader& r, const std::string& prefix, ValidationRun& run) {
  const YAML::Node n = r.child("cluster");
  if (!n.IsDefined()) {
    r.missing("cluster", "a preset name such as dgx-a100-80gb, or a map");
    return false;
  }
  if (n.IsMap()) {
    run.cluster_ref = "inline";
    auto c = detail::read_cluster_map(n, r.file(), prefix + "cluster.", r.diagnostics());
    if (c) run.scenario.cluster = *c;
    return c.has_value();
  }
  if (!n.IsScalar()) {
    r.error_at(n, "cluster", "expected a preset name or a map");
    return false;
  }
  run.cluster_ref = n.Scalar();
  Loaded<ClusterSpec> c = load_cluster(resolve_ref(run.cluster_ref, r.file()));
  if (!c.ok()) {
    const detail::Position p = detail::position_of(n);
    for (const Diagnostic& d : c.diagnostics.items())
      r.diagnostics().error(r.file(), p.line, p.column, prefix + "cluster", d.message, d.hint);
    return false;
  }
  run.scenario.cluster = *c.value;
  return true;
}

bool read_layout(MapReader& r, const std::string& prefix, Layout& ly) {
  const YAML::Node n = r.child("layout");
  if (!n.IsDefined()) {
    r.missing("layout", "a map with dp, tp, pp, mbs, ...");
    return false;
  }
  if (!n.IsMap()) {
    r.error_at(n, "layout", "expected a map with dp, tp, pp, mbs, ...");
    return false;
  }
  Diagnostics& d = r.diagnostics();
  const size_t before = d.items().size();
  MapReader lr(n, r.file(), prefix + "layout.", d);
  lr.integer("dp", ly.dp, true, kCount);
  lr.integer("tp", ly.tp, true, kCount);
  lr.integer("pp", ly.pp, true, kCount);
  lr.integer("cp", ly.cp, false, kCount);
  lr.integer("ep", ly.ep, false, kCount);
  lr.integer("vp", ly.vp, false, kCount);
  lr.integer("mbs", ly.mbs, true, kCount);
  lr.integer("zero", ly.zero, false, kZero);
  lr.enumeration("recompute", ly.recompute, parse_recompute, "none, selective, full");
  lr.boolean("offload", ly.offload, false);
  lr.boolean("sp", ly.sp, false);
  lr.enumeration("schedule", ly.schedule, parse_schedule, "gpipe, 1f1b, interleaved");
  std::string order;
  if (lr.text("order", order, false)) {
    if (auto o = parse_order(order)) {
      ly.order = *o;
    } else {
      lr.error_at(lr.child("order"), "order",
                  "expected a permutation of D, P, T (with C and E optional, or cluster / spread), "
                  "found '" + order + "'");
    }
  }
  // vp > 1 implies the interleaved schedule unless one is given.
  if (ly.vp > 1 && !lr.has("schedule")) ly.schedule = Schedule::Interleaved;
  lr.finish();
  return d.items().size() == before || !d.has_errors();
}

bool read_measured(MapReader& r, ValidationRun& run) {
  const YAML::Node n = r.child("measured");
  if (!n.IsDefined()) {
    r.missing("measured", "a map with one of iteration_time_s, tflops_per_gpu, samples_per_s, tokens_per_s");
    return false;
  }
  if (!n.IsMap()) {
    r.error_at(n, "measured", "expected a map");
    return false;
  }
  MapReader mr(n, r.file(), r.prefix() + "measured.", r.diagnostics());
  int found = 0;
  double v = 0;
  if (mr.number("iteration_time_s", v, false, kPositive)) {
    run.measure = Measure::IterationTime;
    run.measured = v;
    ++found;
  }
  if (mr.number("samples_per_s", v, false, kPositive)) {
    run.measure = Measure::SamplesPerS;
    run.measured = v;
    ++found;
  }
  if (mr.number("tokens_per_s", v, false, kPositive)) {
    run.measure = Measure::TokensPerS;
    run.measured = v;
    ++found;
  }
  if (mr.has("tflops_per_gpu")) {
    if (mr.number("tflops_per_gpu", v, true, kPositive)) {
      bool includes = false;
      if (!mr.has("tflops_includes_recompute")) {
        mr.missing("tflops_includes_recompute",
                   "true (hardware FLOPs, Megatron Eq. 3) or false (model FLOPs, MFU-style)");
      } else if (mr.boolean("tflops_includes_recompute", includes, true)) {
        run.measure = includes ? Measure::HardwareTflops : Measure::ModelTflops;
        run.tflops_count_full_recompute = includes;  // Megatron Eq. 3, as the key is documented
        run.measured = v;
        ++found;
      }
    }
  } else if (mr.has("tflops_includes_recompute")) {
    bool ignored = false;
    mr.boolean("tflops_includes_recompute", ignored, false);
    mr.error_at(mr.child("tflops_includes_recompute"), "tflops_includes_recompute",
                "given without tflops_per_gpu");
  }
  mr.finish();
  if (found > 1) {
    r.error_at(n, "measured", "give exactly one measured figure, found " + std::to_string(found));
    return false;
  }
  if (found == 0 && !r.diagnostics().has_errors()) {
    r.error_at(n, "measured",
               "no measured figure: expected one of iteration_time_s, tflops_per_gpu (with "
               "tflops_includes_recompute), samples_per_s, tokens_per_s");
  }
  return found == 1;
}

// A run's step-time error, %: measured step over predicted, less 1 (a throughput is inversely
// proportional to the step: its predicted over measured).
double step_error_pct(const ValidationResult& r) {
  const double ratio =
      r.run.measure == Measure::IterationTime ? r.run.measured / r.predicted : r.predicted / r.run.measured;
  return 100.0 * (ratio - 1.0);
}

void summarise(ValidationSummary& s, const ValidationResult& r) {
  const double a = std::fabs(r.error_pct);
  s.mape_pct = (s.mape_pct * s.runs + a) / (s.runs + 1);
  ++s.runs;
  if (s.runs == 1 || a > s.max_abs_pct) {
    s.max_abs_pct = a;
    s.worst_id = r.run.id;
  }
}

}  // namespace

Loaded<std::vector<ValidationRun>> parse_validation_yaml(const std::string& text,
                                                         const std::string& file) {
  Loaded<std::vector<ValidationRun>> out;
  Diagnostics& diags = out.diagnostics;
  YAML::Node root;
  if (!detail::parse_yaml_text(text, file, root, diags)) return out;
  if (!root.IsMap()) {
    diags.error(file, 1, 1, "", "expected a map with a 'runs' list");
    return out;
  }
  MapReader top(root, file, "", diags);
  top.child("meta");  // free-form description, not read
  const YAML::Node runs = top.child("runs");
  top.finish();
  if (!runs.IsDefined()) {
    top.missing("runs", "a list of runs");
    return out;
  }
  if (!runs.IsSequence()) {
    top.error_at(runs, "runs", "expected a list of runs");
    return out;
  }
  std::vector<ValidationRun> result;
  for (size_t i = 0; i < runs.size(); ++i) {
    const YAML::Node rn = runs[i];
    const std::string prefix = "runs[" + std::to_string(i) + "].";
    if (!rn.IsMap()) {
      const detail::Position p = detail::position_of(rn);
      diags.error(file, p.line, p.column, "runs[" + std::to_string(i) + "]", "expected a map");
      continue;
    }
    if (detail::is_published_run(rn)) {
      if (std::optional<ValidationRun> run = detail::read_published_run(rn, file, prefix, diags))
        result.push_back(std::move(*run));
      continue;
    }
    const size_t errors_before = diags.items().size();
    ValidationRun run;
    run.line = detail::position_of(rn).line;
    MapReader r(rn, file, prefix, diags);
    r.text("id", run.id, true);
    r.text("source", run.source, false);
    r.text("assumptions", run.assumptions, false);
    r.boolean("calibration", run.calibration, false);
    r.child("notes");  // free-form
    const bool model_ok = read_model(r, prefix, run);
    const bool cluster_ok = read_cluster(r, prefix, run);
    r.integer("nodes", run.scenario.nodes, false, kCount);
    r.integer("gpus", run.scenario.gpus, false, kCount);
    r.integer64("gbs", run.scenario.training.gbs, true, {0, true, 1e12});
    r.integer("seq_len", run.scenario.training.seq_len, false, {0, true, 1e8});
    r.enumeration("precision", run.scenario.training.precision, parse_precision, "bf16, fp16, fp32, fp8");
    r.text("family", run.family, false);
    {
      std::string fw;
      if (r.text("framework", fw, false) && !fw.empty()) {
        Loaded<FrameworkSpec> f = load_framework(fw);
        if (f.value) {
          run.scenario.training.framework = *f.value;
        } else {
          const detail::Position p = detail::position_of(rn["framework"]);
          for (const Diagnostic& d : f.diagnostics.items())
            diags.error(file, p.line, p.column, prefix + "framework", d.message, d.hint);
        }
      }
    }
    {
      Attention at = Attention::Fused;
      if (r.has("attention") && r.enumeration("attention", at, parse_attention, "eager, fused, flash"))
        run.scenario.training.attention = at;
    }
    r.enumeration("optimizer", run.scenario.training.optimizer, parse_optimizer, "adam, sgd");
    // What the run's implementation does beyond its framework preset: any key of a framework
    // file, over the preset's; `backward_prefetch` is the runs files' name of
    // zero3_backward_prefetch.
    detail::read_framework_overrides(r, run.scenario.training.framework);
    r.enumeration("backward_prefetch", run.scenario.training.framework.zero3_backward_prefetch,
                  parse_zero3_backward_prefetch, "pre, post, none");
    r.boolean("offload_params", run.scenario.training.offload_params, false);
    r.boolean("offload_optimizer", run.scenario.training.offload_optimizer, false);
    const bool layout_ok = read_layout(r, prefix, run.layout);
    read_measured(r, run);
    r.finish();
    const bool run_ok = !diags.has_errors_since(errors_before);
    if (!run_ok || !model_ok || !cluster_ok || !layout_ok) continue;
    if (run.family.empty()) run.family = run.id.substr(0, run.id.find('-'));
    // GPUs default to the layout's product, nodes to what holds them.
    const int gpn = std::max(1, run.scenario.cluster.gpus_per_node);
    if (run.scenario.gpus == 0 && run.scenario.nodes == 0) run.scenario.gpus = run.layout.gpus();
    if (run.scenario.nodes == 0) run.scenario.nodes = (run.scenario.gpus + gpn - 1) / gpn;
    if (auto err = check_layout(run.scenario, run.layout)) {
      const detail::Position p = detail::position_of(rn["layout"]);
      diags.error(file, p.line, p.column, prefix + "layout", "invalid layout: " + *err);
      continue;
    }
    result.push_back(std::move(run));
  }
  detail::name_published_families(result);
  if (!diags.has_errors() && result.empty() && runs.size() > 0)
    diags.error(file, detail::position_of(runs).line, 1, "runs", "no run could be predicted (each is named above)");
  if (!diags.has_errors()) out.value = std::move(result);
  return out;
}

ValidationReport validate_runs(const std::vector<ValidationRun>& runs, const std::string& file) {
  ValidationReport rep;
  rep.file = file;
  for (const ValidationRun& run : runs) {
    ValidationResult res;
    res.run = run;
    res.estimate = estimate(run.scenario, run.layout);
    const Estimate& e = res.estimate;
    switch (run.measure) {
      case Measure::IterationTime: res.predicted = e.step_time_s; break;
      case Measure::ModelTflops: res.predicted = e.model_tflops_per_gpu; break;
      case Measure::HardwareTflops:  // in the run's count: the FLOPs executed, or Megatron's Eq. 3
        res.predicted = run.tflops_count_full_recompute ? e.eq3_tflops_per_gpu : e.hardware_tflops_per_gpu;
        break;
      case Measure::SamplesPerS: res.predicted = e.samples_per_s; break;
      case Measure::TokensPerS: res.predicted = e.tokens_per_s; break;
    }
    res.error_pct = (res.predicted - run.measured) / run.measured * 100.0;
    summarise(rep.all, res);
    summarise(run.calibration ? rep.calibration : rep.held_out, res);
    auto fam = std::find_if(rep.families.begin(), rep.families.end(),
                            [&](const FamilySummary& f) { return f.family == run.family; });
    if (fam == rep.families.end()) {
      rep.families.push_back({run.family, {}});
      fam = rep.families.end() - 1;
    }
    summarise(fam->summary, res);
    if (run.calibration) {
      const std::string& name = run.scenario.training.framework.name;
      auto fw = std::find_if(rep.frameworks.begin(), rep.frameworks.end(),
                             [&](const FrameworkSummary& f) { return f.framework == name; });
      if (fw == rep.frameworks.end()) {
        rep.frameworks.push_back({name, {}, 0.0});
        fw = rep.frameworks.end() - 1;
      }
      const double e = step_error_pct(res);
      fw->step_rms_pct += e * e;  // the sum of squares until the loop ends
      summarise(fw->summary, res);
    }
    rep.results.push_back(std::move(res));
  }
  for (FrameworkSummary& f : rep.frameworks) f.step_rms_pct = std::sqrt(f.step_rms_pct / f.summary.runs);
  return rep;
}

Loaded<ValidationReport> validate_file(const std::string& path) {
  Loaded<ValidationReport> out;
  std::string text, error;
  if (!detail::read_text_file(path, text, error)) {
    out.diagnostics.error(path, 0, 0, "", "cannot read the file: " + error);
    return out;
  }
  Loaded<std::vector<ValidationRun>> runs = parse_validation_yaml(text, path);
  out.diagnostics = runs.diagnostics;
  if (!runs.ok()) return out;
  out.value = validate_runs(*runs.value, path);
  return out;
}

Loaded<ValidationReport> validate_files(const std::vector<std::string>& paths) {
  Loaded<ValidationReport> out;
  std::vector<ValidationRun> all;
  std::string names;
  for (const std::string& path : paths) {
    std::string text, error;
    names += (names.empty() ? "" : ", ") + path;
    if (!detail::read_text_file(path, text, error)) {
      out.diagnostics.error(path, 0, 0, "", "cannot read the file: " + error);
      continue;
    }
    Loaded<std::vector<ValidationRun>> runs = parse_validation_yaml(text, path);
    out.diagnostics.append(runs.diagnostics);
    if (runs.ok()) all.insert(all.end(), runs.value->begin(), runs.value->end());
  }
  if (out.diagnostics.has_errors()) return out;
  out.value = validate_runs(all, names);
  return out;
}

std::string format_validation_report(const ValidationReport& rep) {
  size_t width = 3;
  for (const ValidationResult& r : rep.results) width = std::max(width, r.run.id.size());
  const int w = int(std::min<size_t>(width, 80));
  std::string s;
  char buf[512];
  std::snprintf(buf, sizeof buf, "%-*s %-5s %-24s %12s %12s %8s\n", w, "run", "set", "convention",
                "predicted", "measured", "error");
  s += buf;
  for (const ValidationResult& r : rep.results) {
    std::snprintf(buf, sizeof buf, "%-*s %-5s %-24s %12.4g %12.4g %+7.1f%%%s\n", w, r.run.id.c_str(),
                  r.run.calibration ? "calib" : "held", to_string(r.run.measure), r.predicted,
                  r.run.measured, r.error_pct, r.estimate.fits ? "" : "  (does not fit)");
    s += buf;
  }
  auto line = [&](const char* name, const ValidationSummary& v) {
    if (v.runs == 0) return;
    std::snprintf(buf, sizeof buf, "%s: %d runs, MAPE %.2f%%, max %.2f%% (%s)\n", name, v.runs,
                  v.mape_pct, v.max_abs_pct, v.worst_id.c_str());
    s += buf;
  };
  for (const FamilySummary& f : rep.families) {
    const std::string name = "  family " + f.family;
    line(name.c_str(), f.summary);
  }
  for (const FrameworkSummary& f : rep.frameworks) {
    std::snprintf(buf, sizeof buf,
                  "  framework %s (calibration): %d runs, MAPE %.2f%%, max %.2f%%, step time RMS %.1f%%\n",
                  f.framework.c_str(), f.summary.runs, f.summary.mape_pct, f.summary.max_abs_pct, f.step_rms_pct);
    s += buf;
  }
  line("calibration", rep.calibration);
  line("held out", rep.held_out);
  line("all", rep.all);
  // What was taken for the runs read from the published format, where their sources are silent.
  bool heading = false;
  for (const ValidationResult& r : rep.results) {
    if (!r.run.published) continue;
    if (!heading) s += "taken for the runs in the published format:\n", heading = true;
    s += "  " + r.run.id + ": " + r.run.assumptions + "\n";
  }
  return s;
}

}  // namespace capplan
