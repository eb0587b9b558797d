#include "kernels/online_softmax.h"

#include <algorithm>
#include <cmath>

namespace fp4serve::kernels {

ChunkScales chunk_softmax(float* s, std::int64_t n, float chunk_max, double (*numerators)(float*, std::int64_t),
                          RunningSoftmax& r) {
  const double chunk_sum = numerators(s, n);
  if (!r.started) {
    r = {chunk_max, chunk_sum, true};
    return {0.0f, 1.0f};
  }
  const float max = std::max(r.max, chunk_max);
  const float old_scale = r.max == max ? 1.0f : std::exp(r.max - max);
  const float chunk_scale = chunk_max == max ? 1.0f : std::exp(chunk_max - max);
  r.sum = r.sum * old_scale + chunk_sum * chunk_scale;
  r.max = max;
  return {old_scale, chunk_scale};
}

}  // namespace fp4serve::kernels
