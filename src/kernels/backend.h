#pragma once
// What a backend is to the registry: a name, the CPU features it needs, how fast it is relative
// to the others, and per op family the kernel object, its arithmetic precision (which sets the
// validation tolerance) and the shapes it supports.
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "kernels/kernels.h"
#include "kernels/shapes.h"
#include "util/cpu_features.h"

namespace fp4serve::kernels {

// How a kernel rounds, which decides how far from the fp64-accumulating reference it may land.
enum class Precision {
  Fp32,             // weights decoded exactly to fp32, fp32 FMA accumulation
  Bf16Activations,  // activations rounded to bf16 (AMX / AVX512-BF16 dot products), fp32 accumulation
  // Activations split into two or three bf16 parts (AMX: one tile product per part and weight
  // tile), fp32 accumulation: hi + lo is about 2^-17 relative (~250x finer than bf16), three
  // parts about 2^-25.
  Activations16,
  // Activations quantized to int8 per 16-element block (scale = block max / 127 rounded up to a
  // bf16 value; numerics/int8_grid_step.h), exact integer
  // dot products against the weights' E2M1: llama.cpp's Q8_0 class, one block finer.
  Int8Activations,
  // Activations as three int8 parts per 16-element block (each part resolves the previous one's
  // step / 254): every element within 6.1e-8 of its block's max, about fp32's rounding of the
  // block's largest element; exact integer dot products, fp32 accumulation across blocks.
  Int8x3Activations,
};
std::string_view precision_name(Precision p);

struct FamilyImpl {
  const GemmKernel* gemm = nullptr;  // DenseGemm and Fp4Gemm
  const MoeKernel* moe = nullptr;
  const AttentionKernel* attention = nullptr;
  const Conv1dKernel* conv1d = nullptr;         // LinearAttention: both ops together
  const DeltaRuleKernel* delta_rule = nullptr;
  Precision precision = Precision::Fp32;
  // Rows of M (tokens) one tile covers; the fault injector's `tail` kind leaves the rows past
  // the last full tile unwritten, like a kernel that forgot its remainder loop.
  std::int64_t m_tile = 1;
  // Empty when the shape is supported; else the reason (e.g. "head_dim 72 is not a multiple of 16").
  std::function<std::string(const GemmShape&)> gemm_unsupported;
  std::function<std::string(const MoeShape&)> moe_unsupported;
  std::function<std::string(const AttentionShape&)> attention_unsupported;
  std::function<std::string(const LinearAttentionShape&)> linear_unsupported;

  bool present() const {
    return gemm != nullptr || moe != nullptr || attention != nullptr || (conv1d != nullptr && delta_rule != nullptr);
  }
};

struct Backend {
  std::string name;         // "reference", "avx2", "avx512", "amx"
  std::string description;  // one line for doctor
  int speed_rank = 0;       // `auto` tries higher first; reference is 0
  std::vector<CpuFeature> needs;
  FamilyImpl dense, fp4, moe, attention, linear_attention;

  const FamilyImpl& family(OpFamily f) const;
};

// Every backend compiled into this binary, fastest first, whether or not this CPU can run it.
const std::vector<Backend>& compiled_backends();
// nullptr when no compiled backend has that name.
const Backend* find_backend(std::string_view name);

}  // namespace fp4serve::kernels
