#include "kernels/prefill_tiles.h"

#include <algorithm>
#include <cstddef>
#include <cstring>

#include "kernels/scratch.h"
#include "util/thread_pool.h"

namespace fp4serve::kernels {

bool enough_prefill_tasks(const AttentionArgs& a, std::int64_t threads) {
  return a.m * a.num_kv_heads >= kPrefillTasksPerThread * threads;
}

std::int64_t prefill_tile_tokens(const AttentionArgs& a, std::int64_t threads, std::int64_t rows) {
  const std::int64_t group = a.num_heads / a.num_kv_heads;
  const std::int64_t most = std::min(kPrefillTileTokens * rows / kPrefillTileRows, rows / group);
  return std::max<std::int64_t>(1, std::min(most, a.m * a.num_kv_heads / (kPrefillTasksPerThread * threads)));
}

void run_prefill_tiles(const AttentionArgs& a, std::int64_t tile_tokens, PrefillTileFn tile) {
  for_each_prefill_tile(a, tile_tokens, [&a, tile](std::int64_t i0, std::int64_t tokens, std::int64_t g) { tile(a, i0, tokens, g); });
}

PrefillTileScratch start_prefill_tile(const AttentionArgs& a, std::int64_t i0, std::int64_t tokens, std::int64_t g,
                                      std::int64_t block) {
  const std::int64_t D = a.head_dim, G = a.num_heads / a.num_kv_heads, Q = tokens * G;
  const std::size_t floats = static_cast<std::size_t>(2 * Q * D + Q * kPrefillChunk + 2 * block * D + 16);
  auto* base = static_cast<float*>(thread_scratch(kScratchAttention, floats * sizeof(float) + static_cast<std::size_t>(Q) * sizeof(RunningSoftmax)));
  PrefillTileScratch t;
  t.q = base;
  t.o = t.q + Q * D;
  t.s = t.o + Q * D;
  t.keys = reinterpret_cast<float*>((reinterpret_cast<std::uintptr_t>(t.s + Q * kPrefillChunk) + 63) & ~std::uintptr_t{63});
  t.values = t.keys + block * D;
  t.state = reinterpret_cast<RunningSoftmax*>(t.values + block * D);
  for (std::int64_t i = 0; i < tokens; ++i)  // the G heads of group g are adjacent in a token's row
    std::memcpy(t.q + i * G * D, a.q + ((i0 + i) * a.num_heads + g * G) * D, static_cast<std::size_t>(G * D) * sizeof(float));
  std::fill(t.o, t.o + Q * D, 0.0f);
  std::fill(t.state, t.state + Q, RunningSoftmax{});
  return t;
}

void prefill_chunk_softmax(const AttentionArgs& a, std::int64_t i0, std::int64_t tokens, std::int64_t c0, std::int64_t cn,
                           const PrefillTileScratch& t, const PrefillVectorOps& ops) {
  const std::int64_t D = a.head_dim, G = a.num_heads / a.num_kv_heads;
  for (std::int64_t r = 0; r < tokens * G; ++r) {
    const std::int64_t n = std::min(a.past + i0 + r / G + 1 - c0, cn);
    if (n <= 0) continue;
    float* sr = t.s + r * kPrefillChunk;
    const ChunkScales f = chunk_softmax(sr, n, ops.max(sr, n), ops.numerators, t.state[r]);
    if (f.chunk_scale != 1.0f) ops.scale(sr, n, f.chunk_scale);
    if (f.old_scale != 1.0f) ops.scale(t.o + r * D, D, f.old_scale);
  }
}

void finish_prefill_tile(const AttentionArgs& a, std::int64_t i0, std::int64_t tokens, std::int64_t g,
                         const PrefillTileScratch& t) {
  const std::int64_t D = a.head_dim, G = a.num_heads / a.num_kv_heads;
  for (std::int64_t r = 0; r < tokens * G; ++r) {
    const auto inv = static_cast<float>(1.0 / t.state[r].sum);
    float* out = a.out + ((i0 + r / G) * a.num_heads + g * G + r % G) * D;
    for (std::int64_t d = 0; d < D; ++d) out[d] = t.o[r * D + d] * inv;
  }
}

}  // namespace fp4serve::kernels
