// `capplan run --slurm`: the run prepared as for this machine, then written as a job script
// (export_sbatch, with a run directory that does not change across requeues, `--resume auto`, a
// health check first and a requeue after a failed attempt), submitted with sbatch and followed
// with squeue / scontrol / sacct until it ends; its output and metrics stream from RUNDIR. Every
// Slurm command gets its arguments as a list (no shell); user text reaches the script only quoted.
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <sstream>
#include <thread>

#include "planner/cost_model.h"
#include "planner/export.h"
#include "planner/format.h"
#include "planner/json_writer.h"
#include "planner/plan_io.h"
#include "planner/profile.h"
#include "launch/launch.h"

#include "simulator/run_simulation.h"

namespace capplan::rt {
namespace {

const char* kFile = "<command line>";


// Seconds since the epoch of "YYYY-MM-DDTHH:MM:SS[.fff]Z"; NaN when it is not that.
double parse_utc(const std::string& s) {
  std::tm tm {};
  const char* rest = s.size() >= 19 ? ::strptime(s.c_str(), "%Y-%m-%dT%H:%M:%S", &tm) : nullptr;
  if (!rest) return kUnknown;
  double frac = 0;
  if (*rest == '.') frac = std::strtod(rest, nullptr);
  return double(::timegm(&tm)) + frac;
}

struct Captured {
  int exit_code = -1;
  std::string out, err;
  bool started = false;
};

Captured capture(const std::vector<std::string>& argv, const std::string& working_dir = {}) {
  Captured c;
  ProcessOptions opt;
  opt.working_dir = working_dir;
  const ProcessResult r = run_process(argv, opt, [&](OutputStream s, const std::string& line) {
    (s == OutputStream::Stdout ? c.out : c.err) += line + "\n";
  });
  c.started = r.started;
  c.exit_code = r.started ? r.exit_code : -1;
  if (!r.started) c.err = r.error;
  return c;
}

std::string trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ' || s.back() == '\r')) s.pop_back();
  size_t i = 0;
  while (i < s.size() && s[i] == ' ') ++i;
  return s.substr(i);
}

// "Key=Value" from scontrol's one-line output (-o); values run to the next space.
std::string field(const std::string& line, const std::string& key) {
  const std::string k = key + "=";
  size_t pos = 0;
  while ((pos = line.find(k, pos)) != std::string::npos) {
    if (pos == 0 || line[pos - 1] == ' ') {
      const size_t start = pos + k.size();
      const size_t end = line.find(' ', start);
      return line.substr(start, end == std::string::npos ? std::string::npos : end - start);
    }
    pos += k.size();
  }
  return {};
}

// HH:MM:SS, MM:SS, D-HH:MM:SS or minutes; seconds, or -1 when it is none of these.
double parse_time_limit(const std::string& text) {
  if (text.empty()) return -1;
  int days = 0;
  std::string rest = text;
  if (const size_t dash = text.find('-'); dash != std::string::npos) {
    days = std::atoi(text.substr(0, dash).c_str());
    rest = text.substr(dash + 1);
    if (dash == 0 || text.substr(0, dash).find_first_not_of("0123456789") != std::string::npos) return -1;
  }
  std::vector<long> parts;
  std::stringstream ss(rest);
  std::string p;
  while (std::getline(ss, p, ':')) {
    if (p.empty() || p.find_first_not_of("0123456789") != std::string::npos) return -1;
    parts.push_back(std::atol(p.c_str()));
  }
  double s = 0;
  if (parts.size() == 3) s = parts[0] * 3600.0 + parts[1] * 60.0 + parts[2];
  else if (parts.size() == 2) s = parts[0] * 60.0 + parts[1];
  else if (parts.size() == 1) s = parts[0] * 60.0;
  else return -1;
  return s + days * 86400.0;
}

std::string absolute(const std::string& path) {
  if (!path.empty() && path[0] == '/') return path;
  char buf[PATH_MAX];
  if (!::getcwd(buf, sizeof buf)) return path;
  return std::string(buf) + "/" + path;
}


bool is_terminal(const std::string& state) {
  static const char* terminal[] = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "OUT_OF_MEMORY",
                                   "BOOT_FAIL", "DEADLINE", "NODE_FAIL", "PREEMPTED", "REVOKED",
                                   "SPECIAL_EXIT"};
  for (const char* t : terminal) {
    if (state.rfind(t, 0) == 0) return true;
  }
  return false;
}

// The job script's own lines: "capplan: <what> ... at TIME".
std::string time_at_end(const std::string& line) {
  const size_t at = line.rfind(" at ");
  return at == std::string::npos ? std::string() : trim(line.substr(at + 4));
}

std::vector<std::string> read_lines(const std::string& path) {
  std::vector<std::string> lines;
  std::ifstream f(path);
  std::string line;
  while (std::getline(f, line)) lines.push_back(line);
  return lines;
}

