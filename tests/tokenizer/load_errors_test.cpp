// Malformed tokenizer.json files fail with a message naming the file and the field at fault.
#include <gtest/gtest.h>

#include "fixtures.h"

namespace fp4serve::tokenizer {
namespace {

// A minimal valid byte-level BPE tokenizer.json, edited by each test.
nlohmann::json minimal() {
  return nlohmann::json::parse(R"({
    "version": "1.0",
    "added_tokens": [{"id": 5, "content": "<s>", "special": true, "normalized": false,
                      "lstrip": false, "rstrip": false, "single_word": false}],
    "normalizer": {"type": "NFC"},
    "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
      {"type": "Split", "pattern": {"Regex": "\\s+|\\S+"}, "behavior": "Isolated", "invert": false},
      {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": false}]},
    "post_processor": null,
    "decoder": {"type": "ByteLevel"},
    "model": {"type": "BPE", "unk_token": null, "vocab": {"a": 0, "b": 1, "ab": 2, "Ġ": 3, "c": 4},
              "merges": [["a", "b"]]}
  })");
}

// Loads `doc` as "broken.json" and returns the error message ("" if it loaded).
std::string load_error(const nlohmann::json& doc) {
  try {
    (void)Tokenizer::from_json(doc.dump(), "broken.json");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

#define EXPECT_MESSAGE(doc, ...)                                                   \
  do {                                                                             \
    const std::string msg = load_error(doc);                                       \
    ASSERT_FALSE(msg.empty()) << "expected a load error";                          \
    for (const char* part : {__VA_ARGS__}) EXPECT_NE(msg.find(part), std::string::npos) << msg; \
  } while (0)

TEST(LoadErrors, MinimalFileLoadsAndEncodes) {
  const Tokenizer tok = Tokenizer::from_json(minimal().dump(), "minimal.json");
  EXPECT_EQ(tok.encode("ab ab<s>c"), (std::vector<TokenId>{2, 3, 2, 5, 4}));
}

TEST(LoadErrors, InvalidJson) { EXPECT_MESSAGE(nlohmann::json("x"), "broken.json", "expected a JSON object"); }

TEST(LoadErrors, UnparsableText) {
  try {
    (void)Tokenizer::from_json("{\"model\": ", "truncated.json");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("truncated.json: not valid JSON"), std::string::npos) << e.what();
  }
}

TEST(LoadErrors, MissingFile) {
  try {
    (void)Tokenizer::from_file("/nonexistent/tokenizer.json");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/tokenizer.json"), std::string::npos) << e.what();
  }
  EXPECT_THROW((void)Tokenizer::from_model_dir("/nonexistent"), Error);
}

TEST(LoadErrors, UnknownNormalizer) {
  auto doc = minimal();
  doc["normalizer"] = {{"type", "Sequence"}, {"normalizers", {{{"type", "NFC"}}, {{"type", "BertNormalizer"}}}}};
  EXPECT_MESSAGE(doc, "broken.json", "normalizer.normalizers[1].type", "unsupported normalizer type 'BertNormalizer'");
}

TEST(LoadErrors, UnknownPreTokenizer) {
  auto doc = minimal();
  doc["pre_tokenizer"]["pretokenizers"][0] = {{"type", "Metaspace"}};
  EXPECT_MESSAGE(doc, "pre_tokenizer.pretokenizers[0].type", "unsupported pre-tokenizer type 'Metaspace'");
}

TEST(LoadErrors, BadRegex) {
  auto doc = minimal();
  doc["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "(\\p{L}+";
  EXPECT_MESSAGE(doc, "broken.json", "pre_tokenizer.pretokenizers[0].pattern.Regex", "invalid regex at offset");
}

TEST(LoadErrors, BadSplitBehavior) {
  auto doc = minimal();
  doc["pre_tokenizer"]["pretokenizers"][0]["behavior"] = "Sideways";
  EXPECT_MESSAGE(doc, "pre_tokenizer.pretokenizers[0].behavior", "unknown split behavior 'Sideways'");
}

TEST(LoadErrors, PatternWithoutRegexOrString) {
  auto doc = minimal();
  doc["pre_tokenizer"]["pretokenizers"][0]["pattern"] = {{"Glob", "*"}};
  EXPECT_MESSAGE(doc, "pre_tokenizer.pretokenizers[0].pattern", "\"Regex\" or \"String\"");
}

TEST(LoadErrors, SplitAfterByteLevelIsRefused) {
  auto doc = minimal();
  auto& list = doc["pre_tokenizer"]["pretokenizers"];
  std::swap(list[0], list[1]);
  EXPECT_MESSAGE(doc, "pre_tokenizer.pretokenizers[1]", "after ByteLevel is not supported");
}

TEST(LoadErrors, MergeTokenMissingFromVocab) {
  auto doc = minimal();
  doc["model"]["merges"].push_back({"a", "zz"});
  EXPECT_MESSAGE(doc, "broken.json", "model.merges[1]", "merge token 'zz' is not in model.vocab");
}

TEST(LoadErrors, MergeResultMissingFromVocab) {
  auto doc = minimal();
  doc["model"]["merges"].push_back("b c");
  EXPECT_MESSAGE(doc, "model.merges[1]", "merge result 'bc' is not in model.vocab");
}

TEST(LoadErrors, MalformedMergeEntries) {
  auto doc = minimal();
  doc["model"]["merges"] = {"a b c"};
  EXPECT_MESSAGE(doc, "model.merges[0]", "not two tokens separated by one space");
  doc["model"]["merges"] = {42};
  EXPECT_MESSAGE(doc, "model.merges[0]", "expected a string");
}

TEST(LoadErrors, MissingModelAndVocab) {
  auto doc = minimal();
  doc.erase("model");
  EXPECT_MESSAGE(doc, "broken.json", "missing field 'model'");
  doc = minimal();
  doc["model"].erase("vocab");
  EXPECT_MESSAGE(doc, "model", "missing field 'vocab'");
}

TEST(LoadErrors, UnsupportedModelAndComponents) {
  auto doc = minimal();
  doc["model"]["type"] = "WordPiece";
  EXPECT_MESSAGE(doc, "model.type", "unsupported model type 'WordPiece'");
  doc = minimal();
  doc["decoder"] = {{"type", "Metaspace"}};
  EXPECT_MESSAGE(doc, "decoder.type", "unsupported decoder type 'Metaspace'");
  doc = minimal();
  doc["post_processor"] = {{"type", "TemplateProcessing"}};
  EXPECT_MESSAGE(doc, "post_processor.type", "unsupported post_processor type 'TemplateProcessing'");
  doc = minimal();
  doc["model"]["dropout"] = 0.1;
  EXPECT_MESSAGE(doc, "model.dropout", "not supported");
}

TEST(LoadErrors, BadAddedToken) {
  auto doc = minimal();
  doc["added_tokens"][0]["id"] = -1;
  EXPECT_MESSAGE(doc, "added_tokens[0].id", "non-negative integer");
  doc = minimal();
  doc["added_tokens"][0].erase("content");
  EXPECT_MESSAGE(doc, "added_tokens[0]", "missing field 'content'");
}

TEST(LoadErrors, UnknownUnkToken) {
  auto doc = minimal();
  doc["model"]["unk_token"] = "<unk>";
  EXPECT_MESSAGE(doc, "model.unk_token", "'<unk>' is not in model.vocab");
}

}  // namespace
}  // namespace fp4serve::tokenizer
