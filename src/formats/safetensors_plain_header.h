#pragma once
// The quick way through a safetensors header: simdjson's parser (SIMD code picked for the CPU at
// run time), then one walk of its tape into TensorInfo records, for the layout every writer
// produces: each tensor entry holds exactly "dtype", "shape" and "data_offsets", and
// "__metadata__" maps strings to strings. Anything else, and anything wrong, returns nullopt, and
// the caller parses the header again with the checked parser (safetensors.cpp), which accepts the
// unusual and names the exact problem in its error. So this path never decides what is an error;
// it only makes the common case cheap: a 397B checkpoint's 370k tensors took 45 % of `inspect`
// through per-entry DOMs (docs/perf.md, session 36).
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "formats/safetensors.h"

namespace fp4serve {

struct PlainSafetensorsHeader {
  std::vector<TensorInfo> tensors;  // in document order
  std::map<std::string, std::string> metadata;
};

// nullopt unless `json` is a plain header whose every tensor is in bounds of `data_size` and
// matches its shape; layout across tensors (holes, overlaps) is left to the caller.
std::optional<PlainSafetensorsHeader> parse_plain_safetensors_header(std::string_view json, std::uint64_t data_size);

}  // namespace fp4serve
