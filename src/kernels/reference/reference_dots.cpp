#include "kernels/reference/reference_dots.h"

#include "util/cpu_features.h"
#include "util/error.h"

namespace fp4serve::kernels {

namespace {

// Up to four activation rows against one weight row at a time, so each loaded weight serves four
// sums. Products of two floats are exact in fp64, so a fused multiply-add rounds as a multiply
// then an add does; the AVX2 and AVX-512 copies are this loop compiled for those ISAs (the
// partial sums become vector lanes, each summed in the same order), so the machine sets only the
// speed. Validation computes the reference outputs at every start; these copies, with session
// 35's other changes to them, made that ≈ 2.4x quicker (docs/perf.md).
template <int R>
inline __attribute__((always_inline)) void dots_body(const float* a, std::size_t lda, const float* b, std::size_t k,
                                                     double* out) {
  double s[R][8] = {};
  std::size_t j = 0;
  for (; j + 8 <= k; j += 8)
    for (int r = 0; r < R; ++r)
      for (std::size_t l = 0; l < 8; ++l) s[r][l] += static_cast<double>(a[r * lda + j + l]) * b[j + l];
  for (; j < k; ++j)
    for (int r = 0; r < R; ++r) s[r][j % 8] += static_cast<double>(a[r * lda + j]) * b[j];
  for (int r = 0; r < R; ++r) out[r] = ((s[r][0] + s[r][1]) + (s[r][2] + s[r][3])) + ((s[r][4] + s[r][5]) + (s[r][6] + s[r][7]));
}

inline __attribute__((always_inline)) void dots_rows(const float* a, std::size_t lda, std::size_t rows, const float* b,
                                                     std::size_t k, double* out) {
  std::size_t i = 0;
  for (; i + 4 <= rows; i += 4) dots_body<4>(a + i * lda, lda, b, k, out + i);
  for (; i < rows; ++i) dots_body<1>(a + i * lda, lda, b, k, out + i);
}

void dots_128(const float* a, std::size_t lda, std::size_t rows, const float* b, std::size_t k, double* out) {
  dots_rows(a, lda, rows, b, k, out);
}
__attribute__((target("avx2,fma"))) void dots_256(const float* a, std::size_t lda, std::size_t rows, const float* b,
                                                 std::size_t k, double* out) {
  dots_rows(a, lda, rows, b, k, out);
}
__attribute__((target("avx512f"))) void dots_512(const float* a, std::size_t lda, std::size_t rows, const float* b,
                                                std::size_t k, double* out) {
  dots_rows(a, lda, rows, b, k, out);
}

using DotsFn = void (*)(const float*, std::size_t, std::size_t, const float*, std::size_t, double*);

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

void reference_dots(const float* a, std::size_t lda, std::size_t rows, const float* b, std::size_t k, double* out, int bits) {
  static const DotsFn best = widest();
  (bits == 0 ? best : copy_for(bits))(a, lda, rows, b, k, out);
}

}  // namespace fp4serve::kernels
