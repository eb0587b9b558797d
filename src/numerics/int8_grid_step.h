#pragma once
// The step of the int8 activation grid that every int8-activation kernel quantizes to: per
// 16-element block, q = round_to_nearest_even(x * (1 / step)) in -127..127 (the reciprocal in
// fp32, int8_grid_inverse) and x becomes q * step.
//
// The step is the block's max |x| / 127 rounded up to a bf16 value (8 significant bits), not the
// fp32 quotient itself. Then q * step has at most 7 + 8 = 15 significant bits, so two bf16 parts
// (hi = bf16(q * step), lo = q * step - hi) carry it exactly, and AMX bf16 tiles compute the same
// sums as the integer kernels, up to fp32 summation order, with two tile products per weight tile
// instead of three (docs/perf.md, session 31). Rounding up keeps |x / step| <= 127; the grid is at
// most 2^-8 coarser than with the fp32 quotient.
//
// Steps below FLT_MIN are raised to it, so blocks of subnormal values still quantize within
// -127..127 (their quotient underflowed to 0 before, and 127 / max overflowed to Inf).
// Internal linkage only: ISA translation units include it (src/kernels/check_isa_objects.cmake).
#include <cstdint>
#include <cstring>

namespace fp4serve::numerics {
namespace {

inline float int8_grid_step(float block_max) {
  if (!(block_max > 0.0f)) return 0.0f;
  float s = block_max / 127.0f;
  std::uint32_t bits;
  std::memcpy(&bits, &s, sizeof(bits));
  if ((bits & 0xFFFFu) != 0) bits = (bits & 0xFFFF0000u) + 0x10000u;  // up to the next bf16
  std::memcpy(&s, &bits, sizeof(s));
  constexpr float kMinStep = 1.17549435e-38f;  // FLT_MIN, a bf16 value
  return s < kMinStep ? kMinStep : s;
}

// 1 / step in fp32, the factor x is scaled by (0 for a zero block). Kernels and models multiply
// by it rather than divide by the step: the same q everywhere, and a division per 16 activations
// held amx-int8's rounding pass at 8 % of a prefill (session 31). |x| <= 127 * step, so
// |x * inverse| stays below 127.5 and q within -127..127.
inline float int8_grid_inverse(float step) { return step > 0.0f ? 1.0f / step : 0.0f; }

}  // namespace
}  // namespace fp4serve::numerics
