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
    return v > 0 ? QString::number(v, 'f', prec) + QLatin1Char(' ') + unit : tr("unknown");
  };
  const int gpus = in.nodesMin * c.gpus_per_node;
  QString range = QString::number(in.nodesMin);
  if (in.nodesMax > in.nodesMin) range += QStringLiteral(" - %1").arg(in.nodesMax);
  figures_->setText(
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
  QLabel* nodesErr = host_.fieldErrors().value(QStringLiteral("nodes"));
  const bool badRange = in.nodesMax < in.nodesMin;
  showFieldError(nodesErr, badRange ? tr("'to' must be at least 'from'") : QString());
}

}  // namespace capplan::gui
