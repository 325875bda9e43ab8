// The Timeline page (timeline_page.h): simulate_step and simulate_run off the GUI thread, the
// Gantt chart of the step, and the run's expected days and dollars with failures.
#include "timeline_page.h"

#include <QComboBox>
#include <QDoubleSpinBox>
#include <QFileDialog>
#include <QFutureWatcher>
#include <QGroupBox>
#include <QHBoxLayout>
#include <QHelpEvent>
#include <QLabel>
#include <QMouseEvent>
#include <QPainter>
#include <QPushButton>
#include <QToolTip>
#include <QVBoxLayout>
#include <QtConcurrent/QtConcurrentRun>
#include <cmath>

#include "item_models.h"
#include "planner/plan_io.h"
#include "planner/search.h"

#ifdef CAPPLAN_GUI_HAVE_SIMULATOR
#include "simulator/run_simulation.h"
#include "simulator/step_simulation.h"
#endif

namespace capplan::gui {

// ================================================================ TimelinePage

TimelinePage::TimelinePage(PageHost& host, QWidget* parent) : QWidget(parent), host_(host) {
  setObjectName(QStringLiteral("timelinePage"));
  auto* v = new QVBoxLayout(this);
  timeline_ = new TimelineView(this);
  timeline_->setObjectName(QStringLiteral("timeline"));
  v->addLayout(buildToolbar());
  info_ = new QLabel(this);
  info_->setObjectName(QStringLiteral("timelineInfo"));
  info_->setWordWrap(true);
  info_->setSizePolicy(QSizePolicy::Ignored, QSizePolicy::Preferred);
  v->addWidget(info_);
  v->addWidget(timeline_, 1);
  v->addWidget(buildRunSimulation());
}

QLayout* TimelinePage::buildToolbar() {
  auto* bar = new QHBoxLayout;
  schedule_ = makeCombo(this, "timelineSchedule", {QStringLiteral("as planned"), QStringLiteral("gpipe"),
                                                   QStringLiteral("1f1b"), QStringLiteral("interleaved")},
                        tr("Pipeline schedule to simulate for the selected layout (interleaved uses vp = 2 when the plan has vp = 1)"));
  auto* zin = new QPushButton(tr("Zoom in"), this);
  zin->setToolTip(tr("Zoom in (Ctrl+wheel over the chart; drag to pan)"));
  auto* zout = new QPushButton(tr("Zoom out"), this);
  auto* zfit = new QPushButton(tr("Fit"), this);
  zfit->setToolTip(tr("Show the whole step"));
  auto* trace = new QPushButton(tr("Export Chrome trace..."), this);
  trace->setToolTip(tr("Write the simulated step as a Chrome trace (open in Perfetto or chrome://tracing)"));
  bar->addWidget(new QLabel(tr("Schedule"), this));
  bar->addWidget(schedule_);
  bar->addWidget(zin);
  bar->addWidget(zout);
  bar->addWidget(zfit);
  bar->addStretch(1);
  bar->addWidget(trace);
  connect(zin, &QPushButton::clicked, timeline_, &TimelineView::zoomIn);
  connect(zout, &QPushButton::clicked, timeline_, &TimelineView::zoomOut);
  connect(zfit, &QPushButton::clicked, timeline_, &TimelineView::resetZoom);
  connect(schedule_, &QComboBox::currentIndexChanged, this, [this] { refresh(); });
  connect(trace, &QPushButton::clicked, this, &TimelinePage::exportTrace);
  return bar;
}

QGroupBox* TimelinePage::buildRunSimulation() {
  auto* runBox = new QGroupBox(tr("Whole run with failures (Monte-Carlo)"), this);
  auto* rf = new QHBoxLayout(runBox);
  mtbfHours_ = new QDoubleSpinBox(runBox);
  mtbfHours_->setRange(1, 1e7);
  mtbfHours_->setValue(6335);
  mtbfHours_->setSuffix(tr(" h"));
  mtbfHours_->setToolTip(tr("Mean time between failures of one node (Llama 3 saw about 6,335 node-hours)"));
  checkpointMin_ = new QDoubleSpinBox(runBox);
  checkpointMin_->setRange(0, 1e5);
  checkpointMin_->setSuffix(tr(" min"));
  checkpointMin_->setSpecialValueText(tr("Young/Daly"));
  checkpointMin_->setToolTip(tr("Checkpoint interval; 0 = the Young/Daly optimum sqrt(2 x checkpoint cost x MTBF)"));
  restartMin_ = new QDoubleSpinBox(runBox);
  restartMin_->setRange(0, 1e4);
  restartMin_->setValue(20);
  restartMin_->setSuffix(tr(" min"));
  restartMin_->setToolTip(tr("Time to restart after a failure: re-queue, health check, node replacement, reload"));
  trials_ = makeSpin(runBox, "trials", 10, 100000, tr("Monte-Carlo trials (seeded, deterministic)"));
  trials_->setValue(1000);
  auto* simRun = new QPushButton(tr("Simulate run"), runBox);
  simRun->setObjectName(QStringLiteral("simulateRun"));
  simRun->setToolTip(tr("Expected wall-clock days and dollars with failures, p10-p90"));
  rf->addWidget(new QLabel(tr("node MTBF"), runBox));
  rf->addWidget(mtbfHours_);
  rf->addWidget(new QLabel(tr("checkpoint every"), runBox));
  rf->addWidget(checkpointMin_);
  rf->addWidget(new QLabel(tr("restart"), runBox));
  rf->addWidget(restartMin_);
  rf->addWidget(new QLabel(tr("trials"), runBox));
  rf->addWidget(trials_);
  rf->addWidget(simRun);
  runSimResult_ = new QLabel(runBox);
  runSimResult_->setObjectName(QStringLiteral("runSimResult"));
  runSimResult_->setWordWrap(true);
  runSimResult_->setSizePolicy(QSizePolicy::Ignored, QSizePolicy::Preferred);
  rf->addWidget(runSimResult_, 1);

  connect(simRun, &QPushButton::clicked, this, &TimelinePage::simulateRun);
  return runBox;
}

#ifdef CAPPLAN_GUI_HAVE_SIMULATOR
namespace {
struct TimelineData {
  StepSimulation sim;
};
}  // namespace
#endif

void TimelinePage::refresh() {
  const std::optional<Estimate>& selected = host_.selectedEstimate();
  const PlanInputs& inputs = host_.inputs();
  const quint64 gen = ++generation_;
  simulated_ = false;
  lastSim_.reset();
  traceJson_.clear();
  traceBuilt_ = false;
  if (!selected) {
    timeline_->clear(tr("No layout selected."));
    return;
  }
#ifdef CAPPLAN_GUI_HAVE_SIMULATOR
  const Scenario s = scenarioOf(inputs, *selected);
  Layout l = selected->layout;
  const int choice = schedule_->currentIndex();
  if (choice == 1) l.schedule = Schedule::GPipe;
  if (choice == 2) l.schedule = Schedule::OneFOneB;
  if (choice == 3) {
    l.schedule = Schedule::Interleaved;
    if (l.vp < 2) l.vp = 2;
  }
  if (choice != 3 && choice != 0) l.vp = 1;
  if (const auto why = check_layout(s, l)) {
    timeline_->clear(tr("This schedule does not work for the layout: %1").arg(QString::fromStdString(*why)));
    return;
  }
  timeline_->clear(tr("Simulating one step..."));
  auto* watcher = new QFutureWatcher<TimelineData>(this);
  const Layout planned = selected->layout;
  connect(watcher, &QFutureWatcherBase::finished, this, [this, watcher, gen, l, planned] {
    watcher->deleteLater();
    if (gen != generation_) return;
    const TimelineData d = watcher->result();
    if (!d.sim.error.empty()) {
      timeline_->clear(tr("Simulation failed: %1").arg(QString::fromStdString(d.sim.error)));
      return;
    }
    std::vector<TimelineBar> bars;
    bars.reserve(d.sim.timeline.size());
    for (const SimEvent& ev : d.sim.timeline) {
      TimelineBar b;
      b.lane = ev.stage * 2 + (ev.stream == SimStream::Compute ? 0 : 1);
      b.startS = ev.start_s;
      b.endS = ev.end_s;
      b.kind = int(ev.kind);
      b.microbatch = ev.microbatch;
      bars.push_back(b);
    }
    QStringList labels;
    for (int st = 0; st < l.pp; ++st) {
      const int rank = st < int(d.sim.stage_rank.size()) ? d.sim.stage_rank[size_t(st)] : -1;
      labels << (rank >= 0 ? tr("stage %1 · GPU %2").arg(st).arg(rank) : tr("stage %1").arg(st));
    }
    timeline_->setBars(std::move(bars), l.pp, d.sim.step_time_s, labels);
    lastSim_ = std::make_shared<const StepSimulation>(d.sim);
    const std::optional<Estimate>& now = host_.selectedEstimate();
    if (sameLayout(l, planned)) {
      simulated_ = true;
      simulatedStepS_ = d.sim.step_time_s;
      emit stepSimulated(d.sim.breakdown_s, d.sim.step_time_s);
    }
    info_->setText(tr("Simulated step of one data-parallel replica (one GPU per stage; the other tp ranks do the same): "
                      "%1 simulated vs %2 predicted, bubble %3%, %4 tasks. %5")
                       .arg(formatSeconds(d.sim.step_time_s), formatSeconds(now ? now->step_time_s : 0))
                               .arg(d.sim.bubble_fraction * 100, 0, 'f', 1)
                               .arg(d.sim.num_events)
                               .arg(QString::fromUtf8(to_string(l.schedule))));
    emit timelineUpdated();
  });
  watcher->setFuture(QtConcurrent::run([s, l]() {
    TimelineData d;
    d.sim = simulate_step(s, l);
    return d;
  }));
#else
  Q_UNUSED(gen);
  timeline_->clear(tr("The simulator library is not built into this app."));
#endif
}

const std::string& TimelinePage::traceJson() const {
  if (!traceBuilt_ && lastSim_ && lastSim_->error.empty()) {
    traceJson_ = chrome_trace_json(*lastSim_);
    traceBuilt_ = true;
  }
  return traceJson_;
}

void TimelinePage::exportTrace() {
  if (traceJson().empty()) {
    info_->setText(tr("Nothing to export: no simulated step yet."));
    return;
  }
  const QString f = QFileDialog::getSaveFileName(this, tr("Export Chrome trace"), QStringLiteral("step.trace.json"),
                                                 tr("Chrome trace (*.json)"));
  if (f.isEmpty()) return;
  const std::string err = write_file_atomic(f.toStdString(), traceJson());
  info_->setText(err.empty() ? tr("Wrote %1").arg(f) : QString::fromStdString(err));
}

void TimelinePage::simulateRun() {
#ifdef CAPPLAN_GUI_HAVE_SIMULATOR
  const std::optional<Estimate>& selected = host_.selectedEstimate();
  const PlanInputs& inputs = host_.inputs();
  if (!selected) return;
  const Scenario s = scenarioOf(inputs, *selected);
  const double step = simulated_ ? simulatedStepS_ : selected->step_time_s;
  RunOptions o;
  o.node_mtbf_hours = mtbfHours_->value();
  o.checkpoint_interval_min = checkpointMin_->value();
  o.restart_min = restartMin_->value();
  o.trials = trials_->value();
  runSimResult_->setText(tr("Simulating %1 runs...").arg(o.trials));
  auto* watcher = new QFutureWatcher<RunSimulation>(this);
  const quint64 gen = generation_;
  connect(watcher, &QFutureWatcherBase::finished, this, [this, watcher, gen] {
    watcher->deleteLater();
    if (gen != generation_) return;
    const RunSimulation r = watcher->result();
    if (!r.error.empty()) {
      runSimResult_->setText(QString::fromStdString(r.error));
      return;
    }
    runSimResult_->setText(tr("<b>%1 days</b> expected (p10 %2, p90 %3) vs %4 failure-free; %5 (p10 %6, p90 %7); "
                              "%8 failures; checkpoint every %9 min (Young/Daly %10, best on sweep %11)")
                               .arg(r.mean_days, 0, 'f', 1).arg(r.p10_days, 0, 'f', 1).arg(r.p90_days, 0, 'f', 1)
                               .arg(r.failure_free_days, 0, 'f', 1)
                               .arg(formatDollars(r.mean_cost_usd), formatDollars(r.p10_cost_usd), formatDollars(r.p90_cost_usd))
                               .arg(r.mean_failures, 0, 'f', 1)
                               .arg(r.checkpoint_interval_min, 0, 'f', 0)
                               .arg(r.young_daly_interval_min, 0, 'f', 0)
                               .arg(r.best_interval_min, 0, 'f', 0));
  });
  watcher->setFuture(QtConcurrent::run([s, step, o]() { return simulate_run(run_inputs(s, step), o); }));
#else
  runSimResult_->setText(tr("The simulator library is not built into this app."));
#endif
}

// ================================================================ TimelineView

TimelineView::TimelineView(QWidget* parent) : QWidget(parent) {
  setMinimumHeight(240);
  setMouseTracking(true);
  setFocusPolicy(Qt::WheelFocus);
  setToolTip(tr("Ctrl+wheel or the buttons zoom; drag to pan; hover a bar for its task"));
  message_ = tr("No layout selected.");
}

const QStringList& TimelineView::kindNames() {
  static const QStringList names{QStringLiteral("forward"),  QStringLiteral("recompute"),
                                 QStringLiteral("backward (input)"), QStringLiteral("backward (weight)"),
                                 QStringLiteral("TP comm"),  QStringLiteral("send forward"),
                                 QStringLiteral("send backward"), QStringLiteral("DP comm"),
                                 QStringLiteral("ZeRO all-gather"), QStringLiteral("optimizer"),
                                 QStringLiteral("offload"),  QStringLiteral("reload"),
                                 QStringLiteral("EP all-to-all"), QStringLiteral("CP ring")};
  return names;
}

QColor TimelineView::kindColor(int kind) {
  static const QColor colors[] = {QColor(66, 133, 244), QColor(251, 188, 5),  QColor(52, 168, 83),
                                  QColor(30, 120, 60),  QColor(171, 71, 188), QColor(255, 112, 67),
                                  QColor(255, 167, 38), QColor(234, 67, 53),  QColor(141, 110, 99),
                                  QColor(96, 125, 139), QColor(0, 172, 193),  QColor(0, 131, 143),
                                  QColor(216, 27, 96),  QColor(124, 179, 66)};
  return kind >= 0 && kind < int(std::size(colors)) ? colors[kind] : QColor(120, 120, 120);
}

void TimelineView::setBars(std::vector<TimelineBar> bars, int stages, double stepTimeS, QStringList stageLabels) {
  bars_ = std::move(bars);
  stages_ = stages;
  stageLabels_ = std::move(stageLabels);
  stepTimeS_ = stepTimeS > 0 ? stepTimeS : 1;
  message_.clear();
  resetZoom();
}

void TimelineView::clear(const QString& message) {
  bars_.clear();
  stages_ = 0;
  message_ = message;
  update();
}

namespace {
constexpr int kLabelW = 150;
constexpr int kAxisH = 26;
constexpr int kLegendRowH = 18;
}  // namespace

int TimelineView::legendHeight() const {
  std::vector<bool> present(size_t(kindNames().size()), false);
  for (const TimelineBar& b : bars_)
    if (b.kind >= 0 && b.kind < int(present.size())) present[size_t(b.kind)] = true;
  int x = kLabelW, rows = 1;
  for (int k = 0; k < kindNames().size(); ++k) {
    if (!present[size_t(k)]) continue;
    const int w = 22 + fontMetrics().horizontalAdvance(kindNames()[k]);
    if (x + w > width() && x > kLabelW) {
      ++rows;
      x = kLabelW;
    }
    x += w;
  }
  return 8 + rows * kLegendRowH;
}

void TimelineView::drawLegend(QPainter& p) const {
  std::vector<bool> present(size_t(kindNames().size()), false);
  for (const TimelineBar& b : bars_)
    if (b.kind >= 0 && b.kind < int(present.size())) present[size_t(b.kind)] = true;
  int x = kLabelW;
  int y = height() - legendHeight() + 6;
  for (int k = 0; k < kindNames().size(); ++k) {
    if (!present[size_t(k)]) continue;
    const QString name = kindNames()[k];
    const int w = 22 + p.fontMetrics().horizontalAdvance(name);
    if (x + w > width() && x > kLabelW) {  // wrap: the legend never runs past the view
      x = kLabelW;
      y += kLegendRowH;
    }
    p.fillRect(QRect(x, y, 12, 12), kindColor(k));
    p.setPen(palette().text().color());
    p.drawText(QPoint(x + 16, y + 11), name);
    x += w;
  }
}

double TimelineView::xAt(double t) const {
  const double w = std::max(1, width() - kLabelW - 8);
  return kLabelW + (t - offsetS_) / (stepTimeS_ / zoom_) * w;
}

double TimelineView::timeAt(double x) const {
  const double w = std::max(1, width() - kLabelW - 8);
  return offsetS_ + (x - kLabelW) / w * (stepTimeS_ / zoom_);
}

void TimelineView::zoomIn() { setZoom(zoom_ * 1.5, kLabelW + (width() - kLabelW) / 2.0); }
void TimelineView::zoomOut() { setZoom(zoom_ / 1.5, kLabelW + (width() - kLabelW) / 2.0); }
void TimelineView::resetZoom() {
  zoom_ = 1.0;
  offsetS_ = 0;
  update();
}

void TimelineView::setZoom(double zoom, double anchorX) {
  const double t = timeAt(anchorX);
  zoom_ = std::clamp(zoom, 1.0, 1e5);
  const double w = std::max(1, width() - kLabelW - 8);
  offsetS_ = t - (anchorX - kLabelW) / w * (stepTimeS_ / zoom_);
  offsetS_ = std::clamp(offsetS_, 0.0, std::max(0.0, stepTimeS_ - stepTimeS_ / zoom_));
  update();
}

void TimelineView::wheelEvent(QWheelEvent* event) {
  if (bars_.empty()) return;
  const double f = event->angleDelta().y() > 0 ? 1.25 : 0.8;
  setZoom(zoom_ * f, event->position().x());
  event->accept();
}

void TimelineView::mousePressEvent(QMouseEvent* event) {
  dragX_ = int(event->position().x());
  dragOffsetS_ = offsetS_;
}

void TimelineView::mouseMoveEvent(QMouseEvent* event) {
  if (!(event->buttons() & Qt::LeftButton) || dragX_ < 0) return;
  const double w = std::max(1, width() - kLabelW - 8);
  offsetS_ = dragOffsetS_ - (event->position().x() - dragX_) / w * (stepTimeS_ / zoom_);
  offsetS_ = std::clamp(offsetS_, 0.0, std::max(0.0, stepTimeS_ - stepTimeS_ / zoom_));
  update();
}

const TimelineBar* TimelineView::barAt(const QPoint& p) const {
  if (stages_ <= 0) return nullptr;
  const int lanes = stages_ * 2;
  const double laneH = double(height() - kAxisH - legendHeight()) / lanes;
  const int lane = int((p.y() - kAxisH) / laneH);
  const double t = timeAt(p.x());
  for (const TimelineBar& b : bars_)
    if (b.lane == lane && b.startS <= t && t <= b.endS) return &b;
  return nullptr;
}

bool TimelineView::event(QEvent* e) {
  if (e->type() == QEvent::ToolTip) {
    auto* he = static_cast<QHelpEvent*>(e);
    if (const TimelineBar* b = barAt(he->pos())) {
      QToolTip::showText(he->globalPos(),
                         tr("%1%2\nstage %3, %4 - %5 (%6)")
                             .arg(kindNames().value(b->kind))
                             .arg(b->microbatch >= 0 ? tr(", micro-batch %1").arg(b->microbatch) : QString())
                             .arg(b->lane / 2)
                             .arg(formatSeconds(b->startS), formatSeconds(b->endS), formatSeconds(b->endS - b->startS)),
                         this);
      return true;
    }
  }
  return QWidget::event(e);
}

void TimelineView::paintEvent(QPaintEvent*) {
  QPainter p(this);
  p.fillRect(rect(), palette().base());
  if (bars_.empty() || stages_ <= 0) {
    p.setPen(palette().text().color());
    p.drawText(rect(), Qt::AlignCenter, message_);
    return;
  }
  const int lanes = stages_ * 2;
  const int legendH = legendHeight();
  const double laneH = double(height() - kAxisH - legendH) / lanes;
  // Lane labels and backgrounds.
  for (int lane = 0; lane < lanes; ++lane) {
    const QRectF r(0, kAxisH + lane * laneH, width(), laneH);
    if ((lane / 2) % 2 == 0) p.fillRect(r, palette().alternateBase());
    if (laneH >= 9) {
      p.setPen(palette().text().color());
      const QString stage = lane / 2 < stageLabels_.size() ? stageLabels_[lane / 2] : tr("stage %1").arg(lane / 2);
      p.drawText(QRectF(4, r.top(), kLabelW - 8, r.height()), Qt::AlignVCenter | Qt::AlignLeft,
                 lane % 2 == 0 ? stage : tr("  comm"));
    }
  }
  // Time axis.
  const double span = stepTimeS_ / zoom_;
  const double raw = span / 8;
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  const double tick = raw / mag < 2 ? mag * 2 : raw / mag < 5 ? mag * 5 : mag * 10;
  p.setPen(palette().mid().color());
  for (double t = std::ceil(offsetS_ / tick) * tick; t <= offsetS_ + span; t += tick) {
    const double x = xAt(t);
    p.drawLine(QPointF(x, kAxisH - 4), QPointF(x, height() - legendH));
    p.drawText(QRectF(x - 40, 2, 80, kAxisH - 6), Qt::AlignCenter, t == 0 ? QStringLiteral("0") : formatSeconds(t));
  }
  // Bars.
  p.save();
  p.setClipRect(QRect(kLabelW, kAxisH, width() - kLabelW, height() - kAxisH - legendH));
  for (const TimelineBar& b : bars_) {
    const double x0 = xAt(b.startS);
    const double x1 = xAt(b.endS);
    if (x1 < kLabelW || x0 > width()) continue;
    const QRectF r(x0, kAxisH + b.lane * laneH + 1, std::max(1.0, x1 - x0), laneH - 2);
    p.fillRect(r, kindColor(b.kind));
    if (r.width() > 18 && laneH > 12 && b.microbatch >= 0) {
      p.setPen(Qt::white);
      p.drawText(r, Qt::AlignCenter, QString::number(b.microbatch));
    }
  }
  p.restore();
  drawLegend(p);
}

}  // namespace capplan::gui
