// The validation data generator: a big dense matrix is filled on the pool in pieces, each with a
// generator of its own, and must come out the same bytes for a seed however it is scheduled.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <vector>

#include "kernels/random_data.h"
#include "numerics/scalar_formats.h"
#include "util/thread_pool.h"

namespace fp4serve::kernels {
namespace {

TEST(RandomData, BigDenseWeightsAreTheSameBytesOnOneThreadOrMany) {
  const std::int64_t n = 1024, k = 1000;  // 1M weights: four pieces and a part
  Rng many_rng(42);
  const auto many = random_weight(many_rng, SchemeKind::Dense, DType::BF16, n, k);
  // Inside a pool task the pool runs nested work serially, on this one thread.
  std::unique_ptr<OwnedWeight> one;
  parallel_for(2, 1, [&](std::int64_t b, std::int64_t e) {
    for (std::int64_t t = b; t < e; ++t) {
      if (t != 0) continue;
      Rng one_rng(42);
      one = random_weight(one_rng, SchemeKind::Dense, DType::BF16, n, k);
    }
  });
  ASSERT_TRUE(one);
  EXPECT_EQ(many->data, one->data);

  // The pieces are not copies of each other, and every value is in the documented range.
  const std::size_t piece_bytes = (std::size_t{1} << 18) * 2;
  EXPECT_NE(std::memcmp(many->data.data(), many->data.data() + piece_bytes, piece_bytes), 0);
  for (std::size_t i = 0; i < many->data.size(); i += 2) {
    const float v = bf16_to_float(static_cast<std::uint16_t>(many->data[i] | many->data[i + 1] << 8));
    ASSERT_LE(std::abs(v), 0.0501f) << "weight " << i / 2;
  }
  // A different seed, different weights.
  Rng other_rng(43);
  EXPECT_NE(random_weight(other_rng, SchemeKind::Dense, DType::BF16, n, k)->data, many->data);
}

}  // namespace
}  // namespace fp4serve::kernels
