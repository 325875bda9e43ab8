// The measuring dialog, the device-profile picker and calibration from a run (measure_tools.h).
#include "measure_tools.h"

#include <QBarCategoryAxis>
#include <QBarSeries>
#include <QBarSet>
#include <QChart>
#include <QChartView>
#include <QDir>
#include <QFileDialog>
#include <QFileInfo>
#include <QHBoxLayout>
#include <QHorizontalBarSeries>
#include <QLabel>
#include <QPlainTextEdit>
#include <QPointer>
#include <QProgressBar>
#include <QPushButton>
#include <QSpinBox>
#include <QValueAxis>
#include <QVBoxLayout>
#include <QtConcurrent/QtConcurrentRun>

#include "launch/calibrate.h"
#include "launch/launch.h"
#include "launch/measure_profile.h"
#include "planner/atomic_file.h"
#include "planner/device_profile.h"

namespace capplan::gui {

MeasureDialog::MeasureDialog(const ModelSpec& model, int tp, int mbs, int seq, const QString& outPath,
                             QWidget* parent)
    : QDialog(parent), model_(model), tp_(tp), mbs_(mbs), seq_(seq), outPath_(outPath) {
  setObjectName(QStringLiteral("measureDialog"));
  setWindowTitle(tr("Measure on this machine"));
  auto* v = new QVBoxLayout(this);
  auto* intro = new QLabel(tr("Times every GEMM, attention, norm, activation, loss and optimizer kernel of %1 at tp %2, "
                              "mbs %3, and the collectives among the ranks, with the runtime's own kernels "
                              "(capplan-train measure). Writes %4.")
                               .arg(QString::fromStdString(model.name))
                               .arg(tp)
                               .arg(mbs)
                               .arg(outPath),
                           this);
  intro->setWordWrap(true);
  v->addWidget(intro);
  auto* bar = new QHBoxLayout;
  ranks_ = new QSpinBox(this);
  ranks_->setObjectName(QStringLiteral("measureRanks"));
  ranks_->setRange(1, 64);
  ranks_->setValue(2);
  ranks_->setToolTip(tr("Local MPI ranks measuring at once (as many as will share the machine in training)"));
  startButton_ = new QPushButton(tr("Measure"), this);
  startButton_->setObjectName(QStringLiteral("measureStart"));
  cancelButton_ = new QPushButton(tr("Cancel"), this);
  cancelButton_->setObjectName(QStringLiteral("measureCancel"));
  cancelButton_->setEnabled(false);
  bar->addWidget(new QLabel(tr("Ranks"), this));
  bar->addWidget(ranks_);
  bar->addWidget(startButton_);
  bar->addWidget(cancelButton_);
  bar->addStretch(1);
  v->addLayout(bar);
  progress_ = new QProgressBar(this);
  progress_->setObjectName(QStringLiteral("measureProgress"));
  progress_->setRange(0, 1);
  progress_->setValue(0);
  v->addWidget(progress_);
  status_ = new QLabel(tr("Not measured yet"), this);
  status_->setObjectName(QStringLiteral("measureStatus"));
  status_->setWordWrap(true);
  v->addWidget(status_);
  log_ = new QPlainTextEdit(this);
  log_->setObjectName(QStringLiteral("measureLog"));
  log_->setReadOnly(true);
  log_->setMaximumHeight(120);
  v->addWidget(log_);
  chart_ = new QChartView(new QChart, this);
  chart_->setObjectName(QStringLiteral("measureChart"));
  chart_->setMinimumHeight(320);
  chart_->chart()->setTitle(tr("Per kernel: measured vs predicted (ms)"));
  v->addWidget(chart_, 1);
  watcher_ = new QFutureWatcher<void>(this);
  connect(startButton_, &QPushButton::clicked, this, &MeasureDialog::start);
  connect(cancelButton_, &QPushButton::clicked, this, &MeasureDialog::cancel);
  resize(760, 640);
}

MeasureDialog::~MeasureDialog() {
  if (cancel_) cancel_->store(true);
  watcher_->waitForFinished();
}

void MeasureDialog::setRanks(int ranks) { ranks_->setValue(ranks); }

QString MeasureDialog::statusText() const { return status_->text(); }

void MeasureDialog::start() {
  if (running_) return;
  // capplan-train reads the model as a file: the spec as the inputs have it, beside the profile.
  const QString modelPath = outPath_ + QStringLiteral(".model.yaml");
  if (const std::string err = write_file_atomic(modelPath.toStdString(), rt::model_yaml(model_)); !err.empty()) {
    onDone(false, false, QString::fromStdString(err), QString());
    return;
  }
  rt::MeasureRequest q;
  q.model_ref = modelPath.toStdString();
  q.tp = tp_;
  q.mbs = mbs_;
  q.seq = seq_;
  q.ranks = ranks_->value();
  q.repeats = repeats_;
  q.out = outPath_.toStdString();
#ifdef CAPPLAN_GUI_TRAIN_HINT
  q.train_build_hint = CAPPLAN_GUI_TRAIN_HINT;
#endif
  running_ = true;
  startButton_->setEnabled(false);
  cancelButton_->setEnabled(true);
  progress_->setRange(0, 0);  // busy: the kernels are timed in one process
  status_->setText(tr("Measuring with %1 ranks...").arg(q.ranks));
  log_->clear();
  cancel_ = std::make_shared<std::atomic<bool>>(false);
  auto cancel = cancel_;
  QPointer<MeasureDialog> self(this);
  watcher_->setFuture(QtConcurrent::run([q, cancel, self] {
    auto post = [self](std::function<void(MeasureDialog*)> f) {
      QMetaObject::invokeMethod(self.data(), [self, f] { if (self) f(self.data()); }, Qt::QueuedConnection);
    };
    const rt::MeasureResult r = rt::measure_device_profile(
        q, [post](rt::OutputStream, const std::string& line) {
          post([l = QString::fromStdString(line)](MeasureDialog* d) { d->onLine(l); });
        },
        cancel.get());
    QString message;
    if (!r.profile.diagnostics.empty()) message = QString::fromStdString(r.profile.diagnostics.to_string()).trimmed();
    if (message.isEmpty() && !r.process.succeeded()) message = QString::fromStdString(r.process.describe());
    // Stopped at its time limit: a failure with the limit's message, not the user's cancel.
    post([cancelled = r.cancelled && !r.timed_out, ok = r.profile.ok() && !r.cancelled, message,
          path = QString::fromStdString(q.out)](MeasureDialog* d) { d->onDone(cancelled, ok, message, path); });
  }));
}

void MeasureDialog::cancel() {
  if (cancel_) cancel_->store(true);
}

void MeasureDialog::onLine(const QString& line) { log_->appendPlainText(line); }

void MeasureDialog::onDone(bool cancelled, bool ok, const QString& message, const QString& path) {
  running_ = false;
  startButton_->setEnabled(true);
  cancelButton_->setEnabled(false);
  progress_->setRange(0, 1);
  progress_->setValue(ok ? 1 : 0);
  if (cancelled) {
    status_->setText(tr("Cancelled; the previous profile, if any, is kept as it was"));
  } else if (!ok) {
    status_->setText(tr("Measuring failed: %1").arg(message));
  } else {
    status_->setText(tr("Measured: %1").arg(path));
    showChart(path);
    emit profileMeasured(path);
  }
  emit measureFinished(ok);
}

void MeasureDialog::showChart(const QString& path) {
  const Loaded<DeviceProfile> p = load_device_profile(path.toStdString());
  if (!p.ok()) return;
  const std::vector<rt::KernelComparison> rows = rt::compare_profile(*p.value, model_, p.value->ranks);
  auto* measured = new QBarSet(tr("measured"));
  auto* predicted = new QBarSet(tr("predicted (this machine's probed peak and bandwidth)"));
  QStringList names;
  double top = 0;
  for (const rt::KernelComparison& k : rows) {
    *measured << k.measured_s * 1e3;
    *predicted << k.predicted_s * 1e3;
    names << QString::fromStdString(k.name);
    top = std::max({top, k.measured_s * 1e3, k.predicted_s * 1e3});
  }
  auto* series = new QHorizontalBarSeries;
  series->append(measured);
  series->append(predicted);
  auto* chart = new QChart;
  chart->setTitle(tr("Per kernel: measured vs predicted (ms), %1").arg(QString::fromStdString(p.value->device)));
  chart->addSeries(series);
  auto* axisY = new QBarCategoryAxis;
  axisY->append(names);
  chart->addAxis(axisY, Qt::AlignLeft);
  series->attachAxis(axisY);
  auto* axisX = new QValueAxis;
  axisX->setRange(0, top * 1.1 + 1e-6);
  axisX->setTitleText(tr("ms"));
  chart->addAxis(axisX, Qt::AlignBottom);
  series->attachAxis(axisX);
  QChart* old = chart_->chart();
  chart_->setChart(chart);
  delete old;
}

DeviceProfilePicker::DeviceProfilePicker(PageHost& host, QWidget* parent) : QWidget(parent), host_(host) {
  setObjectName(QStringLiteral("deviceProfilePicker"));
  auto* h = new QHBoxLayout(this);
  h->setContentsMargins(0, 0, 0, 0);
  label_ = new QLabel(this);
  label_->setObjectName(QStringLiteral("deviceProfileLabel"));
  label_->setWordWrap(true);
  auto* choose = new QPushButton(tr("Device profile..."), this);
  choose->setObjectName(QStringLiteral("deviceProfileChoose"));
  choose->setToolTip(tr("Use measured kernel and collective times (capplan profile --measure, or Measure on this "
                        "machine on the Model page) instead of the datasheet roofline"));
  clear_ = new QPushButton(tr("Clear"), this);
  clear_->setObjectName(QStringLiteral("deviceProfileClear"));
  h->addWidget(label_, 1);
  h->addWidget(choose);
  h->addWidget(clear_);
  connect(choose, &QPushButton::clicked, this, [this] {
    const QString path = QFileDialog::getOpenFileName(this, tr("Device profile"), QString(), tr("YAML (*.yaml *.yml)"));
    if (!path.isEmpty()) useProfile(path);
  });
  connect(clear_, &QPushButton::clicked, this, &DeviceProfilePicker::clear);
  syncFromInputs(host_.inputs());
}

bool DeviceProfilePicker::useProfile(const QString& path) {
  const Loaded<DeviceProfile> p = load_device_profile(path.toStdString());
  QString why;
  if (!p.ok()) {
    why = QString::fromStdString(p.diagnostics.to_string()).trimmed();
  } else {
    const PlanInputs& in = host_.inputs();
    why = QString::fromStdString(device_profile_mismatch(*p.value, in.model, in.cluster, path.toStdString()));
  }
  if (!why.isEmpty()) {
    label_->setText(tr("Device profile refused: %1").arg(why));
    return false;
  }
  path_ = path;
  auto profile = std::make_shared<const DeviceProfile>(*p.value);
  host_.editInputs(FDeviceProfile, tr("Use device profile %1").arg(QFileInfo(path).fileName()),
                   [profile](PlanInputs& in) { in.cluster.device_profile = profile; });
  syncFromInputs(host_.inputs());
  return true;
}

void DeviceProfilePicker::clear() {
  host_.editInputs(FDeviceProfile, tr("Clear the device profile"),
                   [](PlanInputs& in) { in.cluster.device_profile = nullptr; });
  syncFromInputs(host_.inputs());
}

void DeviceProfilePicker::syncFromInputs(const PlanInputs& in) {
  const auto& p = in.cluster.device_profile;
  clear_->setEnabled(p != nullptr);
  if (!p) {
    label_->setText(tr("Device profile: none (the cost model's datasheet roofline)"));
    return;
  }
  label_->setText(tr("Device profile: %1 (%2, measured %3 with %4 ranks; %5 hidden %6)")
                      .arg(path_.isEmpty() ? tr("in use") : QFileInfo(path_).fileName(),
                           QString::fromStdString(p->device), QString::fromStdString(p->created_utc))
                      .arg(p->ranks)
                      .arg(QString::fromStdString(p->model))
                      .arg(p->hidden));
}

QString DeviceProfilePicker::text() const { return label_->text(); }

QString calibrateFromRun(const QString& runDir, bool* ok, QString* writtenPath) {
  const Loaded<rt::Calibration> c = rt::calibrate_runs({runDir.toStdString()});
  *ok = false;
  if (!c.ok()) return QString::fromStdString(c.diagnostics.to_string()).trimmed();
  const QString out = QDir(runDir).filePath(QStringLiteral("calibrated-cluster.yaml"));
  if (const std::string err = write_file_atomic(out.toStdString(), rt::calibration_cluster_yaml(*c.value)); !err.empty())
    return QString::fromStdString(err);
  *ok = true;
  if (writtenPath) *writtenPath = out;
  return QString::fromStdString(rt::calibration_text(*c.value)) + QObject::tr("\nwrote %1").arg(out);
}

}  // namespace capplan::gui
