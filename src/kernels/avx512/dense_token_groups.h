#pragma once
// The AVX-512 dense GEMM for m >= 16 (dense_token_groups_avx512.cpp), called by
// avx512::dense_gemm for the leading tokens it takes; the rest go to the row loops.
#include <cstdint>

#include "kernels/kernels.h"

namespace fp4serve::kernels::avx512 {

// From 16 tokens: runs whole groups of the leading tokens (a last partial group when it holds
// enough tokens that running it padded beats the row loops) and leaves x, m and y at the rest.
// True when no tokens are left.
bool dense_gemm_leading_groups(const float*& x, std::int64_t& m, const WeightMatrix& w, float*& y);

}  // namespace fp4serve::kernels::avx512
