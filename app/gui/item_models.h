// Item models behind the GUI's tables: ranked layout candidates (one row per Estimate) and the
// per-layer profile of a model. Display text, sort keys (Qt::UserRole, numbers) and tooltips;
// no planning logic of their own.
#pragma once

#include <QAbstractTableModel>
#include <QSortFilterProxyModel>
#include <vector>

#include "planner/cost_model.h"
#include "planner/profile.h"

namespace capplan::gui {

// Rows are the search's candidates, best first. The answer comes first: rank, then what users
// choose by (step, days, cost, memory, MFU, fits) and the layout as one compact string (its knobs
// in the tooltip); the columns from Nodes on give every figure and knob on its own, to sort or
// filter by.
class CandidateTableModel : public QAbstractTableModel {
  Q_OBJECT
 public:
  enum Column {
    Rank, StepTime, Days, Dollars, MemoryGiB, Mfu, Fits, LayoutText,
    Nodes, Gpus, SamplesPerS, TokensPerS, Bubble, Dp, Tp, Pp, Vp, Mbs, Microbatches, Zero,
    Recompute, Offload, Sp, Order, Schedule, ColumnCount
  };
  // Columns [0, KeyColumnCount) stay in view while the others scroll (the frozen columns).
  static constexpr int KeyColumnCount = LayoutText + 1;
  static constexpr int SortRole = Qt::UserRole;

  explicit CandidateTableModel(QObject* parent = nullptr);

  void setCandidates(std::vector<Estimate> candidates);
  const std::vector<Estimate>& candidates() const { return candidates_; }
  const Estimate* candidate(int row) const;
  // Row whose layout and node count equal the arguments, or -1.
  int findLayout(const Layout& layout, int nodes) const;

  int rowCount(const QModelIndex& parent = {}) const override;
  int columnCount(const QModelIndex& parent = {}) const override;
  QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
  QVariant headerData(int section, Qt::Orientation orientation,
                      int role = Qt::DisplayRole) const override;

 private:
  std::vector<Estimate> candidates_;
  bool mixedFrameworks_ = false;  // candidates of several frameworks: the layout text names each
};

// Filters candidates by free text over every column and optionally hides layouts that do not fit.
class CandidateFilterModel : public QSortFilterProxyModel {
  Q_OBJECT
 public:
  explicit CandidateFilterModel(QObject* parent = nullptr);
  void setFitsOnly(bool fitsOnly);
  bool fitsOnly() const { return fitsOnly_; }

 protected:
  bool filterAcceptsRow(int sourceRow, const QModelIndex& sourceParent) const override;

 private:
  bool fitsOnly_ = false;
};

class LayerProfileModel : public QAbstractTableModel {
  Q_OBJECT
 public:
  enum Column { Name, Kind, Params, ForwardGflops, ActivationMiB, ColumnCount };

  explicit LayerProfileModel(QObject* parent = nullptr);
  void setProfile(ModelProfile profile);
  const ModelProfile& profile() const { return profile_; }

  int rowCount(const QModelIndex& parent = {}) const override;
  int columnCount(const QModelIndex& parent = {}) const override;
  QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
  QVariant headerData(int section, Qt::Orientation orientation,
                      int role = Qt::DisplayRole) const override;

 private:
  ModelProfile profile_;
  std::vector<LayerProfile> rows_;  // profile_.rows(): the layers, then the MTP modules
};

bool sameLayout(const Layout& a, const Layout& b);
// "dp 12 · tp 4 · pp 20 · mbs 1 · z1 · sel · sp": the knobs that differ from the plain layout
// (vp > 1, which is the interleaved schedule, zero > 0, recompute, offload, sp, gpipe) and always
// dp, tp, pp, mbs.
QString compactLayout(const Layout& l);
// Every knob, one per line, for the compact string's tooltip.
QString layoutKnobs(const Layout& l, int microbatches);
// "1.23 M", "175 B": counts with SI-style suffixes as the README writes them.
QString formatCount(double v);
// Seconds as "412 ms", "1.93 s", "3.2 min".
QString formatSeconds(double s);
QString formatDollars(double usd);  // "$1.2 M"; "unknown" for NaN

}  // namespace capplan::gui
