#pragma once
// The VNNI int8 GEMM for m >= 16 (nvfp4_gemm_vnni_groups.cpp), called by nvfp4_gemm_int8 for the
// leading tokens it takes; the rest go to the 8-token tiles.
#include <cstdint>

#include "kernels/kernels.h"

namespace fp4serve::kernels::vnni {

// How many of m tokens the group GEMM takes: whole groups of 16, plus a last partial group when it
// holds enough tokens that running it padded costs less than the tiles; 0 below 16 tokens.
std::int64_t token_group_tokens(std::int64_t m);

// y[0..m) = x[0..m) * W^T with activations on nvfp4_gemm_int8's grid; m from token_group_tokens.
// Returns false, writing nothing, when x holds NaN or Inf (the caller runs the exact kernel).
bool nvfp4_gemm_int8_token_groups(const float* x, std::int64_t m, const WeightMatrix& w, float* y);

}  // namespace fp4serve::kernels::vnni
