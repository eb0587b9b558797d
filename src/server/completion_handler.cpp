#include "server/completion_handler.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <optional>
#include <random>

#include "server/sse.h"
#include "util/error.h"

namespace fp4serve::server {

namespace {

using json = nlohmann::ordered_json;
using Clock = std::chrono::steady_clock;

constexpr auto kPoll = std::chrono::milliseconds(100);
// A stream with nothing to send for this long writes an SSE comment, which is how a client that
// left while its request was still queued is noticed.
constexpr auto kIdleProbe = std::chrono::milliseconds(1000);

json bytes_of(const std::string& s) {
  json b = json::array();
  for (unsigned char c : s) b.push_back(static_cast<int>(c));
  return b;
}

std::int64_t unix_now() { return static_cast<std::int64_t>(std::time(nullptr)); }

// A tool call as OpenAI writes it; stream deltas put the call's position among the message's calls first.
json tool_call_json(const ToolCall& c, std::optional<std::size_t> index = std::nullopt) {
  json j = json::object();
  if (index) j["index"] = *index;
  j["id"] = c.id;
  j["type"] = "function";
  j["function"] = {{"name", c.name}, {"arguments", c.arguments}};
  return j;
}

}  // namespace

// ---- job ------------------------------------------------------------------------------------

CompletionJob::CompletionJob(Endpoint endpoint, std::string id, std::shared_ptr<engine::RequestStream> stream,
                             BuiltRequest built, const GenerationOptions& options, bool echo,
                             const ModelContext& model, Metrics& metrics)
    : endpoint_(endpoint),
      id_(std::move(id)),
      created_(unix_now()),
      stream_(std::move(stream)),
      built_(std::move(built)),
      options_(options),
      echo_(echo),
      model_(model),
      metrics_(metrics),
      pipeline_(*model.tokenizer, [&] {
        OutputOptions o;
        o.stop = options.stop;
        o.include_stop_str = options.include_stop_str_in_output;
        o.skip_special_tokens = options.skip_special_tokens;
        o.hidden_tokens = built_.hidden_tokens;
        o.parse_reasoning = built_.parse_reasoning;
        o.reasoning_open_at_start = built_.reasoning_open_at_start;
        o.parse_tool_calls = built_.parse_tool_calls;
        o.call_id_prefix = id_.substr(id_.find('-') + 1) + "_";
        return o;
      }()) {}

CompletionJob::~CompletionJob() {
  if (!done_) stream_->cancel();
}

bool CompletionJob::pump(const std::function<bool(OutputPiece&&, std::vector<Logprob>&&)>& emit,
                         const std::function<bool()>& idle) {
  std::vector<Logprob> pending;
  auto last_write = Clock::now();
  while (true) {
    std::optional<engine::RequestEvent> ev = stream_->next(kPoll);
    if (!ev) {
      if (idle && Clock::now() - last_write >= kIdleProbe) {
        if (!idle()) return abandon();
        last_write = Clock::now();
      }
      continue;
    }
    if (ev->kind == engine::RequestEvent::Kind::Token) {
      ++generated_;
      if (pipeline_.stop_hit()) continue;  // tokens already in flight when a stop string matched
      const bool hidden = std::find(built_.hidden_tokens.begin(), built_.hidden_tokens.end(), ev->token) !=
                          built_.hidden_tokens.end();
      if (options_.logprobs && !hidden) pending.push_back({ev->token, ev->logprob, std::move(ev->top)});
      OutputPiece piece = pipeline_.push(ev->token);
      if (pipeline_.stop_hit()) stream_->cancel();
      if (!piece.empty()) {
        if (!emit(std::move(piece), std::move(pending))) return abandon();
        pending.clear();
        last_write = Clock::now();
      }
      continue;
    }
    if (ev->kind == engine::RequestEvent::Kind::Failed) {
      error_ = ev->error.empty() ? "generation failed" : ev->error;
      done_ = true;
      record_metrics(false);
      return true;
    }
    engine_finish_ = ev->finish;
    done_ = true;
    OutputPiece last = pipeline_.finish();
    const bool ok = emit(std::move(last), std::move(pending));
    record_metrics(!ok);
    return ok;
  }
}

std::string CompletionJob::finish_reason() const {
  if (pipeline_.stop_hit()) return pipeline_.tool_calls() ? "tool_calls" : "stop";
  switch (engine_finish_) {
    case engine::FinishReason::Stop:
      return pipeline_.tool_calls() ? "tool_calls" : "stop";
    case engine::FinishReason::Length:
      return "length";
    case engine::FinishReason::Cancelled:
      return "abort";  // the server cancelled it (shutdown without draining)
  }
  return "stop";
}

bool CompletionJob::abandon() {
  stream_->cancel();
  done_ = true;
  record_metrics(/*client_gone=*/true);
  return false;
}

json CompletionJob::envelope(bool chunk) const {
  json out;
  out["id"] = id_;
  if (endpoint_ == Endpoint::Chat) out["object"] = chunk ? "chat.completion.chunk" : "chat.completion";
  else out["object"] = "text_completion";
  out["created"] = created_;
  out["model"] = model_.served_name;
  return out;
}

json CompletionJob::usage() const {
  const auto prompt = static_cast<std::int64_t>(built_.spec.prompt.size());
  return {{"prompt_tokens", prompt}, {"completion_tokens", generated_}, {"total_tokens", prompt + generated_}};
}

json CompletionJob::chat_logprobs(const std::vector<Logprob>& entries) const {
  json content = json::array();
  for (const Logprob& e : entries) {
    const std::string text = token_text(*model_.tokenizer, e.token);
    json top = json::array();
    for (const engine::TokenLogprob& t : e.top) {
      const std::string tt = token_text(*model_.tokenizer, t.token);
      top.push_back({{"token", tt}, {"logprob", t.logprob}, {"bytes", bytes_of(tt)}});
    }
    content.push_back({{"token", text}, {"logprob", e.logprob}, {"bytes", bytes_of(text)}, {"top_logprobs", top}});
  }
  return {{"content", content}};
}

json CompletionJob::completion_logprobs(const std::vector<Logprob>& entries, std::size_t text_offset) const {
  json tokens = json::array(), token_logprobs = json::array(), top = json::array(), offsets = json::array();
  for (const Logprob& e : entries) {
    const std::string text = token_text(*model_.tokenizer, e.token);
    tokens.push_back(text);
    token_logprobs.push_back(e.logprob);
    json alternatives = json::object();
    for (const engine::TokenLogprob& t : e.top) alternatives[token_text(*model_.tokenizer, t.token)] = t.logprob;
    top.push_back(alternatives);
    offsets.push_back(text_offset);
    text_offset += text.size();
  }
  return {{"tokens", tokens}, {"token_logprobs", token_logprobs}, {"top_logprobs", top}, {"text_offset", offsets}};
}

void CompletionJob::record_metrics(bool client_gone) {
  if (client_gone) metrics_.record_cancelled();
  metrics_.record_tokens(static_cast<std::int64_t>(built_.spec.prompt.size()), generated_);
  const engine::RequestStats s = stream_->stats();
  const auto seconds = [](Clock::duration d) { return std::chrono::duration<double>(d).count(); };
  if (generated_ > 0 && s.first_token >= s.submitted) {
    metrics_.observe_ttft(seconds(s.first_token - s.submitted));
    if (generated_ > 1 && s.finished >= s.first_token) {
      metrics_.observe_tpot(seconds(s.finished - s.first_token) / static_cast<double>(generated_ - 1));
    }
  }
  if (s.finished >= s.submitted) metrics_.observe_latency(seconds(s.finished - s.submitted));
}

json CompletionJob::collect() {
  OutputPiece all;
  std::vector<Logprob> entries;
  pump(
      [&](OutputPiece&& p, std::vector<Logprob>&& lp) {
        all.append(std::move(p));
        for (Logprob& e : lp) entries.push_back(std::move(e));
        return true;
      },
      {});
  if (!error_.empty()) throw ApiError(500, "generation failed: " + error_, "server_error", "", "generation_failed");

  json choice;
  choice["index"] = 0;
  if (endpoint_ == Endpoint::Chat) {
    json message;
    message["role"] = "assistant";
    message["content"] = all.content.empty() && !all.calls.empty() ? json(nullptr) : json(all.content);
    message["reasoning_content"] = all.reasoning.empty() ? json(nullptr) : json(all.reasoning);
    if (!all.calls.empty()) {
      json calls = json::array();
      for (const ToolCall& c : all.calls) calls.push_back(tool_call_json(c));
      message["tool_calls"] = calls;
    }
    choice["message"] = message;
    choice["logprobs"] = options_.logprobs ? chat_logprobs(entries) : json(nullptr);
  } else {
    const std::string prefix = echo_ ? built_.prompt_text : "";
    choice["text"] = prefix + all.content;
    choice["logprobs"] = options_.logprobs ? completion_logprobs(entries, prefix.size()) : json(nullptr);
  }
  choice["finish_reason"] = finish_reason();
  json out = envelope(/*chunk=*/false);
  out["choices"] = json::array({choice});
  out["usage"] = usage();
  return out;
}

bool CompletionJob::stream(const ChunkWriter& write) {
  const bool chat = endpoint_ == Endpoint::Chat;
  auto chunk = [&](json choice) {
    json c = envelope(/*chunk=*/true);
    c["choices"] = json::array({std::move(choice)});
    if (options_.include_usage) c["usage"] = nullptr;
    return write(sse_event(c));
  };
  std::size_t text_offset = 0;
  std::size_t call_index = 0;
  bool opened = false;  // the first chunk went out (chat: the role; completions: the echo)
  auto open = [&]() {
    if (opened) return true;
    opened = true;
    if (chat) {
      return chunk({{"index", 0}, {"delta", {{"role", "assistant"}, {"content", ""}}}, {"logprobs", nullptr},
                    {"finish_reason", nullptr}});
    }
    if (echo_ && !built_.prompt_text.empty()) {
      text_offset = built_.prompt_text.size();
      return chunk({{"index", 0}, {"text", built_.prompt_text}, {"logprobs", nullptr}, {"finish_reason", nullptr}});
    }
    return true;
  };
  auto emit = [&](OutputPiece&& p, std::vector<Logprob>&& lp) {
    if (!open()) return false;
    if (p.empty() && lp.empty()) return true;
    json choice;
    choice["index"] = 0;
    if (chat) {
      json delta = json::object();
      if (!p.reasoning.empty()) delta["reasoning_content"] = p.reasoning;
      if (!p.content.empty()) delta["content"] = p.content;
      if (!p.calls.empty()) {
        json calls = json::array();
        for (const ToolCall& c : p.calls) calls.push_back(tool_call_json(c, call_index++));
        delta["tool_calls"] = calls;
      }
      choice["delta"] = delta;
      choice["logprobs"] = options_.logprobs && !lp.empty() ? chat_logprobs(lp) : json(nullptr);
    } else {
      choice["text"] = p.content;
      choice["logprobs"] = options_.logprobs && !lp.empty() ? completion_logprobs(lp, text_offset) : json(nullptr);
      text_offset += p.content.size();
    }
    choice["finish_reason"] = nullptr;
    return chunk(std::move(choice));
  };
  if (!open()) return abandon();
  if (!pump(emit, [&] { return write(sse_comment("waiting")); })) return false;

  if (!error_.empty()) {
    const ApiError e(500, "generation failed: " + error_, "server_error", "", "generation_failed");
    return write(sse_event(e.to_json())) && write(sse_done());
  }
  json last;
  last["index"] = 0;
  if (chat) last["delta"] = json::object();
  else last["text"] = "";
  last["logprobs"] = nullptr;
  last["finish_reason"] = finish_reason();
  if (!chunk(std::move(last))) return false;
  if (options_.include_usage) {
    json u = envelope(/*chunk=*/true);
    u["choices"] = json::array();
    u["usage"] = usage();
    if (!write(sse_event(u))) return false;
  }
  return write(sse_done());
}

// ---- service --------------------------------------------------------------------------------

CompletionService::CompletionService(engine::Scheduler& scheduler, const ModelContext& model, Metrics& metrics)
    : scheduler_(scheduler), model_(model), metrics_(metrics), started_at_(unix_now()),
      id_salt_(std::random_device{}()) {}

std::string CompletionService::next_id(const char* prefix) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%s-%08llx%08llx", prefix, static_cast<unsigned long long>(id_salt_ & 0xffffffffu),
                static_cast<unsigned long long>(counter_.fetch_add(1)));
  return buf;
}

