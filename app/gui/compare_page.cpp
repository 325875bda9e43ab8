// The Compare page: the comparison's table (a row per figure, a column per plan, the baseline
// first), its file, and the buttons that edit it. Every figure and delta is compare_plans'.
#include "compare_page.h"

#include <QFileDialog>
#include <QFileInfo>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QListWidget>
#include <QPushButton>
#include <QTableWidget>
#include <QVBoxLayout>
#include <cmath>

#include "item_models.h"

namespace capplan::gui {
namespace {

// "12.3 GiB", "1.52 s", "$4.1 M"; "unknown" for NaN.
QString formatFigure(double v, const std::string& unit) {
  if (!std::isfinite(v)) return QObject::tr("unknown");
  if (unit == "USD") return formatDollars(v);
  if (unit == "GPUs") return QString::number(std::llround(v));
  if (unit == "s") return QStringLiteral("%1 s").arg(v, 0, 'g', 3);
  if (unit == "%") return QStringLiteral("%1 %").arg(v, 0, 'f', 1);
  return QStringLiteral("%1 %2").arg(v, 0, 'f', 1).arg(QString::fromStdString(unit));
}

QString formatDelta(const FigureDelta& f) {
  if (!std::isfinite(f.delta)) return QObject::tr("unknown");
  if (f.delta == 0) return QObject::tr("same");
  const QString sign = f.delta > 0 ? QStringLiteral("+") : f.delta < 0 ? QStringLiteral("-") : QStringLiteral("±");
  QString text = sign + formatFigure(std::abs(f.delta), f.unit);
  if (std::isfinite(f.relative)) text += QStringLiteral(", %1%2 %").arg(sign).arg(std::abs(f.relative) * 100, 0, 'f', 1);
  return text;
}

// Less is better for every figure but MFU; the GPU count is neither.
QColor deltaColor(const FigureDelta& f) {
  if (!std::isfinite(f.delta) || f.delta == 0 || f.unit == "GPUs") return {};
  const bool better = f.unit == "%" ? f.delta > 0 : f.delta < 0;
  return better ? QColor(27, 127, 59) : QColor(179, 38, 30);
}

// A plan's label in its column's header, broken into lines of about `width` characters at its
// " · " separators (model, cluster, layout knobs, framework), so that plans fit side by side.
QString headerLines(const QString& label, int width = 36) {
  const QString sep = QStringLiteral(" \u00b7 ");
  QStringList lines;
  QString line;
  for (const QString& part : label.split(sep)) {
    if (!line.isEmpty() && line.size() + sep.size() + part.size() > width) {
      lines << line;
      line.clear();
    }
    line += (line.isEmpty() ? QString() : sep) + part;
  }
  if (!line.isEmpty()) lines << line;
  return lines.join(QLatin1Char('\n'));
}

}  // namespace

QString ComparePage::labelOf(const Plan& plan) {
  const Scenario& s = plan.scenario;
  const Layout& l = plan.layout;  // the compact layout string of the result table
  // The framework too: one layout costed for two stacks is two plans.
  return QStringLiteral("%1 · %2 x %3 · %4 · %5")
      .arg(QString::fromStdString(s.model.name))
      .arg(s.nodes)
      .arg(QString::fromStdString(s.cluster.name), compactLayout(l), QString::fromStdString(s.training.framework.name));
}

ComparePage::ComparePage(QWidget* parent) : QWidget(parent) {
  setObjectName(QStringLiteral("comparePage"));
  auto* v = new QVBoxLayout(this);
  auto* bar = new QHBoxLayout;
  auto* open = new QPushButton(tr("Open comparison..."), this);
  open->setObjectName(QStringLiteral("compareOpen"));
  save_ = new QPushButton(tr("Save comparison..."), this);
  save_->setObjectName(QStringLiteral("compareSave"));
  remove_ = new QPushButton(tr("Remove column"), this);
  remove_->setObjectName(QStringLiteral("compareRemove"));
  remove_->setToolTip(tr("Removes the selected plan; removing the baseline clears the comparison"));
  bar->addWidget(open);
  bar->addWidget(save_);
  bar->addWidget(remove_);
  bar->addStretch(1);
  v->addLayout(bar);
  message_ = new QLabel(this);
  message_->setObjectName(QStringLiteral("compareMessage"));
  message_->setWordWrap(true);
  v->addWidget(message_);
  diagnostics_ = new QListWidget(this);
  diagnostics_->setObjectName(QStringLiteral("compareDiagnostics"));
  diagnostics_->setMaximumHeight(90);
  diagnostics_->hide();
  v->addWidget(diagnostics_);
  table_ = new QTableWidget(this);
  table_->setObjectName(QStringLiteral("compareTable"));
  table_->setEditTriggers(QAbstractItemView::NoEditTriggers);
  table_->setSelectionBehavior(QAbstractItemView::SelectColumns);
  table_->setSelectionMode(QAbstractItemView::SingleSelection);
  table_->horizontalHeader()->setSectionResizeMode(QHeaderView::ResizeToContents);
  table_->verticalHeader()->setSectionResizeMode(QHeaderView::ResizeToContents);
  v->addWidget(table_, 1);
  connect(open, &QPushButton::clicked, this, [this] {
    const QString f = QFileDialog::getOpenFileName(this, tr("Open comparison"), {},
                                                   tr("Comparison (*.yaml *.yml)"));
    if (!f.isEmpty()) openFrom(f);
  });
  connect(save_, &QPushButton::clicked, this, [this] {
    const QString f = QFileDialog::getSaveFileName(this, tr("Save comparison"),
                                                   QStringLiteral("comparison.yaml"), tr("Comparison (*.yaml *.yml)"));
    if (!f.isEmpty()) saveTo(f);
  });
  connect(remove_, &QPushButton::clicked, this, [this] {
    const QModelIndexList cols = table_->selectionModel()->selectedColumns();
    if (!cols.isEmpty()) removePlan(cols.first().column());
  });
  refresh();
}

void ComparePage::pinBaseline(const Plan& plan) {
  comparison_.plans = {{labelOf(plan).toStdString(), plan}};
  refresh();
  setMessage(tr("Baseline pinned. Select another candidate, cluster or model and use Plan > Add to "
                "comparison (Ctrl+Shift+B) to put it beside the baseline."));
}

bool ComparePage::addPlan(const Plan& plan) {
  if (comparison_.plans.empty()) {
    setMessage(tr("Pin a baseline first: Plan > Pin as baseline (Ctrl+B)."));
    return false;
  }
  comparison_.plans.push_back({labelOf(plan).toStdString(), plan});
  refresh();
  setMessage(tr("Added %1.").arg(QString::fromStdString(comparison_.plans.back().label)));
  return true;
}

void ComparePage::removePlan(int index) {
  if (index < 0 || index >= int(comparison_.plans.size())) return;
  if (index == 0) comparison_.plans.clear();
  else comparison_.plans.erase(comparison_.plans.begin() + index);
  refresh();
}

bool ComparePage::saveTo(const QString& path) {
  if (comparison_.plans.empty()) {
    setMessage(tr("Nothing to save: pin a baseline first."));
    return false;
  }
  const std::string err = save_comparison(comparison_, path.toStdString());
  setMessage(err.empty() ? tr("Saved %1").arg(path) : tr("Could not save: %1").arg(QString::fromStdString(err)));
  return err.empty();
}

bool ComparePage::openFrom(const QString& path) {
  Loaded<Comparison> c = load_comparison(path.toStdString());
  diagnostics_->clear();
  for (const Diagnostic& d : c.diagnostics.items()) {
    auto* item = new QListWidgetItem(QString::fromStdString(d.to_string()), diagnostics_);
    item->setForeground(d.severity == Severity::Error ? QColor(179, 38, 30) : QColor(150, 100, 0));
  }
  diagnostics_->setVisible(!c.diagnostics.empty());
  if (!c.ok()) {
    setMessage(tr("Could not open %1; the comparison shown is kept.").arg(path));
    return false;
  }
  comparison_ = *c.value;
  refresh();
  setMessage(tr("Opened %1").arg(path));
  return true;
}

void ComparePage::setMessage(const QString& text) { message_->setText(text); }

void ComparePage::refresh() {
  result_ = compare_plans(comparison_);
  table_->clear();
  const int plans = int(result_.plans.size());
  save_->setEnabled(plans > 0);
  remove_->setEnabled(plans > 0);
  if (plans == 0) {
    table_->setRowCount(0);
    table_->setColumnCount(0);
    setMessage(tr("No comparison yet. Select a plan and use Plan > Pin as baseline (Ctrl+B), then add "
                  "other candidates, clusters or models with Plan > Add to comparison (Ctrl+Shift+B)."));
    emit comparisonChanged();
    return;
  }
  const std::vector<FigureDelta>& base = result_.plans.front().figures;
  table_->setRowCount(int(base.size()));
  table_->setColumnCount(plans);
  QStringList rows;
  for (const FigureDelta& f : base) rows << QString::fromStdString(f.label);
  table_->setVerticalHeaderLabels(rows);
  for (int c = 0; c < plans; ++c) {
    const ComparedPlan& p = result_.plans[size_t(c)];
    auto* head = new QTableWidgetItem(headerLines((c == 0 ? tr("baseline: ") : QString()) + QString::fromStdString(p.label)));
    head->setToolTip(QString::fromStdString(p.label) +
                     (p.estimate.fits ? QString() : tr("\ndoes not fit: %1").arg(QString::fromStdString(p.estimate.reason))));
    table_->setHorizontalHeaderItem(c, head);
    for (int r = 0; r < int(p.figures.size()); ++r) {
      const FigureDelta& f = p.figures[size_t(r)];
      QString text = formatFigure(f.value, f.unit);
      if (c > 0) text += QStringLiteral("  (%1)").arg(formatDelta(f));
      auto* item = new QTableWidgetItem(text);
      item->setData(Qt::UserRole, f.delta);
      if (c > 0 && deltaColor(f).isValid()) item->setForeground(deltaColor(f));
      table_->setItem(r, c, item);
    }
  }
  emit comparisonChanged();
}

}  // namespace capplan::gui
