#pragma once
// GemmKernel / AttentionKernel objects around the ISA cores: argument checks with messages that
// name the backend and shape, W4A4 activation fake-quantization, and the M threshold at which a
// backend hands over from its small-M core to its large-M (AMX) core.
#include <cstdint>
#include <string>

#include "kernels/kernels.h"

namespace fp4serve::kernels {

using GemmCore = void (*)(const float* x, std::int64_t m, const WeightMatrix& w, float* y);
using AttentionCore = void (*)(const AttentionArgs& args);

// Throws Error naming `backend` and the family when w cannot be run (kind, dtype, k % 16, null data).
void check_gemm_args(const WeightMatrix& w, std::int64_t m, bool nvfp4_family, const std::string& backend);
void check_attention_args(const AttentionArgs& a, std::int64_t head_dim_multiple, const std::string& backend);

class Fp4GemmKernel final : public GemmKernel {
 public:
  // `large` (may be null) runs when m >= large_from.
  Fp4GemmKernel(std::string backend, GemmCore small, GemmCore large = nullptr, std::int64_t large_from = 0)
      : backend_(std::move(backend)), small_(small), large_(large), large_from_(large_from) {}
  void run(const float* x, std::int64_t m, const WeightMatrix& w, float* y, Fp4Semantics semantics) const override;

 private:
  std::string backend_;
  GemmCore small_, large_;
  std::int64_t large_from_;
};

class DenseGemmKernel final : public GemmKernel {
 public:
  // `large_bf16` (may be null) runs BF16 weights when m >= large_from; everything else `small`.
  DenseGemmKernel(std::string backend, GemmCore small, GemmCore large_bf16 = nullptr, std::int64_t large_from = 0)
      : backend_(std::move(backend)), small_(small), large_(large_bf16), large_from_(large_from) {}
  void run(const float* x, std::int64_t m, const WeightMatrix& w, float* y, Fp4Semantics semantics) const override;

 private:
  std::string backend_;
  GemmCore small_, large_;
  std::int64_t large_from_;
};

class SimdAttentionKernel final : public AttentionKernel {
 public:
  SimdAttentionKernel(std::string backend, AttentionCore core, std::int64_t head_dim_multiple)
      : backend_(std::move(backend)), core_(core), multiple_(head_dim_multiple) {}
  void run(const AttentionArgs& args) const override;

 private:
  std::string backend_;
  AttentionCore core_;
  std::int64_t multiple_;
};

}  // namespace fp4serve::kernels
