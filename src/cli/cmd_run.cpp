// `fp4serve run`: generate from a prompt; `fp4serve chat`: an interactive conversation.
//
//   fp4serve run -m DIR (-p TEXT | --prompt-ids 1,2,3) [-n N] [--temperature T --top-p P --top-k K
//                --min-p M --presence-penalty X --frequency-penalty X --repetition-penalty X --seed S] [--chat] [--json] [--w4a4] [--check-weights] [backend flags]
//   fp4serve chat -m DIR [--system TEXT] [sampling flags] [--w4a4] [backend flags]
//
// Human form: the kernel choices and load notes go to stderr, the text streams to stdout as it is
// generated, and one timing line ends it. --json prints one object instead (see docs/model.md).
#include <CLI/CLI.hpp>

#include <cstdio>
#include <iomanip>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/app.h"
#include "cli/load_notes.h"
#include "engine/engine.h"
#include "engine/runtime.h"
#include "kernels/cli_options.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/stream_decoder.h"
#include "util/error.h"

namespace fp4serve::cli {

namespace {

// Flags shared by run and chat.
struct CommonArgs {
  std::string model_dir;
  std::int64_t max_new_tokens = 256;
  engine::SamplingParams sampling;
  std::uint64_t seed = 0;
  bool seeded = false;
  bool check_weights = false;
  bool quiet = false;
  std::string enable_thinking;  // "", "true", "false"
  kernels::BackendOptions backends;
};

void add_common_options(CLI::App& cmd, CommonArgs& a) {
  a.sampling.temperature = 0.0;  // greedy unless asked: reproducible, and what the oracle tests use
  cmd.add_option("-m,--model", a.model_dir, "Checkpoint directory (config.json + safetensors)")->required();
  cmd.add_option("-n,--max-new-tokens", a.max_new_tokens, "Most tokens to generate")->capture_default_str();
  cmd.add_option("--temperature", a.sampling.temperature, "Sampling temperature; 0 = greedy")->capture_default_str();
  cmd.add_option("--top-p", a.sampling.top_p, "Nucleus sampling: keep the most likely tokens up to this mass")
      ->capture_default_str();
  cmd.add_option("--top-k", a.sampling.top_k, "Keep only the k most likely tokens (0 = off)")->capture_default_str();
  cmd.add_option("--min-p", a.sampling.min_p, "Drop tokens below min-p times the top token's probability")
      ->capture_default_str();
  cmd.add_option("--presence-penalty", a.sampling.presence_penalty,
                 "Subtract this from the logit of every token already generated (OpenAI; -2..2)")
      ->capture_default_str();
  cmd.add_option("--frequency-penalty", a.sampling.frequency_penalty,
                 "Subtract this times a token's count among the generated ones (OpenAI; -2..2)")
      ->capture_default_str();
  cmd.add_option("--repetition-penalty", a.sampling.repetition_penalty,
                 "Divide positive / multiply negative logits of tokens in prompt or output (HF; 1 = off)")
      ->capture_default_str();
  cmd.add_option("--seed", a.seed, "Sampling seed (default: random, reported in --json)")
      ->each([&a](const std::string&) { a.seeded = true; });
  cmd.add_flag("--check-weights", a.check_weights, "Scan every weight and scale for NaN/Inf before running");
  cmd.add_option("--enable-thinking", a.enable_thinking, "Chat template variable enable_thinking (Qwen3)")
      ->check(CLI::IsMember({"true", "false"}));
  cmd.add_flag("-q,--quiet", a.quiet, "No kernel report or load notes on stderr");
  kernels::add_backend_options(cmd, a.backends);
}

engine::Runtime open(CommonArgs& a) {
  if (a.seeded) a.sampling.seed = a.seed;
  engine::validate(a.sampling);
  if (a.max_new_tokens < 0) fail("--max-new-tokens must be >= 0, got ", a.max_new_tokens);
  engine::RuntimeOptions o;
  o.backends = a.backends;
  o.check_weights = a.check_weights;
  return engine::open_runtime(a.model_dir, o);
}

void print_load_notes(const engine::Runtime& rt, const CommonArgs& a) {
  if (a.quiet) return;
  std::cerr << rt.kernels->report().to_text();
  for (const std::string& w : rt.warnings) std::cerr << "note: " << w << "\n";
  if (rt.weight_check) {
    std::cerr << "check-weights: " << rt.weight_check->tensors << " tensors, " << rt.weight_check->values
              << " values, no NaN or Inf\n";
  }
  std::cerr.flush();
}

// "1,2,3", "1 2 3" or "[1, 2, 3]".
std::vector<std::int32_t> parse_prompt_ids(const std::string& text) {
  std::vector<std::int32_t> ids;
  std::string token;
  auto flush = [&] {
    if (token.empty()) return;
    std::size_t used = 0;
    long long v = 0;
    try {
      v = std::stoll(token, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != token.size() || v < 0 || v > INT32_MAX) fail("--prompt-ids: '", token, "' is not a token id");
    ids.push_back(static_cast<std::int32_t>(v));
    token.clear();
  };
  for (char c : text) {
    if (c == ',' || c == ' ' || c == '[' || c == ']' || c == '\n' || c == '\t') flush();
    else token.push_back(c);
  }
  flush();
  if (ids.empty()) fail("--prompt-ids: no token ids in '", text, "'");
  return ids;
}

std::vector<std::int32_t> to_ids(const std::vector<tokenizer::TokenId>& ids) {
  return {ids.begin(), ids.end()};
}

// The prompt text a chat template renders for `messages`, ready for the assistant's turn.
std::string render_chat(const tokenizer::ChatTemplate& tmpl, const nlohmann::ordered_json& messages,
                        const std::string& enable_thinking) {
  tokenizer::ChatRequest request;
  request.messages = messages;
  request.add_generation_prompt = true;
  if (!enable_thinking.empty()) request.extra["enable_thinking"] = enable_thinking == "true";
  return tmpl.render(request);
}

// The text of generated ids, special tokens left out. Ids the tokenizer does not define (the
// lm_head's padding rows, which a model can sample) have none (Tokenizer::has_token).
std::string generated_text(const tokenizer::Tokenizer& tok, const std::vector<std::int32_t>& ids) {
  std::vector<tokenizer::TokenId> known;
  known.reserve(ids.size());
  for (const std::int32_t id : ids)
    if (tok.has_token(id)) known.push_back(static_cast<tokenizer::TokenId>(id));
  return tok.decode(known, /*skip_special=*/true);
}

// Writes generated tokens as they come: text through the streaming detokenizer, or ids when the
// checkpoint has no tokenizer.
class TokenPrinter {
 public:
  explicit TokenPrinter(const engine::Runtime& rt) : tokenizer_(rt.tokenizer ? &*rt.tokenizer : nullptr) {
    if (tokenizer_) decoder_.emplace(*tokenizer_, /*skip_special=*/true);
  }
  void push(std::int32_t token) {
    if (decoder_) {
      if (tokenizer_->has_token(token)) emit(decoder_->push(static_cast<tokenizer::TokenId>(token)));
    } else {
      emit((first_ ? "" : " ") + std::to_string(token));
      first_ = false;
    }
  }
  void finish() {
    if (decoder_) emit(decoder_->finish());
    if (!ends_with_newline_) std::cout << "\n";
    std::cout.flush();
  }

 private:
  void emit(const std::string& s) {
    if (s.empty()) return;
    std::cout << s << std::flush;
    ends_with_newline_ = s.back() == '\n';
  }
  const tokenizer::Tokenizer* tokenizer_;
  std::optional<tokenizer::StreamDecoder> decoder_;
  bool first_ = true;
  bool ends_with_newline_ = true;
};

std::string fixed(double v, int digits) {
  std::ostringstream os;
  os << std::fixed << std::setprecision(digits) << v;
  return os.str();
}

// "load 1.23 s | prefill 16 tok in 0.010 s, 1600.0 tok/s | decode 31 tok in 0.100 s, 310.0 tok/s"
std::string timing_line(double load_seconds, const engine::Timings& t) {
  std::string line = "load " + fixed(load_seconds, 2) + " s | prefill " + std::to_string(t.prefill_tokens) +
                     " tok in " + fixed(t.prefill_seconds, 3) + " s, " + fixed(t.prefill_tokens_per_second(), 1) +
                     " tok/s | decode ";
  if (t.decode_tokens == 0) return line + "0 tok";
  return line + std::to_string(t.decode_tokens) + " tok in " + fixed(t.decode_seconds, 3) + " s, " +
         fixed(t.decode_tokens_per_second(), 1) + " tok/s";
}

nlohmann::json timings_json(double load_seconds, const engine::Timings& t) {
  return {{"load_s", load_seconds},
          {"prefill_s", t.prefill_seconds},
          {"prefill_tokens", t.prefill_tokens},
          {"prefill_tokens_per_s", t.prefill_tokens_per_second()},
          {"decode_s", t.decode_seconds},
          {"decode_tokens", t.decode_tokens},
          {"decode_tokens_per_s", t.decode_tokens_per_second()}};
}

// ---- run -------------------------------------------------------------------------------------

struct RunArgs {
  CommonArgs common;
  std::string prompt;
  std::string prompt_ids;
  std::string system;
  bool chat = false;
  bool json = false;
};

void run(RunArgs& a) {
  engine::Runtime rt = open(a.common);
  if (!a.json) print_load_notes(rt, a.common);

  std::vector<std::int32_t> prompt;
  if (!a.prompt_ids.empty()) {
    if (a.chat) fail("--chat applies a chat template to -p TEXT; it cannot be combined with --prompt-ids");
    prompt = parse_prompt_ids(a.prompt_ids);
  } else {
    const tokenizer::Tokenizer& tok = rt.require_tokenizer();
    std::string text = a.prompt;
    if (a.chat) {
      nlohmann::ordered_json messages = nlohmann::ordered_json::array();
      if (!a.system.empty()) messages.push_back({{"role", "system"}, {"content", a.system}});
      messages.push_back({{"role", "user"}, {"content", a.prompt}});
      text = render_chat(tokenizer::ChatTemplate::from_model_dir(rt.model_dir), messages, a.common.enable_thinking);
    }
    prompt = to_ids(tok.encode(text));
  }

  engine::GenerationRequest request;
  request.prompt = prompt;
  request.max_new_tokens = a.common.max_new_tokens;
  request.sampling = a.common.sampling;
  request.stop_tokens = rt.stop_tokens;

  if (a.json) {
    // Tokens are collected as they come so that a failed request still reports them.
    std::vector<std::int32_t> streamed;
    std::vector<float> streamed_logprobs;
    engine::GenerationResult r;
    std::string error;
    try {
      r = engine::generate(
          *rt.model, request,
          [&](std::int32_t t, float lp) {
            streamed.push_back(t);
            streamed_logprobs.push_back(lp);
          },
          rt.kernels.get());
    } catch (const engine::NonFiniteLogits& e) {
      error = e.what();
    }
    nlohmann::json out;
    out["model"] = rt.model_dir.string();
    out["prompt_ids"] = prompt;
    out["generated_ids"] = streamed;
    out["text"] = rt.tokenizer ? nlohmann::json(generated_text(*rt.tokenizer, streamed)) : nlohmann::json(nullptr);
    out["finish_reason"] = error.empty() ? std::string(engine::finish_reason_name(r.finish)) : "error";
    if (!error.empty()) out["error"] = error;
    out["logprobs"] = streamed_logprobs;
    out["timings"] = timings_json(rt.load_seconds, r.timings);
    out["seed"] = r.seed;
    out["sampling"] = {{"temperature", request.sampling.temperature},
                       {"top_p", request.sampling.top_p},
                       {"top_k", request.sampling.top_k},
                       {"min_p", request.sampling.min_p},
                       {"presence_penalty", request.sampling.presence_penalty},
                       {"frequency_penalty", request.sampling.frequency_penalty},
                       {"repetition_penalty", request.sampling.repetition_penalty}};
    out["semantics"] = rt.kernels->report().semantics;
    out["stop_tokens"] = rt.stop_tokens;
    out["kernels"] = rt.kernels->report().to_json();
    if (rt.weight_check) {
      out["check_weights"] = {{"tensors", rt.weight_check->tensors}, {"values", rt.weight_check->values}, {"ok", true}};
    }
    out["warnings"] = rt.warnings;
    std::cout << out.dump() << std::endl;
    if (!error.empty()) fail(error);  // exit status 1 as well
    return;
  }

  TokenPrinter printer(rt);
  const engine::GenerationResult r =
      engine::generate(*rt.model, request, [&](std::int32_t t, float) { printer.push(t); }, rt.kernels.get());
  printer.finish();
  std::cout << timing_line(rt.load_seconds, r.timings) << "\n";
}

// ---- chat ------------------------------------------------------------------------------------

struct ChatArgs {
  CommonArgs common;
  std::string system;
};

void chat(ChatArgs& a) {
  engine::Runtime rt = open(a.common);
  print_load_notes(rt, a.common);
  const tokenizer::Tokenizer& tok = rt.require_tokenizer();
  const tokenizer::ChatTemplate tmpl = tokenizer::ChatTemplate::from_model_dir(rt.model_dir);
  engine::Session session(*rt.model, rt.kernels.get());

  nlohmann::ordered_json messages = nlohmann::ordered_json::array();
  auto start_conversation = [&] {
    messages = nlohmann::ordered_json::array();
    if (!a.system.empty()) messages.push_back({{"role", "system"}, {"content", a.system}});
  };
  start_conversation();
  std::cerr << "chat: type a message; /reset starts over, /exit (or end of input) quits\n";
  std::string line;
  while (true) {
    std::cerr << "> " << std::flush;
    if (!std::getline(std::cin, line)) break;
    if (line == "/exit" || line == "/quit") break;
    if (line == "/reset") {
      start_conversation();
      session.reset();
      continue;
    }
    if (line.empty()) continue;
    messages.push_back({{"role", "user"}, {"content", line}});

    engine::GenerationRequest request;
    request.prompt = to_ids(tok.encode(render_chat(tmpl, messages, a.common.enable_thinking)));
    request.max_new_tokens = a.common.max_new_tokens;
    request.sampling = a.common.sampling;
    request.stop_tokens = rt.stop_tokens;
    TokenPrinter printer(rt);
    engine::GenerationResult r;
    try {
      r = session.generate(request, [&](std::int32_t t, float) { printer.push(t); });
    } catch (const engine::NonFiniteLogits& e) {
      printer.finish();
      messages.erase(messages.end() - 1);  // the turn failed; the conversation stays as it was
      std::cerr << "error: " << e.what() << "\n";
      continue;
    }
    printer.finish();
    // The reply as the template expects it back: its text without the stop token.
    messages.push_back({{"role", "assistant"}, {"content", generated_text(tok, r.tokens)}});
    std::cerr << "[" << timing_line(rt.load_seconds, r.timings) << "; " << r.cached_prompt_tokens
              << " prompt tokens re-used]\n";
  }
}

}  // namespace

void register_run(CLI::App& app) {
  auto* cmd = app.add_subcommand("run", "Generate text from a prompt (streams text, then one timing line)");
  auto a = std::make_shared<RunArgs>();
  auto* text = cmd->add_option("-p,--prompt", a->prompt, "Prompt text (encoded with the checkpoint's tokenizer.json)");
  auto* ids = cmd->add_option("--prompt-ids", a->prompt_ids, "Prompt as token ids: 1,2,3 (no tokenizer needed)");
  text->excludes(ids);
  ids->excludes(text);
  cmd->add_flag("--chat", a->chat, "Wrap the prompt as a user message in the model's chat template");
  cmd->add_option("--system", a->system, "With --chat: a system message first");
  cmd->add_flag("--json", a->json, "Print one JSON object: ids, text, finish reason, logprobs, timings");
  add_common_options(*cmd, a->common);
  cmd->callback([a, text, ids] {
    if (text->count() == 0 && ids->count() == 0) fail("run: give a prompt with -p TEXT or --prompt-ids 1,2,3");
    run(*a);
  });
}

void register_chat(CLI::App& app) {
  auto* cmd = app.add_subcommand("chat", "Interactive conversation with the model's chat template");
  auto a = std::make_shared<ChatArgs>();
  cmd->add_option("--system", a->system, "System message that starts the conversation");
  add_common_options(*cmd, a->common);
  cmd->callback([a] { chat(*a); });
}

}  // namespace fp4serve::cli
