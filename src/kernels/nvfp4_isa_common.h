#pragma once
// Pieces the NVFP4 GEMM translation units of every instruction set share (avx2/, avx512/).
// Everything here has internal linkage (static or in an unnamed namespace), so each ISA
// translation unit compiles its own copy with its own flags and the linker never picks one for
// another (src/kernels/check_isa_objects.cmake fails the build on weak symbols there).
#include <xmmintrin.h>

#include <cstdint>

namespace fp4serve::kernels {
namespace {

// vpshufb indices for `Lanes` fp32 lanes of block scales: lane d takes scale code d / 2 into its
// low byte, the other three bytes zeroed (index 0x80). The codes are broadcast to every 128-bit
// lane first, so a byte offset within the lane reaches any of them.
template <int Lanes>
struct ScaleShuffle {
  alignas(64) std::int8_t idx[4 * Lanes];
  constexpr ScaleShuffle() : idx{} {
    for (int d = 0; d < Lanes; ++d) {
      idx[4 * d] = static_cast<std::int8_t>(d / 2);
      idx[4 * d + 1] = idx[4 * d + 2] = idx[4 * d + 3] = -128;
    }
  }
};

// A GEMV's own prefetch runs a fixed distance ahead of the rows it decodes, so a range's first
// rows would be read on demand, one stall after another. Decode hands the kernel 128-row slices
// of each expert: request the start of rows [b, e) up front instead, all lines at once, the first
// `l1_bytes` of rows to L1 and the rest of the first `l2_bytes` to L2 (as the kernel's own
// distances), with their block scales.
inline void prefetch_rows_start(const std::uint8_t* data, const std::uint8_t* scales, std::int64_t k, std::int64_t b,
                                std::int64_t e, std::int64_t l1_bytes, std::int64_t l2_bytes) {
  const std::int64_t row_bytes = k / 2, row_scales = k / 16;
  const std::int64_t l1_rows = (l1_bytes + row_bytes - 1) / row_bytes;
  const std::int64_t l2_rows = (l2_bytes + row_bytes - 1) / row_bytes;
  const std::int64_t last = b + l2_rows < e ? b + l2_rows : e;
  for (std::int64_t r = b; r < last; ++r) {
    const char* p = reinterpret_cast<const char*>(data + r * row_bytes);
    for (std::int64_t off = 0; off < row_bytes; off += 64) {
      if (r < b + l1_rows) _mm_prefetch(p + off, _MM_HINT_T0);
      else _mm_prefetch(p + off, _MM_HINT_T1);
    }
  }
  const char* s = reinterpret_cast<const char*>(scales + b * row_scales);
  for (std::int64_t off = 0; off < (last - b) * row_scales; off += 64) _mm_prefetch(s + off, _MM_HINT_T0);
}

}  // namespace
}  // namespace fp4serve::kernels
