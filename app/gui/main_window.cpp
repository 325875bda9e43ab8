// Main window shell: menus and shortcuts, plan files, recent files, undo, autosave, and the wiring
// of edits to debounced searches. Each page is its own class (model_page.h ... run_page.h).
#include "main_window.h"

#include <algorithm>

#include <QDateTime>
#include <QFile>

#include "glossary_text.h"

#include <QAction>
#include <QApplication>
#include <QCloseEvent>
#include <QDir>
#include <QFileDialog>
#include <QFileInfo>
#include <QHBoxLayout>
#include <QLabel>
#include <QListWidget>
#include <QMenuBar>
#include <QMessageBox>
#include <QPixmap>
#include <QPlainTextEdit>
#include <QProgressBar>
#include <QPushButton>
#include <QScreen>
#include <QSettings>
#include <QSplitter>
#include <QStackedWidget>
#include <QStandardPaths>
#include <QStatusBar>
#include <QTabWidget>
#include <QTableView>
#include <QThreadPool>
#include <QTimer>
#include <QUndoStack>
#include <QVBoxLayout>

#include "cluster_page.h"
#include "compare_page.h"
#include "item_models.h"
#include "model_page.h"
#include "plan_page.h"
#include "run_page.h"
#include "timeline_page.h"
#ifdef CAPPLAN_GUI_HAVE_RUNTIME
#include "measure_tools.h"
#endif
#include "planner/catalog.h"
#include "planner/export.h"
#include "planner/plan_io.h"
#include "planner/search.h"
#include "planner/spec_io.h"
#include "search_job.h"

namespace capplan::gui {

PlanInputs defaultInputs(Diagnostics* diagnostics) {
  // The embedded default plan (configs/plans/default.yaml), the same one `capplan estimate --plan
  // default` reads.
  PlanInputs in;
  Loaded<Plan> plan = load_plan("default");
  if (diagnostics != nullptr) diagnostics->append(plan.diagnostics);
  if (!plan.value) return in;
  in.modelRef = plan.value->model_ref;
  in.clusterRef = plan.value->cluster_ref;
  in.model = plan.value->scenario.model;
  in.cluster = plan.value->scenario.cluster;
  in.training = plan.value->scenario.training;
  in.nodesMin = in.nodesMax = plan.value->scenario.nodes;
  return in;
}

// One undoable edit of the inputs; consecutive edits of the same field merge into one entry.
class InputsCommand : public QUndoCommand {
 public:
  InputsCommand(MainWindow* w, PlanInputs before, PlanInputs after, int fieldId, const QString& text)
      : QUndoCommand(text), w_(w), before_(std::move(before)), after_(std::move(after)), id_(fieldId) {}
  void redo() override { w_->applyInputs(after_); }
  void undo() override { w_->applyInputs(before_); }
  int id() const override { return id_; }
  bool mergeWith(const QUndoCommand* other) override {
    if (other->id() != id_ || id_ < 0) return false;
    after_ = static_cast<const InputsCommand*>(other)->after_;
    return true;
  }

