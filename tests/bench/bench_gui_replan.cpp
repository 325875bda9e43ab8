// Re-plan latency of capplan-gui: the real main window (offscreen), an edit typed into the
// global-batch field, and the time until the result table shows the new best layout
// (MainWindow::planUpdated after the search and the table refresh). 20 edits alternating between
// two batch sizes, after the start-up plan. Prints each edit and, last,
// "re-plan latency: median N ms, p90 M ms". A benchmark: it prints figures, asserts nothing.
// Usage: bench_gui_replan [DEBOUNCE_MS] (default: the app's own debounce).
#include <QApplication>
#include <QElapsedTimer>
#include <QSignalSpy>
#include <QSpinBox>
#include <QTemporaryDir>
#include <QTest>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "main_window.h"

int main(int argc, char** argv) {
  qputenv("QT_QPA_PLATFORM", qgetenv("QT_QPA_PLATFORM").isEmpty() ? QByteArray("offscreen") : qgetenv("QT_QPA_PLATFORM"));
  QApplication app(argc, argv);
  QTemporaryDir dir;
  capplan::gui::MainWindowOptions o;
  o.autosavePath = dir.filePath(QStringLiteral("autosave.yaml"));
  o.restoreAutosave = false;
  if (argc > 1) o.debounceMs = std::max(0, std::atoi(argv[1]));
  capplan::gui::MainWindow w(o);
  w.resize(1600, 1000);
  w.show();
  QSignalSpy planned(&w, &capplan::gui::MainWindow::planUpdated);
  if (!planned.wait(120000)) {
    std::fprintf(stderr, "bench_gui_replan: no start-up plan\n");
    return 1;
  }
  auto* gbs = w.findChild<QSpinBox*>(QStringLiteral("gbs"));
  if (!gbs) {
    std::fprintf(stderr, "bench_gui_replan: no gbs field\n");
    return 1;
  }
  const int edits = 20;
  std::vector<double> ms;
  for (int i = 0; i < edits; ++i) {
    planned.clear();
    const QString value = i % 2 == 0 ? QStringLiteral("768") : QStringLiteral("1536");
    gbs->setFocus();
    gbs->selectAll();
    QElapsedTimer t;
    t.start();  // from the last key of the edit
    QTest::keyClicks(gbs, value);
    t.restart();
    if (!planned.wait(60000)) {
      std::fprintf(stderr, "bench_gui_replan: edit %d got no plan\n", i + 1);
      return 1;
    }
    ms.push_back(double(t.nsecsElapsed()) / 1e6);
    std::printf("edit %2d gbs %s: %.1f ms\n", i + 1, qPrintable(value), ms.back());
  }
  std::sort(ms.begin(), ms.end());
  const double median = 0.5 * (ms[(ms.size() - 1) / 2] + ms[ms.size() / 2]);
  const double p90 = ms[std::min(ms.size() - 1, size_t(0.9 * double(ms.size())))];
  std::printf("re-plan latency: median %.0f ms, p90 %.0f ms\n", median, p90);
  return 0;
}
