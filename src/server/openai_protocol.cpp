#include "server/openai_protocol.h"

#include <cmath>
#include <limits>
#include <set>
#include <sstream>

namespace fp4serve::server {

namespace {

using json = nlohmann::ordered_json;

std::string type_name(const json& v) {
  if (v.is_null()) return "null";
  if (v.is_boolean()) return "a boolean";
  if (v.is_number_integer() || v.is_number_unsigned()) return "an integer";
  if (v.is_number()) return "a number";
  if (v.is_string()) return "a string";
  if (v.is_array()) return "an array";
  return "an object";
}

[[noreturn]] void wrong_type(const std::string& param, const char* expected, const json& got) {
  invalid_param(param, "'" + param + "' must be " + expected + ", got " + type_name(got), "invalid_type");
}

// Fields are optional everywhere; null means "not given", as in OpenAI's API.
const json* field(const json& obj, const char* name) {
  auto it = obj.find(name);
  if (it == obj.end() || it->is_null()) return nullptr;
  return &*it;
}

std::optional<bool> get_bool(const json& obj, const char* name) {
  const json* v = field(obj, name);
  if (!v) return std::nullopt;
  if (!v->is_boolean()) wrong_type(name, "a boolean", *v);
  return v->get<bool>();
}

std::optional<double> get_number(const json& obj, const char* name, double lo, double hi) {
  const json* v = field(obj, name);
  if (!v) return std::nullopt;
  if (!v->is_number()) wrong_type(name, "a number", *v);
  const double x = v->get<double>();
  if (!std::isfinite(x) || x < lo || x > hi) {
    std::ostringstream os;
    os << "'" << name << "' must be between " << lo << " and " << hi << ", got " << v->dump();
    invalid_param(name, os.str(), "invalid_value");
  }
  return x;
}

// An integer (an integral float such as 5.0 too, as JSON encoders sometimes write).
std::int64_t as_integer(const json& v, const std::string& param, std::int64_t lo, std::int64_t hi) {
  std::int64_t x = 0;
  if (v.is_number_integer()) {
    x = v.get<std::int64_t>();
  } else if (v.is_number_unsigned()) {
    const std::uint64_t u = v.get<std::uint64_t>();
    x = u > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()) ? std::numeric_limits<std::int64_t>::max()
                                                                                  : static_cast<std::int64_t>(u);
  } else if (v.is_number_float() && std::isfinite(v.get<double>()) && std::floor(v.get<double>()) == v.get<double>() &&
             std::fabs(v.get<double>()) < 9e15) {
    x = static_cast<std::int64_t>(v.get<double>());
  } else {
    wrong_type(param, "an integer", v);
  }
  if (x < lo || x > hi) {
    invalid_param(param,
                  "'" + param + "' must be between " + std::to_string(lo) + " and " + std::to_string(hi) + ", got " +
                      v.dump(),
                  "invalid_value");
  }
  return x;
}

std::optional<std::int64_t> get_integer(const json& obj, const char* name, std::int64_t lo, std::int64_t hi) {
  const json* v = field(obj, name);
  if (!v) return std::nullopt;
  return as_integer(*v, name, lo, hi);
}

constexpr std::int64_t kMaxTokenId = std::numeric_limits<std::int32_t>::max();
constexpr std::int64_t kMaxTokens = std::numeric_limits<std::int32_t>::max();

json parse_body(std::string_view body) {
  json j = json::parse(body.begin(), body.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) {
    throw ApiError(400, "The request body is not valid JSON", "invalid_request_error", "", "invalid_json");
  }
  if (!j.is_object()) throw ApiError(400, "The request body must be a JSON object, got " + type_name(j));
  return j;
}

// OpenAI rejects arguments it does not know; so do we, naming the first one.
void reject_unknown(const json& obj, const std::set<std::string>& known) {
  for (auto it = obj.begin(); it != obj.end(); ++it) {
    if (!known.count(it.key())) {
      invalid_param(it.key(), "Unrecognized request argument supplied: " + it.key(), "unrecognized_argument");
    }
  }
}

// Fields both endpoints know.
const std::set<std::string> kCommonFields = {
    "model", "max_tokens", "temperature", "top_p", "top_k", "min_p", "seed", "presence_penalty",
    "frequency_penalty", "repetition_penalty", "stop", "stop_token_ids", "ignore_eos", "stream",
    "stream_options", "n", "logit_bias", "user", "include_stop_str_in_output", "skip_special_tokens",
    "best_of", "metadata", "store", "service_tier"};

GenerationOptions parse_common(const json& j) {
  GenerationOptions o;
  const json* model = field(j, "model");
  // Optional, as in vLLM and llama-server: absent means the model this server serves.
  if (model) {
    if (!model->is_string()) wrong_type("model", "a string", *model);
    o.model = model->get<std::string>();
  }

  if (auto v = get_integer(j, "max_tokens", 1, kMaxTokens)) o.max_tokens = *v;
  if (auto v = get_integer(j, "max_completion_tokens", 1, kMaxTokens)) o.max_tokens = *v;
  if (auto v = get_number(j, "temperature", 0.0, 2.0)) o.temperature = *v;
  if (auto v = field(j, "top_p")) {
    const double p = *get_number(j, "top_p", 0.0, 1.0);
    if (p <= 0.0) invalid_param("top_p", "'top_p' must be greater than 0, got " + v->dump(), "invalid_value");
    o.top_p = p;
  }
  if (auto v = get_integer(j, "top_k", -1, kMaxTokenId)) o.top_k = *v < 0 ? 0 : *v;
  if (auto v = get_number(j, "min_p", 0.0, 1.0)) o.min_p = *v;
  if (auto v = field(j, "seed")) {
    o.seed = static_cast<std::uint64_t>(as_integer(*v, "seed", std::numeric_limits<std::int64_t>::min(),
                                                   std::numeric_limits<std::int64_t>::max()));
  }
  if (auto v = get_number(j, "presence_penalty", -2.0, 2.0)) o.presence_penalty = *v;
  if (auto v = get_number(j, "frequency_penalty", -2.0, 2.0)) o.frequency_penalty = *v;
  if (auto v = field(j, "repetition_penalty")) {
    const double r = *get_number(j, "repetition_penalty", 0.0, 10.0);
    if (r <= 0.0) {
      invalid_param("repetition_penalty", "'repetition_penalty' must be greater than 0, got " + v->dump(),
                    "invalid_value");
    }
    o.repetition_penalty = r;
  }

  if (const json* stop = field(j, "stop")) {
    if (stop->is_string()) {
      o.stop.push_back(stop->get<std::string>());
    } else if (stop->is_array()) {
      if (stop->size() > 4) invalid_param("stop", "'stop' takes at most 4 strings, got " + std::to_string(stop->size()));
      for (const json& s : *stop) {
        if (!s.is_string()) wrong_type("stop", "a string or an array of strings", *stop);
        o.stop.push_back(s.get<std::string>());
      }
    } else {
      wrong_type("stop", "a string or an array of strings", *stop);
    }
  }
  if (auto v = get_bool(j, "include_stop_str_in_output")) o.include_stop_str_in_output = *v;
  if (const json* ids = field(j, "stop_token_ids")) {
    if (!ids->is_array()) wrong_type("stop_token_ids", "an array of integers", *ids);
    for (const json& id : *ids) {
      o.stop_token_ids.push_back(static_cast<std::int32_t>(as_integer(id, "stop_token_ids", 0, kMaxTokenId)));
    }
  }
  if (auto v = get_bool(j, "ignore_eos")) o.ignore_eos = *v;
  if (auto v = get_bool(j, "skip_special_tokens")) o.skip_special_tokens = *v;
  if (auto v = get_bool(j, "stream")) o.stream = *v;
  if (const json* so = field(j, "stream_options")) {
    if (!so->is_object()) wrong_type("stream_options", "an object", *so);
    if (!o.stream) {
      invalid_param("stream_options", "The 'stream_options' parameter is only allowed when 'stream' is enabled");
    }
    for (auto it = so->begin(); it != so->end(); ++it) {
      if (it.key() != "include_usage" && it.key() != "continuous_usage_stats") {
        invalid_param("stream_options." + it.key(), "Unrecognized stream option: " + it.key(), "unrecognized_argument");
      }
    }
    if (auto v = get_bool(*so, "include_usage")) o.include_usage = *v;
  }
  if (auto n = get_integer(j, "n", 1, 128); n && *n != 1) {
    invalid_param("n", "n > 1 is not supported; send n requests with different seeds instead", "unsupported_value");
  }
  if (auto b = get_integer(j, "best_of", 1, 128); b && *b != 1) {
    invalid_param("best_of", "best_of > 1 is not supported", "unsupported_value");
  }
  if (const json* bias = field(j, "logit_bias")) {
    if (!bias->is_object()) wrong_type("logit_bias", "an object", *bias);
    if (!bias->empty()) invalid_param("logit_bias", "logit_bias is not supported", "unsupported_value");
  }
  if (const json* user = field(j, "user"); user && !user->is_string()) wrong_type("user", "a string", *user);
  return o;
}

// Message content as the chat template expects it: a string. Text parts are joined by newlines.
std::string flatten_content(const json& content, const std::string& param) {
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array()) wrong_type(param, "a string or an array of content parts", content);
  std::string text;
  for (std::size_t i = 0; i < content.size(); ++i) {
    const json& part = content[i];
    const std::string p = param + "[" + std::to_string(i) + "]";
    if (!part.is_object()) wrong_type(p, "an object", part);
    const json* type = field(part, "type");
    if (!type || !type->is_string()) invalid_param(p + ".type", "'" + p + ".type' must be a string");
    if (type->get<std::string>() != "text") {
      invalid_param(p + ".type",
                    "content part type '" + type->get<std::string>() + "' is not supported (text-only server)",
                    "unsupported_value");
    }
    const json* t = field(part, "text");
    if (!t || !t->is_string()) invalid_param(p + ".text", "'" + p + ".text' must be a string");
    if (!text.empty()) text += "\n";
    text += t->get<std::string>();
  }
  return text;
}

