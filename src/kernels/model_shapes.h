#pragma once
// The shape set validation runs for a model: every distinct GEMM weight shape (kind, dtype,
// N x K) the model multiplies by, its MoE block shape and its attention head layout.
#include "formats/model_config.h"
#include "formats/quant_scheme.h"
#include "kernels/shapes.h"

namespace fp4serve::kernels {

// Validation runs every shape at its real N except vocabulary-sized ones (lm_head, N = 151936):
// those are capped to kValidationCappedN + (N mod 256). Every backend blocks rows in divisors of
// 256 and threads split rows in such blocks, so the capped shape runs the same code paths,
// including the remainder, at 1/70 of the cost.
inline constexpr std::int64_t kValidationCapAbove = 16384;
inline constexpr std::int64_t kValidationCappedN = 2048;
std::int64_t validation_n(std::int64_t n);

// From the resolved checkpoint: every Linear the text model runs (embeddings only when tied to
// the LM head; vision and MTP modules skipped). When `quantization` lists no modules (a config
// with no checkpoint), shapes come from the config alone with the usual NVFP4 recipe: attention
// and expert projections NVFP4, router and LM head BF16.
ShapeSet shapes_for_model(const ModelConfig& config, const ResolvedQuantization& quantization,
                          Fp4Semantics semantics = Fp4Semantics::W4A16);

// Small shapes that exercise every kind, dtype and remainder path: `doctor` without a model.
ShapeSet builtin_shapes();

}  // namespace fp4serve::kernels
