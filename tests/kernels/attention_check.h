#pragma once
// Attention against the reference, shared by the backend and attention-path tests: the reference
// on one contiguous block is the truth; the reference again and every runnable SIMD backend run
// on paged copies with blocks of 1, 5 and 16 tokens (a wrong block index or offset reads another
// block's numbers). With an F16 or BF16 cache every copy holds the same rounded keys and values,
// so the backends are held to the same tolerance as on an fp32 cache.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "kernels/backend.h"
#include "kernels/paged_kv.h"
#include "kernels/random_data.h"
#include "kernels/validation.h"
#include "util/cpu_features.h"

namespace fp4serve::kernels::testing {

struct AttentionCase {
  std::int64_t heads, kv, dim, m, past;
};

// The arguments of case c over `cache`, q [m, heads * dim] in, out [m, heads * dim] out.
inline AttentionArgs attention_args(const AttentionCase& c, const PagedKvCopy& cache, const float* q, float* out) {
  AttentionArgs a;
  a.q = q;
  a.out = out;
  cache.point(a);
  a.m = c.m;
  a.past = c.past;
  a.num_heads = c.heads;
  a.num_kv_heads = c.kv;
  a.head_dim = c.dim;
  a.scale = 1.0f / std::sqrt(static_cast<float>(c.dim));
  return a;
}

// `amplitude` scales q and k: large values make the softmax nearly one-hot.
inline void expect_attention_matches_reference(const AttentionCase& c, std::uint64_t seed, float amplitude = 1.0f,
                                               double fp32_tolerance = 2e-6, DType dtype = DType::F32) {
  Rng rng(seed);
  const std::int64_t total = c.past + c.m;
  const auto q = random_activations(rng, c.m, c.heads * c.dim, amplitude);
  const auto k = random_activations(rng, total, c.kv * c.dim, amplitude);
  const auto v = random_activations(rng, total, c.kv * c.dim);
  std::vector<float> want(q.size());
  const PagedKvCopy contiguous(k.data(), v.data(), total, c.kv, c.dim, total, 1, 0, 1, dtype);
  AttentionArgs a = attention_args(c, contiguous, q.data(), want.data());
  reference_kernels().attention->run(a);
  const auto label = [&](const char* who, std::int64_t block) {
    return ::testing::Message() << who << " heads=" << c.heads << " kv=" << c.kv << " dim=" << c.dim << " m=" << c.m
                                << " past=" << c.past << " block_tokens=" << block << " kv dtype " << dtype_name(dtype);
  };
  for (const std::int64_t block : {std::int64_t{1}, std::int64_t{5}, std::int64_t{16}}) {
    const PagedKvCopy paged(k.data(), v.data(), total, c.kv, c.dim, block, 3, 1, 1, dtype);
    paged.point(a);
    std::vector<float> ref_paged(want.size(), NAN);
    a.out = ref_paged.data();
    reference_kernels().attention->run(a);
    EXPECT_EQ(ref_paged, want) << label("reference", block);  // same arithmetic, any paging
    for (const Backend& b : compiled_backends()) {
      if (!b.attention.present() || b.name == "reference" || !cpu_features().missing(b.needs).empty()) continue;
      if (!b.attention.attention_unsupported(AttentionShape{c.heads, c.kv, c.dim, dtype}).empty()) continue;
      std::vector<float> got(want.size(), NAN);
      a.out = got.data();
      b.attention.attention->run(a);
      // fp32 kernels to the caller's bound; amx's tiles (bf16 hi + lo parts, 4e-6 to 2.8e-5 here)
      // to their class's validation tolerance.
      const double tol = b.attention.precision == Precision::Fp32 ? fp32_tolerance : validation_tolerance(b.attention.precision);
      EXPECT_LE(output_error(got.data(), want.data(), c.m, c.heads * c.dim), tol) << label(b.name.c_str(), block);
    }
  }
}

}  // namespace fp4serve::kernels::testing
