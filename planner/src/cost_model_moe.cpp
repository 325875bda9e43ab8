// The cost model's mixture-of-experts and context-parallel terms, as steps around the dense model
// of cost_model.cpp: a layout with experts or cp > 1 is costed as the dense model of one rank's
// slice (s / cp tokens, gradients over dp * cp) whose MLP is replaced by router and experts, plus
// the expert all-to-alls, the exposed part of the context ring, and the experts' own memory and
// gradient reduction. It does not change a dense layout without cp (needs_moe_cp is false there).
#include <algorithm>
#include <cmath>
#include <numeric>

#include "cost_model_detail.h"
#include "planner/profile.h"
#include "planner/rank_mapping.h"

namespace capplan::detail {

namespace {

// The same by listing each group (group_ranks) and sorting its nodes: what links_of must equal.
Links links_of_listed(const Constants& c, int gpn, int total, const Layout& ly, RankGroup kind) {
  const int gpus_in_node = std::max(1, std::min(gpn, total));
  int worst_nodes = 1, n = 1;
  for (int r = 0; r < gpus_in_node && r < total; ++r) {
    const std::vector<int> g = group_ranks(r, ly, kind);
    n = int(g.size());
    std::vector<int> nodes;
    for (int m : g) nodes.push_back(m / gpus_in_node);
    std::sort(nodes.begin(), nodes.end());
    worst_nodes = std::max(worst_nodes, int(std::unique(nodes.begin(), nodes.end()) - nodes.begin()));
  }
  return links_across(c, n, worst_nodes, gpus_in_node);
}

// The members of one group: positions of the full placement order's letters (rank_mapping.cpp:
// D, E, C, P, T, right-most fastest) that vary while the others stay. E holds ep = e_d x e_c
// positions, e_d of them data-parallel (its high part) and e_c context-parallel (its low part).
// An axis moves its letter's position by `step` ranks, `count` times; sorted by step, largest
// first, counting them up visits the members in increasing rank order.
struct GroupAxes {
  enum Part { Whole, ELow };
  int n = 0;
  int step[3] = {0, 0, 0}, count[3] = {1, 1, 1}, stride[3] = {1, 1, 1}, size[3] = {1, 1, 1};
  Part part[3] = {Whole, Whole, Whole};
  int e_c = 1;
  // A letter of `letter_size` positions at `letter_stride`; ELow: only E's low e_c positions.
  void add(int letter_stride, int letter_size, Part p = Whole) {
    const int cnt = p == ELow ? e_c : letter_size;
    if (cnt <= 1) return;
    int i = n++;
    for (; i > 0 && step[i - 1] < letter_stride; --i) {
      step[i] = step[i - 1], count[i] = count[i - 1], stride[i] = stride[i - 1];
      size[i] = size[i - 1], part[i] = part[i - 1];
    }
    step[i] = letter_stride, count[i] = cnt, stride[i] = letter_stride, size[i] = letter_size, part[i] = p;
  }
  // Rank r's position along axis k.
  int position(int r, int k) const {
    const int pos = (r / stride[k]) % size[k];
    return part[k] == ELow ? pos % e_c : pos;
  }
};

// Links of the groups of one kind through the ranks of the first node, by the rule of
// placement.cpp: the group spanning most nodes sets the pace; across nodes a group gets its
// share of the node's NICs. The members are those group_ranks() lists (rank_mapping.cpp),
// visited in increasing rank order from the letter strides, so the nodes a group spans are
// counted without listing or sorting it (the search calls this once per unit, ep and order).
Links links_of(const Constants& c, int gpn, int total, const Layout& ly, RankGroup kind) {
  const int gpus_in_node = std::max(1, std::min(gpn, total));
  const AxisStrides st = axis_strides(ly);
  const int ep = std::max(1, ly.ep);
  const int e_d = std::gcd(ep, std::max(1, ly.dp)), e_c = std::max(1, ep / e_d);
  const int size_d = std::max(1, ly.dp / e_d), size_c = std::max(1, ly.cp / e_c), size_e = e_d * e_c;
  GroupAxes g;
  g.e_c = e_c;
  int n = 1;
  switch (kind) {
    case RankGroup::Tp: g.add(st.tp, ly.tp), n = ly.tp; break;
    case RankGroup::Pp: g.add(st.pp, ly.pp), n = ly.pp; break;
    case RankGroup::DpCp:
      g.add(st.dp, size_d), g.add(st.ep, size_e), g.add(st.cp, size_c), n = ly.dp * ly.cp;
      break;
    case RankGroup::Cp: g.add(st.cp, size_c), g.add(st.ep, size_e, GroupAxes::ELow), n = ly.cp; break;
    case RankGroup::Ep: g.add(st.ep, size_e), n = size_e; break;
    case RankGroup::ExpertDp: g.add(st.dp, size_d), g.add(st.cp, size_c), n = size_d * size_c; break;
    case RankGroup::Dp: return links_of_listed(c, gpn, total, ly, kind);
  }
  int worst_nodes = 1;
  for (int r = 0; r < gpus_in_node && r < total; ++r) {
    int base = r;  // r with every varying position at 0
    for (int k = 0; k < g.n; ++k) base -= g.position(r, k) * g.step[k];
    int idx[3] = {0, 0, 0}, nodes = 0, prev = -1;
    for (;;) {
      int m = base;
      for (int k = 0; k < g.n; ++k) m += idx[k] * g.step[k];
      if (m / gpus_in_node != prev) ++nodes, prev = m / gpus_in_node;
      int k = g.n - 1;
      while (k >= 0 && ++idx[k] == g.count[k]) idx[k--] = 0;
      if (k < 0) break;
    }
    worst_nodes = std::max(worst_nodes, nodes);
  }
  return links_across(c, n, worst_nodes, gpus_in_node);
}

}  // namespace

bool needs_moe_cp(const Scenario& sc, const Layout& ly) {
  return sc.model.moe.enabled() || ly.cp > 1 || ly.ep > 1;
}

// One all-to-all in which every member of an n-rank group sends `bytes` in all, an equal share
// to each member (itself included): (n - 1) / n of it leaves the GPU, (per_node - 1) / n to peers
// on its node over NVLink and (n - per_node) / n to other nodes over its share of the NICs (all
// GPUs of a node exchange at once: NIC / gpus_in_node each). The two parts run at once, so the
// slower sets the time, plus one latency step of the slowest link. (NCCL's all-to-all is n - 1
// concurrent send/receive pairs; Megatron-Core's MoE token dispatcher, Shoeybi et al. / NVIDIA
// 2024 "MoE in Megatron-Core" Sec 3.2.) Over-counts nothing else; under-counts incast on
// oversubscribed fabrics.
double alltoall_s(const Constants& c, const Links& l, int gpus_in_node, double bytes) {
  if (l.n <= 1 || bytes <= 0) return 0;
  const double n = l.n, per_node = l.per_node;
  const double intra_bytes = bytes * (per_node - 1) / n;
  const double inter_bytes = bytes * (n - per_node) / n;
  const double intra = intra_bytes / c.intra_Bps;
  const double inter = l.nodes > 1 ? inter_bytes / (c.inter_node_Bps / std::max(1, gpus_in_node)) : 0.0;
  return std::max(intra, inter) + (l.nodes > 1 ? c.inter_lat_s : c.intra_lat_s);
}

// The ring of context parallelism (Liu et al. 2023, Ring Attention; Megatron-Core's
// context_parallel): cp steps of attention over one K/V block each, and cp - 1 transfers of the
// block to the next rank, each overlapped with one step's attention; a transfer longer than the
// step's attention shows by the difference: exposed = (cp - 1) max(0, t_x - t_a).
double ring_exposed_s(int cp, double transfer_s, double attention_step_s) {
  if (cp <= 1) return 0;
  return (cp - 1) * std::max(0.0, transfer_s - attention_step_s);
}

namespace {

// The MoE MLP and the context split of one layer, per TP rank and micro-batch, as deltas to the
// dense slice's MicroTerms (named steps over the shapes).
class MoeCpTerms {
 public:
  MoeCpTerms(const Scenario& sc, const Constants& c, const Layout& ly)
      : sc(sc), c(c), ly(ly), md(sc.model), moe(md.moe), tp(ly.tp), cp(ly.cp), ep(ly.ep),
        h(md.hidden), f(md.ffn_hidden_or_default()), fe(md.expert_ffn_hidden_or_default()),
        kv_pair(attention_kv_width(md)), e(c.elem_bytes),
        gated(md.ffn == Ffn::Swiglu), tok(double(ly.mbs) * sc.seq_len() / ly.cp),
        // The share of MoE layers among those a step runs (the multi-token prediction modules'
        // layers included: DeepSeek-V3's is MoE).
        frac(md.trained_layers() > 0 ? double(moe.moe_layers(md.trained_layers())) / md.trained_layers() : 0.0),
        experts(moe.experts), k(moe.top_k_or_default()), shared(moe.shared_experts),
        // The busiest expert's tokens as a multiple of the mean: the capacity factor bounds it
        // (GShard, Lepikhin et al. 2021 Sec 2.2; Switch, Fedus et al. 2022 Sec 2.2: tokens over
        // capacity are dropped, and the buffers are padded to it); dropless (0) assumes the
        // auxiliary loss keeps the load even (under-counts the straggler expert).
        imbalance(moe.capacity_factor > 0 ? moe.capacity_factor : 1.0) {}

