// Shared set-up for the GUI tests: one QApplication per test process on the offscreen platform,
// QStandardPaths in test mode (settings and app data never touch the user's), and a scenario
// small enough to search in milliseconds.
#pragma once

#include <QApplication>
#include <QStandardPaths>

#include "planner/cost_model.h"

namespace capplan::gui::test {

inline QApplication* ensureApp() {
  static int argc = 1;
  static char name[] = "capplan-gui-test";
  static char* argv[] = {name, nullptr};
  if (qApp == nullptr) {
    if (qEnvironmentVariableIsEmpty("QT_QPA_PLATFORM")) qputenv("QT_QPA_PLATFORM", "offscreen");
    QStandardPaths::setTestModeEnabled(true);
    auto* app = new QApplication(argc, argv);
    QApplication::setApplicationName(QStringLiteral("capplan-test"));
    QApplication::setOrganizationName(QStringLiteral("capplan-test"));
    return app;
  }
  return qobject_cast<QApplication*>(qApp);
}

// A 1.3B-parameter GPT on nodes of 8 GPUs with 40 GiB each.
inline Scenario smallScenario(int nodes = 2) {
  Scenario s;
  s.model.name = "test-1.3b";
  s.model.layers = 24;
  s.model.hidden = 2048;
  s.model.heads = 16;
  s.model.vocab = 50257;
  s.model.seq_len = 2048;
  s.cluster.name = "test-a100";
  s.cluster.gpus_per_node = 8;
  s.cluster.gpu.name = "A100-SXM4-40GB";
  s.cluster.gpu.memory_gib = 40;
  s.cluster.gpu.peak_tflops_bf16 = 312;
  s.cluster.gpu.peak_tflops_fp16 = 312;
  s.cluster.gpu.peak_tflops_fp32 = 19.5;
  s.cluster.gpu.memory_gbyte_per_s = 1555;
  s.cluster.intra_node_gbyte_per_s = 300;
  s.cluster.inter_node_gbit_per_s = 400;
  s.cluster.price_per_node_hour_usd = 32.77;
  s.training.gbs = 512;
  s.training.tokens = 26e9;
  s.nodes = nodes;
  return s;
}

}  // namespace capplan::gui::test
