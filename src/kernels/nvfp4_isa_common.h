#pragma once
// Pieces the NVFP4 GEMM translation units of every instruction set share (avx2/, avx512/).
// Everything here has internal linkage (static or in an unnamed namespace), so each ISA
// translation unit compiles its own copy with its own flags and the linker never picks one for
// another (src/kernels/check_isa_objects.cmake fails the build on weak symbols there).
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "util/thread_pool.h"

namespace fp4serve::kernels {
namespace {

// vpshufb indices for `Lanes` fp32 lanes of block scales: lane d takes scale code d / 2 into its
// low byte, the other three bytes zeroed (index 0x80). The codes are broadcast to every 128-bit
// lane first, so a byte offset within the lane reaches any of them.
template <int Lanes>
struct ScaleShuffle {
  alignas(64) std::int8_t idx[4 * Lanes];
  constexpr ScaleShuffle() : idx{} {
    for (int d = 0; d < Lanes; ++d) {
      idx[4 * d] = static_cast<std::int8_t>(d / 2);
      idx[4 * d + 1] = idx[4 * d + 2] = idx[4 * d + 3] = -128;
    }
  }
};

// A GEMV's own prefetch runs a fixed distance ahead of the rows it decodes, so a range's first
// rows would be read on demand, one stall after another. Decode hands the kernel 128-row slices
// of each expert: request the start of rows [b, e) up front instead, all lines at once, the first
// `l1_bytes` of rows to L1 and the rest of the first `l2_bytes` to L2 (as the kernel's own
// distances), with their block scales.
inline void prefetch_rows_start(const std::uint8_t* data, const std::uint8_t* scales, std::int64_t k, std::int64_t b,
                                std::int64_t e, std::int64_t l1_bytes, std::int64_t l2_bytes) {
  const std::int64_t row_bytes = k / 2, row_scales = k / 16;
  const std::int64_t l1_rows = (l1_bytes + row_bytes - 1) / row_bytes;
  const std::int64_t l2_rows = (l2_bytes + row_bytes - 1) / row_bytes;
  const std::int64_t last = b + l2_rows < e ? b + l2_rows : e;
  for (std::int64_t r = b; r < last; ++r) {
    const char* p = reinterpret_cast<const char*>(data + r * row_bytes);
    for (std::int64_t off = 0; off < row_bytes; off += 64) {
      if (r < b + l1_rows) _mm_prefetch(p + off, _MM_HINT_T0);
      else _mm_prefetch(p + off, _MM_HINT_T1);
    }
  }
  const char* s = reinterpret_cast<const char*>(scales + b * row_scales);
  for (std::int64_t off = 0; off < (last - b) * row_scales; off += 64) _mm_prefetch(s + off, _MM_HINT_T0);
}

// True when one of the `count` E4M3 codes at p has the sign bit or is 0x7F (NaN): such a row
// group cannot take the shift-into-the-exponent conversion and reads the table instead.
// Whole 64-byte pieces take plain loads and only the tail a masked one: on Zen 4 the masked load
// of every piece made the decode loop's per-pass check cost 1-3 % of a decode step (alternated,
// docs/perf.md, session 22).
#if defined(__AVX512BW__)
inline bool has_special_scale(const std::uint8_t* p, std::int64_t count) {
  const __m512i nan = _mm512_set1_epi8(0x7F);
  __mmask64 bad = 0;
  std::int64_t i = 0;
  for (; i + 64 <= count; i += 64) {
    const __m512i v = _mm512_loadu_si512(p + i);
    bad |= _mm512_movepi8_mask(v) | _mm512_cmpeq_epi8_mask(v, nan);
  }
  if (i < count) {
    const __mmask64 keep = (1ull << (count - i)) - 1;
    const __m512i v = _mm512_maskz_loadu_epi8(keep, p + i);
    bad |= (_mm512_movepi8_mask(v) | _mm512_cmpeq_epi8_mask(v, nan)) & keep;
  }
  return bad != 0;
}
#elif defined(__AVX2__)
inline bool has_special_scale(const std::uint8_t* p, std::int64_t count) {
  const __m256i nan = _mm256_set1_epi8(0x7F);
  std::int64_t i = 0;
  for (; i + 32 <= count; i += 32) {
    const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i));
    if (_mm256_movemask_epi8(_mm256_or_si256(v, _mm256_cmpeq_epi8(v, nan))) != 0) return true;
  }
  for (; i < count; ++i)
    if (p[i] >= 0x7F) return true;
  return false;
}
#endif

// ---- int8-activation kernels (avx2/, vnni/) ----

// The kernels take their token count as a template argument (each instance one tight loop).
// with_token_count<MaxMb>(m, run) calls run(TokenCount<n>{}) with n = min(m, 8, MaxMb), so a
// class that never sees more than MaxMb tokens gets no instances beyond them.
template <int N>
struct TokenCount {
  static constexpr int kValue = N;
};

template <int MaxMb, class Run>
void with_token_count(std::int64_t m, Run&& run) {
  constexpr auto cap = [](int n) { return n < MaxMb ? n : MaxMb; };
  switch (m) {
    case 1: return run(TokenCount<cap(1)>{});
    case 2: return run(TokenCount<cap(2)>{});
    case 3: return run(TokenCount<cap(3)>{});
    case 4: return run(TokenCount<cap(4)>{});
    case 5: return run(TokenCount<cap(5)>{});
    case 6: return run(TokenCount<cap(6)>{});
    case 7: return run(TokenCount<cap(7)>{});
    default: return run(TokenCount<cap(8)>{});
  }
}