  // Context parallelism: attention of s/cp queries over all s keys, load-balanced (Megatron's
  // 2 cp chunks: rank i holds chunks i and 2cp-1-i, so every rank does 1/cp of the causal
  // work); the dense slice counts A(s/cp) = A(s)/cp^2 of the quadratic core, so (cp - 1) more
  // such blocks are added, forward and backward (and to a recompute that repeats the core).
  // A device profile that timed the runtime's ring (capplan-train measure: a rank of a ring of
  // kProfileRingCp over the profile's sequence, its block kernels, packing and finish) sets the
  // whole attention of a rank instead: scaled as the dense kernels are (profile_attention_scale)
  // and by the rank's share of the causal scores, kProfileRingCp / cp. Measured on 2 cores for the 4-layer, 256-wide model (seq 128,
  // mbs 2): the ring's forward and backward 0.35 and 0.75 ms against 0.27 and 0.40 for half the
  // dense kernels' (their many smaller calls); cp 2's compute 322-357 ms a step in three runs, 329
  // so priced (346 against 316 from the dense kernels).
  void context(MicroTerms& mt) const {
    if (cp <= 1) return;
    double extra_f = (cp - 1) * mt.layer_attn_fwd_full_s;
    double extra_b = (cp - 1) * mt.layer_attn_bwd_full_s;
    const DeviceProfile* dev = c.profile;
    if (const double dense = profile_attention_scale(dev, md.heads, ly.mbs, tp, sc.seq_len()); dense > 0) {
      const double scale = dense * kProfileRingCp / cp;
      const double ring_f = profile_kernel_seconds(c, "ring attention forward");
      const double ring_b = profile_kernel_seconds(c, "ring attention backward");
      if (ring_f > 0) extra_f = ring_f * scale - mt.layer_attn_fwd_full_s;
      if (ring_b > 0) extra_b = ring_b * scale - mt.layer_attn_bwd_full_s;
    }
    mt.layer_fwd_s += extra_f;
    mt.layer_bwd_in_s += extra_b;
    mt.layer_attn_core_fwd_s += extra_f;
    if (ly.recompute == Recompute::Full) mt.layer_recompute_s += extra_f;
    else if (ly.recompute == Recompute::Selective && mt.layer_recompute_s > 0) mt.layer_recompute_s += extra_f;
    mt.layer_gemm_flops += (cp - 1) * mt.layer_attn_core_flops;
    mt.layer_attn_core_flops *= cp;
  }

