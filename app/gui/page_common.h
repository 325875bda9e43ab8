// What the pages of the main window share: the host interface a page edits the plan inputs
// through, the registry of error labels next to fields, the undo merge ids, and small widget
// helpers (spin boxes whose minimum reads "any", combo boxes, chart views).
#pragma once

#include <QHash>
#include <QLabel>
#include <QSpinBox>
#include <QStackedWidget>
#include <QString>
#include <functional>
#include <optional>

#include "planner/cost_model.h"
#include "planner/diagnostics.h"
#include "planner/search.h"
#include "planner/spec.h"

class QChart;
class QChartView;
class QComboBox;
class QListWidget;

namespace capplan::gui {

// Everything the user edits: what is trained, on what, how much, and which knobs are pinned.
struct PlanInputs {
  std::string modelRef;  // preset name or file path
  ModelSpec model;
  std::string clusterRef;
  ClusterSpec cluster;
  TrainingSpec training;
  int nodesMin = 0;
  int nodesMax = 0;
  LayoutPins pins;
  Objective objective = Objective::Time;
  bool showInfeasible = false;
  // The search's limits beside the objective (SearchOptions): 0 = none.
  double deadlineDays = 0;
  double budgetUsd = 0;
  double memoryMargin = 0.05;  // fraction of GPU memory kept free
  // Search every framework preset and rank them together (capplan plan --framework any); the
  // selected candidate's framework is then the plan's.
  bool anyFramework = false;
};

// The search options the inputs ask for (objective, pins, limits, node range); `top` candidates.
SearchOptions searchOptionsOf(const PlanInputs& in, int top);
// The scenario the inputs describe, on the first node count of their range; and a candidate's:
// its node count and the training it was costed with (training_of, for `any` framework).
Scenario scenarioOf(const PlanInputs& in);
Scenario scenarioOf(const PlanInputs& in, const Estimate& candidate);

// Undo merge ids: consecutive edits of one field become one undo step.
enum FieldId {
  FLayers = 1, FHidden, FHeads, FKvHeads, FFfnHidden, FVocab, FSeq, FFfn, FNorm, FTied, FPreset,
  FCluster, FNodesMin, FNodesMax, FPrice, FGbs, FTokens, FPrecision, FObjective, FPinDp, FPinTp,
  FPinPp, FPinVp, FPinMbs, FPinZero, FPinRecompute, FPinSchedule, FPinOrder, FPinOffload, FPinSp,
  FInfeasible, FFramework, FAttention, FTrainSeq, FDeadline, FBudget, FMemoryMargin, FPinEp, FPinCp,
  FMoeExperts, FMoeTopK, FMoeExpertFfn, FMoeShared, FDeviceProfile, FOptimizer, FOffloadParams,
  FOffloadOptimizer, FHeadDim, FSlidingWindow, FGlobalEvery, FMlaKvRank, FMlaQRank, FMlaQkNope, FMlaQkRope,
  FMlaV, FMtpLayers, FAttentionChunk
};

// The window the pages live in: the one set of inputs, the selected layout, and the one way to
// change the inputs (an undoable edit that re-plans).
class PageHost {
 public:
  virtual ~PageHost() = default;
  virtual const PlanInputs& inputs() const = 0;
  virtual const std::optional<Estimate>& selectedEstimate() const = 0;
  // One undoable edit; ignored while the widgets are being set from the inputs.
  virtual void editInputs(int fieldId, const QString& text,
                          const std::function<void(PlanInputs&)>& edit) = 0;
  // Lists `diagnostics` in `list` (hidden when empty) and beside the fields they name.
  virtual void showFieldDiagnostics(const Diagnostics& diagnostics, QListWidget* list) = 0;
  // The error label beside each field, by key path ("model.heads", "training.gbs", "nodes").
  virtual QHash<QString, QLabel*>& fieldErrors() = 0;
};

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

// A spin box whose minimum means "unset" (its special text, e.g. "any"): clearing the text or
// typing the special word sets the minimum instead of bringing the old value back.
class UnsetSpinBox : public QSpinBox {
 public:
  using QSpinBox::QSpinBox;

 protected:
  bool unsetText(const QString& text) const;
  QValidator::State validate(QString& text, int& pos) const override;
  int valueFromText(const QString& text) const override;
  void fixup(QString& text) const override;
};

// `special` non-empty: an UnsetSpinBox whose minimum shows that text.
QSpinBox* makeSpin(QWidget* parent, const char* name, int min, int max, const QString& tip,
                   const QString& special = {});
QComboBox* makeCombo(QWidget* parent, const char* name, const QStringList& items, const QString& tip);
// One line of red text beside a field: elided to the room it has (the whole text in its
// tooltip), so that showing an error never makes the form taller.
class ErrorLabel : public QLabel {
 public:
  explicit ErrorLabel(QWidget* parent);
  void setErrorText(const QString& text);
  QSize minimumSizeHint() const override;

 protected:
  void paintEvent(QPaintEvent* event) override;
};

QLabel* makeErrorLabel(QWidget* parent);
// Shows `text` in an error label (the whole text also in its tooltip); empty hides it.
void showFieldError(QLabel* label, const QString& text);
// A field with its error label beside it (same row), for QFormLayout rows.
QWidget* withError(QWidget* field, QLabel* error);
QChartView* makeChartView(QWidget* parent, const char* name);
// Shows `chart` in `view` (deleting the old one), with a compact legend at `legend`.
void replaceChart(QChartView* view, QChart* chart, Qt::Alignment legend = Qt::AlignBottom);
// Sets `title`, shortened with "..." to the width of `view` (the whole title in its tooltip).
void setChartTitle(QChart* chart, QChartView* view, const QString& title);
// The whole title setChartTitle() gave the chart (its shown title may be elided); empty if none.
QString chartFullTitle(const QChart* chart);

// A chart, or a message in its place while there is nothing to chart ("No layout selected"):
// never an empty white box. The view keeps the name given; the message label is name + "Empty".
class ChartArea : public QStackedWidget {
  Q_OBJECT
 public:
  ChartArea(QWidget* parent, const char* name);
  QChartView* view() const { return view_; }
  void setChart(QChart* chart, Qt::Alignment legend = Qt::AlignBottom);
  void showMessage(const QString& text);
  void showChart();
  bool showsMessage() const { return currentIndex() == 1; }

 protected:
  void resizeEvent(QResizeEvent* event) override;

 private:
  void refitTitle(int width);

  QChartView* view_;
  QLabel* message_;
};
void setIfDifferent(QSpinBox* s, int v);
void setComboText(QComboBox* c, const QString& text);
// "300B", "1.3T", "2.5e+08": a form parse_number() reads back; empty for 0 (= the default).
QString formatTokens(double t);
QString htmlEscape(const std::string& s);

}  // namespace capplan::gui
