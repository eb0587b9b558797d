// The upper vector state (util/vector_state.h): the XINUSE probe sees it set and cleared, and the
// thread pool hands no job's dirty state to the generic code after it, on the caller or a worker.
#include <gtest/gtest.h>

#include <atomic>

#include "util/cpu_features.h"
#include "util/thread_pool.h"
#include "util/vector_state.h"

// Sets ymm1 to all ones and returns with it so (a compiled function would end in vzeroupper).
__asm__(
    ".pushsection .text\n"
    ".p2align 4\n"
    ".type fp4serve_test_dirty_upper_state, @function\n"
    "fp4serve_test_dirty_upper_state:\n"
    "  vpcmpeqd %xmm1, %xmm1, %xmm1\n"
    "  vinsertf128 $1, %xmm1, %ymm1, %ymm1\n"
    "  ret\n"
    ".size fp4serve_test_dirty_upper_state, . - fp4serve_test_dirty_upper_state\n"
    ".popsection\n");
extern "C" void fp4serve_test_dirty_upper_state();

namespace fp4serve {
namespace {

// Only where the CPU has AVX (probe_usable).
void dirty_upper_state() { fp4serve_test_dirty_upper_state(); }

bool probe_usable() { return cpu_features().usable(CpuFeature::AVX) && upper_vector_state_in_use().has_value(); }

TEST(VectorState, TheProbeSeesTheUpperStateSetAndCleared) {
  if (!probe_usable()) GTEST_SKIP() << "no AVX, or no XGETBV(1) to read the state";
  dirty_upper_state();
  EXPECT_EQ(upper_vector_state_in_use(), true);
  clear_upper_vector_state();
  EXPECT_EQ(upper_vector_state_in_use(), false);
}

TEST(VectorState, ThePoolClearsItAfterEveryJob) {
  if (!probe_usable()) GTEST_SKIP() << "no AVX, or no XGETBV(1) to read the state";
  ThreadPool pool(3);
  for (std::int64_t grain : {1, 1000}) {  // 1000: the job runs inline on the caller
    pool.parallel_for(64, grain, [](std::int64_t, std::int64_t) { dirty_upper_state(); });
    EXPECT_EQ(upper_vector_state_in_use(), false) << "the caller, grain " << grain;
  }
  // The next job dirties nothing, so any range that finds the state in use on its thread found
  // what the previous job left there.
  pool.parallel_for(64, 1, [](std::int64_t, std::int64_t) { dirty_upper_state(); });
  std::atomic<int> dirty{0}, ranges{0};
  pool.parallel_for(64, 1, [&](std::int64_t, std::int64_t) {
    if (upper_vector_state_in_use() == true) ++dirty;
    ++ranges;
  });
  EXPECT_GT(ranges.load(), 0);
  EXPECT_EQ(dirty.load(), 0) << "a thread began a job with the previous job's upper state";
}

}  // namespace
}  // namespace fp4serve