json check_tool_calls(const json& calls, const std::string& param) {
  if (!calls.is_array()) wrong_type(param, "an array", calls);
  for (std::size_t i = 0; i < calls.size(); ++i) {
    const std::string p = param + "[" + std::to_string(i) + "]";
    const json& c = calls[i];
    if (!c.is_object()) wrong_type(p, "an object", c);
    const json* fn = field(c, "function");
    if (!fn || !fn->is_object()) invalid_param(p + ".function", "'" + p + ".function' must be an object");
    const json* name = field(*fn, "name");
    if (!name || !name->is_string()) invalid_param(p + ".function.name", "'" + p + ".function.name' must be a string");
    const json* args = field(*fn, "arguments");
    if (args && !args->is_string() && !args->is_object()) {
      wrong_type(p + ".function.arguments", "a string", *args);
    }
  }
  return calls;
}

json check_messages(const json& j) {
  const json* messages = field(j, "messages");
  if (!messages) invalid_param("messages", "'messages' is required", "missing_required_parameter");
  if (!messages->is_array()) wrong_type("messages", "an array", *messages);
  if (messages->empty()) invalid_param("messages", "'messages' must contain at least one message");
  json out = json::array();
  for (std::size_t i = 0; i < messages->size(); ++i) {
    const std::string p = "messages[" + std::to_string(i) + "]";
    const json& m = (*messages)[i];
    if (!m.is_object()) wrong_type(p, "an object", m);
    const json* role = field(m, "role");
    if (!role || !role->is_string()) invalid_param(p + ".role", "'" + p + ".role' must be a string");
    std::string r = role->get<std::string>();
    if (r == "developer") r = "system";
    if (r != "system" && r != "user" && r != "assistant" && r != "tool") {
      invalid_param(p + ".role",
                    "'" + p + ".role' must be one of system, developer, user, assistant, tool; got '" + r + "'");
    }
    json msg = m;
    msg["role"] = r;
    const json* content = field(m, "content");
    const json* tool_calls = field(m, "tool_calls");
    if (content) {
      msg["content"] = flatten_content(*content, p + ".content");
    } else if (r == "assistant") {
      msg["content"] = "";  // an assistant turn that only called tools
    } else {
      invalid_param(p + ".content", "'" + p + ".content' is required for role '" + r + "'");
    }
    if (tool_calls) {
      if (r != "assistant") invalid_param(p + ".tool_calls", "only assistant messages carry tool_calls");
      msg["tool_calls"] = check_tool_calls(*tool_calls, p + ".tool_calls");
    }
    for (const char* text_field : {"name", "tool_call_id", "reasoning_content"}) {
      if (const json* v = field(m, text_field); v && !v->is_string()) {
        wrong_type(p + "." + text_field, "a string", *v);
      }
    }
    out.push_back(std::move(msg));
  }
  return out;
}

