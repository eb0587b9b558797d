#pragma once
// Conversions between fp32 and the narrow scalar formats checkpoints use. Every function here is
// exhaustively tested over all codes; they are the source of truth for every kernel.
#include <cstdint>

namespace fp4serve {

// E2M1 (FP4): s e1 e0 m, bias 1, max 6, no Inf/NaN. Codes 8..15 are the negatives.
float e2m1_to_float(std::uint8_t code);  // uses the low 4 bits
// Round to nearest, ties to even, saturating at +-6 (ModelOpt `_cast_fp4`). NaN maps to 0.
std::uint8_t float_to_e2m1(float x);

// E4M3 "fn": bias 7, max 448, no Inf, NaN = S.1111.111.
float e4m3_to_float(std::uint8_t code);
// Round to nearest even with saturation to +-448 (CUDA cvt.rn.satfinite). NaN -> 0x7F.
std::uint8_t float_to_e4m3_satfinite(float x);
// PyTorch's `.to(torch.float8_e4m3fn)`: not saturating; |x| >= 464 rounds to NaN (0x7F/0xFF).
std::uint8_t float_to_e4m3_torch(float x);

// E5M2: bias 15, IEEE-like with Inf and NaN.
float e5m2_to_float(std::uint8_t code);
std::uint8_t float_to_e5m2(float x);  // round to nearest even, overflow -> Inf

// UE8M0: 2^(e-127); 0xFF is NaN.
float ue8m0_to_float(std::uint8_t code);

// BF16 and IEEE half, both round-to-nearest-even from fp32; NaN stays NaN.
float bf16_to_float(std::uint16_t bits);
std::uint16_t float_to_bf16(float x);
float fp16_to_float(std::uint16_t bits);
std::uint16_t float_to_fp16(float x);

}  // namespace fp4serve