  // The ring's K/V exchange: a block is the rank's K and V, tok x (K + V widths) / tp elements; forward
  // passes it cp - 1 times behind cp steps of A(s/cp) each; backward passes K, V and their
  // gradients (twice the bytes) behind the backward's steps. Full recompute runs the forward ring
  // again. Point-to-point at the cp group's link (every rank sends at once: NIC / GPUs per node
  // when the ring crosses nodes).
  void context_ring(const Placement& pl_cp, const Links& cp_links, MicroTerms& mt) const {
    if (cp <= 1) return;
    const double block_bytes = tok * kv_pair / tp * e;
    const double bw = cp_links.nodes > 1 ? pl_cp.p2p_Bps : c.intra_Bps;
    const double lat = cp_links.nodes > 1 ? c.inter_lat_s : c.intra_lat_s;
    const double t_f = lat + block_bytes / bw;
    const double t_b = lat + 2 * block_bytes / bw;
    mt.layer_cp_comm_fwd_s = ring_exposed_s(cp, t_f, mt.layer_attn_fwd_full_s);
    cp_transfer_s = t_f;
    cp_attention_step_s = mt.layer_attn_fwd_full_s;
    cp_transfer_backward_s = t_b;
    cp_attention_step_backward_s = mt.layer_attn_bwd_full_s;
    mt.layer_cp_comm_bwd_s = ring_exposed_s(cp, t_b, mt.layer_attn_bwd_full_s) +
                             (ly.recompute == Recompute::Full ? mt.layer_cp_comm_fwd_s : 0.0);
    cp_block_bytes = block_bytes;
    // capplan-train's ring on CPU ranks, timed by a device profile of the cpu backend: Open MPI
    // moves a message this large only while both ranks are inside an MPI call (the rendezvous
    // protocol; a rank computing is not in one), so the block posted before a step's attention
    // moves after it, when the ranks meet to receive it (RingAttention::forward / backward:
    // send_async, the block's attention, recv, wait_sends). Every exchange is exposed: the ranks
    // meet in it after computing, as tensor-parallel ranks meet in their all-reduce, so it takes
    // the profile's measured exchange between two ranks (send-recv: each sends and receives the
    // block) or, where longer, the measured time ranks in lockstep spend in a meeting
    // (meeting_among_s, Meeting::Exchange). Measured on 2 cores, the 4-layer, 256-wide model
    // at cp 2 (262 KB blocks): 8.7-15.8 ms in the ring per step, 68-123 us per exchange, against
    // the profile's exchange back to back 23 us and its lockstep meeting 94 us.
    // Where the host's ranks outnumber its cores, a rank that reaches an exchange first naps until
    // its neighbour, descheduled meanwhile, has had a core to reach it: the profile's hand-off
    // among that many ranks. The ring's ranks meet at every block, so it is the hand-off beside
    // pairs meeting in lockstep (handoff_lockstep_seconds), not beside ranks that compute whole
    // passes. That wait is the rank's time in the ring (cp_comm), but not all of it is the
    // host's: the cores run the other ranks meanwhile, as they do through a pipeline's bubble
    // (processor sharing, cost_model_cores.cpp). What a meeting adds to the host's step is what
    // the profile measures for ranks that compute between meetings in groups on the shared cores
    // (its lockstep all-reduce there: the timing's excess over the same ranks computing free, per
    // meeting), at least the copy; the rest of the wait is hidden (cp_wait_share, share_host_cores'
    // hidden_wait_s). dp 2 x cp 2 on 2 cores (4 ranks, 64 exchanges a step): 77-85 ms in the ring
    // over ten benchmark runs, 1.2-1.3 ms an exchange, against the hand-off beside pairs in
    // lockstep 1.1-1.2 ms and alone 1.6; the lockstep meeting of pairs among 4 ranks 0.46 ms;
    // its step 355-409 ms against cp 2's 339-408 in the same runs (the same work on the same
    // cores), where the whole wait as the cores' work priced 415-476. Rings whose ranks are in
    // lockstep already (tp > 1) meet as the tensor-parallel all-reduces do, at the profile's
    // lockstep meeting, and that is the host's time: tp 2 x cp 2 on 2 cores spent 39-45 ms in its
    // rings (0.30-0.35 ms an exchange) against the meeting of pairs among 4 ranks 0.46 ms.
    // Longer rings are over-priced still: cp 4 on 2 cores spent 149-165 ms in its ring (0.46-0.52
    // ms an exchange) and stepped in 420-439 ms, priced 366 and 548; dp 2 x cp 4 (8 ranks) 241-254
    // ms in the rings and 480-489 a step, priced 541 and 804.
    // Forward: cp - 1 exchanges of K and V; backward: cp - 1 of K and V and of their gradients,
    // then one more hop of the gradients to their owner; full recompute runs the forward's again.
    const DeviceProfile* dev = cp_links.profile;
    const double own = dev && dev->backend == "cpu" && cp_links.nodes == 1
                           ? dev->collective_seconds("send-recv", 2, block_bytes)
                           : -1.0;
    // Ranks already in lockstep (their all-reduces every half layer) reach their exchanges
    // together, a meeting as those are.
    const bool lockstep = ranks_in_lockstep(ly);
    const int on_host = gpus_on_a_node(sc.cluster.gpus_per_node, ly.gpus());
    const double x =
        own > 0 ? meeting_among_s(dev, on_host, cp, own, lockstep ? Meeting::AllReduce : Meeting::Exchange) : -1.0;
    if (x > 0) {
      mt.layer_cp_comm_fwd_s = (cp - 1) * x;
      mt.layer_cp_comm_bwd_s = (cp - 1) * 2 * x + x + (ly.recompute == Recompute::Full ? mt.layer_cp_comm_fwd_s : 0.0);
      // On shared cores: the exchange's cost to the host, the measured meeting of groups of cp
      // there or the copy at the shared cores' speed (as the data-parallel copies run), whichever
      // is longer; the rest of it the wait the other ranks' work fills.
      if (!lockstep && on_host > dev->cores && dev->cores > 0) {
        const double copy = own * shared_copy_stretch(on_host, dev->cores, dev->ranks);
        const double host = std::min(x, std::max(copy, dev->shared_allreduce_s(on_host, cp)));
        mt.cp_wait_share = 1.0 - host / x;
      }
      // The simulator's ring: cp - 1 transfers after the pass's compute, none beside it (the
      // gradients' hop home spread over the backward's steps), less what the others' work hid
      // (evaluate_moe_cp).
      cp_transfer_s = x, cp_attention_step_s = 0.0;
      cp_transfer_backward_s = (2.0 * (cp - 1) + 1.0) * x / (cp - 1), cp_attention_step_backward_s = 0.0;
    }
  }

