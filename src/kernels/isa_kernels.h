#pragma once
// Entry points of the instruction-set-specific translation units (avx2/, avx512/, amx/). Only
// these files are compiled with ISA flags; callers must check CPU support first. Each GEMM core
// computes y[m, n] = x[m, k] * W^T with W4A16 semantics (activations as given), splits N over
// the global thread pool, and expects arguments already checked by the generic wrapper.
#include <cstdint>

#include "kernels/kernels.h"

namespace fp4serve::kernels {

namespace avx2 {
void nvfp4_gemm(const float* x, std::int64_t m, const WeightMatrix& w, float* y);
void dense_gemm(const float* x, std::int64_t m, const WeightMatrix& w, float* y);  // BF16/F16/F32/FP8
void attention(const AttentionArgs& args);  // head_dim % 8 == 0
void conv1d(const Conv1dArgs& args);                            // pre-activations only
void delta_rule(const DeltaRuleArgs& args, const float* decay);  // decay = exp(g)
}  // namespace avx2

namespace avx512 {
void nvfp4_gemm(const float* x, std::int64_t m, const WeightMatrix& w, float* y);
void dense_gemm(const float* x, std::int64_t m, const WeightMatrix& w, float* y);
void attention(const AttentionArgs& args);  // head_dim % 16 == 0
void conv1d(const Conv1dArgs& args);                            // pre-activations only
void delta_rule(const DeltaRuleArgs& args, const float* decay);  // decay = exp(g)
}  // namespace avx512

namespace amx {
// BF16 tiles: activations rounded to bf16, fp32 accumulation. Any m >= 1 works; the wrapper
// sends small m to avx512, where tiles do not pay.
void nvfp4_gemm(const float* x, std::int64_t m, const WeightMatrix& w, float* y);
void bf16_gemm(const float* x, std::int64_t m, const WeightMatrix& w, float* y);  // Dense BF16 only
}  // namespace amx

// Generic helpers the ISA files call (compiled without ISA flags).
// Softmax numerator in place: s[i] = exp(s[i] - max); returns the sum (fp64 accumulation).
double softmax_numerators(float* s, std::int64_t n);
// Throws Error(what). ISA files must not instantiate fail<...>() themselves: a template
// instantiated with ISA flags may be the copy the linker keeps for generic code.
[[noreturn]] void isa_unsupported(const char* what);

}  // namespace fp4serve::kernels
