// GUI item models under QAbstractItemModelTester, the result merging of the search job, and the
// job itself: best-so-far streaming, cancel with best-so-far kept, stale results dropped.
#include <gtest/gtest.h>

#include <QAbstractItemModelTester>
#include <QChart>
#include <QChartView>
#include <QVBoxLayout>
#include <QSignalSpy>
#include <QTest>

#include "gui_test_support.h"
#include "item_models.h"
#include "page_common.h"
#include "planner/profile.h"
#include "search_job.h"

namespace capplan::gui {
namespace {

Estimate fakeEstimate(int dp, int tp, int pp, double days, double cost, bool fits,
                      Schedule schedule = Schedule::OneFOneB, int nodes = 2) {
  Estimate e;
  e.layout.dp = dp;
  e.layout.tp = tp;
  e.layout.pp = pp;
  e.layout.schedule = schedule;
  e.nodes = nodes;
  e.gpus = dp * tp * pp;
  e.days_to_train = days;
  e.cost_usd = cost;
  e.fits = fits;
  e.reason = fits ? "" : "activations 52 GiB exceed 40 GiB";
  e.step_time_s = days;
  e.samples_per_s = 100.0 / days;
  e.memory_per_gpu_bytes.total = 30e9;
  e.memory_per_gpu_bytes.capacity = 40.0 * 1024 * 1024 * 1024;
  return e;
}

class GuiModels : public ::testing::Test {
 protected:
  void SetUp() override { test::ensureApp(); }
};

TEST_F(GuiModels, CandidateModelPassesModelTester) {
  CandidateTableModel model;
  QAbstractItemModelTester tester(&model, QAbstractItemModelTester::FailureReportingMode::Fatal);
  model.setCandidates({fakeEstimate(2, 8, 1, 3.0, 1000, true), fakeEstimate(4, 4, 1, 2.0, 2000, true),
                       fakeEstimate(16, 1, 1, 1.0, 500, false, Schedule::Interleaved)});
  EXPECT_EQ(model.rowCount(), 3);
  EXPECT_EQ(model.columnCount(), int(CandidateTableModel::ColumnCount));
  EXPECT_EQ(model.data(model.index(1, CandidateTableModel::Tp)).toInt(), 4);
  EXPECT_EQ(model.data(model.index(2, CandidateTableModel::Fits)).toString(), QStringLiteral("no"));
  // The tooltip of a non-fitting row says why, in words.
  EXPECT_TRUE(model.data(model.index(2, 0), Qt::ToolTipRole).toString().contains(QStringLiteral("exceed")));
  EXPECT_FALSE(model.headerData(CandidateTableModel::Zero, Qt::Horizontal, Qt::ToolTipRole).toString().isEmpty());
  EXPECT_EQ(model.findLayout(fakeEstimate(4, 4, 1, 0, 0, true).layout, 2), 1);
  EXPECT_EQ(model.findLayout(fakeEstimate(4, 4, 1, 0, 0, true).layout, 3), -1);
  model.setCandidates({});
  EXPECT_EQ(model.rowCount(), 0);
}

// Expectation: the answer comes first: rank, step, days, cost, GiB/GPU, MFU, fits, then the layout
// as one compact string (dp 12 · tp 4 · pp 20 · mbs 1 · z1 · sel · sp) whose tooltip lists every
// knob.
TEST_F(GuiModels, TheAnswerComesFirstWithACompactLayout) {
  CandidateTableModel model;
  Estimate e = fakeEstimate(12, 4, 20, 30.0, 6.2e6, true);
  e.layout.mbs = 1;
  e.layout.zero = 1;
  e.layout.recompute = Recompute::Selective;
  e.layout.sp = true;
  e.layout.order = "DPT";
  e.num_microbatches = 128;
  model.setCandidates({e});
  QStringList heads;
  for (int c = 0; c < CandidateTableModel::KeyColumnCount; ++c)
    heads << model.headerData(c, Qt::Horizontal, Qt::DisplayRole).toString();
  EXPECT_EQ(heads.join(QLatin1Char(',')), QStringLiteral("#,step,days,cost,GiB/GPU,MFU,fits,layout"));
  const QModelIndex layout = model.index(0, CandidateTableModel::LayoutText);
  EXPECT_EQ(layout.data().toString(),
            QString::fromUtf8("dp 12 \u00b7 tp 4 \u00b7 pp 20 \u00b7 mbs 1 \u00b7 z1 \u00b7 sel \u00b7 sp"));
  const QString tip = layout.data(Qt::ToolTipRole).toString();
  for (const char* knob : {"vp 1", "128 micro-batches", "zero 1", "recompute selective", "offload off", "sp on",
                           "schedule 1f1b", "order DPT"})
    EXPECT_TRUE(tip.contains(QString::fromUtf8(knob))) << knob << " in " << tip.toStdString();
  // Knobs off their plain value appear; plain ones stay out of the short form.
  e.layout.vp = 2;
  e.layout.schedule = Schedule::Interleaved;
  e.layout.zero = 0;
  e.layout.recompute = Recompute::None;
  e.layout.sp = false;
  e.layout.offload = true;
  EXPECT_EQ(compactLayout(e.layout),
            QString::fromUtf8("dp 12 \u00b7 tp 4 \u00b7 pp 20 \u00b7 vp 2 \u00b7 mbs 1 \u00b7 offload"));
  e.layout.vp = 1;
  e.layout.schedule = Schedule::GPipe;
  EXPECT_EQ(compactLayout(e.layout),
            QString::fromUtf8("dp 12 \u00b7 tp 4 \u00b7 pp 20 \u00b7 mbs 1 \u00b7 offload \u00b7 gpipe"));
}

TEST_F(GuiModels, FilterSortsNumericallyAndHidesNonFitting) {
  CandidateTableModel model;
  CandidateFilterModel filter;
  filter.setSourceModel(&model);
  QAbstractItemModelTester tester(&filter, QAbstractItemModelTester::FailureReportingMode::Fatal);
  model.setCandidates({fakeEstimate(2, 8, 1, 3.0, 1000, true), fakeEstimate(4, 4, 1, 12.0, 2000, true),
                       fakeEstimate(16, 1, 1, 1.0, 500, false, Schedule::Interleaved)});
  filter.sort(CandidateTableModel::Days, Qt::AscendingOrder);
  // Expectation: numeric sort, 1 < 3 < 12 (text sort would put "12.0" before "3.0").
  ASSERT_EQ(filter.rowCount(), 3);
  EXPECT_EQ(filter.index(0, CandidateTableModel::Dp).data().toInt(), 16);
  EXPECT_EQ(filter.index(2, CandidateTableModel::Dp).data().toInt(), 4);
  filter.setFitsOnly(true);
  EXPECT_EQ(filter.rowCount(), 2);
  filter.setFitsOnly(false);
  filter.setFilterFixedString(QStringLiteral("interleaved"));
  ASSERT_EQ(filter.rowCount(), 1);
  EXPECT_EQ(filter.index(0, CandidateTableModel::Dp).data().toInt(), 16);
}

TEST_F(GuiModels, ProfileModelPassesModelTester) {
  LayerProfileModel model;
  QAbstractItemModelTester tester(&model, QAbstractItemModelTester::FailureReportingMode::Fatal);
  const Scenario s = test::smallScenario();
  model.setProfile(profile_model(s.model, 2, 2048, 1));
  // Expectation: embedding + 24 blocks + final norm + head (the profile names each layer).
  EXPECT_GE(model.rowCount(), 25);
  EXPECT_EQ(model.index(1, LayerProfileModel::Kind).data().toString(), QStringLiteral("transformer"));
  model.setProfile({});
  EXPECT_EQ(model.rowCount(), 0);
}

TEST(GuiMerge, RanksByObjectiveCapsAndKeepsParetoFront) {
  SearchOptions o;
  o.objective = Objective::Cost;
  o.top = 2;
  SearchResult total;
  SearchResult a;
  a.candidates = {fakeEstimate(2, 8, 1, 10, 300, true, Schedule::OneFOneB, 2)};
  a.pareto = a.candidates;
  a.evaluated = 5;
  SearchResult b;
  b.candidates = {fakeEstimate(4, 8, 1, 5, 400, true, Schedule::OneFOneB, 4),
                  fakeEstimate(4, 8, 1, 4, 100, false, Schedule::OneFOneB, 4)};
  b.pareto = {b.candidates[0]};
  b.evaluated = 7;
  SearchResult c;  // 8 nodes: slower and dearer than 4 nodes, so dominated
  c.candidates = {fakeEstimate(8, 8, 1, 6, 500, true, Schedule::OneFOneB, 8)};
  c.pareto = c.candidates;
  mergeSearchResult(total, a, o);
  mergeSearchResult(total, b, o);
  mergeSearchResult(total, c, o);
  EXPECT_EQ(total.evaluated, 12);
  // Expectation: fitting layouts first, then by dollars: 300 (2 nodes), 400 (4 nodes); capped at 2.
  ASSERT_EQ(total.candidates.size(), 2u);
  EXPECT_EQ(total.candidates[0].nodes, 2);
  EXPECT_EQ(total.candidates[1].nodes, 4);
  // Expectation: (10 d, $300) and (5 d, $400) are both on the front; (6 d, $500) is dominated.
  ASSERT_EQ(total.pareto.size(), 2u);
  EXPECT_EQ(total.pareto[0].nodes, 2);
  EXPECT_EQ(total.pareto[1].nodes, 4);
}

SearchRequest smallRequest(std::vector<int> nodeCounts) {
  SearchRequest r;
  r.scenario = test::smallScenario();
  r.options.top = 20;
  r.nodeCounts = std::move(nodeCounts);
  return r;
}

TEST_F(GuiModels, SearchJobStreamsAndFinishes) {
  SearchJob job;
  QSignalSpy results(&job, &SearchJob::resultReady);
  QSignalSpy finished(&job, &SearchJob::searchFinished);
  const quint64 gen = job.start(smallRequest({1, 2, 4}));
  ASSERT_TRUE(finished.wait(60000));
  ASSERT_EQ(finished.count(), 1);
  EXPECT_EQ(finished.at(0).at(0).toULongLong(), gen);
  EXPECT_FALSE(finished.at(0).at(1).toBool());
  ASSERT_GE(results.count(), 1);
  const auto last = results.last();
  EXPECT_TRUE(last.at(2).toBool());  // the final result comes last
  const SearchResult r = last.at(1).value<SearchResult>();
  ASSERT_FALSE(r.candidates.empty());
  EXPECT_TRUE(r.candidates.front().fits);
  EXPECT_FALSE(r.cancelled);
  EXPECT_GT(r.evaluated, 0);
  // Every merged candidate is for one of the requested node counts.
  for (const Estimate& e : r.candidates) EXPECT_TRUE(e.nodes == 1 || e.nodes == 2 || e.nodes == 4);
}

TEST_F(GuiModels, CancelKeepsBestSoFarMarkedCancelled) {
  SearchJob job;
  QSignalSpy finished(&job, &SearchJob::searchFinished);
  QSignalSpy results(&job, &SearchJob::resultReady);
  std::vector<int> counts;
  for (int n = 1; n <= 64; ++n) counts.push_back(n);
  // Cancel as soon as the first node count's result (best so far) arrives.
  QObject::connect(&job, &SearchJob::resultReady, &job, [&job](quint64, const SearchResult&, bool done) {
    if (!done) job.cancel();
  });
  job.start(smallRequest(counts));
  ASSERT_TRUE(finished.wait(120000));
  EXPECT_TRUE(finished.at(0).at(1).toBool()) << "search ran to the end instead of stopping";
  const SearchResult r = results.last().at(1).value<SearchResult>();
  EXPECT_TRUE(r.cancelled);
  EXPECT_FALSE(r.candidates.empty());  // best so far is kept
}

TEST_F(GuiModels, SupersededJobResultsAreDropped) {
  SearchJob job;
  QSignalSpy results(&job, &SearchJob::resultReady);
  QSignalSpy finished(&job, &SearchJob::searchFinished);
  const quint64 first = job.start(smallRequest({1, 2, 3, 4}));
  const quint64 second = job.start(smallRequest({2}));
  EXPECT_GT(second, first);
  ASSERT_TRUE(finished.wait(60000));
  QTest::qWait(200);  // give a stale job's late signals the chance to show up
  for (const auto& args : results) EXPECT_EQ(args.at(0).toULongLong(), second);
  for (const auto& args : finished) EXPECT_EQ(args.at(0).toULongLong(), second);
  const SearchResult r = results.last().at(1).value<SearchResult>();
  for (const Estimate& e : r.candidates) EXPECT_EQ(e.nodes, 2);
}

TEST_F(GuiModels, AChartTitledBehindItsMessageGetsItsWholeTitleWhenShown) {
  // Expectation: a chart area that showed its message since it was made (its view never laid
  // out) and then gets a chart titled for it shows the whole title when there is room for it, and
  // elides it again when the area narrows.
  QWidget page;
  auto* layout = new QVBoxLayout(&page);
  auto* area = new ChartArea(&page, "titleChart");
  layout->addWidget(area);
  area->showMessage(QStringLiteral("No layout selected: nothing to chart."));
  page.resize(600, 300);
  page.show();
  ASSERT_TRUE(QTest::qWaitForWindowExposed(&page));
  const QString title = QStringLiteral("Memory per GPU: 37.1 of 40 GiB");
  auto* chart = new QChart;
  setChartTitle(chart, area->view(), title);
  area->setChart(chart);
  EXPECT_EQ(chartFullTitle(chart).toStdString(), title.toStdString());
  EXPECT_EQ(area->view()->chart()->title().toStdString(), title.toStdString());
  page.resize(90, 300);
  QTest::qWait(50);
  EXPECT_NE(area->view()->chart()->title(), title);
  page.resize(600, 300);
  QTest::qWait(50);
  EXPECT_EQ(area->view()->chart()->title().toStdString(), title.toStdString());
}

}  // namespace
}  // namespace capplan::gui