  // The MLP of an MoE layer instead of the dense one, averaged over the layers (frac of them have
  // experts): router GEMM [tok, h] x [h, experts] and its softmax / top-k over fp32 logits; the
  // tokens permuted to their experts and back (read + write h per copy, twice); the local
  // experts, experts / ep of them, each taking the tokens the ep ranks route to it, tok ep k /
  // experts on average and `imbalance` times that on the busiest rank, as one grouped GEMM per
  // projection; the shared experts on every token. Backward: input- and weight-gradient GEMMs of
  // each forward GEMM.
  void experts_mlp(MicroTerms& mt) const {
    if (!moe.enabled()) return;
    const double ffn_in = gated ? 2 : 1;
    const double dense_gemm = gemm_seconds(c, tok, ffn_in * f / tp, h) + gemm_seconds(c, tok, h, f / tp);
    const double dense_act = memory_seconds(c, tok * f / tp * (gated ? 3 : 2) * e);
    const double dense_act_b = memory_seconds(c, tok * f / tp * (gated ? 5 : 3) * e);
    const double local = experts / ep;
    const double tok_e = tok * ep * k / experts * imbalance;
    const double expert_gemm = gemm_seconds(c, tok_e, ffn_in * fe / tp, h, local) +
                               gemm_seconds(c, tok_e, h, fe / tp, local);
    const double shared_gemm = shared > 0 ? gemm_seconds(c, tok, shared * ffn_in * fe / tp, h) +
                                                gemm_seconds(c, tok, h, shared * fe / tp)
                                          : 0.0;
    const double copies = local * tok_e + shared * tok;  // token rows through expert MLPs
    const double act = memory_seconds(c, copies * fe / tp * (gated ? 3 : 2) * e);
    const double act_b = memory_seconds(c, copies * fe / tp * (gated ? 5 : 3) * e);
    const double router = gemm_seconds(c, tok, experts, h) + memory_seconds(c, tok * experts * 4 * 3);
    const double permute = memory_seconds(c, 2 * 2 * tok * k * h * e);
    const double fwd = router + permute + expert_gemm + shared_gemm + act - dense_gemm - dense_act;
    const double bwd_in = gemm_seconds(c, tok, h, experts) + permute + expert_gemm +
                          shared_gemm + act_b - dense_gemm - dense_act_b;
    const double bwd_w = gemm_seconds(c, tok, experts, h) + expert_gemm + shared_gemm - dense_gemm;
    mt.layer_fwd_s += frac * fwd;
    mt.layer_bwd_in_s += frac * bwd_in;
    mt.layer_bwd_w_s += frac * bwd_w;
    if (ly.recompute == Recompute::Full) mt.layer_recompute_s += frac * fwd;
    // FLOPs per TP rank: router and (k + shared) expert MLPs per token instead of one dense MLP.
    const double mlp_mat = (gated ? 3 : 2) * h;
    mt.layer_gemm_flops += frac * 2 * tok * (h * experts + (k + shared) * mlp_mat * fe / tp - mlp_mat * f / tp);
    // Activations: the dense MLP's (gated ? 3 : 2) f per token replaced by each copy's expert
    // inputs and its permuted h, plus the fp32 router logits. Per copy the experts keep the
    // dispatched token (the up-projection's input), the activation function's input ((gated ? 2 :
    // 1) f_e) and its output (f_e, the down-projection's input). recompute_moe_act drops the
    // output and recomputes it in the backward, one more pass of the activation kernel (reads its
    // input, writes f_e). fp8_moe under fp8 caches these linear inputs in fp8 with one fp32 scale
    // per 1 x 128 tile (DeepSeek-V3 report Sec 3.3.2, fine-grained quantization; Sec 3.3.3,
    // low-precision storage): 1 + 4/128 bytes an element.
    const FrameworkSpec& fw = sc.training.framework;
    const double cache_e = fw.fp8_moe && sc.training.precision == Precision::Fp8 ? 1.0 + 4.0 / 128 : e;
    const double act_in = (gated ? 2 : 1) * fe / tp;
    const double act_out = fw.recompute_moe_act ? 0.0 : fe / tp;
    if (fw.recompute_moe_act && ly.recompute != Recompute::Full)
      mt.layer_recompute_s += frac * memory_seconds(c, copies * (act_in * cache_e + fe / tp * e));
    const double dense_kept = tok * (gated ? 3 : 2) * f * e / tp;
    const double per_copy = fw.recompute_moe_act || cache_e != e ? (act_in + act_out + h) * cache_e
                                                                : (gated ? 3 : 2) * fe * e / tp + h * e;
    const double moe_kept = copies * per_copy + tok * experts * 4;
    const double d_kept = frac * (moe_kept - dense_kept);
    mt.layer_act_full_bytes += d_kept;
    if (ly.recompute != Recompute::Full) mt.layer_act_kept_bytes += d_kept;
    // Parameters, per rank: the dense part loses its MLP and gains the router (replicated) and
    // the shared experts (split over tp); the routed experts are counted apart (expert_params).
    mt.layer_params += frac * (h * experts + shared * mlp_mat * fe / tp - mlp_mat * f / tp -
                               (md.norm == Norm::LayerNorm ? ffn_in * f / tp : 0.0));
    mt.layer_matrix_params = std::max(mt.layer_matrix_params, fe * h / tp);
    expert_params_per_layer = frac * local * mlp_mat * fe / tp;
    mt.expert_group = double(ly.dp) * ly.cp / ly.ep;
    mt.layer_expert_params = mt.expert_group > 1 ? expert_params_per_layer : 0.0;
  }

