// Calibration of a cluster's global efficiencies from measured runs (launch/calibrate.h).
// The cost model is run again on each run's own plan (RUNDIR/plan.yaml) with trial efficiencies;
// Levenberg-Marquardt on the logarithms of the efficiencies minimises the sum of squared
// weighted term residuals (predicted - measured) / (measured + floor) over every measured term
// of every run. An efficiency may come out above 1 (the runs went faster than the spec's rates,
// e.g. a peak probed while the machine was busy); the cluster file, whose efficiencies are at
// most 1, then gets the rate scaled by it and an efficiency of 1.
#include "launch/calibrate.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <sstream>

#include "io/metrics_schema.h"
#include "planner/cost_model.h"
#include "planner/json.h"

namespace capplan::rt {
namespace {

struct Loaded1 {
  std::string dir;
  Plan plan;
  MeasuredRun measured;
  std::string hosts;  // the run's hosts, sorted, comma-separated
};

// The four efficiencies as a vector, and back; unset ones start the fit at `guess`.
constexpr const char* kNames[4] = {"gemm", "memory", "intra_node", "inter_node"};
std::optional<double> EfficiencyOverrides::*const kFields[4] = {
    &EfficiencyOverrides::gemm, &EfficiencyOverrides::memory, &EfficiencyOverrides::intra_node,
    &EfficiencyOverrides::inter_node};
constexpr double kLow = 1e-3, kHigh = 10.0;  // the fit's bounds

std::string read_text(const std::string& path, bool* ok) {
  std::ifstream in(path, std::ios::binary);
  *ok = bool(in);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string layout_text(const Layout& l) {
  std::ostringstream s;
  s << "dp " << l.dp << " tp " << l.tp << " pp " << l.pp;
  if (l.vp > 1) s << " vp " << l.vp;
  if (l.pp > 1) s << " " << to_string(l.schedule);
  if (l.zero > 0) s << " zero " << l.zero;
  if (l.recompute != Recompute::None) s << " recompute " << to_string(l.recompute);
  if (l.offload) s << " offload";
  if (l.sp) s << " sp";
  return s.str();
}

// The measured terms of a run (compare_terms' names and values), finite ones only.
std::vector<std::pair<std::string, double>> measured_terms(const MeasuredRun& m) {
  RunRecord rec;
  rec.measured = m;
  std::vector<std::pair<std::string, double>> out;
  static const std::set<std::string> terms = {"compute", "recompute", "bubble", "tp_comm",
                                              "pp_comm", "dp_comm", "optimizer", "offload"};
  for (const TermRow& row : compare_terms(rec))
    if (terms.count(row.term) && std::isfinite(row.measured_s)) out.emplace_back(row.term, row.measured_s);
  return out;
}

double term_of(const TimeBreakdown& b, const std::string& t) {
  if (t == "compute") return b.compute;
  if (t == "recompute") return b.recompute;
  if (t == "bubble") return b.bubble;
  if (t == "tp_comm") return b.tp_comm;
  if (t == "pp_comm") return b.pp_comm;
  if (t == "dp_comm") return b.dp_comm;
  if (t == "optimizer") return b.optimizer;
  return b.offload;
}

Estimate predict(const Loaded1& run, const EfficiencyOverrides& e) {
  Scenario s = run.plan.scenario;
  s.cluster.efficiency = e;
  return estimate(s, run.plan.layout);
}

// Weighted residuals of every measured term of every run at efficiencies e.
std::vector<double> residuals(const std::vector<Loaded1>& runs, const EfficiencyOverrides& e) {
  std::vector<double> r;
  for (const Loaded1& run : runs) {
    const Estimate est = predict(run, e);
    for (const auto& [t, meas] : measured_terms(run.measured))
      r.push_back((term_of(est.breakdown_s, t) - meas) / (meas + kCalibrationFloorS));
  }
  return r;
}

double sum_squares(const std::vector<double>& r) {
  double s = 0;
  for (double x : r) s += x * x;
  return s;
}

double rms(const std::vector<double>& r) { return r.empty() ? 0.0 : std::sqrt(sum_squares(r) / double(r.size())); }

// Solves A x = b (n <= 4) by Gaussian elimination with partial pivoting; false when singular.
bool solve(std::vector<std::vector<double>> a, std::vector<double> b, std::vector<double>& x) {
  const size_t n = b.size();
  for (size_t c = 0; c < n; ++c) {
    size_t p = c;
    for (size_t i = c + 1; i < n; ++i)
      if (std::abs(a[i][c]) > std::abs(a[p][c])) p = i;
    if (std::abs(a[p][c]) < 1e-300) return false;
    std::swap(a[p], a[c]);
    std::swap(b[p], b[c]);
    for (size_t i = c + 1; i < n; ++i) {
      const double f = a[i][c] / a[c][c];
      for (size_t j = c; j < n; ++j) a[i][j] -= f * a[c][j];
      b[i] -= f * b[c];
    }
  }
  x.assign(n, 0);
  for (size_t i = n; i-- > 0;) {
    double s = b[i];
    for (size_t j = i + 1; j < n; ++j) s -= a[i][j] * x[j];
    x[i] = s / a[i][i];
  }
  return true;
}

std::optional<Loaded1> load_run(const std::string& dir, Diagnostics& d) {
  Loaded1 run;
  run.dir = dir;
  const std::string plan_file = dir + "/plan.yaml", record_file = dir + "/run.json",
                    metrics_file = dir + "/metrics.jsonl";
  bool ok = false;
  const std::string record = read_text(record_file, &ok);
  if (!ok) {
    d.error(record_file, 0, 0, "", "no run record: not a capplan run folder, or the run never started",
            "name folders written by capplan run --dir");
    return std::nullopt;
  }
  std::string why;
  const std::optional<Json> r = json_parse(record, &why);
  if (!r || !r->is_object()) {
    d.error(record_file, 0, 0, "", "corrupt run record: " + (why.empty() ? "not a JSON object" : why));
    return std::nullopt;
  }
  const std::string status = r->value("status", std::string());
  if (status != "succeeded") {
    const std::string reason = r->value("reason", std::string());
    d.error(record_file, 0, 0, "status",
            "the run " + (status.empty() ? std::string("has no status") : "is " + status) +
                (reason.empty() ? "" : " (" + reason + ")") + "; only succeeded runs are calibrated from",
            "leave this run out, or run it again");
    return std::nullopt;
  }
  Loaded<Plan> plan = load_plan(plan_file);
  if (!plan.ok()) {
    d.append(plan.diagnostics);
    if (!plan.diagnostics.has_errors()) d.error(plan_file, 0, 0, "", "cannot read the run's plan");
    return std::nullopt;
  }
  run.plan = *plan.value;
  if (!read_text(metrics_file, &ok).size() || !ok) {
    d.error(metrics_file, 0, 0, "", ok ? "empty: the run recorded no metrics" : "missing: the run's metrics are gone");
    return std::nullopt;
  }
  MetricsTail tail(metrics_file);
  std::vector<MetricsRecord> records = tail.read_new_records();
  run.measured = summarize_metrics(records);
  if (run.measured.steps == 0 || !std::isfinite(run.measured.step_time_s)) {
    d.error(metrics_file, 0, 0, "", "no step records: nothing was measured");
    return std::nullopt;
  }
  if (!run.measured.phase_s.count("compute")) {
    d.error(metrics_file, 0, 0, metrics_schema::kComputeS,
            "the step records do not time the terms apart (written by an older capplan-train)",
            "run it again with this capplan");
    return std::nullopt;
  }
  std::set<std::string> hosts;
  for (const MetricsRecord& m : records) {
    if (m.type != metrics_schema::kStart) continue;
    for (const auto& [k, v] : m.strings)
      if (k.rfind(std::string(metrics_schema::kRankHosts) + ".", 0) == 0) hosts.insert(v);
  }
  for (const std::string& h : hosts) run.hosts += (run.hosts.empty() ? "" : ",") + h;
  return run;
}

}  // namespace

namespace {

// One cluster: the same cluster spec (its reference and GPU) on the same hosts.
void check_one_cluster(const std::vector<Loaded1>& runs, Diagnostics& d) {
  const Loaded1& first = runs.front();
  for (const Loaded1& r : runs) {
    const ClusterSpec& a = first.plan.scenario.cluster;
    const ClusterSpec& b = r.plan.scenario.cluster;
    std::string diff;
    if (r.plan.cluster_ref != first.plan.cluster_ref)
      diff = "cluster " + r.plan.cluster_ref + ", the first run's " + first.plan.cluster_ref;
    else if (b.gpu.name != a.gpu.name)
      diff = "device " + b.gpu.name + ", the first run's " + a.gpu.name;
    else if (r.hosts != first.hosts)
      diff = "hosts " + (r.hosts.empty() ? std::string("(not recorded)") : r.hosts) + ", the first run's " +
             (first.hosts.empty() ? std::string("(not recorded)") : first.hosts);
    if (!diff.empty())
      d.error(r.dir + "/plan.yaml", 0, 0, "cluster",
              "runs of different clusters: this run has " + diff + " (" + first.dir + ")",
              "calibrate each cluster from its own runs");
  }
}

// Levenberg-Marquardt over the logs of the efficiencies some measured term depends on; sets
// c.after, c.fitted and c.at_bound, and returns the residuals at the fit.
std::vector<double> fit_efficiencies(const std::vector<Loaded1>& runs, Calibration& c) {
  const double guess[4] = {0.7, 0.8, 0.77, 0.85};
  double u[4];  // log of each efficiency
  for (int i = 0; i < 4; ++i) u[i] = std::log((c.before.*kFields[i]).value_or(guess[i]));
  auto at = [&](const double* v) {
    EfficiencyOverrides e = c.before;
    for (int i = 0; i < 4; ++i) e.*kFields[i] = std::clamp(std::exp(v[i]), kLow, kHigh);
    return e;
  };
  // The efficiencies some measured term depends on (a step of 1 % moves a residual). Steps and
  // differences go downwards: the start is often at the upper bound (a local machine's 1).
  std::vector<int> free;
  {
    const std::vector<double> r0 = residuals(runs, at(u));
    for (int i = 0; i < 4; ++i) {
      double v[4];
      std::copy(u, u + 4, v);
      v[i] -= 0.01;
      const std::vector<double> r1 = residuals(runs, at(v));
      double change = 0;
      for (size_t k = 0; k < r0.size(); ++k) change = std::max(change, std::abs(r1[k] - r0[k]));
      if (change > 1e-9) free.push_back(i);
    }
  }
  double lambda = 1e-3;
  std::vector<double> r = residuals(runs, at(u));
  for (int iter = 0; iter < 100 && !free.empty(); ++iter) {
    const size_t n = free.size();
    std::vector<std::vector<double>> jac(r.size(), std::vector<double>(n));
    for (size_t j = 0; j < n; ++j) {
      double v[4];
      std::copy(u, u + 4, v);
      const double h = -1e-4;
      v[free[j]] += h;
      const std::vector<double> r1 = residuals(runs, at(v));
      for (size_t k = 0; k < r.size(); ++k) jac[k][j] = (r1[k] - r[k]) / h;
    }
    std::vector<std::vector<double>> a(n, std::vector<double>(n, 0));
    std::vector<double> g(n, 0);
    for (size_t k = 0; k < r.size(); ++k)
      for (size_t i = 0; i < n; ++i) {
        g[i] -= jac[k][i] * r[k];
        for (size_t j = 0; j < n; ++j) a[i][j] += jac[k][i] * jac[k][j];
      }
    bool improved = false;
    for (int tries = 0; tries < 10 && !improved; ++tries) {
      auto damped = a;
      for (size_t i = 0; i < n; ++i) damped[i][i] += lambda * (a[i][i] + 1e-12);
      std::vector<double> step;
      if (!solve(damped, g, step)) break;
      double v[4];
      std::copy(u, u + 4, v);
      for (size_t i = 0; i < n; ++i)
        v[free[i]] = std::clamp(v[free[i]] + std::clamp(step[i], -1.0, 1.0), std::log(kLow), std::log(kHigh));
      const std::vector<double> r1 = residuals(runs, at(v));
      if (sum_squares(r1) < sum_squares(r)) {
        const double gain = sum_squares(r) - sum_squares(r1);
        std::copy(v, v + 4, u);
        r = r1;
        lambda = std::max(1e-7, lambda / 3);
        improved = true;
        if (gain < 1e-12 * (1 + sum_squares(r))) iter = 1000;
      } else {
        lambda *= 4;
      }
    }
    if (!improved) break;
  }
  c.after = c.before;
  for (int i : free) {
    c.after.*kFields[i] = std::clamp(std::exp(u[i]), kLow, kHigh);
    c.fitted.push_back(kNames[i]);
    const double e = *(c.after.*kFields[i]);
    if (e <= kLow * 1.0001 || e >= kHigh * 0.9999) c.at_bound.push_back(kNames[i]);
  }
  return r;
}

// Each run's terms before and after; returns the run with the most ranks.
const Loaded1& report_runs(const std::vector<Loaded1>& runs, Calibration& c) {
  const Loaded1& first = runs.front();
  const Loaded1* widest = &first;
  for (const Loaded1& run : runs) {
    CalibrationRun cr;
    cr.dir = run.dir;
    cr.layout = layout_text(run.plan.layout);
    const Estimate before = predict(run, c.before), after = predict(run, c.after);
    std::vector<double> rb, ra;
    for (const auto& [t, meas] : measured_terms(run.measured)) {
      CalibrationTerm term{t, meas, term_of(before.breakdown_s, t), term_of(after.breakdown_s, t)};
      rb.push_back((term.before_s - meas) / (meas + kCalibrationFloorS));
      ra.push_back((term.after_s - meas) / (meas + kCalibrationFloorS));
      cr.terms.push_back(term);
    }
    cr.before_rms = rms(rb);
    cr.after_rms = rms(ra);
    cr.measured_step_s = run.measured.step_time_s;
    cr.before_step_s = before.step_time_s;
    cr.after_step_s = after.step_time_s;
    c.runs.push_back(cr);
    if (run.plan.scenario.total_gpus() > widest->plan.scenario.total_gpus()) widest = &run;
  }
  return *widest;
}

// A cluster file holds efficiencies of at most 1 (planner/spec_io.cpp): a larger one scales
// the rate it applies to instead, which the cost model multiplies the same way.
void fold_efficiencies_above_one(Calibration& c) {
  EfficiencyOverrides& e = c.cluster.efficiency;
  GpuSpec& gpu = c.cluster.gpu;
  if (e.gemm && *e.gemm > 1) {
    for (double* peak : {&gpu.peak_tflops_fp16, &gpu.peak_tflops_bf16, &gpu.peak_tflops_fp32, &gpu.peak_tflops_fp8})
      *peak *= *e.gemm;
    c.folded.push_back("gemm");
    e.gemm = 1.0;
  }
  if (e.memory && *e.memory > 1) {
    gpu.memory_gbyte_per_s *= *e.memory;
    c.folded.push_back("memory");
    e.memory = 1.0;
  }
  if (e.intra_node && *e.intra_node > 1) {
    c.cluster.intra_node_gbyte_per_s *= *e.intra_node;
    c.folded.push_back("intra_node");
    e.intra_node = 1.0;
  }
  if (e.inter_node && *e.inter_node > 1) {
    c.cluster.inter_node_gbit_per_s *= *e.inter_node;
    c.folded.push_back("inter_node");
    e.inter_node = 1.0;
  }
}

}  // namespace

Loaded<Calibration> calibrate_runs(const std::vector<std::string>& run_dirs) {
  Loaded<Calibration> out;
  Diagnostics& d = out.diagnostics;
  if (run_dirs.empty()) {
    d.error("<command line>", 0, 0, "RUNDIR", "no run folders given", "name one or more capplan run folders");
    return out;
  }
  std::vector<Loaded1> runs;
  for (const std::string& dir : run_dirs)
    if (auto r = load_run(dir, d)) runs.push_back(std::move(*r));
  if (d.has_errors()) return out;
  check_one_cluster(runs, d);
  if (d.has_errors()) return out;

  Calibration& c = *(out.value = Calibration{});
  c.before = runs.front().plan.scenario.cluster.efficiency;
  const std::vector<double> r_before = residuals(runs, c.before);
  const std::vector<double> r = fit_efficiencies(runs, c);
  c.residuals = int(r.size());
  c.before_rms = rms(r_before);
  c.after_rms = rms(residuals(runs, c.after));
  const Loaded1* widest = &report_runs(runs, c);
  // The cluster of the run with the most ranks (a local machine's spec depends on how many
  // ranks share it), with the fit and what it was fitted on.
  c.cluster = widest->plan.scenario.cluster;
  c.cluster.efficiency = c.after;
  c.cluster.device_profile = nullptr;
  fold_efficiencies_above_one(c);
  std::ostringstream src;
  src << "calibrated by capplan calibrate from " << runs.size() << (runs.size() == 1 ? " run" : " runs") << " (";
  for (size_t i = 0; i < runs.size(); ++i) src << (i ? ", " : "") << runs[i].dir;
  src << "), " << c.residuals << " measured terms, residual rms " << c.before_rms << " -> " << c.after_rms;
  if (!c.cluster.source.empty()) src << "; " << c.cluster.source;
  c.cluster.source = src.str();
  return out;
}

std::string calibration_cluster_yaml(const Calibration& c) {
  std::ostringstream os;
  char buf[200];
  os << "# Calibrated by `capplan calibrate` from these runs' measured terms (least squares over\n"
        "# (predicted - measured) / (measured + "
     << kCalibrationFloorS * 1e3 << " ms) of every term of every run):\n";
  for (const CalibrationRun& r : c.runs) {
    std::snprintf(buf, sizeof buf, "#   %s (%s): residual rms %.3f -> %.3f\n", r.dir.c_str(), r.layout.c_str(),
                  r.before_rms, r.after_rms);
    os << buf;
  }
  os << "# Fitted:";
  for (const std::string& f : c.fitted) os << " " << f;
  if (c.fitted.empty()) os << " nothing (no measured term depends on an efficiency)";
  os << "; kept as they were: the others.\n";
  if (!c.at_bound.empty()) {
    os << "# At a bound of the fit (0.001 to 10):";
    for (const std::string& f : c.at_bound) os << " " << f;
    os << "\n";
  }
  if (!c.folded.empty()) {
    os << "# Above 1, so folded into the rate they scale (the efficiency written as 1):";
    for (const std::string& f : c.folded) os << " " << f;
    os << "\n";
  }
  os << cluster_to_yaml(c.cluster);
  return os.str();
}

std::string calibration_text(const Calibration& c) {
  std::ostringstream os;
  char buf[300];
  std::snprintf(buf, sizeof buf, "calibrated on %zu runs, %d measured terms; residual rms (weighted) %.3f -> %.3f\n",
                c.runs.size(), c.residuals, c.before_rms, c.after_rms);
  os << buf << "\nefficiency   before     after\n";
  for (int i = 0; i < 4; ++i) {
    const auto b = c.before.*kFields[i], a = c.after.*kFields[i];
    const bool fitted = std::find(c.fitted.begin(), c.fitted.end(), kNames[i]) != c.fitted.end();
    auto v = [](const std::optional<double>& x) {
      char s[32];
      if (x) std::snprintf(s, sizeof s, "%.4g", *x);
      else std::snprintf(s, sizeof s, "default");
      return std::string(s);
    };
    std::snprintf(buf, sizeof buf, "  %-10s %-10s %-10s%s\n", kNames[i], v(b).c_str(), v(a).c_str(),
                  fitted ? (std::find(c.at_bound.begin(), c.at_bound.end(), kNames[i]) != c.at_bound.end()
                                ? "  (fitted, at its bound)"
                                : "  (fitted)")
                         : "  (kept: no measured term depends on it)");
    os << buf;
    if (std::find(c.folded.begin(), c.folded.end(), kNames[i]) != c.folded.end())
      std::snprintf(buf, sizeof buf, "  %-10s above 1: the cluster file scales its rate by it instead\n", "");
    else
      buf[0] = '\0';
    os << buf;
  }
  os << "\nrun residuals (rms of (predicted - measured) / (measured + 2 ms) over its terms)\n";
  std::snprintf(buf, sizeof buf, "  %-34s %-30s %8s %8s   %10s %10s %10s\n", "run", "layout", "before", "after",
                "step meas", "pred before", "pred after");
  os << buf;
  for (const CalibrationRun& r : c.runs) {
    std::snprintf(buf, sizeof buf, "  %-34s %-30s %8.3f %8.3f   %8.1f ms %8.1f ms %8.1f ms\n", r.dir.c_str(),
                  r.layout.c_str(), r.before_rms, r.after_rms, r.measured_step_s * 1e3, r.before_step_s * 1e3,
                  r.after_step_s * 1e3);
    os << buf;
  }
  return os.str();
}

}  // namespace capplan::rt
