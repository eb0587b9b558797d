#pragma once
// Reading the paged KV cache in the AVX2 attention translation units (attention_avx2.cpp,
// attention_prefill_avx2.cpp): a row's elements widened to fp32, and a position's row. Internal
// linkage only: included by ISA translation units (src/kernels/check_isa_objects.cmake).
#include <immintrin.h>

#include <cstddef>
#include <cstdint>

#include "kernels/kernels.h"
#include "kernels/kv_isa.h"

namespace fp4serve::kernels::avx2 {
namespace {

// Elements [i, i + 8) of a row, widened to fp32.
template <Kv E>
inline __m256 load8(const std::byte* row, std::int64_t i) {
  const std::byte* p = row + i * kKvElementBytes<E>;
  if constexpr (E == Kv::F32) {
    return _mm256_loadu_ps(reinterpret_cast<const float*>(p));
  } else {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    if constexpr (E == Kv::F16) return _mm256_cvtph_ps(h);
    else return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  }
}

// Position p's row of KV head g on one cache side (`side`: a.k_offset or a.v_offset), in the
// layout of kernels.h: within a block, each KV head's rows are contiguous, head_dim elements apart.
template <Kv E>
const std::byte* kv_row(const AttentionArgs& a, std::int64_t side, std::int64_t g, std::int64_t p) {
  return a.kv_blocks[p / a.block_tokens] + (side + (g * a.block_tokens + p % a.block_tokens) * a.head_dim) * kKvElementBytes<E>;
}

}  // namespace
}  // namespace fp4serve::kernels::avx2
