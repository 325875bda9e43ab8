// The embedded catalog: every preset the README names is there, loads without diagnostics, and
// carries its source; figures spot-checked against the published values.
#include <gtest/gtest.h>

#include "planner/catalog.h"
#include "planner/plan_io.h"
#include "planner/spec_io.h"

using namespace capplan;

TEST(Catalog, HasEveryNamedPreset) {
  for (const char* m : {"gpt2-124m", "gpt2-1.5b", "gpt3-1.3b", "gpt3-13b", "gpt3-175b",
                        "llama2-7b", "llama2-13b", "llama2-70b", "megatron-1t"})
    EXPECT_NE(find_catalog_model(m), nullptr) << m;
  for (const char* c : {"p4d.24xlarge", "p4de.24xlarge", "p3.16xlarge", "p3dn.24xlarge",
                        "p5.48xlarge", "dgx-a100-80gb", "dgx-2h"})
    EXPECT_NE(find_catalog_cluster(c), nullptr) << c;
  for (const char* g : {"A100-SXM4-40GB", "A100-SXM4-80GB", "V100-SXM2-16GB", "V100-SXM2-32GB",
                        "H100-SXM5-80GB", "V100-SXM3-32GB"})
    EXPECT_NE(find_catalog_gpu(g), nullptr) << g;
  EXPECT_NE(find_catalog_plan("default"), nullptr);
  EXPECT_EQ(find_catalog_model("gpt5"), nullptr);
}

TEST(Catalog, EveryPresetLoadsCleanlyWithASource) {
  for (const auto& e : catalog_models()) {
    const auto m = load_model(e.name);
    EXPECT_TRUE(m.ok() && m.diagnostics.empty()) << e.name << "\n" << m.diagnostics.to_string();
    if (m.value) {
      EXPECT_FALSE(m.value->source.empty()) << e.name;
      EXPECT_EQ(m.value->name, e.name);
    }
    EXPECT_FALSE(e.summary.empty());
    EXPECT_EQ(e.file, "configs/models/" + e.name + ".yaml");
  }
  for (const auto& e : catalog_clusters()) {
    const auto c = load_cluster(e.name);
    EXPECT_TRUE(c.ok() && c.diagnostics.empty()) << e.name << "\n" << c.diagnostics.to_string();
    if (c.value) {
      EXPECT_FALSE(c.value->source.empty()) << e.name;
      EXPECT_FALSE(c.value->gpu.source.empty()) << e.name;
      EXPECT_EQ(c.value->name, e.name);
    }
  }
  for (const auto& e : catalog_gpus()) {
    const auto g = load_gpu(e.name);
    EXPECT_TRUE(g.ok() && g.diagnostics.empty()) << e.name << "\n" << g.diagnostics.to_string();
  }
}

TEST(Catalog, SpotChecksAgainstPublishedFigures) {
  // GPT-3 175B, Brown et al. 2020 Table 2.1: 96 layers, d_model 12288, 96 heads, n_ctx 2048.
  const auto g = load_model("gpt3-175b");
  ASSERT_TRUE(g.ok());
  EXPECT_EQ(g.value->layers, 96);
  EXPECT_EQ(g.value->hidden, 12288);
  EXPECT_EQ(g.value->heads, 96);
  EXPECT_EQ(g.value->seq_len, 2048);
  // Llama 2 70B: grouped-query attention with 8 key/value heads.
  const auto l = load_model("llama2-70b");
  ASSERT_TRUE(l.ok());
  EXPECT_EQ(l.value->kv_heads, 8);
  EXPECT_EQ(l.value->ffn, Ffn::Swiglu);
  // Megatron 1T, Narayanan et al. 2021 Table 1: 128 layers, hidden 25600, 160 heads.
  const auto t = load_model("megatron-1t");
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t.value->layers, 128);
  EXPECT_EQ(t.value->hidden, 25600);
  EXPECT_EQ(t.value->heads, 160);
  // p4d.24xlarge: 8 x A100 40 GB, 600 GB/s NVSwitch (300 per direction), 400 Gb/s EFA.
  const auto p = load_cluster("p4d.24xlarge");
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p.value->gpus_per_node, 8);
  EXPECT_EQ(p.value->gpu.name, "A100-SXM4-40GB");
  EXPECT_DOUBLE_EQ(p.value->gpu.memory_gib, 40);
  EXPECT_DOUBLE_EQ(p.value->gpu.peak_tflops(Precision::Bf16), 312);
  EXPECT_DOUBLE_EQ(p.value->intra_node_gbyte_per_s, 300);
  EXPECT_DOUBLE_EQ(p.value->inter_node_gbit_per_s, 400);
  EXPECT_DOUBLE_EQ(p.value->price_per_node_hour_usd, 32.7726);
  // V100 has no bf16: unknown is 0, never guessed.
  const auto v = load_gpu("V100-SXM2-16GB");
  ASSERT_TRUE(v.ok());
  EXPECT_DOUBLE_EQ(v.value->peak_tflops(Precision::Bf16), 0);
  // DGX systems are not rented by the hour: price unknown.
  const auto d = load_cluster("dgx-a100-80gb");
  ASSERT_TRUE(d.ok());
  EXPECT_DOUBLE_EQ(d.value->price_per_node_hour_usd, 0);
  EXPECT_DOUBLE_EQ(d.value->inter_node_gbit_per_s, 1600);
}

TEST(Catalog, DefaultPlanIsGpt3OnP4d) {
  const auto plan = load_plan("default");
  ASSERT_TRUE(plan.ok()) << plan.diagnostics.to_string();
  EXPECT_EQ(plan.value->model_ref, "gpt3-175b");
  EXPECT_EQ(plan.value->cluster_ref, "p4d.24xlarge");
  EXPECT_EQ(plan.value->scenario.nodes, 120);
  EXPECT_DOUBLE_EQ(plan.value->scenario.training.tokens, 300e9);
  // Expectation: dp * tp * pp = 120 nodes * 8 GPUs = 960, and gbs divisible by dp * mbs.
  const Layout& l = plan.value->layout;
  EXPECT_EQ(l.gpus(), 960);
  EXPECT_GT(l.num_microbatches(plan.value->scenario.training.gbs), 0);
}
