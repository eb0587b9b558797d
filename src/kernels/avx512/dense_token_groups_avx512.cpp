// Dense (BF16, F16, F32, FP8) weight x fp32 GEMM for m >= 16 on AVX-512: tokens in the lanes.
//
// Why a second dense loop: the row loops of dense_gemm_avx512.cpp keep a row's elements in the
// lanes, so each converted weight vector serves four tokens, every (row, token) ends in a
// horizontal sum, and at 16 tokens the activations (128 KB at k = 2048) come from L2 once per
// 4-row tile. They ran at ~55 % of two cores' FMA peak (kernels_bench bf16_m16), which made the
// BF16 lm_head compute-bound in a 16-sequence decode step: 2 * 16 * 311 M = 10 GFLOP per step
// for 0.62 GB of weights.
//
// Here 16 rows x 256 elements of the weights are converted to fp32 once into a panel in L1, and
// each weight is broadcast against 16 tokens' activations (one vector of the transposed group):
// lane t of accumulator r sums token t's products with row r. Per element 16 FMAs, each with a
// broadcast operand from the panel, and one activation load; no horizontal sums. The 16
// accumulators sum one panel's 256 elements; panels add up in memory, so no fp32 sum runs
// longer than 256 terms before it is added to the total (the row loops' sums were 16 lanes of
// k / 16 terms).
// ISA translation unit: no standard-library templates here (see nvfp4_gemm_avx512.cpp).
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "kernels/avx512/dense_loaders.h"
#include "kernels/avx512/dense_token_groups.h"
#include "kernels/isa_kernels.h"
#include "kernels/scratch.h"
#include "kernels/token_groups.h"
#include "util/thread_pool.h"

