// Where each rank sits in a layout, the one mapping the cost model, the simulator and the trainer
// share: ranks are numbered in mixed radix over the axes of `order` (a permutation of D, P, T),
// the right-most letter varying fastest, so "DPT" puts the tp ranks of a group next to each other.
#pragma once

#include "planner/spec.h"

namespace capplan {

struct RankCoords {
  int dp = 0, pp = 0, tp = 0;  // 0-based position along each axis
};

RankCoords rank_to_coords(int rank, const Layout& layout);
int coords_to_rank(const RankCoords& coords, const Layout& layout);

// How far apart consecutive members of each axis's groups are, in ranks (the right-most axis of
// `order` has stride 1).
struct AxisStrides {
  int dp = 1, pp = 1, tp = 1;
};
AxisStrides axis_strides(const Layout& layout);

}  // namespace capplan
