// Scalar conversions. Decoders build the exact value with ldexp or bit patterns; encoders round
// on the fp32 bit pattern with integer arithmetic, so nothing depends on the FPU rounding mode or
// on the compiler's constant folding. Overflow and NaN policies follow the producer that the
// checkpoints come from (PyTorch's c10 casts, CUDA's satfinite) and are spelled out per function.
#include "numerics/scalar_formats.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>

namespace fp4serve {
namespace {

constexpr std::uint32_t kSignMask = 0x80000000u;
constexpr std::uint32_t kAbsMask = 0x7FFFFFFFu;
constexpr std::uint32_t kFp32Inf = 0x7F800000u;

std::uint32_t bits_of(float x) { return std::bit_cast<std::uint32_t>(x); }

// Rounds a finite, non-negative fp32 (given as its bit pattern) to a binary format with
// `man_bits` stored mantissa bits and exponent bias `bias`: round to nearest, ties to even,
// gradual underflow included. Returns the code (exponent field << man_bits | mantissa field).
// There is no overflow handling: a value past the format's largest finite number keeps counting
// upwards, and each caller maps such codes to its own Inf, NaN or saturation rule.
std::uint32_t round_to_code(std::uint32_t abs_bits, int man_bits, int bias) {
  int biased_exp = static_cast<int>(abs_bits >> 23);
  std::uint32_t mant = abs_bits & 0x7FFFFFu;
  if (biased_exp == 0) {
    biased_exp = 1;  // fp32 subnormal: same scale as the smallest normal, no implicit bit
  } else {
    mant |= 0x800000u;  // implicit leading one
  }
  // The value is mant * 2^(e - 23).
  const int e = biased_exp - 127;
  const int emin = 1 - bias;  // exponent of the target's smallest normal number
  // Target codes count in units of 2^(max(e, emin) - man_bits); below emin the unit stays at
  // the subnormal spacing, so more low bits of mant fall away.
  const int shift = 23 - man_bits + std::max(emin - e, 0);
  if (shift >= 25) return 0;  // mant < 2^24 <= half a unit: rounds to zero
  std::uint32_t q = mant >> shift;
  const std::uint32_t rem = mant & ((1u << shift) - 1u);
  const std::uint32_t half = 1u << (shift - 1);
  if (rem > half || (rem == half && (q & 1u) != 0)) ++q;  // a carry moves into the exponent
  // For a normal result q still holds the implicit one, which turns (e - emin) into the biased
  // exponent e + bias; for a subnormal result the first term is zero.
  return (static_cast<std::uint32_t>(std::max(e, emin) - emin) << man_bits) + q;
}

}  // namespace

// ---- E2M1 ----------------------------------------------------------------------------------

float e2m1_to_float(std::uint8_t code) {
  // Code 8 (-0) decodes to +0.0, as in ModelOpt's e2m1_values table.
  static constexpr float kValues[16] = {0.0f,  0.5f,  1.0f,  1.5f,  2.0f,  3.0f,  4.0f,  6.0f,
                                        0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};
  return kValues[code & 0x0F];
}

std::uint8_t float_to_e2m1(float x) {
  // ModelOpt NVFP4QTensor._cast_fp4: the sign bit is `x < 0` (so -0.0 gives code 0 and a small
  // negative value gives code 8); the magnitude code is searchsorted(bounds, |x|), i.e. the
  // number of bounds strictly below |x|, plus one when |x| sits exactly on 0.75, 1.75 or 3.5.
  // Together these round to nearest with ties to the even code and saturate at 6.
  static constexpr float kBounds[7] = {0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f};
  const std::uint8_t sign = x < 0.0f ? 0x8 : 0x0;
  const float a = std::fabs(x);
  if (std::isnan(a)) return 0x7;  // torch.searchsorted places NaN after every bound
  std::uint8_t code = 0;
  for (float bound : kBounds) {
    if (bound < a) ++code;
  }
  if (a == 0.75f || a == 1.75f || a == 3.5f) ++code;
  return static_cast<std::uint8_t>(sign | code);
}

// ---- E4M3 (fn) -----------------------------------------------------------------------------

float e4m3_to_float(std::uint8_t code) {
  const int exp = (code >> 3) & 0xF;
  const int man = code & 0x7;
  float mag;
  if (exp == 0xF && man == 0x7) {
    mag = std::numeric_limits<float>::quiet_NaN();  // S.1111.111 is the only NaN; no Inf
  } else if (exp == 0) {
    mag = std::ldexp(static_cast<float>(man), -9);  // subnormal: m/8 * 2^-6
  } else {
    mag = std::ldexp(static_cast<float>(8 + man), exp - 10);  // (1 + m/8) * 2^(e-7)
  }
  return (code & 0x80) ? -mag : mag;
}

std::uint8_t float_to_e4m3_satfinite(float x) {
  const std::uint32_t b = bits_of(x);
  const std::uint32_t abs_bits = b & kAbsMask;
  if (abs_bits > kFp32Inf) return 0x7F;  // NaN (cvt.satfinite keeps NaN)
  const auto sign = static_cast<std::uint8_t>((b & kSignMask) >> 24);
  if (abs_bits == kFp32Inf) return static_cast<std::uint8_t>(sign | 0x7E);
  const std::uint32_t code = std::min<std::uint32_t>(round_to_code(abs_bits, 3, 7), 0x7E);
  return static_cast<std::uint8_t>(sign | code);
}

std::uint8_t float_to_e4m3_torch(float x) {
  // c10 fp8e4m3fn_from_fp32_value: everything with |x| >= 480 (Inf and NaN included) becomes
  // 0x7F with the input's sign; (464, 480) rounds up onto 0x7F, which is NaN too.
  const std::uint32_t b = bits_of(x);
  const std::uint32_t abs_bits = b & kAbsMask;
  const auto sign = static_cast<std::uint8_t>((b & kSignMask) >> 24);
  if (abs_bits >= kFp32Inf) return static_cast<std::uint8_t>(sign | 0x7F);
  const std::uint32_t code = std::min<std::uint32_t>(round_to_code(abs_bits, 3, 7), 0x7F);
  return static_cast<std::uint8_t>(sign | code);
}

// ---- E5M2 ----------------------------------------------------------------------------------

float e5m2_to_float(std::uint8_t code) {
  const int exp = (code >> 2) & 0x1F;
  const int man = code & 0x3;
  float mag;
  if (exp == 0x1F) {
    mag = man == 0 ? std::numeric_limits<float>::infinity() : std::numeric_limits<float>::quiet_NaN();
  } else if (exp == 0) {
    mag = std::ldexp(static_cast<float>(man), -16);  // m/4 * 2^-14
  } else {
    mag = std::ldexp(static_cast<float>(4 + man), exp - 17);  // (1 + m/4) * 2^(e-15)
  }
  return (code & 0x80) ? -mag : mag;
}

std::uint8_t float_to_e5m2(float x) {
  // Same results as c10 fp8e5m2_from_fp32_value: NaN -> 0x7F with sign, overflow -> Inf.
  const std::uint32_t b = bits_of(x);
  const std::uint32_t abs_bits = b & kAbsMask;
  const auto sign = static_cast<std::uint8_t>((b & kSignMask) >> 24);
  if (abs_bits > kFp32Inf) return static_cast<std::uint8_t>(sign | 0x7F);
  if (abs_bits == kFp32Inf) return static_cast<std::uint8_t>(sign | 0x7C);
  const std::uint32_t code = std::min<std::uint32_t>(round_to_code(abs_bits, 2, 15), 0x7C);
  return static_cast<std::uint8_t>(sign | code);
}

// ---- UE8M0 ---------------------------------------------------------------------------------

float ue8m0_to_float(std::uint8_t code) {
  if (code == 0xFF) return std::numeric_limits<float>::quiet_NaN();
  // 2^(code-127) is exactly an fp32 with that biased exponent; code 0 is 2^-127, the fp32
  // subnormal with only the top mantissa bit set.
  if (code == 0) return std::bit_cast<float>(0x00400000u);
  return std::bit_cast<float>(static_cast<std::uint32_t>(code) << 23);
}

// ---- BF16 ----------------------------------------------------------------------------------

float bf16_to_float(std::uint16_t bits) {
  return std::bit_cast<float>(static_cast<std::uint32_t>(bits) << 16);
}

std::uint16_t float_to_bf16(float x) {
  const std::uint32_t b = bits_of(x);
  if ((b & kAbsMask) > kFp32Inf) {
    // NaN: keep sign and top payload bits, force the quiet bit so truncation can't make it Inf.
    return static_cast<std::uint16_t>((b >> 16) | 0x0040u);
  }
  // Round to nearest even on the 16 dropped bits; a carry out of the mantissa correctly bumps
  // the exponent, up to Inf for values past the largest bf16.
  const std::uint32_t rounding = 0x7FFFu + ((b >> 16) & 1u);
  return static_cast<std::uint16_t>((b + rounding) >> 16);
}

// ---- FP16 ----------------------------------------------------------------------------------

float fp16_to_float(std::uint16_t bits) {
  const std::uint32_t sign = static_cast<std::uint32_t>(bits & 0x8000u) << 16;
  const int exp = (bits >> 10) & 0x1F;
  const std::uint32_t man = bits & 0x3FFu;
  if (exp == 0x1F) {
    // Inf or NaN; a NaN keeps its payload in the top fp32 mantissa bits.
    return std::bit_cast<float>(sign | kFp32Inf | (man << 13));
  }
  const float mag = exp == 0 ? std::ldexp(static_cast<float>(man), -24)
                             : std::ldexp(static_cast<float>(1024u + man), exp - 25);
  return sign ? -mag : mag;
}

std::uint16_t float_to_fp16(float x) {
  const std::uint32_t b = bits_of(x);
  const std::uint32_t abs_bits = b & kAbsMask;
  const auto sign = static_cast<std::uint16_t>((b & kSignMask) >> 16);
  if (abs_bits > kFp32Inf) {
    // NaN as x86 F16C converts it (and so torch on CPU): quiet bit set, top payload bits kept.
    return static_cast<std::uint16_t>(sign | 0x7E00u | ((abs_bits & 0x7FFFFFu) >> 13));
  }
  if (abs_bits == kFp32Inf) return static_cast<std::uint16_t>(sign | 0x7C00u);
  const std::uint32_t code = std::min<std::uint32_t>(round_to_code(abs_bits, 10, 15), 0x7C00u);
  return static_cast<std::uint16_t>(sign | code);
}

}  // namespace fp4serve
