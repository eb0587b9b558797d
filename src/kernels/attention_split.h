#pragma once
// Decode attention over a long cache, split by position (flash-decoding), shared by the SIMD
// backends. Decode has one query token per sequence, so one task per (token, KV head) leaves
// cores idle (Qwen3-30B-A3B: 4 KV heads), and one task per query head reads every cached key and
// value row once per head of its group (8 times) from L2 or memory. Instead each task takes one
// (token, KV head, slice of positions), computes every query head of the group over its slice,
// and leaves per head the slice's largest score m_s, its sum of exp(score - m_s) l_s and its
// unscaled value sum acc_s; then per (token, head)
//   out = sum_s e^(m_s - M) acc_s / sum_s e^(m_s - M) l_s,   M = max_s m_s.
// The backend supplies the slice kernel; planning, the task loop and the combine live here
// (generic code, no ISA flags).
#include <cstdint>

#include "kernels/kernels.h"

namespace fp4serve::kernels {

// Below this many positions per slice, the per-head split keeps every core busy while a head's
// rows stay in L2 between its query heads.
inline constexpr std::int64_t kMinSplitPositions = 256;

// One slice's results for the G query heads of a KV head.
struct SlicePartial {
  float* acc;  // [G][head_dim], unscaled: sum_p e^(score_p - max) v_p
  float* max;  // [G]
  float* sum;  // [G]: sum_p e^(score_p - max)
};

// Slices per (token, KV head) for this call: enough for four tasks per thread, none shorter
// than kMinSplitPositions (for the first token, the one that sees the fewest positions). Below 2
// the caller takes its unsplit paths.
std::int64_t attention_splits(const AttentionArgs& a, std::int64_t threads);

// Head h's scores s[0, n) become their softmax numerators (by the backend's `numerators`, which
// reports the max it subtracted: a separate scalar pass for it took a tenth of the split decode's
// time at 8192 positions, docs/perf.md, session 34); returns 1 / their sum and, for a slice
// (part != nullptr), records that max and the sum. Out of line: ISA files call it, and an inline
// copy compiled with their flags could be the one the linker keeps.
float slice_softmax(float* s, std::int64_t n, double (*numerators)(float*, std::int64_t, float*), const SlicePartial* part,
                    std::int64_t h);

// Positions [first, last) of token i's visible ones, for KV head g; fills `part`.
using SliceKernel = void (*)(const AttentionArgs& a, std::int64_t i, std::int64_t g, std::int64_t first, std::int64_t last,
                             const SlicePartial& part);

// Runs every (token, KV head, slice) task on the pool, then combines the slices into a.out.
void split_attention(const AttentionArgs& a, std::int64_t splits, SliceKernel slice);

}  // namespace fp4serve::kernels
