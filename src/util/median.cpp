#include "util/median.h"

#include <algorithm>

namespace fp4serve {

double median_of(std::vector<double> values) {
  if (values.empty()) return 0.0;
  const std::size_t n = values.size(), mid = n / 2;
  std::nth_element(values.begin(), values.begin() + static_cast<std::ptrdiff_t>(mid), values.end());
  if (n % 2 == 1) return values[mid];
  // The lower middle is the largest value below position mid.
  const double lower = *std::max_element(values.begin(), values.begin() + static_cast<std::ptrdiff_t>(mid));
  return 0.5 * (lower + values[mid]);
}

}  // namespace fp4serve