// Step records of the final timeline: each step from the newest attempt that recorded it.
std::vector<MetricsRecord> final_timeline(const std::vector<MetricsRecord>& records) {
  std::map<int64_t, size_t> newest;
  for (size_t i = 0; i < records.size(); ++i) {
    if (records[i].type == "step") newest[int64_t(records[i].number("step", 0))] = i;
  }
  std::vector<MetricsRecord> out;
  for (size_t i = 0; i < records.size(); ++i) {
    if (records[i].type != "step") out.push_back(records[i]);
  }
  for (const auto& [step, i] : newest) out.push_back(records[i]);
  return out;
}

}  // namespace

std::vector<SlurmAttempt> slurm_attempts(const std::vector<std::string>& lines,
                                         const std::vector<MetricsRecord>& records) {
  std::vector<SlurmAttempt> attempts;
  for (const std::string& line : lines) {
    if (line.rfind("capplan: attempt ", 0) == 0) {
      SlurmAttempt a;
      a.attempt = std::atoi(line.c_str() + 17);
      a.started_utc = time_at_end(line);
      a.outcome = "running";
      attempts.push_back(a);
      continue;
    }
    if (attempts.empty()) continue;
    SlurmAttempt& a = attempts.back();
    if (line.rfind("capplan: training starts", 0) == 0) {
      a.train_started_utc = time_at_end(line);
    } else if (line.rfind("capplan: training ended with exit status ", 0) == 0) {
      a.exit_code = std::atoi(line.c_str() + 41);
      a.train_ended_utc = time_at_end(line);
      a.outcome = a.exit_code == 0 ? "finished" : "failed (exit status " + std::to_string(a.exit_code) + ")";
    } else if (line.rfind("capplan: health check failed", 0) == 0) {
      a.outcome = "health check failed";
    } else if (line.rfind("health: FAILED on node ", 0) == 0) {
      a.health_failures.push_back("node " + line.substr(23));
    }
  }
  // The trainer's runs in the metrics file, in order, belong to the attempts that started it.
  size_t next = 0;
  SlurmAttempt* current = nullptr;
  for (const MetricsRecord& r : records) {
    if (r.type == "start") {
      current = nullptr;
      while (next < attempts.size() && attempts[next].train_started_utc.empty()) ++next;
      if (next < attempts.size()) {
        current = &attempts[next++];
        const double from = r.number("resumed_from_step", 0);  // -1: not resumed
        current->resumed_from_step = std::isfinite(from) && from > 0 ? int64_t(from) : 0;
      }
    } else if (r.type == "step" && current) {
      const int64_t s = int64_t(r.number("step", 0));
      if (current->first_step == 0) current->first_step = s;
      current->last_step = s;
      const double t = r.number("step_time_s");
      if (std::isfinite(t)) current->step_time_sum_s += t;
    }
  }
  return attempts;
}

Goodput compute_goodput(const std::vector<SlurmAttempt>& attempts, const std::vector<MetricsRecord>& records,
                        const std::string& finished_utc) {
  Goodput g;
  if (attempts.empty()) return g;
  // From the first attempt's start to the last trainer's end (the job script's clock), else to
  // when capplan saw the job end.
  const double start = parse_utc(attempts.front().started_utc);
  double end = parse_utc(attempts.back().train_ended_utc);
  if (!std::isfinite(end)) end = parse_utc(finished_utc);
  if (std::isfinite(start) && std::isfinite(end) && end >= start) g.wall_s = end - start;
  double productive = 0;
  for (const MetricsRecord& r : final_timeline(records)) {
    if (r.type != "step") continue;
    const double t = r.number("step_time_s");
    if (std::isfinite(t)) productive += t;
  }
  g.productive_s = productive;
  if (std::isfinite(g.wall_s) && g.wall_s > 0) g.ratio = productive / g.wall_s;
  // Failures: every attempt after which another one started.
  for (size_t i = 0; i + 1 < attempts.size(); ++i) {
    const SlurmAttempt& a = attempts[i];
    // The next attempt that trained.
    const SlurmAttempt* b = nullptr;
    for (size_t k = i + 1; k < attempts.size() && !b; ++k) {
      if (!attempts[k].train_started_utc.empty()) b = &attempts[k];
    }
    FailureCost f;
    f.attempt = a.attempt;
    ++g.failures;
    if (b) {
      const double a_end = parse_utc(!a.train_ended_utc.empty() ? a.train_ended_utc : a.started_utc);
      const double b_start = parse_utc(b->train_started_utc);
      if (std::isfinite(a_end) && std::isfinite(b_start)) f.restart_s = std::max(0.0, b_start - a_end);
      const double b_end = parse_utc(b->train_ended_utc);
      if (std::isfinite(b_start) && std::isfinite(b_end))
        f.reload_s = std::max(0.0, (b_end - b_start) - b->step_time_sum_s);
      // Steps of this attempt past the checkpoint the next one resumed from.
      if (a.last_step > 0 && b->resumed_from_step >= 0 && a.last_step > b->resumed_from_step) {
        f.recomputed_steps = a.last_step - std::max<int64_t>(b->resumed_from_step, a.first_step - 1);
        const int64_t attempt_steps = a.last_step - a.first_step + 1;
        if (attempt_steps > 0) f.recomputed_s = a.step_time_sum_s * double(f.recomputed_steps) / double(attempt_steps);
      }
    }
    g.per_failure.push_back(f);
  }
  return g;
}

