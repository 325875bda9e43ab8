// The communicator interface of capplan-train (implemented over MPI) and the
// process groups of a dp x pp x tp layout. Ranks are placed by an `order` string, a permutation of
// D, P, T whose right-most letter varies fastest over consecutive world ranks ("DPT": tp ranks are
// neighbours, as Megatron-LM places them). Collectives are blocking; errors abort the job (MPI's
// default handler) since a half-finished collective cannot be recovered by one rank. Each
// communicator counts the seconds its calls took (comm_seconds), so that the trainer can time
// tensor-, pipeline- and data-parallel communication apart.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "planner/rank_mapping.h"
#include "planner/spec.h"

namespace capplan::rt {

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual void all_reduce_sum(float* data, int64_t n) = 0;
  virtual void all_reduce_sum(double* data, int64_t n) = 0;
  virtual void all_reduce_max(float* data, int64_t n) = 0;
  virtual void all_reduce_min(int64_t* data, int64_t n) = 0;
  // send: size() * count elements; rank r receives the sum of block r (recv may be send itself:
  // the block then lands at its start).
  virtual void reduce_scatter_sum(const float* send, float* recv, int64_t count) = 0;
  // recv: size() * count elements, block r from rank r.
  virtual void all_gather(const float* send, float* recv, int64_t count) = 0;
  virtual void all_gather(const double* send, double* recv, int64_t count) = 0;
  // Variable block sizes (ZeRO-2/3 buckets over a flat buffer's shards): send holds the sum of
  // counts; rank r receives the sum of its block (counts[r] elements; recv may be send itself:
  // the block then lands at its start) ...
  virtual void reduce_scatter_sum_v(const float* send, float* recv,
                                    const std::vector<int64_t>& counts) = 0;
  // ... and recv gets every rank's block in rank order (send: counts[rank()] elements).
  virtual void all_gather_v(const float* send, float* recv, const std::vector<int64_t>& counts) = 0;
  // All-to-all (expert dispatch and combine): block r of send goes to rank r, recv's block r
  // comes from rank r. Fixed blocks of `count` ...
  virtual void all_to_all(const int64_t* send, int64_t* recv, int64_t count) = 0;
  // ... and variable ones (MPI_Alltoallv): send_counts[r] elements to rank r, in rank order,
  // recv_counts[r] elements from rank r, in rank order.
  virtual void all_to_all_v(const float* send, const std::vector<int64_t>& send_counts,
                            float* recv, const std::vector<int64_t>& recv_counts) = 0;
  virtual void broadcast(float* data, int64_t n, int root) = 0;
  virtual void send(const float* data, int64_t n, int peer, int tag) = 0;
  virtual void recv(float* data, int64_t n, int peer, int tag) = 0;
  // Blocks until a message from `peer` with `tag` has arrived (its recv then only moves it): the
  // pipeline's wait for a neighbour, apart from the transfer. On a host with more ranks than cores
  // (ProcessGroups::local_size against the union of the node's ranks' affinity masks) probe, recv
  // and wait_sends sleep 50 us between polls instead of polling in MPI, so a waiting stage gives its core to the stages that
  // compute: pp 4 of the 4-layer, 256-wide model on 2 cores stepped in 442 ms (median of 4)
  // against 474 ms polling with yields.
  virtual void probe(int peer, int tag) = 0;
  // Non-blocking send (pipeline stages): `data` must stay untouched until wait_sends() returns.
  virtual void send_async(const float* data, int64_t n, int peer, int tag) = 0;
  virtual void wait_sends() = 0;
  virtual void barrier() = 0;
  // Seconds spent inside this communicator's calls since it was made (wall clock, this rank);
  // 0 for a group of one rank, whose calls move nothing.
  virtual double comm_seconds() const = 0;
};

// A group of one rank (unit tests, tp = 1): every collective is the identity.
std::unique_ptr<Communicator> make_self_communicator();

// Rank <-> coordinates (RankCoords, rank_to_coords, coords_to_rank): planner/rank_mapping.h.

// MPI process groups for one rank: world, and dp / pp / tp / cp groups (ranks sharing the other
// coordinates, ordered by their own coordinate), plus ranks on this node. Context and expert
// parallelism (as Megatron-Core): the dense weights' gradients are reduced over dp_cp (the dp x
// cp ranks holding the same weights; = dp when cp is 1); ep carves groups of ep consecutive ranks
// out of the dp x cp index d * cp + c (ep rank = that index % ep), and an expert's gradients are
// reduced over edp, the dp * cp / ep ranks holding the same experts.
struct ProcessGroups {
  RankCoords coords;
  std::unique_ptr<Communicator> world, dp, pp, tp, cp, dp_cp, ep, edp;
  int ep_rank = 0;
  int local_rank = 0, local_size = 1;  // within MPI_COMM_TYPE_SHARED (this node)
};

// Requires MPI to be initialised and layout.gpus() == world size.
ProcessGroups make_process_groups(const Layout& layout);

// How long a cache line takes from one core to another on this node: the first two ranks of the
// node write one shared cache line in turn (an MPI shared-memory window), 3 batches of 100 round
// trips, and half the median batch's round trip is the one-way latency. The transfers of ranks on
// one host (the tensor-parallel all-reduce, the context ring, the exchanges) move through the
// cores' caches at this latency, and on a virtual machine it is the hypervisor's to set: on a
// 2-core KVM guest (AMD EPYC) it moved between about 30 and 160 ns within one process, seconds
// apart, as the host placed the two virtual CPUs on near or far physical cores, and a 256 KB
// MPI_Allreduce between the two ranks took 0.05-0.07 ms and 0.16-0.20 ms with it. Runs and profiles
// record it, so that a collective measured at one speed and run at the other says why.
class CoreLatencyProbe {
 public:
  // Collective over MPI_COMM_WORLD (splits it by node). Measures only where the node's ranks have
  // a core each (they do not outnumber the cores they may run on together, the union of their
  // affinity masks): ranks taking turns on a core would time the scheduler instead.
  CoreLatencyProbe();
  ~CoreLatencyProbe();
  CoreLatencyProbe(const CoreLatencyProbe&) = delete;
  CoreLatencyProbe& operator=(const CoreLatencyProbe&) = delete;
  // Collective over the node's ranks: the one-way latency in nanoseconds on the node's first two
  // ranks, NaN on the others and where it does not measure.
  double measure_ns();

 private:
  struct State;
  std::unique_ptr<State> s_;
};

// Call before MPI_Init. A blocking MPI call whose peer is not there yet polls; Open MPI polls
// without yielding the core when the ranks do not outnumber the cores it knows of, so a rank
// waiting in a collective keeps its core from the very peer it waits for (or from other work)
// whenever the machine has more runnable threads than cores. This asks Open MPI to yield the
// core between polls (OMPI_MCA_mpi_yield_when_idle=1) unless the environment already says.
// Measured on this 2-core machine under a load average of ~10, tp 2 of the 4-layer, 256-wide
// model: tp_comm 2.1-3.1 s of a 3.9-5.0 s step without it, 1.0-1.1 s of 2.4-2.7 s with it.
void mpi_prefer_yielding_waits();

// The cores this process may run on (its affinity mask; the hardware's count where unknown).
int cpus_available();

// World rank and size (MPI_COMM_WORLD), and the number of ranks on this node.
int world_rank();
int world_size();
int node_local_size();

}  // namespace capplan::rt
