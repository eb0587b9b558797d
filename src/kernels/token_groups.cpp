#include "kernels/token_groups.h"

namespace fp4serve::kernels {

std::int64_t tokens_in_groups(std::int64_t m, std::int64_t group, std::int64_t padded_min) {
  if (m < group) return 0;
  const std::int64_t whole = m / group * group;
  return m - whole >= padded_min ? m : whole;
}

}  // namespace fp4serve::kernels
