// `capplan-train report`: summary and bottleneck findings from a metrics JSON-lines file.
// The rules follow the spirit of SageMaker Debugger's built-in rules (docs.aws.amazon.com/sagemaker,
// "List of Debugger built-in rules"): the profiler rules Dataloader / CPUBottleneck
// (data_share_max) and LowGPUUtilization (here CPU, cpu_util_min), and the rules LossNotDecreasing
// and ExplodingTensor (NaN / infinite values; here NonFiniteLoss on the loss only). The
// communication rule, which Debugger lacks, compares DP communication with forward + backward time.
// Thresholds are ours (ReportRules), not Debugger's defaults.
#include "io/report.h"

#include "io/metrics_schema.h"
#include "planner/format.h"
#include "planner/flags.h"
#include "planner/json.h"
#include "planner/limits.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <limits>
#include <sstream>

#include "io/metrics.h"

namespace capplan::rt {

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

std::string pct(double share) { return std::isfinite(share) ? fmt_fixed(100.0 * share, 1) + "%" : "n/a"; }
std::string num(double v) { return std::isnan(v) ? "NaN" : fmt_general(v, 6); }

struct Step {
  int64_t step = 0;
  double loss = 0, tokens_per_s = 0, step_time_s = 0, mfu = kNaN;
  double forward_s = 0, backward_s = 0, optimizer_s = 0, dp_comm_s = 0, data_s = 0;
  double gemm_s = kNaN;  // absent in files written before it was recorded
  double split_wait_s = kNaN;  // only with the batch split over threads
};

double mean_of(const std::vector<double>& v) {
  if (v.empty()) return kNaN;
  double s = 0;
  for (double x : v) s += x;
  return s / double(v.size());
}

}  // namespace

