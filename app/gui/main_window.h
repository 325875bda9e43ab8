// The capplan-gui main window: pages Model, Cluster, Plan, Timeline and Run over one set of plan
// inputs; edits are undoable and autosaved, every edit re-plans (debounced) off the GUI thread.
// Page construction and charts live in pages.cpp; files, undo, autosave and search wiring here.
#pragma once

#include <QHash>
#include <QMainWindow>
#include <QPointer>
#include <QString>
#include <QStringList>
#include <functional>
#include <optional>
#include <vector>

#include "planner/plan_io.h"
#include "planner/search.h"

class QAction;
class QChartView;
class QCheckBox;
class QDialog;
class QComboBox;
class QDoubleSpinBox;
class QLabel;
class QLineEdit;
class QListWidget;
class QMenu;
class QPlainTextEdit;
class QProgressBar;
class QPushButton;
class QSpinBox;
class QStackedWidget;
class QTableView;
class QTimer;
class QUndoStack;

namespace capplan::gui {

class CandidateFilterModel;
class CandidateTableModel;
class LayerProfileModel;
class SearchJob;
class TimelineView;
class RunPanel;

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

// The embedded default plan: GPT-3 175B on 120 x p4d.24xlarge, gbs 1536, 300B tokens.
PlanInputs defaultInputs(Diagnostics* diagnostics = nullptr);

struct MainWindowOptions {
  QString autosavePath;          // empty = <AppDataLocation>/autosave.plan.yaml
  bool restoreAutosave = true;   // load the autosave (edits not saved before a crash or kill)
  bool searchOnStart = true;
  int debounceMs = 30;   // from the last edit to the re-plan
};

class MainWindow : public QMainWindow {
  Q_OBJECT
 public:
  enum Page { ModelPage, ClusterPage, PlanPage, TimelinePage, RunPage, PageCount };

  explicit MainWindow(MainWindowOptions options = {}, QWidget* parent = nullptr);
  ~MainWindow() override;

  // Files. Each returns false and shows the diagnostics (next to the field, in the page's list)
  // when the file is bad; nothing the user typed is lost.
  bool openPlanFile(const QString& path);
  bool savePlanFile(const QString& path);
  bool loadModelFile(const QString& path);
  bool loadClusterFile(const QString& path);
  // Writes every export format into `dir`; returns the paths written (empty on failure).
  QStringList exportPlanTo(const QString& dir);
  bool writeAutosave();
  // Renders each page to DIR/<nn>-<page>.png, then the export dialog; returns the files written.
  QStringList saveScreenshots(const QString& dir);

  void setInputs(const PlanInputs& inputs);  // one undoable edit
  const PlanInputs& inputs() const { return inputs_; }
  Plan currentPlan() const;  // inputs + the selected layout
  const std::optional<Estimate>& selectedEstimate() const { return selected_; }
  const SearchResult& lastResult() const { return lastResult_; }
  TimelineView* timelineView() const { return timeline_; }
  RunPanel* runPanel() const { return runPanel_; }
  const std::string& traceJson() const { return traceJson_; }

  SearchJob* searchJob() const { return search_; }
  CandidateTableModel* candidateModel() const { return candidates_; }
  LayerProfileModel* profileModel() const { return profile_; }
  QUndoStack* undoStack() const { return undo_; }
  void showPage(Page page);

 public slots:
  void replan();        // F5: search now with the current inputs
  void cancelSearch();  // Esc

 signals:
  void planUpdated();                  // a search finished and the selection was refreshed
  void timelineUpdated();              // the selected layout's step was simulated
  void diagnosticsShown(const QString& text);

 protected:
  void closeEvent(QCloseEvent* event) override;

 private:
  friend class InputsCommand;
  // pages.cpp
  QWidget* buildModelPage();
  QWidget* buildClusterPage();
  QWidget* buildPlanPage();
  QWidget* buildTimelinePage();
  QWidget* buildRunPage();
  void syncWidgetsFromInputs();
  void refreshModelFigures();
  void refreshClusterFigures();
  void refreshSelection();
  void refreshCharts();
  void refreshPareto();
  void refreshTimeline();
  void simulateRun();
  void exportTrace();
  void showFieldDiagnostics(const Diagnostics& diagnostics, QListWidget* list);
  void explainEmptyResult();

