#include "tokenizer/chat_template.h"

#include <fstream>
#include <sstream>

#include "tokenizer/jinja_template.h"
#include "util/error.h"

namespace fp4serve::tokenizer {
namespace {

using ojson = nlohmann::ordered_json;

std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(path.string(), ": cannot open");
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// The special tokens transformers passes to templates (its SPECIAL_TOKENS_ATTRIBUTES), as strings.
ojson special_tokens_of(const ojson& config) {
  ojson out = ojson::object();
  for (const char* key : {"bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token"}) {
    if (!config.contains(key)) continue;
    const ojson& v = config[key];
    if (v.is_string()) out[key] = v;
    if (v.is_object() && v.contains("content") && v["content"].is_string()) out[key] = v["content"];
  }
  return out;
}

// transformers fills reasoning_content from the older names (thinking, reasoning) and thinking from
// it: {"thinking": r, **message, "reasoning_content": r}.
ojson alias_reasoning(const ojson& message) {
  if (!message.is_object()) return message;
  const ojson* reasoning = nullptr;
  for (const char* key : {"reasoning_content", "thinking", "reasoning"}) {
    if (message.contains(key) && !message[key].is_null()) {
      reasoning = &message[key];
      break;
    }
  }
  if (!reasoning) return message;
  ojson out = ojson::object();
  out["thinking"] = *reasoning;
  for (auto it = message.begin(); it != message.end(); ++it) out[it.key()] = it.value();
  out["reasoning_content"] = *reasoning;
  return out;
}

}  // namespace

ChatTemplate::ChatTemplate(const std::string& source, const ojson& special_tokens)
    : template_(std::make_unique<jinja::Template>(source)), special_tokens_(special_tokens_of(special_tokens)) {}

ChatTemplate::ChatTemplate(ChatTemplate&&) noexcept = default;
ChatTemplate& ChatTemplate::operator=(ChatTemplate&&) noexcept = default;
ChatTemplate::~ChatTemplate() = default;

ChatTemplate ChatTemplate::from_tokenizer_config(const std::filesystem::path& path) {
  ojson config;
  try {
    config = ojson::parse(read_file(path));
  } catch (const ojson::parse_error& e) {
    fail(path.string(), ": not valid JSON: ", e.what());
  }
  if (!config.is_object() || !config.contains("chat_template")) fail(path.string(), ": no chat_template");
  const ojson& t = config["chat_template"];
  std::string source;
  if (t.is_string()) {
    source = t.get<std::string>();
  } else if (t.is_array()) {
    for (const ojson& named : t) {
      if (named.is_object() && named.value("name", "") == "default" && named.contains("template")) {
        source = named["template"].get<std::string>();
      }
    }
    if (source.empty()) fail(path.string(), ": chat_template: no template named \"default\"");
  } else {
    fail(path.string(), ": chat_template: expected a string or a list of named templates");
  }
  try {
    return ChatTemplate(source, config);
  } catch (const Error& e) {
    fail(path.string(), ": ", e.what());
  }
}

ChatTemplate ChatTemplate::from_model_dir(const std::filesystem::path& model_dir) {
  const auto jinja_file = model_dir / "chat_template.jinja";
  const auto config_file = model_dir / "tokenizer_config.json";
  if (std::filesystem::exists(jinja_file)) {
    ojson config = ojson::object();
    if (std::filesystem::exists(config_file)) {
      try {
        config = ojson::parse(read_file(config_file));
      } catch (const ojson::parse_error& e) {
        fail(config_file.string(), ": not valid JSON: ", e.what());
      }
    }
    try {
      return ChatTemplate(read_file(jinja_file), config);
    } catch (const Error& e) {
      fail(jinja_file.string(), ": ", e.what());
    }
  }
  if (!std::filesystem::exists(config_file)) {
    fail(model_dir.string(), ": no chat_template.jinja or tokenizer_config.json in the model directory");
  }
  return from_tokenizer_config(config_file);
}

std::string ChatTemplate::render(const ChatRequest& request) const {
  if (!request.messages.is_array()) fail("chat request: messages must be a list");
  ojson messages = ojson::array();
  for (const ojson& m : request.messages) {
    if (!m.is_object()) fail("chat request: every message must be an object");
    messages.push_back(alias_reasoning(m));
  }
  jinja::Dict vars;
  vars.set("messages", jinja::Value::from_json(messages));
  vars.set("tools", request.tools.is_null() ? jinja::Value(jinja::None{}) : jinja::Value::from_json(request.tools));
  vars.set("documents",
           request.documents.is_null() ? jinja::Value(jinja::None{}) : jinja::Value::from_json(request.documents));
  vars.set("add_generation_prompt", request.add_generation_prompt);
  for (auto it = special_tokens_.begin(); it != special_tokens_.end(); ++it) {
    vars.set(it.key(), jinja::Value::from_json(it.value()));
  }
  if (!request.extra.is_null()) {
    if (!request.extra.is_object()) fail("chat request: extra template variables must be an object");
    for (auto it = request.extra.begin(); it != request.extra.end(); ++it) {
      vars.set(it.key(), jinja::Value::from_json(it.value()));
    }
  }
  return template_->render(vars);
}

}  // namespace fp4serve::tokenizer
