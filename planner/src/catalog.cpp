// The embedded catalog: entries built once from the configs/ files compiled into the binary
// (configs/embed.cmake writes them as raw string literals). A preset's name is its file name
// without ".yaml"; its summary line is made from the parsed spec.
#include "planner/catalog.h"

#include <cstddef>
#include <cstdio>
#include <string_view>

#include "planner/spec_io.h"

namespace capplan {
namespace detail {
struct EmbeddedConfig {
  const char* path;
  const char* text;
};
extern const EmbeddedConfig kEmbeddedConfigs[];
extern const std::size_t kEmbeddedConfigCount;
}  // namespace detail

namespace {

std::string fmt(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

std::vector<CatalogEntry> entries_under(std::string_view folder) {
  std::vector<CatalogEntry> out;
  for (std::size_t i = 0; i < detail::kEmbeddedConfigCount; ++i) {
    const std::string_view path = detail::kEmbeddedConfigs[i].path;
    if (path.substr(0, folder.size()) != folder) continue;
    std::string name(path.substr(folder.size()));
    if (name.size() > 5 && name.compare(name.size() - 5, 5, ".yaml") == 0)
      name.resize(name.size() - 5);
    out.push_back({name, {}, detail::kEmbeddedConfigs[i].text, std::string(path)});
  }
  return out;
}

std::string model_summary(const CatalogEntry& e) {
  const Loaded<ModelSpec> m = parse_model_yaml(e.text, e.file);
  if (!m.value) return "(invalid preset)";
  const ModelSpec& s = *m.value;
  std::string out = std::to_string(s.layers) + " layers, hidden " + std::to_string(s.hidden) +
                    ", " + std::to_string(s.heads) + " heads";
  if (s.kv_heads > 0 && s.kv_heads != s.heads) out += " (" + std::to_string(s.kv_heads) + " kv)";
  if (s.head_dim > 0 && s.head_dim * s.heads != s.hidden) out += " of " + std::to_string(s.head_dim);
  if (s.mla.enabled())
    out += " of latent attention (kv rank " + std::to_string(s.mla.kv_lora_rank) + ", heads of " +
           std::to_string(s.qk_head_dim()) + " / " + std::to_string(s.v_head_dim()) + ")";
  if (s.sliding_window > 0) out += ", window " + std::to_string(s.sliding_window);
  if (s.attention_chunk > 0) out += ", chunks of " + std::to_string(s.attention_chunk);
  if (s.moe.enabled())
    out += ", " + std::to_string(s.moe.experts) + " experts (top " + std::to_string(s.moe.top_k_or_default()) +
           (s.moe.shared_experts > 0 ? ", " + std::to_string(s.moe.shared_experts) + " shared" : std::string()) + ")";
  out += ", ffn " + std::to_string(s.ffn_hidden_or_default()) + " " + to_string(s.ffn) +
         ", vocab " + std::to_string(s.vocab) + ", seq " + std::to_string(s.seq_len);
  if (s.mtp_layers > 0)
    out += ", " + std::to_string(s.mtp_layers) + " multi-token prediction module" + (s.mtp_layers == 1 ? "" : "s");
  return out;
}

std::string gpu_summary(const GpuSpec& g) {
  const double peak = g.peak_tflops_16bit();
  return fmt(g.memory_gib) + " GiB, " + fmt(peak) + " TFLOP/s " +
         (g.peak_tflops_bf16 > 0 ? "bf16" : "fp16") + ", " + fmt(g.memory_gbyte_per_s) + " GB/s";
}

std::string cluster_summary(const CatalogEntry& e) {
  const Loaded<ClusterSpec> c = parse_cluster_yaml(e.text, e.file);
  if (!c.value) return "(invalid preset)";
  const ClusterSpec& s = *c.value;
  std::string out = std::to_string(s.gpus_per_node) + " x " + s.gpu.name + " (" +
                    fmt(s.gpu.memory_gib) + " GiB), " + fmt(s.intra_node_gbyte_per_s) +
                    " GB/s/GPU intra-node, " + fmt(s.inter_node_gbit_per_s) + " Gb/s/node, ";
  if (s.price_per_node_hour_usd > 0)
    out.append("$").append(fmt(s.price_per_node_hour_usd)).append("/node-hour");
  else
    out.append("price unknown");
  return out;
}

const CatalogEntry* find_in(const std::vector<CatalogEntry>& v, const std::string& name) {
  for (const auto& e : v)
    if (e.name == name) return &e;
  return nullptr;
}

}  // namespace

const std::vector<CatalogEntry>& catalog_gpus() {
  static const std::vector<CatalogEntry> entries = [] {
    auto v = entries_under("configs/gpus/");
    for (auto& e : v) {
      const Loaded<GpuSpec> g = load_gpu(e.name);
      e.summary = g.value ? gpu_summary(*g.value) : "(invalid preset)";
    }
    return v;
  }();
  return entries;
}

const std::vector<CatalogEntry>& catalog_models() {
  static const std::vector<CatalogEntry> entries = [] {
    auto v = entries_under("configs/models/");
    for (auto& e : v) e.summary = model_summary(e);
    return v;
  }();
  return entries;
}

const std::vector<CatalogEntry>& catalog_clusters() {
  static const std::vector<CatalogEntry> entries = [] {
    auto v = entries_under("configs/clusters/");
    for (auto& e : v) e.summary = cluster_summary(e);
    return v;
  }();
  return entries;
}

const std::vector<CatalogEntry>& catalog_plans() {
  static const std::vector<CatalogEntry> entries = [] {
    auto v = entries_under("configs/plans/");
    for (auto& e : v) {
      // The first comment line of a plan says what it is.
      const std::string& t = e.text;
      if (t.rfind("# ", 0) == 0) e.summary = t.substr(2, t.find('\n') - 2);
    }
    return v;
  }();
  return entries;
}

const std::vector<CatalogEntry>& catalog_frameworks() {
  static const std::vector<CatalogEntry> entries = [] {
    auto v = entries_under("configs/frameworks/");
    for (auto& e : v) {
      const std::string& t = e.text;
      if (t.rfind("# ", 0) == 0) e.summary = t.substr(2, t.find('\n') - 2);
    }
    return v;
  }();
  return entries;
}
const CatalogEntry* find_catalog_framework(const std::string& name) {
  return find_in(catalog_frameworks(), name);
}

const CatalogEntry* find_catalog_model(const std::string& name) {
  return find_in(catalog_models(), name);
}
const CatalogEntry* find_catalog_cluster(const std::string& name) {
  return find_in(catalog_clusters(), name);
}
const CatalogEntry* find_catalog_plan(const std::string& name) {
  return find_in(catalog_plans(), name);
}

// Looked up without the summaries: load_gpu() runs while catalog_gpus() builds them.
const CatalogEntry* find_catalog_gpu(const std::string& name) {
  static const std::vector<CatalogEntry> plain = entries_under("configs/gpus/");
  return find_in(plain, name);
}

}  // namespace capplan
