// `capplan-train measure`: times the runtime's own kernels at a model's real shapes and the
// collectives among the ranks it runs on, and writes a device profile (planner/device_profile.h).
// Every rank measures at once (as in training, the ranks share the machine's cores and memory);
// a kernel's time is the median over repeats of the slowest rank. The whole set is measured in
// rounds, one after another, and each time is the median over the rounds: a shared machine's slow
// spells (another tenant, a frequency change) last longer than one kernel's repeats, so samples
// of one kernel spread over the whole measurement rather than bunched in one instant.
#include "train/measure.h"

#include <malloc.h>
#include <mpi.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <limits>
#include <cstdlib>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <fstream>
#include <functional>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "planner/atomic_file.h"
#include "planner/device_profile.h"
#include "planner/flags.h"
#include "planner/format.h"
#include "planner/profile.h"
#include "planner/spec_io.h"
#include "planner/stats.h"
#include "train/backend.h"
#include "train/communicator.h"
#include "train/gpt.h"
#include "train/ring_attention.h"

namespace capplan::rt {
namespace {

constexpr const char* kCmd = "capplan-train measure";
// What a tensor-parallel layer computes between two of its collectives: two segments forward, two
// backward (Measurer::lockstep).
constexpr int kSegments = 4;
constexpr const char* kUsage =
    "usage: capplan-train measure --model M --out FILE [--tp T] [--mbs B] [--seq S] [--threads N] [--repeats R]\n"
    "       [--rounds N] [--shared-cores]\n"
    "Times every GEMM of a layer (forward, input-gradient, weight-gradient) and of the LM head, the\n"
    "attention (dense, and as a rank of a context-parallel ring of 2), norm, activation, loss and\n"
    "optimizer kernels at the model's shapes for one tensor-parallel rank of --tp, and all-reduce,\n"
    "reduce-scatter, all-gather and send/recv among the ranks (run it under mpirun -np N), then\n"
    "writes the device profile FILE (atomically, rank 0).\n"
    "With --shared-cores, run with twice as many ranks as cores, it measures how the cores run\n"
    "more ranks than they number and adds that to the profile FILE already written (atomically).\n\n";

struct MeasureOptions {
  std::string model, out;
  int tp = 1, mbs = 1, seq = 0, threads = 0, repeats = 5, rounds = 5;
  bool shared_cores = false;
};

double now_s() {
  using namespace std::chrono;
  return duration<double>(steady_clock::now().time_since_epoch()).count();
}

std::string ms(double s) { return fmt_fixed(s * 1e3, 1) + " ms"; }

std::string utc_now() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("model name", 0) == 0) {
      const auto colon = line.find(':');
      if (colon != std::string::npos) {
        std::string s = line.substr(colon + 1);
        while (!s.empty() && s.front() == ' ') s.erase(0, 1);
        return s;
      }
    }
  return "unknown CPU";
}

const std::vector<FlagSpec>& measure_flags() {
  static const std::vector<FlagSpec> f = {
      {"model", true, "model preset name, YAML file or Hugging Face config.json", "M"},
      {"out", true, "the device profile to write (atomically, by rank 0)", "FILE"},
      {"tp", true, "tensor-parallel degree whose per-rank shapes are measured (default 1)", "T"},
      {"mbs", true, "micro-batch size (default 1)", "B"},
      {"seq", true, "sequence length (default: the model's)", "S"},
      {"threads", true, "backend threads per rank (default: online cores / ranks on this node)", "N"},
      {"repeats", true, "timed repeats per kernel after one warm-up, in each round (default 5)", "R"},
      {"rounds", true, "rounds over the whole set; each time is the median over rounds (default 5)", "N"},
      {"shared-cores", false, "measure how the cores run more ranks than they number; add it to FILE", ""},
  };
  return f;
}

// Parses the flags with the one flag parser; 0 = go on, -1 = --help shown, 2 = bad input (every
// mistake reported).
int parse_options(int argc, char** argv, MeasureOptions& o) {
  Diagnostics d;
  const Args args = parse_args(argc, argv, measure_flags(), d);
  if (args.help()) {
    std::printf("%s%s", kUsage, flags_help(measure_flags()).c_str());
    return -1;
  }
  require_flag(args, "model", d, "a preset name or a file");
  require_flag(args, "out", d, "the device profile to write");
  o.model = args.get("model");
  o.out = args.get("out");
  o.tp = int(int_flag(args, "tp", d, 1, 1024).value_or(1));
  o.mbs = int(int_flag(args, "mbs", d, 1, 4096).value_or(1));
  o.seq = int(int_flag(args, "seq", d, 1, 1 << 20).value_or(0));
  o.threads = int(int_flag(args, "threads", d, 1, 4096).value_or(0));
  o.repeats = int(int_flag(args, "repeats", d, 1, 1000).value_or(5));
  o.rounds = int(int_flag(args, "rounds", d, 1, 100).value_or(5));
  o.shared_cores = args.has("shared-cores");
  if (d.has_errors()) {
    std::fprintf(stderr, "%s", d.to_string().c_str());
    return 2;
  }
  return 0;
}

