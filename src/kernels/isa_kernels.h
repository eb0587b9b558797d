#pragma once
// Entry points of the instruction-set-specific translation units (avx2/, avx512/, amx/). Only
// these files are compiled with ISA flags; callers must check CPU support first. Each GEMM core
// computes y[m, n] = x[m, k] * W^T with W4A16 semantics (activations as given), splits N over
// the global thread pool, and expects arguments already checked by the generic wrapper.
#include <cstdint>

#include "kernels/kernels.h"

namespace fp4serve::kernels {

struct PrefillVectorOps;  // kernels/prefill_tiles.h

namespace avx2 {
void nvfp4_gemm(const float* x, std::int64_t m, const WeightMatrix& w, float* y);
// Activations quantized to int8 per 16-element block (Precision::Int8Activations), the weights'
// E2M1 as int8, integer dot products: per row for m <= 4, in 8-token tiles for m > 4; rows with
// NaN/Inf: nvfp4_gemm.
void nvfp4_gemm_int8(const float* x, std::int64_t m, const WeightMatrix& w, float* y);
// m <= 4: activations as three int8 parts per 16-element block (each element within 6.1e-8 of
// its block's max: fp32-class, Precision::Int8x3Activations), the same integer dot products three
// times per decoded weight; m > 4 and rows with NaN/Inf: nvfp4_gemm.
void nvfp4_gemm_int8x3(const float* x, std::int64_t m, const WeightMatrix& w, float* y);
void dense_gemm(const float* x, std::int64_t m, const WeightMatrix& w, float* y);  // BF16/F16/F32/FP8
void attention(const AttentionArgs& args);  // head_dim % 8 == 0
// Prefill with head_dim % 32 == 0 (attention() picks it): as avx512::attention_prefill_tiles.
void attention_prefill_tiles(const AttentionArgs& args, std::int64_t threads);
void conv1d(const Conv1dArgs& args);                            // pre-activations only
void delta_rule(const DeltaRuleArgs& args, const float* decay);  // decay = exp(g)
}  // namespace avx2

namespace avx512 {
void nvfp4_gemm(const float* x, std::int64_t m, const WeightMatrix& w, float* y);
void dense_gemm(const float* x, std::int64_t m, const WeightMatrix& w, float* y);
void attention(const AttentionArgs& args);  // head_dim % 16 == 0
// Prefill with head_dim % 16 == 0, head_dim <= 128 and grouped heads (attention() picks it):
// flash attention over tiles of query tokens x the heads of one KV head.
void attention_prefill_tiles(const AttentionArgs& args, std::int64_t threads);
// The vector loops of the prefill tiles' softmax step (amx::attention's tiles use them too).
const PrefillVectorOps& prefill_vector_ops();
void conv1d(const Conv1dArgs& args);                            // pre-activations only
void delta_rule(const DeltaRuleArgs& args, const float* decay);  // decay = exp(g)
}  // namespace avx512

namespace vnni {
// AVX-512 VNNI + VBMI: the avx2 int8 kernels' classes with vpdpbusd (one instruction per 64
// products) and vpermb. int8: per row for m <= 4, in 8-token tiles for m > 4, and from m = 16
// whole groups of 16 tokens in the lanes (vnni/nvfp4_gemm_vnni_groups.cpp), the rest in the
// tiles. int8x3: m <= 2 only, avx512::nvfp4_gemm above. Rows with NaN/Inf run avx512::nvfp4_gemm.
void nvfp4_gemm_int8(const float* x, std::int64_t m, const WeightMatrix& w, float* y);    // int8-activations
void nvfp4_gemm_int8x3(const float* x, std::int64_t m, const WeightMatrix& w, float* y);  // int8x3-activations
}  // namespace vnni

namespace amx {
// BF16 tiles: activations rounded to bf16, fp32 accumulation. Any m >= 1 works; the wrapper
// sends small m to avx512, where tiles do not pay.
void nvfp4_gemm(const float* x, std::int64_t m, const WeightMatrix& w, float* y);
void bf16_gemm(const float* x, std::int64_t m, const WeightMatrix& w, float* y);  // Dense BF16 only
// NVFP4 with activations as bf16 hi + lo pairs (two tile products per weight tile): each
// activation carried to ~2^-17 relative (Precision::Activations16) for twice the tile work.
// Takes every m: tiles from m = 9, narrow tiles at 5..8, the fp32 avx512 kernel below 5.
void nvfp4_gemm_split(const float* x, std::int64_t m, const WeightMatrix& w, float* y);
// The narrow tiles alone (hi + lo as two columns per token), for 1 <= m <= 8; nvfp4_gemm_split
// sends 5..8 here.
void nvfp4_gemm_narrow(const float* x, std::int64_t m, const WeightMatrix& w, float* y);
// Dense BF16 with activations in three bf16 parts (hi, lo, lo2): ~2^-25 relative, as fine as fp32.
void bf16_gemm_split3(const float* x, std::int64_t m, const WeightMatrix& w, float* y);
// NVFP4 on the 16-token tiles, any m, with each activation block first moved to the int8 grid
// vnni::nvfp4_gemm_int8 quantizes it to (q * step; numerics/int8_grid_step.h), then packed as
// bf16 hi + lo, which carries q * step exactly: the int8 kernels' sums up to fp32 summation
// order. Blocks holding NaN or Inf are packed as they are.
void nvfp4_gemm_int8_grid(const float* x, std::int64_t m, const WeightMatrix& w, float* y);
// `count` (rounded up to 4) independent 16 x 16 x 32 bf16 tile products on zero tiles, on the
// calling thread: what kernels/tile_rate.h times for bench and kernels_bench (amx/tile_rate.cpp).
void run_tile_products(std::int64_t count);
// Attention: a prefill (m x KV heads >= 4 x threads, head_dim a multiple of 32, at most 256 query
// heads per KV head) as the avx512 flash-attention tiles with both matrix products on BF16
// tiles, each fp32 operand as bf16 hi + lo (Precision::Activations16); everything else as
// avx512::attention.
void attention(const AttentionArgs& args);
// The prefill tiles alone (head_dim a multiple of 32, at most 256 query heads per KV head),
// `threads` sizing the tiles as in avx512's (up to 256 query rows per tile).
void attention_prefill_tiles(const AttentionArgs& args, std::int64_t threads);
}  // namespace amx

// Generic helpers the ISA files call (compiled without ISA flags).
// Throws Error(what). ISA files must not instantiate fail<...>() themselves: a template
// instantiated with ISA flags may be the copy the linker keeps for generic code.
[[noreturn]] void isa_unsupported(const char* what);

// Element-wise math (the VectorMath tables of kernels/vector_math.h; scalar definitions there).
namespace avx2 {
void vec_exp(const float* x, float* y, std::int64_t n);
void silu_mul(float* gate, const float* up, std::int64_t n);
void silu(float* x, std::int64_t n);
double softmax_numerators(float* s, std::int64_t n);
// The same, and the max it subtracted (-inf when every entry is NaN or -inf) in *max_out.
double softmax_numerators_max(float* s, std::int64_t n, float* max_out);
void weighted_sum(float* y, const float* const* rows, const float* w, std::int64_t k, std::int64_t n);
double sum_squares(const float* x, std::int64_t n);
}  // namespace avx2
namespace avx512 {
void vec_exp(const float* x, float* y, std::int64_t n);
void silu_mul(float* gate, const float* up, std::int64_t n);
void silu(float* x, std::int64_t n);
double softmax_numerators(float* s, std::int64_t n);
// The same, and the max it subtracted (-inf when every entry is NaN or -inf) in *max_out.
double softmax_numerators_max(float* s, std::int64_t n, float* max_out);
void weighted_sum(float* y, const float* const* rows, const float* w, std::int64_t k, std::int64_t n);
double sum_squares(const float* x, std::int64_t n);
}  // namespace avx512
// Threads of the kernel pool (ThreadPool::size() is inline code ISA files must not compile).
std::int64_t kernel_threads();

}  // namespace fp4serve::kernels
