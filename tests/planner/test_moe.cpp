// Mixture-of-experts and context parallelism in the planner: the model spec's moe section (YAML in
// and out, its rules), the layout's ep and cp (plan files, check_layout), and where the expert and
// context groups sit among the ranks.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "model_fixtures.h"
#include "planner/plan_io.h"
#include "planner/rank_mapping.h"
#include "planner/spec_io.h"

using namespace capplan;

namespace {

ModelSpec tiny_moe(int experts = 8, int top_k = 2) {
  ModelSpec m = test::tiny_model(4);
  m.moe.experts = experts;
  m.moe.top_k = top_k;
  m.moe.expert_ffn_hidden = 128;
  return m;
}

Layout layout(int dp, int tp, int pp, int cp, int ep, const std::string& order = "DPT") {
  Layout l;
  l.dp = dp, l.tp = tp, l.pp = pp, l.cp = cp, l.ep = ep, l.order = order;
  return l;
}

}  // namespace

TEST(MoeSpec, YamlRoundTripKeepsEveryField) {
  const std::string text =
      "name: tiny-moe\nlayers: 6\nhidden: 64\nheads: 4\nvocab: 1000\nseq_len: 32\n"
      "moe:\n  experts: 8\n  top_k: 2\n  expert_ffn_hidden: 96\n  shared_experts: 1\n"
      "  capacity_factor: 1.25\n  moe_layer_freq: 2\n  first_dense_layers: 1\n";
  const auto m = parse_model_yaml(text, "moe.yaml");
  ASSERT_TRUE(m.ok()) << m.diagnostics.to_string();
  const MoeSpec& e = m.value->moe;
  EXPECT_EQ(e.experts, 8);
  EXPECT_EQ(e.top_k, 2);
  EXPECT_EQ(e.expert_ffn_hidden, 96);
  EXPECT_EQ(e.shared_experts, 1);
  EXPECT_DOUBLE_EQ(e.capacity_factor, 1.25);
  EXPECT_EQ(e.moe_layer_freq, 2);
  EXPECT_EQ(e.first_dense_layers, 1);
  // Expectation: layers 1, 3, 5 (after the one dense layer, every second) have experts.
  EXPECT_EQ(e.moe_layers(6), 3);
  EXPECT_FALSE(e.is_moe_layer(0));
  EXPECT_TRUE(e.is_moe_layer(1));
  EXPECT_FALSE(e.is_moe_layer(2));
  EXPECT_TRUE(e.is_moe_layer(5));

  const auto back = parse_model_yaml(model_to_yaml(*m.value), "again.yaml");
  ASSERT_TRUE(back.ok()) << back.diagnostics.to_string() << model_to_yaml(*m.value);
  const MoeSpec& f = back.value->moe;
  EXPECT_EQ(f.experts, e.experts);
  EXPECT_EQ(f.top_k, e.top_k);
  EXPECT_EQ(f.expert_ffn_hidden, e.expert_ffn_hidden);
  EXPECT_EQ(f.shared_experts, e.shared_experts);
  EXPECT_DOUBLE_EQ(f.capacity_factor, e.capacity_factor);
  EXPECT_EQ(f.moe_layer_freq, e.moe_layer_freq);
  EXPECT_EQ(f.first_dense_layers, e.first_dense_layers);
}

TEST(MoeSpec, DenseModelWritesNoMoeSection) {
  EXPECT_EQ(model_to_yaml(test::tiny_model()).find("moe"), std::string::npos);
}

