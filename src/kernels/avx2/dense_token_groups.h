#pragma once
// The AVX2 dense GEMM for m >= 16 (dense_token_groups_avx2.cpp), called by
// avx2::dense_gemm for the leading tokens it takes; the rest go to the row loops.
#include <cstdint>

#include "kernels/kernels.h"

namespace fp4serve::kernels::avx2 {

// How many of m tokens the token groups take: whole groups of 8, plus a last partial group when
// it holds enough tokens that running it padded beats the row loops; 0 below 16 tokens (measured
// at 16 and 64 only, as the AVX-512 groups).
std::int64_t dense_token_group_tokens(std::int64_t m);

// y[0..m) = x[0..m) * W^T for BF16, F16, F32 or FP8-E4M3 weights (fp32 accumulation).
void dense_gemm_token_groups(const float* x, std::int64_t m, const WeightMatrix& w, float* y);

}  // namespace fp4serve::kernels::avx2
