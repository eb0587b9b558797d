// Dense (BF16, F16, F32) and FP8-E4M3 weight x fp32 GEMM, AVX-512. From 16 tokens, whole groups
// of 16 go to the token groups (dense_token_groups_avx512.cpp: tokens in the lanes). Below that,
// and for the few tokens left over, each weight vector is converted to fp32 once and used for up
// to four activation rows; fp32 FMA accumulation. BF16 has two loops of its own: one row at a
// time for at most four activation rows (decode: the lm_head, the routers), and four rows x four
// tokens with a cheaper conversion above that.
// ISA translation unit: no standard-library templates here (see nvfp4_gemm_avx512.cpp).
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "kernels/avx512/dense_loaders.h"
#include "kernels/avx512/dense_token_groups.h"
#include "kernels/isa_kernels.h"
#include "kernels/scratch.h"
#include "util/thread_pool.h"

namespace fp4serve::kernels::avx512 {

namespace {

constexpr std::int64_t kRows = 4;
constexpr std::int64_t kMaxMb = 4;
// Rows 16 KB ahead are prefetched to L2: the BF16 lm_head (0.62 GB of 30b-a3b's 2.2 GB per token)
// decoded 3-7 % faster with it than with none or with 8 KB to L1 (docs/perf.md, session 4), when
// this loop ran it; since session 19 it serves BF16 above four rows and the other types.
// Prefetches past the last row are harmless: they never fault.
constexpr std::int64_t kPrefetchL2Bytes = 16384;

struct Ctx {
  const float* x;
  std::int64_t m, k, n;
  const std::uint8_t* data;
  float scale;
  float* y;
};

// Elements [from, k) of R rows x MB tokens in 16-element pieces, each copied into a zero-padded
// buffer (never read past a row), then the tile's outputs.
template <class L, int R, int MB>
inline void finish_tile(const Ctx& c, std::int64_t n0, std::int64_t m0, std::int64_t from, __m512 (&acc)[R][MB]) {
  const std::int64_t row_bytes = c.k * L::bytes;
  for (std::int64_t kk = from; kk < c.k; kk += 16) {
    const std::int64_t left = c.k - kk < 16 ? c.k - kk : 16;
    const __mmask16 mask = static_cast<__mmask16>((1u << left) - 1u);
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      alignas(64) std::uint8_t buf[64] = {};
      std::memcpy(buf, c.data + (n0 + r) * row_bytes + kk * L::bytes, static_cast<std::size_t>(left * L::bytes));
      const __m512 w = L::load(buf);
#pragma GCC unroll 4
      for (int i = 0; i < MB; ++i)
        acc[r][i] = _mm512_fmadd_ps(w, _mm512_maskz_loadu_ps(mask, c.x + (m0 + i) * c.k + kk), acc[r][i]);
    }
  }
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int i = 0; i < MB; ++i) c.y[(m0 + i) * c.n + n0 + r] = _mm512_reduce_add_ps(acc[r][i]) * c.scale;
}

template <class L, int R, int MB>
void kernel(const Ctx& c, std::int64_t n0, std::int64_t m0) {
  const std::int64_t row_bytes = c.k * L::bytes;
  const std::int64_t full = c.k / 16 * 16;
  __m512 acc[R][MB];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int i = 0; i < MB; ++i) acc[r][i] = _mm512_setzero_ps();
  const std::int64_t ahead = (kPrefetchL2Bytes + row_bytes - 1) / row_bytes;  // rows
  for (std::int64_t kk = 0; kk < full; kk += 16) {
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      if ((kk * L::bytes) % 64 == 0)  // once per cache line
        _mm_prefetch(reinterpret_cast<const char*>(c.data + (n0 + r + ahead) * row_bytes + kk * L::bytes), _MM_HINT_T1);
      const __m512 w = L::load(c.data + (n0 + r) * row_bytes + kk * L::bytes);
#pragma GCC unroll 4
      for (int i = 0; i < MB; ++i) acc[r][i] = _mm512_fmadd_ps(w, _mm512_loadu_ps(c.x + (m0 + i) * c.k + kk), acc[r][i]);
    }
  }
  finish_tile<L, R, MB>(c, n0, m0, full, acc);
}

template <class L, int R>
void rows(const Ctx& c, std::int64_t n0) {
  std::int64_t m0 = 0;
  for (; m0 + kMaxMb <= c.m; m0 += kMaxMb) kernel<L, R, kMaxMb>(c, n0, m0);
  switch (c.m - m0) {
    case 1: kernel<L, R, 1>(c, n0, m0); break;
    case 2: kernel<L, R, 2>(c, n0, m0); break;
    case 3: kernel<L, R, 3>(c, n0, m0); break;
    default: break;
  }
}

