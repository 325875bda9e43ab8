// The GUI's measuring and calibrating, kept apart from the pages they hook into: the "Measure on
// this machine" dialog (Model page), the device-profile picker (Plan page) and "Calibrate from
// this run" (Run page). Each is a shell over the launch library's calls, which the CLI makes too
// (rt::measure_device_profile and rt::compare_profile, rt::calibrate_runs).
#pragma once

#include <QDialog>
#include <QFutureWatcher>
#include <QString>
#include <QWidget>
#include <atomic>
#include <memory>

#include "page_common.h"

class QChartView;
class QLabel;
class QPlainTextEdit;
class QProgressBar;
class QPushButton;
class QSpinBox;

namespace capplan::gui {

// Measures the model's kernels and the ranks' collectives on this machine in the background
// (capplan-train measure under mpirun), with its output as progress, Cancel, and, when it is
// done, the per-kernel chart of measured vs predicted (the cost model on this machine).
class MeasureDialog : public QDialog {
  Q_OBJECT
 public:
  // `model` is written to a file beside `outPath` for capplan-train; tp, mbs and seq are the
  // shape measured (seq 0 = the model's).
  MeasureDialog(const ModelSpec& model, int tp, int mbs, int seq, const QString& outPath, QWidget* parent = nullptr);
  ~MeasureDialog() override;  // cancels and waits for a measurement in flight
  void setRanks(int ranks);
  void setRepeats(int repeats) { repeats_ = repeats; }
  void start();
  void cancel();
  bool running() const { return running_; }
  QString outPath() const { return outPath_; }
  QChartView* chart() const { return chart_; }
  QString statusText() const;

 signals:
  void measureFinished(bool succeeded);
  void profileMeasured(const QString& path);

 private:
  void onLine(const QString& line);
  void onDone(bool cancelled, bool ok, const QString& message, const QString& path);
  void showChart(const QString& path);

  ModelSpec model_;
  int tp_, mbs_, seq_, repeats_ = 3;
  QString outPath_;
  bool running_ = false;
  std::shared_ptr<std::atomic<bool>> cancel_;
  QFutureWatcher<void>* watcher_ = nullptr;  // the worker; waited for on destruction
  QSpinBox* ranks_ = nullptr;
  QPushButton* startButton_ = nullptr;
  QPushButton* cancelButton_ = nullptr;
  QProgressBar* progress_ = nullptr;
  QLabel* status_ = nullptr;
  QPlainTextEdit* log_ = nullptr;
  QChartView* chart_ = nullptr;
};

// "Device profile: ..." with Choose and Clear: the Plan page's search then uses the measured
// times (ClusterSpec::device_profile), through one undoable edit of the inputs. A profile of
// another device or model shape is refused with the reason shown and nothing changed.
class DeviceProfilePicker : public QWidget {
  Q_OBJECT
 public:
  DeviceProfilePicker(PageHost& host, QWidget* parent = nullptr);
  // Loads and checks `path`, then edits the inputs; false (and the reason shown) when refused.
  bool useProfile(const QString& path);
  void clear();
  void syncFromInputs(const PlanInputs& in);  // shows which profile the inputs use
  QString text() const;

 private:
  PageHost& host_;
  QString path_;
  QLabel* label_ = nullptr;
  QPushButton* clear_ = nullptr;
};

// Fits this machine's efficiencies to one finished run (rt::calibrate_runs) and writes
// RUNDIR/calibrated-cluster.yaml; returns the text to show (the fit and the residuals), or the
// errors, and sets *ok.
QString calibrateFromRun(const QString& runDir, bool* ok, QString* writtenPath = nullptr);

}  // namespace capplan::gui
