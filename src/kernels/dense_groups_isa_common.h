#pragma once
// The instruction-set-neutral half of the dense token-group GEMMs (avx512/ and
// avx2/dense_token_groups_*.cpp; avx512's file says why tokens go in the lanes): the transposed
// activations, the blocking of tokens, rows and elements, the panel prefetch and the output. Each
// instruction set supplies a kernel class K with its vector width and two loops:
//   K::kGroup (tokens per group: fp32 lanes), K::kPanelRows (rows per panel: accumulators),
//   K::Vec (its fp32 vector),
//   K::convert_panel<L>(ctx, r0, rows, e0, len, panel): rows [r0, r0 + rows) x elements
//     [e0, e0 + len) as fp32 into panel[r * kChunk + j], zeros past `rows` and past the row's end,
//   K::panel_times_group(panel, xt, len, totals, fresh, next): totals[r] (+)= the panel's row r
//     . the group's tokens, the next panel's lines requested through a PanelPrefetch,
//   K::store_scaled(v, scale, lanes): lanes[0, kGroup) = v * scale.
// Internal linkage only (src/kernels/check_isa_objects.cmake): included by ISA translation units.
#include <immintrin.h>

#include <cstdint>

#include "kernels/kernels.h"
#include "kernels/scratch.h"
#include "util/thread_pool.h"

namespace fp4serve::kernels {
namespace {

constexpr std::int64_t kDenseGroupChunk = 256;  // elements per panel row: 1 KB of fp32 per row in L1
// The weights requested to L2 while a panel is multiplied: the panel this many on. With the next
// one the conversion still waited on memory for a third of its time (docs/perf.md, session 27).
constexpr std::int64_t kDenseGroupPanelsAhead = 2;
// Groups whose transposed activations stay in L2 while the panels pass over them (each panel is
// converted once per such block of tokens).
constexpr std::int64_t kDenseGroupTokenBlockBytes = 1 << 20;

struct DenseGroupsCtx {
  const float* xt;  // transposed groups: group g's element e of its tokens at xt + (g * k + e) * group
  std::int64_t m, k, n;
  const std::uint8_t* data;
  float scale;
  float* y;
};

// Group g's transposed activations (SSE: any x86-64); tokens past m are zeros (their lanes are
// computed and never stored).
template <std::int64_t Group>
void transpose_group(const float* x, std::int64_t m, std::int64_t k, std::int64_t g, float* xt) {
  float* out = xt + g * k * Group;
  const std::int64_t t0 = g * Group, tokens = m - t0 < Group ? m - t0 : Group;
  for (std::int64_t t = 0; t < Group; t += 4) {
    const float* src[4];
    for (int i = 0; i < 4; ++i) src[i] = t + i < tokens ? x + (t0 + t + i) * k : nullptr;
    std::int64_t e = 0;
    for (; e + 4 <= k; e += 4) {
      __m128 r[4];
      for (int i = 0; i < 4; ++i) r[i] = src[i] != nullptr ? _mm_loadu_ps(src[i] + e) : _mm_setzero_ps();
      _MM_TRANSPOSE4_PS(r[0], r[1], r[2], r[3]);
      for (int i = 0; i < 4; ++i) _mm_store_ps(out + (e + i) * Group + t, r[i]);
    }
    for (; e < k; ++e)
      for (int i = 0; i < 4; ++i) out[e * Group + t + i] = src[i] != nullptr ? src[i][e] : 0.0f;
  }
}

// The lines of a later panel's weights: `rows` rows from `first`, `line_bytes` each (64-byte
// lines), row_bytes apart.
struct NextPanel {
  const std::uint8_t* first;  // nullptr: none
  std::int64_t rows, row_bytes, line_bytes;
};

// Requests a NextPanel's lines to L2 one at a time, one per `every` calls of step() over a loop of
// `len` elements: a burst of a panel's requests at once stalls the core while its line fill
// buffers are full (docs/perf.md, sessions 23 and 27). No division in the loop.
class PanelPrefetch {
 public:
  PanelPrefetch(const NextPanel& next, std::int64_t len)
      : next_(next), lines_per_row_(next.first != nullptr ? (next.line_bytes + 63) / 64 : 0) {
    lines_ = lines_per_row_ * next.rows;
    every_ = lines_ > 0 ? (len + lines_ - 1) / lines_ : len + 1;
  }
  inline void step() {
    if (--countdown_ > 0 || line_ >= lines_) return;
    countdown_ = every_;
    _mm_prefetch(reinterpret_cast<const char*>(next_.first + row_ * next_.row_bytes + off_), _MM_HINT_T1);
    ++line_;
    off_ += 64;
    if (off_ >= lines_per_row_ * 64) {
      off_ = 0;
      ++row_;
    }
  }

