#include "kernels/linear_attention_wrappers.h"

#include <cstring>

#include "kernels/scratch.h"
#include "util/error.h"

namespace fp4serve::kernels {

void SimdConv1dKernel::run(const Conv1dArgs& a) const {
  if (a.kernel < 1 || a.channels < 0 || a.m < 0) fail(backend_, " conv1d: invalid shape (kernel ", a.kernel, ")");
  if (a.m == 0) return;
  core_(a);
  const std::int64_t C = a.channels, S = a.kernel - 1;
  vm_->silu(a.out, a.m * C);
  // The state becomes the last K-1 rows of [state; x].
  if (a.m >= S) {
    std::memcpy(a.state, a.x + (a.m - S) * C, static_cast<std::size_t>(S * C) * sizeof(float));
  } else {
    std::memmove(a.state, a.state + a.m * C, static_cast<std::size_t>((S - a.m) * C) * sizeof(float));
    std::memcpy(a.state + (S - a.m) * C, a.x, static_cast<std::size_t>(a.m * C) * sizeof(float));
  }
}

void SimdDeltaRuleKernel::run(const DeltaRuleArgs& a) const {
  if (a.m < 0 || a.num_k_heads <= 0 || a.num_v_heads <= 0 || a.dk <= 0 || a.dv <= 0 ||
      a.num_v_heads % a.num_k_heads != 0)
    fail(backend_, " gated delta rule: unsupported shape (", a.num_k_heads, " key heads, ", a.num_v_heads,
         " value heads, dk ", a.dk, ", dv ", a.dv, ")");
  if (a.m == 0) return;
  const std::int64_t n = a.m * a.num_v_heads;
  float* decay = thread_scratch_as<float>(kScratchDecay, static_cast<std::size_t>(n));
  vm_->exp(a.g, decay, n);
  core_(a, decay);
}

}  // namespace fp4serve::kernels
