// The run record: what ran (exact command, the scaled spec, this machine) and predicted,
// simulated and measured step time per term and memory per rank, side by side, as RUNDIR/run.json
// (machine-readable; unknown figures are null) and RUNDIR/run.txt (for people).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <sstream>

#include "planner/format.h"
#include "planner/json_writer.h"
#include "planner/plan_io.h"
#include "launch/launch.h"

namespace capplan::rt {
namespace {

void write_model(JsonWriter& j, const std::string& key, const ModelSpec& m) {
  j.begin_object(key)
      .str("name", m.name)
      .integer("layers", m.layers)
      .integer("hidden", m.hidden)
      .integer("heads", m.heads)
      .integer("kv_heads", m.kv_heads_or_default())
      .integer("head_dim", m.head_dim_or_default())
      .integer("sliding_window", m.sliding_window)
      .integer("attention_chunk", m.attention_chunk)
      .integer("global_every", m.global_every)
      .integer("ffn_hidden", m.ffn_hidden_or_default())
      .integer("vocab", m.vocab)
      .integer("seq_len", m.seq_len)
      .str("ffn", to_string(m.ffn))
      .str("norm", to_string(m.norm))
      .str("position", to_string(m.position))
      .boolean("tied_embeddings", m.tied_embeddings)
      .end_object();
}

void write_layout(JsonWriter& j, const std::string& key, const Layout& l, int64_t gbs) {
  j.begin_object(key)
      .integer("dp", l.dp)
      .integer("tp", l.tp)
      .integer("pp", l.pp)
      .integer("vp", l.vp)
      .integer("cp", l.cp)
      .integer("ep", l.ep)
      .integer("mbs", l.mbs)
      .integer("gbs", gbs)
      .integer("num_microbatches", l.num_microbatches(gbs))
      .integer("zero", l.zero)
      .str("recompute", to_string(l.recompute))
      .boolean("offload", l.offload)
      .boolean("sp", l.sp)
      .str("order", l.order)
      .str("schedule", to_string(l.schedule))
      .end_object();
}

void write_breakdown(JsonWriter& j, const std::string& key, const TimeBreakdown& b) {
  j.begin_object(key)
      .num("compute", b.compute)
      .num("recompute", b.recompute)
      .num("bubble", b.bubble)
      .num("tp_comm", b.tp_comm)
      .num("pp_comm", b.pp_comm)
      .num("dp_comm", b.dp_comm)
      .num("ep_comm", b.ep_comm)
      .num("cp_comm", b.cp_comm)
      .num("optimizer", b.optimizer)
      .num("offload", b.offload)
      .end_object();
}

double finite_or(double v, double otherwise) { return std::isfinite(v) ? v : otherwise; }

double phase(const MeasuredRun& m, const std::string& name) {
  const auto it = m.phase_s.find(name);
  return it == m.phase_s.end() ? kUnknown : it->second;
}

double max_of(const std::vector<double>& v) {
  double best = kUnknown;
  for (double x : v) {
    if (std::isfinite(x) && (!std::isfinite(best) || x > best)) best = x;
  }
  return best;
}


void write_slurm(JsonWriter& j, const SlurmJob& s) {
  j.begin_object("slurm")
      .str("job_id", s.job_id)
      .str("partition", s.partition)
      .str("account", s.account)
      .str("time_limit", s.time_limit)
      .integer("nodes", s.nodes)
      .integer("requeue_limit", s.requeue_limit)
      .str("script", s.script)
      .str("output_file", s.output_file)
      .str("final_state", s.final_state)
      .str("final_reason", s.final_reason)
      .str("exit_code", s.exit_code)
      .integer("restarts", s.restarts);
  j.begin_array("states");
  for (const auto& c : s.states) {
    j.begin_object().str("time_utc", c.time_utc).str("state", c.state).str("reason", c.reason);
    j.integer("restarts", c.restarts).end_object();
  }
  j.end_array();
  j.begin_array("attempts");
  for (const auto& a : s.attempts) {
    j.begin_object()
        .integer("attempt", a.attempt)
        .str("started_utc", a.started_utc)
        .str("train_started_utc", a.train_started_utc)
        .str("train_ended_utc", a.train_ended_utc)
        .integer("exit_code", a.exit_code)
        .str("outcome", a.outcome)
        .integer("resumed_from_step", a.resumed_from_step)
        .integer("first_step", a.first_step)
        .integer("last_step", a.last_step)
        .num("step_time_sum_s", a.step_time_sum_s);
    j.begin_array("health_failures");
    for (const auto& h : a.health_failures) j.str("", h);
    j.end_array();
    j.end_object();
  }
  j.end_array();
  j.begin_array("drained");
  for (const auto& d : s.drained) j.str("", d);
  j.end_array();
  j.end_object();
}

void write_goodput(JsonWriter& j, const Goodput& g) {
  j.begin_object("goodput")
      .num("wall_s", g.wall_s)
      .num("productive_s", g.productive_s)
      .num("ratio", g.ratio)
      .integer("failures", g.failures)
      .num("predicted_ratio", g.predicted_ratio)
      .str("predicted_basis", g.predicted_basis);
  j.begin_array("per_failure");
  for (const auto& f : g.per_failure) {
    j.begin_object().integer("attempt", f.attempt).num("restart_s", f.restart_s).num("reload_s", f.reload_s);
    j.integer("recomputed_steps", f.recomputed_steps).num("recomputed_s", f.recomputed_s).end_object();
  }
  j.end_array();
  j.end_object();
}

}  // namespace

std::string utc_now() {
  const std::time_t t = std::time(nullptr);
  std::tm tm {};
  ::gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

const char* to_string(RunStatus s) {
  switch (s) {
    case RunStatus::NotStarted: return "not-started";
    case RunStatus::Running: return "running";
    case RunStatus::Succeeded: return "succeeded";
    case RunStatus::Failed: return "failed";
    case RunStatus::Cancelled: return "cancelled";
  }
  return "unknown";
}

std::vector<TermRow> compare_terms(const RunRecord& r) {
  const MeasuredRun& m = r.measured;
  // The trainer's compute term; records without it have only the walls of the two passes, which
  // hold every term timed inside them.
  const double fwd = phase(m, "forward"), bwd = phase(m, "backward");
  const bool terms_timed = std::isfinite(phase(m, "compute"));
  const double compute = terms_timed ? phase(m, "compute")
                         : std::isfinite(fwd) && std::isfinite(bwd) ? fwd + bwd
                                                                    : kUnknown;
  struct Term {
    const char* name;
    double TimeBreakdown::*field;
    double measured;
  };
  const Term terms[] = {
      {"compute", &TimeBreakdown::compute, compute},
      {"recompute", &TimeBreakdown::recompute, phase(m, "recompute")},
      // Older records carry only the bubble's share of the micro-batch phase; times the step it
      // slightly over-counts (the optimizer and DP tail have no bubble).
      {"bubble", &TimeBreakdown::bubble,
       std::isfinite(phase(m, "bubble")) ? phase(m, "bubble")
       : std::isfinite(m.bubble_fraction) ? m.bubble_fraction * m.step_time_s
                                          : kUnknown},
      {"tp_comm", &TimeBreakdown::tp_comm, phase(m, "tp_comm")},
      {"pp_comm", &TimeBreakdown::pp_comm, phase(m, "pp_comm")},
      {"dp_comm", &TimeBreakdown::dp_comm, phase(m, "dp_comm")},
      {"optimizer", &TimeBreakdown::optimizer, phase(m, "optimizer")},
      {"offload", &TimeBreakdown::offload, phase(m, "offload")},
      // Records of trainers that time the terms apart but have no MoE / cp counters: none spent.
      {"ep_comm", &TimeBreakdown::ep_comm, finite_or(phase(m, "ep_comm"), terms_timed ? 0.0 : kUnknown)},
      {"cp_comm", &TimeBreakdown::cp_comm, finite_or(phase(m, "cp_comm"), terms_timed ? 0.0 : kUnknown)},
  };
  std::vector<TermRow> rows;
  double parts = 0;
  for (const Term& t : terms) {
    TermRow row;
    row.term = t.name;
    if (r.predicted) row.predicted_s = r.predicted->breakdown_s.*(t.field);
    if (r.simulated) row.simulated_s = r.simulated->breakdown_s.*(t.field);
    row.measured_s = t.measured;
    parts += t.measured;
    rows.push_back(row);
  }
  // Times within compute, shown under it, not terms of their own: the backend's GEMMs beside the
  // model's, and the batch split's waiting. A full recompute reruns the layers' forward GEMMs
  // (selective recompute only the attention, which is no GEMM of the backend's).
  int under = 1;
  const bool recomputed_gemms = r.layout.recompute == Recompute::Full;
  if (const auto it = m.phase_s.find("gemm"); it != m.phase_s.end())
    rows.insert(rows.begin() + under++,
                {recomputed_gemms ? "gemm (within compute and recompute)" : "gemm (within compute)",
                 r.predicted ? r.predicted->gemm_s : kUnknown, kUnknown, it->second});
  if (const auto it = m.phase_s.find("split_wait"); it != m.phase_s.end())
    rows.insert(rows.begin() + under++, {"split wait (within compute)", kUnknown, kUnknown, it->second});
  // Phases the runtime times that the cost model has no term for (e.g. data loading): parts of
  // the step too.
  for (const auto& [name, value] : m.phase_s) {
    static const char* known[] = {"forward", "backward", "compute", "recompute", "bubble", "tp_comm", "pp_comm",
                                  "dp_comm", "ep_comm", "cp_comm", "optimizer", "offload", "gemm", "split_wait",
                                  "remainder"};
    bool is_known = false;
    for (const char* k : known) is_known = is_known || name == k;
    if (is_known) continue;
    rows.push_back({name + " (not modelled)", kUnknown, kUnknown, value});
    parts += value;
  }
  // What no measured part covers: the step's median less the parts' medians (so the column adds
  // up to the step); unknown for records that do not time the terms apart.
  rows.push_back({"remainder", kUnknown, kUnknown,
                  terms_timed && std::isfinite(parts) ? m.step_time_s - parts : kUnknown});
  TermRow step;
  step.term = "step";
  if (r.predicted) {
    step.predicted_s = r.predicted->step_time_s;
    if (r.predicted->step_time_s_p90 > r.predicted->step_time_s_p10) {
      step.predicted_p10_s = r.predicted->step_time_s_p10;
      step.predicted_p90_s = r.predicted->step_time_s_p90;
    }
  }
  if (r.simulated) step.simulated_s = r.simulated->step_time_s;
  step.measured_s = m.step_time_s;
  rows.push_back(step);
  return rows;
}

std::vector<MemoryRow> compare_memory(const RunRecord& r) {
  const MemoryBytes* p = r.predicted ? &r.predicted->memory_per_gpu_bytes : nullptr;
  const auto& m = r.measured.memory_bytes;
  auto measured = [&](const char* kind) {
    const auto it = m.find(kind);
    return it == m.end() ? kUnknown : it->second;
  };
  // The batch split's extra gradient copies (capplan-train on the CPU, threads splitting each
  // micro-batch) are not the layout's: a row of their own, when a run had them.
  std::vector<MemoryRow> rows = {
      {"weights", p ? p->weights : kUnknown, measured("weights")},
      {"gradients", p ? p->gradients : kUnknown, measured("gradients")}};
  if (measured("split_gradients") > 0)
    rows.push_back({"gradient copies", kUnknown, measured("split_gradients")});
  rows.insert(rows.end(), {
      {"optimizer", p ? p->optimizer : kUnknown, measured("optimizer")},
      {"activations", p ? p->activations : kUnknown, measured("activations")},
      {"offloaded", kUnknown, measured("offloaded")},
      {"buffers", p ? p->buffers : kUnknown, measured("buffers")},
  });
  double total = 0;
  bool any = false;
  for (const char* k :
       {"weights", "gradients", "split_gradients", "optimizer", "activations", "buffers"}) {
    if (std::isfinite(measured(k))) {
      total += measured(k);
      any = true;
    }
  }
  rows.push_back({"total (on the device)", p ? p->total : kUnknown, any ? total : kUnknown});
  rows.push_back({"peak RSS (process)", kUnknown, max_of(r.measured.peak_rss_bytes_per_rank)});
  return rows;
}

namespace {

// The run's state, its command and its times.
void write_run_state(JsonWriter& j, const RunRecord& r) {
  j.str("status", to_string(r.status)).str("reason", r.reason);
  j.begin_array("command");
  for (const auto& a : r.command) j.str("", a);
  j.end_array();
  j.str("command_line", shell_quote(r.command));
  j.str("run_dir", r.run_dir)
      .str("started_utc", r.started_utc)
      .str("finished_utc", r.finished_utc)
      .num("wall_time_s", r.wall_time_s)
      .integer("exit_code", r.exit_code)
      .integer("term_signal", r.term_signal)
      .integer("steps", r.steps)
      .str("model_ref", r.model_ref)
      .str("cluster_ref", r.cluster_ref);

}

// The scenario as given and as it ran (after scale-down), with the changes between them.
void write_scenarios(JsonWriter& j, const RunRecord& r) {
  j.begin_object("original");
  write_model(j, "model", r.original.model);
  j.str("cluster", r.original.cluster.name)
      .integer("gpus", r.original.total_gpus())
      .integer("seq_len", r.original.seq_len())
      .str("precision", to_string(r.original.training.precision));
  write_layout(j, "layout", r.original_layout, r.original.training.gbs);
  j.end_object();

  j.boolean("scaled_down", r.scaled_down);
  j.begin_array("changes");
  for (const auto& c : r.changes) j.str("", c);
  j.end_array();

  j.begin_object("run");
  write_model(j, "model", r.scenario.model);
  j.str("cluster", r.scenario.cluster.name)
      .integer("ranks", r.layout.gpus())
      .integer("seq_len", r.scenario.seq_len())
      .str("precision", to_string(r.scenario.training.precision));
  write_layout(j, "layout", r.layout, r.scenario.training.gbs);
  j.end_object();

  j.begin_object("machine")
      .integer("cores", r.machine.cores)
      .num("ram_bytes", r.machine.ram_bytes)
      .num("gemm_peak_gflops", r.machine.gemm_peak_gflops > 0 ? r.machine.gemm_peak_gflops : kUnknown)
      .str("gemm_peak_source", r.machine.gemm_peak_source)
      .num("memory_gbyte_per_s", r.machine.memory_gbyte_per_s > 0 ? r.machine.memory_gbyte_per_s : kUnknown)
      .str("memory_source", r.machine.memory_source)
      .end_object();

}

// The planner's prediction and the simulator's step for what ran; null when there is none.
void write_predicted(JsonWriter& j, const RunRecord& r) {
  if (r.predicted) {
    const Estimate& e = *r.predicted;
    j.begin_object("predicted").num("step_time_s", e.step_time_s);
    j.num("step_time_s_p10", e.step_time_s_p10).num("step_time_s_p90", e.step_time_s_p90);
    write_breakdown(j, "breakdown_s", e.breakdown_s);
    j.num("gemm_s", e.gemm_s);
    j.num("bubble_fraction", e.bubble_fraction)
        .num("tokens_per_s", e.tokens_per_s)
        .boolean("fits", e.fits)
        .str("reason", e.reason);
    j.begin_object("memory_per_gpu_bytes")
        .num("weights", e.memory_per_gpu_bytes.weights)
        .num("gradients", e.memory_per_gpu_bytes.gradients)
        .num("optimizer", e.memory_per_gpu_bytes.optimizer)
        .num("activations", e.memory_per_gpu_bytes.activations)
        .num("buffers", e.memory_per_gpu_bytes.buffers)
        .num("total", e.memory_per_gpu_bytes.total)
        .num("capacity", e.memory_per_gpu_bytes.capacity)
        .end_object();
    j.end_object();
  } else {
    j.null("predicted");
  }
  if (r.simulated) {
    j.begin_object("simulated").num("step_time_s", r.simulated->step_time_s);
    write_breakdown(j, "breakdown_s", r.simulated->breakdown_s);
    j.num("bubble_fraction", r.simulated->bubble_fraction).end_object();
  } else {
    j.null("simulated");
  }

}

void write_measured(JsonWriter& j, const MeasuredRun& m) {
  j.begin_object("measured")
      .integer("steps", m.steps)
      .integer("warmup_steps", m.warmup_steps)
      .num("step_time_s", m.step_time_s)
      .num("tokens_per_s", m.tokens_per_s)
      .num("bubble_fraction", m.bubble_fraction)
      .num("first_loss", m.first_loss)
      .num("last_loss", m.last_loss);
  j.begin_object("phase_s");
  for (const auto& [name, v] : m.phase_s) j.num(name, v);
  j.end_object();
  j.begin_array("peak_rss_bytes_per_rank");
  for (double v : m.peak_rss_bytes_per_rank) j.num("", v);
  j.end_array();
  j.num("max_process_rss_bytes", m.max_process_rss_bytes);
  j.begin_object("memory_bytes");
  for (const auto& [kind, v] : m.memory_bytes) j.num(kind, v);
  j.end_object();
  j.str("memory_source", m.memory_source);
  j.num("peak_flops_per_s", m.peak_flops_per_s)
      .str("peak_flops_source", m.peak_flops_source)
      .str("summary_status", m.summary_status)
      .str("summary_reason", m.summary_reason)
      .end_object();

}

// Predicted, simulated and measured side by side: per term, per memory kind, and the totals.
void write_comparison(JsonWriter& j, const RunRecord& r) {
  const MeasuredRun& m = r.measured;
  j.begin_array("comparison");
  for (const TermRow& row : compare_terms(r)) {
    j.begin_object()
        .str("term", row.term)
        .num("predicted_s", row.predicted_s)
        .num("simulated_s", row.simulated_s)
        .num("measured_s", row.measured_s);
    if (std::isfinite(row.predicted_p10_s))
      j.num("predicted_p10_s", row.predicted_p10_s).num("predicted_p90_s", row.predicted_p90_s);
    j.end_object();
  }
  j.end_array();
  j.begin_array("memory_comparison");
  for (const MemoryRow& row : compare_memory(r)) {
    j.begin_object()
        .str("kind", row.kind)
        .num("predicted_bytes", row.predicted_bytes)
        .num("measured_bytes", row.measured_bytes)
        .end_object();
  }
  j.end_array();
  j.begin_object("memory_per_rank_bytes")
      .num("predicted_total", r.predicted ? r.predicted->memory_per_gpu_bytes.total : kUnknown)
      .num("measured_peak_rss", max_of(m.peak_rss_bytes_per_rank))
      .num("measured_max_process_rss", m.max_process_rss_bytes)
      .end_object();
}

}  // namespace

CoreLatencyComparison compare_core_latency(const RunRecord& r) {
  CoreLatencyComparison c;
  c.run = r.measured.core_latency;
  if (const auto& p = r.scenario.cluster.device_profile) c.profile = p->core_latency;
  if (c.run.samples == 0) return c;
  // One sample apart is a moment's interruption; a fifth of them (two at least) is a placement.
  c.moved_during_run = c.run.apart >= std::max(2, c.run.samples / 5);
  c.moved_since_profile = core_latency_moved(c.run.median_ns, c.profile.median_ns);
  c.moved_during_profile =
      c.profile.apart > 0 || core_latency_moved(c.profile.lockstep_before_ns, c.profile.lockstep_after_ns);
  return c;
}

std::string core_latency_text(const CoreLatencyComparison& c) {
  if (c.run.samples == 0) return {};
  auto figures = [](const CoreLatency& l, const char* what) {
    char buf[200];
    int n = std::snprintf(buf, sizeof buf, "%4.0f ns (median of %d %s, %.0f-%.0f", l.median_ns, l.samples, what,
                          l.min_ns, l.max_ns);
    if (l.lockstep_before_ns > 0 && n > 0)
      std::snprintf(buf + n, sizeof buf - size_t(n),
                    ";\n                  %.0f before and %.0f after its lockstep timing, which prices tp_comm "
                    "and cp_comm",
                    l.lockstep_before_ns, l.lockstep_after_ns);
    return std::string(buf) + ")";
  };
  std::string t = "\ncores' cache-line latency, one way between the first two ranks' cores:\n  this run        " +
                  figures(c.run, "steps") + "\n  device profile  " +
                  (c.profile.samples > 0 ? figures(c.profile, "samples") : std::string("not measured")) + "\n";
  std::vector<std::string> when;
  if (c.moved_during_profile) when.push_back("while the profile measured");
  if (c.moved_since_profile) when.push_back("between the profile and the run");
  if (c.moved_during_run) when.push_back("during the run");
  if (!when.empty()) {
    t += "  It moved more than twofold " + when[0];
    for (size_t i = 1; i < when.size(); ++i) t += (i + 1 == when.size() ? " and " : ", ") + when[i];
    t += ".\n  The host placed the ranks' cores nearer or farther apart; collectives between ranks on this\n"
         "  host (tp_comm, cp_comm, dp_comm, pp_comm) move through the caches at this latency and follow\n"
         "  it, compute does not.\n";
  }
  return t;
}

std::string run_record_json(const RunRecord& r) {
  JsonWriter j;
  j.begin_object();
  write_run_state(j, r);
  write_scenarios(j, r);
  write_predicted(j, r);
  write_measured(j, r.measured);
  write_comparison(j, r);
  if (const CoreLatencyComparison c = compare_core_latency(r); c.run.samples > 0) {
    auto latency = [&](const char* key, const CoreLatency& l) {
      if (l.samples == 0) return void(j.null(key));
      j.begin_object(key).integer("samples", l.samples).num("median", l.median_ns).num("min", l.min_ns);
      j.num("max", l.max_ns).integer("apart", l.apart);
      if (l.lockstep_before_ns > 0)
        j.num("lockstep_before", l.lockstep_before_ns).num("lockstep_after", l.lockstep_after_ns);
      j.end_object();
    };
    j.begin_object("core_latency_ns");
    latency("run", c.run);
    latency("profile", c.profile);
    j.boolean("moved_during_profile", c.moved_during_profile).boolean("moved_since_profile", c.moved_since_profile);
    j.boolean("moved_during_run", c.moved_during_run);
    j.end_object();
  }
  if (r.slurm) write_slurm(j, *r.slurm);
  if (r.goodput) write_goodput(j, *r.goodput);
  j.end_object();
  return j.str() + "\n";
}

namespace {

// The step time per term, predicted, simulated and measured, with the step's band and, for a
// pipeline, the bubble's share.
void write_term_table(std::ostream& t, const RunRecord& r) {
  const std::vector<TermRow> terms = compare_terms(r);
  int width = 21;  // the term column: as wide as its longest name
  for (const TermRow& row : terms) width = std::max(width, int(row.term.size()));
  char head[200];
  std::snprintf(head, sizeof head, "\n%-*s predicted     simulated     measured\n", width + 2, "step time per term");
  t << head;
  for (const TermRow& row : terms) {
    char line[200];
    std::snprintf(line, sizeof line, "  %-*s %-13s %-13s %s\n", width, row.term.c_str(),
                  fmt_duration(row.predicted_s).c_str(), fmt_duration(row.simulated_s).c_str(),
                  fmt_duration(row.measured_s).c_str());
    t << line;
  }
  if (!terms.empty() && std::isfinite(terms.back().predicted_p10_s)) {
    // Where the measured step falls against the prediction's band.
    const TermRow& s = terms.back();
    const char* where = !std::isfinite(s.measured_s)          ? "not measured"
                        : s.measured_s < s.predicted_p10_s   ? "below it"
                        : s.measured_s > s.predicted_p90_s   ? "above it"
                                                             : "inside it";
    t << "  predicted step's band (p10-p90, the model's error): " << fmt_duration(s.predicted_p10_s) << " to "
      << fmt_duration(s.predicted_p90_s) << "; the measured step is " << where << "\n";
  }
  if (r.layout.pp > 1) {
    const int64_t m = r.layout.num_microbatches(r.scenario.training.gbs);
    const int p = r.layout.pp;
    char buf[200];
    std::snprintf(buf, sizeof buf,
                  "  bubble share: predicted %.3f, simulated %.3f, measured %.3f; (p-1)/(m+p-1) = %d/%lld = %.3f%s\n",
                  r.predicted ? r.predicted->bubble_fraction : kUnknown,
                  r.simulated ? r.simulated->bubble_fraction : kUnknown, r.measured.bubble_fraction, p - 1,
                  (long long)(m + p - 1), double(p - 1) / double(m + p - 1),
                  r.layout.vp > 1 ? " (interleaving divides it by vp)" : "");
    t << buf;
  }
  t << "  (each measured term is the median over the steps of the busiest rank's time in it, the rank\n"
       "   with the most compute, recompute and offload in that step; the remainder is the median step\n"
       "   less the measured parts, which none of them covers; the first "
    << r.measured.warmup_steps << " of " << r.measured.steps
    << " steps are left out of the medians as warm-up)\n";
}

}  // namespace

std::string run_record_text(const RunRecord& r) {
  std::ostringstream t;
  t << "capplan run: " << to_string(r.status);
  if (!r.reason.empty()) t << " (" << r.reason << ")";
  t << "\n\ncommand:\n  " << shell_quote(r.command) << "\n";
  t << "\nmodel " << (r.model_ref.empty() ? r.original.model.name : r.model_ref) << " on "
    << (r.cluster_ref.empty() ? r.original.cluster.name : r.cluster_ref) << "\n";
  if (!r.changes.empty()) {
    t << (r.scaled_down ? "scaled down to this machine:\n" : "moved to this machine:\n");
    for (const auto& c : r.changes) t << "  - " << c << "\n";
  }
  t << "\nthis machine: " << r.machine.cores << " cores, " << fmt_mib(r.machine.ram_bytes)
    << " RAM; fp32 GEMM peak ";
  if (r.machine.gemm_peak_gflops > 0) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.1f GFLOP/s", r.machine.gemm_peak_gflops);
    t << buf << " (" << r.machine.gemm_peak_source << ")\n";
  } else {
    t << "unknown\n";
  }
  write_term_table(t, r);
  t << core_latency_text(compare_core_latency(r));
  t << "\nmemory per rank         predicted     measured\n";
  for (const MemoryRow& row : compare_memory(r)) {
    char line[160];
    std::snprintf(line, sizeof line, "  %-21s %-13s %s\n", row.kind.c_str(),
                  fmt_mib(row.predicted_bytes).c_str(), fmt_mib(row.measured_bytes).c_str());
    t << line;
  }
  t << "  (measured by kind: " << (r.measured.memory_source.empty() ? "not reported" : r.measured.memory_source)
    << ";\n   a rank's activations are its kept activations and its working buffers;"
       "\n   RSS includes the MPI library and the program; largest process of the job (wait4): "
    << fmt_mib(r.measured.max_process_rss_bytes) << ")\n";
  if (const auto it = r.measured.memory_bytes.find("split_gradients");
      it != r.measured.memory_bytes.end() && it->second > 0)
    t << "  (gradient copies: the gradients of the other parts when a rank's threads split each\n"
         "   micro-batch, capplan-train's batch split; not part of the layout's memory)\n";
  if (std::isfinite(r.measured.first_loss)) {
    char buf[96];
    std::snprintf(buf, sizeof buf, "loss %.4f -> %.4f over %d steps\n", r.measured.first_loss,
                  r.measured.last_loss, r.measured.steps);
    t << buf;
  }
  if (r.slurm) {
    const SlurmJob& s = *r.slurm;
    t << "\nSlurm job " << s.job_id << " on partition " << (s.partition.empty() ? "(default)" : s.partition) << ", "
      << s.nodes << " node(s), time limit " << (s.time_limit.empty() ? "(partition's)" : s.time_limit)
      << ", up to " << s.requeue_limit << " requeues; ended " << (s.final_state.empty() ? "-" : s.final_state);
    if (!s.exit_code.empty()) t << " (exit code " << s.exit_code << ")";
    t << ", " << s.restarts << " requeue(s)\n  states:\n";
    for (const auto& c : s.states) {
      t << "    " << c.time_utc << "  " << c.state;
      if (!c.reason.empty() && c.reason != "None") t << " (" << c.reason << ")";
      t << "\n";
    }
    t << "  attempts:\n";
    for (const auto& a : s.attempts) {
      t << "    " << a.attempt << ": started " << a.started_utc << ", " << a.outcome;
      if (a.resumed_from_step > 0) t << ", resumed from step " << a.resumed_from_step;
      else if (a.resumed_from_step == 0) t << ", from scratch";
      if (a.last_step > 0) t << ", steps " << a.first_step << "-" << a.last_step;
      t << "\n";
      for (const auto& h : a.health_failures) t << "       health: " << h << "\n";
    }
    for (const auto& d : s.drained) t << "  drained " << d << "\n";
  }
  if (r.goodput) {
    const Goodput& g = *r.goodput;
    char buf[200];
    std::snprintf(buf, sizeof buf,
                  "\ngoodput: productive step time %s of wall time %s = %.3f (predicted %.3f)\n",
                  fmt_duration(g.productive_s).c_str(), fmt_duration(g.wall_s).c_str(), g.ratio, g.predicted_ratio);
    t << buf;
    if (!g.predicted_basis.empty()) t << "  (predicted for " << g.predicted_basis << ")\n";
    for (const auto& f : g.per_failure) {
      std::snprintf(buf, sizeof buf,
                    "  failure of attempt %d: restart %s, reload %s, %lld steps recomputed (%s)\n", f.attempt,
                    fmt_duration(f.restart_s).c_str(), fmt_duration(f.reload_s).c_str(), (long long)f.recomputed_steps,
                    fmt_duration(f.recomputed_s).c_str());
      t << buf;
    }
  }
  t << "\nrun directory: " << r.run_dir << "\n";
  return t.str();
}

std::string write_run_record(const RunRecord& r) {
  if (r.run_dir.empty()) return "no run directory";
  std::string err = write_file_atomic(r.run_dir + "/run.json", run_record_json(r));
  if (!err.empty()) return err;
  return write_file_atomic(r.run_dir + "/run.txt", run_record_text(r));
}

}  // namespace capplan::rt