 private:
  MainWindow* w_;
  PlanInputs before_, after_;
  int id_;
};

MainWindow::MainWindow(MainWindowOptions options, QWidget* parent)
    : QMainWindow(parent), options_(std::move(options)) {
  setWindowTitle(QStringLiteral("capplan"));
  // 1440 x 900 where the screen allows it, else 90 % of the available area.
  QSize size(1440, 900);
  if (const QScreen* screen = QGuiApplication::primaryScreen()) {
    const QSize avail = screen->availableSize();
    size = size.boundedTo(QSize(avail.width() * 9 / 10, avail.height() * 9 / 10));
  }
  resize(size);
  if (options_.autosavePath.isEmpty()) {
    const QString dir = QStandardPaths::writableLocation(QStandardPaths::AppDataLocation);
    QDir().mkpath(dir);
    options_.autosavePath = dir + QStringLiteral("/autosave.plan.yaml");
  }

  undo_ = new QUndoStack(this);
  search_ = new SearchJob(this);
  paretoSearch_ = new SearchJob(this, SearchJob::Kind::Background);
  candidates_ = new CandidateTableModel(this);
  filter_ = new CandidateFilterModel(this);
  filter_->setSourceModel(candidates_);
  profile_ = new LayerProfileModel(this);
  replanTimer_ = new QTimer(this);
  replanTimer_->setSingleShot(true);
  replanTimer_->setInterval(options_.debounceMs);
  connect(replanTimer_, &QTimer::timeout, this, &MainWindow::replan);
  autosaveTimer_ = new QTimer(this);
  autosaveTimer_->setSingleShot(true);
  autosaveTimer_->setInterval(1000);
  connect(autosaveTimer_, &QTimer::timeout, this, &MainWindow::writeAutosave);
  fillTimer_ = new QTimer(this);
  fillTimer_->setSingleShot(true);
  fillTimer_->setInterval(0);
  connect(fillTimer_, &QTimer::timeout, this, &MainWindow::fillInSelection);

  connect(search_, &SearchJob::resultReady, this, &MainWindow::onSearchResult);
  connect(search_, &SearchJob::searchFinished, this, &MainWindow::onSearchFinished);
  connect(paretoSearch_, &SearchJob::resultReady, this, &MainWindow::onParetoResult);

  buildPages();
  buildMenus();

  // Inputs: the autosave of a session that did not save its edits, else the embedded default.
  Diagnostics d;
  PlanInputs start = defaultInputs(&d);
  bool restored = false;
  Diagnostics restoredProblems;
  QString keptAside;
  if (options_.restoreAutosave && QFileInfo::exists(options_.autosavePath))
    restoreAutosave(start, restoredProblems, keptAside, restored);
  applying_ = true;
  inputs_ = start;
  applying_ = false;
  syncWidgetsFromInputs();
  if (d.has_errors()) showFieldDiagnostics(d, planPage_->diagnosticsList());
  showPage(Page::Plan);
  if (restoredProblems.has_errors()) {
    showFieldDiagnostics(restoredProblems, planPage_->diagnosticsList());
    showFieldDiagnostics(restoredProblems, modelPage_->diagnosticsList());
  }
  QString startMessage = restored ? tr("restored unsaved edits from %1").arg(options_.autosavePath)
                                  : tr("Default plan: GPT-3 175B on 120 x p4d.24xlarge, 300B tokens");
  if (restored && restoredProblems.has_errors())
    startMessage += tr(" (with the problems listed; the file as it was is kept as %1)")
                        .arg(keptAside.isEmpty() ? tr("(could not copy)") : keptAside);
  statusBar()->showMessage(startMessage, 15000);
  updateTitle();
  if (options_.searchOnStart) QTimer::singleShot(0, this, &MainWindow::replan);
}

void MainWindow::buildPages() {
  // Shell: a page list on the left, the pages on the right.
  auto* central = new QWidget(this);
  auto* row = new QHBoxLayout(central);
  row->setContentsMargins(0, 0, 0, 0);
  row->setSpacing(0);
  nav_ = new QListWidget(central);
  nav_->setObjectName(QStringLiteral("pageList"));
  nav_->setFixedWidth(150);
  nav_->setStyleSheet(QStringLiteral(
      "QListWidget { border: none; background: palette(window); font-size: 11pt; }"
      "QListWidget::item { padding: 10px 14px; }"
      "QListWidget::item:selected { background: palette(highlight); color: palette(highlighted-text); }"));
  stack_ = new QStackedWidget(central);
  const char* names[kPageCount] = {"Model", "Cluster", "Plan", "Timeline", "Run", "Compare"};
  const char* tips[kPageCount] = {
      "What is trained: architecture, parameters, FLOPs per token, per-layer profile (Ctrl+1)",
      "On what: instance type, node count or range, price (Ctrl+2)",
      "How: the layout search, ranked candidates, memory and time charts (Ctrl+3)",
      "One step of the selected layout, GPU by GPU (Ctrl+4)",
      "Launch a scaled-down run on this machine and watch it (Ctrl+5)",
      "A pinned baseline and other plans side by side, as deltas (Ctrl+6)"};
  for (int i = 0; i < kPageCount; ++i) {
    auto* item = new QListWidgetItem(QString::fromUtf8(names[i]), nav_);
    item->setToolTip(QString::fromUtf8(tips[i]));
  }
  modelPage_ = new ModelPage(*this, profile_);
  clusterPage_ = new ClusterPage(*this);
  planPage_ = new PlanPage(*this, search_, filter_);
  timelinePage_ = new TimelinePage(*this);
  runPage_ = new RunPage;
  runPage_->setObjectName(QStringLiteral("runPage"));
  stack_->addWidget(modelPage_);
  stack_->addWidget(clusterPage_);
  stack_->addWidget(planPage_);
  stack_->addWidget(timelinePage_);
  stack_->addWidget(runPage_);
  comparePage_ = new ComparePage;
  stack_->addWidget(comparePage_);
  connect(modelPage_, &ModelPage::modelFileChosen, this, &MainWindow::loadModelFile);
#ifdef CAPPLAN_GUI_HAVE_RUNTIME
  connect(modelPage_, &ModelPage::deviceProfileMeasured, this,
          [this](const QString& path) { planPage_->deviceProfilePicker()->useProfile(path); });
#endif
  connect(clusterPage_, &ClusterPage::clusterFileChosen, this, &MainWindow::loadClusterFile);
  connect(planPage_, &PlanPage::frameworkFileChosen, this, &MainWindow::loadFrameworkFile);
  connect(planPage_, &PlanPage::replanRequested, this, &MainWindow::replan);
  connect(planPage_, &PlanPage::cancelRequested, this, &MainWindow::cancelSearch);
  connect(planPage_, &PlanPage::selectionChanged, this, &MainWindow::onSelectionChanged);
  connect(planPage_, &PlanPage::whatIfPointClicked, this, &MainWindow::selectEstimate);
  connect(timelinePage_, &TimelinePage::stepSimulated, planPage_, &PlanPage::setSimulatedStep);
  connect(timelinePage_, &TimelinePage::timelineUpdated, this, &MainWindow::timelineUpdated);
  connect(nav_, &QListWidget::currentRowChanged, stack_, &QStackedWidget::setCurrentIndex);
  row->addWidget(nav_);
  row->addWidget(stack_, 1);
  setCentralWidget(central);
}

void MainWindow::restoreAutosave(PlanInputs& start, Diagnostics& problems, QString& keptAside,
                                 bool& restored) {
  Loaded<Plan> p = load_plan(options_.autosavePath.toStdString());
  if (!p.ok()) {
    // An autosave taken while a field held an invalid value: restore it as written, with its
    // diagnostics next to the fields, and keep the file aside so that no later autosave
    // overwrites what the user typed.
    p = load_plan_draft(options_.autosavePath.toStdString());
    problems = p.diagnostics;
    keptAside = options_.autosavePath + QStringLiteral(".unloadable-") +
                QDateTime::currentDateTimeUtc().toString(QStringLiteral("yyyyMMdd-HHmmss"));
    if (!QFile::copy(options_.autosavePath, keptAside)) keptAside.clear();
  }
  if (!p.value) return;
  start.modelRef = p.value->model_ref;
  start.model = p.value->scenario.model;
  start.clusterRef = p.value->cluster_ref;
  start.cluster = p.value->scenario.cluster;
  start.training = p.value->scenario.training;
  start.nodesMin = start.nodesMax = std::max(1, p.value->scenario.nodes);
  preferred_ = std::make_pair(p.value->layout, p.value->scenario.nodes);
  restored = true;
  restoredFrom_ = QFileInfo(options_.autosavePath).fileName();
}

TimelineView* MainWindow::timelineView() const { return timelinePage_->view(); }

const std::string& MainWindow::traceJson() const { return timelinePage_->traceJson(); }

MainWindow::~MainWindow() {
  // Cancel, wait, then destroy: no worker (search, step or run simulation, local run) may outlive
  // the window, nor run on into the process's exit.
  search_->cancel();
  paretoSearch_->cancel();
  if (runPage_ != nullptr) runPage_->stop();
  search_->waitForFinished();
  paretoSearch_->waitForFinished();
  QThreadPool::globalInstance()->waitForDone();
}

void MainWindow::buildMenus() {
  QMenu* file = menuBar()->addMenu(tr("&File"));
  QAction* open = file->addAction(tr("&Open plan..."), this, &MainWindow::onOpenPlan);
  open->setShortcut(QKeySequence::Open);
  open->setToolTip(tr("Open a plan YAML written by capplan plan --save or by this app"));
  recentMenu_ = file->addMenu(tr("Open &recent"));
  rebuildRecentMenu();
  QAction* save = file->addAction(tr("&Save plan"), this, &MainWindow::onSavePlan);
  save->setShortcut(QKeySequence::Save);
  QAction* saveAs = file->addAction(tr("Save plan &as..."), this, &MainWindow::onSavePlanAs);
  // QKeySequence::SaveAs is empty on some platforms: Ctrl+Shift+S everywhere.
  saveAs->setShortcut(QKeySequence(Qt::CTRL | Qt::SHIFT | Qt::Key_S));
  file->addSeparator();
  QAction* exp = file->addAction(tr("&Export..."), this, &MainWindow::onExport);
  exp->setShortcut(QKeySequence(Qt::CTRL | Qt::Key_E));
  exp->setToolTip(tr("SageMaker smp_options, Megatron-LM arguments, DeepSpeed config, Slurm sbatch"));
  file->addAction(tr("Open &model file..."), this, [this] {
    const QString f = QFileDialog::getOpenFileName(this, tr("Open model"), {},
                                                   tr("Model (*.yaml *.yml *.json)"));
    if (!f.isEmpty()) loadModelFile(f);
  });
  file->addAction(tr("Open &cluster file..."), this, [this] {
    const QString f = QFileDialog::getOpenFileName(this, tr("Open cluster"), {}, tr("Cluster (*.yaml *.yml)"));
    if (!f.isEmpty()) loadClusterFile(f);
  });
  file->addSeparator();
  QAction* quit = file->addAction(tr("&Quit"), this, &QWidget::close);
  quit->setShortcut(QKeySequence::Quit);

  QMenu* edit = menuBar()->addMenu(tr("&Edit"));
  QAction* undo = undo_->createUndoAction(this, tr("&Undo"));
  undo->setShortcut(QKeySequence::Undo);
  QAction* redo = undo_->createRedoAction(this, tr("&Redo"));
  redo->setShortcut(QKeySequence::Redo);
  edit->addAction(undo);
  edit->addAction(redo);

  QMenu* plan = menuBar()->addMenu(tr("&Plan"));
  QAction* replanAct = plan->addAction(tr("&Re-plan"), this, &MainWindow::replan);
  replanAct->setShortcut(QKeySequence(Qt::Key_F5));
  plan->addSeparator();
  QAction* pin = plan->addAction(tr("Pin as &baseline"), this, &MainWindow::pinBaseline);
  pin->setObjectName(QStringLiteral("pinBaseline"));
  pin->setShortcut(QKeySequence(Qt::CTRL | Qt::Key_B));
  pin->setToolTip(tr("Starts a comparison with the selected plan as its baseline (Compare page)"));
  QAction* add = plan->addAction(tr("Add to &comparison"), this, &MainWindow::addToComparison);
  add->setObjectName(QStringLiteral("addToComparison"));
  add->setShortcut(QKeySequence(Qt::CTRL | Qt::SHIFT | Qt::Key_B));
  add->setToolTip(tr("Puts the selected plan beside the baseline: another candidate, cluster or model"));
  plan->addSeparator();
  cancelAct_ = plan->addAction(tr("&Cancel search"), this, &MainWindow::cancelSearch);
  cancelAct_->setShortcut(QKeySequence(Qt::Key_Escape));
  cancelAct_->setEnabled(false);

  QMenu* view = menuBar()->addMenu(tr("&View"));
  for (int i = 0; i < kPageCount; ++i) {
    QAction* a = view->addAction(nav_->item(i)->text(), this, [this, i] { showPage(Page(i)); });
    a->setShortcut(QKeySequence(Qt::CTRL | Qt::Key(Qt::Key_1 + i)));
  }
  QMenu* help = menuBar()->addMenu(tr("&Help"));
  QAction* glossary = help->addAction(tr("&Glossary"), this, [this] {
    auto* box = new QMessageBox(QMessageBox::NoIcon, tr("Glossary"), QString(), QMessageBox::Close, this);
    box->setObjectName(QStringLiteral("glossaryDialog"));
    box->setTextFormat(Qt::MarkdownText);
    box->setText(QString::fromUtf8(kGlossaryMarkdown));
    box->setAttribute(Qt::WA_DeleteOnClose);
    box->open();
  });
  glossary->setObjectName(QStringLiteral("helpGlossary"));
  glossary->setShortcut(QKeySequence::HelpContents);
  QAction* columns = help->addAction(tr("What do the &columns mean?"), this, [this] {
    // The result table's own header tooltips, one line per column.
    QString text;
    const QAbstractItemModel* m = candidates_;
    for (int c = 0; c < m->columnCount(); ++c)
      text += QStringLiteral("<b>%1</b>: %2<br>")
                  .arg(m->headerData(c, Qt::Horizontal, Qt::DisplayRole).toString().toHtmlEscaped(),
                       m->headerData(c, Qt::Horizontal, Qt::ToolTipRole).toString().toHtmlEscaped());
    auto* box = new QMessageBox(QMessageBox::NoIcon, tr("Result columns"), text, QMessageBox::Close, this);
    box->setObjectName(QStringLiteral("columnsDialog"));
    box->setAttribute(Qt::WA_DeleteOnClose);
    box->open();
  });
  columns->setObjectName(QStringLiteral("helpColumns"));
  help->addAction(tr("&About capplan"), this, [this] {
    QMessageBox::about(this, tr("About capplan"),
                       tr("<b>capplan</b> 0.1.0 - capacity planner for training transformer language "
                          "models on GPU clusters.<br>Every figure comes from the planner library the "
                          "<tt>capplan</tt> CLI also uses."));
  });
}

void MainWindow::showPage(Page page) { nav_->setCurrentRow(int(page)); }

void MainWindow::syncWidgetsFromInputs() {
  const bool was = applying_;
  applying_ = true;
  modelPage_->syncFromInputs(inputs_);
  clusterPage_->syncFromInputs(inputs_);
  planPage_->syncFromInputs(inputs_);
  filter_->setFitsOnly(!inputs_.showInfeasible);
  applying_ = was;
  modelPage_->refreshFigures();
  clusterPage_->refreshFigures();
}

void MainWindow::refreshSelection() {
  // The details at once; the charts, the what-if and the step simulation from the event loop,
  // after the table has been drawn.
  modelPage_->refreshFigures();
  planPage_->showSelection();
  if (selected_) runPage_->setPlan(currentPlan());
  fillTimer_->start();
}

void MainWindow::fillInSelection() {
  // Stale work is dropped: an edit waiting for its re-plan, or a search still running, replaces
  // the selection, and its own result fills in again.
  if (replanTimer_->isActive() || search_->isRunning()) return;
  planPage_->refreshCharts();
  if (selected_) planPage_->refreshPareto(paretoResult_);
  timelinePage_->refresh();
  emit selectionFilledIn();
}

void MainWindow::showFieldDiagnostics(const Diagnostics& diagnostics, QListWidget* list) {
  list->clear();
  for (const Diagnostic& d : diagnostics.items()) {
    auto* item = new QListWidgetItem(QString::fromStdString(d.to_string()), list);
    item->setForeground(d.severity == Severity::Error ? QColor(179, 38, 30) : QColor(150, 100, 0));
    QLabel* field = fieldErrors_.value(QString::fromStdString(d.path));
    if (field != nullptr) showFieldError(field, QString::fromStdString(d.message));
  }
  list->setVisible(!diagnostics.empty());
  if (!diagnostics.empty()) emit diagnosticsShown(QString::fromStdString(diagnostics.to_string()));
}

// ---------------------------------------------------------------- inputs, undo, autosave

void MainWindow::setInputs(const PlanInputs& inputs) {
  undo_->push(new InputsCommand(this, inputs_, inputs, -1, tr("Change inputs")));
}

void MainWindow::editInputs(int fieldId, const QString& text,
                            const std::function<void(PlanInputs&)>& edit) {
  if (applying_) return;
  PlanInputs after = inputs_;
  edit(after);
  undo_->push(new InputsCommand(this, inputs_, after, fieldId, text));
}

void MainWindow::applyInputs(const PlanInputs& inputs) {
  inputs_ = inputs;
  syncWidgetsFromInputs();
  updateTitle();
  autosaveTimer_->start();
  scheduleReplan();
}

bool MainWindow::inputsValid(Diagnostics* out) const {
  Diagnostics d;
  validate_model(inputs_.model, "<model page>", d);
  validate_cluster(inputs_.cluster, "<cluster page>", d);
  if (inputs_.training.gbs <= 0) d.error("<plan page>", 0, 0, "training.gbs", "must be > 0");
  if (inputs_.nodesMin <= 0 || inputs_.nodesMax < inputs_.nodesMin)
    d.error("<cluster page>", 0, 0, "nodes", "need 1 <= nodes min <= nodes max");
  if (!d.has_errors()) {
    // The stack against the hardware (fp8 without fp8 tensor cores, flash on a V100 or an
    // unsupported head size, offload without host memory), as the CLI refuses them.
    if (const std::optional<TrainingProblem> p = check_training(scenarioOf(inputs_)))
      d.error("<plan page>", 0, 0, "training." + p->field, p->message);
  }
  const bool ok = !d.has_errors();
  if (out != nullptr) out->append(d);
  return ok;
}

bool MainWindow::writeAutosave() {
  if (undo_->isClean() && currentFile_.isEmpty() && undo_->count() == 0) return false;
  const std::string err = write_file_atomic(options_.autosavePath.toStdString(),
                                            plan_to_yaml(currentPlan()));
  return err.empty();
}

Plan MainWindow::currentPlan() const {
  Plan p;
  p.model_ref = inputs_.modelRef;
  p.cluster_ref = inputs_.clusterRef;
  p.scenario = selected_ ? scenarioOf(inputs_, *selected_) : scenarioOf(inputs_);
  if (selected_) p.layout = selected_->layout;
  p.created_by = "capplan-gui 0.1.0";
  return p;
}

void MainWindow::updateTitle() {
  const QString name = !currentFile_.isEmpty() ? QFileInfo(currentFile_).fileName()
                       : !restoredFrom_.isEmpty() ? tr("unsaved edits restored from %1").arg(restoredFrom_)
                                                  : tr("default plan");
  const bool dirty = !undo_->isClean() || (currentFile_.isEmpty() && !restoredFrom_.isEmpty());
  setWindowTitle(QStringLiteral("%1%2 - capplan").arg(name, dirty ? QStringLiteral(" *") : QString()));
}

// ---------------------------------------------------------------- search

void MainWindow::scheduleReplan() { replanTimer_->start(); }

void MainWindow::replan() {
  replanTimer_->stop();
  Diagnostics d;
  if (!inputsValid(&d)) {
    search_->cancel();
    showFieldDiagnostics(d, planPage_->diagnosticsList());
    planPage_->setMessage(tr("Not re-planned: fix the inputs marked in red (the last good plan is kept)."));
    planPage_->setStale(true);
    return;
  }
  showFieldDiagnostics(Diagnostics{}, planPage_->diagnosticsList());
  SearchRequest req;
  req.scenario = scenarioOf(inputs_);
  req.anyFramework = inputs_.anyFramework;
  req.options = searchOptionsOf(inputs_, 200);
  for (int n = inputs_.nodesMin; n <= inputs_.nodesMax; ++n) req.nodeCounts.push_back(n);
  paretoSearch_->cancel();
  planPage_->setSearching(true);
  cancelAct_->setEnabled(true);
  planPage_->setStatus(tr("Searching..."));
  search_->start(req);
}

void MainWindow::pinBaseline() {
  if (!selected_) {
    planPage_->setMessage(tr("Nothing to pin yet: no layout is selected."));
    return;
  }
  comparePage_->pinBaseline(currentPlan());
  statusBar()->showMessage(tr("Pinned %1 as the baseline").arg(ComparePage::labelOf(currentPlan())), 6000);
}

bool MainWindow::addToComparison() {
  if (!selected_) {
    planPage_->setMessage(tr("Nothing to add yet: no layout is selected."));
    return false;
  }
  const bool added = comparePage_->addPlan(currentPlan());
  if (added) showPage(Page::Compare);
  return added;
}

void MainWindow::cancelSearch() {
  search_->cancel();
  paretoSearch_->cancel();
}

void MainWindow::onSearchResult(quint64 generation, const SearchResult& result, bool finished) {
  if (generation != search_->generation()) return;
  // The final result of a search is most often its last best-so-far, already shown: then only the
  // status and the message change.
  const bool shown = generation == shownGeneration_ && result.evaluated == shownEvaluated_ &&
                     result.cancelled == lastResult_.cancelled &&
                     result.candidates.size() == lastResult_.candidates.size();
  shownGeneration_ = generation;
  shownEvaluated_ = result.evaluated;
  lastResult_ = result;
  planPage_->setStale(false);
  if (!shown) showCandidates(result);
  planPage_->setFrameworkBests(result.per_framework, inputs_.objective);
  if (finished) preferred_.reset();
  const auto asGood = std::count_if(result.candidates.begin() + (result.candidates.empty() ? 0 : 1),
                                    result.candidates.end(),
                                    [](const Estimate& e) { return e.as_good_as_best; });
  planPage_->setStatus(tr("%1 layouts evaluated in %2%3; %4 shown%5")
                             .arg(formatCount(double(result.evaluated)))
                             .arg(formatSeconds(result.search_time_s))
                             .arg(result.cancelled ? tr(" - cancelled, best so far") : QString())
                             .arg(result.candidates.size())
                             .arg(asGood > 0 ? tr("; %1 shaded as good as the best within the model's error")
                                                   .arg(qlonglong(asGood))
                                             : QString()));
  if (finished && !result.limit.empty())
    planPage_->setMessage(tr("Search stopped at a limit: %1").arg(QString::fromStdString(result.limit)));
  else if (finished && result.candidates.empty()) planPage_->explainEmptyResult();
  else if (finished) {
    const bool anyFits = result.candidates.front().fits;
    planPage_->setMessage(anyFits ? QString()
                                  : tr("No layout fits in %1 GiB per GPU. Closest: %2")
                                        .arg(inputs_.cluster.gpu.memory_gib)
                                        .arg(QString::fromStdString(result.candidates.front().reason)));
  }
}

void MainWindow::showCandidates(const SearchResult& result) {
  std::optional<std::pair<Layout, int>> keep = preferred_;
  if (!keep && selected_) keep = std::make_pair(selected_->layout, selected_->nodes);
  candidates_->setCandidates(result.candidates);
  int row = keep ? candidates_->findLayout(keep->first, keep->second) : -1;
  if (row < 0 && !result.candidates.empty()) row = 0;
  if (row >= 0) {
    selected_ = result.candidates[size_t(row)];
    const QModelIndex idx = filter_->mapFromSource(candidates_->index(row, 0));
    selectingRow_ = true;  // the selection is refreshed once, below
    if (idx.isValid()) planPage_->table()->selectRow(idx.row());
    selectingRow_ = false;
  } else {
    selected_.reset();
  }
  refreshSelection();
}

void MainWindow::onSearchFinished(quint64 generation, bool cancelled) {
  if (generation != search_->generation()) return;
  planPage_->setSearching(false);
  cancelAct_->setEnabled(false);
  if (!cancelled) startParetoSearch();
  emit planUpdated();
}

void MainWindow::startParetoSearch() {
  // Days vs dollars across node counts around the chosen one (or the chosen range).
  std::vector<int> counts;
  if (inputs_.nodesMax > inputs_.nodesMin) {
    // Every count of the range, at most kMaxWhatIfCounts of them, evenly spread (both ends kept).
    const int span = inputs_.nodesMax - inputs_.nodesMin;
    constexpr int kMaxWhatIfCounts = 200;
    if (span + 1 <= kMaxWhatIfCounts) {
      for (int n = inputs_.nodesMin; n <= inputs_.nodesMax; ++n) counts.push_back(n);
    } else {
      for (int i = 0; i < kMaxWhatIfCounts; ++i)
        counts.push_back(inputs_.nodesMin + int(std::llround(double(span) * i / (kMaxWhatIfCounts - 1))));
    }
  } else {
    const int n = inputs_.nodesMin;
    for (double f : {0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0}) {
      const int c = std::max(1, int(n * f + 0.5));
      if (counts.empty() || counts.back() != c) counts.push_back(c);
    }
  }
  SearchRequest req;
  req.scenario = scenarioOf(inputs_);  // each count of nodeCounts in turn
  req.anyFramework = inputs_.anyFramework;
  req.options = searchOptionsOf(inputs_, 1);
  req.options.include_infeasible = false;
  req.nodeCounts = counts;
  req.everyCount = true;
  paretoResult_ = {};
  paretoSearch_->start(req);
}

void MainWindow::onParetoResult(quint64 generation, const SearchResult& result, bool finished) {
  if (generation != paretoSearch_->generation()) return;
  paretoResult_ = result;
  // Drawn when the sweep ends, and from partial sweeps at most 4 times a second; never while an
  // edit waits for its re-plan (the sweep is about to be replaced).
  if (replanTimer_->isActive() || search_->isRunning()) return;
  if (!finished && paretoDrawn_.isValid() && paretoDrawn_.elapsed() < 250) return;
  paretoDrawn_.start();
  planPage_->refreshPareto(paretoResult_);
}

void MainWindow::selectEstimate(const Estimate& e) {
  const int row = candidates_->findLayout(e.layout, e.nodes);
  const QModelIndex idx = row >= 0 ? filter_->mapFromSource(candidates_->index(row, 0)) : QModelIndex();
  if (idx.isValid()) {
    planPage_->table()->selectRow(idx.row());  // onSelectionChanged follows
    return;
  }
  // Another node count than the table's: the plan of that count, selected on its own.
  planPage_->table()->clearSelection();
  selected_ = e;
  refreshSelection();
}

void MainWindow::onSelectionChanged() {
  if (selectingRow_) return;
  const QModelIndexList rows = planPage_->table()->selectionModel()->selectedRows();
  if (rows.isEmpty()) return;
  const QModelIndex src = filter_->mapToSource(rows.first());
  const Estimate* e = candidates_->candidate(src.row());
  if (e == nullptr) return;
  selected_ = *e;
  refreshSelection();
}

// ---------------------------------------------------------------- files

bool MainWindow::openPlanFile(const QString& path) {
  Loaded<Plan> p = load_plan(path.toStdString());
  if (!p.ok()) {
    showFieldDiagnostics(p.diagnostics, planPage_->diagnosticsList());
    planPage_->setMessage(tr("Could not open %1; the current plan is kept.").arg(path));
    showPage(Page::Plan);
    return false;
  }
  PlanInputs in = inputs_;
  in.modelRef = p.value->model_ref;
  in.model = p.value->scenario.model;
  in.clusterRef = p.value->cluster_ref;
  in.cluster = p.value->scenario.cluster;
  in.training = p.value->scenario.training;
  in.anyFramework = false;  // a plan names its framework
  in.nodesMin = in.nodesMax = p.value->scenario.nodes;
  in.pins = {};
  preferred_ = std::make_pair(p.value->layout, p.value->scenario.nodes);
  undo_->clear();
  applying_ = true;
  applyInputs(in);
  applying_ = false;
  currentFile_ = path;
  restoredFrom_.clear();
  undo_->setClean();
  addRecentFile(path);
  updateTitle();
  showFieldDiagnostics(p.diagnostics, planPage_->diagnosticsList());
  planPage_->setMessage(tr("Opened %1").arg(path));
  replan();
  return true;
}

bool MainWindow::savePlanFile(const QString& path) {
  if (!selected_) {
    planPage_->setMessage(tr("Nothing to save yet: no layout is selected."));
    return false;
  }
  const std::string err = save_plan(currentPlan(), path.toStdString());
  if (!err.empty()) {
    planPage_->setMessage(tr("Could not save: %1").arg(QString::fromStdString(err)));
    return false;
  }
  currentFile_ = path;
  restoredFrom_.clear();
  undo_->setClean();
  QFile::remove(options_.autosavePath);
  addRecentFile(path);
  updateTitle();
  statusBar()->showMessage(tr("Saved %1").arg(path), 5000);
  return true;
}

bool MainWindow::loadModelFile(const QString& path) {
  Loaded<ModelSpec> m = load_model(path.toStdString());
  showFieldDiagnostics(m.diagnostics, modelPage_->diagnosticsList());
  if (!m.ok()) {
    showPage(Page::Model);
    return false;
  }
  editInputs(-1, tr("Open model %1").arg(QFileInfo(path).fileName()), [&](PlanInputs& in) {
    in.model = *m.value;
    in.modelRef = path.toStdString();
    in.training.seq_len = 0;  // train at the new model's own length, as the CLI does
  });
  return true;
}

bool MainWindow::loadClusterFile(const QString& path) {
  Loaded<ClusterSpec> c = load_cluster(path.toStdString());
  showFieldDiagnostics(c.diagnostics, clusterPage_->diagnosticsList());
  if (!c.ok()) {
    showPage(Page::Cluster);
    return false;
  }
  editInputs(-1, tr("Open cluster %1").arg(QFileInfo(path).fileName()), [&](PlanInputs& in) {
    in.cluster = *c.value;
    in.clusterRef = path.toStdString();
  });
  return true;
}

bool MainWindow::loadFrameworkFile(const QString& path) {
  const Loaded<FrameworkSpec> f = load_framework(path.toStdString());
  showFieldDiagnostics(f.diagnostics, planPage_->diagnosticsList());
  if (!f.ok()) {
    showPage(Page::Plan);
    return false;
  }
  editInputs(FFramework, tr("Open framework %1").arg(QFileInfo(path).fileName()), [&](PlanInputs& in) {
    in.training.framework = *f.value;
    in.anyFramework = false;
  });
  return true;
}

QStringList MainWindow::exportPlanTo(const QString& dir) {
  QStringList written;
  if (!selected_ || !QDir().mkpath(dir)) return written;
  const Plan plan = currentPlan();
  for (ExportFormat f : {ExportFormat::SmpOptions, ExportFormat::Megatron, ExportFormat::DeepSpeed,
                         ExportFormat::Sbatch}) {
    const ExportedFile e = export_plan(plan, f);
    const QString path = QDir(dir).filePath(QString::fromStdString(e.file_name));
    if (!write_file_atomic(path.toStdString(), e.text).empty()) return {};
    written << path;
  }
  const QString planPath = QDir(dir).filePath(QStringLiteral("plan.yaml"));
  if (save_plan(plan, planPath.toStdString()).empty()) written << planPath;
  return written;
}

void MainWindow::onOpenPlan() {
  const QString f = QFileDialog::getOpenFileName(this, tr("Open plan"), {}, tr("Plan (*.yaml *.yml)"));
  if (!f.isEmpty()) openPlanFile(f);
}

void MainWindow::onSavePlan() {
  if (currentFile_.isEmpty()) onSavePlanAs();
  else savePlanFile(currentFile_);
}

void MainWindow::onSavePlanAs() {
  const QString f = QFileDialog::getSaveFileName(this, tr("Save plan"), QStringLiteral("plan.yaml"),
                                                 tr("Plan (*.yaml *.yml)"));
  if (!f.isEmpty()) savePlanFile(f);
}

void MainWindow::onExport() {
  if (!selected_) {
    planPage_->setMessage(tr("Nothing to export yet: no layout is selected."));
    return;
  }
  QDialog* dialog = createExportDialog();
  dialog->exec();
  delete dialog;
}

QDialog* MainWindow::createExportDialog() {
  auto* dialog = new QDialog(this);
  dialog->setObjectName(QStringLiteral("exportDialog"));
  dialog->setWindowTitle(tr("Export plan"));
  dialog->resize(900, 640);
  auto* lay = new QVBoxLayout(dialog);
  auto* tabs = new QTabWidget(dialog);
  const Plan plan = currentPlan();
  for (ExportFormat f : {ExportFormat::SmpOptions, ExportFormat::Megatron, ExportFormat::DeepSpeed,
                         ExportFormat::Sbatch}) {
    const ExportedFile e = export_plan(plan, f);
    auto* page = new QWidget(tabs);
    auto* v = new QVBoxLayout(page);
    auto* text = new QPlainTextEdit(QString::fromStdString(e.text), page);
    text->setReadOnly(true);
    text->setFont(QFont(QStringLiteral("monospace")));
    v->addWidget(text, 1);
    if (!e.notes.empty()) {
      QStringList notes;
      for (const auto& n : e.notes) notes << QStringLiteral("- ") + QString::fromStdString(n);
      auto* label = new QLabel(tr("Notes:\n") + notes.join(QLatin1Char('\n')), page);
      label->setWordWrap(true);
      v->addWidget(label);
    }
    tabs->addTab(page, QString::fromStdString(e.file_name));
  }
  lay->addWidget(tabs, 1);
  auto* buttons = new QHBoxLayout;
  auto* saveAll = new QPushButton(tr("Save all to folder..."), dialog);
  saveAll->setToolTip(tr("Writes every file above plus plan.yaml into a folder"));
  auto* close = new QPushButton(tr("Close"), dialog);
  buttons->addStretch(1);
  buttons->addWidget(saveAll);
  buttons->addWidget(close);
  lay->addLayout(buttons);
  connect(close, &QPushButton::clicked, dialog, &QDialog::accept);
  connect(saveAll, &QPushButton::clicked, dialog, [this, dialog] {
    const QString dir = QFileDialog::getExistingDirectory(dialog, tr("Export to folder"));
    if (dir.isEmpty()) return;
    const QStringList files = exportPlanTo(dir);
    statusBar()->showMessage(files.isEmpty() ? tr("Export failed") : tr("Wrote %1 files to %2").arg(files.size()).arg(dir),
                             6000);
  });
  return dialog;
}

void MainWindow::addRecentFile(const QString& path) {
  QSettings s;
  QStringList files = s.value(QStringLiteral("recentFiles")).toStringList();
  const QString abs = QFileInfo(path).absoluteFilePath();
  files.removeAll(abs);
  files.prepend(abs);
  while (files.size() > 8) files.removeLast();
  s.setValue(QStringLiteral("recentFiles"), files);
  rebuildRecentMenu();
}

void MainWindow::rebuildRecentMenu() {
  recentMenu_->clear();
  const QStringList files = QSettings().value(QStringLiteral("recentFiles")).toStringList();
  for (const QString& f : files)
    recentMenu_->addAction(QFileInfo(f).fileName(), this, [this, f] { openPlanFile(f); })->setToolTip(f);
  recentMenu_->setEnabled(!files.isEmpty());
}

void MainWindow::closeEvent(QCloseEvent* event) {
  replanTimer_->stop();
  search_->cancel();
  paretoSearch_->cancel();
  search_->waitForFinished();
  paretoSearch_->waitForFinished();
  if (!undo_->isClean()) writeAutosave();  // unsaved edits come back next start
  else QFile::remove(options_.autosavePath);
  event->accept();
}

QStringList MainWindow::saveScreenshots(const QString& dir) {
  QStringList written;
  QDir().mkpath(dir);
  // 256 colours: a third of the bytes of a true-colour PNG, and the text stays sharp.
  auto save = [](const QPixmap& pix, const QString& path) {
    return pix.toImage().convertToFormat(QImage::Format_Indexed8, Qt::ThresholdDither | Qt::AvoidDither).save(path);
  };
  const char* files[kPageCount] = {"model", "cluster", "plan", "timeline", "run", "compare"};
  for (int i = 0; i < kPageCount; ++i) {
    showPage(Page(i));
    QApplication::sendPostedEvents();
    const QString path = QDir(dir).filePath(QStringLiteral("%1-%2.png").arg(i + 1, 2, 10, QLatin1Char('0')).arg(QString::fromUtf8(files[i])));
    if (save(grab(), path)) written << path;
  }
  showPage(Page::Plan);
  if (selected_) {  // the export dialog over the Plan page, on its sbatch tab
    QDialog* dialog = createExportDialog();
    if (auto* tabs = dialog->findChild<QTabWidget*>()) tabs->setCurrentIndex(3);
    dialog->show();
    QApplication::sendPostedEvents();
    const QString path = QDir(dir).filePath(QStringLiteral("%1-export.png").arg(kPageCount + 1, 2, 10, QLatin1Char('0')));
    if (save(dialog->grab(), path)) written << path;
    delete dialog;
  }
  return written;
}

}  // namespace capplan::gui