TEST(MoeSpec, EveryBrokenRuleIsNamedAtItsKey) {
  const std::string text =
      "name: broken\nlayers: 4\nhidden: 64\nheads: 4\nvocab: 1000\nseq_len: 32\n"
      "moe:\n  experts: 4\n  top_k: 5\n  moe_layer_freq: 0\n  first_dense_layers: 4\n";
  const auto m = parse_model_yaml(text, "broken.yaml");
  EXPECT_FALSE(m.ok());
  std::set<std::string> paths;
  for (const auto& d : m.diagnostics.items()) paths.insert(d.path);
  // moe_layer_freq 0 is refused by its range; top_k and first_dense_layers by the rules, which
  // run only on a spec whose values all parsed, so the range error comes alone.
  EXPECT_TRUE(paths.count("model.moe.moe_layer_freq")) << m.diagnostics.to_string();

  const std::string rules =
      "name: broken\nlayers: 4\nhidden: 64\nheads: 4\nvocab: 1000\nseq_len: 32\n"
      "moe:\n  experts: 4\n  top_k: 5\n  first_dense_layers: 4\n";
  const auto r = parse_model_yaml(rules, "rules.yaml");
  EXPECT_FALSE(r.ok());
  paths.clear();
  for (const auto& d : r.diagnostics.items()) {
    paths.insert(d.path);
    if (d.path == "model.moe.top_k") EXPECT_EQ(d.line, 9) << d.to_string();
    if (d.path == "model.moe.first_dense_layers") EXPECT_EQ(d.line, 10) << d.to_string();
  }
  EXPECT_TRUE(paths.count("model.moe.top_k")) << r.diagnostics.to_string();
  EXPECT_TRUE(paths.count("model.moe.first_dense_layers")) << r.diagnostics.to_string();
}

TEST(MoeLayout, PlanFileRoundTripsEpAndCp) {
  Plan p;
  p.scenario = test::scenario(tiny_moe(), 16, 32);
  p.layout = layout(4, 2, 1, 2, 4, "PDECT");
  const std::string yaml = plan_to_yaml(p);
  const auto back = parse_plan_yaml(yaml, "plan.yaml");
  ASSERT_TRUE(back.ok()) << back.diagnostics.to_string() << yaml;
  EXPECT_EQ(back.value->layout.ep, 4);
  EXPECT_EQ(back.value->layout.cp, 2);
  EXPECT_EQ(back.value->layout.order, "PDECT");
  EXPECT_EQ(back.value->scenario.model.moe.experts, 8);
  EXPECT_EQ(back.value->scenario.model.moe.expert_ffn_hidden, 128);
}

TEST(MoeLayout, CheckLayoutNamesEpAndCp) {
  const Scenario sc = test::scenario(tiny_moe(8, 2), 16, 32);
  // Expectation: 4 * 2 * 1 * 2 = 16 GPUs, ep 4 divides 8 experts and dp*cp = 8: valid.
  EXPECT_EQ(check_layout(sc, layout(4, 2, 1, 2, 4)), std::nullopt);
  // ep 3 does not divide the 8 experts.
  const Scenario sc12 = test::scenario(tiny_moe(8, 2), 12, 12);
  auto why = check_layout(sc12, layout(12, 1, 1, 1, 3));
  ASSERT_TRUE(why);
  EXPECT_NE(why->find("ep = 3 must divide experts = 8"), std::string::npos) << *why;
  // ep 16 divides the 16 experts but not dp*cp = 8.
  const Scenario sc16 = test::scenario(tiny_moe(16, 2), 16, 32);
  why = check_layout(sc16, layout(4, 2, 1, 2, 16));
  ASSERT_TRUE(why);
  EXPECT_NE(why->find("must divide dp*cp = 8"), std::string::npos) << *why;
  // ep > 1 on a dense model.
  why = check_layout(test::scenario(test::tiny_model(4), 8, 8), layout(8, 1, 1, 1, 2));
  ASSERT_TRUE(why);
  EXPECT_NE(why->find("needs an MoE model"), std::string::npos) << *why;
  // cp 3: 2*cp = 6 does not divide the 32 tokens.
  why = check_layout(test::scenario(test::tiny_model(4), 6, 2), layout(2, 1, 1, 3, 1));
  ASSERT_TRUE(why);
  EXPECT_NE(why->find("2*cp = 6 must divide the sequence length 32"), std::string::npos) << *why;
  // The GPU count includes cp.
  why = check_layout(test::scenario(test::tiny_model(4), 8, 8), layout(8, 1, 1, 2, 1));
  ASSERT_TRUE(why);
  EXPECT_NE(why->find("dp*tp*pp*cp = 16 must equal the GPU count 8"), std::string::npos) << *why;
  // tp must divide the experts' width as it does the dense MLP's.
  ModelSpec odd = tiny_moe(8, 2);
  odd.moe.expert_ffn_hidden = 66;
  why = check_layout(test::scenario(odd, 8, 8), layout(2, 4, 1, 1, 2));
  ASSERT_TRUE(why);
  EXPECT_NE(why->find("must divide moe.expert_ffn_hidden = 66"), std::string::npos) << *why;
}

