#pragma once
// The dense token-group GEMMs (avx512/ and avx2/dense_token_groups_*.cpp; avx512's file says why
// tokens go in the lanes), written once over an instruction set's fp32 vector. Each supplies a
// class K:
//   K::kGroup          tokens per group = fp32 lanes of K::Vec
//   K::kPanelRows      rows per panel = accumulators in the FMA loop
//   K::kPaddedMinTokens a last partial group with this many tokens runs padded
//   K::zero(), K::load(p), K::store(p, v) (aligned), K::broadcast(p) (one float to every lane),
//   K::fmadd(a, b, c) = a * b + c, K::add, K::mul, K::set1
// and loaders L (L::bytes per weight, L::load(p): kGroup weights from p as fp32).
// Internal linkage only (src/kernels/check_isa_objects.cmake): included by ISA translation units.
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "kernels/kernels.h"
#include "kernels/scratch.h"
#include "kernels/token_groups.h"
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

// Rows [r0, r0 + rows) x elements [e0, e0 + len) as fp32 into panel[r * kDenseGroupChunk + j];
// rows past `rows` and elements past the row's end are zeros (never read from the matrix).
template <class K, class L>
void convert_panel(const DenseGroupsCtx& c, std::int64_t r0, std::int64_t rows, std::int64_t e0, std::int64_t len,
                   float* panel) {
  constexpr std::int64_t W = K::kGroup;
  const std::int64_t row_bytes = c.k * L::bytes;
  for (std::int64_t r = 0; r < K::kPanelRows; ++r) {
    float* dst = panel + r * kDenseGroupChunk;
    if (r >= rows) {
      for (std::int64_t j = 0; j < len; j += W) K::store(dst + j, K::zero());
      continue;
    }
    const std::uint8_t* src = c.data + (r0 + r) * row_bytes + e0 * L::bytes;
    std::int64_t j = 0;
    for (; j + W <= len; j += W) K::store(dst + j, L::load(src + j * L::bytes));
    if (j < len) {
      alignas(64) std::uint8_t buf[W * 4] = {};
      std::memcpy(buf, src + j * L::bytes, static_cast<std::size_t>((len - j) * L::bytes));
      K::store(dst + j, L::load(buf));
    }
  }
}

// total[r] (+)= the panel's row r, elements [0, len), . the group's tokens (xt at the panel's
// first element): per element one vector of activations and kPanelRows FMAs with a broadcast
// weight each; no horizontal sums. `fresh`: the first panel of these rows, which stores instead
// of adding, so no fp32 sum runs longer than one panel before it joins the total.
template <class K>
__attribute__((noinline)) void panel_times_group(const float* panel, const float* xt, std::int64_t len,
                                                 typename K::Vec* total, bool fresh, const NextPanel& next) {
  constexpr std::int64_t R = K::kPanelRows;
  typename K::Vec acc[R];
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r) acc[r] = K::zero();
  PanelPrefetch prefetch(next, len);
  for (std::int64_t j = 0; j < len; ++j) {
    prefetch.step();
    const typename K::Vec v = K::load(xt + j * K::kGroup);
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) acc[r] = K::fmadd(K::broadcast(panel + r * kDenseGroupChunk + j), v, acc[r]);
  }
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r) total[r] = fresh ? acc[r] : K::add(total[r], acc[r]);
}

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
        convert_panel<K, L>(c, r0, rows, e0, len, panel);
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
          panel_times_group<K>(panel, c.xt + (g * c.k + e0) * G, len, totals + (g - g0) * R, e0 == 0,
                               g == g0 ? next : NextPanel{nullptr, 0, 0, 0});
      }
      // Lane t of totals[r] is y[G * g + t][r0 + r].
      for (std::int64_t g = g0; g < g1; ++g) {
        alignas(64) float lanes[R][G];
        for (std::int64_t r = 0; r < R; ++r) K::store(lanes[r], K::mul(totals[(g - g0) * R + r], K::set1(c.scale)));
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

// A dense GEMM's first step (avx512/ and avx2/dense_gemm_*.cpp): from 16 tokens, whole groups of
// kGroup (and a last partial one from kPaddedMinTokens) go through K with this instruction set's
// loaders; x, m and y are left at the tokens its row loops take. True when none are left.
template <class K, class Bf16, class F16, class F32, class Fp8>
bool dense_leading_groups(const float*& x, std::int64_t& m, const WeightMatrix& w, float*& y) {
  const std::int64_t grouped = m < 16 ? 0 : tokens_in_groups(m, K::kGroup, K::kPaddedMinTokens);
  if (grouped == 0 || w.n <= 0) return false;
  if (w.kind == SchemeKind::FP8) {
    dense_token_groups<K, Fp8>(x, grouped, w, y, w.weight_scale_2);
  } else {
    switch (w.dtype) {
      case DType::BF16: dense_token_groups<K, Bf16>(x, grouped, w, y, 1.0f); break;
      case DType::F16: dense_token_groups<K, F16>(x, grouped, w, y, 1.0f); break;
      case DType::F32: dense_token_groups<K, F32>(x, grouped, w, y, 1.0f); break;
      default: return false;  // the row loops refuse it
    }
  }
  x += grouped * w.k;
  y += grouped * w.n;
  m -= grouped;
  return m == 0;
}

}  // namespace
}  // namespace fp4serve::kernels
