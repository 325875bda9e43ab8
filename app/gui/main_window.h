// The capplan-gui main window: pages Model, Cluster, Plan, Timeline and Run over one set of plan
// inputs; edits are undoable and autosaved, every edit re-plans (debounced) off the GUI thread.
// Each page is its own class (model_page.h, cluster_page.h, plan_page.h, timeline_page.h,
// run_page.h) editing the inputs through PageHost; files, undo, autosave and search wiring here.
#pragma once

#include <QElapsedTimer>
#include <QHash>
#include <QMainWindow>
#include <QPointer>
#include <QString>
#include <QStringList>
#include <functional>
#include <optional>
#include <vector>

#include "page_common.h"
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
class ModelPage;
class ClusterPage;
class PlanPage;
class TimelinePage;
class RunPage;
class ComparePage;

// The embedded default plan: GPT-3 175B on 120 x p4d.24xlarge, gbs 1536, 300B tokens.
PlanInputs defaultInputs(Diagnostics* diagnostics = nullptr);

struct MainWindowOptions {
  QString autosavePath;          // empty = <AppDataLocation>/autosave.plan.yaml
  bool restoreAutosave = true;   // load the autosave (edits not saved before a crash or kill)
  bool searchOnStart = true;
  int debounceMs = 30;   // from the last edit to the re-plan
};

class MainWindow : public QMainWindow, public PageHost {
  Q_OBJECT
 public:
  enum class Page { Model, Cluster, Plan, Timeline, Run, Compare };
  static constexpr int kPageCount = 6;

  explicit MainWindow(MainWindowOptions options = {}, QWidget* parent = nullptr);
  ~MainWindow() override;

  // Files. Each returns false and shows the diagnostics (next to the field, in the page's list)
  // when the file is bad; nothing the user typed is lost.
  bool openPlanFile(const QString& path);
  bool savePlanFile(const QString& path);
  bool loadModelFile(const QString& path);
  bool loadClusterFile(const QString& path);
  // A framework file (configs/frameworks/ format): the plan is costed with it and the framework list
  // gets an item for it; a bad file lists its diagnostics on the Plan page and changes nothing.
  bool loadFrameworkFile(const QString& path);
  // Writes every export format into `dir`; returns the paths written (empty on failure).
  QStringList exportPlanTo(const QString& dir);
  bool writeAutosave();
  // Renders each page to DIR/<nn>-<page>.png, then the export dialog; returns the files written.
  QStringList saveScreenshots(const QString& dir);

  void setInputs(const PlanInputs& inputs);  // one undoable edit
  const PlanInputs& inputs() const override { return inputs_; }
  Plan currentPlan() const;  // inputs + the selected layout
  const std::optional<Estimate>& selectedEstimate() const override { return selected_; }
  const SearchResult& lastResult() const { return lastResult_; }
  TimelineView* timelineView() const;
  RunPage* runPage() const { return runPage_; }
  ComparePage* comparePage() const { return comparePage_; }
  const std::string& traceJson() const;

  SearchJob* searchJob() const { return search_; }
  CandidateTableModel* candidateModel() const { return candidates_; }
  LayerProfileModel* profileModel() const { return profile_; }
  QUndoStack* undoStack() const { return undo_; }
  void showPage(Page page);
  // Selects `e`: its row when the table holds it, else that plan on its own (a point of the
  // node-count what-if at another count).
  void selectEstimate(const Estimate& e);

 public slots:
  void replan();        // F5: search now with the current inputs
  void pinBaseline();      // Ctrl+B: the selected plan starts a comparison (Compare page)
  bool addToComparison();  // Ctrl+Shift+B: the selected plan beside the baseline
  void cancelSearch();  // Esc

 signals:
  void planUpdated();                  // a search finished and the table and the details show it
  // The selection's charts, its point on the node-count what-if and its step simulation (started)
  // were drawn: after the table, once no newer edit or search is pending.
  void selectionFilledIn();
  void timelineUpdated();              // the selected layout's step was simulated
  void diagnosticsShown(const QString& text);

 protected:
  void closeEvent(QCloseEvent* event) override;

 private:
  friend class InputsCommand;
  // PageHost
  void editInputs(int fieldId, const QString& text, const std::function<void(PlanInputs&)>& edit) override;
  void showFieldDiagnostics(const Diagnostics& diagnostics, QListWidget* list) override;
  QHash<QString, QLabel*>& fieldErrors() override { return fieldErrors_; }

  void buildPages();
  void buildMenus();
  void syncWidgetsFromInputs();
  void refreshSelection();
  void fillInSelection();  // the charts, the what-if and the timeline of the selection
  void applyInputs(const PlanInputs& inputs);  // undo/redo target: no new undo entry
  // The autosave of a session that did not save its edits (restored as typed when invalid).
  void restoreAutosave(PlanInputs& start, Diagnostics& problems, QString& keptAside, bool& restored);
  void scheduleReplan();
  void onSearchResult(quint64 generation, const SearchResult& result, bool finished);
  void onSearchFinished(quint64 generation, bool cancelled);
  // The candidates in the table, the kept (or best) layout selected, its details shown.
  void showCandidates(const SearchResult& result);
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
  bool applying_ = false;
  bool selectingRow_ = false;  // showCandidates() is selecting the row it has just refreshed  // widgets are being synced from inputs_: ignore their signals

  QUndoStack* undo_ = nullptr;
  SearchJob* search_ = nullptr;
  SearchJob* paretoSearch_ = nullptr;
  QTimer* replanTimer_ = nullptr;
  QTimer* autosaveTimer_ = nullptr;
  QTimer* fillTimer_ = nullptr;      // fillInSelection, once per burst of selection changes
  QElapsedTimer paretoDrawn_;        // since the what-if was last drawn from a partial sweep
  quint64 shownGeneration_ = 0;      // the search whose result the table shows
  int64_t shownEvaluated_ = -1;      // and how many layouts that result had evaluated
  CandidateTableModel* candidates_ = nullptr;
  CandidateFilterModel* filter_ = nullptr;
  LayerProfileModel* profile_ = nullptr;

  QListWidget* nav_ = nullptr;
  QStackedWidget* stack_ = nullptr;
  QMenu* recentMenu_ = nullptr;
  QAction* cancelAct_ = nullptr;
  QString restoredFrom_;  // the autosave the inputs were restored from (shown in the title)
  QHash<QString, QLabel*> fieldErrors_;  // "model.heads" -> label next to that field

  ModelPage* modelPage_ = nullptr;
  ClusterPage* clusterPage_ = nullptr;
  PlanPage* planPage_ = nullptr;
  TimelinePage* timelinePage_ = nullptr;
  RunPage* runPage_ = nullptr;
  ComparePage* comparePage_ = nullptr;
};

}  // namespace capplan::gui
