// What the pages of the main window share: the host interface a page edits the plan inputs
// through, the registry of error labels next to fields, the undo merge ids, and small widget
// helpers (spin boxes whose minimum reads "any", combo boxes, chart views).
#pragma once

#include <QHash>
#include <QLabel>
#include <QSpinBox>
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
};

// Undo merge ids: consecutive edits of one field become one undo step.
enum FieldId {
  FLayers = 1, FHidden, FHeads, FKvHeads, FFfnHidden, FVocab, FSeq, FFfn, FNorm, FTied, FPreset,
  FCluster, FNodesMin, FNodesMax, FPrice, FGbs, FTokens, FPrecision, FObjective, FPinDp, FPinTp,
  FPinPp, FPinVp, FPinMbs, FPinZero, FPinRecompute, FPinSchedule, FPinOrder, FPinOffload, FPinSp,
  FInfeasible, FFramework, FAttention, FTrainSeq
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
QLabel* makeErrorLabel(QWidget* parent);
// A field with its error label below it, for QFormLayout rows.
QWidget* withError(QWidget* field, QLabel* error);
QChartView* makeChartView(QWidget* parent, const char* name);
// Shows `chart` in `view` (deleting the old one), with a compact legend at `legend`.
void replaceChart(QChartView* view, QChart* chart, Qt::Alignment legend = Qt::AlignBottom);
void setIfDifferent(QSpinBox* s, int v);
void setComboText(QComboBox* c, const QString& text);
// "300B", "1.3T", "2.5e+08": a form parse_number() reads back; empty for 0 (= the default).
QString formatTokens(double t);
QString htmlEscape(const std::string& s);

}  // namespace capplan::gui
