// Run under mpirun by test_reduce_scatter.cpp: the CPU communicator's reduce-scatter (equal blocks
// and uneven ones, some empty; in place and into another buffer) against the sum of every rank's
// values computed here in double. Prints "rank R of N: K mismatches" and exits 1 on any.
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>

#include "planner/spec.h"
#include "train/communicator.h"

namespace {

float value(int rank, int64_t i) { return float((rank + 1) * 0.001 * double(i % 977) + rank); }

// 0 when out[0, count) holds the sums over the n ranks of elements [first, first + count).
int mismatches(const float* out, int64_t first, int64_t count, int n) {
  int bad = 0;
  for (int64_t i = 0; i < count; ++i) {
    double sum = 0;
    for (int q = 0; q < n; ++q) sum += value(q, first + i);
    if (std::fabs(out[i] - sum) > 1e-5 * std::fabs(sum) + 1e-5) ++bad;
  }
  return bad;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int bad = 0;
  {
    int size = 1;
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    capplan::Layout layout;
    layout.dp = size;
    capplan::rt::ProcessGroups g = capplan::rt::make_process_groups(layout);
    capplan::rt::Communicator& dp = *g.dp;
    const int r = dp.rank(), n = dp.size();
    for (const int64_t count : {int64_t(0), int64_t(1), int64_t(7), int64_t(100000)}) {
      std::vector<float> in(static_cast<size_t>(count * n)), out(static_cast<size_t>(std::max<int64_t>(count, 1)));
      for (int64_t i = 0; i < count * n; ++i) in[size_t(i)] = value(r, i);
      dp.reduce_scatter_sum(in.data(), out.data(), count);
      bad += mismatches(out.data(), r * count, count, n);
      dp.reduce_scatter_sum(in.data(), in.data(), count);  // in place: the same bits
      for (int64_t i = 0; i < count; ++i) bad += in[size_t(i)] != out[size_t(i)];
    }
    for (int trial = 0; trial < 4; ++trial) {
      std::vector<int64_t> counts(static_cast<size_t>(n));
      int64_t total = 0, first = 0;
      for (int q = 0; q < n; ++q) {
        counts[size_t(q)] = (q * 37 + trial * 11) % 5 == 0 ? 0 : (q * 131 + trial * 17) % 3000;
        if (q < r) first += counts[size_t(q)];
        total += counts[size_t(q)];
      }
      std::vector<float> in(static_cast<size_t>(std::max<int64_t>(total, 1)));
      for (int64_t i = 0; i < total; ++i) in[size_t(i)] = value(r, i);
      const std::vector<float> copy = in;
      std::vector<float> out(static_cast<size_t>(std::max<int64_t>(counts[size_t(r)], 1)));
      dp.reduce_scatter_sum_v(copy.data(), out.data(), counts);
      bad += mismatches(out.data(), first, counts[size_t(r)], n);
      dp.reduce_scatter_sum_v(in.data(), in.data(), counts);  // in place
      for (int64_t i = 0; i < counts[size_t(r)]; ++i) bad += in[size_t(i)] != out[size_t(i)];
      // An element's sum has the same bits in the uneven form as in the equal-block one when it
      // belongs to the same rank: the order of the ranks' terms depends only on its owner.
    }
    std::printf("rank %d of %d: %d mismatches\n", r, n, bad);
  }
  MPI_Finalize();
  return bad == 0 ? 0 : 1;
}
