#pragma once
// Resolution of the quantization config against the tensors actually present: one QuantScheme per
// linear module. A module counts as NVFP4 only when the config says so AND its packed weight and
// scale tensors exist with the right dtypes and shapes; any contradiction is an error.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "formats/checkpoint.h"
#include "formats/quant_config.h"

namespace fp4serve {

enum class SchemeKind { Dense, NVFP4, FP8 };
std::string_view scheme_kind_name(SchemeKind kind);

struct QuantScheme {
  SchemeKind kind = SchemeKind::Dense;
  DType storage = DType::BF16;       // dtype of the stored weight (U8 for NVFP4)
  bool activations_quantized = false;  // checkpoint carries an input scale usable for W4A4/W8A8
  // Per-tensor scales, already converted to ModelOpt's convention (dequant multipliers, fp32):
  // compressed-tensors' inverted global scales are inverted back here.
  float weight_scale_2 = 1.0f;  // NVFP4: amax/2688; FP8: weight_scale (amax/448)
  float input_scale = 0.0f;     // 0 when absent
  bool scale_stored_bf16 = false;  // weight_scale_2 came as BF16 (a known ModelOpt quirk)
  // Full tensor names in the checkpoint (empty when not applicable).
  std::string weight;        // "<module>.weight" or "<module>.weight_packed" (compressed-tensors)
  std::string block_scale;   // NVFP4 "<module>.weight_scale" [out, in/16] F8_E4M3
};

struct LinearModule {
  std::string name;           // module path without the tensor suffix
  std::int64_t out_features = 0;
  std::int64_t in_features = 0;  // logical (unpacked) input width
  QuantScheme scheme;
  // > 0 for a fused 3-D expert tensor (`<prefix>.experts.gate_up_proj` [E, 2I, H] or
  // `<prefix>.experts.down_proj` [E, H, I], transformers-v5 layout): one LinearModule named after
  // the tensor (no ".weight" suffix) stands for all E experts; out/in are per expert.
  std::int64_t fused_experts = 0;
};

struct ResolvedQuantization {
  QuantConfig config;
  std::vector<LinearModule> modules;  // every 2-D weight of the checkpoint, sorted by name
  std::vector<std::string> warnings;  // things users trip on, for `inspect`
  const LinearModule* find(std::string_view module) const;
};

// Whether resolution may read the per-tensor scale values. They sit between the large tensors
// of the data section, so on a cold 17 GB checkpoint reading them costs one disk seek per module;
// `inspect` skips them (scale fields then stay 1 / 0 and are not validated).
enum class ScaleValues { Read, Skip };

// Checks every tensor against the config. Throws Error naming the tensor on a contradiction.
ResolvedQuantization resolve_quantization(const Checkpoint& checkpoint, const QuantConfig& config,
                                          ScaleValues scale_values = ScaleValues::Read);

}  // namespace fp4serve
