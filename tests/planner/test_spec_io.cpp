// Spec loading: numbers as users write them, enum names, YAML and Hugging Face loaders, and one
// bad file per mistake under tests/data/bad/ (each must name file, line and key; nothing crashes).
#include <gtest/gtest.h>

#include <fstream>
#include <iterator>

#include <cmath>
#include <string>

#include "planner/spec_io.h"

using namespace capplan;

namespace {

std::string data(const std::string& rel) { return std::string(CAPPLAN_SOURCE_DIR) + "/tests/data/" + rel; }

// The first error, or a failure when there is none.
Diagnostic first_error(const Diagnostics& d) {
  for (const auto& item : d.items())
    if (item.severity == Severity::Error) return item;
  ADD_FAILURE() << "expected an error";
  return {};
}

}  // namespace

TEST(ParseNumber, AcceptsTheFormsUsersWrite) {
  // Expectation: scientific notation and B/T suffixes, as in `--tokens 300e9` or `300B`.
  EXPECT_DOUBLE_EQ(*parse_number("300e9"), 300e9);
  EXPECT_DOUBLE_EQ(*parse_number("300B"), 300e9);
  EXPECT_DOUBLE_EQ(*parse_number("1.3T"), 1.3e12);
  EXPECT_DOUBLE_EQ(*parse_number("2048"), 2048);
  EXPECT_DOUBLE_EQ(*parse_number("1_000_000"), 1e6);
  EXPECT_DOUBLE_EQ(*parse_number("-4"), -4);
  EXPECT_DOUBLE_EQ(*parse_number("32K"), 32e3);
}

TEST(ParseNumber, RejectsWhatIsNotAFiniteNumber) {
  for (const char* s : {"", "abc", "nan", ".nan", "inf", "1e999", "12abc", "0x10", "B"})
    EXPECT_FALSE(parse_number(s).has_value()) << s;
}

TEST(SpecEnums, RoundTripThroughTheirNames) {
  for (auto v : {Precision::Bf16, Precision::Fp16, Precision::Fp32})
    EXPECT_EQ(parse_precision(to_string(v)), v);
  for (auto v : {Recompute::None, Recompute::Selective, Recompute::Full})
    EXPECT_EQ(parse_recompute(to_string(v)), v);
  for (auto v : {Schedule::GPipe, Schedule::OneFOneB, Schedule::Interleaved})
    EXPECT_EQ(parse_schedule(to_string(v)), v);
  for (auto v : {Ffn::Gelu, Ffn::Swiglu}) EXPECT_EQ(parse_ffn(to_string(v)), v);
  for (auto v : {Norm::LayerNorm, Norm::RmsNorm}) EXPECT_EQ(parse_norm(to_string(v)), v);
  EXPECT_FALSE(parse_schedule("zigzag").has_value());
}

// Expectation: a layout's one-line summary names dp, tp, pp and mbs always, and the other knobs
// only where they leave their defaults (cp, ep, vp above 1, zero above 0, sel or full recompute,
// offload, sp, gpipe), with the separator the caller gives (the CLI a space, the GUI a dot).
TEST(LayoutSummary, NamesTheKnobsOffTheirDefaults) {
  Layout l;
  l.dp = 12;
  l.tp = 4;
  l.pp = 20;
  l.mbs = 1;
  EXPECT_EQ(layout_summary(l), "dp 12 tp 4 pp 20 mbs 1");
  l.cp = 2;
  l.ep = 4;
  l.vp = 2;
  l.zero = 1;
  l.recompute = Recompute::Selective;
  l.offload = true;
  l.sp = true;
  EXPECT_EQ(layout_summary(l), "dp 12 tp 4 pp 20 cp 2 ep 4 vp 2 mbs 1 z1 sel offload sp");
  l = Layout{};
  l.recompute = Recompute::Full;
  l.schedule = Schedule::GPipe;
  EXPECT_EQ(layout_summary(l, " | "), "dp 1 | tp 1 | pp 1 | mbs 1 | full | gpipe");
}

TEST(SpecEnums, OrderIsAPermutationOfDPTOrASageMakerName) {
  EXPECT_EQ(parse_order("DPT"), "DPT");
  EXPECT_EQ(parse_order("tpd"), "TPD");
  // SageMaker's placement_strategy: "cluster" packs TP ranks together (= DPT), "spread" = TPD.
  EXPECT_EQ(parse_order("cluster"), "DPT");
  EXPECT_EQ(parse_order("spread"), "TPD");
  EXPECT_FALSE(parse_order("DDT").has_value());
  EXPECT_FALSE(parse_order("DPTX").has_value());
}

TEST(ModelYaml, LoadsRequiredAndOptionalKeys) {
  const auto m = parse_model_yaml(
      "name: tiny\nlayers: 2\nhidden: 64\nheads: 4\nkv_heads: 2\nvocab: 100\nseq_len: 32\n"
      "ffn: swiglu\nffn_hidden: 172\nnorm: rmsnorm\ntied_embeddings: false\n",
      "tiny.yaml");
  ASSERT_TRUE(m.ok()) << m.diagnostics.to_string();
  EXPECT_EQ(m.value->layers, 2);
  EXPECT_EQ(m.value->kv_heads_or_default(), 2);
  EXPECT_EQ(m.value->ffn_hidden_or_default(), 172);
  EXPECT_EQ(m.value->ffn, Ffn::Swiglu);
  EXPECT_EQ(m.value->norm, Norm::RmsNorm);
  EXPECT_FALSE(m.value->tied_embeddings);
}

