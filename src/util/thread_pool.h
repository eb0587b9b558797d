#pragma once
// A small persistent thread pool for kernels: one parallel_for at a time, the calling thread
// works too, workers spin briefly before sleeping so back-to-back decode GEMMs (tens of
// microseconds each) do not pay a futex wake-up every call.
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <mutex>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

namespace fp4serve {

class ThreadPool {
 public:
  // `threads` counts the caller: ThreadPool(1) has no workers and runs everything inline.
  explicit ThreadPool(int threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return static_cast<int>(workers_.size()) + 1; }

  // Calls fn(begin, end) on disjoint ranges covering [0, count), each at least `grain` long
  // (except the last), and returns when all are done. Called from inside a task it runs
  // serially (no nested parallelism, no deadlock). The first exception a task throws is
  // rethrown here after the other tasks finished; remaining ranges are skipped.
  template <class F>
  void parallel_for(std::int64_t count, std::int64_t grain, F&& fn) {
    using Fn = std::remove_reference_t<F>;
    run(count, grain, [](void* ctx, std::int64_t b, std::int64_t e) { (*static_cast<Fn*>(ctx))(b, e); },
        const_cast<void*>(static_cast<const void*>(&fn)));
  }

 private:
  using Trampoline = void (*)(void*, std::int64_t, std::int64_t);
  void run(std::int64_t count, std::int64_t grain, Trampoline call, void* ctx);
  void worker_main();
  void work_chunks();

  std::vector<std::thread> workers_;
  std::mutex submit_mu_;  // one parallel_for at a time from outside the pool

  // The current job; written by the submitter before publishing a new generation.
  Trampoline call_ = nullptr;
  void* ctx_ = nullptr;
  std::int64_t count_ = 0;
  std::int64_t chunk_ = 1;  // the largest range
  std::int64_t grain_ = 1;  // the smallest (but the last)
  std::atomic<std::int64_t> next_{0};
  std::atomic<int> pending_{0};  // workers that have not finished the current generation
  std::exception_ptr error_;
  std::mutex error_mu_;

  std::atomic<std::uint64_t> generation_{0};
  std::atomic<bool> stop_{false};
  std::mutex sleep_mu_;
  std::condition_variable wake_cv_;
  std::condition_variable done_cv_;
};

// The process-wide pool kernels use: FP4SERVE_THREADS threads if set, else every CPU this
// process may run on.
ThreadPool& global_thread_pool();

// global_thread_pool().size(), out of line: kernels compiled with ISA flags call this, since an
// inline member instantiated there would be a weak symbol (src/kernels/check_isa_objects.cmake).
int global_thread_count();

template <class F>
void parallel_for(std::int64_t count, std::int64_t grain, F&& fn) {
  global_thread_pool().parallel_for(count, grain, std::forward<F>(fn));
}

}  // namespace fp4serve
