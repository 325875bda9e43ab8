// Rank <-> (dp, pp, tp) coordinates for a placement order (see planner/rank_mapping.h).
#include "planner/rank_mapping.h"

namespace capplan {
namespace {

int axis_size(char axis, const Layout& l) { return axis == 'D' ? l.dp : axis == 'P' ? l.pp : l.tp; }

template <class Coords>
auto& axis_ref(char axis, Coords& c) {
  return axis == 'D' ? c.dp : axis == 'P' ? c.pp : c.tp;
}

}  // namespace

RankCoords rank_to_coords(int rank, const Layout& layout) {
  RankCoords c;
  for (int i = int(layout.order.size()) - 1; i >= 0; --i) {
    const char axis = layout.order[size_t(i)];
    const int n = axis_size(axis, layout);
    axis_ref(axis, c) = rank % n;
    rank /= n;
  }
  return c;
}

int coords_to_rank(const RankCoords& coords, const Layout& layout) {
  RankCoords c = coords;
  int rank = 0;
  for (char axis : layout.order) rank = rank * axis_size(axis, layout) + axis_ref(axis, c);
  return rank;
}

AxisStrides axis_strides(const Layout& layout) {
  AxisStrides s;
  int stride = 1;
  for (int i = int(layout.order.size()) - 1; i >= 0; --i) {
    const char axis = layout.order[size_t(i)];
    axis_ref(axis, s) = stride;
    stride *= axis_size(axis, layout);
  }
  return s;
}

}  // namespace capplan
