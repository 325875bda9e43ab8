// Item models for the candidate table and the per-layer profile table.
#include "item_models.h"

#include <QBrush>
#include <QColor>
#include <cmath>

namespace capplan::gui {

bool sameLayout(const Layout& a, const Layout& b) {
  return a.dp == b.dp && a.tp == b.tp && a.pp == b.pp && a.vp == b.vp && a.mbs == b.mbs &&
         a.zero == b.zero && a.recompute == b.recompute && a.offload == b.offload && a.sp == b.sp &&
         a.order == b.order && a.schedule == b.schedule;
}

QString compactLayout(const Layout& l) { return QString::fromStdString(layout_summary(l, " \u00b7 ")); }

QString layoutKnobs(const Layout& l, int microbatches) {
  return QStringLiteral("dp %1 (data-parallel replicas)\ntp %2 (tensor-parallel)\npp %3 (pipeline stages)\n"
                        "vp %4 (virtual stages per stage)\nmbs %5 (sequences per micro-batch), %6 micro-batches\n"
                        "zero %7\nrecompute %8\noffload %9\nsp %10\nschedule %11\norder %12")
      .arg(l.dp).arg(l.tp).arg(l.pp).arg(l.vp).arg(l.mbs).arg(microbatches).arg(l.zero)
      .arg(QString::fromUtf8(to_string(l.recompute)), l.offload ? QStringLiteral("on") : QStringLiteral("off"),
           l.sp ? QStringLiteral("on") : QStringLiteral("off"), QString::fromUtf8(to_string(l.schedule)),
           QString::fromStdString(l.order));
}

QString formatCount(double v) {
  if (!std::isfinite(v)) return QStringLiteral("unknown");
  const double a = std::fabs(v);
  if (a >= 1e12) return QString::number(v / 1e12, 'f', 2) + QStringLiteral(" T");
  if (a >= 1e9) return QString::number(v / 1e9, 'f', 2) + QStringLiteral(" B");
  if (a >= 1e6) return QString::number(v / 1e6, 'f', 2) + QStringLiteral(" M");
  if (a >= 1e3) return QString::number(v / 1e3, 'f', 2) + QStringLiteral(" k");
  return QString::number(v, 'g', 4);
}

QString formatSeconds(double s) {
  if (!std::isfinite(s)) return QStringLiteral("unknown");
  if (s < 1.0) return QString::number(s * 1e3, 'f', 1) + QStringLiteral(" ms");
  if (s < 120.0) return QString::number(s, 'f', 2) + QStringLiteral(" s");
  if (s < 7200.0) return QString::number(s / 60.0, 'f', 1) + QStringLiteral(" min");
  return QString::number(s / 3600.0, 'f', 1) + QStringLiteral(" h");
}

QString formatDollars(double usd) {
  if (!std::isfinite(usd)) return QStringLiteral("unknown");
  if (std::fabs(usd) >= 1e6) return QStringLiteral("$%1 M").arg(usd / 1e6, 0, 'f', 2);
  if (std::fabs(usd) >= 1e3) return QStringLiteral("$%1 k").arg(usd / 1e3, 0, 'f', 1);
  return QStringLiteral("$%1").arg(usd, 0, 'f', 0);
}

// ---------------------------------------------------------------- candidates

CandidateTableModel::CandidateTableModel(QObject* parent) : QAbstractTableModel(parent) {}

void CandidateTableModel::setCandidates(std::vector<Estimate> candidates) {
  beginResetModel();
  candidates_ = std::move(candidates);
  mixedFrameworks_ = false;
  for (const Estimate& e : candidates_) mixedFrameworks_ = mixedFrameworks_ || e.framework != candidates_.front().framework;
  endResetModel();
}

const Estimate* CandidateTableModel::candidate(int row) const {
  if (row < 0 || row >= int(candidates_.size())) return nullptr;
  return &candidates_[size_t(row)];
}

int CandidateTableModel::findLayout(const Layout& layout, int nodes) const {
  for (size_t i = 0; i < candidates_.size(); ++i) {
    if (candidates_[i].nodes == nodes && sameLayout(candidates_[i].layout, layout)) return int(i);
  }
  return -1;
}

int CandidateTableModel::rowCount(const QModelIndex& parent) const {
  return parent.isValid() ? 0 : int(candidates_.size());
}

int CandidateTableModel::columnCount(const QModelIndex& parent) const {
  return parent.isValid() ? 0 : ColumnCount;
}

QVariant CandidateTableModel::data(const QModelIndex& index, int role) const {
  if (!index.isValid() || index.row() >= int(candidates_.size()) || index.column() >= ColumnCount)
    return {};
  const Estimate& e = candidates_[size_t(index.row())];
  const Layout& l = e.layout;
  const double memGiB = e.memory_per_gpu_bytes.total / (1024.0 * 1024.0 * 1024.0);
  const bool display = role == Qt::DisplayRole;
  const bool sort = role == SortRole;
  if (display || sort) {
    switch (index.column()) {
      case Rank: return index.row() + 1;
      case Nodes: return e.nodes;
      case Gpus: return e.gpus;
      case Dp: return l.dp;
      case Tp: return l.tp;
      case Pp: return l.pp;
      case Vp: return l.vp;
      case Mbs: return l.mbs;
      case Microbatches: return qlonglong(e.num_microbatches);
      case Zero: return l.zero;
      case Recompute: return QString::fromUtf8(to_string(l.recompute));
      case Offload:
        return sort ? QVariant(int(l.offload)) : QVariant(l.offload ? QStringLiteral("on") : QStringLiteral("off"));
      case Sp: return sort ? QVariant(int(l.sp)) : QVariant(l.sp ? QStringLiteral("on") : QStringLiteral("off"));
      case Order: return QString::fromStdString(l.order);
      case Schedule: return QString::fromUtf8(to_string(l.schedule));
      case StepTime: return sort ? QVariant(e.step_time_s) : QVariant(formatSeconds(e.step_time_s));
      case SamplesPerS: return sort ? QVariant(e.samples_per_s) : QVariant(QString::number(e.samples_per_s, 'f', 1));
      case TokensPerS: return sort ? QVariant(e.tokens_per_s) : QVariant(formatCount(e.tokens_per_s));
      case Days: return sort ? QVariant(e.days_to_train) : QVariant(QString::number(e.days_to_train, 'f', 1));
      case Dollars:
        return sort ? QVariant(std::isfinite(e.cost_usd) ? e.cost_usd : 1e300) : QVariant(formatDollars(e.cost_usd));
      case MemoryGiB: return sort ? QVariant(memGiB) : QVariant(QString::number(memGiB, 'f', 1));
      case Mfu: return sort ? QVariant(e.mfu) : QVariant(QString::number(e.mfu * 100.0, 'f', 1) + QLatin1Char('%'));
      case Bubble:
        return sort ? QVariant(e.bubble_fraction)
                    : QVariant(QString::number(e.bubble_fraction * 100.0, 'f', 1) + QLatin1Char('%'));
      case Fits: return sort ? QVariant(int(e.fits)) : QVariant(e.fits ? QStringLiteral("yes") : QStringLiteral("no"));
      case LayoutText:
        return mixedFrameworks_ ? compactLayout(l) + QStringLiteral(" \u00b7 ") + QString::fromStdString(e.framework)
                                : compactLayout(l);
    }
    return {};
  }
  if (role == Qt::TextAlignmentRole) {
    const int c = index.column();
    if (c == Recompute || c == Order || c == Schedule || c == Offload || c == Sp || c == Fits)
      return int(Qt::AlignCenter);
    if (c == LayoutText) return int(Qt::AlignLeft | Qt::AlignVCenter);
    return int(Qt::AlignRight | Qt::AlignVCenter);
  }
  if (role == Qt::ForegroundRole && !e.fits) return QBrush(QColor(160, 40, 40));
  // Rows whose band overlaps the best one's are shaded: as good as the best within the model's
  // error (the CLI's `~best`).
  if (role == Qt::BackgroundRole && e.as_good_as_best && index.row() > 0)
    return QBrush(QColor(226, 242, 230));
  if (role == Qt::ToolTipRole) {
    const int c = index.column();
    if (c == LayoutText) return layoutKnobs(l, int(e.num_microbatches));
    if (!e.fits) return QStringLiteral("Does not fit: %1").arg(QString::fromStdString(e.reason));
    // The model's band (p10-p90) where the figure has one.
    if (c == StepTime || c == Days || c == Dollars || c == SamplesPerS || c == TokensPerS)
      return QStringLiteral("%1 (%2). The model's error band, p10-p90: step %3 to %4, %5 to %6 days, %7 to %8%9")
          .arg(QString::fromStdString(e.framework))
          .arg(e.as_good_as_best ? QStringLiteral("as good as the best within the model's error")
                                 : QStringLiteral("slower than the best beyond the model's error"))
          .arg(formatSeconds(e.step_time_s_p10), formatSeconds(e.step_time_s_p90))
          .arg(e.days_to_train_p10, 0, 'f', 1)
          .arg(e.days_to_train_p90, 0, 'f', 1)
          .arg(formatDollars(e.cost_usd_p10), formatDollars(e.cost_usd_p90))
          .arg(QString());
    return QStringLiteral("%1 GiB of %2 GiB per GPU; step %3")
        .arg(memGiB, 0, 'f', 1)
        .arg(e.memory_per_gpu_bytes.capacity / (1024.0 * 1024.0 * 1024.0), 0, 'f', 0)
        .arg(formatSeconds(e.step_time_s));
  }
  return {};
}

QVariant CandidateTableModel::headerData(int section, Qt::Orientation orientation, int role) const {
  if (orientation != Qt::Horizontal) return QAbstractTableModel::headerData(section, orientation, role);
  static const char* const names[ColumnCount] = {
      "#", "step", "days", "cost", "GiB/GPU", "MFU", "fits", "layout", "nodes", "GPUs",
      "samples/s", "tokens/s", "bubble", "dp", "tp", "pp", "vp", "mbs", "micro-batches", "zero",
      "recompute", "offload", "sp", "order", "schedule"};
  static const char* const tips[ColumnCount] = {
      "Rank by the objective (best first)",
      "Predicted time per optimizer step",
      "Days to train the token budget",
      "Dollars = nodes x price per node-hour x hours",
      "Peak memory per GPU",
      "Model FLOPs utilisation: model TFLOP/s per GPU over the GPU's peak",
      "Whether the layout fits in the GPU's memory",
      "The layout in short: dp, tp, pp, vp (interleaved schedule only), mbs, then zN (ZeRO stage), "
      "sel / full (recompute), offload, sp and gpipe when not 1f1b; hover a row for every knob",
      "Nodes (instances) used",
      "GPUs used = dp x tp x pp",
      "Sequences per second",
      "Tokens per second",
      "Pipeline bubble as a fraction of the step",
      "Data-parallel degree: model replicas, each on a slice of the global batch",
      "Tensor-parallel degree: each layer's matrices split over tp GPUs (Megatron-style)",
      "Pipeline-parallel degree: layers split into pp stages",
      "Virtual stages per pipeline stage (interleaved 1F1B only)",
      "Micro-batch size, sequences per forward/backward pass",
      "Micro-batches per step = gbs / (dp x mbs)",
      "ZeRO stage over dp: 1 shards optimizer state, 2 also gradients, 3 also weights",
      "Activation recompute: none, selective (attention core) or full (whole layer)",
      "Activation offload to host memory over PCIe",
      "Sequence parallelism: norms and dropout split along the sequence (needs tp > 1)",
      "Placement order: a permutation of D, P, T; right-most varies fastest over ranks",
      "Pipeline schedule: gpipe, 1f1b or interleaved"};
  if (section < 0 || section >= ColumnCount) return {};
  if (role == Qt::DisplayRole) return QString::fromUtf8(names[section]);
  if (role == Qt::ToolTipRole) return QString::fromUtf8(tips[section]);
  return {};
}

// ---------------------------------------------------------------- filter

CandidateFilterModel::CandidateFilterModel(QObject* parent) : QSortFilterProxyModel(parent) {
  setSortRole(CandidateTableModel::SortRole);
  setFilterCaseSensitivity(Qt::CaseInsensitive);
  setFilterKeyColumn(-1);
}

void CandidateFilterModel::setFitsOnly(bool fitsOnly) {
  if (fitsOnly_ == fitsOnly) return;
  fitsOnly_ = fitsOnly;
  invalidateFilter();
}

bool CandidateFilterModel::filterAcceptsRow(int sourceRow, const QModelIndex& sourceParent) const {
  if (fitsOnly_) {
    const auto* m = qobject_cast<const CandidateTableModel*>(sourceModel());
    if (m != nullptr) {
      const Estimate* e = m->candidate(sourceRow);
      if (e != nullptr && !e->fits) return false;
    }
  }
  return QSortFilterProxyModel::filterAcceptsRow(sourceRow, sourceParent);
}

// ---------------------------------------------------------------- profile

LayerProfileModel::LayerProfileModel(QObject* parent) : QAbstractTableModel(parent) {}

void LayerProfileModel::setProfile(ModelProfile profile) {
  beginResetModel();
  profile_ = std::move(profile);
  rows_ = profile_.rows();  // the multi-token prediction modules after the head, as `capplan profile` lists them
  endResetModel();
}

int LayerProfileModel::rowCount(const QModelIndex& parent) const {
  return parent.isValid() ? 0 : int(rows_.size());
}

int LayerProfileModel::columnCount(const QModelIndex& parent) const {
  return parent.isValid() ? 0 : ColumnCount;
}

QVariant LayerProfileModel::data(const QModelIndex& index, int role) const {
  if (!index.isValid() || index.row() >= int(rows_.size()) || index.column() >= ColumnCount)
    return {};
  const LayerProfile& p = rows_[size_t(index.row())];
  if (role == Qt::DisplayRole) {
    switch (index.column()) {
      case Name: return QString::fromStdString(p.name);
      case Kind: return QString::fromStdString(p.kind);
      case Params: return formatCount(p.params);
      case ForwardGflops: return QString::number(p.forward_flops / 1e9, 'f', 2);
      case ActivationMiB: return QString::number(p.activation_bytes / (1024.0 * 1024.0), 'f', 1);
    }
  }
  if (role == Qt::TextAlignmentRole && index.column() >= Params)
    return int(Qt::AlignRight | Qt::AlignVCenter);
  return {};
}

QVariant LayerProfileModel::headerData(int section, Qt::Orientation orientation, int role) const {
  if (orientation != Qt::Horizontal) return QAbstractTableModel::headerData(section, orientation, role);
  static const char* const names[ColumnCount] = {"layer", "kind", "parameters", "forward GFLOP",
                                                 "activations MiB"};
  static const char* const tips[ColumnCount] = {
      "Layer name", "embedding, transformer, norm, head or mtp (a multi-token prediction module)",
      "Parameters per tensor-parallel rank",
      "Forward FLOPs per micro-batch per TP rank (a multiply-add counts 2)",
      "Activations kept for backward per micro-batch per TP rank, without recompute"};
  if (section < 0 || section >= ColumnCount) return {};
  if (role == Qt::DisplayRole) return QString::fromUtf8(names[section]);
  if (role == Qt::ToolTipRole) return QString::fromUtf8(tips[section]);
  return {};
}

}  // namespace capplan::gui
