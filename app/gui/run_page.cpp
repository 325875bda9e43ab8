// The Run page (run_page.h): prepare_run / execute_run (or the Slurm launch) on a worker thread;
// its callbacks post to the GUI thread, where the charts grow.
#include "run_page.h"

#include <QApplication>
#include <QChart>
#include <QChartView>
#include <QCheckBox>
#include <QComboBox>
#include <QListWidget>
#include <QDateTime>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QLineEdit>
#include <QLineSeries>
#include <QPlainTextEdit>
#include <QPointer>
#include <QPushButton>
#include <QScatterSeries>
#include <QSignalBlocker>
#include <QSpinBox>
#include <QStandardPaths>
#include <QTableWidget>
#include <QThread>
#include <QVBoxLayout>
#include <QValueAxis>
#include <QtConcurrent/QtConcurrentRun>
#include <algorithm>
#include <cmath>

#include "item_models.h"
#include "page_common.h"

#ifdef CAPPLAN_GUI_HAVE_RUNTIME
#include "launch/launch.h"
#include "io/report.h"
#include "measure_tools.h"
#endif

namespace capplan::gui {

RunPage::RunPage(QWidget* parent) : QWidget(parent) {
  runsFolder_ = QStandardPaths::writableLocation(QStandardPaths::AppDataLocation) + QStringLiteral("/runs");
  auto* v = new QVBoxLayout(this);
  v->addLayout(buildLaunchBar());
  v->addLayout(buildSlurmBar());
  v->addWidget(status_);  // a line of its own: the launch bar leaves it no room at 1280 pixels
  v->addWidget(layoutNote_);
  v->addLayout(buildCharts(), 2);
  v->addLayout(buildResults(), 1);
  for (QSpinBox* s : {runDp_, runTp_, runPp_}) connect(s, &QSpinBox::valueChanged, this, &RunPage::describeLayout);
  connect(keepKnobs_, &QCheckBox::toggled, this, &RunPage::describeLayout);
  connect(launchButton_, &QPushButton::clicked, this, [this] { launch(false); });
  connect(resumeButton_, &QPushButton::clicked, this, [this] { launch(true); });
  connect(stopButton_, &QPushButton::clicked, this, &RunPage::stop);
#ifdef CAPPLAN_GUI_HAVE_RUNTIME
  connect(calibrateButton_, &QPushButton::clicked, this, [this] {
    bool ok = false;
    const QString text = calibrateFromRun(runDir_, &ok);
    findings_->setText(QStringLiteral("<pre>%1</pre>").arg(text.toHtmlEscaped()));
    status_->setText(ok ? tr("Calibrated from %1").arg(runDir_) : tr("Calibration refused"));
  });
#endif
  resetCharts();
  refreshHistory();
#ifndef CAPPLAN_GUI_HAVE_RUNTIME
  launchButton_->setEnabled(false);
  status_->setText(tr("The runtime library is not built into this app (MPI not found)."));
#endif
}

QLayout* RunPage::buildLaunchBar() {
  auto* bar = new QHBoxLayout;
  steps_ = new QSpinBox(this);
  steps_->setObjectName(QStringLiteral("runSteps"));
  steps_->setRange(1, 100000);
  steps_->setValue(20);
  steps_->setToolTip(tr("Training steps of the scaled-down run"));
  launchButton_ = new QPushButton(tr("Launch scaled-down run"), this);
  launchButton_->setObjectName(QStringLiteral("launchRun"));
  launchButton_->setToolTip(tr("mpirun capplan-train on this machine with the selected layout (dp, tp, pp, schedule, knobs kept), "
                               "the model shrunk to fit"));
  stopButton_ = new QPushButton(tr("Stop"), this);
  stopButton_->setObjectName(QStringLiteral("stopRun"));
  stopButton_->setToolTip(tr("Stop the run; it keeps its last checkpoint and writes its record"));
  stopButton_->setEnabled(false);
  resumeButton_ = new QPushButton(tr("Resume"), this);
  resumeButton_->setObjectName(QStringLiteral("resumeRun"));
  resumeButton_->setToolTip(tr("Continue the last run from its newest good checkpoint"));
  resumeButton_->setEnabled(false);
  status_ = new QLabel(this);
  status_->setObjectName(QStringLiteral("runStatus"));
  status_->setWordWrap(true);
  runDp_ = makeSpin(this, "runDp", 1, kMaxRanks, tr("dp of the local run"));
  runTp_ = makeSpin(this, "runTp", 1, kMaxRanks, tr("tp of the local run"));
  runPp_ = makeSpin(this, "runPp", 1, kMaxRanks, tr("pp of the local run"));
  for (QSpinBox* s : {runDp_, runTp_, runPp_}) s->setMinimumWidth(60);
  layoutNote_ = new QLabel(this);
  layoutNote_->setObjectName(QStringLiteral("runLayoutNote"));
  layoutNote_->setWordWrap(true);
  layoutNote_->setSizePolicy(QSizePolicy::Ignored, QSizePolicy::Preferred);
  bar->addWidget(new QLabel(tr("dp"), this));
  bar->addWidget(runDp_);
  bar->addWidget(new QLabel(tr("tp"), this));
  bar->addWidget(runTp_);
  bar->addWidget(new QLabel(tr("pp"), this));
  bar->addWidget(runPp_);
  bar->addWidget(new QLabel(tr("Steps"), this));
  bar->addWidget(steps_);
  data_ = new QComboBox(this);
  data_->setObjectName(QStringLiteral("runData"));
  data_->addItem(tr("text corpus"), QStringLiteral("corpus"));
  data_->addItem(tr("synthetic"), QStringLiteral("synthetic"));
#ifdef CAPPLAN_GUI_HAVE_RUNTIME
  {
    const QString corpus = QString::fromStdString(rt::locate_default_corpus());
    data_->setToolTip(corpus.isEmpty()
                          ? tr("The bundled text corpus (configs/corpus/sqlite-api) is not found: runs use synthetic tokens")
                          : tr("text corpus: SQLite's public-domain API documentation, byte-level (%1); the loss "
                               "falls within a run.\nsynthetic: random tokens, nothing to learn (loss stays at ln 256)")
                                .arg(corpus));
  }
#endif
  bar->addWidget(new QLabel(tr("Data"), this));
  bar->addWidget(data_);
  keepKnobs_ = new QCheckBox(tr("plan's knobs"), this);
  keepKnobs_->setObjectName(QStringLiteral("runKeepKnobs"));
  keepKnobs_->setChecked(true);
  keepKnobs_->setToolTip(tr("Keep the plan's zero, recompute, offload and sp; clear to run the plain layout"));
  bar->addWidget(keepKnobs_);
  bar->addWidget(launchButton_);
  bar->addWidget(stopButton_);
  bar->addWidget(resumeButton_);
  calibrateButton_ = new QPushButton(tr("Calibrate from this run"), this);
  calibrateButton_->setObjectName(QStringLiteral("calibrateRun"));
  calibrateButton_->setToolTip(tr("Fit this machine's efficiencies to the run's measured terms (capplan calibrate) "
                                  "and write RUNDIR/calibrated-cluster.yaml"));
  calibrateButton_->setEnabled(false);
  bar->addWidget(calibrateButton_);
  bar->addStretch(1);
  return bar;
}

QLayout* RunPage::buildSlurmBar() {
  auto* slurmBar = new QHBoxLayout;
  slurm_ = new QCheckBox(tr("Launch on Slurm"), this);
  slurm_->setObjectName(QStringLiteral("runSlurm"));
  slurm_->setToolTip(tr("Submit the run with sbatch (health check first, requeue and resume after a failure) "
                        "and follow it with squeue; Stop cancels the job (scancel)"));
  partition_ = new QLineEdit(this);
  partition_->setObjectName(QStringLiteral("runPartition"));
  partition_->setPlaceholderText(tr("default partition"));
  partition_->setToolTip(tr("Slurm partition (empty: the cluster's default)"));
  slurmNodes_ = makeSpin(this, "runSlurmNodes", 1, 4096, tr("Nodes of the Slurm job"));
  timeLimit_ = new QLineEdit(this);
  timeLimit_->setObjectName(QStringLiteral("runTimeLimit"));
  timeLimit_->setPlaceholderText(tr("HH:MM:SS"));
  timeLimit_->setToolTip(tr("Time limit of the job (empty: the partition's); at least one checkpoint interval"));
  slurmState_ = new QLabel(this);
  slurmState_->setObjectName(QStringLiteral("runSlurmState"));
  slurmState_->setSizePolicy(QSizePolicy::Ignored, QSizePolicy::Preferred);
  for (QWidget* w : {static_cast<QWidget*>(partition_), static_cast<QWidget*>(slurmNodes_), static_cast<QWidget*>(timeLimit_)})
    w->setEnabled(false);
  connect(slurm_, &QCheckBox::toggled, this, [this](bool on) {
    for (QWidget* w : {static_cast<QWidget*>(partition_), static_cast<QWidget*>(slurmNodes_), static_cast<QWidget*>(timeLimit_)})
      w->setEnabled(on);
  });
  slurmBar->addWidget(slurm_);
  slurmBar->addWidget(new QLabel(tr("partition"), this));
  slurmBar->addWidget(partition_);
  slurmBar->addWidget(new QLabel(tr("nodes"), this));
  slurmBar->addWidget(slurmNodes_);
  slurmBar->addWidget(new QLabel(tr("time limit"), this));
  slurmBar->addWidget(timeLimit_);
  slurmBar->addWidget(slurmState_, 1);

  return slurmBar;
}

QLayout* RunPage::buildCharts() {
  auto* charts = new QHBoxLayout;
  lossChart_ = new ChartArea(this, "lossChart");
  speedChart_ = new ChartArea(this, "speedChart");
  systemChart_ = new ChartArea(this, "systemChart");
  charts->addWidget(lossChart_);
  charts->addWidget(speedChart_);
  charts->addWidget(systemChart_);

  return charts;
}

QLayout* RunPage::buildResults() {
  auto* lower = new QHBoxLayout;
  log_ = new QPlainTextEdit(this);
  log_->setObjectName(QStringLiteral("runLog"));
  log_->setReadOnly(true);
  log_->setMaximumBlockCount(2000);
  log_->setFont(QFont(QStringLiteral("monospace")));
  log_->setPlaceholderText(tr("Output of mpirun and capplan-train appears here."));
  auto* right = new QVBoxLayout;
  compare_ = new QTableWidget(0, 4, this);
  compare_->setObjectName(QStringLiteral("runCompare"));
  compare_->setHorizontalHeaderLabels({tr("term"), tr("predicted"), tr("simulated"), tr("measured")});
  compare_->horizontalHeader()->setSectionResizeMode(QHeaderView::Stretch);
  compare_->horizontalHeader()->setSectionResizeMode(0, QHeaderView::ResizeToContents);  // whole term names
  compare_->verticalHeader()->hide();
  compare_->verticalHeader()->setDefaultSectionSize(fontMetrics().height() + 6);  // more rows in view at 1280x800
  compare_->setToolTip(tr("Seconds per step by term: planner, simulator and the run itself"));
  memory_ = new QTableWidget(0, 3, this);
  memory_->setObjectName(QStringLiteral("runMemory"));
  memory_->setHorizontalHeaderLabels({tr("memory per rank"), tr("predicted"), tr("measured")});
  memory_->horizontalHeader()->setSectionResizeMode(QHeaderView::Stretch);
  memory_->horizontalHeader()->setSectionResizeMode(0, QHeaderView::ResizeToContents);
  memory_->verticalHeader()->hide();
  memory_->verticalHeader()->setDefaultSectionSize(fontMetrics().height() + 6);
  memory_->setToolTip(tr("MiB per rank by kind: the planner's prediction beside what capplan-train allocated "
                         "(largest over ranks; a rank's activations are its kept activations and its working buffers)"));
  findings_ = new QLabel(this);
  findings_->setObjectName(QStringLiteral("runFindings"));
  findings_->setWordWrap(true);
  findings_->setTextFormat(Qt::RichText);
  right->addWidget(compare_, 3);
  right->addWidget(memory_, 2);
  right->addWidget(findings_);
  lower->addWidget(buildHistory());
  lower->addWidget(log_, 1);
  lower->addLayout(right, 1);

  return lower;
}

QWidget* RunPage::buildHistory() {
  auto* box = new QWidget(this);
  auto* v = new QVBoxLayout(box);
  v->setContentsMargins(0, 0, 0, 0);
  v->addWidget(new QLabel(tr("Earlier runs"), box));
  history_ = new QListWidget(box);
  history_->setObjectName(QStringLiteral("runHistory"));
  history_->setToolTip(tr("Runs in the runs folder, newest first; choose one to resume it (when it has a checkpoint)"));
  history_->setMinimumWidth(230);
  history_->setMaximumWidth(320);
  v->addWidget(history_, 1);
  connect(history_, &QListWidget::currentRowChanged, this, &RunPage::onHistoryChosen);
  return box;
}

void RunPage::setRunsFolder(const QString& dir) {
  runsFolder_ = dir;
  refreshHistory();
}

void RunPage::setData(const QString& data) {
  const int i = data_->findData(data);
  if (i >= 0) data_->setCurrentIndex(i);
}

int RunPage::historyCount() const { return history_->count(); }

void RunPage::selectHistory(int row) { history_->setCurrentRow(row); }

void RunPage::refreshHistory() {
  const QSignalBlocker block(history_);
  history_->clear();
#ifdef CAPPLAN_GUI_HAVE_RUNTIME
  for (const rt::RunListing& r : rt::list_runs(runsFolder_.toStdString())) {
    QString text = QStringLiteral("%1\n%2 · %3 steps").arg(QString::fromStdString(r.name),
                                                         QString::fromStdString(r.status))
                       .arg(r.steps);
    if (r.plan) text += QStringLiteral(" · dp %1 tp %2 pp %3").arg(r.plan->layout.dp).arg(r.plan->layout.tp).arg(r.plan->layout.pp);
    if (r.checkpoint_step >= 0) text += tr("\ncheckpoint at step %1").arg(r.checkpoint_step);
    auto* item = new QListWidgetItem(text, history_);
    item->setData(Qt::UserRole, QString::fromStdString(r.run_dir));
    item->setData(Qt::UserRole + 1, r.resumable());
    item->setToolTip(QString::fromStdString(r.run_dir + (r.reason.empty() ? "" : "\n" + r.reason)));
  }
#endif
}

void RunPage::onHistoryChosen(int row) {
#ifdef CAPPLAN_GUI_HAVE_RUNTIME
  if (row < 0 || running_) return;
  const QListWidgetItem* item = history_->item(row);
  const QString dir = item->data(Qt::UserRole).toString();
  const bool resumable = item->data(Qt::UserRole + 1).toBool();
  resumeFrom_.reset();
  if (resumable) {
    Loaded<Plan> p = load_plan((dir + QStringLiteral("/plan.yaml")).toStdString());
    if (p.ok()) resumeFrom_ = *p.value;
  }
  runDir_ = dir;
  runDirUsed_ = true;
  resumeButton_->setEnabled(resumeFrom_.has_value());
  const rt::RunComparison figures = rt::read_run_comparison(dir.toStdString());
  showComparison(figures.terms, figures.memory);
  findings_->clear();
  status_->setText(resumeFrom_ ? tr("Earlier run %1 chosen: Resume continues it from its newest checkpoint.").arg(dir)
                               : tr("Earlier run %1 has no checkpoint to resume from.").arg(dir));
#else
  Q_UNUSED(row);
#endif
}

RunPage::~RunPage() {
  stop();
  if (watcher_ != nullptr) watcher_->waitForFinished();
}

void RunPage::setSteps(int steps) { steps_->setValue(steps); }

void RunPage::setKeepKnobs(bool keep) { keepKnobs_->setChecked(keep); }

int RunPage::defaultRanks() {
  return std::max(1, std::min(kMaxRanks, QThread::idealThreadCount()));
}

void RunPage::setPlan(const Plan& plan) {
  plan_ = plan;
  const Layout& l = plan.layout;
  // The default local layout fits this machine's cores, shrunk as `capplan run --max-ranks` does
  // (the launcher's shrink_layout: tp and pp cut to 2 at most, then dp to what is left).
  const int ranks = defaultRanks();
  const Layout run = l.gpus() <= ranks ? l : rt::shrink_layout(l, ranks).layout;
  updatingLayout_ = true;
  runTp_->setValue(run.tp);
  runPp_->setValue(run.pp);
  runDp_->setValue(run.dp);
  updatingLayout_ = false;
  describeLayout();
}

void RunPage::describeLayout() {
  if (updatingLayout_) return;
  const Layout& l = plan_.layout;
  const Layout run = runLayout();
  const QString knobs = keepKnobs_->isChecked() ? tr("the plan's schedule (%1), vp, order, zero, recompute, offload and sp")
                                                      .arg(QString::fromUtf8(to_string(run.schedule)))
                                                : tr("the plan's schedule (%1), vp and order, plain knobs (zero 0, no "
                                                     "recompute, offload or sp)").arg(QString::fromUtf8(to_string(run.schedule)));
  QString text = tr("Local run: dp %1 x tp %2 x pp %3 = %4 ranks on %5 cores, with %6; the model is scaled down to fit.")
                     .arg(run.dp).arg(run.tp).arg(run.pp).arg(run.gpus()).arg(QThread::idealThreadCount()).arg(knobs);
  if (l.gpus() > 0 && !sameLayout(run, l))
    text = tr("The selected layout is dp %1 x tp %2 x pp %3 (%4 ranks). ").arg(l.dp).arg(l.tp).arg(l.pp).arg(l.gpus()) + text;
  layoutNote_->setText(text);
}

Layout RunPage::runLayout() const {
  Layout l = plan_.layout;
  l.dp = runDp_->value();
  l.tp = runTp_->value();
  l.pp = runPp_->value();
  if (l.pp == 1) {
    l.vp = 1;
    if (l.schedule == Schedule::Interleaved) l.schedule = Schedule::OneFOneB;
  }
  if (l.tp == 1) l.sp = false;
  if (!keepKnobs_->isChecked()) {
    l.zero = 0;
    l.recompute = Recompute::None;
    l.offload = false;
    l.sp = false;
  }
  return l;
}

int RunPage::lossPoints() const { return loss_ != nullptr ? loss_->count() : 0; }

QList<QPointF> RunPage::lossCurve() const { return loss_ != nullptr ? loss_->points() : QList<QPointF>{}; }

QList<QPointF> RunPage::systemPoints() const { return cpu_ != nullptr ? cpu_->points() : QList<QPointF>{}; }

int RunPage::resumeMarkers() const { return resumed_ != nullptr ? resumed_->count() : 0; }

void RunPage::setSlurm(bool on, const QString& partition, int nodes, const QString& timeLimit) {
  slurm_->setChecked(on);
  partition_->setText(partition);
  slurmNodes_->setValue(nodes);
  timeLimit_->setText(timeLimit);
}

void RunPage::onSlurmState(const QString& state, const QString& reason, int position, int restarts) {
  QString text = tr("Slurm: %1").arg(state);
  if (!reason.isEmpty() && reason != QLatin1String("None")) text += QStringLiteral(" (%1)").arg(reason);
  if (position > 0) text += tr(", queue position %1").arg(position);
  if (restarts > 0) text += tr(", requeued %1x").arg(restarts);
  slurmState_->setText(text);
}

// A requeued attempt resumed from `step`: the steps after it are recomputed, so they leave the
// chart, and a marker shows where the attempt took over.
void RunPage::onResumed(double step) {
  QList<QPointF> kept;
  for (const QPointF& p : loss_->points())
    if (p.x() <= step) kept.append(p);
  loss_->replace(kept);
  QList<QPointF> speed;
  for (const QPointF& p : tokens_->points())
    if (p.x() <= step) speed.append(p);
  tokens_->replace(speed);
  const double y = kept.isEmpty() ? 0.0 : kept.last().y();
  resumed_->append(step, y);
}

void RunPage::resetCharts() {
  auto makeLine = [](ChartArea* area, const QString& title, const QString& xTitle, const QString& yTitle,
                     std::initializer_list<QLineSeries**> series, std::initializer_list<QString> names) {
    auto* chart = new QChart;
    setChartTitle(chart, area->view(), title);
    auto* ax = new QValueAxis;
    ax->setTitleText(xTitle);
    ax->setLabelFormat(QStringLiteral("%.0f"));
    auto* ay = new QValueAxis;
    ay->setTitleText(yTitle);
    ay->setLabelFormat(QStringLiteral("%g"));  // "100000", "2.5": no trailing ".0"
    chart->addAxis(ax, Qt::AlignBottom);
    chart->addAxis(ay, Qt::AlignLeft);
    auto name = names.begin();
    for (QLineSeries** s : series) {
      *s = new QLineSeries;
      (*s)->setName(*name++);
      chart->addSeries(*s);
      (*s)->attachAxis(ax);
      (*s)->attachAxis(ay);
    }
    area->setChart(chart);
    area->showMessage(RunPage::tr("No run yet: %1 appears here as the run trains.").arg(title.toLower()));
  };
  makeLine(lossChart_, tr("Loss"), tr("step"), tr("loss"), {&loss_}, {tr("loss per step")});
  resumed_ = new QScatterSeries;
  resumed_->setName(tr("attempt resumed (requeue)"));
  resumed_->setMarkerSize(10);
  lossChart_->view()->chart()->addSeries(resumed_);
  for (QAbstractAxis* axis : loss_->attachedAxes()) resumed_->attachAxis(axis);
  makeLine(speedChart_, tr("Throughput"), tr("step"), tr("tokens/s"), {&tokens_}, {tr("tokens/s per step")});
  makeLine(systemChart_, tr("System, rank 0"), tr("seconds"), tr("% / MiB"), {&cpu_, &rss_},
           {tr("CPU utilisation %"), tr("resident memory MiB")});
  // Seconds are not whole: "0.5", "1.5" rather than the step axes' rounded labels.
  for (QAbstractAxis* axis : cpu_->attachedAxes())
    if (auto* v = qobject_cast<QValueAxis*>(axis); v && axis->orientation() == Qt::Horizontal)
      v->setLabelFormat(QStringLiteral("%g"));
  systemOffsetS_ = 0;
  lastSystemS_ = 0;
}

namespace {
void extendAxes(QLineSeries* s, double x, double y) {
  const auto axes = s->attachedAxes();
  if (axes.size() < 2) return;
  auto* ax = qobject_cast<QValueAxis*>(axes[0]);
  auto* ay = qobject_cast<QValueAxis*>(axes[1]);
  if (s->count() == 1) {
    ax->setRange(x, x + 1);
    ay->setRange(std::min(0.0, y), y * 1.2 + 1e-9);
  }
  if (x > ax->max()) ax->setMax(x);
  if (y > ay->max()) ay->setMax(y * 1.1);
  if (y < ay->min()) ay->setMin(y);
  ax->applyNiceNumbers();  // round ticks
  ay->applyNiceNumbers();
  // Whole-number axes (steps) over a short span: one tick per unit, so that the labels do not
  // repeat ("0 1 1 2 2" for ticks half a step apart).
  if (ax->labelFormat() == QLatin1String("%.0f") && ax->max() - ax->min() < ax->tickCount() - 1)
    ax->setTickCount(std::max(2, int(std::lround(ax->max() - ax->min())) + 1));
}
}  // namespace

void RunPage::onMetrics(const QString& type, const QHash<QString, double>& n) {
  if (slurmRun_ && type == QLatin1String("start") && n.value(QStringLiteral("resumed_from_step"), 0) > 0 &&
      loss_->count() > 0) {
    onResumed(n.value(QStringLiteral("resumed_from_step")));
    return;
  }
  if (n.contains(QStringLiteral("loss")) && (type.isEmpty() || type == QLatin1String("step"))) {
    const double step = n.value(QStringLiteral("step"));
    const double loss = n.value(QStringLiteral("loss"));
    if (!std::isfinite(loss)) return;
    loss_->append(step, loss);
    extendAxes(loss_, step, loss);
    lossChart_->showChart();
    const double tps = n.value(QStringLiteral("tokens_per_s"), NAN);
    if (std::isfinite(tps)) {
      tokens_->append(step, tps);
      extendAxes(tokens_, step, tps);
      speedChart_->showChart();
    }
    emit metricsArrived(int(loss_->count()));
  } else if (type == QLatin1String("system") && n.value(QStringLiteral("rank"), 0) == 0) {
    // A resumed attempt counts its time from 0 again: continue from where the chart is.
    double t = n.value(QStringLiteral("time_s")) + systemOffsetS_;
    if (t < lastSystemS_) {
      systemOffsetS_ += lastSystemS_ - t;
      t = lastSystemS_;
    }
    lastSystemS_ = t;
    double cpu = n.value(QStringLiteral("cpu_util"), NAN);
    if (std::isfinite(cpu)) {
      if (cpu <= 1.0) cpu *= 100.0;
      cpu_->append(t, cpu);
      extendAxes(cpu_, t, cpu);
      systemChart_->showChart();
    }
    const double rss = n.value(QStringLiteral("rss_bytes"), NAN) / (1024.0 * 1024.0);
    if (std::isfinite(rss)) {
      rss_->append(t, rss);
      extendAxes(rss_, t, rss);
    }
  }
}

void RunPage::onOutputLine(const QString& line) { log_->appendPlainText(line); }

void RunPage::onFinished(const QString& status, const QString& reason) {
  running_ = false;
  launchButton_->setEnabled(true);
  stopButton_->setEnabled(false);
  resumeButton_->setEnabled(!runDir_.isEmpty());
  refreshHistory();
  calibrateButton_->setEnabled(status == QLatin1String("succeeded") && !slurm_->isChecked());
  if (status == QLatin1String("cancelled")) {
    // Stop is the user's choice, not a failure; what was checkpointed stays for Resume.
    QString text = tr("Stopped by the user");
    const int steps = int(loss_->count());
    if (steps > 0) text += tr(" after %1 steps").arg(steps);
    text += tr(". Its checkpoints are kept in %1; Resume continues from the newest.").arg(runDir_);
    status_->setText(text);
  } else {
    status_->setText(reason.isEmpty() ? tr("Run %1").arg(status) : tr("Run %1: %2").arg(status, reason));
  }
  emit runFinished(status == QLatin1String("succeeded"));
}

void RunPage::stop() {
  if (cancel_) cancel_->store(true);
}

std::function<void(std::function<void(RunPage*)>)> RunPage::poster() {
  QPointer<RunPage> self(this);
  return [self](std::function<void(RunPage*)> f) {
    QMetaObject::invokeMethod(qApp, [self, f = std::move(f)] {
      if (self) f(self.data());
    }, Qt::QueuedConnection);
  };
}

void RunPage::launch(bool resume) {
#ifdef CAPPLAN_GUI_HAVE_RUNTIME
  if (running_) return;
  if (!resume) resumeFrom_.reset();  // a new run: the fields' layout, not an earlier run's
  const Layout layout = resumeFrom_ ? resumeFrom_->layout : runLayout();
  if (layout.gpus() <= 0 || (!resumeFrom_ && plan_.scenario.model.layers <= 0)) {
    status_->setText(tr("No plan to run: select a layout on the Plan page."));
    return;
  }
  const rt::LaunchRequest req = launchRequest(layout, resume);
  if (!resume) {
    resetCharts();
    log_->clear();
  }
  running_ = true;
  launchButton_->setEnabled(false);
  resumeButton_->setEnabled(false);
  stopButton_->setEnabled(true);
  status_->setText(tr("Preparing %1 ranks in %2...").arg(layout.gpus()).arg(runDir_));
  compare_->setRowCount(0);
  memory_->setRowCount(0);
  findings_->clear();
  cancel_ = std::make_shared<std::atomic<bool>>(false);
  if (watcher_ == nullptr) watcher_ = new QFutureWatcher<void>(this);
  slurmRun_ = slurm_->isChecked();
  slurmState_->clear();
  if (slurmRun_) launchOnSlurm(req);
  else launchLocal(req);
#else
  Q_UNUSED(resume);
  status_->setText(tr("The runtime library is not built into this app (MPI not found)."));
#endif
}

#ifdef CAPPLAN_GUI_HAVE_RUNTIME
rt::LaunchRequest RunPage::launchRequest(const Layout& layout, bool resume) {
  if (runDir_.isEmpty() || (!resume && runDirUsed_)) {
    runDir_ = QStringLiteral("%1/run-%2").arg(runsFolder_, QDateTime::currentDateTimeUtc().toString(QStringLiteral("yyyyMMdd-hhmmss")));
  }
  runDirUsed_ = true;
  rt::LaunchRequest req;
  req.model_ref = plan_.model_ref;
  req.cluster_ref = plan_.cluster_ref;
  req.scenario = plan_.scenario;
  req.scenario.nodes = 1;
  req.scenario.gpus = layout.gpus();
  req.layout = layout;
  req.scale_down = true;
  req.steps = steps_->value();
  req.run_dir = runDir_.toStdString();
  req.resume = resume ? "auto" : "never";
  req.checkpoint_every = checkpointEvery_;  // resume: from the newest good checkpoint in run_dir
  req.measure_machine = true;
  req.data = rt::resolve_run_data(data_->currentData().toString().toStdString());
  if (resume && resumeFrom_) {
    // An earlier run: as it ran (already scaled to this machine), so its checkpoints fit.
    req.model_ref = resumeFrom_->model_ref;
    req.cluster_ref = resumeFrom_->cluster_ref;
    req.scenario = resumeFrom_->scenario;
    req.layout = resumeFrom_->layout;
    req.scale_down = false;
  }
#ifdef CAPPLAN_GUI_TRAIN_HINT
  req.train_build_hint = CAPPLAN_GUI_TRAIN_HINT;
#endif
  return req;
}

namespace {

// Metrics records as the charts take them: type and numbers.
std::function<void(const rt::MetricsRecord&)> metricsPoster(
    const std::function<void(std::function<void(RunPage*)>)>& post,
    void (*deliver)(RunPage*, const QString&, const QHash<QString, double>&)) {
  return [post, deliver](const rt::MetricsRecord& r) {
    QHash<QString, double> numbers;
    for (const auto& [k, v] : r.numbers) numbers.insert(QString::fromStdString(k), v);
    post([type = QString::fromStdString(r.type), numbers, deliver](RunPage* p) { deliver(p, type, numbers); });
  };
}

}  // namespace

void RunPage::showOutcome(const std::vector<rt::TermRow>& rows, const std::vector<rt::MemoryRow>& memory,
                          const QString& findings, const QString& status, const QString& reason) {
  showComparison(rows, memory);
  findings_->setText(findings);
  onFinished(status, reason);
}

void RunPage::showComparison(const std::vector<rt::TermRow>& rows, const std::vector<rt::MemoryRow>& memory) {
  compare_->setRowCount(int(rows.size()));
  auto cell = [](double v) { return new QTableWidgetItem(std::isfinite(v) ? formatSeconds(v) : RunPage::tr("unknown")); };
  for (int i = 0; i < int(rows.size()); ++i) {
    compare_->setItem(i, 0, new QTableWidgetItem(QString::fromStdString(rows[size_t(i)].term)));
    QTableWidgetItem* predicted = cell(rows[size_t(i)].predicted_s);
    if (const rt::TermRow& r = rows[size_t(i)]; std::isfinite(r.predicted_p10_s) && std::isfinite(r.predicted_p90_s)) {
      // The step's band beside it, p10-p90 of the model's error, as a share of the step (the band
      // is symmetric but where p10 would fall below zero); the figures in the tooltip.
      const double half = 0.5 * (r.predicted_p90_s - r.predicted_p10_s);
      if (r.predicted_s > 0)
        predicted->setText(predicted->text() + QStringLiteral(" \u00b1%1 %").arg(100.0 * half / r.predicted_s, 0, 'f', 1));
      predicted->setToolTip(tr("The predicted step's band, the model's error: p10 %1 to p90 %2 (with a device profile, "
                               "its measurements' spread over its rounds and the local model's residual)")
                                .arg(formatSeconds(r.predicted_p10_s), formatSeconds(r.predicted_p90_s)));
    }
    compare_->setItem(i, 1, predicted);
    compare_->setItem(i, 2, cell(rows[size_t(i)].simulated_s));
    compare_->setItem(i, 3, cell(rows[size_t(i)].measured_s));
  }
  memory_->setRowCount(int(memory.size()));
  auto mib = [](double bytes) {
    return new QTableWidgetItem(std::isfinite(bytes) ? QStringLiteral("%1 MiB").arg(bytes / (1024.0 * 1024.0), 0, 'f', 1)
                                                     : RunPage::tr("unknown"));
  };
  for (int i = 0; i < int(memory.size()); ++i) {
    memory_->setItem(i, 0, new QTableWidgetItem(QString::fromStdString(memory[size_t(i)].kind)));
    memory_->setItem(i, 1, mib(memory[size_t(i)].predicted_bytes));
    memory_->setItem(i, 2, mib(memory[size_t(i)].measured_bytes));
  }
}

void RunPage::launchOnSlurm(rt::LaunchRequest req) {
  rt::SlurmOptions so;
  so.partition = partition_->text().trimmed().toStdString();
  so.nodes = slurmNodes_->value();
  so.time_limit = timeLimit_->text().trimmed().toStdString();
  req.resume = "auto";
  auto post = poster();
  auto cancel = cancel_;
  auto deliver = [](RunPage* p, const QString& type, const QHash<QString, double>& n) { p->onMetrics(type, n); };
  watcher_->setFuture(QtConcurrent::run([req, so, cancel, post, deliver]() {
    Loaded<rt::PreparedSlurmRun> prepared = rt::prepare_slurm_run(req, so);
    if (!prepared.ok()) {
      const QString text = QString::fromStdString(prepared.diagnostics.to_string());
      post([text](RunPage* p) {
        p->onOutputLine(text);
        p->onFinished(QStringLiteral("not started"), text.section(QLatin1Char('\n'), 0, 0));
      });
      return;
    }
    std::string error;
    const std::string job = rt::submit_slurm_job(*prepared.value, &error);
    if (job.empty()) {
      post([e = QString::fromStdString(error)](RunPage* p) { p->onFinished(QStringLiteral("not submitted"), e); });
      return;
    }
    post([job = QString::fromStdString(job), argv = prepared.value->sbatch_argv](RunPage* p) {
      p->onOutputLine(QStringLiteral("$ ") + QString::fromStdString(rt::shell_quote(argv)));
      p->status_->setText(RunPage::tr("Submitted as Slurm job %1").arg(job));
    });
    rt::SlurmCallbacks cb;
    cb.on_output = [post](rt::OutputStream, const std::string& line) {
      post([l = QString::fromStdString(line)](RunPage* p) { p->onOutputLine(l); });
    };
    cb.on_metrics = metricsPoster(post, deliver);
    cb.on_state = [post](const rt::SlurmStateChange& c, int position) {
      post([state = QString::fromStdString(c.state), reason = QString::fromStdString(c.reason), position,
            restarts = c.restarts](RunPage* p) { p->onSlurmState(state, reason, position, restarts); });
    };
    const rt::RunRecord record = rt::follow_slurm_job(*prepared.value, job, cb, cancel.get());
    QString history;
    if (record.slurm) {
      for (const auto& a : record.slurm->attempts) {
        history += RunPage::tr("attempt %1: %2").arg(a.attempt).arg(QString::fromStdString(a.outcome));
        if (a.resumed_from_step > 0) history += RunPage::tr(", resumed from step %1").arg(a.resumed_from_step);
        history += QStringLiteral("<br>");
      }
    }
    if (record.goodput && std::isfinite(record.goodput->ratio))
      history += RunPage::tr("goodput %1 (productive step time over wall time)").arg(record.goodput->ratio, 0, 'f', 3);
    post([rows = rt::compare_terms(record), memory = rt::compare_memory(record), history,
          status = QString::fromUtf8(rt::to_string(record.status)),
          reason = QString::fromStdString(record.reason)](RunPage* p) { p->showOutcome(rows, memory, history, status, reason); });
  }));
}

void RunPage::launchLocal(const rt::LaunchRequest& req) {
  auto post = poster();
  auto cancel = cancel_;
  auto deliver = [](RunPage* p, const QString& type, const QHash<QString, double>& n) { p->onMetrics(type, n); };
  watcher_->setFuture(QtConcurrent::run([req, cancel, post, deliver]() {
    Loaded<rt::PreparedRun> prepared = rt::prepare_run(req);
    if (!prepared.ok()) {
      const QString text = QString::fromStdString(prepared.diagnostics.to_string());
      post([text](RunPage* p) {
        p->onOutputLine(text);
        p->onFinished(QStringLiteral("not started"), text.section(QLatin1Char('\n'), 0, 0));
      });
      return;
    }
    post([changes = prepared.value->record.changes, argv = rt::build_train_argv(prepared.value->train)](RunPage* p) {
      for (const std::string& c : changes) p->onOutputLine(QStringLiteral("scale-down: ") + QString::fromStdString(c));
      p->onOutputLine(QStringLiteral("$ ") + QString::fromStdString(rt::shell_quote(argv)));
      p->status_->setText(RunPage::tr("Running..."));
    });
    rt::RunCallbacks cb;
    cb.on_output = [post](rt::OutputStream, const std::string& line) {
      post([l = QString::fromStdString(line)](RunPage* p) { p->onOutputLine(l); });
    };
    cb.on_metrics = metricsPoster(post, deliver);
    const rt::RunRecord record = rt::execute_run(*prepared.value, cb, cancel.get());
    Loaded<rt::Report> report = rt::report_analyze_file(prepared.value->metrics_file);
    QString findings;
    if (report.value) {
      for (const rt::Finding& f : report.value->findings)
        findings += QStringLiteral("<b>%1</b> (%2): %3 &mdash; %4<br>")
                        .arg(QString::fromStdString(f.rule), QString::fromStdString(f.severity),
                             QString::fromStdString(f.evidence).toHtmlEscaped(), QString::fromStdString(f.advice).toHtmlEscaped());
      if (report.value->findings.empty()) findings = RunPage::tr("No bottleneck findings.");
    }
    // Where the ranks' cores moved nearer or farther apart (a virtual machine's host), the
    // collectives' terms follow: the run's and the profile's cache-line latency beside the table.
    if (const std::string latency = rt::core_latency_text(rt::compare_core_latency(record)); !latency.empty())
      findings += QStringLiteral("<pre>%1</pre>").arg(QString::fromStdString(latency).trimmed().toHtmlEscaped());
    post([rows = rt::compare_terms(record), memory = rt::compare_memory(record), findings,
          status = QString::fromUtf8(rt::to_string(record.status)),
          reason = QString::fromStdString(record.reason)](RunPage* p) { p->showOutcome(rows, memory, findings, status, reason); });
  }));
}
#endif

}  // namespace capplan::gui
