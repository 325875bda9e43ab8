// Which links a TP, PP or DP group crosses, from the placement order and gpus_per_node, and the
// ring / hierarchical collective times over them. Ranks are numbered with the right-most letter of
// the order varying fastest: with "DPT", TP peers are consecutive ranks and so share a node.
#include <algorithm>
#include <cmath>

#include "cost_model_detail.h"
#include "planner/rank_mapping.h"

namespace capplan::detail {

Links links_across(const Constants& c, int n, int nodes, int gpus_in_node) {
  Links l;
  l.n = n;
  l.nodes = nodes;
  l.per_node = std::max(1, n / nodes);
  l.lat_step_intra_s = c.intra_lat_s;
  l.lat_step_inter_s = c.inter_lat_s;
  if (nodes <= 1) {
    l.bw_Bps = c.intra_Bps;
    l.profile = c.profile;
  } else {
    // Every GPU of a node belongs to some group of this kind and all run the same collective at
    // once: gpus_in_node / per_node groups share the node's NICs, and a ring crosses a node
    // boundary once per node, so a group gets NIC * per_node / gpus_in_node (its intra-node hops
    // run on NVLink at the same time and are not the bottleneck unless slower).
    const double inter = c.inter_node_Bps * l.per_node / gpus_in_node;
    l.bw_Bps = l.per_node > 1 ? std::min(c.intra_Bps, inter) : inter;
  }
  return l;
}

namespace {

// Group of `deg` members whose ranks are `stride` apart. Groups of one kind are shifted copies of
// each other only when their blocks align with nodes; when they do not (tp = 6 on 8-GPU nodes),
// some straddle a node boundary, so the groups through the first node's ranks are all checked and
// the one spanning most nodes sets the pace (a collective ends with its slowest group).
Links group_links(const Constants& c, int gpn, int total, int deg, int stride) {
  const int gpus_in_node = std::max(1, std::min(gpn, total));
  int worst_nodes = 1;
  for (int j = 0; j < gpus_in_node && deg > 1; ++j) {
    const int64_t r0 = j - int64_t((j / stride) % deg) * stride;
    int nodes = 1;
    int64_t last = r0 / gpus_in_node;
    for (int i = 1; i < deg; ++i) {
      const int64_t node = (r0 + int64_t(i) * stride) / gpus_in_node;
      if (node != last) {
        ++nodes;
        last = node;
      }
    }
    worst_nodes = std::max(worst_nodes, nodes);
  }
  return links_across(c, deg, worst_nodes, gpus_in_node);
}

}  // namespace

Placement placement(const Constants& c, int gpus_per_node, int total_gpus, int dp, int tp, int pp,
                    const char* order) {
  Layout l;
  l.dp = dp, l.tp = tp, l.pp = pp, l.order = order;
  const AxisStrides stride = axis_strides(l);
  Placement pl;
  pl.tp = group_links(c, gpus_per_node, total_gpus, tp, stride.tp);
  pl.pp = group_links(c, gpus_per_node, total_gpus, pp, stride.pp);
  pl.dp = group_links(c, gpus_per_node, total_gpus, dp, stride.dp);
  pl.dp.cold = true;  // gradients and weights, written or read a whole pass before
  // Point-to-point between consecutive stages: every GPU sends at once in the steady state, so a
  // crossing pair gets the NIC share of one GPU (Narayanan et al. 2021 Sec 4.1 for the pattern).
  const int gpus_in_node = gpus_on_a_node(gpus_per_node, total_gpus);
  if (pl.pp.nodes > 1) {
    pl.p2p_Bps = c.inter_node_Bps / gpus_in_node;
    pl.p2p_lat_s = c.inter_lat_s;
  } else {
    pl.p2p_Bps = c.intra_Bps;
    pl.p2p_lat_s = c.intra_lat_s;
  }
  return pl;
}

namespace {
// A device profile's measured time of `op` for this group, or -1 (the formulas below then): on
// buffers from memory for a group that moves them (Links::cold), where the profile timed them. A
// group of a size the profile did not measure takes the nearest measured size's time scaled by
// the ring's (n-1)/n of the bytes each member moves (all-reduce, all-gather and reduce-scatter
// alike), rather than the fitted line, whose weight lies on the small messages; the warm time:
// a ring of n members moves its buffer as n - 1 steps of chunks of 1/n of it, which pass from
// member to member through the caches, and only the first read of each comes from memory.
// On 2 cores with profiles of 2 ranks, over five runs of tests/bench/bench_local_fidelity.sh (each
// a median of three rounds): two dp groups of 2 at once (dp 2 x tp 2) exchanged their gradients in
// 6.3-9.5 ms against 4.9-7.4 priced cold, where the warm times had priced 4.1-4.3; dp 4 took
// 15.5-19.1 ms against 13.3-21.5 scaled warm, dp 8 32.0-37.6 against 31.0-50.3. One profile
// scaling the cold times instead priced dp 4 at 20.9 ms and dp 8 at 48.8, against 15.5 and 33.8
// in the benchmark run that followed it.
double measured_s(const Links& l, const char* op, double bytes) {
  if (!l.profile) return -1;
  const double t = l.profile->collective_seconds(op, l.n, bytes, l.cold);
  if (t > 0) return t;
  const CollectiveFit* near = l.profile->fit(op, l.n);
  if (!near || near->ranks < 2) return -1;
  const double at = l.profile->collective_seconds(op, near->ranks, bytes);
  const double n = l.n, n0 = near->ranks;
  return at > 0 ? at * ((n - 1) / n) / ((n0 - 1) / n0) : -1;
}
}  // namespace

double allreduce_s(const Links& l, double bytes) {
  if (l.n <= 1 || bytes <= 0) return 0;
  if (const double t = measured_s(l, "all-reduce", bytes); t > 0) return t;
  const double n = l.n;
  const double latency =
      2.0 * ((l.per_node - 1) * l.lat_step_intra_s + (l.nodes - 1) * l.lat_step_inter_s);
  return 2.0 * (n - 1) / n * bytes / l.bw_Bps + latency;
}

double ring_latency_s(const Links& l) {
  if (l.n <= 1) return 0;
  const int inter_steps = std::max(0, l.nodes - 1);
  const int intra_steps = std::max(0, l.n - 1 - inter_steps);
  return intra_steps * l.lat_step_intra_s + inter_steps * l.lat_step_inter_s;
}

namespace {
// Half a ring all-reduce: the measured time of `op` where the profile has it, else
// (n-1)/n * S / B plus one pass of the ring's latency.
double half_allreduce_s(const Links& l, const char* op, double bytes) {
  if (l.n <= 1 || bytes <= 0) return 0;
  if (const double t = measured_s(l, op, bytes); t > 0) return t;
  const double n = l.n;
  return (n - 1) / n * bytes / l.bw_Bps + ring_latency_s(l);
}
}  // namespace

double allgather_s(const Links& l, double bytes) { return half_allreduce_s(l, "all-gather", bytes); }
double reducescatter_s(const Links& l, double bytes) { return half_allreduce_s(l, "reduce-scatter", bytes); }

double zero12_grad_reduction_s(const Links& l, double bytes, int zero, const FrameworkSpec& fw) {
  return zero == 1 && fw.zero1_grad_allreduce ? allreduce_s(l, bytes) : reducescatter_s(l, bytes);
}

namespace {
// The profile's cold time of capplan-train's own call pattern `op`, only where timed for the
// group's size (-1 otherwise: the caller prices the collectives it is made of, whose nearest
// measured size is scaled by the ring's (n-1)/n, measured_s).
double runtime_timed_s(const Links& l, const char* op, double bytes) {
  if (!l.profile || l.n <= 1 || bytes <= 0) return -1;
  return l.profile->collective_seconds(op, l.n, bytes, true);
}
}  // namespace

double runtime_gather_s(const Links& l, double bytes) { return runtime_timed_s(l, "all-gather-v", bytes); }
double runtime_exchange_s(const Links& l, double bytes) { return runtime_timed_s(l, "gradient-exchange", bytes); }
}  // namespace capplan::detail
