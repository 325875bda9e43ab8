// MPI communicators and process-group construction. Counts are passed to MPI in chunks of at most
// 2^30 elements so tensors beyond int range work with the MPI-3 int count API.
#include "train/communicator.h"

#include <mpi.h>

#include <sched.h>
#include <stdlib.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>
#include <new>
#include <stdexcept>
#include <thread>
#include <vector>

#include "planner/stats.h"

namespace capplan::rt {
namespace {

constexpr int64_t kChunk = int64_t(1) << 30;

// A rank of a host with more ranks than cores waits for a point-to-point message by polling
// `done` with a nap between polls: 50 us (with the kernel's timer slack, 50-100 us; a poll costs
// ~10 us, so the waiting rank takes ~20 % of a core instead of all of what the scheduler gives
// it, even yielding), leaving its core to the ranks that compute. A receive whose message is
// already there (a pipeline stage's, after its probe) first polls for up to `spin`: Open MPI
// completes it within a few polls (the shared-memory transport reads the message from the
// sender's memory), and a rank that naps in the middle of it waits for a core the others hold,
// up to a scheduler slice (6 ms among 4 ranks on 2 cores, measured: single receives of a 256 KB
// activation took up to 7.6 ms with the nap, at most 0.21 ms with the polls first).
template <class Poll>
void nap_until(Poll done, std::chrono::microseconds spin = std::chrono::microseconds(0)) {
  const auto spin_end = std::chrono::steady_clock::now() + spin;
  do {
    if (done()) return;
  } while (std::chrono::steady_clock::now() < spin_end);
  while (!done()) std::this_thread::sleep_for(std::chrono::microseconds(50));
}

// The CPUs this process may run on (its affinity mask), or every CPU the machine reports where
// the mask cannot be read.
cpu_set_t own_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) != 0)
    for (unsigned c = 0; c < std::max(1u, std::thread::hardware_concurrency()) && c < CPU_SETSIZE; ++c)
      CPU_SET(c, &set);
  return set;
}

// The cores the ranks of a node may run on together: the union of their affinity masks. A rank
// that mpirun bound to a core sees only that core in cpus_available() (Open MPI binds each of up
// to two ranks to a core of its own by default), so the node's ranks outnumber their cores only
// when they outnumber this.
int node_cpus(MPI_Comm node) {
  cpu_set_t set = own_cpus();
  MPI_Allreduce(MPI_IN_PLACE, &set, int(sizeof(set)), MPI_BYTE, MPI_BOR, node);
  return std::max(1, CPU_COUNT(&set));
}

// How long a receive polls before it naps (nap_until).
constexpr std::chrono::microseconds kReceiveSpin(200);

// Adds the seconds from its construction to its destruction to `total`.
class CallTimer {
 public:
  explicit CallTimer(double& total) : total_(total), t0_(std::chrono::steady_clock::now()) {}
  ~CallTimer() { total_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count(); }
  CallTimer(const CallTimer&) = delete;
  CallTimer& operator=(const CallTimer&) = delete;

 private:
  double& total_;
  std::chrono::steady_clock::time_point t0_;
};

class SelfCommunicator final : public Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  void all_reduce_sum(float*, int64_t) override {}
  void all_reduce_sum(double*, int64_t) override {}
  void all_reduce_max(float*, int64_t) override {}
  void all_reduce_min(int64_t*, int64_t) override {}
  void reduce_scatter_sum(const float* send, float* recv, int64_t count) override {
    if (send != recv) std::memmove(recv, send, size_t(count) * sizeof(float));
  }
  void all_gather(const float* send, float* recv, int64_t count) override {
    if (send != recv) std::memmove(recv, send, size_t(count) * sizeof(float));
  }
  void all_gather(const double* send, double* recv, int64_t count) override {
    if (send != recv) std::memmove(recv, send, size_t(count) * sizeof(double));
  }
  void reduce_scatter_sum_v(const float* send, float* recv,
                            const std::vector<int64_t>& counts) override {
    if (send != recv) std::memmove(recv, send, size_t(counts.at(0)) * sizeof(float));
  }
  void all_gather_v(const float* send, float* recv, const std::vector<int64_t>& counts) override {
    if (send != recv) std::memmove(recv, send, size_t(counts.at(0)) * sizeof(float));
  }
  void all_to_all(const int64_t* send, int64_t* recv, int64_t count) override {
    if (send != recv) std::memmove(recv, send, size_t(count) * sizeof(int64_t));
  }
  void all_to_all_v(const float* send, const std::vector<int64_t>& send_counts, float* recv,
                    const std::vector<int64_t>&) override {
    if (send != recv) std::memmove(recv, send, size_t(send_counts.at(0)) * sizeof(float));
  }
  void broadcast(float*, int64_t, int) override {}
  void send(const float*, int64_t, int, int) override {
    throw std::logic_error("send on a single-rank communicator");
  }
  void recv(float*, int64_t, int, int) override {
    throw std::logic_error("recv on a single-rank communicator");
  }
  void probe(int, int) override { throw std::logic_error("probe on a single-rank communicator"); }
  void send_async(const float*, int64_t, int, int) override {
    throw std::logic_error("send on a single-rank communicator");
  }
  void wait_sends() override {}
  void barrier() override {}
  double comm_seconds() const override { return 0; }
};

