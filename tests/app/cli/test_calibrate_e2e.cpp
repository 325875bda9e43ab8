// `capplan calibrate` end to end on real runs: three short `capplan run`s of a small model on
// this machine (dp, tp and pp layouts) are calibrated into a cluster file that reads back, whose
// efficiencies are the fit, and whose weighted residual over the runs' measured terms is no larger
// than before. Bad input (a failed run, runs of different clusters, a corrupt or missing record)
// is exit 2 with a message naming the run, and never writes the cluster file.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <tuple>

#include "launch/launch_process.h"
#include "planner/json.h"
#include "planner/spec_io.h"
#include "support/run_train.h"
#include "support/test_files.h"

namespace capplan::rt {
namespace {

namespace fs = std::filesystem;

using Ran = capplan::test::ProgramRun;

// The command as a user types it, with capplan-train from this build.
Ran run(const std::vector<std::string>& argv) { return capplan::test::run_with_this_train(argv); }

// One folder of runs shared by the tests of this file (made once: the runs take seconds each).
const std::string& runs_dir() {
  static const std::string dir = [] {
    const std::string d = capplan::test::scratch_dir("calibrate").string();
    std::ofstream(d + "/small.yaml") << "name: small\nlayers: 2\nhidden: 128\nheads: 4\nvocab: 1024\nseq_len: 64\n";
    for (const auto& [name, dp, tp, pp] : {std::tuple{"dp2", "2", "1", "1"}, std::tuple{"tp2", "1", "2", "1"},
                                           std::tuple{"pp2", "1", "1", "2"}}) {
      const Ran r = run({CAPPLAN_EXE, "run", "--model", d + "/small.yaml", "--cluster", "p4d.24xlarge", "--nodes",
                         "1", "--gpus", "2", "--dp", dp, "--tp", tp, "--pp", pp, "--mbs", "2", "--gbs", "8",
                         "--steps", "6", "--timeout", "120", "--dir", d + "/" + name});
      EXPECT_EQ(r.status, 0) << name << "\n" << r.err << r.out;
    }
    return d;
  }();
  return dir;
}

// Expectation: exit 0; the printed table has a row per run with residuals before and after; the
// file loads as a cluster with the fitted efficiencies and says what it was fitted on; the fit's
// residual is at most the one before (least squares from the old values as the start).
TEST(CalibrateEndToEnd, ThreeRunsGiveACalibratedClusterFile) {
  const std::string d = runs_dir();
  const std::string out = d + "/cluster.yaml";
  const Ran c = run({CAPPLAN_EXE, "calibrate", d + "/dp2", d + "/tp2", d + "/pp2", "--out", out, "--json"});
  ASSERT_EQ(c.status, 0) << c.err << c.out;
  const std::optional<Json> j = json_parse(c.out);
  ASSERT_TRUE(j && j->is_object()) << c.out;
  ASSERT_EQ(j->at("runs").size(), 3u);
  EXPECT_LE(j->at("after_rms").get<double>(), j->at("before_rms").get<double>() + 1e-12) << c.out;
  EXPECT_GE(j->at("residuals").get<int>(), 3 * 4) << c.out;  // compute, dp/tp/pp comm, optimizer, ...
  const auto& fitted = j->at("fitted");
  EXPECT_NE(std::find(fitted.begin(), fitted.end(), "gemm"), fitted.end()) << c.out;
  EXPECT_NE(std::find(fitted.begin(), fitted.end(), "intra_node"), fitted.end()) << c.out;
  for (const auto& r : j->at("runs")) EXPECT_LE(r.at("terms").size(), 8u);

  const Loaded<ClusterSpec> cl = load_cluster(out);
  ASSERT_TRUE(cl.ok()) << cl.diagnostics.to_string() << capplan::test::read_text(out);
  ASSERT_TRUE(cl.value->efficiency.gemm.has_value());
  EXPECT_DOUBLE_EQ(*cl.value->efficiency.gemm, j->at("efficiency").at("gemm").get<double>());
  EXPECT_NE(cl.value->source.find("calibrated by capplan calibrate from 3 runs"), std::string::npos)
      << cl.value->source;
  EXPECT_NE(capplan::test::read_text(out).find(d + "/tp2"), std::string::npos);

  const Ran text = run({CAPPLAN_EXE, "calibrate", d + "/dp2", d + "/tp2", "--out", d + "/two.yaml"});
  ASSERT_EQ(text.status, 0) << text.err;
  EXPECT_NE(text.out.find("before"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find(d + "/dp2"), std::string::npos) << text.out;
}

TEST(CalibrateEndToEnd, BadRunsAreRefusedNamingTheRun) {
  const std::string d = runs_dir();
  const std::string out = d + "/refused.yaml";
  auto refused = [&](const std::vector<std::string>& dirs, const std::string& names, const std::string& says) {
    std::vector<std::string> argv = {CAPPLAN_EXE, "calibrate"};
    argv.insert(argv.end(), dirs.begin(), dirs.end());
    argv.insert(argv.end(), {"--out", out});
    const Ran r = run(argv);
    EXPECT_EQ(r.status, 2) << r.err << r.out;
    EXPECT_NE(r.err.find(names), std::string::npos) << r.err;
    EXPECT_NE(r.err.find(says), std::string::npos) << r.err;
    EXPECT_FALSE(fs::exists(out));
  };
  // A failed run: stopped by its time limit.
  const Ran failed = run({CAPPLAN_EXE, "run", "--model", d + "/small.yaml", "--cluster", "p4d.24xlarge", "--nodes",
                          "1", "--gpus", "2", "--dp", "2", "--tp", "1", "--pp", "1", "--mbs", "2", "--gbs", "8",
                          "--steps", "100000", "--timeout", "3", "--dir", d + "/failed"});
  EXPECT_EQ(failed.status, 1) << failed.err;
  refused({d + "/dp2", d + "/failed"}, d + "/failed/run.json", "the run is failed");
  // Runs of different clusters: a copy of a run whose plan names another cluster.
  fs::remove_all(d + "/other");
  fs::copy(d + "/tp2", d + "/other", fs::copy_options::recursive);
  {
    std::string plan = capplan::test::read_text(d + "/other/plan.yaml");
    const std::string key = "cluster_ref: ";
    const size_t at = plan.find(key);
    ASSERT_NE(at, std::string::npos) << plan;
    plan.replace(at, plan.find('\n', at) - at, key + "\"lab machine\"");
    std::ofstream(d + "/other/plan.yaml") << plan;
  }
  refused({d + "/dp2", d + "/other"}, d + "/other/plan.yaml", "runs of different clusters");
  // A corrupt record (cut short) and a folder without one.
  fs::remove_all(d + "/cut");
  fs::copy(d + "/pp2", d + "/cut", fs::copy_options::recursive);
  const std::string record = capplan::test::read_text(d + "/cut/run.json");
  std::ofstream(d + "/cut/run.json") << record.substr(0, record.size() / 2);
  refused({d + "/dp2", d + "/cut"}, d + "/cut/run.json", "corrupt run record");
  fs::create_directories(d + "/empty");
  refused({d + "/empty"}, d + "/empty/run.json", "no run record");
  fs::remove_all(d + "/nometrics");
  fs::copy(d + "/dp2", d + "/nometrics", fs::copy_options::recursive);
  fs::remove(d + "/nometrics/metrics.jsonl");
  refused({d + "/nometrics"}, d + "/nometrics/metrics.jsonl", "missing");
}

}  // namespace
}  // namespace capplan::rt
