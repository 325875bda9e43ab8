// A pipeline stage waiting for its neighbour (wait_check.cpp under mpirun, 2 ranks): where the two
// ranks share one core, the waiting rank naps between polls and takes a small part of the core
// (expectation: CPU time under a third of its 300 ms wait; measured ~20 %, each poll costing
// ~10 us every ~60 us); where each has a core of its own it
// polls in MPI_Probe, at most of a core (expectation: over twice the napping rank's CPU time,
// measured side by side; needs 2 cores, and no other test beside it: 141 ms of a 306 ms wait
// with another test running, against ~300 alone). The message arrives intact either way.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <string>
#include <thread>

#include "launch/launch.h"

namespace capplan::rt {
namespace {

struct Wait {
  double wall_ms = -1, cpu_ms = -1;
  int mismatches = -1;
};

Wait run_check(const char* mode) {
  std::vector<std::string> argv = {CAPPLAN_MPIEXEC};
  if (::geteuid() == 0) argv.push_back("--allow-run-as-root");
  argv.insert(argv.end(), {"--oversubscribe", "--bind-to", "none", "-np", "2", CAPPLAN_CHECK, mode});
  ProcessOptions opt;
  opt.env = mpi_transport_env();
  std::string out;
  const ProcessResult p = run_process(argv, opt, [&](OutputStream, const std::string& line) { out += line + "\n"; });
  EXPECT_TRUE(p.started) << p.error;
  EXPECT_EQ(p.exit_code, 0) << out;
  Wait w;
  const size_t at = out.find("rank 1: waited");
  EXPECT_NE(at, std::string::npos) << out;
  if (at != std::string::npos)
    std::sscanf(out.c_str() + at, "rank 1: waited %lf ms, cpu %lf ms, %d mismatches", &w.wall_ms, &w.cpu_ms,
                &w.mismatches);
  std::printf("%s: waited %.1f ms, cpu %.1f ms\n", mode, w.wall_ms, w.cpu_ms);
  return w;
}

TEST(PipelineWait, AWaitingRankOnASharedCoreGivesTheCoreAway) {
  const Wait shared = run_check("shared");
  EXPECT_EQ(shared.mismatches, 0);
  EXPECT_GE(shared.wall_ms, 250);
  EXPECT_LT(shared.cpu_ms, shared.wall_ms / 3);
  if (std::thread::hardware_concurrency() < 2) GTEST_SKIP() << "one core: no rank has a core of its own";
  const Wait own = run_check("own");
  EXPECT_EQ(own.mismatches, 0);
  EXPECT_GE(own.wall_ms, 250);
  EXPECT_GT(own.cpu_ms, 2 * shared.cpu_ms);
}

}  // namespace
}  // namespace capplan::rt
