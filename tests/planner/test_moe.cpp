// Mixture-of-experts and context parallelism in the planner: the model spec's moe section (YAML in
// and out, its rules), the layout's ep and cp (plan files, check_layout), and where the expert and
// context groups sit among the ranks.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "model_fixtures.h"
#include "planner/plan_io.h"
#include "planner/profile.h"
#include "planner/rank_mapping.h"
#include "planner/spec_io.h"
#include "planner/validate.h"

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
    if (d.path == "model.moe.top_k") {
      EXPECT_EQ(d.line, 9) << d.to_string();
    }
    if (d.path == "model.moe.first_dense_layers") {
      EXPECT_EQ(d.line, 10) << d.to_string();
    }
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

namespace {
std::string data(const std::string& rel) { return std::string(CAPPLAN_SOURCE_DIR) + "/tests/data/" + rel; }
}  // namespace

TEST(MoeHfConfig, MixtralQwenAndDeepSeekKeys) {
  const auto mix = load_model(data("good/hf-moe/mixtral-8x7b-config.json"));
  ASSERT_TRUE(mix.ok()) << mix.diagnostics.to_string();
  EXPECT_EQ(mix.value->moe.experts, 8);
  EXPECT_EQ(mix.value->moe.top_k, 2);
  EXPECT_EQ(mix.value->expert_ffn_hidden_or_default(), 14336);

  const auto qwen = load_model(data("good/hf-moe/qwen1.5-moe-a2.7b-config.json"));
  ASSERT_TRUE(qwen.ok()) << qwen.diagnostics.to_string();
  EXPECT_EQ(qwen.value->moe.experts, 60);
  EXPECT_EQ(qwen.value->moe.top_k, 4);
  EXPECT_EQ(qwen.value->moe.expert_ffn_hidden, 1408);
  // Expectation: one shared expert 5632 wide = 5632 / 1408 = 4 experts of 1408.
  EXPECT_EQ(qwen.value->moe.shared_experts, 4);

  const auto ds = load_model(data("good/hf-moe/deepseek-v3-config.json"));
  ASSERT_TRUE(ds.ok()) << ds.diagnostics.to_string();
  EXPECT_EQ(ds.value->moe.experts, 256);
  EXPECT_EQ(ds.value->moe.top_k, 8);
  EXPECT_EQ(ds.value->moe.shared_experts, 1);
  EXPECT_EQ(ds.value->moe.first_dense_layers, 3);
  EXPECT_EQ(ds.value->moe.moe_layers(61), 58);
  EXPECT_EQ(ds.value->ffn_hidden, 18432);
}

TEST(MoeHfConfig, NewerFamiliesLoadAsTheirCardsCountThem) {
  // gpt-oss-20b (its model card: 20.91 B): 32 experts of 2880, top 4, heads of 64, a 128-token
  // window on every other layer, pre-trained at 4096 (rope_scaling's original length).
  const auto oss = load_model(data("good/hf-moe/gpt-oss-20b-config.json"));
  ASSERT_TRUE(oss.ok()) << oss.diagnostics.to_string();
  EXPECT_EQ(oss.value->moe.experts, 32);
  EXPECT_EQ(oss.value->moe.top_k, 4);
  EXPECT_EQ(oss.value->moe.expert_ffn_hidden, 2880);
  EXPECT_EQ(oss.value->head_dim, 64);
  EXPECT_EQ(oss.value->sliding_window, 128);
  EXPECT_EQ(oss.value->global_every, 2);
  EXPECT_EQ(oss.value->seq_len, 4096);
  // GLM-4.5-Air (its card: 106 B total, 12 B active): 128 experts of 1408 and a shared one, top 8,
  // the first layer dense, 96 heads of 128 over 4096.
  const auto glm = load_model(data("good/hf-moe/glm-4.5-air-config.json"));
  ASSERT_TRUE(glm.ok()) << glm.diagnostics.to_string();
  EXPECT_EQ(glm.value->moe.shared_experts, 1);
  EXPECT_EQ(glm.value->moe.first_dense_layers, 1);
  EXPECT_EQ(glm.value->attention_width(), 96 * 128);
  // Kimi K2 (its card: 1 T total, 32 B active): DeepSeek-V3's architecture with 384 experts, 64
  // heads of latent attention, one dense layer.
  const auto k2 = load_model(data("good/hf-moe/kimi-k2-config.json"));
  ASSERT_TRUE(k2.ok()) << k2.diagnostics.to_string();
  EXPECT_TRUE(k2.value->mla.enabled());
  EXPECT_EQ(k2.value->moe.experts, 384);
  EXPECT_EQ(k2.value->moe.first_dense_layers, 1);
  struct Case {
    const ModelSpec& m;
    double total, tol;  // the card's total, rounded as the card rounds it
  };
  for (const Case& c : {Case{*oss.value, 20.91e9, 0.001}, Case{*glm.value, 106e9, 0.01}, Case{*k2.value, 1e12, 0.03}}) {
    const double total = profile_model(c.m, 1, 4096, 1).total_params;
    std::printf("Expectation %s: total %.4g; Actual result: %.4g\n", c.m.name.c_str(), c.total, total);
    EXPECT_NEAR(total / c.total, 1.0, c.tol) << c.m.name;
  }
}