// The grain of an int8 GEMM's parallel_for over its n rows. Decode (m <= max_decode_m) gives each
// thread one range: the pool's guided ranges, down to 16 rows, each began a fresh stream waiting
// on memory, its prefetches running past its end into another thread's rows (decode steps
// 0.9-5.3 % shorter on avx512-int8, 1.4 % in the median on avx2-int8; docs/perf.md, sessions 21
// and 22). Larger m keeps 16 rows.
inline std::int64_t int8_row_grain(std::int64_t n, std::int64_t m, std::int64_t max_decode_m) {
  const std::int64_t per_thread = (n / global_thread_count() + 15) / 16 * 16;
  return m <= max_decode_m && per_thread > 16 ? per_thread : 16;
}

template <int R>
struct RowCount {
  static constexpr int kValue = R;
};

// The decode loops' passes over rows [b, e): four rows at a time while m <= four_max, then two
// while m <= two_max, then one; pass(RowCount<R>{}, n0) for each (R rows from n0).
template <class Pass>
void for_each_row_pass(std::int64_t m, std::int64_t b, std::int64_t e, std::int64_t four_max, std::int64_t two_max,
                       Pass&& pass) {
  std::int64_t n0 = b;
  if (m <= four_max)
    for (; n0 + 4 <= e; n0 += 4) pass(RowCount<4>{}, n0);
  if (m <= two_max)
    for (; n0 + 2 <= e; n0 += 2) pass(RowCount<2>{}, n0);
  for (; n0 < e; ++n0) pass(RowCount<1>{}, n0);
}

// Decode calls the GEMM once per 128-row slice of each expert, with the same activations again
// and again (gate and up: the token's hidden state, for every expert; down: one expert's SiLU
// output, for each of its 16 slices). So each thread keeps its last quantization next to a copy of
// the activations it came from, and reuses it when they are the same bits: comparing costs about
// a third of quantizing, and the quantization was 6 % of decode (docs/perf.md, session 9).
// Each instruction set keeps its own memo and scratch slot: their code layouts differ.
struct Int8Memo {
  const void* buffer;  // the scratch it lives in; another pointer means the contents are gone
  std::int64_t m, k;
  int parts;
  bool finite;  // false: a row holds NaN/Inf (the exact path runs)
};

// Quantizes x (m x k) into `buffer` by calling quantize() (which returns false on NaN/Inf)
// unless the memo says the buffer already holds x's quantization; `x_copy` (m * k floats inside
// the buffer) remembers the bits. Returns whether x is finite.
template <class Quantize>
bool refresh_int8_memo(Int8Memo& memo, const void* buffer, const float* x, std::int64_t m, std::int64_t k, int parts,
                       void* x_copy, Quantize&& quantize) {
  const std::size_t x_bytes = static_cast<std::size_t>(m * k) * sizeof(float);
  if (memo.buffer != buffer || memo.m != m || memo.k != k || memo.parts != parts || std::memcmp(x_copy, x, x_bytes) != 0) {
    memo.buffer = nullptr;
    const bool finite = quantize();
    std::memcpy(x_copy, x, x_bytes);
    memo = Int8Memo{buffer, m, k, parts, finite};
  }
  return memo.finite;
}

// The m > 4 schedule of the int8 kernels over rows [b, e) of a k-column NVFP4 matrix with block
// scales `scales`: tiles of `tile_tokens` tokens whose codes stay in L1 while a chunk of
// ~`row_chunk_bytes` of weight rows passes under them, from memory for the first tile and from L2
// for the others; tokens go in blocks of ~`token_block_bytes` of codes (`code_bytes_per_token`
// each), which fit in L2 beside the chunk. Calls tile(i0, tokens, c0, c1, table) for each tile,
// `table` telling whether the chunk's scales need the E4M3 table (checked once per chunk).
#if defined(__AVX2__)
template <class Tile>
void for_each_int8_tile(std::int64_t m, std::int64_t b, std::int64_t e, std::int64_t code_bytes_per_token,
                        const std::uint8_t* scales, std::int64_t k, std::int64_t token_block_bytes,
                        std::int64_t row_chunk_bytes, std::int64_t tile_tokens, Tile&& tile) {
  const std::int64_t row_scales = k / 16;
  std::int64_t block = token_block_bytes / code_bytes_per_token / tile_tokens * tile_tokens;
  if (block < tile_tokens) block = tile_tokens;
  std::int64_t chunk = row_chunk_bytes / (k / 2 + row_scales);
  if (chunk < 1) chunk = 1;
  for (std::int64_t t0 = 0; t0 < m; t0 += block) {
    const std::int64_t t1 = t0 + block < m ? t0 + block : m;
    for (std::int64_t c0 = b; c0 < e; c0 += chunk) {
      const std::int64_t c1 = c0 + chunk < e ? c0 + chunk : e;
      const bool table = has_special_scale(scales + c0 * row_scales, (c1 - c0) * row_scales);
      for (std::int64_t i0 = t0; i0 < t1; i0 += tile_tokens)
        tile(i0, t1 - i0 < tile_tokens ? t1 - i0 : tile_tokens, c0, c1, table);
    }
  }
}
#endif

}  // namespace
}  // namespace fp4serve::kernels
