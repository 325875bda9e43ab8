// A whole run: check the request and prepare RUNDIR (prepare_run), then start mpirun, stream its
// output and metrics, and write the run record whatever happens (execute_run).
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <sstream>

#include "planner/format.h"
#include "planner/plan_io.h"
#include "launch/launch.h"
#include "planner/device_profile.h"

#include "simulator/step_simulation.h"

namespace capplan::rt {
namespace {

const char* kFile = "<command line>";


// mkdir -p; returns an error message, empty on success.
std::string make_dirs(const std::string& path) {
  if (path.empty()) return "empty path";
  std::string partial;
  size_t pos = 0;
  while (pos != std::string::npos) {
    pos = path.find('/', pos + 1);
    partial = path.substr(0, pos);
    if (partial.empty()) continue;
    if (::mkdir(partial.c_str(), 0755) != 0 && errno != EEXIST) {
      return "cannot create '" + partial + "': " + std::strerror(errno);
    }
  }
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) return "'" + path + "' is not a directory";
  if (::access(path.c_str(), W_OK) != 0) return "'" + path + "' is not writable: " + std::strerror(errno);
  return {};
}


std::string find_mpirun(const std::string& requested) {
  if (!requested.empty()) return find_executable(requested);
  if (const char* env = std::getenv("CAPPLAN_MPIRUN"); env && *env) return find_executable(env);
  std::string p = find_executable("mpirun");
#ifdef CAPPLAN_MPIEXEC
  if (p.empty()) p = find_executable(CAPPLAN_MPIEXEC);
#endif
  return p;
}

}  // namespace

