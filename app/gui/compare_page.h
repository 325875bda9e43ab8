// The Compare page: a plan pinned as the baseline and other plans beside it (another candidate,
// another cluster, another model), each figure with its delta: memory per GPU by kind, the step
// time by term, MFU, days and dollars. The figures and deltas come from capplan::compare_plans;
// this page lays them out, and saves and opens the comparison file (diagnostics beside the table).
#pragma once

#include <QWidget>

#include "planner/compare.h"

class QLabel;
class QListWidget;
class QPushButton;
class QTableWidget;

namespace capplan::gui {

class ComparePage : public QWidget {
  Q_OBJECT
 public:
  explicit ComparePage(QWidget* parent = nullptr);
  // Starts a new comparison with `plan` as its baseline (the other plans are dropped).
  void pinBaseline(const Plan& plan);
  // Adds `plan` beside the baseline; false (and a message) when there is no baseline yet.
  bool addPlan(const Plan& plan);
  void removePlan(int index);  // index into comparison().plans; 0 (the baseline) clears it all
  const Comparison& comparison() const { return comparison_; }
  const ComparisonResult& result() const { return result_; }
  bool saveTo(const QString& path);    // atomic; a message says where, or why not
  bool openFrom(const QString& path);  // a bad file: its diagnostics listed, the comparison kept
  QTableWidget* table() const { return table_; }
  QListWidget* diagnosticsList() const { return diagnostics_; }
  // "gpt3-175b · 120 x p4d.24xlarge · dp 12 · tp 4 · pp 20 · mbs 1 · z1 · sel · sp": a column's name.
  static QString labelOf(const Plan& plan);

 signals:
  void comparisonChanged();

 private:
  void refresh();
  void setMessage(const QString& text);

  Comparison comparison_;
  ComparisonResult result_;
  QLabel* message_ = nullptr;
  QTableWidget* table_ = nullptr;
  QListWidget* diagnostics_ = nullptr;
  QPushButton* save_ = nullptr;
  QPushButton* remove_ = nullptr;
};

}  // namespace capplan::gui
