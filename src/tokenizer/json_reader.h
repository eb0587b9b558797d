#pragma once
// Parses tokenizer.json in one pass with nlohmann's SAX interface. model.vocab and model.merges
// (~300k entries for Qwen) go straight into flat vectors; only the small rest of the file becomes a
// JSON tree. Building the full tree was most of the load time: a std::map node per vocabulary entry.
#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace fp4serve::tokenizer {

struct VocabEntry {
  std::string token;
  std::uint32_t id;
};

struct MergeEntry {
  enum class Form { Pair, Line, Invalid };
  Form form = Form::Invalid;
  std::string left;   // Pair: the two tokens; Line: the whole "a b" string in `left`
  std::string right;
};

struct TokenizerJson {
  // The document, with model.vocab and model.merges left as empty placeholders when they were
  // captured below (so field lookups and error paths still work).
  nlohmann::json doc;
  std::optional<std::vector<VocabEntry>> vocab;
  std::optional<std::vector<MergeEntry>> merges;
  // Set when model.vocab held something other than token -> unsigned id.
  std::optional<std::string> vocab_error;
};

// Throws Error "SOURCE: not valid JSON: ..." on syntax errors.
TokenizerJson read_tokenizer_json(std::string_view text, const std::string& source);

}  // namespace fp4serve::tokenizer
