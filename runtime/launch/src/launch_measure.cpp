// capplan-train measure as a process, and its kernels beside the cost model
// (launch/measure_profile.h).
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>

#include "launch/launch.h"
#include "launch/measure_profile.h"
#include "planner/cost_model.h"
#include "planner/format.h"

namespace capplan::rt {

std::vector<std::string> build_measure_argv(const MeasureRequest& q, Diagnostics& d) {
  const std::string train = q.train_binary.empty() ? locate_train_binary(self_executable(), q.train_build_hint)
                                                   : find_executable(q.train_binary);
  if (train.empty())
    d.error("<command line>", 0, 0, "--measure", "capplan-train not found (next to capplan, or set CAPPLAN_TRAIN)");
  const std::string mpirun = find_executable(q.mpirun.empty() ? std::string("mpirun") : q.mpirun);
  if (mpirun.empty()) d.error("<command line>", 0, 0, "--measure", "mpirun not found in PATH (install openmpi-bin)");
  if (d.has_errors()) return {};
  std::vector<std::string> argv = {mpirun};
  if (::geteuid() == 0) argv.push_back("--allow-run-as-root");
  for (const char* a : {"--oversubscribe", "--bind-to", "none", "-np"}) argv.push_back(a);
  argv.push_back(std::to_string(q.ranks));
  for (const std::string& a : {train, std::string("measure"), std::string("--model"), q.model_ref,
                               std::string("--tp"), std::to_string(q.tp), std::string("--mbs"), std::to_string(q.mbs)})
    argv.push_back(a);
  if (q.seq > 0) argv.insert(argv.end(), {"--seq", std::to_string(q.seq)});
  argv.insert(argv.end(), {"--repeats", std::to_string(q.repeats), "--rounds", std::to_string(q.rounds), "--out", q.out});
  if (q.shared_cores) argv.push_back("--shared-cores");
  return argv;
}

std::vector<int> shared_core_ranks(int cores, double peak_rank_bytes, double available_bytes) {
  cores = std::max(1, cores);
  std::vector<int> counts;
  const double fits = peak_rank_bytes > 0 && available_bytes > 0 ? 0.75 * available_bytes / peak_rank_bytes : 1e9;
  for (const int want : {2 * cores, 4 * cores}) {
    const int n = int(std::min<double>(want, std::floor(fits)));
    if (n > cores && (counts.empty() || counts.back() != n)) counts.push_back(n);
  }
  return counts;
}

// Runs of capplan-train measure: the kernels and collectives with q.ranks ranks, then, with
// twice and with four times as many ranks as the host has cores (as many as its memory holds:
// shared_core_ranks), how those cores run more ranks than they number (--shared-cores,
// cost_model_cores.cpp): a layout's ranks on the host are priced between the two. All write a
// file beside q.out that replaces q.out (rename) only when all completed, so a failed or
// cancelled measurement keeps the previous profile.
MeasureResult measure_device_profile(const MeasureRequest& q, const OutputLineFn& on_line,
                                     const std::atomic<bool>* cancel) {
  MeasureResult out;
  MeasureRequest part = q;
  part.out = q.out + ".measuring";
  part.shared_cores = false;
  ProcessOptions opt;
  opt.env = mpi_transport_env();  // the transport the runs will use (launch_process.h)
  // The caller's cancel, or the time limit over all the runs: the processes stop on `stop`.
  std::atomic<bool> stop = false;
  const auto start = std::chrono::steady_clock::now();
  auto past_limit = [&] {
    return q.timeout_s > 0 &&
           std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() > q.timeout_s;
  };
  opt.on_tick = [&] {
    if ((cancel && cancel->load()) || past_limit()) stop = true;
  };
  auto measure = [&](const MeasureRequest& r) {
    const std::vector<std::string> argv = build_measure_argv(r, out.profile.diagnostics);
    if (argv.empty()) return false;
    out.process = run_process(argv, opt, on_line, &stop);
    out.cancelled = stop.load();
    out.timed_out = out.cancelled && !(cancel && cancel->load()) && past_limit();
    if (out.timed_out)
      out.profile.diagnostics.error("<command line>", 0, 0, "--timeout",
                                    "the measurement did not finish within " + fmt_general(q.timeout_s, 6) +
                                        " s and was stopped; " + q.out + " is unchanged");
    if (out.cancelled || !out.process.succeeded()) {
      std::remove(part.out.c_str());
      return false;
    }
    return true;
  };
  if (!measure(part)) return out;
  const int cores = std::max(1, int(::sysconf(_SC_NPROCESSORS_ONLN)));
  const Loaded<DeviceProfile> first = load_device_profile(part.out);
  const double peak = first.ok() ? first.value->peak_rank_bytes : 0;
  const double available = probe_local_machine(false, false).available_bytes;
  const std::vector<int> counts = shared_core_ranks(cores, peak, available);
  if (on_line && (counts.size() < 2 || counts.back() < 4 * cores))
    on_line(OutputStream::Stdout,
            "shared cores: " + std::to_string(4 * cores) + " ranks of " + fmt_bytes(peak) + " each would need " +
                fmt_bytes(4 * cores * peak) + ", more than three quarters of the " + fmt_bytes(available) + " available: " +
                (counts.empty() ? std::string("not measured (runs with more ranks than cores are priced by "
                                              "processor sharing alone, without measured lockstep waits and "
                                              "hand-offs)")
                                : "measured with " + std::to_string(counts.back()) + " ranks at most"));
  for (const int n : counts) {
    MeasureRequest shared = part;
    shared.shared_cores = true;
    shared.ranks = n;
    if (!measure(shared)) return out;
  }
  if (std::rename(part.out.c_str(), q.out.c_str()) != 0) {
    out.profile.diagnostics.error(q.out, 0, 0, "", std::string("cannot write: ") + std::strerror(errno));
    std::remove(part.out.c_str());
    return out;
  }
  out.profile = load_device_profile(q.out);
  return out;
}

std::vector<KernelComparison> compare_profile(const DeviceProfile& p, const ModelSpec& model, int ranks) {
  Scenario plain;
  plain.model = model;
  plain.cluster = local_cluster_spec(probe_local_machine(true), ranks);
  plain.training.precision = Precision::Fp32;
  DeviceProfile fits_only = p;
  fits_only.gemms.clear();
  fits_only.kernels.clear();
  Scenario curve = plain;
  curve.cluster.device_profile = std::make_shared<const DeviceProfile>(fits_only);
  std::vector<KernelComparison> rows;
  for (const GemmTiming& g : p.gemms)
    rows.push_back({g.name, std::to_string(g.m) + "x" + std::to_string(g.n) + "x" + std::to_string(g.k), true,
                    g.seconds, gemm_time_s(plain, double(g.m), double(g.n), double(g.k)),
                    gemm_time_s(curve, double(g.m), double(g.n), double(g.k))});
  for (const KernelTiming& k : p.kernels) {
    char shape[32];
    std::snprintf(shape, sizeof shape, "%.1fMB", k.bytes / 1e6);
    rows.push_back({k.name, shape, false, k.seconds, memory_time_s(plain, k.bytes), memory_time_s(curve, k.bytes)});
  }
  return rows;
}

}  // namespace capplan::rt
