// The pool: ranges cover [0, count) exactly once, respect the grain, run on several threads,
// nest without deadlock, and carry exceptions back to the caller.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <mutex>
#include <set>
#include <stdexcept>
#include <thread>
#include <utility>
#include <vector>

#include "util/thread_pool.h"

namespace fp4serve {
namespace {

TEST(ThreadPool, CoversEveryIndexOnce) {
  ThreadPool pool(4);
  for (std::int64_t count : {1, 7, 64, 1000, 4097}) {
    std::vector<std::atomic<int>> hits(static_cast<std::size_t>(count));
    pool.parallel_for(count, 8, [&](std::int64_t b, std::int64_t e) {
      EXPECT_EQ(b % 8, 0) << "ranges start at multiples of the grain";
      for (std::int64_t i = b; i < e; ++i) hits[static_cast<std::size_t>(i)].fetch_add(1);
    });
    for (std::int64_t i = 0; i < count; ++i) ASSERT_EQ(hits[static_cast<std::size_t>(i)].load(), 1) << count << " " << i;
  }
}

// A range the size of the first ones at the end keeps the other threads waiting for it; the
// ranges shrink toward the grain as the job runs out, so the threads finish together.
TEST(ThreadPool, RangesShrinkTowardTheGrainAsTheJobRunsOut) {
  ThreadPool pool(2);
  std::mutex mu;
  std::vector<std::pair<std::int64_t, std::int64_t>> ranges;
  pool.parallel_for(1000, 4, [&](std::int64_t b, std::int64_t e) {
    std::lock_guard<std::mutex> lk(mu);
    ranges.emplace_back(b, e);
  });
  std::sort(ranges.begin(), ranges.end());
  ASSERT_GE(ranges.size(), 3u);
  EXPECT_EQ(ranges.front().second - ranges.front().first, 124) << "the first ranges: an eighth of 250 grains";
  for (std::size_t i = 1; i < ranges.size(); ++i) {
    EXPECT_EQ(ranges[i].first, ranges[i - 1].second);
    EXPECT_LE(ranges[i].second - ranges[i].first, ranges[i - 1].second - ranges[i - 1].first) << "range " << i;
  }
  EXPECT_EQ(ranges.back().second, 1000);
  EXPECT_LE(ranges.back().second - ranges.back().first, 4) << "the last range is one grain";
}

TEST(ThreadPool, UsesWorkerThreads) {
  ThreadPool pool(3);
  std::mutex mu;
  std::set<std::thread::id> ids;
  // Many short jobs: at least one must land on a worker.
  for (int rep = 0; rep < 200 && ids.size() < 2; ++rep)
    pool.parallel_for(64, 1, [&](std::int64_t, std::int64_t) {
      std::this_thread::sleep_for(std::chrono::microseconds(50));
      std::lock_guard<std::mutex> lk(mu);
      ids.insert(std::this_thread::get_id());
    });
  EXPECT_GE(ids.size(), 2u);
}

TEST(ThreadPool, NestedCallsRunInline) {
  ThreadPool pool(2);
  std::atomic<std::int64_t> total{0};
  pool.parallel_for(8, 1, [&](std::int64_t b, std::int64_t e) {
    for (std::int64_t i = b; i < e; ++i)
      pool.parallel_for(10, 1, [&](std::int64_t ib, std::int64_t ie) { total.fetch_add(ie - ib); });
  });
  EXPECT_EQ(total.load(), 80);
}

TEST(ThreadPool, RethrowsTaskExceptions) {
  ThreadPool pool(2);
  EXPECT_THROW(pool.parallel_for(100, 1,
                                 [](std::int64_t b, std::int64_t e) {
                                   if (b <= 42 && 42 < e) throw std::runtime_error("task 42");
                                 }),
               std::runtime_error);
  // The pool still works afterwards.
  std::atomic<int> n{0};
  pool.parallel_for(10, 1, [&](std::int64_t b, std::int64_t e) { n.fetch_add(static_cast<int>(e - b)); });
  EXPECT_EQ(n.load(), 10);
}

TEST(ThreadPool, SingleThreadPoolRunsInline) {
  ThreadPool pool(1);
  std::int64_t seen_b = -1, seen_e = -1;
  pool.parallel_for(50, 4, [&](std::int64_t b, std::int64_t e) {
    seen_b = b;
    seen_e = e;
  });
  EXPECT_EQ(seen_b, 0);
  EXPECT_EQ(seen_e, 50);
}

TEST(ThreadPool, ConcurrentSubmittersAreSerialised) {
  ThreadPool pool(2);
  std::atomic<std::int64_t> total{0};
  std::vector<std::thread> users;
  for (int t = 0; t < 3; ++t)
    users.emplace_back([&] {
      for (int rep = 0; rep < 50; ++rep)
        pool.parallel_for(100, 3, [&](std::int64_t b, std::int64_t e) { total.fetch_add(e - b); });
    });
  for (auto& u : users) u.join();
  EXPECT_EQ(total.load(), 3 * 50 * 100);
}

}  // namespace
}  // namespace fp4serve