class MpiCommunicator final : public Communicator {
 public:
  // nap_waits: this host runs more ranks than cores (make_process_groups); point-to-point waits
  // then nap between polls (nap_until) instead of polling inside MPI.
  MpiCommunicator(MPI_Comm comm, bool nap_waits) : comm_(comm), nap_waits_(nap_waits) {
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &size_);
  }
  ~MpiCommunicator() override {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized && comm_ != MPI_COMM_WORLD) MPI_Comm_free(&comm_);
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }

  void all_reduce_sum(float* data, int64_t n) override { all_reduce(data, n, MPI_FLOAT, MPI_SUM); }
  void all_reduce_sum(double* data, int64_t n) override {
    all_reduce(data, n, MPI_DOUBLE, MPI_SUM);
  }
  void all_reduce_max(float* data, int64_t n) override { all_reduce(data, n, MPI_FLOAT, MPI_MAX); }
  void all_reduce_min(int64_t* data, int64_t n) override {
    all_reduce(data, n, MPI_INT64_T, MPI_MIN);
  }
  void reduce_scatter_sum(const float* send, float* recv, int64_t count) override {
    if (size_ == 1) {
      if (send != recv) std::memmove(recv, send, size_t(count) * sizeof(float));
      return;
    }
    CallTimer timer(comm_s_);
    // In place: the input is recv's size() blocks and this rank's sum lands at its start.
    ring_reduce_scatter(send, recv, std::vector<int64_t>(size_t(size_), count));
  }
  void all_gather(const float* send, float* recv, int64_t count) override {
    gather(send, recv, count, MPI_FLOAT, sizeof(float));
  }
  void all_gather(const double* send, double* recv, int64_t count) override {
    gather(send, recv, count, MPI_DOUBLE, sizeof(double));
  }
  void reduce_scatter_sum_v(const float* send, float* recv,
                            const std::vector<int64_t>& counts) override {
    const std::vector<int> c = int_counts(counts);
    if (size_ == 1) {
      if (send != recv) std::memmove(recv, send, size_t(c[0]) * sizeof(float));
      return;
    }
    // In place: this rank's block of the sum lands at the start of the buffer.
    CallTimer timer(comm_s_);
    ring_reduce_scatter(send, recv, counts);
  }
  void all_gather_v(const float* send, float* recv, const std::vector<int64_t>& counts) override {
    const std::vector<int> c = int_counts(counts);
    if (size_ == 1) {
      if (send != recv) std::memmove(recv, send, size_t(c[0]) * sizeof(float));
      return;
    }
    std::vector<int> displs(c.size(), 0);
    for (size_t r = 1; r < c.size(); ++r) displs[r] = displs[r - 1] + c[r - 1];
    CallTimer timer(comm_s_);
    MPI_Allgatherv(send, c[size_t(rank_)], MPI_FLOAT, recv, c.data(), displs.data(), MPI_FLOAT,
                   comm_);
  }
  void all_to_all(const int64_t* send, int64_t* recv, int64_t count) override {
    if (count > kChunk) throw std::length_error("all_to_all: block too large");
    MPI_Alltoall(send, int(count), MPI_INT64_T, recv, int(count), MPI_INT64_T, comm_);
  }
  void all_to_all_v(const float* send, const std::vector<int64_t>& send_counts, float* recv,
                    const std::vector<int64_t>& recv_counts) override {
    const std::vector<int> sc = int_counts(send_counts), rc = int_counts(recv_counts);
    std::vector<int> sd(sc.size(), 0), rd(rc.size(), 0);
    for (size_t r = 1; r < sc.size(); ++r) {
      sd[r] = sd[r - 1] + sc[r - 1];
      rd[r] = rd[r - 1] + rc[r - 1];
    }
    MPI_Alltoallv(send, sc.data(), sd.data(), MPI_FLOAT, recv, rc.data(), rd.data(), MPI_FLOAT,
                  comm_);
  }
  void broadcast(float* data, int64_t n, int root) override {
    CallTimer timer(comm_s_);
    for (int64_t off = 0; off < n; off += kChunk)
      MPI_Bcast(data + off, int(std::min(kChunk, n - off)), MPI_FLOAT, root, comm_);
  }
  void send(const float* data, int64_t n, int peer, int tag) override {
    CallTimer timer(comm_s_);
    for (int64_t off = 0; off < n; off += kChunk)
      MPI_Send(data + off, int(std::min(kChunk, n - off)), MPI_FLOAT, peer, tag, comm_);
  }
  void recv(float* data, int64_t n, int peer, int tag) override {
    CallTimer timer(comm_s_);
    for (int64_t off = 0; off < n; off += kChunk) {
      MPI_Request req;
      MPI_Irecv(data + off, int(std::min(kChunk, n - off)), MPI_FLOAT, peer, tag, comm_, &req);
      wait(&req, kReceiveSpin);
    }
  }
  void probe(int peer, int tag) override {
    CallTimer timer(comm_s_);
    if (!nap_waits_) {
      MPI_Probe(peer, tag, comm_, MPI_STATUS_IGNORE);
      return;
    }
    nap_until([&] {
      int found = 0;
      MPI_Iprobe(peer, tag, comm_, &found, MPI_STATUS_IGNORE);
      return found != 0;
    });
  }
  void send_async(const float* data, int64_t n, int peer, int tag) override {
    CallTimer timer(comm_s_);
    for (int64_t off = 0; off < n; off += kChunk) {
      requests_.emplace_back();
      MPI_Isend(data + off, int(std::min(kChunk, n - off)), MPI_FLOAT, peer, tag, comm_,
                &requests_.back());
    }
  }
  void wait_sends() override {
    if (requests_.empty()) return;
    CallTimer timer(comm_s_);
    for (MPI_Request& r : requests_) wait(&r);
    requests_.clear();
  }
  void barrier() override {
    CallTimer timer(comm_s_);
    MPI_Barrier(comm_);
  }
  double comm_seconds() const override { return comm_s_; }

 private:
  // A point-to-point request: MPI_Wait on a core of its own, else nap_until.
  void wait(MPI_Request* req, std::chrono::microseconds spin = std::chrono::microseconds(0)) {
    if (!nap_waits_) {
      MPI_Wait(req, MPI_STATUS_IGNORE);
      return;
    }
    nap_until(
        [&] {
          int done = 0;
          MPI_Test(req, &done, MPI_STATUS_IGNORE);
          return done != 0;
        },
        spin);
  }

  // Ring reduce-scatter (Patarasuk & Yuan 2009, the reduce-scatter half of the ring all-reduce):
  // size() - 1 steps; at step k this rank sends its partial sum of block (r - k - 1) mod n to its
  // right neighbour, receives block (r - k - 2) mod n's from its left and adds its own part. Each
  // rank moves (n - 1) / n of the buffer, and block c is summed in the fixed order of ranks c + 1,
  // c + 2, ..., c, whatever the blocks' sizes: the equal-block and the uneven (ZeRO-2/3 bucket)
  // forms give the same bits for the same elements. (Open MPI's shared-memory
  // MPI_Reduce_scatter_block moved a 16 MiB buffer between 2 ranks at a third of its all-reduce's
  // rate on a 2-core host.) The input is read before the result is written, so send == recv works.
  void ring_reduce_scatter(const float* send, float* recv, const std::vector<int64_t>& counts) {
    const int n = size_, r = rank_;
    std::vector<int64_t> off(size_t(n) + 1, 0);
    int64_t most = 0;
    for (int i = 0; i < n; ++i) {
      off[size_t(i) + 1] = off[size_t(i)] + counts[size_t(i)];
      most = std::max(most, counts[size_t(i)]);
    }
    if (int64_t(ring_a_.size()) < most) ring_a_.resize(size_t(most)), ring_b_.resize(size_t(most));
    const int right = (r + 1) % n, left = (r + n - 1) % n;
    float* partial = ring_a_.data();
    float* incoming = ring_b_.data();
    for (int k = 0; k < n - 1; ++k) {
      const int out = ((r - k - 1) % n + n) % n, in = ((r - k - 2) % n + n) % n;
      const float* sbuf = k == 0 ? send + off[size_t(out)] : partial;
      const int64_t ns = counts[size_t(out)], nr = counts[size_t(in)];
      // One exchange per step even of empty blocks (a neighbour's other block may not be), in
      // pieces of at most kChunk.
      int64_t o = 0;
      do {
        MPI_Sendrecv(sbuf + std::min(o, ns), int(std::clamp<int64_t>(ns - o, 0, kChunk)), MPI_FLOAT, right, kRingTag,
                     incoming + std::min(o, nr), int(std::clamp<int64_t>(nr - o, 0, kChunk)), MPI_FLOAT, left,
                     kRingTag, comm_, MPI_STATUS_IGNORE);
        o += kChunk;
      } while (o < std::max(ns, nr));
      const float* own = send + off[size_t(in)];
      for (int64_t i = 0; i < nr; ++i) incoming[i] += own[i];
      std::swap(partial, incoming);
    }
    if (counts[size_t(r)] > 0) std::memcpy(recv, partial, size_t(counts[size_t(r)]) * sizeof(float));
  }

  template <class T>
  void all_reduce(T* data, int64_t n, MPI_Datatype type, MPI_Op op) {
    if (size_ == 1) return;
    CallTimer timer(comm_s_);
    for (int64_t off = 0; off < n; off += kChunk)
      MPI_Allreduce(MPI_IN_PLACE, data + off, int(std::min(kChunk, n - off)), type, op, comm_);
  }
  void gather(const void* send, void* recv, int64_t count, MPI_Datatype type, size_t elem) {
    if (size_ == 1) {
      if (send != recv) std::memmove(recv, send, size_t(count) * elem);
      return;
    }
    if (count > kChunk) throw std::length_error("all_gather: block too large");
    CallTimer timer(comm_s_);
    const bool in_place =
        static_cast<const char*>(send) == static_cast<char*>(recv) + size_t(rank_) * count * elem;
    MPI_Allgather(in_place ? MPI_IN_PLACE : send, int(count), type, recv, int(count), type, comm_);
  }
  std::vector<int> int_counts(const std::vector<int64_t>& counts) const {
    if (int(counts.size()) != size_) throw std::invalid_argument("one count per rank expected");
    int64_t total = 0;
    for (int64_t n : counts) total += n;
    if (total > kChunk) throw std::length_error("variable-count collective: too large");
    return std::vector<int>(counts.begin(), counts.end());
  }
  MPI_Comm comm_;
  int rank_ = 0, size_ = 1;
  bool nap_waits_ = false;
  std::vector<MPI_Request> requests_;
  std::vector<float> ring_a_, ring_b_;  // ring_reduce_scatter's two block buffers, kept for reuse
  static constexpr int kRingTag = 7001;  // below every MPI_TAG_UB (at least 32767)
  double comm_s_ = 0;  // seconds inside the calls above (groups of more than one rank)
};

}  // namespace

