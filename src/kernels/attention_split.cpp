#include "kernels/attention_split.h"

#include <algorithm>
#include <cmath>

#include "kernels/scratch.h"
#include "util/thread_pool.h"

namespace fp4serve::kernels {

std::int64_t attention_splits(const AttentionArgs& a, std::int64_t threads) {
  const std::int64_t rows = a.m * a.num_kv_heads;
  if (rows <= 0 || a.num_heads <= a.num_kv_heads) return 1;  // no group to share the rows
  const std::int64_t want = (4 * threads + rows - 1) / rows;
  const std::int64_t fit = (a.past + 1) / kMinSplitPositions;
  return std::min(want, fit);
}

float slice_softmax(float* s, std::int64_t n, double (*numerators)(float*, std::int64_t, float*), const SlicePartial* part,
                    std::int64_t h) {
  float top = 0.0f;
  const double sum = numerators(s, n, &top);
  if (part != nullptr) {
    part->max[h] = top;
    part->sum[h] = static_cast<float>(sum);
  }
  return static_cast<float>(1.0 / sum);
}

void split_attention(const AttentionArgs& a, std::int64_t splits, SliceKernel slice) {
  const std::int64_t G = a.num_heads / a.num_kv_heads, D = a.head_dim;
  const std::int64_t per = G * (D + 2), tasks = a.m * a.num_kv_heads * splits;
  // The caller's scratch, written by every worker (one disjoint record per task), read below.
  float* partials = thread_scratch_as<float>(kScratchAttentionPartials, static_cast<std::size_t>(tasks * per));
  auto record = [partials, per, G, D](std::int64_t t) {
    float* p = partials + t * per;
    return SlicePartial{p, p + G * D, p + G * D + G};
  };
  parallel_for(tasks, 1, [&](std::int64_t b, std::int64_t e) {
    for (std::int64_t t = b; t < e; ++t) {
      const std::int64_t s = t % splits, g = (t / splits) % a.num_kv_heads, i = t / (splits * a.num_kv_heads);
      const std::int64_t visible = a.past + i + 1;
      slice(a, i, g, visible * s / splits, visible * (s + 1) / splits, record(t));
    }
  });
  for (std::int64_t i = 0; i < a.m; ++i)
    for (std::int64_t g = 0; g < a.num_kv_heads; ++g) {
      const std::int64_t t0 = (i * a.num_kv_heads + g) * splits;
      for (std::int64_t h = 0; h < G; ++h) {
        float top = record(t0).max[h];
        for (std::int64_t s = 1; s < splits; ++s) top = std::max(top, record(t0 + s).max[h]);
        float* out = a.out + (i * a.num_heads + g * G + h) * D;
        std::fill(out, out + D, 0.0f);
        double total = 0.0;
        for (std::int64_t s = 0; s < splits; ++s) {
          const SlicePartial p = record(t0 + s);
          const float w = std::exp(p.max[h] - top);
          total += static_cast<double>(w) * p.sum[h];
          const float* acc = p.acc + h * D;
          for (std::int64_t d = 0; d < D; ++d) out[d] += w * acc[d];
        }
        const auto inv = static_cast<float>(1.0 / total);
        for (std::int64_t d = 0; d < D; ++d) out[d] *= inv;
      }
    }
}

}  // namespace fp4serve::kernels
