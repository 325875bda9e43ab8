// Plans side by side: the deltas against the baseline are the differences of the plans' own
// estimates, term by term; a comparison file reads back as written; a bad one is diagnosed with
// file, line and key path, and gives no value.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <unistd.h>

#include "planner/compare.h"
#include "planner/spec_io.h"

using namespace capplan;

namespace {

std::string temp_dir() {
  const auto dir = std::filesystem::temp_directory_path() /
                   ("capplan-test-compare-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  return dir.string();
}

Plan default_plan() {
  Loaded<Plan> p = load_plan("default");
  EXPECT_TRUE(p.ok()) << p.diagnostics.to_string();
  return *p.value;
}

const FigureDelta& figure(const ComparedPlan& p, const std::string& key) {
  for (const FigureDelta& f : p.figures)
    if (f.key == key) return f;
  ADD_FAILURE() << "no figure " << key;
  static FigureDelta none;
  return none;
}

std::string bad_file(const std::string& name) {
  return std::string(CAPPLAN_SOURCE_DIR) + "/tests/data/bad/" + name;
}

}  // namespace

TEST(Compare, BaselineAgainstItselfHasNoDelta) {
  Comparison c;
  c.plans = {{"baseline", default_plan()}, {"same again", default_plan()}};
  const ComparisonResult r = compare_plans(c);
  ASSERT_EQ(r.plans.size(), 2u);
  ASSERT_EQ(r.plans[1].figures.size(), compared_figure_keys().size());
  // Expectation: the same plan costs the same, so every known delta is exactly 0.
  for (const FigureDelta& f : r.plans[1].figures) {
    EXPECT_DOUBLE_EQ(f.baseline, f.value) << f.key;
    if (std::isfinite(f.delta)) {
      EXPECT_EQ(f.delta, 0.0) << f.key;
    }
  }
}

TEST(Compare, DeltasAreTheDifferencesOfEachPlansEstimate) {
  const Plan base = default_plan();
  Plan other = base;  // another candidate: half the pipeline stages, twice the data parallelism
  other.layout.pp = base.layout.pp / 2;
  other.layout.dp = base.layout.dp * 2;
  ASSERT_GT(other.layout.pp, 0);
  Comparison c;
  c.plans = {{"baseline", base}, {"pp halved", other}};
  const ComparisonResult r = compare_plans(c);
  ASSERT_EQ(r.plans.size(), 2u);
  const Estimate a = estimate(base.scenario, base.layout);
  const Estimate b = estimate(other.scenario, other.layout);
  const ComparedPlan& p = r.plans[1];
  EXPECT_EQ(p.label, "pp halved");
  // Expectation: delta = other's figure - baseline's, term by term, from estimate() itself.
  EXPECT_DOUBLE_EQ(figure(p, "days").delta, b.days_to_train - a.days_to_train);
  EXPECT_DOUBLE_EQ(figure(p, "cost_usd").delta, b.cost_usd - a.cost_usd);
  EXPECT_DOUBLE_EQ(figure(p, "time.step_s").delta, b.step_time_s - a.step_time_s);
  EXPECT_DOUBLE_EQ(figure(p, "time.bubble_s").delta, b.breakdown_s.bubble - a.breakdown_s.bubble);
  EXPECT_DOUBLE_EQ(figure(p, "time.dp_comm_s").delta, b.breakdown_s.dp_comm - a.breakdown_s.dp_comm);
  const double gib = 1024.0 * 1024.0 * 1024.0;
  EXPECT_DOUBLE_EQ(figure(p, "memory.total_gib").delta,
                   (b.memory_per_gpu_bytes.total - a.memory_per_gpu_bytes.total) / gib);
  EXPECT_DOUBLE_EQ(figure(p, "memory.weights_gib").delta,
                   (b.memory_per_gpu_bytes.weights - a.memory_per_gpu_bytes.weights) / gib);
  // Twice the weights per GPU with half the stages: the delta is not 0 and has that sign.
  EXPECT_GT(figure(p, "memory.weights_gib").delta, 0.0);
  EXPECT_NEAR(figure(p, "days").relative, (b.days_to_train - a.days_to_train) / a.days_to_train, 1e-12);
  // Each plan's band (the model's error) is its own estimate's, beside the figure it bounds.
  EXPECT_DOUBLE_EQ(figure(p, "time.step_s_p10").value, b.step_time_s_p10);
  EXPECT_DOUBLE_EQ(figure(p, "time.step_s_p90").value, b.step_time_s_p90);
  EXPECT_DOUBLE_EQ(figure(p, "days_p10").delta, b.days_to_train_p10 - a.days_to_train_p10);
  EXPECT_DOUBLE_EQ(figure(p, "days_p90").value, b.days_to_train_p90);
  EXPECT_DOUBLE_EQ(figure(p, "cost_usd_p10").value, b.cost_usd_p10);
  EXPECT_DOUBLE_EQ(figure(p, "cost_usd_p90").delta, b.cost_usd_p90 - a.cost_usd_p90);
  for (const char* key : {"time.step_s", "days", "cost_usd"}) {
    const std::string k = key;
    EXPECT_LT(figure(p, k + "_p10").value, figure(p, k).value) << key;
    EXPECT_GT(figure(p, k + "_p90").value, figure(p, k).value) << key;
  }
  // The band follows its figure in the order.
  const std::vector<std::string>& keys = compared_figure_keys();
  const auto at = [&](const char* k) { return std::find(keys.begin(), keys.end(), k) - keys.begin(); };
  EXPECT_EQ(at("time.step_s_p10"), at("time.step_s") + 1);
  EXPECT_EQ(at("days_p90"), at("days") + 2);
  EXPECT_EQ(at("cost_usd_p90"), at("cost_usd") + 2);
}

TEST(Compare, AnotherClusterWithoutAPriceHasAnUnknownCostDelta) {
  const Plan base = default_plan();
  Plan other = base;
  Loaded<ClusterSpec> dgx = load_cluster("dgx-a100-80gb");
  ASSERT_TRUE(dgx.ok());
  other.scenario.cluster = *dgx.value;
  other.cluster_ref = "dgx-a100-80gb";
  Comparison c;
  c.plans = {{"p4d", base}, {"DGX A100", other}};
  const ComparisonResult r = compare_plans(c);
  // Expectation: the DGX has no price, so its cost is unknown and so is the delta (never 0).
  EXPECT_TRUE(std::isnan(figure(r.plans[1], "cost_usd").delta));
  EXPECT_TRUE(std::isfinite(figure(r.plans[1], "days").delta));
}

TEST(Compare, FileReadsBackAsWrittenAndIsWrittenAtomically) {
  const std::string dir = temp_dir();
  const std::string path = dir + "/two.comparison.yaml";
  Plan other = default_plan();
  other.scenario.model = *load_model("llama2-70b").value;
  other.model_ref = "llama2-70b";
  Comparison c;
  c.plans = {{"GPT-3 175B", default_plan()}, {"Llama 2 70B: \"same cluster\"", other}};
  ASSERT_EQ(save_comparison(c, path), "");
  for (const auto& f : std::filesystem::directory_iterator(dir))
    EXPECT_EQ(f.path().filename().string().find(".tmp"), std::string::npos) << f.path();
  Loaded<Comparison> back = load_comparison(path);
  ASSERT_TRUE(back.ok()) << back.diagnostics.to_string();
  ASSERT_EQ(back.value->plans.size(), 2u);
  EXPECT_EQ(back.value->plans[1].label, c.plans[1].label);
  EXPECT_EQ(back.value->plans[1].plan.scenario.model.name, other.scenario.model.name);
  const ComparisonResult before = compare_plans(c), after = compare_plans(*back.value);
  for (size_t i = 0; i < before.plans[1].figures.size(); ++i) {
    const FigureDelta &x = before.plans[1].figures[i], &y = after.plans[1].figures[i];
    if (std::isnan(x.value)) EXPECT_TRUE(std::isnan(y.value)) << x.key;
    else EXPECT_NEAR(y.value, x.value, 1e-9 * std::max(1.0, std::abs(x.value))) << x.key;
  }
  std::filesystem::remove_all(dir);
}

TEST(Compare, BadFilesNameFileLineAndField) {
  struct Case {
    const char* file;
    const char* path;  // the key path the error names
    int line;
  };
  const Case cases[] = {
      {"comparison_bad_layout.yaml", "plans[1].plan.layout.tp", 17},
      {"comparison_no_label.yaml", "plans[0].label", 4},
      {"comparison_empty_plans.yaml", "plans", 3},
      {"comparison_unknown_key.yaml", "plans[0].plna", 5},
      {"comparison_malformed.yaml", "", 0},
  };
  for (const Case& k : cases) {
    const std::string path = bad_file(k.file);
    Loaded<Comparison> c = load_comparison(path);
    EXPECT_FALSE(c.value.has_value()) << k.file;
    ASSERT_TRUE(c.diagnostics.has_errors()) << k.file;
    bool named = false;
    for (const Diagnostic& d : c.diagnostics.items()) {
      EXPECT_EQ(d.file, path);
      EXPECT_GT(d.line, 0) << d.to_string();
      if (d.path == k.path && (k.line == 0 || d.line == k.line)) named = true;
    }
    EXPECT_TRUE(named) << k.file << ": expected an error at " << k.path << ", got\n"
                       << c.diagnostics.to_string();
  }
}

TEST(Compare, MissingFileIsAnErrorNotACrash) {
  Loaded<Comparison> c = load_comparison("/nonexistent/dir/x.comparison.yaml");
  EXPECT_FALSE(c.value.has_value());
  EXPECT_TRUE(c.diagnostics.has_errors());
}
