// Flag parsing, scenario/layout construction and output forms shared by the capplan commands.
#include "cli_common.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <map>
#include <sstream>

#include "planner/plan_io.h"
#include "planner/device_profile.h"
#include "planner/spec_io.h"

namespace capplan::cli {

namespace {

std::string hint_of(const std::string& near) {
  return near.empty() ? std::string() : "did you mean '" + near + "'?";
}

}  // namespace

std::vector<FlagSpec> scenario_flags(bool node_range) {
  return {
      {"model", true, "model preset name, YAML file or Hugging Face config.json", "M"},
      {"cluster", true, "cluster/instance preset name or YAML file", "C"},
      {"nodes", true,
       node_range ? "node count, or a range A:B to search over" : "node count", "N"},
      {"gpus", true, "GPUs used in all (default nodes x gpus_per_node)", "N"},
      {"gbs", true, "global batch size, sequences per optimizer step", "G"},
      {"seq", true, "sequence length (default: the model's)", "S"},
      {"tokens", true, "tokens to train, e.g. 300e9 (default 20 per parameter)", "N"},
      {"precision", true, "bf16 | fp16 | fp32 | fp8 (default bf16, fp16 where bf16 is unsupported)",
       "P"},
      {"framework", true,
       "implementation preset (configs/frameworks): megatron-lm (default), megatron-lm-2020, megatron-lm-2021, "
       "megatron-core, deepspeed, fsdp, smp-v1, or a YAML file",
       "F"},
      {"attention", true, "attention kernel: eager | fused | flash (default: the framework's)", "A"},
      {"optimizer", true, "adam (default) | sgd", "O"},
      {"offload-params", false, "keep the 16-bit weights in host memory, streamed per layer", ""},
      {"offload-optimizer", false, "optimizer state in host memory, step on the CPU (ZeRO-Offload)", ""},
      {"device-profile", true, "measured kernel and collective times (capplan profile --measure --out FILE)",
       "FILE"},
  };
}

std::vector<FlagSpec> layout_flags() {
  return {
      {"dp", true, "data-parallel degree", "D"},
      {"tp", true, "tensor-parallel degree", "T"},
      {"pp", true, "pipeline-parallel degree (stages)", "P"},
      {"cp", true, "context-parallel degree: the sequence split over C ranks (default 1)", "C"},
      {"ep", true, "expert-parallel degree: an MoE layer's experts over E ranks of dp*cp (default 1)", "E"},
      {"vp", true, "virtual stages per pipeline stage (interleaved schedule)", "V"},
      {"mbs", true, "micro-batch size, sequences", "B"},
      {"zero", true, "ZeRO stage 0|1|2|3 over the data-parallel group", "Z"},
      {"recompute", true, "activation recompute: none | selective | full", "R"},
      {"offload", false, "offload activations to host memory", ""},
      {"sp", false, "sequence parallelism (with tp > 1)", ""},
      {"order", true, "rank placement: a permutation of DPT with C and E optional, right-most fastest (or cluster|spread)",
       "O"},
      {"schedule", true, "pipeline schedule: gpipe | 1f1b | interleaved", "S"},
  };
}

FlagSpec json_flag() { return {"json", false, "print JSON instead of a table", ""}; }

std::vector<FlagSpec> concat(std::vector<FlagSpec> a, const std::vector<FlagSpec>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

std::shared_ptr<const DeviceProfile> device_profile_flag(const Args& args, Diagnostics& diags) {
  if (!args.has("device-profile")) return nullptr;
  Loaded<DeviceProfile> p = load_device_profile(args.get("device-profile"));
  diags.append(p.diagnostics);
  return p.ok() ? std::make_shared<const DeviceProfile>(*p.value) : nullptr;
}

namespace {

bool have_cluster(const ScenarioArgs& out) { return out.cluster_loaded; }

// --model, --cluster and --device-profile: the specs, loaded.
void spec_flags(const Args& args, Diagnostics& diags, bool profile_of_cluster, ScenarioArgs& out) {
  require_flag(args, "model", diags, "a preset name or a file; see `capplan models`");
  require_flag(args, "cluster", diags, "a preset name or a file; see `capplan clusters`");
  if (args.has("model")) {
    out.model_ref = args.get("model");
    Loaded<ModelSpec> m = load_model(out.model_ref);
    diags.append(m.diagnostics);
    if (m.ok()) out.scenario.model = *m.value;
  }
  if (args.has("cluster")) {
    out.cluster_ref = args.get("cluster");
    Loaded<ClusterSpec> c = load_cluster(out.cluster_ref);
    diags.append(c.diagnostics);
    if (c.ok()) {
      out.scenario.cluster = *c.value;
      out.cluster_loaded = true;
    }
  }

  if (profile_of_cluster) {
    if (auto p = device_profile_flag(args, diags); p && have_cluster(out) && !out.model_ref.empty()) {
      const std::string why =
          device_profile_mismatch(*p, out.scenario.model, out.scenario.cluster, args.get("device-profile"));
      if (!why.empty())
        flag_error(diags, "device-profile", why);
      else
        out.scenario.cluster.device_profile = p;
    }
  }
}

// --nodes N (or, for plan, A:B) and --gpus.
void node_flags(const Args& args, Diagnostics& diags, bool node_range, ScenarioArgs& out) {
  // --nodes N or, for plan, A:B.
  std::optional<int64_t> gpus = int_flag(args, "gpus", diags, 1, 10'000'000);
  if (args.has("nodes")) {
    const std::string s = args.get("nodes");
    const auto colon = s.find(':');
    if (colon != std::string::npos && node_range) {
      const auto a = parse_number(s.substr(0, colon));
      const auto b = parse_number(s.substr(colon + 1));
      if (!a || !b || *a != std::floor(*a) || *b != std::floor(*b) || *a < 1 || *b < *a ||
          *b > 1e6)
        flag_error(diags, "nodes", "expected a range A:B of node counts with 1 <= A <= B, found '" +
                                       s + "'");
      else {
        out.nodes_min = int(*a);
        out.nodes_max = int(*b);
      }
    } else if (auto n = int_flag(args, "nodes", diags, 1, 1'000'000)) {
      out.nodes_min = out.nodes_max = int(*n);
    }
  } else if (!gpus) {
    flag_error(diags, "nodes", "required (node count)");
  }
  if (gpus) {
    if (out.nodes_min != out.nodes_max) {
      flag_error(diags, "gpus", "cannot be combined with a range of --nodes");
    } else if (have_cluster(out)) {
      const int per = out.scenario.cluster.gpus_per_node;
      if (out.nodes_min == 0) out.nodes_min = out.nodes_max = int((*gpus + per - 1) / per);
      if (*gpus > int64_t(out.nodes_min) * per)
        flag_error(diags, "gpus",
                   "more GPUs (" + std::to_string(*gpus) + ") than " +
                       std::to_string(out.nodes_min) + " nodes of " + std::to_string(per) +
                       " hold");
      out.scenario.gpus = int(*gpus);
    }
  }
  out.scenario.nodes = out.nodes_min;
}

// The training: batch, sequence, tokens, precision and the implementation's knobs, checked against
// the hardware.
void training_flags(const Args& args, Diagnostics& diags, bool gbs_required, ScenarioArgs& out) {
  TrainingSpec& t = out.scenario.training;
  if (gbs_required) require_flag(args, "gbs", diags, "global batch size in sequences");
  if (auto g = int_flag(args, "gbs", diags, 1, int64_t(1e12))) t.gbs = *g;
  if (auto s = int_flag(args, "seq", diags, 1, 100'000'000)) t.seq_len = int(*s);
  if (auto n = number_flag(args, "tokens", diags, 0, 1e18)) t.tokens = *n;
  if (args.has("precision")) {
    if (auto p = parse_precision(args.get("precision")))
      t.precision = *p;
    else
      flag_error(diags, "precision", "expected bf16, fp16, fp32 or fp8, found '" +
                                         args.get("precision") + "'");
  } else if (have_cluster(out) && out.scenario.cluster.gpu.peak_tflops_bf16 <= 0) {
    // GPUs without bf16 (V100) train in fp16 with loss scaling.
    t.precision = Precision::Fp16;
  }
  if (have_cluster(out) && args.has("precision") &&
      out.scenario.cluster.gpu.peak_tflops(t.precision) <= 0)
    flag_error(diags, "precision",
               std::string(to_string(t.precision)) + " is not supported by " +
                   out.scenario.cluster.gpu.name,
               t.precision == Precision::Fp8 ? "fp8 needs Hopper or newer (H100, H200, B200)"
                                             : "try --precision fp16");
  if (args.has("framework") && args.get("framework") != "any") {
    Loaded<FrameworkSpec> f = load_framework(args.get("framework"));
    if (f.value) {
      t.framework = *f.value;
    } else {
      // A framework file's own mistakes keep its file, line and key; a name that is neither a
      // preset nor a file is the flag's.
      for (const Diagnostic& d : f.diagnostics.items()) {
        if (d.file != "<command line>")
          diags.add(d);
        else
          flag_error(diags, "framework", d.message, d.hint);
      }
    }
  }
  if (args.has("attention")) {
    if (auto a = parse_attention(args.get("attention")))
      t.attention = *a;
    else
      flag_error(diags, "attention", "expected eager, fused or flash, found '" + args.get("attention") + "'");
  }
  if (args.has("optimizer")) {
    if (auto o = parse_optimizer(args.get("optimizer")))
      t.optimizer = *o;
    else
      flag_error(diags, "optimizer", "expected adam or sgd, found '" + args.get("optimizer") + "'");
  }
  t.offload_params = args.has("offload-params");
  t.offload_optimizer = args.has("offload-optimizer");
  // The knobs against the hardware: the library's check, reported against the flag (an fp8
  // precision the GPU lacks is reported above already).
  if (have_cluster(out) && !diags.has_errors()) {
    if (auto p = check_training(out.scenario)) {
      std::string flag = p->field;
      std::replace(flag.begin(), flag.end(), '_', '-');
      flag_error(diags, flag, p->message);
    }
  }
}

}  // namespace

std::optional<ScenarioArgs> scenario_from_args(const Args& args, Diagnostics& diags,
                                               bool node_range, bool gbs_required, bool profile_of_cluster) {
  const size_t before = diags.items().size();
  ScenarioArgs out;
  spec_flags(args, diags, profile_of_cluster, out);
  node_flags(args, diags, node_range, out);
  training_flags(args, diags, gbs_required, out);
  if (diags.has_errors_since(before)) return std::nullopt;
  return out;
}

std::optional<Layout> layout_from_args(const Args& args, Diagnostics& diags) {
  const size_t before = diags.items().size();
  Layout l;
  for (const char* k : {"dp", "tp", "pp"}) require_flag(args, k, diags, "parallel degree");
  if (auto v = int_flag(args, "dp", diags, 1, 10'000'000)) l.dp = int(*v);
  if (auto v = int_flag(args, "tp", diags, 1, 1'000'000)) l.tp = int(*v);
  if (auto v = int_flag(args, "pp", diags, 1, 1'000'000)) l.pp = int(*v);
  if (auto v = int_flag(args, "cp", diags, 1, 1'000'000)) l.cp = int(*v);
  if (auto v = int_flag(args, "ep", diags, 1, 1'000'000)) l.ep = int(*v);
  if (auto v = int_flag(args, "vp", diags, 1, 100'000)) l.vp = int(*v);
  if (auto v = int_flag(args, "mbs", diags, 1, 10'000'000)) l.mbs = int(*v);
  if (auto v = int_flag(args, "zero", diags, 0, 3)) l.zero = int(*v);
  if (args.has("recompute")) {
    if (auto r = parse_recompute(args.get("recompute")))
      l.recompute = *r;
    else
      flag_error(diags, "recompute",
                 "expected none, selective or full, found '" + args.get("recompute") + "'");
  }
  l.offload = args.has("offload");
  l.sp = args.has("sp");
  if (args.has("order")) {
    if (auto o = parse_order(args.get("order")))
      l.order = *o;
    else
      flag_error(diags, "order", "expected a permutation of D, P, T with C and E optional (e.g. DPT, PDECT) or cluster/spread, "
                                 "found '" + args.get("order") + "'");
  }
  if (args.has("schedule")) {
    if (auto s = parse_schedule(args.get("schedule")))
      l.schedule = *s;
    else
      flag_error(diags, "schedule",
                 "expected gpipe, 1f1b or interleaved, found '" + args.get("schedule") + "'");
  } else if (l.vp > 1) {
    l.schedule = Schedule::Interleaved;  // --vp only means something with interleaving
  }
  if (diags.has_errors_since(before)) return std::nullopt;
  return l;
}

FlagSpec plan_file_flag() {
  return {"plan", true, "take the scenario and layout from a plan file (or 'default')", "FILE"};
}

std::optional<ScenarioAndLayout> scenario_and_layout_from_args(const Args& args,
                                                               Diagnostics& diags) {
  if (!args.has("plan")) {
    auto scenario = scenario_from_args(args, diags);
    auto layout = layout_from_args(args, diags);
    if (!scenario || !layout) return std::nullopt;
    return ScenarioAndLayout{*scenario, *layout};
  }
  bool clash = false;
  for (const FlagSpec& f : concat(scenario_flags(), layout_flags())) {
    if (args.has(f.name)) {
      flag_error(diags, f.name, "cannot be combined with --plan",
                 "the plan file holds the scenario and the layout");
      clash = true;
    }
  }
  const Loaded<Plan> plan = load_plan(args.get("plan"));
  diags.append(plan.diagnostics);
  if (clash || !plan.ok()) return std::nullopt;
  ScenarioAndLayout out;
  out.scenario.scenario = plan.value->scenario;
  out.scenario.nodes_min = out.scenario.nodes_max = plan.value->scenario.nodes;
  out.scenario.model_ref = plan.value->model_ref;
  out.scenario.cluster_ref = plan.value->cluster_ref;
  out.layout = plan.value->layout;
  return out;
}

std::optional<LayoutPins> pins_from_text(const std::string& text, Diagnostics& diags) {
  const size_t before = diags.items().size();
  LayoutPins pins;
  const std::vector<std::string> keys = {"dp",      "tp", "pp",    "vp",      "mbs", "zero",
                                         "recompute", "offload", "sp", "order", "schedule",
                                         "ep",        "cp"};
  std::stringstream ss(text);
  std::string item;
  std::map<std::string, std::string> given;
  while (std::getline(ss, item, ',')) {
    if (item.empty()) continue;
    const auto eq = item.find('=');
    if (eq == std::string::npos) {
      flag_error(diags, "fix", "expected KEY=VALUE, found '" + item + "'");
      continue;
    }
    const std::string k = item.substr(0, eq), v = item.substr(eq + 1);
    if (auto [it, fresh] = given.emplace(k, v); !fresh) {
      flag_error(diags, "fix", k + ": pinned twice (" + k + "=" + it->second + ", then " + item + ")");
      continue;
    }
    auto bad = [&](const std::string& expected) {
      flag_error(diags, "fix", k + ": expected " + expected + ", found '" + v + "'");
    };
    auto as_int = [&](int lo, int hi) -> std::optional<int> {
      const auto n = parse_number(v);
      if (!n || *n != std::floor(*n) || *n < lo || *n > hi) {
        bad("a whole number from " + std::to_string(lo) + " to " + std::to_string(hi));
        return std::nullopt;
      }
      return int(*n);
    };
    auto as_bool = [&]() -> std::optional<bool> {
      if (v == "true" || v == "on" || v == "1" || v == "yes") return true;
      if (v == "false" || v == "off" || v == "0" || v == "no") return false;
      bad("true or false");
      return std::nullopt;
    };
    if (k == "dp") pins.dp = as_int(1, 10'000'000);
    else if (k == "tp") pins.tp = as_int(1, 1'000'000);
    else if (k == "pp") pins.pp = as_int(1, 1'000'000);
    else if (k == "ep") pins.ep = as_int(1, 1'000'000);
    else if (k == "cp") pins.cp = as_int(1, 1'000'000);
    else if (k == "vp") pins.vp = as_int(1, 100'000);
    else if (k == "mbs") pins.mbs = as_int(1, 10'000'000);
    else if (k == "zero") pins.zero = as_int(0, 3);
    else if (k == "recompute") {
      pins.recompute = parse_recompute(v);
      if (!pins.recompute) bad("none, selective or full");
    } else if (k == "offload") pins.offload = as_bool();
    else if (k == "sp") pins.sp = as_bool();
    else if (k == "order") {
      pins.order = parse_order(v);
      if (!pins.order) bad("a permutation of D, P, T (C and E optional)");
    } else if (k == "schedule") {
      pins.schedule = parse_schedule(v);
      if (!pins.schedule) bad("gpipe, 1f1b or interleaved");
    } else {
      flag_error(diags, "fix", "unknown knob '" + k + "'", hint_of(closest_match(k, keys)));
    }
  }
  if (diags.has_errors_since(before)) return std::nullopt;
  return pins;
}

int report(const Diagnostics& diags) {
  for (const auto& d : diags.items()) std::cerr << d.to_string() << '\n';
  std::cerr.flush();
  return diags.has_errors() ? kExitBadInput : kExitOk;
}

void print_help(const std::string& command, const std::string& synopsis,
                const std::vector<FlagSpec>& flags) {
  std::printf("usage: capplan %s %s\n", command.c_str(), synopsis.c_str());
  if (flags.empty()) return;
  std::printf("\noptions:\n%s", flags_help(flags).c_str());
}

void write_estimate_json(JsonWriter& w, const Estimate& e) {
  const Layout& l = e.layout;
  w.begin_object();
  w.key("layout").begin_object();
  w.field("dp", l.dp).field("tp", l.tp).field("pp", l.pp).field("cp", l.cp).field("ep", l.ep).field("vp", l.vp);
  w.field("mbs", l.mbs).field("num_microbatches", e.num_microbatches).field("zero", l.zero);
  w.field("recompute", to_string(l.recompute)).field("offload", l.offload).field("sp", l.sp);
  w.field("order", l.order).field("schedule", to_string(l.schedule));
  w.end_object();
  w.field("framework", e.framework);
  w.key("training").begin_object();
  w.field("framework", e.framework).field("attention", to_string(e.attention));
  w.field("attention_fallback", e.attention_fallback);
  w.field("precision", to_string(e.precision)).field("optimizer", to_string(e.optimizer));
  w.field("offload_params", e.offload_params).field("offload_optimizer", e.offload_optimizer);
  w.end_object();
  w.field("fits", e.fits);
  w.field("reason", e.reason);
  const MemoryBytes& m = e.memory_per_gpu_bytes;
  w.key("memory_per_gpu_bytes").begin_object();
  w.field("weights", m.weights).field("gradients", m.gradients).field("optimizer", m.optimizer);
  w.field("activations", m.activations).field("buffers", m.buffers).field("total", m.total);
  w.field("capacity", m.capacity);
  w.end_object();
  w.field("host_memory_per_node_bytes", e.host_memory_per_node_bytes);
  w.field("host_memory_capacity_bytes", e.host_memory_capacity_bytes);
  w.field("step_time_s", e.step_time_s);
  w.field("step_time_s_p10", e.step_time_s_p10).field("step_time_s_p90", e.step_time_s_p90);
  const TimeBreakdown& b = e.breakdown_s;
  w.key("breakdown_s").begin_object();
  w.field("compute", b.compute).field("recompute", b.recompute).field("bubble", b.bubble);
  w.field("tp_comm", b.tp_comm).field("pp_comm", b.pp_comm).field("dp_comm", b.dp_comm);
  w.field("optimizer", b.optimizer).field("offload", b.offload);
  w.field("ep_comm", b.ep_comm).field("cp_comm", b.cp_comm);
  w.end_object();
  w.field("gemm_s", e.gemm_s);  // within compute and recompute, not a term of its own
  w.field("bubble_fraction", e.bubble_fraction);
  w.field("samples_per_s", e.samples_per_s);
  w.field("tokens_per_s", e.tokens_per_s);
  w.field("model_tflops_per_gpu", e.model_tflops_per_gpu);
  w.field("hardware_tflops_per_gpu", e.hardware_tflops_per_gpu);
  w.field("mfu", e.mfu);
  w.field("tokens", e.tokens);
  w.field("tokens_defaulted", e.tokens_defaulted);
  w.field("days_to_train", e.days_to_train);
  w.field("days_to_train_p10", e.days_to_train_p10).field("days_to_train_p90", e.days_to_train_p90);
  w.field("cost_usd", e.cost_usd);
  w.field("cost_usd_p10", e.cost_usd_p10).field("cost_usd_p90", e.cost_usd_p90);
  w.field("as_good_as_best", e.as_good_as_best);
  w.field("gpus", e.gpus);
  w.field("nodes", e.nodes);
  w.end_object();
}

std::string estimate_json(const Estimate& e) {
  JsonWriter w;
  write_estimate_json(w, e);
  return w.str();
}


std::string scenario_title(const Scenario& s) {
  std::ostringstream os;
  os << s.model.name << " on " << s.nodes << " x " << s.cluster.name << " (" << s.total_gpus()
     << " x " << s.cluster.gpu.name << ")";
  return os.str();
}

namespace {

std::string layout_line(const Estimate& e) {
  const Layout& l = e.layout;
  std::ostringstream os;
  os << "dp " << l.dp << "  tp " << l.tp << "  pp " << l.pp;
  if (l.cp > 1) os << "  cp " << l.cp;
  if (l.ep > 1) os << "  ep " << l.ep;
  os << "  vp " << l.vp << "  mbs "
     << l.mbs << "  micro-batches " << e.num_microbatches << "  zero " << l.zero << "  recompute "
     << to_string(l.recompute) << "  sp " << (l.sp ? "on" : "off") << "  offload "
     << (l.offload ? "on" : "off") << "  order " << l.order << "  schedule "
     << to_string(l.schedule);
  return os.str();
}

// The implementation it was costed for: what --framework, --attention, --precision, --optimizer,
// --offload-params and --offload-optimizer set (the attention is the effective one).
std::string stack_line(const Estimate& e) {
  std::ostringstream os;
  os << "framework " << e.framework << "  attention " << to_string(e.attention) << "  precision "
     << to_string(e.precision) << "  optimizer " << to_string(e.optimizer) << "  offload-params "
     << (e.offload_params ? "on" : "off") << "  offload-optimizer " << (e.offload_optimizer ? "on" : "off");
  return os.str();
}

std::string pct(double part, double whole) {
  return whole > 0 ? fmt_fixed(100.0 * part / whole, 1) + " %" : "-";
}

}  // namespace

std::string estimate_text(const Scenario& s, const Estimate& e) {
  std::ostringstream os;
  const MemoryBytes& m = e.memory_per_gpu_bytes;
  const TimeBreakdown& b = e.breakdown_s;
  os << scenario_title(s) << "\n";
  os << "layout       " << layout_line(e) << "\n";
  os << "stack        " << stack_line(e) << "\n";
  if (!e.attention_fallback.empty()) os << "note         " << e.attention_fallback << "\n";
  os << "fits         " << (e.fits ? "yes" : "NO") << " (" << fmt_gib(m.total) << " of "
     << fmt_gib(m.capacity) << " GiB per GPU)";
  if (!e.fits && !e.reason.empty()) os << ": " << e.reason;
  os << "\n";
  os << "memory/GPU   weights " << fmt_gib(m.weights) << "  gradients " << fmt_gib(m.gradients)
     << "  optimizer " << fmt_gib(m.optimizer) << "  activations " << fmt_gib(m.activations)
     << "  buffers " << fmt_gib(m.buffers) << "  total " << fmt_gib(m.total) << " GiB\n";
  if (e.host_memory_per_node_bytes > 0)
    os << "host/node    " << fmt_gib(e.host_memory_per_node_bytes) << " GiB offloaded, of "
       << fmt_gib(e.host_memory_capacity_bytes) << " GiB usable\n";
  os << "step time    " << fmt_fixed(e.step_time_s, 3) << " s\n";
  const std::pair<const char*, double> terms[] = {
      {"compute", b.compute}, {"recompute", b.recompute}, {"bubble", b.bubble},
      {"tp_comm", b.tp_comm}, {"pp_comm", b.pp_comm},     {"dp_comm", b.dp_comm},
      {"optimizer", b.optimizer}, {"offload", b.offload}, {"ep_comm", b.ep_comm},
      {"cp_comm", b.cp_comm}};
  for (const auto& [name, v] : terms) {
    if ((name == std::string("ep_comm") && e.layout.ep == 1) || (name == std::string("cp_comm") && e.layout.cp == 1))
      continue;  // no such group
    char line[96];
    std::snprintf(line, sizeof line, "  %-10s %10s s  %8s\n", name, fmt_fixed(v, 3).c_str(),
                  pct(v, e.step_time_s).c_str());
    os << line;
  }
  os << "throughput   " << fmt_fixed(e.samples_per_s, 2) << " samples/s, "
     << fmt_si(e.tokens_per_s) << " tokens/s\n";
  os << "TFLOP/s/GPU  model " << fmt_fixed(e.model_tflops_per_gpu, 1) << ", hardware "
     << fmt_fixed(e.hardware_tflops_per_gpu, 1) << "  (MFU " << fmt_fixed(100 * e.mfu, 1)
     << " %)\n";
  os << "training     " << fmt_si(e.tokens) << " tokens"
     << (e.tokens_defaulted ? " (20 tokens per parameter assumed; set --tokens)" : "") << ": "
     << fmt_fixed(e.days_to_train, 1) << " days, " << fmt_money(e.cost_usd)
     << (std::isfinite(e.cost_usd) ? "" : " (cluster has no price)") << " on " << e.nodes
     << (e.nodes == 1 ? " node / " : " nodes / ") << e.gpus << (e.gpus == 1 ? " GPU\n" : " GPUs\n");
  if (e.step_time_s_p90 > 0)
    os << "band (p10-p90, the model's error)  step " << fmt_fixed(e.step_time_s_p10, 3) << "-"
       << fmt_fixed(e.step_time_s_p90, 3) << " s, " << fmt_fixed(e.days_to_train_p10, 1) << "-"
       << fmt_fixed(e.days_to_train_p90, 1) << " days, " << fmt_money(e.cost_usd_p10) << " to "
       << fmt_money(e.cost_usd_p90) << "\n";
  return os.str();
}

std::string candidates_table(const std::vector<Estimate>& candidates) {
  std::ostringstream os;
  // Candidates of several frameworks (plan --framework any) name theirs at the end of the line.
  bool mixed = false;
  for (const Estimate& e : candidates) mixed = mixed || e.framework != candidates.front().framework;
  char line[256];
  std::snprintf(line, sizeof line,
                "%3s %5s %5s %4s %3s %3s %3s %4s %4s %-9s %-3s %-4s %-5s %-11s %-4s %8s %9s %10s "
                "%6s %8s %14s\n",
                "#", "nodes", "gpus", "dp", "tp", "pp", "vp", "mbs", "zero", "recompute", "sp",
                "offl", "order", "schedule", "fits", "mem GiB", "step s", "samples/s", "MFU %",
                "days", "cost");
  os << line;
  int rank = 1;
  for (const Estimate& e : candidates) {
    const Layout& l = e.layout;
    std::snprintf(line, sizeof line,
                  "%3d %5d %5d %4d %3d %3d %3d %4d %4d %-9s %-3s %-4s %-5s %-11s %-4s %8s %9s "
                  "%10s %6s %8s %14s\n",
                  rank++, e.nodes, e.gpus, l.dp, l.tp, l.pp, l.vp, l.mbs, l.zero,
                  to_string(l.recompute), l.sp ? "on" : "off", l.offload ? "on" : "off",
                  l.order.c_str(), to_string(l.schedule), e.fits ? "yes" : "no",
                  fmt_gib(e.memory_per_gpu_bytes.total).c_str(),
                  fmt_fixed(e.step_time_s, 3).c_str(), fmt_fixed(e.samples_per_s, 2).c_str(),
                  fmt_fixed(100 * e.mfu, 1).c_str(), fmt_fixed(e.days_to_train, 1).c_str(),
                  fmt_money(e.cost_usd).c_str());
    std::string text = line;
    // Context and expert parallelism, on the rows that use them.
    if (l.cp > 1 || l.ep > 1)
      text.insert(text.size() - 1, "  cp " + std::to_string(l.cp) + " ep " + std::to_string(l.ep));
    if (mixed) text.insert(text.size() - 1, "  " + e.framework);
    // Candidates whose band overlaps the best one's are as good within the model's error.
    if (e.as_good_as_best && rank > 2) text.insert(text.size() - 1, "  ~best");
    os << text;
  }
  return os.str();
}

namespace {
// Function-local so that registration from other files' static initialisers is safe.
std::vector<PlanExtension>& extension_registry() {
  static std::vector<PlanExtension> extensions;
  return extensions;
}
}  // namespace

void register_plan_extension(PlanExtension extension) {
  extension_registry().push_back(std::move(extension));
}

const std::vector<PlanExtension>& plan_extensions() { return extension_registry(); }

}  // namespace capplan::cli
