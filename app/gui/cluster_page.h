// The Cluster page: on what. An instance type from the catalog or a cluster file, the node count
// or range, the price per node-hour, and the GPU, NVLink and network figures with their sources.
#pragma once

#include <QWidget>

#include "page_common.h"

class QComboBox;
class QDoubleSpinBox;
class QGroupBox;
class QLabel;
class QListWidget;

namespace capplan::gui {

class ClusterPage : public QWidget {
  Q_OBJECT
 public:
  explicit ClusterPage(PageHost& host, QWidget* parent = nullptr);
  void syncFromInputs(const PlanInputs& in);
  void refreshFigures();
  QListWidget* diagnosticsList() const { return diagnostics_; }

 signals:
  void clusterFileChosen(const QString& path);

 private:
  QGroupBox* buildInstances();
  QLayout* buildFigures();

  PageHost& host_;
  QComboBox* preset_ = nullptr;
  QSpinBox* nodesMin_ = nullptr;
  QSpinBox* nodesMax_ = nullptr;
  QDoubleSpinBox* price_ = nullptr;
  QLabel* figures_ = nullptr;
  QListWidget* diagnostics_ = nullptr;
};

}  // namespace capplan::gui