namespace {

// Slurm's commands, before anything else: without sbatch nothing can be submitted.
void find_slurm_commands(PreparedSlurmRun& p, Diagnostics& d) {
  p.sbatch = find_executable("sbatch");
  p.squeue = find_executable("squeue");
  p.scontrol = find_executable("scontrol");
  p.scancel = find_executable("scancel");
  p.sacct = find_executable("sacct");
  p.sinfo = find_executable("sinfo");
  if (p.sbatch.empty()) {
    d.error(kFile, 0, 0, "--slurm", "sbatch not found in PATH, so nothing can be submitted",
            "run on a Slurm login node, or install the Slurm client (apt-get install slurm-client)");
  }
  for (const auto& [name, path] : {std::pair<const char*, std::string>{"squeue", p.squeue},
                                   {"scontrol", p.scontrol}, {"scancel", p.scancel}}) {
    if (!p.sbatch.empty() && path.empty())
      d.error(kFile, 0, 0, "--slurm", std::string(name) + " not found in PATH (capplan follows and cancels jobs with it)");
  }
}

// The partition: known to Slurm, up, with enough nodes (options.partition empty: the default one).
void check_partition(PreparedSlurmRun& p, const SlurmOptions& options, int plan_nodes, Diagnostics& d) {
  if (p.scontrol.empty() || p.sbatch.empty()) return;
  std::string partition = options.partition;
  bool answers = true;
  if (partition.empty() && !p.sinfo.empty()) {
    const Captured c = capture({p.sinfo, "-h", "-o", "%P"});
    if (c.exit_code != 0) {
      answers = false;
      std::string why = trim(c.err);
      if (const size_t nl = why.rfind('\n'); nl != std::string::npos) why = why.substr(nl + 1);
      d.error(kFile, 0, 0, "--slurm", "Slurm does not answer (" + why + ")",
              "check SLURM_CONF and that slurmctld runs");
    }
    std::istringstream in(c.out);
    for (std::string line; std::getline(in, line);) {
      if (!line.empty() && line.back() == '*') partition = line.substr(0, line.size() - 1);
    }
  }
  if (!answers) {
  } else if (partition.empty()) {
    d.error(kFile, 0, 0, "--partition", "Slurm has no default partition", "name one with --partition P");
  } else {
    const Captured c = capture({p.scontrol, "show", "partition", "-o", partition});
    const std::string line = trim(c.out);
    if (c.exit_code != 0 || line.empty() || field(line, "PartitionName") != partition) {
      std::string known;
      if (!p.sinfo.empty()) {
        const Captured k = capture({p.sinfo, "-h", "-o", "%R"});
        std::istringstream in(k.out);
        for (std::string name; std::getline(in, name);) known += (known.empty() ? "" : ", ") + name;
      }
      d.error(kFile, 0, 0, "--partition",
              "unknown partition '" + partition + "'" + (c.exit_code != 0 ? ": " + trim(c.err) : std::string()),
              known.empty() ? std::string() : "partitions: " + known);
    } else {
      const int total_nodes = std::atoi(field(line, "TotalNodes").c_str());
      if (plan_nodes > total_nodes) {
        d.error(kFile, 0, 0, options.nodes > 0 ? "--nodes" : "nodes",
                "the run needs " + std::to_string(plan_nodes) + " nodes, but partition '" + partition +
                    "' has " + std::to_string(total_nodes),
                options.nodes > 0 ? "lower --nodes" : "run it on fewer nodes with --nodes N");
      }
      if (field(line, "State") != "UP") {
        d.error(kFile, 0, 0, "--partition", "partition '" + partition + "' is " + field(line, "State") + ", not UP");
      }
      p.options.partition = partition;
    }
  }
}

// The time limit must hold at least one checkpoint interval, or no attempt ever saves progress.
void check_time_limit(const SlurmOptions& options, const Loaded<PreparedRun>& run, Diagnostics& d) {
  if (options.time_limit.empty()) return;
  const double limit_s = parse_time_limit(options.time_limit);
  if (limit_s <= 0) {
    d.error(kFile, 0, 0, "--time", "'" + options.time_limit + "' is not a time limit", "write HH:MM:SS, e.g. 01:30:00");
  } else if (run.value && run.value->record.predicted) {
    const double step_s = run.value->record.predicted->step_time_s;
    const int64_t every = run.value->train.options.checkpoint_every;
    const double interval_s = step_s * every;
    if (std::isfinite(interval_s) && limit_s < interval_s) {
      d.error(kFile, 0, 0, "--time",
              "the time limit " + options.time_limit + " (" + fmt_duration(limit_s) +
                  ") is shorter than one checkpoint interval (" + std::to_string(every) +
                  " steps x the predicted " + fmt_duration(step_s) + " = " + fmt_duration(interval_s) + ")",
              "raise --time, or lower --checkpoint-every");
    }
  }
}

// The job script: export_sbatch on the run's plan, with this run's exact trainer arguments and the
// health check's expectations; an error message, empty on success.
std::string write_job_script(PreparedSlurmRun& p, const SlurmOptions& options, const std::string& run_dir,
                             int plan_nodes, int ranks, SbatchOptions& so) {
  PreparedRun& pr = p.run;
  const std::string ckpt_dir = run_dir + "/checkpoints";
  Plan plan;
  plan.model_ref = run_dir + "/model.yaml";
  plan.cluster_ref = "this machine";
  plan.scenario = pr.record.scenario;
  plan.scenario.nodes = plan_nodes;
  plan.scenario.cluster.gpus_per_node = (ranks + plan_nodes - 1) / plan_nodes;
  plan.layout = pr.record.layout;
  so.job_name = "capplan-" + (pr.record.scenario.model.name.empty() ? std::string("run") : pr.record.scenario.model.name);
  so.train_binary = pr.train.train_binary;
  so.run_dir = run_dir;
  so.run_dir_literal = true;
  so.time_limit = options.time_limit;
  so.requeue = options.requeue;
  so.request_gpus = false;  // capplan-train's ranks are CPU processes
  so.exclusive = false;
  so.use_mpirun = true;
  so.steps = int(pr.train.options.steps);
  so.checkpoint_every = int(pr.train.options.checkpoint_every);
  if (pr.train.as_root) so.mpirun_args.push_back("--allow-run-as-root");
  so.mpirun_args.insert(so.mpirun_args.end(), {"--oversubscribe", "--bind-to", "none"});
  // The trainer's arguments exactly as a local run would pass them (after mpirun ... -np N BIN).
  const std::vector<std::string>& argv = pr.record.command;
  auto bin = std::find(argv.begin(), argv.end(), pr.train.train_binary);
  if (bin != argv.end()) so.train_args.assign(bin + 1, argv.end());
  auto number = [](double v) { return shortest_number(v); };
  const int ranks_per_node = (ranks + plan_nodes - 1) / plan_nodes;
  so.health_args = {"--checkpoint-dir", ckpt_dir, "--checkpoint-bytes", number(p.checkpoint_bytes)};
  if (pr.record.machine.gemm_peak_gflops > 0) {
    so.health_args.insert(so.health_args.end(), {"--expected-gflops", number(pr.record.machine.gemm_peak_gflops),
                                                 "--gflops-tolerance", number(options.gflops_tolerance)});
  }
  if (pr.record.predicted) {
    // The ranks' predicted memory (on this machine's spec of CPU ranks: state, activations and
    // ZeRO buffers; no GPU runtime's reservation).
    const MemoryBytes& m = pr.record.predicted->memory_per_gpu_bytes;
    so.health_args.insert(so.health_args.end(), {"--min-free-memory", number(m.total * ranks_per_node)});
  }
  p.job_script = export_sbatch(plan, so).text;
  const std::string script_path = run_dir + "/job.sbatch";
  std::string err = write_file_atomic(script_path, p.job_script);
  if (err.empty()) ::chmod(script_path.c_str(), 0755);
  return err;

}

}  // namespace

