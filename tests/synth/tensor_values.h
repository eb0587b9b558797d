#pragma once
// Reading synth's tensors back as floats, for the synth suites.
#include <cstring>
#include <string>
#include <vector>

#include "formats/checkpoint.h"
#include "formats/quant_scheme.h"
#include "numerics/nvfp4.h"
#include "numerics/scalar_formats.h"

namespace fp4serve::synth::testing {

// BF16 or F32 tensor values; empty for any other dtype.
inline std::vector<float> as_floats(const TensorRef& t) {
  auto bytes = t.bytes();
  std::vector<float> out;
  if (t.info->dtype == DType::BF16) {
    for (std::size_t i = 0; i < bytes.size(); i += 2)
      out.push_back(bf16_to_float(static_cast<std::uint16_t>(bytes[i] | (bytes[i + 1] << 8))));
  } else if (t.info->dtype == DType::F32) {
    out.resize(bytes.size() / 4);
    std::memcpy(out.data(), bytes.data(), bytes.size());
  }
  return out;
}

// Dequantized weight of a linear module, whatever its scheme.
inline std::vector<float> linear_weight(const Checkpoint& ckpt, const ResolvedQuantization& rq,
                                        const std::string& module) {
  const LinearModule* m = rq.find(module);
  if (m == nullptr || m->scheme.kind == SchemeKind::Dense) return as_floats(ckpt.at(module + ".weight"));
  std::vector<float> out(static_cast<std::size_t>(m->out_features * m->in_features));
  nvfp4::dequantize(ckpt.at(m->scheme.weight).bytes(), ckpt.at(m->scheme.block_scale).bytes(),
                    m->scheme.weight_scale_2, m->out_features, m->in_features, out);
  return out;
}

}  // namespace fp4serve::synth::testing