// The last-level cache of this host (sysfs), 32 MiB when it does not say.
int64_t last_level_cache_bytes() {
  for (int index = 3; index >= 2; --index) {
    std::ifstream f("/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(index) + "/size");
    std::string v;
    if (f >> v && !v.empty()) {
      const int64_t n = std::atoll(v.c_str());
      const char unit = v.back();
      if (n > 0) return unit == 'K' ? n << 10 : unit == 'M' ? n << 20 : n;
    }
  }
  return int64_t(32) << 20;
}

class Measurer {
 public:
  Measurer(const MeasureOptions& o, const ModelSpec& m, Communicator& world, Backend& be)
      : o_(o), m_(m), world_(world), be_(be) {}

  // Median over repeats of the slowest rank's time of fn (after one warm-up run).
  double time(const std::function<void()>& fn) {
    fn();
    std::vector<double> t;
    for (int r = 0; r < o_.repeats; ++r) {
      world_.barrier();
      const double t0 = now_s();
      fn();
      float dt = float(now_s() - t0);
      world_.all_reduce_max(&dt, 1);
      t.push_back(dt);
    }
    return median(t);
  }

  // A buffer of n floats in [-0.5, 0.5): element i is ((i x 2654435761) mod 1000) / 1000 - 0.5,
  // a pattern of period 1000 copied in, so that the operand copies the cold timings cycle through
  // (up to twice the last-level cache per shape) cost a memory copy to fill, not a division each.
  float* buffer(int64_t n) {
    static const std::vector<float> pattern = [] {
      std::vector<float> v(1000);
      for (size_t i = 0; i < v.size(); ++i) v[i] = float((i * 2654435761u) % 1000) * 1e-3f - 0.5f;
      return v;
    }();
    bufs_.push_back(std::vector<float>(size_t(std::max<int64_t>(n, 1))));
    std::vector<float>& b = bufs_.back();
    for (size_t i = 0; i < b.size(); i += pattern.size())
      std::copy_n(pattern.begin(), std::min(pattern.size(), b.size() - i), b.begin() + ptrdiff_t(i));
    return b.data();
  }

  // Copies of a kernel's operands, each call taking the next in turn, so that a copy's bytes
  // have left the caches by its next use (cold_copies, cold_operand_copies say how many).
  template <class Operands>
  struct OperandCopies {
    std::vector<Operands> sets;
    size_t i = 0;
    Operands& next() { return sets[i = (i + 1) % sets.size()]; }
  };
  // `copies` sets, make() allocating each (with buffer()).
  template <class Make>
  auto operand_copies(int copies, Make make) {
    OperandCopies<decltype(make())> c;
    for (int k = 0; k < copies; ++k) c.sets.push_back(make());
    return c;
  }

  // Every GEMM of a layer and of the LM head at the profile's tokens per micro-batch (mbs x
  // seq), and again at half of them: the rows of a rank of a context-parallel pair (seq / 2, the
  // dense slice the cost model prices for cp 2) or of half the micro-batch, so that those shapes
  // are measured rather than read off the line, and the line is fitted over two sizes (on 2 EPYC
  // cores, the 4-layer, 256-wide model's GEMMs at 128 rows took 0.95-1.06x half the time of
  // those at 256, measured in one profile).
  void gemms(DeviceProfile& p) {
    const int tok = o_.mbs * seq();
    gemms_at(p, tok, "");
    if (tok % 2 == 0 && tok >= 2) gemms_at(p, tok / 2, ", half the tokens");
  }
  void gemms_at(DeviceProfile& p, int tok, const std::string& suffix) {
    const std::vector<Linear> shapes = linears();  // the layer's four, then the LM head
    auto operand_bytes = [tok](const Linear& l) {
      return 4.0 * (double(tok) * l.in + double(l.in) * l.out + double(tok) * l.out);
    };
    double step_bytes = 0;  // the GEMM operands of every layer: one pass over the model
    for (size_t i = 0; i < 4; ++i) step_bytes += double(m_.layers) * operand_bytes(shapes[i]);
    for (const Linear& l : shapes) {
      // The model's own three calls (LinearGemms, train/gpt.h), at the shapes the cost model
      // asks for: forward [tok, out] from [tok, in] and the weight, input gradient [tok, in] from
      // [tok, out], weight gradient [out, in] over tok. In training the weight, the saved input
      // and the outputs were last touched one pass over the model ago, every layer's GEMMs in
      // between: each call takes the next of as many copies of them as make up the bytes of that
      // pass, so that between two uses of a copy about the same bytes pass through the caches as
      // in a step (what of them the last-level cache still holds, it holds here too). Copies
      // beyond twice the last-level cache change nothing (the operands come from memory either
      // way) and are not made. The operand the kernel before has just written (the forward's
      // input: the norm's, attention's or the activation's output; the backward's output
      // gradient) is one buffer, hot in the caches as in a step. Timed instead with that operand
      // cold too and other transposes than the model's, the 4-layer, 256-wide model's steps ran
      // their GEMMs at 0.93-0.97 of the profile's times (six 22-layout fidelity runs, 2 EPYC
      // cores); in one profile these calls took 0.94-1.00 (median 0.96) of those, round by round.
      struct Operands {
        float *x, *w, *y;
      };
      auto ops = operand_copies(cold_operand_copies(step_bytes, operand_bytes(l), double(llc_bytes_)), [&] {
        return Operands{buffer(int64_t(tok) * l.in), buffer(int64_t(l.in) * l.out), buffer(int64_t(tok) * l.out)};
      });
      // The LM head runs a chunk of rows at a time (lm_head_chunk_rows): its logits, the
      // forward's output and the gradients' operand, are one chunk's buffer, kept hot. A layer's
      // Linears take all the rows at once. A 2-layer, 256-wide model with a vocabulary of 50257
      // (128-row chunks of 256 rows): alternating profiles timed the head 7.5 % longer in chunks
      // than in one (229.9 against 213.7 ms, forward and gradients), and dp 2 and pp 2 runs'
      // GEMMs took 1.07 and 1.08 of the one-piece profile's times, 1.01 and 0.99 of the other's.
      const bool head = &l == &shapes.back();
      const int chunk = head ? lm_head_chunk_rows(tok, l.out) : tok;
      const float* hot_x = buffer(int64_t(tok) * l.in);
      float* hot_dy = buffer(int64_t(chunk) * l.out);  // a chunk's rows (all of them but the head's)
      // fn(the GEMMs of a chunk's rows, its first row); a layer's Linears: one chunk, row 0.
      auto chunks = [&](const auto& fn) {
        for (int r = 0; r < tok; r += chunk) fn(LinearGemms{&be_, std::min(chunk, tok - r), l.in, l.out}, int64_t(r));
      };
      add(p, std::string(l.name) + " forward" + suffix, tok, l.out, l.in, [&] {
        Operands& o = ops.next();
        chunks([&](const LinearGemms& g, int64_t r) { g.forward(head ? hot_dy : o.y, hot_x + r * l.in, o.w); });
      });
      add(p, std::string(l.name) + " input-gradient" + suffix, tok, l.in, l.out, [&] {
        Operands& o = ops.next();
        chunks([&](const LinearGemms& g, int64_t r) { g.input_gradient(o.x + r * l.in, hot_dy, o.w); });
      });
      add(p, std::string(l.name) + " weight-gradient" + suffix, l.in, l.out, tok, [&] {
        Operands& o = ops.next();
        chunks([&](const LinearGemms& g, int64_t r) { g.weight_gradient(o.w, hot_dy, o.x + r * l.in); });
      });
      bufs_.clear();
    }
  }

  // The memory-bound kernels of a layer, its loss and its optimizer step, at the profile's shapes.
  void kernels(DeviceProfile& p) {
    norm_kernels(p);
    gelu_kernels(p);
    attention_kernels(p);
    ring_kernels(p);
    loss_kernels(p);
    optimizer_kernel(p);
  }

  // In a step the operands of the layer's kernels (norm_kernels, gelu_kernels, attention_kernels)
  // are a layer's own activations, written into that layer's buffers in the forward and read back
  // in the backward a pass later, every other layer's work in between: each call takes the next
  // of copies of its operands that fill the last-level cache twice, so that they come from memory
  // as the GEMMs' operands do (gemms_at). Timed on one set of operands, hot in the caches, the
  // 4-layer, 256-wide model's step ran these kernels 1.2-1.6 times longer than their profile times
  // added up (2 EPYC cores, 12-step runs of six layouts, the runtime's GEMMs matching their
  // profile times within 1 % in one of them).
  void norm_kernels(DeviceProfile& p) {
    const int h = m_.hidden, rows = o_.mbs * seq();
    const double e = 4;  // fp32
    const NormKind norm = norm_kind();
    const int64_t nx = int64_t(rows) * h;
    struct NormOperands {
      float *x, *out, *w, *b, *mean, *rstd, *dw, *db;
    };
    auto ops = operand_copies(cold_copies(e * (2.0 * double(nx) + 2.0 * rows + 4.0 * h)), [&] {
      return NormOperands{buffer(nx), buffer(nx), buffer(h), buffer(h), buffer(rows), buffer(rows), buffer(h), buffer(h)};
    });
    kernel(p, "norm forward", e * 2 * rows * double(h), [&] {
      NormOperands& o = ops.next();
      be_.norm_forward(norm, o.out, o.mean, o.rstd, o.x, o.w, o.b, rows, h);
    });
    kernel(p, "norm backward", e * 3 * rows * double(h), [&] {
      NormOperands& o = ops.next();
      be_.norm_backward(norm, o.x, o.dw, o.db, o.out, o.x, o.w, o.mean, o.rstd, rows, h);
    });
    kernel(p, "residual add", e * 3 * rows * double(h), [&] {
      NormOperands& o = ops.next();
      be_.add(o.out, o.x, nx);
    });
    bufs_.clear();
  }

  void gelu_kernels(DeviceProfile& p) {
    const int64_t fl = int64_t(o_.mbs) * seq() * (m_.ffn_hidden_or_default() / o_.tp);
    const double e = 4;  // fp32
    auto ops = operand_copies(cold_copies(e * 2.0 * double(fl)), [&] { return std::array<float*, 2>{buffer(fl), buffer(fl)}; });
    kernel(p, "gelu forward", e * 2 * double(fl), [&] {
      std::array<float*, 2>& o = ops.next();
      be_.gelu_forward(o[1], o[0], fl);
    });
    kernel(p, "gelu backward", e * 3 * double(fl), [&] {
      std::array<float*, 2>& o = ops.next();
      be_.gelu_backward(o[0], o[1], o[1], fl);
    });
    bufs_.clear();
  }

  void attention_kernels(DeviceProfile& p) {
    const int T = seq(), B = o_.mbs, rows = B * T;
    const double e = 4;  // fp32
    const AttentionShape s = attention_shape(T);
    const int64_t width = s.qkv_stride();
    const double score_bytes = e * double(B) * s.Hl * T * T;
    // Selective recompute reruns the forward in the backward on Q, K, V written a whole pass
    // earlier: cold operands too, so the cost model prices it with this forward's time (profiles
    // that timed the forward warm also wrote an "attention recompute" on cold copies; measured on
    // 2 cores, the recompute took 0.75 ms a call in training against 0.43-0.58 ms warm).
    struct AttentionOperands {
      float *qkv, *probs, *out, *dqkv;
    };
    auto ops = operand_copies(
        cold_copies(e * (2.0 * double(rows) * width + double(B) * s.Hl * T * T + double(rows) * s.Hl * s.D)), [&] {
          return AttentionOperands{buffer(int64_t(rows) * width), buffer(int64_t(B) * s.Hl * T * T),
                                   buffer(int64_t(rows) * s.Hl * s.D), buffer(int64_t(rows) * width)};
        });
    kernel(p, "attention forward", 2 * score_bytes, [&] {
      AttentionOperands& o = ops.next();
      be_.attention_forward(o.out, o.probs, o.qkv, s);
    });
    kernel(p, "attention backward", 3 * score_bytes, [&] {
      AttentionOperands& o = ops.next();
      be_.attention_backward(o.dqkv, o.out, o.qkv, o.probs, s);
    });
    bufs_.clear();
  }

  void loss_kernels(DeviceProfile& p) {
    const int tp = o_.tp, rows = o_.mbs * seq();
    const double e = 4;  // fp32
    const int Vl = (m_.vocab + tp - 1) / tp;
    // Gpt::forward runs the loss a chunk of the LM head's rows at a time (lm_head_chunk_rows), on
    // the logits the head's GEMM has just written: one chunk's buffer (as gemms_at times the
    // head). For a vocabulary of 50257 (two 128-row chunks of 256 rows) alternating profiles timed
    // the loss's forward at 12.8-12.9 ms so against 9.8-10.5 in one piece, its backward at 2.8-3.7
    // against 2.6-3.6; for 4096 the 256 rows are one chunk, as before.
    const int chunk = lm_head_chunk_rows(rows, Vl);
    float* logits = buffer(int64_t(chunk) * Vl);
    float* mx = buffer(rows);
    float* se = buffer(rows);
    float* tl = buffer(rows);
    std::vector<int32_t> targets(static_cast<size_t>(rows));
    for (int r = 0; r < rows; ++r) targets[size_t(r)] = int32_t((r * 7919) % m_.vocab);
    const double lb = e * double(rows) * Vl;
    auto chunks = [&](const auto& fn) {
      for (int r = 0; r < rows; r += chunk) fn(r, std::min(chunk, rows - r));
    };
    kernel(p, "loss forward", 3 * lb, [&] {
      chunks([&](int r, int rc) {
        be_.xent_row_max(mx + r, logits, rc, Vl, 0, m_.vocab);
        be_.xent_sum_exp(se + r, tl + r, logits, mx + r, targets.data() + r, rc, Vl, 0, m_.vocab);
      });
    });
    kernel(p, "loss backward", 2 * lb, [&] {
      chunks([&](int r, int rc) { be_.xent_backward(logits, se + r, targets.data() + r, 1.0f, rc, Vl, 0, m_.vocab); });
    });
    bufs_.clear();
  }

  void optimizer_kernel(DeviceProfile& p) {
    const int h = m_.hidden, tp = o_.tp;
    const double e = 4;  // fp32
    // The optimizer step sweeps every weight, gradient and moment of the rank once a step, so
    // they come from memory: each call takes the next of copies (a layer's weights on one rank
    // each) that fill the last-level cache twice.
    const int64_t n = int64_t(12) * h * h / tp;
    auto ops = operand_copies(cold_copies(4.0 * e * double(n)), [&] {
      std::array<float*, 4> o{buffer(n), buffer(n), buffer(n), buffer(n)};
      for (int64_t i = 0; i < n; ++i) o[3][i] = std::abs(o[3][i]);  // the second moment
      return o;
    });
    AdamWStep st;
    kernel(p, "adamw", e * 7 * double(n), [&] {
      std::array<float*, 4>& o = ops.next();
      be_.adamw(o[0], o[1], o[2], o[3], n, st);
    });
    // Before the step, Optimizer::reduce_gradients sums the squares of the rank's shard of the
    // gradients for the global norm, one read of them. Where a reduce-scatter has just written
    // the shard (ZeRO-0 and -1 over more than one rank) it is in the caches; elsewhere (one rank,
    // ZeRO-2 and -3, whose shard was reduced during the backward) it comes from memory. Both, on
    // the same shapes: the cold one over the copies' gradients, the warm one over one buffer read
    // again each call.
    volatile double sink = 0;  // the last sum, kept
    kernel(p, "gradient norm", e * double(n), [&] { sink = be_.sum_squares(ops.next()[1], n); });
    float* warm = buffer(n);
    kernel(p, "gradient norm after exchange", e * double(n), [&] { sink = be_.sum_squares(warm, n); });
    bufs_.clear();
  }

  // A rank of a context-parallel ring of kProfileRingCp over the same sequence (RingAttention
  // without a communicator: the rank's K and V packed, a block kernel per rank of the ring over
  // its keys at their owner's positions, the finish; the backward's blocks and the gradients' copy
  // back), each measuring rank taking the ring rank of its parity. The blocks are many smaller
  // calls than the dense kernel's: a cp layout's attention is priced from these, not from the
  // dense kernel's time cut by the scores. Not where the sequence does not split into
  // 2 kProfileRingCp chunks. The operands are a layer's, as the dense kernels' are
  // (attention_kernels): each call takes the next of copies that fill the last-level cache twice
  // (the backward reads the Q, K, V, output and statistics its layer's forward wrote a pass
  // earlier). Timed on one set, hot in the caches, cp 2's steps ran their compute other than the
  // GEMMs 1.14x the profile's prediction (2 cores, a run beside dp 2 at 1.00x).
  void ring_kernels(DeviceProfile& p) {
    const int T = seq(), B = o_.mbs;
    const double e = 4;  // fp32
    if (T % (2 * kProfileRingCp) != 0) return;
    const AttentionShape s = attention_shape(T / kProfileRingCp);
    const int64_t ring_rows = int64_t(B) * s.T;
    RingAttention ring(be_, kProfileRingCp, world_.rank() % kProfileRingCp, T);
    struct RingOperands {
      float *qkv, *out, *lse, *dout, *dqkv;
    };
    const int64_t qkv_n = ring_rows * s.qkv_stride(), out_n = ring_rows * s.Hl * s.D, lse_n = int64_t(B) * s.Hl * s.T;
    auto ops = operand_copies(cold_copies(e * double(2 * qkv_n + 2 * out_n + lse_n)), [&] {
      return RingOperands{buffer(qkv_n), buffer(out_n), buffer(lse_n), buffer(out_n), buffer(qkv_n)};
    });
    const double score_bytes = e * double(B) * s.Hl * T * T / kProfileRingCp;  // the rank's share of the scores
    kernel(p, "ring attention forward", 2 * score_bytes, [&] {
      RingOperands& o = ops.next();
      ring.forward(o.out, o.lse, o.qkv, s);
    });
    kernel(p, "ring attention backward", 3 * score_bytes, [&] {
      RingOperands& o = ops.next();
      ring.backward(o.dqkv, o.dout, o.out, o.lse, o.qkv, s);
    });
    bufs_.clear();
  }

  // A linear layer's shape (linears()): Y[tokens, out] = X[tokens, in] W[in, out].
  struct Linear {
    const char* name;
    int in, out;
  };

  // The memory-bound kernels of a layer between its GEMMs, at the profile's shapes, on one copy of
  // their activations (in a step a kernel reads what the GEMM before it wrote): the norm before
  // each half, attention between Q, K, V and the output projection, GeLU or SwiGLU between the
  // FFN's two GEMMs, and each half's residual add; in the backward their gradients. The ranks in
  // lockstep run them between their collectives as a tensor-parallel layer does, so that a
  // collective waits for the last rank's lateness over all that the layer computes before it.
  struct LayerKernels {
    Backend* be = nullptr;
    NormKind kind = NormKind::LayerNorm;
    AttentionShape s;
    bool swiglu = false;
    int rows = 0, h = 0, f = 0;
    float *x = nullptr, *y = nullptr, *w = nullptr, *b = nullptr, *mean = nullptr, *rstd = nullptr;
    float *dx = nullptr, *dw = nullptr, *db = nullptr, *qkv = nullptr, *probs = nullptr, *out = nullptr, *dqkv = nullptr;
    float *fc = nullptr, *act = nullptr, *dfc = nullptr;

    void norm(bool backward) const {
      if (!backward) be->norm_forward(kind, y, mean, rstd, x, w, b, rows, h);
      else be->norm_backward(kind, dx, dw, db, y, x, w, mean, rstd, rows, h);
    }
    void middle(bool attention, bool backward) const {
      if (attention && !backward) be->attention_forward(out, probs, qkv, s);
      else if (attention) be->attention_backward(dqkv, out, qkv, probs, s);
      else if (swiglu && !backward) be->swiglu_forward(act, fc, rows, f);
      else if (swiglu) be->swiglu_backward(dfc, fc, act, rows, f);
      else if (!backward) be->gelu_forward(act, fc, int64_t(rows) * f);
      else be->gelu_backward(dfc, fc, act, int64_t(rows) * f);
    }
    void residual() const { be->add(x, y, int64_t(rows) * h); }
  };
  LayerKernels layer_kernels() {
    LayerKernels k;
    k.be = &be_;
    k.kind = norm_kind();
    k.s = attention_shape(seq());
    k.swiglu = m_.ffn == Ffn::Swiglu;
    k.rows = o_.mbs * seq();
    k.h = m_.hidden;
    k.f = m_.ffn_hidden_or_default() / o_.tp;
    const int64_t rows = k.rows, fc = rows * (k.swiglu ? 2 : 1) * k.f;
    k.x = buffer(rows * k.h), k.y = buffer(rows * k.h), k.w = buffer(k.h), k.b = buffer(k.h);
    k.mean = buffer(rows), k.rstd = buffer(rows), k.dx = buffer(rows * k.h), k.dw = buffer(k.h), k.db = buffer(k.h);
    k.qkv = buffer(rows * k.s.qkv_stride()), k.dqkv = buffer(rows * k.s.qkv_stride());
    k.probs = buffer(be_.attention_state_numel(k.s)), k.out = buffer(rows * k.s.Hl * k.s.D);
    k.fc = buffer(fc), k.dfc = buffer(fc), k.act = buffer(rows * k.f);
    return k;
  }

  // What a layer runs between two tensor-parallel collectives (Measurer::lockstep): k = 0, 1 the
  // forward of its first and second half (the norm, Q, K, V, attention and the output projection;
  // the norm, the FFN's two GEMMs and the activation between them; each with its residual add),
  // k = 2, 3 the backward of the second and then the first half (each GEMM's input and weight
  // gradients, twice the forward's work, and the kernels' gradients in reverse order). The GEMMs'
  // operands come in as many copies as make one pass over the model, a copy per layer taken in
  // turn (as gemms(): no more than fill the last-level cache twice).
  struct LayerSegments {
    struct Operands {
      float *x, *w, *y, *dx, *dw;  // input, weight, output; the input's and the weight's gradients
    };
    Backend* be = nullptr;
    std::vector<Linear> shapes;  // the layer's four, then the LM head
    std::vector<std::vector<Operands>> copies;
    LayerKernels between;
    int tok = 0;
    size_t next = 0;

    void gemms(const Operands& o, size_t i, bool backward) const {
      const LinearGemms g{be, tok, shapes[i].in, shapes[i].out};
      if (!backward) {
        g.forward(o.y, o.x, o.w);
      } else {
        g.input_gradient(o.dx, o.y, o.w);
        g.weight_gradient(o.dw, o.y, o.x);
      }
    }
    void run(int k) {
      const std::vector<Operands>& ops = copies[next];
      if (k == 3) next = (next + 1) % copies.size();
      const size_t half = size_t(k < 2 ? k : 3 - k), first = 2 * half, second = first + 1;
      const bool attention = half == 0, backward = k >= 2;
      if (!backward) {
        between.norm(false);
        gemms(ops[first], first, false);
        between.middle(attention, false);
        gemms(ops[second], second, false);
      } else {
        gemms(ops[second], second, true);
        between.middle(attention, true);
        gemms(ops[first], first, true);
        between.norm(true);
      }
      between.residual();
    }
  };
  LayerSegments layer_segments() {
    LayerSegments seg;
    seg.be = &be_;
    seg.tok = o_.mbs * seq();
    seg.shapes = linears();
    const int64_t tok = seg.tok;
    double layer_bytes = 0;  // one copy of a layer's operands and gradients
    for (size_t i = 0; i < 4; ++i)
      layer_bytes += 4.0 * (2.0 * double(tok) * seg.shapes[i].in + 2.0 * double(seg.shapes[i].in) * seg.shapes[i].out +
                            double(tok) * seg.shapes[i].out);
    seg.copies.resize(size_t(cold_operand_copies(double(m_.layers) * layer_bytes, layer_bytes, double(llc_bytes_))));
    for (std::vector<LayerSegments::Operands>& ops : seg.copies)
      for (size_t i = 0; i < 4; ++i) {
        const int64_t in = seg.shapes[i].in, out = seg.shapes[i].out;
        ops.push_back({buffer(tok * in), buffer(in * out), buffer(tok * out), buffer(tok * in), buffer(in * out)});
      }
    seg.between = layer_kernels();
    return seg;
  }

  // Ranks in lockstep, as tensor-parallel ranks are: every rank of the world runs the GEMMs and
  // kernels of a layer's forward and backward in the four segments a tensor-parallel layer runs
  // between its collectives (LayerSegments above: one copy of the GEMMs' operands per layer of the
  // model, taken in turn, at most what fills the last-level cache twice), K layers (about 0.1 s), in these ways
  // one after another in each of 3 x --rounds rounds (fewer, at least 3, past 10 s):
  //  - free: every rank computes at once: t_free;
  //  - lockstep, for each of `groups` (its size, and the communicator of this rank's group): the
  //    same, and after each segment the ranks of each group sum the layer's activation (mbs x
  //    seq x hidden) in an all-reduce, as tensor-parallel ranks do (Shoeybi et al. 2019 Sec 3:
  //    two all-reduces in a layer's forward, two in its backward): t_lock. A collective in
  //    lockstep holds its ranks (t_lock - t_free) / 4K: its own time, and the wait for the last
  //    rank of the group to arrive. With a core each that is taken as the rank computing longest
  //    sees it, its time in its all-reduces over 4K (the rank whose terms capplan-train's step
  //    record takes; over six 2-rank profiles on this 2-core AMD EPYC host 0.113-0.182 ms a call,
  //    against 0.149-0.239 from the difference of the two timings, which moves with the host
  //    between them). The segments are as long as the training's, so a rank is
  //    descheduled inside them as often as in training where ranks outnumber the cores (a
  //    backward segment, twice a forward's, outlasts more of the scheduler's slices);
  //  - with `shared` (the world has more ranks than the host's `cores`), also alone: the first
  //    `cores` ranks compute, one per core, while the others sleep in a point-to-point wait (the
  //    runtime's nap on a shared core): t_alone; and again with the others asleep through it
  //    (run_alone_quiet): t_quiet. The nap wakes every 50-100 us on the cores the two need, so
  //    t_alone is not a core's time: on this 2-core host 2 ranks took 17.1 ms a layer beside 2
  //    napping ranks and 19.5 beside 6, against 15.5 with a core each and none beside them (one
  //    profile). n ranks on c cores ideally take n / c of a core's time (processor sharing): the
  //    efficiency is (n / c) t_quiet / t_free, the median of each round's; and a
  //    pipeline's hand-off of the activation between two ranks while the others compute (handoff),
  //    and again while the others compute in lockstep in pairs (a tensor-parallel pipeline's
  //    stages: a rank polling in its all-reduce yields the core, which a free GEMM does not).
  // Times are medians over the rounds (the lockstep's extra time: the median of each round's
  // difference). Fills `p.lockstep` (a core each: the last group's) or `p.shared` (one entry).
  void lockstep(DeviceProfile& p, int cores, bool shared, const std::vector<std::pair<int, Communicator*>>& groups) {
    const int n = world_.size();
    const int h = m_.hidden, tok = o_.mbs * seq();
    LayerSegments segments = layer_segments();
    const int64_t arn = int64_t(tok) * h;  // a layer's activation, what a tensor-parallel all-reduce sums
    float* act = buffer(arn);
    // A layer alone (group nullptr), or in lockstep with `group`; busy_s adds this rank's time in
    // its segments (GEMMs and kernels), the collectives' not included.
    double busy_s = 0, held_s = 0;
    auto layer = [&](Communicator* group) {
      for (int k = 0; k < kSegments; ++k) {
        const double t = now_s();
        segments.run(k);
        const double t1 = now_s();
        busy_s += t1 - t;
        if (group) {
          group->all_reduce_sum(act, arn);
          held_s += now_s() - t1;
        }
      }
    };
    // K layers per timing: about 0.1 s of a lockstep timing (the collectives may outlast the GEMMs
    // of a small model many times over on shared cores).
    Communicator* all = groups.back().second;  // the largest group
    layer(all);
    world_.barrier();
    double t0 = now_s();
    layer(all);
    float once = float(now_s() - t0);
    world_.all_reduce_max(&once, 1);
    const int K = std::clamp(int(std::ceil(0.1 / std::max(1e-6, double(once)))), 2, 1000);
    // K layers of `one` timed, this rank's time in their segments and collectives counted from zero.
    auto timed_layers = [&](const std::function<void()>& one) {
      busy_s = held_s = 0;
      return timed([&] {
        for (int k = 0; k < K; ++k) one();
      });
    };
    const int alone = std::min(cores, n / 2);  // ranks computing alone; the rest nap
    // With a core each and 2 ranks (a context ring of 2): the same segments, each with the ring's
    // exchange around it instead of the all-reduce.
    const bool ring = !shared && n == 2;
    const int64_t block = int64_t(o_.mbs) * seq() * (m_.kv_heads_or_default() * m_.head_dim_or_default() / o_.tp);
    const std::function<void()> ring_layer = ring ? ring_exchange_layer(segments, block, busy_s, held_s) : nullptr;
    // With a core each: the same segments between sequence parallelism's collectives instead.
    const bool seqpar = !shared && arn % n == 0;
    const int64_t part = arn / n;
    const std::function<void()> sp_layer = seqpar ? sequence_parallel_layer(segments, act, part, busy_s, held_s) : nullptr;
    LockstepRounds t;  // the rounds' timings, for store_lockstep
    t.lockstep = t.busy = t.held = std::vector<std::vector<double>>(groups.size());
    t.ring_bytes = 4.0 * double(block);
    t.sp_bytes = 4.0 * double(part);
    t.gradient_exchange = after_compute(groups, /*zero1=*/!shared);
    t.K = K;
    // Three times the kernels' rounds (the difference sought is a few percent of each timing), while
    // the timings so far stay within 10 s (a loaded host), at least 3. Every rank sees the same
    // timings (all_reduce_max), so all stop at the same round.
    t.rounds = 3 * o_.rounds;
    double spent = 0;
    for (int round = 0; round < t.rounds; ++round) {
      if (round >= 3 && spent > 10.0) {
        t.rounds = round;
        break;
      }
      if (shared) {
        auto layers = [&] {
          for (int k = 0; k < K; ++k) layer(nullptr);
        };
        t.alone.push_back(timed([&] { run_alone(alone, layers); }));
        t.alone_quiet.push_back(run_alone_quiet(alone, 1.25 * t.alone.back(), layers));
        spent += 1.25 * t.alone.back();  // the sleep, which outlasts the work
      }
      // Free and each lockstep in turn, starting one further each round, so that none always
      // follows another.
      const size_t ways = groups.size() + 1;
      for (size_t w = 0; w < ways; ++w) {
        const size_t way = (w + size_t(round)) % ways;  // 0: free, else groups[way - 1]
        std::vector<double>& into = way == 0 ? t.free : t.lockstep[way - 1];
        Communicator* group = way == 0 ? nullptr : groups[way - 1].second;
        into.push_back(timed_layers([&] { layer(group); }));
        spent += into.back();
        spent += time_exchange_after_compute(t.gradient_exchange, groups, (w + size_t(round)) % groups.size());
        if (way > 0) {  // the ranks' mean time in their segments; the busiest rank's in its all-reduces
          const BusiestRank b = busiest_rank(busy_s, held_s);
          t.busy[way - 1].push_back(b.mean_busy_s);
          t.held[way - 1].push_back(b.held_s);
        }
      }
      if (ring) {
        t.ring.push_back(timed_layers(ring_layer));
        spent += t.ring.back();
        t.ring_held.push_back(busiest_rank(busy_s, held_s).held_s);
      }
      if (seqpar) {
        t.sp.push_back(timed_layers(sp_layer));
        spent += t.sp.back();
        t.sp_held.push_back(busiest_rank(busy_s, held_s).held_s);
      }
      if (shared) spent += t.alone.back() + time_handoffs(t, layer, groups, act, arn);
    }
    store_lockstep(p, cores, shared, groups, t, tok);
    bufs_.clear();
  }

  // One layer's segments, each between `before` and `after`, the collectives a layer makes
  // around that compute; adds to busy_s the time in the segments and to held_s the time in the
  // collectives.
  std::function<void()> segments_between(LayerSegments& segments, std::function<void()> before,
                                         std::function<void()> after, double& busy_s, double& held_s) {
    return [this, &segments, before = std::move(before), after = std::move(after), &busy_s, &held_s] {
      for (int k = 0; k < kSegments; ++k) {
        const double t0 = now_s();
        before();
        const double t = now_s();
        segments.run(k);
        const double t1 = now_s();
        busy_s += t1 - t;
        after();
        held_s += (t - t0) + (now_s() - t1);
      }
    };
  }

  // A context ring of 2's exchange as RingAttention makes it: the rank's K and V block of `block`
  // floats posted to its neighbour before the block's compute, the neighbour's received after it.
  std::function<void()> ring_exchange_layer(LayerSegments& segments, int64_t block, double& busy_s, double& held_s) {
    float* out = buffer(block);
    float* in = buffer(block);
    const int peer = 1 - world_.rank();
    return segments_between(
        segments, [this, out, block, peer] { world_.send_async(out, block, peer, 13); },
        [this, in, block, peer] {
          world_.recv(in, block, peer, 13);
          world_.wait_sends();
        },
        busy_s, held_s);
  }

  // Sequence parallelism's collectives as capplan-train's Gpt makes them under --sp (Korthikanti
  // et al. 2022 Sec 4.2.2): the rank's `part` of the activation `act` all-gathered in place before
  // the segment, the segment's output reduce-scattered back to the parts after it.
  std::function<void()> sequence_parallel_layer(LayerSegments& segments, float* act, int64_t part, double& busy_s,
                                                double& held_s) {
    float* own = buffer(part);
    float* mine = act + int64_t(world_.rank()) * part;
    return segments_between(
        segments, [this, mine, act, part] { world_.all_gather(mine, act, part); },
        [this, act, own, part] { world_.reduce_scatter_sum(act, own, part); }, busy_s, held_s);
  }

  // The ranks' mean time computing, and the time the one computing longest spent in its
  // collectives, from each rank's `busy_s` and `held_s` (the same on every rank). capplan-train's
  // step record takes that rank's terms (Run::take_terms_of_busiest_rank).
  struct BusiestRank {
    double mean_busy_s = 0, held_s = 0;
  };
  BusiestRank busiest_rank(double busy_s, double held_s) {
    const int n = world_.size();
    std::vector<double> rows(size_t(2 * n), 0.0);
    rows[size_t(2 * world_.rank())] = busy_s;
    rows[size_t(2 * world_.rank() + 1)] = held_s;
    world_.all_reduce_sum(rows.data(), int64_t(rows.size()));
    size_t busiest = 0;
    double sum = 0;
    for (size_t r = 0; r < size_t(n); ++r) {
      sum += rows[2 * r];
      if (rows[2 * r] > rows[2 * busiest]) busiest = r;
    }
    return {sum / n, rows[2 * busiest + 1]};
  }

  // `fn` on every rank from a barrier: the slowest rank's time (the same on every rank).
  double timed(const std::function<void()>& fn) {
    world_.barrier();
    const double t = now_s();
    fn();
    float dt = float(now_s() - t);
    world_.all_reduce_max(&dt, 1);
    return double(dt);
  }

  // The first `alone` ranks run `work`, a core each; every other rank naps in a receive until one
  // of them is done (in the all-reduce that ends a timing they would poll on the cores: with 8
  // ranks on 2 cores, 2 computing, 2 napping and 4 polling there, the two's time went from
  // 28-33 ms to 51).
  void run_alone(int alone, const std::function<void()>& work) {
    const int n = world_.size(), r = world_.rank();
    float one = 1;
    if (r < alone) {
      work();
      for (int q = r + alone; q < n; q += alone) world_.send(&one, 1, q, 7);
    } else {
      world_.recv(&one, 1, r % alone, 7);
    }
  }

  // The first `alone` ranks run `work`, a core each, while every other rank sleeps through it
  // (one sleep of `sleep_s`, then a receive of its done message): the slowest working rank's own
  // time from its start, so the sleepers' wake-up is not in it.
  double run_alone_quiet(int alone, double sleep_s, const std::function<void()>& work) {
    const int n = world_.size(), r = world_.rank();
    float one = 1, dt = 0;
    world_.barrier();
    if (r < alone) {
      const double t = now_s();
      work();
      dt = float(now_s() - t);
      for (int q = r + alone; q < n; q += alone) world_.send(&one, 1, q, 8);
    } else {
      std::this_thread::sleep_for(std::chrono::duration<double>(sleep_s));
      world_.recv(&one, 1, r % alone, 8);
    }
    world_.all_reduce_max(&dt, 1);
    return double(dt);
  }

  // The optimizer's gradient exchange of 16 MiB a rank made right after compute (lockstep()), in
  // each lockstep group: its buffers (copies that fill the last-level cache twice between them,
  // each through the call once per group beforehand: a buffer's first call costs more), the
  // group's count and the times, one per call.
  // With a core each, ZeRO-1's exchange is timed as well, in alternate calls (zero1_seconds):
  // its all-gather comes after the optimizer's AdamW over the rank's shard (`state`: the moments).
  // Not on shared cores, where ZeRO-1 keeps ZeRO-0's ratio: each step there costs the shared
  // run's rounds more than the timing is worth.
  struct AfterCompute {
    OperandCopies<float*> bufs;
    std::vector<int64_t> count;
    std::vector<std::vector<double>> norm_parts, seconds, zero1_seconds;
    std::array<float*, 2> state{};  // the moments, as long as the largest group's block
    int64_t state_count = 0;
    std::vector<int> calls;  // per group
    bool zero1 = false;
  };

  // The timings of lockstep(), one per round: the first `cores` ranks alone (beside napping and
  // beside sleeping ranks), all free, the hand-off; per lockstep group, the timing and the ranks'
  // mean time in their segments (GEMMs and kernels). K layers each.
  struct LockstepRounds {
    std::vector<double> alone, alone_quiet, free, handoff, handoff_lockstep;
    std::vector<std::vector<double>> lockstep, busy;
    std::vector<std::vector<double>> held;  // the busiest rank's time in its all-reduces, per lockstep group
    std::vector<double> ring;  // the ring's exchange around each segment (2 ranks, a core each)
    std::vector<double> ring_held;  // the busiest rank's time in the ring's receives and send waits
    double ring_bytes = 0;     // the exchanged block
    std::vector<double> sp, sp_held;  // sequence parallelism's pair around each segment (a core each)
    double sp_bytes = 0;              // a rank's part of the gathered activation
    AfterCompute gradient_exchange;
    int K = 0, rounds = 0;
  };

  // One round's hand-offs (handoff()) for lockstep(), into t.handoff and t.handoff_lockstep, each
  // for 0.4 of the round's free timing: while the other ranks compute twice that timing's layers
  // (they outlast the hand-off), and while they compute them in lockstep in pairs (ranks 2 and 3,
  // 4 and 5, ...: groups[0]), as a tensor-parallel pipeline's other stages do, meeting in an
  // all-reduce every half layer, where they poll yielding the core. Returns the time spent.
  double time_handoffs(LockstepRounds& t, const std::function<void(Communicator*)>& layer,
                       const std::vector<std::pair<int, Communicator*>>& groups, float* act, int64_t arn) {
    const double span = 0.4 * t.free.back();
    auto twice = [&](Communicator* group) {
      return [&, group] {
        for (int k = 0; k < 2 * t.K; ++k) layer(group);
      };
    };
    t.handoff.push_back(handoff(twice(nullptr), act, arn, span));
    if (groups.front().first != 2 || world_.size() < 4) return span;
    t.handoff_lockstep.push_back(handoff(twice(groups.front().second), act, arn, span));
    return 2 * span;
  }

  AfterCompute after_compute(const std::vector<std::pair<int, Communicator*>>& groups, bool zero1) {
    AfterCompute x;
    x.zero1 = zero1;
    const int64_t most = int64_t(1) << 22;
    // The host's ranks share the cache.
    x.bufs = operand_copies(cold_copies(4.0 * double(most) * world_.size()), [&] { return buffer(most); });
    for (const auto& [size, group] : groups) {
      x.count.push_back(most / size * size);
      x.norm_parts.emplace_back(size_t(size));
      x.seconds.emplace_back();
      x.zero1_seconds.emplace_back();
      x.calls.push_back(0);
      for (float* b : x.bufs.sets) optimizer_exchange(*group, b, x.count.back(), x.norm_parts.back());
      x.state_count = std::max(x.state_count, x.count.back() / size);
    }
    if (!zero1) return x;
    x.state = {buffer(x.state_count), buffer(x.state_count)};
    for (int64_t i = 0; i < x.state_count; ++i) x.state[1][i] = std::abs(x.state[1][i]);  // the second moment
    return x;
  }

  // Group g's exchange on the next buffer, from where this rank's compute ended (the timing before
  // it ends in a collective of every rank, so they start it together, as a step's ranks end their
  // backward, with their caches holding the compute's data): the slowest rank's time, into
  // x.seconds[g]; returns the slowest rank's wall time, the same on every rank (the rounds' time
  // budget adds it up, and every rank must stop its rounds at the same one).
  // Every other call of a group (the same on every rank) ZeRO-1's: the same
  // reduce-scatter and gather, AdamW over the rank's block (its time left out: the exchange's
  // slowest rank's time in the collectives, into x.zero1_seconds[g]), then the all-gather, after
  // the step's sweep over the state as in Optimizer::update.
  double time_exchange_after_compute(AfterCompute& x, const std::vector<std::pair<int, Communicator*>>& groups,
                                     size_t g) {
    float* b = x.bufs.next();
    Communicator& group = *groups[g].second;
    const bool zero1 = x.zero1 && x.calls[g]++ % 2 == 1;
    const double t = now_s();
    double step_s = 0;
    if (zero1) {
      const int64_t block = reduce_for_norm(group, b, x.count[g], x.norm_parts[g]);
      // The weights: another of the buffers, from memory as the run's are.
      float* w = x.bufs.next();
      float* own = w + group.rank() * block;
      const double s0 = now_s();
      be_.adamw(own, b, x.state[0], x.state[1], block, AdamWStep{});
      step_s = now_s() - s0;
      group.all_gather(own, w, block);
    } else {
      optimizer_exchange(group, b, x.count[g], x.norm_parts[g]);
    }
    const double wall = now_s() - t;
    float dt[2] = {float(wall - step_s), float(wall)};
    world_.all_reduce_max(dt, 2);
    (zero1 ? x.zero1_seconds : x.seconds)[g].push_back(double(dt[0]));
    return double(dt[1]);
  }

  // What lockstep() found, into `p`: p.lockstep (a core each, the last group's) or p.shared.
  void store_lockstep(DeviceProfile& p, int cores, bool shared,
                      const std::vector<std::pair<int, Communicator*>>& groups, const LockstepRounds& t, int tok) {
    const int n = world_.size();
    const double bytes = 4.0 * double(tok) * m_.hidden;  // a layer's activation, fp32
    // Each lockstep's difference to the free timing taken round by round (measured back to back),
    // then its median: a shared host's slow spells move both of a pair together. Its segments' time
    // over the same segments' on a core of their own (alone where the ranks share the cores, else free).
    const double own_core = median(shared ? t.alone : t.free);
    const double per_call = double(kSegments) * t.K;  // collectives per timing
    std::vector<LockstepTiming> timings;
    std::string each;
    for (size_t g = 0; g < groups.size(); ++g) {
      std::vector<double> diff;
      for (size_t i = 0; i < t.lockstep[g].size(); ++i) diff.push_back(t.lockstep[g][i] - t.free[i]);
      const double stretch = own_core > 0 ? std::max(1.0, median(t.busy[g]) / own_core) : 1.0;
      // With a core each, the time the rank computing longest spent in each all-reduce (the rank
      // whose terms capplan-train's step record takes); on shared cores, where a rank's time in a
      // collective is mostly the other ranks' turns on the cores, the lockstep's time over free.
      const double over_free = std::max(0.0, median(diff) / per_call);
      const double meeting = shared ? over_free : median(t.held[g]) / per_call;
      timings.push_back({groups[g].first, bytes, meeting, stretch, {}});
      const AfterCompute& x = t.gradient_exchange;
      if (!x.seconds[g].empty()) {
        timings.back().gradient_exchange_bytes = 4.0 * double(x.count[g]);
        timings.back().gradient_exchange_s = median(x.seconds[g]);
        if (!x.zero1_seconds[g].empty()) timings.back().zero1_exchange_s = median(x.zero1_seconds[g]);
      }
      each += (g ? ", " : "") + (groups.size() > 1 ? "in groups of " + std::to_string(groups[g].first) + " " : "") +
              ms(median(t.lockstep[g])) + " (compute x" + fmt_fixed(stretch, 2) + ")" +
              (shared ? std::string()
                      : ", the rank computing longest " + fmt_fixed(meeting * 1e3, 3) + " ms in each all-reduce (" +
                            fmt_fixed(over_free * 1e3, 3) + " ms a call over the free timing)") +
              (timings.back().gradient_exchange_bytes > 0
                   ? " and the gradient exchange of " + fmt_fixed(timings.back().gradient_exchange_bytes / 1048576.0, 0) +
                         " MiB right after compute " + ms(timings.back().gradient_exchange_s) +
                         (timings.back().zero1_exchange_s > 0
                              ? " (ZeRO-1's, its all-gather after AdamW over the shard, " +
                                    ms(timings.back().zero1_exchange_s) + ")"
                              : std::string())
                   : std::string());
    }
    const std::string how = std::to_string(n) + " ranks on " + std::to_string(cores) + " cores, " +
                            std::to_string(t.K) + " layers' forward and backward GEMMs and kernels each (" + std::to_string(tok) +
                            " tokens), median over " + std::to_string(t.rounds) + " rounds: " +
                            (shared ? "alone (a core each) " + ms(median(t.alone)) + ", with the others asleep " +
                                          ms(median(t.alone_quiet)) + ", "
                                    : std::string()) +
                            "free " +
                            ms(median(t.free)) + ", lockstep with an all-reduce after each half layer's forward and backward " + each;
    if (shared) {
      SharedCoresTiming sc;
      sc.ranks = n;
      std::vector<double> ratio;  // each round's quiet alone over its free timing
      for (size_t i = 0; i < t.alone_quiet.size() && i < t.free.size(); ++i) ratio.push_back(t.alone_quiet[i] / t.free[i]);
      sc.free_efficiency = std::clamp(double(n) / cores * median(ratio), 0.01, 1.0);
      sc.handoff_s = median(t.handoff);
      sc.handoff_lockstep_s = t.handoff_lockstep.empty() ? 0.0 : median(t.handoff_lockstep);
      sc.lockstep = timings;
      sc.how = how + ", a hand-off " + ms(median(t.handoff)) +
               (t.handoff_lockstep.empty() ? "" : " (beside pairs in lockstep " + ms(sc.handoff_lockstep_s) + ")");
      p.shared = {sc};
    } else {
      p.lockstep = timings.back();
      p.lockstep.group = 0;
      p.lockstep.how = how;
      if (!t.ring.empty()) {  // the ring's exchange in lockstep, as the all-reduce's
        p.lockstep.exchange_bytes = t.ring_bytes;
        p.lockstep.exchange_s = median(t.ring_held) / per_call;
        p.lockstep.how += ", with the context ring's exchange of " + fmt_fixed(t.ring_bytes / 1024, 0) +
                          " KB around each instead " + ms(median(t.ring)) + ", the rank computing longest " +
                          fmt_fixed(p.lockstep.exchange_s * 1e3, 3) + " ms in each exchange";
      }
      if (!t.sp.empty()) {  // sequence parallelism's pair in lockstep, as the all-reduce's
        p.lockstep.sp_bytes = t.sp_bytes;
        p.lockstep.sp_s = median(t.sp_held) / per_call;
        p.lockstep.how += ", with sequence parallelism's all-gather and reduce-scatter of " +
                          fmt_fixed(t.sp_bytes / 1024, 0) + " KB a rank around each instead " + ms(median(t.sp)) +
                          ", the rank computing longest " + fmt_fixed(p.lockstep.sp_s * 1e3, 3) + " ms in each pair";
      }
    }
  }

  // A pipeline's hand-off on shared cores: ranks 0 and 1 pass `act` back and forth as pipeline
  // stages do (a send waited for, then a receive, each in the runtime's nap where the ranks
  // outnumber the cores) for about `span` seconds, while the other ranks run `work`, which
  // outlasts it. Returns half the mean round trip (the same on every rank).
  double handoff(const std::function<void()>& work, float* act, int64_t count, double span) {
    const int r = world_.rank();
    world_.barrier();
    double each = 0;
    if (r >= 2) {
      work();
    } else if (world_.size() >= 2) {
      const double t0 = now_s();
      int trips = 0;
      for (;;) {  // rank 0 says in the message's first element whether another trip follows
        if (r == 0) act[0] = now_s() - t0 < span ? 1.0f : 0.0f;
        if (r == 1) world_.recv(act, count, 0, 11);
        if (r == 0) {
          world_.send_async(act, count, 1, 11);
          world_.wait_sends();
        }
        if (act[0] == 0.0f) break;
        if (r == 1) {
          world_.send_async(act, count, 0, 12);
          world_.wait_sends();
        }
        if (r == 0) world_.recv(act, count, 1, 12);
        ++trips;
      }
      each = trips > 0 ? (now_s() - t0) / (2.0 * trips) : 0.0;
    }
    float e = float(each);
    world_.all_reduce_max(&e, 1);
    return double(e);
  }

  // Each collective over a sweep of sizes on one buffer, warm in the caches as a tensor-parallel
  // activation or a pipeline's is; then all-reduce, reduce-scatter and all-gather again on copies
  // of the buffers that fill the last-level cache twice, one copy a call, as the data-parallel
  // gradients and weights are read from memory (a 4 MiB reduce-scatter of 2 ranks on a 2-core
  // AMD EPYC host: 0.54 ms warm, 1.05 ms cold).
  void collectives(DeviceProfile& p) {
    const int n = world_.size();
    if (n < 2) return;
    std::vector<double> norm_parts(static_cast<size_t>(n));
    for (int64_t count = 1024; count <= (int64_t(1) << 22); count *= 4) {
      const int64_t per = std::max<int64_t>(1, count / n) * n;  // divisible by the ranks
      float* a = buffer(per);
      float* b = buffer(per);
      collective(p, "all-reduce", n, per, false, [&] { world_.all_reduce_sum(a, per); });
      collective(p, "reduce-scatter", n, per, false, [&] { world_.reduce_scatter_sum(a, b, per / n); });
      // All-gather in place (this rank's block already in the output), as the data-parallel
      // gathers of gradients and weights call it. Out of place Open MPI's shared-memory all-gather
      // took 2.4x as long (16 MiB over 2 ranks from memory: 6.9 against 2.9 ms).
      const int64_t own = int64_t(world_.rank()) * (per / n);
      collective(p, "all-gather", n, per, false, [&] { world_.all_gather(b + own, b, per / n); });
      collective(p, "send-recv", 2, per, false, [&] {
        if (world_.rank() == 0) world_.send(a, per, 1, 7);
        if (world_.rank() == 1) world_.recv(b, per, 0, 7);
      });
      const int copies = cold_copies(2.0 * 4.0 * double(per));
      std::vector<float*> ca, cb;
      for (int c = 0; c < copies; ++c) {
        ca.push_back(buffer(per));
        cb.push_back(buffer(per));
      }
      size_t i = 0;
      auto next = [&] { return i = (i + 1) % size_t(copies); };
      // Every copy through the call once before it is timed: Open MPI's first call on a buffer
      // costs more than every later one (an in-place 4 MiB all-gather of 2 ranks on a 2-core AMD
      // EPYC host, tests/bench/bench_unit_collectives: 4.0-4.3 ms on a buffer's first use, 0.64 ms
      // on its second), and capplan-train calls its collectives on the same buffers every step.
      auto cold = [&](const char* op, const std::function<void()>& call) {
        for (int k = 0; k < copies; ++k) call();
        collective(p, op, n, per, true, call);
      };
      cold("all-reduce", [&] { world_.all_reduce_sum(ca[next()], per); });
      cold("reduce-scatter", [&] {
        const size_t c = next();
        world_.reduce_scatter_sum(ca[c], cb[c], per / n);
      });
      cold("all-gather", [&] {
        const size_t c = next();
        world_.all_gather(cb[c] + own, cb[c], per / n);
      });
      // The data-parallel exchange of ZeRO-0 and ZeRO-1 as Optimizer::step calls it, one call after
      // the other: the gradients reduce-scattered in place, the partial sums of the gradient norm
      // gathered (which waits for the slowest rank's reduce-scatter), then the all-gather in place.
      // Timed as one: 2 ranks on a 2-core AMD EPYC host, 16 MiB, 4.7 and 5.8 ms in two profiles
      // against 4.2 and 4.9-5.6 for the two collectives timed apart in the same profile, and
      // 6.6-8.6 ms in the runs that followed.
      cold("gradient-exchange", [&] { optimizer_exchange(world_, cb[next()], per, norm_parts); });
      // ZeRO-3's gather as Gpt::acquire_layer calls it: each rank's part read from its shard in
      // memory, out of place into the layer buffer, through MPI_Allgatherv. The layer buffer is
      // one buffer in the run, but the layer's compute runs between two gathers into it.
      const std::vector<int64_t> even(size_t(n), per / n);
      cold("all-gather-v", [&] {
        const size_t c = next();
        world_.all_gather_v(ca[c], cb[c], even);
      });
      bufs_.clear();
    }
  }

  // --shared-cores: the data-parallel gradient exchange as Optimizer::step calls it (an in-place
  // reduce-scatter, the gradient norm's gather, an in-place all-gather) in each of `groups`, every
  // group of the world at once, of 1, 4 and 16 MiB per rank on buffers from memory, into
  // `sc.exchange`: the slowest rank's time, the median of the repeats. Where the ranks outnumber the
  // cores the exchange is the ranks' own copies and sums on the shared cores, and how it grows
  // with the group is not the ring's bytes alone: a ring of n members passes chunks of 1/n of the
  // buffer through the caches, and each rank reads and writes its own buffer in memory once
  // whatever n is (on this 2-core AMD EPYC host dp 2, 4 and 8 exchanged 16.9 MB in 6.6, 14.2 and
  // 25.3 ms, 2.2 and 3.8 times dp 2's, where the core share alone gives 2 and 4 and the ring's bytes
  // times the core share 3 and 7).
  void shared_exchange(SharedCoresTiming& sc, const std::vector<std::pair<int, Communicator*>>& groups) {
    const int n = world_.size();
    for (const auto& [g_size, group] : groups) {
      const int size = g_size;
      std::vector<double> norm_parts(static_cast<size_t>(size));
      for (int64_t count = int64_t(1) << 18; count <= (int64_t(1) << 22); count *= 4) {
        const int64_t per = count / size * size;  // divisible by the group
        // The host's ranks share the cache.
        auto bufs = operand_copies(cold_copies(4.0 * double(per) * n), [&] { return buffer(per); });
        auto exchange = [&] { optimizer_exchange(*group, bufs.next(), per, norm_parts); };
        for (size_t c = 0; c < bufs.sets.size(); ++c) exchange();  // each copy's first call costs more
        sc.exchange.push_back({size, 4.0 * double(per), time(exchange)});
        bufs_.clear();
      }
    }
  }

  // --shared-cores: the optimizer step where the ranks outnumber the cores. capplan-train's ranks
  // of a data-parallel layout all leave the step's gradient exchange at about the same moment and
  // run AdamW over their weights at once, so their steps share the cores; how they share them
  // (side by side, each at c/n of a core, or in turns, each at a core's speed while the others
  // wait to run) is the scheduler's and the host's, so it is measured: every rank exchanges its
  // gradients among all of them (optimizer_exchange) and then steps AdamW over the model's weights
  // on one rank of --tp (as the planner counts them, profile_model; at most 16 MiB of them, the
  // largest buffer the exchange timings use, so that the ranks' memory stays what the launcher
  // allowed for: a larger model's step is timed at that size), from memory; against
  // the same step of the first `cores` ranks, a core each, while the others sleep. Each
  // repeat takes both, one after the other (a shared host's slow spells move the two together):
  // the ranks' mean time in their step (capplan-train's record takes one rank's terms, which rank
  // depends on its compute), and the working ranks' slowest alone; the medians over the repeats
  // after a warm-up, into sc.optimizer_s and sc.optimizer_alone_s, of sc.optimizer_bytes (seven
  // fp32 passes over each weight, as the "adamw" kernel counts them).
  void shared_optimizer(SharedCoresTiming& sc, int cores) {
    const int n = world_.size();
    double weights = 0;
    for (const LayerProfile& row : profile_model(m_, o_.tp, seq(), o_.mbs, Precision::Fp32).rows()) weights += row.params;
    const int64_t per = std::max<int64_t>(1, std::min<int64_t>(int64_t(weights), int64_t(1) << 22) / n) * n;
    float* w = buffer(per);
    float* g = buffer(per);
    float* m1 = buffer(per);
    float* m2 = buffer(per);
    for (int64_t i = 0; i < per; ++i) m2[i] = std::abs(m2[i]);
    std::vector<double> norm_parts(static_cast<size_t>(n)), shared, alone;
    AdamWStep st;
    auto step = [&] { be_.adamw(w, g, m1, m2, per, st); };
    double last_alone = 0;
    for (int r = 0; r <= o_.repeats; ++r) {
      const double a = last_alone = run_alone_quiet(std::min(cores, n), 1.25 * last_alone, step);
      world_.barrier();
      optimizer_exchange(world_, g, per, norm_parts);
      const double t = now_s();
      step();
      double mean = now_s() - t;
      world_.all_reduce_sum(&mean, 1);
      if (r == 0) continue;  // the warm-up: the buffers' first touch
      alone.push_back(a);
      shared.push_back(mean / n);
    }
    sc.optimizer_bytes = 4.0 * 7 * double(per);
    sc.optimizer_s = median(shared);
    sc.optimizer_alone_s = median(alone);
    sc.how += ", the optimizer step over " + fmt_fixed(sc.optimizer_bytes / 7 / 1048576.0, 1) +
              " MiB of weights right after the gradient exchange among all " + ms(sc.optimizer_s) +
              " (the ranks' mean) against " + ms(sc.optimizer_alone_s) + " with a core each";
    bufs_.clear();
  }

 private:
  // The data-parallel exchange of ZeRO-0 and ZeRO-1 as Optimizer::step makes it, on `count`
  // floats at `g` among `group`'s ranks: the gradients reduce-scattered in place, the partial sums
  // of the gradient norm gathered (`norm_parts`, one per rank; it waits for the slowest rank's
  // reduce-scatter), then the all-gather in place.
  static void optimizer_exchange(Communicator& group, float* g, int64_t count, std::vector<double>& norm_parts) {
    const int64_t block = reduce_for_norm(group, g, count, norm_parts);
    group.all_gather(g + group.rank() * block, g, block);
  }
  // Its first half: the reduce-scatter and the norm's gather. Returns the rank's block.
  static int64_t reduce_for_norm(Communicator& group, float* g, int64_t count, std::vector<double>& norm_parts) {
    const int64_t block = count / group.size();
    group.reduce_scatter_sum(g, g, block);
    const double partial = 0;
    group.all_gather(&partial, norm_parts.data(), 1);
    return block;
  }

  int seq() const { return o_.seq > 0 ? o_.seq : m_.seq_len; }

  NormKind norm_kind() const { return m_.norm == Norm::RmsNorm ? NormKind::RmsNorm : NormKind::LayerNorm; }
  // The attention of one tensor-parallel rank of --tp over a micro-batch of --mbs sequences of T
  // tokens.
  AttentionShape attention_shape(int T) const {
    AttentionShape s;
    s.B = o_.mbs;
    s.T = T;
    s.Hl = m_.heads / o_.tp;
    s.KVl = std::max(1, m_.kv_heads_or_default() / o_.tp);
    s.D = m_.head_dim_or_default();
    return s;
  }

  // The linear layers of a layer on one of tp ranks (Q, K, V; attention output; the first and
  // second FFN GEMMs), then the LM head's: Y[tokens, out] = X[tokens, in] W[in, out].
  std::vector<Linear> linears() const {
    const int h = m_.hidden, tp = o_.tp;
    const int kv = m_.kv_heads_or_default() * m_.head_dim_or_default();
    const int q = m_.attention_width();
    const int qkv = (q + 2 * kv) / tp, fc = (m_.ffn == Ffn::Swiglu ? 2 : 1) * m_.ffn_hidden_or_default() / tp;
    const int f = m_.ffn_hidden_or_default() / tp, vocab = (m_.vocab + tp - 1) / tp;
    return {{"qkv", h, qkv}, {"attention out", q / tp, h}, {"fc1", h, fc}, {"fc2", f, h}, {"lm head", h, vocab}};
  }

  // Copies of a kernel's operands (`set_bytes` each) that fill the last-level cache twice, so that
  // a call taking the next copy finds its operands in memory; 1 to 64.
  int cold_copies(double set_bytes) const {
    return cold_operand_copies(std::numeric_limits<double>::infinity(), set_bytes, double(llc_bytes_));
  }

  void add(DeviceProfile& p, const std::string& name, int64_t M, int64_t N, int64_t K, const std::function<void()>& fn) {
    GemmTiming g;
    g.name = name;
    g.m = M;
    g.n = N;
    g.k = K;
    g.seconds = time(fn);
    p.gemms.push_back(g);
  }
  void kernel(DeviceProfile& p, const std::string& name, double bytes, const std::function<void()>& fn) {
    KernelTiming k;
    k.name = name;
    k.bytes = bytes;
    k.seconds = time(fn);
    p.kernels.push_back(k);
  }
  void collective(DeviceProfile& p, const std::string& op, int ranks, int64_t count, bool cold,
                  const std::function<void()>& fn) {
    CollectiveTiming c;
    c.op = op;
    c.ranks = ranks;
    c.bytes = 4.0 * double(count);
    c.cold = cold;
    c.seconds = time(fn);
    p.collectives.push_back(c);
  }

  const MeasureOptions& o_;
  const ModelSpec& m_;
  Communicator& world_;
  Backend& be_;
  std::vector<std::vector<float>> bufs_;
  const int64_t llc_bytes_ = last_level_cache_bytes();  // read once, not per GEMM shape and round
};

// Each timing of `p` = the median of that timing over the rounds (every round measures the same
// list in the same order).
void take_round_medians(const std::vector<DeviceProfile>& rounds, DeviceProfile& p) {
  p.gemms = rounds.front().gemms;
  p.kernels = rounds.front().kernels;
  p.collectives = rounds.front().collectives;
  auto over_rounds = [&](auto get) {
    std::vector<double> v;
    for (const DeviceProfile& r : rounds) v.push_back(get(r));
    return median(std::move(v));
  };
  for (size_t i = 0; i < p.gemms.size(); ++i)
    p.gemms[i].seconds = over_rounds([&](const DeviceProfile& r) { return r.gemms[i].seconds; });
  for (size_t i = 0; i < p.kernels.size(); ++i)
    p.kernels[i].seconds = over_rounds([&](const DeviceProfile& r) { return r.kernels[i].seconds; });
  for (size_t i = 0; i < p.collectives.size(); ++i)
    p.collectives[i].seconds = over_rounds([&](const DeviceProfile& r) { return r.collectives[i].seconds; });
  // How far the rounds moved: the relative standard deviation of each round's summed times.
  if (rounds.size() < 2) return;
  auto spread = [&](auto total) {
    std::vector<double> v;
    for (const DeviceProfile& r : rounds) v.push_back(total(r));
    return relative_sd(v);
  };
  auto sum = [](const auto& timings) {
    double t = 0;
    for (const auto& x : timings) t += x.seconds;
    return t;
  };
  p.spread.rounds = int(rounds.size());
  p.spread.gemms = spread([&](const DeviceProfile& r) { return sum(r.gemms); });
  p.spread.kernels = spread([&](const DeviceProfile& r) { return sum(r.kernels); });
  p.spread.collectives = spread([&](const DeviceProfile& r) { return sum(r.collectives); });
}

// --shared-cores: adds the shared-core efficiencies to the profile o.out, measured on this
// host's `cores` by the world's ranks; the profile must be of this model shape. Every rank
// measures; rank 0 reads and writes the file (atomically). Returns the exit status.
int amend_shared_cores(const MeasureOptions& o, const ModelSpec& model, Measurer& meas, bool writer, int cores,
                       const std::vector<std::pair<int, Communicator*>>& groups) {
  // Every rank reads the profile and checks it before measuring, so that all give up together.
  Loaded<DeviceProfile> loaded = load_device_profile(o.out);
  const int seq = o.seq > 0 ? o.seq : model.seq_len;
  if (!loaded.ok() || loaded.value->hidden != model.hidden || loaded.value->mbs != o.mbs ||
      loaded.value->seq != seq || loaded.value->tp != o.tp) {
    if (writer && !loaded.ok()) std::fprintf(stderr, "%s", loaded.diagnostics.to_string().c_str());
    if (writer && loaded.ok())
      std::fprintf(stderr, "%s: error: %s: a profile of another shape (hidden %d, mbs %d, seq %d, tp %d)\n", kCmd,
                   o.out.c_str(), loaded.value->hidden, loaded.value->mbs, loaded.value->seq, loaded.value->tp);
    return 2;
  }
  DeviceProfile p;
  meas.lockstep(p, cores, true, groups);
  meas.shared_exchange(p.shared[0], groups);
  meas.shared_optimizer(p.shared[0], cores);
  if (!writer) return 0;
  DeviceProfile out = *loaded.value;
  // Replaces a measurement with as many ranks, keeps the others.
  std::erase_if(out.shared, [&](const SharedCoresTiming& s) { return s.ranks == p.shared[0].ranks; });
  out.shared.push_back(p.shared[0]);
  std::sort(out.shared.begin(), out.shared.end(),
            [](const SharedCoresTiming& x, const SharedCoresTiming& y) { return x.ranks < y.ranks; });
  const std::string error = write_file_atomic(o.out, device_profile_yaml(out));
  if (!error.empty()) {
    std::fprintf(stderr, "%s: error: %s: %s\n", kCmd, o.out.c_str(), error.c_str());
    return 1;
  }
  std::printf("shared cores: %d ranks on %d cores measured, added to %s\n", p.shared[0].ranks, cores, o.out.c_str());
  return 0;
}

// The largest resident set of any rank so far (getrusage: ru_maxrss, KiB on Linux).
double peak_resident_bytes(Communicator& world) {
  rusage u{};
  ::getrusage(RUSAGE_SELF, &u);
  float mib = float(double(u.ru_maxrss) / 1024.0);
  world.all_reduce_max(&mib, 1);
  return double(mib) * 1024.0 * 1024.0;
}

}  // namespace