namespace fp4serve::kernels::avx512 {

namespace {

constexpr std::int64_t kGroup = 16;      // tokens per group: one per fp32 lane
constexpr std::int64_t kPanelRows = 16;  // rows per panel: 16 accumulators
constexpr std::int64_t kChunk = 256;     // elements per panel row: 16 rows x 1 KB in L1
// The weights requested to L2 while a panel is multiplied: the panel this many on. With the next
// one the conversion still waited on memory for a third of its time.
constexpr std::int64_t kPanelsAhead = 2;
// A last partial group with this many tokens runs padded; fewer go to the row loops.
constexpr std::int64_t kPaddedMinTokens = 12;
// Groups whose transposed activations stay in L2 while the panels pass over them (each panel is
// converted once per such block of tokens).
constexpr std::int64_t kTokenBlockBytes = 1 << 20;

// Group g's transposed activations: element e of its 16 tokens at xt + (g * k + e) * 16; tokens
// past m are zeros (their lanes are computed and never stored).
void transpose_group(const float* x, std::int64_t m, std::int64_t k, std::int64_t g, float* xt) {
  float* out = xt + g * k * kGroup;
  const std::int64_t t0 = g * kGroup, tokens = m - t0 < kGroup ? m - t0 : kGroup;
  for (std::int64_t t = 0; t < kGroup; t += 4) {
    const float* src[4];
    for (int i = 0; i < 4; ++i) src[i] = t + i < tokens ? x + (t0 + t + i) * k : nullptr;
    std::int64_t e = 0;
    for (; e + 4 <= k; e += 4) {
      __m128 r[4];
      for (int i = 0; i < 4; ++i) r[i] = src[i] != nullptr ? _mm_loadu_ps(src[i] + e) : _mm_setzero_ps();
      _MM_TRANSPOSE4_PS(r[0], r[1], r[2], r[3]);
      for (int i = 0; i < 4; ++i) _mm_store_ps(out + (e + i) * kGroup + t, r[i]);
    }
    for (; e < k; ++e)
      for (int i = 0; i < 4; ++i) out[e * kGroup + t + i] = src[i] != nullptr ? src[i][e] : 0.0f;
  }
}

struct Ctx {
  const float* xt;  // transposed groups
  std::int64_t m, k, n;
  const std::uint8_t* data;
  float scale;
  float* y;
};

// Rows [r0, r0 + rows) x elements [e0, e0 + len) as fp32 into panel[r * kChunk + j]; rows past
// `rows` and elements past the row's end are zeros (never read from the matrix).
template <class L>
void convert_panel(const Ctx& c, std::int64_t r0, std::int64_t rows, std::int64_t e0, std::int64_t len, float* panel) {
  const std::int64_t row_bytes = c.k * L::bytes;
  for (std::int64_t r = 0; r < kPanelRows; ++r) {
    float* dst = panel + r * kChunk;
    if (r >= rows) {
      for (std::int64_t j = 0; j < len; j += 16) _mm512_store_ps(dst + j, _mm512_setzero_ps());
      continue;
    }
    const std::uint8_t* src = c.data + (r0 + r) * row_bytes + e0 * L::bytes;
    std::int64_t j = 0;
    for (; j + 16 <= len; j += 16) _mm512_store_ps(dst + j, L::load(src + j * L::bytes));
    if (j < len) {
      alignas(64) std::uint8_t buf[64] = {};
      std::memcpy(buf, src + j * L::bytes, static_cast<std::size_t>((len - j) * L::bytes));
      _mm512_store_ps(dst + j, L::load(buf));
    }
  }
}

// The lines of a later panel's weights, requested to L2 while the current one is multiplied:
// `rows` rows from `first`, `line_bytes` each (64-byte lines), row_bytes apart.
struct NextPanel {
  const std::uint8_t* first;  // nullptr: none
  std::int64_t rows, row_bytes, line_bytes;
};

// total[r] (+)= panel rows' elements [0, len) . the group's 16 tokens (xt at the panel's first
// element). `fresh`: the first panel of these rows, which stores instead of adding.
__attribute__((noinline)) void panel_times_group(const float* panel, const float* xt, std::int64_t len, __m512* total,
                                                 bool fresh, const NextPanel& next) {
  __m512 acc[kPanelRows];
#pragma GCC unroll 16
  for (int r = 0; r < kPanelRows; ++r) acc[r] = _mm512_setzero_ps();
  // One 64-byte line of the next panel per `every` elements, spread over the loop: a burst of a
  // panel's requests at once mostly dropped while the core's miss buffers were full (the same
  // finding as the int8 token groups' row decode, docs/perf.md, session 23).
  const std::int64_t lines_per_row = next.first != nullptr ? (next.line_bytes + 63) / 64 : 0;
  const std::int64_t lines = lines_per_row * next.rows;
  const std::int64_t every = lines > 0 ? (len + lines - 1) / lines : len + 1;
  std::int64_t line = 0, line_row = 0, line_off = 0, countdown = 0;  // no division in the loop
  for (std::int64_t j = 0; j < len; ++j) {
    if (--countdown <= 0 && line < lines) {
      countdown = every;
      _mm_prefetch(reinterpret_cast<const char*>(next.first + line_row * next.row_bytes + line_off), _MM_HINT_T1);
      ++line;
      line_off += 64;
      if (line_off >= lines_per_row * 64) {
        line_off = 0;
        ++line_row;
      }
    }
    const __m512 v = _mm512_load_ps(xt + j * kGroup);
#pragma GCC unroll 16
    for (int r = 0; r < kPanelRows; ++r) acc[r] = _mm512_fmadd_ps(_mm512_set1_ps(panel[r * kChunk + j]), v, acc[r]);
  }
#pragma GCC unroll 16
  for (int r = 0; r < kPanelRows; ++r) total[r] = fresh ? acc[r] : _mm512_add_ps(total[r], acc[r]);
}

// Rows [b, e) for every token: blocks of groups; in each, every 16 rows are converted one panel
// at a time and multiplied with each group of the block.
template <class L>
void run_rows(const Ctx& c, std::int64_t b, std::int64_t e) {
  const std::int64_t groups = (c.m + kGroup - 1) / kGroup, group_bytes = c.k * kGroup * 4;
  std::int64_t block = kTokenBlockBytes / group_bytes;
  if (block < 1) block = 1;
  if (block > groups) block = groups;
  const std::int64_t row_bytes = c.k * L::bytes, chunks = (c.k + kChunk - 1) / kChunk;
  auto* mem = static_cast<std::uint8_t*>(thread_scratch(
      kScratchGemmWeights, static_cast<std::size_t>(kPanelRows * kChunk * 4 + block * kPanelRows * 64)));
  float* panel = reinterpret_cast<float*>(mem);
  auto* totals = reinterpret_cast<__m512*>(mem + kPanelRows * kChunk * 4);
  for (std::int64_t g0 = 0; g0 < groups; g0 += block) {
    const std::int64_t g1 = g0 + block < groups ? g0 + block : groups;
    for (std::int64_t r0 = b; r0 < e; r0 += kPanelRows) {
      const std::int64_t rows = e - r0 < kPanelRows ? e - r0 : kPanelRows;
      for (std::int64_t e0 = 0; e0 < c.k; e0 += kChunk) {
        const std::int64_t len = c.k - e0 < kChunk ? c.k - e0 : kChunk;
        convert_panel<L>(c, r0, rows, e0, len, panel);
        // The panel kPanelsAhead on, in this range's order (chunks of a row block, then the next
        // block's).
        NextPanel next{nullptr, 0, row_bytes, 0};
        {
          std::int64_t ahead_r0 = r0, ahead_e0 = e0 + kPanelsAhead * kChunk;
          while (ahead_e0 >= c.k) {
            ahead_e0 -= chunks * kChunk;
            ahead_r0 += kPanelRows;
          }
          if (ahead_r0 < e) {
            const std::int64_t ahead_rows = e - ahead_r0 < kPanelRows ? e - ahead_r0 : kPanelRows;
            const std::int64_t ahead_len = c.k - ahead_e0 < kChunk ? c.k - ahead_e0 : kChunk;
            next = {c.data + ahead_r0 * row_bytes + ahead_e0 * L::bytes, ahead_rows, row_bytes, ahead_len * L::bytes};
          }
        }
        for (std::int64_t g = g0; g < g1; ++g)
          panel_times_group(panel, c.xt + (g * c.k + e0) * kGroup, len, totals + (g - g0) * kPanelRows, e0 == 0,
                            g == g0 ? next : NextPanel{nullptr, 0, 0, 0});
      }
      // Lane t of totals[r] is y[16g + t][r0 + r].
      for (std::int64_t g = g0; g < g1; ++g) {
        alignas(64) float lanes[kPanelRows][kGroup];
        for (std::int64_t r = 0; r < kPanelRows; ++r)
          _mm512_store_ps(lanes[r], _mm512_mul_ps(totals[(g - g0) * kPanelRows + r], _mm512_set1_ps(c.scale)));
        const std::int64_t tokens = c.m - g * kGroup < kGroup ? c.m - g * kGroup : kGroup;
        for (std::int64_t t = 0; t < tokens; ++t) {
          float* yt = c.y + (g * kGroup + t) * c.n + r0;
          for (std::int64_t r = 0; r < rows; ++r) yt[r] = lanes[r][t];
        }
      }
    }
  }
}

template <class L>
void run(const Ctx& c) {
  // Grain 4 panels: each range converts whole panels, and 151936 lm_head rows make ~2400 ranges.
  parallel_for(c.n, 4 * kPanelRows, [&c](std::int64_t b, std::int64_t e) { run_rows<L>(c, b, e); });
}

}  // namespace

std::int64_t dense_token_group_tokens(std::int64_t m) { return tokens_in_groups(m, kGroup, kPaddedMinTokens); }

void dense_gemm_token_groups(const float* x, std::int64_t m, const WeightMatrix& w, float* y) {
  if (m <= 0 || w.n <= 0) return;
  const std::int64_t groups = (m + kGroup - 1) / kGroup;
  auto* xt = static_cast<float*>(
      thread_scratch(kScratchGemmActivations, static_cast<std::size_t>(groups * w.k * kGroup) * sizeof(float)));
  parallel_for(groups, 1, [x, m, &w, xt](std::int64_t g0, std::int64_t g1) {
    for (std::int64_t g = g0; g < g1; ++g) transpose_group(x, m, w.k, g, xt);
  });
  const Ctx c{xt, m, w.k, w.n, w.data, w.kind == SchemeKind::FP8 ? w.weight_scale_2 : 1.0f, y};
  if (w.kind == SchemeKind::FP8) return run<Fp8>(c);
  switch (w.dtype) {
    case DType::BF16: return run<Bf16>(c);
    case DType::F16: return run<F16>(c);
    case DType::F32: return run<F32>(c);
    default: isa_unsupported("avx512 dense token groups: weight dtype not supported");
  }
}

}  // namespace fp4serve::kernels::avx512
