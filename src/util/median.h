#pragma once
// The median of a sample: the middle value, or the mean of the two middle ones for an even
// count; 0 for an empty sample. Shared by every figure reported as "median" (bench repetitions,
// memory-bandwidth passes) so they all mean the same thing.
#include <vector>

namespace fp4serve {

double median_of(std::vector<double> values);

}  // namespace fp4serve