  // Dispatch and combine: two all-to-alls per MoE layer forward and two backward (Megatron-Core's
  // alltoall token dispatcher; Lepikhin et al. 2021 Fig. 3), each rank sending k copies of its
  // tokens' h-vectors (padded to the capacity when there is one), split over the tp ranks
  // (Megatron-Core runs MoE with sequence parallelism: a tp rank holds tok / tp tokens). Blocking
  // on the compute stream; full recompute repeats the forward's two.
  // fp8_moe under fp8 (DeepSeek-V3 report Sec 3.3.3, low-precision communication): the
  // forward's dispatch and the backward's all-to-all of the gradient before the down-projections
  // carry fp8 tokens with one fp32 scale per 128 elements; the combines, forward and backward,
  // stay 16-bit. So each pass has one all-to-all of each width.
  void all_to_alls(const Links& ep_links, int gpus_in_node, MicroTerms& mt) const {
    if (!moe.enabled() || ep <= 1) return;
    const double elems = tok * k * h / tp * (moe.capacity_factor > 0 ? moe.capacity_factor : 1.0);
    a2a_bytes = elems * e;
    const double t = alltoall_s(c, ep_links, gpus_in_node, a2a_bytes);
    a2a_s = t;
    const bool fp8 = sc.training.framework.fp8_moe && sc.training.precision == Precision::Fp8;
    const double t_narrow = fp8 ? alltoall_s(c, ep_links, gpus_in_node, elems * (1.0 + 4.0 / 128)) : t;
    const double pass = t + t_narrow;  // one 16-bit and one (fp8 or 16-bit) all-to-all
    mt.layer_ep_comm_fwd_s = frac * pass;
    mt.layer_ep_comm_bwd_s = frac * (ly.recompute == Recompute::Full ? 2 : 1) * pass;
  }

