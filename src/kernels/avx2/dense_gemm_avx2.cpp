// Dense (BF16, F16, F32) and FP8-E4M3 weight x fp32 GEMM, AVX2 + FMA + F16C. Same structure as
// the AVX-512 version with 8 lanes; the last partial vector of a row goes through a zero-padded
// copy so no load reads past a row. ISA translation unit: no standard-library templates here.
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "kernels/isa_kernels.h"
#include "util/thread_pool.h"

namespace fp4serve::kernels::avx2 {

namespace {

struct Bf16 {
  static constexpr int bytes = 2;
  static __m256 load(const std::uint8_t* p) {
    const __m256i h = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    return _mm256_castsi256_ps(_mm256_slli_epi32(h, 16));
  }
};
struct F16 {
  static constexpr int bytes = 2;
  static __m256 load(const std::uint8_t* p) { return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }
};
struct F32 {
  static constexpr int bytes = 4;
  static __m256 load(const std::uint8_t* p) { return _mm256_loadu_ps(reinterpret_cast<const float*>(p)); }
};
// E4M3 "fn": exponent re-biased by +120 for normal codes, mantissa * 2^-9 for subnormals,
// 0x7F/0xFF NaN, sign copied.
struct Fp8 {
  static constexpr int bytes = 1;
  static __m256 load(const std::uint8_t* p) {
    const __m256i v = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
    const __m256i em = _mm256_and_si256(v, _mm256_set1_epi32(0x7F));
    const __m256 normal = _mm256_castsi256_ps(_mm256_add_epi32(_mm256_slli_epi32(em, 20), _mm256_set1_epi32(120 << 23)));
    const __m256 sub = _mm256_mul_ps(_mm256_cvtepi32_ps(em), _mm256_set1_ps(1.0f / 512.0f));
    const __m256 is_sub = _mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_set1_epi32(8), em));
    const __m256 is_nan = _mm256_castsi256_ps(_mm256_cmpeq_epi32(em, _mm256_set1_epi32(0x7F)));
    __m256 r = _mm256_blendv_ps(normal, sub, is_sub);
    r = _mm256_blendv_ps(r, _mm256_set1_ps(__builtin_nanf("")), is_nan);
    const __m256i sign = _mm256_slli_epi32(_mm256_and_si256(v, _mm256_set1_epi32(0x80)), 24);
    return _mm256_or_ps(r, _mm256_castsi256_ps(sign));
  }
};

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