TEST(ModelYaml, DefaultsFollowTheSpec) {
  const auto m = parse_model_yaml("model:\n  name: t\n  layers: 1\n  hidden: 8\n  heads: 2\n"
                                  "  vocab: 10\n  seq_len: 4\n",
                                  "t.yaml");
  ASSERT_TRUE(m.ok()) << m.diagnostics.to_string();
  // Expectation: ffn_hidden 4*hidden, kv_heads = heads, tied embeddings, layernorm, gelu.
  EXPECT_EQ(m.value->ffn_hidden_or_default(), 32);
  EXPECT_EQ(m.value->kv_heads_or_default(), 2);
  EXPECT_TRUE(m.value->tied_embeddings);
  EXPECT_EQ(m.value->norm, Norm::LayerNorm);
  EXPECT_EQ(m.value->ffn, Ffn::Gelu);
}

TEST(ModelYaml, ReportsEveryProblemInOnePass) {
  const auto m = parse_model_yaml("name: x\nlayers: 0\nhidden: abc\nheads: -2\nvocab: 10\n"
                                  "seq_len: 4\ncolour: red\n",
                                  "x.yaml");
  EXPECT_FALSE(m.ok());
  EXPECT_FALSE(m.value.has_value());
  // Expectation: layers (line 2), hidden (3), heads (4) and the unknown key (7): four errors.
  ASSERT_EQ(m.diagnostics.items().size(), 4u) << m.diagnostics.to_string();
  EXPECT_EQ(m.diagnostics.items()[0].line, 2);
  EXPECT_EQ(m.diagnostics.items()[1].line, 3);
  EXPECT_EQ(m.diagnostics.items()[2].line, 4);
  EXPECT_EQ(m.diagnostics.items()[3].line, 7);
}

TEST(ModelHfJson, LoadsLlamaConfig) {
  const auto m = load_model(data("good/llama2-7b-config.json"));
  ASSERT_TRUE(m.ok()) << m.diagnostics.to_string();
  EXPECT_EQ(m.value->name, "Llama-2-7b-hf");
  EXPECT_EQ(m.value->layers, 32);
  EXPECT_EQ(m.value->hidden, 4096);
  EXPECT_EQ(m.value->ffn_hidden, 11008);
  EXPECT_EQ(m.value->seq_len, 4096);
  EXPECT_EQ(m.value->ffn, Ffn::Swiglu);
  EXPECT_EQ(m.value->norm, Norm::RmsNorm);
  EXPECT_EQ(m.value->position, PositionEmbedding::Rope);
  EXPECT_FALSE(m.value->tied_embeddings);
}

TEST(ModelHfJson, LoadsGpt2Config) {
  const auto m = load_model(data("good/gpt2-config.json"));
  ASSERT_TRUE(m.ok()) << m.diagnostics.to_string();
  EXPECT_EQ(m.value->layers, 12);
  EXPECT_EQ(m.value->hidden, 768);
  EXPECT_EQ(m.value->heads, 12);
  EXPECT_EQ(m.value->seq_len, 1024);
  EXPECT_EQ(m.value->ffn_hidden, 0);  // n_inner: null = 4 * hidden
  EXPECT_EQ(m.value->ffn, Ffn::Gelu);
  EXPECT_TRUE(m.value->tied_embeddings);
}

// Expectation: a Gemma config that does not say tie_word_embeddings is tied, as GemmaConfig's
// default is (Llama's is untied, above), and its head_dim of 256, which 16 heads make 4096 against
// hidden_size 3072, loads with a warning at that key saying what is costed instead.
TEST(ModelHfJson, GemmaTiesItsEmbeddingsAndKeepsItsHeadSize) {
  // Expectation: Gemma 7B's 16 heads are 256 wide (its config's head_dim), not 3072 / 16 = 192, so
  // its queries are 4096 wide; the embeddings stay tied (GemmaConfig's default). Nothing to warn of.
  const auto m = load_model(data("good/gemma-7b-config.json"));
  ASSERT_TRUE(m.ok()) << m.diagnostics.to_string();
  EXPECT_TRUE(m.value->tied_embeddings);
  EXPECT_EQ(m.value->ffn, Ffn::Swiglu);  // GeGLU: gate, up and down projections
  EXPECT_EQ(m.value->head_dim, 256);
  EXPECT_EQ(m.value->head_dim_or_default(), 256);
  EXPECT_EQ(m.value->attention_width(), 4096);
  EXPECT_TRUE(m.diagnostics.items().empty()) << m.diagnostics.to_string();
}

