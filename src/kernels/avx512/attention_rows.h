#pragma once
// Reading the paged KV cache in the AVX-512 attention translation units (attention_avx512.cpp,
// attention_prefill_avx512.cpp, amx/attention_prefill_amx.cpp): a row's elements widened to fp32,
// the rows of one KV head in position order, and a 16 x 16 transpose in registers. Internal
// linkage only: included by ISA translation units (src/kernels/check_isa_objects.cmake).
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

// Row p of one cache side (key or value) of one KV head, walking positions in order. In the
// layout of kernels.h a KV head's rows are contiguous within a block, head_dim elements apart.
class RowWalker {
 public:
  RowWalker(const AttentionArgs& a, std::int64_t side_offset, std::int64_t kvh, std::int64_t first = 0)
      : blocks_(a.kv_blocks), block_tokens_(a.block_tokens),
        stride_(a.head_dim * static_cast<std::int64_t>(kv_element_bytes(a.kv_dtype))),
        offset_((side_offset + kvh * a.block_tokens * a.head_dim) * static_cast<std::int64_t>(kv_element_bytes(a.kv_dtype))) {
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

// Transposes 16 rows of 16 floats in place: r[j] becomes column j.
inline void transpose16(__m512* r) {
  __m512 t[16];
  for (int k = 0; k < 8; ++k) {
    t[2 * k] = _mm512_unpacklo_ps(r[2 * k], r[2 * k + 1]);
    t[2 * k + 1] = _mm512_unpackhi_ps(r[2 * k], r[2 * k + 1]);
  }
  // u[4k + c], 128-bit lane l: column 4l + c of rows 4k .. 4k + 3.
  __m512 u[16];
  for (int k = 0; k < 4; ++k) {
    u[4 * k] = _mm512_shuffle_ps(t[4 * k], t[4 * k + 2], 0x44);
    u[4 * k + 1] = _mm512_shuffle_ps(t[4 * k], t[4 * k + 2], 0xEE);
    u[4 * k + 2] = _mm512_shuffle_ps(t[4 * k + 1], t[4 * k + 3], 0x44);
    u[4 * k + 3] = _mm512_shuffle_ps(t[4 * k + 1], t[4 * k + 3], 0xEE);
  }
  for (int c = 0; c < 4; ++c) {
    const __m512 v0 = _mm512_shuffle_f32x4(u[c], u[4 + c], 0x88), v1 = _mm512_shuffle_f32x4(u[c], u[4 + c], 0xDD);
    const __m512 w0 = _mm512_shuffle_f32x4(u[8 + c], u[12 + c], 0x88), w1 = _mm512_shuffle_f32x4(u[8 + c], u[12 + c], 0xDD);
    r[c] = _mm512_shuffle_f32x4(v0, w0, 0x88);
    r[4 + c] = _mm512_shuffle_f32x4(v1, w1, 0x88);
    r[8 + c] = _mm512_shuffle_f32x4(v0, w0, 0xDD);
    r[12 + c] = _mm512_shuffle_f32x4(v1, w1, 0xDD);
  }
}

}  // namespace
}  // namespace fp4serve::kernels::avx512