std::shared_ptr<engine::RequestStream> CompletionService::submit(engine::RequestSpec spec) {
  try {
    return scheduler_.submit(std::move(spec));
  } catch (const engine::QueueFull& e) {
    throw ApiError(503, std::string("the server is busy, retry later: ") + e.what(), "server_error", "", "queue_full");
  } catch (const Error& e) {
    throw ApiError(400, e.what(), "invalid_request_error");
  }
}

std::unique_ptr<CompletionJob> CompletionService::start(Endpoint endpoint, std::string_view body) {
  if (endpoint == Endpoint::Chat) {
    ChatCompletionRequest r = parse_chat_completion_request(body);
    BuiltRequest b = build_chat_request(model_, r);
    auto stream = submit(b.spec);
    return std::make_unique<CompletionJob>(endpoint, next_id("chatcmpl"), std::move(stream), std::move(b), r.options,
                                           false, model_, metrics_);
  }
  CompletionRequest r = parse_completion_request(body);
  BuiltRequest b = build_completion_request(model_, r);
  auto stream = submit(b.spec);
  return std::make_unique<CompletionJob>(endpoint, next_id("cmpl"), std::move(stream), std::move(b), r.options, r.echo,
                                         model_, metrics_);
}

json CompletionService::models() const {
  json model = {{"id", model_.served_name},
                {"object", "model"},
                {"created", started_at_},
                {"owned_by", "fp4serve"},
                {"max_model_len", model_.max_model_len}};
  return {{"object", "list"}, {"data", json::array({model})}};
}

}  // namespace fp4serve::server
