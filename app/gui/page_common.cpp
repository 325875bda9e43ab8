// The pages' shared helpers (page_common.h).
#include "page_common.h"

#include <QChart>
#include <QChartView>
#include <QComboBox>
#include <QLegend>
#include <QHBoxLayout>
#include <QPainter>
#include <QResizeEvent>
#include <QValueAxis>
#include <QVBoxLayout>
#include <algorithm>
#include <cmath>

namespace capplan::gui {

Scenario scenarioOf(const PlanInputs& in) {
  Scenario s;
  s.model = in.model;
  s.cluster = in.cluster;
  s.training = in.training;
  s.nodes = in.nodesMin;
  return s;
}

Scenario scenarioOf(const PlanInputs& in, const Estimate& candidate) {
  Scenario s = scenarioOf(in);
  s.training = training_of(in.training, candidate);
  s.nodes = candidate.nodes;
  return s;
}

SearchOptions searchOptionsOf(const PlanInputs& in, int top) {
  SearchOptions o;
  o.nodes_min = in.nodesMin;
  o.nodes_max = std::max(in.nodesMin, in.nodesMax);
  o.objective = in.objective;
  o.top = top;
  o.pins = in.pins;
  o.include_infeasible = in.showInfeasible;
  o.deadline_days = in.deadlineDays;
  o.budget_usd = in.budgetUsd;
  o.memory_margin = in.memoryMargin;
  return o;
}

bool UnsetSpinBox::unsetText(const QString& text) const {
  const QString t = text.trimmed();
  return t.isEmpty() ||
         (!specialValueText().isEmpty() && specialValueText().startsWith(t, Qt::CaseInsensitive));
}

QValidator::State UnsetSpinBox::validate(QString& text, int& pos) const {
  if (unsetText(text)) return QValidator::Acceptable;
  return QSpinBox::validate(text, pos);
}

int UnsetSpinBox::valueFromText(const QString& text) const {
  return unsetText(text) ? minimum() : QSpinBox::valueFromText(text);
}

void UnsetSpinBox::fixup(QString& text) const {
  if (unsetText(text)) text = specialValueText();
  else QSpinBox::fixup(text);
}

QSpinBox* makeSpin(QWidget* parent, const char* name, int min, int max, const QString& tip,
                   const QString& special) {
  QSpinBox* s = special.isEmpty() ? new QSpinBox(parent) : new UnsetSpinBox(parent);
  s->setObjectName(QString::fromUtf8(name));
  s->setRange(min, max);
  s->setToolTip(tip);
  s->setAccelerated(true);
  s->setKeyboardTracking(true);
  if (!special.isEmpty()) s->setSpecialValueText(special);
  s->setMinimumWidth(110);
  return s;
}

QComboBox* makeCombo(QWidget* parent, const char* name, const QStringList& items, const QString& tip) {
  auto* c = new QComboBox(parent);
  c->setObjectName(QString::fromUtf8(name));
  c->addItems(items);
  c->setToolTip(tip);
  return c;
}

ErrorLabel::ErrorLabel(QWidget* parent) : QLabel(parent) {
  setStyleSheet(QStringLiteral("color: #b3261e;"));
  setWordWrap(false);
  setSizePolicy(QSizePolicy::Ignored, QSizePolicy::Preferred);
}

void ErrorLabel::setErrorText(const QString& text) {
  setText(text);
  setToolTip(text);
}

QSize ErrorLabel::minimumSizeHint() const { return {0, QLabel::minimumSizeHint().height()}; }

void ErrorLabel::paintEvent(QPaintEvent*) {
  QPainter p(this);
  p.setPen(palette().color(QPalette::WindowText));
  p.drawText(contentsRect(), int(Qt::AlignLeft | Qt::AlignVCenter),
             fontMetrics().elidedText(text(), Qt::ElideRight, contentsRect().width()));
}

QLabel* makeErrorLabel(QWidget* parent) {
  auto* l = new ErrorLabel(parent);
  l->hide();
  return l;
}

void showFieldError(QLabel* label, const QString& text) {
  label->setText(text);
  label->setToolTip(text);
  label->setVisible(!text.isEmpty());
}

QWidget* withError(QWidget* field, QLabel* error) {
  auto* w = new QWidget(field->parentWidget());
  auto* row = new QHBoxLayout(w);
  row->setContentsMargins(0, 0, 0, 0);
  row->setSpacing(6);
  row->addWidget(field, 3);
  row->addWidget(error, 2);
  return w;
}

namespace {
// The whole title of a chart titled by setChartTitle(), kept to fit it again as widths change.
constexpr const char* kFullTitle = "capplanFullTitle";

// The title, elided to what `width` pixels of chart leave room for.
void fitChartTitle(QChart* chart, const QString& title, int width) {
  chart->setTitle(QFontMetrics(chart->titleFont()).elidedText(title, Qt::ElideRight, std::max(40, width - 24)));
}
}  // namespace

void setChartTitle(QChart* chart, QChartView* view, const QString& title) {
  QFont f = chart->titleFont();
  f.setPointSizeF(f.pointSizeF() * 0.9);
  f.setBold(true);
  chart->setTitleFont(f);
  chart->setProperty(kFullTitle, title);
  fitChartTitle(chart, title, view->width());
  view->setToolTip(title);
}

QString chartFullTitle(const QChart* chart) { return chart->property(kFullTitle).toString(); }

ChartArea::ChartArea(QWidget* parent, const char* name) : QStackedWidget(parent) {
  view_ = makeChartView(this, name);
  message_ = new QLabel(this);
  message_->setObjectName(QString::fromUtf8(name) + QStringLiteral("Empty"));
  message_->setAlignment(Qt::AlignCenter);
  message_->setWordWrap(true);
  message_->setStyleSheet(QStringLiteral("color: palette(mid); border: 1px dashed palette(mid);"));
  addWidget(view_);
  addWidget(message_);
  setMinimumHeight(view_->minimumHeight());
}

void ChartArea::setChart(QChart* chart, Qt::Alignment legend) {
  replaceChart(view_, chart, legend);
  setCurrentIndex(0);
  refitTitle(width());
}

// A title set while the view was hidden behind the message, or before the first layout, was
// fitted to a view still at its default width: it is fitted again, from the whole title kept in
// the chart, to the area's own width, and whenever the area resizes.
void ChartArea::refitTitle(int width) {
  QChart* chart = view_->chart();
  if (chart == nullptr) return;
  const QString full = chartFullTitle(chart);
  if (!full.isEmpty()) fitChartTitle(chart, full, width);
}

void ChartArea::showMessage(const QString& text) {
  message_->setText(text);
  setCurrentIndex(1);
}

void ChartArea::showChart() { setCurrentIndex(0); }

void ChartArea::resizeEvent(QResizeEvent* event) {
  QStackedWidget::resizeEvent(event);
  refitTitle(event->size().width());
}

QChartView* makeChartView(QWidget* parent, const char* name) {
  auto* v = new QChartView(new QChart, parent);
  v->setObjectName(QString::fromUtf8(name));
  v->setRenderHint(QPainter::Antialiasing);
  v->setMinimumHeight(220);
  return v;
}

void replaceChart(QChartView* view, QChart* chart, Qt::Alignment legend) {
  chart->setMargins(QMargins(4, 4, 4, 4));
  chart->legend()->setAlignment(legend);
  QFont f = chart->legend()->font();
  f.setPointSizeF(f.pointSizeF() * 0.85);
  chart->legend()->setFont(f);
  QChart* old = view->chart();
  view->setChart(chart);
  delete old;
}

void setIfDifferent(QSpinBox* s, int v) {
  if (s->value() != v) s->setValue(v);
}

void setComboText(QComboBox* c, const QString& text) {
  const int i = c->findText(text);
  if (i >= 0) c->setCurrentIndex(i);
}

QString formatTokens(double t) {
  if (t <= 0) return {};
  if (t >= 1e12 && std::fmod(t, 1e10) == 0) return QString::number(t / 1e12, 'g', 6) + QLatin1Char('T');
  if (t >= 1e9 && std::fmod(t, 1e7) == 0) return QString::number(t / 1e9, 'g', 6) + QLatin1Char('B');
  return QString::number(t, 'g', 12);
}

QString htmlEscape(const std::string& s) { return QString::fromStdString(s).toHtmlEscaped(); }

}  // namespace capplan::gui