TEST(ModelHfJson, SlidingWindowsAsEachFamilyUsesThem) {
  // Expectation: Gemma 2 alternates local (4096 tokens) and global layers; Qwen3 carries no window
  // it uses (use_sliding_window false); a layer_types list whose full layers are not every k-th
  // (layers 1 and 5 of 6) is costed as every 3rd, said at its line.
  const auto g = load_model(data("good/gemma2-9b-config.json"));
  ASSERT_TRUE(g.ok()) << g.diagnostics.to_string();
  EXPECT_EQ(g.value->sliding_window, 4096);
  EXPECT_EQ(g.value->global_every, 2);
  EXPECT_DOUBLE_EQ(g.value->local_layer_share(8192), 0.5);
  EXPECT_DOUBLE_EQ(g.value->local_layer_share(4096), 0.0);  // the window covers the sequence
  const auto q = load_model(data("good/qwen3-32b-config.json"));
  ASSERT_TRUE(q.ok()) << q.diagnostics.to_string();
  EXPECT_EQ(q.value->sliding_window, 0);
  const auto t = load_model(data("good/hf-layer-types-config.json"));
  ASSERT_TRUE(t.ok()) << t.diagnostics.to_string();
  EXPECT_EQ(t.value->sliding_window, 128);
  EXPECT_EQ(t.value->global_every, 3);
  ASSERT_EQ(t.diagnostics.items().size(), 1u) << t.diagnostics.to_string();
  EXPECT_EQ(t.diagnostics.items()[0].severity, Severity::Warning);
  EXPECT_EQ(t.diagnostics.items()[0].line, 13);
  EXPECT_NE(t.diagnostics.items()[0].message.find("costed as one layer in 3 attending to the whole sequence (the file has 2 of 6)"), std::string::npos)
      << t.diagnostics.to_string();
  // Alternating layer types (sliding first, as gpt-oss has them) are every 2nd layer global,
  // nothing said.
  const auto alt = parse_model_hf_json(
      R"({"model_type": "llama", "hidden_size": 512, "num_attention_heads": 8, "num_hidden_layers": 4,
          "vocab_size": 1000, "max_position_embeddings": 4096, "hidden_act": "silu", "sliding_window": 128,
          "layer_types": ["sliding_attention", "full_attention", "sliding_attention", "full_attention"]})",
      "alt.json");
  ASSERT_TRUE(alt.ok()) << alt.diagnostics.to_string();
  EXPECT_EQ(alt.value->global_every, 2);
  EXPECT_TRUE(alt.diagnostics.items().empty()) << alt.diagnostics.to_string();
  // The window and its period round-trip through the YAML a plan file holds.
  const auto back = parse_model_yaml(model_to_yaml(*g.value), "roundtrip.yaml");
  ASSERT_TRUE(back.ok()) << back.diagnostics.to_string();
  EXPECT_EQ(back.value->sliding_window, 4096);
  EXPECT_EQ(back.value->global_every, 2);
}

TEST(ModelYaml, AHeadSizeApartFromHiddenOverHeadsRoundTrips) {
  // Expectation: head_dim 24 with hidden 64 and 4 heads loads (hidden need not be heads x
  // head_dim once head_dim is set), is written back, and reads back the same.
  const auto m = load_model(data("good/model_head_dim_apart.yaml"));
  ASSERT_TRUE(m.ok()) << m.diagnostics.to_string();
  EXPECT_EQ(m.value->head_dim, 24);
  EXPECT_EQ(m.value->attention_width(), 96);
  const std::string text = model_to_yaml(*m.value);
  EXPECT_NE(text.find("head_dim: 24"), std::string::npos) << text;
  const auto back = parse_model_yaml(text, "roundtrip.yaml");
  ASSERT_TRUE(back.ok()) << back.diagnostics.to_string();
  EXPECT_EQ(back.value->head_dim, 24);
  // Without head_dim the file writes none, and hidden / heads is the head size.
  const auto plain = load_model("llama2-7b");
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(model_to_yaml(*plain.value).find("head_dim"), std::string::npos);
  EXPECT_EQ(plain.value->head_dim_or_default(), 128);
}

TEST(ModelYaml, LatentAttentionRoundTrips) {
  // Expectation: the mla map loads, is written back as a map of the same five keys, and reads
  // back the same; the head sizes are the latent's (32 + 16 for queries and keys, 32 for values),
  // not hidden / heads; a head_dim beside it is refused at its line.
  const auto m = load_model(data("good/model_mla.yaml"));
  ASSERT_TRUE(m.ok()) << m.diagnostics.to_string();
  const MlaSpec& a = m.value->mla;
  EXPECT_EQ(a.kv_lora_rank, 32);
  EXPECT_EQ(a.q_lora_rank, 64);
  EXPECT_EQ(m.value->qk_head_dim(), 48);
  EXPECT_EQ(m.value->v_head_dim(), 32);
  EXPECT_DOUBLE_EQ(m.value->attention_core_width(), 4 * 40.0);
  const std::string text = model_to_yaml(*m.value);
  EXPECT_NE(text.find("\n  kv_lora_rank: 32\n  q_lora_rank: 64\n  qk_nope_head_dim: 32\n"), std::string::npos) << text;
  const auto back = parse_model_yaml(text, "roundtrip.yaml");
  ASSERT_TRUE(back.ok()) << back.diagnostics.to_string();
  EXPECT_EQ(back.value->mla.qk_rope_head_dim, 16);
  EXPECT_EQ(back.value->mla.v_head_dim, 32);
  EXPECT_EQ(model_to_yaml(*load_model("llama2-7b").value).find("mla"), std::string::npos);
  const auto both = parse_model_yaml(text + "head_dim: 64\n", "both.yaml");
  ASSERT_FALSE(both.ok());
  const Diagnostic d = first_error(both.diagnostics);
  EXPECT_EQ(d.path, "model.head_dim") << d.to_string();
  EXPECT_NE(d.message.find("not used with latent attention"), std::string::npos) << d.to_string();
}