  // main_window.cpp
  void buildMenus();
  void applyInputs(const PlanInputs& inputs);  // undo/redo target: no new undo entry
  void editInputs(int fieldId, const QString& text, const std::function<void(PlanInputs&)>& edit);
  void scheduleReplan();
  void onSearchResult(quint64 generation, const SearchResult& result, bool finished);
  void onSearchFinished(quint64 generation, bool cancelled);
  void onParetoResult(quint64 generation, const SearchResult& result, bool finished);
  void onSelectionChanged();
  void startParetoSearch();
  void addRecentFile(const QString& path);
  void rebuildRecentMenu();
  void updateTitle();
  bool inputsValid(Diagnostics* out = nullptr) const;
  void onOpenPlan();
  void onSavePlan();
  void onSavePlanAs();
  void onExport();
  QDialog* createExportDialog();  // tabs with each format's text and notes; caller owns it

  MainWindowOptions options_;
  PlanInputs inputs_;
  std::optional<Estimate> selected_;
  std::optional<std::pair<Layout, int>> preferred_;  // layout (and nodes) to select after a search
  SearchResult lastResult_;
  SearchResult paretoResult_;
  QString currentFile_;
  bool applying_ = false;  // widgets are being synced from inputs_: ignore their signals

  QUndoStack* undo_ = nullptr;
  SearchJob* search_ = nullptr;
  SearchJob* paretoSearch_ = nullptr;
  QTimer* replanTimer_ = nullptr;
  QTimer* autosaveTimer_ = nullptr;
  CandidateTableModel* candidates_ = nullptr;
  CandidateFilterModel* filter_ = nullptr;
  LayerProfileModel* profile_ = nullptr;

  QListWidget* nav_ = nullptr;
  QStackedWidget* stack_ = nullptr;
  QMenu* recentMenu_ = nullptr;
  QAction* cancelAct_ = nullptr;

  // Model page
  QComboBox* modelPreset_ = nullptr;
  QSpinBox* layers_ = nullptr;
  QSpinBox* hidden_ = nullptr;
  QSpinBox* heads_ = nullptr;
  QSpinBox* kvHeads_ = nullptr;
  QSpinBox* ffnHidden_ = nullptr;
  QSpinBox* vocab_ = nullptr;
  QSpinBox* seqLen_ = nullptr;
  QComboBox* ffn_ = nullptr;
  QComboBox* norm_ = nullptr;
  QCheckBox* tied_ = nullptr;
  QLabel* modelFigures_ = nullptr;
  QListWidget* modelDiagnostics_ = nullptr;
  QTableView* profileView_ = nullptr;
  QHash<QString, QLabel*> fieldErrors_;  // "model.heads" -> label next to that field

  // Cluster page
  QComboBox* clusterPreset_ = nullptr;
  QSpinBox* nodesMin_ = nullptr;
  QSpinBox* nodesMax_ = nullptr;
  QDoubleSpinBox* price_ = nullptr;
  QLabel* clusterFigures_ = nullptr;
  QListWidget* clusterDiagnostics_ = nullptr;

  // Plan page
  QSpinBox* gbs_ = nullptr;
  QLineEdit* tokens_ = nullptr;
  QComboBox* precision_ = nullptr;
  QComboBox* framework_ = nullptr;
  QString restoredFrom_;  // the autosave the inputs were restored from (shown in the title)
  QSpinBox* trainSeq_ = nullptr;
  QComboBox* attention_ = nullptr;
  QComboBox* objective_ = nullptr;
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
  QCheckBox* showInfeasible_ = nullptr;
  QLabel* planMessage_ = nullptr;
  QListWidget* planDiagnostics_ = nullptr;
  QProgressBar* progress_ = nullptr;
  QPushButton* cancelButton_ = nullptr;
  QLabel* searchStatus_ = nullptr;
  QLineEdit* filterEdit_ = nullptr;
  QTableView* table_ = nullptr;
  QLabel* details_ = nullptr;
  QChartView* memoryChart_ = nullptr;
  QChartView* timeChart_ = nullptr;
  QChartView* paretoChart_ = nullptr;

  // Timeline and Run pages
  quint64 timelineGeneration_ = 0;
  std::optional<TimeBreakdown> simulatedBreakdown_;  // of the selected layout, when simulated
  double simulatedStepS_ = 0;
  std::string traceJson_;  // Chrome trace of the last simulated step
  Layout timelineLayout_;
  int timelineNodes_ = 0;
  QLabel* runSimResult_ = nullptr;
  QDoubleSpinBox* mtbfHours_ = nullptr;
  QDoubleSpinBox* checkpointMin_ = nullptr;
  QDoubleSpinBox* restartMin_ = nullptr;
  QSpinBox* trials_ = nullptr;
  TimelineView* timeline_ = nullptr;
  QComboBox* timelineSchedule_ = nullptr;
  QLabel* timelineInfo_ = nullptr;
  RunPanel* runPanel_ = nullptr;
};

}  // namespace capplan::gui
