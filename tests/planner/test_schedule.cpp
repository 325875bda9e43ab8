// Pipeline schedule tables (schedule.h): every action once, backward after forward, the warm-up
// counts of Narayanan et al. 2021 / Megatron-LM, no deadlock when stages exchange activations,
// and the closed-form in-flight counts agree with the tables.
#include <gtest/gtest.h>

#include <map>
#include <set>
#include <tuple>

#include "planner/schedule.h"

namespace capplan {
namespace {

using Table = std::vector<std::vector<PipelineAction>>;

// Runs the table with unit-less ordering only: a stage may run its next action when the
// forward of the previous global chunk (or the backward of the next one) has run. Returns true
// when every action ran, i.e. the schedule cannot deadlock.
bool runs_to_completion(const Table& t, int pp, int vp, int m) {
  std::set<std::tuple<int, int, int>> done;  // (pass, microbatch, global chunk)
  std::vector<size_t> pos(t.size(), 0);
  const int last = pp * vp - 1;
  bool progress = true;
  while (progress) {
    progress = false;
    for (int s = 0; s < pp; ++s) {
      while (pos[s] < t[s].size()) {
        const auto& a = t[s][pos[s]];
        const int g = a.chunk * pp + s;
        bool ready;
        if (a.pass == Pass::Forward) {
          ready = g == 0 || done.count({0, a.microbatch, g - 1});
        } else {
          ready = done.count({0, a.microbatch, g}) &&
                  (g == last || done.count({1, a.microbatch, g + 1}));
        }
        if (!ready) break;
        done.insert({a.pass == Pass::Forward ? 0 : 1, a.microbatch, g});
        ++pos[s];
        progress = true;
      }
    }
  }
  return done.size() == size_t(2) * m * pp * vp;
}

void expect_complete_and_ordered(const Table& t, int pp, int vp, int m) {
  ASSERT_EQ(t.size(), size_t(pp));
  for (int s = 0; s < pp; ++s) {
    std::map<std::pair<int, int>, int> fwd_at, bwd_at;
    for (int i = 0; i < int(t[s].size()); ++i) {
      const auto& a = t[s][i];
      ASSERT_GE(a.microbatch, 0);
      ASSERT_LT(a.microbatch, m);
      ASSERT_GE(a.chunk, 0);
      ASSERT_LT(a.chunk, vp);
      auto& where = a.pass == Pass::Forward ? fwd_at : bwd_at;
      EXPECT_TRUE(where.emplace(std::make_pair(a.microbatch, a.chunk), i).second)
          << "duplicate action on stage " << s;
    }
    EXPECT_EQ(fwd_at.size(), size_t(m) * vp);
    EXPECT_EQ(bwd_at.size(), size_t(m) * vp);
    for (const auto& [key, i] : bwd_at) EXPECT_LT(fwd_at[key], i) << "backward before forward";
  }
  EXPECT_TRUE(runs_to_completion(t, pp, vp, m));
}

// Peak of (forwards run - backwards run) on a stage, straight from the table.
int table_peak(const std::vector<PipelineAction>& actions) {
  int live = 0, peak = 0;
  for (const auto& a : actions) {
    live += a.pass == Pass::Forward ? 1 : -1;
    peak = std::max(peak, live);
  }
  return peak;
}

TEST(Schedule, EveryActionOnceBackwardAfterForwardNoDeadlock) {
  for (int pp : {1, 2, 3, 4, 8}) {
    for (int m : {1, 2, 3, 5, 8, 13, 16}) {
      SCOPED_TRACE("pp=" + std::to_string(pp) + " m=" + std::to_string(m));
      expect_complete_and_ordered(build_schedule(Schedule::GPipe, pp, 1, m), pp, 1, m);
      expect_complete_and_ordered(build_schedule(Schedule::OneFOneB, pp, 1, m), pp, 1, m);
      for (int vp : {1, 2, 3, 4}) {
        if (m % pp != 0) continue;
        SCOPED_TRACE("vp=" + std::to_string(vp));
        expect_complete_and_ordered(build_schedule(Schedule::Interleaved, pp, vp, m), pp, vp, m);
      }
    }
  }
}

TEST(Schedule, OneFOneBWarmupMatchesNarayanan2021) {
  // Expectation: stage s runs pp - s - 1 forwards before its first backward (fewer when m is
  // small), so the first stage holds pp micro-batches at its peak and the last holds one.
  const int pp = 4, m = 8;
  const auto t = build_schedule(Schedule::OneFOneB, pp, 1, m);
  for (int s = 0; s < pp; ++s) {
    int leading_forwards = 0;
    while (t[s][leading_forwards + 1].pass == Pass::Forward) ++leading_forwards;
    EXPECT_EQ(leading_forwards, pp - s - 1) << "stage " << s;
  }
  EXPECT_EQ(peak_inflight_microbatches(Schedule::OneFOneB, pp, 1, m, 0), 4);
  EXPECT_EQ(peak_inflight_microbatches(Schedule::OneFOneB, pp, 1, m, 3), 1);
  EXPECT_EQ(peak_inflight_microbatches(Schedule::OneFOneB, pp, 1, 2, 0), 2);  // m < pp
  EXPECT_EQ(peak_inflight_microbatches(Schedule::GPipe, pp, 1, m, 0), m);
}

TEST(Schedule, TwoStageOneFOneBTableByHand) {
  // Expectation (pp=2, m=3): stage 0 = F0 F1 B0 F2 B1 B2; stage 1 = F0 B0 F1 B1 F2 B2.
  const auto t = build_schedule(Schedule::OneFOneB, 2, 1, 3);
  auto text = [](const std::vector<PipelineAction>& v) {
    std::string s;
    for (const auto& a : v) {
      s += a.pass == Pass::Forward ? 'F' : 'B';
      s += std::to_string(a.microbatch);
      s += ' ';
    }
    return s;
  };
  EXPECT_EQ(text(t[0]), "F0 F1 B0 F2 B1 B2 ");
  EXPECT_EQ(text(t[1]), "F0 B0 F1 B1 F2 B2 ");
}

TEST(Schedule, InterleavedOrderAndWarmupAsMegatron) {
  // Expectation (pp=2, vp=2, m=4): forwards visit chunk 0 for micro-batches 0,1, then chunk 1
  // for 0,1, then chunk 0 for 2,3 ...; stage 0 warms up with (2-0-1)*2 + (2-1)*2 = 4 forwards.
  const auto t = build_schedule(Schedule::Interleaved, 2, 2, 4);
  ASSERT_EQ(t.size(), 2u);
  const std::vector<std::pair<int, int>> first5 = {{0, 0}, {1, 0}, {0, 1}, {1, 1}, {2, 0}};
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(t[0][i].pass, Pass::Forward);
    EXPECT_EQ(t[0][i].microbatch, first5[i].first);
    EXPECT_EQ(t[0][i].chunk, first5[i].second);
  }
  // The first backward runs the last chunk of micro-batch 0.
  EXPECT_EQ(t[0][5].pass, Pass::Backward);
  EXPECT_EQ(t[0][5].microbatch, 0);
  EXPECT_EQ(t[0][5].chunk, 1);
}

TEST(Schedule, PeakInflightClosedFormMatchesTables) {
  for (int pp : {1, 2, 4, 8}) {
    for (int m : {1, 3, 4, 8, 16, 24}) {
      for (int s = 0; s < pp; ++s) {
        const auto g = build_schedule(Schedule::GPipe, pp, 1, m);
        EXPECT_EQ(peak_inflight_microbatches(Schedule::GPipe, pp, 1, m, s), table_peak(g[s]));
        const auto f = build_schedule(Schedule::OneFOneB, pp, 1, m);
        EXPECT_EQ(peak_inflight_microbatches(Schedule::OneFOneB, pp, 1, m, s), table_peak(f[s]));
        for (int vp : {2, 3}) {
          if (m % pp != 0) continue;
          const auto t = build_schedule(Schedule::Interleaved, pp, vp, m);
          EXPECT_EQ(peak_inflight_microbatches(Schedule::Interleaved, pp, vp, m, s), table_peak(t[s]))
              << "pp=" << pp << " vp=" << vp << " m=" << m << " s=" << s;
        }
      }
    }
  }
  // Expectation: Korthikanti 2022 Sec 4.2.3, stage 0 holds pp + (pp-1)/vp micro-batches' worth,
  // i.e. vp*pp + pp - 1 = 11 chunk pairs for pp=4, vp=2, m=8.
  EXPECT_EQ(peak_inflight_microbatches(Schedule::Interleaved, 4, 2, 8, 0), 11);
}

TEST(Schedule, InvalidInputsGiveEmptyTables) {
  EXPECT_TRUE(build_schedule(Schedule::Interleaved, 4, 2, 6).empty());  // m % pp != 0
  EXPECT_TRUE(build_schedule(Schedule::OneFOneB, 4, 2, 8).empty());     // vp without interleaving
  EXPECT_TRUE(build_schedule(Schedule::GPipe, 4, 1, 0).empty());
  EXPECT_TRUE(build_schedule(Schedule::GPipe, 0, 1, 4).empty());
  EXPECT_EQ(peak_inflight_microbatches(Schedule::OneFOneB, 4, 1, 8, 4), 0);
}

}  // namespace
}  // namespace capplan