namespace {

// The records of a metrics file into the summary, the steps (a resumed run's start record drops
// the steps it redid) and the CPU samples; lines that are not JSON objects are warnings.
void read_records(const std::vector<std::string>& lines, Diagnostics* diags, const std::string& file,
                  RunSummary& s, std::vector<Step>& steps, std::vector<double>& cpu) {
  for (size_t i = 0; i < lines.size(); ++i) {
    const std::string& line = lines[i];
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    std::string err;
    const std::optional<Json> parsed = json_parse(line, &err);
    if (!parsed || !parsed->is_object()) {
      diags->warning(file, int(i + 1), 0, "",
                     "not a JSON object (" + (err.empty() ? std::string("not an object") : err) +
                         "); line skipped");
      continue;
    }
    namespace k = metrics_schema;
    const Json& v = *parsed;
    const std::string type = json_string(v, k::kType);
    if (type == k::kStart) {
      ++s.runs;
      const double resumed = json_double(v, k::kResumedFromStep, -1);
      if (resumed >= 0)  // steps after the checkpoint were redone by this run
        std::erase_if(steps, [&](const Step& st) { return double(st.step) > resumed; });
      s.status = "missing";
      s.reason.clear();
      s.model = json_string(v, k::kModel);
      s.world = int(json_int(v, k::kWorld, 0, 0, 1 << 24));
      s.dp = int(json_int(v, k::kDp, 0, 0, 1 << 24));
      s.peak_flops_source = json_string(v, k::kPeakFlopsSource, s.peak_flops_source);
    } else if (type == k::kStep) {
      Step st;
      st.step = json_int(v, k::kStepNumber, int64_t(steps.size()) + 1);
      st.loss = json_double(v, k::kLoss, kNaN);
      st.tokens_per_s = json_double(v, k::kTokensPerS, 0);
      st.step_time_s = json_double(v, k::kStepTimeS, 0);
      st.mfu = json_double(v, k::kMfu, kNaN);
      st.forward_s = json_double(v, k::kForwardS, 0);
      st.backward_s = json_double(v, k::kBackwardS, 0);
      st.optimizer_s = json_double(v, k::kOptimizerS, 0);
      st.dp_comm_s = json_double(v, k::kDpCommS, 0);
      st.data_s = json_double(v, k::kDataS, 0);
      st.gemm_s = json_double(v, k::kGemmS, kNaN);
      st.split_wait_s = json_double(v, k::kSplitWaitS, kNaN);
      if (s.peak_flops_source.empty()) s.peak_flops_source = json_string(v, k::kPeakFlopsSource);
      steps.push_back(st);
    } else if (type == k::kSystem) {
      ++s.system_samples;
      double u = json_double(v, k::kCpuUtil, kNaN);
      if (std::isfinite(u)) cpu.push_back(u);
      s.peak_rss_bytes = std::max(s.peak_rss_bytes, json_int(v, k::kRssBytes, 0, 0));
    } else if (type == k::kSummary) {
      s.status = json_string(v, k::kStatus, "unknown");
      s.reason = json_string(v, k::kReason);
    } else if (type == k::kPlacement) {
      // rank -> (host, dp, pp, tp), written by the trainer after the start record
    } else {
      diags->warning(file, int(i + 1), 0, "type",
                     "unknown record type '" + type + "'; expected start, step, system or summary");
    }
  }

}

// Time shares of the steps after the first (which carries one-off costs: thread start-up, page
// faults), for the summary and the rules.
struct StepTotals {
  size_t from = 0;  // first step counted
  double forward = 0, backward = 0, optimizer = 0, dp_comm = 0, data = 0, gemm = 0, split_wait = 0, total = 0;
};

StepTotals summarize_steps(const std::vector<Step>& steps, RunSummary& s) {
  s.first_step = steps.front().step;
  s.last_step = steps.back().step;
  s.loss_first = steps.front().loss;
  s.loss_last = steps.back().loss;
  s.loss_min = kNaN;
  for (const auto& st : steps)
    if (std::isfinite(st.loss) && !(st.loss >= s.loss_min)) s.loss_min = st.loss;
  // The first step carries one-off costs (thread start-up, page faults): leave it out of means.
  const size_t from = steps.size() > 1 ? 1 : 0;
  std::vector<double> tps, t, mfu;
  double f = 0, b = 0, o = 0, c = 0, d = 0, g = 0, w = 0, total = 0;
  bool have_gemm = true, have_wait = true;
  for (size_t i = from; i < steps.size(); ++i) {
    const auto& st = steps[i];
    tps.push_back(st.tokens_per_s);
    t.push_back(st.step_time_s);
    if (std::isfinite(st.mfu)) mfu.push_back(st.mfu);
    f += st.forward_s;
    b += st.backward_s;
    o += st.optimizer_s;
    c += st.dp_comm_s;
    d += st.data_s;
    g += st.gemm_s;
    have_gemm = have_gemm && std::isfinite(st.gemm_s);
    w += st.split_wait_s;
    have_wait = have_wait && std::isfinite(st.split_wait_s);
    total += st.step_time_s;
  }
  s.mean_tokens_per_s = mean_of(tps);
  s.mean_step_time_s = mean_of(t);
  s.mean_mfu = mean_of(mfu);
  if (total > 0) {
    s.share_forward = f / total;
    s.share_backward = b / total;
    s.share_optimizer = o / total;
    s.share_dp_comm = c / total;
    s.share_data = d / total;
    s.share_other = std::max(0.0, 1.0 - (f + b + o + c + d) / total);
    s.share_gemm = have_gemm ? g / total : kNaN;
    s.share_split_wait = have_wait ? w / total : kNaN;
  }
  return {from, f, b, o, c, d, g, w, total};
}

// The rules over the steps: NonFiniteLoss, DataLoadingDominates, CommunicationOutweighsCompute,
// LossNotDecreasing.
void step_findings(const std::vector<Step>& steps, const StepTotals& t, const RunSummary& s, const ReportRules& rules,
                   Report& rep) {
  const size_t from = t.from;
  const double f = t.forward, b = t.backward, c = t.dp_comm, d = t.data, total = t.total;
  // NonFiniteLoss
  int64_t bad = 0, first_bad = -1;
  double first_bad_value = 0;
  for (const auto& st : steps)
    if (!std::isfinite(st.loss)) {
      if (bad++ == 0) {
        first_bad = st.step;
        first_bad_value = st.loss;
      }
    }
  if (bad > 0)
    rep.findings.push_back(
        {"NonFiniteLoss", "error",
         "loss is " + num(first_bad_value) + " at step " + std::to_string(first_bad) + "; " +
             std::to_string(bad) + " of " + std::to_string(steps.size()) +
             " steps have a non-finite loss",
         "lower the learning rate or lengthen warm-up, keep gradient clipping on, and check the "
         "data for out-of-range tokens; resume from the last checkpoint before the divergence"});

  // DataLoadingDominates
  if (total > 0 && s.share_data > rules.data_share_max)
    rep.findings.push_back(
        {"DataLoadingDominates", "warning",
         "data loading takes " + pct(s.share_data) + " of step time (" +
             fmt_general(d / double(steps.size() - from), 4) + " s of " +
             fmt_general(s.mean_step_time_s, 4) + " s per step; threshold " +
             pct(rules.data_share_max) + ")",
         "put the shards on local or faster storage, keep them pre-tokenised, and overlap "
         "loading with compute (prefetch the next batch)"});

  // CommunicationOutweighsCompute
  const double compute = f + b;
  if (c > 0 && c > rules.comm_over_compute_max * compute)
    rep.findings.push_back(
        {"CommunicationOutweighsCompute", "warning",
         "DP communication " + fmt_general(c, 4) + " s vs forward + backward " +
             fmt_general(compute, 4) + " s over " + std::to_string(steps.size() - from) +
             " steps (ratio " + fmt_fixed(compute > 0 ? c / compute : kNaN, 2) + ", threshold " +
             fmt_fixed(rules.comm_over_compute_max, 2) + ")",
         "do more work per all-reduce (a larger mbs or more gradient accumulation: a larger gbs "
         "per dp rank), use fewer dp ranks per node, or a faster interconnect"});

  // LossNotDecreasing
  if (int64_t(steps.size()) >= rules.min_steps_for_loss_rule && bad == 0) {
    const size_t w = size_t(std::max<int64_t>(1, std::min<int64_t>(rules.loss_window,
                                                                    int64_t(steps.size()) / 2)));
    double head = 0, tail = 0;
    for (size_t i = 0; i < w; ++i) {
      head += steps[i].loss;
      tail += steps[steps.size() - 1 - i].loss;
    }
    head /= double(w);
    tail /= double(w);
    if (!(tail < head * (1.0 - rules.loss_decrease_min)))
      rep.findings.push_back(
          {"LossNotDecreasing", "warning",
           "mean loss of the last " + std::to_string(w) + " steps is " + fmt_general(tail, 5) +
               ", of the first " + std::to_string(w) + " steps " + fmt_general(head, 5) +
               " (needs a decrease of at least " + pct(rules.loss_decrease_min) + ")",
           "check the learning rate (too low, or warm-up too long), that the data is shuffled "
           "and that the targets are the inputs shifted by one token"});
  }
}

}  // namespace

