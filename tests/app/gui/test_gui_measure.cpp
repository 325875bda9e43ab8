// The GUI's measuring and calibrating, offscreen, on real processes: "Measure on this machine"
// measures a small model with two ranks of capplan-train and charts every kernel measured vs
// predicted, Cancel stops it and keeps the previous profile; the Plan page's device-profile
// picker refuses a profile of another device and uses a matching one through an undoable edit;
// after a local run, "Calibrate from this run" writes the calibrated cluster file.
#include <gtest/gtest.h>

#include <QAbstractBarSeries>
#include <QBarSet>
#include <QChart>
#include <QChartView>
#include <QDir>
#include <QFile>
#include <QFileInfo>
#include <QLabel>
#include <QPlainTextEdit>
#include <QPushButton>
#include <QSignalSpy>
#include <QSpinBox>
#include <QTemporaryDir>
#include <QTest>
#include <QUndoStack>

#include "gui_test_support.h"
#include "main_window.h"
#include "plan_page.h"
#include "run_page.h"

#ifdef CAPPLAN_GUI_HAVE_RUNTIME
#include "launch/launch.h"
#include "measure_tools.h"
#include "planner/device_profile.h"
#include "planner/spec_io.h"
#endif

namespace capplan::gui {
namespace {

#if defined(CAPPLAN_GUI_HAVE_RUNTIME) && defined(CAPPLAN_GUI_TRAIN_HINT)

void mpiEnvironment() {
  qputenv("OMPI_ALLOW_RUN_AS_ROOT", "1");
  qputenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1");
  qputenv("OMPI_MCA_rmaps_base_oversubscribe", "1");
}

ModelSpec smallModel() {
  ModelSpec m;
  m.name = "gui-measure";
  m.layers = 1;
  m.hidden = 64;
  m.heads = 2;
  m.vocab = 256;
  m.seq_len = 32;
  return m;
}

QByteArray readAll(const QString& path) {
  QFile f(path);
  return f.open(QIODevice::ReadOnly) ? f.readAll() : QByteArray();
}

// Expectation: the measurement finishes, the profile reads back, and the chart has two bar sets
// (measured, predicted) with one bar per measured kernel; a second measurement cancelled at once
// reports the cancel and leaves the first profile byte for byte.
TEST(GuiMeasure, MeasureChartsEveryKernelAndCancelKeepsTheProfile) {
  test::ensureApp();
  mpiEnvironment();
  QTemporaryDir dir;
  ASSERT_TRUE(dir.isValid());
  const QString out = dir.filePath(QStringLiteral("device.yaml"));
  {
    MeasureDialog d(smallModel(), 1, 2, 0, out);
    d.setRanks(2);
    d.setRepeats(1);
    QSignalSpy done(&d, &MeasureDialog::measureFinished);
    QSignalSpy measured(&d, &MeasureDialog::profileMeasured);
    QTest::mouseClick(d.findChild<QPushButton*>(QStringLiteral("measureStart")), Qt::LeftButton);
    EXPECT_TRUE(d.running());
    ASSERT_TRUE(done.wait(180000)) << "the measurement did not finish";
    ASSERT_TRUE(done.at(0).at(0).toBool()) << d.statusText().toStdString() << "\n"
                                          << d.findChild<QPlainTextEdit*>(QStringLiteral("measureLog"))->toPlainText().toStdString();
    ASSERT_EQ(measured.size(), 1);
    EXPECT_EQ(measured.at(0).at(0).toString(), out);
    const Loaded<DeviceProfile> p = load_device_profile(out.toStdString());
    ASSERT_TRUE(p.ok()) << p.diagnostics.to_string();
    const QList<QAbstractSeries*> series = d.chart()->chart()->series();
    ASSERT_EQ(series.size(), 1);
    const auto* bars = qobject_cast<QAbstractBarSeries*>(series.first());
    ASSERT_NE(bars, nullptr);
    ASSERT_EQ(bars->count(), 2);
    const qsizetype kernels = qsizetype(p.value->gemms.size() + p.value->kernels.size());
    EXPECT_GT(kernels, 10);
    for (QBarSet* set : bars->barSets()) {
      EXPECT_EQ(set->count(), kernels) << set->label().toStdString();
      for (qsizetype i = 0; i < set->count(); ++i) EXPECT_GT(set->at(i), 0.0) << set->label().toStdString() << " " << i;
    }
  }
  const QByteArray before = readAll(out);
  MeasureDialog d(smallModel(), 1, 2, 0, out);
  d.setRanks(2);
  QSignalSpy done(&d, &MeasureDialog::measureFinished);
  d.start();
  QTest::mouseClick(d.findChild<QPushButton*>(QStringLiteral("measureCancel")), Qt::LeftButton);
  ASSERT_TRUE(done.wait(60000));
  EXPECT_FALSE(done.at(0).at(0).toBool());
  EXPECT_TRUE(d.statusText().startsWith(QStringLiteral("Cancelled"))) << d.statusText().toStdString();
  EXPECT_EQ(readAll(out), before);
}

class GuiMeasureWindow : public ::testing::Test {
 protected:
  void SetUp() override {
    test::ensureApp();
    mpiEnvironment();
    ASSERT_TRUE(dir_.isValid());
    MainWindowOptions o;
    o.autosavePath = dir_.filePath(QStringLiteral("autosave.yaml"));
    o.debounceMs = 10;
    window_ = std::make_unique<MainWindow>(o);
    window_->show();
    QSignalSpy planned(window_.get(), &MainWindow::planUpdated);
    ASSERT_TRUE(planned.wait(120000)) << "no plan at start";
  }
  void TearDown() override {
    if (window_) window_->close();
    window_.reset();
  }
  QTemporaryDir dir_;
  std::unique_ptr<MainWindow> window_;
};

// A profile measured as CPU ranks of the small model (written in the format capplan writes).
QString cpuProfile(const QString& path) {
  DeviceProfile p;
  p.device = "cpu: test, 2 cores";
  p.gpu = "cpu-rank";
  p.backend = "cpu";
  p.created_utc = "2026-01-01T00:00:00Z";
  p.how = "by hand for the test";
  p.ranks = 2;
  const ModelSpec m = smallModel();
  p.model = m.name;
  p.hidden = m.hidden;
  p.heads = m.heads;
  p.ffn_hidden = m.ffn_hidden_or_default();
  p.vocab = m.vocab;
  p.seq = m.seq_len;
  p.mbs = 1;
  p.gemms.push_back({"qkv forward", 32, 192, 64, 1e-5});
  p.kernels.push_back({"layernorm forward", 1e5, 1e-5});
  p.collectives.push_back({"all-reduce", 2, 4096, 2e-5});
  p.collectives.push_back({"all-reduce", 2, 1 << 20, 2e-4});
  fit_device_profile(p);
  QFile f(path);
  EXPECT_TRUE(f.open(QIODevice::WriteOnly));
  f.write(QByteArray::fromStdString(device_profile_yaml(p)));
  return path;
}

// Expectation: with the default plan's A100 cluster the CPU profile is refused with the reason
// and the inputs keep no profile; on this machine's cluster spec and the matching model it is
// used (the label names it), and undo takes it away again.
TEST_F(GuiMeasureWindow, PlanPageUsesAMatchingDeviceProfileAndShowsWhichOne) {
  DeviceProfilePicker* picker = window_->findChild<DeviceProfilePicker*>(QStringLiteral("deviceProfilePicker"));
  ASSERT_NE(picker, nullptr);
  EXPECT_TRUE(picker->text().contains(QStringLiteral("none"))) << picker->text().toStdString();
  const QString path = cpuProfile(dir_.filePath(QStringLiteral("cpu.yaml")));
  EXPECT_FALSE(picker->useProfile(path));
  EXPECT_TRUE(picker->text().contains(QStringLiteral("refused"))) << picker->text().toStdString();
  EXPECT_EQ(window_->inputs().cluster.device_profile, nullptr);

  PlanInputs in = window_->inputs();
  in.model = smallModel();
  in.cluster = rt::local_cluster_spec(rt::probe_local_machine(true), 2);
  in.nodesMin = in.nodesMax = 1;
  in.training.gbs = 8;
  window_->setInputs(in);
  ASSERT_TRUE(picker->useProfile(path)) << picker->text().toStdString();
  ASSERT_NE(window_->inputs().cluster.device_profile, nullptr);
  EXPECT_EQ(window_->inputs().cluster.device_profile->device, "cpu: test, 2 cores");
  EXPECT_TRUE(picker->text().contains(QStringLiteral("cpu.yaml"))) << picker->text().toStdString();
  window_->undoStack()->undo();
  EXPECT_EQ(window_->inputs().cluster.device_profile, nullptr);
  EXPECT_TRUE(picker->text().contains(QStringLiteral("none"))) << picker->text().toStdString();
}

// Expectation: "Calibrate from this run" is off until a local run succeeds; then it writes
// RUNDIR/calibrated-cluster.yaml, which reads back as a cluster, and shows the fit.
TEST_F(GuiMeasureWindow, CalibrateFromThisRunAfterALocalRun) {
  RunPage* run = window_->runPage();
  QPushButton* calibrate = run->findChild<QPushButton*>(QStringLiteral("calibrateRun"));
  ASSERT_NE(calibrate, nullptr);
  EXPECT_FALSE(calibrate->isEnabled());
  const QString runDir = dir_.filePath(QStringLiteral("run"));
  run->setRunDirectory(runDir);
  run->findChild<QSpinBox*>(QStringLiteral("runDp"))->setValue(2);
  run->findChild<QSpinBox*>(QStringLiteral("runTp"))->setValue(1);
  run->findChild<QSpinBox*>(QStringLiteral("runPp"))->setValue(1);
  run->setSteps(6);
  run->setKeepKnobs(false);
  QSignalSpy done(run, &RunPage::runFinished);
  run->launch();
  ASSERT_TRUE(done.wait(240000)) << "run did not finish";
  ASSERT_TRUE(done.last().at(0).toBool()) << run->findChild<QLabel*>(QStringLiteral("runStatus"))->text().toStdString();
  ASSERT_TRUE(calibrate->isEnabled());
  QTest::mouseClick(calibrate, Qt::LeftButton);
  const QString written = QDir(run->runDirectory()).filePath(QStringLiteral("calibrated-cluster.yaml"));
  ASSERT_TRUE(QFileInfo::exists(written)) << run->findChild<QLabel*>(QStringLiteral("runStatus"))->text().toStdString();
  const Loaded<ClusterSpec> c = load_cluster(written.toStdString());
  ASSERT_TRUE(c.ok()) << c.diagnostics.to_string();
  EXPECT_NE(c.value->source.find("calibrated by capplan calibrate from 1 run"), std::string::npos) << c.value->source;
  EXPECT_TRUE(run->findChild<QLabel*>(QStringLiteral("runStatus"))->text().startsWith(QStringLiteral("Calibrated")));
}

#else
TEST(GuiMeasure, NeedsTheRuntime) { GTEST_SKIP() << "capplan-train or the launcher not built"; }
#endif

}  // namespace
}  // namespace capplan::gui
