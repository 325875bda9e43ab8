// The pages of the main window (Model, Cluster, Plan, Timeline, Run), their charts, and the
// Timeline and Run widgets. Figures come from planner / simulator / runtime calls; this file only
// lays them out.
#include <QApplication>
#include <QBarCategoryAxis>
#include <QBarSet>
#include <QChart>
#include <QChartView>
#include <QCheckBox>
#include <QComboBox>
#include <QDateTime>
#include <QDir>
#include <QDoubleSpinBox>
#include <QFileDialog>
#include <QFormLayout>
#include <QFutureWatcher>
#include <QGridLayout>
#include <QGroupBox>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QHelpEvent>
#include <QHorizontalStackedBarSeries>
#include <QItemSelectionModel>
#include <QLabel>
#include <QLineEdit>
#include <QLineSeries>
#include <QListWidget>
#include <QMouseEvent>
#include <QPainter>
#include <QPlainTextEdit>
#include <QProgressBar>
#include <QPushButton>
#include <QScatterSeries>
#include <QScrollArea>
#include <QSpinBox>
#include <QSplitter>
#include <QStandardPaths>
#include <QTableView>
#include <QTableWidget>
#include <QTimer>
#include <QToolTip>
#include <QVBoxLayout>
#include <QValueAxis>
#include <QtConcurrent/QtConcurrentRun>
#include <cmath>

#include "item_models.h"
#include "main_window.h"
#include "pages.h"
#include "planner/catalog.h"
#include "planner/profile.h"
#include "planner/spec_io.h"
#include "search_job.h"

#ifdef CAPPLAN_GUI_HAVE_SIMULATOR
#include "simulator/run_simulation.h"
#include "simulator/step_simulation.h"
#endif
#ifdef CAPPLAN_GUI_HAVE_RUNTIME
#include "launch/launch.h"
#include "io/report.h"
#endif

namespace capplan::gui {
namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

// Undo merge ids: consecutive edits of one field become one undo step.
enum FieldId {
  FLayers = 1, FHidden, FHeads, FKvHeads, FFfnHidden, FVocab, FSeq, FFfn, FNorm, FTied, FPreset,
  FCluster, FNodesMin, FNodesMax, FPrice, FGbs, FTokens, FPrecision, FObjective, FPinDp, FPinTp,
  FPinPp, FPinVp, FPinMbs, FPinZero, FPinRecompute, FPinSchedule, FPinOrder, FPinOffload, FPinSp,
  FInfeasible, FFramework, FAttention, FTrainSeq
};

// A spin box whose minimum means "unset" (its special text, e.g. "any"): clearing the text or
// typing the special word sets the minimum instead of bringing the old value back.
class UnsetSpinBox : public QSpinBox {
 public:
  using QSpinBox::QSpinBox;