Report report_analyze_lines(const std::vector<std::string>& lines, const ReportRules& rules,
                            Diagnostics* diags, const std::string& file) {
  Report rep;
  RunSummary& s = rep.summary;
  s.status = "missing";
  s.mean_mfu = kNaN;
  s.mean_cpu_util = kNaN;
  s.share_split_wait = kNaN;
  std::vector<Step> steps;
  std::vector<double> cpu;
  read_records(lines, diags, file, s, steps, cpu);
  s.steps = int64_t(steps.size());
  s.mean_cpu_util = mean_of(cpu);
  if (!steps.empty()) step_findings(steps, summarize_steps(steps, s), s, rules, rep);

  // LowCPUUtilization
  if (!cpu.empty() && s.mean_cpu_util < rules.cpu_util_min)
    rep.findings.push_back(
        {"LowCPUUtilization", "warning",
         "mean CPU utilisation " + pct(s.mean_cpu_util) + " of the expected cores over " +
             std::to_string(cpu.size()) + " samples (threshold " + pct(rules.cpu_util_min) + ")",
         "the ranks wait more than they compute: check --threads against the cores per rank, "
         "look for oversubscription (ranks x threads > cores), and for time spent waiting on data "
         "or communication"});

  // RunFailed
  if (s.status != "ok")
    rep.findings.push_back(
        {"RunFailed", "error",
         s.status == "missing" ? "no summary record: the run was killed or is still running"
                               : "status " + s.status + (s.reason.empty() ? "" : ": " + s.reason),
         "relaunch with --resume auto to continue from the newest good checkpoint"});
  return rep;
}