// BF16 decode (m <= kMaxMb): one row at a time, 64-byte loads.
// A 64-byte load holds 32 weights; shifting each dword left by 16 gives the even elements as
// fp32, masking its low half the odd ones, so the activations are stored once per call with
// each 32-element chunk's even elements first (xp). One row after another is one sequential
// stream per thread, which the hardware prefetcher follows: 0.96-1.04x a plain load loop, where
// the generic four-row loop (`kernel` above) with its L2 prefetch streamed 0.65-0.94x (docs/perf.md,
// session 19).
// On the session-25 Xeon the prefetcher alone let this loop read 17-19 GB/s where a plain sum
// read 28-30; one prefetch to L1 per line, 4 KB ahead in the stream, gave 24-29. On the AMX Xeon
// of session 28 an L1 prefetch holds a fill buffer for memory's whole latency and the 4 KB ones
// capped the lm_head at 24-27 GB/s: a request to L2 4 KB ahead plus one to L1 1 KB ahead (by
// then the line is on its way to L2) read it at 30-33 GB/s, 1.2x (docs/perf.md, session 28).
constexpr std::int64_t kStreamPrefetchL1Bytes = 1024;
constexpr std::int64_t kStreamPrefetchL2Bytes = 4096;

template <int MB>
inline void bf16_stream_row(const Ctx& c, const float* xp, std::int64_t k32, std::int64_t n) {
  const std::uint8_t* row = c.data + n * c.k * 2;
  __m512 even[MB], odd[MB];
#pragma GCC unroll 4
  for (int i = 0; i < MB; ++i) even[i] = odd[i] = _mm512_setzero_ps();
  const __m512i high = _mm512_set1_epi32(static_cast<int>(0xFFFF0000u));
  for (std::int64_t kk = 0; kk < k32; kk += 32) {
    _mm_prefetch(reinterpret_cast<const char*>(row + kk * 2 + kStreamPrefetchL1Bytes), _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(row + kk * 2 + kStreamPrefetchL2Bytes), _MM_HINT_T1);
    const __m512i h = _mm512_loadu_si512(row + kk * 2);
    const __m512 lo = _mm512_castsi512_ps(_mm512_slli_epi32(h, 16));
    const __m512 hi = _mm512_castsi512_ps(_mm512_and_si512(h, high));
#pragma GCC unroll 4
    for (int i = 0; i < MB; ++i) {
      even[i] = _mm512_fmadd_ps(lo, _mm512_load_ps(xp + i * k32 + kk), even[i]);
      odd[i] = _mm512_fmadd_ps(hi, _mm512_load_ps(xp + i * k32 + kk + 16), odd[i]);
    }
  }
  for (std::int64_t kk = k32; kk < c.k; kk += 16) {  // the last 1..31 elements, zero-padded
    const std::int64_t left = c.k - kk < 16 ? c.k - kk : 16;
    const __mmask16 mask = static_cast<__mmask16>((1u << left) - 1u);
    alignas(64) std::uint8_t buf[64] = {};
    std::memcpy(buf, row + kk * 2, static_cast<std::size_t>(left * 2));
    const __m512 w = Bf16::load(buf);
#pragma GCC unroll 4
    for (int i = 0; i < MB; ++i) even[i] = _mm512_fmadd_ps(w, _mm512_maskz_loadu_ps(mask, c.x + i * c.k + kk), even[i]);
  }
#pragma GCC unroll 4
  for (int i = 0; i < MB; ++i) c.y[i * c.n + n] = _mm512_reduce_add_ps(_mm512_add_ps(even[i], odd[i])) * c.scale;
}

template <int MB>
void bf16_stream_rows(const Ctx& c, const float* xp, std::int64_t k32, std::int64_t b, std::int64_t e) {
  for (std::int64_t n = b; n < e; ++n) bf16_stream_row<MB>(c, xp, k32, n);
}

// The activations for the BF16 loops: each 32-element chunk of a row with its even elements
// first (see bf16_stream_row), in the GEMM scratch. The last k % 32 elements stay in c.x.
const float* bf16_activations(const Ctx& c, std::int64_t k32) {
  const auto xp_bytes = static_cast<std::size_t>(c.m * k32) * sizeof(float);
  auto* xp = static_cast<float*>(thread_scratch(kScratchGemmActivations, xp_bytes));
  const __m512i even_idx = _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);
  const __m512i odd_idx = _mm512_add_epi32(even_idx, _mm512_set1_epi32(1));
  for (std::int64_t i = 0; i < c.m; ++i)
    for (std::int64_t kk = 0; kk < k32; kk += 32) {
      const __m512 a = _mm512_loadu_ps(c.x + i * c.k + kk), b = _mm512_loadu_ps(c.x + i * c.k + kk + 16);
      _mm512_store_ps(xp + i * k32 + kk, _mm512_permutex2var_ps(a, even_idx, b));
      _mm512_store_ps(xp + i * k32 + kk + 16, _mm512_permutex2var_ps(a, odd_idx, b));
    }
  return xp;
}

void bf16_stream(const Ctx& c) {
  const std::int64_t k32 = c.k / 32 * 32;
  const float* xp = bf16_activations(c, k32);
  parallel_for(c.n, 16, [&c, xp, k32](std::int64_t b, std::int64_t e) {
    switch (c.m) {
      case 1: return bf16_stream_rows<1>(c, xp, k32, b, e);
      case 2: return bf16_stream_rows<2>(c, xp, k32, b, e);
      case 3: return bf16_stream_rows<3>(c, xp, k32, b, e);
      default: return bf16_stream_rows<4>(c, xp, k32, b, e);
    }
  });
}

