// Runs capplan::search off the GUI thread: QtConcurrent::run with a QPromise that reports progress,
// honours cancel and streams the best-so-far result (addResult) after each node count. Jobs take a
// value snapshot of their inputs; a generation id drops results of superseded jobs. No planning
// logic here beyond merging per-node-count results.
#pragma once

#include <QFuture>
#include <QFutureWatcher>
#include <QList>
#include <QObject>
#include <QPromise>
#include <QThreadPool>
#include <atomic>
#include <memory>
#include <vector>

#include "planner/search.h"

namespace capplan::gui {

struct SearchRequest {
  Scenario scenario;           // nodes is overwritten per node count
  SearchOptions options;       // nodes_min/nodes_max are overwritten per node count
  std::vector<int> nodeCounts; // searched one after the other, results merged
  // The node-count what-if: the result's `pareto` holds the best fitting layout of every node
  // count searched (sorted by nodes), dominated or not, instead of only the undominated ones.
  bool everyCount = false;
  bool anyFramework = false;  // every framework preset, ranked together (search_frameworks)
};

// Merges a node count's result into the running total: candidates re-ranked by the objective
// (stable), capped at options.top; pareto = the non-dominated (days, dollars) points.
void mergeSearchResult(SearchResult& total, const SearchResult& part, const SearchOptions& options);

// The worker body (public for tests): one capplan::search per node count.
void runSearch(QPromise<SearchResult>& promise, const SearchRequest& request);

// Each SearchJob runs its jobs on its own thread pool, never Qt's global one: a search never
// queues behind other work (a node-count sweep, a step simulation). A background job (the
// node-count sweep) runs niced (Linux: nice +10 for its threads and the search threads they
// start), so the GUI thread and the foreground search keep the cores while it fills in.
class SearchJob : public QObject {
  Q_OBJECT
 public:
  enum class Kind { Foreground, Background };
  explicit SearchJob(QObject* parent = nullptr, Kind kind = Kind::Foreground);
  ~SearchJob() override;  // cancels and waits for every job it started

  // Cancels the running job (its results are dropped) and starts a new one; returns its id.
  quint64 start(const SearchRequest& request);
  void cancel();
  bool isRunning() const;
  quint64 generation() const { return generation_; }
  // Waits for the current job (tests and shutdown only; never called from an event handler).
  void waitForFinished();

 signals:
  void progressChanged(int done, int total);
  // Best-so-far while running, then the final result (finished = true).
  void resultReady(quint64 generation, const capplan::SearchResult& result, bool finished);
  void searchStarted(quint64 generation);
  void searchFinished(quint64 generation, bool cancelled);

 private:
  void reapFinished();

  QThreadPool* pool_ = nullptr;
  Kind kind_;
  quint64 generation_ = 0;
  QFutureWatcher<SearchResult>* watcher_ = nullptr;
  QList<QFuture<SearchResult>> running_;  // superseded jobs still finishing
  std::shared_ptr<std::atomic<bool>> cancelFlag_;  // the current job's; a job keeps its own copy
};

}  // namespace capplan::gui

Q_DECLARE_METATYPE(capplan::SearchResult)
