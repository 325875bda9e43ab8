// Measuring this machine for a device profile (`capplan profile --measure`, the GUI's "Measure on
// this machine"): `mpirun -np N capplan-train measure ...` as a cancellable process, the profile
// it wrote read back, and each measured kernel set beside the cost model's time for it. No MPI:
// the measuring runs in capplan-train.
#pragma once

#include <atomic>
#include <string>
#include <vector>

#include "launch/launch_process.h"
#include "planner/device_profile.h"
#include "planner/diagnostics.h"
#include "planner/spec.h"

namespace capplan::rt {

// A measurement's default time limit: a profile takes about a minute on 2 cores (its rounds stop
// early on a loaded host), so a run this long is stuck, not slow.
inline constexpr double kDefaultMeasureTimeoutS = 900;

struct MeasureRequest {
  std::string model_ref;  // preset name or file, as capplan-train --model takes it
  int tp = 1, mbs = 1, seq = 0;  // seq 0 = the model's
  int ranks = 2;          // local MPI ranks measuring at once
  int repeats = 5;        // timed repeats per kernel, in each round
  int rounds = 5;         // rounds over the whole set; each time is the median over them
  std::string out;        // the device profile to write (atomically, by capplan-train)
  // capplan-train measure --shared-cores: add to `out` how the cores run more ranks than they
  // number (run with twice the cores' ranks). measure_device_profile runs it after the profile.
  bool shared_cores = false;
  // The whole measurement (every run of capplan-train measure) is stopped past this many seconds
  // (0: no limit); the previous profile at `out` then stays as it was.
  double timeout_s = kDefaultMeasureTimeoutS;
  std::string train_binary;  // empty = locate_train_binary(self_executable(), train_build_hint)
  std::string train_build_hint;
  std::string mpirun;     // empty = mpirun from PATH
};

// The command (mpirun --oversubscribe --bind-to none -np N capplan-train measure ...); errors
// (capplan-train or mpirun not found) go to `diags` and give an empty vector.
std::vector<std::string> build_measure_argv(const MeasureRequest& request, Diagnostics& diags);

struct MeasureResult {
  ProcessResult process;             // how capplan-train measure ended
  bool cancelled = false;
  bool timed_out = false;            // stopped at request.timeout_s (then cancelled too)
  Loaded<DeviceProfile> profile;     // read back from request.out when the process succeeded
};

// Runs the measurement, each output line to `on_line` (on the calling thread); stops it when
// *cancel becomes true or past request.timeout_s (the previous profile at `out` then stays as it
// was; a timeout is an error in the result's diagnostics naming the limit).
MeasureResult measure_device_profile(const MeasureRequest& request, const OutputLineFn& on_line,
                                     const std::atomic<bool>* cancel = nullptr);

// The rank counts of the shared-core runs of measure_device_profile on a host of `cores` cores:
// twice and four times the cores, each at most what three quarters of the host's available memory
// holds at `peak_rank_bytes` a rank (the largest resident set of a rank in the first measuring
// run, which allocates more than a shared-core run), and more than the cores (fewer ranks do not
// share them). Empty where not even cores + 1 ranks fit; both where the memory is not known (0).
std::vector<int> shared_core_ranks(int cores, double peak_rank_bytes, double available_bytes);

// One measured kernel beside the cost model on this machine: `predicted_s` with today's model
// (the probed GEMM peak and copy bandwidth shared by `ranks`), `fitted_s` with the profile's
// curves alone (its per-shape times left out).
struct KernelComparison {
  std::string name, shape;  // "qkv forward", "256x768x512" or "1.0MB"
  bool gemm = false;
  double measured_s = 0, predicted_s = 0, fitted_s = 0;
};
std::vector<KernelComparison> compare_profile(const DeviceProfile& profile, const ModelSpec& model, int ranks);

}  // namespace capplan::rt
