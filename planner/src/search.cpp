// Exhaustive layout search. Work is split into units of (node count, tp, pp); inside a unit the
// compute terms per (mbs, sp, recompute) and the placements per order are computed once, and the
// inner loop over schedule, vp, zero, offload and order evaluates the cost model without
// allocating. Workers keep small candidate lists that are merged and sorted by (score, stable key),
// so the ranking does not depend on thread timing. The winners are re-estimated through estimate().
#include "planner/search.h"

#include "planner/catalog.h"
#include "planner/spec_io.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cmath>
#include <mutex>
#include <thread>
#include <vector>

#include "cost_model_detail.h"
#include "planner/profile.h"

namespace capplan {

const char* to_string(Objective v) {
  switch (v) {
    case Objective::Time: return "time";
    case Objective::Cost: return "cost";
    case Objective::Throughput: return "throughput";
  }
  return "time";
}

std::optional<Objective> parse_objective(const std::string& s) {
  if (s == "time") return Objective::Time;
  if (s == "cost") return Objective::Cost;
  if (s == "throughput") return Objective::Throughput;
  return std::nullopt;
}

namespace {

constexpr const char* kOrders[6] = {"DPT", "PDT", "DTP", "TDP", "PTD", "TPD"};
constexpr int kMaxMbs = 16;  // micro-batches beyond 16 sequences gain nothing on GEMM efficiency
constexpr int kMaxVp = 8;

struct Unit {
  int nodes = 0;
  int gpus = 0;
  int tp = 1;
  int pp = 1;
  int cp = 1;
};

// One evaluated layout, compact and allocation-free.
struct Cand {
  double score = 0;
  uint64_t key = 0;  // stable tie-break: knobs packed, smaller first
  bool fits = false;
  int nodes = 0, gpus = 0;
  int dp = 1, tp = 1, pp = 1, vp = 1, mbs = 1, zero = 0;
  Recompute recompute = Recompute::None;
  bool offload = false, sp = false;
  int order = 0;
  Schedule schedule = Schedule::OneFOneB;
  int cp = 1, ep = 1;
  double days = 0, cost = 0;
};

// What `objective` minimises, from a layout's days to train, its cost (dollars, or GPU-days where
// the cluster has no price), step time and GPUs: the one definition the search's inner loop (on
// its lightweight candidates) and objective_score (on estimates) both use.
inline double score_of(Objective objective, double days, double cost, double step_s, int gpus) {
  switch (objective) {
    case Objective::Cost: return cost;
    case Objective::Throughput: return step_s * gpus;
    case Objective::Time: break;
  }
  return days;
}

bool better(const Cand& a, const Cand& b) {
  if (a.fits != b.fits) return a.fits;
  if (a.score != b.score) return a.score < b.score;
  if (a.key != b.key) return a.key < b.key;
  return a.cp != b.cp ? a.cp < b.cp : a.ep < b.ep;
}

// Among equal scores the simpler layout first: no offload, lower ZeRO stage, less recompute,
// 1F1B before interleaved before GPipe, then the degrees and the order.
uint64_t pack_key(const Cand& c) {
  static constexpr int kScheduleRank[3] = {2, 0, 1};  // GPipe, 1F1B, Interleaved
  uint64_t k = uint64_t(c.offload);
  k = k * 4 + uint64_t(c.zero);
  k = k * 3 + uint64_t(c.recompute);
  k = k * 3 + uint64_t(kScheduleRank[int(c.schedule)]);
  k = k * 2 + uint64_t(c.sp);
  k = k * 16384 + uint64_t(c.nodes);
  k = k * 4096 + uint64_t(c.tp);
  k = k * 1024 + uint64_t(c.pp);
  k = k * 16 + uint64_t(c.vp);
  k = k * 128 + uint64_t(c.mbs);
  k = k * 6 + uint64_t(c.order);
  return k;
}

// Keeps the best `top` candidates; amortised O(1) insert.
class TopK {
 public:
  explicit TopK(size_t k) : k_(std::max<size_t>(k, 1)) { items_.reserve(4 * k_); }
  void add(const Cand& c) {
    if (items_.size() >= k_ && full_sorted_ && !better(c, items_[k_ - 1])) return;
    items_.push_back(c);
    if (items_.size() >= 4 * k_) trim();
  }
  void trim() {
    std::sort(items_.begin(), items_.end(), better);
    if (items_.size() > k_) items_.resize(k_);
    full_sorted_ = items_.size() >= k_;
  }
  std::vector<Cand>& items() { return items_; }