namespace {

// This machine as the request wants it measured or stated.
LocalMachine machine_for(const LaunchRequest& req) {
  LocalMachine m = probe_local_machine(req.measure_machine && req.stated_gemm_peak_gflops <= 0,
                                       req.measure_machine && req.stated_memory_gbyte_per_s <= 0);
  if (req.stated_gemm_peak_gflops > 0) {
    m.gemm_peak_gflops = req.stated_gemm_peak_gflops;
    m.gemm_peak_source = "stated by the user";
  }
  if (req.stated_memory_gbyte_per_s > 0) {
    m.memory_gbyte_per_s = req.stated_memory_gbyte_per_s;
    m.memory_source = "stated by the user";
  }
  if (m.memory_gbyte_per_s <= 0) {
    // The cost model needs a bandwidth; without a measurement, a conservative DDR4 figure, said so.
    m.memory_gbyte_per_s = 10;
    m.memory_source = "stated default: 10 GB/s (not measured)";
  }
  return m;
}

// The layout that will run here: the request's, shrunk to max_ranks when asked (the changes say
// how), checked against the plan and this machine's rank limit.
Layout local_layout(const LaunchRequest& req, const LocalMachine& machine, std::vector<std::string>& changes,
                    Diagnostics& d) {
  Layout layout = req.layout;
  if (req.steps <= 0) d.error(kFile, 0, 0, "steps", "must be > 0, found " + std::to_string(req.steps));
  if (auto why = check_layout(req.scenario, layout)) {
    d.error(kFile, 0, 0, "layout", "invalid layout for the plan: " + *why);
  }
  const int max_ranks = req.max_ranks > 0 ? req.max_ranks : std::max(8, 2 * machine.cores);
  if (req.shrink_to_max_ranks && layout.gpus() > max_ranks) {
    ShrunkLayout s = shrink_layout(layout, max_ranks);
    layout = s.layout;
    changes = std::move(s.changes);
  }
  if (machine.gemm_peak_gflops <= 0) {
    d.error(kFile, 0, 0, "machine", "this machine's fp32 GEMM peak is unknown, so nothing can be predicted",
            "let capplan measure it, or state it (--peak-gflops)");
  }
  const int ranks = layout.gpus();
  if (ranks > max_ranks) {
    d.error(kFile, 0, 0, "layout",
            "the layout needs " + std::to_string(ranks) + " ranks (" + layout.grid() + "), more than the " +
                std::to_string(max_ranks) + " this machine allows (" + std::to_string(machine.cores) +
                " cores; --max-ranks)",
            "--scale-down keeps the layout; run a plan for fewer GPUs, e.g. `capplan plan ... --gpus " +
                std::to_string(std::min(max_ranks, 8)) + "`");
  }
  return layout;
}

// The planner's prediction and the simulator's step for what will run, and whether it fits in
// this machine's memory.
void predict(const LaunchRequest& req, const ScaledRun& run, RunRecord& rec, Diagnostics& d) {
  if (auto why = check_layout(run.scenario, run.layout)) {
    d.error(kFile, 0, 0, "layout",
            std::string(req.scale_down ? "after scale-down" : "on this machine") + ", the layout is invalid: " + *why);
    return;
  }
  const int ranks = run.layout.gpus();
  Estimate e = estimate(run.scenario, run.layout);
  const double need = e.memory_per_gpu_bytes.total;
  const double have = rec.machine.ram_bytes / std::max(1, ranks);
  if (rec.machine.ram_bytes > 0 && need > have) {
    d.error(kFile, 0, 0, "model",
            "the run needs about " + fmt_bytes(need) + " per rank (planner estimate), but this machine has " +
                fmt_bytes(have) + " per rank (" + fmt_bytes(rec.machine.ram_bytes) + " / " +
                std::to_string(ranks) + " ranks)",
            req.scale_down ? "lower --seq or pick a plan with fewer layers per stage"
                           : "add --scale-down to keep the layout on a model that fits here");
  }
  rec.predicted = std::move(e);
  StepSimulationOptions so;
  so.record_timeline = false;
  const StepSimulation sim = simulate_step(run.scenario, run.layout, so);
  if (sim.error.empty()) {
    SimulatedStep s;
    s.step_time_s = sim.step_time_s;
    s.breakdown_s = sim.breakdown_s;
    s.bubble_fraction = sim.bubble_fraction;
    rec.simulated = s;
  }
}

// capplan-train and mpirun, each an error when missing; empty strings then.
void locate_programs(const LaunchRequest& req, std::string& train, std::string& mpirun, Diagnostics& d) {
  train = req.train_binary.empty() ? locate_train_binary(self_executable(), req.train_build_hint)
                                   : find_executable(req.train_binary);
  if (train.empty()) {
    d.error(kFile, 0, 0, "capplan-train",
            req.train_binary.empty()
                ? std::string("capplan-train not found (looked in $CAPPLAN_TRAIN, next to capplan, in the build tree and in PATH)")
                : "capplan-train '" + req.train_binary + "' does not exist or is not executable",
            "build it (cmake --build BUILD --target capplan-train) or set CAPPLAN_TRAIN=/path/to/capplan-train");
  }
  mpirun = find_mpirun(req.mpirun);
  if (mpirun.empty()) {
    d.error(kFile, 0, 0, "mpirun",
            "mpirun not found" + (req.mpirun.empty() ? std::string(" in PATH") : " at '" + req.mpirun + "'"),
            "install Open MPI (apt-get install openmpi-bin) or set CAPPLAN_MPIRUN");
  }
}

// A hostfile (Open MPI's format: "host [slots=N] [max_slots=N]", # comments) spreads the ranks
// over hosts reached by SSH; each line is checked here rather than by mpirun mid-start.
void check_hostfile(const std::string& path, Diagnostics& d) {
  std::ifstream hf(path);
  if (!hf) {
    d.error(path, 0, 0, "--hostfile", std::string("cannot read the hostfile: ") + std::strerror(errno));
    return;
  }
  int line_no = 0, hosts = 0;
  for (std::string line; std::getline(hf, line);) {
    ++line_no;
    line = line.substr(0, line.find('#'));
    std::istringstream words(line);
    std::string host, opt;
    if (!(words >> host)) continue;
    ++hosts;
    while (words >> opt) {
      const size_t eq = opt.find('=');
      const std::string key = opt.substr(0, eq), value = eq == std::string::npos ? "" : opt.substr(eq + 1);
      const bool known = key == "slots" || key == "max_slots" || key == "max-slots";
      if (!known || value.empty() || value.find_first_not_of("0123456789") != std::string::npos) {
        d.error(path, line_no, 1, "hostfile", "'" + opt + "' after host '" + host + "': expected slots=N or max_slots=N");
      }
    }
  }
  if (hosts == 0) d.error(path, 0, 0, "hostfile", "no hosts in the hostfile");
}

// The command: mpirun over this machine (or the hostfile's hosts) and what capplan-train runs,
// with RUNDIR's model, checkpoints and metrics.
TrainCommand train_command(const LaunchRequest& req, const ScaledRun& run, const std::string& train,
                           const std::string& mpirun) {
  TrainCommand c;
  c.mpirun = mpirun.empty() ? "mpirun" : mpirun;
  c.train_binary = train.empty() ? "capplan-train" : train;
  c.as_root = ::geteuid() == 0;
  c.hostfile = req.hostfile;
  TrainOptions& o = c.options;
  o.model = req.run_dir + "/model.yaml";
  o.layout = run.layout;
  o.gbs = run.scenario.training.gbs;
  o.steps = req.steps;
  o.seed = req.seed;
  o.data = req.data;
  o.checkpoint_dir = req.run_dir + "/checkpoints";
  o.checkpoint_every = req.checkpoint_every > 0 ? req.checkpoint_every : std::max(1, (req.steps + 3) / 4);
  o.resume = req.resume;
  o.metrics = req.run_dir + "/metrics.jsonl";
  o.threads = req.threads;
  o.backend = req.backend;
  return c;
}

// RUNDIR/model.yaml, command.txt and plan.yaml: the scaled run on this machine's cluster spec as a
// plan, so that `capplan estimate --plan` and `capplan simulate --plan` reproduce the record's
// predicted and simulated figures. An error message, empty on success.
std::string write_run_files(const LaunchRequest& req, const ScaledRun& run, const RunRecord& rec) {
  std::string err = write_file_atomic(req.run_dir + "/model.yaml", model_yaml(run.scenario.model));
  if (err.empty()) err = write_file_atomic(req.run_dir + "/command.txt", shell_quote(rec.command) + "\n");
  if (!err.empty()) return err;
  Plan plan;
  plan.model_ref = req.run_dir + "/model.yaml";
  plan.cluster_ref = "this machine";
  plan.scenario = run.scenario;
  plan.layout = run.layout;
  plan.created_by = "capplan run";
  return save_plan(plan, req.run_dir + "/plan.yaml");
}

}  // namespace

