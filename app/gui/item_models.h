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

// Rows are the search's candidates, best first; the first column is the rank.
class CandidateTableModel : public QAbstractTableModel {
  Q_OBJECT
 public:
  enum Column {
    Rank, Nodes, Gpus, Dp, Tp, Pp, Vp, Mbs, Microbatches, Zero, Recompute, Offload, Sp, Order,
    Schedule, StepTime, SamplesPerS, TokensPerS, Days, Dollars, MemoryGiB, Mfu, Bubble, Fits,
    ColumnCount
  };
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
};

bool sameLayout(const Layout& a, const Layout& b);
// "1.23 M", "175 B": counts with SI-style suffixes as the README writes them.
QString formatCount(double v);
// Seconds as "412 ms", "1.93 s", "3.2 min".
QString formatSeconds(double s);
QString formatDollars(double usd);  // "$1.2 M"; "unknown" for NaN

}  // namespace capplan::gui
