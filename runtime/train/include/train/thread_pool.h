// A small fixed-size thread pool for the CPU backend: parallel_for splits [0, n) into one
// contiguous block per thread (static, so every reduction has a fixed order and results do not
// depend on scheduling). The calling thread runs block 0. Not re-entrant: a task must not call
// parallel_for on the same pool.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace capplan::rt {

class ThreadPool {
 public:
  explicit ThreadPool(int threads);  // threads >= 1; threads - 1 workers are started
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return threads_; }
  // fn(begin, end, thread) on consecutive blocks of [0, n); blocks of at most ceil(n / size()).
  void parallel_for(int64_t n, const std::function<void(int64_t, int64_t, int)>& fn);

 private:
  void worker(int index);
  int threads_ = 1;
  std::vector<std::thread> workers_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> pending_{0};
  bool stop_ = false;
  const std::function<void(int64_t, int64_t, int)>* task_ = nullptr;
  int64_t n_ = 0;
};

}  // namespace capplan::rt
