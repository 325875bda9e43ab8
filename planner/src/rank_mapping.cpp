// Rank <-> (dp, pp, tp, cp, ep) coordinates for a placement order (see planner/rank_mapping.h).
#include "planner/rank_mapping.h"

#include <algorithm>
#include <numeric>

namespace capplan {
namespace {

// Position along each letter of the full order.
struct LetterCoords {
  int d = 0, p = 0, t = 0, c = 0, e = 0;
};

struct Split {
  int e_d = 1, e_c = 1;  // the dp and cp factors of ep
};

Split expert_split(const Layout& l) {
  Split s;
  const int ep = std::max(1, l.ep);
  s.e_d = std::gcd(ep, std::max(1, l.dp));
  s.e_c = std::max(1, ep / s.e_d);
  return s;
}

int letter_size(char axis, const Layout& l, const Split& s) {
  switch (axis) {
    case 'D': return std::max(1, l.dp / s.e_d);
    case 'P': return l.pp;
    case 'T': return l.tp;
    case 'C': return std::max(1, l.cp / s.e_c);
    case 'E': return s.e_d * s.e_c;
  }
  return 1;
}

int& letter_ref(char axis, LetterCoords& c) {
  switch (axis) {
    case 'D': return c.d;
    case 'P': return c.p;
    case 'T': return c.t;
    case 'C': return c.c;
    default: return c.e;
  }
}

LetterCoords to_letters(const RankCoords& rc, const Split& s) {
  LetterCoords c;
  c.d = rc.dp / s.e_d;
  c.c = rc.cp / s.e_c;
  c.e = (rc.dp % s.e_d) * s.e_c + rc.cp % s.e_c;
  c.p = rc.pp;
  c.t = rc.tp;
  return c;
}

RankCoords from_letters(const LetterCoords& c, const Split& s) {
  RankCoords rc;
  rc.dp = c.d * s.e_d + c.e / s.e_c;
  rc.cp = c.c * s.e_c + c.e % s.e_c;
  rc.ep = c.e;
  rc.pp = c.p;
  rc.tp = c.t;
  return rc;
}

}  // namespace

std::string full_order(const std::string& order) {
  std::string o = order;
  if (o.find('E') == std::string::npos) {
    const auto d = o.find('D');
    o.insert(d == std::string::npos ? o.size() : d + 1, 1, 'E');
  }
  if (o.find('C') == std::string::npos) {
    const auto t = o.find('T');
    o.insert(t == std::string::npos ? o.size() : t, 1, 'C');
  }
  return o;
}

RankCoords rank_to_coords(int rank, const Layout& layout) {
  const Split s = expert_split(layout);
  const std::string o = full_order(layout.order);
  LetterCoords c;
  for (int i = int(o.size()) - 1; i >= 0; --i) {
    const char axis = o[size_t(i)];
    const int n = letter_size(axis, layout, s);
    letter_ref(axis, c) = rank % n;
    rank /= n;
  }
  return from_letters(c, s);
}

int coords_to_rank(const RankCoords& coords, const Layout& layout) {
  const Split s = expert_split(layout);
  LetterCoords c = to_letters(coords, s);
  int rank = 0;
  for (char axis : full_order(layout.order))
    rank = rank * letter_size(axis, layout, s) + letter_ref(axis, c);
  return rank;
}

AxisStrides axis_strides(const Layout& layout) {
  const Split s = expert_split(layout);
  const std::string o = full_order(layout.order);
  AxisStrides st;
  int stride = 1;
  for (int i = int(o.size()) - 1; i >= 0; --i) {
    const char axis = o[size_t(i)];
    switch (axis) {
      case 'D': st.dp = stride; break;
      case 'P': st.pp = stride; break;
      case 'T': st.tp = stride; break;
      case 'C': st.cp = stride; break;
      case 'E': st.ep = stride; break;
    }
    stride *= letter_size(axis, layout, s);
  }
  return st;
}

std::vector<int> group_ranks(int rank, const Layout& layout, RankGroup group) {
  const RankCoords me = rank_to_coords(rank, layout);
  const Split s = expert_split(layout);
  std::vector<int> out;
  RankCoords c = me;
  switch (group) {
    case RankGroup::Dp:
      for (c.dp = 0; c.dp < layout.dp; ++c.dp) out.push_back(coords_to_rank(c, layout));
      break;
    case RankGroup::Tp:
      for (c.tp = 0; c.tp < layout.tp; ++c.tp) out.push_back(coords_to_rank(c, layout));
      break;
    case RankGroup::Pp:
      for (c.pp = 0; c.pp < layout.pp; ++c.pp) out.push_back(coords_to_rank(c, layout));
      break;
    case RankGroup::Cp:
      for (c.cp = 0; c.cp < layout.cp; ++c.cp) out.push_back(coords_to_rank(c, layout));
      break;
    case RankGroup::DpCp:
      for (c.dp = 0; c.dp < layout.dp; ++c.dp)
        for (c.cp = 0; c.cp < layout.cp; ++c.cp) out.push_back(coords_to_rank(c, layout));
      break;
    case RankGroup::Ep: {
      LetterCoords l = to_letters(me, s);
      for (l.e = 0; l.e < s.e_d * s.e_c; ++l.e) out.push_back(coords_to_rank(from_letters(l, s), layout));
      break;
    }
    case RankGroup::ExpertDp: {
      LetterCoords l = to_letters(me, s);
      const int nd = std::max(1, layout.dp / s.e_d), nc = std::max(1, layout.cp / s.e_c);
      for (l.d = 0; l.d < nd; ++l.d)
        for (l.c = 0; l.c < nc; ++l.c) out.push_back(coords_to_rank(from_letters(l, s), layout));
      break;
    }
  }
  return out;
}

}  // namespace capplan