 private:
  size_t k_;
  bool full_sorted_ = false;
  std::vector<Cand> items_;
};

// The order's D, P and T, without the C and E letters ("PDECT" -> "PDT").
std::string dense_letters(const std::string& order) {
  std::string r;
  for (char ch : order)
    if (ch == 'D' || ch == 'P' || ch == 'T') r.push_back(ch);
  return r;
}

std::string reduced_order(const char* order, int dp, int tp, int pp) {
  std::string r;
  for (int i = 0; i < 3; ++i) {
    const char ch = order[i];
    const int deg = ch == 'D' ? dp : ch == 'P' ? pp : tp;
    if (deg > 1) r.push_back(ch);
  }
  return r;
}

// The memory safety margin: at most (1 - margin) of the capacity in use. 0 capacity = unknown.
bool within_margin(double total_bytes, double capacity_bytes, double margin) {
  return !(capacity_bytes > 0) || total_bytes <= (1.0 - std::clamp(margin, 0.0, 0.99)) * capacity_bytes;
}

// The splits the search takes (work_units), and the reasons pins_unsatisfiable gives, agree on:
// tp divides the heads, the kv_heads and the FFN width (each rank holds whole heads and an equal
// slice of the FFN); cp > 1 cuts the sequence into 2 cp chunks (load-balanced causal attention),
// and unpinned keeps at least kMinCpTokens per rank.
bool tp_splits_model(const ModelSpec& m, int64_t tp) {
  return m.heads % tp == 0 && m.kv_heads_or_default() % tp == 0 && m.ffn_hidden_or_default() % tp == 0;
}
bool cp_splits_sequence(int seq, int cp) { return cp == 1 || seq % (2 * cp) == 0; }
bool cp_searched_unpinned(int seq, int cp) {
  return cp_splits_sequence(seq, cp) && (cp == 1 || seq / cp >= kMinCpTokens);
}

std::vector<int> divisors(int64_t n, int64_t cap) {
  std::vector<int> out;
  for (int64_t d = 1; d <= n && d <= cap; ++d)
    if (n % d == 0) out.push_back(int(d));
  return out;
}

// The MoE / cp layouts of one unit: the slice once, the links once per (ep, order), the slice's
// terms once per (mbs, sp, recompute), and the MoE and cp terms added to them once per (mbs, sp,
// recompute, ep, order), so that the schedule, vp, zero and offload loops inside reuse them.
struct MoeCpUnit {
  Scenario slice;
  detail::MicroTerms base;
  std::vector<detail::MoeCpPlacement> places;
  std::vector<detail::MoeCpLayerTerms> terms;
  std::vector<char> place_done, terms_done;

  void start(const Scenario& sc, const Layout& ly, size_t ep_orders) {
    slice = detail::moe_cp_slice(sc, ly);
    places.resize(ep_orders);
    place_done.assign(ep_orders, 0);
    terms.resize(ep_orders);
  }
  // A new (mbs, sp, recompute): the slice's terms, and every (ep, order)'s MoE terms to redo.
  void new_terms(const detail::Constants& c, const Layout& ly) {
    base = detail::moe_cp_base_terms(slice, c, ly);
    terms_done.assign(terms.size(), 0);
  }
  // The layout of (ep, order) index pi.
  void evaluate(const Scenario& sc, const detail::Constants& c, const Layout& ly, size_t pi, detail::Evaluation& ev) {
    if (!place_done[pi]) {
      places[pi] = detail::moe_cp_placement(sc, c, ly);
      place_done[pi] = 1;
    }
    if (!terms_done[pi]) {
      terms[pi] = detail::moe_cp_layer_terms(sc, c, ly, places[pi], base);
      terms_done[pi] = 1;
    }
    detail::evaluate_moe_cp(sc, slice, c, ly, places[pi], terms[pi], ev, nullptr);
  }
};

struct Worker {
  const Scenario* base = nullptr;
  const SearchOptions* opt = nullptr;
  detail::Constants c;
  double tokens = 0;
  TopK top;
  std::vector<Cand> best_per_nodes;  // index: nodes - nodes_min
  int64_t evaluated = 0;

  Worker(size_t k, size_t node_counts) : top(k), best_per_nodes(node_counts) {
    for (Cand& b : best_per_nodes) b.score = HUGE_VAL;
  }

  // Distinct placements for this unit's (dp, tp, pp): one per order that gives a different
  // rank mapping; their order ids into kOrders. Returns how many.
  int distinct_placements(const Unit& u, const Scenario& sc, int dp, detail::Placement* places, int* order_ids) const {
    const LayoutPins& pin = opt->pins;
    int n_orders = 0;
    std::string seen[6];
    for (int i = 0; i < 6; ++i) {
      if (pin.order && dense_letters(*pin.order) != kOrders[i]) continue;
      const std::string r = reduced_order(kOrders[i], dp, u.tp, u.pp);
      bool dup = false;
      for (int j = 0; j < n_orders; ++j) dup = dup || seen[j] == r;
      if (dup) continue;
      seen[n_orders] = r;
      places[n_orders] = detail::placement(c, sc.cluster.gpus_per_node, u.gpus, dp, u.tp, u.pp, kOrders[i]);
      order_ids[n_orders] = i;
      ++n_orders;
    }
    return n_orders;
  }

  // One evaluated layout: its days, dollars and score against the limits, into the top k and the
  // best of its node count.
  // days_per_step_s: days to train per second of step time (tokens / tokens per step / 86400).
  void offer(const Unit& u, const Layout& ly, int order_id, double step_s, bool mem_ok, double days_per_step_s,
             double price) {
    const SearchOptions& o = *opt;
    Cand cd;
    cd.nodes = u.nodes;
    cd.gpus = u.gpus;
    cd.dp = ly.dp;
    cd.tp = u.tp;
    cd.pp = u.pp;
    cd.vp = ly.vp;
    cd.mbs = ly.mbs;
    cd.zero = ly.zero;
    cd.recompute = ly.recompute;
    cd.offload = ly.offload;
    cd.sp = ly.sp;
    cd.order = order_id;
    cd.schedule = ly.schedule;
    cd.cp = u.cp;
    cd.ep = ly.ep;
    cd.days = step_s * days_per_step_s;
    cd.cost = price > 0 ? u.nodes * price * cd.days * 24.0 : u.gpus * cd.days;
    cd.fits = mem_ok && (o.deadline_days <= 0 || cd.days <= o.deadline_days) &&
              (o.budget_usd <= 0 || price <= 0 || cd.cost <= o.budget_usd);
    if (!cd.fits && !o.include_infeasible) return;
    cd.score = score_of(o.objective, cd.days, cd.cost, step_s, u.gpus);
    cd.key = pack_key(cd);
    top.add(cd);
    if (cd.fits) {
      Cand& b = best_per_nodes[u.nodes - o.nodes_min];
      if (b.score == HUGE_VAL || better(cd, b)) b = cd;
    }
  }

