// The published-runs format (shared/validation's calibration files and files compiled the same
// way): numbers beside the sources' own words. Each rule below turns one of those words into a
// knob of the cost model; where the source is silent the rule's choice is recorded in the run's
// `assumptions`, so the report says what was taken, not only what was measured.
#include "validate_published.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <utility>
#include <vector>

#include "planner/catalog.h"
#include "planner/cost_model.h"
#include "planner/spec_io.h"
#include "yaml_reader.h"

namespace capplan::detail {

namespace {

// Letters and digits only, lower case: "Llama 2 70B" and "llama2-70b" both read "llama270b".
std::string squeeze(const std::string& s) {
  std::string out;
  for (char c : s)
    if (std::isalnum(static_cast<unsigned char>(c))) out += char(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// A name from the source's words: lower case, a dash between words, at most 40 characters
// ("OneFlow DLPerf 4-node V100 test cluster": "oneflow-dlperf-4-node-v100-test-cluster").
std::string slug(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (std::isalnum(static_cast<unsigned char>(c))) {
      out += char(std::tolower(static_cast<unsigned char>(c)));
    } else if (!out.empty() && out.back() != '-') {
      out += '-';
    }
    if (out.size() >= 40) break;
  }
  while (!out.empty() && out.back() == '-') out.pop_back();
  return out;
}

bool contains(const std::string& lower_text, const char* word) { return lower_text.find(word) != std::string::npos; }

// The value of `key` in `map`, or a null node where the key (or the map) is missing: never
// yaml-cpp's invalid node, whose type cannot be asked.
YAML::Node at(const YAML::Node& map, const std::string& key) {
  if (!map.IsDefined() || !map.IsMap()) return YAML::Node();
  const YAML::Node n = map[key];
  return n.IsDefined() ? n : YAML::Node();
}

std::string text_of(const YAML::Node& n) { return n.IsDefined() && n.IsScalar() ? n.Scalar() : std::string(); }

// A finite number written as a YAML scalar, in the forms every spec file takes (parse_number);
// nullopt for a null, a missing key or words.
std::optional<double> number_of(const YAML::Node& n) {
  return n.IsDefined() && n.IsScalar() ? parse_number(n.Scalar()) : std::nullopt;
}

// Whether a scalar is written as a number at all (a digit, a sign or a point first, or a
// spelling of NaN or infinity), right or wrong: the file readers then judge it.
bool written_as_number(const YAML::Node& n) {
  const std::string s = text_of(n);
  if (s.empty()) return false;
  const char c = s[0];
  return std::isdigit(static_cast<unsigned char>(c)) || c == '-' || c == '+' || c == '.' || looks_non_finite(s);
}

// One run being read: where it is, what it says about itself, and why it cannot be predicted.
struct RunReader {
  const std::string& file;
  std::string prefix;
  Diagnostics& diags;
  int line = 0;
  std::vector<std::string> assumed;
  std::string skip_reason;  // set: the run is left out with this warning
  bool failed = false;      // an error was reported

  void assume(std::string what) { assumed.push_back(std::move(what)); }
  void skip(const std::string& why) {
    if (skip_reason.empty()) skip_reason = why;
  }
  void error(const YAML::Node& at, const std::string& key, const std::string& message) {
    const Position p = at.IsDefined() ? position_of(at) : Position{line, 1};
    diags.error(file, p.line, p.column, prefix + key, message);
    failed = true;
  }
  // A value at `path` (`section.key`) read by the spec files' own MapReader (a number, finite,
  // within `limits`, whole where asked): nullopt where absent or null or wrong, the error reported.
  std::optional<double> read_number(const YAML::Node& map, const char* key, const std::string& path, Limits limits,
                                    bool whole) {
    const size_t before = diags.items().size();
    MapReader r(map, file, prefix + path.substr(0, path.size() - std::strlen(key)), diags);
    double v = 0;
    int64_t i = 0;
    const bool ok = whole ? r.integer64(key, i, false, limits) : r.number(key, v, false, limits);
    if (diags.has_errors_since(before)) failed = true;
    if (!ok) return std::nullopt;
    return whole ? double(i) : v;
  }
  // A positive count (a degree, a size) up to `max`.
  std::optional<int64_t> count(const YAML::Node& map, const char* key, const std::string& path, double max) {
    const std::optional<double> v = read_number(map, key, path, {0, true, max}, true);
    return v ? std::optional<int64_t>(int64_t(*v)) : std::nullopt;
  }
  // A positive figure (a measurement); nullopt also where the source gives words (a measurement
  // in words is no measurement).
  std::optional<double> figure(const YAML::Node& map, const char* key, const std::string& path) {
    if (!written_as_number(at(map, key))) return std::nullopt;
    return read_number(map, key, path, {0, true, 1e18}, false);
  }
  YAML::Node map(const YAML::Node& run, const char* key) {
    const YAML::Node n = at(run, key);
    if (n.IsDefined() && !n.IsNull() && !n.IsMap()) error(n, key, "expected a map");
    return n.IsDefined() && n.IsMap() ? n : YAML::Node(YAML::NodeType::Map);
  }
};

// ---- the model ----

// A name's letters and digits with a minor version dropped ("Llama-3.1 405B": "llama3405b"; a
// size keeps its decimals: "GPT-3 1.3B" reads "gpt313b").
std::string model_key(const std::string& name) {
  const auto digit = [&](size_t k) { return k < name.size() && std::isdigit(static_cast<unsigned char>(name[k])); };
  std::string major;
  for (size_t i = 0; i < name.size(); ++i) {
    if (name[i] != '.' || i == 0 || !digit(i - 1) || !digit(i + 1)) {
      major += name[i];
      continue;
    }
    size_t end = i + 1;
    while (digit(end)) ++end;
    const char unit = end < name.size() ? char(std::tolower(static_cast<unsigned char>(name[end]))) : ' ';
    if (unit == 'b' || unit == 'm' || unit == 't') {
      major += name[i];
      continue;
    }
    i = end - 1;
  }
  return squeeze(major);
}

// The catalog model the run names, whose architecture (FFN, norm, positions, attention heads'
// groups, latent attention, MoE) stands for what the run's map does not say: one whose name reads
// the same (model_key) and whose layers and width agree with those given, or, where both are
// given, one whose name begins with the run's or the run's with its ("DeepSeek-V3" and
// deepseek-v3-671b, "GPT-3" and gpt3-175b) with the same layers and width.
const CatalogEntry* catalog_model_named(const std::string& name, const YAML::Node& m) {
  const std::string want = model_key(name);
  const std::optional<double> layers = number_of(at(m, "layers")), hidden = number_of(at(m, "hidden"));
  if (want.empty()) return nullptr;
  const CatalogEntry* prefix_match = nullptr;
  for (const CatalogEntry& e : catalog_models()) {
    const std::string have = model_key(e.name);
    const bool same = have == want;
    const bool prefix = have.starts_with(want) || want.starts_with(have);
    if (!same && !(prefix && layers && hidden)) continue;
    const Loaded<ModelSpec> spec = load_model(e.name);
    if (!spec.value || (layers && *layers != spec.value->layers) || (hidden && *hidden != spec.value->hidden))
      continue;
    if (same) return &e;
    if (!prefix_match) prefix_match = &e;
  }
  return prefix_match;
}

// The experts of an MoE model, under the names configs and papers give them (also in a `moe:` map).
void read_moe(const YAML::Node& m, ModelSpec& spec, RunReader& rr) {
  const YAML::Node moe = at(m, "moe").IsMap() ? at(m, "moe") : m;
  const std::string where = at(m, "moe").IsMap() ? "model.moe." : "model.";
  const auto first = [&](std::initializer_list<const char*> keys, int& out, double max) {
    for (const char* key : keys)
      if (auto v = rr.count(moe, key, where + key, max)) {
        out = int(*v);
        return;
      }
  };
  first({"experts", "num_experts", "n_routed_experts", "num_local_experts", "moe_experts"}, spec.moe.experts, 1e6);
  first({"top_k", "experts_per_token", "num_experts_per_tok", "moe_top_k", "router_topk"}, spec.moe.top_k, 1e6);
  first({"expert_ffn_hidden", "moe_ffn_hidden", "moe_intermediate_size"}, spec.moe.expert_ffn_hidden, 1e8);
  first({"shared_experts", "n_shared_experts"}, spec.moe.shared_experts, 1e6);
}

// Families whose published models all use SwiGLU, RMSNorm, rotary positions and untied
// embeddings (Touvron et al. 2023; Jiang et al. 2023; Qwen and Gemma model cards).
bool modern_family(const std::string& lower_name) {
  for (const char* f : {"llama", "mistral", "mixtral", "qwen", "gemma", "deepseek", "olmo"})
    if (contains(lower_name, f)) return true;
  return false;
}

std::optional<ModelSpec> published_model(const YAML::Node& run, RunReader& rr) {
  const YAML::Node m = rr.map(run, "model");
  std::string name = text_of(at(m, "name"));
  if (name.empty()) name = text_of(at(run, "id"));
  ModelSpec spec;
  const CatalogEntry* preset = catalog_model_named(name, m);
  if (preset) {
    if (Loaded<ModelSpec> loaded = load_model(preset->name); loaded.value) spec = *loaded.value;
  }
  if (!preset && modern_family(lower(name))) {
    spec.ffn = Ffn::Swiglu;
    spec.norm = Norm::RmsNorm;
    spec.position = PositionEmbedding::Rope;
    spec.tied_embeddings = false;
    rr.assume("model: SwiGLU, RMSNorm, rotary positions, untied embeddings (its family's)");
  }
  spec.name = name;
  struct Field {
    const char* key;
    int* out;
    double max;
  };
  const Field required[] = {{"layers", &spec.layers, 1e5},
                            {"hidden", &spec.hidden, 1e7},
                            {"heads", &spec.heads, 1e5},
                            {"vocab", &spec.vocab, 1e8},
                            {"seq_len", &spec.seq_len, 1e8}};
  for (const Field& f : required) {
    if (auto v = rr.count(m, f.key, std::string("model.") + f.key, f.max)) {
      *f.out = int(*v);
    } else if (!preset) {
      rr.skip(std::string("model.") + f.key + " is not given");
    }
  }
  if (auto v = rr.count(m, "ffn_hidden", "model.ffn_hidden", 1e8)) spec.ffn_hidden = int(*v);
  for (const char* key : {"kv_heads", "num_kv_heads", "num_key_value_heads", "query_groups", "num_query_groups"})
    if (auto v = rr.count(m, key, std::string("model.") + key, 1e5)) spec.kv_heads = int(*v);
  if (auto v = rr.count(m, "head_dim", "model.head_dim", 1e5)) spec.head_dim = int(*v);
  read_moe(m, spec, rr);
  const std::string act = lower(text_of(at(m, "activation")) + " " + text_of(at(m, "ffn")));
  if (contains(act, "swiglu") || contains(act, "silu") || contains(act, "geglu")) spec.ffn = Ffn::Swiglu;
  else if (contains(act, "gelu")) spec.ffn = Ffn::Gelu;
  const std::string norm = lower(text_of(at(m, "norm")));
  if (contains(norm, "rms")) spec.norm = Norm::RmsNorm;
  else if (contains(norm, "layer")) spec.norm = Norm::LayerNorm;
  const std::string pos = lower(text_of(at(m, "position")) + " " + text_of(at(m, "position_embedding")));
  if (contains(pos, "rope") || contains(pos, "rotary")) spec.position = PositionEmbedding::Rope;
  else if (contains(pos, "learned") || contains(pos, "absolute")) spec.position = PositionEmbedding::Learned;
  if (at(m, "tied_embeddings").IsDefined() && text_of(at(m, "tied_embeddings")) == "false") spec.tied_embeddings = false;
  if (preset) rr.assume("model: " + preset->name + "'s architecture");
  // The source's numbers together (heads dividing the width, ...): an error of the file.
  if (rr.skip_reason.empty()) {
    Diagnostics check;
    validate_model(spec, rr.file, check);
    for (const Diagnostic& d : check.items())
      if (d.severity == Severity::Error) rr.error(at(run, "model"), d.path.empty() ? "model" : d.path, d.message);
  }
  return spec;
}

// ---- the cluster ----

// The catalog GPU the source names: the product (V100, A100, H100, H200, B200) and its memory, and
// what stands in for a part the catalog lacks (`note`); `why_not` where nothing can: a PCIe or
// NVL card has its own clocks, power and memory bandwidth (the H100 PCIe's dense 16-bit peak is
// 756 TFLOP/s against the SXM part's 989: NVIDIA H100 datasheet), so the SXM part does not stand
// in for it.
struct GpuRead {
  std::optional<std::string> gpu;
  std::string note, why_not;
};
GpuRead catalog_gpu_of(const YAML::Node& hw) {
  const std::string words = text_of(at(hw, "gpu"));
  const std::string g = lower(words + " " + text_of(at(hw, "system")));
  const std::optional<double> mem = number_of(at(hw, "gpu_mem_gb"));
  const auto mem_is = [&](double gb, const char* tag) {
    return (mem && std::fabs(*mem - gb) < 1) || (!mem && contains(g, tag));
  };
  GpuRead r;
  const std::string lw = lower(words);
  const size_t nvl = lw.find("nvl");
  // "H100 NVL" and "H200 NVL" are cards; "GB200 NVL72" and "NVL4" name a rack's or a board's
  // NVLink domain.
  const bool nvl_card =
      nvl != std::string::npos && (nvl + 3 == lw.size() || !std::isalnum(static_cast<unsigned char>(lw[nvl + 3])));
  if (contains(lw, "pcie") || nvl_card) {
    r.why_not = "hardware.gpu: '" + words +
                "' is a PCIe card the catalog lacks (its SXM part's peak and memory bandwidth are higher)";
    return r;
  }
  if (contains(g, "gb200")) {
    // The Grace Blackwell superchip's GPUs are B200s, specified a little faster than the HGX
    // B200's (dense 16-bit 2.5 PFLOP/s: NVIDIA GB200 NVL72 datasheet, 360 PFLOP/s sparse for 72
    // GPUs; HGX B200 2.25): the catalog part's figures, its memory from the source.
    r.gpu = "B200";
    r.note = "GPU B200 for the " + words + " (its Blackwell GPU at the HGX B200's figures)";
  } else if (contains(g, "b200")) {
    r.gpu = "B200";
  } else if (contains(g, "gh200")) {
    // The Grace Hopper superchip's GPU is the H100's Hopper die with 96 GB of HBM3 or, in its
    // second version, 144 GB of HBM3e, as the H200 (NVIDIA GH200 datasheet).
    const bool hbm3e = mem ? *mem > 120 : contains(g, "144");
    r.gpu = hbm3e ? "H200-SXM-141GB" : "H100-SXM5-80GB";
    r.note = "GPU " + *r.gpu + " for the " + words + " (its Hopper GPU" + (hbm3e ? " with HBM3e" : "") + ")";
  } else if (contains(g, "h200")) {
    r.gpu = "H200-SXM-141GB";
  } else if (contains(g, "h100") || contains(g, "h800")) {
    // H800 and A800: the H100's and A100's compute and memory with less NVLink (NVIDIA's export parts).
    r.gpu = "H100-SXM5-80GB";
  } else if (contains(g, "a100") || contains(g, "a800")) {
    r.gpu = mem_is(40, "40gb") ? "A100-SXM4-40GB" : "A100-SXM4-80GB";
  } else if (contains(g, "v100")) {
    if (contains(g, "sxm3") || contains(g, "dgx-2")) r.gpu = "V100-SXM3-32GB";
    else r.gpu = mem_is(16, "16gb") ? "V100-SXM2-16GB" : "V100-SXM2-32GB";
  }
  if (r.gpu && r.note.empty() && (contains(lw, "h800") || contains(lw, "a800")))
    r.note = "GPU " + *r.gpu + " for the " + words + " (its NVLink from the text where given)";
  return r;
}

// The source's GPU memory where it differs from the catalog part's by more than the rounding of
// a datasheet's GB (a GH200 of 96 GB read as the H100's 80): the capacity the run had.
void source_gpu_memory(const YAML::Node& hw, ClusterSpec& c, RunReader& rr) {
  const std::optional<double> mem = number_of(at(hw, "gpu_mem_gb"));
  if (!mem || !(*mem > 0) || std::fabs(*mem - c.gpu.memory_gib) <= 2) return;
  c.gpu.memory_gib = *mem;
  rr.assume("GPU memory " + yaml_number(*mem) + " GB (the source's; " + c.gpu.name + "'s other figures)");
}

// A rate in the text: the number before `pos` and its unit after, in Gb/s (GB/s is bytes).
std::optional<double> rate_at(const std::string& t, size_t unit_pos, size_t unit_len) {
  size_t end = unit_pos;
  while (end > 0 && t[end - 1] == ' ') --end;
  size_t begin = end;
  while (begin > 0 && (std::isdigit(static_cast<unsigned char>(t[begin - 1])) || t[begin - 1] == '.')) --begin;
  if (begin == end) return std::nullopt;
  const double v = std::strtod(t.substr(begin, end - begin).c_str(), nullptr);
  if (!(v > 0) || !std::isfinite(v)) return std::nullopt;
  const std::string unit = t.substr(unit_pos, unit_len);
  if (unit[0] == 'T') return v * 1000;
  if (unit[1] == 'B') return v * 8;
  return v;
}

// The node's inter-node bandwidth in Gb/s from the source's words: a total after '=' or a rate
// "per node / server / instance" where given, a rate "per GPU" times the node's GPUs, else a count
// times a rate ("4x 100 Gb/s"), else the one rate; a fabric's name alone gives one link of its
// rate (EDR and Omni-Path 100, HDR 200, NDR 400 Gb/s: the InfiniBand Trade Association's and
// Intel's specifications).
// `fabric_note` gets what was assumed where only a fabric's name is given.
std::optional<double> node_gbit_per_s(const std::string& t, std::optional<int64_t> gpus_per_node,
                                      std::string& fabric_note) {
  struct Hit {
    size_t pos;
    double gbit;
  };
  std::vector<Hit> rates;
  for (const char* unit : {"Tb/s", "Tbps", "Gb/s", "Gbps", "Gbit", "GB/s"})
    for (size_t p = t.find(unit); p != std::string::npos; p = t.find(unit, p + 1))
      if (auto v = rate_at(t, p, 4)) rates.push_back({p, *v});
  std::sort(rates.begin(), rates.end(), [](const Hit& a, const Hit& b) { return a.pos < b.pos; });
  const std::string lt = lower(t);
  for (const Hit& h : rates) {
    const size_t eq = lt.rfind('=', h.pos);
    std::string after = lt.substr(h.pos + 4, 24);  // the words after the unit, up to the next figure
    after = after.substr(0, after.find_first_of("0123456789"));
    if ((eq != std::string::npos && h.pos - eq < 12) || contains(after, "per node") ||
        contains(after, "per server") || contains(after, "per instance"))
      return h.gbit;
    if (contains(after, "per gpu") && gpus_per_node) return h.gbit * double(*gpus_per_node);
  }
  if (!rates.empty()) {
    size_t i = 0;
    while (i < lt.size() && std::isdigit(static_cast<unsigned char>(lt[i]))) ++i;
    size_t j = i;
    while (j < lt.size() && lt[j] == ' ') ++j;
    if (i > 0 && j < lt.size() && lt[j] == 'x' && std::atof(lt.c_str()) > 0)
      return std::atof(lt.c_str()) * rates.front().gbit;
    return rates.front().gbit;
  }
  const std::pair<const char*, double> fabrics[] = {{"omni-path", 100}, {"edr", 100}, {"hdr", 200}, {"ndr", 400}};
  for (const auto& [name, gbit] : fabrics)
    if (contains(lt, name)) {
      fabric_note = std::string("inter-node: one ") + name + " link of " + yaml_number(gbit) + " Gb/s per node";
      return gbit;
    }
  return std::nullopt;
}

// A GPU's NVLink bandwidth each way in GB/s from the source's words: NVIDIA quotes both
// directions together (600 GB/s for the A100, 400 for the A800 and H800, 900 for the H100), so a
// figure is halved unless the text says it is one direction.
std::optional<double> nvlink_gbyte_per_s(const std::string& t) {
  const size_t p = t.find("GB/s");
  if (p == std::string::npos) return std::nullopt;
  const std::optional<double> gbit = rate_at(t, p, 4);
  if (!gbit) return std::nullopt;
  const std::string lt = lower(t);
  const bool one_way = contains(lt, "per direction") || contains(lt, "unidirectional") || contains(lt, "each way");
  return *gbit / 8 / (one_way ? 1 : 2);
}

// The catalog's clusters, parsed once for every run of every file.
const std::vector<ClusterSpec>& catalog_cluster_specs() {
  static const std::vector<ClusterSpec> specs = [] {
    std::vector<ClusterSpec> out;
    for (const CatalogEntry& e : catalog_clusters())
      if (Loaded<ClusterSpec> c = load_cluster(e.name); c.value) out.push_back(*c.value);
    return out;
  }();
  return specs;
}

// The catalog cluster the source names (an instance type, whatever GPU words it has beside; a DGX
// system of its GPU), else one with its GPU, node size and network, else the first with its GPU,
// its node size and network set from the text.
std::optional<ClusterSpec> published_cluster(const YAML::Node& run, RunReader& rr) {
  const YAML::Node hw = rr.map(run, "hardware");
  const std::string named = lower(text_of(at(hw, "aws_instance")) + " " + text_of(at(hw, "instance")) + " " +
                                  text_of(at(hw, "cluster")) + " " + text_of(at(hw, "system")));
  for (const ClusterSpec& c : catalog_cluster_specs())
    if (c.name.find('.') != std::string::npos && contains(named, lower(c.name).c_str())) return c;
  const GpuRead read = catalog_gpu_of(hw);
  if (!read.gpu) {
    rr.skip(!read.why_not.empty() ? read.why_not : "hardware.gpu: no catalog GPU in '" + text_of(at(hw, "gpu")) + "'");
    return std::nullopt;
  }
  const std::optional<std::string>& gpu = read.gpu;
  if (!read.note.empty()) rr.assume(read.note);
  const std::optional<int64_t> gpn = rr.count(hw, "gpus_per_node", "hardware.gpus_per_node", 1024);
  std::string fabric_note;
  const std::optional<double> gbit = node_gbit_per_s(text_of(at(hw, "inter_node")), gpn, fabric_note);
  const std::optional<double> nvlink = nvlink_gbyte_per_s(text_of(at(hw, "intra_node")));
  const auto with_bandwidth = [&](ClusterSpec c) {
    source_gpu_memory(hw, c, rr);
    if (!fabric_note.empty()) rr.assume(fabric_note);
    if (nvlink && std::fabs(*nvlink - c.intra_node_gbyte_per_s) > 1) {
      c.intra_node_gbyte_per_s = *nvlink;
      rr.assume("intra-node: " + yaml_number(*nvlink) + " GB/s per GPU each way (the text's)");
    }
    return c;
  };
  std::vector<ClusterSpec> same_gpu;
  for (const ClusterSpec& c : catalog_cluster_specs()) {
    if (c.gpu.name != *gpu) continue;
    const bool dgx = (contains(named, "dgx a100") && c.name.starts_with("dgx-a100")) ||
                     (contains(named, "dgx-2") && c.name == "dgx-2h");
    if (dgx) {
      ClusterSpec named_system = c;
      source_gpu_memory(hw, named_system, rr);
      return named_system;
    }
    same_gpu.push_back(c);
  }
  for (const ClusterSpec& c : same_gpu)
    if ((!gpn || c.gpus_per_node == *gpn) && gbit && std::fabs(c.inter_node_gbit_per_s - *gbit) < 1)
      return with_bandwidth(c);
  if (same_gpu.empty()) {
    rr.skip("hardware: no catalog cluster with " + *gpu + " to take the node's figures from");
    return std::nullopt;
  }
  ClusterSpec c = same_gpu.front();
  rr.assume("cluster: " + c.name + "'s NVLink, PCIe and host memory");
  c.name = slug(text_of(at(hw, "system")));
  if (c.name.empty()) c.name = "published";
  c.price_per_node_hour_usd = 0;
  if (gpn) c.gpus_per_node = int(*gpn);
  if (gbit) {
    c.inter_node_gbit_per_s = *gbit;
  } else {
    rr.assume("inter-node: " + yaml_number(c.inter_node_gbit_per_s) + " Gb/s per node (the source gives none)");
  }
  if (!contains(lower(text_of(at(hw, "inter_node"))), "efa")) c.efficiency.inter_node.reset();
  c.source = text_of(at(hw, "system"));
  return with_bandwidth(c);
}

// ---- the implementation ----

std::vector<int> years_in(const std::string& t) {
  std::vector<int> out;
  for (size_t i = 0; i + 4 <= t.size(); ++i) {
    if ((i > 0 && std::isdigit(static_cast<unsigned char>(t[i - 1]))) ||
        (i + 4 < t.size() && std::isdigit(static_cast<unsigned char>(t[i + 4]))))
      continue;
    const std::string w = t.substr(i, 4);
    if (std::all_of(w.begin(), w.end(), [](char c) { return std::isdigit(static_cast<unsigned char>(c)); })) {
      const int y = std::atoi(w.c_str());
      if (y >= 2017 && y <= 2040) out.push_back(y);
    }
  }
  return out;
}

// The year of an NGC container named in the text ("NGC PyTorch 20.12": 2020), or 0.
int ngc_year(const std::string& t) {
  const size_t ngc = t.find("ngc");
  if (ngc == std::string::npos) return 0;
  for (size_t i = ngc; i + 5 <= t.size() && i < ngc + 24; ++i) {
    const auto digit = [&](size_t k) { return std::isdigit(static_cast<unsigned char>(t[k])) != 0; };
    if (digit(i) && digit(i + 1) && t[i + 2] == '.' && digit(i + 3) && digit(i + 4)) return 2000 + std::atoi(t.c_str() + i);
  }
  return 0;
}

// The stack's year: one in the framework's text, else the NGC container's, else the first year
// the citation names (its publication's); 0 where none is given.
int stack_year(const YAML::Node& run) {
  const std::string fw = lower(text_of(at(run, "framework")));
  const YAML::Node src = at(run, "source");
  const std::string cite = lower(src.IsMap() ? text_of(at(src, "citation")) : text_of(src));
  if (std::vector<int> y = years_in(fw); !y.empty()) return y.front();
  if (const int y = ngc_year(fw + " " + cite)) return y;
  const std::vector<int> y = years_in(cite);
  return y.empty() ? 0 : y.front();
}

// The framework preset of the source's words: the stack's name, and for Megatron-LM its era (a
// version, else stack_year).
std::string framework_preset_of(const YAML::Node& run, RunReader& rr) {
  const std::string fw = lower(text_of(at(run, "framework")));
  // PyTorch FSDP under its own name and in the stacks built on it (MosaicML's Composer and LLM
  // Foundry, torchtitan, torchtune, Lightning's FSDP strategy).
  for (const char* w : {"fsdp", "fairscale", "metaseq", "torchtitan", "torchtune", "composer", "llm-foundry",
                        "llm foundry", "mosaicml"})
    if (contains(fw, w)) return "fsdp";
  if (contains(fw, "smp") || contains(fw, "sagemaker model parallel")) return "smp-v1";
  if (contains(fw, "deepspeed")) return "deepspeed";
  // EleutherAI's GPT-NeoX library: Megatron's layers under DeepSpeed's pipeline engine and ZeRO
  // (github.com/EleutherAI/gpt-neox README), as Megatron-DeepSpeed.
  if (contains(fw, "gpt-neox") || contains(fw, "gpt neox") || contains(fw, "gptneox")) {
    rr.assume("framework: deepspeed for '" + text_of(at(run, "framework")) +
              "' (DeepSpeed's engine under Megatron's layers)");
    return "deepspeed";
  }
  for (const char* w : {"megatron-core", "megatron core", "megatron_core", "mcore", "nemo", "transformer engine"})
    if (contains(fw, w)) return "megatron-core";
  const bool megatron = contains(fw, "megatron");
  if (megatron && contains(fw, "ptd-p")) return "megatron-lm-2021";
  if (megatron && contains(fw, "v1.")) return "megatron-lm-2020";
  // Plain PyTorch (DDP, Hugging Face's Trainer or Accelerate, Lightning): PyTorch's own modules
  // and collectives, which the fsdp preset describes (its zero 0 is DDP).
  if (!megatron)
    for (const char* w : {"pytorch", "ddp", "accelerate", "hugging face", "huggingface", "transformers", "lightning"})
      if (contains(fw, w)) {
        rr.assume("framework: fsdp's PyTorch modules and collectives for '" + text_of(at(run, "framework")) + "'");
        return "fsdp";
      }
  // Megatron-LM by its year; a stack no preset names (JAX's, a lab's own) as Megatron of its
  // year: the kernels and overlap the presets know for that time (fused softmax up to 2022,
  // FlashAttention and overlapped data-parallel traffic from 2023).
  const int year = stack_year(run);
  const std::string era = year == 0      ? "megatron-lm"
                          : year <= 2020 ? "megatron-lm-2020"
                          : year == 2021 ? "megatron-lm-2021"
                          : year >= 2023 ? "megatron-core"
                                         : "megatron-lm";
  if (!megatron) {
    rr.assume("framework: " + era + " ('" + text_of(at(run, "framework")) + "' is no preset's stack; Megatron of " +
              (year == 0 ? std::string("2022, no year given") : std::to_string(year)) + " stands in)");
  } else if (year == 0) {
    rr.assume("framework: megatron-lm (no version or year given)");
  }
  return era;
}

// ---- the layout ----

// ZeRO's stage from the source's words: a number, "ZeRO-N" / "stage N", FSDP's full sharding (3),
// SHARD_GRAD_OP (2), optimizer-state sharding (1); DeepSpeed's 3D parallelism without a stage
// runs ZeRO-1 (its pipeline engine refuses 2 and 3).
int zero_stage_of(const YAML::Node& par, const std::string& framework, RunReader& rr) {
  const YAML::Node n = at(par, "zero_stage");
  if (written_as_number(n))
    return int(rr.read_number(par, "zero_stage", "parallelism.zero_stage", {0, false, 3}, true).value_or(0));
  const std::string t = lower(text_of(n));
  if (t.empty() || t == "none" || t == "null") return 0;
  for (size_t p = t.find_first_of("0123"); p != std::string::npos; p = t.find_first_of("0123", p + 1)) {
    const std::string before = t.substr(p >= 6 ? p - 6 : 0, p >= 6 ? 6 : p);
    if (contains(before, "zero-") || contains(before, "zero ") || contains(before, "stage")) return t[p] - '0';
  }
  if (contains(t, "hybrid shard") || contains(t, "hsdp")) {
    rr.assume("zero 3 over the whole dp group (hybrid sharding's replicas of the shard group are not modelled)");
    return 3;
  }
  if (contains(t, "full shard") || contains(t, "fully shard")) return 3;
  if (contains(t, "grad_op") || contains(t, "gradient shard")) return 2;
  // Megatron's distributed optimizer shards the optimizer state over the dp group: ZeRO-1.
  if (contains(t, "optimizer state") || contains(t, "optimizer-state") || contains(t, "distributed optimizer") ||
      contains(t, "distributed-optimizer") || contains(t, "distributed_optimizer"))
    return 1;
  if (framework == "deepspeed" && contains(t, "zero")) {
    rr.assume("zero 1 (DeepSpeed's pipeline engine runs ZeRO-1 at most; the stage is not given)");
    return 1;
  }
  rr.assume("zero 0 ('" + text_of(n) + "' names no stage)");
  return 0;
}

Recompute recompute_of(const YAML::Node& run, RunReader& rr) {
  const YAML::Node n = at(run, "recompute");
  const std::string t = lower(text_of(n));
  // Words that say none: the first word ("none (FlashAttention keeps no scores)") or a phrase
  // ("no activation checkpointing") before any kind is named.
  const std::string first = t.substr(0, t.find_first_of(" ,;:()"));
  for (const char* w : {"false", "none", "no", "off", "disabled", "without"})
    if (first == w) return Recompute::None;
  for (const char* w : {"no recompute", "no activation", "no checkpoint", "disabled", "not used"})
    if (contains(t, w)) return Recompute::None;
  // Megatron's selective recompute is its core attention's (--recompute-granularity selective).
  if (contains(t, "selective") || contains(t, "core attention") || contains(t, "core_attn"))
    return Recompute::Selective;
  if (t == "true" || contains(t, "full") || contains(t, "checkpoint")) {
    if (contains(t, "unknown") || contains(t, "likely") || contains(t, "assumed")) rr.assume("recompute full");
    return Recompute::Full;
  }
  rr.assume("recompute full (the source says '" + text_of(n) + "')");
  return Recompute::Full;
}

struct Degrees {
  Layout layout;
  int64_t gbs = 0;
  bool mbs_given = false;
};

// Where the source gives no micro-batch size: the one of the powers of two dividing a replica's
// batch whose estimate is fastest among those that fit, as the run's authors would have tuned it.
void fastest_mbs(const Scenario& s, Layout& ly, RunReader& rr) {
  const int64_t per_replica = s.training.gbs / std::max(1, ly.dp);
  Layout best = ly;
  double best_step = 0;
  for (int64_t mbs = 1; mbs <= per_replica && mbs <= 1024; mbs *= 2) {
    if (per_replica % mbs != 0) continue;
    Layout candidate = ly;
    candidate.mbs = int(mbs);
    if (check_layout(s, candidate)) continue;
    const Estimate e = estimate(s, candidate);
    if (e.fits && (best_step == 0 || e.step_time_s < best_step)) best = candidate, best_step = e.step_time_s;
  }
  ly = best;
  rr.assume("mbs " + std::to_string(ly.mbs) +
            (best_step > 0 ? " (not given: the fastest that fits)" : " (not given; no size fits)"));
}

std::optional<Degrees> published_layout(const YAML::Node& run, int gpus, int seq_len, const std::string& framework,
                                        RunReader& rr) {
  const YAML::Node par = rr.map(run, "parallelism");
  const YAML::Node batch = rr.map(run, "batch");
  Degrees d;
  Layout& ly = d.layout;
  const auto tp = rr.count(par, "tp", "parallelism.tp", 1e6);
  const auto pp = rr.count(par, "pp", "parallelism.pp", 1e6);
  const auto dp = rr.count(par, "dp", "parallelism.dp", 1e7);
  if (!tp && !pp && !dp) {
    rr.skip("parallelism: no tp, pp or dp given");
    return std::nullopt;
  }
  ly.tp = int(tp.value_or(1));
  ly.pp = int(pp.value_or(1));
  for (const char* key : {"cp", "context_parallel"})
    if (auto v = rr.count(par, key, std::string("parallelism.") + key, 1e5)) ly.cp = int(*v);
  for (const char* key : {"ep", "expert_parallel"})
    if (auto v = rr.count(par, key, std::string("parallelism.") + key, 1e5)) ly.ep = int(*v);
  if (dp) {
    ly.dp = int(*dp);
  } else if (gpus > 0 && gpus % (ly.tp * ly.pp * ly.cp) == 0) {
    ly.dp = gpus / (ly.tp * ly.pp * ly.cp);
    rr.assume("dp " + std::to_string(ly.dp) + " (the GPUs over tp x pp)");
  } else if (gpus <= 0) {
    rr.skip("parallelism.dp is not given, nor the GPUs (hardware.num_gpus, or num_nodes and gpus_per_node)");
  }
  if (auto v = rr.count(par, "virtual_stages", "parallelism.virtual_stages", 1e4)) ly.vp = int(*v);
  ly.schedule = ly.vp > 1 ? Schedule::Interleaved : Schedule::OneFOneB;
  const std::string sp = lower(text_of(at(par, "sequence_parallel")));
  // A boolean as YAML writes it, or words that begin with one ("yes (Megatron's --sequence-parallel)").
  ly.sp = sp == "on" || sp == "1";
  for (const char* yes : {"true", "yes", "enabled"}) ly.sp = ly.sp || sp.rfind(yes, 0) == 0;
  ly.zero = zero_stage_of(par, framework, rr);
  ly.recompute = recompute_of(run, rr);
  if (auto v = rr.count(batch, "global_batch_size", "batch.global_batch_size", 1e12)) {
    d.gbs = *v;
  } else if (auto t = rr.count(batch, "global_batch_tokens", "batch.global_batch_tokens", 1e15); t && seq_len > 0) {
    d.gbs = *t / seq_len;
  } else {
    rr.skip("batch.global_batch_size is not given");
  }
  d.mbs_given = true;
  if (auto v = rr.count(batch, "micro_batch_size", "batch.micro_batch_size", 1e6)) {
    ly.mbs = int(*v);
  } else if (auto n = rr.count(batch, "num_microbatches_per_replica", "batch.num_microbatches_per_replica", 1e9);
             n && d.gbs % (int64_t(ly.dp) * *n) == 0) {
    ly.mbs = int(d.gbs / (int64_t(ly.dp) * *n));
  } else if (auto g = rr.count(batch, "per_gpu_batch", "batch.per_gpu_batch", 1e6)) {
    ly.mbs = int(*g);
  } else {
    d.mbs_given = false;
  }
  return d;
}

// The offloads the source names (`parallelism.cpu_offload`: FSDP's CPUOffload of parameters,
// ZeRO-Offload's optimizer, activation offload).
void offloads_of(const YAML::Node& run, Scenario& s, Layout& ly) {
  const YAML::Node par = at(run, "parallelism");
  const std::string t = lower(par.IsMap() ? text_of(at(par, "cpu_offload")) + " " + text_of(at(par, "offload")) : "");
  if (contains(t, "param")) s.training.offload_params = true;
  if (contains(t, "optim")) s.training.offload_optimizer = true;
  if (contains(t, "activation")) ly.offload = true;
}

// ---- the measurement ----

// How a reported figure becomes one of Measure's: as it is, per GPU (times the GPUs), in
// milliseconds, or a percentage of a peak (MFU, HFU): the source's `peak_tflops_used`, else the
// GPU's dense 16-bit peak.
enum class Scale { AsIs, PerGpu, Milli, PeakPct, Aggregate };

// Text lower case with every character but letters and digits a space, between spaces:
// "FlashAttention-2 (flash_attn 2.5)" reads " flashattention 2  flash attn 2 5 ", so that a name
// is found as whole words (" fa2 ", " 96 ").
std::string plain_text(const std::string& text) {
  std::string out = " ";
  for (char c : text)
    out += std::isalnum(static_cast<unsigned char>(c)) ? char(std::tolower(static_cast<unsigned char>(c))) : ' ';
  return out + ' ';
}

// Whether a TFLOP/s figure counts the recompute: `tflops_includes_recompute` true or false, else
// the convention's words where they name one count only: Megatron's Eq. 3 (its coefficient 96,
// four passes) counts a whole forward recomputed; MFU, 6N or the coefficient 72 count the model's
// FLOPs. nullopt: unknown.
std::optional<bool> recompute_counted(const std::string& includes, const std::string& convention) {
  if (includes == "true" || includes == "false") return includes == "true";
  const std::string w = plain_text(convention);
  bool eq3 = false;
  for (const char* name : {" eq 3 ", " equation 3 ", " 96 ", " four passes ", " 4 passes "}) eq3 = eq3 || contains(w, name);
  bool model = false;
  for (const char* name : {" mfu ", " 6n ", " 72 ", " model flops "}) model = model || contains(w, name);
  if (eq3 == model) return std::nullopt;
  return eq3;
}

// The first figure reported (`result`, else `derived` from reported ones), in this order: the
// iteration time, TFLOP/s per GPU in the convention the source states, hardware or model TFLOP/s
// so named, the job's PFLOP/s or a percentage of the peak in the stated convention, samples or
// tokens per second (of the job, then per GPU), MFU and HFU. A TFLOP/s whose convention is
// unknown (recompute_counted) is passed over for the next figure.
bool published_measure(const YAML::Node& run, int gpus, double peak_tflops, ValidationRun& out, RunReader& rr) {
  struct Figure {
    const char* key;
    Measure measure;
    Scale scale;
  };
  static const Figure kFigures[] = {{"iteration_time_s", Measure::IterationTime, Scale::AsIs},
                                    {"step_time_s", Measure::IterationTime, Scale::AsIs},
                                    {"iteration_time_ms", Measure::IterationTime, Scale::Milli},
                                    {"step_time_ms", Measure::IterationTime, Scale::Milli},
                                    {"tflops_per_gpu", Measure::HardwareTflops, Scale::AsIs},
                                    {"hw_tflops_per_gpu", Measure::HardwareTflops, Scale::AsIs},
                                    {"hardware_tflops_per_gpu", Measure::HardwareTflops, Scale::AsIs},
                                    {"tflops_per_gpu_megatron_eq3", Measure::HardwareTflops, Scale::AsIs},
                                    {"model_tflops_per_gpu", Measure::ModelTflops, Scale::AsIs},
                                    {"aggregate_pflops", Measure::HardwareTflops, Scale::Aggregate},
                                    {"pct_of_peak", Measure::HardwareTflops, Scale::PeakPct},
                                    {"samples_per_s", Measure::SamplesPerS, Scale::AsIs},
                                    {"samples_per_sec", Measure::SamplesPerS, Scale::AsIs},
                                    {"tokens_per_s", Measure::TokensPerS, Scale::AsIs},
                                    {"tokens_per_sec", Measure::TokensPerS, Scale::AsIs},
                                    {"samples_per_s_per_gpu", Measure::SamplesPerS, Scale::PerGpu},
                                    {"tokens_per_s_per_gpu", Measure::TokensPerS, Scale::PerGpu},
                                    {"tokens_per_gpu_per_s", Measure::TokensPerS, Scale::PerGpu},
                                    {"mfu_pct", Measure::ModelTflops, Scale::PeakPct},
                                    {"hfu_pct", Measure::HardwareTflops, Scale::PeakPct}};
  for (const char* section : {"result", "derived"}) {
    const YAML::Node res = at(run, section);
    if (!res.IsMap()) continue;
    const std::string where = std::string(section) + ".";
    const std::string how = lower(text_of(at(res, "tflops_convention")));
    const std::string stated = text_of(at(res, "tflops_includes_recompute"));
    const std::optional<bool> includes = recompute_counted(stated, how);
    for (const Figure& f : kFigures) {
      const std::optional<double> v = rr.figure(res, f.key, where + f.key);
      if (!v) continue;
      Measure measure = f.measure;
      double value = *v;
      // TFLOP/s in the source's own count: per GPU, the job's PFLOP/s, or a percentage of the
      // peak; hardware or model FLOPs as its convention says.
      const std::string key = f.key;
      bool eq3_count = key == "tflops_per_gpu_megatron_eq3";
      std::string convention_read;  // said where the convention came from the words
      if (key == "tflops_per_gpu" || key == "aggregate_pflops" || key == "pct_of_peak") {
        if (!includes) continue;
        measure = *includes ? Measure::HardwareTflops : Measure::ModelTflops;
        // "Includes the extra forward pass of activation recomputation" (the files' convention,
        // Megatron's Eq. 3) unless the source's own words say the FLOPs executed (HFU, a
        // selective recompute's share).
        eq3_count = *includes && !contains(how, "hfu") && !contains(how, "selective") && !contains(how, "executed");
        if (stated != "true" && stated != "false")
          convention_read = key + " in " + (*includes ? "Megatron's Eq. 3 count" : "model FLOPs") +
                            " (the source's tflops_convention)";
      }
      if (f.scale == Scale::Milli) value /= 1000;
      if (f.scale == Scale::PerGpu || f.scale == Scale::Aggregate) {
        if (gpus <= 0) continue;
        value = f.scale == Scale::PerGpu ? value * gpus : value * 1000 / gpus;
      }
      if (f.scale == Scale::PeakPct) {
        if (const std::optional<double> used = rr.figure(res, "peak_tflops_used", where + "peak_tflops_used")) {
          value = value / 100 * *used;
        } else if (peak_tflops > 0) {
          value = value / 100 * peak_tflops;
          rr.assume(std::string(f.key) + " of the GPU's dense 16-bit peak, " + yaml_number(peak_tflops) + " TFLOP/s");
        } else {
          continue;
        }
      }
      out.measure = measure, out.measured = value;
      out.tflops_count_full_recompute = eq3_count;
      if (!convention_read.empty()) rr.assume(convention_read);
      return true;
    }
  }
  rr.skip("result: no iteration time, TFLOP/s with a stated convention, samples or tokens per second, MFU");
  return false;
}

Precision precision_of(const YAML::Node& run, const GpuSpec& gpu, RunReader& rr) {
  const std::string t = lower(text_of(at(run, "precision")));
  if (contains(t, "fp8")) return Precision::Fp8;
  if (contains(t, "bf16") || contains(t, "bfloat16")) return Precision::Bf16;
  if (contains(t, "fp16") || contains(t, "float16") || contains(t, "16-bit")) return Precision::Fp16;
  if (contains(t, "fp32") || contains(t, "float32")) return Precision::Fp32;
  const Precision p = gpu.peak_tflops_bf16 > 0 ? Precision::Bf16 : Precision::Fp16;
  rr.assume(std::string("precision ") + to_string(p) + " (the GPU's 16-bit default; the source says '" +
            text_of(at(run, "precision")) + "')");
  return p;
}

// Every scalar under `n` (a map's values, a sequence's items, nested) as plain_text.
std::string plain_words(const YAML::Node& n) {
  std::string out;
  if (n.IsScalar()) {
    out = plain_text(n.Scalar());
  } else if (n.IsMap()) {
    for (const auto& kv : n) out += plain_words(kv.second);
  } else if (n.IsSequence()) {
    for (const auto& item : n) out += plain_words(item);
  }
  return out;
}

// What the source writes about its stack: the framework, the attention, its notes, and the
// model's name, attention and notes.
std::string stack_words(const YAML::Node& run) {
  std::string w;
  for (const char* key : {"framework", "attention", "kernels", "optimizations", "software", "notes"})
    w += plain_words(at(run, key));
  const YAML::Node m = at(run, "model");
  for (const char* key : {"name", "attention", "notes"}) w += plain_words(at(m, key));
  return w;
}

// Whether the words at `pos` are denied by the one or two words just before them ("no
// FlashAttention", "without flash-attn", "not using xformers", "w/o FlashAttention").
bool denied_at(const std::string& words, size_t pos) {
  std::vector<std::string> before;
  std::string w;
  for (size_t i = pos >= 32 ? pos - 32 : 0; i < pos; ++i) {
    if (words[i] != ' ') {
      w += words[i];
    } else if (!w.empty()) {
      before.push_back(w), w.clear();
    }
  }
  if (!w.empty()) before.push_back(w);
  auto is_no = [](const std::string& x) { return x == "no" || x == "not" || x == "without" || x == "non"; };
  const size_t n = before.size();
  if (n >= 1 && is_no(before[n - 1])) return true;
  if (n >= 2 && before[n - 2] == "w" && before[n - 1] == "o") return true;
  return n >= 2 && is_no(before[n - 2]) &&
         (before[n - 1] == "using" || before[n - 1] == "use" || before[n - 1] == "the" || before[n - 1] == "any");
}

// The first place one of `names` is written and not denied; npos where none is.
size_t named_at(const std::string& words, std::initializer_list<const char*> names) {
  size_t first = std::string::npos;
  for (const char* name : names)
    for (size_t p = words.find(name); p != std::string::npos; p = words.find(name, p + 1))
      if (!denied_at(words, p)) {
        first = std::min(first, p);
        break;
      }
  return first;
}

// An attention kernel the source names that keeps no s x s scores and recomputes them in the
// backward: the kernel it runs as, and what was taken.
struct KernelRead {
  FlashKernel kernel = FlashKernel::Fa2;
  std::string said;
};

// FlashAttention by its version (3 is written for Hopper; a GPU without its figure runs it at
// FlashAttention-2's, GpuSpec::flash_kernel_run), cuDNN's fused flash attention, and the kernels
// that run as FlashAttention-2 does: PyTorch's scaled_dot_product_attention (its flash backend is
// FlashAttention-2's kernel for 16-bit inputs on Ampere and later, PyTorch 2.0 release notes and
// torch/nn/functional.py) and xformers' memory-efficient attention (the same tiling without the s x
// s scores, Rabe and Staats 2021; no separate figure here). FlashAttention without a version from
// a source of 2022 or before is the first one (FlashAttention-2 came in July 2023, Dao 2023), said
// so.
std::optional<KernelRead> attention_kernel_named(const std::string& words, int year) {
  if (named_at(words, {" cudnn fused attention", " cudnn attention", " cudnn sdpa", " cudnn flash"}) !=
      std::string::npos)
    return KernelRead{FlashKernel::Cudnn, "attention flash (cuDNN's fused attention, the source's)"};
  const size_t flash = named_at(words, {" flashattention", " flash attention", " flash attn", " flashattn", " fa1 ",
                                        " fa2 ", " fa3 ", " flash sdp"});
  if (flash != std::string::npos) {
    const std::string after = words.substr(flash, 40);
    auto version = [&](const char* v2, const char* v3) {
      return contains(after, v3) ? 3 : contains(after, v2) ? 2 : 0;
    };
    const int v = std::max({version("attention 2 ", "attention 3 "), version("attention v2 ", "attention v3 "),
                            version("attn 2 ", "attn 3 "), version(" fa2 ", " fa3 "),
                            version("flashattention2 ", "flashattention3 ")});
    const bool first = contains(after, "attention 1 ") || contains(after, "attention v1 ") ||
                       contains(after, "attn 1 ") || contains(after, " fa1 ") || contains(after, "attn 0 ");
    if (v == 3) return KernelRead{FlashKernel::Fa3, "attention flash (FlashAttention-3, the source's)"};
    if (v == 2) return KernelRead{FlashKernel::Fa2, "attention flash (FlashAttention-2, the source's)"};
    if (first) return KernelRead{FlashKernel::Fa1, "attention flash (the first FlashAttention, the source's)"};
    if (year > 0 && year <= 2022)
      return KernelRead{FlashKernel::Fa1, "attention flash (the first FlashAttention: the source's of " +
                                              std::to_string(year) + ", before FlashAttention-2)"};
    return KernelRead{FlashKernel::Fa2, "attention flash (FlashAttention, taken as FlashAttention-2)"};
  }
  if (named_at(words, {" sdpa ", " scaled dot product attention"}) != std::string::npos)
    return KernelRead{FlashKernel::Fa2,
                      "attention flash (PyTorch's scaled_dot_product_attention: FlashAttention-2's kernel)"};
  if (named_at(words, {" xformers", " memory efficient attention"}) != std::string::npos)
    return KernelRead{FlashKernel::Fa2,
                      "attention flash (xformers' memory-efficient attention, at FlashAttention-2's rate)"};
  return std::nullopt;
}

// What the source says of the stack beyond its name: the optimizer; the attention of a model
// written as minGPT or Hugging Face modules (scores materialised: eager); FSDP's backward
// prefetch, off by default before PyTorch 2.0 (pytorch/pytorch pull request 88428 made
// BACKWARD_PRE the default) and, up to 1.11, wrapping each large Linear; DeepSpeed's ZeRO-3
// collectives, one per parameter tensor up to 0.5.5
// (0.5.6 coalesced them: DeepSpeed pull request 1188).
void stack_knobs(const YAML::Node& run, const std::string& framework, Scenario& s, RunReader& rr) {
  TrainingSpec& t = s.training;
  const std::string opt = lower(text_of(at(run, "optimizer")));
  if (contains(opt, "sgd")) t.optimizer = Optimizer::Sgd;
  const std::string named_attention = lower(text_of(at(run, "attention")));
  const std::string words = stack_words(run);
  if (auto a = parse_attention(named_attention)) {
    t.attention = *a;
  } else if (const std::optional<KernelRead> k = attention_kernel_named(words, stack_year(run))) {
    // The stack's own attention, as a preset's default is (not a user's --attention): where
    // FlashAttention does not run on the GPU (xformers' kernel on a V100) the estimate costs the
    // fused softmax instead and says so (Scenario::attention_fallback).
    t.framework.attention = Attention::Flash;
    t.framework.flash_kernel = k->kernel;
    rr.assume(k->said);
    if (const std::string why = s.attention_fallback(); !why.empty()) rr.assume(why);
  } else {
    if (contains(words, " mingpt ") || contains(words, " hugging face ") || contains(words, " huggingface ")) {
      t.attention = Attention::Eager;
      rr.assume("attention eager (minGPT or Hugging Face modules)");
    }
  }
  if (const int year = stack_year(run); framework == "deepspeed" && year > 0 && year <= 2021) {
    t.framework.zero3_collectives = Zero3Collectives::Tensor;
    rr.assume("ZeRO-3 collectives per tensor (DeepSpeed before 0.5.6 of November 2021)");
  }
  const std::string fw_words = lower(text_of(at(run, "framework")));
  if (const size_t v = fw_words.find("pytorch 1."); framework == "fsdp" && v != std::string::npos) {
    t.framework.zero3_backward_prefetch = Zero3BackwardPrefetch::None;
    rr.assume("backward prefetch none (PyTorch 1.x's default)");
    // Before 1.12 FSDP's one auto-wrap policy was size-based: each large Linear a unit
    // (transformer_auto_wrap_policy came with 1.12, pytorch/pytorch pull request 76455).
    const int minor = std::atoi(fw_words.c_str() + v + std::strlen("pytorch 1."));
    if (minor > 0 && minor <= 11) {
      t.framework.zero3_unit = Zero3Unit::Linear;
      rr.assume("zero3_unit linear (PyTorch 1." + std::to_string(minor) + "'s size-based auto-wrap)");
    }
  }
}

// Where the stack's preset lacks a knob the run used (FSDP with Megatron's tensor parallelism, as
// metaseq ran OPT), the first of DeepSpeed's, Megatron-Core's and Megatron-LM's that has it stands
// in, said so; where none has it the run is left out for the original reason. Selective
// recompute in a stack whose preset checkpoints whole layers only (PyTorch's selective
// checkpointing policies, as torchtitan's, save other tensors than Megatron's) is read as full
// recompute in that stack: the stack's own kernels and sharding, at a recompute that costs more
// time, never more memory, than the run's.
std::string preset_that_runs(const std::string& name, Layout& ly, TrainingSpec& t, RunReader& rr) {
  if (ly.recompute == Recompute::Selective && !t.framework.selective_recompute) {
    ly.recompute = Recompute::Full;
    if (!framework_lacks(t.framework, ly)) {
      rr.assume("recompute full for the source's selective (" + name + " checkpoints whole layers only)");
      return name;
    }
    ly.recompute = Recompute::Selective;
  }
  const std::optional<std::string> lacks = framework_lacks(t.framework, ly);
  if (!lacks) return name;
  for (const char* other : {"deepspeed", "megatron-core", "megatron-lm"}) {
    if (name == other) continue;
    Loaded<FrameworkSpec> f = load_framework(other);
    if (!f.value || framework_lacks(*f.value, ly)) continue;
    t.framework = *f.value;
    rr.assume(*lacks + ": " + other + "'s taken");
    return other;
  }
  return name;
}

// Interleaving here needs equal chunks (check_layout). A source whose layers do not split into
// pp x vp of them ran uneven first or last stages (Megatron-Core's
// --decoder-first-pipeline-num-layers and --decoder-last-pipeline-num-layers): the most chunks per
// stage, below the source's, that split them evenly stand in, else 1F1B without chunks, whose
// bubble is the longer; said so.
void even_chunks(int layers, Layout& ly, RunReader& rr) {
  if (ly.vp <= 1 || ly.pp < 1 || layers % (ly.pp * ly.vp) == 0) return;
  int vp = ly.vp - 1;
  while (vp > 1 && layers % (ly.pp * vp) != 0) --vp;
  rr.assume("vp " + std::to_string(vp) + " for the source's " + std::to_string(ly.vp) + " (" + std::to_string(layers) +
            " layers do not split into pp x vp equal chunks)");
  ly.vp = vp;
  ly.schedule = vp > 1 ? Schedule::Interleaved : Schedule::OneFOneB;
}

std::string join(const std::vector<std::string>& parts) {
  std::string out;
  for (const std::string& p : parts) out += (out.empty() ? "" : "; ") + p;
  return out;
}

}  // namespace

void name_published_families(std::vector<ValidationRun>& runs) {
  // The words (between dashes) both ids begin with, joined again.
  const auto common_words = [](const std::string& a, const std::string& b) {
    const auto words = [](const std::string& id) {
      std::vector<std::string> out;
      for (size_t p = 0;; ) {
        const size_t dash = id.find('-', p);
        out.push_back(id.substr(p, dash == std::string::npos ? std::string::npos : dash - p));
        if (dash == std::string::npos) return out;
        p = dash + 1;
      }
    };
    const std::vector<std::string> wa = words(a), wb = words(b);
    std::string out;
    for (size_t i = 0; i < wa.size() && i < wb.size() && wa[i] == wb[i]; ++i) out += (i > 0 ? "-" : "") + wa[i];
    return out;
  };

  for (ValidationRun& r : runs) {
    if (!r.published || !r.family.empty()) continue;
    std::string family;
    int members = 0;
    for (const ValidationRun& o : runs) {
      if (!o.published || o.source != r.source || o.source.empty()) continue;
      family = members++ == 0 ? o.id : common_words(family, o.id);
    }
    r.family = members > 1 && !family.empty() ? family : r.id.substr(0, r.id.find('-'));
  }
}

bool is_published_run(const YAML::Node& run) {
  return run.IsMap() && (run["hardware"].IsDefined() || run["parallelism"].IsDefined() || run["result"].IsDefined());
}

std::optional<ValidationRun> read_published_run(const YAML::Node& run, const std::string& file,
                                                const std::string& prefix, Diagnostics& diags) {
  RunReader rr{file, prefix, diags, position_of(run).line, {}, {}, false};
  ValidationRun out;
  out.line = rr.line;
  out.id = text_of(at(run, "id"));
  if (out.id.empty()) rr.error(run, "id", "missing required key (a run's name)");
  const YAML::Node src = at(run, "source");
  out.source = src.IsMap() ? text_of(at(src, "citation")) : text_of(src);
  out.family = text_of(at(run, "family"));
  if (text_of(at(run, "calibration")) == "false") out.calibration = false;
  out.model_ref = "inline";
  out.cluster_ref = "inline";
  std::optional<ModelSpec> model = published_model(run, rr);
  std::optional<ClusterSpec> cluster = published_cluster(run, rr);
  std::string fw_name = framework_preset_of(run, rr);
  Scenario& s = out.scenario;
  if (Loaded<FrameworkSpec> fw = load_framework(fw_name); fw.value) s.training.framework = *fw.value;
  const YAML::Node hw = at(run, "hardware").IsMap() ? at(run, "hardware") : YAML::Node(YAML::NodeType::Map);
  s.gpus = int(rr.count(hw, "num_gpus", "hardware.num_gpus", 1e7).value_or(0));
  s.nodes = int(rr.count(hw, "num_nodes", "hardware.num_nodes", 1e6).value_or(0));
  if (s.gpus == 0 && s.nodes > 0 && cluster && cluster->gpus_per_node > 0) {
    s.gpus = s.nodes * cluster->gpus_per_node;
    rr.assume("num_gpus " + std::to_string(s.gpus) + " (num_nodes x " + std::to_string(cluster->gpus_per_node) +
              " GPUs a node)");
  }
  std::optional<Degrees> deg = published_layout(run, s.gpus, model ? model->seq_len : 0, fw_name, rr);
  const int gpus = s.gpus > 0 ? s.gpus : deg ? deg->layout.gpus() : 0;
  published_measure(run, gpus, cluster ? cluster->gpu.peak_tflops_16bit() : 0, out, rr);
  if (rr.failed) return std::nullopt;
  if (rr.skip_reason.empty() && model && cluster && deg) {
    s.model = *model;
    s.cluster = *cluster;
    out.layout = deg->layout;
    s.training.gbs = deg->gbs;
    s.training.precision = precision_of(run, cluster->gpu, rr);
    offloads_of(run, s, out.layout);
    fw_name = preset_that_runs(fw_name, out.layout, s.training, rr);
    stack_knobs(run, fw_name, s, rr);
    if (s.gpus == 0) s.gpus = out.layout.gpus();
    const int gpn = std::max(1, s.cluster.gpus_per_node);
    if (s.nodes == 0 || int64_t(s.nodes) * gpn < s.gpus) s.nodes = (s.gpus + gpn - 1) / gpn;
    even_chunks(s.model.layers, out.layout, rr);
    if (!deg->mbs_given) fastest_mbs(s, out.layout, rr);
    if (auto err = check_layout(s, out.layout)) rr.skip("the layout it gives cannot run here: " + *err);
    if (out.measure == Measure::HardwareTflops && out.tflops_count_full_recompute &&
        out.layout.recompute != Recompute::Full)
      rr.assume("TFLOP/s counted with a whole forward recomputed (Megatron's Eq. 3, the convention's), the "
                "run's own recompute " + std::string(to_string(out.layout.recompute)));
  }
  if (!rr.skip_reason.empty()) {
    diags.warning(file, rr.line, 1, prefix.substr(0, prefix.size() - 1),
                  "run '" + out.id + "' left out: " + rr.skip_reason);
    return std::nullopt;
  }
  out.published = true;
  out.assumptions = "framework " + fw_name + ", cluster " + s.cluster.name +
                    (rr.assumed.empty() ? std::string() : "; " + join(rr.assumed));
  return out;
}

}  // namespace capplan::detail