 private:
  NextPanel next_;
  std::int64_t lines_per_row_, lines_ = 0, every_ = 0, line_ = 0, row_ = 0, off_ = 0, countdown_ = 0;
};

// Rows [b, e) for every token: blocks of groups; in each, every kPanelRows rows are converted one
// panel at a time and multiplied with each group of the block.
template <class K, class L>
void dense_group_rows(const DenseGroupsCtx& c, std::int64_t b, std::int64_t e) {
  constexpr std::int64_t G = K::kGroup, R = K::kPanelRows, C = kDenseGroupChunk;
  using Vec = typename K::Vec;
  const std::int64_t groups = (c.m + G - 1) / G, group_bytes = c.k * G * 4;
  std::int64_t block = kDenseGroupTokenBlockBytes / group_bytes;
  if (block < 1) block = 1;
  if (block > groups) block = groups;
  const std::int64_t row_bytes = c.k * L::bytes, chunks = (c.k + C - 1) / C;
  auto* mem = static_cast<std::uint8_t*>(thread_scratch(
      kScratchGemmWeights, static_cast<std::size_t>(R * C * 4) + static_cast<std::size_t>(block * R) * sizeof(Vec)));
  float* panel = reinterpret_cast<float*>(mem);
  auto* totals = reinterpret_cast<Vec*>(mem + R * C * 4);
  for (std::int64_t g0 = 0; g0 < groups; g0 += block) {
    const std::int64_t g1 = g0 + block < groups ? g0 + block : groups;
    for (std::int64_t r0 = b; r0 < e; r0 += R) {
      const std::int64_t rows = e - r0 < R ? e - r0 : R;
      for (std::int64_t e0 = 0; e0 < c.k; e0 += C) {
        const std::int64_t len = c.k - e0 < C ? c.k - e0 : C;
        K::template convert_panel<L>(c, r0, rows, e0, len, panel);
        // The panel kDenseGroupPanelsAhead on, in this range's order (chunks of a row block, then
        // the next block's); requested while the block's first group is multiplied.
        NextPanel next{nullptr, 0, row_bytes, 0};
        std::int64_t ahead_r0 = r0, ahead_e0 = e0 + kDenseGroupPanelsAhead * C;
        while (ahead_e0 >= c.k) {
          ahead_e0 -= chunks * C;
          ahead_r0 += R;
        }
        if (ahead_r0 < e) {
          const std::int64_t ahead_rows = e - ahead_r0 < R ? e - ahead_r0 : R;
          const std::int64_t ahead_len = c.k - ahead_e0 < C ? c.k - ahead_e0 : C;
          next = {c.data + ahead_r0 * row_bytes + ahead_e0 * L::bytes, ahead_rows, row_bytes, ahead_len * L::bytes};
        }
        for (std::int64_t g = g0; g < g1; ++g)
          K::panel_times_group(panel, c.xt + (g * c.k + e0) * G, len, totals + (g - g0) * R, e0 == 0,
                               g == g0 ? next : NextPanel{nullptr, 0, 0, 0});
      }
      // Lane t of totals[r] is y[G * g + t][r0 + r].
      for (std::int64_t g = g0; g < g1; ++g) {
        alignas(64) float lanes[R][G];
        for (std::int64_t r = 0; r < R; ++r) K::store_scaled(totals[(g - g0) * R + r], c.scale, lanes[r]);
        const std::int64_t tokens = c.m - g * G < G ? c.m - g * G : G;
        for (std::int64_t t = 0; t < tokens; ++t) {
          float* yt = c.y + (g * G + t) * c.n + r0;
          for (std::int64_t r = 0; r < rows; ++r) yt[r] = lanes[r][t];
        }
      }
    }
  }
}

// y[0..m) = x[0..m) * W^T through kernel class K with loader L; `scale`: FP8's per-tensor scale
// (1 otherwise).
template <class K, class L>
void dense_token_groups(const float* x, std::int64_t m, const WeightMatrix& w, float* y, float scale) {
  constexpr std::int64_t G = K::kGroup;
  const std::int64_t groups = (m + G - 1) / G;
  auto* xt = static_cast<float*>(
      thread_scratch(kScratchGemmActivations, static_cast<std::size_t>(groups * w.k * G) * sizeof(float)));
  parallel_for(groups, 1, [x, m, &w, xt](std::int64_t g0, std::int64_t g1) {
    for (std::int64_t g = g0; g < g1; ++g) transpose_group<G>(x, m, w.k, g, xt);
  });
  const DenseGroupsCtx c{xt, m, w.k, w.n, w.data, scale, y};
  // Ranges of at least 4 panels' rows: only a range's last panel can be partial, and a range's
  // first panel (not prefetched) is a small share of it.
  parallel_for(w.n, 4 * K::kPanelRows, [&c](std::int64_t b, std::int64_t e) { dense_group_rows<K, L>(c, b, e); });
}

}  // namespace
}  // namespace fp4serve::kernels
