// The collectives of capplan-train's ZeRO-2 and ZeRO-3 on one unit of the flat parameter buffer
// (a layer) that lies inside one rank's shard, beside the even collectives the cost model prices
// them with under a device profile (cost_model.cpp, runtime_sharded_dp): an even collective of
// dp times the unit's largest part, and, for the gather, a copy of that part across, or, where the
// profile timed the runtime's own gather (all-gather-v), that even gather out of place. Through the
// runtime's own CPU communicator, on buffers from memory (a sweep of the last-level cache before
// each call), the modes alternating; prints the median of each. Then an in-place 4 MiB all-gather
// on fresh buffers, on each one's first and second use. Asserts nothing.
// Usage: mpirun -np 2 bench_unit_collectives [ELEMENTS] [ROUNDS]
//   ELEMENTS: the unit's size (default 787456, a layer of the 4-layer, 256-wide model of
//   tests/bench/bench_local_fidelity.sh); ROUNDS: default 15.
#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "planner/spec.h"
#include "train/communicator.h"

namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  {
    int size = 1;
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    const int64_t n = argc > 1 ? std::max<int64_t>(1, std::atoll(argv[1])) : 787456;
    const int rounds = argc > 2 ? std::max(1, std::atoi(argv[2])) : 15;
    capplan::Layout layout;
    layout.dp = size;
    capplan::rt::ProcessGroups g = capplan::rt::make_process_groups(layout);
    capplan::rt::Communicator& dp = *g.dp;
    const int r = dp.rank(), p = dp.size();
    if (p < 2) {
      if (r == 0) std::fprintf(stderr, "bench_unit_collectives: run it under mpirun -np 2 (or more)\n");
      MPI_Finalize();
      return 2;
    }
    // The unit held by rank 0 alone: counts {n, 0, ...}.
    std::vector<int64_t> counts(size_t(p), 0);
    counts[0] = n;
    std::vector<float> shard(size_t(n), 1.0f), layer(size_t(n), 0.0f), bucket(size_t(n), 1.0f);
    std::vector<float> even(size_t(p * n), 1.0f), copy_to(size_t(n), 0.0f), even_src(size_t(n), 1.0f);
    const std::vector<int64_t> even_counts(size_t(p), n);  // the profile's all-gather-v, out of place
    std::vector<float> sweep(size_t(16) << 20, 1.0f);  // 64 MiB: past the last-level cache
    volatile float sink = 0;
    auto cold = [&] {
      float s = 0;
      for (size_t i = 0; i < sweep.size(); i += 16) s += sweep[i];
      sink = sink + s;
    };
    struct Mode {
      const char* name;
      std::function<void()> call;
      std::vector<double> ms;
    };
    std::vector<Mode> modes = {
        {"ZeRO-3 gather of the unit (all_gather_v, out of place)",
         [&] { dp.all_gather_v(shard.data(), layer.data(), counts); }, {}},
        {"  priced as: even all-gather of dp x unit, in place",
         [&] { dp.all_gather(even.data() + int64_t(r) * n, even.data(), n); }, {}},
        {"  + copy of the unit across (rank 0)",
         [&] {
           if (r == 0) std::memcpy(copy_to.data(), shard.data(), size_t(n) * sizeof(float));
         },
         {}},
        {"  or, where the profile timed it: even all_gather_v of dp x unit",
         [&] { dp.all_gather_v(even_src.data(), even.data(), even_counts); }, {}},
        {"ZeRO-2/3 reduction of the unit (reduce_scatter_sum_v, in place)",
         [&] { dp.reduce_scatter_sum_v(bucket.data(), bucket.data(), counts); }, {}},
        {"  priced as: even reduce-scatter of dp x unit",
         [&] { dp.reduce_scatter_sum(even.data(), even.data(), n); }, {}},
    };
    for (int k = 0; k <= rounds; ++k)
      for (Mode& m : modes) {
        cold();
        dp.barrier();
        const double t0 = MPI_Wtime();
        m.call();
        double dt = MPI_Wtime() - t0;
        MPI_Allreduce(MPI_IN_PLACE, &dt, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);  // the slowest rank
        if (k > 0) m.ms.push_back(dt * 1e3);  // round 0 warms up
      }
    if (r == 0) {
      std::printf("unit of %lld floats (%.2f MB) held by rank 0 of %d; medians over %d rounds, from memory:\n",
                  (long long)n, double(n) * 4 / 1e6, p, rounds);
      for (const Mode& m : modes) std::printf("  %-66s %8.3f ms\n", m.name, median(m.ms));
    }
    // Why the device profile puts each copy of a collective's buffer through the call once before
    // timing it: the in-place all-gather of one 4 MiB buffer on each of 8 fresh copies, each
    // timed on its first and on its second use (capplan-train reuses its buffers every step).
    const int64_t per = (int64_t(1) << 20) / p * p;  // 4 MiB of floats, divisible by the ranks
    std::vector<std::vector<float>> copies(8, std::vector<float>(size_t(per), 1.0f));
    std::vector<double> first, second;
    for (int use = 0; use < 2; ++use)
      for (std::vector<float>& c : copies) {
        dp.barrier();
        const double t0 = MPI_Wtime();
        dp.all_gather(c.data() + int64_t(r) * (per / p), c.data(), per / p);
        double dt = MPI_Wtime() - t0;
        MPI_Allreduce(MPI_IN_PLACE, &dt, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
        (use == 0 ? first : second).push_back(dt * 1e3);
      }
    if (r == 0)
      std::printf("in-place all-gather of %.1f MB, 8 fresh buffers, medians: first use %.3f ms, second use %.3f ms\n",
                  double(per) * 4 / 1e6, median(first), median(second));
  }
  MPI_Finalize();
  return 0;
}
