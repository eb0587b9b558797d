#pragma once
// Validation of one op family's candidates on a shape set: fresh random inputs from a seed,
// reference outputs computed once and shared by every candidate, outputs poisoned with NaN and
// fenced by guard words before each run. A candidate passes when every case is finite, fully
// written, inside its buffer and within tolerance (output_error, random_data.h).
#include <cstdint>
#include <memory>

#include "kernels/backend.h"
#include "kernels/selection_report.h"
#include "kernels/shapes.h"

namespace fp4serve::kernels {

// Token counts validation uses: M = 1 (decode), 7 (a remainder past a 4-row tile; AMX's
// small-M tiles, 5..8 tokens), an odd M one past a full 16-row tile, and a large odd M spanning
// several tiles and AMX's 32-row blocks (prefill path, with a remainder).
inline constexpr std::int64_t kGemmValidationM[] = {1, 7, 17, 33};
// MoE: one token; 7 tokens (a remainder past a 4-token tile) on the model's router; 21 tokens on
// a "hot" router that sends every token to the same top_k experts, so each expert GEMM sees
// M = 21: the prefill path with a remainder (a 16-token group and 5 more on the VNNI kernels,
// amx-int8's tiles from 20 tokens).
inline constexpr std::int64_t kMoeValidationM[] = {1, 7, 21};
struct AttentionCaseShape {
  std::int64_t m, past;
};
// Attention: decode over a short cache, a short chunk, a prefill, decode over a cache long
// enough for the split-position path (slices of >= 256 positions, avx512 from 2 threads on), and
// a prefill chunk whose positions run past one softmax chunk (kPrefillChunk: avx512's prefill
// tiles rescale their running sums; 16 tokens on Qwen3's 4 KV heads take the tiles up to 16
// threads).
inline constexpr AttentionCaseShape kAttentionValidation[] = {{1, 37}, {7, 11}, {32, 0}, {1, 700}, {16, 260}};
// Linear attention (conv1d + delta rule), each from a random non-zero state: one decode step, a
// short prefill, and 80 steps (past a 64-step chunk of a chunked delta rule, with a remainder).
inline constexpr std::int64_t kLinearAttentionValidationM[] = {1, 7, 80};

// Largest distinct expert data a MoE validation allocates (experts beyond share it, with their
// own scales).
inline constexpr std::size_t kMoeValidationBytes = std::size_t{32} << 20;

// The tolerance on output_error for a precision class; docs/kernels.md justifies the values.
double validation_tolerance(Precision precision);

class FamilyValidator {
 public:
  FamilyValidator(OpFamily family, const ShapeSet& shapes, std::uint64_t seed);
  ~FamilyValidator();
  FamilyValidator(const FamilyValidator&) = delete;
  FamilyValidator& operator=(const FamilyValidator&) = delete;

  bool empty() const;  // the shape set has nothing for this family
  std::vector<std::string> shape_descriptions() const;
  std::vector<std::string> case_descriptions() const;
  // The first reason a shape is unsupported by impl, or empty.
  std::string unsupported(const FamilyImpl& impl) const;
  // Runs impl on every case (inputs and reference outputs are built on first use).
  // Fills status Passed/Failed, error, tolerance, precision, seconds, reason.
  void validate(const FamilyImpl& impl, Verdict& verdict);
  double reference_seconds() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace fp4serve::kernels
