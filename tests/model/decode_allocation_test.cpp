// A steady-state decode step allocates nothing: after a prefill and two warm-up steps (which
// size every workspace and per-thread scratch buffer), forward() over one new token must not call
// operator new, with the kernels `auto` selects on this machine, for a dense Qwen3, a Qwen3-MoE
// and both hybrid layouts. This test binary replaces the global operator new with a counting one.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <new>
#include <string>
#include <vector>

#include "model/causal_lm.h"
#include "model/hybrid_state.h"
#include "model/qwen3_oracle.h"

namespace {
std::atomic<bool> g_counting{false};
std::atomic<long> g_allocations{0};
std::vector<int>* volatile g_probe_sink = nullptr;  // keeps the probe allocation from being elided
}  // namespace

// Every replaceable form that allocates or frees with malloc/free, so memory taken by one form and
// given back by another (as libstdc++ does, e.g. nothrow new in std::stable_sort) stays matched
// for ASan. Out of line, so GCC does not pair an inlined free() with a new-expression it sees.
namespace {
void* counted_malloc(std::size_t n) noexcept {
  if (g_counting.load(std::memory_order_relaxed)) g_allocations.fetch_add(1, std::memory_order_relaxed);
  return std::malloc(n == 0 ? 1 : n);
}
}  // namespace

__attribute__((noinline)) void* operator new(std::size_t n) {
  if (void* p = counted_malloc(n)) return p;
  throw std::bad_alloc();
}
__attribute__((noinline)) void* operator new[](std::size_t n) {
  if (void* p = counted_malloc(n)) return p;
  throw std::bad_alloc();
}
__attribute__((noinline)) void* operator new(std::size_t n, const std::nothrow_t&) noexcept { return counted_malloc(n); }
__attribute__((noinline)) void* operator new[](std::size_t n, const std::nothrow_t&) noexcept { return counted_malloc(n); }
__attribute__((noinline)) void operator delete(void* p) noexcept { std::free(p); }
__attribute__((noinline)) void operator delete[](void* p) noexcept { std::free(p); }
__attribute__((noinline)) void operator delete(void* p, std::size_t) noexcept { std::free(p); }
__attribute__((noinline)) void operator delete[](void* p, std::size_t) noexcept { std::free(p); }
__attribute__((noinline)) void operator delete(void* p, const std::nothrow_t&) noexcept { std::free(p); }
__attribute__((noinline)) void operator delete[](void* p, const std::nothrow_t&) noexcept { std::free(p); }

namespace fp4serve {
namespace {

struct Fixture {
  const char* set;
  const char* name;
};
void PrintTo(const Fixture& f, std::ostream* os) { *os << f.set << "/" << f.name; }

class DecodeAllocation : public ::testing::TestWithParam<Fixture> {};

TEST_P(DecodeAllocation, SteadyStateDecodeStepAllocatesNothing) {
  const oracle::Case c{GetParam().name, "default", GetParam().set};
  const oracle::Data data = oracle::load(c);
  const auto model = oracle::open_with_auto_kernels(c, 3);
  const auto steps = static_cast<std::int64_t>(data.greedy_ids.size());
  hybrid_test::SequenceBuffers seq(model->state_spec(), static_cast<std::int64_t>(data.prompt_ids.size()) + steps);
  std::vector<float> logits(static_cast<std::size_t>(data.prompt_ids.size()) * static_cast<std::size_t>(data.vocab));

  auto step = [&](std::span<const std::int32_t> tokens, LogitsFor which) {
    const SequenceChunk chunk{tokens, &seq.state, which};
    const std::size_t rows = which == LogitsFor::AllPositions ? tokens.size() : 1;
    model->forward({&chunk, 1}, std::span<float>(logits.data(), rows * static_cast<std::size_t>(data.vocab)));
    seq.state.past += static_cast<std::int64_t>(tokens.size());
  };
  step(data.prompt_ids, LogitsFor::AllPositions);
  for (std::int64_t i = 0; i < 2; ++i) step({&data.greedy_ids[static_cast<std::size_t>(i)], 1}, LogitsFor::LastPosition);

  g_allocations.store(0);
  g_counting.store(true);
  for (std::int64_t i = 2; i < 6 && i < steps; ++i)
    step({&data.greedy_ids[static_cast<std::size_t>(i)], 1}, LogitsFor::LastPosition);
  g_counting.store(false);
  EXPECT_EQ(g_allocations.load(), 0) << "operator new calls in 4 decode steps";
  // The counter itself works: a vector allocates.
  g_allocations.store(0);
  g_counting.store(true);
  auto* probe = new std::vector<int>(3);
  g_probe_sink = probe;
  g_counting.store(false);
  delete probe;
  EXPECT_EQ(g_allocations.load(), 2);
}

INSTANTIATE_TEST_SUITE_P(Models, DecodeAllocation,
                         ::testing::Values(Fixture{"oracle", "qwen3_bf16_dense"}, Fixture{"oracle", "moe_nvfp4_modelopt"},
                                           Fixture{"oracle_hybrid", "qwen3_5_moe_nvfp4_modelopt"},
                                           Fixture{"oracle_hybrid", "qwen3_next_bf16"}),
                         [](const auto& p) { return std::string(p.param.name); });

}  // namespace
}  // namespace fp4serve