Loaded<PreparedRun> prepare_run(const LaunchRequest& req) {
  Loaded<PreparedRun> out;
  Diagnostics& d = out.diagnostics;
  PreparedRun p;
  RunRecord& rec = p.record;
  rec.model_ref = req.model_ref;
  rec.cluster_ref = req.cluster_ref;
  rec.original = req.scenario;
  rec.original_layout = req.layout;
  rec.scaled_down = req.scale_down;
  rec.steps = req.steps;
  rec.run_dir = req.run_dir;
  rec.machine = machine_for(req);
  std::vector<std::string> shrunk;
  const Layout layout = local_layout(req, rec.machine, shrunk, d);

  // What will run, on a cluster spec of this machine.
  ClusterSpec local = local_cluster_spec(rec.machine, layout.gpus());
  if (req.device_profile) {
    const std::string why = device_profile_mismatch(*req.device_profile, req.scenario.model, local, "--device-profile");
    if (!why.empty())
      d.error(kFile, 0, 0, "device_profile", why);
    else
      local.device_profile = req.device_profile;
  }
  if (local.device_profile)
    shrunk.push_back("predicted with the device profile measured on " + local.device_profile->device + " (" +
                     local.device_profile->created_utc + ") instead of the probed GEMM peak and copy bandwidth");
  const ScaledRun run = req.scale_down ? scale_down(req.scenario, layout, local, req.scale_options)
                                       : run_as_is(req.scenario, layout, local);
  rec.changes = shrunk;
  rec.changes.insert(rec.changes.end(), run.changes.begin(), run.changes.end());
  rec.scenario = run.scenario;
  rec.layout = run.layout;
  if (!d.has_errors()) predict(req, run, rec, d);

  std::string train, mpirun;
  locate_programs(req, train, mpirun, d);
  if (!req.hostfile.empty()) check_hostfile(req.hostfile, d);
  // The run directory: created, and must take files.
  const std::string dir_error = req.run_dir.empty() ? std::string("no run directory given") : make_dirs(req.run_dir);
  if (!dir_error.empty()) d.error(kFile, 0, 0, "dir", "run directory: " + dir_error, "choose another --dir");

  p.train = train_command(req, run, train, mpirun);
  p.metrics_file = p.train.options.metrics;
  p.log_file = req.run_dir + "/output.log";
  p.timeout_s = req.timeout_s;
  rec.command = build_train_argv(p.train);
  if (!d.has_errors()) {
    if (const std::string err = write_run_files(req, run, rec); !err.empty()) {
      d.error(kFile, 0, 0, "dir", "run directory: " + err, "choose another --dir");
    }
  }
  if (d.has_errors() && dir_error.empty() && ::access((req.run_dir + "/run.json").c_str(), F_OK) != 0) {
    // A run refused before it started still leaves its record, with the reasons; the record of
    // an earlier run in the same directory is kept rather than replaced by a refusal.
    rec.status = RunStatus::NotStarted;
    rec.reason = d.to_string();
    while (!rec.reason.empty() && rec.reason.back() == '\n') rec.reason.pop_back();
    rec.finished_utc = utc_now();
    write_run_record(rec);
  }
  if (!d.has_errors()) out.value = std::move(p);
  return out;
}

