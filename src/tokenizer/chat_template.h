#pragma once
// A model's chat template (the Jinja `chat_template` of tokenizer_config.json, or
// chat_template.jinja) rendered the way transformers' apply_chat_template(tokenize=False) does:
// the same variables (messages, tools, documents, add_generation_prompt, the special tokens
// bos_token/eos_token/..., extra keyword arguments such as enable_thinking) and the same
// reasoning-field aliasing.
#include <nlohmann/json.hpp>

#include <filesystem>
#include <memory>
#include <string>

namespace fp4serve::tokenizer {

namespace jinja {
class Template;
}

struct ChatRequest {
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();
  nlohmann::ordered_json tools;      // null when the request has none
  nlohmann::ordered_json documents;  // null when the request has none
  bool add_generation_prompt = false;
  // Extra template variables, e.g. {"enable_thinking": false}; they override special tokens.
  nlohmann::ordered_json extra = nlohmann::ordered_json::object();
};

class ChatTemplate {
 public:
  // `special_tokens` maps bos_token/eos_token/... to their text (strings or {"content": ...}).
  // Throws Error naming the line of a syntax error or unsupported construct.
  explicit ChatTemplate(const std::string& source,
                        const nlohmann::ordered_json& special_tokens = nlohmann::ordered_json::object());
  // MODEL_DIR/chat_template.jinja if present, else the chat_template of MODEL_DIR/tokenizer_config.json
  // (a string, or a list of {"name", "template"} from which "default" is taken).
  static ChatTemplate from_model_dir(const std::filesystem::path& model_dir);
  // The chat_template of one tokenizer_config.json.
  static ChatTemplate from_tokenizer_config(const std::filesystem::path& tokenizer_config_json);

  ChatTemplate(ChatTemplate&&) noexcept;
  ChatTemplate& operator=(ChatTemplate&&) noexcept;
  ~ChatTemplate();

  std::string render(const ChatRequest& request) const;

 private:
  std::unique_ptr<jinja::Template> template_;
  nlohmann::ordered_json special_tokens_;  // name -> string
};

}  // namespace fp4serve::tokenizer
