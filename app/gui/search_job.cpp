// Search jobs on a worker thread with progress, cancel, best-so-far and stale-result dropping.
#include "search_job.h"

#include <QtConcurrent/QtConcurrentRun>
#include <algorithm>
#include <atomic>
#include <cmath>
#include <memory>

#ifdef __linux__
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

namespace capplan::gui {
namespace {

bool dominates(const Estimate& a, const Estimate& b) {
  const double ca = std::isfinite(a.cost_usd) ? a.cost_usd : 0;
  const double cb = std::isfinite(b.cost_usd) ? b.cost_usd : 0;
  return a.days_to_train <= b.days_to_train && ca <= cb &&
         (a.days_to_train < b.days_to_train || ca < cb);
}

}  // namespace

void mergeSearchResult(SearchResult& total, const SearchResult& part, const SearchOptions& options) {
  total.evaluated += part.evaluated;
  total.search_time_s += part.search_time_s;
  total.cancelled = total.cancelled || part.cancelled;
  if (total.limit.empty()) total.limit = part.limit;
  total.candidates.insert(total.candidates.end(), part.candidates.begin(), part.candidates.end());
  std::stable_sort(total.candidates.begin(), total.candidates.end(),
                   [&](const Estimate& a, const Estimate& b) {
                     if (a.fits != b.fits) return a.fits;
                     return objective_score(a, options.objective) < objective_score(b, options.objective);
                   });
  if (options.top > 0 && total.candidates.size() > size_t(options.top))
    total.candidates.resize(size_t(options.top));
  merge_framework_bests(total.per_framework, part.per_framework, options.objective);

  std::vector<Estimate> points = total.pareto;
  for (const Estimate& e : part.pareto)
    if (e.fits) points.push_back(e);
  if (part.pareto.empty() && !part.candidates.empty() && part.candidates.front().fits)
    points.push_back(part.candidates.front());
  std::vector<Estimate> front;
  for (const Estimate& p : points) {
    bool dominated = false;
    for (const Estimate& q : points) dominated = dominated || dominates(q, p);
    if (!dominated) front.push_back(p);
  }
  std::sort(front.begin(), front.end(),
            [](const Estimate& a, const Estimate& b) { return a.nodes < b.nodes; });
  total.pareto = std::move(front);
}

namespace {

// Linux's nice value is per thread and inherited by the threads it creates (the search's
// workers). Raised once per pool thread; it stays for the later jobs of that (background) pool.
void lowerThisThreadsPriority() {
#ifdef __linux__
  const int tid = int(::syscall(SYS_gettid));
  if (::getpriority(PRIO_PROCESS, id_t(tid)) < 10) ::setpriority(PRIO_PROCESS, id_t(tid), 10);
#endif
}

void runSearchWithFlag(QPromise<SearchResult>& promise, const SearchRequest& request,
                       const std::atomic<bool>& cancelFlag) {
  const int parts = std::max<int>(1, int(request.nodeCounts.size()));
  constexpr int kUnits = 100;  // per node count: a progress signal per percent, not per unit
  promise.setProgressRange(0, parts * kUnits);
  promise.setProgressValue(0);
  SearchResult total;
  for (int i = 0; i < int(request.nodeCounts.size()); ++i) {
    Scenario scenario = request.scenario;
    scenario.nodes = request.nodeCounts[size_t(i)];
    SearchOptions options = request.options;
    options.nodes_min = options.nodes_max = scenario.nodes;
    std::atomic<int> lastUnits{-1};
    const SearchProgress progress = [&](int64_t done, int64_t all) {
      const int units = all > 0 ? int(std::min<int64_t>(kUnits, done * kUnits / all)) : 0;
      if (units != lastUnits.exchange(units)) promise.setProgressValue(i * kUnits + units);
      return !cancelFlag.load() && !promise.isCanceled();
    };
    const SearchResult part = request.anyFramework ? search_frameworks(scenario, options, progress)
                                                   : search(scenario, options, progress);
    std::vector<Estimate> counts = total.pareto;
    mergeSearchResult(total, part, request.options);
    if (request.everyCount) {
      for (const Estimate& e : part.candidates)
        if (e.fits) {
          counts.push_back(e);
          break;
        }
      total.pareto = std::move(counts);
    }
    const bool stop = cancelFlag.load() || promise.isCanceled();
    total.cancelled = total.cancelled || (stop && i + 1 < int(request.nodeCounts.size()));
    promise.setProgressValue((i + 1) * kUnits);
    promise.addResult(total);
    if (stop) break;
  }
  if (request.nodeCounts.empty()) promise.addResult(total);
}

}  // namespace

void runSearch(QPromise<SearchResult>& promise, const SearchRequest& request) {
  const std::atomic<bool> never{false};
  runSearchWithFlag(promise, request, never);
}

// ---------------------------------------------------------------- SearchJob

SearchJob::SearchJob(QObject* parent, Kind kind)
    : QObject(parent), pool_(new QThreadPool(this)), kind_(kind) {
  qRegisterMetaType<capplan::SearchResult>("capplan::SearchResult");
  // One job at a time does work; a superseded job only finishes its current unit (it is cancelled)
  // and must not hold up the next, so two threads: the stale one winding down and the current one.
  pool_->setMaxThreadCount(2);
}

SearchJob::~SearchJob() {
  cancel();
  for (QFuture<SearchResult>& f : running_) f.waitForFinished();
  if (watcher_ != nullptr) watcher_->waitForFinished();
  pool_->waitForDone();
}

quint64 SearchJob::start(const SearchRequest& request) {
  cancel();
  reapFinished();
  const quint64 gen = ++generation_;
  auto flag = std::make_shared<std::atomic<bool>>(false);
  cancelFlag_ = flag;
  const bool background = kind_ == Kind::Background;
  QFuture<SearchResult> future = QtConcurrent::run(pool_,
      [request, flag, background](QPromise<SearchResult>& promise) {
        if (background) lowerThisThreadsPriority();
        runSearchWithFlag(promise, request, *flag);
      });
  if (watcher_ != nullptr) {
    watcher_->disconnect(this);
    running_.append(watcher_->future());
    watcher_->deleteLater();
  }
  watcher_ = new QFutureWatcher<SearchResult>(this);
  QFutureWatcher<SearchResult>* w = watcher_;
  connect(w, &QFutureWatcherBase::progressValueChanged, this, [this, gen, w](int value) {
    if (gen == generation_) emit progressChanged(value, w->progressMaximum());
  });
  connect(w, &QFutureWatcherBase::resultReadyAt, this, [this, gen, w](int index) {
    if (gen != generation_ || w->isFinished()) return;
    emit resultReady(gen, w->resultAt(index), false);
  });
  connect(w, &QFutureWatcherBase::finished, this, [this, gen, w]() {
    if (gen != generation_) return;
    const QFuture<SearchResult> f = w->future();
    SearchResult last;
    if (f.resultCount() > 0) last = f.resultAt(f.resultCount() - 1);
    emit resultReady(gen, last, true);
    emit searchFinished(gen, last.cancelled);
  });
  w->setFuture(future);
  emit searchStarted(gen);
  return gen;
}

void SearchJob::cancel() {
  if (cancelFlag_) cancelFlag_->store(true);
}

bool SearchJob::isRunning() const { return watcher_ != nullptr && watcher_->isRunning(); }

void SearchJob::waitForFinished() {
  if (watcher_ != nullptr) watcher_->waitForFinished();
}

void SearchJob::reapFinished() {
  running_.erase(std::remove_if(running_.begin(), running_.end(),
                                [](const QFuture<SearchResult>& f) { return f.isFinished(); }),
                 running_.end());
}

}  // namespace capplan::gui