 protected:
  bool unsetText(const QString& text) const {
    const QString t = text.trimmed();
    return t.isEmpty() || (!specialValueText().isEmpty() &&
                           specialValueText().startsWith(t, Qt::CaseInsensitive));
  }
  QValidator::State validate(QString& text, int& pos) const override {
    if (unsetText(text)) return QValidator::Acceptable;
    return QSpinBox::validate(text, pos);
  }
  int valueFromText(const QString& text) const override {
    return unsetText(text) ? minimum() : QSpinBox::valueFromText(text);
  }
  void fixup(QString& text) const override {
    if (unsetText(text)) text = specialValueText();
    else QSpinBox::fixup(text);
  }
};

QSpinBox* makeSpin(QWidget* parent, const char* name, int min, int max, const QString& tip,
                   const QString& special = {}) {
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

QLabel* makeErrorLabel(QWidget* parent) {
  auto* l = new QLabel(parent);
  l->setStyleSheet(QStringLiteral("color: #b3261e;"));
  l->setWordWrap(true);
  l->hide();
  return l;
}

// A field with its error label below it, for QFormLayout rows.
QWidget* withError(QWidget* field, QLabel* error) {
  auto* w = new QWidget(field->parentWidget());
  auto* v = new QVBoxLayout(w);
  v->setContentsMargins(0, 0, 0, 0);
  v->setSpacing(2);
  v->addWidget(field);
  v->addWidget(error);
  return w;
}

QChartView* makeChartView(QWidget* parent, const char* name) {
  auto* v = new QChartView(new QChart, parent);
  v->setObjectName(QString::fromUtf8(name));
  v->setRenderHint(QPainter::Antialiasing);
  v->setMinimumHeight(220);
  return v;
}

void replaceChart(QChartView* view, QChart* chart, Qt::Alignment legend = Qt::AlignBottom) {
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

template <class T>
QString pinText(const std::optional<T>& v) {
  return v ? QString::number(*v) : QStringLiteral("any");
}

// "300B", "1.3T", "2.5e+08": a form parse_number() reads back; empty for 0 (= the default).
QString formatTokens(double t) {
  if (t <= 0) return {};
  if (t >= 1e12 && std::fmod(t, 1e10) == 0) return QString::number(t / 1e12, 'g', 6) + QLatin1Char('T');
  if (t >= 1e9 && std::fmod(t, 1e7) == 0) return QString::number(t / 1e9, 'g', 6) + QLatin1Char('B');
  return QString::number(t, 'g', 12);
}

QString htmlEscape(const std::string& s) { return QString::fromStdString(s).toHtmlEscaped(); }

}  // namespace

// ================================================================ Model page

QWidget* MainWindow::buildModelPage() {
  auto* page = new QWidget;
  page->setObjectName(QStringLiteral("modelPage"));
  auto* row = new QHBoxLayout(page);

  auto* archBox = new QGroupBox(tr("Architecture"), page);
  auto* form = new QFormLayout(archBox);
  form->setFieldGrowthPolicy(QFormLayout::AllNonFixedFieldsGrow);
  modelPreset_ = new QComboBox(archBox);
  modelPreset_->setObjectName(QStringLiteral("modelPreset"));
  modelPreset_->setToolTip(tr("Model presets from the embedded catalog (configs/models), with sources"));
  for (const CatalogEntry& e : catalog_models()) {
    modelPreset_->addItem(QString::fromStdString(e.name));
    modelPreset_->setItemData(modelPreset_->count() - 1, QString::fromStdString(e.summary), Qt::ToolTipRole);
  }
  auto* openModel = new QPushButton(tr("Open YAML / config.json..."), archBox);
  openModel->setToolTip(tr("Load a model YAML or a Hugging Face config.json (GPT-2, Llama families)"));
  auto* presetRow = new QHBoxLayout;
  presetRow->addWidget(modelPreset_, 1);
  presetRow->addWidget(openModel);
  form->addRow(tr("Preset"), presetRow);

  struct FieldDef {
    QSpinBox** spin;
    const char* name;
    const char* key;
    int min, max;
    QString label, tip, special;
  };
  const FieldDef defs[] = {
      {&layers_, "layers", "model.layers", 1, 100000, tr("Layers"), tr("Transformer blocks (layers)"), {}},
      {&hidden_, "hidden", "model.hidden", 1, 1000000, tr("Hidden"), tr("Hidden size d_model; must be divisible by heads"), {}},
      {&heads_, "heads", "model.heads", 1, 100000, tr("Heads"), tr("Attention (query) heads; tp must divide it"), {}},
      {&kvHeads_, "kv_heads", "model.kv_heads", 0, 100000, tr("KV heads"),
       tr("Key/value heads; fewer than heads = grouped-query attention; must divide heads"), tr("= heads")},
      {&ffnHidden_, "ffn_hidden", "model.ffn_hidden", 0, 10000000, tr("FFN hidden"),
       tr("Inner size of the MLP; 0 = 4 x hidden"), tr("4 x hidden")},
      {&vocab_, "vocab", "model.vocab", 1, 100000000, tr("Vocabulary"), tr("Vocabulary size (tokens)"), {}},
      {&seqLen_, "seq_len", "model.seq_len", 1, 10000000, tr("Default sequence"),
       tr("The model's own sequence length in tokens (its seq_len or max_position_embeddings); "
          "training uses it unless the Plan page's Training sequence is set"), {}},
  };
  const FieldId ids[] = {FLayers, FHidden, FHeads, FKvHeads, FFfnHidden, FVocab, FSeq};
  for (size_t i = 0; i < std::size(defs); ++i) {
    const FieldDef& d = defs[i];
    QSpinBox* s = makeSpin(archBox, d.name, d.min, d.max, d.tip, d.special);
    *d.spin = s;
    QLabel* err = makeErrorLabel(archBox);
    fieldErrors_.insert(QString::fromUtf8(d.key), err);
    form->addRow(d.label, withError(s, err));
    const FieldId id = ids[i];
    connect(s, &QSpinBox::valueChanged, this, [this, s, id, label = d.label](int v) {
      editInputs(id, tr("Edit %1").arg(label), [&](PlanInputs& in) {
        ModelSpec& m = in.model;
        switch (id) {
          case FLayers: m.layers = v; break;
          case FHidden: m.hidden = v; break;
          case FHeads: m.heads = v; break;
          case FKvHeads: m.kv_heads = v; break;
          case FFfnHidden: m.ffn_hidden = v; break;
          case FVocab: m.vocab = v; break;
          case FSeq: m.seq_len = v; break;
          default: break;
        }
      });
      Q_UNUSED(s);
    });
  }
  ffn_ = makeCombo(archBox, "ffn", {QStringLiteral("gelu"), QStringLiteral("swiglu")},
                   tr("MLP type: GELU (2 matrices) or SwiGLU (3 matrices, Llama)"));
  norm_ = makeCombo(archBox, "norm", {QStringLiteral("layernorm"), QStringLiteral("rmsnorm")},
                    tr("Normalisation: LayerNorm or RMSNorm"));
  tied_ = new QCheckBox(tr("Tied input and output embeddings"), archBox);
  tied_->setObjectName(QStringLiteral("tied"));
  tied_->setToolTip(tr("The LM head reuses the token embedding matrix (counted once)"));
  form->addRow(tr("FFN"), ffn_);
  form->addRow(tr("Norm"), norm_);
  form->addRow(QString(), tied_);
  connect(ffn_, &QComboBox::currentTextChanged, this, [this](const QString& t) {
    editInputs(FFfn, tr("Edit FFN"), [&](PlanInputs& in) {
      if (auto v = parse_ffn(t.toStdString())) in.model.ffn = *v;
    });
  });
  connect(norm_, &QComboBox::currentTextChanged, this, [this](const QString& t) {
    editInputs(FNorm, tr("Edit norm"), [&](PlanInputs& in) {
      if (auto v = parse_norm(t.toStdString())) in.model.norm = *v;
    });
  });
  connect(tied_, &QCheckBox::toggled, this, [this](bool on) {
    editInputs(FTied, tr("Edit tied embeddings"), [&](PlanInputs& in) { in.model.tied_embeddings = on; });
  });
  connect(modelPreset_, &QComboBox::activated, this, [this](int index) {
    const QString name = modelPreset_->itemText(index);
    Loaded<ModelSpec> m = load_model(name.toStdString());
    showFieldDiagnostics(m.diagnostics, modelDiagnostics_);
    if (!m.ok()) return;
    editInputs(FPreset, tr("Model preset %1").arg(name), [&](PlanInputs& in) {
      in.model = *m.value;
      in.modelRef = name.toStdString();
      in.training.seq_len = 0;  // train at the new model's own length, as the CLI does
    });
  });
  connect(openModel, &QPushButton::clicked, this, [this] {
    const QString f = QFileDialog::getOpenFileName(this, tr("Open model"), {}, tr("Model (*.yaml *.yml *.json)"));
    if (!f.isEmpty()) loadModelFile(f);
  });

  auto* right = new QVBoxLayout;
  auto* sizeBox = new QGroupBox(tr("Size"), page);
  auto* sizeLay = new QVBoxLayout(sizeBox);
  modelFigures_ = new QLabel(sizeBox);
  modelFigures_->setObjectName(QStringLiteral("modelFigures"));
  modelFigures_->setTextFormat(Qt::RichText);
  modelFigures_->setWordWrap(true);
  sizeLay->addWidget(modelFigures_);
  modelDiagnostics_ = new QListWidget(page);
  modelDiagnostics_->setObjectName(QStringLiteral("modelDiagnostics"));
  modelDiagnostics_->setToolTip(tr("Problems found in the model file or the fields, with file:line:column"));
  modelDiagnostics_->setMaximumHeight(110);
  modelDiagnostics_->hide();
  auto* profBox = new QGroupBox(tr("Per-layer profile"), page);
  auto* profLay = new QVBoxLayout(profBox);
  profileView_ = new QTableView(profBox);
  profileView_->setObjectName(QStringLiteral("profileTable"));
  profileView_->setModel(profile_);
  profileView_->verticalHeader()->hide();
  profileView_->horizontalHeader()->setSectionResizeMode(QHeaderView::Stretch);
  profileView_->setAlternatingRowColors(true);
  profLay->addWidget(profileView_);
  right->addWidget(sizeBox);
  right->addWidget(modelDiagnostics_);
  right->addWidget(profBox, 1);

  archBox->setMaximumWidth(460);
  row->addWidget(archBox, 0, Qt::AlignTop);
  row->addLayout(right, 1);
  return page;
}

void MainWindow::refreshModelFigures() {
  const ModelSpec& m = inputs_.model;
  Diagnostics d;
  validate_model(m, "<model page>", d);
  for (auto it = fieldErrors_.begin(); it != fieldErrors_.end(); ++it) {
    if (!it.key().startsWith(QLatin1String("model."))) continue;
    it.value()->clear();
    it.value()->hide();
  }
  for (const Diagnostic& x : d.items()) {
    QLabel* l = fieldErrors_.value(QString::fromStdString(x.path));
    if (l == nullptr) continue;
    l->setText(QString::fromStdString(x.message + (x.hint.empty() ? "" : " (" + x.hint + ")")));
    l->show();
  }
  if (d.has_errors()) {
    modelFigures_->setText(tr("<i>Fix the fields marked in red to see the model's size.</i>"));
    profile_->setProfile({});
    return;
  }
  const int tp = selected_ ? selected_->layout.tp : 1;
  const int mbs = selected_ ? selected_->layout.mbs : 1;
  const int seq = inputs_.training.seq_len > 0 ? inputs_.training.seq_len : m.seq_len;
  const ModelProfile whole = profile_model(m, 1, seq, 1, inputs_.training.precision);
  // Model state before any sharding, at the cost model's bytes per parameter; activations depend
  // on the layout (Plan page).
  const double n = whole.total_params;
  const StateBytesPerParam state = state_bytes_per_param(inputs_.training.precision);
  modelFigures_->setText(
      tr("<table cellspacing=6>"
         "<tr><td><b>Parameters</b></td><td align=right>%1</td></tr>"
         "<tr><td><b>FLOPs per token</b> (forward + backward)</td><td align=right>%2</td></tr>"
         "<tr><td><b>Weights</b> (%3 B/param)</td><td align=right>%4 GiB</td></tr>"
         "<tr><td><b>Gradients</b> (%5 B/param)</td><td align=right>%6 GiB</td></tr>"
         "<tr><td><b>Optimizer state</b> (fp32 master + Adam, %7 B/param)</td><td align=right>%8 GiB</td></tr>"
         "<tr><td>Source</td><td>%9</td></tr></table>")
          .arg(formatCount(n), formatCount(whole.flops_per_token))
          .arg(state.weights)
          .arg(state.weights * n / kGiB, 0, 'f', 1)
          .arg(state.gradients)
          .arg(state.gradients * n / kGiB, 0, 'f', 1)
          .arg(state.optimizer)
          .arg(state.optimizer * n / kGiB, 0, 'f', 1)
          .arg(htmlEscape(m.source.empty() ? inputs_.modelRef : m.source)));
  profile_->setProfile(profile_model(m, tp, seq, mbs, inputs_.training.precision));
  if (auto* box = qobject_cast<QGroupBox*>(profileView_->parentWidget()))
    box->setTitle(tr("Per-layer profile (tp = %1, seq = %2, mbs = %3, per TP rank)").arg(tp).arg(seq).arg(mbs));
}

// ================================================================ Cluster page

QWidget* MainWindow::buildClusterPage() {
  auto* page = new QWidget;
  page->setObjectName(QStringLiteral("clusterPage"));
  auto* row = new QHBoxLayout(page);
  auto* box = new QGroupBox(tr("Instances"), page);
  auto* form = new QFormLayout(box);
  clusterPreset_ = new QComboBox(box);
  clusterPreset_->setObjectName(QStringLiteral("clusterPreset"));
  clusterPreset_->setToolTip(tr("Instance types from the embedded catalog (configs/clusters), with sources"));
  for (const CatalogEntry& e : catalog_clusters()) {
    clusterPreset_->addItem(QString::fromStdString(e.name));
    clusterPreset_->setItemData(clusterPreset_->count() - 1, QString::fromStdString(e.summary), Qt::ToolTipRole);
  }
  auto* openCluster = new QPushButton(tr("Open file..."), box);
  openCluster->setToolTip(tr("Load a cluster YAML (name, gpus_per_node, gpu, intra_node_gbyte_per_s, inter_node_gbit_per_s)"));
  auto* presetRow = new QHBoxLayout;
  presetRow->addWidget(clusterPreset_, 1);
  presetRow->addWidget(openCluster);
  form->addRow(tr("Instance type"), presetRow);
  nodesMin_ = makeSpin(box, "nodesMin", 1, 100000, tr("Nodes (instances); with a larger 'to' the search covers the range"));
  nodesMax_ = makeSpin(box, "nodesMax", 1, 100000, tr("Upper end of the node range (inclusive); equal to 'from' for one node count"));
  auto* nodesRow = new QHBoxLayout;
  nodesRow->addWidget(nodesMin_);
  nodesRow->addWidget(new QLabel(tr("to"), box));
  nodesRow->addWidget(nodesMax_);
  QLabel* nodesErr = makeErrorLabel(box);
  fieldErrors_.insert(QStringLiteral("nodes"), nodesErr);
  auto* nodesW = new QWidget(box);
  auto* nodesV = new QVBoxLayout(nodesW);
  nodesV->setContentsMargins(0, 0, 0, 0);
  nodesV->addLayout(nodesRow);
  nodesV->addWidget(nodesErr);
  form->addRow(tr("Nodes"), nodesW);
  price_ = new QDoubleSpinBox(box);
  price_->setObjectName(QStringLiteral("price"));
  price_->setRange(0, 10000);
  price_->setDecimals(2);
  price_->setPrefix(QStringLiteral("$ "));
  price_->setSuffix(tr(" / node-hour"));
  price_->setSpecialValueText(tr("unknown"));
  price_->setToolTip(tr("On-demand price per node-hour; 0 = unknown (cost shown as unknown)"));
  form->addRow(tr("Price"), price_);
  connect(clusterPreset_, &QComboBox::activated, this, [this](int index) {
    const QString name = clusterPreset_->itemText(index);
    Loaded<ClusterSpec> c = load_cluster(name.toStdString());
    showFieldDiagnostics(c.diagnostics, clusterDiagnostics_);
    if (!c.ok()) return;
    editInputs(FCluster, tr("Instance %1").arg(name), [&](PlanInputs& in) {
      in.cluster = *c.value;
      in.clusterRef = name.toStdString();
    });
  });
  connect(openCluster, &QPushButton::clicked, this, [this] {
    const QString f = QFileDialog::getOpenFileName(this, tr("Open cluster"), {}, tr("Cluster (*.yaml *.yml)"));
    if (!f.isEmpty()) loadClusterFile(f);
  });
  connect(nodesMin_, &QSpinBox::valueChanged, this, [this](int v) {
    editInputs(FNodesMin, tr("Edit nodes"), [&](PlanInputs& in) {
      const bool single = in.nodesMax == in.nodesMin;
      in.nodesMin = v;
      if (single || in.nodesMax < v) in.nodesMax = v;
    });
  });
  connect(nodesMax_, &QSpinBox::valueChanged, this, [this](int v) {
    editInputs(FNodesMax, tr("Edit node range"), [&](PlanInputs& in) { in.nodesMax = v; });
  });
  connect(price_, &QDoubleSpinBox::valueChanged, this, [this](double v) {
    editInputs(FPrice, tr("Edit price"), [&](PlanInputs& in) { in.cluster.price_per_node_hour_usd = v; });
  });

  auto* right = new QVBoxLayout;
  auto* figBox = new QGroupBox(tr("Hardware figures"), page);
  auto* figLay = new QVBoxLayout(figBox);
  clusterFigures_ = new QLabel(figBox);
  clusterFigures_->setObjectName(QStringLiteral("clusterFigures"));
  clusterFigures_->setTextFormat(Qt::RichText);
  clusterFigures_->setWordWrap(true);
  clusterFigures_->setTextInteractionFlags(Qt::TextSelectableByMouse);
  clusterFigures_->setAlignment(Qt::AlignTop | Qt::AlignLeft);
  figLay->addWidget(clusterFigures_);
  clusterDiagnostics_ = new QListWidget(page);
  clusterDiagnostics_->setObjectName(QStringLiteral("clusterDiagnostics"));
  clusterDiagnostics_->setMaximumHeight(110);
  clusterDiagnostics_->hide();
  right->addWidget(figBox, 1);
  right->addWidget(clusterDiagnostics_);
  box->setMaximumWidth(460);
  row->addWidget(box, 0, Qt::AlignTop);
  row->addLayout(right, 1);
  return page;
}

void MainWindow::refreshClusterFigures() {
  const ClusterSpec& c = inputs_.cluster;
  const GpuSpec& g = c.gpu;
  auto num = [](double v, const QString& unit, int prec = 0) {
    return v > 0 ? QString::number(v, 'f', prec) + QLatin1Char(' ') + unit : tr("unknown");
  };
  const int gpus = inputs_.nodesMin * c.gpus_per_node;
  QString range = QString::number(inputs_.nodesMin);
  if (inputs_.nodesMax > inputs_.nodesMin) range += QStringLiteral(" - %1").arg(inputs_.nodesMax);
  clusterFigures_->setText(
      tr("<h3>%1</h3><table cellspacing=6>"
         "<tr><td><b>Nodes</b></td><td>%2 (%3 GPUs at the low end)</td></tr>"
         "<tr><td><b>GPU</b></td><td>%4 x %5 per node</td></tr>"
         "<tr><td><b>GPU memory</b></td><td>%6</td></tr>"
         "<tr><td><b>Peak dense TFLOP/s</b></td><td>bf16 %7, fp16 %8, fp32 %9</td></tr>"
         "<tr><td><b>HBM bandwidth</b></td><td>%10</td></tr>"
         "<tr><td><b>NVLink / NVSwitch</b></td><td>%11 per GPU per direction</td></tr>"
         "<tr><td><b>Network</b></td><td>%12 per node per direction</td></tr>"
         "<tr><td><b>Price</b></td><td>%13</td></tr>"
         "<tr><td><b>GPU source</b></td><td>%14</td></tr>"
         "<tr><td><b>Instance source</b></td><td>%15</td></tr></table>")
          .arg(htmlEscape(c.name), range)
          .arg(gpus)
          .arg(c.gpus_per_node)
          .arg(htmlEscape(g.name))
          .arg(num(g.memory_gib, QStringLiteral("GiB")))
          .arg(num(g.peak_tflops_bf16, QString()), num(g.peak_tflops_fp16, QString()),
               num(g.peak_tflops_fp32, QString(), 1))
          .arg(num(g.memory_gbyte_per_s, QStringLiteral("GB/s")))
          .arg(num(c.intra_node_gbyte_per_s, QStringLiteral("GB/s")))
          .arg(num(c.inter_node_gbit_per_s, QStringLiteral("Gbit/s")))
          .arg(c.price_per_node_hour_usd > 0 ? QStringLiteral("$%1 per node-hour").arg(c.price_per_node_hour_usd, 0, 'f', 2)
                                             : tr("unknown"))
          .arg(htmlEscape(g.source.empty() ? "not given" : g.source))
          .arg(htmlEscape(c.source.empty() ? "not given" : c.source)));
  Diagnostics d;
  validate_cluster(c, "<cluster page>", d);
  QLabel* nodesErr = fieldErrors_.value(QStringLiteral("nodes"));
  const bool badRange = inputs_.nodesMax < inputs_.nodesMin;
  nodesErr->setText(badRange ? tr("'to' must be at least 'from'") : QString());
  nodesErr->setVisible(badRange);
}

// ================================================================ Plan page

QWidget* MainWindow::buildPlanPage() {
  auto* page = new QWidget;
  page->setObjectName(QStringLiteral("planPage"));
  auto* v = new QVBoxLayout(page);

  auto* top = new QHBoxLayout;
  auto* trainBox = new QGroupBox(tr("Training"), page);
  auto* tf = new QFormLayout(trainBox);
  gbs_ = makeSpin(trainBox, "gbs", 1, 100000000, tr("Global batch: sequences per optimizer step (gbs)"));
  QLabel* gbsErr = makeErrorLabel(trainBox);
  fieldErrors_.insert(QStringLiteral("training.gbs"), gbsErr);
  tf->addRow(tr("Global batch"), withError(gbs_, gbsErr));
  trainSeq_ = makeSpin(trainBox, "trainSeq", 0, 10000000,
                       tr("Sequence length the plan trains at, in tokens; 0 = the model's default "
                          "sequence (Model page)"),
                       tr("model's"));
  tf->addRow(tr("Training sequence"), trainSeq_);
  connect(trainSeq_, &QSpinBox::valueChanged, this, [this](int v) {
    if (v == inputs_.training.seq_len) return;
    editInputs(FTrainSeq, tr("Edit training sequence"), [&](PlanInputs& in) { in.training.seq_len = v; });
  });
  tokens_ = new QLineEdit(trainBox);
  tokens_->setObjectName(QStringLiteral("tokens"));
  tokens_->setToolTip(tr("Tokens to train: 300e9, 300B, 1.3T; empty = 20 per parameter (Hoffmann et al. 2022)"));
  QLabel* tokensErr = makeErrorLabel(trainBox);
  fieldErrors_.insert(QStringLiteral("training.tokens"), tokensErr);
  tf->addRow(tr("Tokens"), withError(tokens_, tokensErr));
  precision_ = makeCombo(trainBox, "precision",
                         {QStringLiteral("bf16"), QStringLiteral("fp16"), QStringLiteral("fp32"), QStringLiteral("fp8")},
                         tr("Training precision: mixed precision with fp32 master weights and Adam; fp8: "
                            "Transformer Engine GEMMs (Hopper and newer)"));
  tf->addRow(tr("Precision"), precision_);
  QStringList frameworks;
  for (const CatalogEntry& e : catalog_frameworks()) frameworks << QString::fromStdString(e.name);
  framework_ = makeCombo(trainBox, "framework", frameworks,
                         tr("Implementation: what the cost model knows about the software stack "
                            "(kernels, overlap, pipeline sends, ZeRO-3 traffic); configs/frameworks/"));
  tf->addRow(tr("Framework"), framework_);
  attention_ = makeCombo(trainBox, "attention",
                         {QStringLiteral("default"), QStringLiteral("eager"), QStringLiteral("fused"), QStringLiteral("flash")},
                         tr("Attention kernel: default = the framework's; eager (Hugging Face), fused "
                            "(Megatron softmax), flash (FlashAttention-2/3, Ampere and newer)"));
  tf->addRow(tr("Attention"), attention_);
  connect(framework_, &QComboBox::currentTextChanged, this, [this](const QString& t) {
    Loaded<FrameworkSpec> f = load_framework(t.toStdString());
    if (!f.value || f.value->name == inputs_.training.framework.name) return;
    editInputs(FFramework, tr("Edit framework"), [&](PlanInputs& in) { in.training.framework = *f.value; });
  });
  connect(attention_, &QComboBox::currentTextChanged, this, [this](const QString& t) {
    const std::optional<Attention> a = parse_attention(t.toStdString());
    if (a == inputs_.training.attention) return;
    editInputs(FAttention, tr("Edit attention"), [&](PlanInputs& in) { in.training.attention = a; });
  });
  objective_ = makeCombo(trainBox, "objective", {QStringLiteral("time"), QStringLiteral("cost"), QStringLiteral("throughput")},
                         tr("Ranking: fewest days (time), fewest dollars (cost) or most samples/s (throughput)"));
  tf->addRow(tr("Objective"), objective_);
  connect(gbs_, &QSpinBox::valueChanged, this, [this](int val) {
    editInputs(FGbs, tr("Edit global batch"), [&](PlanInputs& in) { in.training.gbs = val; });
  });
  connect(tokens_, &QLineEdit::editingFinished, this, [this] {
    const QString t = tokens_->text().trimmed();
    QLabel* err = fieldErrors_.value(QStringLiteral("training.tokens"));
    double tokens = 0;
    if (!t.isEmpty()) {
      const std::optional<double> n = parse_number(t.toStdString());
      if (!n || *n < 0) {
        err->setText(tr("not a number of tokens: '%1' (try 300e9 or 300B)").arg(t));
        err->show();
        return;  // the text stays as typed
      }
      tokens = *n;
    }
    err->hide();
    if (tokens == inputs_.training.tokens) return;
    editInputs(FTokens, tr("Edit tokens"), [&](PlanInputs& in) { in.training.tokens = tokens; });
  });
  connect(precision_, &QComboBox::currentTextChanged, this, [this](const QString& t) {
    editInputs(FPrecision, tr("Edit precision"), [&](PlanInputs& in) {
      if (auto p = parse_precision(t.toStdString())) in.training.precision = *p;
    });
  });
  connect(objective_, &QComboBox::currentTextChanged, this, [this](const QString& t) {
    editInputs(FObjective, tr("Edit objective"), [&](PlanInputs& in) {
      if (auto o = parse_objective(t.toStdString())) in.objective = *o;
    });
  });

  auto* pinBox = new QGroupBox(tr("Knobs (pin a value or leave 'any' for the search)"), page);
  auto* grid = new QGridLayout(pinBox);
  pinDp_ = makeSpin(pinBox, "pinDp", 0, 100000, tr("dp: data-parallel degree (model replicas)"), tr("any"));
  pinTp_ = makeSpin(pinBox, "pinTp", 0, 1024, tr("tp: tensor-parallel degree; must divide heads and kv_heads"), tr("any"));
  pinPp_ = makeSpin(pinBox, "pinPp", 0, 100000, tr("pp: pipeline stages; at most the number of layers"), tr("any"));
  pinVp_ = makeSpin(pinBox, "pinVp", 0, 1024, tr("vp: virtual stages per pipeline stage (interleaved schedule only)"), tr("any"));
  pinMbs_ = makeSpin(pinBox, "pinMbs", 0, 100000, tr("mbs: micro-batch size in sequences; gbs must divide by dp x mbs"), tr("any"));
  const QStringList anyZero{QStringLiteral("any"), QStringLiteral("0"), QStringLiteral("1"), QStringLiteral("2"), QStringLiteral("3")};
  pinZero_ = makeCombo(pinBox, "pinZero", anyZero, tr("zero: 1 shards optimizer state over dp (SageMaker shard_optimizer_state), 2 also gradients, 3 also weights"));
  pinRecompute_ = makeCombo(pinBox, "pinRecompute", {QStringLiteral("any"), QStringLiteral("none"), QStringLiteral("selective"), QStringLiteral("full")},
                            tr("recompute: activation checkpointing; selective recomputes the attention core, full the whole layer"));
  pinSchedule_ = makeCombo(pinBox, "pinSchedule", {QStringLiteral("any"), QStringLiteral("gpipe"), QStringLiteral("1f1b"), QStringLiteral("interleaved")},
                           tr("schedule: pipeline schedule (GPipe, 1F1B, interleaved 1F1B with vp)"));
  pinOrder_ = makeCombo(pinBox, "pinOrder", {QStringLiteral("any"), QStringLiteral("DPT"), QStringLiteral("DTP"), QStringLiteral("PDT"),
                                             QStringLiteral("PTD"), QStringLiteral("TDP"), QStringLiteral("TPD")},
                        tr("order: placement, a permutation of D, P, T; right-most varies fastest over ranks (DPT = SageMaker 'cluster', TPD = 'spread')"));
  pinOffload_ = makeCombo(pinBox, "pinOffload", {QStringLiteral("any"), QStringLiteral("off"), QStringLiteral("on")},
                          tr("offload: move checkpointed activations to host memory over PCIe"));
  pinSp_ = makeCombo(pinBox, "pinSp", {QStringLiteral("any"), QStringLiteral("off"), QStringLiteral("on")},
                     tr("sp: sequence parallelism, norms and dropout split along the sequence (needs tp > 1)"));
  struct PinCell { const char* label; QWidget* w; };
  const PinCell cells[] = {{"dp", pinDp_}, {"tp", pinTp_}, {"pp", pinPp_}, {"vp", pinVp_}, {"mbs", pinMbs_},
                           {"zero", pinZero_}, {"recompute", pinRecompute_}, {"schedule", pinSchedule_},
                           {"order", pinOrder_}, {"offload", pinOffload_}, {"sp", pinSp_}};
  for (int i = 0; i < int(std::size(cells)); ++i) {
    auto* l = new QLabel(QString::fromUtf8(cells[i].label), pinBox);
    l->setToolTip(cells[i].w->toolTip());
    grid->addWidget(l, (i / 6) * 2, i % 6);
    grid->addWidget(cells[i].w, (i / 6) * 2 + 1, i % 6);
  }
  showInfeasible_ = new QCheckBox(tr("show layouts that do not fit"), pinBox);
  showInfeasible_->setObjectName(QStringLiteral("showInfeasible"));
  showInfeasible_->setToolTip(tr("Also rank layouts that exceed the GPU's memory, with the reason"));
  grid->addWidget(showInfeasible_, 3, 5);
  auto pinInt = [this](QSpinBox* s, FieldId id, std::optional<int> LayoutPins::*member) {
    connect(s, &QSpinBox::valueChanged, this, [this, id, member](int val) {
      editInputs(id, tr("Pin knob"), [&](PlanInputs& in) {
        in.pins.*member = val > 0 ? std::optional<int>(val) : std::nullopt;
      });
    });
  };
  pinInt(pinDp_, FPinDp, &LayoutPins::dp);
  pinInt(pinTp_, FPinTp, &LayoutPins::tp);
  pinInt(pinPp_, FPinPp, &LayoutPins::pp);
  pinInt(pinVp_, FPinVp, &LayoutPins::vp);
  pinInt(pinMbs_, FPinMbs, &LayoutPins::mbs);
  connect(pinZero_, &QComboBox::currentIndexChanged, this, [this](int i) {
    editInputs(FPinZero, tr("Pin zero"), [&](PlanInputs& in) {
      in.pins.zero = i > 0 ? std::optional<int>(i - 1) : std::nullopt;
    });
  });
  connect(pinRecompute_, &QComboBox::currentTextChanged, this, [this](const QString& t) {
    editInputs(FPinRecompute, tr("Pin recompute"), [&](PlanInputs& in) { in.pins.recompute = parse_recompute(t.toStdString()); });
  });
  connect(pinSchedule_, &QComboBox::currentTextChanged, this, [this](const QString& t) {
    editInputs(FPinSchedule, tr("Pin schedule"), [&](PlanInputs& in) { in.pins.schedule = parse_schedule(t.toStdString()); });
  });
  connect(pinOrder_, &QComboBox::currentTextChanged, this, [this](const QString& t) {
    editInputs(FPinOrder, tr("Pin order"), [&](PlanInputs& in) {
      in.pins.order = t == QLatin1String("any") ? std::nullopt : std::optional<std::string>(t.toStdString());
    });
  });
  auto pinBool = [this](QComboBox* c, FieldId id, std::optional<bool> LayoutPins::*member) {
    connect(c, &QComboBox::currentIndexChanged, this, [this, id, member](int i) {
      editInputs(id, tr("Pin knob"), [&](PlanInputs& in) {
        in.pins.*member = i == 0 ? std::nullopt : std::optional<bool>(i == 2);
      });
    });
  };
  pinBool(pinOffload_, FPinOffload, &LayoutPins::offload);
  pinBool(pinSp_, FPinSp, &LayoutPins::sp);
  connect(showInfeasible_, &QCheckBox::toggled, this, [this](bool on) {
    filter_->setFitsOnly(!on);
    editInputs(FInfeasible, tr("Show layouts that do not fit"), [&](PlanInputs& in) { in.showInfeasible = on; });
  });
  top->addWidget(trainBox);
  top->addWidget(pinBox, 1);
  v->addLayout(top);

  planMessage_ = new QLabel(page);
  planMessage_->setObjectName(QStringLiteral("planMessage"));
  planMessage_->setWordWrap(true);
  planMessage_->setStyleSheet(QStringLiteral("color: #b3261e;"));
  v->addWidget(planMessage_);
  planDiagnostics_ = new QListWidget(page);
  planDiagnostics_->setObjectName(QStringLiteral("planDiagnostics"));
  planDiagnostics_->setMaximumHeight(90);
  planDiagnostics_->hide();
  v->addWidget(planDiagnostics_);

  auto* bar = new QHBoxLayout;
  progress_ = new QProgressBar(page);
  progress_->setObjectName(QStringLiteral("searchProgress"));
  // Shown only while a search runs, with its text ("searching 37 %"); hidden when idle.
  progress_->setTextVisible(true);
  progress_->setFormat(tr("searching %p %"));
  progress_->setMaximumWidth(260);
  progress_->setToolTip(tr("Search progress (runs off the GUI thread)"));
  progress_->hide();
  cancelButton_ = new QPushButton(tr("Cancel"), page);
  cancelButton_->setObjectName(QStringLiteral("cancelSearch"));
  cancelButton_->setToolTip(tr("Stop the search and keep the best layouts found so far (Esc)"));
  cancelButton_->setEnabled(false);
  auto* replanButton = new QPushButton(tr("Re-plan"), page);
  replanButton->setToolTip(tr("Search again with the current inputs (F5)"));
  searchStatus_ = new QLabel(page);
  searchStatus_->setObjectName(QStringLiteral("searchStatus"));
  searchStatus_->setSizePolicy(QSizePolicy::Ignored, QSizePolicy::Preferred);
  filterEdit_ = new QLineEdit(page);
  filterEdit_->setObjectName(QStringLiteral("filter"));
  filterEdit_->setPlaceholderText(tr("Filter rows (e.g. interleaved, DPT)"));
  filterEdit_->setClearButtonEnabled(true);
  filterEdit_->setToolTip(tr("Shows only rows with a cell containing this text"));
  filterEdit_->setMaximumWidth(280);
  bar->addWidget(progress_);
  bar->addWidget(cancelButton_);
  bar->addWidget(replanButton);
  bar->addWidget(searchStatus_, 1);
  bar->addWidget(filterEdit_);
  v->addLayout(bar);
  connect(cancelButton_, &QPushButton::clicked, this, &MainWindow::cancelSearch);
  connect(replanButton, &QPushButton::clicked, this, &MainWindow::replan);
  connect(filterEdit_, &QLineEdit::textChanged, filter_, &QSortFilterProxyModel::setFilterFixedString);
  connect(search_, &SearchJob::progressChanged, this, [this](int done, int total) {
    progress_->setMaximum(std::max(1, total));
    progress_->setValue(done);
  });
  filter_->setFitsOnly(true);

  auto* split = new QSplitter(Qt::Vertical, page);
  table_ = new QTableView(split);
  table_->setObjectName(QStringLiteral("candidateTable"));
  table_->setModel(filter_);
  table_->setSortingEnabled(true);
  table_->sortByColumn(CandidateTableModel::Rank, Qt::AscendingOrder);
  table_->setSelectionBehavior(QAbstractItemView::SelectRows);
  table_->setSelectionMode(QAbstractItemView::SingleSelection);
  table_->verticalHeader()->hide();
  table_->verticalHeader()->setDefaultSectionSize(22);
  table_->setAlternatingRowColors(true);
  table_->horizontalHeader()->setSectionResizeMode(QHeaderView::ResizeToContents);
  table_->horizontalHeader()->setStretchLastSection(true);
  connect(table_->selectionModel(), &QItemSelectionModel::selectionChanged, this, &MainWindow::onSelectionChanged);

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
  memoryChart_ = makeChartView(lower, "memoryChart");
  memoryChart_->setToolTip(tr("Memory per GPU by kind against the GPU's capacity"));
  timeChart_ = makeChartView(lower, "timeChart");
  timeChart_->setToolTip(tr("Step time by term on the critical path (predicted; simulated when available)"));
  paretoChart_ = makeChartView(lower, "paretoChart");
  paretoChart_->setToolTip(tr("Best layout per node count: days vs dollars; the selection is highlighted"));
  lh->addWidget(details_);
  lh->addWidget(memoryChart_, 1);
  lh->addWidget(timeChart_, 1);
  lh->addWidget(paretoChart_, 1);
  split->addWidget(table_);
  split->addWidget(lower);
  split->setStretchFactor(0, 1);
  split->setStretchFactor(1, 1);
  v->addWidget(split, 1);
  return page;
}

void MainWindow::refreshSelection() {
  refreshModelFigures();
  if (!selected_) {
    details_->setText(tr("<i>No layout selected.</i>"));
    replaceChart(memoryChart_, new QChart);
    replaceChart(timeChart_, new QChart);
    refreshTimeline();
    return;
  }
  const Estimate& e = *selected_;
  const Layout& l = e.layout;
  const MemoryBytes& m = e.memory_per_gpu_bytes;
  QString fits = e.fits ? tr("<span style='color:#1b7f3b'>fits</span>")
                        : tr("<span style='color:#b3261e'>does not fit: %1</span>").arg(htmlEscape(e.reason));
  details_->setText(
      tr("<b>%1 nodes, %2 GPUs</b><br>dp %3 &middot; tp %4 &middot; pp %5 &middot; vp %6 &middot; mbs %7<br>"
         "zero %8 &middot; recompute %9 &middot; %10 &middot; %11<br>%12 micro-batches, offload %13, sp %14<br><br>"
         "<b>Step</b> %15 &middot; <b>%16</b> samples/s<br><b>Tokens/s</b> %17<br>"
         "<b>MFU</b> %18% &middot; bubble %19%<br><b>Days</b> %20%21<br><b>Cost</b> %22<br>"
         "<b>Memory</b> %23 of %24 GiB per GPU, %25")
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
          .arg(fits));
  if (runPanel_ != nullptr) runPanel_->setPlan(currentPlan());
  refreshCharts();
  refreshPareto();
  refreshTimeline();
}

void MainWindow::refreshCharts() {
  if (!selected_) return;
  const Estimate& e = *selected_;
  const MemoryBytes& m = e.memory_per_gpu_bytes;
  {
    auto* chart = new QChart;
    chart->setTitle(tr("Memory per GPU: %1 of %2 GiB").arg(m.total / kGiB, 0, 'f', 1).arg(m.capacity / kGiB, 0, 'f', 0));
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
    val->setTitleText(tr("GiB"));
    val->setLabelFormat(QStringLiteral("%.0f"));
    chart->addAxis(cats, Qt::AlignLeft);
    chart->addAxis(val, Qt::AlignBottom);
    series->attachAxis(cats);
    series->attachAxis(val);
    replaceChart(memoryChart_, chart, Qt::AlignRight);
  }
  {
    auto* chart = new QChart;
    const bool sim = simulatedBreakdown_.has_value();
    chart->setTitle(sim ? tr("Step time: %1 predicted, %2 simulated").arg(formatSeconds(e.step_time_s), formatSeconds(simulatedStepS_))
                        : tr("Step time: %1 predicted").arg(formatSeconds(e.step_time_s)));
    auto* series = new QHorizontalStackedBarSeries;
    const TimeBreakdown& b = e.breakdown_s;
    const TimeBreakdown s = sim ? *simulatedBreakdown_ : TimeBreakdown{};
    const std::tuple<const char*, double, double> terms[] = {
        {"compute", b.compute, s.compute},   {"recompute", b.recompute, s.recompute},
        {"bubble", b.bubble, s.bubble},      {"TP comm", b.tp_comm, s.tp_comm},
        {"PP comm", b.pp_comm, s.pp_comm},   {"DP comm", b.dp_comm, s.dp_comm},
        {"optimizer", b.optimizer, s.optimizer}, {"offload", b.offload, s.offload}};
    for (const auto& [name, pred, simv] : terms) {
      auto* set = new QBarSet(QString::fromUtf8(name));
      if (sim) *set << simv;
      *set << pred;
      series->append(set);
    }
    series->setBarWidth(0.6);
    chart->addSeries(series);
    auto* cats = new QBarCategoryAxis;
    if (sim) cats->append(tr("simulated"));
    cats->append(tr("predicted"));
    auto* val = new QValueAxis;
    val->setTitleText(tr("seconds"));
    val->setLabelFormat(QStringLiteral("%.2g"));
    chart->addAxis(cats, Qt::AlignLeft);
    chart->addAxis(val, Qt::AlignBottom);
    series->attachAxis(cats);
    series->attachAxis(val);
    replaceChart(timeChart_, chart, Qt::AlignRight);
  }
}

void MainWindow::refreshPareto() {
  auto* chart = new QChart;
  chart->setTitle(tr("Days vs dollars across node counts"));
  const bool priced = inputs_.cluster.price_per_node_hour_usd > 0;
  auto yOf = [priced](const Estimate& e) { return priced && std::isfinite(e.cost_usd) ? e.cost_usd / 1e6 : double(e.nodes); };
  auto* front = new QLineSeries;
  front->setName(tr("best per node count"));
  auto* points = new QScatterSeries;
  points->setName(tr("node counts"));
  points->setMarkerSize(9);
  double xmax = 0, ymax = 0;
  std::vector<Estimate> pts = paretoResult_.pareto;
  std::sort(pts.begin(), pts.end(), [](const Estimate& a, const Estimate& b) { return a.days_to_train < b.days_to_train; });
  for (const Estimate& e : pts) {
    front->append(e.days_to_train, yOf(e));
    points->append(e.days_to_train, yOf(e));
    xmax = std::max(xmax, e.days_to_train);
    ymax = std::max(ymax, yOf(e));
  }
  points->setPointLabelsVisible(false);
  auto* sel = new QScatterSeries;
  sel->setName(tr("selected"));
  sel->setMarkerSize(15);
  sel->setColor(QColor(220, 50, 47));
  if (selected_) {
    sel->append(selected_->days_to_train, yOf(*selected_));
    xmax = std::max(xmax, selected_->days_to_train);
    ymax = std::max(ymax, yOf(*selected_));
  }
  chart->addSeries(front);
  chart->addSeries(points);
  chart->addSeries(sel);
  auto* ax = new QValueAxis;
  ax->setTitleText(tr("days"));
  ax->setRange(0, xmax > 0 ? xmax * 1.1 : 1);
  ax->setLabelFormat(QStringLiteral("%.0f"));
  auto* ay = new QValueAxis;
  ay->setTitleText(priced ? tr("million $") : tr("nodes (price unknown)"));
  ay->setRange(0, ymax > 0 ? ymax * 1.15 : 1);
  ay->setLabelFormat(QStringLiteral("%.1f"));
  chart->addAxis(ax, Qt::AlignBottom);
  chart->addAxis(ay, Qt::AlignLeft);
  for (QAbstractSeries* s : chart->series()) {
    s->attachAxis(ax);
    s->attachAxis(ay);
  }
  QStringList labels;
  for (const Estimate& e : pts) labels << QString::number(e.nodes);
  if (!labels.isEmpty()) chart->setTitle(tr("Days vs dollars; nodes %1").arg(labels.join(QStringLiteral(", "))));
  replaceChart(paretoChart_, chart);
}

void MainWindow::explainEmptyResult() {
  // No candidate at all: the library names the constraint the pinned knobs break and the values
  // that would work (the call `capplan plan --fix` makes).
  Scenario s;
  s.model = inputs_.model;
  s.cluster = inputs_.cluster;
  s.training = inputs_.training;
  s.nodes = inputs_.nodesMin;
  SearchOptions o;
  o.nodes_min = inputs_.nodesMin;
  o.nodes_max = std::max(inputs_.nodesMin, inputs_.nodesMax);
  o.pins = inputs_.pins;
  const std::optional<std::string> why = pins_unsatisfiable(s, o);
  planMessage_->setText(why ? tr("No valid layout for these inputs: %1").arg(QString::fromStdString(*why))
                            : tr("No layout fits in memory for these inputs; try un-pinning knobs or more nodes."));
}

void MainWindow::showFieldDiagnostics(const Diagnostics& diagnostics, QListWidget* list) {
  list->clear();
  for (const Diagnostic& d : diagnostics.items()) {
    auto* item = new QListWidgetItem(QString::fromStdString(d.to_string()), list);
    item->setForeground(d.severity == Severity::Error ? QColor(179, 38, 30) : QColor(150, 100, 0));
    QLabel* field = fieldErrors_.value(QString::fromStdString(d.path));
    if (field != nullptr) {
      field->setText(QString::fromStdString(d.message));
      field->show();
    }
  }
  list->setVisible(!diagnostics.empty());
  if (!diagnostics.empty()) emit diagnosticsShown(QString::fromStdString(diagnostics.to_string()));
}

// ================================================================ sync inputs -> widgets

void MainWindow::syncWidgetsFromInputs() {
  const bool was = applying_;
  applying_ = true;
  const PlanInputs& in = inputs_;
  const ModelSpec& m = in.model;
  setIfDifferent(layers_, m.layers);
  setIfDifferent(hidden_, m.hidden);
  setIfDifferent(heads_, m.heads);
  setIfDifferent(kvHeads_, m.kv_heads);
  setIfDifferent(ffnHidden_, m.ffn_hidden);
  setIfDifferent(vocab_, m.vocab);
  setIfDifferent(seqLen_, m.seq_len);
  setComboText(ffn_, QString::fromUtf8(to_string(m.ffn)));
  setComboText(norm_, QString::fromUtf8(to_string(m.norm)));
  tied_->setChecked(m.tied_embeddings);
  const QString modelRef = QString::fromStdString(in.modelRef);
  if (modelPreset_->findText(modelRef) < 0) modelPreset_->addItem(modelRef);
  setComboText(modelPreset_, modelRef);
  const QString clusterRef = QString::fromStdString(in.clusterRef);
  if (clusterPreset_->findText(clusterRef) < 0) clusterPreset_->addItem(clusterRef);
  setComboText(clusterPreset_, clusterRef);
  setIfDifferent(nodesMin_, in.nodesMin);
  setIfDifferent(nodesMax_, in.nodesMax);
  if (price_->value() != in.cluster.price_per_node_hour_usd) price_->setValue(in.cluster.price_per_node_hour_usd);
  setIfDifferent(gbs_, int(in.training.gbs));
  setIfDifferent(trainSeq_, in.training.seq_len);
  trainSeq_->setSpecialValueText(tr("model's (%1)").arg(in.model.seq_len));
  if (!tokens_->hasFocus()) {
    tokens_->setText(formatTokens(in.training.tokens));
    fieldErrors_.value(QStringLiteral("training.tokens"))->hide();
  }
  setComboText(precision_, QString::fromUtf8(to_string(in.training.precision)));
  setComboText(framework_, QString::fromStdString(in.training.framework.name));
  setComboText(attention_, in.training.attention ? QString::fromUtf8(to_string(*in.training.attention))
                                                 : QStringLiteral("default"));
  setComboText(objective_, QString::fromUtf8(to_string(in.objective)));
  setIfDifferent(pinDp_, in.pins.dp.value_or(0));
  setIfDifferent(pinTp_, in.pins.tp.value_or(0));
  setIfDifferent(pinPp_, in.pins.pp.value_or(0));
  setIfDifferent(pinVp_, in.pins.vp.value_or(0));
  setIfDifferent(pinMbs_, in.pins.mbs.value_or(0));
  pinZero_->setCurrentIndex(in.pins.zero ? *in.pins.zero + 1 : 0);
  setComboText(pinRecompute_, in.pins.recompute ? QString::fromUtf8(to_string(*in.pins.recompute)) : QStringLiteral("any"));
  setComboText(pinSchedule_, in.pins.schedule ? QString::fromUtf8(to_string(*in.pins.schedule)) : QStringLiteral("any"));
  setComboText(pinOrder_, in.pins.order ? QString::fromStdString(*in.pins.order) : QStringLiteral("any"));
  pinOffload_->setCurrentIndex(in.pins.offload ? (*in.pins.offload ? 2 : 1) : 0);
  pinSp_->setCurrentIndex(in.pins.sp ? (*in.pins.sp ? 2 : 1) : 0);
  showInfeasible_->setChecked(in.showInfeasible);
  filter_->setFitsOnly(!in.showInfeasible);
  fieldErrors_.value(QStringLiteral("training.gbs"))->hide();
  applying_ = was;
  refreshModelFigures();
  refreshClusterFigures();
}

// ================================================================ Timeline page

QWidget* MainWindow::buildTimelinePage() {
  auto* page = new QWidget;
  page->setObjectName(QStringLiteral("timelinePage"));
  auto* v = new QVBoxLayout(page);
  auto* bar = new QHBoxLayout;
  timelineSchedule_ = makeCombo(page, "timelineSchedule", {QStringLiteral("as planned"), QStringLiteral("gpipe"),
                                                           QStringLiteral("1f1b"), QStringLiteral("interleaved")},
                                tr("Pipeline schedule to simulate for the selected layout (interleaved uses vp = 2 when the plan has vp = 1)"));
  auto* zin = new QPushButton(tr("Zoom in"), page);
  zin->setToolTip(tr("Zoom in (Ctrl+wheel over the chart; drag to pan)"));
  auto* zout = new QPushButton(tr("Zoom out"), page);
  auto* zfit = new QPushButton(tr("Fit"), page);
  zfit->setToolTip(tr("Show the whole step"));
  auto* trace = new QPushButton(tr("Export Chrome trace..."), page);
  trace->setToolTip(tr("Write the simulated step as a Chrome trace (open in Perfetto or chrome://tracing)"));
  bar->addWidget(new QLabel(tr("Schedule"), page));
  bar->addWidget(timelineSchedule_);
  bar->addWidget(zin);
  bar->addWidget(zout);
  bar->addWidget(zfit);
  bar->addStretch(1);
  bar->addWidget(trace);
  v->addLayout(bar);
  timelineInfo_ = new QLabel(page);
  timelineInfo_->setObjectName(QStringLiteral("timelineInfo"));
  timelineInfo_->setWordWrap(true);
  timelineInfo_->setSizePolicy(QSizePolicy::Ignored, QSizePolicy::Preferred);
  v->addWidget(timelineInfo_);
  timeline_ = new TimelineView(page);
  timeline_->setObjectName(QStringLiteral("timeline"));
  v->addWidget(timeline_, 1);

  auto* runBox = new QGroupBox(tr("Whole run with failures (Monte-Carlo)"), page);
  auto* rf = new QHBoxLayout(runBox);
  mtbfHours_ = new QDoubleSpinBox(runBox);
  mtbfHours_->setRange(1, 1e7);
  mtbfHours_->setValue(6335);
  mtbfHours_->setSuffix(tr(" h"));
  mtbfHours_->setToolTip(tr("Mean time between failures of one node (Llama 3 saw about 6,335 node-hours)"));
  checkpointMin_ = new QDoubleSpinBox(runBox);
  checkpointMin_->setRange(0, 1e5);
  checkpointMin_->setSuffix(tr(" min"));
  checkpointMin_->setSpecialValueText(tr("Young/Daly"));
  checkpointMin_->setToolTip(tr("Checkpoint interval; 0 = the Young/Daly optimum sqrt(2 x checkpoint cost x MTBF)"));
  restartMin_ = new QDoubleSpinBox(runBox);
  restartMin_->setRange(0, 1e4);
  restartMin_->setValue(20);
  restartMin_->setSuffix(tr(" min"));
  restartMin_->setToolTip(tr("Time to restart after a failure: re-queue, health check, node replacement, reload"));
  trials_ = makeSpin(runBox, "trials", 10, 100000, tr("Monte-Carlo trials (seeded, deterministic)"));
  trials_->setValue(1000);
  auto* simRun = new QPushButton(tr("Simulate run"), runBox);
  simRun->setObjectName(QStringLiteral("simulateRun"));
  simRun->setToolTip(tr("Expected wall-clock days and dollars with failures, p10-p90"));
  rf->addWidget(new QLabel(tr("node MTBF"), runBox));
  rf->addWidget(mtbfHours_);
  rf->addWidget(new QLabel(tr("checkpoint every"), runBox));
  rf->addWidget(checkpointMin_);
  rf->addWidget(new QLabel(tr("restart"), runBox));
  rf->addWidget(restartMin_);
  rf->addWidget(new QLabel(tr("trials"), runBox));
  rf->addWidget(trials_);
  rf->addWidget(simRun);
  runSimResult_ = new QLabel(runBox);
  runSimResult_->setObjectName(QStringLiteral("runSimResult"));
  runSimResult_->setWordWrap(true);
  runSimResult_->setSizePolicy(QSizePolicy::Ignored, QSizePolicy::Preferred);
  rf->addWidget(runSimResult_, 1);
  v->addWidget(runBox);

  connect(zin, &QPushButton::clicked, timeline_, &TimelineView::zoomIn);
  connect(zout, &QPushButton::clicked, timeline_, &TimelineView::zoomOut);
  connect(zfit, &QPushButton::clicked, timeline_, &TimelineView::resetZoom);
  connect(timelineSchedule_, &QComboBox::currentIndexChanged, this, [this] { refreshTimeline(); });
  connect(trace, &QPushButton::clicked, this, &MainWindow::exportTrace);
  connect(simRun, &QPushButton::clicked, this, &MainWindow::simulateRun);
  return page;
}

#ifdef CAPPLAN_GUI_HAVE_SIMULATOR
namespace {
struct TimelineData {
  StepSimulation sim;
  std::string trace;
};
}  // namespace
#endif

void MainWindow::refreshTimeline() {
  const quint64 gen = ++timelineGeneration_;
  simulatedBreakdown_.reset();
  traceJson_.clear();
  if (!selected_) {
    timeline_->clear(tr("No layout selected."));
    return;
  }
#ifdef CAPPLAN_GUI_HAVE_SIMULATOR
  Scenario s;
  s.model = inputs_.model;
  s.cluster = inputs_.cluster;
  s.training = inputs_.training;
  s.nodes = selected_->nodes;
  Layout l = selected_->layout;
  const int choice = timelineSchedule_->currentIndex();
  if (choice == 1) l.schedule = Schedule::GPipe;
  if (choice == 2) l.schedule = Schedule::OneFOneB;
  if (choice == 3) {
    l.schedule = Schedule::Interleaved;
    if (l.vp < 2) l.vp = 2;
  }
  if (choice != 3 && choice != 0) l.vp = 1;
  if (const auto why = check_layout(s, l)) {
    timeline_->clear(tr("This schedule does not work for the layout: %1").arg(QString::fromStdString(*why)));
    return;
  }
  timeline_->clear(tr("Simulating one step..."));
  auto* watcher = new QFutureWatcher<TimelineData>(this);
  connect(watcher, &QFutureWatcherBase::finished, this, [this, watcher, gen, l, s] {
    watcher->deleteLater();
    if (gen != timelineGeneration_) return;
    const TimelineData d = watcher->result();
    if (!d.sim.error.empty()) {
      timeline_->clear(tr("Simulation failed: %1").arg(QString::fromStdString(d.sim.error)));
      return;
    }
    std::vector<TimelineBar> bars;
    bars.reserve(d.sim.timeline.size());
    for (const SimEvent& ev : d.sim.timeline) {
      TimelineBar b;
      b.lane = ev.stage * 2 + (ev.stream == SimStream::Compute ? 0 : 1);
      b.startS = ev.start_s;
      b.endS = ev.end_s;
      b.kind = int(ev.kind);
      b.microbatch = ev.microbatch;
      bars.push_back(b);
    }
    QStringList labels;
    for (int st = 0; st < l.pp; ++st) {
      const int rank = st < int(d.sim.stage_rank.size()) ? d.sim.stage_rank[size_t(st)] : -1;
      labels << (rank >= 0 ? tr("stage %1 · GPU %2").arg(st).arg(rank) : tr("stage %1").arg(st));
    }
    timeline_->setBars(std::move(bars), l.pp, d.sim.step_time_s, labels);
    traceJson_ = d.trace;
    const bool samePlan = sameLayout(l, selected_ ? selected_->layout : Layout{});
    if (samePlan) {
      simulatedBreakdown_ = d.sim.breakdown_s;
      simulatedStepS_ = d.sim.step_time_s;
      refreshCharts();
    }
    timelineInfo_->setText(tr("Simulated step of one data-parallel replica (one GPU per stage; the other tp ranks do the same): "
                              "%1 simulated vs %2 predicted, bubble %3%, %4 tasks. %5")
                               .arg(formatSeconds(d.sim.step_time_s), formatSeconds(selected_ ? selected_->step_time_s : 0))
                               .arg(d.sim.bubble_fraction * 100, 0, 'f', 1)
                               .arg(d.sim.num_events)
                               .arg(QString::fromUtf8(to_string(l.schedule))));
    emit timelineUpdated();
  });
  watcher->setFuture(QtConcurrent::run([s, l]() {
    TimelineData d;
    d.sim = simulate_step(s, l);
    if (d.sim.error.empty()) d.trace = chrome_trace_json(d.sim);
    return d;
  }));
#else
  Q_UNUSED(gen);
  timeline_->clear(tr("The simulator library is not built into this app."));
#endif
}

void MainWindow::exportTrace() {
  if (traceJson_.empty()) {
    timelineInfo_->setText(tr("Nothing to export: no simulated step yet."));
    return;
  }
  const QString f = QFileDialog::getSaveFileName(this, tr("Export Chrome trace"), QStringLiteral("step.trace.json"),
                                                 tr("Chrome trace (*.json)"));
  if (f.isEmpty()) return;
  const std::string err = write_file_atomic(f.toStdString(), traceJson_);
  timelineInfo_->setText(err.empty() ? tr("Wrote %1").arg(f) : QString::fromStdString(err));
}

void MainWindow::simulateRun() {
#ifdef CAPPLAN_GUI_HAVE_SIMULATOR
  if (!selected_) return;
  Scenario s;
  s.model = inputs_.model;
  s.cluster = inputs_.cluster;
  s.training = inputs_.training;
  s.nodes = selected_->nodes;
  const double step = simulatedBreakdown_ ? simulatedStepS_ : selected_->step_time_s;
  RunOptions o;
  o.node_mtbf_hours = mtbfHours_->value();
  o.checkpoint_interval_min = checkpointMin_->value();
  o.restart_min = restartMin_->value();
  o.trials = trials_->value();
  runSimResult_->setText(tr("Simulating %1 runs...").arg(o.trials));
  auto* watcher = new QFutureWatcher<RunSimulation>(this);
  const quint64 gen = timelineGeneration_;
  connect(watcher, &QFutureWatcherBase::finished, this, [this, watcher, gen] {
    watcher->deleteLater();
    if (gen != timelineGeneration_) return;
    const RunSimulation r = watcher->result();
    if (!r.error.empty()) {
      runSimResult_->setText(QString::fromStdString(r.error));
      return;
    }
    runSimResult_->setText(tr("<b>%1 days</b> expected (p10 %2, p90 %3) vs %4 failure-free; %5 (p10 %6, p90 %7); "
                              "%8 failures; checkpoint every %9 min (Young/Daly %10, best on sweep %11)")
                               .arg(r.mean_days, 0, 'f', 1).arg(r.p10_days, 0, 'f', 1).arg(r.p90_days, 0, 'f', 1)
                               .arg(r.failure_free_days, 0, 'f', 1)
                               .arg(formatDollars(r.mean_cost_usd), formatDollars(r.p10_cost_usd), formatDollars(r.p90_cost_usd))
                               .arg(r.mean_failures, 0, 'f', 1)
                               .arg(r.checkpoint_interval_min, 0, 'f', 0)
                               .arg(r.young_daly_interval_min, 0, 'f', 0)
                               .arg(r.best_interval_min, 0, 'f', 0));
  });
  watcher->setFuture(QtConcurrent::run([s, step, o]() { return simulate_run(run_inputs(s, step), o); }));
#else
  runSimResult_->setText(tr("The simulator library is not built into this app."));
#endif
}

// ================================================================ Run page

QWidget* MainWindow::buildRunPage() {
  runPanel_ = new RunPanel;
  runPanel_->setObjectName(QStringLiteral("runPage"));
  return runPanel_;
}

// ================================================================ TimelineView

TimelineView::TimelineView(QWidget* parent) : QWidget(parent) {
  setMinimumHeight(240);
  setMouseTracking(true);
  setFocusPolicy(Qt::WheelFocus);
  setToolTip(tr("Ctrl+wheel or the buttons zoom; drag to pan; hover a bar for its task"));
  message_ = tr("No layout selected.");
}

const QStringList& TimelineView::kindNames() {
  static const QStringList names{QStringLiteral("forward"),  QStringLiteral("recompute"),
                                 QStringLiteral("backward (input)"), QStringLiteral("backward (weight)"),
                                 QStringLiteral("TP comm"),  QStringLiteral("send forward"),
                                 QStringLiteral("send backward"), QStringLiteral("DP comm"),
                                 QStringLiteral("ZeRO all-gather"), QStringLiteral("optimizer"),
                                 QStringLiteral("offload"),  QStringLiteral("reload")};
  return names;
}

QColor TimelineView::kindColor(int kind) {
  static const QColor colors[] = {QColor(66, 133, 244), QColor(251, 188, 5),  QColor(52, 168, 83),
                                  QColor(30, 120, 60),  QColor(171, 71, 188), QColor(255, 112, 67),
                                  QColor(255, 167, 38), QColor(234, 67, 53),  QColor(141, 110, 99),
                                  QColor(96, 125, 139), QColor(0, 172, 193),  QColor(0, 131, 143)};
  return kind >= 0 && kind < int(std::size(colors)) ? colors[kind] : QColor(120, 120, 120);
}

void TimelineView::setBars(std::vector<TimelineBar> bars, int stages, double stepTimeS, QStringList stageLabels) {
  bars_ = std::move(bars);
  stages_ = stages;
  stageLabels_ = std::move(stageLabels);
  stepTimeS_ = stepTimeS > 0 ? stepTimeS : 1;
  message_.clear();
  resetZoom();
}

void TimelineView::clear(const QString& message) {
  bars_.clear();
  stages_ = 0;
  message_ = message;
  update();
}

namespace {
constexpr int kLabelW = 150;
constexpr int kAxisH = 26;
constexpr int kLegendH = 26;
}  // namespace

double TimelineView::xAt(double t) const {
  const double w = std::max(1, width() - kLabelW - 8);
  return kLabelW + (t - offsetS_) / (stepTimeS_ / zoom_) * w;
}

double TimelineView::timeAt(double x) const {
  const double w = std::max(1, width() - kLabelW - 8);
  return offsetS_ + (x - kLabelW) / w * (stepTimeS_ / zoom_);
}

void TimelineView::zoomIn() { setZoom(zoom_ * 1.5, kLabelW + (width() - kLabelW) / 2.0); }
void TimelineView::zoomOut() { setZoom(zoom_ / 1.5, kLabelW + (width() - kLabelW) / 2.0); }
void TimelineView::resetZoom() {
  zoom_ = 1.0;
  offsetS_ = 0;
  update();
}

void TimelineView::setZoom(double zoom, double anchorX) {
  const double t = timeAt(anchorX);
  zoom_ = std::clamp(zoom, 1.0, 1e5);
  const double w = std::max(1, width() - kLabelW - 8);
  offsetS_ = t - (anchorX - kLabelW) / w * (stepTimeS_ / zoom_);
  offsetS_ = std::clamp(offsetS_, 0.0, std::max(0.0, stepTimeS_ - stepTimeS_ / zoom_));
  update();
}

void TimelineView::wheelEvent(QWheelEvent* event) {
  if (bars_.empty()) return;
  const double f = event->angleDelta().y() > 0 ? 1.25 : 0.8;
  setZoom(zoom_ * f, event->position().x());
  event->accept();
}

void TimelineView::mousePressEvent(QMouseEvent* event) {
  dragX_ = int(event->position().x());
  dragOffsetS_ = offsetS_;
}

void TimelineView::mouseMoveEvent(QMouseEvent* event) {
  if (!(event->buttons() & Qt::LeftButton) || dragX_ < 0) return;
  const double w = std::max(1, width() - kLabelW - 8);
  offsetS_ = dragOffsetS_ - (event->position().x() - dragX_) / w * (stepTimeS_ / zoom_);
  offsetS_ = std::clamp(offsetS_, 0.0, std::max(0.0, stepTimeS_ - stepTimeS_ / zoom_));
  update();
}

const TimelineBar* TimelineView::barAt(const QPoint& p) const {
  if (stages_ <= 0) return nullptr;
  const int lanes = stages_ * 2;
  const double laneH = double(height() - kAxisH - kLegendH) / lanes;
  const int lane = int((p.y() - kAxisH) / laneH);
  const double t = timeAt(p.x());
  for (const TimelineBar& b : bars_)
    if (b.lane == lane && b.startS <= t && t <= b.endS) return &b;
  return nullptr;
}

bool TimelineView::event(QEvent* e) {
  if (e->type() == QEvent::ToolTip) {
    auto* he = static_cast<QHelpEvent*>(e);
    if (const TimelineBar* b = barAt(he->pos())) {
      QToolTip::showText(he->globalPos(),
                         tr("%1%2\nstage %3, %4 - %5 (%6)")
                             .arg(kindNames().value(b->kind))
                             .arg(b->microbatch >= 0 ? tr(", micro-batch %1").arg(b->microbatch) : QString())
                             .arg(b->lane / 2)
                             .arg(formatSeconds(b->startS), formatSeconds(b->endS), formatSeconds(b->endS - b->startS)),
                         this);
      return true;
    }
  }
  return QWidget::event(e);
}

void TimelineView::paintEvent(QPaintEvent*) {
  QPainter p(this);
  p.fillRect(rect(), palette().base());
  if (bars_.empty() || stages_ <= 0) {
    p.setPen(palette().text().color());
    p.drawText(rect(), Qt::AlignCenter, message_);
    return;
  }
  const int lanes = stages_ * 2;
  const double laneH = double(height() - kAxisH - kLegendH) / lanes;
  // Lane labels and backgrounds.
  for (int lane = 0; lane < lanes; ++lane) {
    const QRectF r(0, kAxisH + lane * laneH, width(), laneH);
    if ((lane / 2) % 2 == 0) p.fillRect(r, palette().alternateBase());
    if (laneH >= 9) {
      p.setPen(palette().text().color());
      const QString stage = lane / 2 < stageLabels_.size() ? stageLabels_[lane / 2] : tr("stage %1").arg(lane / 2);
      p.drawText(QRectF(4, r.top(), kLabelW - 8, r.height()), Qt::AlignVCenter | Qt::AlignLeft,
                 lane % 2 == 0 ? stage : tr("  comm"));
    }
  }
  // Time axis.
  const double span = stepTimeS_ / zoom_;
  const double raw = span / 8;
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  const double tick = raw / mag < 2 ? mag * 2 : raw / mag < 5 ? mag * 5 : mag * 10;
  p.setPen(palette().mid().color());
  for (double t = std::ceil(offsetS_ / tick) * tick; t <= offsetS_ + span; t += tick) {
    const double x = xAt(t);
    p.drawLine(QPointF(x, kAxisH - 4), QPointF(x, height() - kLegendH));
    p.drawText(QRectF(x - 40, 2, 80, kAxisH - 6), Qt::AlignCenter, formatSeconds(t));
  }
  // Bars.
  p.save();
  p.setClipRect(QRect(kLabelW, kAxisH, width() - kLabelW, height() - kAxisH - kLegendH));
  for (const TimelineBar& b : bars_) {
    const double x0 = xAt(b.startS);
    const double x1 = xAt(b.endS);
    if (x1 < kLabelW || x0 > width()) continue;
    const QRectF r(x0, kAxisH + b.lane * laneH + 1, std::max(1.0, x1 - x0), laneH - 2);
    p.fillRect(r, kindColor(b.kind));
    if (r.width() > 18 && laneH > 12 && b.microbatch >= 0) {
      p.setPen(Qt::white);
      p.drawText(r, Qt::AlignCenter, QString::number(b.microbatch));
    }
  }
  p.restore();
  // Legend.
  int x = kLabelW;
  const int y = height() - kLegendH + 6;
  for (int k = 0; k < kindNames().size(); ++k) {
    p.fillRect(QRect(x, y, 12, 12), kindColor(k));
    p.setPen(palette().text().color());
    const QString name = kindNames()[k];
    p.drawText(QPoint(x + 16, y + 11), name);
    x += 22 + p.fontMetrics().horizontalAdvance(name);
  }
}

// ================================================================ RunPanel

RunPanel::RunPanel(QWidget* parent) : QWidget(parent) {
  auto* v = new QVBoxLayout(this);
  auto* bar = new QHBoxLayout;
  steps_ = new QSpinBox(this);
  steps_->setObjectName(QStringLiteral("runSteps"));
  steps_->setRange(1, 100000);
  steps_->setValue(20);
  steps_->setToolTip(tr("Training steps of the scaled-down run"));
  launchButton_ = new QPushButton(tr("Launch scaled-down run"), this);
  launchButton_->setObjectName(QStringLiteral("launchRun"));
  launchButton_->setToolTip(tr("mpirun capplan-train on this machine with the selected layout (dp, tp, pp, schedule, knobs kept), "
                               "the model shrunk to fit"));
  stopButton_ = new QPushButton(tr("Stop"), this);
  stopButton_->setObjectName(QStringLiteral("stopRun"));
  stopButton_->setToolTip(tr("Stop the run; it keeps its last checkpoint and writes its record"));
  stopButton_->setEnabled(false);
  resumeButton_ = new QPushButton(tr("Resume"), this);
  resumeButton_->setObjectName(QStringLiteral("resumeRun"));
  resumeButton_->setToolTip(tr("Continue the last run from its newest good checkpoint"));
  resumeButton_->setEnabled(false);
  status_ = new QLabel(this);
  status_->setObjectName(QStringLiteral("runStatus"));
  status_->setWordWrap(true);
  status_->setSizePolicy(QSizePolicy::Ignored, QSizePolicy::Preferred);
  runDp_ = makeSpin(this, "runDp", 1, kMaxRanks, tr("dp of the local run"));
  runTp_ = makeSpin(this, "runTp", 1, kMaxRanks, tr("tp of the local run"));
  runPp_ = makeSpin(this, "runPp", 1, kMaxRanks, tr("pp of the local run"));
  for (QSpinBox* s : {runDp_, runTp_, runPp_}) s->setMinimumWidth(60);
  layoutNote_ = new QLabel(this);
  layoutNote_->setObjectName(QStringLiteral("runLayoutNote"));
  layoutNote_->setWordWrap(true);
  layoutNote_->setSizePolicy(QSizePolicy::Ignored, QSizePolicy::Preferred);
  bar->addWidget(new QLabel(tr("dp"), this));
  bar->addWidget(runDp_);
  bar->addWidget(new QLabel(tr("tp"), this));
  bar->addWidget(runTp_);
  bar->addWidget(new QLabel(tr("pp"), this));
  bar->addWidget(runPp_);
  bar->addWidget(new QLabel(tr("Steps"), this));
  bar->addWidget(steps_);
  keepKnobs_ = new QCheckBox(tr("plan's knobs"), this);
  keepKnobs_->setObjectName(QStringLiteral("runKeepKnobs"));
  keepKnobs_->setChecked(true);
  keepKnobs_->setToolTip(tr("Keep the plan's zero, recompute, offload and sp; clear to run the plain layout"));
  bar->addWidget(keepKnobs_);
  bar->addWidget(launchButton_);
  bar->addWidget(stopButton_);
  bar->addWidget(resumeButton_);
  bar->addWidget(status_, 1);
  v->addLayout(bar);
  auto* slurmBar = new QHBoxLayout;
  slurm_ = new QCheckBox(tr("Launch on Slurm"), this);
  slurm_->setObjectName(QStringLiteral("runSlurm"));
  slurm_->setToolTip(tr("Submit the run with sbatch (health check first, requeue and resume after a failure) "
                        "and follow it with squeue; Stop cancels the job (scancel)"));
  partition_ = new QLineEdit(this);
  partition_->setObjectName(QStringLiteral("runPartition"));
  partition_->setPlaceholderText(tr("default partition"));
  partition_->setToolTip(tr("Slurm partition (empty: the cluster's default)"));
  slurmNodes_ = makeSpin(this, "runSlurmNodes", 1, 4096, tr("Nodes of the Slurm job"));
  timeLimit_ = new QLineEdit(this);
  timeLimit_->setObjectName(QStringLiteral("runTimeLimit"));
  timeLimit_->setPlaceholderText(tr("HH:MM:SS"));
  timeLimit_->setToolTip(tr("Time limit of the job (empty: the partition's); at least one checkpoint interval"));
  slurmState_ = new QLabel(this);
  slurmState_->setObjectName(QStringLiteral("runSlurmState"));
  slurmState_->setSizePolicy(QSizePolicy::Ignored, QSizePolicy::Preferred);
  for (QWidget* w : {static_cast<QWidget*>(partition_), static_cast<QWidget*>(slurmNodes_), static_cast<QWidget*>(timeLimit_)})
    w->setEnabled(false);
  connect(slurm_, &QCheckBox::toggled, this, [this](bool on) {
    for (QWidget* w : {static_cast<QWidget*>(partition_), static_cast<QWidget*>(slurmNodes_), static_cast<QWidget*>(timeLimit_)})
      w->setEnabled(on);
  });
  slurmBar->addWidget(slurm_);
  slurmBar->addWidget(new QLabel(tr("partition"), this));
  slurmBar->addWidget(partition_);
  slurmBar->addWidget(new QLabel(tr("nodes"), this));
  slurmBar->addWidget(slurmNodes_);
  slurmBar->addWidget(new QLabel(tr("time limit"), this));
  slurmBar->addWidget(timeLimit_);
  slurmBar->addWidget(slurmState_, 1);
  v->addLayout(slurmBar);
  v->addWidget(layoutNote_);

  auto* charts = new QHBoxLayout;
  lossChart_ = makeChartView(this, "lossChart");
  speedChart_ = makeChartView(this, "speedChart");
  systemChart_ = makeChartView(this, "systemChart");
  charts->addWidget(lossChart_);
  charts->addWidget(speedChart_);
  charts->addWidget(systemChart_);
  v->addLayout(charts, 2);

  auto* lower = new QHBoxLayout;
  log_ = new QPlainTextEdit(this);
  log_->setObjectName(QStringLiteral("runLog"));
  log_->setReadOnly(true);
  log_->setMaximumBlockCount(2000);
  log_->setFont(QFont(QStringLiteral("monospace")));
  log_->setPlaceholderText(tr("Output of mpirun and capplan-train appears here."));
  auto* right = new QVBoxLayout;
  compare_ = new QTableWidget(0, 4, this);
  compare_->setObjectName(QStringLiteral("runCompare"));
  compare_->setHorizontalHeaderLabels({tr("term"), tr("predicted"), tr("simulated"), tr("measured")});
  compare_->horizontalHeader()->setSectionResizeMode(QHeaderView::Stretch);
  compare_->verticalHeader()->hide();
  compare_->setToolTip(tr("Seconds per step by term: planner, simulator and the run itself"));
  findings_ = new QLabel(this);
  findings_->setObjectName(QStringLiteral("runFindings"));
  findings_->setWordWrap(true);
  findings_->setTextFormat(Qt::RichText);
  right->addWidget(compare_, 1);
  right->addWidget(findings_);
  lower->addWidget(log_, 1);
  lower->addLayout(right, 1);
  v->addLayout(lower, 1);

  connect(launchButton_, &QPushButton::clicked, this, [this] { launch(false); });
  connect(resumeButton_, &QPushButton::clicked, this, [this] { launch(true); });
  connect(stopButton_, &QPushButton::clicked, this, &RunPanel::stop);
  resetCharts();
#ifndef CAPPLAN_GUI_HAVE_RUNTIME
  launchButton_->setEnabled(false);
  status_->setText(tr("The runtime library is not built into this app (MPI not found)."));
#endif
}

RunPanel::~RunPanel() {
  stop();
  if (watcher_ != nullptr) watcher_->waitForFinished();
}

void RunPanel::setSteps(int steps) { steps_->setValue(steps); }

void RunPanel::setKeepKnobs(bool keep) { keepKnobs_->setChecked(keep); }

void RunPanel::setPlan(const Plan& plan) {
  plan_ = plan;
  const Layout& l = plan.layout;
  if (l.gpus() <= kMaxRanks) {
    runDp_->setValue(l.dp);
    runTp_->setValue(l.tp);
    runPp_->setValue(l.pp);
    layoutNote_->setText(tr("Runs the selected layout as is (%1 ranks); the model is scaled down to fit this machine.").arg(l.gpus()));
    return;
  }
  runTp_->setValue(std::min(l.tp, 2));
  runPp_->setValue(std::min(l.pp, 2));
  runDp_->setValue(std::max(1, std::min(l.dp, kMaxRanks / (runTp_->value() * runPp_->value()))));
  layoutNote_->setText(tr("The selected layout needs %1 ranks; this machine runs at most %2. Local run: dp %3, tp %4, pp %5 "
                          "with the plan's schedule (%6), vp and order (and its other knobs when 'plan's knobs' is ticked); the model is scaled down.")
                           .arg(l.gpus()).arg(kMaxRanks).arg(runDp_->value()).arg(runTp_->value()).arg(runPp_->value())
                           .arg(QString::fromUtf8(to_string(l.schedule))));
}

Layout RunPanel::runLayout() const {
  Layout l = plan_.layout;
  l.dp = runDp_->value();
  l.tp = runTp_->value();
  l.pp = runPp_->value();
  if (l.pp == 1) {
    l.vp = 1;
    if (l.schedule == Schedule::Interleaved) l.schedule = Schedule::OneFOneB;
  }
  if (l.tp == 1) l.sp = false;
  if (!keepKnobs_->isChecked()) {
    l.zero = 0;
    l.recompute = Recompute::None;
    l.offload = false;
    l.sp = false;
  }
  return l;
}

int RunPanel::lossPoints() const { return loss_ != nullptr ? loss_->count() : 0; }

int RunPanel::resumeMarkers() const { return resumed_ != nullptr ? resumed_->count() : 0; }

void RunPanel::setSlurm(bool on, const QString& partition, int nodes, const QString& timeLimit) {
  slurm_->setChecked(on);
  partition_->setText(partition);
  slurmNodes_->setValue(nodes);
  timeLimit_->setText(timeLimit);
}

void RunPanel::onSlurmState(const QString& state, const QString& reason, int position, int restarts) {
  QString text = tr("Slurm: %1").arg(state);
  if (!reason.isEmpty() && reason != QLatin1String("None")) text += QStringLiteral(" (%1)").arg(reason);
  if (position > 0) text += tr(", queue position %1").arg(position);
  if (restarts > 0) text += tr(", requeued %1x").arg(restarts);
  slurmState_->setText(text);
}

// A requeued attempt resumed from `step`: the steps after it are recomputed, so they leave the
// chart, and a marker shows where the attempt took over.
void RunPanel::onResumed(double step) {
  QList<QPointF> kept;
  for (const QPointF& p : loss_->points())
    if (p.x() <= step) kept.append(p);
  loss_->replace(kept);
  QList<QPointF> speed;
  for (const QPointF& p : tokens_->points())
    if (p.x() <= step) speed.append(p);
  tokens_->replace(speed);
  const double y = kept.isEmpty() ? 0.0 : kept.last().y();
  resumed_->append(step, y);
}

void RunPanel::resetCharts() {
  auto makeLine = [](QChartView* view, const QString& title, const QString& xTitle, const QString& yTitle,
                     std::initializer_list<QLineSeries**> series, std::initializer_list<QString> names) {
    auto* chart = new QChart;
    chart->setTitle(title);
    auto* ax = new QValueAxis;
    ax->setTitleText(xTitle);
    ax->setLabelFormat(QStringLiteral("%.0f"));
    auto* ay = new QValueAxis;
    ay->setTitleText(yTitle);
    chart->addAxis(ax, Qt::AlignBottom);
    chart->addAxis(ay, Qt::AlignLeft);
    auto name = names.begin();
    for (QLineSeries** s : series) {
      *s = new QLineSeries;
      (*s)->setName(*name++);
      chart->addSeries(*s);
      (*s)->attachAxis(ax);
      (*s)->attachAxis(ay);
    }
    replaceChart(view, chart);
  };
  makeLine(lossChart_, tr("Loss"), tr("step"), tr("loss"), {&loss_}, {tr("loss per step")});
  resumed_ = new QScatterSeries;
  resumed_->setName(tr("attempt resumed (requeue)"));
  resumed_->setMarkerSize(10);
  lossChart_->chart()->addSeries(resumed_);
  for (QAbstractAxis* axis : loss_->attachedAxes()) resumed_->attachAxis(axis);
  makeLine(speedChart_, tr("Throughput"), tr("step"), tr("tokens/s"), {&tokens_}, {tr("tokens/s per step")});
  makeLine(systemChart_, tr("System (rank 0, over time)"), tr("seconds"), tr("% / MiB"), {&cpu_, &rss_},
           {tr("CPU utilisation %"), tr("resident memory MiB")});
  t0_ = -1;
}

namespace {
void extendAxes(QLineSeries* s, double x, double y) {
  const auto axes = s->attachedAxes();
  if (axes.size() < 2) return;
  auto* ax = qobject_cast<QValueAxis*>(axes[0]);
  auto* ay = qobject_cast<QValueAxis*>(axes[1]);
  if (s->count() == 1) {
    ax->setRange(x, x + 1);
    ay->setRange(std::min(0.0, y), y * 1.2 + 1e-9);
  }
  if (x > ax->max()) ax->setMax(x);
  if (y > ay->max()) ay->setMax(y * 1.1);
  if (y < ay->min()) ay->setMin(y);
}
}  // namespace

void RunPanel::onMetrics(const QString& type, const QHash<QString, double>& n) {
  if (slurmRun_ && type == QLatin1String("start") && n.value(QStringLiteral("resumed_from_step"), 0) > 0 &&
      loss_->count() > 0) {
    onResumed(n.value(QStringLiteral("resumed_from_step")));
    return;
  }
  if (n.contains(QStringLiteral("loss")) && (type.isEmpty() || type == QLatin1String("step"))) {
    const double step = n.value(QStringLiteral("step"));
    const double loss = n.value(QStringLiteral("loss"));
    if (!std::isfinite(loss)) return;
    loss_->append(step, loss);
    extendAxes(loss_, step, loss);
    const double tps = n.value(QStringLiteral("tokens_per_s"), NAN);
    if (std::isfinite(tps)) {
      tokens_->append(step, tps);
      extendAxes(tokens_, step, tps);
    }
    emit metricsArrived(int(loss_->count()));
  } else if (type == QLatin1String("system") && n.value(QStringLiteral("rank"), 0) == 0) {
    const double t = n.value(QStringLiteral("time_s"));
    double cpu = n.value(QStringLiteral("cpu_util"), NAN);
    if (std::isfinite(cpu)) {
      if (cpu <= 1.0) cpu *= 100.0;
      cpu_->append(t, cpu);
      extendAxes(cpu_, t, cpu);
    }
    const double rss = n.value(QStringLiteral("rss_bytes"), NAN) / (1024.0 * 1024.0);
    if (std::isfinite(rss)) {
      rss_->append(t, rss);
      extendAxes(rss_, t, rss);
    }
  }
}

void RunPanel::onOutputLine(const QString& line) { log_->appendPlainText(line); }

void RunPanel::onFinished(const QString& status, const QString& reason) {
  running_ = false;
  launchButton_->setEnabled(true);
  stopButton_->setEnabled(false);
  resumeButton_->setEnabled(!runDir_.isEmpty());
  if (status == QLatin1String("cancelled")) {
    // Stop is the user's choice, not a failure; what was checkpointed stays for Resume.
    QString text = tr("Stopped by the user");
    const int steps = int(loss_->count());
    if (steps > 0) text += tr(" after %1 steps").arg(steps);
    text += tr(". Its checkpoints are kept in %1; Resume continues from the newest.").arg(runDir_);
    status_->setText(text);
  } else {
    status_->setText(reason.isEmpty() ? tr("Run %1").arg(status) : tr("Run %1: %2").arg(status, reason));
  }
  emit runFinished(status == QLatin1String("succeeded"));
}

void RunPanel::stop() {
  if (cancel_) cancel_->store(true);
}

void RunPanel::launch(bool resume) {
#ifdef CAPPLAN_GUI_HAVE_RUNTIME
  if (running_) return;
  const Layout layout = runLayout();
  if (layout.gpus() <= 0 || plan_.scenario.model.layers <= 0) {
    status_->setText(tr("No plan to run: select a layout on the Plan page."));
    return;
  }
  if (runDir_.isEmpty() || (!resume && runDirUsed_)) {
    const QString base = QStandardPaths::writableLocation(QStandardPaths::AppDataLocation) + QStringLiteral("/runs");
    runDir_ = QStringLiteral("%1/run-%2").arg(base, QDateTime::currentDateTimeUtc().toString(QStringLiteral("yyyyMMdd-hhmmss")));
  }
  runDirUsed_ = true;
  if (!resume) {
    resetCharts();
    log_->clear();
  }
  rt::LaunchRequest req;
  req.model_ref = plan_.model_ref;
  req.cluster_ref = plan_.cluster_ref;
  req.scenario = plan_.scenario;
  req.scenario.nodes = 1;
  req.scenario.gpus = layout.gpus();
  req.layout = layout;
  req.scale_down = true;
  req.steps = steps_->value();
  req.run_dir = runDir_.toStdString();
  req.resume = resume ? "auto" : "never";
  req.checkpoint_every = checkpointEvery_;  // resume: from the newest good checkpoint in run_dir
  req.measure_machine = true;
#ifdef CAPPLAN_GUI_TRAIN_HINT
  req.train_build_hint = CAPPLAN_GUI_TRAIN_HINT;
#endif
  running_ = true;
  launchButton_->setEnabled(false);
  resumeButton_->setEnabled(false);
  stopButton_->setEnabled(true);
  status_->setText(tr("Preparing %1 ranks in %2...").arg(layout.gpus()).arg(runDir_));
  compare_->setRowCount(0);
  findings_->clear();
  cancel_ = std::make_shared<std::atomic<bool>>(false);
  auto cancel = cancel_;
  QPointer<RunPanel> self(this);
  auto post = [self](std::function<void(RunPanel*)> f) {
    QMetaObject::invokeMethod(qApp, [self, f = std::move(f)] {
      if (self) f(self.data());
    }, Qt::QueuedConnection);
  };
  if (watcher_ == nullptr) watcher_ = new QFutureWatcher<void>(this);
  slurmRun_ = slurm_->isChecked();
  slurmState_->clear();
  if (slurmRun_) {
    rt::SlurmOptions so;
    so.partition = partition_->text().trimmed().toStdString();
    so.nodes = slurmNodes_->value();
    so.time_limit = timeLimit_->text().trimmed().toStdString();
    req.resume = "auto";
    watcher_->setFuture(QtConcurrent::run([req, so, cancel, post]() {
      Loaded<rt::PreparedSlurmRun> prepared = rt::prepare_slurm_run(req, so);
      if (!prepared.ok()) {
        const QString text = QString::fromStdString(prepared.diagnostics.to_string());
        post([text](RunPanel* p) {
          p->onOutputLine(text);
          p->onFinished(QStringLiteral("not started"), text.section(QLatin1Char('\n'), 0, 0));
        });
        return;
      }
      std::string error;
      const std::string job = rt::submit_slurm_job(*prepared.value, &error);
      if (job.empty()) {
        post([e = QString::fromStdString(error)](RunPanel* p) { p->onFinished(QStringLiteral("not submitted"), e); });
        return;
      }
      post([job = QString::fromStdString(job), argv = prepared.value->sbatch_argv](RunPanel* p) {
        p->onOutputLine(QStringLiteral("$ ") + QString::fromStdString(rt::shell_quote(argv)));
        p->status_->setText(RunPanel::tr("Submitted as Slurm job %1").arg(job));
      });
      rt::SlurmCallbacks cb;
      cb.on_output = [post](rt::OutputStream, const std::string& line) {
        post([l = QString::fromStdString(line)](RunPanel* p) { p->onOutputLine(l); });
      };
      cb.on_metrics = [post](const rt::MetricsRecord& r) {
        QHash<QString, double> numbers;
        for (const auto& [k, v] : r.numbers) numbers.insert(QString::fromStdString(k), v);
        post([type = QString::fromStdString(r.type), numbers](RunPanel* p) { p->onMetrics(type, numbers); });
      };
      cb.on_state = [post](const rt::SlurmStateChange& c, int position) {
        post([state = QString::fromStdString(c.state), reason = QString::fromStdString(c.reason), position,
              restarts = c.restarts](RunPanel* p) { p->onSlurmState(state, reason, position, restarts); });
      };
      const rt::RunRecord record = rt::follow_slurm_job(*prepared.value, job, cb, cancel.get());
      const std::vector<rt::TermRow> rows = rt::compare_terms(record);
      QString history;
      if (record.slurm) {
        for (const auto& a : record.slurm->attempts) {
          history += RunPanel::tr("attempt %1: %2").arg(a.attempt).arg(QString::fromStdString(a.outcome));
          if (a.resumed_from_step > 0) history += RunPanel::tr(", resumed from step %1").arg(a.resumed_from_step);
          history += QStringLiteral("<br>");
        }
      }
      if (record.goodput && std::isfinite(record.goodput->ratio))
        history += RunPanel::tr("goodput %1 (productive step time over wall time)").arg(record.goodput->ratio, 0, 'f', 3);
      post([rows, history, status = QString::fromUtf8(rt::to_string(record.status)),
            reason = QString::fromStdString(record.reason)](RunPanel* p) {
        p->compare_->setRowCount(int(rows.size()));
        auto cell = [](double v) { return new QTableWidgetItem(std::isfinite(v) ? formatSeconds(v) : RunPanel::tr("unknown")); };
        for (int i = 0; i < int(rows.size()); ++i) {
          p->compare_->setItem(i, 0, new QTableWidgetItem(QString::fromStdString(rows[size_t(i)].term)));
          p->compare_->setItem(i, 1, cell(rows[size_t(i)].predicted_s));
          p->compare_->setItem(i, 2, cell(rows[size_t(i)].simulated_s));
          p->compare_->setItem(i, 3, cell(rows[size_t(i)].measured_s));
        }
        p->findings_->setText(history);
        p->onFinished(status, reason);
      });
    }));
    return;
  }
  watcher_->setFuture(QtConcurrent::run([req, cancel, post]() {
    Loaded<rt::PreparedRun> prepared = rt::prepare_run(req);
    if (!prepared.ok()) {
      const QString text = QString::fromStdString(prepared.diagnostics.to_string());
      post([text](RunPanel* p) {
        p->onOutputLine(text);
        p->onFinished(QStringLiteral("not started"), text.section(QLatin1Char('\n'), 0, 0));
      });
      return;
    }
    post([changes = prepared.value->record.changes, argv = rt::build_train_argv(prepared.value->train)](RunPanel* p) {
      for (const std::string& c : changes) p->onOutputLine(QStringLiteral("scale-down: ") + QString::fromStdString(c));
      p->onOutputLine(QStringLiteral("$ ") + QString::fromStdString(rt::shell_quote(argv)));
      p->status_->setText(RunPanel::tr("Running..."));
    });
    rt::RunCallbacks cb;
    cb.on_output = [post](rt::OutputStream, const std::string& line) {
      post([l = QString::fromStdString(line)](RunPanel* p) { p->onOutputLine(l); });
    };
    cb.on_metrics = [post](const rt::MetricsRecord& r) {
      QHash<QString, double> numbers;
      for (const auto& [k, v] : r.numbers) numbers.insert(QString::fromStdString(k), v);
      post([type = QString::fromStdString(r.type), numbers](RunPanel* p) { p->onMetrics(type, numbers); });
    };
    const rt::RunRecord record = rt::execute_run(*prepared.value, cb, cancel.get());
    const std::vector<rt::TermRow> rows = rt::compare_terms(record);
    Loaded<rt::Report> report = rt::report_analyze_file(prepared.value->metrics_file);
    QString findings;
    if (report.value) {
      for (const rt::Finding& f : report.value->findings)
        findings += QStringLiteral("<b>%1</b> (%2): %3 &mdash; %4<br>")
                        .arg(QString::fromStdString(f.rule), QString::fromStdString(f.severity),
                             QString::fromStdString(f.evidence).toHtmlEscaped(), QString::fromStdString(f.advice).toHtmlEscaped());
      if (report.value->findings.empty()) findings = RunPanel::tr("No bottleneck findings.");
    }
    post([rows, findings, status = QString::fromUtf8(rt::to_string(record.status)),
          reason = QString::fromStdString(record.reason)](RunPanel* p) {
      p->compare_->setRowCount(int(rows.size()));
      auto cell = [](double v) { return new QTableWidgetItem(std::isfinite(v) ? formatSeconds(v) : RunPanel::tr("unknown")); };
      for (int i = 0; i < int(rows.size()); ++i) {
        p->compare_->setItem(i, 0, new QTableWidgetItem(QString::fromStdString(rows[size_t(i)].term)));
        p->compare_->setItem(i, 1, cell(rows[size_t(i)].predicted_s));
        p->compare_->setItem(i, 2, cell(rows[size_t(i)].simulated_s));
        p->compare_->setItem(i, 3, cell(rows[size_t(i)].measured_s));
      }
      p->findings_->setText(findings);
      p->onFinished(status, reason);
    });
  }));
#else
  Q_UNUSED(resume);
  status_->setText(tr("The runtime library is not built into this app (MPI not found)."));
#endif
}

}  // namespace capplan::gui