std::unique_ptr<Communicator> make_self_communicator() {
  return std::make_unique<SelfCommunicator>();
}

ProcessGroups make_process_groups(const Layout& layout) {
  ProcessGroups g;
  const int rank = world_rank();
  g.coords = rank_to_coords(rank, layout);
  MPI_Comm local;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &local);
  MPI_Comm_rank(local, &g.local_rank);
  MPI_Comm_size(local, &g.local_size);
  const bool nap_waits = g.local_size > node_cpus(local);
  MPI_Comm_free(&local);
  g.world = std::make_unique<MpiCommunicator>(MPI_COMM_WORLD, nap_waits);
  const RankCoords& c = g.coords;
  auto split = [&](int color, int key) {
    MPI_Comm comm;
    MPI_Comm_split(MPI_COMM_WORLD, color, key, &comm);
    return std::make_unique<MpiCommunicator>(comm, nap_waits);
  };
  // Colour = the group's smallest member (groups of one kind partition the ranks); key = this
  // rank's place in the group (planner/rank_mapping.h lists the members in group order).
  auto group = [&](RankGroup kind) {
    const std::vector<int> members = group_ranks(rank, layout, kind);
    const int key = int(std::find(members.begin(), members.end(), rank) - members.begin());
    return split(*std::min_element(members.begin(), members.end()), key);
  };
  g.dp = group(RankGroup::Dp);
  g.pp = group(RankGroup::Pp);
  g.tp = group(RankGroup::Tp);
  g.cp = group(RankGroup::Cp);
  g.dp_cp = group(RankGroup::DpCp);
  g.ep = group(RankGroup::Ep);
  g.edp = group(RankGroup::ExpertDp);
  g.ep_rank = c.ep;
  return g;
}

