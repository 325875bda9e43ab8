// `capplan run`: launches capplan-train through mpirun on a plan's layout (from --plan or the
// flags of `capplan estimate`), optionally scaled down to this machine, streams its progress and
// leaves in RUNDIR the metrics, checkpoints, command.txt and the run record (run.json, run.txt)
// with predicted, simulated and measured step time side by side. The work is capplan::launch's.
#include <signal.h>

#include <atomic>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <optional>

#include "cli_common.h"

#include "planner/plan_io.h"
#include "launch/launch.h"

namespace capplan::cli {

namespace {

std::atomic<bool> g_cancel{false};
extern "C" void on_interrupt(int) { g_cancel = true; }

std::string default_run_dir() {
  const std::time_t t = std::time(nullptr);
  std::tm tm {};
  ::gmtime_r(&t, &tm);
  char buf[64];
  std::strftime(buf, sizeof buf, "runs/run-%Y%m%d-%H%M%S", &tm);
  return buf;
}

std::vector<FlagSpec> run_flags() {
  return {
      {"plan", true, "plan file (capplan plan --save); instead of --model/--cluster/layout flags", "FILE"},
      {"scale-down", false, "keep the layout and knobs, shrink the model so it runs here in seconds", ""},
      {"steps", true, "training steps (default 10)", "N"},
      {"dir", true, "run directory (default runs/run-DATE-TIME)", "RUNDIR"},
      {"seed", true, "global seed (default 1234)", "S"},
      {"data", true, "corpus (default: the bundled text, configs/corpus/sqlite-api), synthetic, or a token shard directory", "DIR"},
      {"threads", true, "threads per rank (default cores / ranks)", "N"},
      {"backend", true, "capplan-train's backend: auto | cpu | cuda (default auto)", "B"},
      {"max-ranks", true, "shrink the layout to at most N MPI ranks (without it, more than max(8, 2 x cores) is refused)", "N"},
      {"resume", true, "auto | never | checkpoint folder (default never)", "R"},
      {"checkpoint-every", true, "steps between checkpoints (default ceil(steps / 4))", "N"},
      {"dry-run", false, "check, scale and write RUNDIR's model, plan and command, then stop", ""},
      {"timeout", true, "stop the job after this many seconds; the run then fails (default none)", "S"},
      {"train-bin", true, "capplan-train to run (default: next to capplan, $CAPPLAN_TRAIN, PATH)", "PATH"},
      {"mpirun", true, "mpirun to use (default $CAPPLAN_MPIRUN or mpirun from PATH)", "PATH"},
      {"peak-gflops", true, "state this machine's fp32 GEMM peak instead of measuring it", "X"},
      {"hostfile", true, "Open MPI hostfile: run the ranks over these hosts (plain SSH access)", "FILE"},
      {"slurm", false, "submit to Slurm (sbatch) and follow the job instead of running here", ""},
      {"partition", true, "with --slurm: the partition (default: the cluster's default)", "P"},
      {"account", true, "with --slurm: the account to charge", "A"},
      {"time", true, "with --slurm: the job's time limit (default: the partition's)", "HH:MM:SS"},
      {"requeue", true, "with --slurm: requeue a failed attempt up to N times, resuming (default 3)", "N"},
      {"attach", true, "with --slurm: follow job JOBID submitted earlier (its --dir, or Slurm's WorkDir)", "JOBID"},
  };
}

std::string fmt_opt(double v, const char* unit, int decimals = 3) {
  if (!std::isfinite(v)) return "-";
  return fmt_fixed(v, decimals) + unit;
}

// Follows a submitted job to its end: state changes, queue position, output lines and steps.
int follow_job(const rt::PreparedSlurmRun& prepared, const std::string& job_id, bool json, int steps) {
  std::FILE* progress = json ? stderr : stdout;
  ::signal(SIGPIPE, SIG_IGN);
  struct sigaction sa {}, old_int {}, old_term {};
  sa.sa_handler = on_interrupt;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, &old_int);
  sigaction(SIGTERM, &sa, &old_term);
  rt::SlurmCallbacks cb;
  cb.on_output = [&](rt::OutputStream, const std::string& line) {
    std::fprintf(progress, "  | %s\n", line.c_str());
    std::fflush(progress);
  };
  cb.on_state = [&](const rt::SlurmStateChange& c, int position) {
    static std::string last;
    std::string text = "slurm: job " + job_id + " " + c.state;
    if (!c.reason.empty() && c.reason != "None") text += " (" + c.reason + ")";
    if (position > 0) text += ", queue position " + std::to_string(position);
    if (c.restarts > 0) text += ", requeued " + std::to_string(c.restarts) + "x";
    if (text == last) return;
    last = text;
    std::fprintf(progress, "%s\n", text.c_str());
    std::fflush(progress);
  };
  cb.on_metrics = [&](const rt::MetricsRecord& r) {
    if (r.type == "start" && r.number("resumed_from_step", 0) > 0) {
      std::fprintf(progress, "resumed from step %.0f\n", r.number("resumed_from_step", 0));
    }
    if (r.type != "step") return;
    std::fprintf(progress, "step %3.0f/%d  loss %s  step %s  %s tokens/s\n", r.number("step", 0), steps,
                 fmt_opt(r.number("loss"), "", 4).c_str(), fmt_opt(r.number("step_time_s"), " s").c_str(),
                 fmt_opt(r.number("tokens_per_s"), "", 0).c_str());
    std::fflush(progress);
  };
  const rt::RunRecord rec = rt::follow_slurm_job(prepared, job_id, cb, &g_cancel);
  sigaction(SIGINT, &old_int, nullptr);
  sigaction(SIGTERM, &old_term, nullptr);
  if (json) std::printf("%s", rt::run_record_json(rec).c_str());
  else std::printf("\n%s", rt::run_record_text(rec).c_str());
  if (rec.status != rt::RunStatus::Succeeded) {
    std::fprintf(stderr, "capplan run: %s: %s\n", rt::to_string(rec.status), rec.reason.c_str());
    return kExitFailure;
  }
  return kExitOk;
}

// The scenario and layout of --plan or of estimate's flags, and the run's flags, into a request;
// nullopt after an error (in `diags`).
std::optional<rt::LaunchRequest> request_from_args(const Args& args, bool slurm, Diagnostics& diags) {
  rt::LaunchRequest req;
  if (args.has("plan")) {
    for (const char* f : {"model", "cluster", "nodes", "gpus", "dp", "tp", "pp", "gbs"}) {
      if (slurm && std::string(f) == "nodes") continue;  // with --slurm, --nodes is the job's
      if (args.has(f)) {
        diags.error(kCommandLine, 0, 0, std::string("--") + f,
                    "--plan gives the model, cluster and layout; --" + std::string(f) + " cannot be combined with it");
      }
    }
    Loaded<Plan> plan = load_plan(args.get("plan"));
    diags.append(plan.diagnostics);
    if (plan.ok()) {
      req.scenario = plan.value->scenario;
      req.layout = plan.value->layout;
      req.model_ref = plan.value->model_ref;
      req.cluster_ref = plan.value->cluster_ref;
    }
  } else {
    auto scenario = scenario_from_args(args, diags, false, true, false);
    auto layout = layout_from_args(args, diags);
    if (!args.has("model") && !args.has("cluster")) {
      Diagnostic note;
      note.severity = Severity::Note;
      note.file = kCommandLine;
      note.message = "capplan run takes a plan file (--plan plan.yaml, from `capplan plan --save`) "
                     "or the flags of `capplan estimate`";
      diags.add(note);
    }
    if (scenario && layout) {
      req.scenario = scenario->scenario;
      req.layout = *layout;
      req.model_ref = scenario->model_ref;
      req.cluster_ref = scenario->cluster_ref;
    }
  }
  req.device_profile = device_profile_flag(args, diags);
  const auto steps = int_flag(args, "steps", diags, 1, 1000000);
  const auto seed = int_flag(args, "seed", diags, 0, INT64_MAX);
  const auto threads = int_flag(args, "threads", diags, 1, 1024);
  const auto max_ranks = int_flag(args, "max-ranks", diags, 1, 1 << 20);
  const auto peak = number_flag(args, "peak-gflops", diags, 0, 1e12);
  const auto checkpoint_every = int_flag(args, "checkpoint-every", diags, 1, 1000000000);
  const auto timeout = number_flag(args, "timeout", diags, 0, 1e9);
  if (args.has("backend") && args.get("backend") != "auto" && args.get("backend") != "cpu" &&
      args.get("backend") != "cuda")
    flag_error(diags, "backend", "expected auto, cpu or cuda, found '" + args.get("backend") + "'");
  if (diags.has_errors()) return std::nullopt;

  req.scale_down = args.has("scale-down");
  req.steps = int(steps.value_or(10));
  req.seed = uint64_t(seed.value_or(1234));
  req.threads = int(threads.value_or(0));
  req.backend = args.get("backend", "auto");
  req.max_ranks = int(max_ranks.value_or(0));
  req.shrink_to_max_ranks = max_ranks.has_value();
  req.stated_gemm_peak_gflops = peak.value_or(0);
  req.data = rt::resolve_run_data(args.get("data", "corpus"));
  req.resume = args.get("resume", "never");
  req.checkpoint_every = int(checkpoint_every.value_or(0));
  req.timeout_s = timeout.value_or(0);
  req.run_dir = args.get("dir", default_run_dir());
  req.train_binary = args.get("train-bin");
  req.mpirun = args.get("mpirun");
  req.hostfile = args.get("hostfile");
#ifdef CAPPLAN_TRAIN_BUILD_PATH
  req.train_build_hint = CAPPLAN_TRAIN_BUILD_PATH;
#endif
  return req;
}

// --slurm: prepare the job, print it, submit it (not with --dry-run) and follow it.
int run_on_slurm(const Args& args, const rt::LaunchRequest& req, Diagnostics& diags) {
  rt::SlurmOptions so;
  so.partition = args.get("partition");
  so.account = args.get("account");
  so.time_limit = args.get("time");
  const auto requeue = int_flag(args, "requeue", diags, 0, 1000);
  const auto nodes = int_flag(args, "nodes", diags, 1, 1 << 20);
  if (diags.has_errors()) return report(diags);
  so.requeue = int(requeue.value_or(3));
  so.nodes = int(nodes.value_or(0));
  auto prepared = rt::prepare_slurm_run(req, so);
  diags.append(prepared.diagnostics);
  if (!prepared.ok()) return report(diags);
  report(diags);
  const bool json = args.has("json");
  std::FILE* progress = json ? stderr : stdout;
  const rt::RunRecord& pre = prepared.value->run.record;
  std::fprintf(progress, "capplan run --slurm: %d ranks (%s) on %d node(s), %d steps, in %s\n", pre.layout.gpus(),
               pre.layout.grid().c_str(), prepared.value->options.nodes, req.steps, pre.run_dir.c_str());
  for (const auto& c : pre.changes) std::fprintf(progress, "  - %s\n", c.c_str());
  std::fprintf(progress, "job script: %s/job.sbatch\ncommand: %s\n", pre.run_dir.c_str(),
               rt::shell_quote(prepared.value->sbatch_argv).c_str());
  std::fflush(progress);
  if (args.has("dry-run")) {
    if (json) std::printf("%s", rt::run_record_json(pre).c_str());
    return kExitOk;
  }
  std::string err;
  const std::string job_id = rt::submit_slurm_job(*prepared.value, &err);
  if (job_id.empty()) {
    std::fprintf(stderr, "capplan run: %s\n", err.c_str());
    return kExitFailure;
  }
  std::fprintf(progress, "slurm: submitted job %s (capplan run --slurm --attach %s follows it again)\n",
               job_id.c_str(), job_id.c_str());
  std::fflush(progress);
  return follow_job(*prepared.value, job_id, json, req.steps);
}

// What will run and what it is predicted to take, before it starts.
void print_prepared(std::FILE* progress, const rt::LaunchRequest& req, const rt::RunRecord& pre) {
  std::fprintf(progress, "capplan run: %d ranks (%s), %d steps, in %s\n", pre.layout.gpus(),
               pre.layout.grid().c_str(), req.steps, req.run_dir.c_str());
  if (!pre.changes.empty()) {
    std::fprintf(progress, "%s\n", req.scale_down ? "scaled down:" : "on this machine:");
    for (const auto& c : pre.changes) std::fprintf(progress, "  - %s\n", c.c_str());
  }
  if (pre.predicted) {
    const Estimate& e = *pre.predicted;
    std::fprintf(progress, "predicted step time %s", fmt_opt(e.step_time_s, " s").c_str());
    if (e.step_time_s_p90 > e.step_time_s_p10)
      std::fprintf(progress, " (p10-p90 %s-%s)", fmt_opt(e.step_time_s_p10, "").c_str(),
                   fmt_opt(e.step_time_s_p90, " s").c_str());
    if (pre.simulated) std::fprintf(progress, ", simulated %s", fmt_opt(pre.simulated->step_time_s, " s").c_str());
    std::fprintf(progress, "\n");
  }
  std::fprintf(progress, "command: %s\n", rt::shell_quote(pre.command).c_str());
  std::fflush(progress);
}

// The prepared run here, through mpirun: output lines and steps as they come, Ctrl-C or SIGTERM
// cancels, then the record.
int run_here(const rt::PreparedRun& prepared, int steps, bool json) {
  std::FILE* progress = json ? stderr : stdout;
  // A closed stdout or stderr (e.g. `capplan run ... | head`) must not kill capplan and orphan
  // the job: writes then just fail, and the run goes on to its record.
  ::signal(SIGPIPE, SIG_IGN);
  struct sigaction sa {}, old_int {}, old_term {};
  sa.sa_handler = on_interrupt;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, &old_int);
  sigaction(SIGTERM, &sa, &old_term);