TEST(ModelYaml, MultiTokenPredictionRoundTripsAndReadsFromHuggingFaceConfigs) {
  // Expectation: the DeepSeek-V3 preset trains one module (mtp_layers: 1), written back and read
  // back the same; a model without modules writes no key; a fraction or a depth over 1000 is
  // refused at its line; DeepSeek-V3's and GLM-4.5-Air's configs carry num_nextn_predict_layers 1,
  // and a negative one is named at its line.
  const auto v3 = load_model("deepseek-v3-671b");
  ASSERT_TRUE(v3.ok()) << v3.diagnostics.to_string();
  EXPECT_EQ(v3.value->mtp_layers, 1);
  EXPECT_EQ(v3.value->trained_layers(), 62);
  const std::string text = model_to_yaml(*v3.value);
  EXPECT_NE(text.find("\nmtp_layers: 1\n"), std::string::npos) << text;
  const auto back = parse_model_yaml(text, "roundtrip.yaml");
  ASSERT_TRUE(back.ok()) << back.diagnostics.to_string();
  EXPECT_EQ(back.value->mtp_layers, 1);
  EXPECT_EQ(model_to_yaml(*load_model("llama2-7b").value).find("mtp_layers"), std::string::npos);
  const std::string base = "name: m\nlayers: 4\nhidden: 256\nheads: 4\nvocab: 1000\nseq_len: 128\n";
  for (const char* bad : {"mtp_layers: 1.5\n", "mtp_layers: 5000\n"}) {
    const auto l = parse_model_yaml(base + bad, "m.yaml");
    ASSERT_FALSE(l.ok()) << bad;
    const Diagnostic d = first_error(l.diagnostics);
    EXPECT_EQ(d.path, "model.mtp_layers") << d.to_string();
    EXPECT_EQ(d.line, 7) << d.to_string();
  }
  for (const char* f : {"good/hf-moe/deepseek-v3-config.json", "good/hf-moe/glm-4.5-air-config.json"}) {
    const auto hf = load_model(data(f));
    ASSERT_TRUE(hf.ok()) << f << hf.diagnostics.to_string();
    EXPECT_EQ(hf.value->mtp_layers, 1) << f;
  }
  const auto neg = parse_model_hf_json(
      "{\"model_type\": \"llama\", \"num_hidden_layers\": 4, \"hidden_size\": 256,\n"
      "\"num_attention_heads\": 4, \"vocab_size\": 1000, \"max_position_embeddings\": 128,\n"
      "\"num_nextn_predict_layers\": -1}",
      "config.json");
  ASSERT_FALSE(neg.ok());
  const Diagnostic d = first_error(neg.diagnostics);
  EXPECT_EQ(d.path, "num_nextn_predict_layers") << d.to_string();
  EXPECT_EQ(d.line, 3) << d.to_string();
}

TEST(ModelHfJson, Llama4ChunkedAttentionTakesItsGlobalLayersFromTheConfig) {
  // Expectation: attention_chunk_size is attention_chunk; the no_rope_layers list's 0s (the
  // layers that attend to the whole sequence) give global_every, 3 for [1, 1, 0] repeated; a list
  // whose 0s do not recur with one period is said at its line and costed at the mean period; a
  // window and chunks together are refused.
  auto config = [](const std::string& flags) {
    return "{\"model_type\": \"llama4_text\", \"num_hidden_layers\": 6, \"hidden_size\": 256,\n"
           "\"num_attention_heads\": 4, \"vocab_size\": 1000, \"max_position_embeddings\": 4096,\n"
           "\"num_local_experts\": 4, \"num_experts_per_tok\": 1, \"attention_chunk_size\": 1024,\n"
           "\"no_rope_layers\": " + flags + "}";
  };
  const auto periodic = parse_model_hf_json(config("[1, 1, 0, 1, 1, 0]"), "config.json");
  ASSERT_TRUE(periodic.ok()) << periodic.diagnostics.to_string();
  EXPECT_EQ(periodic.value->attention_chunk, 1024);
  EXPECT_EQ(periodic.value->global_every, 3);
  EXPECT_TRUE(periodic.diagnostics.items().empty()) << periodic.diagnostics.to_string();
  const auto irregular = parse_model_hf_json(config("[1, 0, 1, 1, 1, 0]"), "config.json");
  ASSERT_TRUE(irregular.ok()) << irregular.diagnostics.to_string();
  EXPECT_EQ(irregular.value->global_every, 3);
  bool said = false;
  for (const Diagnostic& d : irregular.diagnostics.items())
    said |= d.severity == Severity::Warning && d.path == "no_rope_layers" && d.line == 4;
  EXPECT_TRUE(said) << irregular.diagnostics.to_string();
  const auto both = parse_model_hf_json(config("[1, 1, 0, 1, 1, 0], \"sliding_window\": 512"), "config.json");
  ASSERT_FALSE(both.ok());
  EXPECT_EQ(first_error(both.diagnostics).path, "attention_chunk_size") << both.diagnostics.to_string();
  EXPECT_EQ(first_error(both.diagnostics).line, 3) << both.diagnostics.to_string();
}

