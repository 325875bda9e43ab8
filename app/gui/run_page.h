// The Run page: a scaled-down run of the selected layout through the runtime's launcher, on this
// machine or submitted to Slurm, its metrics charted as they grow, and predicted vs simulated vs
// measured seconds per term at the end.
#pragma once

#include <QFutureWatcher>
#include <QHash>
#include <QWidget>
#include <atomic>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "planner/plan_io.h"

class QChartView;
class QCheckBox;
class QComboBox;
class QListWidget;
class QLabel;
class QLineEdit;
class QLineSeries;
class QScatterSeries;
class QPlainTextEdit;
class QPushButton;
class QSpinBox;
class QTableWidget;

namespace capplan::rt {
struct LaunchRequest;
struct TermRow;
struct MemoryRow;
}  // namespace capplan::rt

namespace capplan::gui {

class ChartArea;

class RunPage : public QWidget {
  Q_OBJECT
 public:
  explicit RunPage(QWidget* parent = nullptr);
  ~RunPage() override;
  // The selected plan; its layout is shrunk to the machine's cores (defaultRanks(): tp and pp
  // cut to 2 at most, then dp; schedule, vp, zero, recompute, offload, sp and order kept).
  void setPlan(const Plan& plan);
  Layout runLayout() const;
  static constexpr int kMaxRanks = 8;
  bool isRunning() const { return running_; }
  int lossPoints() const;
  QList<QPointF> lossCurve() const;  // (step, loss) as charted
  QString runDirectory() const { return runDir_; }
  // The next launch writes here (checkpoints, metrics, run record); later launches pick a new one.
  void setRunDirectory(const QString& dir) {
    runDir_ = dir;
    runDirUsed_ = false;
  }
  void setSteps(int steps);
  // Where runs go and where earlier runs are listed from (default <AppDataLocation>/runs); a new
  // folder here is listed at once.
  void setRunsFolder(const QString& dir);
  QString runsFolder() const { return runsFolder_; }
  // Lists the runs folder again: every earlier run, newest first; choosing one makes Resume
  // continue it (from its own plan.yaml and newest good checkpoint) when it has a checkpoint.
  void refreshHistory();
  int historyCount() const;
  void selectHistory(int row);
  // "corpus" (the bundled text, configs/corpus/sqlite-api: the default) or "synthetic".
  void setData(const QString& data);
  // false: run the plain layout (zero 0, no recompute, offload or sp) when the trainer lacks a knob.
  void setKeepKnobs(bool keep);
  void setCheckpointEvery(int steps) { checkpointEvery_ = steps; }  // 0 = a quarter of the run
  // "Launch on Slurm": submit the same run with sbatch and follow it (partition, nodes, time limit).
  void setSlurm(bool on, const QString& partition = {}, int nodes = 1, const QString& timeLimit = {});
  int resumeMarkers() const;
  // Rank 0's CPU utilisation over time as charted (times never go back after a resume).
  QList<QPointF> systemPoints() const;
  // Ranks of the default local layout: one per core, at most kMaxRanks.
  static int defaultRanks();  // points on the loss chart where an attempt resumed

 public slots:
  void launch(bool resume = false);
  void stop();

 signals:
  void runFinished(bool succeeded);
  void metricsArrived(int lossPoints);

 private:
  QLayout* buildLaunchBar();
  QLayout* buildSlurmBar();
  QLayout* buildCharts();
  QLayout* buildResults();
  QWidget* buildHistory();
  void onHistoryChosen(int row);
  // The request for the selected layout in runDir_ (a new folder unless resuming).
  rt::LaunchRequest launchRequest(const Layout& layout, bool resume);
  void launchLocal(const rt::LaunchRequest& req);
  void launchOnSlurm(rt::LaunchRequest req);
  // Runs `f` on the GUI thread, unless this page is gone by then.
  std::function<void(std::function<void(RunPage*)>)> poster();
  // Predicted vs simulated vs measured per term, predicted vs allocated memory per rank by kind,
  // the findings, and the run's end.
  void showOutcome(const std::vector<rt::TermRow>& rows, const std::vector<rt::MemoryRow>& memory,
                   const QString& findings, const QString& status, const QString& reason);
  // The per-term and memory tables (a run just ended, or an earlier run chosen from the list).
  void showComparison(const std::vector<rt::TermRow>& rows, const std::vector<rt::MemoryRow>& memory);
  void onMetrics(const QString& type, const QHash<QString, double>& numbers);
  void onOutputLine(const QString& line);
  void onFinished(const QString& status, const QString& reason);
  void onSlurmState(const QString& state, const QString& reason, int position, int restarts);
  void onResumed(double step);
  void resetCharts();
  void describeLayout();  // the note under the fields, from the fields

  Plan plan_;
  QString runDir_;
  bool runDirUsed_ = false;
  int checkpointEvery_ = 0;
  bool running_ = false;
  std::shared_ptr<std::atomic<bool>> cancel_;
  QFutureWatcher<void>* watcher_ = nullptr;

  QSpinBox* steps_ = nullptr;
  QComboBox* data_ = nullptr;
  QListWidget* history_ = nullptr;
  QString runsFolder_;
  std::optional<Plan> resumeFrom_;  // an earlier run chosen in the list: its plan as it ran
  QSpinBox* runDp_ = nullptr;
  QSpinBox* runTp_ = nullptr;
  QSpinBox* runPp_ = nullptr;
  QLabel* layoutNote_ = nullptr;
  QCheckBox* keepKnobs_ = nullptr;
  QPushButton* launchButton_ = nullptr;
  QPushButton* stopButton_ = nullptr;
  QPushButton* resumeButton_ = nullptr;
  QPushButton* calibrateButton_ = nullptr;  // "Calibrate from this run" (measure_tools.h)
  QLabel* status_ = nullptr;
  QPlainTextEdit* log_ = nullptr;
  QLabel* findings_ = nullptr;
  QTableWidget* compare_ = nullptr;
  QTableWidget* memory_ = nullptr;  // memory per rank by kind: predicted and allocated
  ChartArea* lossChart_ = nullptr;
  ChartArea* speedChart_ = nullptr;
  ChartArea* systemChart_ = nullptr;
  QLineSeries* loss_ = nullptr;
  QLineSeries* tokens_ = nullptr;
  QLineSeries* cpu_ = nullptr;
  QLineSeries* rss_ = nullptr;
  QScatterSeries* resumed_ = nullptr;  // where a requeued attempt resumed
  QCheckBox* slurm_ = nullptr;
  QLineEdit* partition_ = nullptr;
  QSpinBox* slurmNodes_ = nullptr;
  QLineEdit* timeLimit_ = nullptr;
  QLabel* slurmState_ = nullptr;
  bool slurmRun_ = false;  // the current run was submitted to Slurm
  double systemOffsetS_ = 0;  // added to a resumed attempt's times, which start at 0 again
  double lastSystemS_ = 0;
  bool updatingLayout_ = false;
};

}  // namespace capplan::gui
