// plan.yaml: reading (with diagnostics) and writing (atomically) a scenario and its layout.
// A plan names its model and cluster either by reference (preset name or path, loaded on read)
// or inline as full specs; plan_to_yaml writes both, so a saved plan does not depend on the
// catalog or on files that may change later.
#include "planner/plan_io.h"

#include <algorithm>
#include <filesystem>
#include <sstream>

#include "planner/catalog.h"
#include "planner/spec_io.h"
#include "plan_reader.h"
#include "yaml_reader.h"

namespace capplan {

using detail::Limits;
using detail::MapReader;
using detail::yaml_number;
using detail::yaml_quote;

namespace {

constexpr Limits kCount{0, true, 1e7};
constexpr Limits kNonNegativeCount{0, false, 1e7};
constexpr Limits kGbs{0, true, 1e12};
constexpr Limits kTokens{0, false, 1e18};
constexpr Limits kZero{0, false, 3};

void write_cluster(std::ostringstream& os, const ClusterSpec& c) {
  os << "cluster:\n";
  os << "  name: " << yaml_quote(c.name) << "\n";
  os << "  gpus_per_node: " << c.gpus_per_node << "\n";
  os << "  gpu:\n";
  os << "    name: " << yaml_quote(c.gpu.name) << "\n";
  os << "    memory_gib: " << yaml_number(c.gpu.memory_gib) << "\n";
  os << "    memory_gbyte_per_s: " << yaml_number(c.gpu.memory_gbyte_per_s) << "\n";
  os << "    peak_tflops:\n";
  os << "      fp16: " << yaml_number(c.gpu.peak_tflops_fp16) << "\n";
  os << "      bf16: " << yaml_number(c.gpu.peak_tflops_bf16) << "\n";
  os << "      fp32: " << yaml_number(c.gpu.peak_tflops_fp32) << "\n";
  os << "      fp8: " << yaml_number(c.gpu.peak_tflops_fp8) << "\n";
  os << "    gemm_peak_fraction: " << yaml_number(c.gpu.gemm_peak_fraction) << "\n";
  os << "    flash_peak_fraction: " << yaml_number(c.gpu.flash_peak_fraction) << "\n";
  if (c.gpu.fa3_peak_fraction > 0) os << "    fa3_peak_fraction: " << yaml_number(c.gpu.fa3_peak_fraction) << "\n";
  if (c.gpu.cudnn_attention_peak_fraction > 0)
    os << "    cudnn_attention_peak_fraction: " << yaml_number(c.gpu.cudnn_attention_peak_fraction) << "\n";
  os << "    sms: " << c.gpu.sms << "\n";
  if (c.gpu.cpu_rank) os << "    cpu_rank: true\n";
  if (!c.gpu.source.empty()) os << "    source: " << yaml_quote(c.gpu.source) << "\n";
  os << "  intra_node_gbyte_per_s: " << yaml_number(c.intra_node_gbyte_per_s) << "\n";
  os << "  inter_node_gbit_per_s: " << yaml_number(c.inter_node_gbit_per_s) << "\n";
  auto optional = [&](const char* key, double v) {
    if (v > 0) os << "  " << key << ": " << yaml_number(v) << "\n";
  };
  optional("price_per_node_hour_usd", c.price_per_node_hour_usd);
  optional("intra_node_latency_us", c.intra_node_latency_us);
  optional("inter_node_latency_us", c.inter_node_latency_us);
  optional("pcie_gbyte_per_s", c.pcie_gbyte_per_s);
  optional("host_memory_gib", c.host_memory_gib);
  const EfficiencyOverrides& e = c.efficiency;
  if (e.gemm || e.memory || e.intra_node || e.inter_node || e.flash) {
    os << "  efficiency:\n";
    if (e.gemm) os << "    gemm: " << yaml_number(*e.gemm) << "\n";
    if (e.memory) os << "    memory: " << yaml_number(*e.memory) << "\n";
    if (e.intra_node) os << "    intra_node: " << yaml_number(*e.intra_node) << "\n";
    if (e.inter_node) os << "    inter_node: " << yaml_number(*e.inter_node) << "\n";
    if (e.flash) os << "    flash: " << yaml_number(*e.flash) << "\n";
  }
  if (!c.source.empty()) os << "  source: " << yaml_quote(c.source) << "\n";
}

// Diagnostics of a referenced spec that carry no position ("no such preset") are placed at the
// plan's key that made the reference.
void relocate(const Diagnostics& from, const std::string& file, detail::Position at,
              const std::string& key, Diagnostics& to) {
  for (Diagnostic d : from.items()) {
    if (d.line == 0 && (d.file == "<command line>" || !detail::path_exists(d.file))) {
      d.file = file;
      d.line = at.line;
      d.column = at.column;
      d.path = key;
    }
    to.add(d);
  }
}

// A relative path in a plan is relative to the plan's folder when that file exists.
std::string resolve_ref(const std::string& ref, const std::string& plan_file) {
  const std::filesystem::path p(ref);
  if (p.is_absolute() || detail::path_exists(p)) return ref;
  const std::filesystem::path beside = std::filesystem::path(plan_file).parent_path() / p;
  if (!plan_file.empty() && detail::path_exists(beside)) return beside.string();
  return ref;
}

}  // namespace

std::string cluster_to_yaml(const ClusterSpec& cluster) {
  std::ostringstream os;
  write_cluster(os, cluster);
  // write_cluster nests the spec under "cluster:"; a cluster file has its keys at the top.
  std::istringstream in(os.str());
  std::string out, line;
  std::getline(in, line);
  while (std::getline(in, line)) out += line.substr(std::min<size_t>(2, line.size())) + "\n";
  return out;
}

std::string plan_to_yaml(const Plan& plan) {
  const Scenario& s = plan.scenario;
  const Layout& l = plan.layout;
  std::ostringstream os;
  os << "# capplan plan: " << detail::comment_text(s.model.name) << " on " << s.nodes << " x "
     << detail::comment_text(s.cluster.name);
  if (s.gpus > 0) os << " (" << s.gpus << " GPUs)";
  os << "\n";
  os << "created_by: " << yaml_quote(plan.created_by.empty() ? "capplan" : plan.created_by)
     << "\n";
  if (!plan.model_ref.empty()) os << "model_ref: " << yaml_quote(plan.model_ref) << "\n";
  if (!plan.cluster_ref.empty()) os << "cluster_ref: " << yaml_quote(plan.cluster_ref) << "\n";
  os << "nodes: " << s.nodes << "\n";
  if (s.gpus > 0) os << "gpus: " << s.gpus << "\n";
  os << "training:\n";
  os << "  gbs: " << s.training.gbs << "\n";
  if (s.training.seq_len > 0) os << "  seq_len: " << s.training.seq_len << "\n";
  if (s.training.tokens > 0) os << "  tokens: " << yaml_number(s.training.tokens) << "\n";
  os << "  precision: " << to_string(s.training.precision) << "\n";
  // A preset by its name; any other implementation (a framework file's, or a preset changed) as
  // the whole spec, so that the plan reads back as it was costed wherever it is opened.
  const FrameworkSpec& fw = s.training.framework;
  const Loaded<FrameworkSpec> preset =
      find_catalog_framework(fw.name) ? load_framework(fw.name) : Loaded<FrameworkSpec>{};
  if (preset.value && *preset.value == fw)
    os << "  framework: " << yaml_quote(fw.name) << "\n";
  else
    os << "  framework:\n" << framework_to_yaml(fw, "    ");
  if (s.training.attention) os << "  attention: " << to_string(*s.training.attention) << "\n";
  os << "  optimizer: " << to_string(s.training.optimizer) << "\n";
  if (s.training.offload_params) os << "  offload_params: true\n";
  if (s.training.offload_optimizer) os << "  offload_optimizer: true\n";
  os << "layout:\n";
  os << "  dp: " << l.dp << "\n";
  os << "  tp: " << l.tp << "\n";
  os << "  pp: " << l.pp << "\n";
  if (l.cp != 1) os << "  cp: " << l.cp << "\n";
  if (l.ep != 1) os << "  ep: " << l.ep << "\n";
  os << "  vp: " << l.vp << "\n";
  os << "  mbs: " << l.mbs << "\n";
  os << "  zero: " << l.zero << "\n";
  os << "  recompute: " << to_string(l.recompute) << "\n";
  os << "  offload: " << (l.offload ? "true" : "false") << "\n";
  os << "  sp: " << (l.sp ? "true" : "false") << "\n";
  os << "  order: " << l.order << "\n";
  os << "  schedule: " << to_string(l.schedule) << "\n";
  os << "model:\n" << model_to_yaml(s.model, "  ");
  write_cluster(os, s.cluster);
  return os.str();
}

namespace {
Loaded<Plan> parse_plan(const std::string& text, const std::string& file, bool keep_invalid);
}  // namespace

Loaded<Plan> parse_plan_yaml(const std::string& text, const std::string& file) {
  return parse_plan(text, file, false);
}

Loaded<Plan> load_plan_draft(const std::string& path) {
  std::string text, error;
  if (!detail::read_text_file(path, text, error)) {
    Loaded<Plan> out;
    out.diagnostics.error(path, 0, 0, "", error);
    return out;
  }
  return parse_plan(text, path, true);
}

namespace detail {
std::optional<Plan> read_plan_map(const YAML::Node& root, const std::string& file,
                                  const std::string& prefix, bool keep_invalid, Diagnostics& d) {
  if (!root.IsMap()) {
    const Position p = position_of(root);
    const std::string key = prefix.empty() ? "" : prefix.substr(0, prefix.size() - 1);
    d.error(file, p.line ? p.line : 1, p.column ? p.column : 1, key,
            "expected a plan (a map with model, cluster, nodes, training, layout)");
    return std::nullopt;
  }
  const size_t before = d.items().size();
  Plan plan;
  MapReader r(root, file, prefix, d);
  r.text("created_by", plan.created_by, false);
  r.text("model_ref", plan.model_ref, false);
  r.text("cluster_ref", plan.cluster_ref, false);
  r.integer("nodes", plan.scenario.nodes, true, kCount);
  r.integer("gpus", plan.scenario.gpus, false, kNonNegativeCount);

  const YAML::Node model = r.child("model");
  if (!model.IsDefined()) {
    r.missing("model", "a preset name, a path, or an inline model spec");
  } else if (model.IsMap()) {
    if (auto m = detail::read_model_map(model, file, prefix + "model.", d, keep_invalid)) plan.scenario.model = *m;
  } else if (model.IsScalar()) {
    if (plan.model_ref.empty()) plan.model_ref = model.Scalar();
    const Loaded<ModelSpec> m = load_model(resolve_ref(model.Scalar(), file));
    relocate(m.diagnostics, file, detail::position_of(model), prefix + "model", d);
    if (m.value) plan.scenario.model = *m.value;
  } else {
    r.error_at(model, "model", "expected a preset name, a path, or a map");
  }

  const YAML::Node cluster = r.child("cluster");
  if (!cluster.IsDefined()) {
    r.missing("cluster", "a preset name, a path, or an inline cluster spec");
  } else if (cluster.IsMap()) {
    if (auto c = detail::read_cluster_map(cluster, file, prefix + "cluster.", d, keep_invalid)) plan.scenario.cluster = *c;
  } else if (cluster.IsScalar()) {
    if (plan.cluster_ref.empty()) plan.cluster_ref = cluster.Scalar();
    const Loaded<ClusterSpec> c = load_cluster(resolve_ref(cluster.Scalar(), file));
    relocate(c.diagnostics, file, detail::position_of(cluster), prefix + "cluster", d);
    if (c.value) plan.scenario.cluster = *c.value;
  } else {
    r.error_at(cluster, "cluster", "expected a preset name, a path, or a map");
  }

  const YAML::Node training = r.child("training");
  if (!training.IsDefined()) {
    r.missing("training", "a map with gbs, seq_len, tokens, precision");
  } else if (!training.IsMap()) {
    r.error_at(training, "training", "expected a map with gbs, seq_len, tokens, precision");
  } else {
    TrainingSpec& t = plan.scenario.training;
    MapReader tr(training, file, prefix + "training.", d);
    tr.integer64("gbs", t.gbs, true, kGbs);
    tr.integer("seq_len", t.seq_len, false, Limits{0, false, 1e8});
    tr.number("tokens", t.tokens, false, kTokens);
    const GpuSpec& gpu = plan.scenario.cluster.gpu;
    const bool gpu_known = gpu.peak_tflops_fp16 > 0 || gpu.peak_tflops_bf16 > 0;
    if (tr.has("framework") && tr.child("framework").IsMap()) {
      if (auto f = detail::read_framework_map(tr.child("framework"), file, prefix + "training.framework.", d))
        t.framework = *f;
    } else {
      std::string fw;
      if (tr.text("framework", fw, false) && !fw.empty()) {
        // A preset's name, or a framework file's path (beside the plan where it is not found as given),
        // as a model or cluster reference is.
        Loaded<FrameworkSpec> f = load_framework(resolve_ref(fw, file));
        if (f.value)
          t.framework = *f.value;
        else
          for (const Diagnostic& dg : f.diagnostics.items())
            tr.error_at(tr.child("framework"), "framework", dg.message, dg.hint);
      }
    }
    {
      Attention at = Attention::Fused;
      if (tr.has("attention") && tr.enumeration("attention", at, parse_attention, "eager, fused, flash"))
        t.attention = at;
      tr.enumeration("optimizer", t.optimizer, parse_optimizer, "adam, sgd");
      tr.boolean("offload_params", t.offload_params, false);
      tr.boolean("offload_optimizer", t.offload_optimizer, false);
    }
    if (tr.enumeration("precision", t.precision, parse_precision, "bf16, fp16, fp32, fp8")) {
      if (gpu_known && gpu.peak_tflops(t.precision) <= 0)
        tr.error_at(tr.child("precision"), "precision",
                    std::string(to_string(t.precision)) + " is not supported by " + gpu.name,
                    "use fp16");
    } else if (!tr.has("precision") && gpu_known && gpu.peak_tflops_bf16 <= 0) {
      t.precision = Precision::Fp16;  // GPUs without bf16 (V100) train in fp16 with loss scaling
    }
    tr.finish();
  }

  const YAML::Node layout = r.child("layout");
  if (!layout.IsDefined()) {
    r.missing("layout", "a map with dp, tp, pp, ...");
  } else if (!layout.IsMap()) {
    r.error_at(layout, "layout", "expected a map with dp, tp, pp, ...");
  } else {
    Layout& l = plan.layout;
    MapReader lr(layout, file, prefix + "layout.", d);
    lr.integer("dp", l.dp, true, kCount);
    lr.integer("tp", l.tp, true, kCount);
    lr.integer("pp", l.pp, true, kCount);
    lr.integer("cp", l.cp, false, kCount);
    lr.integer("ep", l.ep, false, kCount);
    lr.integer("vp", l.vp, false, kCount);
    lr.integer("mbs", l.mbs, false, kCount);
    lr.integer("zero", l.zero, false, kZero);
    lr.enumeration("recompute", l.recompute, parse_recompute, "none, selective, full");
    lr.boolean("offload", l.offload, false);
    lr.boolean("sp", l.sp, false);
    lr.enumeration("order", l.order, parse_order, "a permutation of D, P, T (with C and E optional), or cluster, spread");
    lr.enumeration("schedule", l.schedule, parse_schedule, "gpipe, 1f1b, interleaved");
    lr.finish();
  }
  r.finish();
  if (!keep_invalid && d.has_errors_since(before)) return std::nullopt;
  return plan;
}
}  // namespace detail

namespace {
Loaded<Plan> parse_plan(const std::string& text, const std::string& file, bool keep_invalid) {
  Loaded<Plan> out;
  YAML::Node root;
  if (!detail::parse_yaml_text(text, file, root, out.diagnostics)) return out;
  out.value = detail::read_plan_map(root, file, "", keep_invalid, out.diagnostics);
  return out;
}
}  // namespace

Loaded<Plan> load_plan(const std::string& path) {
  if (!detail::path_exists(path)) {
    if (const CatalogEntry* e = find_catalog_plan(path)) return parse_plan_yaml(e->text, e->file);
    Loaded<Plan> out;
    out.diagnostics.error(path, 0, 0, "", "no such file");
    return out;
  }
  std::string text, error;
  if (!detail::read_text_file(path, text, error)) {
    Loaded<Plan> out;
    out.diagnostics.error(path, 0, 0, "", error);
    return out;
  }
  return parse_plan_yaml(text, path);
}

std::string save_plan(const Plan& plan, const std::string& path) {
  return write_file_atomic(path, plan_to_yaml(plan));
}

}  // namespace capplan