TEST(MoeLayout, OrderTakesTheNewLetters) {
  EXPECT_EQ(parse_order("pdect"), std::optional<std::string>("PDECT"));
  EXPECT_EQ(parse_order("DPCT"), std::optional<std::string>("DPCT"));
  EXPECT_EQ(parse_order("DPTE"), std::optional<std::string>("DPTE"));
  EXPECT_EQ(parse_order("DPTT"), std::nullopt);  // T twice
  EXPECT_EQ(parse_order("DCET"), std::nullopt);  // no P
  EXPECT_EQ(parse_order("DPTX"), std::nullopt);
  EXPECT_EQ(full_order("DPT"), "DEPCT");
  EXPECT_EQ(full_order("PDT"), "PDECT");  // Megatron-Core's tp-cp-ep-dp-pp, right-most fastest
  EXPECT_EQ(full_order("TCPED"), "TCPED");
}

TEST(MoeLayout, DenseRanksAreThoseOfTheThreeLetterOrder) {
  // Expectation: with cp = ep = 1 the inserted letters have one position, so "DPT" numbers
  // ranks as before: rank = (d * pp + p) * tp + t.
  const Layout l = layout(2, 2, 2, 1, 1, "DPT");
  for (int d = 0; d < 2; ++d)
    for (int p = 0; p < 2; ++p)
      for (int t = 0; t < 2; ++t) EXPECT_EQ(coords_to_rank({d, p, t}, l), (d * 2 + p) * 2 + t);
}

TEST(MoeLayout, GroupsPartitionTheRanks) {
  // 32 ranks: dp 4, tp 2, pp 1, cp 4, ep 8 -> e_d = gcd(8, 4) = 4, e_c = 2: the expert group
  // takes all 4 data-parallel positions and 2 of the 4 context positions.
  const Layout l = layout(4, 2, 1, 4, 8, "PDECT");
  const int n = 32;
  for (RankGroup g : {RankGroup::Dp, RankGroup::Tp, RankGroup::Pp, RankGroup::Cp, RankGroup::Ep,
                      RankGroup::DpCp, RankGroup::ExpertDp}) {
    std::set<std::vector<int>> groups;
    std::vector<int> seen(n, 0);
    for (int r = 0; r < n; ++r) {
      const std::vector<int> members = group_ranks(r, l, g);
      EXPECT_NE(std::find(members.begin(), members.end(), r), members.end());
      std::vector<int> sorted = members;
      std::sort(sorted.begin(), sorted.end());
      if (groups.insert(sorted).second)
        for (int m : sorted) ++seen[size_t(m)];
    }
    for (int r = 0; r < n; ++r) EXPECT_EQ(seen[size_t(r)], 1) << "group " << int(g) << " rank " << r;
  }
  EXPECT_EQ(group_ranks(0, l, RankGroup::Ep).size(), 8u);
  EXPECT_EQ(group_ranks(0, l, RankGroup::ExpertDp).size(), 2u);  // dp*cp/ep = 16/8
  EXPECT_EQ(group_ranks(0, l, RankGroup::DpCp).size(), 16u);
  EXPECT_EQ(group_ranks(0, l, RankGroup::Cp).size(), 4u);
  // Expectation with "PDECT" (T fastest, then C, E, D): letter sizes T 2, C 4/2 = 2, E 8, so the
  // expert positions are tp * 2 = 4 ranks apart and rank 0's expert group is 0, 4, ..., 28.
  const std::vector<int> ep0 = group_ranks(0, l, RankGroup::Ep);
  EXPECT_EQ(ep0, (std::vector<int>{0, 4, 8, 12, 16, 20, 24, 28}));
  for (int r = 0; r < n; ++r) EXPECT_EQ(coords_to_rank(rank_to_coords(r, l), l), r);
}
