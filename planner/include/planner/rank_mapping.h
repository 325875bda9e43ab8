// Where each rank sits in a layout, the one mapping the cost model, the simulator and the trainer
// share: ranks are numbered in mixed radix over the axes of the full order (D, P, T, C, E in the
// layout's order), the right-most letter varying fastest, so "DPT" puts the tp ranks of a group
// next to each other. It does not create communicators (runtime/train does, from these groups).
//
// The expert axis E lives inside the dp*cp group (Megatron-Core): E has ep members, made of
// e_d = gcd(ep, dp) data-parallel and e_c = ep / e_d context-parallel positions (e_c divides cp
// whenever ep divides dp*cp), the context part varying fastest inside E; the D letter then
// counts dp / e_d positions and the C letter cp / e_c. With ep = 1 and cp = 1 the ranks are those
// of the three-letter order.
#pragma once

#include <string>
#include <vector>

#include "planner/spec.h"

namespace capplan {

struct RankCoords {
  int dp = 0, pp = 0, tp = 0;  // 0-based position along each axis
  int cp = 0;                  // position in the context-parallel group
  int ep = 0;                  // position in the expert-parallel group (derived from dp and cp)
};

// The layout's order with the letters it leaves out put in: a missing E right of D, a missing C
// left of T ("DPT" -> "DEPCT", Megatron's "PDT" -> "PDECT" = its tp-cp-ep-dp-pp).
std::string full_order(const std::string& order);

RankCoords rank_to_coords(int rank, const Layout& layout);
int coords_to_rank(const RankCoords& coords, const Layout& layout);  // coords.ep is ignored

// How far apart consecutive members of each axis's groups are, in ranks (the right-most axis of
// `order` has stride 1). dp's stride is that of the D letter: with ep > 1 a dp group is not one
// stride (use group_ranks).
struct AxisStrides {
  int dp = 1, pp = 1, tp = 1;
  int cp = 1;  // of the C letter (with ep > 1: of the context positions outside E)
  int ep = 1;  // of the E letter
};
AxisStrides axis_strides(const Layout& layout);

// The groups a rank communicates in, their members listed in group order (the group's own
// coordinate ascending).
enum class RankGroup {
  Dp,        // same pp, tp, cp: the data-parallel replicas of one context slice
  Tp,        // same dp, pp, cp
  Pp,        // same dp, tp, cp
  Cp,        // same dp, pp, tp: the ring of one sequence's chunks
  Ep,        // the ep ranks that hold one layer's experts between them
  DpCp,      // same pp, tp: where dense gradients are reduced (dp * cp members)
  ExpertDp,  // same pp, tp and expert position: where expert gradients are reduced (dp*cp/ep)
};
std::vector<int> group_ranks(int rank, const Layout& layout, RankGroup group);

}  // namespace capplan
