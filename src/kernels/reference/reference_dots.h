#pragma once
// The reference backends' fp64 dot products (reference_dots.cpp): out[i * ldo + c] = a_i . b_c for
// `rows` activation rows a_i (`lda` floats apart) and `cols` weight rows b_c (`ldb` floats apart),
// each k floats long. Each sum is eight independent fp64 partial sums (lane l takes the elements
// j = l mod 8, in order) added pairwise at the end: within ~1e-16 of the exact dot product,
// without one long chain of dependent adds.
#include <cstddef>

namespace fp4serve::kernels {

// `bits` picks the copy: 128 the baseline build, 256 AVX2 + FMA, 512 AVX-512, 0 the widest this
// CPU runs (what the reference kernels use). Every copy returns the same bits; an Error for a
// width this CPU cannot run.
void reference_dots(const float* a, std::size_t lda, std::size_t rows, const float* b, std::size_t ldb, std::size_t cols,
                    std::size_t k, double* out, std::size_t ldo, int bits = 0);

}  // namespace fp4serve::kernels
