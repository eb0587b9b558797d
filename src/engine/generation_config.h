#pragma once
// generation_config.json: the end-of-turn ids chat models stop on (<|im_end|> as well as
// <|endoftext|>) and the sampling settings the model's authors recommend (Qwen3: temperature
// 0.6, top_p 0.95, top_k 20). The server applies the latter to requests that leave a field out,
// as vLLM does with `--generation-config auto`; a request's own value always wins.
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace fp4serve::engine {

struct SamplingDefaults {
  std::optional<double> temperature;
  std::optional<double> top_p;
  std::optional<std::int64_t> top_k;  // 0 = off (-1 in the file means off too)
  std::optional<double> min_p;
  std::optional<double> repetition_penalty;

  bool empty() const { return !temperature && !top_p && !top_k && !min_p && !repetition_penalty; }
  // "temperature=0.6 top_p=0.95 top_k=20", for the startup log; "none" when empty.
  std::string describe() const;
};

struct GenerationConfig {
  std::vector<std::int32_t> eos_token_ids;
  SamplingDefaults sampling;
};

// Reads `dir`/generation_config.json; a missing file gives an empty config. Malformed JSON, a
// field of the wrong type or out of range is an Error naming the file and the field.
GenerationConfig read_generation_config(const std::filesystem::path& dir);

}  // namespace fp4serve::engine
