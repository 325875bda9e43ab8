// The Model page: what is trained. A preset or a model file, the editable architecture (each field
// with its error beside it), the model's size and memory before sharding, and the per-layer
// profile at the selected layout's tp and mbs.
#pragma once

#include <QWidget>

#include "page_common.h"

class QCheckBox;
class QComboBox;
class QFormLayout;
class QGroupBox;
class QLabel;
class QListWidget;
class QPushButton;
class QTableView;

namespace capplan::gui {

class LayerProfileModel;

class ModelPage : public QWidget {
  Q_OBJECT
 public:
  ModelPage(PageHost& host, LayerProfileModel* profile, QWidget* parent = nullptr);
  // Sets every field from the inputs (the host ignores the edits this makes).
  void syncFromInputs(const PlanInputs& in);
  // Field errors, the size figures and the profile, for the inputs and the selected layout.
  void refreshFigures();
  QListWidget* diagnosticsList() const { return diagnostics_; }

 signals:
  void modelFileChosen(const QString& path);
  // "Measure on this machine" wrote a device profile (measure_tools.h).
  void deviceProfileMeasured(const QString& path);

 private:
  QGroupBox* buildArchitecture();
  void addNumberFields(QGroupBox* box, QFormLayout* form);
  void addKindFields(QGroupBox* box, QFormLayout* form);
  QLayout* buildFigures();

  PageHost& host_;
  LayerProfileModel* profile_;
  QComboBox* preset_ = nullptr;
  QSpinBox* layers_ = nullptr;
  QSpinBox* hidden_ = nullptr;
  QSpinBox* heads_ = nullptr;
  QSpinBox* kvHeads_ = nullptr;
  QSpinBox* headDim_ = nullptr;
  QSpinBox* slidingWindow_ = nullptr;
  QSpinBox* globalEvery_ = nullptr;
  QSpinBox* attentionChunk_ = nullptr;  // chunked attention (0 = none)
  // Multi-head latent attention (0 kv_lora_rank = none).
  QSpinBox* mlaKvRank_ = nullptr;
  QSpinBox* mlaQRank_ = nullptr;
  QSpinBox* mlaQkNope_ = nullptr;
  QSpinBox* mlaQkRope_ = nullptr;
  QSpinBox* mlaV_ = nullptr;
  QSpinBox* mtpLayers_ = nullptr;  // multi-token prediction modules (0 = none)
  QPushButton* measure_ = nullptr;  // "Measure on this machine" (a build with the runtime only)
  QSpinBox* ffnHidden_ = nullptr;
  QSpinBox* vocab_ = nullptr;
  QSpinBox* seqLen_ = nullptr;
  // Mixture of experts (0 experts = dense).
  QSpinBox* moeExperts_ = nullptr;
  QSpinBox* moeTopK_ = nullptr;
  QSpinBox* moeExpertFfn_ = nullptr;
  QSpinBox* moeShared_ = nullptr;
  QComboBox* ffn_ = nullptr;
  QComboBox* norm_ = nullptr;
  QCheckBox* tied_ = nullptr;
  QLabel* figures_ = nullptr;
  QListWidget* diagnostics_ = nullptr;
  QTableView* profileView_ = nullptr;
};

}  // namespace capplan::gui
