// Ring attention over the cp group (see ring_attention.h): the ring loop, the packing of a rank's
// keys and values into one block, and the load-balanced positions.
#include "train/ring_attention.h"

#include <limits>
#include <stdexcept>
#include <utility>

namespace capplan::rt {
namespace {

constexpr int kTagKv = 101, kTagDkv = 102;

}  // namespace

std::vector<int32_t> cp_positions(int seq_len, int cp, int cp_rank) {
  std::vector<int32_t> pos;
  if (cp <= 1) {
    for (int t = 0; t < seq_len; ++t) pos.push_back(t);
    return pos;
  }
  if (seq_len % (2 * cp) != 0) throw std::invalid_argument("seq_len not divisible by 2 * cp");
  const int chunk = seq_len / (2 * cp);
  for (int c : {cp_rank, 2 * cp - 1 - cp_rank})
    for (int t = 0; t < chunk; ++t) pos.push_back(c * chunk + t);
  return pos;
}

RingAttention::RingAttention(Backend& backend, Communicator& cp, std::vector<int32_t> positions)
    : be_(backend), cp_(&cp), n_(cp.size()), rank_(cp.rank()), pos_(std::move(positions)) {
  const int T = int(pos_.size()) * n_;
  for (int r = 0; r < n_; ++r) pos_of_.push_back(cp_positions(T, n_, r));
  if (pos_of_[size_t(rank_)] != pos_)
    throw std::invalid_argument("ring attention: positions are not this rank's chunks");
}

RingAttention::RingAttention(Backend& backend, int cp_size, int cp_rank, int seq_len)
    : be_(backend), cp_(nullptr), n_(cp_size), rank_(cp_rank) {
  if (cp_size < 1 || cp_rank < 0 || cp_rank >= cp_size)
    throw std::invalid_argument("ring attention: cp rank outside the ring");
  for (int r = 0; r < n_; ++r) pos_of_.push_back(cp_positions(seq_len, n_, r));
  pos_ = pos_of_[size_t(rank_)];
}

RingAttention::~RingAttention() {
  for (float* p : {kv_[0], kv_[1], dkv_[0], dkv_[1], acc_, max_, sum_})
    if (p) be_.release(p);
}

void RingAttention::reserve(const AttentionShape& s) {
  if (s.T != int(pos_.size())) throw std::invalid_argument("ring attention: rows per sequence");
  const int64_t rows = int64_t(s.B) * s.T;
  const int64_t kv = rows * 2 * s.KVl * s.D, out = rows * s.Hl * s.D, st = int64_t(s.B) * s.Hl * s.T;
  if (kv == kv_numel_ && out == out_numel_ && st == stats_numel_) return;
  for (float** p : {&kv_[0], &kv_[1], &dkv_[0], &dkv_[1], &acc_, &max_, &sum_})
    if (*p) be_.release(*p), *p = nullptr;
  for (float** p : {&kv_[0], &kv_[1], &dkv_[0], &dkv_[1]}) *p = be_.allocate(kv);
  acc_ = be_.allocate(out);
  max_ = be_.allocate(st);
  sum_ = be_.allocate(st);
  for (float* p : {kv_[0], kv_[1], dkv_[0], dkv_[1], acc_, max_, sum_})
    if (!p) throw std::bad_alloc();
  kv_numel_ = kv;
  out_numel_ = out;
  stats_numel_ = st;
}

// The k and v columns of each row ([q | k | v]) side by side: one contiguous block to send.
void RingAttention::pack_kv(float* kv, const float* qkv, const AttentionShape& s) {
  const int S = s.qkv_stride(), KVS = 2 * s.KVl * s.D, q = s.Hl * s.D;
  for (int64_t r = 0; r < int64_t(s.B) * s.T; ++r) be_.copy(kv + r * KVS, qkv + r * S + q, KVS);
}

void RingAttention::forward(float* out, float* lse, const float* qkv, const AttentionShape& s) {
  reserve(s);
  const int n = n_, rank = rank_, next = (rank + 1) % n, prev = (rank - 1 + n) % n;
  pack_kv(kv_[0], qkv, s);
  be_.fill(acc_, 0.0f, out_numel_);
  be_.fill(max_, -std::numeric_limits<float>::infinity(), stats_numel_);
  be_.fill(sum_, 0.0f, stats_numel_);
  int cur = 0;
  for (int step = 0; step < n; ++step) {
    const int src = (rank - step + n) % n;  // the owner of the block at hand
    // The block goes on to the next rank while this one computes with it.
    if (cp_ && step + 1 < n) cp_->send_async(kv_[cur], kv_numel_, next, kTagKv);
    be_.attention_block_forward(acc_, max_, sum_, qkv, kv_[cur], pos_.data(),
                                pos_of_[size_t(src)].data(), s);
    if (cp_ && step + 1 < n) {
      cp_->recv(kv_[1 - cur], kv_numel_, prev, kTagKv);
      cp_->wait_sends();
      cur = 1 - cur;
    }
  }
  be_.attention_block_finish(out, lse, acc_, max_, sum_, s);
}

void RingAttention::backward(float* dqkv, const float* dout, const float* out, const float* lse,
                             const float* qkv, const AttentionShape& s) {
  reserve(s);
  const int n = n_, rank = rank_, next = (rank + 1) % n, prev = (rank - 1 + n) % n;
  be_.fill(dqkv, 0.0f, int64_t(s.B) * s.T * s.qkv_stride());
  pack_kv(kv_[0], qkv, s);
  be_.fill(dkv_[0], 0.0f, kv_numel_);
  int cur = 0;
  for (int step = 0; step < n; ++step) {
    const int src = (rank - step + n) % n;
    if (cp_ && step + 1 < n) cp_->send_async(kv_[cur], kv_numel_, next, kTagKv);
    be_.attention_block_backward(dqkv, dkv_[cur], dout, out, lse, qkv, kv_[cur], pos_.data(),
                                 pos_of_[size_t(src)].data(), s);
    if (cp_ && step + 1 < n) {  // the block's gradient so far travels with it
      cp_->send_async(dkv_[cur], kv_numel_, next, kTagDkv);
      cp_->recv(kv_[1 - cur], kv_numel_, prev, kTagKv);
      cp_->recv(dkv_[1 - cur], kv_numel_, prev, kTagDkv);
      cp_->wait_sends();
      cur = 1 - cur;
    }
  }
  // The block at hand is rank + 1's (it left its owner n - 1 steps ago): one more hop home.
  float* mine = dkv_[cur];
  if (cp_ && n > 1) {
    cp_->send_async(dkv_[cur], kv_numel_, next, kTagDkv);
    cp_->recv(dkv_[1 - cur], kv_numel_, prev, kTagDkv);
    cp_->wait_sends();
    mine = dkv_[1 - cur];
  }
  const int S = s.qkv_stride(), KVS = 2 * s.KVl * s.D, q = s.Hl * s.D;
  for (int64_t r = 0; r < int64_t(s.B) * s.T; ++r) be_.copy(dqkv + r * S + q, mine + r * KVS, KVS);
}

}  // namespace capplan::rt
