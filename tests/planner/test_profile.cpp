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

std::string data(const std::string& rel) { return std::string(CAPPLAN_SOURCE_DIR) + "/tests/data/" + rel; }

TEST(Profile, ASlidingWindowScoresEachQueryAgainstTheWindowsKeys) {
  // 6 layers, window 512 at seq 2048, every 3rd layer global: layers 0, 1, 3, 4 local. Expectation:
  // forward FLOPs drop by 4 local layers x 4 b s (s - w) q against the same model without a window.
  ModelSpec m = test::tiny_model(6);
  m.hidden = 256;
  m.heads = 4;
  m.seq_len = 2048;
  ModelSpec windowed = m;
  windowed.sliding_window = 512;
  windowed.global_every = 3;
  const double s = 2048, w = 512, q = 256;
  const ModelProfile full = profile_model(m, 1, 2048, 1);
  const ModelProfile local = profile_model(windowed, 1, 2048, 1);
  const double saved = 4 * (4 * s * (s - w) * q);
  report("forward FLOPs a sequence saved by the window", saved,
         (full.forward_flops_per_token - local.forward_flops_per_token) * s);
  EXPECT_NEAR((full.forward_flops_per_token - local.forward_flops_per_token) * s, saved, saved * 1e-12);
  EXPECT_DOUBLE_EQ(local.layers[1].forward_flops, full.layers[1].forward_flops - 4 * s * (s - w) * q);  // layer 0
  EXPECT_DOUBLE_EQ(local.layers[3].forward_flops, full.layers[3].forward_flops);                       // layer 2
  // The count the listings print is the layers is_local_layer names.
  int named = 0;
  for (int i = 0; i < windowed.layers; ++i) named += windowed.is_local_layer(i, 2048) ? 1 : 0;
  EXPECT_EQ(windowed.local_layers(2048), 4);
  EXPECT_EQ(windowed.local_layers(2048), named);
  EXPECT_EQ(windowed.local_layers(512), 0);
  // A window as long as the sequence changes nothing.
  EXPECT_DOUBLE_EQ(profile_model(windowed, 1, 512, 1).flops_per_token, profile_model(m, 1, 512, 1).flops_per_token);
  // Chunks of 512 (Llama 4) reach at most 512 keys too: counted as the window (each query against
  // its span, the causal mask not subtracted, as for every layer).
  ModelSpec chunked = m;
  chunked.attention_chunk = 512;
  chunked.global_every = 3;
  EXPECT_DOUBLE_EQ(profile_model(chunked, 1, 2048, 1).flops_per_token, local.flops_per_token);
}

TEST(Profile, HeadsWiderThanHiddenOverHeadsWidenTheAttention) {
  // Qwen3 32B (its Hugging Face config): 64 heads of 128 over a 5120-wide residual stream, so Q
  // and the output projection are 5120 x 8192, K and V 5120 x (8 x 128); SwiGLU f = 25600, RMSNorm,
  // untied, no biases. Expectation: L (h (q + 2 kv) + q h + 3 h f + 2 h) + 2 V h + h = 32.76 B
  // (the model card: 32.8 B; its per-head q/k norms, 2 x 128 a layer, are not counted).
  const Loaded<ModelSpec> m = load_model(data("good/qwen3-32b-config.json"));
  ASSERT_TRUE(m.ok()) << m.diagnostics.to_string();
  const double h = 5120, q = 64 * 128, kv = 8 * 128, f = 25600, L = 64, V = 151936, s = 4096;
  const ModelProfile p = profile_model(*m.value, 1, int(s), 1);
  const double expected = L * (h * (q + 2 * kv) + q * h + 3 * h * f + 2 * h) + 2 * V * h + h;
  report("Qwen3 32B parameters", expected, p.total_params);
  EXPECT_DOUBLE_EQ(p.total_params, expected);
  EXPECT_NEAR(p.total_params / 1e9, 32.76, 0.01);
  // Training FLOPs per token: 3 x (2 x the matrices + the attention core 4 s q per layer + the LM
  // head 2 h V), the core at the queries' width q, not h.
  const double fwd = L * (2 * (h * (q + 2 * kv) + q * h + 3 * h * f) + 4 * s * q) + 2 * h * V;
  report("Qwen3 32B training FLOPs per token", 3 * fwd, p.flops_per_token);
  EXPECT_NEAR(p.flops_per_token, 3 * fwd, 3 * fwd * 1e-12);
  // Gemma 7B: 16 heads of 256 over 3072, tied: 8.54 B (the model card's figure).
  const Loaded<ModelSpec> g = load_model(data("good/gemma-7b-config.json"));
  ASSERT_TRUE(g.ok()) << g.diagnostics.to_string();
  const double gp = profile_model(*g.value, 1, 8192, 1).total_params;
  report("Gemma 7B parameters (B)", 8.54, gp / 1e9);
  EXPECT_NEAR(gp / 1e9, 8.54, 0.01);
}