RunRecord execute_run(const PreparedRun& prepared, const RunCallbacks& callbacks,
                      const std::atomic<bool>* cancel) {
  RunRecord rec = prepared.record;
  rec.status = RunStatus::Running;
  rec.started_utc = utc_now();
  ::unlink(prepared.metrics_file.c_str());  // a tail must not read a previous run's lines

  std::ofstream log(prepared.log_file, std::ios::trunc);
  // For the reason of a failure: the job's own error lines ("...: error: ..."), else the last
  // stderr line that is not mpirun's banner ruling.
  std::vector<std::string> error_lines;
  std::string last_err;
  std::vector<MetricsRecord> records;
  MetricsTail tail(prepared.metrics_file);
  auto poll_metrics = [&] {
    for (auto& r : tail.read_new_records()) {
      if (callbacks.on_metrics) callbacks.on_metrics(r);
      records.push_back(std::move(r));
    }
  };

  // One stop flag for run_process, raised by the caller's cancel or by the time limit.
  std::atomic<bool> stop{false};
  bool timed_out = false;
  const auto t0 = std::chrono::steady_clock::now();
  auto check_stop = [&] {
    if (cancel && cancel->load()) stop = true;
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (prepared.timeout_s > 0 && elapsed > prepared.timeout_s && !stop) {
      timed_out = true;
      stop = true;
    }
  };

  ProcessOptions opt;
  opt.on_tick = [&] {
    poll_metrics();
    check_stop();
  };
  opt.tick_s = 0.05;
  // Open MPI's single-copy shared-memory path where this machine allows it, else copy-in/out
  // (launch_process.h).
  for (const std::string& e : mpi_transport_env()) opt.env.push_back(e);
  const ProcessResult res = run_process(
      rec.command, opt,
      [&](OutputStream s, const std::string& line) {
        if (log) log << line << '\n' << std::flush;
        if (line.find("error:") != std::string::npos && error_lines.size() < 3) {
          error_lines.push_back(line);
        }
        if (s == OutputStream::Stderr && line.find_first_not_of("- \t") != std::string::npos) {
          last_err = line;
        }
        if (callbacks.on_output) callbacks.on_output(s, line);
      },
      &stop);
  poll_metrics();

  rec.finished_utc = utc_now();
  rec.wall_time_s = res.wall_time_s;
  rec.exit_code = res.exit_code;
  rec.term_signal = res.term_signal;
  rec.measured = summarize_metrics(records);
  if (res.max_rss_bytes > 0) rec.measured.max_process_rss_bytes = res.max_rss_bytes;
  if (res.cancelled && timed_out) {
    rec.status = RunStatus::Failed;
    char limit[32];
    std::snprintf(limit, sizeof limit, "%g", prepared.timeout_s);
    rec.reason = std::string("timed out after ") + limit + " s with " + std::to_string(rec.measured.steps) +
                 " steps done (" + res.describe() + ")";
  } else if (res.cancelled) {
    rec.status = RunStatus::Cancelled;
    rec.reason = "cancelled by the user after " + std::to_string(rec.measured.steps) + " steps (" +
                 res.describe() + ")";
  } else if (res.succeeded()) {
    rec.status = RunStatus::Succeeded;
    if (rec.measured.steps == 0) {
      rec.status = RunStatus::Failed;
      rec.reason = "mpirun exited 0 but the metrics file has no step records";
    }
  } else {
    rec.status = RunStatus::Failed;
    std::string why = res.describe();
    if (!rec.measured.summary_reason.empty()) {
      why += ": " + rec.measured.summary_reason;
    } else if (!error_lines.empty()) {
      for (size_t i = 0; i < error_lines.size(); ++i) why += (i ? "; " : ": ") + error_lines[i];
    } else if (!last_err.empty()) {
      why += ": " + last_err;
    }
    rec.reason = why;
  }
  const std::string err = write_run_record(rec);
  if (!err.empty()) {
    rec.reason += (rec.reason.empty() ? "" : "; ") + std::string("run record not written: ") + err;
  }
  return rec;
}

}  // namespace capplan::rt
