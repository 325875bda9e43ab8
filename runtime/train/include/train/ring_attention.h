// Context parallelism: the sequence split over the cp ranks and causal attention computed as a
// ring (Liu et al. 2023, Ring Attention; the load-balanced split of Megatron-Core's context
// parallelism). The sequence is cut into 2 * cp chunks and rank i holds chunks i and
// 2 * cp - 1 - i, so every rank has the same share of the causal triangle. Each rank's keys and
// values go round the ring (cp - 1 sends, each overlapped with the attention of the block at
// hand) and every query folds each block into a running softmax; the backward sends the blocks
// round again with their gradients, which end back at their owner. Kernels are the Backend's
// attention_block_*; messages go through the Communicator of the cp group.
#pragma once

#include <cstdint>
#include <vector>

#include "train/backend.h"
#include "train/communicator.h"

namespace capplan::rt {

// The global positions of the seq_len / cp tokens rank `cp_rank` holds of each sequence, in the
// order of its rows: chunk cp_rank, then chunk 2 * cp - 1 - cp_rank (chunks of seq_len / (2 cp)).
// cp = 1: 0 .. seq_len - 1. Requires seq_len divisible by 2 * cp when cp > 1.
std::vector<int32_t> cp_positions(int seq_len, int cp, int cp_rank);

class RingAttention {
 public:
  // `cp`: the context-parallel group; s.T below is the rows per sequence on this rank and
  // `positions` (host, s.T entries) their global positions, the same on every call.
  RingAttention(Backend& backend, Communicator& cp, std::vector<int32_t> positions);
  // Without a communicator, as rank `cp_rank` of a ring of `cp_size` over `seq_len` tokens: the
  // same kernels on the same shapes and positions, every block being this rank's own K and V
  // (nothing moves). What a rank of the ring computes, for timing it (capplan-train measure).
  RingAttention(Backend& backend, int cp_size, int cp_rank, int seq_len);
  ~RingAttention();
  RingAttention(const RingAttention&) = delete;
  RingAttention& operator=(const RingAttention&) = delete;

  const std::vector<int32_t>& positions() const { return pos_; }
  // out [B * T, Hl * D] and lse [B, Hl, T] (kept for the backward) from this rank's qkv.
  void forward(float* out, float* lse, const float* qkv, const AttentionShape& s);
  // dqkv (overwritten) from dout and the forward's out, lse and qkv.
  void backward(float* dqkv, const float* dout, const float* out, const float* lse,
                const float* qkv, const AttentionShape& s);

 private:
  void reserve(const AttentionShape& s);
  void pack_kv(float* kv, const float* qkv, const AttentionShape& s);
  Backend& be_;
  Communicator* cp_;  // null: the ring without a communicator
  int n_ = 1, rank_ = 0;
  std::vector<int32_t> pos_;
  std::vector<std::vector<int32_t>> pos_of_;  // positions held by each cp rank
  int64_t kv_numel_ = 0, out_numel_ = 0, stats_numel_ = 0;
  float *kv_[2] = {nullptr, nullptr}, *dkv_[2] = {nullptr, nullptr};
  float *acc_ = nullptr, *max_ = nullptr, *sum_ = nullptr;
};

}  // namespace capplan::rt
