// `capplan-train health`: the node checks a job runs before training, one rank per node under
// mpirun or srun, and a standalone command. Each check compares a measured figure with an expected
// one and a failure names the node, the check and both figures. It trains nothing.
#pragma once

#include <string>
#include <vector>

namespace capplan::rt {

struct HealthOptions {
  std::string checkpoint_dir = ".";   // where free space and write bandwidth are measured
  double checkpoint_bytes = 0;        // one checkpoint of the plan (all ranks); 0 = unknown (no room check)
  double expected_gflops = 0;         // fp32 GEMM figure of this kind of node; 0 = none stated
  double gflops_tolerance = 0.1;      // a node passes at >= tolerance x expected_gflops
  double min_free_memory_bytes = 0;   // MemAvailable needed per node; 0 = report only
  double min_write_mbyte_per_s = 0;   // checkpoint-directory write bandwidth needed; 0 = report only
  double write_test_bytes = 32.0 * 1024 * 1024;  // bytes written (and fsynced) for the bandwidth
  double max_clock_skew_s = 1.0;      // largest clock offset of a node against rank 0
  double reachability_timeout_s = 60; // the all-reduce must finish within this
  int gemm_n = 512;                   // timed GEMM n x n x n (best of 3)
  bool json = false;
  std::string out;                    // also write the JSON result here (atomically); empty = no file
  std::string failed_nodes_file;      // on failure, "node<TAB>reason" per failed node (for draining)
};

struct HealthCheck {
  std::string node;
  std::string name;       // reachability, gemm_result, gemm_gflops, free_memory, free_disk, write_bandwidth, clock_skew, gpu
  bool ok = true;
  bool skipped = false;   // not applicable here (e.g. gpu without a GPU backend)
  double measured = 0;
  double expected = 0;    // the bound checked against (0 with report-only checks)
  std::string unit;
  std::string detail;     // "measured X, expected >= Y (why)"
};

// Every rank's checks, gathered on rank 0 (others get their own only). MPI must be initialised.
std::vector<HealthCheck> run_health_checks(const HealthOptions& options);

// JSON {"status": "ok"|"failed", "nodes": [...], "checks": [...], "failures": [...]}.
std::string health_json(const std::vector<HealthCheck>& checks);

// The `capplan-train health` command (initialises and finalises MPI). 0: every check passed,
// 1: a check failed (rank 0 prints which), 2: bad flags.
int health_main(int argc, char** argv);

}  // namespace capplan::rt
