#pragma once
// model.safetensors.index.json: which shard holds each tensor ("weight_map"). Other keys of the
// file ("metadata": {"total_size": ...}) carry nothing the loader needs and are skipped.
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace fp4serve {

struct WeightMapEntry {
  std::string tensor;
  std::string shard;  // as written in the index, relative to the checkpoint folder
};

// Every weight_map entry, each tensor once, in no promised order. Throws Error naming the file
// (and the tensor, where one is at fault) when it is not JSON, has no non-empty weight_map object,
// or maps a tensor to something other than a file name. The plain layout is read in one simdjson
// pass; anything else goes through a DOM that produces the exact message (a 397B checkpoint's 370k
// entries in a DOM took a fifth of `inspect`, docs/perf.md, session 36).
std::vector<WeightMapEntry> read_weight_map(const std::filesystem::path& index_path);

// The same on the file's text; `where` begins every error message.
std::vector<WeightMapEntry> parse_weight_map(std::string_view json, std::string_view where);

// Its two halves, exposed for the tests and the fuzzer: the one-pass reader (nullopt for anything
// but the plain layout with each tensor once) and the checked DOM reader.
std::optional<std::vector<WeightMapEntry>> parse_plain_weight_map(std::string_view json);
std::vector<WeightMapEntry> parse_weight_map_checked(std::string_view json, std::string_view where);

}  // namespace fp4serve
