#pragma once
// Conversions between fp32 and the narrow scalar formats checkpoints use. Every function here is
// exhaustively tested over all codes; they are the source of truth for every kernel.
#include <cstdint>

namespace fp4serve {

// E2M1 (FP4): s e1 e0 m, bias 1, max 6, no Inf/NaN. Codes 8..15 are the negatives.
float e2m1_to_float(std::uint8_t code);  // uses the low 4 bits
// Round to nearest, ties to even, saturating at +-6 (ModelOpt `_cast_fp4`). The sign bit is
// `x < 0`: -0.0 gives code 0, a tiny negative gives 8. NaN maps to 7, as torch.searchsorted does.
std::uint8_t float_to_e2m1(float x);

// E4M3 "fn": bias 7, max 448, no Inf, NaN = S.1111.111.
float e4m3_to_float(std::uint8_t code);
// Round to nearest even with saturation to +-448 (CUDA cvt.rn.satfinite). NaN -> 0x7F.
std::uint8_t float_to_e4m3_satfinite(float x);
// PyTorch's classic `.to(torch.float8_e4m3fn)` (c10 fp8e4m3fn_from_fp32_value before PyTorch
// PR #178817, April 2026): not saturating; |x| > 464 (and Inf, NaN) give NaN (0x7F/0xFF, the
// input's sign kept); exactly 464 is a tie and rounds to even, 448. Newer torch (e.g. 2.15)
// saturates finite overflow and Inf to +-448 instead; the two agree for |x| <= 464 and NaN.
// ModelOpt, compressed-tensors and vLLM clamp to 448 before casting, so neither matters there.
std::uint8_t float_to_e4m3_torch(float x);

// E5M2: bias 15, IEEE-like with Inf and NaN.
float e5m2_to_float(std::uint8_t code);
std::uint8_t float_to_e5m2(float x);  // round to nearest even, overflow -> Inf, NaN -> 0x7F|sign

// UE8M0: 2^(e-127); 0xFF is NaN.
float ue8m0_to_float(std::uint8_t code);

// BF16 and IEEE half, both round-to-nearest-even from fp32, overflow -> Inf; NaN stays NaN
// (sign and top payload bits kept, quiet bit set).
float bf16_to_float(std::uint16_t bits);
std::uint16_t float_to_bf16(float x);
float fp16_to_float(std::uint16_t bits);
std::uint16_t float_to_fp16(float x);

}  // namespace fp4serve