  mutable double expert_params_per_layer = 0;  // routed experts' params per rank, averaged per layer
  mutable double a2a_bytes = 0;        // one all-to-all's bytes per rank
  mutable double cp_block_bytes = 0;   // one ring step's K/V block
  mutable double a2a_s = 0, cp_transfer_s = 0, cp_attention_step_s = 0;
  mutable double cp_transfer_backward_s = 0, cp_attention_step_backward_s = 0;

 private:
  const Scenario& sc;
  const Constants& c;
  const Layout& ly;
  const ModelSpec& md;
  const MoeSpec& moe;
  const int tp, cp, ep;
  const double h, f, fe;
  const double kv_pair;  // K and V widths per token (2 kv_heads x head_dim; latent attention's per-head K and V)
  const double e;
  const bool gated;
  const double tok, frac, experts, k, shared, imbalance;
};

}  // namespace

Scenario moe_cp_slice(const Scenario& sc, const Layout& ly) {
  // The dense slice one rank computes: s / cp tokens per sequence, the dense model (MoeCpTerms
  // swaps its MLP for the experts').
  Scenario slice = sc;
  slice.training.seq_len = sc.seq_len() / std::max(1, ly.cp);
  slice.model.moe = MoeSpec{};
  return slice;
}

MoeCpPlacement moe_cp_placement(const Scenario& sc, const Constants& c, const Layout& ly) {
  MoeCpPlacement p;
  const int gpn = sc.cluster.gpus_per_node, total = sc.total_gpus();
  const int gpus_in_node = std::max(1, std::min(gpn, total));
  Placement& pl = p.pl;
  pl.tp = links_of(c, gpn, total, ly, RankGroup::Tp);
  pl.pp = links_of(c, gpn, total, ly, RankGroup::Pp);
  pl.dp = links_of(c, gpn, total, ly, RankGroup::DpCp);
  pl.dp.cold = true;  // gradients and weights, as placement() has it
  if (pl.pp.nodes > 1) {
    pl.p2p_Bps = c.inter_node_Bps / gpus_in_node;
    pl.p2p_lat_s = c.inter_lat_s;
  } else {
    pl.p2p_Bps = c.intra_Bps;
    pl.p2p_lat_s = c.intra_lat_s;
  }
  p.cp = links_of(c, gpn, total, ly, RankGroup::Cp);
  p.ep = links_of(c, gpn, total, ly, RankGroup::Ep);
  p.edp = links_of(c, gpn, total, ly, RankGroup::ExpertDp);
  p.edp.cold = true;
  return p;
}

MicroTerms moe_cp_base_terms(const Scenario& slice, const Constants& c, const Layout& ly) {
  return micro_terms(slice, c, ly.tp, ly.mbs, ly.sp, ly.recompute);
}

MoeCpEvaluation evaluate_moe_cp(const Scenario& sc, const Constants& c, const Layout& ly,
                                StepCosts* steps) {
  const Scenario slice = moe_cp_slice(sc, ly);
  return evaluate_moe_cp(sc, slice, c, ly, moe_cp_placement(sc, c, ly), moe_cp_base_terms(slice, c, ly), steps);
}

MoeCpLayerTerms moe_cp_layer_terms(const Scenario& sc, const Constants& c, const Layout& ly,
                                   const MoeCpPlacement& place, const MicroTerms& base) {
  const int gpus_in_node = gpus_on_a_node(sc.cluster.gpus_per_node, sc.total_gpus());
  const Links& cp_links = place.cp;
  Placement pl_cp = place.pl;
  pl_cp.p2p_Bps = cp_links.nodes > 1 ? c.inter_node_Bps / gpus_in_node : c.intra_Bps;
  MoeCpTerms terms(sc, c, ly);
  MoeCpLayerTerms t;
  t.mt = base;
  terms.context(t.mt);
  terms.context_ring(pl_cp, cp_links, t.mt);
  terms.experts_mlp(t.mt);
  if (t.mt.layer_expert_params > 0) {
    // ZeRO-3 gathers the experts over their own group, whose links differ from the dense group's
    // the dense traffic is priced at (one rank a node and its own NIC, where the dense group has
    // the node's NICs): a byte of theirs costs this share of a dense byte.
    const double bytes = t.mt.layer_expert_params * c.elem_bytes;
    const double dense_s = allgather_s(place.pl.dp, bytes);
    t.mt.expert_gather_share = dense_s > 0 ? allgather_s(place.edp, bytes) / dense_s : 1.0;
  }
  terms.all_to_alls(place.ep, gpus_in_node, t.mt);
  t.expert_params_per_layer = terms.expert_params_per_layer;
  t.a2a_bytes = terms.a2a_bytes;
  t.a2a_s = terms.a2a_s;
  t.cp_block_bytes = terms.cp_block_bytes;
  t.cp_transfer_s = terms.cp_transfer_s;
  t.cp_attention_step_s = terms.cp_attention_step_s;
  t.cp_transfer_backward_s = terms.cp_transfer_backward_s;
  t.cp_attention_step_backward_s = terms.cp_attention_step_backward_s;
  return t;
}

MoeCpEvaluation evaluate_moe_cp(const Scenario& sc, const Scenario& slice, const Constants& c,
                                const Layout& ly, const MoeCpPlacement& place, const MicroTerms& base,
                                StepCosts* steps) {
  MoeCpEvaluation r;
  r.m = ly.num_microbatches(sc.training.gbs);
  const MoeCpLayerTerms terms = moe_cp_layer_terms(sc, c, ly, place, base);
  r.mt = terms.mt;
  evaluate_moe_cp(sc, slice, c, ly, place, terms, r.ev, steps);
  // What finish_estimate counts: FLOPs of a whole sequence per TP rank (cp slices of it).
  r.mt_finish = r.mt;
  r.mt_finish.layer_gemm_flops *= ly.cp;
  r.mt_finish.layer_attn_core_flops *= ly.cp;
  return r;
}

void evaluate_moe_cp(const Scenario& sc, const Scenario& slice, const Constants& c, const Layout& ly,
                     const MoeCpPlacement& place, const MoeCpLayerTerms& terms, Evaluation& ev,
                     StepCosts* steps) {
  const int64_t m = ly.num_microbatches(sc.training.gbs);
  // Dense gradients reduced (and ZeRO-sharded) over dp * cp: Megatron-Core folds cp into the
  // data-parallel group for the weights.
  Layout dense = ly;
  dense.dp = ly.dp * ly.cp;
  dense.cp = 1;
  dense.ep = 1;
  dense.order = "DPT";
  const Placement& pl = place.pl;
  const Links& edp_links = place.edp;

  evaluate(slice, c, dense, m, terms.mt, pl, ev, steps);

  // The routed experts' state on the stage that peaks, sharded over ep by construction (each rank
  // holds experts / ep) and by ZeRO over the expert data-parallel group, dp * cp / ep ranks
  // (Megatron-Core's expert optimizer): weights, gradients, optimizer state at the dense rates,
  // and the allocator margin on them.
  const double edp = terms.mt.expert_group;
  const int peak_stage = ev.memory_stage;
  const double stage_expert_params =
      terms.expert_params_per_layer * stage_blocks(sc.model, ly.pp, ly.vp, peak_stage);
  const StateBytesPerParam state = state_bytes_per_param(sc.training);
  MemoryBytes& mem = ev.mem;
  double w = stage_expert_params * state.weights / (ly.zero >= 3 ? edp : 1.0);
  const double g = stage_expert_params * c.grad_bytes / (ly.zero >= 2 ? edp : 1.0);
  // Offloaded as the dense state is (StepEvaluation::memory): the weights but those of the layers
  // in flight (none under ZeRO-3), and the optimizer state where the step runs on the host.
  double host = 0;  // per GPU
  if (sc.training.offload_params) {
    host += w;
    w = ly.zero >= 3 ? 0.0 : std::min(w, 2 * terms.expert_params_per_layer * state.weights);
  }
  const bool host_optimizer = optimizer_steps_on_host(sc.training, ly);
  const double o_state = stage_expert_params * state.optimizer / (ly.zero >= 1 ? edp : 1.0);
  const double o = host_optimizer ? 0.0 : o_state;
  if (host_optimizer) host += o_state;
  const double margin = c.allocator_margin * (w + g + o);
  mem.weights += w;
  mem.gradients += g;
  mem.optimizer += o;
  mem.buffers += margin;
  mem.total += w + g + o + margin;
  ev.fits = ev.fits && mem.total <= mem.capacity;
  if (host > 0) {  // the experts' offloaded state beside the dense state in host memory
    ev.host_bytes_per_node += host * gpus_on_a_node(sc.cluster.gpus_per_node, sc.total_gpus());
    if (ev.host_capacity_bytes > 0 && ev.host_bytes_per_node > ev.host_capacity_bytes) ev.fits = false;
  }

  // Experts' gradients: reduced over the expert data-parallel group after the backward (the
  // critical stage's experts), exposed in full (over-counts where the framework overlaps it with
  // the backward); their optimizer step at the dense step's rate per parameter.
  const double crit_expert_params =
      terms.expert_params_per_layer *
      std::max(stage_blocks(sc.model, ly.pp, ly.vp, 0), stage_blocks(sc.model, ly.pp, ly.vp, ly.pp - 1));
  const double expert_grad_bytes = crit_expert_params * c.grad_bytes;
  double expert_dp_s = 0;
  // ZeRO-3 gathers and reduce-scatters them with their layers, in the dense traffic (cost_model.cpp
  // zero3_layer_params).
  if (edp_links.n > 1 && ly.zero < 3) {
    // ZeRO-1/2 as the dense gradients: their reduction and the updated weights' all-gather.
    expert_dp_s = ly.zero == 0 ? allreduce_s(edp_links, expert_grad_bytes)
                               : zero12_grad_reduction_s(edp_links, expert_grad_bytes, ly.zero, sc.training.framework) +
                                     allgather_s(edp_links, crit_expert_params * c.elem_bytes);
  }
  const double step_traffic =
      sc.training.optimizer == Optimizer::Sgd ? 3 * c.elem_bytes : adam_traffic_bytes(c.elem_bytes);  // as the dense step
  const double expert_opt_s = crit_expert_params / (ly.zero >= 1 ? edp : 1.0) * step_traffic / c.hbm_Bps;
  TimeBreakdown& tb = ev.time;
  tb.dp_comm += expert_dp_s;
  if (!sc.training.offload_optimizer) tb.optimizer += expert_opt_s;
  ev.step_s = tb.sum();
  if (steps) {
    steps->dp_comm_s += expert_dp_s;
    steps->dp_bytes += edp_links.n > 1 ? expert_grad_bytes : 0.0;
    steps->optimizer_s = tb.optimizer;
    steps->weights_bytes = mem.weights;
    steps->ep_alltoall_bytes = terms.a2a_bytes;
    steps->ep_alltoall_s = terms.a2a_s;
    steps->cp_block_bytes = terms.cp_block_bytes;
    // The simulator's stage stream stands for all the stage's ranks, so one rank's wait that the
    // others' work fills is not in it: its transfers are what the estimate left exposed.
    const double exposed = 1.0 - ev.cp_hidden_share;
    steps->cp_transfer_s = terms.cp_transfer_s * exposed;
    steps->cp_attention_step_s = terms.cp_attention_step_s;
    steps->cp_transfer_backward_s = terms.cp_transfer_backward_s * exposed;
    steps->cp_attention_step_backward_s = terms.cp_attention_step_backward_s;
    steps->cp_ring_in_recompute = ly.cp > 1 && ly.recompute == Recompute::Full;
    steps->cp = ly.cp;
    const double moe_share =
        sc.model.moe.enabled() ? double(sc.model.moe.moe_layers(sc.model.trained_layers())) / sc.model.trained_layers() : 0.0;
    for (ChunkCosts& ch : steps->chunks) ch.moe_layers = int(std::lround(ch.num_layers * moe_share));
  }
}

}  // namespace capplan::detail
