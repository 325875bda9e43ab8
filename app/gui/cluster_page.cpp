// The Cluster page (cluster_page.h).
#include "cluster_page.h"

#include <QComboBox>
#include <QDoubleSpinBox>
#include <QFileDialog>
#include <QFormLayout>
#include <QGroupBox>
#include <QHBoxLayout>
#include <QLabel>
#include <QListWidget>
#include <QPushButton>
#include <QVBoxLayout>

#include "planner/catalog.h"
#include "planner/spec_io.h"

namespace capplan::gui {

ClusterPage::ClusterPage(PageHost& host, QWidget* parent) : QWidget(parent), host_(host) {
  setObjectName(QStringLiteral("clusterPage"));
  auto* row = new QHBoxLayout(this);
  QGroupBox* box = buildInstances();
  box->setMaximumWidth(460);
  row->addWidget(box, 0, Qt::AlignTop);
  row->addLayout(buildFigures(), 1);
}

QGroupBox* ClusterPage::buildInstances() {
  auto* box = new QGroupBox(tr("Instances"), this);
  auto* form = new QFormLayout(box);
  preset_ = new QComboBox(box);
  preset_->setObjectName(QStringLiteral("clusterPreset"));
  preset_->setToolTip(tr("Instance types from the embedded catalog (configs/clusters), with sources"));
  for (const CatalogEntry& e : catalog_clusters()) {
    preset_->addItem(QString::fromStdString(e.name));
    preset_->setItemData(preset_->count() - 1, QString::fromStdString(e.summary), Qt::ToolTipRole);
  }
  auto* openCluster = new QPushButton(tr("Open file..."), box);
  openCluster->setToolTip(tr("Load a cluster YAML (name, gpus_per_node, gpu, intra_node_gbyte_per_s, inter_node_gbit_per_s)"));
  auto* presetRow = new QHBoxLayout;
  presetRow->addWidget(preset_, 1);
  presetRow->addWidget(openCluster);
  form->addRow(tr("Instance type"), presetRow);
  nodesMin_ = makeSpin(box, "nodesMin", 1, 100000, tr("Nodes (instances); with a larger 'to' the search covers the range"));
  nodesMax_ = makeSpin(box, "nodesMax", 1, 100000, tr("Upper end of the node range (inclusive); equal to 'from' for one node count"));
  auto* nodesRow = new QHBoxLayout;
  nodesRow->addWidget(nodesMin_);
  nodesRow->addWidget(new QLabel(tr("to"), box));
  nodesRow->addWidget(nodesMax_);
  QLabel* nodesErr = makeErrorLabel(box);
  host_.fieldErrors().insert(QStringLiteral("nodes"), nodesErr);
  nodesRow->addWidget(nodesErr, 1);
  form->addRow(tr("Nodes"), nodesRow);
  price_ = new QDoubleSpinBox(box);
  price_->setObjectName(QStringLiteral("price"));
  price_->setRange(0, 10000);
  price_->setDecimals(2);
  price_->setPrefix(QStringLiteral("$ "));
  price_->setSuffix(tr(" / node-hour"));
  price_->setSpecialValueText(tr("unknown"));
  price_->setToolTip(tr("On-demand price per node-hour; 0 = unknown (cost shown as unknown)"));
  form->addRow(tr("Price"), price_);
  connect(preset_, &QComboBox::activated, this, [this](int index) {
    const QString name = preset_->itemText(index);
    Loaded<ClusterSpec> c = load_cluster(name.toStdString());
    host_.showFieldDiagnostics(c.diagnostics, diagnostics_);
    if (!c.ok()) return;
    host_.editInputs(FCluster, tr("Instance %1").arg(name), [&](PlanInputs& in) {
      in.cluster = *c.value;
      in.clusterRef = name.toStdString();
    });
  });
  connect(openCluster, &QPushButton::clicked, this, [this] {
    const QString f = QFileDialog::getOpenFileName(this, tr("Open cluster"), {}, tr("Cluster (*.yaml *.yml)"));
    if (!f.isEmpty()) emit clusterFileChosen(f);
  });
  connect(nodesMin_, &QSpinBox::valueChanged, this, [this](int v) {
    host_.editInputs(FNodesMin, tr("Edit nodes"), [&](PlanInputs& in) {
      const bool single = in.nodesMax == in.nodesMin;
      in.nodesMin = v;
      if (single || in.nodesMax < v) in.nodesMax = v;
    });
  });
  connect(nodesMax_, &QSpinBox::valueChanged, this, [this](int v) {
    host_.editInputs(FNodesMax, tr("Edit node range"), [&](PlanInputs& in) { in.nodesMax = v; });
  });
  connect(price_, &QDoubleSpinBox::valueChanged, this, [this](double v) {
    host_.editInputs(FPrice, tr("Edit price"), [&](PlanInputs& in) { in.cluster.price_per_node_hour_usd = v; });
  });
  return box;
}

QLayout* ClusterPage::buildFigures() {
  auto* right = new QVBoxLayout;
  auto* figBox = new QGroupBox(tr("Hardware figures"), this);
  auto* figLay = new QVBoxLayout(figBox);
  figures_ = new QLabel(figBox);
  figures_->setObjectName(QStringLiteral("clusterFigures"));
  figures_->setTextFormat(Qt::RichText);
  figures_->setWordWrap(true);
  figures_->setTextInteractionFlags(Qt::TextSelectableByMouse);
  figures_->setAlignment(Qt::AlignTop | Qt::AlignLeft);
  figLay->addWidget(figures_);
  diagnostics_ = new QListWidget(this);
  diagnostics_->setObjectName(QStringLiteral("clusterDiagnostics"));
  diagnostics_->setMaximumHeight(110);
  diagnostics_->hide();
  right->addWidget(figBox, 1);
  right->addWidget(diagnostics_);
  return right;
}

void ClusterPage::syncFromInputs(const PlanInputs& in) {
  const QString clusterRef = QString::fromStdString(in.clusterRef);
  if (preset_->findText(clusterRef) < 0) preset_->addItem(clusterRef);
  setComboText(preset_, clusterRef);
  setIfDifferent(nodesMin_, in.nodesMin);
  setIfDifferent(nodesMax_, in.nodesMax);
  if (price_->value() != in.cluster.price_per_node_hour_usd) price_->setValue(in.cluster.price_per_node_hour_usd);
}

void ClusterPage::refreshFigures() {
  const PlanInputs& in = host_.inputs();
  const ClusterSpec& c = in.cluster;
  const GpuSpec& g = c.gpu;
  auto num = [](double v, const QString& unit, int prec = 0) {
    if (!(v > 0)) return tr("unknown");
    return unit.isEmpty() ? QString::number(v, 'f', prec) : QString::number(v, 'f', prec) + QLatin1Char(' ') + unit;
  };
  auto pct = [](double f, const QString& none) {
    return f > 0 ? QStringLiteral("%1 % of the 16-bit peak").arg(100.0 * f, 0, 'f', 0) : none;
  };
  const int gpus = in.nodesMin * c.gpus_per_node;
  const QString nodes = in.nodesMax > in.nodesMin
                            ? tr("%1 - %2 (%3 to %4 GPUs)").arg(in.nodesMin).arg(in.nodesMax).arg(gpus).arg(in.nodesMax * c.gpus_per_node)
                            : tr("%1 (%2 GPUs)").arg(in.nodesMin).arg(gpus);
  QString peaks = tr("bf16 %1, fp16 %2, fp32 %3").arg(num(g.peak_tflops_bf16, QString()), num(g.peak_tflops_fp16, QString()),
                                                      num(g.peak_tflops_fp32, QString(), 1));
  if (g.peak_tflops_fp8 > 0) peaks += tr(", fp8 %1").arg(num(g.peak_tflops_fp8, QString()));
  auto row = [](const QString& name, const QString& value) {
    return QStringLiteral("<tr><td><b>%1</b></td><td>%2</td></tr>").arg(name, value);
  };
  QString rows;
  rows += row(tr("Nodes"), nodes);
  rows += row(tr("GPU"), tr("%1 x %2 per node").arg(c.gpus_per_node).arg(htmlEscape(g.name)));
  rows += row(tr("GPU memory"), num(g.memory_gib, QStringLiteral("GiB")));
  rows += row(tr("Peak dense TFLOP/s"), peaks);
  rows += row(tr("Large GEMMs reach"), pct(g.gemm_peak_fraction, tr("unknown (the A100 figure is used)")));
  // Each kernel with a figure: FlashAttention-2 always, FlashAttention-3 and cuDNN's where known.
  QString flash = tr("does not run on this GPU");
  if (g.flash_peak_fraction > 0) {
    auto share = [](double f) { return QStringLiteral("%1 %").arg(100.0 * f, 0, 'f', 0); };
    flash = tr("FA2 %1").arg(share(g.flash_peak_fraction));
    if (g.fa3_peak_fraction > 0) flash += tr(", FA3 %1").arg(share(g.fa3_peak_fraction));
    if (g.cudnn_attention_peak_fraction > 0) flash += tr(", cuDNN %1").arg(share(g.cudnn_attention_peak_fraction));
    flash += tr(" of the 16-bit peak");
  }
  rows += row(tr("FlashAttention reaches"), flash);
  rows += row(tr("HBM bandwidth"), num(g.memory_gbyte_per_s, QStringLiteral("GB/s")));
  rows += row(tr("NVLink / NVSwitch"), tr("%1 per GPU per direction").arg(num(c.intra_node_gbyte_per_s, QStringLiteral("GB/s"))));
  rows += row(tr("Network"), tr("%1 per node per direction").arg(num(c.inter_node_gbit_per_s, QStringLiteral("Gbit/s"))));
  rows += row(tr("PCIe to the host"), c.pcie_gbyte_per_s > 0 ? tr("%1 per GPU per direction").arg(num(c.pcie_gbyte_per_s, QStringLiteral("GB/s")))
                                                             : tr("unknown (the cost model's default)"));
  rows += row(tr("Host memory"), c.host_memory_gib > 0 ? tr("%1 per node").arg(num(c.host_memory_gib, QStringLiteral("GiB")))
                                                      : tr("unknown (no parameter or optimizer offload)"));
  rows += row(tr("Price"), c.price_per_node_hour_usd > 0 ? QStringLiteral("$%1 per node-hour").arg(c.price_per_node_hour_usd, 0, 'f', 2)
                                                         : tr("unknown"));
  rows += row(tr("GPU source"), htmlEscape(g.source.empty() ? "not given" : g.source));
  rows += row(tr("Instance source"), htmlEscape(c.source.empty() ? "not given" : c.source));
  figures_->setText(QStringLiteral("<h3>%1</h3><table cellspacing=6>%2</table>").arg(htmlEscape(c.name), rows));
  QLabel* nodesErr = host_.fieldErrors().value(QStringLiteral("nodes"));
  const bool badRange = in.nodesMax < in.nodesMin;
  showFieldError(nodesErr, badRange ? tr("'to' must be at least 'from'") : QString());
}

}  // namespace capplan::gui
