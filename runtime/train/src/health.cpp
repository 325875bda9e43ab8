// `capplan-train health`: reachability (a known all-reduce with a deadline), the GEMM against a
// double-precision reference and its GFLOP/s against the node's expected figure, free memory, free
// disk and write bandwidth in the checkpoint folder (room for two checkpoints), and clock skew
// against rank 0 (ping-pong, offset from the midpoint of the shortest round trip). The GPU checks
// (count, type, ECC, NCCL bus bandwidth) belong to a GPU backend; without one they are reported
// as skipped, never as passed.
#include "train/health.h"

#include <fcntl.h>
#include <mpi.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <thread>

#include "io/metrics.h"
#include "planner/atomic_file.h"
#include "planner/flags.h"
#include "planner/format.h"
#include "planner/json_writer.h"

#ifdef CAPPLAN_HAVE_CBLAS
#include <cblas.h>
#endif

namespace capplan::rt {
namespace {

double wall_now_s() {
  using namespace std::chrono;
  return duration<double>(system_clock::now().time_since_epoch()).count();
}
double mono_now_s() {
  using namespace std::chrono;
  return duration<double>(steady_clock::now().time_since_epoch()).count();
}

std::string host_name() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof buf - 1) != 0) return "unknown";
  std::string h = buf;
  return h.substr(0, h.find('.'));
}

std::string fmt(double v, int decimals = 1) { return fmt_fixed(v, decimals); }
std::string fmt_g(double v) { return fmt_general(v, 3); }

void sgemm(int n, const float* a, const float* b, float* c) {
#ifdef CAPPLAN_HAVE_CBLAS
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a, n, b, n, 0.0f, c, n);
#else
  for (int i = 0; i < n; ++i) {
    for (int j = 0; j < n; ++j) c[size_t(i) * n + j] = 0;
    for (int k = 0; k < n; ++k) {
      const float aik = a[size_t(i) * n + k];
      for (int j = 0; j < n; ++j) c[size_t(i) * n + j] += aik * b[size_t(k) * n + j];
    }
  }
#endif
}

// Deterministic inputs in [-1, 1): the same on every node, so every node checks the same result.
void fill(std::vector<float>& v, uint64_t seed) {
  uint64_t s = seed;
  for (float& x : v) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    x = float(double(s >> 11) / double(1ull << 53) * 2.0 - 1.0);
  }
}

HealthCheck check(const std::string& node, const char* name, bool ok, double measured,
                  double expected, const char* unit, std::string detail) {
  HealthCheck c;
  c.node = node;
  c.name = name;
  c.ok = ok;
  c.measured = measured;
  c.expected = expected;
  c.unit = unit;
  c.detail = std::move(detail);
  return c;
}

// The GEMM's result against a double-precision reference (64^3), then its speed (best of 3).
void gemm_checks(const HealthOptions& o, const std::string& node, std::vector<HealthCheck>& out) {
  const int r = 64;
  std::vector<float> a(size_t(r) * r), b(size_t(r) * r), c(size_t(r) * r);
  fill(a, 1), fill(b, 2);
  sgemm(r, a.data(), b.data(), c.data());
  double worst = 0;
  for (int i = 0; i < r; ++i) {
    for (int j = 0; j < r; ++j) {
      double ref = 0, mag = 0;
      for (int k = 0; k < r; ++k) {
        ref += double(a[size_t(i) * r + k]) * double(b[size_t(k) * r + j]);
        mag += std::fabs(double(a[size_t(i) * r + k]) * double(b[size_t(k) * r + j]));
      }
      const double err = std::fabs(double(c[size_t(i) * r + j]) - ref) / std::max(mag, 1e-30);
      if (!(err <= worst)) worst = std::isfinite(err) ? std::max(worst, err) : INFINITY;
    }
  }
  // fp32 accumulation over 64 terms: |error| <= ~64 * 2^-24 * sum |a_ik b_kj| (Higham, Sec. 3.1).
  const double bound = 64 * std::ldexp(1.0, -24) * 4;
  out.push_back(check(node, "gemm_result", worst <= bound, worst, bound, "relative error",
                      "GEMM " + std::to_string(r) + "^3 against a double reference: max relative error " +
                          fmt_g(worst) + ", expected <= " + fmt_g(bound)));

  const int n = std::max(16, o.gemm_n);
  const PeakFlops peak = measure_peak_flops(
      [](int m, int, int, const float* a, const float* b, float* c) { sgemm(m, a, b, c); }, n, 3);
  const double gflops = peak.flops_per_s / 1e9;
  if (o.expected_gflops > 0) {
    const double need = o.gflops_tolerance * o.expected_gflops;
    out.push_back(check(node, "gemm_gflops", gflops >= need, gflops, need, "GFLOP/s",
                        "fp32 GEMM " + std::to_string(n) + "^3: " + fmt(gflops) + " GFLOP/s, expected >= " +
                            fmt(need) + " (" + fmt(o.gflops_tolerance * 100, 0) + " % of the node's " +
                            fmt(o.expected_gflops) + ")"));
  } else {
    out.push_back(check(node, "gemm_gflops", true, gflops, 0, "GFLOP/s",
                        "fp32 GEMM " + std::to_string(n) + "^3: " + fmt(gflops) +
                            " GFLOP/s (no expected figure stated)"));
  }
}