TEST(MoeHfConfig, Llama4InterleavesItsExpertsAsItsConfigPlacesThem) {
  // Llama 4 Maverick (its card: 400 B total, 17 B active): under text_config, 128 experts of 8192
  // and one shared, top 1, on every other layer from layer 1 (HF's moe_layers for
  // interleave_moe_layer_step 2), the dense layers' MLP 16384 wide. Its chunked attention: chunks
  // of 8192 tokens on the layers with rotary positions, every 4th layer global (the default
  // no_rope_layer_interval), so over its default sequence of 1048576 tokens layer 0 is local and
  // layer 3 not, and at 8192 tokens none is.
  const auto m = load_model(data("good/hf-moe/llama4-maverick-config.json"));
  ASSERT_TRUE(m.ok()) << m.diagnostics.to_string();
  const MoeSpec& e = m.value->moe;
  EXPECT_EQ(e.experts, 128);
  EXPECT_EQ(e.top_k, 1);
  EXPECT_EQ(e.shared_experts, 1);
  EXPECT_EQ(e.expert_ffn_hidden, 8192);
  EXPECT_EQ(m.value->ffn_hidden, 16384);
  EXPECT_FALSE(e.is_moe_layer(0));
  EXPECT_TRUE(e.is_moe_layer(1));
  EXPECT_TRUE(e.is_moe_layer(47));
  EXPECT_EQ(e.moe_layers(48), 24);
  EXPECT_EQ(m.value->attention_chunk, 8192);
  EXPECT_EQ(m.value->global_every, 4);
  EXPECT_TRUE(m.value->is_local_layer(0, 1048576));
  EXPECT_FALSE(m.value->is_local_layer(3, 1048576));
  EXPECT_FALSE(m.value->is_local_layer(0, 8192));
  EXPECT_EQ(model_to_yaml(*m.value).find("attention_chunk: 8192\nglobal_every: 4\n") != std::string::npos, true)
      << model_to_yaml(*m.value);
  const ModelProfile p = profile_model(*m.value, 1, 8192, 1);
  std::printf("Expectation: 400 B total, 17 B active; Actual result: %.2f B, %.2f B\n", p.total_params / 1e9,
              p.active_params / 1e9);
  EXPECT_NEAR(p.total_params / 400e9, 1.0, 0.005);
  EXPECT_NEAR(p.active_params / 17e9, 1.0, 0.015);
}

TEST(MoeHfConfig, UnknownMoeTypeIsNamedAndRefused) {
  const std::string path = data("bad/hf_config_unknown_moe.json");
  const auto m = load_model(path);
  EXPECT_FALSE(m.ok());
  ASSERT_FALSE(m.diagnostics.items().empty());
  const Diagnostic& d = m.diagnostics.items().front();
  EXPECT_EQ(d.file, path);
  EXPECT_EQ(d.path, "model_type");
  EXPECT_EQ(d.line, 7) << d.to_string();
  EXPECT_NE(d.message.find("model_type 'dbrx' is not known"), std::string::npos) << d.to_string();
}

TEST(MoeProfile, PresetsMatchThePublishedTotalAndActiveCounts) {
  struct Case {
    const char* name;
    double total, active;  // published, parameters
    double tol_total, tol_active;  // relative
  };
  // Mixtral paper: 46.7B / 12.9B; Mistral AI: 141B / 39B; DeepSeek-V3 report: 671B / 37B (the
  // active count here takes the input embedding too, 0.93B).
  for (const Case& c : {Case{"mixtral-8x7b", 46.7e9, 12.9e9, 0.01, 0.01},
                        Case{"mixtral-8x22b", 141e9, 39e9, 0.01, 0.01},
                        Case{"deepseek-v3-671b", 671e9, 37e9, 0.001, 0.02},
                        // gpt-oss model card: 116.8B / 5.1B (active without the input embedding's
                        // 0.58B, which the count here takes); Kimi K2 report: 1T / 32B, rounded.
                        Case{"gpt-oss-120b", 116.8e9, 5.13e9 + 201088.0 * 2880, 0.001, 0.01},
                        Case{"kimi-k2-1t", 1e12, 32e9, 0.03, 0.03}}) {
    const auto m = load_model(c.name);
    ASSERT_TRUE(m.ok()) << c.name << m.diagnostics.to_string();
    const ModelProfile p = profile_model(*m.value, 1, m.value->seq_len, 1);
    std::printf("Expectation %s: total %.1fB active %.1fB; Actual result: total %.2fB active %.2fB\n",
                c.name, c.total / 1e9, c.active / 1e9, p.total_params / 1e9, p.active_params / 1e9);
    EXPECT_NEAR(p.total_params / c.total, 1.0, c.tol_total) << c.name;
    EXPECT_NEAR(p.active_params / c.active, 1.0, c.tol_active) << c.name;
  }
}