TEST(ModelHfJson, DeepSeekConfigsCarryTheirLatentAttention) {
  // Expectation: DeepSeek-V3's config gives its latent ranks and head sizes; DeepSeek-V2-Lite's
  // null q_lora_rank means queries straight from the hidden state (0); an odd rotary part is an
  // error at its line, named as the file names it.
  const auto v3 = load_model(data("good/hf-moe/deepseek-v3-config.json"));
  ASSERT_TRUE(v3.ok()) << v3.diagnostics.to_string();
  EXPECT_EQ(v3.value->mla.kv_lora_rank, 512);
  EXPECT_EQ(v3.value->mla.q_lora_rank, 1536);
  EXPECT_EQ(v3.value->qk_head_dim(), 192);
  EXPECT_EQ(v3.value->v_head_dim(), 128);
  EXPECT_EQ(v3.value->head_dim, 0);
  const auto lite = load_model(data("good/hf-moe/deepseek-v2-lite-config.json"));
  ASSERT_TRUE(lite.ok()) << lite.diagnostics.to_string();
  EXPECT_EQ(lite.value->mla.q_lora_rank, 0);
  EXPECT_EQ(lite.value->mla.kv_lora_rank, 512);
  std::ifstream in(data("good/hf-moe/deepseek-v2-lite-config.json"));
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::string rope = "\"qk_rope_head_dim\": 64";
  const size_t at = text.find(rope);
  ASSERT_NE(at, std::string::npos);
  text.replace(at, rope.size(), "\"qk_rope_head_dim\": 63");
  const auto odd = parse_model_hf_json(text, "odd-config.json");
  ASSERT_FALSE(odd.ok());
  const Diagnostic d = first_error(odd.diagnostics);
  EXPECT_EQ(d.path, "qk_rope_head_dim") << d.to_string();
  EXPECT_EQ(d.line, 21) << d.to_string();
  EXPECT_NE(d.message.find("must be even"), std::string::npos) << d.to_string();
}

TEST(ModelHfJson, AContextExtensionTrainsAtThePreTrainingSequence) {
  // Expectation: Llama 3.1 8B's config serves 131072 tokens through a llama3 rope scaling of its
  // 8192-token pre-training: the model's sequence is 8192, with a warning at the key that names
  // both lengths; the same file without the scaling keeps max_position_embeddings.
  const auto m = load_model(data("good/llama3.1-8b-config.json"));
  ASSERT_TRUE(m.ok()) << m.diagnostics.to_string();
  EXPECT_EQ(m.value->seq_len, 8192);
  ASSERT_EQ(m.diagnostics.items().size(), 1u) << m.diagnostics.to_string();
  const Diagnostic& w = m.diagnostics.items().front();
  EXPECT_EQ(w.severity, Severity::Warning);
  EXPECT_EQ(w.path, "rope_scaling.original_max_position_embeddings") << w.to_string();
  EXPECT_EQ(w.line, 20) << w.to_string();
  EXPECT_NE(w.message.find("max_position_embeddings 131072"), std::string::npos) << w.to_string();
  std::ifstream in(data("good/llama3.1-8b-config.json"));
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t from = text.find("  \"rope_scaling\"");
  const size_t to = text.find("},\n", from) + 3;
  ASSERT_NE(from, std::string::npos);
  text.erase(from, to - from);
  const auto plain = parse_model_hf_json(text, "config.json");
  ASSERT_TRUE(plain.ok()) << plain.diagnostics.to_string();
  EXPECT_EQ(plain.value->seq_len, 131072);
  EXPECT_TRUE(plain.diagnostics.empty()) << plain.diagnostics.to_string();
}

TEST(ModelHfJson, AMultimodalConfigPlansItsLanguageModel) {
  // Expectation: Gemma 3 27B's config nests its language model under text_config (62 layers of
  // 5376, 32 heads of 128, a 1024-token window with every 6th layer global); that is the model,
  // named after the root's _name_or_path, with a warning at text_config that the vision tower is not
  // counted; a mistake inside it is named under text_config at its line.
  const auto m = load_model(data("good/gemma-3-27b-multimodal-config.json"));
  ASSERT_TRUE(m.ok()) << m.diagnostics.to_string();
  EXPECT_EQ(m.value->name, "gemma-3-27b-it");
  EXPECT_EQ(m.value->layers, 62);
  EXPECT_EQ(m.value->hidden, 5376);
  EXPECT_EQ(m.value->head_dim, 128);
  EXPECT_EQ(m.value->sliding_window, 1024);
  EXPECT_EQ(m.value->global_every, 6);
  EXPECT_TRUE(m.value->tied_embeddings);
  ASSERT_EQ(m.diagnostics.items().size(), 1u) << m.diagnostics.to_string();
  EXPECT_EQ(m.diagnostics.items().front().path, "text_config");
  EXPECT_EQ(m.diagnostics.items().front().line, 9);
  std::ifstream in(data("good/gemma-3-27b-multimodal-config.json"));
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::string heads = "\"num_attention_heads\": 32";
  text.replace(text.find(heads), heads.size(), "\"num_attention_heads\": 0");
  const auto bad = parse_model_hf_json(text, "config.json");
  ASSERT_FALSE(bad.ok());
  const Diagnostic d = first_error(bad.diagnostics);
  EXPECT_EQ(d.path, "text_config.num_attention_heads") << d.to_string();
  EXPECT_EQ(d.line, 15) << d.to_string();
}