Loaded<Report> report_analyze_file(const std::string& path, const ReportRules& rules) {
  Loaded<Report> out;
  // Not capped at the input limit: a long run's metrics grow past 64 MiB and are read line by
  // line; but a FIFO or a device would block or never end.
  if (std::string why; !check_input_file(path, why)) {
    out.diagnostics.error(path, 0, 0, "", "cannot open: " + why);
    return out;
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    out.diagnostics.error(path, 0, 0, "", std::string("cannot open: ") + std::strerror(errno));
    return out;
  }
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  Report r = report_analyze_lines(lines, rules, &out.diagnostics, path);
  const int64_t bad = int64_t(out.diagnostics.items().size());
  if (int64_t(lines.size()) == 0 || (r.summary.steps == 0 && r.summary.system_samples == 0 &&
                                     r.summary.status == "missing")) {
    out.diagnostics.error(path, 0, 0, "",
                          lines.empty() ? "empty metrics file"
                                        : "no metrics records (" + std::to_string(bad) +
                                              " unreadable lines)",
                          "pass the file written by capplan-train --metrics");
    return out;
  }
  out.value = std::move(r);
  return out;
}

std::string report_to_text(const Report& rep) {
  const RunSummary& s = rep.summary;
  std::ostringstream os;
  os << "run: " << (s.model.empty() ? "(model unknown)" : s.model);
  if (s.world > 0) os << ", world " << s.world << " (dp " << s.dp << ")";
  if (s.runs > 1) os << ", " << s.runs << " runs (resumed " << s.runs - 1 << "x)";
  os << ", status " << s.status << (s.reason.empty() ? "" : " (" + s.reason + ")") << "\n";
  os << "steps: " << s.steps;
  if (s.steps > 0) os << " (" << s.first_step << ".." << s.last_step << ")";
  os << "\n";
  if (s.steps > 0) {
    os << "loss: first " << num(s.loss_first) << ", last " << num(s.loss_last) << ", min "
       << num(s.loss_min) << "\n";
    os << "throughput: " << fmt_fixed(s.mean_tokens_per_s, 1) << " tokens/s, step "
       << fmt_general(s.mean_step_time_s, 4) << " s, MFU "
       << (std::isfinite(s.mean_mfu) ? pct(s.mean_mfu) : std::string("unknown"))
       << " (peak: " << (s.peak_flops_source.empty() ? "unknown" : s.peak_flops_source) << ")\n";
    os << "phases: forward " << pct(s.share_forward) << ", backward " << pct(s.share_backward)
       << ", optimizer " << pct(s.share_optimizer) << ", dp_comm " << pct(s.share_dp_comm)
       << ", data " << pct(s.share_data) << ", other " << pct(s.share_other) << "\n";
    if (std::isfinite(s.share_gemm))
      os << "GEMMs: " << pct(s.share_gemm) << " of the step time (inside forward and backward)\n";
    if (std::isfinite(s.share_split_wait))
      os << "threads: " << pct(s.share_split_wait)
         << " of the step waiting for each other at the end of the batch split's parts\n";
  }
  os << "system: " << s.system_samples << " samples";
  if (s.system_samples > 0)
    os << ", mean CPU utilisation " << pct(s.mean_cpu_util) << ", peak RSS "
       << fmt_fixed(double(s.peak_rss_bytes) / (1024.0 * 1024.0), 1) << " MiB";
  os << "\n";
  if (rep.findings.empty()) {
    os << "findings: none\n";
  } else {
    os << "findings: " << rep.findings.size() << "\n";
    for (const auto& f : rep.findings) {
      os << "  [" << f.severity << "] " << f.rule << ": " << f.evidence << "\n";
      os << "      advice: " << f.advice << "\n";
    }
  }
  return os.str();
}

