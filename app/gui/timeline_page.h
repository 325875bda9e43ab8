// The Timeline page: the simulator's step of the selected layout as a zoomable Gantt chart (one
// row per pipeline stage and stream), its Chrome trace, and the Monte-Carlo of the whole run with
// node failures and checkpoints.
#pragma once

#include <QWidget>
#include <memory>
#include <string>
#include <vector>

#include "page_common.h"
#include "simulator/step_simulation.h"

class QComboBox;
class QDoubleSpinBox;
class QGroupBox;
class QLabel;

class QPainter;

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
  // The legend: the kinds of task the step holds, as many rows as the width needs; its height.
  int legendHeight() const;
  void drawLegend(QPainter& p) const;
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

class TimelinePage : public QWidget {
  Q_OBJECT
 public:
  explicit TimelinePage(PageHost& host, QWidget* parent = nullptr);
  // Simulates one step of the host's selected layout off the GUI thread; a newer call drops the
  // result of an older one.
  void refresh();
  TimelineView* view() const { return timeline_; }
  // The Chrome trace of the last simulated step, built when first asked for (export, tests).
  const std::string& traceJson() const;

 signals:
  // The selected layout's step as planned (its own schedule) was simulated.
  void stepSimulated(const TimeBreakdown& breakdown, double stepS);
  void timelineUpdated();

 private:
  QLayout* buildToolbar();
  QGroupBox* buildRunSimulation();
  void exportTrace();
  void simulateRun();

  PageHost& host_;
  quint64 generation_ = 0;
  bool simulated_ = false;  // simulatedStepS_ is the selected layout's simulated step
  double simulatedStepS_ = 0;
  std::shared_ptr<const StepSimulation> lastSim_;  // the last simulated step
  mutable std::string traceJson_;                 // its Chrome trace, once built
  mutable bool traceBuilt_ = false;
  QComboBox* schedule_ = nullptr;
  QLabel* info_ = nullptr;
  TimelineView* timeline_ = nullptr;
  QDoubleSpinBox* mtbfHours_ = nullptr;
  QDoubleSpinBox* checkpointMin_ = nullptr;
  QDoubleSpinBox* restartMin_ = nullptr;
  QSpinBox* trials_ = nullptr;
  QLabel* runSimResult_ = nullptr;
};

}  // namespace capplan::gui
