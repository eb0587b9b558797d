#pragma once
// What the backend tests iterate over: the backends this CPU can run for a family, and the small
// MoE layer they all run (8 experts, top 3: a few tokens already reach every expert).
#include <vector>

#include "kernels/backend.h"
#include "util/cpu_features.h"

namespace fp4serve::kernels::testing {

inline std::vector<const Backend*> runnable(OpFamily f) {
  std::vector<const Backend*> out;
  for (const Backend& b : compiled_backends())
    if (b.family(f).present() && cpu_features().missing(b.needs).empty()) out.push_back(&b);
  return out;
}

// NVFP4 experts renormalise their top-k weights, BF16 ones do not: both routings get run.
inline MoeShape small_moe_shape(SchemeKind kind) {
  MoeShape s;
  s.hidden = 64;
  s.intermediate = 48;
  s.experts = 8;
  s.top_k = 3;
  s.norm_topk_prob = kind == SchemeKind::NVFP4;
  s.expert_kind = kind;
  s.expert_dtype = kind == SchemeKind::NVFP4 ? DType::U8 : DType::BF16;
  return s;
}

}  // namespace fp4serve::kernels::testing
