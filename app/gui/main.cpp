// capplan-gui entry point: `capplan-gui [plan.yaml]` opens a plan (or the embedded default with a
// plan already computed); `capplan-gui --screenshots DIR` renders each page to PNG and exits.
#include <QApplication>
#include <QCommandLineParser>
#include <QDir>
#include <QFileInfo>
#include <QPushButton>
#include <QTableView>
#include <QTimer>
#include <cstdio>

#include "main_window.h"
#include "run_page.h"
#include "timeline_page.h"
#include "search_job.h"

int main(int argc, char** argv) {
  QApplication app(argc, argv);
  QApplication::setApplicationName(QStringLiteral("capplan"));
  QApplication::setOrganizationName(QStringLiteral("capplan"));
  QApplication::setApplicationVersion(QStringLiteral("0.1.0"));

  QCommandLineParser parser;
  parser.setApplicationDescription(QStringLiteral("capplan desktop planner"));
  parser.addHelpOption();
  parser.addVersionOption();
  QCommandLineOption shots(QStringLiteral("screenshots"),
                           QStringLiteral("Render each page to DIR/<nn>-<page>.png and exit."),
                           QStringLiteral("DIR"));
  parser.addOption(shots);
  QCommandLineOption size(QStringLiteral("size"),
                          QStringLiteral("Window size WIDTHxHEIGHT (default: 1440x900 or 90 % of the screen)."),
                          QStringLiteral("WxH"));
  parser.addOption(size);
  parser.addPositionalArgument(QStringLiteral("plan"), QStringLiteral("Plan YAML to open (optional)."));
  parser.process(app);

  capplan::gui::MainWindowOptions options;
  const bool screenshotMode = parser.isSet(shots);
  if (screenshotMode) options.restoreAutosave = false;  // the default plan, reproducibly
  if (screenshotMode) options.autosavePath = QDir::temp().filePath(QStringLiteral("capplan-screenshots-autosave.yaml"));
  capplan::gui::MainWindow window(options);
  if (parser.isSet(size)) {
    const QStringList wh = parser.value(size).split(QLatin1Char('x'));
    const int w = wh.size() == 2 ? wh[0].toInt() : 0, h = wh.size() == 2 ? wh[1].toInt() : 0;
    if (w < 200 || h < 200) {
      std::fprintf(stderr, "capplan-gui: --size: expected WIDTHxHEIGHT (at least 200x200), found '%s'\n",
                   qPrintable(parser.value(size)));
      return 2;
    }
    window.resize(w, h);
  }
  window.show();
  const QStringList args = parser.positionalArguments();
  if (!args.isEmpty()) {
    if (!window.openPlanFile(args.first())) std::fprintf(stderr, "capplan-gui: could not open %s\n", qPrintable(args.first()));
  }
  if (screenshotMode) {
    const QString dir = parser.value(shots);
    // Wait for the plan, the Pareto sweep and the timeline, then render every page.
    auto pending = std::make_shared<int>(0);
    auto shoot = [&window, dir] {
      const QStringList files = window.saveScreenshots(dir);
      for (const QString& f : files) std::printf("%s\n", qPrintable(f));
      QApplication::exit(files.isEmpty() ? 1 : 0);
    };
    // With the runtime built, a short scaled-down run of the selected layout fills the Run page.
    QObject::connect(&window, &capplan::gui::MainWindow::planUpdated, &window, [&window, shoot, pending] {
      if ((*pending)++ > 0) return;
      // A comparison on the Compare page: the best layout as the baseline, the second beside it.
      window.pinBaseline();
      if (auto* table = window.findChild<QTableView*>(QStringLiteral("candidateTable")); table && table->model()->rowCount() > 1) {
        table->selectRow(1);
        window.addToComparison();
        table->selectRow(0);
      }
      window.showPage(capplan::gui::MainWindow::Page::Plan);
      // The Monte-Carlo of the run once the selection has filled in (its step simulation restarts
      // the Timeline page, which drops a run simulation started before).
      QObject::connect(&window, &capplan::gui::MainWindow::selectionFilledIn, &window, [&window] {
        if (auto* simulate = window.findChild<QPushButton*>(QStringLiteral("simulateRun"))) simulate->click();
      }, Qt::SingleShotConnection);
#ifdef CAPPLAN_GUI_HAVE_RUNTIME
      qputenv("OMPI_ALLOW_RUN_AS_ROOT", "1");
      qputenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1");
      qputenv("OMPI_MCA_rmaps_base_oversubscribe", "1");
      capplan::gui::RunPage* run = window.runPage();
      // Its own runs folder, so that the list of earlier runs shows this run and nothing else.
      const QString runs = QDir::temp().filePath(QStringLiteral("capplan-screenshots-runs"));
      QDir(runs).removeRecursively();
      run->setRunsFolder(runs);
      run->setRunDirectory(runs + QStringLiteral("/run-screenshots"));
      run->setSteps(400);  // a few seconds: long enough for several system samples
      run->setKeepKnobs(false);  // the plain layout: runs on every build of capplan-train
      QObject::connect(run, &capplan::gui::RunPage::runFinished, &window,
                       [&window, shoot] { QTimer::singleShot(1500, &window, shoot); });
      run->launch();
#else
      QTimer::singleShot(5000, &window, shoot);  // the Pareto sweep and the simulation meanwhile
#endif
    });
    QTimer::singleShot(180000, &window, shoot);  // never hang
  }
  return app.exec();
}
