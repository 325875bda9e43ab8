// `capplan profile`: per-layer parameters, forward FLOPs and activation bytes of a model for a
// tp degree, sequence length and micro-batch size (analytical, from profile_model()); with
// --measure, the runtime's kernels and collectives timed on this machine (capplan-train measure
// under mpirun) and written as a device profile, printed beside what the cost model predicts.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <vector>

#include "cli_common.h"
#include "launch/launch.h"
#include "launch/launch_process.h"
#include "launch/measure_profile.h"
#include "planner/cost_model.h"
#include "planner/device_profile.h"
#include "planner/format.h"
#include "planner/profile.h"
#include "planner/spec_io.h"

namespace capplan::cli {
namespace {

// The printed line of one shared-cores measurement: the ranks' efficiency side by side, the
// pipeline's hand-off, the lockstep all-reduce per group size and the gradient exchange.
void print_shared_cores(const DeviceProfile& p, const SharedCoresTiming& sc) {
  const std::string beside =
      sc.handoff_lockstep_s > 0 ? " (" + fmt_fixed(sc.handoff_lockstep_s * 1e3, 3) + " beside pairs in lockstep)" : "";
  std::printf("shared cores: %d ranks on %d cores compute at %.2f of the processor-sharing ideal; a pipeline "
              "hand-off takes %.3f ms%s; in lockstep an all-reduce of %.0f KB holds them",
              sc.ranks, p.cores, sc.free_efficiency, sc.handoff_s * 1e3, beside.c_str(),
              sc.lockstep.empty() ? 0.0 : sc.lockstep[0].allreduce_bytes / 1024);
  for (size_t i = 0; i < sc.lockstep.size(); ++i)
    std::printf("%s %.3f ms in groups of %d (compute meanwhile x%.2f)", i ? "," : "",
                sc.lockstep[i].allreduce_s * 1e3, sc.lockstep[i].group, sc.lockstep[i].compute_stretch);
  // The gradient exchange at its largest measured size, per group size.
  std::string exchange;
  for (const LockstepTiming& l : sc.lockstep) {
    const SharedExchangeTiming* largest = nullptr;
    for (const SharedExchangeTiming& e : sc.exchange)
      if (e.group == l.group && (!largest || e.bytes > largest->bytes)) largest = &e;
    if (largest)
      exchange += (exchange.empty() ? "; the gradient exchange of " + fmt_fixed(largest->bytes / 1048576.0, 0) +
                                          " MiB a rank takes "
                                    : std::string(", ")) +
                  fmt_fixed(largest->seconds * 1e3, 2) + " ms in groups of " + std::to_string(l.group) +
                  (l.gradient_exchange_bytes > 0
                       ? " (x" + fmt_fixed(p.exchange_after_compute(sc.ranks, l.group), 2) + " right after compute)"
                       : std::string());
  }
  if (sc.optimizer_bytes > 0)
    exchange += "; the optimizer step right after it takes " + fmt_fixed(sc.optimizer_s * 1e3, 2) + " ms (x" +
                fmt_fixed(p.shared_optimizer_stretch(sc.ranks), 2) + " its time with a core each)";
  std::printf("%s\n", exchange.c_str());
}

// Each measured kernel beside the cost model's time for it on this machine, with the probed
// datasheet-free figures (today's model) and with the profile's fits (compare_profile).
int print_measured(const DeviceProfile& p, const ModelSpec& model, int ranks, bool json) {
  JsonWriter w;
  if (json) {
    w.begin_object();
    w.field("device", p.device).field("ranks", p.ranks).field("gemm_peak_gflops", p.gemm_peak_gflops);
    w.field("gemm_overhead_us", p.gemm_overhead_us).field("memory_gbyte_per_s", p.memory_gbyte_per_s);
    if (p.peak_rank_bytes > 0) w.field("peak_rank_bytes", p.peak_rank_bytes);
    w.key("kernels").begin_array();
  }
  const std::vector<rt::KernelComparison> rows = rt::compare_profile(p, model, ranks);
  int name_width = 30;  // the longest name's, so that the columns line up
  for (const rt::KernelComparison& k : rows) name_width = std::max(name_width, int(k.name.size()));
  if (!json) {
    std::printf("%s; %d ranks\n", p.device.c_str(), p.ranks);
    std::printf("%-*s %22s %12s %14s %14s\n", name_width, "kernel", "shape / bytes", "measured ms", "model ms",
                "fitted ms");
  }
  for (const rt::KernelComparison& k : rows) {
    if (json) {
      w.begin_object();
      w.field("name", k.name).field("shape", k.shape).field("measured_s", k.measured_s);
      w.field("predicted_s", k.predicted_s).field("fitted_s", k.fitted_s);
      w.end_object();
    } else {
      std::printf("%-*s %22s %12.3f %14.3f %14.3f\n", name_width, k.name.c_str(), k.shape.c_str(), k.measured_s * 1e3,
                  k.predicted_s * 1e3, k.fitted_s * 1e3);
    }
  }
  if (json) {
    w.end_array();
    w.key("collectives").begin_array();
    for (const CollectiveFit& f : p.fits) {
      w.begin_object();
      w.field("op", f.op).field("ranks", f.ranks).field("bandwidth_gbyte_per_s", f.bandwidth_gbyte_per_s);
      w.field("latency_us", f.latency_us);
      w.end_object();
    }
    w.end_array();
    if (p.lockstep.allreduce_bytes > 0) {
      w.key("lockstep").begin_object();
      w.field("ranks", p.ranks).field("allreduce_bytes", p.lockstep.allreduce_bytes);
      w.field("allreduce_s", p.lockstep.allreduce_s);
      w.field("exchange_bytes", p.lockstep.exchange_bytes).field("exchange_s", p.lockstep.exchange_s);
      w.field("gradient_exchange_bytes", p.lockstep.gradient_exchange_bytes);
      w.field("gradient_exchange_s", p.lockstep.gradient_exchange_s);
      w.field("gradient_exchange_after_compute", p.exchange_after_compute(p.ranks, p.ranks));
      if (p.lockstep.zero1_exchange_s > 0) {
        w.field("zero1_exchange_s", p.lockstep.zero1_exchange_s);
        w.field("zero1_exchange_after_compute", p.exchange_after_compute(p.ranks, p.ranks, true));
      }
      w.end_object();
    }
    if (!p.shared.empty()) {
      w.key("shared_cores").begin_array();
      for (const SharedCoresTiming& sc : p.shared) {
        w.begin_object();
        w.field("ranks", sc.ranks).field("cores", p.cores).field("free_efficiency", sc.free_efficiency);
        w.field("handoff_s", sc.handoff_s).field("handoff_lockstep_s", sc.handoff_lockstep_s);
        w.key("lockstep").begin_array();
        for (const LockstepTiming& l : sc.lockstep) {
          w.begin_object();
          w.field("group", l.group).field("allreduce_bytes", l.allreduce_bytes).field("allreduce_s", l.allreduce_s);
          w.field("compute_stretch", l.compute_stretch);
          w.field("gradient_exchange_bytes", l.gradient_exchange_bytes).field("gradient_exchange_s", l.gradient_exchange_s);
          w.field("gradient_exchange_after_compute", p.exchange_after_compute(sc.ranks, l.group));
          w.end_object();
        }
        w.end_array();
        w.field("optimizer_bytes", sc.optimizer_bytes).field("optimizer_s", sc.optimizer_s);
        w.field("optimizer_alone_s", sc.optimizer_alone_s);
        w.key("exchange").begin_array();
        for (const SharedExchangeTiming& e : sc.exchange) {
          w.begin_object();
          w.field("group", e.group).field("bytes", e.bytes).field("seconds", e.seconds);
          w.end_object();
        }
        w.end_array();
        w.end_object();
      }
      w.end_array();
    }
    w.end_object();
    std::printf("%s\n", w.str().c_str());
  } else {
    std::printf("\nfitted: GEMM %.2f GFLOP/s per rank + %.1f us per GEMM; memory-bound kernels %.2f GB/s per rank\n",
                p.gemm_peak_gflops, p.gemm_overhead_us, p.memory_gbyte_per_s);
    for (const CollectiveFit& f : p.fits)
      std::printf("        %-15s %d ranks: %.3f GB/s bus bandwidth, %.1f us latency\n", f.op.c_str(), f.ranks,
                  f.bandwidth_gbyte_per_s, f.latency_us);
    if (p.lockstep.allreduce_bytes > 0) {
      std::printf("lockstep: %d ranks with a core each; an all-reduce of %.0f KB after every half layer holds them "
                  "%.3f ms",
                  p.ranks, p.lockstep.allreduce_bytes / 1024, p.lockstep.allreduce_s * 1e3);
      if (p.lockstep.exchange_bytes > 0)
        std::printf("; a context ring's exchange of %.0f KB around each %.3f ms", p.lockstep.exchange_bytes / 1024,
                    p.lockstep.exchange_s * 1e3);
      if (p.lockstep.gradient_exchange_bytes > 0)
        std::printf("; the gradient exchange of %.0f MiB a rank right after compute %.2f ms (x%.2f its time alone)",
                    p.lockstep.gradient_exchange_bytes / 1048576.0, p.lockstep.gradient_exchange_s * 1e3,
                    p.exchange_after_compute(p.ranks, p.ranks));
      if (p.lockstep.zero1_exchange_s > 0)
        std::printf(", ZeRO-1's %.2f ms (x%.2f)", p.lockstep.zero1_exchange_s * 1e3,
                    p.exchange_after_compute(p.ranks, p.ranks, true));
      std::printf("\n");
    }
    for (const SharedCoresTiming& sc : p.shared) print_shared_cores(p, sc);
  }
  return kExitOk;
}

// Runs capplan-train measure on `ranks` local ranks (rt::measure_device_profile) and prints what
// it measured.
int measure(const Args& args, const ModelSpec& model, int tp, int mbs, int seq, Diagnostics& diags) {
  rt::MeasureRequest q;
  q.ranks = int(int_flag(args, "ranks", diags, 1, 1024).value_or(std::min(2, int(::sysconf(_SC_NPROCESSORS_ONLN)))));
  q.repeats = int(int_flag(args, "repeats", diags, 1, 1000).value_or(5));
  q.rounds = int(int_flag(args, "rounds", diags, 1, 100).value_or(5));
  q.timeout_s = number_flag(args, "timeout", diags, 0, 1e9).value_or(rt::kDefaultMeasureTimeoutS);
  q.out = args.has("out") ? args.get("out") : "device.yaml";
  q.model_ref = args.get("model");
  q.tp = tp;
  q.mbs = mbs;
  q.seq = seq;
  if (diags.has_errors()) return report(diags);
  const bool json = args.has("json");
  const rt::MeasureResult r = rt::measure_device_profile(q, [&](rt::OutputStream s, const std::string& line) {
    std::fprintf(s == rt::OutputStream::Stderr || json ? stderr : stdout, "%s\n", line.c_str());
  });
  if (!r.process.started && r.profile.diagnostics.has_errors()) return report(r.profile.diagnostics);
  if (r.timed_out) {  // stuck, not bad input
    report(r.profile.diagnostics);
    return kExitFailure;
  }
  if (!r.process.succeeded()) {
    std::fprintf(stderr, "capplan profile --measure: capplan-train measure failed: %s\n", r.process.describe().c_str());
    return r.process.exit_code == kExitBadInput ? kExitBadInput : kExitFailure;
  }
  if (!r.profile.ok()) return report(r.profile.diagnostics);
  return print_measured(*r.profile.value, model, q.ranks, json);
}

// The counts as JSON: the model's figures, its experts and latent attention, and each layer's.
void print_profile_json(const ModelSpec& m, const ModelProfile& p, int tp, int seq, int mbs, Precision precision) {
  JsonWriter w;
  w.begin_object();
  w.field("model", m.name).field("tp", tp).field("seq_len", seq).field("mbs", mbs);
  w.field("precision", to_string(precision));
  w.field("total_params", p.total_params);
  w.field("active_params", p.active_params);
  if (m.moe.enabled()) {
    const MoeSpec& e = m.moe;
    w.key("moe").begin_object();
    w.field("experts", e.experts).field("top_k", e.top_k_or_default());
    w.field("expert_ffn_hidden", m.expert_ffn_hidden_or_default());
    w.field("shared_experts", e.shared_experts).field("capacity_factor", e.capacity_factor);
    w.field("moe_layer_freq", e.moe_layer_freq).field("first_dense_layers", e.first_dense_layers);
    w.field("moe_layers", e.moe_layers(m.layers));
    w.end_object();
  }
  if (m.mla.enabled()) {
    const MlaSpec& a = m.mla;
    w.key("mla").begin_object();
    w.field("kv_lora_rank", a.kv_lora_rank).field("q_lora_rank", a.q_lora_rank);
    w.field("qk_nope_head_dim", a.qk_nope_head_dim).field("qk_rope_head_dim", a.qk_rope_head_dim);
    w.field("v_head_dim", a.v_head_dim);
    w.end_object();
  }
  if (m.local_span() > 0) {
    w.field(m.sliding_window > 0 ? "sliding_window" : "attention_chunk", m.local_span());
    w.field("global_every", m.global_every).field("local_layers", m.local_layers(seq));
  }
  w.field("tied_embeddings", m.tied_embeddings);
  w.field("flops_per_token", p.flops_per_token);
  w.field("forward_flops_per_token", p.forward_flops_per_token);
  auto rows = [&](const char* key, const std::vector<LayerProfile>& layers) {
    w.key(key).begin_array();
    for (const LayerProfile& l : layers) {
      w.begin_object();
      w.field("name", l.name).field("kind", l.kind).field("params", l.params);
      w.field("forward_flops", l.forward_flops).field("activation_bytes", l.activation_bytes);
      w.end_object();
    }
    w.end_array();
  };
  rows("layers", p.layers);
  if (m.mtp_layers > 0) {
    w.field("mtp_layers", m.mtp_layers).field("mtp_params", p.mtp_params);
    rows("mtp", p.mtp);
  }
  w.end_object();
  std::printf("%s\n", w.str().c_str());
}

// The counts as text: the totals, the experts and latent attention, a row per kind of layer.
void print_profile_text(const ModelSpec& m, const ModelProfile& p, int tp, int seq, int mbs, Precision precision) {
  if (m.moe.enabled()) {
    const MoeSpec& e = m.moe;
    std::printf("%s: %s parameters, %s active per token, %s FLOPs per token (forward + backward)\n",
                m.name.c_str(), fmt_si(p.total_params).c_str(), fmt_si(p.active_params).c_str(),
                fmt_si(p.flops_per_token).c_str());
    std::printf("mixture of experts: %d experts, top_k %d, %d shared, expert_ffn_hidden %d, "
                "%d of %d layers with experts\n",
                e.experts, e.top_k_or_default(), e.shared_experts, m.expert_ffn_hidden_or_default(),
                e.moe_layers(m.layers), m.layers);
  } else {
    std::printf("%s: %s parameters, %s FLOPs per token (forward + backward)\n",
                m.name.c_str(), fmt_si(p.total_params).c_str(),
                fmt_si(p.flops_per_token).c_str());
  }
  if (m.mla.enabled()) {
    const MlaSpec& a = m.mla;
    std::printf("latent attention: kv_lora_rank %d, q_lora_rank %d, query-key heads %d + %d rotary, value heads %d\n",
                a.kv_lora_rank, a.q_lora_rank, a.qk_nope_head_dim, a.qk_rope_head_dim, a.v_head_dim);
  }
  if (m.local_span() > 0)
    std::printf("local attention: %s of %d tokens, %d of %d layers local at seq %d%s\n",
                m.sliding_window > 0 ? "a window" : "chunks", m.local_span(), m.local_layers(seq), m.layers, seq,
                m.local_span() >= seq ? " (the span covers the sequence: every layer attends to all of it)" : "");
  if (m.mtp_layers > 0)
    std::printf("multi-token prediction: %d module%s, %s parameters beside the model's (the embedding and head "
                "shared), their FLOPs in the step's\n",
                m.mtp_layers, m.mtp_layers == 1 ? "" : "s", fmt_si(p.mtp_params).c_str());
  std::printf("per TP rank (tp %d), seq %d, mbs %d, %s activations\n\n", tp, seq, mbs,
              to_string(precision));
  std::printf("%-16s %-12s %12s %16s %16s\n", "layer", "kind", "params", "fwd GFLOP/mb",
              "activ. MiB/mb");
  // Identical transformer blocks are shown once, with their count; the multi-token prediction
  // modules after the head.
  const std::vector<LayerProfile> all = p.rows();
  for (size_t i = 0; i < all.size(); ++i) {
    const LayerProfile& l = all[i];
    size_t same = 1;
    while (i + same < all.size() && all[i + same].kind == l.kind && all[i + same].params == l.params &&
           all[i + same].forward_flops == l.forward_flops &&
           all[i + same].activation_bytes == l.activation_bytes)
      ++same;
    std::string name = l.name;
    if (same > 1) name += " (x" + std::to_string(same) + ")";
    std::printf("%-16s %-12s %12s %16s %16s\n", name.c_str(), l.kind.c_str(),
                fmt_si(l.params).c_str(), fmt_fixed(l.forward_flops / 1e9, 2).c_str(),
                fmt_fixed(l.activation_bytes / (1024.0 * 1024.0), 1).c_str());
    i += same - 1;
  }
  if (m.tied_embeddings)
    std::printf("(lm_head shares the embedding's weights: its parameters are counted once in the total;\n"
                " with a pipeline the last stage keeps a copy)\n");
}

}  // namespace

int cmd_profile(int argc, char** argv) {
  const std::vector<FlagSpec> flags = {
      {"model", true, "model preset name, YAML file or Hugging Face config.json", "M"},
      {"tp", true, "tensor-parallel degree (default 1): figures are per TP rank", "T"},
      {"seq", true, "sequence length (default: the model's)", "S"},
      {"mbs", true, "micro-batch size (default 1)", "B"},
      {"precision", true, "bf16 | fp16 | fp32 (activation element size; default bf16)", "P"},
      {"measure", false, "time the runtime's kernels and collectives on this machine (capplan-train measure)", ""},
      {"ranks", true, "with --measure: local MPI ranks to measure with (default 2, or 1 on one core)", "N"},
      {"repeats", true, "with --measure: timed repeats per kernel in each round (default 5)", "R"},
      {"rounds", true, "with --measure: rounds over all kernels; each time is the median over them (default 5)", "N"},
      {"timeout", true, "with --measure: stop the measurement past this many seconds, keeping the previous profile (default 900)", "S"},
      {"out", true, "with --measure: the device profile to write (default device.yaml)", "FILE"},
      json_flag()};
  Diagnostics diags;
  const Args args = parse_args(argc, argv, flags, diags);
  if (args.help()) {
    print_help("profile", "--model M [--tp T] [--seq S] [--mbs B] [--measure [--ranks N] [--out FILE]] [--json]",
               flags);
    return kExitOk;
  }
  require_flag(args, "model", diags, "a preset name or a file; see `capplan models`");
  std::optional<ModelSpec> model;
  if (args.has("model")) {
    Loaded<ModelSpec> m = load_model(args.get("model"));
    diags.append(m.diagnostics);
    if (m.ok()) model = *m.value;
  }
  const int tp = int(int_flag(args, "tp", diags, 1, 1'000'000).value_or(1));
  const int mbs = int(int_flag(args, "mbs", diags, 1, 10'000'000).value_or(1));
  int seq = int(int_flag(args, "seq", diags, 1, 100'000'000).value_or(0));
  Precision precision = Precision::Bf16;
  if (args.has("precision")) {
    if (auto p = parse_precision(args.get("precision")))
      precision = *p;
    else
      diags.error(kCommandLine, 0, 0, "--precision",
                  "expected bf16, fp16 or fp32, found '" + args.get("precision") + "'");
  }
  if (model && model->heads % tp != 0)
    diags.error(kCommandLine, 0, 0, "--tp",
                "tp (" + std::to_string(tp) + ") must divide the model's heads (" +
                    std::to_string(model->heads) + ")");
  if (model && model->mla.enabled() && args.has("measure"))
    diags.error(kCommandLine, 0, 0, "--measure",
                model->name + " has multi-head latent attention (mla), which capplan-train's kernels do not run",
                "measure a model of plain multi-head attention; the counts (capplan profile without --measure) "
                "and the estimates take latent attention");
  if (diags.has_errors() || !model) return report(diags);
  report(diags);
  if (seq == 0) seq = model->seq_len;
  if (args.has("measure")) return measure(args, *model, tp, mbs, seq, diags);

  const ModelProfile p = profile_model(*model, tp, seq, mbs, precision);
  if (args.has("json"))
    print_profile_json(*model, p, tp, seq, mbs, precision);
  else
    print_profile_text(*model, p, tp, seq, mbs, precision);
  return kExitOk;
}

}  // namespace capplan::cli
