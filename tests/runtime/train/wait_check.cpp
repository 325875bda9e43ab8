// Run under mpirun (2 ranks) by test_pipeline_wait.cpp: rank 0 sleeps 300 ms, then sends 1 Mi
// floats to rank 1 over the pp group; rank 1 waits for them with probe + recv, as a pipeline stage
// waits for its neighbour, and measures the wall and CPU time of its wait. With argument "shared"
// both ranks first bind themselves to one core (a host with more ranks than cores). Prints
// "rank 1: waited W ms, cpu C ms, K mismatches" and exits 1 on a mismatch.
#include <mpi.h>
#include <sched.h>
#include <time.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <thread>
#include <vector>

#include "planner/spec.h"
#include "train/communicator.h"

namespace {

double thread_cpu_s() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return double(t.tv_sec) + 1e-9 * double(t.tv_nsec);
}

// Binds this process to the first core of its affinity mask.
void bind_to_first_core() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return;
  for (int c = 0; c < CPU_SETSIZE; ++c) {
    if (!CPU_ISSET(c, &set)) continue;
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(c, &one);
    sched_setaffinity(0, sizeof(one), &one);
    return;
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1 && std::strcmp(argv[1], "shared") == 0) bind_to_first_core();
  MPI_Init(&argc, &argv);
  int bad = 0;
  {
    capplan::Layout layout;
    layout.pp = 2;
    capplan::rt::ProcessGroups g = capplan::rt::make_process_groups(layout);
    capplan::rt::Communicator& pp = *g.pp;
    const int64_t n = int64_t(1) << 20;
    std::vector<float> buf(static_cast<size_t>(n));
    if (pp.rank() == 0) {
      for (int64_t i = 0; i < n; ++i) buf[size_t(i)] = float(i % 1009);
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
      pp.send_async(buf.data(), n, 1, 5);
      pp.wait_sends();
    } else {
      const auto t0 = std::chrono::steady_clock::now();
      const double c0 = thread_cpu_s();
      pp.probe(0, 5);
      pp.recv(buf.data(), n, 0, 5);
      const double cpu = thread_cpu_s() - c0;
      const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      for (int64_t i = 0; i < n; ++i) bad += buf[size_t(i)] != float(i % 1009);
      std::printf("rank 1: waited %.1f ms, cpu %.1f ms, %d mismatches\n", wall * 1e3, cpu * 1e3, bad);
      std::fflush(stdout);
    }
  }
  MPI_Finalize();
  return bad == 0 ? 0 : 1;
}