Loaded<PreparedSlurmRun> prepare_slurm_run(const LaunchRequest& request, const SlurmOptions& options) {
  Loaded<PreparedSlurmRun> out;
  Diagnostics& d = out.diagnostics;
  PreparedSlurmRun p;
  p.options = options;

  // Slurm's commands, before anything else: without sbatch nothing can be submitted.
  find_slurm_commands(p, d);
  const std::string run_dir = absolute(request.run_dir);

  // The same checks and files as a local run; the ranks run on the partition's nodes, so this
  // machine's rank limit does not apply.
  LaunchRequest req = request;
  req.run_dir = run_dir;
  req.max_ranks = INT_MAX;
  req.resume = "auto";
  Loaded<PreparedRun> run = prepare_run(req);
  d.append(run.diagnostics);

  // The partition: known to Slurm, up, with enough nodes.
  const int ranks = request.layout.gpus();
  const int plan_nodes = options.nodes > 0 ? options.nodes : std::max(1, request.scenario.nodes);
  check_partition(p, options, plan_nodes, d);
  if (plan_nodes > ranks) {
    d.error(kFile, 0, 0, options.nodes > 0 ? "--nodes" : "nodes",
            std::to_string(plan_nodes) + " nodes for " + std::to_string(ranks) + " ranks leaves nodes without a rank",
            "--nodes " + std::to_string(ranks) + " or fewer");
  }
  p.options.nodes = plan_nodes;

  // The time limit must hold at least one checkpoint interval, or no attempt ever saves progress.
  check_time_limit(options, run, d);
  if (options.requeue < 0) d.error(kFile, 0, 0, "--requeue", "must be >= 0, found " + std::to_string(options.requeue));

  if (d.has_errors() || !run.value) {
    // Refused: the record says why, unless an earlier run's record is there (kept, not replaced).
    if (run.value && ::access((run_dir + "/run.json").c_str(), F_OK) != 0) {
      RunRecord rec = run.value->record;
      rec.status = RunStatus::NotStarted;
      rec.reason = d.to_string();
      while (!rec.reason.empty() && rec.reason.back() == '\n') rec.reason.pop_back();
      rec.finished_utc = utc_now();
      write_run_record(rec);
    }
    return out;
  }
  p.run = std::move(*run.value);
  PreparedRun& pr = p.run;

  // One checkpoint: every parameter's weights and optimizer state (the planner's bytes per
  // parameter for the run's precision, without the gradients, which a checkpoint does not keep).
  const StateBytesPerParam bpp = state_bytes_per_param(pr.record.scenario.training.precision);
  const ModelProfile prof = profile_model(pr.record.scenario.model, 1, pr.record.scenario.model.seq_len, 1,
                                          pr.record.scenario.training.precision);
  p.checkpoint_bytes = double(prof.total_params) * (bpp.weights + bpp.optimizer);

  const std::string ckpt_dir = run_dir + "/checkpoints";
  ::mkdir(ckpt_dir.c_str(), 0755);

  SbatchOptions so;
  if (const std::string err = write_job_script(p, options, run_dir, plan_nodes, ranks, so); !err.empty()) {
    d.error(kFile, 0, 0, "dir", "run directory: " + err, "choose another --dir");
    return out;
  }
  const std::string script_path = run_dir + "/job.sbatch";

  p.sbatch_argv = {p.sbatch, "--parsable", "--job-name=" + so.job_name, "--output=slurm-%j.out",
                   "--nodes=" + std::to_string(plan_nodes)};
  if (!p.options.partition.empty()) p.sbatch_argv.push_back("--partition=" + p.options.partition);
  if (!options.account.empty()) p.sbatch_argv.push_back("--account=" + options.account);
  if (!options.time_limit.empty()) p.sbatch_argv.push_back("--time=" + options.time_limit);
  p.sbatch_argv.push_back(script_path);

  SlurmJob job;
  job.partition = p.options.partition;
  job.account = options.account;
  job.time_limit = options.time_limit;
  job.nodes = plan_nodes;
  job.requeue_limit = options.requeue;
  job.script = script_path;
  pr.record.slurm = job;
  pr.record.command = p.sbatch_argv;
  const std::string err = write_file_atomic(run_dir + "/command.txt", shell_quote(p.sbatch_argv) + "\n");
  if (!err.empty()) d.error(kFile, 0, 0, "dir", "run directory: " + err, "choose another --dir");
  if (!d.has_errors()) out.value = std::move(p);
  return out;
}