  rt::RunCallbacks cb;
  cb.on_output = [&](rt::OutputStream s, const std::string& line) {
    std::FILE* to = (json || s == rt::OutputStream::Stderr) ? stderr : stdout;
    std::fprintf(to, "  | %s\n", line.c_str());
    std::fflush(to);
  };
  cb.on_metrics = [&](const rt::MetricsRecord& r) {
    if (r.type != "step") return;
    std::fprintf(progress, "step %3.0f/%d  loss %s  step %s  %s tokens/s\n", r.number("step", 0), steps,
                 fmt_opt(r.number("loss"), "", 4).c_str(), fmt_opt(r.number("step_time_s"), " s").c_str(),
                 fmt_opt(r.number("tokens_per_s"), "", 0).c_str());
    std::fflush(progress);
  };
  const rt::RunRecord rec = rt::execute_run(prepared, cb, &g_cancel);
  sigaction(SIGINT, &old_int, nullptr);
  sigaction(SIGTERM, &old_term, nullptr);

  if (json) {
    std::printf("%s", rt::run_record_json(rec).c_str());
  } else {
    std::printf("\n%s", rt::run_record_text(rec).c_str());
  }
  if (rec.status != rt::RunStatus::Succeeded) {
    std::fprintf(stderr, "capplan run: %s: %s\n", rt::to_string(rec.status), rec.reason.c_str());
    // capplan-train exits 2 when it refuses its input (e.g. a layout it cannot run): bad input.
    return rec.status == rt::RunStatus::Failed && rec.exit_code == kExitBadInput ? kExitBadInput : kExitFailure;
  }
  return kExitOk;
}

}  // namespace

