#pragma once
// Softmax over positions taken a chunk at a time (flash attention's running max and sum), shared
// by the SIMD backends' prefill attention: a query row's scores are never all held at once, so a
// task's buffers do not grow with the context. Generic code, no ISA flags.
#include <cstdint>

namespace fp4serve::kernels {

// Positions per softmax step of the prefill kernels (256 positions of 128 query rows: 128 KB of
// scores, in L2 with the rest of a tile's state).
inline constexpr std::int64_t kPrefillChunk = 256;

// One query row's softmax so far: the largest score seen and the sum of exp(score - max).
struct RunningSoftmax {
  float max = 0.0f;
  double sum = 0.0;
  bool started = false;
};

// The factors to apply after one chunk: the row's value sums so far times `old_scale`, the
// chunk's numerators (already in s) times `chunk_scale`. Both are exactly 1 when nothing changes,
// so a row that fits in one chunk is computed as the two-pass softmax would.
struct ChunkScales {
  float old_scale;
  float chunk_scale;
};

// s[0, n) (n >= 1) become their softmax numerators against the chunk's own max `chunk_max` (the
// caller's vector max of s, NaN skipped as the backend's `numerators` skips it); the running
// state moves to the larger max.
ChunkScales chunk_softmax(float* s, std::int64_t n, float chunk_max, double (*numerators)(float*, std::int64_t),
                          RunningSoftmax& r);

}  // namespace fp4serve::kernels