TEST(Profile, LatentAttentionCountsItsDownAndUpProjections) {
  // DeepSeek-V3 (its Hugging Face config): 128 heads over 7168, q_lora_rank 1536, kv_lora_rank
  // 512, query-key heads of 128 + 64 rotary, value heads of 128. A layer's attention is W_DQ
  // (h x 1536), W_UQ (1536 x 128 x 192), W_DKV (h x (512 + 64)), W_UKV (512 x 128 x (128 + 128)),
  // W_O (128 x 128 x h) and the two latent norms (1536 + 512): 187.1 M (DeepSeek-V2 Sec 2.1).
  const Loaded<ModelSpec> m = load_model(data("good/hf-moe/deepseek-v3-config.json"));
  ASSERT_TRUE(m.ok()) << m.diagnostics.to_string();
  ASSERT_TRUE(m.value->mla.enabled());
  const double h = 7168, a = 128, ql = 1536, kvl = 512, nope = 128, rope = 64, vd = 128, s = 4096;
  const double attn = h * ql + ql * a * (nope + rope) + h * (kvl + rope) + kvl * a * (nope + vd) + a * vd * h;
  report("DeepSeek-V3 attention matrices per layer (M)", 187.1, attn / 1e6);
  EXPECT_NEAR(attn / 1e6, 187.1, 0.05);
  // The whole model against the same model with its attention taken out: 61 layers of it, plus
  // their norms; and the report's 671 B.
  ModelSpec v3 = *m.value;
  v3.mtp_layers = 0;  // the multi-token prediction module's attention: MultiTokenPredictionCountsOneMoreLayerAndHead
  const ModelProfile p = profile_model(v3, 1, int(s), 1);
  ModelSpec plain = v3;
  plain.mla = {};
  plain.hidden = 7168;
  const ModelProfile q = profile_model(plain, 1, int(s), 1);
  const double plain_attn = 4 * h * h;  // 128 heads of 56: Q, K, V and O all h x h
  EXPECT_DOUBLE_EQ(p.total_params - q.total_params, 61 * (attn + ql + kvl - plain_attn));
  report("DeepSeek-V3 parameters (B)", 671.0, p.total_params / 1e9);
  EXPECT_NEAR(p.total_params / 1e9, 671.0, 0.1);
  // Forward FLOPs per token of a layer's attention: 2 x its matrices + the core, Q K^T over
  // 128 x 192 and P V over 128 x 128 per key: 2 s a (192 + 128).
  const double core = 2 * s * a * ((nope + rope) + vd);
  EXPECT_NEAR(p.forward_flops_per_token - q.forward_flops_per_token,
              61 * (2 * (attn - plain_attn) + core - 4 * s * h), 1e-9 * p.forward_flops_per_token);
  // Per tp rank the down-projections and the latent norms stay whole; the up-projections and
  // W_O are split: at tp 8 a block holds (attn - down) / 8 + down + norms of attention.
  const double down = h * ql + h * (kvl + rope);
  const ModelProfile p8 = profile_model(v3, 8, int(s), 1);
  const ModelProfile q8 = profile_model(plain, 8, int(s), 1);
  EXPECT_NEAR(p8.layers[1].params - q8.layers[1].params, (attn - down) / 8 + down + ql + kvl - plain_attn / 8, 1e-6);
  // DeepSeek-V2-Lite: no query latent (q_lora_rank null): Q is h x 16 x 192 straight from the
  // hidden state. 15.7 B in all (DeepSeek-V2 Sec 4.1, the Lite model's card).
  const Loaded<ModelSpec> lite = load_model(data("good/hf-moe/deepseek-v2-lite-config.json"));
  ASSERT_TRUE(lite.ok()) << lite.diagnostics.to_string();
  EXPECT_EQ(lite.value->mla.q_lora_rank, 0);
  const double lh = 2048, la = 16;
  const double lite_attn = lh * la * (nope + rope) + lh * (kvl + rope) + kvl * la * (nope + vd) + la * vd * lh + kvl;
  ModelSpec lite_plain = *lite.value;
  lite_plain.mla = {};
  EXPECT_DOUBLE_EQ(profile_model(*lite.value, 1, 4096, 1).total_params - profile_model(lite_plain, 1, 4096, 1).total_params,
                   27 * (lite_attn - 4 * lh * lh));
  const double lite_total = profile_model(*lite.value, 1, 4096, 1).total_params;
  report("DeepSeek-V2-Lite parameters (B)", 15.7, lite_total / 1e9);
  EXPECT_NEAR(lite_total / 1e9, 15.7, 0.05);
}

