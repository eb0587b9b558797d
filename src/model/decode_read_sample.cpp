#include "model/decode_read_sample.h"

#include <algorithm>

#include "kernels/weight_rows.h"

namespace fp4serve {

std::vector<std::span<const std::uint8_t>> sample_evenly(std::vector<std::span<const std::uint8_t>> spans,
                                                         std::uint64_t budget, std::uint64_t piece) {
  std::sort(spans.begin(), spans.end(), [](const auto& a, const auto& b) { return a.data() < b.data(); });
  std::vector<std::span<const std::uint8_t>> runs;
  std::uint64_t total = 0;
  for (const auto& s : spans) {
    if (s.empty()) continue;
    total += s.size();
    const std::uint8_t* end = runs.empty() ? nullptr : runs.back().data() + runs.back().size();
    if (end != nullptr && s.data() >= end && s.data() <= end + 64)
      runs.back() = {runs.back().data(), static_cast<std::size_t>(s.data() + s.size() - runs.back().data())};
    else
      runs.push_back(s);
  }
  if (budget >= total || piece == 0) return runs;
  std::uint64_t laid = 0;  // bytes of the runs laid end to end (the gaps joined in count)
  for (const auto& r : runs) laid += r.size();
  const std::uint64_t pieces = (budget + piece - 1) / piece, stride = laid / pieces;
  std::vector<std::span<const std::uint8_t>> out;
  std::size_t run = 0;
  std::uint64_t run_start = 0;  // of runs[run], laid end to end
  for (std::uint64_t i = 0; i < pieces; ++i) {
    std::uint64_t at = i * stride, left = std::min(piece, budget - i * piece);
    while (left > 0 && run < runs.size()) {
      if (at >= run_start + runs[run].size()) {
        run_start += runs[run].size();
        ++run;
        continue;
      }
      const std::uint64_t offset = at - run_start, take = std::min<std::uint64_t>(left, runs[run].size() - offset);
      out.push_back(runs[run].subspan(offset, take));
      at += take;
      left -= take;
    }
  }
  return out;
}

std::vector<std::span<const std::uint8_t>> decode_read_sample(const ModelWeights& w, std::uint64_t step_bytes) {
  constexpr std::uint64_t kPiece = std::uint64_t{2} << 20;
  std::vector<std::span<const std::uint8_t>> rest;
  for (const NamedMatrix& nm : w.matrices()) {
    const kernels::WeightMatrix& m = *nm.matrix;
    if (m.data == w.lm_head.data || m.data == w.embed_tokens.data) continue;
    rest.push_back(kernels::weight_codes(m));
    rest.push_back(kernels::weight_block_scales(m));
  }
  std::vector<std::span<const std::uint8_t>> sample{kernels::weight_codes(w.lm_head)};
  const std::uint64_t lm_head = sample.front().size();
  const std::vector<std::span<const std::uint8_t>> pieces =
      sample_evenly(std::move(rest), step_bytes > lm_head ? step_bytes - lm_head : 0, kPiece);
  sample.insert(sample.end(), pieces.begin(), pieces.end());
  return sample;
}

}  // namespace fp4serve