std::string report_to_json(const Report& rep) {
  const RunSummary& s = rep.summary;
  Json summary;
  summary["model"] = s.model;
  summary["world"] = s.world;
  summary["dp"] = s.dp;
  summary["runs"] = s.runs;
  summary["steps"] = s.steps;
  summary["first_step"] = s.first_step;
  summary["last_step"] = s.last_step;
  summary["loss_first"] = json_number(s.loss_first);
  summary["loss_last"] = json_number(s.loss_last);
  summary["loss_min"] = json_number(s.loss_min);
  summary["mean_tokens_per_s"] = json_number(s.mean_tokens_per_s);
  summary["mean_step_time_s"] = json_number(s.mean_step_time_s);
  summary["mean_mfu"] = json_number(s.mean_mfu);
  summary["peak_flops_source"] = s.peak_flops_source;
  summary["share_forward"] = json_number(s.share_forward);
  summary["share_backward"] = json_number(s.share_backward);
  summary["share_optimizer"] = json_number(s.share_optimizer);
  summary["share_dp_comm"] = json_number(s.share_dp_comm);
  summary["share_data"] = json_number(s.share_data);
  summary["share_other"] = json_number(s.share_other);
  summary["share_gemm"] = json_number(s.share_gemm);
  summary["system_samples"] = s.system_samples;
  summary["mean_cpu_util"] = json_number(s.mean_cpu_util);
  summary["peak_rss_bytes"] = s.peak_rss_bytes;
  summary["status"] = s.status;
  summary["reason"] = s.reason;
  Json findings = Json::array();
  for (const auto& f : rep.findings) {
    findings.push_back({{"rule", f.rule}, {"severity", f.severity}, {"evidence", f.evidence}, {"advice", f.advice}});
  }
  const Json j = {{"summary", std::move(summary)}, {"findings", std::move(findings)}};
  return json_dump(j, false) + "\n";
}

int report_main(int argc, char** argv) {
  const char* usage =
      "usage: capplan-train report FILE [--json]\n"
      "  Summary and bottleneck findings of a metrics file written by capplan-train --metrics.\n";
  Diagnostics diags;
  static const std::vector<FlagSpec> flags = {{"json", false, "print the report as one JSON object", ""}};
  const Args args = parse_args(argc, argv, flags, diags, 1);
  if (args.help()) {
    std::fputs(usage, stdout);
    return 0;
  }
  const bool as_json = args.has("json");
  const std::string file = args.positional().empty() ? std::string() : args.positional().front();
  if (file.empty()) diags.error("<command line>", 0, 0, "", "no metrics file given");
  if (diags.has_errors()) {
    std::fputs(diags.to_string().c_str(), stderr);
    std::fputs(usage, stderr);
    return 2;
  }
  Loaded<Report> r = report_analyze_file(file);
  std::fputs(r.diagnostics.to_string().c_str(), stderr);
  if (!r.ok()) return 2;
  std::string out = as_json ? report_to_json(*r.value) : report_to_text(*r.value);
  std::fputs(out.c_str(), stdout);
  return 0;
}

}  // namespace capplan::rt