TEST(MoeProfile, ActiveFlopsCountedByHand) {
  // 4 layers, h 64, 4 heads, GeLU f = 256 dense, 8 experts of 128, top 2, seq 32, tied, learned.
  // Expectation per MoE block forward per token: 2 * (attention 4h^2 + router h*8 + 2 experts *
  // 2 h * 128) + 4 s h = 2 * (16384 + 512 + 32768) + 8192 = 107520; 4 blocks + LM head 2 h V
  // (128000) -> forward 558080 per token, x3 = 1674240.
  const ModelSpec m = tiny_moe(8, 2);
  const ModelProfile p = profile_model(m, 1, 32, 1);
  EXPECT_DOUBLE_EQ(p.forward_flops_per_token, 4 * 107520.0 + 128000.0);
  EXPECT_DOUBLE_EQ(p.flops_per_token, 3 * (4 * 107520.0 + 128000.0));
  // Expectation: total - active = 4 layers x 6 idle experts x 2 * 64 * 128 = 393216.
  EXPECT_DOUBLE_EQ(p.total_params - p.active_params, 393216.0);
}

namespace {

// One node of 8 GPUs (or `gpn` per node) with exact link figures: efficiencies 1, latencies set.
Scenario golden_scenario(const ModelSpec& m, int gpus, int gpn, int64_t gbs) {
  Scenario sc = test::scenario(m, gpus, gbs);
  sc.cluster.gpus_per_node = gpn;
  sc.nodes = (gpus + gpn - 1) / gpn;
  sc.cluster.efficiency.intra_node = 1.0;
  sc.cluster.efficiency.inter_node = 1.0;
  sc.cluster.intra_node_latency_us = 5;
  sc.cluster.inter_node_latency_us = 10;
  return sc;
}

}  // namespace

TEST(MoeCostGolden, AllToAllVolumeAndTimeInsideANode) {
  // Expectation: mbs 2 x seq 32 = 64 tokens, top_k 2, h 64, bf16: each rank sends
  // 64 * 2 * 64 * 2 = 16384 bytes per all-to-all; 7/8 of it to the 7 peers over NVLink at
  // 300 GB/s: 14336 / 300e9 s + 5 us.
  ModelSpec m = tiny_moe(8, 2);
  m.moe.expert_ffn_hidden = 128;
  const Scenario sc = golden_scenario(m, 8, 8, 16);
  Layout l = layout(8, 1, 1, 1, 8);
  l.mbs = 2;
  ASSERT_EQ(check_layout(sc, l), std::nullopt);
  const StepCosts st = step_costs(sc, l);
  const double expect_s = 14336.0 / 300e9 + 5e-6;
  std::printf("Expectation: a2a 16384 B, %.6g s; Actual result: %.6g B, %.6g s\n", expect_s,
              st.ep_alltoall_bytes, st.ep_alltoall_s);
  EXPECT_DOUBLE_EQ(st.ep_alltoall_bytes, 16384.0);
  EXPECT_NEAR(st.ep_alltoall_s, expect_s, 1e-12);
  // Two all-to-alls forward and two backward per MoE layer: 4 layers, all with experts.
  ASSERT_EQ(st.chunks.size(), 1u);
  EXPECT_NEAR(st.chunks[0].ep_comm_forward_s, 4 * 2 * expect_s, 1e-12);
  EXPECT_NEAR(st.chunks[0].ep_comm_backward_s, 4 * 2 * expect_s, 1e-12);
  // The capacity factor pads the buffers: 1.25 x the volume.
  m.moe.capacity_factor = 1.25;
  const StepCosts padded = step_costs(golden_scenario(m, 8, 8, 16), l);
  EXPECT_DOUBLE_EQ(padded.ep_alltoall_bytes, 1.25 * 16384.0);
}