TEST(Profile, MultiTokenPredictionCountsOneMoreLayerAndHead) {
  // DeepSeek-V3's config (num_nextn_predict_layers 1): one module after layer 60, i.e. the MoE
  // layer 61 would be, eh_proj (2h x h), enorm, hnorm and its final norm; the embedding and the
  // head shared. The report: 671 B for the model, 14 B more for MTP in the checkpoint, which also
  // stores the module's own embedding and head (2 x V x h).
  const Loaded<ModelSpec> m = load_model(data("good/hf-moe/deepseek-v3-config.json"));
  ASSERT_TRUE(m.ok()) << m.diagnostics.to_string();
  EXPECT_EQ(m.value->mtp_layers, 1);
  const double h = 7168, V = 129280, s = 4096;
  const ModelProfile p = profile_model(*m.value, 1, int(s), 1);
  ModelSpec bare = *m.value;
  bare.mtp_layers = 0;
  const ModelProfile q = profile_model(bare, 1, int(s), 1);
  // The model's own figures do not move: 671 B.
  EXPECT_DOUBLE_EQ(p.total_params, q.total_params);
  EXPECT_DOUBLE_EQ(p.active_params, q.active_params);
  ASSERT_EQ(p.layers.size(), q.layers.size());
  ASSERT_EQ(p.mtp.size(), 1u);
  EXPECT_TRUE(q.mtp.empty());
  EXPECT_EQ(q.mtp_params, 0.0);
  // The module: an MoE layer's parameters (the last layer's row) and 2 h^2 + 3 h.
  const LayerProfile& moe_layer = p.layers[p.layers.size() - 3];
  EXPECT_EQ(p.mtp[0].kind, "mtp");
  EXPECT_DOUBLE_EQ(p.mtp[0].params, moe_layer.params + 2 * h * h + 3 * h);
  EXPECT_DOUBLE_EQ(p.mtp_params, p.mtp[0].params);
  report("DeepSeek-V3 MTP module parameters (B)", 11.61, p.mtp_params / 1e9);
  report("with the checkpoint's embedding and head copies (B; report: 14)", 14.0, (p.mtp_params + 2 * V * h) / 1e9);
  EXPECT_NEAR((p.mtp_params + 2 * V * h) / 1e9, 14.0, 0.6);
  // Forward work per micro-batch: the layer's, the projection's 2 s (2 h^2) and the head's 2 s h V.
  EXPECT_NEAR(p.mtp[0].forward_flops, moe_layer.forward_flops + 2 * s * 2 * h * h + 2 * s * h * V,
              1e-12 * p.mtp[0].forward_flops);
  // The step computes it: flops_per_token grows by 3 x its forward per token.
  EXPECT_NEAR(p.flops_per_token - q.flops_per_token, 3 * p.mtp[0].forward_flops / s, 1e-9 * p.flops_per_token);
  // Kept for the backward: the layer's activations, the inputs of the two norms, of eh_proj (2h)
  // and of the final norm in bf16, and the fp32 logits.
  EXPECT_DOUBLE_EQ(p.mtp[0].activation_bytes, moe_layer.activation_bytes + s * 5 * h * 2 + 4 * s * V);
  // Per tp rank at tp 8 the projection is split by columns, the norms whole.
  const ModelProfile p8 = profile_model(*m.value, 8, int(s), 1);
  EXPECT_DOUBLE_EQ(p8.mtp[0].params, p8.layers[p8.layers.size() - 3].params + 2 * h * h / 8 + 3 * h);
  // A dense model's module is a dense layer.
  ModelSpec dense = bare;
  dense.moe = {};
  dense.mtp_layers = 2;
  const ModelProfile d = profile_model(dense, 1, int(s), 1);
  ASSERT_EQ(d.mtp.size(), 2u);
  EXPECT_DOUBLE_EQ(d.mtp[1].params, d.layers[1].params + 2 * h * h + 3 * h);
  EXPECT_EQ(d.mtp[1].name, "mtp.1");
}

}  // namespace
}  // namespace capplan