std::string submit_slurm_job(const PreparedSlurmRun& p, std::string* error) {
  const Captured c = capture(p.sbatch_argv, p.run.record.run_dir);
  const std::string id = trim(c.out.substr(0, c.out.find_first_of(";\n")));
  if (c.exit_code != 0 || id.empty() || id.find_first_not_of("0123456789_") != std::string::npos) {
    if (error) *error = "sbatch failed (exit status " + std::to_string(c.exit_code) + "): " + trim(c.err + c.out);
    return {};
  }
  // A record right away: the job id is in RUNDIR even should capplan be closed now.
  RunRecord rec = p.run.record;
  rec.status = RunStatus::Running;
  rec.started_utc = utc_now();
  rec.slurm->job_id = id;
  rec.slurm->output_file = rec.run_dir + "/slurm-" + id + ".out";
  rec.slurm->states.push_back({utc_now(), "SUBMITTED", "", 0});
  write_run_record(rec);
  return id;
}

namespace {

// What Slurm says of a job in one poll: squeue while it is queued or running, scontrol for its
// restarts and exit code, sacct once it has left both.
struct JobSeen {
  std::string state, reason, exit_code;
  int restarts = -1;
  bool known = false;
};

JobSeen query_job(const PreparedSlurmRun& p, const std::string& job_id) {
  JobSeen s;
  if (!p.squeue.empty()) {
    const Captured q = capture({p.squeue, "-h", "-j", job_id, "-o", "%T|%r"});
    const std::string line = trim(q.out);
    if (q.exit_code == 0 && !line.empty()) {
      s.state = line.substr(0, line.find('|'));
      s.reason = line.find('|') == std::string::npos ? "" : line.substr(line.find('|') + 1);
      s.known = true;
    }
  }
  if (!p.scontrol.empty()) {
    const Captured c = capture({p.scontrol, "show", "job", "-o", job_id});
    const std::string line = trim(c.out);
    if (c.exit_code == 0 && !line.empty()) {
      if (!s.known) {
        s.state = field(line, "JobState");
        s.reason = field(line, "Reason");
        s.known = !s.state.empty();
      }
      s.restarts = std::atoi(field(line, "Restarts").c_str());
      s.exit_code = field(line, "ExitCode");
    }
  }
  if (!s.known && !p.sacct.empty()) {
    const Captured a = capture({p.sacct, "-n", "-P", "-X", "-j", job_id, "-o", "State,ExitCode,Reason"});
    const std::string line = trim(a.out);
    if (a.exit_code == 0 && !line.empty() && line.find('|') != std::string::npos) {
      std::vector<std::string> f;
      std::stringstream ss(line.substr(0, line.find('\n')));
      for (std::string x; std::getline(ss, x, '|');) f.push_back(x);
      if (!f.empty()) s.state = f[0].substr(0, f[0].find(' '));
      if (f.size() > 1) s.exit_code = f[1];
      if (f.size() > 2) s.reason = f[2];
      s.known = !s.state.empty();
    }
  }
  return s;
}

// The job's place among the pending jobs of its partition, by priority (0: not pending).
int queue_position(const PreparedSlurmRun& p, const std::string& job_id, const std::string& partition) {
  if (p.squeue.empty()) return 0;
  std::vector<std::string> argv = {p.squeue, "-h", "-t", "PENDING", "-o", "%i", "--sort=-p,i"};
  if (!partition.empty()) argv.insert(argv.end(), {"-p", partition});
  const Captured q = capture(argv);
  std::istringstream in(q.out);
  int pos = 0;
  for (std::string id; std::getline(in, id);) {
    ++pos;
    if (trim(id) == job_id) return pos;
  }
  return 0;
}

// The goodput of the job's attempts, and the run simulation's prediction for this plan with the
// same failure count: the work, a checkpoint write every interval at the simulator's storage
// bandwidth, and per failure its assumed restart plus half an interval of lost work.
Goodput job_goodput(const PreparedSlurmRun& p, const RunRecord& rec, const std::vector<MetricsRecord>& all_records) {
  Goodput g = compute_goodput(rec.slurm->attempts, all_records, rec.finished_utc);
  if (rec.predicted) {
    const RunOptions ro;
    const RunInputs in = run_inputs(rec.scenario, rec.predicted->step_time_s);
    const double steps = rec.steps;
    const double work_s = steps * rec.predicted->step_time_s;
    const double every = double(std::max<int64_t>(1, p.run.train.options.checkpoint_every));
    const double write_s = in.checkpoint_bytes / (ro.storage_gbyte_per_s * 1e9);
    const double lost_s = g.failures * (ro.restart_min * 60 + 0.5 * every * rec.predicted->step_time_s);
    const double total = work_s + std::floor(steps / every) * write_s + lost_s;
    if (total > 0) g.predicted_ratio = work_s / total;
    g.predicted_basis = std::to_string(g.failures) + " failures, restart " + fmt_duration(ro.restart_min * 60) +
                        " each (capplan simulate --run's default), half a checkpoint interval of " +
                        std::to_string(int(every)) + " steps lost per failure";
  }
  return g;
}

// Succeeded, failed (with what Slurm, the job script and the health check said) or cancelled.
void set_job_outcome(RunRecord& rec, const std::string& job_id, const std::vector<std::string>& all_lines,
                     bool cancel_sent) {
  const SlurmJob& job = *rec.slurm;
  const SlurmAttempt* last_attempt = job.attempts.empty() ? nullptr : &job.attempts.back();
  std::string stopped_line;
  for (const auto& line : all_lines) {
    if (line.rfind("capplan: stopped", 0) == 0) stopped_line = line.substr(9);
  }
  std::vector<std::string> health;
  for (const auto& a : job.attempts)
    for (const auto& h : a.health_failures) health.push_back("attempt " + std::to_string(a.attempt) + ": " + h);

  if (cancel_sent) {
    rec.status = RunStatus::Cancelled;
    rec.reason = "cancelled by the user (scancel " + job_id + ") after " + std::to_string(rec.measured.steps) +
                 " steps; Slurm state " + job.final_state;
  } else if (job.final_state == "COMPLETED" && last_attempt && last_attempt->exit_code == 0 &&
             rec.measured.steps > 0) {
    rec.status = RunStatus::Succeeded;
  } else {
    rec.status = RunStatus::Failed;
    std::string why = "Slurm job " + job_id + " ended " + (job.final_state.empty() ? "UNKNOWN" : job.final_state);
    if (!job.final_reason.empty() && job.final_reason != "None") why += " (" + job.final_reason + ")";
    if (!job.exit_code.empty()) why += ", exit code " + job.exit_code;
    if (!stopped_line.empty()) why += ": " + stopped_line;
    if (!health.empty()) {
      why += "; health check: ";
      for (size_t i = 0; i < health.size(); ++i) why += (i ? "; " : "") + health[i];
    }
    // The same checkpoint over and over: say so rather than leave it to the reader.
    int same = 0;
    int64_t step = -2;
    for (const auto& a : job.attempts) {
      if (a.exit_code > 0 && a.resumed_from_step >= 0) {
        same = a.resumed_from_step == step ? same + 1 : 1;
        step = a.resumed_from_step;
      }
    }
    if (same >= 2)
      why += "; the last " + std::to_string(same) + " attempts all resumed from step " + std::to_string(step) +
             " and failed before the next checkpoint";
    if (rec.measured.steps == 0 && stopped_line.empty() && health.empty() && job.final_state == "COMPLETED")
      why += ": the metrics file has no step records";
    rec.reason = why;
  }
}

}  // namespace

