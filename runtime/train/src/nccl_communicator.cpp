// NCCL collectives behind communicator.h. Device buffers go to NCCL on this communicator's
// streams, created blocking so that they order against the CUDA backend's legacy default stream
// (a collective waits for the kernels queued before it, and later kernels wait for it); every
// call is blocking, as the interface says, except send_async. Host buffers go to the wrapped MPI
// communicator. NCCL's send/recv carry no tag: messages between two ranks arrive in the order
// they were sent, which is the order the pipeline schedule posts them.
#include "train/nccl_communicator.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include <chrono>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

namespace capplan::rt {
namespace {

#define CAPPLAN_NCCL(call)                                                                         \
  do {                                                                                             \
    const ncclResult_t r_ = (call);                                                                \
    if (r_ != ncclSuccess)                                                                         \
      throw std::runtime_error(std::string("nccl_communicator.cpp:") + std::to_string(__LINE__) + \
                               ": " #call ": " + ncclGetErrorString(r_));                          \
  } while (0)
#define CAPPLAN_CUDART(call)                                                                       \
  do {                                                                                             \
    const cudaError_t e_ = (call);                                                                 \
    if (e_ != cudaSuccess)                                                                         \
      throw std::runtime_error(std::string("nccl_communicator.cpp:") + std::to_string(__LINE__) + \
                               ": " #call ": " + cudaGetErrorString(e_));                          \
  } while (0)

bool on_device(const void* p) {
  cudaPointerAttributes at{};
  if (cudaPointerGetAttributes(&at, p) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return at.type == cudaMemoryTypeDevice || at.type == cudaMemoryTypeManaged;
}

// Adds the seconds of its scope to `total`: the communicator's time in its calls.
struct Timed {
  double& total;
  std::chrono::steady_clock::time_point t0 = std::chrono::steady_clock::now();
  ~Timed() { total += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(); }
};

class NcclCommunicator final : public Communicator {
 public:
  explicit NcclCommunicator(std::unique_ptr<Communicator> mpi) : mpi_(std::move(mpi)) {
    rank_ = mpi_->rank();
    size_ = mpi_->size();
    ncclUniqueId id;
    std::memset(&id, 0, sizeof(id));
    if (rank_ == 0) CAPPLAN_NCCL(ncclGetUniqueId(&id));
    // The id's bytes travel as floats (MPI copies them unchanged between like machines).
    static_assert(sizeof(ncclUniqueId) % sizeof(float) == 0);
    std::vector<float> buf(sizeof(id) / sizeof(float));
    std::memcpy(buf.data(), &id, sizeof(id));
    mpi_->broadcast(buf.data(), int64_t(buf.size()), 0);
    std::memcpy(&id, buf.data(), sizeof(id));
    CAPPLAN_NCCL(ncclCommInitRank(&comm_, size_, id, rank_));
    for (cudaStream_t& s : streams_) CAPPLAN_CUDART(cudaStreamCreate(&s));
  }
  ~NcclCommunicator() override {
    if (comm_) ncclCommDestroy(comm_);
    for (cudaStream_t s : streams_)
      if (s) cudaStreamDestroy(s);
    if (scratch_) cudaFree(scratch_);
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }

  void all_reduce_sum(float* d, int64_t n) override { all_reduce(d, n, ncclFloat, ncclSum, [&] { mpi_->all_reduce_sum(d, n); }); }
  void all_reduce_sum(double* d, int64_t n) override { all_reduce(d, n, ncclDouble, ncclSum, [&] { mpi_->all_reduce_sum(d, n); }); }
  void all_reduce_max(float* d, int64_t n) override { all_reduce(d, n, ncclFloat, ncclMax, [&] { mpi_->all_reduce_max(d, n); }); }
  void all_reduce_min(int64_t* d, int64_t n) override { all_reduce(d, n, ncclInt64, ncclMin, [&] { mpi_->all_reduce_min(d, n); }); }

  void reduce_scatter_sum(const float* send, float* recv, int64_t count) override {
    if (!on_device(send)) return mpi_->reduce_scatter_sum(send, recv, count);
    Timed timed{seconds_};
    cudaStream_t s = streams_[kCollective];
    // recv == send: the block lands at its start, which NCCL's in-place form (recv = send +
    // rank * count) does not do; the sum goes through a scratch block.
    float* out = recv == send ? scratch(count) : recv;
    CAPPLAN_NCCL(ncclReduceScatter(send, out, size_t(count), ncclFloat, ncclSum, comm_, s));
    if (out != recv) CAPPLAN_CUDART(cudaMemcpyAsync(recv, out, size_t(count) * sizeof(float), cudaMemcpyDeviceToDevice, s));
    CAPPLAN_CUDART(cudaStreamSynchronize(s));
  }
  void all_gather(const float* send, float* recv, int64_t count) override {
    if (!on_device(recv)) return mpi_->all_gather(send, recv, count);
    gather(send, recv, count, ncclFloat);
  }
  void all_gather(const double* send, double* recv, int64_t count) override {
    if (!on_device(recv)) return mpi_->all_gather(send, recv, count);
    gather(send, recv, count, ncclDouble);
  }
  // One reduce per block (rank r is the root of block r), grouped into one NCCL launch.
  void reduce_scatter_sum_v(const float* send, float* recv, const std::vector<int64_t>& counts) override {
    if (!on_device(send)) return mpi_->reduce_scatter_sum_v(send, recv, counts);
    Timed timed{seconds_};
    check_counts(counts);
    cudaStream_t s = streams_[kCollective];
    const int64_t mine = counts[size_t(rank_)];
    float* out = recv == send ? scratch(mine) : recv;
    int64_t off = 0;
    CAPPLAN_NCCL(ncclGroupStart());
    for (int r = 0; r < size_; ++r) {
      CAPPLAN_NCCL(ncclReduce(send + off, r == rank_ ? out : nullptr, size_t(counts[size_t(r)]), ncclFloat, ncclSum,
                              r, comm_, s));
      off += counts[size_t(r)];
    }
    CAPPLAN_NCCL(ncclGroupEnd());
    if (out != recv) CAPPLAN_CUDART(cudaMemcpyAsync(recv, out, size_t(mine) * sizeof(float), cudaMemcpyDeviceToDevice, s));
    CAPPLAN_CUDART(cudaStreamSynchronize(s));
  }
  // One broadcast per block (rank r sends block r), grouped.
  void all_gather_v(const float* send, float* recv, const std::vector<int64_t>& counts) override {
    if (!on_device(recv)) return mpi_->all_gather_v(send, recv, counts);
    Timed timed{seconds_};
    check_counts(counts);
    cudaStream_t s = streams_[kCollective];
    int64_t off = 0;
    CAPPLAN_NCCL(ncclGroupStart());
    for (int r = 0; r < size_; ++r) {
      CAPPLAN_NCCL(ncclBroadcast(r == rank_ ? send : recv + off, recv + off, size_t(counts[size_t(r)]), ncclFloat, r,
                                 comm_, s));
      off += counts[size_t(r)];
    }
    CAPPLAN_NCCL(ncclGroupEnd());
    CAPPLAN_CUDART(cudaStreamSynchronize(s));
  }
  void broadcast(float* d, int64_t n, int root) override {
    if (!on_device(d)) return mpi_->broadcast(d, n, root);
    Timed timed{seconds_};
    cudaStream_t s = streams_[kAllReduce];
    CAPPLAN_NCCL(ncclBroadcast(d, d, size_t(n), ncclFloat, root, comm_, s));
    CAPPLAN_CUDART(cudaStreamSynchronize(s));
  }
  void send(const float* d, int64_t n, int peer, int tag) override {
    if (!on_device(d)) return mpi_->send(d, n, peer, tag);
    send_async(d, n, peer, tag);
    wait_sends();
  }
  void recv(float* d, int64_t n, int peer, int tag) override {
    if (!on_device(d)) return mpi_->recv(d, n, peer, tag);
    Timed timed{seconds_};
    cudaStream_t s = streams_[kRecv];
    CAPPLAN_NCCL(ncclRecv(d, size_t(n), ncclFloat, peer, comm_, s));
    CAPPLAN_CUDART(cudaStreamSynchronize(s));
  }
  void send_async(const float* d, int64_t n, int peer, int tag) override {
    if (!on_device(d)) return mpi_->send_async(d, n, peer, tag);
    Timed timed{seconds_};
    CAPPLAN_NCCL(ncclSend(d, size_t(n), ncclFloat, peer, comm_, streams_[kSend]));
  }
  void wait_sends() override {
    {
      Timed timed{seconds_};
      CAPPLAN_CUDART(cudaStreamSynchronize(streams_[kSend]));
    }
    mpi_->wait_sends();
  }
  void barrier() override { mpi_->barrier(); }
  // The MoE block exchanges its routing counts on the host.
  void all_to_all(const int64_t* send, int64_t* recv, int64_t count) override { mpi_->all_to_all(send, recv, count); }
  // Rows to and from every rank: one grouped NCCL launch of a send and a receive per peer.
  void all_to_all_v(const float* send, const std::vector<int64_t>& send_counts, float* recv,
                    const std::vector<int64_t>& recv_counts) override {
    if (!on_device(send) && !on_device(recv)) return mpi_->all_to_all_v(send, send_counts, recv, recv_counts);
    Timed timed{seconds_};
    check_counts(send_counts);
    check_counts(recv_counts);
    cudaStream_t s = streams_[kCollective];
    int64_t so = 0, ro = 0;
    CAPPLAN_NCCL(ncclGroupStart());
    for (int r = 0; r < size_; ++r) {
      CAPPLAN_NCCL(ncclSend(send + so, size_t(send_counts[size_t(r)]), ncclFloat, r, comm_, s));
      CAPPLAN_NCCL(ncclRecv(recv + ro, size_t(recv_counts[size_t(r)]), ncclFloat, r, comm_, s));
      so += send_counts[size_t(r)];
      ro += recv_counts[size_t(r)];
    }
    CAPPLAN_NCCL(ncclGroupEnd());
    CAPPLAN_CUDART(cudaStreamSynchronize(s));
  }
  // NCCL cannot probe for a message: the wait for a neighbour's message is part of recv (and so
  // of pp_comm, not of the bubble) on this communicator.
  void probe(int, int) override {}
  double comm_seconds() const override { return seconds_ + mpi_->comm_seconds(); }

 private:
  enum { kAllReduce, kCollective, kSend, kRecv, kStreams };
  template <class T, class Fallback>
  void all_reduce(T* d, int64_t n, ncclDataType_t type, ncclRedOp_t op, Fallback fallback) {
    if (!on_device(d)) return fallback();
    Timed timed{seconds_};
    cudaStream_t s = streams_[kAllReduce];
    CAPPLAN_NCCL(ncclAllReduce(d, d, size_t(n), type, op, comm_, s));
    CAPPLAN_CUDART(cudaStreamSynchronize(s));
  }
  template <class T>
  void gather(const T* send, T* recv, int64_t count, ncclDataType_t type) {
    Timed timed{seconds_};
    cudaStream_t s = streams_[kCollective];
    CAPPLAN_NCCL(ncclAllGather(send, recv, size_t(count), type, comm_, s));
    CAPPLAN_CUDART(cudaStreamSynchronize(s));
  }
  void check_counts(const std::vector<int64_t>& counts) const {
    if (int(counts.size()) != size_) throw std::invalid_argument("one count per rank expected");
  }
  // Grown to the largest block asked for; the steady state allocates nothing.
  float* scratch(int64_t n) {
    if (n > scratch_n_) {
      if (scratch_) CAPPLAN_CUDART(cudaFree(scratch_));
      CAPPLAN_CUDART(cudaMalloc(&scratch_, size_t(std::max<int64_t>(n, 1)) * sizeof(float)));
      scratch_n_ = n;
    }
    return scratch_;
  }

  std::unique_ptr<Communicator> mpi_;
  int rank_ = 0, size_ = 1;
  ncclComm_t comm_ = nullptr;
  cudaStream_t streams_[kStreams] = {};
  float* scratch_ = nullptr;
  int64_t scratch_n_ = 0;
  double seconds_ = 0;  // in NCCL calls (the wrapped MPI communicator counts its own)
};

}  // namespace

std::unique_ptr<Communicator> make_nccl_communicator(std::unique_ptr<Communicator> mpi) {
  return std::make_unique<NcclCommunicator>(std::move(mpi));
}

void use_nccl(ProcessGroups& g) {
  for (std::unique_ptr<Communicator>* c : {&g.dp, &g.pp, &g.tp, &g.cp, &g.dp_cp, &g.ep, &g.edp})
    if (*c) *c = make_nccl_communicator(std::move(*c));
}

}  // namespace capplan::rt