TEST(ClusterYaml, OnlyTheRequiredKeysWork) {
  const auto c = load_cluster(data("good/cluster_minimal.yaml"));
  ASSERT_TRUE(c.ok()) << c.diagnostics.to_string();
  EXPECT_EQ(c.value->gpus_per_node, 4);
  EXPECT_EQ(c.value->gpu.name, "V100-SXM2-32GB");
  EXPECT_DOUBLE_EQ(c.value->gpu.memory_gib, 32);
  EXPECT_DOUBLE_EQ(c.value->price_per_node_hour_usd, 0);  // unknown
}

TEST(ClusterYaml, InlineGpuAndEfficiencyOverrides) {
  const auto c = load_cluster(data("good/cluster_inline_gpu.yaml"));
  ASSERT_TRUE(c.ok()) << c.diagnostics.to_string();
  EXPECT_EQ(c.value->gpu.name, "MyGPU-24GB");
  EXPECT_DOUBLE_EQ(c.value->gpu.peak_tflops(Precision::Bf16), 71);
  ASSERT_TRUE(c.value->efficiency.gemm.has_value());
  EXPECT_DOUBLE_EQ(*c.value->efficiency.gemm, 0.6);
  EXPECT_FALSE(c.value->efficiency.memory.has_value());
}

TEST(ValidateModel, ChecksDivisibility) {
  ModelSpec m;
  m.name = "m";
  m.layers = 2;
  m.hidden = 100;
  m.heads = 3;
  m.vocab = 10;
  m.seq_len = 8;
  m.kv_heads = 2;
  Diagnostics d;
  validate_model(m, "<gui>", d);
  // Expectation: heads 3 does not divide hidden 100; kv_heads 2 does not divide heads 3.
  ASSERT_EQ(d.items().size(), 2u) << d.to_string();
  EXPECT_EQ(d.items()[0].path, "model.heads");
  EXPECT_EQ(d.items()[1].path, "model.kv_heads");
}

// One bad file per mistake: the first error names the file, the line and the key.
struct BadCase {
  const char* file;
  bool cluster;
  int line;
  const char* path;     // key path in the diagnostic
  const char* message;  // part of message or hint
};

class BadFile : public ::testing::TestWithParam<BadCase> {};

TEST_P(BadFile, NamesFileLineAndKey) {
  const BadCase& c = GetParam();
  const std::string path = data(std::string("bad/") + c.file);
  Diagnostics diags;
  if (c.cluster) {
    const auto l = load_cluster(path);
    EXPECT_FALSE(l.ok());
    diags = l.diagnostics;
  } else {
    const auto l = load_model(path);
    EXPECT_FALSE(l.ok());
    diags = l.diagnostics;
  }
  const Diagnostic d = first_error(diags);
  EXPECT_EQ(d.file, path);
  EXPECT_EQ(d.line, c.line) << d.to_string();
  EXPECT_GT(d.column, 0) << d.to_string();
  EXPECT_EQ(d.path, c.path) << d.to_string();
  EXPECT_NE(d.to_string().find(c.message), std::string::npos) << d.to_string();
}

INSTANTIATE_TEST_SUITE_P(
    OnePerMistake, BadFile,
    ::testing::Values(
        BadCase{"model_malformed.yaml", false, 3, "", "malformed YAML"},
        BadCase{"model_unknown_key.yaml", false, 1, "model.hidden", "missing required key"},
        BadCase{"model_missing_key.yaml", false, 1, "model.heads", "missing required key"},
        BadCase{"model_wrong_type.yaml", false, 2, "model.layers", "expected a number, found 'twelve'"},
        BadCase{"model_zero.yaml", false, 4, "model.heads", "must be > 0, found 0"},
        BadCase{"model_negative.yaml", false, 3, "model.hidden", "must not be negative, found -768"},
        BadCase{"model_huge.yaml", false, 2, "model.layers", "too large"},
        BadCase{"model_heads_not_dividing.yaml", false, 4, "model.heads", "must divide hidden (768)"},
        BadCase{"model_head_dim_zero.yaml", false, 5, "model.head_dim", "must be > 0"},
        BadCase{"model_global_every_without_window.yaml", false, 7, "model.global_every", "needs sliding_window"},
        BadCase{"model_mla_no_value_head.yaml", false, 8, "model.mla.v_head_dim", "missing required key"},
        BadCase{"model_mla_grouped.yaml", false, 5, "model.kv_heads", "must equal heads (4) with latent attention"},
        BadCase{"model_chunk_and_window.yaml", false, 8, "model.attention_chunk", "not used with sliding_window"},
        BadCase{"model_mtp_negative.yaml", false, 7, "model.mtp_layers", "must not be negative, found -1"},
        BadCase{"model_moe_top_k.yaml", false, 9, "model.moe.top_k", "must be <= experts (4), found 6"},
        BadCase{"model_moe_capacity.yaml", false, 10, "model.moe.capacity_factor", "must be >= 1 or 0"},
        BadCase{"cluster_nan.yaml", true, 5, "cluster.inter_node_gbit_per_s", "finite number"},
        BadCase{"cluster_unknown_gpu.yaml", true, 3, "cluster.gpu", "did you mean 'A100-SXM4-40GB'?"},
        BadCase{"hf_config_bad.json", false, 3, "num_hidden_layers", "found 'thirty-two'"}));

