#pragma once
// Shared helpers of the tokenizer tests: paths, the oracle JSON lines made by
// tools/make_tokenizer_fixtures.py with Hugging Face tokenizers, and a cached Qwen3 tokenizer.
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "tokenizer/byte_level.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"

namespace fp4serve::tokenizer::fixtures {

inline std::filesystem::path data_dir() { return std::filesystem::path(FP4SERVE_TEST_DATA) / "tokenizer"; }
inline std::filesystem::path qwen3_json() {
  return std::filesystem::path(FP4SERVE_SOURCE_DIR) / "assets" / "qwen3-tokenizer" / "tokenizer.json";
}

// Loading the 11 MB vocabulary once per test binary keeps the suite fast.
inline const Tokenizer& qwen3() {
  static const Tokenizer tok = Tokenizer::from_file(qwen3_json());
  return tok;
}

struct OracleLine {
  std::string text;
  std::vector<TokenId> ids;
  std::optional<std::vector<TokenSpan>> offsets;
  std::optional<std::vector<TokenId>> ids_plain;  // with special tokens not parsed
  std::string nfc;                                // NFC(text)
  std::string expected_decode;                    // HF's decode of the ids (NFC(text) unless stripped)
};

inline std::vector<OracleLine> read_oracle(const std::filesystem::path& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot open fixture " + path.string());
  std::vector<OracleLine> lines;
  std::string raw;
  while (std::getline(in, raw)) {
    const auto j = nlohmann::json::parse(raw);
    OracleLine line;
    line.text = j.at("text").get<std::string>();
    line.ids = j.at("ids").get<std::vector<TokenId>>();
    if (j.contains("offsets")) {
      std::vector<TokenSpan> spans;
      for (const auto& o : j["offsets"]) spans.push_back({o[0].get<std::size_t>(), o[1].get<std::size_t>()});
      line.offsets = std::move(spans);
    }
    if (j.contains("ids_plain")) line.ids_plain = j["ids_plain"].get<std::vector<TokenId>>();
    line.nfc = j.contains("nfc") ? j["nfc"].get<std::string>() : line.text;
    line.expected_decode = j.contains("decoded") ? j["decoded"].get<std::string>() : line.nfc;
    lines.push_back(std::move(line));
  }
  return lines;
}

// Short printable description of a text for failure messages (JSON-escaped, cut at a character).
inline std::string describe(const std::string& text) {
  std::size_t cut = std::min<std::size_t>(text.size(), 80);
  while (cut < text.size() && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) --cut;
  std::string out = nlohmann::json(text.substr(0, cut)).dump();
  if (cut < text.size()) out += "... (" + std::to_string(text.size()) + " bytes)";
  return out;
}

}  // namespace fp4serve::tokenizer::fixtures

namespace fp4serve::tokenizer {
// The stand-in text of one byte, i.e. the vocabulary string of the single-byte token.
inline std::string byte_level_utf8(int byte) { return byte_level::utf8_of(static_cast<std::uint8_t>(byte)); }
}  // namespace fp4serve::tokenizer