TEST(MoeCostGolden, AllToAllAcrossNodesTakesTheNicShare) {
  // 16 GPUs on 2 nodes of 8, ep 16: half of each rank's 16384 bytes goes to the other node over
  // its share of the 100 Gbit/s NIC, 12.5e9 / 8 B/s per GPU; 7/16 over NVLink (faster): the NIC
  // part sets the time, 8192 / 1.5625e9 s + 10 us.
  ModelSpec m = tiny_moe(16, 2);
  const Scenario sc = golden_scenario(m, 16, 8, 32);
  Layout l = layout(16, 1, 1, 1, 16);
  l.mbs = 2;
  ASSERT_EQ(check_layout(sc, l), std::nullopt);
  const StepCosts st = step_costs(sc, l);
  const double expect_s = 8192.0 / (12.5e9 / 8) + 10e-6;
  std::printf("Expectation: %.6g s; Actual result: %.6g s\n", expect_s, st.ep_alltoall_s);
  EXPECT_NEAR(st.ep_alltoall_s, expect_s, 1e-12);
}

TEST(MoeCostGolden, ContextRingExposedWhenAttentionIsShorterThanATransfer) {
  // cp 4 over 4 nodes of one GPU each, 1 Gbit/s NICs: a ring step's K/V block is
  // (mbs 1 x 32 / 4 tokens) x 2 x kv 64 x 2 bytes = 2048 bytes, sent in 2048 / 1.25e8 s + 10 us
  // = 26.384 us, far longer than one block of tiny attention; the forward exposes
  // (cp - 1) (t_x - t_a) per layer.
  ModelSpec m = test::tiny_model(4);
  Scenario sc = golden_scenario(m, 4, 1, 4);
  sc.cluster.inter_node_gbit_per_s = 1;
  const Layout l = layout(1, 1, 1, 4, 1);
  ASSERT_EQ(check_layout(sc, l), std::nullopt);
  const StepCosts st = step_costs(sc, l);
  const double t_x = 2048.0 / 1.25e8 + 10e-6;
  EXPECT_DOUBLE_EQ(st.cp_block_bytes, 2048.0);
  EXPECT_NEAR(st.cp_transfer_s, t_x, 1e-12);
  ASSERT_GT(st.cp_attention_step_s, 0.0);
  ASSERT_LT(st.cp_attention_step_s, t_x);
  const double expect = 4 * 3 * (t_x - st.cp_attention_step_s);
  std::printf("Expectation: 4 layers x 3 x (%.6g - %.6g) = %.6g s; Actual result: %.6g s\n", t_x,
              st.cp_attention_step_s, expect, st.chunks[0].cp_comm_forward_s);
  EXPECT_NEAR(st.chunks[0].cp_comm_forward_s, expect, 1e-12);
  // Backward: K, V and their gradients, twice the bytes, behind a longer attention step.
  EXPECT_GT(st.chunks[0].cp_comm_backward_s, st.chunks[0].cp_comm_forward_s);
}

TEST(MoeCostGolden, ContextRingHiddenWhenAttentionIsLonger) {
  // Long blocks on NVLink: 16384 tokens over cp 2 inside a node; one block's attention (8192^2
  // scores, 4 heads) outlasts the 8192 x 256 B = 2 MiB transfer at 300 GB/s (7 us), so nothing
  // shows.
  ModelSpec m = test::tiny_model(2);
  m.seq_len = 16384;
  const Scenario sc = golden_scenario(m, 2, 8, 2);
  const Layout l = layout(1, 1, 1, 2, 1);
  ASSERT_EQ(check_layout(sc, l), std::nullopt);
  const StepCosts st = step_costs(sc, l);
  ASSERT_GT(st.cp_attention_step_s, st.cp_transfer_s);
  EXPECT_EQ(st.chunks[0].cp_comm_forward_s, 0.0);
  EXPECT_EQ(st.chunks[0].cp_comm_backward_s, 0.0);
}

TEST(MoeCostGolden, ExpertWeightsShardOverEp) {
  // Expectation: 4 MoE layers x 8 experts x GeLU 2 x 64 x 128 = 524288 expert parameters; ep 8
  // keeps one expert per layer, 65536; the weights differ by (524288 - 65536) x 2 bytes.
  const ModelSpec m = tiny_moe(8, 2);
  const Scenario sc = golden_scenario(m, 8, 8, 16);
  const Estimate e1 = estimate(sc, layout(8, 1, 1, 1, 1));
  const Estimate e8 = estimate(sc, layout(8, 1, 1, 1, 8));
  ASSERT_TRUE(e1.step_time_s > 0 && e8.step_time_s > 0) << e1.reason << e8.reason;
  EXPECT_NEAR(e1.memory_per_gpu_bytes.weights - e8.memory_per_gpu_bytes.weights, 917504.0, 1e-6);
}