TEST(FrameworkYaml, TheDefaultStackIsTheMegatronLmPreset) {
  // Expectation: a scenario that names no framework is costed with the megatron-lm preset itself,
  // every field (the band's spread included), so that a plan costs the same before and after it
  // is saved (the plan file names the framework, and reading it loads the preset).
  Loaded<FrameworkSpec> preset = load_framework("megatron-lm");
  ASSERT_TRUE(preset.ok()) << preset.diagnostics.to_string();
  FrameworkSpec def;
  EXPECT_EQ(def.residual_spread, preset.value->residual_spread);
  EXPECT_EQ(def.allocator_margin, preset.value->allocator_margin);
  def.source = preset.value->source;
  EXPECT_TRUE(def == *preset.value) << "FrameworkSpec's defaults differ from configs/frameworks/megatron-lm.yaml";
}

TEST(BadFile, FrameworkEnumNamesLineAndChoices) {
  // Expectation: an unknown value of a framework preset's enumeration (here DeepSpeed's ZeRO-3
  // collectives) is an error at its line that lists the values there are.
  const auto l = parse_framework_yaml("name: my-deepspeed\nzero3_comm: rank-share\nzero3_collectives: params\n",
                                      "my-deepspeed.yaml");
  EXPECT_FALSE(l.ok());
  const Diagnostic d = first_error(l.diagnostics);
  EXPECT_EQ(d.file, "my-deepspeed.yaml");
  EXPECT_EQ(d.line, 3) << d.to_string();
  EXPECT_NE(d.to_string().find("zero3_collectives"), std::string::npos) << d.to_string();
  EXPECT_NE(d.to_string().find("module, tensor"), std::string::npos) << d.to_string();
  const auto ok = parse_framework_yaml("name: my-deepspeed\nzero3_collectives: tensor\n", "my-deepspeed.yaml");
  ASSERT_TRUE(ok.ok()) << ok.diagnostics.to_string();
  EXPECT_EQ(ok.value->zero3_collectives, Zero3Collectives::Tensor);
}

TEST(BadFile, FrameworkLayoutListsNameLineAndChoices) {
  // Expectation: the lists of what an implementation has (ZeRO stages, pipeline schedules) read
  // back as written; a value outside them, a repeated one, an empty list or a scalar is an error
  // at its line naming the key and the values there are.
  const auto ok = parse_framework_yaml("name: my-fsdp\ntensor_parallel: false\nzero_stages: [0, 3]\n"
                                       "schedules: [gpipe]\nactivation_offload: false\n",
                                       "my-fsdp.yaml");
  ASSERT_TRUE(ok.ok()) << ok.diagnostics.to_string();
  EXPECT_FALSE(ok.value->tensor_parallel);
  EXPECT_TRUE(ok.value->pipeline_parallel);
  EXPECT_FALSE(ok.value->activation_offload);
  EXPECT_TRUE(ok.value->has_zero(0) && ok.value->has_zero(3));
  EXPECT_FALSE(ok.value->has_zero(1) || ok.value->has_zero(2));
  EXPECT_TRUE(ok.value->has_schedule(Schedule::GPipe));
  EXPECT_FALSE(ok.value->has_schedule(Schedule::OneFOneB) || ok.value->has_schedule(Schedule::Interleaved));
  struct Bad {
    const char* text;
    int line;
    const char* says;
  };
  for (const Bad& b : {Bad{"name: f\nzero_stages: [0, 4]\n", 2, "zero_stages: expected one of 0, 1, 2, 3, found '4'"},
                       Bad{"name: f\nzero_stages:\n  - 0\n  - 0\n", 4, "zero_stages: '0' is listed twice"},
                       Bad{"name: f\nschedules: []\n", 2, "schedules: expected a non-empty list of gpipe, 1f1b, interleaved"},
                       Bad{"name: f\nschedules: 1f1b\n", 2, "schedules: expected a non-empty list"},
                       Bad{"name: f\nschedules: [1f1b, zero-bubble]\n", 2, "found 'zero-bubble'"}}) {
    const auto l = parse_framework_yaml(b.text, "f.yaml");
    EXPECT_FALSE(l.ok()) << b.text;
    const Diagnostic d = first_error(l.diagnostics);
    EXPECT_EQ(d.file, "f.yaml");
    EXPECT_EQ(d.line, b.line) << d.to_string();
    EXPECT_NE(d.to_string().find(b.says), std::string::npos) << d.to_string();
  }
}