int cmd_run(int argc, char** argv) {
  const std::vector<FlagSpec> flags =
      concat(concat(concat(scenario_flags(), layout_flags()), run_flags()), {json_flag()});
  Diagnostics diags;
  const Args args = parse_args(argc, argv, flags, diags);
  if (args.help()) {
    print_help("run",
               "--plan plan.yaml | <estimate's flags> [--scale-down] [--steps N] [--dir RUNDIR] [--json]",
               flags);
    return kExitOk;
  }
  if (diags.has_errors()) return report(diags);

  const bool slurm = args.has("slurm") || args.has("attach");
  for (const char* f : {"partition", "account", "time", "requeue", "attach"}) {
    if (args.has(f) && !args.has("slurm")) {
      diags.error(kCommandLine, 0, 0, std::string("--") + f, std::string("--") + f + " needs --slurm");
    }
  }
  if (slurm && args.has("hostfile")) {
    diags.error(kCommandLine, 0, 0, "--hostfile", "--hostfile runs through mpirun over SSH; Slurm places the ranks itself",
                "drop --hostfile or --slurm");
  }
  if (args.has("attach")) {
    if (diags.has_errors()) return report(diags);
    auto attached = rt::attach_slurm_run(args.get("attach"), args.get("dir"));
    diags.append(attached.diagnostics);
    if (!attached.ok()) return report(diags);
    std::fprintf(args.has("json") ? stderr : stdout, "capplan run: attached to Slurm job %s in %s\n",
                 args.get("attach").c_str(), attached.value->run.record.run_dir.c_str());
    return follow_job(*attached.value, args.get("attach"), args.has("json"), attached.value->run.record.steps);
  }

  const std::optional<rt::LaunchRequest> req = request_from_args(args, slurm, diags);
  if (!req) return report(diags);
  if (slurm) return run_on_slurm(args, *req, diags);

  auto prepared = rt::prepare_run(*req);
  diags.append(prepared.diagnostics);
  if (!prepared.ok()) return report(diags);
  report(diags);  // warnings, if any
  const bool json = args.has("json");
  print_prepared(json ? stderr : stdout, *req, prepared.value->record);
  if (args.has("dry-run")) {
    if (json) std::printf("%s", rt::run_record_json(prepared.value->record).c_str());
    return kExitOk;
  }
  return run_here(*prepared.value, req->steps, json);
}

}  // namespace capplan::cli
