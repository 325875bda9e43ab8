// Scale-down: the plan's layout and knobs on a model small enough to train here in seconds, and
// what changed, in words. The layout (dp, tp, pp, vp, schedule, order, zero, recompute, offload,
// sp) is what the run is meant to exercise, so it is never touched; only the model's sizes, the
// sequence and the batch shrink, to the smallest values the layout's divisibility rules allow.
#include <algorithm>
#include <numeric>
#include <sstream>

#include "planner/json_writer.h"
#include "launch/launch.h"
#include "planner/spec_io.h"

namespace capplan::rt {
namespace {

int round_up(int x, int multiple) { return multiple <= 1 ? x : (x + multiple - 1) / multiple * multiple; }

std::string knob_summary(const Layout& l) {
  std::ostringstream s;
  s << "dp " << l.dp << ", tp " << l.tp << ", pp " << l.pp << ", vp " << l.vp << ", schedule "
    << to_string(l.schedule) << ", order " << l.order << ", zero " << l.zero << ", recompute "
    << to_string(l.recompute) << ", offload " << (l.offload ? "on" : "off") << ", sp "
    << (l.sp ? "on" : "off");
  if (l.cp != 1) s << ", cp " << l.cp;
  if (l.ep != 1) s << ", ep " << l.ep;
  return s.str();
}

// " cp C ep E" for the axes a layout uses (none for a dp x tp x pp layout).
std::string context_expert_text(const Layout& l) {
  std::string t;
  if (l.cp != 1) t += " cp " + std::to_string(l.cp);
  if (l.ep != 1) t += " ep " + std::to_string(l.ep);
  return t;
}

void move_to_local(Scenario& s, const Layout& layout, const ClusterSpec& local,
                   std::vector<std::string>& changes) {
  std::ostringstream c;
  c << "cluster " << (s.cluster.name.empty() ? std::string("(unnamed)") : s.cluster.name) << " ("
    << s.total_gpus() << " GPUs) -> " << local.name;
  changes.push_back(c.str());
  if (s.training.precision != Precision::Fp32) {
    changes.push_back(std::string("precision ") + to_string(s.training.precision) +
                      " -> fp32 (the CPU runtime trains in fp32)");
  }
  s.training.precision = Precision::Fp32;
  s.cluster = local;
  s.nodes = 1;
  s.gpus = layout.gpus();
}

}  // namespace

ShrunkLayout shrink_layout(const Layout& layout, int max_ranks) {
  ShrunkLayout out{layout, {}};
  max_ranks = std::max(1, max_ranks);
  if (layout.gpus() <= max_ranks) return out;
  Layout& l = out.layout;
  l.tp = std::min(std::max(1, l.tp), 2);
  l.pp = std::min(std::max(1, l.pp), 2);
  l.cp = std::min(std::max(1, l.cp), 2);
  while (l.tp * l.pp * l.cp > max_ranks) (l.cp > 1 ? l.cp : l.pp > 1 ? l.pp : l.tp) = 1;
  l.dp = std::max(1, std::min(std::max(1, l.dp), max_ranks / (l.tp * l.pp * l.cp)));
  // ep stays inside dp * cp; a divisor of the original ep still divides the experts.
  l.ep = std::gcd(std::max(1, l.ep), l.dp * l.cp);
  std::ostringstream s;
  s << "layout dp " << layout.dp << " tp " << layout.tp << " pp " << layout.pp
    << context_expert_text(layout) << " (" << layout.gpus() << " ranks) -> dp " << l.dp << " tp "
    << l.tp << " pp " << l.pp << context_expert_text(l) << " (" << l.gpus()
    << " ranks): at most " << max_ranks << " ranks here";
  out.changes.push_back(s.str());
  if (l.pp == 1 && (l.vp > 1 || l.schedule == Schedule::Interleaved)) {
    const std::string before = std::string(to_string(l.schedule)) + ", vp " + std::to_string(l.vp);
    l.vp = 1;
    if (l.schedule == Schedule::Interleaved) l.schedule = Schedule::OneFOneB;
    out.changes.push_back("schedule " + before + " -> " + to_string(l.schedule) +
                          ", vp 1 (no pipeline left to interleave)");
  }
  if (l.tp == 1 && l.sp) {
    out.changes.push_back("sp on -> off (no tp group left to split the sequence over)");
    l.sp = false;
  }
  return out;
}

ScaledRun run_as_is(const Scenario& original, const Layout& layout, const ClusterSpec& local) {
  ScaledRun out{original, layout, {}};
  move_to_local(out.scenario, layout, local, out.changes);
  return out;
}

namespace {

// "what FROM -> TO (why)" in the run's list of changes, when the value changed.
void note_change(std::vector<std::string>& changes, const char* what, int64_t from, int64_t to,
                 const std::string& why) {
  if (from == to) return;
  std::ostringstream s;
  s << what << ' ' << from << " -> " << to;
  if (!why.empty()) s << " (" << why << ')';
  changes.push_back(s.str());
}

// What capplan-train's model does not have, the scaled-down model (sequence `seq`) leaves out,
// each said in the changes (the run measures the model it trains against the plan's figures for
// that model):
//  - latent attention: capplan-train projects queries, keys and values from the hidden state, so
//    the model trains plain multi-head attention of its heads;
//  - multi-token prediction: capplan-train trains the next-token loss only, so no modules follow
//    the last layer;
//  - a window or chunks shorter than the sequence: capplan-train's attention has neither, so
//    every layer attends to the whole (short) sequence.
void keep_what_the_runtime_runs(ModelSpec& m, const ModelSpec& orig, int seq, std::vector<std::string>& changes) {
  if (orig.mla.enabled()) {
    m.mla = MlaSpec{};
    changes.push_back("attention: multi-head latent attention (kv_lora_rank " + std::to_string(orig.mla.kv_lora_rank) +
                      ") -> multi-head attention, which capplan-train runs");
  }
  if (orig.mtp_layers > 0) {
    m.mtp_layers = 0;
    changes.push_back("multi-token prediction: " + std::to_string(orig.mtp_layers) +
                      (orig.mtp_layers == 1 ? " module" : " modules") + " -> none, which capplan-train runs");
  }
  if (orig.local_span() > 0 && orig.local_span() < seq) {
    changes.push_back(std::string("attention: ") + (orig.sliding_window > 0 ? "a window" : "chunks") + " of " +
                      std::to_string(orig.local_span()) + " tokens -> the whole sequence of " + std::to_string(seq) +
                      ", which capplan-train runs");
    m.sliding_window = m.attention_chunk = m.global_every = 0;
  }
}

void scale_experts(ModelSpec& m, const ModelSpec& orig, const Layout& layout, int tp,
                   std::vector<std::string>& changes) {
  auto changed = [&](const char* what, int64_t from, int64_t to, const std::string& why) {
    note_change(changes, what, from, to, why);
  };
  // Experts: at most 8 (and at least ep), a multiple of ep; their width keeps its ratio to hidden.
  if (orig.moe.enabled()) {
    const int ep = std::max(1, layout.ep);
    m.moe.experts = std::min(orig.moe.experts, round_up(std::max(ep, 8), ep));
    m.moe.top_k = std::min(orig.moe.top_k_or_default(), m.moe.experts);
    changed("moe.experts", orig.moe.experts, m.moe.experts, "a multiple of ep " + std::to_string(ep));
    changed("moe.top_k", orig.moe.top_k_or_default(), m.moe.top_k, "at most the experts");
    const int width = orig.expert_ffn_hidden_or_default();
    if (m.hidden != orig.hidden) {
      m.moe.expert_ffn_hidden =
          std::max(tp, round_up(int(double(width) / orig.hidden * m.hidden + 0.5), tp));
      changed("moe.expert_ffn_hidden", width, m.moe.expert_ffn_hidden,
              "ratio to hidden kept, a multiple of tp " + std::to_string(tp));
    }
  }

}

void scale_batch(ScaledRun& out, const Scenario& original, const Layout& layout, const ScaleDownOptions& o,
                 int pp, std::vector<std::string>& changes) {
  auto changed = [&](const char* what, int64_t from, int64_t to, const std::string& why) {
    note_change(changes, what, from, to, why);
  };
  // Batch: micro-batches of one sequence; as many micro-batches as keep the pipeline's structure
  // (>= pp reaches the 1F1B steady state; interleaving needs a multiple of pp), capped.
  const int64_t orig_gbs = original.training.gbs;
  const int64_t per = int64_t(std::max(1, layout.dp)) * std::max(1, layout.mbs);
  const int64_t orig_m = std::max<int64_t>(1, orig_gbs / per);
  const int64_t cap = o.max_microbatches > 0 ? o.max_microbatches : std::max(2 * pp, 4);
  int64_t micro = std::min(orig_m, cap);
  if (orig_m >= pp) micro = std::max<int64_t>(micro, pp);
  if (layout.schedule == Schedule::Interleaved) micro = std::max<int64_t>(pp, micro / pp * pp);
  out.layout.mbs = 1;
  out.scenario.training.gbs = int64_t(std::max(1, layout.dp)) * micro;
  changed("mbs", layout.mbs, 1, "one sequence per micro-batch");
  changed("num_microbatches", orig_m, micro,
          "capped at " + std::to_string(cap) + ", >= pp " + std::to_string(pp) +
              (layout.schedule == Schedule::Interleaved ? ", a multiple of pp for interleaved" : ""));
  changed("gbs", orig_gbs, out.scenario.training.gbs,
          "dp " + std::to_string(layout.dp) + " x " + std::to_string(micro) + " micro-batches x mbs 1");

}

}  // namespace

ScaledRun scale_down(const Scenario& original, const Layout& layout, const ClusterSpec& local,
                     const ScaleDownOptions& o) {
  ScaledRun out{original, layout, {}};
  std::vector<std::string>& changes = out.changes;
  ModelSpec& m = out.scenario.model;
  const ModelSpec& orig = original.model;
  const int tp = std::max(1, layout.tp), pp = std::max(1, layout.pp), vp = std::max(1, layout.vp);
  auto changed = [&](const char* what, int64_t from, int64_t to, const std::string& why) {
    note_change(changes, what, from, to, why);
  };

  // Layers: one or a few whole layers per model chunk, so every stage and virtual stage keeps
  // the same number of layers as before relative to each other (equal split).
  const int chunks = pp * vp;
  int per_chunk = std::max(1, o.layers_per_chunk);
  while (chunks * per_chunk < o.min_layers) ++per_chunk;
  const int layers = std::min(orig.layers, chunks * per_chunk);
  if (layers >= chunks && layers % chunks == 0) {
    m.layers = layers;
  } else {
    m.layers = orig.layers;  // fewer layers than chunks: check_layout will say so
  }
  {
    std::ostringstream why;
    why << "pp " << pp << " x vp " << vp << " model chunks, " << m.layers / std::max(1, chunks)
        << " layer" << (m.layers / std::max(1, chunks) == 1 ? "" : "s") << " each";
    changed("layers", orig.layers, m.layers, why.str());
  }

  // Heads: the fewest that tp still splits (two per rank when tp = 1); grouped-query attention
  // stays grouped (kv_heads = tp, heads = 2 * tp) so the runtime exercises the same code path.
  const int orig_heads = orig.heads;
  const int orig_kv = orig.kv_heads_or_default();
  const bool gqa = orig_kv < orig_heads;
  const int target_hidden_min = std::max(o.min_hidden, 1);
  int heads = gqa ? 2 * tp : (tp == 1 ? 2 : tp);
  heads = std::min(heads, orig_heads);
  int head_dim = std::max(o.head_dim, (target_hidden_min + heads - 1) / std::max(1, heads));
  head_dim = round_up(head_dim, 2);  // rotary embeddings rotate pairs
  int hidden = heads * head_dim;
  if (orig.hidden <= hidden) {  // already small: keep the model's width and heads
    heads = orig_heads;
    hidden = orig.hidden;
  }
  m.heads = heads;
  m.hidden = hidden;
  if (hidden != orig.hidden) m.head_dim = 0;  // heads x head_dim is the new width
  if (heads != orig_heads) {
    if (gqa) {
      m.kv_heads = tp;
    } else {
      m.kv_heads = orig.kv_heads == 0 ? 0 : heads;
    }
  }
  changed("heads", orig_heads, m.heads, "a multiple of tp " + std::to_string(tp));
  if (gqa && m.kv_heads_or_default() != orig_kv) {
    changed("kv_heads", orig_kv, m.kv_heads_or_default(),
            gqa ? "grouped-query kept: one KV head per tp rank" : "");
  }
  changed("hidden", orig.hidden, m.hidden,
          std::to_string(m.heads) + " heads x head_dim " + std::to_string(m.head_dim_or_default()));

  // FFN width: the model's ratio to hidden, kept, rounded to a multiple of tp.
  if (orig.ffn_hidden > 0 && m.hidden != orig.hidden) {
    const double ratio = double(orig.ffn_hidden) / orig.hidden;
    m.ffn_hidden = std::max(tp, round_up(int(ratio * m.hidden + 0.5), tp));
    changed("ffn_hidden", orig.ffn_hidden, m.ffn_hidden,
            "ratio to hidden kept, a multiple of tp " + std::to_string(tp));
  }

  // Vocabulary: byte-level (256) unless smaller already; vocab-parallel needs a multiple of tp.
  m.vocab = round_up(std::min(orig.vocab, std::max(1, o.vocab)), tp);
  changed("vocab", orig.vocab, m.vocab, "byte-level, a multiple of tp " + std::to_string(tp));

  // Sequence: short, and a multiple of tp when sequence parallelism splits it.
  const int orig_seq = original.seq_len();
  int seq = std::min(orig_seq, std::max(1, o.seq_len));
  if (layout.sp) seq = round_up(seq, tp);
  const int cp = std::max(1, layout.cp);
  if (cp > 1) seq = round_up(seq, std::lcm(2 * cp, layout.sp ? tp : 1));
  m.seq_len = seq;
  out.scenario.training.seq_len = 0;
  changed("seq", orig_seq, seq,
          cp > 1 ? "a multiple of 2 * cp for the load-balanced chunks"
                 : layout.sp ? "a multiple of tp for sp" : "");

  keep_what_the_runtime_runs(m, orig, seq, changes);
  scale_experts(m, orig, layout, tp, changes);
  scale_batch(out, original, layout, o, pp, changes);

  m.name = (orig.name.empty() ? std::string("model") : orig.name) + "-scaled";
  m.source = "scaled down by capplan run from " + (orig.name.empty() ? "a model" : orig.name);
  out.scenario.training.tokens = 0;
  move_to_local(out.scenario, out.layout, local, changes);
  changes.push_back("kept: " + knob_summary(layout));
  return out;
}

std::string model_yaml(const ModelSpec& m) { return "# written by capplan run\n" + model_to_yaml(m); }

}  // namespace capplan::rt
