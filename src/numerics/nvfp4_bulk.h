#pragma once
// Bulk helpers for the NVFP4 quantizers: per-block amax and E2M1 encoding of whole runs of
// 16-element blocks. Each gives exactly the bits of the scalar definitions (nvfp4::amax over one
// block, float_to_e2m1), which stay the reference; the tests compare them bit for bit, including
// NaN, infinities, signed zeros and values on the rounding midpoints. With AVX-512 (checked at
// run time) 16 values go through at once; otherwise a branch-free portable loop runs.
#include <cstddef>
#include <cstdint>

namespace fp4serve::nvfp4 {

// amaxes[b] = nvfp4::amax of x[16b .. 16b+15] for b < blocks (NaN if the block holds a NaN).
void block_amaxes(const float* x, std::size_t blocks, float* amaxes);

// For b < blocks and j < 8: packed[8b + j] = e2m1(x[16b + 2j] / denoms[b])
//                                         | e2m1(x[16b + 2j + 1] / denoms[b]) << 4,
// where e2m1 is float_to_e2m1 and the division is one fp32 rounding.
void encode_blocks_div(const float* x, const float* denoms, std::size_t blocks, std::uint8_t* packed);

// The two implementations behind the functions above, for the tests and benchmarks.
// has_avx512_bulk(): whether this CPU runs the AVX-512 versions (F + DQ).
bool has_avx512_bulk();
void block_amaxes_portable(const float* x, std::size_t blocks, float* amaxes);
void encode_blocks_div_portable(const float* x, const float* denoms, std::size_t blocks, std::uint8_t* packed);
void block_amaxes_avx512(const float* x, std::size_t blocks, float* amaxes);  // only if has_avx512_bulk()
void encode_blocks_div_avx512(const float* x, const float* denoms, std::size_t blocks, std::uint8_t* packed);

}  // namespace fp4serve::nvfp4