// The lockstep timing prices the tensor-parallel all-reduce and the context ring, whose time
// follows the cores' cache-line latency (CoreLatencyProbe): where it moved more than twofold
// between the samples right before and right after the timing, the host moved the cores during
// it and the timing mixes two speeds that no run has, so it is taken again, once (each timing
// takes about 7 s of the profile's 40, and at times the host moves every few seconds). Rank
// 0's samples decide for every rank. Adds the samples before and after each timing to
// `latency_ns`; returns the last timing's two.
std::pair<double, double> lockstep_in_one_placement(Measurer& meas, DeviceProfile& p, int cores,
                                                    CoreLatencyProbe& probe, Communicator& world,
                                                    std::vector<double>& latency_ns) {
  constexpr int kTimings = 2;
  double before = probe.measure_ns(), after = before;
  latency_ns.push_back(before);
  for (int timing = 1; timing <= kTimings; ++timing, before = after) {
    meas.lockstep(p, cores, false, {{world.size(), &world}});
    after = probe.measure_ns();
    latency_ns.push_back(after);
    float moved = core_latency_moved(before, after);
    world.broadcast(&moved, 1, 0);
    if (timing > 1) p.lockstep.how += "; timing " + std::to_string(timing) + " of the lockstep, the cores' latency "
                                      "having moved during the one before";
    if (moved == 0 || timing == kTimings) break;
    if (world.rank() == 0)
      std::printf("the cores' cache-line latency moved from %.0f to %.0f ns during the lockstep timing: timing it again\n",
                  before, after);
  }
  return {before, after};
}