struct CoreLatencyProbe::State {
  MPI_Comm node = MPI_COMM_NULL;
  MPI_Win win = MPI_WIN_NULL;
  std::atomic<int64_t>* line = nullptr;  // in the window of the node's first rank
  int local_rank = 0;
  bool active = false;  // the node has two ranks or more, each with a core
  int64_t seq = 0;      // the line's last value; both ranks step it alike
};

CoreLatencyProbe::CoreLatencyProbe() : s_(std::make_unique<State>()) {
  State& s = *s_;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, world_rank(), MPI_INFO_NULL, &s.node);
  int size = 1;
  MPI_Comm_rank(s.node, &s.local_rank);
  MPI_Comm_size(s.node, &size);
  s.active = size >= 2 && size <= node_cpus(s.node);
  if (!s.active) return;
  // One cache line of its own: the window is a page, the line its first 64 bytes.
  void* base = nullptr;
  MPI_Win_allocate_shared(s.local_rank == 0 ? 4096 : 0, 1, MPI_INFO_NULL, s.node, &base, &s.win);
  MPI_Aint bytes = 0;
  int unit = 1;
  MPI_Win_shared_query(s.win, 0, &bytes, &unit, &base);
  if (s.local_rank == 0) new (base) std::atomic<int64_t>(0);
  MPI_Barrier(s.node);
  s.line = static_cast<std::atomic<int64_t>*>(base);
}