// BF16 above four activation rows (before session 27 batched decode's lm_head and BF16 prefill
// without AMX; now the tokens the token groups leave, fewer than 12): four rows
// x four tokens per loop, as the generic loop below, but with the stream's conversion: one shift
// and one mask per 32 weights instead of a 16-bit widening (a port-5 permute) and a shift per 16,
// on the ports the FMAs need. `kernels_bench` bf16_m16 / bf16_m64: 179-196 / 201-229 GFLOP/s
// against 157-166 / 167-190 (docs/perf.md, session 25). Two rows x eight tokens ran slower
// (122-135 / 126-134): eight tokens' activations (64 KB at k = 2048) spill from L1. The first
// token tile prefetches the next rows; the others find the rows in L1.
constexpr std::int64_t kTileRows = 4;
constexpr std::int64_t kTileTokens = 4;

template <int R, int MB>
void bf16_tile(const Ctx& c, const float* xp, std::int64_t k32, std::int64_t n0, std::int64_t m0) {
  const std::int64_t row_bytes = c.k * 2;
  __m512 acc[R][MB];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
    for (int i = 0; i < MB; ++i) acc[r][i] = _mm512_setzero_ps();
  const __m512i high = _mm512_set1_epi32(static_cast<int>(0xFFFF0000u));
  const bool first_tile = m0 == 0;
  for (std::int64_t kk = 0; kk < k32; kk += 32) {
    __m512 lo[R], hi[R];
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const std::uint8_t* p = c.data + (n0 + r) * row_bytes + kk * 2;
      if (first_tile) _mm_prefetch(reinterpret_cast<const char*>(p + R * row_bytes), _MM_HINT_T0);
      const __m512i h = _mm512_loadu_si512(p);
      lo[r] = _mm512_castsi512_ps(_mm512_slli_epi32(h, 16));
      hi[r] = _mm512_castsi512_ps(_mm512_and_si512(h, high));
    }
#pragma GCC unroll 8
    for (int i = 0; i < MB; ++i) {
      const __m512 xe = _mm512_load_ps(xp + (m0 + i) * k32 + kk), xo = _mm512_load_ps(xp + (m0 + i) * k32 + kk + 16);
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) acc[r][i] = _mm512_fmadd_ps(hi[r], xo, _mm512_fmadd_ps(lo[r], xe, acc[r][i]));
    }
  }
  finish_tile<Bf16, R, MB>(c, n0, m0, k32, acc);  // the last 1..31 elements
}

template <int R>
void bf16_tiles(const Ctx& c, const float* xp, std::int64_t k32, std::int64_t n0) {
  std::int64_t m0 = 0;
  for (; m0 + kTileTokens <= c.m; m0 += kTileTokens) bf16_tile<R, kTileTokens>(c, xp, k32, n0, m0);
  switch (c.m - m0) {
    case 1: return bf16_tile<R, 1>(c, xp, k32, n0, m0);
    case 2: return bf16_tile<R, 2>(c, xp, k32, n0, m0);
    case 3: return bf16_tile<R, 3>(c, xp, k32, n0, m0);
    default: return;
  }
}

void bf16_batched(const Ctx& c) {
  const std::int64_t k32 = c.k / 32 * 32;
  const float* xp = bf16_activations(c, k32);
  parallel_for(c.n, 16, [&c, xp, k32](std::int64_t b, std::int64_t e) {
    std::int64_t n0 = b;
    for (; n0 + kTileRows <= e; n0 += kTileRows) bf16_tiles<kTileRows>(c, xp, k32, n0);
    for (; n0 < e; ++n0) bf16_tiles<1>(c, xp, k32, n0);
  });
}

template <class L>
void run(const Ctx& c) {
  parallel_for(c.n, 16, [&c](std::int64_t b, std::int64_t e) {
    std::int64_t n0 = b;
    for (; n0 + kRows <= e; n0 += kRows) rows<L, kRows>(c, n0);
    for (; n0 < e; ++n0) rows<L, 1>(c, n0);
  });
}

}  // namespace

void dense_gemm(const float* x, std::int64_t m, const WeightMatrix& w, float* y) {
  if (m <= 0 || w.n <= 0) return;
  if (dense_gemm_leading_groups(x, m, w, y)) return;  // from 16 tokens; any left over: the loops below
  const Ctx c{x, m, w.k, w.n, w.data, w.kind == SchemeKind::FP8 ? w.weight_scale_2 : 1.0f, y};
  if (w.kind == SchemeKind::FP8) return run<Fp8>(c);
  switch (w.dtype) {
    case DType::BF16: return c.m <= kMaxMb ? bf16_stream(c) : bf16_batched(c);
    case DType::F16: return run<F16>(c);
    case DType::F32: return run<F32>(c);
    default: isa_unsupported("avx512 dense GEMM: weight dtype not supported");
  }
}

}  // namespace fp4serve::kernels::avx512
