// The Plan page: how. The training fields and the objective, every knob pinned or left to the
// search, the search bar (progress, cancel, re-plan, filter), the ranked candidates, and for the
// selected layout its details, memory per GPU, step time by term and days vs dollars across node
// counts.
#pragma once

#include <QWidget>

#include <map>
#include <string>

#include "page_common.h"

class QChartView;
class QCheckBox;
class QComboBox;
class QDoubleSpinBox;
class QGroupBox;
class QLabel;
class QLineEdit;
class QListWidget;
class QProgressBar;
class QPushButton;
class QTableView;

namespace capplan::gui {

class CandidateFilterModel;
class SearchJob;
class DeviceProfilePicker;

class PlanPage : public QWidget {
  Q_OBJECT
 public:
  PlanPage(PageHost& host, SearchJob* search, CandidateFilterModel* filter, QWidget* parent = nullptr);
  void syncFromInputs(const PlanInputs& in);
  // Details of the host's selected layout (empty when none); forgets the simulated step. The
  // charts follow with refreshCharts() (the window draws them once the table is shown).
  void showSelection();
  void refreshCharts();
  // The selected layout's simulated step: drawn beside the prediction.
  void setSimulatedStep(const TimeBreakdown& breakdown, double stepS);
  // The node-count what-if: days vs dollars of the best layout of every node count searched
  // (`pareto.pareto`, one per count), the selection highlighted; a click selects a point's plan.
  void refreshPareto(const SearchResult& pareto);
  const std::vector<Estimate>& whatIfPoints() const { return whatIf_; }
  // No candidate at all: the constraint the pins break and the values that would work.
  void explainEmptyResult();
  void setSearching(bool on);
  // Results of inputs that have changed since (an invalid field holds the re-plan): the table and
  // the details are greyed and say so until the next result.
  void setStale(bool stale);
  bool isStale() const { return stale_; }
  void setStatus(const QString& text);
  // `any` framework: each preset's best against the best of all (hidden when `bests` is empty).
  void setFrameworkBests(const std::vector<FrameworkBest>& bests, Objective objective);
  void setMessage(const QString& text);
  QListWidget* diagnosticsList() const { return diagnostics_; }
  // The key columns (rank, step, days, cost, memory, MFU, fits, layout), frozen while the other
  // columns (moreTable) scroll; both share one selection.
  QTableView* table() const { return table_; }
  QTableView* moreTable() const { return moreTable_; }

 signals:
  void replanRequested();
  void cancelRequested();
  void selectionChanged();
  // A point of the node-count what-if was clicked: the best layout of that node count.
  void whatIfPointClicked(const Estimate& e);
  // "File..." beside the framework list: a framework file was chosen (MainWindow::loadFrameworkFile).
  void frameworkFileChosen(const QString& path);

 public:
  // "Device profile: ..." with Choose and Clear (measure_tools.h); null without the runtime.
  DeviceProfilePicker* deviceProfilePicker() const { return profilePicker_; }

 private:
  DeviceProfilePicker* profilePicker_ = nullptr;
  QGroupBox* buildTraining();
  void connectTraining();
  QGroupBox* buildPins();
  void connectPins();
  QLayout* buildSearchBar();
  QWidget* buildResults();
  QWidget* buildTable(QWidget* parent);
  void fitKeyColumns();
  void refreshMemoryChart(const Estimate& e);
  void refreshTimeChart(const Estimate& e);

  PageHost& host_;
  SearchJob* search_;
  CandidateFilterModel* filter_;
  std::optional<TimeBreakdown> simulatedBreakdown_;  // of the selected layout, when simulated
  double simulatedStepS_ = 0;
  bool stale_ = false;
  std::vector<Estimate> whatIf_;  // the what-if's points, by node count

  QSpinBox* gbs_ = nullptr;
  QLineEdit* tokens_ = nullptr;
  QComboBox* precision_ = nullptr;
  QComboBox* framework_ = nullptr;
  // Implementations that are no preset (a framework file's, read from a plan file), by name: an
  // item each in the framework list, which selects them again.
  std::map<std::string, FrameworkSpec> otherFrameworks_;
  QSpinBox* trainSeq_ = nullptr;
  QComboBox* attention_ = nullptr;
  QComboBox* optimizer_ = nullptr;
  QCheckBox* offloadParams_ = nullptr;
  QCheckBox* offloadOptimizer_ = nullptr;
  QComboBox* objective_ = nullptr;
  QDoubleSpinBox* deadline_ = nullptr;
  QDoubleSpinBox* budget_ = nullptr;
  QDoubleSpinBox* memoryMargin_ = nullptr;
  QSpinBox* pinDp_ = nullptr;
  QSpinBox* pinTp_ = nullptr;
  QSpinBox* pinPp_ = nullptr;
  QSpinBox* pinVp_ = nullptr;
  QSpinBox* pinMbs_ = nullptr;
  QComboBox* pinZero_ = nullptr;
  QComboBox* pinRecompute_ = nullptr;
  QComboBox* pinSchedule_ = nullptr;
  QComboBox* pinOrder_ = nullptr;
  QComboBox* pinOffload_ = nullptr;
  QComboBox* pinSp_ = nullptr;
  QSpinBox* pinEp_ = nullptr;  // expert-parallel degree (MoE models)
  QSpinBox* pinCp_ = nullptr;  // context-parallel degree
  QCheckBox* showInfeasible_ = nullptr;
  QLabel* message_ = nullptr;
  QListWidget* diagnostics_ = nullptr;
  QProgressBar* progress_ = nullptr;
  QPushButton* cancelButton_ = nullptr;
  QLabel* searchStatus_ = nullptr;
  QLabel* frameworkBests_ = nullptr;
  QLineEdit* filterEdit_ = nullptr;
  QTableView* table_ = nullptr;
  QTableView* moreTable_ = nullptr;
  QLabel* details_ = nullptr;
  ChartArea* memoryChart_ = nullptr;
  ChartArea* timeChart_ = nullptr;
  ChartArea* paretoChart_ = nullptr;
};

}  // namespace capplan::gui