TEST(MoeCostGolden, ExpertGradientsFollowTheFrameworksZeroOneReduction) {
  // Expectation: under ZeRO-1 a framework that all-reduces its gradients (zero1_grad_allreduce,
  // DeepSpeed's stage 1) does so for the experts' too, over the expert data-parallel group. dp 8:
  // at ep 8 each expert has one rank (no expert exchange) and only the dense gradients' reduction
  // changes with the knob; at ep 2 the experts' group of 4 adds its own change.
  Scenario sc = golden_scenario(tiny_moe(8, 2), 8, 8, 16);
  sc.training.framework = *load_framework("deepspeed").value;
  ASSERT_TRUE(sc.training.framework.zero1_grad_allreduce);
  Scenario scatter = sc;
  scatter.training.framework.zero1_grad_allreduce = false;
  auto change = [&](int ep) {
    Layout l = layout(8, 1, 1, 1, ep);
    l.zero = 1;
    const Estimate a = estimate(sc, l), b = estimate(scatter, l);
    EXPECT_TRUE(a.step_time_s > 0 && b.step_time_s > 0) << a.reason << b.reason;
    return a.breakdown_s.dp_comm - b.breakdown_s.dp_comm;
  };
  const double dense_only = change(8), with_experts = change(2);
  std::printf("Expectation: the knob's change of dp_comm grows with an expert exchange  Actual: ep 8 %.3g s, "
              "ep 2 %.3g s\n", dense_only, with_experts);
  EXPECT_GT(dense_only, 0);
  EXPECT_GT(with_experts - dense_only, 0.1 * dense_only);  // the experts' own change, not rounding
}

TEST(MoeCostGolden, OffloadedExpertStateIsInHostMemoryOnly) {
  // Expectation: with parameter offload under ZeRO-3 (dp 8, ep 8: one expert of 2 x 64 x 128 per
  // layer and GPU, 65536 expert parameters, not sharded further) no weights and no optimizer state
  // stay on the GPU, and the node's host memory holds at least the 8 GPUs' expert weights (2 B) and
  // Adam state (12 B): 8 x 65536 x 14 = 7340032 bytes. Without offload they are on the GPU.
  const ModelSpec m = tiny_moe(8, 2);
  Scenario sc = golden_scenario(m, 8, 8, 16);
  sc.cluster.host_memory_gib = 1024;
  Layout l = layout(8, 1, 1, 1, 8);
  l.zero = 3;
  const Estimate on_gpu = estimate(sc, l);
  sc.training.offload_params = true;
  const Estimate off = estimate(sc, l);
  ASSERT_TRUE(off.step_time_s > 0) << off.reason;
  EXPECT_GE(on_gpu.memory_per_gpu_bytes.weights, 65536.0 * 2);
  EXPECT_GE(on_gpu.memory_per_gpu_bytes.optimizer, 65536.0 * 12);
  EXPECT_DOUBLE_EQ(off.memory_per_gpu_bytes.weights, 0);
  EXPECT_DOUBLE_EQ(off.memory_per_gpu_bytes.optimizer, 0);
  EXPECT_GE(off.host_memory_per_node_bytes, 8 * 65536.0 * 14);
  EXPECT_DOUBLE_EQ(on_gpu.host_memory_per_node_bytes, 0);
}

TEST(MoeCostGolden, ZeroThreeGathersTheExpertsWithTheirLayer) {
  // dp 8 under ZeRO-3, 4 MoE layers of 8 experts of 2 x 64 x 128 = 16384 parameters. ep 1: each
  // layer's 8 experts (131072) are sharded over the 8 ranks and gathered with the layer; ep 8:
  // each rank holds its one expert whole (an expert group of one rank: nothing to gather), and the
  // expert state is the same 65536 parameters a rank either way. Expectation: ep 1 holds the
  // gathered experts in flight, at least (1 + prefetched) x 131072 x 2 bytes + 131072 gradient
  // bytes more than ep 8; its ZeRO-3 traffic is larger.
  const Scenario sc = golden_scenario(tiny_moe(8, 2), 8, 8, 16);
  const FrameworkSpec& fw = sc.training.framework;
  const int ahead = fw.zero3_backward_prefetch == Zero3BackwardPrefetch::Pre ? fw.zero3_prefetch_layers : 0;
  const StateBytesPerParam state = state_bytes_per_param(sc.training);
  auto run = [&](int ep, int zero) {
    Layout l = layout(8, 1, 1, 1, ep);
    l.zero = zero;
    const Estimate e = estimate(sc, l);
    EXPECT_TRUE(e.step_time_s > 0) << e.reason;
    return std::make_pair(e, step_costs(sc, l));
  };
  const auto [z3_ep1, z3_ep1_costs] = run(1, 3);
  const auto [z3_ep8, z3_ep8_costs] = run(8, 3);
  const double in_flight = (1 + ahead) * 131072.0 * state.weights + 131072.0 * state.gradients;
  const double more = z3_ep1.memory_per_gpu_bytes.buffers - z3_ep8.memory_per_gpu_bytes.buffers;
  std::printf("Expectation: ZeRO-3 at ep 1 holds >= %.0f bytes more in flight  Actual: %.0f\n", in_flight, more);
  EXPECT_GE(more, in_flight);
  EXPECT_DOUBLE_EQ(z3_ep1.memory_per_gpu_bytes.weights, z3_ep8.memory_per_gpu_bytes.weights);
  EXPECT_GT(z3_ep1_costs.dp_comm_s, z3_ep8_costs.dp_comm_s);
  // ep 4: 2 experts a layer on a rank (32768 parameters), sharded over an expert group of 2 and
  // gathered: a quarter of ep 1's in flight, and some traffic.
  const auto [z3_ep4, z3_ep4_costs] = run(4, 3);
  const double more4 = z3_ep4.memory_per_gpu_bytes.buffers - z3_ep8.memory_per_gpu_bytes.buffers;
  EXPECT_GE(more4, in_flight / 4);
  EXPECT_LT(more4, more);
  EXPECT_GT(z3_ep4_costs.dp_comm_s, z3_ep8_costs.dp_comm_s);
}