CoreLatencyProbe::~CoreLatencyProbe() {
  if (s_->win != MPI_WIN_NULL) MPI_Win_free(&s_->win);
  if (s_->node != MPI_COMM_NULL) MPI_Comm_free(&s_->node);
}

double CoreLatencyProbe::measure_ns() {
  constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
  State& s = *s_;
  MPI_Barrier(s.node);
  if (!s.active || s.local_rank > 1) return kNaN;
  std::atomic<int64_t>& line = *s.line;
  // A wait that yields now and then, should the other rank have lost its core for a moment.
  auto wait_for = [&](int64_t v) {
    for (int polls = 1; line.load(std::memory_order_acquire) != v; ++polls)
      if (polls % 4096 == 0) sched_yield();
  };
  constexpr int kBatches = 3, kRoundTrips = 100;
  std::vector<double> one_way_ns(kBatches);
  for (double& ns : one_way_ns) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < kRoundTrips; ++i, s.seq += 2) {
      if (s.local_rank == 0) {
        line.store(s.seq + 1, std::memory_order_release);
        wait_for(s.seq + 2);
      } else {
        wait_for(s.seq + 1);
        line.store(s.seq + 2, std::memory_order_release);
      }
    }
    const std::chrono::duration<double, std::nano> t = std::chrono::steady_clock::now() - t0;
    ns = t.count() / (2.0 * kRoundTrips);
  }
  return median(one_way_ns);
}

int cpus_available() {
  const cpu_set_t set = own_cpus();
  return std::max(1, CPU_COUNT(&set));
}

void mpi_prefer_yielding_waits() { ::setenv("OMPI_MCA_mpi_yield_when_idle", "1", 0); }

int world_rank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}
int world_size() {
  int s = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &s);
  return s;
}
int node_local_size() {
  MPI_Comm local;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &local);
  int n = 1;
  MPI_Comm_size(local, &n);
  MPI_Comm_free(&local);
  return n;
}

}  // namespace capplan::rt