double mem_available_bytes() {
  std::ifstream f("/proc/meminfo");
  std::string key;
  double kb = 0;
  std::string unit;
  while (f >> key >> kb >> unit) {
    if (key == "MemAvailable:") return kb * 1024.0;
  }
  return 0;
}

void disk_checks(const HealthOptions& o, const std::string& node, int rank,
                 std::vector<HealthCheck>& out) {
  const std::string dir = o.checkpoint_dir.empty() ? "." : o.checkpoint_dir;
  struct statvfs vfs {};
  if (::statvfs(dir.c_str(), &vfs) != 0) {
    out.push_back(check(node, "free_disk", false, 0, 2 * o.checkpoint_bytes, "bytes",
                        "checkpoint directory '" + dir + "': " + std::strerror(errno)));
    return;
  }
  const double free_bytes = double(vfs.f_bavail) * double(vfs.f_frsize);
  const double need = 2 * o.checkpoint_bytes;
  if (need > 0) {
    out.push_back(check(node, "free_disk", free_bytes >= need, free_bytes, need, "bytes",
                        "free in '" + dir + "': " + fmt_mib(free_bytes) + ", expected >= " + fmt_mib(need) +
                            " (two checkpoints of " + fmt_mib(o.checkpoint_bytes) + ")"));
  } else {
    out.push_back(check(node, "free_disk", true, free_bytes, 0, "bytes",
                        "free in '" + dir + "': " + fmt_mib(free_bytes) + " (checkpoint size not stated)"));
  }

  // Write bandwidth: a file of write_test_bytes (at most half the free space), fsynced, removed.
  const double bytes = std::min(o.write_test_bytes, free_bytes / 2);
  const std::string path = dir + "/.capplan-health-" + node + "-" + std::to_string(rank) + "-" +
                           std::to_string(::getpid());
  double rate = 0;
  std::string why;
  if (bytes < 4096) {
    why = "no room for a write test";
  } else {
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) {
      why = std::string("cannot create a file: ") + std::strerror(errno);
    } else {
      std::vector<char> block(1 << 20, 'c');
      const double t0 = mono_now_s();
      double written = 0;
      while (written < bytes) {
        const size_t chunk = size_t(std::min<double>(block.size(), bytes - written));
        const ssize_t w = ::write(fd, block.data(), chunk);
        if (w <= 0) {
          why = std::string("write failed: ") + std::strerror(errno);
          break;
        }
        written += double(w);
      }
      if (why.empty() && ::fsync(fd) != 0) why = std::string("fsync failed: ") + std::strerror(errno);
      const double dt = mono_now_s() - t0;
      ::close(fd);
      ::unlink(path.c_str());
      if (why.empty()) rate = written / std::max(dt, 1e-9) / 1e6;
    }
  }
  if (!why.empty()) {
    out.push_back(check(node, "write_bandwidth", false, 0, o.min_write_mbyte_per_s, "MB/s",
                        "checkpoint directory '" + dir + "': " + why));
  } else {
    const bool ok = o.min_write_mbyte_per_s <= 0 || rate >= o.min_write_mbyte_per_s;
    out.push_back(check(node, "write_bandwidth", ok, rate, o.min_write_mbyte_per_s, "MB/s",
                        "write + fsync of " + fmt_mib(bytes) + " in '" + dir + "': " + fmt(rate) + " MB/s" +
                            (o.min_write_mbyte_per_s > 0 ? ", expected >= " + fmt(o.min_write_mbyte_per_s)
                                                         : std::string(" (no expected figure stated)"))));
  }
}

