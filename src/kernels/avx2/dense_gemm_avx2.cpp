// Dense (BF16, F16, F32) and FP8-E4M3 weight x fp32 GEMM, AVX2 + FMA + F16C. From 16 tokens,
// whole groups go to the token groups (dense_token_groups_avx2.cpp: tokens in the lanes); below
// that, the AVX-512 version's row loops with 8 lanes; the last partial vector of a row goes
// through a zero-padded copy so no load reads past a row.
// ISA translation unit: no standard-library templates here.
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "kernels/avx2/dense_loaders.h"
#include "kernels/avx2/dense_token_groups.h"
#include "kernels/isa_kernels.h"
#include "util/thread_pool.h"

namespace fp4serve::kernels::avx2 {

namespace {

struct Ctx {
  const float* x;
  std::int64_t m, k, n;
  const std::uint8_t* data;
  float scale;
  float* y;
};

float hsum(__m256 v) {
  const __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 t = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(t, _mm_movehdup_ps(t)));
}

template <class L, int R, int MB>
void kernel(const Ctx& c, std::int64_t n0, std::int64_t m0) {
  const std::int64_t row_bytes = c.k * L::bytes;
  const std::int64_t full = c.k / 8 * 8, rem = c.k - full;
  __m256 acc[R][MB];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int i = 0; i < MB; ++i) acc[r][i] = _mm256_setzero_ps();
  for (std::int64_t kk = 0; kk < full; kk += 8) {
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      const __m256 w = L::load(c.data + (n0 + r) * row_bytes + kk * L::bytes);
#pragma GCC unroll 4
      for (int i = 0; i < MB; ++i) acc[r][i] = _mm256_fmadd_ps(w, _mm256_loadu_ps(c.x + (m0 + i) * c.k + kk), acc[r][i]);
    }
  }
  if (rem != 0) {
    alignas(32) float xt[MB][8] = {};
    for (int i = 0; i < MB; ++i) std::memcpy(xt[i], c.x + (m0 + i) * c.k + full, static_cast<std::size_t>(rem) * 4);
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      alignas(32) std::uint8_t buf[32] = {};
      std::memcpy(buf, c.data + (n0 + r) * row_bytes + full * L::bytes, static_cast<std::size_t>(rem * L::bytes));
      const __m256 w = L::load(buf);
#pragma GCC unroll 4
      for (int i = 0; i < MB; ++i) acc[r][i] = _mm256_fmadd_ps(w, _mm256_load_ps(xt[i]), acc[r][i]);
    }
  }
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int i = 0; i < MB; ++i) c.y[(m0 + i) * c.n + n0 + r] = hsum(acc[r][i]) * c.scale;
}

template <class L, int R>
void rows(const Ctx& c, std::int64_t n0) {
  if constexpr (R == 4) {
    if (c.m == 1) return kernel<L, 4, 1>(c, n0, 0);
    rows<L, 2>(c, n0);
    rows<L, 2>(c, n0 + 2);
  } else {
    std::int64_t m0 = 0;
    for (; m0 + 4 <= c.m; m0 += 4) kernel<L, R, 4>(c, n0, m0);
    switch (c.m - m0) {
      case 1: kernel<L, R, 1>(c, n0, m0); break;
      case 2: kernel<L, R, 2>(c, n0, m0); break;
      case 3: kernel<L, R, 3>(c, n0, m0); break;
      default: break;
    }
  }
}

template <class L>
void run(const Ctx& c) {
  parallel_for(c.n, 16, [&c](std::int64_t b, std::int64_t e) {
    std::int64_t n0 = b;
    for (; n0 + 4 <= e; n0 += 4) rows<L, 4>(c, n0);
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
    case DType::BF16: return run<Bf16>(c);
    case DType::F16: return run<F16>(c);
    case DType::F32: return run<F32>(c);
    default: isa_unsupported("avx2 dense GEMM: weight dtype not supported");
  }
}

}  // namespace fp4serve::kernels::avx2
