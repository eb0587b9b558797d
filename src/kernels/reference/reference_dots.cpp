#include "kernels/reference/reference_dots.h"

#include <immintrin.h>

#include "util/cpu_features.h"
#include "util/error.h"

namespace fp4serve::kernels {

namespace {

// Blocks of up to four activation rows against C weight rows, so each loaded value serves several
// sums (the baseline and AVX2 copies take one weight row at a time: fewer registers; the AVX-512
// copy four, below). Products of two floats are exact in fp64, so a fused multiply-add rounds as a
// multiply then an add does; the AVX2 and AVX-512 copies are this loop compiled for those ISAs (the
// partial sums become vector lanes, each summed in the same order), so the machine and the
// blocking set only the speed. Validation computes the reference outputs at every start; these
// copies made that ≈ 2.4x quicker in session 35, the 4 x 4 blocks a further 1.5-2x on the NVFP4
// families (docs/perf.md, session 36).
// The eight lanes of one sum, added pairwise: the one order every copy and block uses.
inline __attribute__((always_inline)) double lanes_sum(const double* t) {
  return ((t[0] + t[1]) + (t[2] + t[3])) + ((t[4] + t[5]) + (t[6] + t[7]));
}

template <int R, int C>
inline __attribute__((always_inline)) void dots_body(const float* a, std::size_t lda, const float* b, std::size_t ldb,
                                                     std::size_t k, double* out, std::size_t ldo) {
  double s[R][C][8] = {};
  std::size_t j = 0;
  for (; j + 8 <= k; j += 8)
    for (int r = 0; r < R; ++r)
      for (int c = 0; c < C; ++c)
        for (std::size_t l = 0; l < 8; ++l) s[r][c][l] += static_cast<double>(a[r * lda + j + l]) * b[c * ldb + j + l];
  for (; j < k; ++j)
    for (int r = 0; r < R; ++r)
      for (int c = 0; c < C; ++c) s[r][c][j % 8] += static_cast<double>(a[r * lda + j]) * b[c * ldb + j];
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) out[r * ldo + c] = lanes_sum(s[r][c]);
}

// Every activation row against each weight row in turn, four rows at a time.
inline __attribute__((always_inline)) void dots_rows(const float* a, std::size_t lda, std::size_t rows, const float* b,
                                                     std::size_t ldb, std::size_t cols, std::size_t k, double* out,
                                                     std::size_t ldo) {
  for (std::size_t c = 0; c < cols; ++c) {
    std::size_t i = 0;
    for (; i + 4 <= rows; i += 4) dots_body<4, 1>(a + i * lda, lda, b + c * ldb, ldb, k, out + i * ldo + c, ldo);
    for (; i < rows; ++i) dots_body<1, 1>(a + i * lda, lda, b + c * ldb, ldb, k, out + i * ldo + c, ldo);
  }
}

#define FP4SERVE_DOTS_ARGS                                                                                       \
  const float *a, std::size_t lda, std::size_t rows, const float *b, std::size_t ldb, std::size_t cols, std::size_t k, \
      double *out, std::size_t ldo

void dots_128(FP4SERVE_DOTS_ARGS) { dots_rows(a, lda, rows, b, ldb, cols, k, out, ldo); }
__attribute__((target("avx2,fma"))) void dots_256(FP4SERVE_DOTS_ARGS) {
  dots_rows(a, lda, rows, b, ldb, cols, k, out, ldo);
}
// Four activation rows x four weight rows in zmm registers: GCC's own vectorization of dots_body
// for this block kept the sums in 256-bit halves and on the stack. The same lanes in the same order.
// (The zero-masked widening: GCC 12 warns that the unmasked one's placeholder is uninitialized.)
__attribute__((target("avx512f"))) void block_4x4_512(const float* a, std::size_t lda, const float* b, std::size_t ldb,
                                                      std::size_t k, double* out, std::size_t ldo) {
  __m512d s[4][4];
  for (auto& row : s)
    for (auto& v : row) v = _mm512_setzero_pd();
  std::size_t j = 0;
  for (; j + 8 <= k; j += 8) {
    __m512d w[4];
    for (int c = 0; c < 4; ++c) w[c] = _mm512_maskz_cvtps_pd(0xFF, _mm256_loadu_ps(b + c * ldb + j));
    for (int r = 0; r < 4; ++r) {
      const __m512d x = _mm512_maskz_cvtps_pd(0xFF, _mm256_loadu_ps(a + r * lda + j));
      for (int c = 0; c < 4; ++c) s[r][c] = _mm512_fmadd_pd(x, w[c], s[r][c]);
    }
  }
  alignas(64) double t[4][4][8];
  for (int r = 0; r < 4; ++r)
    for (int c = 0; c < 4; ++c) _mm512_store_pd(t[r][c], s[r][c]);
  for (; j < k; ++j)
    for (int r = 0; r < 4; ++r)
      for (int c = 0; c < 4; ++c) t[r][c][j % 8] += static_cast<double>(a[r * lda + j]) * b[c * ldb + j];
  for (int r = 0; r < 4; ++r)
    for (int c = 0; c < 4; ++c) out[r * ldo + c] = lanes_sum(t[r][c]);
}

__attribute__((target("avx512f"))) void dots_512(FP4SERVE_DOTS_ARGS) {
  std::size_t c = 0, i = 0;
  for (; c + 4 <= cols; c += 4) {
    for (i = 0; i + 4 <= rows; i += 4) block_4x4_512(a + i * lda, lda, b + c * ldb, ldb, k, out + i * ldo + c, ldo);
    for (; i < rows; ++i) dots_body<1, 4>(a + i * lda, lda, b + c * ldb, ldb, k, out + i * ldo + c, ldo);
  }
  dots_rows(a, lda, rows, b + c * ldb, ldb, cols - c, k, out + c, ldo);
}

#undef FP4SERVE_DOTS_ARGS

using DotsFn = void (*)(const float*, std::size_t, std::size_t, const float*, std::size_t, std::size_t, std::size_t, double*,
                        std::size_t);

bool runs(int bits) {
  const CpuFeatures& f = cpu_features();
  if (bits == 512) return f.usable(CpuFeature::AVX512F);
  if (bits == 256) return f.usable(CpuFeature::AVX2) && f.usable(CpuFeature::FMA);
  return bits == 128;
}

DotsFn copy_for(int bits) {
  if (bits != 128 && bits != 256 && bits != 512) fail("reference dots: bits must be 0, 128, 256 or 512, got ", bits);
  if (!runs(bits)) fail("reference dots: this CPU cannot run the ", bits, "-bit copy");
  return bits == 512 ? dots_512 : bits == 256 ? dots_256 : dots_128;
}

DotsFn widest() { return copy_for(runs(512) ? 512 : runs(256) ? 256 : 128); }

}  // namespace

void reference_dots(const float* a, std::size_t lda, std::size_t rows, const float* b, std::size_t ldb, std::size_t cols,
                    std::size_t k, double* out, std::size_t ldo, int bits) {
  static const DotsFn best = widest();
  (bits == 0 ? best : copy_for(bits))(a, lda, rows, b, ldb, cols, k, out, ldo);
}

}  // namespace fp4serve::kernels
