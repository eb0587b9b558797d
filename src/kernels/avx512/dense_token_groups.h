#pragma once
// The AVX-512 dense GEMM for m >= 16 (dense_token_groups_avx512.cpp), called by
// avx512::dense_gemm for the leading tokens it takes; the rest go to the row loops.
#include <cstdint>

#include "kernels/kernels.h"

namespace fp4serve::kernels::avx512 {

// How many of m tokens the token groups take: whole groups of 16, plus a last partial group when
// it holds enough tokens that running it padded beats the row loops; 0 below 16 tokens.
std::int64_t dense_token_group_tokens(std::int64_t m);

// y[0..m) = x[0..m) * W^T for BF16, F16, F32 or FP8-E4M3 weights (fp32 accumulation).
void dense_gemm_token_groups(const float* x, std::int64_t m, const WeightMatrix& w, float* y);

}  // namespace fp4serve::kernels::avx512