TEST(BadFile, FlashKernelAndItsFiguresNameLineAndChoices) {
  // Expectation: a framework names the FlashAttention kernel it calls (fa1, fa2, fa3, cudnn; fa2
  // when it says nothing); another name is an error at its line listing the four. A GPU's kernel
  // figures are fractions of peak: above 1 or negative is an error naming the key.
  const auto te = parse_framework_yaml("name: te\nattention: flash\nflash_kernel: cudnn\n", "te.yaml");
  ASSERT_TRUE(te.ok()) << te.diagnostics.to_string();
  EXPECT_EQ(te.value->flash_kernel, FlashKernel::Cudnn);
  const auto plain = parse_framework_yaml("name: plain\n", "plain.yaml");
  ASSERT_TRUE(plain.ok()) << plain.diagnostics.to_string();
  EXPECT_EQ(plain.value->flash_kernel, FlashKernel::Fa2);
  const auto first = parse_framework_yaml("name: first\nattention: flash\nflash_kernel: fa1\n", "first.yaml");
  ASSERT_TRUE(first.ok()) << first.diagnostics.to_string();
  EXPECT_EQ(first.value->flash_kernel, FlashKernel::Fa1);
  const auto bad = parse_framework_yaml("name: f\nflash_kernel: fa4\n", "f.yaml");
  ASSERT_FALSE(bad.ok());
  const Diagnostic d = first_error(bad.diagnostics);
  EXPECT_EQ(d.file, "f.yaml");
  EXPECT_EQ(d.line, 2) << d.to_string();
  EXPECT_NE(d.to_string().find("flash_kernel"), std::string::npos) << d.to_string();
  EXPECT_NE(d.to_string().find("fa1, fa2, fa3, cudnn"), std::string::npos) << d.to_string();
  const std::string gpu = "cluster:\n  name: c\n  gpus_per_node: 8\n  intra_node_gbyte_per_s: 300\n"
                          "  inter_node_gbit_per_s: 400\n  gpu:\n    name: g\n    memory_gib: 80\n"
                          "    memory_gbyte_per_s: 2000\n    peak_tflops: {fp16: 312}\n"
                          "    flash_peak_fraction: 0.7\n";
  ASSERT_TRUE(parse_cluster_yaml(gpu, "c.yaml").ok()) << parse_cluster_yaml(gpu, "c.yaml").diagnostics.to_string();
  for (const char* key : {"fa3_peak_fraction", "cudnn_attention_peak_fraction"}) {
    for (const char* value : {"1.5", "-0.1", ".nan"}) {
      const auto c = parse_cluster_yaml(gpu + "    " + key + ": " + value + "\n", "c.yaml");
      EXPECT_FALSE(c.ok()) << key << " " << value;
      const Diagnostic e = first_error(c.diagnostics);
      EXPECT_EQ(e.line, 12) << e.to_string();
      EXPECT_NE(e.to_string().find(key), std::string::npos) << e.to_string();
    }
  }
  // A cluster's override of the figure: a fraction as well.
  const std::string over = "cluster:\n  name: c\n  gpus_per_node: 8\n  intra_node_gbyte_per_s: 300\n"
                           "  inter_node_gbit_per_s: 400\n  gpu: H100-SXM5-80GB\n  efficiency:\n    flash: 1.5\n";
  const auto c = parse_cluster_yaml(over, "c.yaml");
  ASSERT_FALSE(c.ok());
  const Diagnostic e = first_error(c.diagnostics);
  EXPECT_EQ(e.line, 8) << e.to_string();
  EXPECT_NE(e.to_string().find("efficiency.flash"), std::string::npos) << e.to_string();
}

TEST(BadFile, UnknownKeyGetsDidYouMean) {
  const auto m = load_model(data("bad/model_unknown_key.yaml"));
  bool found = false;
  for (const auto& d : m.diagnostics.items()) {
    if (d.path == "model.hiden") {
      found = true;
      EXPECT_EQ(d.line, 3);
      EXPECT_EQ(d.column, 1);
      EXPECT_EQ(d.hint, "did you mean 'hidden'?");
    }
  }
  EXPECT_TRUE(found) << m.diagnostics.to_string();
}

TEST(BadFile, HfConfigReportsTypeAndMissingKeyTogether) {
  const auto m = load_model(data("bad/hf_config_bad.json"));
  // Expectation: num_hidden_layers is a word (line 3) and hidden_size is missing: two errors.
  ASSERT_EQ(m.diagnostics.items().size(), 2u) << m.diagnostics.to_string();
  EXPECT_EQ(m.diagnostics.items()[1].path, "hidden_size");
}

TEST(BadRef, UnknownPresetSuggestsTheClosest) {
  const auto m = load_model("gpt3-176b");
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(first_error(m.diagnostics).hint, "did you mean 'gpt3-175b'?");
}

TEST(BadRef, MissingFileIsNamed) {
  const std::string path = data("bad/does-not-exist.yaml");
  const auto c = load_cluster(path);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(first_error(c.diagnostics).file, path);
  EXPECT_NE(first_error(c.diagnostics).message.find("no such file"), std::string::npos);
}

TEST(BadRef, EmptyAndNonMapFilesAreErrorsNotCrashes) {
  EXPECT_FALSE(parse_model_yaml("", "empty.yaml").ok());
  EXPECT_FALSE(parse_model_yaml("- a\n- b\n", "list.yaml").ok());
  EXPECT_FALSE(parse_cluster_yaml("just text", "text.yaml").ok());
  EXPECT_FALSE(parse_model_hf_json("{", "cut.json").ok());
  EXPECT_FALSE(parse_model_yaml("name: [a, b]\nlayers: {x: 1}\n", "types.yaml").ok());
}

TEST(ModelYaml, DuplicateKeyIsAnError) {
  const auto m = parse_model_yaml(
      "name: d\nlayers: 2\nhidden: 8\nheads: 2\nvocab: 10\nseq_len: 4\nlayers: 3\n", "d.yaml");
  ASSERT_FALSE(m.ok());
  ASSERT_EQ(m.diagnostics.items().size(), 1u) << m.diagnostics.to_string();
  EXPECT_EQ(m.diagnostics.items()[0].path, "model.layers");
  EXPECT_EQ(m.diagnostics.items()[0].line, 7);
}
