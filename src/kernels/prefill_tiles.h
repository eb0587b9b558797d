#pragma once
// The instruction-set-neutral half of the prefill attention tiles (avx512/ and
// avx2/attention_prefill_*.cpp, and amx/attention_prefill_amx.cpp's task loop and softmax step):
// how many tokens a tile takes, the task loop over (tile, KV head), a tile's scratch, moving its
// query rows in and its outputs out, the softmax step's loop over rows and the causal spans of the
// value step. The ISA files keep the arithmetic (key transpose, score and value calls, the vector
// max and scale the softmax step calls). Generic code, no ISA flags, except for_each_value_span
// and for_each_prefill_tile, templates instantiated where they are called.
#include <cstdint>

#include "kernels/kernels.h"
#include "kernels/online_softmax.h"
#include "util/thread_pool.h"

namespace fp4serve::kernels {

inline constexpr std::int64_t kPrefillTileTokens = 16;
inline constexpr std::int64_t kPrefillTileRows = 128;  // query rows (tokens x heads of the group) at most

// The tiles pay from this many (token, KV head) tasks per thread (prefill); decode takes other paths.
inline constexpr std::int64_t kPrefillTasksPerThread = 4;
bool enough_prefill_tasks(const AttentionArgs& a, std::int64_t threads);

// Up to `rows` query rows per tile (and kPrefillTileTokens tokens at the default), fewer when
// that leaves under four tasks per thread (a token's output is the same in a tile of any size).
std::int64_t prefill_tile_tokens(const AttentionArgs& a, std::int64_t threads, std::int64_t rows = kPrefillTileRows);

// Query tokens [i0, i0 + tokens), every query head of KV head g.
using PrefillTileFn = void (*)(const AttentionArgs& a, std::int64_t i0, std::int64_t tokens, std::int64_t g);

// Calls tile(i0, tokens, g) for every (tile of tile_tokens, KV head) on the pool, the tiles that
// see the most positions first so the threads finish together. Internal linkage where an ISA file
// instantiates it (a lambda type).
template <class Tile>
void for_each_prefill_tile(const AttentionArgs& a, std::int64_t tile_tokens, Tile&& tile) {
  const std::int64_t tiles = (a.m + tile_tokens - 1) / tile_tokens;
  parallel_for(tiles * a.num_kv_heads, 1, [&a, tiles, tile_tokens, &tile](std::int64_t b, std::int64_t e) {
    for (std::int64_t t = b; t < e; ++t) {
      const std::int64_t i0 = (tiles - 1 - t / a.num_kv_heads) * tile_tokens;
      tile(i0, a.m - i0 < tile_tokens ? a.m - i0 : tile_tokens, t % a.num_kv_heads);
    }
  });
}

// for_each_prefill_tile with tile(a, i0, tokens, g).
void run_prefill_tiles(const AttentionArgs& a, std::int64_t tile_tokens, PrefillTileFn tile);

// A tile's working memory in this thread's scratch: Q = tokens x heads query rows of D floats,
// their value sums, one softmax chunk of scores per row, two blocks of `block` rows of D floats
// (64-byte aligned: a transposed key block and a widened value block), and the rows' softmax state.
struct PrefillTileScratch {
  float* q;      // [Q][D], token-major
  float* o;      // [Q][D]
  float* s;      // [Q][kPrefillChunk]
  float* keys;   // [D][block]
  float* values; // [block][D]
  RunningSoftmax* state;  // [Q]
};

// The scratch of tokens [i0, i0 + tokens) and KV head g, with q filled from a.q, o zeroed and the
// softmax states reset.
PrefillTileScratch start_prefill_tile(const AttentionArgs& a, std::int64_t i0, std::int64_t tokens, std::int64_t g,
                                      std::int64_t block);

// The backend's vector loops step 2 runs on.
struct PrefillVectorOps {
  double (*numerators)(float* s, std::int64_t n);  // softmax numerators in place, their sum
  float (*max)(const float* s, std::int64_t n);     // NaN skipped, as `numerators` skips it
  void (*scale)(float* x, std::int64_t n, float c);
};

// Step 2 for the chunk [c0, c0 + cn): each row's scores over its visible part of the chunk become
// softmax numerators against the running max, and the chunk's or the earlier sums are rescaled.
void prefill_chunk_softmax(const AttentionArgs& a, std::int64_t i0, std::int64_t tokens, std::int64_t c0, std::int64_t cn,
                           const PrefillTileScratch& t, const PrefillVectorOps& ops);

// Step 3's spans over a block of n positions from `first`, query rows in groups of `rows`:
// call(r0, R, 0, shared) for the positions every row of a group sees, then call(r, 1, from, count)
// for each row's own rest up to its causal limit. Rows are token-major, so a group's first row
// sees the fewest positions. Internal linkage where an ISA file instantiates it (a lambda type).
template <class Call>
void for_each_value_span(const AttentionArgs& a, std::int64_t i0, std::int64_t tokens, std::int64_t rows,
                         std::int64_t first, std::int64_t n, Call&& call) {
  const std::int64_t G = a.num_heads / a.num_kv_heads, Q = tokens * G;
  auto seen = [&](std::int64_t r) {  // positions of this block row r sees
    const std::int64_t visible = a.past + i0 + r / G + 1 - first;
    return visible < n ? visible : n;
  };
  for (std::int64_t r0 = 0; r0 < Q; r0 += rows) {
    const std::int64_t R = Q - r0 < rows ? Q - r0 : rows, shared = seen(r0);
    if (shared > 0) call(r0, R, std::int64_t{0}, shared);
    const std::int64_t from = shared > 0 ? shared : 0;
    for (std::int64_t r = r0; r < r0 + R; ++r)
      if (const std::int64_t own = seen(r); own > from) call(r, std::int64_t{1}, from, own - from);
  }
}

// a.out of the tile's rows: o / sum per row.
void finish_prefill_tile(const AttentionArgs& a, std::int64_t i0, std::int64_t tokens, std::int64_t g,
                         const PrefillTileScratch& t);

}  // namespace fp4serve::kernels