TEST(MoeCostGolden, DenseLayoutsTakeTheDensePath) {
  // A dense model without cp is not touched by the MoE terms: no ep or cp time, same step as an
  // identical scenario costed before the terms existed would give (the validate figures are
  // compared in the README's check); here: ep_comm and cp_comm are 0 and sum() is the old sum.
  const Scenario sc = golden_scenario(test::tiny_model(4), 8, 8, 16);
  const Estimate e = estimate(sc, layout(8, 1, 1, 1, 1));
  EXPECT_EQ(e.breakdown_s.ep_comm, 0.0);
  EXPECT_EQ(e.breakdown_s.cp_comm, 0.0);
  const TimeBreakdown& b = e.breakdown_s;
  EXPECT_EQ(e.step_time_s, b.compute + b.recompute + b.bubble + b.tp_comm + b.pp_comm + b.dp_comm +
                               b.optimizer + b.offload);
}

TEST(MoeCostGolden, RecomputedExpertActivationAndFp8CacheKeepLess) {
  // 4 MoE layers (GeLU experts of f_e 128, h 64), 8 experts, top 2, ep 8, mbs 1 x seq 32: each
  // rank's one local expert takes 32 x 8 x 2 / 8 = 64 token copies. Per copy the experts keep
  // the dispatched token (h 64), the GeLU's input (128) and its output (128): 320 x 2 bytes.
  // Expectation: recompute_moe_act drops the output, 64 copies x 128 x 2 = 16384 bytes a layer,
  // 4 layers x 1 micro-batch in flight (pp 1) = 65536 bytes less; fp8_moe under fp8 keeps the
  // 320 elements in 1 + 4/128 bytes: 64 x 320 x (2 - 1.03125) = 19840 a layer, 79360 in all.
  const ModelSpec m = tiny_moe(8, 2);
  Scenario sc = golden_scenario(m, 8, 8, 16);
  const Layout l = layout(8, 1, 1, 1, 8);
  ASSERT_EQ(check_layout(sc, l), std::nullopt);
  const Estimate base = estimate(sc, l);
  Scenario act = sc;
  act.training.framework.recompute_moe_act = true;
  const Estimate recomputed = estimate(act, l);
  const double d_act = base.memory_per_gpu_bytes.activations - recomputed.memory_per_gpu_bytes.activations;
  std::printf("Expectation: recompute_moe_act keeps 65536 B less, recomputes more; Actual result: %.6g B, "
              "recompute %.6g -> %.6g s\n", d_act, base.breakdown_s.recompute, recomputed.breakdown_s.recompute);
  EXPECT_NEAR(d_act, 65536.0, 1e-6);
  EXPECT_GT(recomputed.breakdown_s.recompute, base.breakdown_s.recompute);

  sc.training.precision = Precision::Fp8;
  sc.cluster.gpu.peak_tflops_fp8 = 624;
  const Estimate bf16_cache = estimate(sc, l);
  Scenario fp8 = sc;
  fp8.training.framework.fp8_moe = true;
  const Estimate fp8_cache = estimate(fp8, l);
  ASSERT_TRUE(bf16_cache.step_time_s > 0 && fp8_cache.step_time_s > 0) << bf16_cache.reason << fp8_cache.reason;
  const double d_fp8 = bf16_cache.memory_per_gpu_bytes.activations - fp8_cache.memory_per_gpu_bytes.activations;
  std::printf("Expectation: fp8_moe keeps 79360 B less; Actual result: %.6g B\n", d_fp8);
  EXPECT_NEAR(d_fp8, 79360.0, 1e-6);
  // Without fp8 precision the flag changes nothing.
  Scenario bf16 = golden_scenario(m, 8, 8, 16);
  bf16.training.framework.fp8_moe = true;
  EXPECT_EQ(estimate(bf16, l).memory_per_gpu_bytes.activations, base.memory_per_gpu_bytes.activations);
}

