#pragma once
// The GEMMs that put tokens in the vector lanes (vnni/nvfp4_gemm_vnni_groups.cpp, the dense ones
// in kernels/dense_groups_isa_common.h) take whole groups of tokens and leave the rest to their
// row loops; how many they take is decided here, once for all.
#include <cstdint>

namespace fp4serve::kernels {

// Of m tokens, whole groups of `group`, plus a last partial group when it holds at least
// `padded_min` tokens (running it padded then costs less than the row loops); 0 below one group.
std::int64_t tokens_in_groups(std::int64_t m, std::int64_t group, std::int64_t padded_min);

}  // namespace fp4serve::kernels
