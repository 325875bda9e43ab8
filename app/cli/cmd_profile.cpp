// `capplan profile`: per-layer parameters, forward FLOPs and activation bytes of a model for a
// tp degree, sequence length and micro-batch size (analytical, from profile_model()).
#include <cstdio>

#include "cli_common.h"
#include "planner/profile.h"
#include "planner/spec_io.h"

namespace capplan::cli {

int cmd_profile(int argc, char** argv) {
  const std::vector<FlagSpec> flags = {
      {"model", true, "model preset name, YAML file or Hugging Face config.json", "M"},
      {"tp", true, "tensor-parallel degree (default 1): figures are per TP rank", "T"},
      {"seq", true, "sequence length (default: the model's)", "S"},
      {"mbs", true, "micro-batch size (default 1)", "B"},
      {"precision", true, "bf16 | fp16 | fp32 (activation element size; default bf16)", "P"},
      json_flag()};
  Diagnostics diags;
  const Args args = parse_args(argc, argv, flags, diags);
  if (args.help()) {
    print_help("profile", "--model M [--tp T] [--seq S] [--mbs B] [--json]", flags);
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
  if (diags.has_errors() || !model) return report(diags);
  report(diags);
  if (seq == 0) seq = model->seq_len;

  const ModelProfile p = profile_model(*model, tp, seq, mbs, precision);
  if (args.has("json")) {
    JsonWriter w;
    w.begin_object();
    w.field("model", model->name).field("tp", tp).field("seq_len", seq).field("mbs", mbs);
    w.field("precision", to_string(precision));
    w.field("total_params", p.total_params);
    w.field("flops_per_token", p.flops_per_token);
    w.field("forward_flops_per_token", p.forward_flops_per_token);
    w.key("layers").begin_array();
    for (const LayerProfile& l : p.layers) {
      w.begin_object();
      w.field("name", l.name).field("kind", l.kind).field("params", l.params);
      w.field("forward_flops", l.forward_flops).field("activation_bytes", l.activation_bytes);
      w.end_object();
    }
    w.end_array();
    w.end_object();
    std::printf("%s\n", w.str().c_str());
    return kExitOk;
  }

  std::printf("%s: %s parameters, %s FLOPs per token (forward + backward)\n",
              model->name.c_str(), fmt_si(p.total_params).c_str(),
              fmt_si(p.flops_per_token).c_str());
  std::printf("per TP rank (tp %d), seq %d, mbs %d, %s activations\n\n", tp, seq, mbs,
              to_string(precision));
  std::printf("%-16s %-12s %12s %16s %16s\n", "layer", "kind", "params", "fwd GFLOP/mb",
              "activ. MiB/mb");
  // Identical transformer blocks are shown once, with their count.
  for (size_t i = 0; i < p.layers.size(); ++i) {
    const LayerProfile& l = p.layers[i];
    size_t same = 1;
    while (i + same < p.layers.size() && p.layers[i + same].kind == l.kind &&
           p.layers[i + same].params == l.params &&
           p.layers[i + same].forward_flops == l.forward_flops &&
           p.layers[i + same].activation_bytes == l.activation_bytes)
      ++same;
    std::string name = l.name;
    if (same > 1) name += " (x" + std::to_string(same) + ")";
    std::printf("%-16s %-12s %12s %16s %16s\n", name.c_str(), l.kind.c_str(),
                fmt_si(l.params).c_str(), fmt_fixed(l.forward_flops / 1e9, 2).c_str(),
                fmt_fixed(l.activation_bytes / (1024.0 * 1024.0), 1).c_str());
    i += same - 1;
  }
  return kExitOk;
}

}  // namespace capplan::cli
