// `fp4serve tokenize` and `fp4serve detokenize`: the tokenizer of a model from the command line,
// for checking what ids a deployment will see (and comparing them with Hugging Face's).
//
//   fp4serve tokenize (-m MODEL_DIR | --tokenizer FILE) [--json] [--special] TEXT|-
//   fp4serve detokenize (-m MODEL_DIR | --tokenizer FILE) [--skip-special] IDS...|-
//   fp4serve template -m MODEL_DIR --messages FILE.json [--tools FILE.json] [--enable-thinking BOOL]
//                     [--no-generation-prompt]
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <fstream>
#include <iostream>
#include <iterator>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "cli/app.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"

namespace fp4serve::cli {
namespace {

using tokenizer::TokenId;
using tokenizer::Tokenizer;

struct Source {
  std::string model_dir;
  std::string tokenizer_file;
};

// -m and --tokenizer, one of which is required (CLI11 checks they are not both given).
void add_source_options(CLI::App* cmd, Source& source) {
  auto* m = cmd->add_option("-m,--model", source.model_dir, "Model directory containing tokenizer.json");
  auto* t = cmd->add_option("--tokenizer", source.tokenizer_file, "A tokenizer.json file");
  m->excludes(t);
}

Tokenizer load(const Source& source) {
  if (!source.tokenizer_file.empty()) return Tokenizer::from_file(source.tokenizer_file);
  if (!source.model_dir.empty()) return Tokenizer::from_model_dir(source.model_dir);
  fail("give the tokenizer with -m MODEL_DIR or --tokenizer FILE");
}

std::string read_stdin() {
  std::ostringstream all;
  all << std::cin.rdbuf();
  return all.str();
}

// Token ids from arguments like "9707 1879", "9707,1879" or "[9707, 1879]" (a --json ids array).
std::vector<TokenId> parse_ids(const std::vector<std::string>& args) {
  std::string joined;
  for (const auto& a : args) joined += (a == "-" ? read_stdin() : a) + " ";
  for (char& c : joined) {
    if (c == ',' || c == '[' || c == ']') c = ' ';
  }
  std::istringstream in(joined);
  std::vector<TokenId> ids;
  std::string word;
  while (in >> word) {
    std::size_t used = 0;
    unsigned long long value = 0;
    try {
      value = std::stoull(word, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != word.size() || word[0] == '-' || value > 0xFFFFFFFFull) fail("'", word, "' is not a token id");
    ids.push_back(static_cast<TokenId>(value));
  }
  return ids;
}

// {"ids": [...], "tokens": [...]} with one token object per line: compact enough to read, and
// still one JSON document for scripts. Keys keep this order (ordered_json).
void print_json(const Tokenizer& tok, const std::string& text, const tokenizer::Encoding& enc) {
  const auto replace = nlohmann::json::error_handler_t::replace;  // input was checked to be UTF-8
  std::cout << "{\"ids\": " << nlohmann::json(enc.ids).dump() << ",\n \"tokens\": [";
  for (std::size_t i = 0; i < enc.ids.size(); ++i) {
    const auto [begin, end] = enc.offsets[i];
    nlohmann::ordered_json t;
    t["id"] = enc.ids[i];
    t["token"] = std::string(*tok.id_to_token(enc.ids[i]));
    t["text"] = text.substr(begin, end - begin);
    t["offsets"] = {begin, end};
    std::cout << (i ? ",\n  " : "\n  ") << t.dump(-1, ' ', false, replace);
  }
  std::cout << (enc.ids.empty() ? "]}\n" : "\n ]}\n");
}

// A JSON file, or standard input for "-".
nlohmann::ordered_json read_json(const std::string& path) {
  std::string text;
  if (path == "-") {
    text = read_stdin();
  } else {
    std::ifstream in(path, std::ios::binary);
    if (!in) fail(path, ": cannot open");
    std::ostringstream s;
    s << in.rdbuf();
    text = s.str();
  }
  try {
    return nlohmann::ordered_json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    fail(path, ": not valid JSON: ", e.what());
  }
}

}  // namespace

void register_tokenize(CLI::App& app) {
  {
    auto* cmd = app.add_subcommand("tokenize", "Print the token ids of a text (as Hugging Face tokenizers would)");
    struct Args {
      Source source;
      std::string text;
      bool json = false;
      bool special = false;
    };
    auto args = std::make_shared<Args>();
    add_source_options(cmd, args->source);
    cmd->add_option("text", args->text, "Text to tokenize, or - to read it from standard input")->required();
    cmd->add_flag("--json", args->json, "Print ids, tokens, their text and byte offsets as JSON");
    cmd->add_flag("--special", args->special,
                  "Turn special tokens written in the text (<|im_start|>...) into their ids; without it they "
                  "are tokenized as plain text, as untrusted user content must be");
    cmd->callback([args] {
      const Tokenizer tok = load(args->source);
      const std::string text = args->text == "-" ? read_stdin() : args->text;
      if (args->json) {
        print_json(tok, text, tok.encode_with_offsets(text, args->special));
        return;
      }
      const auto ids = tok.encode(text, args->special);
      for (std::size_t i = 0; i < ids.size(); ++i) std::cout << (i ? " " : "") << ids[i];
      std::cout << "\n";
    });
  }
  {
    auto* cmd = app.add_subcommand("detokenize", "Print the text of token ids");
    struct Args {
      Source source;
      std::vector<std::string> ids;
      bool skip_special = false;
    };
    auto args = std::make_shared<Args>();
    add_source_options(cmd, args->source);
    cmd->add_option("ids", args->ids, "Token ids (spaces, commas or a JSON array), or - to read them from standard input")
        ->required();
    cmd->add_flag("--skip-special", args->skip_special, "Leave out special tokens such as <|im_end|>");
    cmd->callback([args] {
      const Tokenizer tok = load(args->source);
      std::cout << tok.decode(parse_ids(args->ids), args->skip_special) << "\n";
    });
  }
  {
    auto* cmd = app.add_subcommand("template", "Print the prompt the model's chat template renders for a conversation");
    struct Args {
      std::string model_dir;
      std::string messages;
      std::string tools;
      std::string enable_thinking;
      bool no_generation_prompt = false;
    };
    auto args = std::make_shared<Args>();
    cmd->add_option("-m,--model", args->model_dir, "Model directory (chat_template.jinja or tokenizer_config.json)")
        ->required();
    cmd->add_option("--messages", args->messages,
                    "JSON file: a list of messages, or an object with \"messages\" (and \"tools\"); - for stdin")
        ->required();
    cmd->add_option("--tools", args->tools, "JSON file with the list of tool definitions");
    cmd->add_option("--enable-thinking", args->enable_thinking, "Pass enable_thinking=true|false to the template")
        ->check(CLI::IsMember({"true", "false"}));
    cmd->add_flag("--no-generation-prompt", args->no_generation_prompt,
                  "Do not end with the assistant turn opener (add_generation_prompt=false)");
    cmd->callback([args] {
      const tokenizer::ChatTemplate tmpl = tokenizer::ChatTemplate::from_model_dir(args->model_dir);
      tokenizer::ChatRequest request;
      const nlohmann::ordered_json input = read_json(args->messages);
      if (input.is_array()) {
        request.messages = input;
      } else if (input.is_object() && input.contains("messages")) {
        request.messages = input["messages"];
        if (input.contains("tools")) request.tools = input["tools"];
      } else {
        fail(args->messages, ": expected a list of messages or an object with \"messages\"");
      }
      if (!args->tools.empty()) request.tools = read_json(args->tools);
      request.add_generation_prompt = !args->no_generation_prompt;
      if (!args->enable_thinking.empty()) request.extra["enable_thinking"] = args->enable_thinking == "true";
      // Exactly the prompt text: no newline added, so the output can be piped to `tokenize`.
      std::cout << tmpl.render(request);
    });
  }
}

}  // namespace fp4serve::cli
