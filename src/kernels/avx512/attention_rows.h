#pragma once
// Reading the paged KV cache in the AVX-512 attention translation units (attention_avx512.cpp,
// attention_prefill_avx512.cpp): a row's elements widened to fp32, and the rows of one KV head in
// position order. Internal linkage only: included by ISA translation units
// (src/kernels/check_isa_objects.cmake).
#include <immintrin.h>

#include <cstddef>
#include <cstdint>

#include "kernels/kernels.h"
#include "kernels/kv_cache.h"
#include "kernels/kv_isa.h"

namespace fp4serve::kernels::avx512 {
namespace {

// Elements [i, i + 16) of a row, widened to fp32.
template <Kv E>
inline __m512 load16(const std::byte* row, std::int64_t i) {
  const std::byte* p = row + i * kKvElementBytes<E>;
  if constexpr (E == Kv::F32) {
    return _mm512_loadu_ps(p);
  } else {
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    if constexpr (E == Kv::F16) return _mm512_cvtph_ps(h);
    else return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  }
}

// Row p of one cache side (key or value) of one KV head, walking positions in order.
class RowWalker {
 public:
  RowWalker(const AttentionArgs& a, std::int64_t side_offset, std::int64_t kvh, std::int64_t first = 0)
      : blocks_(a.kv_blocks), block_tokens_(a.block_tokens),
        stride_(a.num_kv_heads * a.head_dim * static_cast<std::int64_t>(kv_element_bytes(a.kv_dtype))),
        offset_((side_offset + kvh * a.head_dim) * static_cast<std::int64_t>(kv_element_bytes(a.kv_dtype))) {
    if (first > 0) {
      block_ = first / block_tokens_;
      in_block_ = first % block_tokens_;
      base_ = blocks_[block_++] + offset_;
    }
  }
  // The next position's row (the first call gives position `first`).
  const std::byte* next() {
    if (in_block_ == block_tokens_ || base_ == nullptr) {
      base_ = blocks_[block_] + offset_;
      ++block_;
      in_block_ = 0;
    }
    return base_ + (in_block_++) * stride_;
  }

 private:
  const std::byte* const* blocks_;
  std::int64_t block_tokens_, stride_, offset_;  // bytes
  const std::byte* base_ = nullptr;
  std::int64_t block_ = 0, in_block_ = 0;
};

}  // namespace
}  // namespace fp4serve::kernels::avx512
