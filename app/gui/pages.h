// Widgets of the Timeline and Run pages: a zoomable Gantt chart of one simulated step (one row per
// pipeline stage and stream), and the Run panel that launches a scaled-down run through the
// runtime's launcher, on this machine or submitted to Slurm, and charts its metrics as they grow.
#pragma once

#include <QFutureWatcher>
#include <QHash>
#include <QPointer>
#include <QWidget>
#include <atomic>
#include <functional>
#include <memory>
#include <vector>

#include "planner/plan_io.h"

class QChartView;
class QCheckBox;
class QLabel;
class QLineEdit;
class QLineSeries;
class QScatterSeries;
class QPlainTextEdit;
class QPushButton;
class QSpinBox;
class QTableWidget;
class QValueAxis;

namespace capplan::gui {

// One bar of the Gantt chart; `kind` indexes TimelineView::kindNames().
struct TimelineBar {
  int lane = 0;  // stage * 2 + (0 compute stream, 1 communication streams)
  double startS = 0;
  double endS = 0;
  int kind = 0;
  int microbatch = -1;
};

class TimelineView : public QWidget {
  Q_OBJECT
 public:
  explicit TimelineView(QWidget* parent = nullptr);
  // stageLabels: one per stage, e.g. "stage 3 · GPU 24"; empty = "stage N".
  void setBars(std::vector<TimelineBar> bars, int stages, double stepTimeS, QStringList stageLabels = {});
  void clear(const QString& message);
  static const QStringList& kindNames();
  static QColor kindColor(int kind);
  int barCount() const { return int(bars_.size()); }
  double zoom() const { return zoom_; }

 public slots:
  void zoomIn();
  void zoomOut();
  void resetZoom();

 protected:
  void paintEvent(QPaintEvent* event) override;
  void wheelEvent(QWheelEvent* event) override;
  void mousePressEvent(QMouseEvent* event) override;
  void mouseMoveEvent(QMouseEvent* event) override;
  bool event(QEvent* event) override;  // tooltips per bar

 private:
  double timeAt(double x) const;
  double xAt(double t) const;
  const TimelineBar* barAt(const QPoint& p) const;
  void setZoom(double zoom, double anchorX);

  std::vector<TimelineBar> bars_;
  int stages_ = 0;
  QStringList stageLabels_;
  double stepTimeS_ = 0;
  double zoom_ = 1.0;      // 1 = whole step fits the width
  double offsetS_ = 0.0;   // time at the left edge of the plot
  int dragX_ = -1;
  double dragOffsetS_ = 0;
  QString message_;
};

// The Run page: launch, stop, resume; live charts; findings; predicted vs simulated vs measured.
class RunPanel : public QWidget {
  Q_OBJECT
 public:
  explicit RunPanel(QWidget* parent = nullptr);
  ~RunPanel() override;
  // The selected plan; its layout is shrunk to at most kMaxRanks ranks for this machine (dp, tp,
  // pp each cut to 2 at most; schedule, vp, zero, recompute, offload, sp and order kept).
  void setPlan(const Plan& plan);
  Layout runLayout() const;
  static constexpr int kMaxRanks = 8;
  bool isRunning() const { return running_; }
  int lossPoints() const;
  QString runDirectory() const { return runDir_; }
  // The next launch writes here (checkpoints, metrics, run record); later launches pick a new one.
  void setRunDirectory(const QString& dir) {
    runDir_ = dir;
    runDirUsed_ = false;
  }
  void setSteps(int steps);
  // false: run the plain layout (zero 0, no recompute, offload or sp) when the trainer lacks a knob.
  void setKeepKnobs(bool keep);
  void setCheckpointEvery(int steps) { checkpointEvery_ = steps; }  // 0 = a quarter of the run
  // "Launch on Slurm": submit the same run with sbatch and follow it (partition, nodes, time limit).
  void setSlurm(bool on, const QString& partition = {}, int nodes = 1, const QString& timeLimit = {});
  int resumeMarkers() const;  // points on the loss chart where an attempt resumed

 public slots:
  void launch(bool resume = false);
  void stop();

 signals:
  void runFinished(bool succeeded);
  void metricsArrived(int lossPoints);

 private:
  void onMetrics(const QString& type, const QHash<QString, double>& numbers);
  void onOutputLine(const QString& line);
  void onFinished(const QString& status, const QString& reason);
  void onSlurmState(const QString& state, const QString& reason, int position, int restarts);
  void onResumed(double step);
  void resetCharts();

  Plan plan_;
  QString runDir_;
  bool runDirUsed_ = false;
  int checkpointEvery_ = 0;
  bool running_ = false;
  std::shared_ptr<std::atomic<bool>> cancel_;
  QFutureWatcher<void>* watcher_ = nullptr;

  QSpinBox* steps_ = nullptr;
  QSpinBox* runDp_ = nullptr;
  QSpinBox* runTp_ = nullptr;
  QSpinBox* runPp_ = nullptr;
  QLabel* layoutNote_ = nullptr;
  QCheckBox* keepKnobs_ = nullptr;
  QPushButton* launchButton_ = nullptr;
  QPushButton* stopButton_ = nullptr;
  QPushButton* resumeButton_ = nullptr;
  QLabel* status_ = nullptr;
  QPlainTextEdit* log_ = nullptr;
  QLabel* findings_ = nullptr;
  QTableWidget* compare_ = nullptr;
  QChartView* lossChart_ = nullptr;
  QChartView* speedChart_ = nullptr;
  QChartView* systemChart_ = nullptr;
  QLineSeries* loss_ = nullptr;
  QLineSeries* tokens_ = nullptr;
  QLineSeries* cpu_ = nullptr;
  QLineSeries* rss_ = nullptr;
  QScatterSeries* resumed_ = nullptr;  // where a requeued attempt resumed
  QCheckBox* slurm_ = nullptr;
  QLineEdit* partition_ = nullptr;
  QSpinBox* slurmNodes_ = nullptr;
  QLineEdit* timeLimit_ = nullptr;
  QLabel* slurmState_ = nullptr;
  bool slurmRun_ = false;  // the current run was submitted to Slurm
  double t0_ = -1;
};

}  // namespace capplan::gui