  void run_unit(const Unit& u) {
    const Scenario& sc0 = *base;
    const SearchOptions& o = *opt;
    const LayoutPins& pin = o.pins;
    Scenario sc = sc0;  // one copy per unit; the inner loop does not copy
    sc.nodes = u.nodes;
    sc.gpus = u.gpus;
    const int dp = u.gpus / (u.tp * u.pp * u.cp);
    const int64_t gbs = sc.training.gbs;
    if (gbs % dp != 0) return;
    if (pin.dp && *pin.dp != dp) return;
    const double days_per_step_s = tokens / (double(gbs) * sc.seq_len()) / 86400.0;
    const double price = sc.cluster.price_per_node_hour_usd;

    detail::Placement places[6];
    int order_ids[6];
    const int n_orders = distinct_placements(u, sc, dp, places, order_ids);

    Layout ly;
    ly.dp = dp;
    ly.tp = u.tp;
    ly.pp = u.pp;
    ly.cp = u.cp;
    // Expert-parallel degrees: divisors of the experts inside dp * cp (1 for a dense model).
    std::vector<int> eps;
    if (sc.model.moe.enabled()) {
      for (int e : divisors(sc.model.moe.experts, int64_t(dp) * u.cp))
        if ((int64_t(dp) * u.cp) % e == 0 && (!pin.ep || *pin.ep == e) &&
            (e == 1 || sc.training.framework.expert_parallel))
          eps.push_back(e);
      if (sc.model.expert_ffn_hidden_or_default() % u.tp != 0) eps.clear();
    } else if (!pin.ep || *pin.ep == 1) {
      eps.push_back(1);
    }
    detail::Evaluation ev;
    const bool unit_moe_cp = sc.model.moe.enabled() || u.cp > 1;
    MoeCpUnit moe;
    if (unit_moe_cp) moe.start(sc, ly, eps.size() * size_t(n_orders));
    const int max_zero = dp == 1 ? 0 : (u.pp > 1 ? 1 : 3);
    for (int mbs : divisors(gbs / dp, kMaxMbs)) {
      if (pin.mbs && *pin.mbs != mbs) continue;
      const int64_t m = gbs / (int64_t(dp) * mbs);
      ly.mbs = mbs;
      const FrameworkSpec& fw = sc.training.framework;
      for (int spi = 0; spi < (u.tp > 1 && fw.sequence_parallel ? 2 : 1); ++spi) {
        if (pin.sp && *pin.sp != bool(spi)) continue;
        ly.sp = spi != 0;
        for (int rci = 0; rci < 3; ++rci) {
          const Recompute rc = Recompute(rci);
          if (pin.recompute && *pin.recompute != rc) continue;
          if (rc == Recompute::Selective && !fw.selective_recompute) continue;
          ly.recompute = rc;
          const detail::MicroTerms mt = unit_moe_cp ? detail::MicroTerms{} : detail::micro_terms(sc, c, u.tp, mbs, ly.sp, rc);
          // A CPU rank's batch split, ZeRO 0 and 1 only (detail::cpu_batch_split).
          ly.zero = 0;
          const bool split = !unit_moe_cp && c.profile && detail::cpu_batch_split(sc, *c.profile, ly) > 1;
          const detail::MicroTerms mt_split = split ? detail::with_batch_split(sc, c, ly, mt) : detail::MicroTerms{};
          if (unit_moe_cp) moe.new_terms(c, ly);
          // The tensor-parallel collectives' times of each placement, for every layout below.
          detail::TpCollectiveTimes tpt[6];
          if (!unit_moe_cp)
            for (int oi = 0; oi < n_orders; ++oi) tpt[oi] = detail::tp_collective_times(sc, c, ly, mt, places[oi]);
          for (int si = 0; si < 3; ++si) {
            const Schedule sch = Schedule(si);
            if (pin.schedule && *pin.schedule != sch) continue;
            int vp_lo = 1, vp_hi = 1;
            if (sch == Schedule::Interleaved) {
              if (u.pp < 2 || m % u.pp != 0) continue;
              vp_lo = 2;
              vp_hi = std::min(kMaxVp, sc.model.layers / u.pp);
            } else if (sch == Schedule::GPipe && u.pp < 2) {
              continue;  // without a pipeline GPipe and 1F1B are the same layout
            }
            if (u.pp > 1 && !fw.has_schedule(sch)) continue;
            for (int vp = vp_lo; vp <= vp_hi; ++vp) {
              if (pin.vp && *pin.vp != vp) continue;
              if (vp > 1 && sc.model.layers % (u.pp * vp) != 0) continue;  // equal chunks only
              ly.schedule = sch;
              ly.vp = vp;
              for (int z = 0; z <= max_zero; ++z) {
                if (pin.zero && *pin.zero != z) continue;
                if (!fw.has_zero(z)) continue;
                ly.zero = z;
                for (int off = 0; off < 2; ++off) {
                  if (pin.offload && *pin.offload != bool(off)) continue;
                  if (off && !fw.activation_offload) continue;
                  ly.offload = off != 0;
                  for (size_t ei = 0; ei < eps.size(); ++ei) {
                  const int ep = eps[ei];
                  ly.ep = ep;
                  const bool moe_cp = detail::needs_moe_cp(sc, ly);
                  for (int oi = 0; oi < n_orders; ++oi) {
                    if (moe_cp) {  // experts or context parallelism: cost_model_moe.cpp
                      ly.order = pin.order ? *pin.order : kOrders[order_ids[oi]];
                      const size_t pi = ei * size_t(n_orders) + size_t(oi);
                      moe.evaluate(sc, c, ly, pi, ev);
                    } else {
                      detail::evaluate(sc, c, ly, m, split && z <= 1 ? mt_split : mt, places[oi], ev, nullptr, &tpt[oi]);
                    }
                    ++evaluated;
                    const bool mem_ok = ev.fits && within_margin(ev.mem.total, ev.mem.capacity, o.memory_margin);
                    if (!mem_ok && !o.include_infeasible) break;  // memory does not depend on order
                    offer(u, ly, order_ids[oi], ev.step_s, mem_ok, days_per_step_s, price);
                  }
                  }
                }
              }
            }
          }
        }
      }
    }
  }
};

// As good as the best within the model's error: a candidate's band overlaps the best one's (step
// time for the time and throughput objectives, dollars for cost), and it fits where the best does
// (a layout that does not fit is no alternative to one that does).
bool as_good_as(const Estimate& e, const Estimate& best, Objective objective) {
  return (e.fits || !best.fits) && (objective == Objective::Cost && std::isfinite(best.cost_usd_p90)
                                        ? e.cost_usd_p10 <= best.cost_usd_p90
                                        : e.step_time_s_p10 <= best.step_time_s_p90);
}

// Marks each of `ranked` (best first) as_good_as its first.
void mark_as_good_as_best(std::vector<Estimate>& ranked, Objective objective) {
  if (ranked.empty()) return;
  const Estimate best = ranked.front();
  for (Estimate& e : ranked) e.as_good_as_best = as_good_as(e, best, objective);
}

Estimate materialize(const Scenario& base, const Cand& cd, const std::optional<std::string>& pinned_order) {
  Scenario sc = base;
  sc.nodes = cd.nodes;
  sc.gpus = cd.gpus;
  Layout ly;
  ly.dp = cd.dp;
  ly.tp = cd.tp;
  ly.pp = cd.pp;
  ly.vp = cd.vp;
  ly.mbs = cd.mbs;
  ly.zero = cd.zero;
  ly.recompute = cd.recompute;
  ly.offload = cd.offload;
  ly.sp = cd.sp;
  ly.order = pinned_order ? *pinned_order : kOrders[cd.order];
  ly.schedule = cd.schedule;
  ly.cp = cd.cp;
  ly.ep = cd.ep;
  return estimate(sc, ly);
}

// Work units: (nodes, tp, pp) with tp dividing heads, kv_heads and ffn_hidden, pp <= layers, for
// every node count of the range (or the fixed GPU count).
std::vector<Unit> work_units(const Scenario& scenario, const SearchOptions& o, int fixed_gpus) {
  std::vector<Unit> units;
  const ModelSpec& md = scenario.model;
  const int gpn = scenario.cluster.gpus_per_node;
  const bool cp_runs = context_parallel_missing(scenario.cluster.gpu).empty();
  for (int n = o.nodes_min; n <= o.nodes_max; ++n) {
    const int g = fixed_gpus > 0 ? fixed_gpus : n * gpn;
    const FrameworkSpec& fw = scenario.training.framework;
    for (int tp : divisors(g, md.heads)) {
      if (!tp_splits_model(md, tp)) continue;
      if (o.pins.tp && *o.pins.tp != tp) continue;
      if (tp > 1 && !fw.tensor_parallel) continue;
      for (int pp : divisors(g / tp, md.layers)) {
        if (o.pins.pp && *o.pins.pp != pp) continue;
        if (pp > 1 && !fw.pipeline_parallel) continue;
        // Context-parallel degrees: 2*cp divides the sequence, and (unpinned) every rank keeps at
        // least kMinCpTokens of it.
        const int s = scenario.seq_len();
        for (int cp : divisors(g / (int64_t(tp) * pp), std::max(1, s / 2))) {
          if (o.pins.cp ? *o.pins.cp != cp || !cp_splits_sequence(s, cp) : !cp_searched_unpinned(s, cp)) continue;
          if (cp > 1 && (!fw.context_parallel || !cp_runs)) continue;
          units.push_back({n, g, tp, pp, cp});
        }
      }
    }
  }
  return units;
}

// Pareto front of days vs dollars (GPU-days when the price is unknown) over node counts: the
// best candidate of each node count that no other node count's beats on both.
std::vector<Cand> pareto_front(const std::vector<Cand>& per_nodes) {
  std::vector<Cand> front;
  for (const Cand& b : per_nodes) {
    if (b.score == HUGE_VAL) continue;
    bool dominated = false;
    for (const Cand& other : per_nodes) {
      if (other.score == HUGE_VAL || &other == &b) continue;
      if (other.days <= b.days && other.cost <= b.cost && (other.days < b.days || other.cost < b.cost))
        dominated = true;
    }
    if (!dominated) front.push_back(b);
  }
  return front;
}

}  // namespace

SearchResult search(const Scenario& scenario, const SearchOptions& options_in,
                    const SearchProgress& progress) {
  const auto t0 = std::chrono::steady_clock::now();
  SearchResult result;
  SearchOptions o = options_in;
  if (o.nodes_min <= 0 && o.nodes_max <= 0) o.nodes_min = o.nodes_max = scenario.nodes;
  if (o.nodes_max < o.nodes_min) o.nodes_max = o.nodes_min;
  if (o.nodes_min <= 0) o.nodes_min = 1;
  const int gpn = scenario.cluster.gpus_per_node;
  if (gpn <= 0 || scenario.training.gbs <= 0 || scenario.model.layers <= 0 || scenario.model.heads <= 0)
    return result;
  int fixed_gpus = 0;
  if (o.nodes_min == o.nodes_max) fixed_gpus = o.gpus > 0 ? o.gpus : scenario.gpus;
  if (int64_t(o.nodes_max) - o.nodes_min + 1 > ResourceLimits::max_search_node_counts) {
    result.limit = "the node range " + std::to_string(o.nodes_min) + ":" +
                   std::to_string(o.nodes_max) + " holds " +
                   std::to_string(int64_t(o.nodes_max) - o.nodes_min + 1) +
                   " node counts, over the limit of " +
                   std::to_string(ResourceLimits::max_search_node_counts) + " per search";
    return result;
  }

  const std::vector<Unit> units = work_units(scenario, o, fixed_gpus);
  const ModelSpec& md = scenario.model;
  // Units are handed out one at a time from a shared counter, so uneven units balance themselves.
  const int64_t total = int64_t(units.size());

  const ModelProfile prof = profile_model(md, 1, scenario.seq_len(), 1, scenario.training.precision);
  const double tokens = scenario.training.tokens > 0 ? scenario.training.tokens : 20.0 * prof.total_params;
  // Every unit has the same ranks on a node (a node's GPUs, or the fixed count on one node), which
  // the constants of CPU ranks depend on (their backend threads).
  Scenario first = scenario;
  first.nodes = o.nodes_min;
  first.gpus = fixed_gpus;
  const detail::Constants c = detail::constants_for(first);
  const size_t node_counts = size_t(o.nodes_max - o.nodes_min + 1);

  int threads = o.threads > 0 ? o.threads : int(std::max(1u, std::thread::hardware_concurrency()));
  threads = int(std::max<int64_t>(1, std::min<int64_t>(threads, total)));
  std::vector<Worker> workers;
  workers.reserve(size_t(threads));
  for (int i = 0; i < threads; ++i) {
    workers.emplace_back(size_t(std::max(o.top, 1)), node_counts);
    workers.back().base = &scenario;
    workers.back().opt = &o;
    workers.back().c = c;
    workers.back().tokens = tokens;
  }
  std::atomic<int64_t> next{0}, done{0}, evaluated{0};
  std::atomic<bool> cancel{false}, over_limit{false};
  std::mutex progress_mutex;
  auto body = [&](Worker& w) {
    for (;;) {
      if (cancel.load(std::memory_order_relaxed)) return;
      const int64_t i = next.fetch_add(1);
      if (i >= total) return;
      const int64_t before = w.evaluated;
      w.run_unit(units[size_t(i)]);
      if (evaluated.fetch_add(w.evaluated - before) + (w.evaluated - before) >
          ResourceLimits::max_search_layouts) {
        over_limit.store(true);
        cancel.store(true);
        return;
      }
      const int64_t d = done.fetch_add(1) + 1;
      if (progress) {
        std::lock_guard<std::mutex> lock(progress_mutex);
        if (!cancel.load() && !progress(d, total)) cancel.store(true);
      }
    }
  };
  std::vector<std::thread> pool;
  for (int i = 1; i < threads; ++i) pool.emplace_back(body, std::ref(workers[size_t(i)]));
  body(workers[0]);
  for (std::thread& t : pool) t.join();

  // Deterministic merge.
  std::vector<Cand> all;
  std::vector<Cand> per_nodes(node_counts);
  for (Cand& b : per_nodes) b.score = HUGE_VAL;
  for (Worker& w : workers) {
    result.evaluated += w.evaluated;
    w.top.trim();
    all.insert(all.end(), w.top.items().begin(), w.top.items().end());
    for (size_t k = 0; k < node_counts; ++k) {
      const Cand& b = w.best_per_nodes[k];
      if (b.score == HUGE_VAL) continue;
      if (per_nodes[k].score == HUGE_VAL || better(b, per_nodes[k])) per_nodes[k] = b;
    }
  }
  std::sort(all.begin(), all.end(), better);
  if (all.size() > size_t(std::max(o.top, 0))) all.resize(size_t(std::max(o.top, 0)));
  const bool priced = scenario.cluster.price_per_node_hour_usd > 0;
  auto with_limits = [&](Estimate e) {
    const std::string why = limits_broken(e, o, priced);
    if (!why.empty() && e.fits) {
      e.fits = false;
      e.reason = why;
    }
    return e;
  };
  for (const Cand& cd : all) result.candidates.push_back(with_limits(materialize(scenario, cd, o.pins.order)));
  mark_as_good_as_best(result.candidates, o.objective);

  for (const Cand& cd : pareto_front(per_nodes)) result.pareto.push_back(with_limits(materialize(scenario, cd, o.pins.order)));
  result.cancelled = cancel.load();
  if (over_limit.load())
    result.limit = "stopped after " + std::to_string(result.evaluated) +
                   " layouts, over the limit of " +
                   std::to_string(ResourceLimits::max_search_layouts) +
                   " per search (a node range of " + std::to_string(node_counts) +
                   " node counts); search a narrower range or pin knobs with --fix";
  result.search_time_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return result;
}

std::string limits_broken(const Estimate& e, const SearchOptions& o, bool priced) {
  char buf[200];
  const double cap = e.memory_per_gpu_bytes.capacity, total = e.memory_per_gpu_bytes.total;
  if (!within_margin(total, cap, o.memory_margin)) {
    const double gib = 1024.0 * 1024.0 * 1024.0;
    std::snprintf(buf, sizeof buf,
                  "inside the %.3g %% memory margin: %.1f of %.0f GiB per GPU, over the %.1f GiB "
                  "the margin leaves",
                  o.memory_margin * 100.0, total / gib, cap / gib,
                  (1.0 - o.memory_margin) * cap / gib);
    return buf;
  }
  if (o.deadline_days > 0 && e.days_to_train > o.deadline_days) {
    std::snprintf(buf, sizeof buf, "over the deadline: %.1f days to train, more than %.4g",
                  e.days_to_train, o.deadline_days);
    return buf;
  }
  if (o.budget_usd > 0 && priced && e.cost_usd > o.budget_usd) {
    std::snprintf(buf, sizeof buf, "over the budget: $%.0f, more than $%.0f", e.cost_usd,
                  o.budget_usd);
    return buf;
  }
  return {};
}

namespace {

// No layout at all without pins: the GPU counts cannot be split as dp x tp x pp x cp for this
// model and batch, the splits work_units and the search enumerate (dp dividing the global batch,
// tp dividing the heads, kv_heads and ffn_hidden, pp at most the layers, cp as the search takes
// it). Either they are more than any layout uses (dp the global batch at mbs 1, the largest tp,
// pp the layers, the largest cp), or no product of allowed degrees equals them.
std::string why_no_split(const Scenario& scenario, const std::vector<int64_t>& gpu_counts,
                         const std::string& gpus_text) {
  const ModelSpec& m = scenario.model;
  const int64_t gbs = scenario.training.gbs;
  const int s = scenario.seq_len();
  const FrameworkSpec& fw = scenario.training.framework;
  std::vector<int> tps, cps = {1};
  for (int k = 1; k <= (fw.tensor_parallel ? m.heads : 1); ++k)
    if (tp_splits_model(m, k)) tps.push_back(k);
  for (int k = 2; fw.context_parallel && context_parallel_missing(scenario.cluster.gpu).empty() && k <= s / 2; ++k)
    if (cp_searched_unpinned(s, k)) cps.push_back(k);
  const int max_pp = fw.pipeline_parallel ? m.layers : 1;
  const std::string lacks = fw.tensor_parallel && fw.pipeline_parallel
                                ? std::string()
                                : " (framework " + fw.name + " has no " +
                                      (!fw.tensor_parallel && !fw.pipeline_parallel ? "tensor or pipeline"
                                       : !fw.tensor_parallel                        ? "tensor"
                                                                                    : "pipeline") +
                                      " parallelism)";
  const int64_t most = gbs * tps.back() * int64_t(max_pp) * cps.back();
  const std::string bounds = "dp at most the global batch " + std::to_string(gbs) + ", tp at most " +
                             std::to_string(tps.back()) +
                             (fw.tensor_parallel ? " (dividing heads " + std::to_string(m.heads) + ", kv_heads " +
                                                       std::to_string(m.kv_heads_or_default()) + " and ffn_hidden " +
                                                       std::to_string(m.ffn_hidden_or_default()) + ")"
                                                 : std::string()) +
                             ", pp at most " +
                             (fw.pipeline_parallel ? "the " + std::to_string(m.layers) + " layers" : std::string("1")) +
                             (cps.back() > 1 ? ", cp at most " + std::to_string(cps.back()) : std::string()) + lacks;
  if (*std::min_element(gpu_counts.begin(), gpu_counts.end()) > most)
    return gpus_text + " are more than any layout of this model and batch can use: at most " +
           std::to_string(most) + " (" + bounds + "); use fewer nodes or a larger --gbs";
  return "no split of " + gpus_text + " as dp x tp x pp" + (cps.back() > 1 ? std::string(" x cp") : std::string()) +
         " exists for this model and batch (" + bounds + ", dp dividing the global batch)";
}

}  // namespace

std::optional<std::string> pins_unsatisfiable(const Scenario& scenario,
                                              const SearchOptions& options) {
  SearchOptions any = options;
  any.include_infeasible = true;
  any.top = 1;
  if (!search(scenario, any).candidates.empty()) return std::nullopt;
  return no_layout_reason(scenario, options);
}

std::string no_layout_reason(const Scenario& scenario, const SearchOptions& options) {
  const LayoutPins& p = options.pins;
  const bool pinned = p.dp || p.tp || p.pp || p.vp || p.mbs || p.zero || p.recompute || p.offload || p.sp ||
                      p.order || p.schedule || p.ep || p.cp;
  // Nothing at all: name the first pin that no GPU count of the search allows.
  const ModelSpec& m = scenario.model;
  const int gpn = scenario.cluster.gpus_per_node;
  const int lo = options.nodes_min > 0 ? options.nodes_min : scenario.nodes;
  const int hi = std::max(lo, options.nodes_max);
  const int one = options.gpus > 0 ? options.gpus : scenario.gpus;
  const std::string gpus_text =
      lo == hi ? std::to_string(one > 0 ? one : lo * gpn) + " GPUs"
               : std::to_string(lo * gpn) + " to " + std::to_string(hi * gpn) + " GPUs";
  // A pinned knob the implementation does not have.
  const FrameworkSpec& fw = scenario.training.framework;
  Layout asked;
  const bool vp_pinned = p.vp && *p.vp > 1;
  asked.tp = p.tp.value_or(1);
  asked.pp = p.pp.value_or((p.schedule && *p.schedule != Schedule::OneFOneB) || vp_pinned ? 2 : 1);
  asked.cp = p.cp.value_or(1);
  asked.ep = p.ep.value_or(1);
  asked.offload = p.offload.value_or(false);
  asked.sp = p.sp.value_or(false);
  asked.recompute = p.recompute.value_or(Recompute::Full);
  // Unpinned, the lowest ZeRO stage the implementation has (every preset has 0).
  asked.zero = p.zero.value_or(0);
  while (!p.zero && asked.zero < 3 && !fw.has_zero(asked.zero)) ++asked.zero;
  asked.schedule = p.schedule.value_or(vp_pinned ? Schedule::Interleaved : Schedule::OneFOneB);
  if (auto lacks = framework_lacks(fw, asked)) return *lacks;
  if (!pinned) {
    std::vector<int64_t> counts;
    for (int n = lo; n <= hi; ++n) counts.push_back(lo == hi && one > 0 ? one : int64_t(n) * gpn);
    return why_no_split(scenario, counts, gpus_text);
  }
  auto divides_some = [&](int64_t k) {
    for (int n = lo; n <= hi; ++n) {
      const int64_t g = lo == hi && one > 0 ? one : int64_t(n) * gpn;
      if (k > 0 && g % k == 0) return true;
    }
    return false;
  };
  const std::string t = p.tp ? std::to_string(*p.tp) : "";
  // The tp values the model and the GPU counts allow, and the pp values that go with the pinned
  // tp (and dp): named in the message so that the user sees what would work.
  auto tp_ok = [&](int k) {
    return tp_splits_model(m, k) && divides_some(k);
  };
  auto list = [](const std::vector<int>& v) {
    std::string out;
    for (size_t i = 0; i < v.size() && i < 12; ++i) out += (i ? ", " : "") + std::to_string(v[i]);
    if (v.size() > 12) out += ", ...";
    return out.empty() ? std::string("none") : out;
  };
  auto working_tp = [&] {
    std::vector<int> v;
    for (int k = 1; k <= std::max(1, gpn) * 8 && k <= m.heads; ++k)
      if (tp_ok(k)) v.push_back(k);
    return list(v);
  };
  if (p.tp && !tp_splits_model(m, *p.tp))
    return "tp=" + t + " does not divide the model's heads " + std::to_string(m.heads) +
           ", kv_heads " + std::to_string(m.kv_heads_or_default()) + " and ffn_hidden " +
           std::to_string(m.ffn_hidden_or_default()) + "; tp values that work: " + working_tp();
  if (p.tp && !divides_some(*p.tp))
    return "tp=" + t + " does not divide " + gpus_text + "; tp values that work: " + working_tp();
  if (p.pp && *p.pp > m.layers)
    return "pp=" + std::to_string(*p.pp) + " is more than the model's " +
           std::to_string(m.layers) + " layers";
  const int64_t tp_pp = int64_t(p.tp.value_or(1)) * p.pp.value_or(1) * p.dp.value_or(1);
  if (!divides_some(tp_pp)) {
    std::vector<int> pps;
    const int64_t rest = int64_t(p.tp.value_or(1)) * p.dp.value_or(1);
    for (int k = 1; k <= m.layers; ++k)
      if (divides_some(rest * k)) pps.push_back(k);
    return "dp x tp x pp = " + std::to_string(tp_pp) + " (as pinned) does not divide " + gpus_text +
           (p.pp ? "; pp values that work with the other pins: " + list(pps) : std::string());
  }
  if (p.sp && *p.sp && p.tp && *p.tp == 1) return "sp=true needs tp > 1";
  if (p.ep && *p.ep > 1 && !m.moe.enabled()) return "ep=" + std::to_string(*p.ep) + " needs an MoE model";
  if (p.ep && m.moe.enabled() && m.moe.experts % *p.ep)
    return "ep=" + std::to_string(*p.ep) + " does not divide the model's " +
           std::to_string(m.moe.experts) + " experts";
  if (const std::string why = context_parallel_missing(scenario.cluster.gpu); p.cp && *p.cp > 1 && !why.empty())
    return "cp=" + std::to_string(*p.cp) + ": " + why;
  if (p.cp && *p.cp > 0 && !cp_splits_sequence(scenario.seq_len(), *p.cp))
    return "cp=" + std::to_string(*p.cp) + ": 2*cp does not divide the sequence length " +
           std::to_string(scenario.seq_len());
  if (p.mbs && scenario.training.gbs % *p.mbs)
    return "mbs=" + std::to_string(*p.mbs) + " does not divide gbs " +
           std::to_string(scenario.training.gbs);
  return "no layout on " + gpus_text + " satisfies the pinned knobs together (gbs " +
         std::to_string(scenario.training.gbs) + ", " + std::to_string(m.layers) + " layers, " +
         std::to_string(m.heads) + " heads)";
}

TrainingSpec training_of(const TrainingSpec& asked, const Estimate& candidate) {
  TrainingSpec t = asked;
  if (candidate.framework.empty() || candidate.framework == t.framework.name) return t;
  if (Loaded<FrameworkSpec> f = load_framework(candidate.framework); f.value) {
    t.framework = *f.value;
    t.attention = candidate.attention;
  }
  return t;
}

double objective_score(const Estimate& e, Objective objective) {
  return score_of(objective, e.days_to_train, std::isfinite(e.cost_usd) ? e.cost_usd : e.gpus * e.days_to_train,
                  e.step_time_s, e.gpus);
}

const char* objective_measure(Objective objective, bool priced) {
  switch (objective) {
    case Objective::Cost: return priced ? "dollars" : "GPU-days";
    case Objective::Throughput: return "GPU-seconds per step";
    case Objective::Time: break;
  }
  return "days";
}

void merge_framework_bests(std::vector<FrameworkBest>& into, const std::vector<FrameworkBest>& part,
                           Objective objective) {
  // Fitting ones by the objective, then those whose closest layout does not fit, then those with
  // none.
  const auto rank = [](const FrameworkBest& f) { return !f.best ? 2 : f.best->fits ? 0 : 1; };
  const auto better = [&](const FrameworkBest& a, const FrameworkBest& b) {
    if (rank(a) != rank(b)) return rank(a) < rank(b);
    return rank(a) < 2 && objective_score(*a.best, objective) < objective_score(*b.best, objective);
  };
  for (const FrameworkBest& f : part) {
    auto it = std::find_if(into.begin(), into.end(), [&](const FrameworkBest& g) { return g.framework == f.framework; });
    if (it == into.end())
      into.push_back(f);
    else if (better(f, *it))
      *it = f;
  }
  std::stable_sort(into.begin(), into.end(), better);
  // Each preset's best against the best of all, as mark_as_good_as_best marks the candidates.
  if (into.empty() || !into.front().best) return;
  const Estimate top = *into.front().best;
  const double top_score = objective_score(top, objective);
  for (FrameworkBest& f : into) {
    if (!f.best) continue;
    f.best->as_good_as_best = as_good_as(*f.best, top, objective);
    f.vs_best = f.best->fits && top.fits && top_score > 0 ? objective_score(*f.best, objective) / top_score
                                                           : std::numeric_limits<double>::quiet_NaN();
  }
}

SearchResult search_frameworks(const Scenario& scenario, const SearchOptions& options,
                               const SearchProgress& progress) {
  SearchResult all;
  const auto score = [&](const Estimate& e) { return objective_score(e, options.objective); };
  for (const CatalogEntry& entry : catalog_frameworks()) {
    Loaded<FrameworkSpec> fw = load_framework(entry.name);
    if (!fw.value) continue;
    Scenario sc = scenario;
    sc.training.framework = *fw.value;
    // The preset's own attention (Scenario::attention: its FlashAttention falls back where the
    // GPU cannot run it).
    sc.training.attention.reset();
    SearchResult r = search(sc, options, progress);
    FrameworkBest fb{entry.name, std::nullopt, {}};
    if (!r.candidates.empty()) {
      fb.best = r.candidates.front();
    } else if (r.cancelled) {
      fb.reason = "the search was cancelled before it found one";
    } else if (!r.limit.empty()) {
      fb.reason = r.limit;
    } else {
      // Nothing fits: its best layout by the objective, memory aside, and why it does not fit;
      // or why the preset has no layout at all.
      SearchOptions closest = options;
      closest.include_infeasible = true;
      closest.top = 1;
      SearchResult c = search(sc, closest);
      if (!c.candidates.empty())
        fb.best = c.candidates.front();
      else
        fb.reason = no_layout_reason(sc, options);
    }
    all.per_framework.push_back(std::move(fb));
    all.evaluated += r.evaluated;
    all.search_time_s += r.search_time_s;
    all.cancelled = all.cancelled || r.cancelled;
    if (all.limit.empty()) all.limit = r.limit;
    all.candidates.insert(all.candidates.end(), r.candidates.begin(), r.candidates.end());
    all.pareto.insert(all.pareto.end(), r.pareto.begin(), r.pareto.end());
    if (r.cancelled) break;
  }
  std::stable_sort(all.candidates.begin(), all.candidates.end(), [&](const Estimate& a, const Estimate& b) {
    if (a.fits != b.fits) return a.fits;
    return score(a) < score(b);
  });
  if (all.candidates.size() > size_t(std::max(options.top, 0))) all.candidates.resize(size_t(std::max(options.top, 0)));
  mark_as_good_as_best(all.candidates, options.objective);
  merge_framework_bests(all.per_framework, {}, options.objective);
  // Pareto over every framework: keep the points no other point beats on both days and dollars.
  std::vector<Estimate> front;
  for (const Estimate& a : all.pareto) {
    bool dominated = false;
    const double ca = std::isfinite(a.cost_usd) ? a.cost_usd : a.days_to_train * a.gpus;
    for (const Estimate& b : all.pareto) {
      const double cb = std::isfinite(b.cost_usd) ? b.cost_usd : b.days_to_train * b.gpus;
      if (&a != &b && b.days_to_train <= a.days_to_train && cb <= ca &&
          (b.days_to_train < a.days_to_train || cb < ca)) {
        dominated = true;
        break;
      }
    }
    if (!dominated) front.push_back(a);
  }
  std::sort(front.begin(), front.end(), [](const Estimate& a, const Estimate& b) { return a.nodes < b.nodes; });
  all.pareto = std::move(front);
  return all;
}

}  // namespace capplan
