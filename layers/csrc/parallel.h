// A small persistent thread pool for Porter's CPU kernels.
//
// MLX runs a primitive's CPU work on one thread (the stream's); these kernels split their outer loop over
// `num_threads()` threads (PORTER_NUM_THREADS, default: the CPUs this process may run on). Work too small to pay
// for a hand-off (under ~1M element-steps: waking a parked worker costs 20-70 us on a VM) runs on the calling thread alone.
#pragma once

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#if defined(__linux__)
#include <sched.h>
#endif

namespace porter {

inline int default_threads() {
  if (const char* env = std::getenv("PORTER_NUM_THREADS")) {
    int n = std::atoi(env);
    if (n > 0) return n;
  }
#if defined(__linux__)
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) {
    int n = CPU_COUNT(&set);
    if (n > 0) return n;
  }
#endif
  unsigned n = std::thread::hardware_concurrency();
  return n > 0 ? static_cast<int>(n) : 1;
}

inline std::atomic<int>& thread_setting() {
  static std::atomic<int> n{default_threads()};
  return n;
}

inline int num_threads() { return thread_setting().load(); }
inline void set_num_threads(int n) { thread_setting().store(std::max(1, n)); }

class Pool {
 public:
  static Pool& get() {
    // never destroyed: workers may still be parked at interpreter exit
    static Pool* pool = new Pool();
    return *pool;
  }

  // Runs fn(0) .. fn(tasks - 1), spread over the calling thread and up to num_threads() - 1 workers.
  void run(int tasks, const std::function<void(int)>& fn) {
    int threads = std::min(tasks, num_threads());
    if (threads <= 1) {
      for (int i = 0; i < tasks; ++i) fn(i);
      return;
    }
    std::lock_guard<std::mutex> one_region(run_mu_);
    auto job = std::make_shared<Job>();
    job->fn = fn;
    job->total = tasks;
    job->pending = tasks;
    {
      std::lock_guard<std::mutex> lk(mu_);
      while (static_cast<int>(workers_.size()) < threads - 1) {
        workers_.emplace_back([this] { loop(); });
        workers_.back().detach();
      }
      job_ = job;
      ++generation_;
    }
    cv_.notify_all();
    work(*job);
    std::unique_lock<std::mutex> lk(job->mu);
    job->done.wait(lk, [&] { return job->pending == 0; });
  }

 private:
  struct Job {
    std::function<void(int)> fn;
    int total = 0;
    std::atomic<int> next{0};
    std::mutex mu;
    std::condition_variable done;
    int pending = 0;
  };

  static void work(Job& job) {
    int finished = 0;
    for (int i; (i = job.next.fetch_add(1)) < job.total;) {
      job.fn(i);
      ++finished;
    }
    if (finished) {
      std::lock_guard<std::mutex> lk(job.mu);
      job.pending -= finished;
      if (job.pending == 0) job.done.notify_all();
    }
  }

  void loop() {
    uint64_t seen = 0;
    while (true) {
      std::shared_ptr<Job> job;
      {
        std::unique_lock<std::mutex> lk(mu_);
        cv_.wait(lk, [&] { return generation_ != seen; });
        seen = generation_;
        job = job_;
      }
      if (job) work(*job);  // a stale job has nothing left to claim
    }
  }

  std::mutex run_mu_, mu_;
  std::condition_variable cv_;
  std::vector<std::thread> workers_;
  std::shared_ptr<Job> job_;
  uint64_t generation_ = 0;
};

// Splits [0, n) into chunks over the pool; `work_per_item` (element-steps per item) decides whether threads pay.
template <typename F>
void parallel_for(int64_t n, int64_t work_per_item, F&& body) {
  constexpr int64_t kMinWork = 1 << 20;
  int threads = num_threads();
  if (n <= 1 || threads <= 1 || n * std::max<int64_t>(work_per_item, 1) < kMinWork) {
    body(int64_t{0}, n);
    return;
  }
  int tasks = static_cast<int>(std::min<int64_t>(n, int64_t{threads} * 4));
  Pool::get().run(tasks, [&](int t) {
    int64_t begin = n * t / tasks, end = n * (t + 1) / tasks;
    if (begin < end) body(begin, end);
  });
}

}  // namespace porter
