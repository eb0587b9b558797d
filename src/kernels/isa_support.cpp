// Generic (no ISA flags) helpers the instruction-set files call.
#include <cmath>

#include "kernels/isa_kernels.h"
#include "util/error.h"

namespace fp4serve::kernels {

double softmax_numerators(float* s, std::int64_t n) {
  float mx = -INFINITY;
  for (std::int64_t i = 0; i < n; ++i) mx = s[i] > mx ? s[i] : mx;
  double sum = 0.0;
  for (std::int64_t i = 0; i < n; ++i) sum += s[i] = std::exp(s[i] - mx);
  return sum;
}

void isa_unsupported(const char* what) { fail(what); }

}  // namespace fp4serve::kernels
