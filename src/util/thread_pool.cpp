#include "util/thread_pool.h"

#include <immintrin.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <string>

#include "util/cpu_features.h"
#include "util/error.h"
#include "util/vector_state.h"

namespace fp4serve {

namespace {

// True on pool workers, and on the submitting thread while it runs its share: a parallel_for
// issued from there runs inline instead of waiting on itself.
thread_local bool tl_inside_pool = false;

// How long an idle worker (or a waiting submitter) spins before sleeping. Decode issues a
// GEMM every few tens of microseconds; a futex round trip costs about as much as the work.
constexpr auto kSpinFor = std::chrono::microseconds(100);

template <class Pred>
bool spin_until(Pred done) {
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0;; ++i) {
    if (done()) return true;
    _mm_pause();
    if ((i & 63) == 63 && std::chrono::steady_clock::now() - start > kSpinFor) return false;
  }
}

}  // namespace

ThreadPool::ThreadPool(int threads) {
  if (threads < 1) fail("ThreadPool: threads must be >= 1, got ", threads);
  workers_.reserve(static_cast<std::size_t>(threads - 1));
  for (int i = 1; i < threads; ++i) workers_.emplace_back([this] { worker_main(); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lk(sleep_mu_);
    stop_.store(true);
  }
  wake_cv_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::work_chunks() {
  const std::int64_t threads = size();
  for (;;) {
    // Guided: each range is a share of what is left, from chunk_ down to the grain, so the
    // last ranges are small and the threads finish together (a chunk_-sized last range kept
    // the others waiting for up to an eighth of the job on two threads).
    std::int64_t begin = next_.load(std::memory_order_relaxed), end = 0;
    do {
      if (begin >= count_) return;
      const std::int64_t share = (count_ - begin) / (2 * threads) / grain_ * grain_;
      end = std::min(count_, begin + std::clamp(share, grain_, chunk_));
    } while (!next_.compare_exchange_weak(begin, end, std::memory_order_relaxed));
    try {
      call_(ctx_, begin, end);
    } catch (...) {
      std::lock_guard<std::mutex> lk(error_mu_);
      if (!error_) error_ = std::current_exception();
      next_.store(count_, std::memory_order_relaxed);  // skip what is left
    }
  }
}

void ThreadPool::worker_main() {
  tl_inside_pool = true;
  std::uint64_t seen = 0;
  for (;;) {
    auto fresh = [&] { return generation_.load(std::memory_order_acquire) != seen || stop_.load(); };
    if (!spin_until(fresh)) {
      std::unique_lock<std::mutex> lk(sleep_mu_);
      wake_cv_.wait(lk, fresh);
    }
    if (stop_.load()) return;
    seen = generation_.load(std::memory_order_acquire);
    work_chunks();
    clear_upper_vector_state();  // before this thread's generic code or next job (vector_state.h)
    if (pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
      std::lock_guard<std::mutex> lk(sleep_mu_);
      done_cv_.notify_one();
    }
  }
}

void ThreadPool::run(std::int64_t count, std::int64_t grain, Trampoline call, void* ctx) {
  if (count <= 0) return;
  grain = std::max<std::int64_t>(1, grain);
  if (tl_inside_pool || workers_.empty() || count <= grain) {
    call(ctx, 0, count);
    clear_upper_vector_state();
    return;
  }
  std::lock_guard<std::mutex> submit(submit_mu_);
  // Ranges of at most a quarter of a thread's share balance uneven progress (other processes
  // share the cores) without making ranges so small that per-range setup shows; they shrink
  // toward the grain as the job runs out (work_chunks). Ranges start at multiples of grain.
  const std::int64_t units = (count + grain - 1) / grain;
  const std::int64_t per = std::max<std::int64_t>(1, units / (4 * size()));
  call_ = call;
  ctx_ = ctx;
  count_ = count;
  chunk_ = per * grain;
  grain_ = grain;
  next_.store(0, std::memory_order_relaxed);
  error_ = nullptr;
  pending_.store(static_cast<int>(workers_.size()), std::memory_order_relaxed);
  {
    std::lock_guard<std::mutex> lk(sleep_mu_);
    generation_.fetch_add(1, std::memory_order_release);
  }
  wake_cv_.notify_all();

  tl_inside_pool = true;
  work_chunks();
  tl_inside_pool = false;
  clear_upper_vector_state();

  auto all_done = [&] { return pending_.load(std::memory_order_acquire) == 0; };
  if (!spin_until(all_done)) {
    std::unique_lock<std::mutex> lk(sleep_mu_);
    done_cv_.wait(lk, all_done);
  }
  if (error_) std::rethrow_exception(error_);
}

ThreadPool& global_thread_pool() {
  static ThreadPool pool([] {
    if (const char* env = std::getenv("FP4SERVE_THREADS"); env != nullptr && *env != '\0') {
      char* end = nullptr;
      const long n = std::strtol(env, &end, 10);
      if (*end != '\0' || n < 1 || n > 1024) fail("FP4SERVE_THREADS=", env, ": expected an integer from 1 to 1024");
      return static_cast<int>(n);
    }
    return cpu_features().logical_cpus;
  }());
  return pool;
}

int global_thread_count() { return global_thread_pool().size(); }

}  // namespace fp4serve