RunRecord follow_slurm_job(const PreparedSlurmRun& p, const std::string& job_id,
                           const SlurmCallbacks& callbacks, const std::atomic<bool>* cancel) {
  RunRecord rec = p.run.record;
  rec.status = RunStatus::Running;
  if (rec.started_utc.empty()) rec.started_utc = utc_now();
  if (!rec.slurm) rec.slurm = SlurmJob{};
  SlurmJob& job = *rec.slurm;
  job.job_id = job_id;
  job.output_file = rec.run_dir + "/slurm-" + job_id + ".out";
  if (job.states.empty() || job.states.back().state != "SUBMITTED") job.states.clear();

  MetricsTail metrics(p.run.metrics_file);
  MetricsTail output(job.output_file);
  std::vector<MetricsRecord> records;
  std::vector<std::string> lines;
  auto poll_files = [&] {
    for (auto& line : output.read_new_lines()) {
      if (callbacks.on_output) callbacks.on_output(OutputStream::Stdout, line);
      lines.push_back(std::move(line));
    }
    for (auto& r : metrics.read_new_records()) {
      if (callbacks.on_metrics) callbacks.on_metrics(r);
      records.push_back(std::move(r));
    }
  };

  bool cancel_sent = false;
  int terminal_polls = 0, unknown_polls = 0;
  JobSeen last;
  auto cancel_at = std::chrono::steady_clock::now();
  while (true) {
    if (cancel && cancel->load() && !cancel_sent && !p.scancel.empty()) {
      capture({p.scancel, job_id});
      cancel_sent = true;
      cancel_at = std::chrono::steady_clock::now();
    }
    poll_files();
    const JobSeen s = query_job(p, job_id);
    if (s.known) {
      unknown_polls = 0;
      if (s.restarts >= 0) job.restarts = s.restarts;
      if (s.state != last.state || s.reason != last.reason || (s.restarts >= 0 && s.restarts != last.restarts)) {
        SlurmStateChange change{utc_now(), s.state, s.reason, job.restarts};
        // A requeue shows as a new restart count; Slurm's REQUEUED state may pass between polls.
        if (last.restarts >= 0 && s.restarts > last.restarts && s.state != "REQUEUED") {
          job.states.push_back({change.time_utc, "REQUEUED", s.reason, s.restarts});
        }
        job.states.push_back(change);
        const int pos = s.state == "PENDING" ? queue_position(p, job_id, job.partition) : 0;
        if (callbacks.on_state) callbacks.on_state(change, pos);
        last = s;
      } else if (s.state == "PENDING" && callbacks.on_state) {
        callbacks.on_state(job.states.back(), queue_position(p, job_id, job.partition));
      }
      if (!s.exit_code.empty()) job.exit_code = s.exit_code;
      terminal_polls = is_terminal(s.state) ? terminal_polls + 1 : 0;
      if (terminal_polls >= 2) break;
    } else if (++unknown_polls >= 5) {
      break;  // Slurm no longer knows the job
    }
    // A cancelled job that Slurm is slow to end: give it two minutes, then record what is known.
    if (cancel_sent && std::chrono::steady_clock::now() - cancel_at > std::chrono::minutes(2)) break;
    for (double waited = 0; waited < p.options.poll_s; waited += 0.05) {
      if (cancel && cancel->load() && !cancel_sent) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }
  poll_files();
  job.final_state = last.state;
  job.final_reason = last.reason;

  rec.finished_utc = utc_now();
  const double started = parse_utc(rec.started_utc), finished = parse_utc(rec.finished_utc);
  if (std::isfinite(started) && std::isfinite(finished)) rec.wall_time_s = finished - started;
  // All attempts' lines: those printed before capplan attached, too.
  const std::vector<std::string> all_lines = read_lines(job.output_file);
  std::vector<MetricsRecord> all_records;
  for (const auto& line : read_lines(p.run.metrics_file)) {
    if (auto r = parse_metrics_line(line)) all_records.push_back(std::move(*r));
  }
  job.attempts = slurm_attempts(all_lines, all_records);
  for (const auto& line : all_lines) {
    if (line.rfind("capplan: draining ", 0) == 0) job.drained.push_back(line.substr(18));
  }
  rec.measured = summarize_metrics(final_timeline(all_records));
  rec.goodput = job_goodput(p, rec, all_records);

  set_job_outcome(rec, job_id, all_lines, cancel_sent);
  const std::string err = write_run_record(rec);
  if (!err.empty()) rec.reason += (rec.reason.empty() ? "" : "; ") + std::string("run record not written: ") + err;
  return rec;
}

Loaded<PreparedSlurmRun> attach_slurm_run(const std::string& job_id, const std::string& run_dir_in) {
  Loaded<PreparedSlurmRun> out;
  Diagnostics& d = out.diagnostics;
  PreparedSlurmRun p;
  p.sbatch = find_executable("sbatch");
  p.squeue = find_executable("squeue");
  p.scontrol = find_executable("scontrol");
  p.scancel = find_executable("scancel");
  p.sacct = find_executable("sacct");
  p.sinfo = find_executable("sinfo");
  if (p.scontrol.empty() || p.squeue.empty()) {
    d.error(kFile, 0, 0, "--attach", "squeue and scontrol are needed to follow a job and are not in PATH");
    return out;
  }
  if (job_id.empty() || job_id.find_first_not_of("0123456789_") != std::string::npos) {
    d.error(kFile, 0, 0, "--attach", "'" + job_id + "' is not a Slurm job id");
    return out;
  }
  const Captured c = capture({p.scontrol, "show", "job", "-o", job_id});
  const std::string line = trim(c.out);
  std::string run_dir = run_dir_in.empty() ? std::string() : absolute(run_dir_in);
  if (c.exit_code != 0 || line.empty()) {
    d.error(kFile, 0, 0, "--attach", "Slurm does not know job " + job_id + ": " + trim(c.err));
    return out;
  }
  if (run_dir.empty()) run_dir = field(line, "WorkDir");
  const Loaded<Plan> plan = load_plan(run_dir + "/plan.yaml");
  if (!plan.ok()) {
    d.append(plan.diagnostics);
    d.error(kFile, 0, 0, "--dir", "'" + run_dir + "' does not hold the plan.yaml of a capplan run", "give its --dir");
    return out;
  }
  PreparedRun& pr = p.run;
  RunRecord& rec = pr.record;
  rec.run_dir = run_dir;
  rec.scenario = rec.original = plan.value->scenario;
  rec.layout = rec.original_layout = plan.value->layout;
  rec.model_ref = plan.value->model_ref;
  rec.cluster_ref = plan.value->cluster_ref;
  rec.predicted = estimate(rec.scenario, rec.layout);
  rec.started_utc = field(line, "SubmitTime").empty() ? utc_now() : field(line, "SubmitTime") + "Z";
  pr.metrics_file = run_dir + "/metrics.jsonl";
  pr.log_file = run_dir + "/output.log";
  SlurmJob job;
  job.job_id = job_id;
  job.partition = field(line, "Partition");
  job.account = field(line, "Account");
  job.time_limit = field(line, "TimeLimit");
  job.nodes = std::atoi(field(line, "NumNodes").c_str());
  job.script = run_dir + "/job.sbatch";
  for (const auto& l : read_lines(job.script)) {
    if (l.rfind("MAX_REQUEUE=", 0) == 0) job.requeue_limit = std::atoi(l.c_str() + 12);
  }
  // The trainer's step count and checkpoint interval, from the script's argument list.
  const std::vector<std::string> sl = read_lines(job.script);
  for (size_t i = 0; i + 1 < sl.size(); ++i) {
    if (sl[i] == "  --steps") rec.steps = std::atoi(sl[i + 1].c_str() + 2);
    if (sl[i] == "  --checkpoint-every") pr.train.options.checkpoint_every = std::atoi(sl[i + 1].c_str() + 2);
  }
  pr.train.options.steps = rec.steps;
  p.options.partition = job.partition;
  p.options.requeue = job.requeue_limit;
  rec.slurm = job;
  for (const auto& l : read_lines(run_dir + "/command.txt")) rec.command.push_back(l);
  p.job_script = job.script;
  out.value = std::move(p);
  return out;
}

}  // namespace capplan::rt