int cold_operand_copies(double pass_bytes, double operand_bytes, double llc_bytes) {
  const double bytes = std::max(1.0, operand_bytes);
  const double copies = std::min(std::ceil(pass_bytes / bytes), std::ceil(2.0 * llc_bytes / bytes));
  return std::clamp(std::isfinite(copies) ? int(std::min(copies, 64.0)) : 1, 1, 64);
}

int measure_main(int argc, char** argv) {
  // The rounds allocate the same operand buffers again and again (up to twice the last-level
  // cache per shape, hundreds of MB a round): glibc keeps freed memory for the next allocation
  // instead of returning each large block to the kernel (mallopt: blocks up to 32 MiB, the largest
  // mmap threshold glibc documents for 64-bit, come from the heap, and the heap is not trimmed), so
  // that only the first round pays for the pages' first touch. On this 2-core KVM host 20 rounds
  // of four 16 MiB buffers took 3.9 s with glibc's defaults and 0.2 s so.
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
  MeasureOptions o;
  const int parsed = parse_options(argc, argv, o);
  if (parsed != 0) return parsed < 0 ? 0 : parsed;
  Loaded<ModelSpec> m = load_model(o.model);
  if (!m.ok()) {
    std::fprintf(stderr, "%s", m.diagnostics.to_string().c_str());
    return 2;
  }
  const ModelSpec& model = *m.value;
  if (model.heads % o.tp != 0 || model.hidden % o.tp != 0 || model.ffn_hidden_or_default() % o.tp != 0) {
    std::fprintf(stderr, "%s: error: --tp: %d must divide the heads (%d), hidden (%d) and FFN width (%d) of %s\n",
                 kCmd, o.tp, model.heads, model.hidden, model.ffn_hidden_or_default(), model.name.c_str());
    return 2;
  }
  MPI_Init(&argc, &argv);
  int status = 0;
  {
    Layout world_layout;
    int size = 1;
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    world_layout.dp = size;
    ProcessGroups groups = make_process_groups(world_layout);
    const int cores = std::max(1, int(::sysconf(_SC_NPROCESSORS_ONLN)));
    const int threads = o.threads > 0 ? o.threads : cpu_rank_threads(cores, groups.local_size);
    std::unique_ptr<Backend> be = make_cpu_backend(threads);
    DeviceProfile p;
    p.device = "cpu: " + cpu_model() + ", " + std::to_string(cores) + " cores";
    p.gpu = "cpu-rank";
    p.backend = be->name();
    p.created_utc = utc_now();
    p.ranks = size;
    p.cores = cores;
    p.threads = threads;
    p.how = "capplan-train measure: " + std::to_string(size) + " ranks measuring at once, " +
            std::to_string(threads) + " backend threads each; median over " + std::to_string(o.rounds) +
            " rounds of the median of " + std::to_string(o.repeats) +
            " repeats of the slowest rank, after one warm-up; GEMMs called as the runtime calls them (the LM head in its chunks of rows), their operands cold after a pass over the model but the one just written, the layer kernels' cold; fp32";
    p.model = model.name;
    p.hidden = model.hidden;
    p.heads = model.heads;
    p.head_dim = model.head_dim_or_default();
    p.ffn_hidden = model.ffn_hidden_or_default();
    p.vocab = model.vocab;
    p.seq = o.seq > 0 ? o.seq : model.seq_len;
    p.mbs = o.mbs;
    p.tp = o.tp;
    Measurer meas(o, model, *groups.world, *be);
    if (o.shared_cores) {
      // Lockstep groups of 2, 4, ... consecutive ranks up to the world, as a layout's tensor-
      // parallel groups are (tp innermost).
      std::vector<ProcessGroups> split;
      std::vector<std::pair<int, Communicator*>> lockstep_groups;
      for (int g = 2; g < size; g *= 2)
        if (size % g == 0) {
          Layout grouped;
          grouped.dp = size / g;
          grouped.tp = g;
          split.push_back(make_process_groups(grouped));
          lockstep_groups.emplace_back(g, split.back().tp.get());
        }
      lockstep_groups.emplace_back(size, groups.world.get());
      status = amend_shared_cores(o, model, meas, groups.world->rank() == 0, cores, lockstep_groups);
    } else {
      // The cores' cache-line latency before each round and around the lockstep timing.
      CoreLatencyProbe probe;
      std::vector<double> latency_ns;
      std::vector<DeviceProfile> rounds(size_t(o.rounds));
      for (DeviceProfile& r : rounds) {
        latency_ns.push_back(probe.measure_ns());
        meas.gemms(r);
        meas.kernels(r);
        meas.collectives(r);
      }
      take_round_medians(rounds, p);
      fit_device_profile(p);
      // (One rank has no other to time it against: no samples.)
      std::pair<double, double> around_lockstep{0, 0};
      if (size > 1) around_lockstep = lockstep_in_one_placement(meas, p, cores, probe, *groups.world, latency_ns);
      p.core_latency = summarize_core_latency(latency_ns);
      if (p.core_latency.samples > 0)
        std::tie(p.core_latency.lockstep_before_ns, p.core_latency.lockstep_after_ns) = around_lockstep;
      p.peak_rank_bytes = peak_resident_bytes(*groups.world);
      if (groups.world->rank() == 0) {
        const std::string error = write_file_atomic(o.out, device_profile_yaml(p));
        if (!error.empty()) {
          std::fprintf(stderr, "%s: error: %s: %s\n", kCmd, o.out.c_str(), error.c_str());
          status = 1;
        } else {
          std::printf("device profile: %s (%zu GEMMs, %zu kernels, %zu collective timings; GEMM %.1f GFLOP/s "
                      "per rank + %.1f us, memory %.1f GB/s per rank; a rank's peak resident set %.0f MiB)\n",
                      o.out.c_str(), p.gemms.size(), p.kernels.size(), p.collectives.size(), p.gemm_peak_gflops,
                      p.gemm_overhead_us, p.memory_gbyte_per_s, p.peak_rank_bytes / (1024.0 * 1024.0));
          if (p.core_latency.samples > 0)
            std::printf("cores' cache-line latency, one way between the first two ranks: %.0f ns (median of %d samples, "
                        "%.0f-%.0f; %.0f before and %.0f after the lockstep timing)\n",
                        p.core_latency.median_ns, p.core_latency.samples, p.core_latency.min_ns, p.core_latency.max_ns,
                        p.core_latency.lockstep_before_ns, p.core_latency.lockstep_after_ns);
        }
      }
    }
  }
  MPI_Finalize();
  return status;
}

}  // namespace capplan::rt
