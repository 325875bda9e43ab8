// `capplan-train health` under mpirun with 2 ranks. Expectation: on this machine every check
// passes when the checkpoint folder has room; a checkpoint size larger than the folder's free
// space fails free_disk, naming the node, the check, the measured and the expected bytes, with
// exit status 1 and the node in the --failed-nodes file; a bad flag is exit status 2.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <sys/statvfs.h>

#include "launch/launch.h"
#include "support/test_files.h"

namespace capplan::rt {
namespace {

struct Result {
  int exit_code = -1;
  std::string out, err;
};

Result health(const std::vector<std::string>& flags, int ranks = 2) {
  std::vector<std::string> argv = {CAPPLAN_MPIEXEC};
  if (::geteuid() == 0) argv.push_back("--allow-run-as-root");
  argv.insert(argv.end(), {"--oversubscribe", "--bind-to", "none", "-np", std::to_string(ranks), CAPPLAN_TRAIN,
                           "health"});
  argv.insert(argv.end(), flags.begin(), flags.end());
  ProcessOptions opt;
  opt.env.push_back("OMPI_MCA_btl_vader_single_copy_mechanism=none");
  Result r;
  const ProcessResult p = run_process(argv, opt, [&](OutputStream s, const std::string& line) {
    (s == OutputStream::Stdout ? r.out : r.err) += line + "\n";
  });
  EXPECT_TRUE(p.started) << p.error;
  r.exit_code = p.exit_code;
  return r;
}

std::string host() {
  char buf[256] = {};
  ::gethostname(buf, sizeof buf - 1);
  std::string h = buf;
  return h.substr(0, h.find('.'));
}

TEST(Health, EveryCheckPassesWithRoomForTwoCheckpoints) {
  const auto dir = capplan::test::scratch_dir("health-ok");
  const Result r = health({"--checkpoint-dir", dir.string(), "--checkpoint-bytes", "1000000", "--json",
                           "--out", (dir / "health.json").string()});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  for (const char* check : {"reachability", "gemm_result", "gemm_gflops", "free_memory", "free_disk",
                            "write_bandwidth", "clock_skew", "gpu"}) {
    EXPECT_NE(r.out.find(std::string("\"check\": \"") + check + "\""), std::string::npos) << check << "\n" << r.out;
  }
  EXPECT_NE(r.out.find("\"status\": \"ok\""), std::string::npos) << r.out;
  // The all-reduce summed one per rank: 2.
  EXPECT_NE(r.out.find("all-reduce over 2 ranks: sum 2, expected 2"), std::string::npos) << r.out;
  // Without a GPU backend the GPU checks are skipped, not passed silently.
  EXPECT_NE(r.out.find("\"skipped\": true"), std::string::npos) << r.out;
  EXPECT_EQ(capplan::test::read_text(dir / "health.json"), r.out);
}

TEST(Health, TooLittleRoomForTwoCheckpointsFailsNamingNodeCheckAndFigures) {
  const auto dir = capplan::test::scratch_dir("health-full");
  struct statvfs vfs {};
  ASSERT_EQ(::statvfs(dir.c_str(), &vfs), 0);
  const double free_bytes = double(vfs.f_bavail) * double(vfs.f_frsize);
  // A checkpoint as large as the free space: two of them cannot fit.
  char bytes[64];
  std::snprintf(bytes, sizeof bytes, "%.0f", free_bytes);
  const Result r = health({"--checkpoint-dir", dir.string(), "--checkpoint-bytes", bytes, "--failed-nodes",
                           (dir / "failed.tsv").string(), "--write-test-bytes", "1048576"});
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  const std::string line = "health: FAILED on node " + host() + ": free_disk: free in '" + dir.string() + "': ";
  EXPECT_NE(r.err.find(line), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("expected >= "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("(two checkpoints of "), std::string::npos) << r.err;
  const std::string failed = capplan::test::read_text(dir / "failed.tsv");
  EXPECT_EQ(failed.rfind(host() + "\tcapplan health: free_disk: ", 0), 0u) << failed;
}

TEST(Health, GemmBelowTheExpectedFigureFails) {
  const auto dir = capplan::test::scratch_dir("health-slow");
  // No CPU reaches 1e9 GFLOP/s: 10 % of it is the bound and the node fails it.
  const Result r = health({"--checkpoint-dir", dir.string(), "--expected-gflops", "1e9"}, 1);
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_NE(r.err.find(": gemm_gflops: fp32 GEMM 512^3: "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("expected >= 100000000.0 (10 % of the node's 1000000000.0)"), std::string::npos) << r.err;
}

TEST(Health, BadFlagIsExitStatusTwo) {
  const Result r = health({"--checkpoint-bytes", "lots"}, 1);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("<command line>: error: --checkpoint-bytes: expected a finite number, found 'lots'"),
            std::string::npos)
      << r.err;
}

}  // namespace
}  // namespace capplan::rt