json check_tools(const json& j) {
  const json* tools = field(j, "tools");
  if (!tools) return nullptr;
  if (!tools->is_array()) wrong_type("tools", "an array", *tools);
  for (std::size_t i = 0; i < tools->size(); ++i) {
    const std::string p = "tools[" + std::to_string(i) + "]";
    const json& t = (*tools)[i];
    if (!t.is_object()) wrong_type(p, "an object", t);
    const json* type = field(t, "type");
    if (!type || !type->is_string() || type->get<std::string>() != "function") {
      invalid_param(p + ".type", "'" + p + ".type' must be \"function\"");
    }
    const json* fn = field(t, "function");
    if (!fn || !fn->is_object()) invalid_param(p + ".function", "'" + p + ".function' must be an object");
    const json* name = field(*fn, "name");
    if (!name || !name->is_string() || name->get<std::string>().empty()) {
      invalid_param(p + ".function.name", "'" + p + ".function.name' must be a non-empty string");
    }
    if (const json* params = field(*fn, "parameters"); params && !params->is_object()) {
      wrong_type(p + ".function.parameters", "an object", *params);
    }
  }
  return tools->empty() ? json(nullptr) : *tools;
}

}  // namespace

ChatCompletionRequest parse_chat_completion_request(std::string_view body) {
  const json j = parse_body(body);
  std::set<std::string> known = kCommonFields;
  known.insert({"messages", "max_completion_tokens", "logprobs", "top_logprobs", "tools", "tool_choice",
                "parallel_tool_calls", "chat_template_kwargs", "response_format", "modalities",
                "reasoning_effort"});
  reject_unknown(j, known);

  ChatCompletionRequest r;
  r.options = parse_common(j);
  r.messages = check_messages(j);
  if (auto v = get_bool(j, "logprobs")) r.options.logprobs = *v;
  if (auto v = get_integer(j, "top_logprobs", 0, 20)) {
    if (!r.options.logprobs && *v > 0) {
      invalid_param("top_logprobs", "'top_logprobs' needs 'logprobs' set to true");
    }
    r.options.top_logprobs = *v;
  }

  r.tools = check_tools(j);
  if (const json* choice = field(j, "tool_choice")) {
    if (choice->is_string()) {
      const std::string c = choice->get<std::string>();
      if (c == "none") r.tools = nullptr;  // the model is told of no tools, so it calls none
      else if (c == "required") {
        invalid_param("tool_choice", "tool_choice \"required\" needs guided decoding, which is not supported; use \"auto\"",
                      "unsupported_value");
      } else if (c != "auto") {
        invalid_param("tool_choice", "'tool_choice' must be \"none\", \"auto\" or \"required\", got \"" + c + "\"");
      }
    } else if (choice->is_object()) {
      invalid_param("tool_choice", "naming a function in tool_choice needs guided decoding, which is not supported",
                    "unsupported_value");
    } else {
      wrong_type("tool_choice", "a string", *choice);
    }
  }
  get_bool(j, "parallel_tool_calls");  // accepted (calls are parsed in order either way)

  if (const json* kw = field(j, "chat_template_kwargs")) {
    if (!kw->is_object()) wrong_type("chat_template_kwargs", "an object", *kw);
    r.template_kwargs = *kw;
    if (const json* think = field(*kw, "enable_thinking"); think && !think->is_boolean()) {
      wrong_type("chat_template_kwargs.enable_thinking", "a boolean", *think);
    }
  }
  if (const json* rf = field(j, "response_format")) {
    if (!rf->is_object()) wrong_type("response_format", "an object", *rf);
    const json* type = field(*rf, "type");
    if (!type || !type->is_string() || type->get<std::string>() != "text") {
      invalid_param("response_format", "only response_format {\"type\": \"text\"} is supported (no guided decoding)",
                    "unsupported_value");
    }
  }
  if (const json* mod = field(j, "modalities")) {
    if (!mod->is_array()) wrong_type("modalities", "an array", *mod);
    for (const json& m : *mod) {
      if (!m.is_string() || m.get<std::string>() != "text") {
        invalid_param("modalities", "only the \"text\" modality is supported", "unsupported_value");
      }
    }
  }
  if (const json* effort = field(j, "reasoning_effort"); effort && !effort->is_string()) {
    wrong_type("reasoning_effort", "a string", *effort);
  }
  return r;
}