// A sum of ones over every rank that must finish before the deadline; a rank that cannot be
// reached leaves the request pending.
bool reachability(const HealthOptions& o, int world, int* got) {
  int one = 1;
  *got = 0;
  MPI_Request req;
  MPI_Iallreduce(&one, got, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD, &req);
  const double deadline = mono_now_s() + o.reachability_timeout_s;
  int done = 0;
  while (!done) {
    MPI_Test(&req, &done, MPI_STATUS_IGNORE);
    if (done) break;
    if (mono_now_s() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return *got == world;
}

// Offset of each rank's clock from rank 0's: the midpoint of the shortest of 5 round trips.
std::vector<double> clock_offsets(int rank, int world) {
  std::vector<double> offsets(size_t(world), 0.0);
  for (int peer = 1; peer < world; ++peer) {
    if (rank == 0) {
      double best_rtt = INFINITY, best_offset = 0;
      for (int k = 0; k < 5; ++k) {
        const double t0 = wall_now_s();
        double peer_time = 0;
        MPI_Send(&t0, 1, MPI_DOUBLE, peer, 71, MPI_COMM_WORLD);
        MPI_Recv(&peer_time, 1, MPI_DOUBLE, peer, 72, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        const double t1 = wall_now_s();
        if (t1 - t0 < best_rtt) {
          best_rtt = t1 - t0;
          best_offset = peer_time - 0.5 * (t0 + t1);
        }
      }
      offsets[size_t(peer)] = best_offset;
    } else if (rank == peer) {
      for (int k = 0; k < 5; ++k) {
        double t0 = 0;
        MPI_Recv(&t0, 1, MPI_DOUBLE, 0, 71, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        const double now = wall_now_s();
        MPI_Send(&now, 1, MPI_DOUBLE, 0, 72, MPI_COMM_WORLD);
      }
    }
  }
  MPI_Bcast(offsets.data(), world, MPI_DOUBLE, 0, MPI_COMM_WORLD);
  return offsets;
}

// One check per line, tab-separated, for the gather to rank 0 (node names hold no tabs).
std::string serialize(const std::vector<HealthCheck>& checks) {
  std::string s;
  for (const auto& c : checks) {
    std::string detail = c.detail;
    std::replace(detail.begin(), detail.end(), '\t', ' ');
    std::replace(detail.begin(), detail.end(), '\n', ' ');
    s += c.node + "\t" + c.name + "\t" + (c.ok ? "1" : "0") + "\t" + (c.skipped ? "1" : "0") + "\t" +
         shortest_number(c.measured) + "\t" + shortest_number(c.expected) + "\t" + c.unit + "\t" +
         detail + "\n";
  }
  return s;
}

std::vector<HealthCheck> deserialize(const std::string& text) {
  std::vector<HealthCheck> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    std::vector<std::string> f;
    size_t start = 0;
    for (size_t tab; (tab = line.find('\t', start)) != std::string::npos && f.size() < 7; start = tab + 1)
      f.push_back(line.substr(start, tab - start));
    f.push_back(line.substr(start));
    if (f.size() != 8) continue;
    HealthCheck c;
    c.node = f[0];
    c.name = f[1];
    c.ok = f[2] == "1";
    c.skipped = f[3] == "1";
    c.measured = std::strtod(f[4].c_str(), nullptr);
    c.expected = std::strtod(f[5].c_str(), nullptr);
    c.unit = f[6];
    c.detail = f[7];
    out.push_back(std::move(c));
  }
  return out;
}


const std::vector<FlagSpec>& health_flags() {
  static const std::vector<FlagSpec> f = {
      {"checkpoint-dir", true, "where free space and write bandwidth are measured (default .)", "DIR"},
      {"checkpoint-bytes", true, "one checkpoint of the plan; the folder needs room for two (default 0: not checked)", "B"},
      {"expected-gflops", true, "this kind of node's fp32 GEMM GFLOP/s (default 0: report only)", "X"},
      {"gflops-tolerance", true, "pass at >= F x expected (default 0.1)", "F"},
      {"min-free-memory", true, "bytes of MemAvailable needed per node (default 0: report only)", "B"},
      {"min-write-mbyte-per-s", true, "checkpoint-folder write bandwidth needed (default 0: report only)", "X"},
      {"write-test-bytes", true, "bytes written for the bandwidth test (default 33554432)", "B"},
      {"max-clock-skew-s", true, "largest clock offset against rank 0 (default 1)", "S"},
      {"timeout", true, "the all-reduce must finish within S seconds (default 60)", "S"},
      {"json", false, "print the result as JSON", ""},
      {"out", true, "also write the JSON result to FILE (atomically)", "FILE"},
      {"failed-nodes", true, "on failure, write 'node<TAB>reason' per failed node", "FILE"},
  };
  return f;
}

// The flags of `capplan-train health` (argv[0] is "health"), every mistake in one pass.
Diagnostics parse_health_args(int argc, const char* const* argv, HealthOptions& o, bool* help) {
  Diagnostics d;
  const Args args = parse_args(argc, argv, health_flags(), d);
  *help = args.help();
  auto number = [&](const char* name, double lo, double& field) {
    if (const auto v = number_flag(args, name, d, -INFINITY, INFINITY)) {
      if (*v < lo) flag_error(d, name, "expected a number >= " + shortest_number(lo) + ", found '" + args.get(name) + "'");
      else field = *v;
    }
  };
  o.checkpoint_dir = args.get("checkpoint-dir", o.checkpoint_dir);
  o.out = args.get("out", o.out);
  o.failed_nodes_file = args.get("failed-nodes", o.failed_nodes_file);
  o.json = args.has("json");
  number("checkpoint-bytes", 0, o.checkpoint_bytes);
  number("expected-gflops", 0, o.expected_gflops);
  number("gflops-tolerance", 0, o.gflops_tolerance);
  number("min-free-memory", 0, o.min_free_memory_bytes);
  number("min-write-mbyte-per-s", 0, o.min_write_mbyte_per_s);
  number("write-test-bytes", 0, o.write_test_bytes);
  number("max-clock-skew-s", 0, o.max_clock_skew_s);
  number("timeout", 0.001, o.reachability_timeout_s);
  return d;
}

}  // namespace

std::vector<HealthCheck> run_health_checks(const HealthOptions& o) {
  int rank = 0, world = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  const std::string node = host_name();
  std::vector<HealthCheck> mine;

  int got = 0;
  const bool reached = reachability(o, world, &got);
  if (!reached) {
    // A rank that never joined: report from rank 0 and stop the job (the others may be hung).
    if (rank == 0) {
      std::fprintf(stderr,
                   "health: FAILED on node %s: reachability: the all-reduce over %d ranks did not finish "
                   "within %g s (measured %d of %d ranks)\n",
                   node.c_str(), world, o.reachability_timeout_s, got, world);
      std::fflush(stderr);
    }
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  mine.push_back(check(node, "reachability", true, got, world, "ranks",
                       "all-reduce over " + std::to_string(world) + " ranks: sum " + std::to_string(got) +
                           ", expected " + std::to_string(world)));
  gemm_checks(o, node, mine);

  const double avail = mem_available_bytes();
  mine.push_back(check(node, "free_memory", o.min_free_memory_bytes <= 0 || avail >= o.min_free_memory_bytes,
                       avail, o.min_free_memory_bytes, "bytes",
                       "MemAvailable " + fmt_mib(avail) +
                           (o.min_free_memory_bytes > 0 ? ", expected >= " + fmt_mib(o.min_free_memory_bytes)
                                                        : std::string(" (no need stated)"))));
  disk_checks(o, node, rank, mine);

  const std::vector<double> offsets = clock_offsets(rank, world);
  const double skew = std::fabs(offsets[size_t(rank)]);
  mine.push_back(check(node, "clock_skew", skew <= o.max_clock_skew_s, skew, o.max_clock_skew_s, "s",
                       "clock offset against rank 0: " + fmt(skew * 1e3, 3) + " ms, expected <= " +
                           fmt(o.max_clock_skew_s * 1e3, 3) + " ms"));

  HealthCheck gpu = check(node, "gpu", true, 0, 0, "",
                          "skipped: the health check does not probe GPUs (GPU count and type, ECC through "
                          "NVML and NCCL bus bandwidth)");
  gpu.skipped = true;
  mine.push_back(gpu);

  // Gather every rank's checks on rank 0.
  const std::string text = serialize(mine);
  int len = int(text.size());
  std::vector<int> lens(static_cast<size_t>(world)), displs(static_cast<size_t>(world));
  MPI_Gather(&len, 1, MPI_INT, lens.data(), 1, MPI_INT, 0, MPI_COMM_WORLD);
  std::string all;
  if (rank == 0) {
    int total = 0;
    for (int i = 0; i < world; ++i) displs[size_t(i)] = total, total += lens[size_t(i)];
    all.resize(size_t(total));
  }
  MPI_Gatherv(text.data(), len, MPI_CHAR, all.data(), lens.data(), displs.data(), MPI_CHAR, 0,
              MPI_COMM_WORLD);
  return rank == 0 ? deserialize(all) : mine;
}

std::string health_json(const std::vector<HealthCheck>& checks) {
  JsonWriter j;
  bool ok = true;
  std::vector<std::string> nodes;
  for (const auto& c : checks) {
    ok = ok && c.ok;
    if (std::find(nodes.begin(), nodes.end(), c.node) == nodes.end()) nodes.push_back(c.node);
  }
  j.begin_object().str("status", ok ? "ok" : "failed");
  j.begin_array("nodes");
  for (const auto& n : nodes) j.str("", n);
  j.end_array();
  auto write = [&](const HealthCheck& c) {
    j.begin_object()
        .str("node", c.node)
        .str("check", c.name)
        .boolean("ok", c.ok)
        .boolean("skipped", c.skipped)
        .num("measured", c.measured)
        .num("expected", c.expected)
        .str("unit", c.unit)
        .str("detail", c.detail)
        .end_object();
  };
  j.begin_array("checks");
  for (const auto& c : checks) write(c);
  j.end_array();
  j.begin_array("failures");
  for (const auto& c : checks)
    if (!c.ok) write(c);
  j.end_array();
  j.end_object();
  return j.str() + "\n";
}

int health_main(int argc, char** argv) {
  // argv[0] is "health".
  HealthOptions o;
  bool help = false;
  const Diagnostics d = parse_health_args(argc, argv, o, &help);
  if (help) {
    std::printf("usage: capplan-train health [flags]   (under mpirun or srun: one rank per node)\n%s",
                flags_help(health_flags()).c_str());
    return 0;
  }
  if (d.has_errors()) {
    std::fputs(d.to_string().c_str(), stderr);
    return 2;
  }

  MPI_Init(&argc, &argv);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  const std::vector<HealthCheck> checks = run_health_checks(o);
  int status = 0;
  if (rank == 0) {
    bool ok = true;
    for (const auto& c : checks) ok = ok && c.ok;
    status = ok ? 0 : 1;
    const std::string json = health_json(checks);
    if (o.json) {
      std::fputs(json.c_str(), stdout);
    } else {
      for (const auto& c : checks) {
        std::printf("health %s: %-15s %s  %s\n", c.node.c_str(), c.name.c_str(),
                    c.skipped ? "skipped" : (c.ok ? "ok" : "FAILED"), c.detail.c_str());
      }
    }
    for (const auto& c : checks) {
      if (!c.ok) {
        std::fprintf(stderr, "health: FAILED on node %s: %s: %s\n", c.node.c_str(), c.name.c_str(),
                     c.detail.c_str());
      }
    }
    std::fflush(stdout);
    std::fflush(stderr);
    std::string err;
    if (!o.out.empty()) {
      AtomicFile f;
      if (!f.open(o.out, &err) || !f.write(json.data(), json.size(), &err) || !f.commit(&err))
        std::fprintf(stderr, "health: error: %s: %s\n", o.out.c_str(), err.c_str());
    }
    if (!o.failed_nodes_file.empty() && !ok) {
      std::string lines;
      std::vector<std::string> done;
      for (const auto& c : checks) {
        if (c.ok || std::find(done.begin(), done.end(), c.node) != done.end()) continue;
        done.push_back(c.node);
        lines += c.node + "\tcapplan health: " + c.name + ": " + c.detail + "\n";
      }
      AtomicFile f;
      if (!f.open(o.failed_nodes_file, &err) || !f.write(lines.data(), lines.size(), &err) || !f.commit(&err))
        std::fprintf(stderr, "health: error: %s: %s\n", o.failed_nodes_file.c_str(), err.c_str());
    }
  }
  MPI_Bcast(&status, 1, MPI_INT, 0, MPI_COMM_WORLD);
  MPI_Finalize();
  return status;
}

}  // namespace capplan::rt
