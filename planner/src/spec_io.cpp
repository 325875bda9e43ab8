// Loads model, GPU and cluster specs from YAML files, Hugging Face config.json files and embedded
// presets, reporting every problem in one pass with file:line:col and key path. Semantic checks
// (heads divides hidden, ...) are here too; layout constraints are check_layout() (cost_model.h).
#include "planner/spec_io.h"

#include "planner/limits.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <initializer_list>
#include <sstream>

#include "planner/catalog.h"
#include "yaml_reader.h"

namespace capplan {

using detail::Limits;
using detail::MapReader;
using detail::Position;

namespace {

// Ranges accepted for user input. The upper bounds are far beyond any real model or machine; they
// only catch typos (an extra zero, a value in the wrong unit) and overflow.
constexpr Limits kLayers{0, true, 1e5};
constexpr Limits kMtpLayers{0, false, 1e3};  // multi-token prediction depths (DeepSeek-V3: 1)
constexpr Limits kHidden{0, true, 1e7};
constexpr Limits kHeads{0, true, 1e5};
constexpr Limits kVocab{0, true, 1e9};
constexpr Limits kSeq{0, true, 1e8};
constexpr Limits kFfn{0, true, 1e8};
constexpr Limits kGpusPerNode{0, true, 1024};
// Physical figures have a floor as well as a ceiling: values such as 1e-300 pass "> 0" but make
// every time infinite.
constexpr Limits kGib{1.0 / 1024, false, 1e5};  // at least 1 MiB
constexpr Limits kTflops{1e-3, false, 1e6};  // at least 1 GFLOP/s
constexpr Limits kTflopsOptional{0, false, 1e6, 1e-3};  // 0 = not supported / unknown
constexpr Limits kGbytePerS{1e-3, false, 1e6};  // at least 1 MB/s
constexpr Limits kGbitPerS{1e-3, false, 1e7};  // at least 1 Mbit/s
constexpr Limits kNonNegative{0, false, 1e7};
constexpr Limits kNonNegativeRate{0, false, 1e6, 1e-3};     // 0 = the default; else >= 1 MB/s
constexpr Limits kNonNegativeGib{0, false, 1e7, 1.0 / 1024};  // 0 = unknown; else >= 1 MiB
constexpr Limits kFraction{1e-3, false, 1};  // an efficiency: 0.1 % to 100 %

std::vector<std::string> names_of(const std::vector<CatalogEntry>& entries) {
  std::vector<std::string> out;
  for (const auto& e : entries) out.push_back(e.name);
  return out;
}

std::string join(const std::vector<std::string>& v) {
  std::string out;
  for (size_t i = 0; i < v.size(); ++i) {
    if (i) out += ", ";
    out += v[i];
  }
  return out;
}

bool looks_like_path(const std::string& ref) {
  if (ref.find('/') != std::string::npos) return true;
  for (const char* ext : {".yaml", ".yml", ".json"}) {
    const std::string e = ext;
    if (ref.size() > e.size() && ref.compare(ref.size() - e.size(), e.size(), e) == 0) return true;
  }
  return false;
}

// Position of a key for semantic checks, when the spec came from a file.
Position pos(const MapReader* r, const std::string& key) { return r ? r->where(key) : Position{}; }

// The mixture-of-experts rules; `err(key, message, hint)` reports at the key (under "moe.").
template <class Err>
void validate_moe(const ModelSpec& m, Err&& err) {
  const MoeSpec& e = m.moe;
  const bool any = e.experts != 0 || e.top_k != 0 || e.expert_ffn_hidden != 0 ||
                   e.shared_experts != 0 || e.capacity_factor != 0 || e.first_dense_layers != 0;
  if (!any) return;
  if (e.experts <= 0) {
    err("moe.experts", "must be > 0, found " + std::to_string(e.experts),
        "an MoE model needs its routed experts; remove the moe section for a dense model");
    return;
  }
  if (e.top_k < 0) err("moe.top_k", "must be > 0, found " + std::to_string(e.top_k));
  if (e.top_k > e.experts)
    err("moe.top_k", "must be <= experts (" + std::to_string(e.experts) + "), found " +
                         std::to_string(e.top_k),
        "the router picks top_k of the experts for every token");
  if (e.expert_ffn_hidden < 0)
    err("moe.expert_ffn_hidden", "must be > 0, found " + std::to_string(e.expert_ffn_hidden));
  if (e.shared_experts < 0)
    err("moe.shared_experts", "must be >= 0, found " + std::to_string(e.shared_experts));
  if (!(e.capacity_factor >= 0) || !std::isfinite(e.capacity_factor))
    err("moe.capacity_factor", "must be >= 0 (0 = dropless), found " + detail::yaml_number(e.capacity_factor));
  else if (e.capacity_factor > 0 && e.capacity_factor < 1)
    err("moe.capacity_factor",
        "must be >= 1 or 0 (dropless), found " + detail::yaml_number(e.capacity_factor),
        "below 1 an expert cannot take even its average share of the tokens");
  if (e.moe_layer_freq < 1)
    err("moe.moe_layer_freq", "must be >= 1, found " + std::to_string(e.moe_layer_freq));
  if (e.first_dense_layers < 0)
    err("moe.first_dense_layers", "must be >= 0, found " + std::to_string(e.first_dense_layers));
  else if (m.layers > 0 && e.first_dense_layers >= m.layers)
    err("moe.first_dense_layers", "must be < layers (" + std::to_string(m.layers) + "), found " +
                                      std::to_string(e.first_dense_layers),
        "at least one layer must have experts");
}

// The latent-attention rules; `err(key, message, hint)` reports at the key (under "mla.").
template <class Err>
void validate_mla(const ModelSpec& m, Err&& err) {
  const MlaSpec& a = m.mla;
  if (!a.enabled()) return;
  if (a.qk_nope_head_dim <= 0)
    err("mla.qk_nope_head_dim", "must be > 0, found " + std::to_string(a.qk_nope_head_dim));
  if (a.v_head_dim <= 0) err("mla.v_head_dim", "must be > 0, found " + std::to_string(a.v_head_dim));
  if (a.q_lora_rank < 0) err("mla.q_lora_rank", "must be >= 0 (0: no query latent), found " + std::to_string(a.q_lora_rank));
  if (a.qk_rope_head_dim < 0) err("mla.qk_rope_head_dim", "must be >= 0, found " + std::to_string(a.qk_rope_head_dim));
  if (m.position == PositionEmbedding::Rope && a.qk_rope_head_dim % 2 != 0)
    err("mla.qk_rope_head_dim", "must be even with rotary positions, found " + std::to_string(a.qk_rope_head_dim),
        "rotary embeddings rotate pairs of features");
  if (m.kv_heads > 0 && m.kv_heads != m.heads)
    err("kv_heads", "must equal heads (" + std::to_string(m.heads) + ") with latent attention, found " +
                        std::to_string(m.kv_heads),
        "latent attention up-projects keys and values for every head; drop kv_heads");
  if (m.head_dim > 0)
    err("head_dim", "is not used with latent attention",
        "the head sizes are mla.qk_nope_head_dim + mla.qk_rope_head_dim (queries, keys) and mla.v_head_dim; drop head_dim");
}

// `moe_r` and `mla_r` read the moe and mla maps (positions of the moe.* and mla.* keys), when
// there are; a Hugging Face config has the mla keys at its top level.
void validate_model_impl(const ModelSpec& m, const std::string& file, Diagnostics& out,
                         const MapReader* r, const std::string& prefix,
                         const MapReader* moe_r = nullptr, const MapReader* mla_r = nullptr) {
  auto err = [&](const std::string& key, const std::string& msg, const std::string& hint = {}) {
    const bool in_moe = key.compare(0, 4, "moe.") == 0;
    const bool in_mla = key.compare(0, 4, "mla.") == 0;
    if (in_mla && !mla_r && r && r->has(key.substr(4))) {  // a Hugging Face config's own key
      const Position p = r->where(key.substr(4));
      out.error(file, p.line, p.column, prefix + key.substr(4), msg, hint);
      return;
    }
    const Position p = in_moe && moe_r   ? moe_r->where(key.substr(4))
                       : in_moe          ? pos(r, "moe")
                       : in_mla && mla_r ? mla_r->where(key.substr(4))
                       : in_mla          ? pos(r, "mla")
                                         : pos(r, key);
    out.error(file, p.line, p.column, prefix + key, msg, hint);
  };
  auto positive = [&](const char* key, long long v) {
    if (v <= 0) err(key, "must be > 0, found " + std::to_string(v));
  };
  if (m.name.empty()) err("name", "must not be empty");
  positive("layers", m.layers);
  positive("hidden", m.hidden);
  positive("heads", m.heads);
  positive("vocab", m.vocab);
  positive("seq_len", m.seq_len);
  if (m.ffn_hidden < 0) err("ffn_hidden", "must be > 0, found " + std::to_string(m.ffn_hidden));
  if (m.kv_heads < 0) err("kv_heads", "must be > 0, found " + std::to_string(m.kv_heads));
  if (m.head_dim < 0) err("head_dim", "must be > 0, found " + std::to_string(m.head_dim));
  if (m.global_every > 0 && m.sliding_window <= 0 && m.attention_chunk <= 0)
    err("global_every", "needs sliding_window or attention_chunk: it says which layers attend beyond the window",
        "set sliding_window or attention_chunk (tokens), or drop global_every");
  if (m.sliding_window > 0 && m.attention_chunk > 0)
    err("attention_chunk", "not used with sliding_window: a local layer attends within a window or within chunks",
        "keep one of sliding_window and attention_chunk");
  if (m.head_dim == 0 && !m.mla.enabled() && m.hidden > 0 && m.heads > 0 && m.hidden % m.heads != 0)
    err("heads", "must divide hidden (" + std::to_string(m.hidden) + "), found " +
                     std::to_string(m.heads),
        "head size = hidden / heads must be a whole number, or set head_dim");
  if (m.heads > 0 && m.kv_heads > 0) {
    if (m.kv_heads > m.heads)
      err("kv_heads", "must be <= heads (" + std::to_string(m.heads) + "), found " +
                          std::to_string(m.kv_heads));
    else if (m.heads % m.kv_heads != 0)
      err("kv_heads", "must divide heads (" + std::to_string(m.heads) + "), found " +
                          std::to_string(m.kv_heads),
          "grouped-query attention shares each key/value head among heads / kv_heads query heads");
  }
  validate_moe(m, err);
  validate_mla(m, err);
}

void validate_gpu_impl(const GpuSpec& g, const std::string& file, Diagnostics& out,
                       const MapReader* r, const std::string& prefix) {
  auto err = [&](const std::string& key, const std::string& msg) {
    const Position p = pos(r, key);
    out.error(file, p.line, p.column, prefix + key, msg);
  };
  if (g.name.empty()) err("name", "must not be empty");
  if (!(g.memory_gib > 0)) err("memory_gib", "must be > 0");
  if (!(g.peak_tflops_fp16 > 0) && !(g.peak_tflops_bf16 > 0))
    err("peak_tflops", "needs fp16 or bf16 > 0");
  if (!(g.memory_gbyte_per_s > 0)) err("memory_gbyte_per_s", "must be > 0");
}

void validate_cluster_impl(const ClusterSpec& c, const std::string& file, Diagnostics& out,
                           const MapReader* r, const std::string& prefix, bool check_gpu) {
  auto err = [&](const std::string& key, const std::string& msg) {
    const Position p = pos(r, key);
    out.error(file, p.line, p.column, prefix + key, msg);
  };
  if (c.name.empty()) err("name", "must not be empty");
  if (c.gpus_per_node <= 0) err("gpus_per_node", "must be > 0");
  if (!(c.intra_node_gbyte_per_s > 0)) err("intra_node_gbyte_per_s", "must be > 0");
  if (!(c.inter_node_gbit_per_s > 0)) err("inter_node_gbit_per_s", "must be > 0");
  if (c.price_per_node_hour_usd < 0 || std::isnan(c.price_per_node_hour_usd))
    err("price_per_node_hour_usd", "must not be negative");
  if (check_gpu) validate_gpu_impl(c.gpu, file, out, nullptr, prefix + "gpu.");
}

// The map a spec file holds: the root, or the value of a single wrapper key such as `model:`.
YAML::Node unwrap(const YAML::Node& root, const char* wrapper, std::string& prefix) {
  prefix = std::string(wrapper) + ".";
  if (root.IsMap() && root.size() == 1 && root[wrapper] && root[wrapper].IsMap())
    return root[wrapper];
  return root;
}

bool expect_map(const YAML::Node& n, const std::string& file, const std::string& what,
                Diagnostics& diags) {
  if (n.IsMap()) return true;
  const Position p = detail::position_of(n);
  if (!n.IsDefined() || n.IsNull())
    diags.error(file, p.line ? p.line : 1, p.column ? p.column : 1, "",
                "file is empty; expected a " + what + " (a map of keys)");
  else
    diags.error(file, p.line, p.column, "", "expected a " + what + " (a map of keys), found " +
                                                (n.IsSequence() ? "a list" : "'" + n.Scalar() + "'"));
  return false;
}

// A spec file's text: its keys at the top or under `wrapper:`, read by `read` (a detail::read_*_map).
template <class T, class Read>
Loaded<T> parse_spec_yaml(const std::string& text, const std::string& file, const char* wrapper, Read read) {
  Loaded<T> out;
  YAML::Node root;
  if (!detail::parse_yaml_text(text, file, root, out.diagnostics)) return out;
  std::string prefix;
  const YAML::Node map = unwrap(root, wrapper, prefix);
  if (!expect_map(map, file, std::string(wrapper) + " spec", out.diagnostics)) return out;
  out.value = read(map, file, prefix, out.diagnostics);
  return out;
}

std::string file_stem(const std::string& file) {
  return std::filesystem::path(file).stem().string();
}

// Hugging Face configs name the model in `_name_or_path`; otherwise the folder holding
// config.json ("Llama-2-7b-hf/config.json"), otherwise the file name.
std::string hf_name(MapReader& r, const std::string& file) {
  std::string name;
  if (r.has("_name_or_path") && r.text("_name_or_path", name, false) && !name.empty()) {
    const auto slash = name.find_last_of('/');
    return slash == std::string::npos ? name : name.substr(slash + 1);
  }
  const std::filesystem::path p(file);
  if (p.filename() == "config.json" && p.has_parent_path() && !p.parent_path().filename().empty())
    return p.parent_path().filename().string();
  return file_stem(file);
}

}  // namespace

namespace detail {

std::optional<GpuSpec> read_gpu_map(const YAML::Node& map, const std::string& file,
                                    const std::string& prefix, Diagnostics& diags, bool keep_invalid) {
  const size_t errors_before = diags.items().size();
  MapReader r(map, file, prefix, diags);
  GpuSpec g;
  r.text("name", g.name, true);
  r.number("memory_gib", g.memory_gib, true, kGib);
  r.number("memory_gbyte_per_s", g.memory_gbyte_per_s, true, kGbytePerS);
  r.text("source", g.source, false);
  const YAML::Node peaks = r.child("peak_tflops");
  if (!peaks.IsDefined()) {
    r.missing("peak_tflops", "a map with fp16, bf16, fp32");
  } else if (!peaks.IsMap()) {
    r.error_at(peaks, "peak_tflops", "expected a map with fp16, bf16, fp32");
  } else {
    MapReader pr(peaks, file, prefix + "peak_tflops.", diags);
    pr.number("fp16", g.peak_tflops_fp16, true, kTflops);
    pr.number("bf16", g.peak_tflops_bf16, false, kTflopsOptional);
    pr.number("fp32", g.peak_tflops_fp32, false, kTflopsOptional);
    pr.number("fp8", g.peak_tflops_fp8, false, kTflopsOptional);
    pr.finish();
  }
  r.number("gemm_peak_fraction", g.gemm_peak_fraction, false, {0, false, 1});
  r.number("flash_peak_fraction", g.flash_peak_fraction, false, {0, false, 1});
  r.number("fa3_peak_fraction", g.fa3_peak_fraction, false, {0, false, 1});
  r.number("cudnn_attention_peak_fraction", g.cudnn_attention_peak_fraction, false, {0, false, 1});
  r.integer("sms", g.sms, false, {0, false, 1e5});
  r.boolean("cpu_rank", g.cpu_rank, false);
  r.finish();
  if (diags.items().size() == errors_before) validate_gpu_impl(g, file, diags, &r, prefix);
  if (diags.has_errors_since(errors_before) && !keep_invalid) return std::nullopt;
  return g;
}

std::optional<ModelSpec> read_model_map(const YAML::Node& map, const std::string& file,
                                        const std::string& prefix, Diagnostics& diags, bool keep_invalid) {
  const size_t errors_before = diags.items().size();
  MapReader r(map, file, prefix, diags);
  ModelSpec m;
  r.text("name", m.name, true);
  r.integer("layers", m.layers, true, kLayers);
  r.integer("hidden", m.hidden, true, kHidden);
  r.integer("heads", m.heads, true, kHeads);
  r.integer("vocab", m.vocab, true, kVocab);
  r.integer("seq_len", m.seq_len, true, kSeq);
  r.integer("ffn_hidden", m.ffn_hidden, false, kFfn);
  r.integer("kv_heads", m.kv_heads, false, kHeads);
  r.integer("head_dim", m.head_dim, false, kHeads);
  r.integer("sliding_window", m.sliding_window, false, kSeq);
  r.integer("global_every", m.global_every, false, kLayers);
  r.integer("attention_chunk", m.attention_chunk, false, kSeq);
  r.integer("mtp_layers", m.mtp_layers, false, kMtpLayers);
  r.enumeration("ffn", m.ffn, parse_ffn, "gelu, swiglu");
  r.boolean("tied_embeddings", m.tied_embeddings, false);
  r.enumeration("norm", m.norm, parse_norm, "layernorm, rmsnorm");
  r.enumeration("position", m.position, parse_position, "learned, rope");
  r.text("source", m.source, false);
  const YAML::Node moe = r.child("moe");
  std::optional<MapReader> mr;
  if (moe.IsDefined() && !moe.IsNull()) {
    if (!moe.IsMap()) {
      r.error_at(moe, "moe", "expected a map with experts, top_k, expert_ffn_hidden, ...");
    } else {
      mr.emplace(moe, file, prefix + "moe.", diags);
      MoeSpec& e = m.moe;
      mr->integer("experts", e.experts, true, {0, true, 1e6});
      mr->integer("top_k", e.top_k, false, {0, true, 1e6});
      mr->integer("expert_ffn_hidden", e.expert_ffn_hidden, false, kFfn);
      mr->integer("shared_experts", e.shared_experts, false, {0, false, 1e6});
      mr->number("capacity_factor", e.capacity_factor, false, {0, false, 1e6});
      mr->integer("moe_layer_freq", e.moe_layer_freq, false, {0, true, 1e5});
      mr->integer("first_dense_layers", e.first_dense_layers, false, {0, false, 1e5});
      mr->finish();
    }
  }
  const YAML::Node mla = r.child("mla");
  std::optional<MapReader> ar;
  if (mla.IsDefined() && !mla.IsNull()) {
    if (!mla.IsMap()) {
      r.error_at(mla, "mla", "expected a map with kv_lora_rank, q_lora_rank, qk_nope_head_dim, qk_rope_head_dim, v_head_dim");
    } else {
      ar.emplace(mla, file, prefix + "mla.", diags);
      MlaSpec& a = m.mla;
      ar->integer("kv_lora_rank", a.kv_lora_rank, true, kHidden);
      ar->integer("q_lora_rank", a.q_lora_rank, false, {0, false, 1e7});
      ar->integer("qk_nope_head_dim", a.qk_nope_head_dim, true, kHeads);
      ar->integer("qk_rope_head_dim", a.qk_rope_head_dim, false, {0, false, 1e5});
      ar->integer("v_head_dim", a.v_head_dim, true, kHeads);
      ar->finish();
    }
  }
  r.finish();
  if (diags.items().size() == errors_before)
    validate_model_impl(m, file, diags, &r, prefix, mr ? &*mr : nullptr, ar ? &*ar : nullptr);
  if (diags.has_errors_since(errors_before) && !keep_invalid) return std::nullopt;
  return m;
}

std::optional<ClusterSpec> read_cluster_map(const YAML::Node& map, const std::string& file,
                                            const std::string& prefix, Diagnostics& diags, bool keep_invalid) {
  const size_t errors_before = diags.items().size();
  MapReader r(map, file, prefix, diags);
  ClusterSpec c;
  r.text("name", c.name, true);
  r.integer("gpus_per_node", c.gpus_per_node, true, kGpusPerNode);
  r.number("intra_node_gbyte_per_s", c.intra_node_gbyte_per_s, true, kGbytePerS);
  r.number("inter_node_gbit_per_s", c.inter_node_gbit_per_s, true, kGbitPerS);
  r.number("price_per_node_hour_usd", c.price_per_node_hour_usd, false, kNonNegative);
  r.number("intra_node_latency_us", c.intra_node_latency_us, false, kNonNegative);
  r.number("inter_node_latency_us", c.inter_node_latency_us, false, kNonNegative);
  r.number("pcie_gbyte_per_s", c.pcie_gbyte_per_s, false, kNonNegativeRate);
  r.number("host_memory_gib", c.host_memory_gib, false, kNonNegativeGib);
  r.text("source", c.source, false);

  bool gpu_ok = false;
  const YAML::Node gpu = r.child("gpu");
  if (!gpu.IsDefined()) {
    r.missing("gpu", "a catalog name such as A100-SXM4-40GB, or a map");
  } else if (gpu.IsMap()) {
    if (auto g = read_gpu_map(gpu, file, prefix + "gpu.", diags, keep_invalid)) {
      c.gpu = *g;
      gpu_ok = true;
    }
  } else if (gpu.IsScalar()) {
    const std::string name = gpu.Scalar();
    if (find_catalog_gpu(name)) {
      Loaded<GpuSpec> g = load_gpu(name);
      diags.append(g.diagnostics);
      if (g.value) {
        c.gpu = *g.value;
        gpu_ok = true;
      }
    } else {
      r.error_at(gpu, "gpu", "unknown GPU '" + name + "'; expected one of " +
                                 join(names_of(catalog_gpus())) + ", or an inline map",
                 [&] {
                   const std::string near = closest_match(name, names_of(catalog_gpus()));
                   return near.empty() ? std::string() : "did you mean '" + near + "'?";
                 }());
    }
  } else {
    r.error_at(gpu, "gpu", "expected a GPU catalog name or a map");
  }

  const YAML::Node eff = r.child("efficiency");
  if (eff.IsDefined() && !eff.IsNull()) {
    if (!eff.IsMap()) {
      r.error_at(eff, "efficiency", "expected a map with gemm, memory, intra_node, inter_node, flash");
    } else {
      MapReader er(eff, file, prefix + "efficiency.", diags);
      double v = 0;
      if (er.number("gemm", v, false, kFraction)) c.efficiency.gemm = v;
      if (er.number("memory", v, false, kFraction)) c.efficiency.memory = v;
      if (er.number("intra_node", v, false, kFraction)) c.efficiency.intra_node = v;
      if (er.number("inter_node", v, false, kFraction)) c.efficiency.inter_node = v;
      if (er.number("flash", v, false, kFraction)) c.efficiency.flash = v;
      er.finish();
    }
  }
  r.finish();
  if (diags.items().size() == errors_before)
    validate_cluster_impl(c, file, diags, &r, prefix, gpu_ok);
  if (diags.has_errors_since(errors_before) && !keep_invalid) return std::nullopt;
  return c;
}

}  // namespace detail

std::optional<double> parse_number(const std::string& input) {
  // Trim surrounding blanks; accept '_' and ',' as digit group separators ("300_000", "1,000").
  std::string s;
  for (char c : input)
    if (c != '_' && c != ',' && !std::isspace(static_cast<unsigned char>(c))) s += c;
  if (s.empty()) return std::nullopt;
  double scale = 1;
  switch (s.back()) {
    case 'k': case 'K': scale = 1e3; break;
    case 'M': scale = 1e6; break;
    case 'B': case 'G': scale = 1e9; break;
    case 'T': scale = 1e12; break;
    default: break;
  }
  if (scale != 1) s.pop_back();
  if (s.empty()) return std::nullopt;
  // Only digits, sign, point and exponent: strtod would also take "nan", "inf" and hex.
  for (char c : s)
    if (!(std::isdigit(static_cast<unsigned char>(c)) || c == '.' || c == 'e' || c == 'E' ||
          c == '+' || c == '-'))
      return std::nullopt;
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  if (end != s.c_str() + s.size() || !std::isfinite(v)) return std::nullopt;
  const double scaled = v * scale;
  if (!std::isfinite(scaled)) return std::nullopt;
  return scaled;
}

void validate_model(const ModelSpec& m, const std::string& file, Diagnostics& out) {
  validate_model_impl(m, file, out, nullptr, "model.");
}

void validate_cluster(const ClusterSpec& c, const std::string& file, Diagnostics& out) {
  validate_cluster_impl(c, file, out, nullptr, "cluster.", true);
}

std::string model_to_yaml(const ModelSpec& m, const std::string& indent) {
  std::ostringstream os;
  auto key = [&](const char* name) -> std::ostringstream& {
    os << indent << name << ": ";
    return os;
  };
  key("name") << detail::yaml_quote(m.name) << "\n";
  key("layers") << m.layers << "\n";
  key("hidden") << m.hidden << "\n";
  key("heads") << m.heads << "\n";
  if (m.kv_heads > 0) key("kv_heads") << m.kv_heads << "\n";
  if (m.head_dim > 0) key("head_dim") << m.head_dim << "\n";
  if (m.sliding_window > 0) key("sliding_window") << m.sliding_window << "\n";
  if (m.attention_chunk > 0) key("attention_chunk") << m.attention_chunk << "\n";
  if (m.global_every > 0) key("global_every") << m.global_every << "\n";
  if (m.mtp_layers > 0) key("mtp_layers") << m.mtp_layers << "\n";
  key("vocab") << m.vocab << "\n";
  key("seq_len") << m.seq_len << "\n";
  if (m.ffn_hidden > 0) key("ffn_hidden") << m.ffn_hidden << "\n";
  key("ffn") << to_string(m.ffn) << "\n";
  key("norm") << to_string(m.norm) << "\n";
  key("position") << to_string(m.position) << "\n";
  key("tied_embeddings") << (m.tied_embeddings ? "true" : "false") << "\n";
  if (m.moe.enabled()) {
    const MoeSpec& e = m.moe;
    key("moe") << "\n";
    const std::string in = indent + "  ";
    os << in << "experts: " << e.experts << "\n";
    os << in << "top_k: " << e.top_k_or_default() << "\n";
    if (e.expert_ffn_hidden > 0) os << in << "expert_ffn_hidden: " << e.expert_ffn_hidden << "\n";
    os << in << "shared_experts: " << e.shared_experts << "\n";
    os << in << "capacity_factor: " << detail::yaml_number(e.capacity_factor) << "\n";
    os << in << "moe_layer_freq: " << e.moe_layer_freq << "\n";
    if (e.first_dense_layers > 0) os << in << "first_dense_layers: " << e.first_dense_layers << "\n";
  }
  if (m.mla.enabled()) {
    const MlaSpec& a = m.mla;
    key("mla") << "\n";
    const std::string in = indent + "  ";
    os << in << "kv_lora_rank: " << a.kv_lora_rank << "\n";
    os << in << "q_lora_rank: " << a.q_lora_rank << "\n";
    os << in << "qk_nope_head_dim: " << a.qk_nope_head_dim << "\n";
    os << in << "qk_rope_head_dim: " << a.qk_rope_head_dim << "\n";
    os << in << "v_head_dim: " << a.v_head_dim << "\n";
  }
  if (!m.source.empty()) key("source") << detail::yaml_quote(m.source) << "\n";
  return os.str();
}

Loaded<ModelSpec> parse_model_yaml(const std::string& text, const std::string& file) {
  return parse_spec_yaml<ModelSpec>(text, file, "model",
                                 [](const YAML::Node& map, const std::string& f, const std::string& prefix,
                                    Diagnostics& d) { return detail::read_model_map(map, f, prefix, d); });
}

namespace {

// The mixture-of-experts keys of the Hugging Face configs capplan knows, by model_type:
//   mixtral (MixtralConfig), gpt_oss (GptOssConfig): num_local_experts, num_experts_per_tok
//     (gpt-oss also writes experts_per_token); the experts are intermediate_size wide;
//   qwen2_moe, qwen3_moe (Qwen2MoeConfig, Qwen3MoeConfig): num_experts, num_experts_per_tok,
//     moe_intermediate_size, decoder_sparse_step (layer i sparse when (i + 1) % step == 0; capplan
//     counts every step-th layer), shared_expert_intermediate_size (one shared expert that wide:
//     counted as that many moe_intermediate_size experts);
//   deepseek_v2, deepseek_v3 (DeepseekV3Config), kimi_k2 (Kimi K2: DeepSeek-V3's architecture
//     under its own model_type), glm4_moe (Glm4MoeConfig, GLM-4.5): n_routed_experts,
//     num_experts_per_tok, moe_intermediate_size, n_shared_experts, first_k_dense_replace,
//     moe_layer_freq; their latent attention, where they have it, is read_hf_mla's;
//   llama4_text (Llama4TextConfig, under a llama4 config's text_config): num_local_experts,
//     num_experts_per_tok, the experts and the one shared expert (Llama4TextMoe.shared_expert)
//     intermediate_size wide, the dense layers' MLP intermediate_size_mlp wide, every
//     interleave_moe_layer_step-th layer from layer step - 1 with experts (its moe_layers).
// A config with MoE keys under another model_type is refused, naming it: its keys may mean
// something else (a guess would cost the wrong model).
constexpr const char* kHfMoeTypes =
    "mixtral, gpt_oss, qwen2_moe, qwen3_moe, deepseek_v2, deepseek_v3, kimi_k2, glm4_moe, llama4_text";

void read_hf_moe(MapReader& r, const std::string& model_type, ModelSpec& m) {
  const Limits experts{0, true, 1e6};
  const bool has_moe_keys = r.has("num_local_experts") || r.has("num_experts") ||
                            r.has("n_routed_experts") || r.has("num_experts_per_tok") ||
                            r.has("moe_intermediate_size");
  MoeSpec& e = m.moe;
  if (model_type == "mixtral" || model_type == "gpt_oss") {
    r.integer("num_local_experts", e.experts, true, experts);
    const std::string top_k = r.first_present({"num_experts_per_tok", "experts_per_token"});
    r.integer(top_k.empty() ? "num_experts_per_tok" : top_k, e.top_k, true, experts);
    e.expert_ffn_hidden = m.ffn_hidden;
  } else if (model_type == "qwen2_moe" || model_type == "qwen3_moe") {
    r.integer("num_experts", e.experts, true, experts);
    r.integer("num_experts_per_tok", e.top_k, true, experts);
    r.integer("moe_intermediate_size", e.expert_ffn_hidden, true, kFfn);
    if (r.has("decoder_sparse_step")) r.integer("decoder_sparse_step", e.moe_layer_freq, false, {0, true, 1e5});
    int shared_width = 0;
    if (r.has("shared_expert_intermediate_size") &&
        r.integer("shared_expert_intermediate_size", shared_width, false, {0, false, 1e8}) &&
        shared_width > 0 && e.expert_ffn_hidden > 0) {
      if (shared_width % e.expert_ffn_hidden != 0)
        r.error_at(r.child("shared_expert_intermediate_size"), "shared_expert_intermediate_size",
                   "must be a multiple of moe_intermediate_size (" + std::to_string(e.expert_ffn_hidden) +
                       "), found " + std::to_string(shared_width),
                   "capplan counts the shared expert as whole experts of moe_intermediate_size");
      else
        e.shared_experts = shared_width / e.expert_ffn_hidden;
    }
    const YAML::Node only = r.child("mlp_only_layers");
    if (only.IsDefined() && only.IsSequence() && only.size() > 0)
      r.error_at(only, "mlp_only_layers",
                 "dense layers at chosen positions are not supported; found " + std::to_string(only.size()) +
                     " listed",
                 "capplan places dense layers first (moe.first_dense_layers) or every moe_layer_freq-th");
  } else if (model_type == "deepseek_v2" || model_type == "deepseek_v3" || model_type == "kimi_k2" ||
             model_type == "glm4_moe") {
    r.integer("n_routed_experts", e.experts, true, experts);
    r.integer("num_experts_per_tok", e.top_k, true, experts);
    r.integer("moe_intermediate_size", e.expert_ffn_hidden, true, kFfn);
    if (r.has("n_shared_experts") && !r.child("n_shared_experts").IsNull())
      r.integer("n_shared_experts", e.shared_experts, false, {0, false, 1e6});
    if (r.has("first_k_dense_replace"))
      r.integer("first_k_dense_replace", e.first_dense_layers, false, {0, false, 1e5});
    if (r.has("moe_layer_freq")) r.integer("moe_layer_freq", e.moe_layer_freq, false, {0, true, 1e5});
  } else if (model_type == "llama4_text" || model_type == "llama4") {
    r.integer("num_local_experts", e.experts, true, experts);
    r.integer("num_experts_per_tok", e.top_k, true, experts);
    e.expert_ffn_hidden = m.ffn_hidden;
    e.shared_experts = 1;
    int step = 1;
    if (r.has("interleave_moe_layer_step")) r.integer("interleave_moe_layer_step", step, false, {0, true, 1e5});
    e.moe_layer_freq = std::max(step, 1);
    e.first_dense_layers = std::max(step, 1) - 1;
    if (r.has("intermediate_size_mlp")) r.integer("intermediate_size_mlp", m.ffn_hidden, false, kFfn);
    const YAML::Node listed = r.child("moe_layers");
    if (listed.IsDefined() && listed.IsSequence()) {
      bool same = int(listed.size()) == e.moe_layers(m.layers);
      for (size_t i = 0; same && i < listed.size(); ++i)
        same = listed[i].IsScalar() && listed[i].Scalar() == std::to_string(e.first_dense_layers + int(i) * e.moe_layer_freq);
      if (!same)
        r.error_at(listed, "moe_layers", "experts at chosen layers are not supported; capplan places them every " +
                                             std::to_string(e.moe_layer_freq) + "-th layer from layer " +
                                             std::to_string(e.first_dense_layers),
                   "write the model as capplan YAML with a moe: section");
    }
  } else if (has_moe_keys) {
    const std::string key = r.has("model_type") ? "model_type" : r.first_present(
        {"num_local_experts", "num_experts", "n_routed_experts", "num_experts_per_tok", "moe_intermediate_size"});
    r.error_at(r.child(key), key,
               "mixture-of-experts config of model_type '" + model_type +
                   "' is not known (known: " + kHfMoeTypes + ")",
               "write the model as capplan YAML with a moe: section");
  }
}

// Latent attention in a Hugging Face config (DeepseekV2Config, DeepseekV3Config and the configs
// of models built on them): kv_lora_rank (null or absent: none), q_lora_rank (null: queries
// from the hidden state, DeepSeek-V2-Lite), qk_nope_head_dim, qk_rope_head_dim, v_head_dim. The
// head_dim such a file may carry (the rotary part) is not the model's head size and is not read.
void read_hf_mla(MapReader& r, ModelSpec& m) {
  if (!r.has("kv_lora_rank") || r.child("kv_lora_rank").IsNull()) return;
  MlaSpec& a = m.mla;
  r.integer("kv_lora_rank", a.kv_lora_rank, true, kHidden);
  if (r.has("q_lora_rank") && !r.child("q_lora_rank").IsNull())
    r.integer("q_lora_rank", a.q_lora_rank, false, {0, false, 1e7});
  r.integer("qk_nope_head_dim", a.qk_nope_head_dim, true, kHeads);
  r.integer("qk_rope_head_dim", a.qk_rope_head_dim, true, {0, false, 1e5});
  r.integer("v_head_dim", a.v_head_dim, true, kHeads);
}

// A context extension after pre-training leaves max_position_embeddings at the extended length
// and names the length before it in rope_scaling's original_max_position_embeddings (Llama 3.1:
// 8192 of 131072, rope_type llama3; DeepSeek-V3: 4096 of 163840, YaRN; Phi-3 128k: 4096, LongRoPE).
// The model's own sequence is the one it was pre-trained at: that one, said at the key.
void read_hf_context_extension(MapReader& r, const std::string& file, Diagnostics& d, ModelSpec& m) {
  if (!r.has("rope_scaling")) return;
  const YAML::Node scaling = r.child("rope_scaling");
  if (!scaling.IsMap() || !scaling["original_max_position_embeddings"]) return;
  MapReader sr(scaling, file, r.prefix() + "rope_scaling.", d);
  int original = 0;
  if (!sr.integer("original_max_position_embeddings", original, false, kSeq) || original <= 0 ||
      original >= m.seq_len)
    return;
  const Position at = sr.where("original_max_position_embeddings");
  d.warning(file, at.line, at.column, r.prefix() + "rope_scaling.original_max_position_embeddings",
            "the model's sequence is taken as " + std::to_string(original) +
                ", the length it was pre-trained at; max_position_embeddings " + std::to_string(m.seq_len) +
                " is its extended context",
            "--seq " + std::to_string(m.seq_len) + " (or training.seq_len) plans at the extended length");
  m.seq_len = original;
}

// The period of the layers a per-layer list (`key`: Gemma 3's and gpt-oss's layer_types, Llama
// 4's no_rope_layers) marks as attending to the whole sequence (`whole`): the first such layer's
// index + 1 (0 where none is). Where they do not recur with that one period, the mean period,
// said at the key. -1 where the file has no such list.
int whole_sequence_period(MapReader& r, const std::string& key, bool (*whole)(const YAML::Node&),
                          const std::string& file, Diagnostics& d) {
  const YAML::Node list = r.child(key);
  if (!list || !list.IsSequence() || list.size() == 0) return -1;
  size_t wholes = 0, first = list.size();
  for (size_t i = 0; i < list.size(); ++i)
    if (whole(list[i])) first = std::min(first, i), ++wholes;
  if (wholes == 0) return 0;
  int period = int(first) + 1;
  bool periodic = true;
  for (size_t i = 0; i < list.size(); ++i) periodic = periodic && whole(list[i]) == ((i + 1) % size_t(period) == 0);
  if (periodic) return period;
  period = std::max(1, int(std::lround(double(list.size()) / double(wholes))));
  const Position at = r.where(key);
  d.warning(file, at.line, at.column, r.prefix() + key,
            "the layers attending to the whole sequence do not recur with one period: costed as one layer in " +
                std::to_string(period) + " attending to the whole sequence (the file has " + std::to_string(wholes) +
                " of " + std::to_string(list.size()) + ")");
  return period;
}

// Llama 4's chunked attention (Llama4TextConfig, Llama4TextAttention): the layers with rotary
// positions attend within chunks of attention_chunk_size tokens, and every
// no_rope_layer_interval-th layer (default 4; the no_rope_layers list, where the file has one,
// gives the period of its 0s) attends to the whole sequence without rotary positions.
void read_hf_chunked_attention(MapReader& r, const std::string& file, Diagnostics& d, ModelSpec& m) {
  if (!r.has("attention_chunk_size") || r.child("attention_chunk_size").IsNull()) return;
  int chunk = 0;
  if (!r.integer("attention_chunk_size", chunk, false, kSeq) || chunk <= 0) return;
  m.attention_chunk = chunk;
  m.global_every = 4;
  if (r.has("no_rope_layer_interval")) r.integer("no_rope_layer_interval", m.global_every, false, kLayers);
  auto no_rope = [](const YAML::Node& n) { return n.IsScalar() && n.Scalar() == "0"; };
  if (const int period = whole_sequence_period(r, "no_rope_layers", no_rope, file, d); period >= 0)
    m.global_every = period;
}

// Sliding windows in a Hugging Face config: `sliding_window` (null or absent: none), used by every
// layer (Mistral 7B v0.1, Phi-3 mini) unless `use_sliding_window` is false (Qwen2 and Qwen3 carry
// a window they do not use); Gemma 2 alternates local and global layers (Gemma2DecoderLayer: the
// even layers local), Gemma 3 keeps every `sliding_window_pattern`-th layer global (default 6), and
// a `layer_types` list ("sliding_attention" / "full_attention") gives the period of its full
// layers, said at its line where they are not periodic.
void read_hf_window(MapReader& r, const std::string& model_type, const std::string& file, Diagnostics& d,
                    ModelSpec& m) {
  if (!r.has("sliding_window") || r.child("sliding_window").IsNull()) return;
  bool used = true;
  if (r.has("use_sliding_window")) r.boolean("use_sliding_window", used, false);
  int window = 0;
  r.integer("sliding_window", window, false, kSeq);
  if (!used || window <= 0) return;
  m.sliding_window = window;
  if (model_type == "gemma2") m.global_every = 2;
  if (model_type == "gemma3_text" || model_type == "gemma3") {
    m.global_every = 6;
    if (r.has("sliding_window_pattern")) r.integer("sliding_window_pattern", m.global_every, false, kLayers);
  }
  auto full = [](const YAML::Node& n) { return n.IsScalar() && n.Scalar() == "full_attention"; };
  if (const int period = whole_sequence_period(r, "layer_types", full, file, d); period >= 0) m.global_every = period;
}

}  // namespace

Loaded<ModelSpec> parse_model_hf_json(const std::string& text, const std::string& file) {
  Loaded<ModelSpec> out;
  Diagnostics& d = out.diagnostics;
  YAML::Node root;
  if (!detail::parse_yaml_text(text, file, root, d)) return out;
  if (!expect_map(root, file, "Hugging Face config", d)) return out;
  const size_t before = d.items().size();
  // A multimodal model's config (Gemma 3, Llama 4, Mistral Small 3.1) nests its language model
  // under text_config: that is the model planned, said at the key, its vision tower not counted.
  const YAML::Node& top = root;
  MapReader outer(root, file, "", d);
  const bool nested =
      !top["num_hidden_layers"] && !top["n_layer"] && top["text_config"] && top["text_config"].IsMap();
  // (Initialised, not assigned: assigning a YAML::Node writes through to the node it refers to.)
  const YAML::Node lm = nested ? outer.child("text_config") : root;
  const std::string prefix = nested ? "text_config." : "";
  if (nested) {
    const Position at = outer.where("text_config");
    d.warning(file, at.line, at.column, "text_config",
              "the language model under text_config is planned; the vision tower (vision_config) is not counted");
  }
  MapReader r(lm, file, prefix, d);
  ModelSpec m;
  // Each field under its Llama-family name or its GPT-2 name.
  auto read_int = [&](const std::vector<std::string>& keys, int& field, Limits lim,
                      bool required) {
    const std::string k = r.first_present(keys);
    if (k.empty()) {
      if (required) r.missing(keys[0], keys.size() > 1 ? "or '" + keys[1] + "'" : std::string());
      return;
    }
    if (r.child(k).IsNull()) return;  // GPT-2's "n_inner": null means the default
    r.integer(k, field, required, lim);
  };
  read_int({"num_hidden_layers", "n_layer"}, m.layers, kLayers, true);
  read_int({"hidden_size", "n_embd"}, m.hidden, kHidden, true);
  read_int({"num_attention_heads", "n_head"}, m.heads, kHeads, true);
  read_int({"vocab_size"}, m.vocab, kVocab, true);
  read_int({"max_position_embeddings", "n_positions", "n_ctx"}, m.seq_len, kSeq, true);
  read_int({"intermediate_size", "n_inner"}, m.ffn_hidden, kFfn, false);
  read_int({"num_key_value_heads"}, m.kv_heads, kHeads, false);

  std::string model_type, act;
  if (r.has("model_type")) r.text("model_type", model_type, false);
  if (r.has("hidden_act")) r.text("hidden_act", act, false);
  else if (r.has("activation_function")) r.text("activation_function", act, false);
  // Llama-family configs: SwiGLU MLP (hidden_act "silu" with gate/up/down projections), RMSNorm,
  // rotary positions, untied embeddings by default (transformers' LlamaConfig defaults).
  const bool llama_like = act == "silu" || r.has("rms_norm_eps") || model_type == "llama" ||
                          model_type == "mistral" || model_type == "qwen2" || model_type == "mixtral" ||
                          model_type == "qwen2_moe" || model_type == "qwen3_moe" ||
                          model_type == "deepseek_v2" || model_type == "deepseek_v3" || model_type == "kimi_k2" ||
                          model_type == "glm4_moe" || model_type == "gpt_oss" || model_type == "llama4_text";
  m.ffn = llama_like ? Ffn::Swiglu : Ffn::Gelu;
  m.norm = r.has("rms_norm_eps") || llama_like ? Norm::RmsNorm : Norm::LayerNorm;
  m.position = r.has("rope_theta") || llama_like ? PositionEmbedding::Rope
                                                 : PositionEmbedding::Learned;
  // Where the file does not say, the config class's default: transformers' PretrainedConfig ties
  // the LM head to the embedding (tie_word_embeddings=True), the Llama family's classes do not
  // (LlamaConfig, MistralConfig, Qwen2Config, MixtralConfig, Phi3Config, DeepseekV3Config: False),
  // and Gemma's, otherwise Llama-like, do (GemmaConfig, Gemma2Config, Gemma3TextConfig: True).
  const bool gemma = model_type == "gemma" || model_type == "gemma2" || model_type == "gemma3_text";
  m.tied_embeddings = !llama_like || gemma;
  if (r.has("tie_word_embeddings")) r.boolean("tie_word_embeddings", m.tied_embeddings, false);
  // The head size, where the file gives one (Gemma 7B: 256 with 3072 and 16 heads; Qwen3 8B:
  // 128 with 4096 and 32; Qwen3 32B: 128 with 5120 and 64, so the queries are 8192 wide).
  read_hf_mla(r, m);
  read_hf_context_extension(r, file, d, m);
  read_hf_chunked_attention(r, file, d, m);
  if (!m.mla.enabled() && r.has("head_dim") && !r.child("head_dim").IsNull())
    r.integer("head_dim", m.head_dim, false, kHeads);
  read_hf_moe(r, model_type, m);
  read_hf_window(r, model_type, file, d, m);
  if (m.sliding_window > 0 && m.attention_chunk > 0)
    r.error_at(r.child("attention_chunk_size"), "attention_chunk_size",
               "not used with sliding_window: a local layer attends within a window or within chunks");
  // Multi-token prediction modules (DeepseekV3Config, Glm4MoeConfig, Kimi K2's and MiMo's
  // configs): num_nextn_predict_layers, whose weights the checkpoint stores as layers past
  // num_hidden_layers.
  if (r.has("num_nextn_predict_layers") && !r.child("num_nextn_predict_layers").IsNull())
    r.integer("num_nextn_predict_layers", m.mtp_layers, false, kMtpLayers);
  m.name = hf_name(outer, file);
  m.source = "Hugging Face config " + file;
  if (!d.has_errors_since(before)) validate_model_impl(m, file, d, &r, prefix);
  if (d.has_errors_since(before)) return out;
  out.value = m;
  return out;
}

Loaded<ClusterSpec> parse_cluster_yaml(const std::string& text, const std::string& file) {
  return parse_spec_yaml<ClusterSpec>(text, file, "cluster",
                                 [](const YAML::Node& map, const std::string& f, const std::string& prefix,
                                    Diagnostics& d) { return detail::read_cluster_map(map, f, prefix, d); });
}

namespace {

// A Hugging Face config is recognised by its key names, whatever the file is called.
bool is_hf_config(const std::string& text) {
  for (const char* k : {"\"num_hidden_layers\"", "\"n_layer\"", "\"hidden_size\"", "\"n_embd\"",
                        "\"model_type\""})
    if (text.find(k) != std::string::npos) return true;
  return false;
}

template <class T>
Loaded<T> unknown_ref(const std::string& kind, const std::string& ref,
                      const std::vector<CatalogEntry>& presets) {
  Loaded<T> out;
  const std::string near = closest_match(ref, names_of(presets));
  out.diagnostics.error("<command line>", 0, 0, kind,
                        "no " + kind + " preset or file named '" + ref + "' (presets: " +
                            join(names_of(presets)) + ")",
                        near.empty() ? std::string() : "did you mean '" + near + "'?");
  return out;
}

template <class T>
Loaded<T> missing_file(const std::string& ref, const std::string& error) {
  Loaded<T> out;
  out.diagnostics.error(ref, 0, 0, "", error);
  return out;
}

}  // namespace

Loaded<ModelSpec> load_model(const std::string& ref) {
  if (const CatalogEntry* e = find_catalog_model(ref)) return parse_model_yaml(e->text, e->file);
  std::string text, error;
  if (!detail::is_file(ref)) {
    if (looks_like_path(ref) || detail::path_exists(ref)) {
      check_input_file(ref, error);
      return missing_file<ModelSpec>(ref, error);
    }
    return unknown_ref<ModelSpec>("model", ref, catalog_models());
  }
  if (!detail::read_text_file(ref, text, error)) return missing_file<ModelSpec>(ref, error);
  if (is_hf_config(text)) return parse_model_hf_json(text, ref);
  return parse_model_yaml(text, ref);
}

Loaded<ClusterSpec> load_cluster(const std::string& ref) {
  if (const CatalogEntry* e = find_catalog_cluster(ref))
    return parse_cluster_yaml(e->text, e->file);
  std::string text, error;
  if (!detail::is_file(ref)) {
    if (looks_like_path(ref) || detail::path_exists(ref)) {
      check_input_file(ref, error);
      return missing_file<ClusterSpec>(ref, error);
    }
    return unknown_ref<ClusterSpec>("cluster", ref, catalog_clusters());
  }
  if (!detail::read_text_file(ref, text, error)) return missing_file<ClusterSpec>(ref, error);
  return parse_cluster_yaml(text, ref);
}

Loaded<GpuSpec> load_gpu(const std::string& ref) {
  const CatalogEntry* e = find_catalog_gpu(ref);
  if (!e) return unknown_ref<GpuSpec>("gpu", ref, catalog_gpus());
  Loaded<GpuSpec> out;
  YAML::Node root;
  if (!detail::parse_yaml_text(e->text, e->file, root, out.diagnostics)) return out;
  std::string prefix;
  const YAML::Node map = unwrap(root, "gpu", prefix);
  if (!expect_map(map, e->file, "GPU spec", out.diagnostics)) return out;
  out.value = detail::read_gpu_map(map, e->file, prefix, out.diagnostics);
  return out;
}

namespace {

std::optional<int> zero_stage_bit(const std::string& v) {
  if (v.size() == 1 && v[0] >= '0' && v[0] <= '3') return v[0] - '0';
  return std::nullopt;
}
std::string zero_stage_name(int bit) { return std::to_string(bit); }
std::optional<int> schedule_bit(const std::string& v) {
  if (auto sch = parse_schedule(v)) return int(*sch);
  return std::nullopt;
}
std::string schedule_name(int bit) { return to_string(Schedule(bit)); }

// Every key of a framework file, once, in the order of the files: the reader and the writer
// below both walk this list, so a key added here is read and written. `F` is FrameworkSpec for
// reading, const FrameworkSpec for writing.
template <class F, class Keys>
void framework_keys(F& f, Keys& k) {
  k.text("name", f.name, true);
  k.enumeration("attention", f.attention, parse_attention, "eager, fused, flash");
  k.enumeration("flash_kernel", f.flash_kernel, parse_flash_kernel, "fa1, fa2, fa3, cudnn");
  k.boolean("fused_kernels", f.fused_kernels);
  k.integer("activation_kernels", f.activation_kernels, {0, false, 64});
  k.boolean("dp_overlap", f.dp_overlap);
  k.boolean("param_gather_overlap", f.param_gather_overlap);
  k.boolean("p2p_scatter_gather", f.p2p_scatter_gather);
  k.boolean("p2p_blocking_recv", f.p2p_blocking_recv);
  k.boolean("tp_async_bwd", f.tp_async_bwd);  // default: megatron-lm's (true)
  k.boolean("zero1_grad_allreduce", f.zero1_grad_allreduce);
  k.enumeration("zero3_comm", f.zero3_comm, parse_zero3_comm, "ring, rank-share");
  k.integer("zero3_prefetch_layers", f.zero3_prefetch_layers, {0, false, 64});
  k.enumeration("zero3_unit", f.zero3_unit, parse_zero3_unit, "layer, linear");
  k.enumeration("zero3_collectives", f.zero3_collectives, parse_zero3_collectives, "module, tensor");
  k.enumeration("zero3_backward_prefetch", f.zero3_backward_prefetch, parse_zero3_backward_prefetch,
                "pre, post, none");
  k.boolean("grad_accumulation_fusion", f.grad_accumulation_fusion);
  k.boolean("lazy_grads", f.lazy_grads);
  k.boolean("partition_activations", f.partition_activations);
  k.boolean("offload_sync", f.offload_sync);
  k.integer("host_step_threads", f.host_step_threads, {0, false, 4096});
  k.number("host_sgd_fp16_gelem_per_s", f.host_sgd_fp16_gelem_per_s, {0, false, 1e6});
  k.boolean("sequence_parallel", f.sequence_parallel);
  k.boolean("selective_recompute", f.selective_recompute);
  k.boolean("tensor_parallel", f.tensor_parallel);
  k.boolean("pipeline_parallel", f.pipeline_parallel);
  k.boolean("context_parallel", f.context_parallel);
  k.boolean("expert_parallel", f.expert_parallel);
  k.boolean("activation_offload", f.activation_offload);
  k.name_set("zero_stages", f.zero_stages, 4, "0, 1, 2, 3", zero_stage_bit, zero_stage_name);
  k.name_set("schedules", f.schedules, 3, "gpipe, 1f1b, interleaved", schedule_bit, schedule_name);
  k.boolean("recompute_moe_act", f.recompute_moe_act);
  k.boolean("recompute_mla_up_proj", f.recompute_mla_up_proj);
  k.boolean("fp8_moe", f.fp8_moe);
  k.boolean("ep_overlap", f.ep_overlap);
  k.number("allocator_margin", f.allocator_margin, {0, false, 1});
  k.number("residual_spread", f.residual_spread, {0, false, 10});
  k.number("reserved_gib", f.reserved_gib, {0, false, 1024});
  k.text("source", f.source, false);
}

// framework_keys read from a map: every key optional but the name. With `skip`, the keys named
// there are left to the map's own reader (a validation run's `attention` and `source` mean the
// run's), and the rest, the name too, are optional: each one present is read over `f`.
struct FrameworkKeyReader {
  MapReader& r;
  std::initializer_list<const char*> skip = {};
  bool skipped(const char* key) const {
    return std::any_of(skip.begin(), skip.end(), [&](const char* k) { return std::strcmp(k, key) == 0; });
  }
  void text(const char* key, std::string& out, bool required) {
    if (!skipped(key)) r.text(key, out, required && skip.size() == 0);
  }
  template <class E, class Parse>
  void enumeration(const char* key, E& out, Parse parse, const char* choices) {
    if (!skipped(key)) r.enumeration(key, out, parse, choices);
  }
  void boolean(const char* key, bool& out) {
    if (!skipped(key)) r.boolean(key, out, false);
  }
  void integer(const char* key, int& out, Limits limits) {
    if (!skipped(key)) r.integer(key, out, false, limits);
  }
  void number(const char* key, double& out, Limits limits) {
    if (!skipped(key)) r.number(key, out, false, limits);
  }
  // A list of names (`key: [a, b]`) into a bit set of `n` members, bit parse(name): at least one,
  // each known, none twice. Left as it is when the key is absent.
  template <class Parse, class Name>
  void name_set(const char* key, unsigned& out, int n, const char* choices, Parse parse, Name) {
    if (skipped(key) || !r.has(key)) return;
    const YAML::Node list = r.child(key);
    if (!list.IsSequence() || list.size() == 0) {
      r.error_at(list, key, std::string("expected a non-empty list of ") + choices,
                 "e.g. " + std::string(key) + ": [" + std::string(choices).substr(0, std::string(choices).find(',')) +
                     "]");
      return;
    }
    unsigned set = 0;
    for (const YAML::Node& item : list) {
      const std::string v = item.IsScalar() ? item.Scalar() : std::string("?");
      const std::optional<int> bit = item.IsScalar() ? parse(v) : std::nullopt;
      if (!bit || *bit < 0 || *bit >= n) {
        r.error_at(item, key, std::string("expected one of ") + choices + ", found '" + v + "'");
        return;
      }
      if (set >> *bit & 1u) {
        r.error_at(item, key, "'" + v + "' is listed twice");
        return;
      }
      set |= 1u << *bit;
    }
    out = set;
  }
};

// framework_keys written as YAML, one key a line after `indent`; `source` only where there is one.
struct FrameworkKeyWriter {
  std::ostringstream& os;
  const std::string& indent;
  void line(const char* key, const std::string& value) { os << indent << key << ": " << value << "\n"; }
  void text(const char* key, const std::string& v, bool required) {
    if (required || !v.empty()) line(key, detail::yaml_quote(v));
  }
  template <class E, class Parse>
  void enumeration(const char* key, const E& v, Parse, const char*) { line(key, to_string(v)); }
  void boolean(const char* key, bool v) { line(key, v ? "true" : "false"); }
  void integer(const char* key, int v, Limits) { line(key, detail::yaml_number(v)); }
  void number(const char* key, double v, Limits) { line(key, detail::yaml_number(v)); }
  template <class Parse, class Name>
  void name_set(const char* key, unsigned bits, int n, const char*, Parse, Name name) {
    std::string names;
    for (int b = 0; b < n; ++b)
      if (bits >> b & 1u) names += (names.empty() ? "" : ", ") + name(b);
    line(key, "[" + names + "]");
  }
};

}  // namespace

namespace detail {

void read_framework_overrides(MapReader& r, FrameworkSpec& f) {
  FrameworkKeyReader keys{r, {"name", "attention", "source"}};
  framework_keys(f, keys);
}

std::optional<FrameworkSpec> read_framework_map(const YAML::Node& map, const std::string& file,
                                                const std::string& prefix, Diagnostics& diags) {
  const size_t errors_before = diags.items().size();
  MapReader r(map, file, prefix, diags);
  FrameworkSpec f;
  FrameworkKeyReader keys{r};
  framework_keys(f, keys);
  r.finish();
  if (diags.has_errors_since(errors_before)) return std::nullopt;
  return f;
}

}  // namespace detail

Loaded<FrameworkSpec> parse_framework_yaml(const std::string& text, const std::string& file) {
  return parse_spec_yaml<FrameworkSpec>(text, file, "framework",
                                 [](const YAML::Node& map, const std::string& f, const std::string& prefix,
                                    Diagnostics& d) { return detail::read_framework_map(map, f, prefix, d); });
}

std::string framework_to_yaml(const FrameworkSpec& f, const std::string& indent) {
  std::ostringstream os;
  FrameworkKeyWriter keys{os, indent};
  framework_keys(f, keys);
  return os.str();
}

Loaded<FrameworkSpec> load_framework(const std::string& ref) {
  if (const CatalogEntry* e = find_catalog_framework(ref)) return parse_framework_yaml(e->text, e->file);
  const bool looks_like_path = ref.find('/') != std::string::npos || ref.ends_with(".yaml");
  if (!looks_like_path) return unknown_ref<FrameworkSpec>("framework", ref, catalog_frameworks());
  Loaded<FrameworkSpec> out;
  std::string text, error;
  if (!detail::read_text_file(ref, text, error)) {
    out.diagnostics.error(ref, 0, 0, "", error);
    return out;
  }
  return parse_framework_yaml(text, ref);
}

}  // namespace capplan