CompletionRequest parse_completion_request(std::string_view body) {
  const json j = parse_body(body);
  std::set<std::string> known = kCommonFields;
  known.insert({"prompt", "logprobs", "echo", "suffix"});
  reject_unknown(j, known);

  CompletionRequest r;
  r.options = parse_common(j);
  const json* prompt = field(j, "prompt");
  if (!prompt) invalid_param("prompt", "'prompt' is required", "missing_required_parameter");
  const json* p = prompt;
  if (p->is_array() && p->size() == 1 && ((*p)[0].is_string() || (*p)[0].is_array())) p = &(*p)[0];
  if (p->is_string()) {
    r.prompt_text = p->get<std::string>();
    if (r.prompt_text->empty()) invalid_param("prompt", "'prompt' must not be empty");
  } else if (p->is_array()) {
    if (p->empty()) invalid_param("prompt", "'prompt' must not be empty");
    for (const json& id : *p) {
      if (id.is_string() || id.is_array()) {
        invalid_param("prompt", "batched prompts are not supported; send one prompt per request", "unsupported_value");
      }
      r.prompt_ids.push_back(static_cast<std::int32_t>(as_integer(id, "prompt", 0, kMaxTokenId)));
    }
  } else {
    wrong_type("prompt", "a string, an array of token ids, or an array of one of those", *prompt);
  }
  if (auto v = get_integer(j, "logprobs", 0, 20)) {
    r.options.logprobs = true;
    r.options.top_logprobs = *v;
  }
  if (auto v = get_bool(j, "echo")) r.echo = *v;
  if (const json* suffix = field(j, "suffix")) {
    if (!suffix->is_string()) wrong_type("suffix", "a string", *suffix);
    if (!suffix->get<std::string>().empty()) invalid_param("suffix", "'suffix' is not supported", "unsupported_value");
  }
  return r;
}

}  // namespace fp4serve::server
