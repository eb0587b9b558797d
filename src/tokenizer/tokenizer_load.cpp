// Building a Tokenizer from tokenizer.json: each top-level field goes to its component factory,
// which reports problems with the file name and the field path.
#include <fstream>
#include <sstream>

#include "tokenizer/byte_level.h"
#include "tokenizer/json_reader.h"
#include "tokenizer/tokenizer_impl.h"
#include "util/error.h"

namespace fp4serve::tokenizer {
namespace {

std::vector<AddedToken> read_added_tokens(const JsonField& root) {
  std::vector<AddedToken> tokens;
  if (!root.has("added_tokens") || root["added_tokens"].is_null()) return tokens;
  const JsonField list = root["added_tokens"];
  for (std::size_t i = 0; i < list.array_size(); ++i) {
    const JsonField t = list.at(i);
    AddedToken a;
    const std::uint64_t id = t["id"].unsigned_integer();
    if (id > UINT32_MAX) t["id"].fail_here("id does not fit in 32 bits");
    a.id = static_cast<std::uint32_t>(id);
    a.content = t["content"].string();
    a.special = t.boolean_or("special", false);
    // Hugging Face's default for a missing flag: special tokens are not normalized.
    a.normalized = t.boolean_or("normalized", !a.special);
    a.lstrip = t.boolean_or("lstrip", false);
    a.rstrip = t.boolean_or("rstrip", false);
    a.single_word = t.boolean_or("single_word", false);
    tokens.push_back(std::move(a));
  }
  return tokens;
}

struct PostProcessor {
  bool trim_offsets = false;
  bool add_prefix_space = false;
};

PostProcessor read_post_processor(const JsonField& field) {
  if (field.is_null()) return {};
  const std::string type = field.type();
  if (type == "ByteLevel") {
    return {field.boolean_or("trim_offsets", true), field.boolean_or("add_prefix_space", true)};
  }
  // TemplateProcessing and friends add BOS/EOS ids; silently ignoring them would give ids that
  // differ from Hugging Face's, so say so instead.
  field["type"].fail_here("unsupported post_processor type '", type, "' (supported: ByteLevel)");
}

}  // namespace

Tokenizer Tokenizer::from_json(std::string_view json_text, const std::string& source) {
  TokenizerJson parsed = read_tokenizer_json(json_text, source);
  const nlohmann::json& doc = parsed.doc;
  auto impl = std::make_unique<Impl>();
  impl->source = source;
  const JsonField root(doc, source, "");
  if (!doc.is_object()) root.fail_here("expected a JSON object");

  const nlohmann::json null_json = nullptr;
  auto optional_field = [&](const char* key) {
    return root.has(key) ? root[key] : JsonField(null_json, source, key);
  };
  impl->normalizer = make_normalizer(optional_field("normalizer"));
  impl->pre_tokenizer = make_pre_tokenizer(optional_field("pre_tokenizer"));
  impl->byte_level = impl->pre_tokenizer && impl->pre_tokenizer->byte_level();
  impl->model = std::make_unique<BpeModel>(root["model"], parsed);
  impl->decoder = make_decoder(optional_field("decoder"));
  const PostProcessor post = read_post_processor(optional_field("post_processor"));
  impl->trim_offsets = post.trim_offsets;
  impl->trim_add_prefix_space = post.add_prefix_space;

  // The id -> token table: the model's vocabulary, then added tokens (which win, as in HF).
  const std::vector<AddedToken> added = read_added_tokens(root);
  std::size_t limit = 0;
  impl->model->vocab().for_each([&](std::string_view, std::uint32_t id) { limit = std::max<std::size_t>(limit, std::size_t{id} + 1); });
  for (const AddedToken& a : added) limit = std::max<std::size_t>(limit, std::size_t{a.id} + 1);
  impl->id_to_token.resize(limit);
  impl->known.assign(limit, false);
  impl->special.assign(limit, false);
  impl->model->vocab().for_each([&](std::string_view token, std::uint32_t id) {
    impl->id_to_token[id] = token;
    impl->known[id] = true;
  });
  impl->vocab_size = impl->model->vocab().size();
  for (const AddedToken& a : added) {
    if (!impl->model->vocab().find(a.content)) ++impl->vocab_size;
    // Hugging Face keeps the normalized content of a "normalized" added token, and decodes that.
    impl->id_to_token[a.id] = a.normalized && impl->normalizer ? impl->normalizer->apply_plain(a.content) : a.content;
    impl->known[a.id] = true;
    impl->special[a.id] = a.special;
    impl->added_ids.insert(a.content, a.id);
  }
  impl->token_bytes.resize(limit);
  for (std::size_t id = 0; id < limit; ++id) {
    if (impl->known[id]) impl->token_bytes[id] = impl->decoder->token_bytes(impl->id_to_token[id]);
  }

  std::vector<AddedToken> raw, normalized;
  std::vector<std::string> raw_patterns, normalized_patterns;
  for (const AddedToken& a : added) {
    if (a.normalized && impl->normalizer) {
      normalized_patterns.push_back(impl->normalizer->apply_plain(a.content));
      normalized.push_back(a);
    } else if (a.normalized) {
      normalized_patterns.push_back(a.content);
      normalized.push_back(a);
    } else {
      raw_patterns.push_back(a.content);
      raw.push_back(a);
    }
  }
  impl->raw_added = AddedTokenMatcher(std::move(raw), std::move(raw_patterns));
  impl->normalized_added = AddedTokenMatcher(std::move(normalized), std::move(normalized_patterns));
  return Tokenizer(std::move(impl));
}

Tokenizer Tokenizer::from_file(const std::filesystem::path& tokenizer_json) {
  std::ifstream in(tokenizer_json, std::ios::binary);
  if (!in) fail(tokenizer_json.string(), ": cannot open tokenizer file");
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) fail(tokenizer_json.string(), ": read error");
  return from_json(text.str(), tokenizer_json.string());
}

Tokenizer Tokenizer::from_model_dir(const std::filesystem::path& model_dir) {
  const auto file = model_dir / "tokenizer.json";
  if (!std::filesystem::exists(file)) fail(model_dir.string(), ": no tokenizer.json in the model directory");
  return from_file(file);
}

}  // namespace fp4serve::tokenizer
