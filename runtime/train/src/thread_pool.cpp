// Thread pool: workers spin briefly on a generation counter (kernels are short and follow each
// other closely), then sleep on a condition variable so idle ranks do not burn their cores.
#include "train/thread_pool.h"

#include <algorithm>

namespace capplan::rt {

ThreadPool::ThreadPool(int threads) : threads_(std::max(1, threads)) {
  for (int i = 1; i < threads_; ++i) workers_.emplace_back([this, i] { worker(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
    generation_.fetch_add(1);
  }
  wake_.notify_all();
  for (auto& t : workers_) t.join();
}

static void run_block(const std::function<void(int64_t, int64_t, int)>& fn, int64_t n, int threads,
                      int index) {
  const int64_t chunk = (n + threads - 1) / threads;
  const int64_t begin = std::min(n, chunk * index);
  const int64_t end = std::min(n, begin + chunk);
  if (begin < end) fn(begin, end, index);
}

void ThreadPool::parallel_for(int64_t n, const std::function<void(int64_t, int64_t, int)>& fn) {
  if (n <= 0) return;
  if (threads_ == 1 || n == 1) {
    fn(0, n, 0);
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    task_ = &fn;
    n_ = n;
    pending_.store(threads_ - 1);
    generation_.fetch_add(1);
  }
  wake_.notify_all();
  run_block(fn, n, threads_, 0);
  while (pending_.load(std::memory_order_acquire) != 0) std::this_thread::yield();
}

void ThreadPool::worker(int index) {
  uint64_t seen = 0;
  for (;;) {
    uint64_t gen = generation_.load(std::memory_order_acquire);
    for (int spin = 0; gen == seen && spin < 20000; ++spin) {
      std::this_thread::yield();
      gen = generation_.load(std::memory_order_acquire);
    }
    if (gen == seen) {
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait(lock, [&] { return generation_.load() != seen; });
      gen = generation_.load();
    }
    seen = gen;
    const std::function<void(int64_t, int64_t, int)>* task;
    int64_t n;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (stop_) return;
      task = task_;
      n = n_;
    }
    run_block(*task, n, threads_, index);
    pending_.fetch_sub(1, std::memory_order_release);
  }
}

}  // namespace capplan::rt
