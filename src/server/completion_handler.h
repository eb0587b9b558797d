#pragma once
// One OpenAI completion from start to end: the request is parsed, built and submitted to the
// scheduler by CompletionService::start (errors are ApiErrors, before any byte is sent), then the
// returned job either collects the whole answer into one JSON response or writes it as SSE
// chunks while the tokens come. A streaming client that goes away (a write fails) cancels its
// sequence at once, which frees its KV cache at the scheduler's next step.
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "engine/scheduler.h"
#include "server/metrics.h"
#include "server/openai_protocol.h"
#include "server/output_pipeline.h"
#include "server/request_builder.h"

namespace fp4serve::server {

enum class Endpoint { Chat, Completions };

// Writes bytes to the client; false once the client is gone.
using ChunkWriter = std::function<bool(const std::string&)>;

class CompletionJob {
 public:
  CompletionJob(Endpoint endpoint, std::string id, std::shared_ptr<engine::RequestStream> stream, BuiltRequest built,
                const GenerationOptions& options, bool echo, const ModelContext& model, Metrics& metrics);
  ~CompletionJob();  // cancels generation if it is still running (the handler gave up on it)
  CompletionJob(const CompletionJob&) = delete;
  CompletionJob& operator=(const CompletionJob&) = delete;

  bool streaming() const { return options_.stream; }
  // Waits for the end and returns the response body; a failed generation is an ApiError (500).
  nlohmann::ordered_json collect();
  // Writes every SSE event, "data: [DONE]" last. Returns false if the client went away.
  bool stream(const ChunkWriter& write);

 private:
  struct Logprob {
    std::int32_t token;
    float logprob;
    std::vector<engine::TokenLogprob> top;
  };
  // Pulls events until the end, handing each visible piece (with its tokens' logprobs) to
  // `emit`; `idle` is called when nothing happened for a while. Either returning false cancels.
  // Returns false if cancelled that way.
  bool pump(const std::function<bool(OutputPiece&&, std::vector<Logprob>&&)>& emit, const std::function<bool()>& idle);
  std::string finish_reason() const;
  nlohmann::ordered_json usage() const;
  // id, object, created and model: the head of every response body and stream chunk.
  nlohmann::ordered_json envelope(bool chunk) const;
  // The client is gone: stops generation, counts the request as cancelled; returns false.
  bool abandon();
  nlohmann::ordered_json chat_logprobs(const std::vector<Logprob>& entries) const;
  nlohmann::ordered_json completion_logprobs(const std::vector<Logprob>& entries, std::size_t text_offset) const;
  void record_metrics(bool client_gone);

  Endpoint endpoint_;
  std::string id_;
  std::int64_t created_;
  std::shared_ptr<engine::RequestStream> stream_;
  BuiltRequest built_;
  GenerationOptions options_;
  bool echo_;
  const ModelContext& model_;
  Metrics& metrics_;
  OutputPipeline pipeline_;

  std::int64_t generated_ = 0;
  bool done_ = false;
  engine::FinishReason engine_finish_ = engine::FinishReason::Length;
  std::string error_;  // the Failed event's message
};

class CompletionService {
 public:
  CompletionService(engine::Scheduler& scheduler, const ModelContext& model, Metrics& metrics);
  // Parses, validates and submits. ApiError: 400 bad request, 404 unknown model, 503 queue full.
  std::unique_ptr<CompletionJob> start(Endpoint endpoint, std::string_view body);
  nlohmann::ordered_json models() const;  // the /v1/models body

 private:
  std::shared_ptr<engine::RequestStream> submit(engine::RequestSpec spec);
  std::string next_id(const char* prefix);

  engine::Scheduler& scheduler_;
  const ModelContext& model_;
  Metrics& metrics_;
  std::int64_t started_at_;
  std::uint64_t id_salt_;
  std::atomic<std::uint64_t> counter_{0};
};

}  // namespace fp4serve::server
