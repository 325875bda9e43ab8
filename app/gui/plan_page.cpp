// The Plan page (plan_page.h). The search runs in the host (SearchJob); this page lays out its
// inputs and its answer.
#include "plan_page.h"

#include <QBarCategoryAxis>
#include <QBarSet>
#include <QChart>
#include <QChartView>
#include <QCheckBox>
#include <QComboBox>
#include <QDoubleSpinBox>
#include <QFileDialog>
#include <QFormLayout>
#include <QGridLayout>
#include <QGroupBox>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QHorizontalStackedBarSeries>
#include <QItemSelectionModel>
#include <QLabel>
#include <QLegend>
#include <QLegendMarker>
#include <QLineEdit>
#include <QLineSeries>
#include <QListWidget>
#include <QProgressBar>
#include <QScrollBar>
#include <QPushButton>
#include <QScatterSeries>
#include <QSplitter>
#include <QTableView>
#include <QVBoxLayout>
#include <QValueAxis>
#include <algorithm>
#include <cmath>

#include "item_models.h"
#include "planner/catalog.h"
#include "planner/spec_io.h"
#include "search_job.h"
#ifdef CAPPLAN_GUI_HAVE_RUNTIME
#include "measure_tools.h"
#endif

namespace capplan::gui {

PlanPage::PlanPage(PageHost& host, SearchJob* search, CandidateFilterModel* filter, QWidget* parent)
    : QWidget(parent), host_(host), search_(search), filter_(filter) {
  setObjectName(QStringLiteral("planPage"));
  auto* v = new QVBoxLayout(this);
  auto* top = new QHBoxLayout;
  top->addWidget(buildTraining());
  top->addWidget(buildPins(), 1);
  v->addLayout(top);
#ifdef CAPPLAN_GUI_HAVE_RUNTIME
  profilePicker_ = new DeviceProfilePicker(host_, this);
  v->addWidget(profilePicker_);
#endif
  message_ = new QLabel(this);
  message_->setObjectName(QStringLiteral("planMessage"));
  message_->setWordWrap(true);
  message_->setStyleSheet(QStringLiteral("color: #b3261e;"));
  v->addWidget(message_);
  diagnostics_ = new QListWidget(this);
  diagnostics_->setObjectName(QStringLiteral("planDiagnostics"));
  diagnostics_->setMaximumHeight(90);
  diagnostics_->hide();
  v->addWidget(diagnostics_);
  v->addLayout(buildSearchBar());
  frameworkBests_ = new QLabel(this);
  frameworkBests_->setObjectName(QStringLiteral("frameworkBests"));
  frameworkBests_->setWordWrap(true);
  frameworkBests_->setTextFormat(Qt::RichText);
  frameworkBests_->hide();
  // A preset's name opens its own ranking (the framework set to it), where its best is the top row.
  connect(frameworkBests_, &QLabel::linkActivated, this, [this](const QString& link) {
    if (link.startsWith(QStringLiteral("framework:"))) framework_->setCurrentText(link.mid(10));
  });
  v->addWidget(frameworkBests_);
  v->addWidget(buildResults(), 1);
  connectTraining();
  connectPins();
}

QGroupBox* PlanPage::buildTraining() {
  auto* box = new QGroupBox(tr("Training"), this);
  auto* tf = new QFormLayout(box);
  gbs_ = makeSpin(box, "gbs", 1, 100000000, tr("Global batch: sequences per optimizer step (gbs)"));
  QLabel* gbsErr = makeErrorLabel(box);
  host_.fieldErrors().insert(QStringLiteral("training.gbs"), gbsErr);
  tf->addRow(tr("Global batch"), withError(gbs_, gbsErr));
  trainSeq_ = makeSpin(box, "trainSeq", 0, 10000000,
                       tr("Sequence length the plan trains at, in tokens; 0 = the model's default "
                          "sequence (Model page)"),
                       tr("model's"));
  tf->addRow(tr("Training sequence"), trainSeq_);
  tokens_ = new QLineEdit(box);
  tokens_->setObjectName(QStringLiteral("tokens"));
  tokens_->setToolTip(tr("Tokens to train: 300e9, 300B, 1.3T; empty = 20 per parameter (Hoffmann et al. 2022)"));
  QLabel* tokensErr = makeErrorLabel(box);
  host_.fieldErrors().insert(QStringLiteral("training.tokens"), tokensErr);
  tf->addRow(tr("Tokens"), withError(tokens_, tokensErr));
  precision_ = makeCombo(box, "precision",
                         {QStringLiteral("bf16"), QStringLiteral("fp16"), QStringLiteral("fp32"), QStringLiteral("fp8")},
                         tr("Training precision: mixed precision with fp32 master weights and Adam; fp8: "
                            "Transformer Engine GEMMs (Hopper and newer)"));
  QLabel* precisionErr = makeErrorLabel(box);
  host_.fieldErrors().insert(QStringLiteral("training.precision"), precisionErr);
  tf->addRow(tr("Precision"), withError(precision_, precisionErr));
  QStringList frameworks;
  for (const CatalogEntry& e : catalog_frameworks()) frameworks << QString::fromStdString(e.name);
  frameworks << QStringLiteral("any");
  framework_ = makeCombo(box, "framework", frameworks,
                         tr("Implementation: what the cost model knows about the software stack "
                            "(kernels, overlap, pipeline sends, ZeRO-3 traffic); configs/frameworks/. "
                            "'any' searches every preset and ranks them together"));
  // Each preset's item says what its implementation can run (the search offers only that).
  for (int i = 0; i < framework_->count(); ++i) {
    const Loaded<FrameworkSpec> f = load_framework(framework_->itemText(i).toStdString());
    if (!f.value) continue;
    const CatalogEntry* e = find_catalog_framework(f.value->name);
    framework_->setItemData(i, QString::fromStdString((e ? e->summary + "\n" : std::string()) + framework_layouts(*f.value)),
                            Qt::ToolTipRole);
  }
  auto* openFramework = new QPushButton(tr("File..."), box);
  openFramework->setObjectName(QStringLiteral("openFramework"));
  openFramework->setToolTip(tr("Cost the plan with a framework file of one's own (the format of configs/frameworks/; "
                               "`capplan frameworks NAME` prints a preset's file to start from)"));
  connect(openFramework, &QPushButton::clicked, this, [this] {
    const QString f = QFileDialog::getOpenFileName(this, tr("Open framework"), {}, tr("Framework (*.yaml *.yml)"));
    if (!f.isEmpty()) emit frameworkFileChosen(f);
  });
  auto* frameworkRow = new QHBoxLayout;
  frameworkRow->addWidget(framework_, 1);
  frameworkRow->addWidget(openFramework);
  tf->addRow(tr("Framework"), frameworkRow);
  attention_ = makeCombo(box, "attention",
                         {QStringLiteral("default"), QStringLiteral("eager"), QStringLiteral("fused"), QStringLiteral("flash")},
                         tr("Attention kernel: default = the framework's; eager (Hugging Face), fused "
                            "(Megatron softmax), flash (FlashAttention-2/3, Ampere and newer)"));
  QLabel* attentionErr = makeErrorLabel(box);
  host_.fieldErrors().insert(QStringLiteral("training.attention"), attentionErr);
  tf->addRow(tr("Attention"), withError(attention_, attentionErr));
  optimizer_ = makeCombo(box, "optimizer", {QStringLiteral("adam"), QStringLiteral("sgd")},
                         tr("Optimizer: Adam (two moments per parameter) or SGD with momentum"));
  // ZeRO-Offload / ZeRO-Infinity / FSDP cpu_offload: state in host memory, checked against the
  // cluster's host_memory_gib (the estimate's host/node figure). On the optimizer's row, so the
  // candidate table keeps its rows at 1280x800.
  offloadParams_ = new QCheckBox(tr("offload parameters"), box);
  offloadParams_->setObjectName(QStringLiteral("offloadParams"));
  offloadParams_->setToolTip(tr("Offload parameters to host memory (ZeRO-Infinity, FSDP cpu_offload): each layer's "
                                "weights come over PCIe before its passes; with ZeRO-3 the optimizer steps on the CPU"));
  offloadOptimizer_ = new QCheckBox(tr("offload optimizer"), box);
  offloadOptimizer_->setObjectName(QStringLiteral("offloadOptimizer"));
  offloadOptimizer_->setToolTip(tr("Offload the optimizer state and step to the CPU (ZeRO-Offload): gradients down "
                                   "and weights up over PCIe"));
  auto* offloadRow = new QHBoxLayout;
  offloadRow->addWidget(optimizer_);
  offloadRow->addWidget(offloadParams_);
  offloadRow->addWidget(offloadOptimizer_);
  QLabel* offloadErr = makeErrorLabel(box);
  host_.fieldErrors().insert(QStringLiteral("training.offload_params"), offloadErr);
  host_.fieldErrors().insert(QStringLiteral("training.offload_optimizer"), offloadErr);
  offloadRow->addWidget(offloadErr, 1);
  tf->addRow(tr("Optimizer"), offloadRow);
  objective_ = makeCombo(box, "objective", {QStringLiteral("time"), QStringLiteral("cost"), QStringLiteral("throughput")},
                         tr("Ranking: fewest days (time), fewest dollars (cost) or most samples/s (throughput)"));
  auto limitSpin = [box](const char* name, const QString& none, const QString& prefix, const QString& suffix,
                         double max, const QString& tip) {
    auto* s = new QDoubleSpinBox(box);
    s->setObjectName(QString::fromUtf8(name));
    s->setRange(0, max);
    s->setDecimals(name == std::string("budget") ? 0 : 1);
    s->setSpecialValueText(none);
    s->setPrefix(prefix);
    s->setSuffix(suffix);
    s->setToolTip(tip);
    s->setKeyboardTracking(false);
    return s;
  };
  deadline_ = limitSpin("deadline", tr("no deadline"), tr("within "), tr(" days"), 1e6,
                        tr("Deadline: only layouts that train within this many days (with the cost objective: "
                           "the cheapest plan that finishes in time); 0 = none"));
  budget_ = limitSpin("budget", tr("no budget"), tr("under $"), QString(), 1e12,
                      tr("Budget: only layouts that cost at most this many dollars (with the time objective: "
                         "the fastest plan under it); needs the cluster's price; 0 = none"));
  budget_->setSingleStep(100000);
  // The limits on their own row: with the objective beside them the box was too wide for a
  // 1280-pixel screen.
  tf->addRow(tr("Objective"), objective_);
  auto* limitsRow = new QHBoxLayout;
  limitsRow->addWidget(deadline_);
  limitsRow->addWidget(budget_);
  tf->addRow(tr("Limits"), limitsRow);
  memoryMargin_ = limitSpin("memoryMargin", tr("none"), QString(), tr(" % kept free"), 50,
                            tr("Memory safety margin: a layout fits only when this share of the GPU's memory "
                               "stays free (5 %: 79.0 of 80 GiB is flagged)"));
  tf->addRow(tr("Memory margin"), memoryMargin_);
  return box;
}

void PlanPage::connectTraining() {
  connect(trainSeq_, &QSpinBox::valueChanged, this, [this](int v) {
    if (v == host_.inputs().training.seq_len) return;
    host_.editInputs(FTrainSeq, tr("Edit training sequence"), [&](PlanInputs& in) { in.training.seq_len = v; });
  });
  connect(framework_, &QComboBox::currentTextChanged, this, [this](const QString& t) {
    if (t == QLatin1String("any")) {
      if (host_.inputs().anyFramework) return;
      host_.editInputs(FFramework, tr("Edit framework"), [&](PlanInputs& in) { in.anyFramework = true; });
      return;
    }
    // An item of a framework that is no preset selects its spec (its name is no file to read).
    const auto other = otherFrameworks_.find(t.toStdString());
    Loaded<FrameworkSpec> f;
    if (other != otherFrameworks_.end())
      f.value = other->second;
    else
      f = load_framework(t.toStdString());
    if (!f.value || (f.value->name == host_.inputs().training.framework.name && !host_.inputs().anyFramework)) return;
    host_.editInputs(FFramework, tr("Edit framework"), [&](PlanInputs& in) {
      in.training.framework = *f.value;
      in.anyFramework = false;
    });
  });
  connect(attention_, &QComboBox::currentTextChanged, this, [this](const QString& t) {
    const std::optional<Attention> a = parse_attention(t.toStdString());
    if (a == host_.inputs().training.attention) return;
    host_.editInputs(FAttention, tr("Edit attention"), [&](PlanInputs& in) { in.training.attention = a; });
  });
  connect(gbs_, &QSpinBox::valueChanged, this, [this](int val) {
    host_.editInputs(FGbs, tr("Edit global batch"), [&](PlanInputs& in) { in.training.gbs = val; });
  });
  connect(tokens_, &QLineEdit::editingFinished, this, [this] {
    const QString t = tokens_->text().trimmed();
    QLabel* err = host_.fieldErrors().value(QStringLiteral("training.tokens"));
    double tokens = 0;
    if (!t.isEmpty()) {
      const std::optional<double> n = parse_number(t.toStdString());
      if (!n || *n < 0) {
        showFieldError(err, tr("not a number of tokens: '%1' (try 300e9 or 300B)").arg(t));
        return;  // the text stays as typed
      }
      tokens = *n;
    }
    err->hide();
    if (tokens == host_.inputs().training.tokens) return;
    host_.editInputs(FTokens, tr("Edit tokens"), [&](PlanInputs& in) { in.training.tokens = tokens; });
  });
  connect(optimizer_, &QComboBox::currentTextChanged, this, [this](const QString& t) {
    const std::optional<Optimizer> o = parse_optimizer(t.toStdString());
    if (!o || *o == host_.inputs().training.optimizer) return;
    host_.editInputs(FOptimizer, tr("Edit optimizer"), [&](PlanInputs& in) { in.training.optimizer = *o; });
  });
  connect(offloadParams_, &QCheckBox::toggled, this, [this](bool on) {
    if (on == host_.inputs().training.offload_params) return;
    host_.editInputs(FOffloadParams, tr("Edit parameter offload"), [&](PlanInputs& in) { in.training.offload_params = on; });
  });
  connect(offloadOptimizer_, &QCheckBox::toggled, this, [this](bool on) {
    if (on == host_.inputs().training.offload_optimizer) return;
    host_.editInputs(FOffloadOptimizer, tr("Edit optimizer offload"),
                     [&](PlanInputs& in) { in.training.offload_optimizer = on; });
  });
  connect(precision_, &QComboBox::currentTextChanged, this, [this](const QString& t) {
    host_.editInputs(FPrecision, tr("Edit precision"), [&](PlanInputs& in) {
      if (auto p = parse_precision(t.toStdString())) in.training.precision = *p;
    });
  });
  connect(deadline_, &QDoubleSpinBox::valueChanged, this, [this](double v) {
    host_.editInputs(FDeadline, tr("Edit deadline"), [&](PlanInputs& in) { in.deadlineDays = v; });
  });
  connect(budget_, &QDoubleSpinBox::valueChanged, this, [this](double v) {
    host_.editInputs(FBudget, tr("Edit budget"), [&](PlanInputs& in) { in.budgetUsd = v; });
  });
  connect(memoryMargin_, &QDoubleSpinBox::valueChanged, this, [this](double v) {
    host_.editInputs(FMemoryMargin, tr("Edit memory margin"), [&](PlanInputs& in) { in.memoryMargin = v / 100.0; });
  });
  connect(objective_, &QComboBox::currentTextChanged, this, [this](const QString& t) {
    host_.editInputs(FObjective, tr("Edit objective"), [&](PlanInputs& in) {
      if (auto o = parse_objective(t.toStdString())) in.objective = *o;
    });
  });
}

QGroupBox* PlanPage::buildPins() {
  auto* box = new QGroupBox(tr("Knobs (pin a value or leave 'any' for the search)"), this);
  auto* grid = new QGridLayout(box);
  pinDp_ = makeSpin(box, "pinDp", 0, 100000, tr("dp: data-parallel degree (model replicas)"), tr("any"));
  pinTp_ = makeSpin(box, "pinTp", 0, 1024, tr("tp: tensor-parallel degree; must divide heads and kv_heads"), tr("any"));
  pinPp_ = makeSpin(box, "pinPp", 0, 100000, tr("pp: pipeline stages; at most the number of layers"), tr("any"));
  pinVp_ = makeSpin(box, "pinVp", 0, 1024, tr("vp: virtual stages per pipeline stage (interleaved schedule only)"), tr("any"));
  pinMbs_ = makeSpin(box, "pinMbs", 0, 100000, tr("mbs: micro-batch size in sequences; gbs must divide by dp x mbs"), tr("any"));
  const QStringList anyZero{QStringLiteral("any"), QStringLiteral("0"), QStringLiteral("1"), QStringLiteral("2"), QStringLiteral("3")};
  pinZero_ = makeCombo(box, "pinZero", anyZero, tr("zero: 1 shards optimizer state over dp (SageMaker shard_optimizer_state), 2 also gradients, 3 also weights"));
  pinRecompute_ = makeCombo(box, "pinRecompute", {QStringLiteral("any"), QStringLiteral("none"), QStringLiteral("selective"), QStringLiteral("full")},
                            tr("recompute: activation checkpointing; selective recomputes the attention core, full the whole layer"));
  pinSchedule_ = makeCombo(box, "pinSchedule", {QStringLiteral("any"), QStringLiteral("gpipe"), QStringLiteral("1f1b"), QStringLiteral("interleaved")},
                           tr("schedule: pipeline schedule (GPipe, 1F1B, interleaved 1F1B with vp)"));
  pinOrder_ = makeCombo(box, "pinOrder", {QStringLiteral("any"), QStringLiteral("DPT"), QStringLiteral("DTP"), QStringLiteral("PDT"),
                                             QStringLiteral("PTD"), QStringLiteral("TDP"), QStringLiteral("TPD")},
                        tr("order: placement, a permutation of D, P, T; right-most varies fastest over ranks (DPT = SageMaker 'cluster', TPD = 'spread')"));
  pinOffload_ = makeCombo(box, "pinOffload", {QStringLiteral("any"), QStringLiteral("off"), QStringLiteral("on")},
                          tr("offload: move checkpointed activations to host memory over PCIe"));
  pinSp_ = makeCombo(box, "pinSp", {QStringLiteral("any"), QStringLiteral("off"), QStringLiteral("on")},
                     tr("sp: sequence parallelism, norms and dropout split along the sequence (needs tp > 1)"));
  pinEp_ = makeSpin(box, "pinEp", 0, 100000, tr("ep: expert-parallel degree, the experts of an MoE layer over ep ranks of dp x cp; must divide the experts"), tr("any"));
  pinCp_ = makeSpin(box, "pinCp", 0, 100000, tr("cp: context-parallel degree, the sequence split over cp ranks (attention as a ring); 2 x cp must divide the sequence"), tr("any"));
  struct PinCell { const char* label; QWidget* w; };
  const PinCell cells[] = {{"dp", pinDp_}, {"tp", pinTp_}, {"pp", pinPp_}, {"vp", pinVp_}, {"mbs", pinMbs_},
                           {"zero", pinZero_}, {"recompute", pinRecompute_}, {"schedule", pinSchedule_},
                           {"order", pinOrder_}, {"offload", pinOffload_}, {"sp", pinSp_}, {"ep", pinEp_},
                           {"cp", pinCp_}};
  // Four knobs a row (four rows, no taller than the training box beside them): six a row made
  // the page too wide for a 1280-pixel screen.
  constexpr int kPerRow = 4;
  for (int i = 0; i < int(std::size(cells)); ++i) {
    auto* l = new QLabel(QString::fromUtf8(cells[i].label), box);
    l->setToolTip(cells[i].w->toolTip());
    grid->addWidget(l, (i / kPerRow) * 2, i % kPerRow);
    grid->addWidget(cells[i].w, (i / kPerRow) * 2 + 1, i % kPerRow);
  }
  showInfeasible_ = new QCheckBox(tr("show layouts that do not fit"), box);
  showInfeasible_->setObjectName(QStringLiteral("showInfeasible"));
  showInfeasible_->setToolTip(tr("Also rank layouts that exceed the GPU's memory, with the reason"));
  const int lastRow = (int(std::size(cells)) - 1) / kPerRow * 2 + 1;
  grid->addWidget(showInfeasible_, lastRow, kPerRow - 1);
  grid->setRowStretch(lastRow + 1, 1);  // the rows stay together at the top when the box is taller
  return box;
}

void PlanPage::connectPins() {
  auto pinInt = [this](QSpinBox* s, FieldId id, std::optional<int> LayoutPins::*member) {
    connect(s, &QSpinBox::valueChanged, this, [this, id, member](int val) {
      host_.editInputs(id, tr("Pin knob"), [&](PlanInputs& in) {
        in.pins.*member = val > 0 ? std::optional<int>(val) : std::nullopt;
      });
    });
  };
  pinInt(pinDp_, FPinDp, &LayoutPins::dp);
  pinInt(pinTp_, FPinTp, &LayoutPins::tp);
  pinInt(pinPp_, FPinPp, &LayoutPins::pp);
  pinInt(pinVp_, FPinVp, &LayoutPins::vp);
  pinInt(pinMbs_, FPinMbs, &LayoutPins::mbs);
  pinInt(pinEp_, FPinEp, &LayoutPins::ep);
  pinInt(pinCp_, FPinCp, &LayoutPins::cp);
  auto pinBool = [this](QComboBox* c, FieldId id, std::optional<bool> LayoutPins::*member) {
    connect(c, &QComboBox::currentIndexChanged, this, [this, id, member](int i) {
      host_.editInputs(id, tr("Pin knob"), [&](PlanInputs& in) {
        in.pins.*member = i == 0 ? std::nullopt : std::optional<bool>(i == 2);
      });
    });
  };
  pinBool(pinOffload_, FPinOffload, &LayoutPins::offload);
  pinBool(pinSp_, FPinSp, &LayoutPins::sp);
  connect(pinZero_, &QComboBox::currentIndexChanged, this, [this](int i) {
    host_.editInputs(FPinZero, tr("Pin zero"), [&](PlanInputs& in) {
      in.pins.zero = i > 0 ? std::optional<int>(i - 1) : std::nullopt;
    });
  });
  connect(pinRecompute_, &QComboBox::currentTextChanged, this, [this](const QString& t) {
    host_.editInputs(FPinRecompute, tr("Pin recompute"), [&](PlanInputs& in) { in.pins.recompute = parse_recompute(t.toStdString()); });
  });
  connect(pinSchedule_, &QComboBox::currentTextChanged, this, [this](const QString& t) {
    host_.editInputs(FPinSchedule, tr("Pin schedule"), [&](PlanInputs& in) { in.pins.schedule = parse_schedule(t.toStdString()); });
  });
  connect(pinOrder_, &QComboBox::currentTextChanged, this, [this](const QString& t) {
    host_.editInputs(FPinOrder, tr("Pin order"), [&](PlanInputs& in) {
      in.pins.order = t == QLatin1String("any") ? std::nullopt : std::optional<std::string>(t.toStdString());
    });
  });
  connect(showInfeasible_, &QCheckBox::toggled, this, [this](bool on) {
    filter_->setFitsOnly(!on);
    host_.editInputs(FInfeasible, tr("Show layouts that do not fit"), [&](PlanInputs& in) { in.showInfeasible = on; });
  });
}

QLayout* PlanPage::buildSearchBar() {
  auto* bar = new QHBoxLayout;
  progress_ = new QProgressBar(this);
  progress_->setObjectName(QStringLiteral("searchProgress"));
  // Shown only while a search runs, with its text ("searching 37 %"); hidden when idle.
  progress_->setTextVisible(true);
  progress_->setFormat(tr("searching %p %"));
  progress_->setMaximumWidth(260);
  progress_->setToolTip(tr("Search progress (runs off the GUI thread)"));
  progress_->hide();
  cancelButton_ = new QPushButton(tr("Cancel"), this);
  cancelButton_->setObjectName(QStringLiteral("cancelSearch"));
  cancelButton_->setToolTip(tr("Stop the search and keep the best layouts found so far (Esc)"));
  cancelButton_->setEnabled(false);
  auto* replanButton = new QPushButton(tr("Re-plan"), this);
  replanButton->setToolTip(tr("Search again with the current inputs (F5)"));
  searchStatus_ = new QLabel(this);
  searchStatus_->setObjectName(QStringLiteral("searchStatus"));
  searchStatus_->setSizePolicy(QSizePolicy::Ignored, QSizePolicy::Preferred);
  filterEdit_ = new QLineEdit(this);
  filterEdit_->setObjectName(QStringLiteral("filter"));
  filterEdit_->setPlaceholderText(tr("Filter rows (e.g. interleaved, DPT)"));
  filterEdit_->setClearButtonEnabled(true);
  filterEdit_->setToolTip(tr("Shows only rows with a cell containing this text"));
  filterEdit_->setMaximumWidth(280);
  // Room for the whole placeholder, the clear button and the frame.
  filterEdit_->setMinimumWidth(filterEdit_->fontMetrics().horizontalAdvance(filterEdit_->placeholderText()) + 40);
  bar->addWidget(progress_);
  bar->addWidget(cancelButton_);
  bar->addWidget(replanButton);
  bar->addWidget(searchStatus_, 1);
  bar->addWidget(filterEdit_);
  connect(cancelButton_, &QPushButton::clicked, this, &PlanPage::cancelRequested);
  connect(replanButton, &QPushButton::clicked, this, &PlanPage::replanRequested);
  connect(filterEdit_, &QLineEdit::textChanged, filter_, &QSortFilterProxyModel::setFilterFixedString);
  connect(search_, &SearchJob::progressChanged, this, [this](int done, int total) {
    progress_->setMaximum(std::max(1, total));
    progress_->setValue(done);
  });
  filter_->setFitsOnly(true);
  return bar;
}

QWidget* PlanPage::buildResults() {
  auto* split = new QSplitter(Qt::Vertical, this);
  split->addWidget(buildTable(split));

  auto* lower = new QWidget(split);
  auto* lh = new QHBoxLayout(lower);
  lh->setContentsMargins(0, 0, 0, 0);
  details_ = new QLabel(lower);
  details_->setObjectName(QStringLiteral("details"));
  details_->setTextFormat(Qt::RichText);
  details_->setWordWrap(true);
  details_->setAlignment(Qt::AlignTop | Qt::AlignLeft);
  details_->setMinimumWidth(260);
  details_->setMaximumWidth(320);
  details_->setTextInteractionFlags(Qt::TextSelectableByMouse);
  memoryChart_ = new ChartArea(lower, "memoryChart");
  memoryChart_->setToolTip(tr("Memory per GPU by kind against the GPU's capacity"));
  timeChart_ = new ChartArea(lower, "timeChart");
  timeChart_->setToolTip(tr("Step time by term on the critical path (predicted; simulated when available)"));
  paretoChart_ = new ChartArea(lower, "paretoChart");
  paretoChart_->setToolTip(tr("Best layout per node count: days vs dollars; the selection is highlighted"));
  for (ChartArea* c : {memoryChart_, timeChart_, paretoChart_}) c->showMessage(tr("No layout selected yet."));
  lh->addWidget(details_);
  lh->addWidget(memoryChart_, 1);
  lh->addWidget(timeChart_, 1);
  lh->addWidget(paretoChart_, 1);
  split->addWidget(lower);
  split->setStretchFactor(0, 1);
  split->setStretchFactor(1, 1);
  return split;
}

// Two views over the one model: the key columns (rank to layout) on the left, which never scroll
// sideways, and the other columns on the right; they share the selection and the vertical scroll.
QWidget* PlanPage::buildTable(QWidget* parent) {
  auto* box = new QWidget(parent);
  auto* row = new QHBoxLayout(box);
  row->setContentsMargins(0, 0, 0, 0);
  row->setSpacing(0);
  table_ = new QTableView(box);
  table_->setObjectName(QStringLiteral("candidateTable"));
  moreTable_ = new QTableView(box);
  moreTable_->setObjectName(QStringLiteral("candidateTableMore"));
  for (QTableView* t : {table_, moreTable_}) {
    t->setModel(filter_);
    t->setSortingEnabled(true);
    t->setSelectionBehavior(QAbstractItemView::SelectRows);
    t->setSelectionMode(QAbstractItemView::SingleSelection);
    t->verticalHeader()->hide();
    t->verticalHeader()->setDefaultSectionSize(22);
    t->setAlternatingRowColors(true);
    // Column widths from the first 50 rows (in rank order, where the values share their format),
    // not from all of them: measuring 200 rows of text on every re-plan cost most of its redraw.
    t->horizontalHeader()->setResizeContentsPrecision(50);
  }
  moreTable_->horizontalHeader()->setSectionResizeMode(QHeaderView::ResizeToContents);
  table_->sortByColumn(CandidateTableModel::Rank, Qt::AscendingOrder);
  moreTable_->setSelectionModel(table_->selectionModel());
  moreTable_->horizontalHeader()->setStretchLastSection(true);
  for (int c = 0; c < CandidateTableModel::ColumnCount; ++c) {
    const bool key = c < CandidateTableModel::KeyColumnCount;
    table_->setColumnHidden(c, !key);
    moreTable_->setColumnHidden(c, key);
  }
  table_->setHorizontalScrollBarPolicy(Qt::ScrollBarAlwaysOff);
  table_->setVerticalScrollBarPolicy(Qt::ScrollBarAlwaysOff);
  table_->setSizePolicy(QSizePolicy::Fixed, QSizePolicy::Expanding);
  connect(moreTable_->verticalScrollBar(), &QScrollBar::valueChanged, table_->verticalScrollBar(), &QScrollBar::setValue);
  connect(table_->verticalScrollBar(), &QScrollBar::valueChanged, moreTable_->verticalScrollBar(), &QScrollBar::setValue);
  // One sort order for both headers.
  auto syncSort = [](QHeaderView* to) {
    return [to](int section, Qt::SortOrder order) {
      if (to->sortIndicatorSection() != section || to->sortIndicatorOrder() != order) to->setSortIndicator(section, order);
    };
  };
  connect(table_->horizontalHeader(), &QHeaderView::sortIndicatorChanged, this, syncSort(moreTable_->horizontalHeader()));
  connect(moreTable_->horizontalHeader(), &QHeaderView::sortIndicatorChanged, this, syncSort(table_->horizontalHeader()));
  // The key view is as wide as its columns, measured again whenever the rows change.
  connect(filter_, &QAbstractItemModel::modelReset, this, &PlanPage::fitKeyColumns);
  connect(filter_, &QAbstractItemModel::layoutChanged, this, &PlanPage::fitKeyColumns);
  connect(filter_, &QAbstractItemModel::rowsInserted, this, &PlanPage::fitKeyColumns);
  connect(filter_, &QAbstractItemModel::rowsRemoved, this, &PlanPage::fitKeyColumns);
  connect(table_->selectionModel(), &QItemSelectionModel::selectionChanged, this, &PlanPage::selectionChanged);
  row->addWidget(table_);
  row->addWidget(moreTable_, 1);
  fitKeyColumns();
  return box;
}

void PlanPage::fitKeyColumns() {
  // Only the key columns: the others are hidden in this view.
  for (int c = 0; c < CandidateTableModel::KeyColumnCount; ++c) table_->resizeColumnToContents(c);
  int w = 2 * table_->frameWidth();
  for (int c = 0; c < CandidateTableModel::KeyColumnCount; ++c) w += table_->horizontalHeader()->sectionSize(c);
  table_->setFixedWidth(w);
}

void PlanPage::setSearching(bool on) {
  if (on) {
    progress_->setValue(0);
    progress_->setMaximum(1000);
  } else {
    progress_->setValue(progress_->maximum());
  }
  progress_->setVisible(on);
  cancelButton_->setEnabled(on);
}

void PlanPage::setStatus(const QString& text) { searchStatus_->setText(text); }

void PlanPage::setFrameworkBests(const std::vector<FrameworkBest>& bests, Objective objective) {
  frameworkBests_->setVisible(!bests.empty());
  if (bests.empty()) return;
  const bool priced = std::any_of(bests.begin(), bests.end(),
                                  [](const FrameworkBest& f) { return f.best && std::isfinite(f.best->cost_usd); });
  const QString measure = QString::fromUtf8(objective_measure(objective, priced));
  QStringList parts, tips;
  for (const FrameworkBest& f : bests) {
    const QString name = QString::fromStdString(f.framework);
    const QString link = QStringLiteral("<a href=\"framework:%1\">%1</a>").arg(name.toHtmlEscaped());
    if (!f.best) {
      parts << tr("%1 none").arg(link);
      tips << tr("%1: no layout: %2").arg(name, QString::fromStdString(f.reason));
      continue;
    }
    const Estimate& e = *f.best;
    const QString days = QString::number(e.days_to_train, 'f', 1);
    if (!e.fits) {
      parts << tr("%1 none fits").arg(link);
      tips << tr("%1: none fits; its best, %2, does not fit: %3")
                  .arg(name, compactLayout(e.layout), QString::fromStdString(e.reason));
      continue;
    }
    // "~": its band overlaps the best one's, as good as the best within the model's error.
    parts << tr("%1 x%2%3").arg(link, QString::number(f.vs_best, 'f', 2),
                                e.as_good_as_best && &f != &bests.front() ? QStringLiteral(" ~") : QString());
    tips << tr("%1 (%2 attention): %3 on %4 nodes, step %5 s, %6 days, %7")
                .arg(name, QString::fromUtf8(to_string(e.attention)), compactLayout(e.layout), QString::number(e.nodes),
                     QString::number(e.step_time_s, 'f', 3), days, formatDollars(e.cost_usd));
  }
  frameworkBests_->setText(tr("Best per framework (%1 over the best's): %2").arg(measure, parts.join(QStringLiteral(", "))));
  frameworkBests_->setToolTip(tr("A name ranks that framework alone; '~': as good as the best within the model's error.\n") +
                              tips.join(QLatin1Char('\n')));
}

void PlanPage::setStale(bool stale) {
  if (stale == stale_) return;
  stale_ = stale;
  const QString style = stale ? QStringLiteral("QTableView { color: palette(mid); }") : QString();
  for (QTableView* t : {table_, moreTable_}) {
    t->setStyleSheet(style);
    t->setProperty("stale", stale);
    t->setToolTip(stale ? tr("Stale: these results are for the last valid inputs; fix the fields marked in red to re-plan")
                        : QString());
  }
  searchStatus_->setText(stale ? tr("Stale: the results below are for the last valid inputs") : QString());
  searchStatus_->setStyleSheet(stale ? QStringLiteral("color: #b3261e; font-weight: bold;") : QString());
}

void PlanPage::setMessage(const QString& text) { message_->setText(text); }

void PlanPage::setSimulatedStep(const TimeBreakdown& breakdown, double stepS) {
  simulatedBreakdown_ = breakdown;
  simulatedStepS_ = stepS;
  if (const std::optional<Estimate>& selected = host_.selectedEstimate()) refreshTimeChart(*selected);
}

void PlanPage::syncFromInputs(const PlanInputs& in) {
#ifdef CAPPLAN_GUI_HAVE_RUNTIME
  profilePicker_->syncFromInputs(in);
#endif
  setIfDifferent(gbs_, int(in.training.gbs));
  setIfDifferent(trainSeq_, in.training.seq_len);
  trainSeq_->setSpecialValueText(tr("model's (%1)").arg(in.model.seq_len));
  if (!tokens_->hasFocus()) {
    tokens_->setText(formatTokens(in.training.tokens));
    host_.fieldErrors().value(QStringLiteral("training.tokens"))->hide();
  }
  setComboText(precision_, QString::fromUtf8(to_string(in.training.precision)));
  const QString fwName = QString::fromStdString(in.training.framework.name);
  if (!in.anyFramework && !find_catalog_framework(in.training.framework.name)) {
    otherFrameworks_[in.training.framework.name] = in.training.framework;
    if (framework_->findText(fwName) < 0) {
      framework_->addItem(fwName);
      framework_->setItemData(framework_->count() - 1,
                              tr("Not a preset: a framework file's spec\n") +
                                  QString::fromStdString(framework_layouts(in.training.framework)),
                              Qt::ToolTipRole);
    }
  }
  setComboText(framework_, in.anyFramework ? QStringLiteral("any") : fwName);
  // "default" says what it is here: the framework's kernel, or the fused softmax where that is
  // FlashAttention and this GPU or head size cannot run it (Scenario::attention); with any
  // framework, each one's own.
  Scenario here;
  here.model = in.model;
  here.cluster = in.cluster;
  here.training = in.training;
  here.training.attention.reset();
  attention_->setItemText(0, in.anyFramework ? tr("default")
                                             : tr("default (%1)").arg(QString::fromUtf8(to_string(here.attention()))));
  attention_->setItemData(0, QString::fromStdString(here.attention_fallback()), Qt::ToolTipRole);
  if (in.training.attention)
    setComboText(attention_, QString::fromUtf8(to_string(*in.training.attention)));
  else
    attention_->setCurrentIndex(0);
  setComboText(optimizer_, QString::fromUtf8(to_string(in.training.optimizer)));
  if (offloadParams_->isChecked() != in.training.offload_params) offloadParams_->setChecked(in.training.offload_params);
  if (offloadOptimizer_->isChecked() != in.training.offload_optimizer)
    offloadOptimizer_->setChecked(in.training.offload_optimizer);
  for (const char* key : {"training.precision", "training.attention", "training.offload_params"})
    host_.fieldErrors().value(QString::fromUtf8(key))->hide();  // the next plan shows what is still wrong
  setComboText(objective_, QString::fromUtf8(to_string(in.objective)));
  if (deadline_->value() != in.deadlineDays) deadline_->setValue(in.deadlineDays);
  if (budget_->value() != in.budgetUsd) budget_->setValue(in.budgetUsd);
  if (std::abs(memoryMargin_->value() - in.memoryMargin * 100.0) > 1e-9) memoryMargin_->setValue(in.memoryMargin * 100.0);
  setIfDifferent(pinDp_, in.pins.dp.value_or(0));
  setIfDifferent(pinTp_, in.pins.tp.value_or(0));
  setIfDifferent(pinPp_, in.pins.pp.value_or(0));
  setIfDifferent(pinVp_, in.pins.vp.value_or(0));
  setIfDifferent(pinMbs_, in.pins.mbs.value_or(0));
  setIfDifferent(pinEp_, in.pins.ep.value_or(0));
  setIfDifferent(pinCp_, in.pins.cp.value_or(0));
  pinZero_->setCurrentIndex(in.pins.zero ? *in.pins.zero + 1 : 0);
  setComboText(pinRecompute_, in.pins.recompute ? QString::fromUtf8(to_string(*in.pins.recompute)) : QStringLiteral("any"));
  setComboText(pinSchedule_, in.pins.schedule ? QString::fromUtf8(to_string(*in.pins.schedule)) : QStringLiteral("any"));
  setComboText(pinOrder_, in.pins.order ? QString::fromStdString(*in.pins.order) : QStringLiteral("any"));
  pinOffload_->setCurrentIndex(in.pins.offload ? (*in.pins.offload ? 2 : 1) : 0);
  pinSp_->setCurrentIndex(in.pins.sp ? (*in.pins.sp ? 2 : 1) : 0);
  showInfeasible_->setChecked(in.showInfeasible);
  filter_->setFitsOnly(!in.showInfeasible);
  host_.fieldErrors().value(QStringLiteral("training.gbs"))->hide();
}

namespace {
// The model's error band (p10-p90) of the step, the days and the dollars, where the estimate has
// one (the table shades the rows whose band overlaps the best one's).
QString bandText(const Estimate& e) {
  if (!(e.step_time_s_p90 > e.step_time_s_p10)) return {};
  return PlanPage::tr("<b>Band</b> p10-p90 (the model's error): step %1 to %2,<br>%3 to %4 days, %5 to %6<br>")
      .arg(formatSeconds(e.step_time_s_p10), formatSeconds(e.step_time_s_p90))
      .arg(e.days_to_train_p10, 0, 'f', 1)
      .arg(e.days_to_train_p90, 0, 'f', 1)
      .arg(formatDollars(e.cost_usd_p10), formatDollars(e.cost_usd_p90));
}
}  // namespace

void PlanPage::showSelection() {
  simulatedBreakdown_.reset();
  const std::optional<Estimate>& selected = host_.selectedEstimate();
  if (!selected) {
    details_->setText(tr("<i>No layout selected.</i>"));
    return;
  }
  const Estimate& e = *selected;
  const Layout& l = e.layout;
  const MemoryBytes& m = e.memory_per_gpu_bytes;
  QString fits = e.fits ? tr("<span style='color:#1b7f3b'>fits</span>")
                        : tr("<span style='color:#b3261e'>does not fit: %1</span>").arg(htmlEscape(e.reason));
  QString text =
      tr("<b>%1 nodes, %2 GPUs</b><br>dp %3 &middot; tp %4 &middot; pp %5 &middot; vp %6 &middot; mbs %7<br>"
         "zero %8 &middot; recompute %9 &middot; %10 &middot; %11<br>%12 micro-batches, offload %13, sp %14<br><br>"
         "<b>Step</b> %15 &middot; <b>%16</b> samples/s<br><b>Tokens/s</b> %17<br>"
         "<b>MFU</b> %18% &middot; bubble %19%<br><b>Days</b> %20%21<br><b>Cost</b> %22<br>%27"
         "<b>Memory</b> %23 of %24 GiB per GPU, %25%26")
          .arg(e.nodes).arg(e.gpus).arg(l.dp).arg(l.tp).arg(l.pp).arg(l.vp).arg(l.mbs).arg(l.zero)
          .arg(QString::fromUtf8(to_string(l.recompute)), QString::fromStdString(l.order),
               QString::fromUtf8(to_string(l.schedule)))
          .arg(e.num_microbatches)
          .arg(l.offload ? tr("on") : tr("off"), l.sp ? tr("on") : tr("off"), formatSeconds(e.step_time_s))
          .arg(e.samples_per_s, 0, 'f', 1)
          .arg(formatCount(e.tokens_per_s))
          .arg(e.mfu * 100, 0, 'f', 1)
          .arg(e.bubble_fraction * 100, 0, 'f', 1)
          .arg(e.days_to_train, 0, 'f', 1)
          .arg(e.tokens_defaulted ? tr(" (tokens = 20 per parameter)") : QString())
          .arg(formatDollars(e.cost_usd))
          .arg(m.total / kGiB, 0, 'f', 1)
          .arg(m.capacity / kGiB, 0, 'f', 0)
          .arg(fits)
          .arg(l.cp > 1 || l.ep > 1
                   ? tr("<br><b>Context / expert parallelism</b> cp %1 &middot; ep %2 &middot; all-to-alls %3 &middot; ring %4")
                         .arg(l.cp).arg(l.ep).arg(formatSeconds(e.breakdown_s.ep_comm), formatSeconds(e.breakdown_s.cp_comm))
                   : QString())
          .arg(bandText(e));
  if (!e.attention_fallback.empty())
    text += tr("<br><b>Attention</b> %1").arg(htmlEscape(e.attention_fallback));
  if (e.host_memory_per_node_bytes > 0)
    text += tr("<br><b>Host memory</b> %1 of %2 GiB usable per node, offloaded")
                .arg(e.host_memory_per_node_bytes / kGiB, 0, 'f', 1)
                .arg(e.host_memory_capacity_bytes / kGiB, 0, 'f', 0);
  details_->setText(text);
}

void PlanPage::refreshCharts() {
  const std::optional<Estimate>& selected = host_.selectedEstimate();
  if (!selected) {
    memoryChart_->showMessage(tr("No layout selected: nothing to chart."));
    timeChart_->showMessage(tr("No layout selected: nothing to chart."));
    return;
  }
  refreshMemoryChart(*selected);
  refreshTimeChart(*selected);
}

void PlanPage::refreshMemoryChart(const Estimate& e) {
  const MemoryBytes& m = e.memory_per_gpu_bytes;
  {
    auto* chart = new QChart;
    setChartTitle(chart, memoryChart_->view(),
                  tr("Memory per GPU: %1 of %2 GiB").arg(m.total / kGiB, 0, 'f', 1).arg(m.capacity / kGiB, 0, 'f', 0));
    auto* series = new QHorizontalStackedBarSeries;
    const std::pair<const char*, double> kinds[] = {{"weights", m.weights},         {"gradients", m.gradients},
                                                    {"optimizer", m.optimizer},     {"activations", m.activations},
                                                    {"buffers", m.buffers}};
    for (const auto& [name, bytes] : kinds) {
      auto* set = new QBarSet(QString::fromUtf8(name));
      *set << 0.0 << bytes / kGiB;
      series->append(set);
    }
    auto* cap = new QBarSet(tr("capacity"));
    cap->setColor(QColor(200, 200, 200));
    *cap << m.capacity / kGiB << 0.0;
    series->append(cap);
    series->setBarWidth(0.6);
    chart->addSeries(series);
    auto* cats = new QBarCategoryAxis;
    cats->append({tr("GPU"), tr("layout")});
    auto* val = new QValueAxis;
    val->setRange(0, std::max(m.total, m.capacity) / kGiB * 1.05);
    val->applyNiceNumbers();  // round ticks: 0, 20, 40, ... GiB
    val->setTitleText(tr("GiB"));
    val->setLabelFormat(QStringLiteral("%.0f"));
    chart->addAxis(cats, Qt::AlignLeft);
    chart->addAxis(val, Qt::AlignBottom);
    series->attachAxis(cats);
    series->attachAxis(val);
    memoryChart_->setChart(chart, Qt::AlignRight);
  }
}

void PlanPage::refreshTimeChart(const Estimate& e) {
  {
    auto* chart = new QChart;
    const bool sim = simulatedBreakdown_.has_value();
    setChartTitle(chart, timeChart_->view(),
                  sim ? tr("Step %1, simulated %2").arg(formatSeconds(e.step_time_s), formatSeconds(simulatedStepS_))
                      : tr("Step: %1 predicted").arg(formatSeconds(e.step_time_s)));
    auto* series = new QHorizontalStackedBarSeries;
    const TimeBreakdown& b = e.breakdown_s;
    const TimeBreakdown s = sim ? *simulatedBreakdown_ : TimeBreakdown{};
    std::vector<std::tuple<const char*, double, double>> terms = {
        {"compute", b.compute, s.compute},   {"recompute", b.recompute, s.recompute},
        {"bubble", b.bubble, s.bubble},      {"TP comm", b.tp_comm, s.tp_comm},
        {"PP comm", b.pp_comm, s.pp_comm},   {"DP comm", b.dp_comm, s.dp_comm},
        {"optimizer", b.optimizer, s.optimizer}, {"offload", b.offload, s.offload}};
    // Expert all-to-alls and the context ring, for the layouts that have them.
    if (e.layout.ep > 1) terms.emplace_back("EP comm", b.ep_comm, s.ep_comm);
    if (e.layout.cp > 1) terms.emplace_back("CP comm", b.cp_comm, s.cp_comm);
    double predTotal = 0, simTotal = 0;
    for (const auto& [name, pred, simv] : terms) {
      auto* set = new QBarSet(QString::fromUtf8(name));
      if (sim) *set << simv;
      *set << pred;
      series->append(set);
      predTotal += pred;
      simTotal += simv;
    }
    series->setBarWidth(0.6);
    chart->addSeries(series);
    auto* cats = new QBarCategoryAxis;
    if (sim) cats->append(tr("simulated"));
    cats->append(tr("predicted"));
    auto* val = new QValueAxis;
    val->setRange(0, std::max({predTotal, simTotal, 1e-6}) * 1.05);
    val->applyNiceNumbers();
    val->setTitleText(tr("seconds"));
    val->setLabelFormat(QStringLiteral("%.3g"));
    chart->addAxis(cats, Qt::AlignLeft);
    chart->addAxis(val, Qt::AlignBottom);
    series->attachAxis(cats);
    series->attachAxis(val);
    timeChart_->setChart(chart, Qt::AlignRight);
  }
}

void PlanPage::refreshPareto(const SearchResult& pareto) {
  const std::optional<Estimate>& selected = host_.selectedEstimate();
  if (pareto.pareto.empty() && !selected) {
    paretoChart_->showMessage(tr("Days vs dollars across node counts appear once a plan is found."));
    return;
  }
  auto* chart = new QChart;
  const bool priced = host_.inputs().cluster.price_per_node_hour_usd > 0;
  auto yOf = [priced](const Estimate& e) { return priced && std::isfinite(e.cost_usd) ? e.cost_usd / 1e6 : double(e.nodes); };
  auto* front = new QLineSeries;
  front->setName(tr("by node count"));  // the line through the points: no legend entry of its own
  auto* points = new QScatterSeries;
  points->setObjectName(QStringLiteral("whatIfPoints"));
  points->setName(tr("best per node count"));  // the whole sentence, with "click", in the view's tooltip
  points->setMarkerSize(9);
  double xmax = 0, ymax = 0;
  std::vector<Estimate> pts = pareto.pareto;
  std::sort(pts.begin(), pts.end(), [](const Estimate& a, const Estimate& b) { return a.nodes < b.nodes; });
  whatIf_ = pts;
  for (const Estimate& e : pts) {
    front->append(e.days_to_train, yOf(e));
    points->append(e.days_to_train, yOf(e));
    xmax = std::max(xmax, e.days_to_train);
    ymax = std::max(ymax, yOf(e));
  }
  connect(points, &QScatterSeries::clicked, this, [this, yOf](const QPointF& p) {
    // The nearest point, in units of each axis' largest value.
    int best = -1;
    double bestD = HUGE_VAL, xs = 1e-12, ys = 1e-12;
    for (const Estimate& e : whatIf_) {
      xs = std::max(xs, e.days_to_train);
      ys = std::max(ys, yOf(e));
    }
    for (int i = 0; i < int(whatIf_.size()); ++i) {
      const double dx = (whatIf_[size_t(i)].days_to_train - p.x()) / xs, dy = (yOf(whatIf_[size_t(i)]) - p.y()) / ys;
      if (dx * dx + dy * dy < bestD) {
        bestD = dx * dx + dy * dy;
        best = i;
      }
    }
    if (best >= 0) emit whatIfPointClicked(whatIf_[size_t(best)]);
  }, Qt::QueuedConnection);  // selecting redraws this chart: not from inside its own signal
  points->setPointLabelsVisible(false);
  auto* sel = new QScatterSeries;
  sel->setName(tr("selected"));
  sel->setMarkerSize(15);
  sel->setColor(QColor(220, 50, 47));
  if (selected) {
    sel->append(selected->days_to_train, yOf(*selected));
    xmax = std::max(xmax, selected->days_to_train);
    ymax = std::max(ymax, yOf(*selected));
  }
  chart->addSeries(front);
  chart->addSeries(points);
  chart->addSeries(sel);
  auto* ax = new QValueAxis;
  ax->setTitleText(tr("days"));
  ax->setRange(0, xmax > 0 ? xmax * 1.1 : 1);
  ax->applyNiceNumbers();
  ax->setLabelFormat(QStringLiteral("%.0f"));
  auto* ay = new QValueAxis;
  ay->setTitleText(priced ? tr("million $") : tr("nodes (price unknown)"));
  ay->setRange(0, ymax > 0 ? ymax * 1.15 : 1);
  ay->applyNiceNumbers();
  ay->setLabelFormat(QStringLiteral("%.3g"));
  chart->addAxis(ax, Qt::AlignBottom);
  chart->addAxis(ay, Qt::AlignLeft);
  for (QAbstractSeries* s : chart->series()) {
    s->attachAxis(ax);
    s->attachAxis(ay);
  }
  QStringList labels;
  for (const Estimate& e : pts) labels << QString::number(e.nodes);
  setChartTitle(chart, paretoChart_->view(),
                labels.isEmpty() ? tr("Days vs dollars (sweeping node counts...)")
                                 : tr("Days vs dollars, %1 node counts").arg(labels.size()));
  paretoChart_->view()->setToolTip(tr("Best layout per node count (%1): days vs dollars; the selection is highlighted; "
                                      "click a point to select its plan")
                                       .arg(labels.join(QStringLiteral(", "))));
  paretoChart_->setChart(chart);
  // Short legend names that fit a third of a 1280-pixel page; the line needs none.
  for (QLegendMarker* m : chart->legend()->markers(front)) m->setVisible(false);
}

void PlanPage::explainEmptyResult() {
  const PlanInputs& in = host_.inputs();
  // No candidate at all: the library names the constraint the pinned knobs break and the values
  // that would work (the call `capplan plan --fix` makes).
  Scenario s;
  s.model = in.model;
  s.cluster = in.cluster;
  s.training = in.training;
  s.nodes = in.nodesMin;
  const SearchOptions o = searchOptionsOf(in, 1);
  const std::optional<std::string> why = pins_unsatisfiable(s, o);
  QString limits;
  if (in.deadlineDays > 0) limits += tr(" within %1 days").arg(in.deadlineDays);
  if (in.budgetUsd > 0) limits += tr(" under %1").arg(formatDollars(in.budgetUsd));
  message_->setText(why ? tr("No valid layout for these inputs: %1").arg(QString::fromStdString(*why))
                    : !limits.isEmpty()
                        ? tr("No layout fits in memory%1; tick 'show layouts that do not fit' to see the closest "
                             "with the limit each breaks, or relax the limits.").arg(limits)
                        : tr("No layout fits in memory for these inputs; try un-pinning knobs or more nodes."));
}

}  // namespace capplan::gui