TEST(MoeCostGolden, Fp8DispatchHalvesOneAllToAllOfEachPass) {
  // As AllToAllVolumeAndTimeInsideANode with mbs 1: 32 tokens x top 2 x h 64 = 4096 elements
  // per rank; 7/8 of them to the peers over NVLink at 300 GB/s + 5 us. Expectation: the combine
  // in bf16, 8192 B: 7168 / 300e9 + 5e-6 s; the dispatch in fp8 with scales, 4096 x 1.03125 =
  // 4224 B: 3696 / 300e9 + 5e-6 s; forward and backward of 4 layers each 4 x (both).
  const ModelSpec m = tiny_moe(8, 2);
  Scenario sc = golden_scenario(m, 8, 8, 16);
  sc.training.precision = Precision::Fp8;
  sc.cluster.gpu.peak_tflops_fp8 = 624;
  sc.training.framework.fp8_moe = true;
  const Layout l = layout(8, 1, 1, 1, 8);
  const StepCosts st = step_costs(sc, l);
  const double t16 = 7168.0 / 300e9 + 5e-6, t8 = 3696.0 / 300e9 + 5e-6;
  std::printf("Expectation: forward %.6g s; Actual result: %.6g s\n", 4 * (t16 + t8), st.chunks[0].ep_comm_forward_s);
  EXPECT_NEAR(st.chunks[0].ep_comm_forward_s, 4 * (t16 + t8), 1e-12);
  EXPECT_NEAR(st.chunks[0].ep_comm_backward_s, 4 * (t16 + t8), 1e-12);
}

TEST(MoeCostGolden, OverlappedAllToAllsHideBehindThePairedPass) {
  // ep_overlap pairs a micro-batch's forward with another's backward: the forward's all-to-alls
  // (a_f) hide behind the backward's compute (b) and the backward's (a_b) behind the forward's (f),
  // the hidden part charged kHiddenCollectiveCost = 0.5 of its time; with pp 1 the first forward
  // and the last backward have no partner. Expectation, from the same layout's costs without it:
  //   ep_comm = (a_f + a_b) + (m - 1) (a_f + a_b - 0.5 (min(a_f, b) + min(a_b, f))).
  // Two regimes: slow links (the all-to-alls outlast the passes they pair with: part of them
  // stays exposed) and a slow GPU (they hide whole: (m - 1) of the m micro-batches pay half).
  for (const bool slow_links : {true, false}) {
    const ModelSpec m = tiny_moe(8, 2);
    Scenario sc = golden_scenario(m, 8, 8, 64);
    if (slow_links) {
      sc.cluster.intra_node_gbyte_per_s = 0.05;
    } else {
      sc.cluster.gpu.peak_tflops_bf16 = sc.cluster.gpu.peak_tflops_fp16 = 1e-4;
      sc.cluster.gpu.memory_gbyte_per_s = 1e-2;
    }
    Layout l = layout(8, 1, 1, 1, 8);
    ASSERT_EQ(check_layout(sc, l), std::nullopt);
    const int64_t mb = l.num_microbatches(sc.training.gbs);
    ASSERT_EQ(mb, 8);
    const Estimate off = estimate(sc, l);
    const StepCosts st = step_costs(sc, l);
    ASSERT_EQ(st.chunks.size(), 1u);
    const ChunkCosts& c0 = st.chunks[0];
    const double a_f = c0.ep_comm_forward_s, a_b = c0.ep_comm_backward_s;
    const double f = c0.forward_s, b = c0.backward_input_s + c0.backward_weight_s + c0.recompute_s;
    EXPECT_NEAR(off.breakdown_s.ep_comm, double(mb) * (a_f + a_b), 1e-9 * off.breakdown_s.ep_comm);
    if (slow_links) {
      EXPECT_GT(a_f, b);
    } else {
      EXPECT_LT(a_f, b);
      EXPECT_LT(a_b, f);
    }

    Scenario on_sc = sc;
    on_sc.training.framework.ep_overlap = true;
    const Estimate on = estimate(on_sc, l);
    const double pair = a_f + a_b - 0.5 * (std::min(a_f, b) + std::min(a_b, f));
    const double expect = (a_f + a_b) + double(mb - 1) * pair;
    std::printf("Expectation: a_f %.6g, a_b %.6g, f %.6g, b %.6g s: ep_comm %.6g s (was %.6g); Actual result: %.6g s\n",
                a_f, a_b, f, b, expect, off.breakdown_s.ep_comm, on.breakdown_s.ep_comm);
    EXPECT_NEAR(on.breakdown_s.ep_comm, expect, 1e-9 * expect);
    EXPECT_LT(on.step_time_s, off.step_time_s);
    // The replay blocks each chunk's stream for its share of what the stage exposes.
    const StepCosts on_st = step_costs(on_sc, l);
    EXPECT_NEAR(on_st.chunks[0].ep_comm_forward_s, a_f * expect / (double(mb) * (a_f + a_b)), 1e-12 * expect);
    // One more micro-batch's activations are kept (the forward paired with the first backward):
    // pp 1 holds one without pairing, two with it.
    EXPECT_NEAR(on.memory_per_gpu_bytes.activations - off.memory_per_gpu_bytes.activations, c0.activation_bytes,
                1e-9 * c0.activation_bytes);

    // Nothing pairs under GPipe or under full recompute (its backward repeats the forward's
    // all-to-alls first): both cost as before.
    for (int k = 0; k < 2; ++k) {
      Layout other = l;
      if (k == 0) {
        other.pp = 2, other.dp = 4, other.ep = 4, other.schedule = Schedule::GPipe;
      } else {
        other.recompute = Recompute::Full;
      }
      ASSERT_EQ(check_layout(sc, other), std::nullopt);
      const Estimate a = estimate(sc, other), o = estimate(on_sc, other);
      EXPECT_DOUBLE_EQ(a.breakdown_s.ep_comm, o.breakdown_s.ep_comm) << k;
      EXPECT_DOUBLE_EQ(a.memory_per_gpu_bytes.total, o.memory_per_gpu_bytes.total) << k;
    }
    // Nor on CPU ranks: capplan-train's all-to-alls block.
    Scenario cpu = sc, cpu_on = on_sc;
    cpu.cluster.gpu.cpu_rank = cpu_on.cluster.gpu.cpu_rank = true;
    EXPECT_GT(estimate(cpu, l).breakdown_s.ep_comm, 0.0);
    EXPECT_DOUBLE_EQ(estimate(cpu, l).breakdown_s.ep_comm, estimate(cpu_on, l).breakdown_s.ep_comm);
  }
}

