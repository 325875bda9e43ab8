// The Run page's "Launch on Slurm" against the private Slurm of the slurm_daemons fixture.
// Expectation: the run is submitted, the live state reaches RUNNING, the loss chart fills; a rank
// SIGKILLed mid-run makes Slurm requeue the job, the chart gets one marker where the new attempt
// resumed and ends with every step once; the page reports success.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <QCheckBox>
#include <QLabel>
#include <QSignalSpy>
#include <QTemporaryDir>
#include <filesystem>
#include <fstream>

#include "../app/gui/gui_test_support.h"
#include "run_page.h"
#include "timeline_page.h"
#include "planner/spec_io.h"
#include "support/test_files.h"

namespace capplan::gui {
namespace {

namespace fs = std::filesystem;

std::map<std::string, std::string> fixture_env(std::string* skip) {
  std::map<std::string, std::string> vars;
  const std::string dir = CAPPLAN_SLURM_DIR;
  const std::string reason = capplan::test::read_text(dir + "/skip");
  if (!reason.empty()) {
    *skip = "the private Slurm did not start: " + reason;
    return vars;
  }
  std::ifstream env(dir + "/env");
  if (!env) {
    *skip = "the private Slurm was not started (run through ctest, which starts the slurm_daemons fixture)";
    return vars;
  }
  for (std::string line; std::getline(env, line);) {
    const size_t eq = line.find('=');
    if (eq != std::string::npos) vars[line.substr(0, eq)] = line.substr(eq + 1);
  }
  return vars;
}

std::vector<pid_t> ranks_of(const std::string& needle) {
  std::vector<pid_t> pids;
  for (const auto& e : fs::directory_iterator("/proc")) {
    const std::string name = e.path().filename();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::string cmd = capplan::test::read_text(e.path() / "cmdline");
    const std::string argv0 = cmd.substr(0, cmd.find('\0'));
    std::replace(cmd.begin(), cmd.end(), '\0', ' ');
    if (cmd.find(needle) != std::string::npos && fs::path(argv0).filename() == "capplan-train")
      pids.push_back(pid_t(std::stoi(name)));
  }
  return pids;
}

TEST(GuiSlurm, LaunchOnSlurmShowsStateAndMarksTheResumedAttempt) {
  std::string skip;
  const auto vars = fixture_env(&skip);
  if (!skip.empty()) GTEST_SKIP() << skip;
  test::ensureApp();
  qputenv("SLURM_CONF", QByteArray::fromStdString(vars.at("SLURM_CONF")));
  qputenv("OMPI_ALLOW_RUN_AS_ROOT", "1");
  qputenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1");
  qputenv("CAPPLAN_TRAIN", CAPPLAN_TRAIN);

  Plan plan;
  plan.model_ref = "gpt2-124m";
  plan.cluster_ref = "p4d.24xlarge";
  plan.scenario.model = *load_model("gpt2-124m").value;
  plan.scenario.cluster = *load_cluster("p4d.24xlarge").value;
  plan.scenario.nodes = 1;
  plan.scenario.gpus = 2;
  plan.scenario.training.gbs = 8;
  plan.layout.dp = 2;
  plan.layout.mbs = 1;

  const fs::path dir = capplan::test::scratch_dir("gui-slurm") / "run";
  RunPage run;
  run.setPlan(plan);
  run.setRunDirectory(QString::fromStdString(dir.string()));
  run.setSteps(3000);
  run.setCheckpointEvery(100);
  run.setKeepKnobs(false);
  run.setSlurm(true, QString::fromStdString(vars.at("CAPPLAN_SLURM_PARTITION")), 1, QString());
  QSignalSpy done(&run, &RunPage::runFinished);
  bool killed = false;
  QObject::connect(&run, &RunPage::metricsArrived, &run, [&](int points) {
    if (killed || points < 250) return;
    const auto pids = ranks_of(dir.string());
    if (pids.size() == 2 && ::kill(pids.back(), SIGKILL) == 0) killed = true;
  });
  run.launch(false);
  ASSERT_TRUE(done.wait(280000)) << "the Slurm run did not finish";
  const QString status = run.findChild<QLabel*>(QStringLiteral("runStatus"))->text();
  EXPECT_TRUE(done.last().at(0).toBool()) << status.toStdString();
  EXPECT_TRUE(killed) << "no rank was killed (the run was too fast?)";
  EXPECT_EQ(run.resumeMarkers(), 1);
  EXPECT_EQ(run.lossPoints(), 3000);
  const QString state = run.findChild<QLabel*>(QStringLiteral("runSlurmState"))->text();
  EXPECT_TRUE(state.startsWith(QStringLiteral("Slurm: COMPLETED"))) << state.toStdString();
  EXPECT_TRUE(state.contains(QStringLiteral("requeued 1x"))) << state.toStdString();
}

}  // namespace
}  // namespace capplan::gui
