// The Model page (model_page.h). Figures come from profile_model and state_bytes_per_param.
#include "model_page.h"

#include <QCheckBox>
#include <QComboBox>
#include <QDir>
#include <QFileDialog>
#include <QFormLayout>
#include <QGroupBox>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QListWidget>
#include <QPushButton>
#include <QScrollArea>
#include <QStandardPaths>
#include <QTableView>
#include <QVBoxLayout>

#include "item_models.h"
#include "planner/catalog.h"
#include "planner/profile.h"
#include "planner/spec_io.h"
#ifdef CAPPLAN_GUI_HAVE_RUNTIME
#include "measure_tools.h"
#endif

namespace capplan::gui {

ModelPage::ModelPage(PageHost& host, LayerProfileModel* profile, QWidget* parent)
    : QWidget(parent), host_(host), profile_(profile) {
  setObjectName(QStringLiteral("modelPage"));
  auto* row = new QHBoxLayout(this);
  QGroupBox* arch = buildArchitecture();
  // The form scrolls where the window is shorter than its rows (a 1280 x 800 screen).
  auto* scroll = new QScrollArea(this);
  scroll->setObjectName(QStringLiteral("architectureScroll"));
  scroll->setWidget(arch);
  scroll->setWidgetResizable(true);
  scroll->setFrameShape(QFrame::NoFrame);
  scroll->setHorizontalScrollBarPolicy(Qt::ScrollBarAlwaysOff);
  scroll->setMaximumWidth(480);
  scroll->setMinimumWidth(arch->sizeHint().width() + 20);
  row->addWidget(scroll);
  row->addLayout(buildFigures(), 1);
}

QGroupBox* ModelPage::buildArchitecture() {
  auto* box = new QGroupBox(tr("Architecture"), this);
  auto* form = new QFormLayout(box);
  form->setFieldGrowthPolicy(QFormLayout::AllNonFixedFieldsGrow);
  preset_ = new QComboBox(box);
  preset_->setObjectName(QStringLiteral("modelPreset"));
  preset_->setToolTip(tr("Model presets from the embedded catalog (configs/models), with sources"));
  for (const CatalogEntry& e : catalog_models()) {
    preset_->addItem(QString::fromStdString(e.name));
    preset_->setItemData(preset_->count() - 1, QString::fromStdString(e.summary), Qt::ToolTipRole);
  }
  auto* openModel = new QPushButton(tr("Open YAML / config.json..."), box);
  openModel->setToolTip(tr("Load a model YAML or a Hugging Face config.json (GPT-2, Llama families)"));
  auto* presetRow = new QHBoxLayout;
  presetRow->addWidget(preset_, 1);
  presetRow->addWidget(openModel);
  form->addRow(tr("Preset"), presetRow);
  connect(preset_, &QComboBox::activated, this, [this](int index) {
    const QString name = preset_->itemText(index);
    Loaded<ModelSpec> m = load_model(name.toStdString());
    host_.showFieldDiagnostics(m.diagnostics, diagnostics_);
    if (!m.ok()) return;
    host_.editInputs(FPreset, tr("Model preset %1").arg(name), [&](PlanInputs& in) {
      in.model = *m.value;
      in.modelRef = name.toStdString();
      in.training.seq_len = 0;  // train at the new model's own length, as the CLI does
    });
  });
  connect(openModel, &QPushButton::clicked, this, [this] {
    const QString f = QFileDialog::getOpenFileName(this, tr("Open model"), {}, tr("Model (*.yaml *.yml *.json)"));
    if (!f.isEmpty()) emit modelFileChosen(f);
  });
  addNumberFields(box, form);
  addKindFields(box, form);
  return box;
}

void ModelPage::addNumberFields(QGroupBox* box, QFormLayout* form) {
  struct FieldDef {
    QSpinBox** spin;
    const char* name;
    const char* key;
    int min, max;
    QString label, tip, special;
    FieldId id;
  };
  const FieldDef defs[] = {
      {&layers_, "layers", "model.layers", 1, 100000, tr("Layers"), tr("Transformer blocks (layers)"), {}, FLayers},
      {&hidden_, "hidden", "model.hidden", 1, 1000000, tr("Hidden"), tr("Hidden size d_model; must be divisible by heads unless the head size is set"), {}, FHidden},
      {&heads_, "heads", "model.heads", 1, 100000, tr("Heads"), tr("Attention (query) heads; tp must divide it"), {}, FHeads},
      {&kvHeads_, "kv_heads", "model.kv_heads", 0, 100000, tr("KV heads"),
       tr("Key/value heads; fewer than heads = grouped-query attention; must divide heads"), tr("= heads"), FKvHeads},
      {&headDim_, "head_dim", "model.head_dim", 0, 100000, tr("Head size"),
       tr("head_dim: width of one attention head; 0 = hidden / heads. Gemma and Qwen3 set it apart, "
          "so the queries are heads x head_dim wide"), tr("hidden / heads"), FHeadDim},
      {&slidingWindow_, "sliding_window", "model.sliding_window", 0, 100000000, tr("Sliding window"),
       tr("sliding_window: tokens a query attends to in a local layer (Mistral 7B v0.1, Gemma 2 and 3); "
          "0 = every layer attends to the whole sequence. FlashAttention skips the blocks outside it"),
       tr("none"), FSlidingWindow},
      {&globalEvery_, "global_every", "model.global_every", 0, 100000, tr("Global every"),
       tr("global_every: with a sliding window, every k-th layer attends to the whole sequence "
          "(Gemma 2: 2, Gemma 3: 6); 0 = every layer local"), tr("all local"), FGlobalEvery},
      {&attentionChunk_, "attention_chunk", "model.attention_chunk", 0, 100000000, tr("Attention chunk"),
       tr("attention_chunk: a local layer's query attends within its chunk of this many tokens from the "
          "sequence's start (Llama 4: 8192, every 4th layer global); 0 = none. Not with a sliding window"),
       tr("none"), FAttentionChunk},
      {&mlaKvRank_, "mla_kv_lora_rank", "model.mla.kv_lora_rank", 0, 10000000, tr("Latent KV rank"),
       tr("kv_lora_rank: multi-head latent attention (DeepSeek-V2 and V3) up-projects each head's keys and "
          "values from a latent this wide; 0 = keys and values projected from the hidden state"),
       tr("none"), FMlaKvRank},
      {&mlaQRank_, "mla_q_lora_rank", "model.mla.q_lora_rank", 0, 10000000, tr("Latent Q rank"),
       tr("q_lora_rank: the queries' latent; 0 = queries projected from the hidden state"), tr("none"), FMlaQRank},
      {&mlaQkNope_, "mla_qk_nope_head_dim", "model.mla.qk_nope_head_dim", 0, 100000, tr("QK head"),
       tr("qk_nope_head_dim: a query-key head's features without rotary embedding"), {}, FMlaQkNope},
      {&mlaQkRope_, "mla_qk_rope_head_dim", "model.mla.qk_rope_head_dim", 0, 100000, tr("QK rotary head"),
       tr("qk_rope_head_dim: a query-key head's rotary features (one key part shared by the heads)"), {}, FMlaQkRope},
      {&mlaV_, "mla_v_head_dim", "model.mla.v_head_dim", 0, 100000, tr("V head"),
       tr("v_head_dim: a value head's features"), {}, FMlaV},
      {&ffnHidden_, "ffn_hidden", "model.ffn_hidden", 0, 10000000, tr("FFN hidden"),
       tr("Inner size of the MLP; 0 = 4 x hidden"), tr("4 x hidden"), FFfnHidden},
      {&vocab_, "vocab", "model.vocab", 1, 100000000, tr("Vocabulary"), tr("Vocabulary size (tokens)"), {}, FVocab},
      {&seqLen_, "seq_len", "model.seq_len", 1, 10000000, tr("Default sequence"),
       tr("The model's own sequence length in tokens (its seq_len or max_position_embeddings); "
          "training uses it unless the Plan page's Training sequence is set"), {}, FSeq},
      {&moeExperts_, "moe_experts", "model.moe.experts", 0, 1000000, tr("Experts"),
       tr("Mixture of experts: routed experts per MoE layer; 0 = a dense model"), tr("dense"), FMoeExperts},
      {&moeTopK_, "moe_top_k", "model.moe.top_k", 0, 1000000, tr("Experts per token"),
       tr("top_k: routed experts each token goes through; at most the experts"), tr("1"), FMoeTopK},
      {&moeExpertFfn_, "moe_expert_ffn_hidden", "model.moe.expert_ffn_hidden", 0, 10000000, tr("Expert FFN hidden"),
       tr("Inner size of one expert's MLP; 0 = the FFN hidden"), tr("= FFN hidden"), FMoeExpertFfn},
      {&moeShared_, "moe_shared_experts", "model.moe.shared_experts", 0, 1000000, tr("Shared experts"),
       tr("Experts every token goes through (DeepSeek, Qwen-MoE)"), {}, FMoeShared},
      {&mtpLayers_, "mtp_layers", "model.mtp_layers", 0, 1000, tr("MTP modules"),
       tr("mtp_layers: multi-token prediction modules after the last layer (DeepSeek-V3: 1), each a "
          "transformer layer, a projection and the shared head again, on the last pipeline stage; "
          "trained with the model, counted apart from its parameters"),
       tr("none"), FMtpLayers},
  };
  for (const FieldDef& d : defs) {
    QSpinBox* s = makeSpin(box, d.name, d.min, d.max, d.tip, d.special);
    *d.spin = s;
    QLabel* err = makeErrorLabel(box);
    host_.fieldErrors().insert(QString::fromUtf8(d.key), err);
    form->addRow(d.label, withError(s, err));
    connect(s, &QSpinBox::valueChanged, this, [this, id = d.id, label = d.label](int v) {
      host_.editInputs(id, tr("Edit %1").arg(label), [&](PlanInputs& in) {
        ModelSpec& m = in.model;
        switch (id) {
          case FLayers: m.layers = v; break;
          case FHidden: m.hidden = v; break;
          case FHeads: m.heads = v; break;
          case FKvHeads: m.kv_heads = v; break;
          case FHeadDim: m.head_dim = v; break;
          case FSlidingWindow: m.sliding_window = v; break;
          case FGlobalEvery: m.global_every = v; break;
          case FAttentionChunk: m.attention_chunk = v; break;
          case FMlaKvRank: m.mla.kv_lora_rank = v; break;
          case FMlaQRank: m.mla.q_lora_rank = v; break;
          case FMlaQkNope: m.mla.qk_nope_head_dim = v; break;
          case FMlaQkRope: m.mla.qk_rope_head_dim = v; break;
          case FMlaV: m.mla.v_head_dim = v; break;
          case FFfnHidden: m.ffn_hidden = v; break;
          case FVocab: m.vocab = v; break;
          case FSeq: m.seq_len = v; break;
          case FMoeExperts: m.moe.experts = v; break;
          case FMoeTopK: m.moe.top_k = v; break;
          case FMoeExpertFfn: m.moe.expert_ffn_hidden = v; break;
          case FMoeShared: m.moe.shared_experts = v; break;
          case FMtpLayers: m.mtp_layers = v; break;
          default: break;
        }
      });
    });
  }
}

void ModelPage::addKindFields(QGroupBox* box, QFormLayout* form) {
  ffn_ = makeCombo(box, "ffn", {QStringLiteral("gelu"), QStringLiteral("swiglu")},
                   tr("MLP type: GELU (2 matrices) or SwiGLU (3 matrices, Llama)"));
  norm_ = makeCombo(box, "norm", {QStringLiteral("layernorm"), QStringLiteral("rmsnorm")},
                    tr("Normalisation: LayerNorm or RMSNorm"));
  tied_ = new QCheckBox(tr("Tied input and output embeddings"), box);
  tied_->setObjectName(QStringLiteral("tied"));
  tied_->setToolTip(tr("The LM head reuses the token embedding matrix (counted once)"));
  form->addRow(tr("FFN"), ffn_);
  form->addRow(tr("Norm"), norm_);
  form->addRow(QString(), tied_);
  connect(ffn_, &QComboBox::currentTextChanged, this, [this](const QString& t) {
    host_.editInputs(FFfn, tr("Edit FFN"), [&](PlanInputs& in) {
      if (auto v = parse_ffn(t.toStdString())) in.model.ffn = *v;
    });
  });
  connect(norm_, &QComboBox::currentTextChanged, this, [this](const QString& t) {
    host_.editInputs(FNorm, tr("Edit norm"), [&](PlanInputs& in) {
      if (auto v = parse_norm(t.toStdString())) in.model.norm = *v;
    });
  });
  connect(tied_, &QCheckBox::toggled, this, [this](bool on) {
    host_.editInputs(FTied, tr("Edit tied embeddings"), [&](PlanInputs& in) { in.model.tied_embeddings = on; });
  });
}

QLayout* ModelPage::buildFigures() {
  auto* right = new QVBoxLayout;
  auto* sizeBox = new QGroupBox(tr("Size"), this);
  auto* sizeLay = new QVBoxLayout(sizeBox);
  figures_ = new QLabel(sizeBox);
  figures_->setObjectName(QStringLiteral("modelFigures"));
  figures_->setTextFormat(Qt::RichText);
  figures_->setWordWrap(true);
  sizeLay->addWidget(figures_);
  diagnostics_ = new QListWidget(this);
  diagnostics_->setObjectName(QStringLiteral("modelDiagnostics"));
  diagnostics_->setToolTip(tr("Problems found in the model file or the fields, with file:line:column"));
  diagnostics_->setMaximumHeight(110);
  diagnostics_->hide();
  auto* profBox = new QGroupBox(tr("Per-layer profile"), this);
  auto* profLay = new QVBoxLayout(profBox);
  profileView_ = new QTableView(profBox);
  profileView_->setObjectName(QStringLiteral("profileTable"));
  profileView_->setModel(profile_);
  profileView_->verticalHeader()->hide();
  profileView_->horizontalHeader()->setSectionResizeMode(QHeaderView::Stretch);
  profileView_->setAlternatingRowColors(true);
  profLay->addWidget(profileView_);
#ifdef CAPPLAN_GUI_HAVE_RUNTIME
  auto* measure = measure_ = new QPushButton(tr("Measure on this machine..."), profBox);
  measure->setObjectName(QStringLiteral("measureOnThisMachine"));
  measure->setToolTip(tr("Time this model's kernels and the ranks' collectives here (capplan profile --measure) and "
                         "chart them against the prediction; the Plan page can then use the profile"));
  profLay->addWidget(measure);
  connect(measure, &QPushButton::clicked, this, [this] {
    const std::optional<Estimate>& e = host_.selectedEstimate();
    const PlanInputs& in = host_.inputs();
    const QString dir = QStandardPaths::writableLocation(QStandardPaths::AppDataLocation);
    QDir().mkpath(dir);
    auto* d = new MeasureDialog(in.model, e ? e->layout.tp : 1, e ? e->layout.mbs : 1, in.training.seq_len,
                                QDir(dir).filePath(QStringLiteral("device-%1.yaml").arg(QString::fromStdString(in.model.name))),
                                this);
    d->setAttribute(Qt::WA_DeleteOnClose);
    connect(d, &MeasureDialog::profileMeasured, this, &ModelPage::deviceProfileMeasured);
    d->show();
  });
#endif
  right->addWidget(sizeBox);
  right->addWidget(diagnostics_);
  right->addWidget(profBox, 1);
  return right;
}

void ModelPage::syncFromInputs(const PlanInputs& in) {
  const ModelSpec& m = in.model;
  setIfDifferent(layers_, m.layers);
  setIfDifferent(hidden_, m.hidden);
  setIfDifferent(heads_, m.heads);
  setIfDifferent(kvHeads_, m.kv_heads);
  setIfDifferent(headDim_, m.head_dim);
  setIfDifferent(slidingWindow_, m.sliding_window);
  setIfDifferent(globalEvery_, m.global_every);
  setIfDifferent(mtpLayers_, m.mtp_layers);
  setIfDifferent(attentionChunk_, m.attention_chunk);
  // Which layers attend beyond a window or chunk: none without one.
  globalEvery_->setEnabled(m.sliding_window > 0 || m.attention_chunk > 0);
  setIfDifferent(mlaKvRank_, m.mla.kv_lora_rank);
  setIfDifferent(mlaQRank_, m.mla.q_lora_rank);
  setIfDifferent(mlaQkNope_, m.mla.qk_nope_head_dim);
  setIfDifferent(mlaQkRope_, m.mla.qk_rope_head_dim);
  setIfDifferent(mlaV_, m.mla.v_head_dim);
  // Latent attention sets the head sizes; its other fields mean nothing without a latent.
  headDim_->setEnabled(!m.mla.enabled() || m.head_dim > 0);
  for (QSpinBox* s : {mlaQRank_, mlaQkNope_, mlaQkRope_, mlaV_}) s->setEnabled(m.mla.enabled());
  // capplan-train's kernels are plain multi-head attention's: it cannot time latent attention
  // (capplan profile --measure refuses it the same way).
  if (measure_) {
    measure_->setEnabled(!m.mla.enabled());
    measure_->setToolTip(m.mla.enabled()
                             ? tr("%1 has multi-head latent attention, which capplan-train's kernels do not run: "
                                  "nothing here can time it (the counts and the estimates take it)")
                                   .arg(QString::fromStdString(m.name))
                             : tr("Time this model's kernels and the ranks' collectives here (capplan profile "
                                  "--measure) and chart them against the prediction; the Plan page can then use "
                                  "the profile"));
  }
  setIfDifferent(ffnHidden_, m.ffn_hidden);
  setIfDifferent(vocab_, m.vocab);
  setIfDifferent(seqLen_, m.seq_len);
  setIfDifferent(moeExperts_, m.moe.experts);
  setIfDifferent(moeTopK_, m.moe.top_k);
  setIfDifferent(moeExpertFfn_, m.moe.expert_ffn_hidden);
  setIfDifferent(moeShared_, m.moe.shared_experts);
  setComboText(ffn_, QString::fromUtf8(to_string(m.ffn)));
  setComboText(norm_, QString::fromUtf8(to_string(m.norm)));
  tied_->setChecked(m.tied_embeddings);
  const QString modelRef = QString::fromStdString(in.modelRef);
  if (preset_->findText(modelRef) < 0) preset_->addItem(modelRef);
  setComboText(preset_, modelRef);
}

void ModelPage::refreshFigures() {
  const PlanInputs& in = host_.inputs();
  const ModelSpec& m = in.model;
  Diagnostics d;
  validate_model(m, "<model page>", d);
  QHash<QString, QLabel*>& errors = host_.fieldErrors();
  for (auto it = errors.begin(); it != errors.end(); ++it) {
    if (!it.key().startsWith(QLatin1String("model."))) continue;
    it.value()->clear();
    it.value()->hide();
  }
  for (const Diagnostic& x : d.items()) {
    QLabel* l = errors.value(QString::fromStdString(x.path));
    if (l == nullptr) continue;
    showFieldError(l, QString::fromStdString(x.message + (x.hint.empty() ? "" : " (" + x.hint + ")")));
  }
  if (d.has_errors()) {
    figures_->setText(tr("<i>Fix the fields marked in red to see the model's size.</i>"));
    profile_->setProfile({});
    return;
  }
  const std::optional<Estimate>& selected = host_.selectedEstimate();
  const int tp = selected ? selected->layout.tp : 1;
  const int mbs = selected ? selected->layout.mbs : 1;
  const int seq = in.training.seq_len > 0 ? in.training.seq_len : m.seq_len;
  const ModelProfile whole = profile_model(m, 1, seq, 1, in.training.precision);
  // Model state before any sharding, at the cost model's bytes per parameter (the multi-token
  // prediction modules' weights train with the model's); activations depend on the layout (Plan page).
  const double n = whole.total_params + whole.mtp_params;
  QString extra = m.moe.enabled() ? tr(", %1 active per token").arg(formatCount(whole.active_params)) : QString();
  if (m.mtp_layers > 0) extra += tr(", + %1 in multi-token prediction").arg(formatCount(whole.mtp_params));
  const StateBytesPerParam state = state_bytes_per_param(in.training.precision);
  figures_->setText(
      tr("<table cellspacing=6>"
         "<tr><td><b>Parameters</b></td><td align=right>%1%10</td></tr>"
         "<tr><td><b>FLOPs per token</b> (forward + backward)</td><td align=right>%2</td></tr>"
         "<tr><td><b>Weights</b> (%3 B/param)</td><td align=right>%4 GiB</td></tr>"
         "<tr><td><b>Gradients</b> (%5 B/param)</td><td align=right>%6 GiB</td></tr>"
         "<tr><td><b>Optimizer state</b> (fp32 master + Adam, %7 B/param)</td><td align=right>%8 GiB</td></tr>"
         "<tr><td>Source</td><td>%9</td></tr></table>")
          .arg(formatCount(whole.total_params), formatCount(whole.flops_per_token))
          .arg(state.weights)
          .arg(state.weights * n / kGiB, 0, 'f', 1)
          .arg(state.gradients)
          .arg(state.gradients * n / kGiB, 0, 'f', 1)
          .arg(state.optimizer)
          .arg(state.optimizer * n / kGiB, 0, 'f', 1)
          .arg(htmlEscape(m.source.empty() ? in.modelRef : m.source))
          .arg(extra));
  profile_->setProfile(profile_model(m, tp, seq, mbs, in.training.precision));
  if (auto* box = qobject_cast<QGroupBox*>(profileView_->parentWidget()))
    box->setTitle(tr("Per-layer profile (tp = %1, seq = %2, mbs = %3, per TP rank)").arg(tp).arg(seq).arg(mbs));
}

}  // namespace capplan::gui
