// Parameter, FLOP and activation counts of profile_model() against hand-derived figures.
#include <gtest/gtest.h>

#include <cstdio>

#include "model_fixtures.h"
#include "planner/profile.h"
#include "planner/spec_io.h"

namespace capplan {
namespace {

void report(const char* what, double expected, double actual) {
  std::printf("Expectation: %s = %.6g  Actual: %.6g\n", what, expected, actual);
}

TEST(Profile, Gpt3_175bHasAbout174_6BParameters) {
  const Loaded<ModelSpec> m = load_model("gpt3-175b");
  ASSERT_TRUE(m.ok()) << m.diagnostics.to_string();
  const ModelProfile p = profile_model(*m.value, 1, 2048, 1);
  // 96 blocks of 12h^2 + 13h (QKV/out/FFN matrices, 9h biases, two LayerNorms 4h), the tied
  // token embedding V*h, learned positions s*h, final LayerNorm 2h (Brown et al. 2020: 174.6B).
  const double h = 12288, L = 96, V = 50257, s = 2048;
  const double expected = L * (12 * h * h + 13 * h) + V * h + s * h + 2 * h;
  report("GPT-3 175B parameters", expected, p.total_params);
  EXPECT_DOUBLE_EQ(p.total_params, expected);
  EXPECT_NEAR(p.total_params / 1e9, 174.6, 0.1);
}

TEST(Profile, Llama2_7bHasAbout6_74BParameters) {
  const Loaded<ModelSpec> m = load_model("llama2-7b");
  ASSERT_TRUE(m.ok()) << m.diagnostics.to_string();
  const ModelProfile p = profile_model(*m.value, 1, 4096, 1);
  // 32 blocks of 4h^2 (attention) + 3hf (SwiGLU) + 2h (RMSNorm gains), untied embedding and
  // head 2Vh, final RMSNorm h; no biases (Touvron et al. 2023: 6.74B).
  const double h = 4096, f = 11008, L = 32, V = 32000;
  const double expected = L * (4 * h * h + 3 * h * f + 2 * h) + 2 * V * h + h;
  report("Llama-2 7B parameters", expected, p.total_params);
  EXPECT_DOUBLE_EQ(p.total_params, expected);
  EXPECT_NEAR(p.total_params / 1e9, 6.74, 0.01);
}

TEST(Profile, FlopsPerTokenFollowMegatronEq3WithoutRecompute) {
  ModelSpec m = test::tiny_model(4);
  m.hidden = 256;
  m.heads = 8;
  m.seq_len = 128;
  const ModelProfile p = profile_model(m, 1, 128, 1);
  // Narayanan et al. 2021: model FLOPs per token = 72 l h^2 (1 + s/(6h) + V/(12 l h)).
  const double l = 4, h = 256, s = 128, V = 1000;
  const double expected = 72 * l * h * h * (1 + s / (6 * h) + V / (12 * l * h));
  report("model FLOPs per token", expected, p.flops_per_token);
  EXPECT_NEAR(p.flops_per_token, expected, expected * 1e-12);
}

TEST(Profile, ActivationBytesFollowKorthikantiEq1And2) {
  const ModelSpec m = test::tiny_model();
  const double s = 32, b = 2, h = 64, a = 4;
  // tp = 1: s b h (34 + 5 a s / h) bytes per layer (Korthikanti et al. 2022, Eq. 1).
  const ModelProfile p1 = profile_model(m, 1, 32, 2);
  const double e1 = s * b * h * (34 + 5 * a * s / h);
  report("activation bytes per layer, tp 1", e1, p1.layers[1].activation_bytes);
  EXPECT_DOUBLE_EQ(p1.layers[1].activation_bytes, e1);
  // tp = 4: s b h (10 + 24/t + 5 a s / (h t)) (Eq. 2).
  const ModelProfile p4 = profile_model(m, 4, 32, 2);
  const double e4 = s * b * h * (10 + 24.0 / 4 + 5 * a * s / (h * 4));
  report("activation bytes per layer, tp 4", e4, p4.layers[1].activation_bytes);
  EXPECT_DOUBLE_EQ(p4.layers[1].activation_bytes, e4);
}

TEST(Profile, TensorParallelismSplitsBlockParameters) {
  const ModelSpec m = test::tiny_model();
  const ModelProfile p1 = profile_model(m, 1, 32, 1);
  const ModelProfile p2 = profile_model(m, 2, 32, 1);
  // Per block: 12h^2 + 7h biases split by tp, the 2h output biases and 4h norm parameters not.
  const double h = 64;
  EXPECT_DOUBLE_EQ(p1.layers[1].params, 12 * h * h + 13 * h);
  EXPECT_DOUBLE_EQ(p2.layers[1].params, (12 * h * h + 7 * h) / 2 + 6 * h);
  EXPECT_DOUBLE_EQ(p1.total_params, p2.total_params);
  EXPECT_EQ(p1.layers.size(), size_t(2 + 3));  // embedding, 2 blocks, final norm, head
}

}  // namespace
}  // namespace capplan
