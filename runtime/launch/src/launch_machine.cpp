// This machine as the planner sees it: cores and RAM from /proc, an fp32 GEMM peak and a copy
// bandwidth measured once per process, and the one-node ClusterSpec whose "GPUs" are the MPI ranks.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <fstream>
#include <mutex>
#include <sstream>
#include <string>
#include <vector>

#include "io/metrics.h"
#include "launch/launch.h"

#ifdef CAPPLAN_LAUNCH_HAVE_CBLAS
#include <cblas.h>
#endif

namespace capplan::rt {
namespace {

double now_s() {
  using namespace std::chrono;
  return duration<double>(steady_clock::now().time_since_epoch()).count();
}

// "MemTotal:  24576000 kB" -> bytes; 0 when absent.
double meminfo_bytes(const std::string& key) {
  std::ifstream in("/proc/meminfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(key + ":", 0) == 0) {
      std::istringstream s(line.substr(key.size() + 1));
      double kb = 0;
      s >> kb;
      return kb * 1024.0;
    }
  }
  return 0;
}

// An fp32 GEMM C = A * B (row-major): cblas (what capplan-train uses) when built with it;
// otherwise a cache-blocked loop on one core, which under-states a BLAS peak.
void local_gemm(int m, int n, int k, const float* a, const float* b, float* c) {
#ifdef CAPPLAN_LAUNCH_HAVE_CBLAS
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, n, k, 1.f, a, k, b, n, 0.f, c, n);
#else
  std::fill(c, c + size_t(m) * n, 0.f);
  const int bs = 64;
  for (int i0 = 0; i0 < m; i0 += bs)
    for (int p0 = 0; p0 < k; p0 += bs)
      for (int i = i0; i < std::min(m, i0 + bs); ++i)
        for (int p = p0; p < std::min(k, p0 + bs); ++p) {
          const float aip = a[size_t(i) * k + p];
          for (int j = 0; j < n; ++j) c[size_t(i) * n + j] += aip * b[size_t(p) * n + j];
        }
#endif
}

// The peak through io's GEMM probe (metrics.h), in GFLOP/s, and how it was measured.
double measure_gemm_gflops(int n, int repeats, std::string* how) {
  const PeakFlops p = measure_peak_flops(local_gemm, n, repeats);
#ifdef CAPPLAN_LAUNCH_HAVE_CBLAS
  *how = p.source + ", cblas_sgemm on all cores";
#else
  *how = p.source + ", plain-loop sgemm on one core (no cblas; under-states)";
#endif
  return p.flops_per_s / 1e9;
}

// Copy bandwidth: bytes read plus bytes written per second by memcpy of a 64 MiB buffer, best of 3.
double measure_copy_gbyte_per_s() {
  const size_t bytes = size_t(64) << 20;
  std::vector<char> src(bytes, 1), dst(bytes, 0);
  double best = 1e30;
  for (int r = 0; r < 3; ++r) {
    const double t0 = now_s();
    std::memcpy(dst.data(), src.data(), bytes);
    best = std::min(best, now_s() - t0);
    src[size_t(r) * 4096] = char(r);
  }
  volatile char sink = dst[bytes / 2];
  (void)sink;
  return 2.0 * double(bytes) / best / 1e9;
}

}  // namespace

LocalMachine probe_local_machine(bool measure) { return probe_local_machine(measure, measure); }

LocalMachine probe_local_machine(bool measure_gemm, bool measure_memory) {
  static std::mutex mu;
  static bool gemm_measured = false, copy_measured = false;
  static double gemm_gflops = 0, copy_gbs = 0;
  static std::string gemm_how;

  LocalMachine m;
  m.cores = std::max(1, int(::sysconf(_SC_NPROCESSORS_ONLN)));
  m.ram_bytes = meminfo_bytes("MemTotal");
  m.available_bytes = meminfo_bytes("MemAvailable");
  m.gemm_peak_source = "unknown";
  m.memory_source = "unknown";
  std::lock_guard<std::mutex> lock(mu);
  if (measure_gemm) {
    if (!gemm_measured) {
      measure_gemm_gflops(128, 1, &gemm_how);  // warm-up: thread pool start, page faults
      gemm_gflops = measure_gemm_gflops(512, 3, &gemm_how);
      gemm_measured = true;
    }
    m.gemm_peak_gflops = gemm_gflops;
    m.gemm_peak_source = gemm_how;
  }
  if (measure_memory) {
    if (!copy_measured) {
      copy_gbs = measure_copy_gbyte_per_s();
      copy_measured = true;
    }
    m.memory_gbyte_per_s = copy_gbs;
    m.memory_source = "measured: memcpy of 64 MiB, best of 3, read + written bytes";
  }
  return m;
}

ClusterSpec local_cluster_spec(const LocalMachine& machine, int ranks) {
  ranks = std::max(1, ranks);
  ClusterSpec c;
  c.name = "this machine (" + std::to_string(machine.cores) + " cores, " +
           std::to_string(int(machine.ram_bytes / (1024.0 * 1024 * 1024) + 0.5)) + " GiB, " +
           std::to_string(ranks) + " ranks)";
  c.gpus_per_node = ranks;
  GpuSpec& g = c.gpu;
  g.name = "cpu-rank";
  g.cpu_rank = true;
  g.memory_gib = machine.ram_bytes / ranks / (1024.0 * 1024.0 * 1024.0);
  // A CPU has one fp32 peak; the runtime trains in fp32, so every precision reads the same figure.
  const double rank_tflops = machine.gemm_peak_gflops / ranks / 1000.0;
  g.peak_tflops_fp32 = rank_tflops;
  g.peak_tflops_fp16 = rank_tflops;
  g.peak_tflops_bf16 = rank_tflops;
  g.memory_gbyte_per_s = machine.memory_gbyte_per_s / ranks;
  g.source = "GEMM peak " + machine.gemm_peak_source + "; memory " + machine.memory_source +
             "; shared equally by the ranks";
  // Open MPI's shared-memory transport copies in and out of a shared segment: ~half the copy
  // bandwidth, per rank. Latency: a few microseconds between processes on one host (stated).
  c.intra_node_gbyte_per_s = machine.memory_gbyte_per_s / 2.0 / ranks;
  c.inter_node_gbit_per_s = c.intra_node_gbyte_per_s * 8.0;  // never crossed: one node
  c.intra_node_latency_us = 2.0;
  c.inter_node_latency_us = 2.0;
  c.pcie_gbyte_per_s = machine.memory_gbyte_per_s / 2.0 / ranks;  // "offload" is a host copy
  c.host_memory_gib = machine.ram_bytes / (1024.0 * 1024.0 * 1024.0);
  c.price_per_node_hour_usd = 0;  // unknown
  c.efficiency.gemm = 1.0;        // the peak is an achieved GEMM rate already
  c.efficiency.memory = 1.0;      // the bandwidth is an achieved copy rate already
  c.efficiency.intra_node = 1.0;
  c.efficiency.inter_node = 1.0;
  c.source = "probed by capplan on this machine: " + g.source;
  return c;
}

}  // namespace capplan::rt
