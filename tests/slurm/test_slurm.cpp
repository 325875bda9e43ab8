// `capplan run --slurm` against a real, private Slurm (munged, slurmctld, slurmd started by the
// ctest fixture slurm_daemons; see slurm_fixture.sh). Each test runs the capplan CLI as a process.
// Expectations:
//  - a 2-rank job whose rank is SIGKILLed mid-run is requeued, resumes from its last checkpoint
//    and finishes with losses bitwise equal to an uninterrupted local run; the record lists both
//    attempts; paths and names with spaces, quotes and $( ) reach Slurm and the trainer as data;
//  - a health check that fails (a checkpoint folder on a tmpfs too small for two checkpoints)
//    stops the job before training, drains the node and puts the reason in the record;
//  - a run whose every attempt fails past the same checkpoint stops after its requeues, saying so;
//  - Ctrl-C cancels the job (scancel): squeue no longer lists it and no process of it remains;
//  - --attach follows a job after the capplan that submitted it was killed;
//  - bad input (no sbatch, an unknown partition, too many nodes, a time limit under one checkpoint
//    interval, an unwritable run directory) is exit status 2 with nothing submitted.
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/mount.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <thread>

#include "launch/launch.h"
#include "support/test_files.h"

extern char** environ;

namespace capplan::rt {
namespace {

namespace fs = std::filesystem;
using capplan::test::read_text;
using Clock = std::chrono::steady_clock;

// The fixture's environment (SLURM_CONF, node, partition), or why the daemons are not there.
struct Cluster {
  std::map<std::string, std::string> vars;
  std::string skip_reason;
};

const Cluster& cluster() {
  static const Cluster c = [] {
    Cluster k;
    const std::string dir = CAPPLAN_SLURM_DIR;
    const std::string skip = read_text(dir + "/skip");
    if (!skip.empty()) {
      k.skip_reason = "the private Slurm did not start: " + skip;
      return k;
    }
    std::ifstream env(dir + "/env");
    if (!env) {
      k.skip_reason = "the private Slurm was not started (run through ctest, which starts the slurm_daemons fixture)";
      return k;
    }
    for (std::string line; std::getline(env, line);) {
      const size_t eq = line.find('=');
      if (eq != std::string::npos) k.vars[line.substr(0, eq)] = line.substr(eq + 1);
    }
    return k;
  }();
  return c;
}

std::vector<std::string> env_entries(const std::string& path_override = {}) {
  std::vector<std::string> e = {"SLURM_CONF=" + cluster().vars.at("SLURM_CONF"), "OMPI_ALLOW_RUN_AS_ROOT=1",
                                "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1", "CAPPLAN_TRAIN=" CAPPLAN_TRAIN};
  if (!path_override.empty()) e.push_back("PATH=" + path_override);
  return e;
}

struct Result {
  int exit_code = -1;
  std::string out, err;
};

Result run(const std::vector<std::string>& argv, const std::vector<std::string>& env = env_entries(),
           const std::string& cwd = {}) {
  ProcessOptions opt;
  opt.env = env;
  opt.working_dir = cwd;
  Result r;
  const ProcessResult p = run_process(argv, opt, [&](OutputStream s, const std::string& line) {
    (s == OutputStream::Stdout ? r.out : r.err) += line + "\n";
  });
  EXPECT_TRUE(p.started) << p.error;
  r.exit_code = p.exit_code;
  return r;
}

// capplan in the background, its output to a file, for tests that signal it.
struct Background {
  pid_t pid = -1;
  std::string log;
  int wait(double timeout_s) {
    const auto end = Clock::now() + std::chrono::duration<double>(timeout_s);
    int status = 0;
    while (Clock::now() < end) {
      const pid_t w = ::waitpid(pid, &status, WNOHANG);
      if (w == pid) {
        pid = -1;
        return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return -1;
  }
  ~Background() {
    if (pid > 0) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, nullptr, 0);
    }
  }
};

Background start(std::vector<std::string> args, const std::string& log) {
  args.insert(args.begin(), CAPPLAN_EXE);
  std::vector<std::string> env;
  for (char** e = environ; *e; ++e) env.push_back(*e);
  for (const auto& x : env_entries()) env.push_back(x);
  std::vector<char*> cargv, cenv;
  for (auto& a : args) cargv.push_back(a.data());
  cargv.push_back(nullptr);
  for (auto& x : env) cenv.push_back(x.data());
  cenv.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&fa, 1, 2);
  Background b;
  b.log = log;
  EXPECT_EQ(posix_spawn(&b.pid, cargv[0], &fa, nullptr, cargv.data(), cenv.data()), 0);
  posix_spawn_file_actions_destroy(&fa);
  return b;
}

Result capplan(std::vector<std::string> args, const std::vector<std::string>& env = env_entries()) {
  args.insert(args.begin(), CAPPLAN_EXE);
  return run(args, env);
}

// A model slow enough per step (about 10 ms on 2 ranks) that a test can act mid-run.
std::string write_model(const fs::path& path, const std::string& name, int hidden = 128, int layers = 2) {
  std::string quoted;  // a YAML single-quoted scalar: ' doubled
  for (char c : name) quoted += c == '\'' ? std::string("''") : std::string(1, c);
  std::ofstream f(path);
  f << "name: '" << quoted << "'\nlayers: " << layers << "\nhidden: " << hidden
    << "\nheads: 4\nvocab: 256\nseq_len: 64\nffn: gelu\ntied_embeddings: true\nnorm: layernorm\n";
  return path.string();
}

std::vector<std::string> layout_flags(const std::string& model, int steps, int checkpoint_every, int nodes = 1) {
  return {"--model", model, "--cluster", "p4d.24xlarge", "--nodes", std::to_string(nodes), "--gpus", "2", "--dp", "2", "--tp", "1",
          "--pp", "1", "--mbs", "1", "--gbs", "8", "--steps", std::to_string(steps), "--checkpoint-every",
          std::to_string(checkpoint_every), "--peak-gflops", "100"};
}

std::vector<std::string> concat(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// Step -> loss, each step from the newest run that recorded it.
std::map<int, double> losses(const fs::path& metrics) {
  std::map<int, double> out;
  std::ifstream f(metrics);
  for (std::string line; std::getline(f, line);) {
    const auto r = parse_metrics_line(line);
    if (r && r->type == "step") out[int(r->number("step", 0))] = r->number("loss");
  }
  return out;
}

int newest_step(const fs::path& metrics) {
  const auto l = losses(metrics);
  return l.empty() ? 0 : l.rbegin()->first;
}

bool wait_for(const std::function<bool()>& cond, double timeout_s) {
  const auto end = Clock::now() + std::chrono::duration<double>(timeout_s);
  while (Clock::now() < end) {
    if (cond()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return cond();
}

// Processes whose command line mentions `needle` (the test's run directory).
std::vector<pid_t> processes_mentioning(const std::string& needle, const std::string& program = {}) {
  std::vector<pid_t> pids;
  for (const auto& e : fs::directory_iterator("/proc")) {
    const std::string name = e.path().filename();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::string cmd = read_text(e.path() / "cmdline");
    if (cmd.empty()) continue;
    const std::string argv0 = cmd.substr(0, cmd.find('\0'));
    std::replace(cmd.begin(), cmd.end(), '\0', ' ');
    if (cmd.find(needle) == std::string::npos) continue;
    if (!program.empty() && fs::path(argv0).filename() != program) continue;
    pids.push_back(pid_t(std::stoi(name)));
  }
  return pids;
}

std::string json_string(const std::string& json, const std::string& key) {
  const std::regex re("\"" + key + "\": \"([^\"]*)\"");
  std::smatch m;
  return std::regex_search(json, m, re) ? m[1].str() : std::string();
}

size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t pos = text.find(what); pos != std::string::npos; pos = text.find(what, pos + 1)) ++n;
  return n;
}

std::string squeue_ids() {
  return run({"squeue", "-h", "-o", "%i"}).out;
}

class Slurm : public testing::Test {
 protected:
  void SetUp() override {
    if (!cluster().skip_reason.empty()) GTEST_SKIP() << cluster().skip_reason;
    node_ = cluster().vars.at("CAPPLAN_SLURM_NODE");
    partition_ = cluster().vars.at("CAPPLAN_SLURM_PARTITION");
  }
  void TearDown() override {
    if (!cluster().skip_reason.empty()) return;
    // Nothing of this test stays queued, and the node takes jobs again.
    run({"scancel", "--user=" + std::to_string(::geteuid())});
    run({"scontrol", "update", "NodeName=" + node_, "State=RESUME"});
    for (const auto& m : mounts_) ::umount2(m.c_str(), MNT_DETACH);
  }
  std::string node_, partition_;
  std::vector<std::string> mounts_;
};

TEST_F(Slurm, KilledRankIsRequeuedAndResumesToBitwiseTheLossesOfAnUninterruptedRun) {
  const fs::path base = capplan::test::scratch_dir("slurm-e2e");
  // A name and folders that a shell would take apart or run: they must arrive as data.
  const std::string odd = "tiny 'q' \"x\" $(touch PWNED) `touch PWNED`";
  const std::string model = write_model(base / (odd + ".yaml"), odd);
  const fs::path local = base / "local";
  const fs::path dir = base / ("run dir " + odd);
  const int steps = 200, every = 20;

  const Result straight = capplan(concat({"run"}, concat(layout_flags(model, steps, every), {"--dir", local.string()})));
  ASSERT_EQ(straight.exit_code, 0) << straight.out << straight.err;
  const auto expected = losses(local / "metrics.jsonl");
  ASSERT_EQ(expected.size(), size_t(steps));

  Background job = start(concat({"run", "--slurm", "--partition", partition_, "--requeue", "2"},
                                concat(layout_flags(model, steps, every), {"--dir", dir.string()})),
                         (base / "capplan.log").string());
  // Kill one rank once it is past two checkpoints, well before the end.
  ASSERT_TRUE(wait_for([&] { return newest_step(dir / "metrics.jsonl") >= 45; }, 180))
      << read_text(base / "capplan.log");
  const int killed_after = newest_step(dir / "metrics.jsonl");
  ASSERT_LT(killed_after, steps - 20) << "the run went too fast to interrupt";
  const auto ranks = processes_mentioning((dir / "metrics.jsonl").string(), "capplan-train");
  ASSERT_EQ(ranks.size(), 2u);
  ASSERT_EQ(::kill(ranks.back(), SIGKILL), 0);

  const int code = job.wait(240);
  const std::string log = read_text(base / "capplan.log");
  ASSERT_EQ(code, 0) << log;
  const std::string record = read_text(dir / "run.json");
  EXPECT_EQ(json_string(record, "status"), "succeeded") << record;

  // Both attempts are in the record; the second resumed from a checkpoint of the first.
  EXPECT_EQ(count(record, "\"outcome\": "), 2u) << record;
  const std::regex resumed("\"resumed_from_step\": ([0-9]+)");
  std::vector<int> from;
  for (std::sregex_iterator it(record.begin(), record.end(), resumed), end; it != end; ++it)
    from.push_back(std::stoi((*it)[1]));
  ASSERT_EQ(from.size(), 2u) << record;
  EXPECT_EQ(from[0], 0);
  EXPECT_GT(from[1], 0);
  EXPECT_EQ(from[1] % every, 0);
  EXPECT_LE(from[1], killed_after + every);
  EXPECT_NE(record.find("\"state\": \"REQUEUED\""), std::string::npos) << record;
  EXPECT_NE(record.find("\"restarts\": 1"), std::string::npos) << record;
  EXPECT_NE(record.find("\"goodput\""), std::string::npos) << record;
  EXPECT_NE(record.find("\"failures\": 1"), std::string::npos) << record;

  // Bitwise the same losses at every step.
  const auto got = losses(dir / "metrics.jsonl");
  ASSERT_EQ(got.size(), size_t(steps));
  for (const auto& [step, loss] : expected) {
    ASSERT_TRUE(got.count(step)) << step;
    EXPECT_EQ(std::memcmp(&got.at(step), &loss, sizeof loss), 0)
        << "step " << step << ": " << got.at(step) << " vs " << loss;
  }
  // Nothing was run by a shell: no PWNED anywhere.
  for (const auto& e : fs::recursive_directory_iterator(base)) EXPECT_NE(e.path().filename(), "PWNED") << e.path();
  EXPECT_FALSE(fs::exists("PWNED"));
  EXPECT_NE(record.find("tiny 'q' \\\"x\\\" $(touch PWNED)"), std::string::npos);
}

// The trainer's runs in a metrics file: (start records seen, newest step after the last one).
std::pair<int, int> attempt_progress(const fs::path& metrics) {
  std::ifstream f(metrics);
  int starts = 0, step = 0;
  for (std::string line; std::getline(f, line);) {
    const auto r = parse_metrics_line(line);
    if (!r) continue;
    if (r->type == "start") ++starts, step = 0;
    if (r->type == "step") step = int(r->number("step", 0));
  }
  return {starts, step};
}

// Every attempt is killed 5 steps past the checkpoint it resumed from: the job must stop after
// 1 + 2 requeues and say that the attempts kept failing at the same step.
TEST_F(Slurm, RunThatKeepsFailingAtTheSameStepStopsAfterItsRequeues) {
  const fs::path base = capplan::test::scratch_dir("slurm-same-step");
  const std::string model = write_model(base / "tiny.yaml", "tiny");
  const fs::path dir = base / "run";
  Background job = start(concat({"run", "--slurm", "--requeue", "2"},
                                concat(layout_flags(model, 400, 50), {"--dir", dir.string()})),
                         (base / "capplan.log").string());
  for (int attempt = 1; attempt <= 3; ++attempt) {
    ASSERT_TRUE(wait_for([&] {
      const auto [starts, step] = attempt_progress(dir / "metrics.jsonl");
      return starts == attempt && step >= 55;
    }, 120)) << "attempt " << attempt << "\n" << read_text(base / "capplan.log");
    const auto ranks = processes_mentioning((dir / "metrics.jsonl").string(), "capplan-train");
    ASSERT_EQ(ranks.size(), 2u);
    ASSERT_LT(attempt_progress(dir / "metrics.jsonl").second, 100) << "past the next checkpoint";
    ::kill(ranks.back(), SIGKILL);
  }
  EXPECT_EQ(job.wait(120), 1) << read_text(base / "capplan.log");
  const std::string record = read_text(dir / "run.json");
  EXPECT_EQ(json_string(record, "status"), "failed") << record;
  const std::string reason = json_string(record, "reason");
  EXPECT_NE(reason.find("stopped after 3 attempts (2 requeues allowed): training failed with exit status"),
            std::string::npos)
      << reason;
  EXPECT_NE(reason.find("the last 2 attempts all resumed from step 50 and failed before the next checkpoint"),
            std::string::npos)
      << reason;
  EXPECT_EQ(count(record, "\"outcome\": "), 3u) << record;
  EXPECT_NE(record.find("\"restarts\": 2"), std::string::npos) << record;
}

TEST_F(Slurm, FailedHealthCheckStopsTheJobBeforeTrainingAndDrainsTheNode) {
  const fs::path base = capplan::test::scratch_dir("slurm-health");
  const std::string model = write_model(base / "tiny.yaml", "tiny", 64, 2);
  const fs::path dir = base / "run";
  fs::create_directories(dir / "checkpoints");
  // 64 KiB: less than two checkpoints of this model (about 1.5 MB each).
  if (::mount("tmpfs", (dir / "checkpoints").c_str(), "tmpfs", 0, "size=64k") != 0)
    GTEST_SKIP() << "cannot mount a tmpfs for the checkpoints: " << std::strerror(errno);
  mounts_.push_back((dir / "checkpoints").string());

  const Result r = capplan(concat({"run", "--slurm", "--requeue", "2"},
                                  concat(layout_flags(model, 20, 5), {"--dir", dir.string()})));
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  const std::string record = read_text(dir / "run.json");
  EXPECT_EQ(json_string(record, "status"), "failed") << record;
  const std::string reason = json_string(record, "reason");
  EXPECT_NE(reason.find("health check"), std::string::npos) << reason;
  EXPECT_NE(reason.find("node " + node_ + ": free_disk: free in '" + (dir / "checkpoints").string() + "'"),
            std::string::npos)
      << reason;
  EXPECT_NE(reason.find("expected >= "), std::string::npos) << reason;
  // No training step ran.
  EXPECT_TRUE(losses(dir / "metrics.jsonl").empty());
  EXPECT_NE(read_text(dir / "run.txt").find("health check failed"), std::string::npos);
  // The node was drained with the check's reason.
  const Result node = run({"sinfo", "-h", "-n", node_, "-o", "%T|%E"});
  EXPECT_NE(node.out.find("drain"), std::string::npos) << node.out;
  EXPECT_NE(node.out.find("capplan health: free_disk"), std::string::npos) << node.out;
}

TEST_F(Slurm, CtrlCCancelsTheJobAndLeavesNoProcess) {
  const fs::path base = capplan::test::scratch_dir("slurm-cancel");
  const std::string model = write_model(base / "tiny.yaml", "tiny");
  const fs::path dir = base / "run";
  Background job = start(concat({"run", "--slurm"}, concat(layout_flags(model, 100000, 1000), {"--dir", dir.string()})),
                         (base / "capplan.log").string());
  ASSERT_TRUE(wait_for([&] { return newest_step(dir / "metrics.jsonl") >= 2; }, 120)) << read_text(base / "capplan.log");
  ASSERT_EQ(::kill(job.pid, SIGINT), 0);
  EXPECT_EQ(job.wait(120), 1) << read_text(base / "capplan.log");
  const std::string record = read_text(dir / "run.json");
  EXPECT_EQ(json_string(record, "status"), "cancelled") << record;
  const std::string id = json_string(record, "job_id");
  ASSERT_FALSE(id.empty()) << record;
  EXPECT_TRUE(wait_for([&] { return run({"squeue", "-h", "-j", id}).out.empty(); }, 30)) << run({"squeue"}).out;
  EXPECT_TRUE(wait_for([&] { return processes_mentioning(dir.string()).empty(); }, 30))
      << processes_mentioning(dir.string()).size() << " processes remain";
}

TEST_F(Slurm, AttachFollowsAJobAfterItsCapplanWasKilled) {
  const fs::path base = capplan::test::scratch_dir("slurm-attach");
  const std::string model = write_model(base / "tiny.yaml", "tiny");
  const fs::path dir = base / "run";
  const int steps = 150;
  {
    Background first = start(concat({"run", "--slurm"}, concat(layout_flags(model, steps, 50), {"--dir", dir.string()})),
                             (base / "first.log").string());
    ASSERT_TRUE(wait_for([&] { return newest_step(dir / "metrics.jsonl") >= 1; }, 120)) << read_text(base / "first.log");
    ::kill(first.pid, SIGKILL);
    first.wait(10);
  }
  const std::string id = json_string(read_text(dir / "run.json"), "job_id");
  ASSERT_FALSE(id.empty());
  const Result r = capplan({"run", "--slurm", "--attach", id});
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("attached to Slurm job " + id), std::string::npos) << r.out;
  const std::string record = read_text(dir / "run.json");
  EXPECT_EQ(json_string(record, "status"), "succeeded") << record;
  EXPECT_EQ(json_string(record, "job_id"), id);
  EXPECT_EQ(losses(dir / "metrics.jsonl").size(), size_t(steps));
}

TEST_F(Slurm, BadInputIsRefusedBeforeAnythingIsSubmitted) {
  const fs::path base = capplan::test::scratch_dir("slurm-bad");
  const std::string model = write_model(base / "tiny.yaml", "tiny", 64, 2);
  const std::string before = squeue_ids();
  auto refused = [&](const std::vector<std::string>& extra, const std::string& message,
                     const std::vector<std::string>& env = env_entries(), int steps = 20, int every = 5,
                     int nodes = 1) {
    const Result r =
        capplan(concat(concat({"run", "--slurm"}, layout_flags(model, steps, every, nodes)), extra), env);
    EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
    EXPECT_NE(r.err.find(message), std::string::npos) << "expected: " << message << "\n" << r.err;
  };
  // No sbatch: a PATH with mpirun's folder only.
  const fs::path bin = base / "bin";
  fs::create_directories(bin);
  fs::create_symlink(CAPPLAN_MPIEXEC, bin / "mpirun");
  refused({"--dir", (base / "a").string(), "--mpirun", CAPPLAN_MPIEXEC},
          "<command line>: error: --slurm: sbatch not found in PATH", env_entries(bin.string()));
  refused({"--dir", (base / "b").string(), "--partition", "nosuch"},
          "<command line>: error: --partition: unknown partition 'nosuch'");
  // A refused run still leaves its record, with the reason.
  const std::string refusal = read_text(base / "b" / "run.json");
  EXPECT_EQ(json_string(refusal, "status"), "not-started") << refusal;
  EXPECT_NE(json_string(refusal, "reason").find("unknown partition 'nosuch'"), std::string::npos) << refusal;
  refused({"--dir", (base / "c").string()},
          "<command line>: error: --nodes: the run needs 2 nodes, but partition '" + partition_ + "' has 1",
          env_entries(), 20, 5, 2);
  refused({"--dir", (base / "d").string(), "--time", "00:00:01"},
          "<command line>: error: --time: the time limit 00:00:01 (1.000 s) is shorter than one checkpoint interval",
          env_entries(), 200000, 100000);
  // A read-only folder: even root cannot write there.
  const fs::path ro = base / "ro";
  fs::create_directories(ro);
  if (::mount("tmpfs", ro.c_str(), "tmpfs", MS_RDONLY, "size=64k") == 0) {
    mounts_.push_back(ro.string());
    refused({"--dir", (ro / "run").string()}, "<command line>: error: dir: run directory: cannot create '" +
                                                  (ro / "run").string() + "'");
  } else {
    // Without mount rights, a path under a regular file is as unwritable.
    std::ofstream(base / "file") << "x";
    refused({"--dir", (base / "file" / "run").string()}, "<command line>: error: dir: run directory: ");
  }
  EXPECT_EQ(squeue_ids(), before);
  for (const char* d : {"a", "b", "c", "d"}) EXPECT_FALSE(fs::exists(base / d / "slurm-1.out"));
}

}  // namespace
}  // namespace capplan::rt