TEST(MoeCostGolden, OverlapKeyReadsFromFrameworkFilesAndRuns) {
  // Expectation: ep_overlap reads as a framework key (false by default), a value that is not a
  // boolean is named at its line.
  const auto ok = parse_framework_yaml("name: mcore-ep-overlap\nep_overlap: true\n", "mcore.yaml");
  ASSERT_TRUE(ok.ok()) << ok.diagnostics.to_string();
  EXPECT_TRUE(ok.value->ep_overlap);
  EXPECT_FALSE(FrameworkSpec{}.ep_overlap);
  const auto bad = parse_framework_yaml("name: mcore-ep-overlap\nep_overlap: sometimes\n", "mcore.yaml");
  ASSERT_FALSE(bad.ok());
  const std::string msg = bad.diagnostics.to_string();
  EXPECT_NE(msg.find("mcore.yaml:2"), std::string::npos) << msg;
  EXPECT_NE(msg.find("ep_overlap"), std::string::npos) << msg;
}

TEST(MoeValidation, PublishedRunsAreHeldOutAndPredictedToFit) {
  // Every run of tests/data/moe-runs.yaml ran on its cluster, so the model must predict that it
  // fits; none is used to choose a constant (calibration: false). The errors are reported, not
  // bounded: the check stays blind.
  const auto report = validate_file(data("moe-runs.yaml"));
  ASSERT_TRUE(report.ok()) << report.diagnostics.to_string();
  ASSERT_EQ(report.value->results.size(), 2u);
  for (const ValidationResult& r : report.value->results) {
    std::printf("Expectation: %s fits; Actual result: fits %d (%s), predicted %.4g vs measured %.4g (%+.1f %%)\n",
                r.run.id.c_str(), int(r.estimate.fits), r.estimate.reason.c_str(), r.predicted, r.run.measured,
                r.error_pct);
    EXPECT_FALSE(r.run.calibration) << r.run.id;
    EXPECT_TRUE(r.estimate.fits) << r.run.id << ": " << r.estimate.reason;
    EXPECT_GT(r.predicted, 0.0) << r.run.id;
  }
  EXPECT_EQ(report.value->calibration.runs, 0);
  EXPECT_EQ(report.value->held_out.runs, 2);
}
