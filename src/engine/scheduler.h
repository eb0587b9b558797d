#pragma once
// Continuous batching. One scheduler thread owns the model and loops over steps; each step:
//   1. admits waiting requests while the state pool has room (KV blocks for the prompt, the
//      fixed state of hybrid models) and fewer than max_num_seqs run;
//   2. builds one batch: one token for every decoding sequence, then prompt chunks of the
//      prefilling ones until the step's token budget (prefill_chunk) is used, so a long prompt
//      never stalls the running streams;
//   3. runs CausalLM::forward once for the whole batch, samples every sequence that has new
//      logits, and delivers the tokens to each request's stream;
//   4. retires finished and cancelled sequences, freeing their state at once.
// A decoding sequence that needs a new KV block when none is free is preempted (its state is
// freed and it is re-queued at the front, to be recomputed from prompt + generated tokens), as
// vLLM does; a request that could never fit fails with an Error instead of waiting forever.
//
// Requests talk to the scheduler through a RequestStream: the caller (an HTTP handler thread)
// pulls events from it and may cancel it at any time (client gone, stop string seen).
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "engine/finish_reason.h"
#include "engine/sampler.h"
#include "model/causal_lm.h"
#include "util/error.h"

namespace fp4serve::kernels {
class KernelSelection;
}

namespace fp4serve::engine {

class SchedulerLoop;  // the scheduler thread's state (scheduler.cpp)

struct SchedulerOptions {
  std::int64_t max_num_seqs = 16;     // sequences running at once
  std::int64_t max_model_len = 0;     // prompt + generated tokens per sequence; 0 = config max_position_embeddings
  std::uint64_t kv_cache_bytes = 0;   // state pool budget; 0 = room for max_num_seqs sequences of min(max_model_len, 4096) tokens
  std::int64_t block_tokens = 16;     // tokens per KV block
  std::int64_t prefill_chunk = 256;   // tokens per step, decode tokens included
  std::int64_t max_queue = 256;       // waiting requests beyond which submit() throws QueueFull
};

struct RequestSpec {
  std::vector<std::int32_t> prompt;
  std::int64_t max_new_tokens = 16;       // >= 1
  SamplingParams sampling;
  std::vector<std::int32_t> stop_tokens;  // generation ends after emitting one (it is delivered)
  bool ignore_eos = false;                // (stop_tokens still apply when given explicitly)
  bool logprobs = false;                  // fill RequestEvent::logprob (a vocabulary-wide softmax per token)
  std::int64_t top_logprobs = 0;          // 0..20 alternatives per token
};

// TokenLogprob (engine/sampler.h) and FinishReason (engine/finish_reason.h, shared with
// Session::generate) come from their own headers.

struct RequestEvent {
  enum class Kind { Token, Finished, Failed } kind = Kind::Token;
  // Token:
  std::int32_t token = 0;
  float logprob = 0.0f;                 // log P(token) under the raw model distribution (with logprobs)
  std::vector<TokenLogprob> top;        // top_logprobs most likely tokens, most likely first
  // Finished:
  FinishReason finish = FinishReason::Length;
  // Failed (NaN guard, internal error): the message for the client.
  std::string error;
};

struct RequestStats {
  std::int64_t prompt_tokens = 0;
  std::int64_t generated_tokens = 0;
  std::uint64_t seed = 0;  // the sampler's seed
  std::chrono::steady_clock::time_point submitted, first_token, finished;
};

// One request's event queue, filled by the scheduler thread, drained by the caller.
class RequestStream {
 public:
  // Blocks until an event arrives or `timeout` passes (then nullopt; the caller may check its
  // client and call again). After Finished or Failed no more events come.
  std::optional<RequestEvent> next(std::chrono::milliseconds timeout);
  // Stops generation; the sequence's state is freed at the next step boundary and a Finished
  // event with FinishReason::Cancelled is delivered. Safe from any thread, idempotent.
  void cancel();
  bool cancelled() const;
  RequestStats stats() const;  // complete once Finished/Failed was delivered
  std::uint64_t id() const { return id_; }

 private:
  friend class SchedulerLoop;
  explicit RequestStream(std::uint64_t id) : id_(id) {}
  void push(RequestEvent event);
  std::uint64_t id_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<RequestEvent> events_;
  bool cancelled_ = false;
  RequestStats stats_;
};

// Thrown by submit() when the waiting queue is full (the server answers 429/503).
class QueueFull : public Error {
 public:
  using Error::Error;
};

struct SchedulerStats {
  std::int64_t waiting = 0;
  std::int64_t running = 0;
  std::int64_t kv_blocks_total = 0;
  std::int64_t kv_blocks_used = 0;
  std::int64_t max_model_len = 0;
  std::uint64_t steps = 0;
  std::uint64_t preemptions = 0;
  std::uint64_t nan_guard_events = 0;
  std::uint64_t prompt_tokens = 0;      // prefilled so far, all requests
  std::uint64_t generated_tokens = 0;   // sampled so far, all requests
};

class Scheduler {
 public:
  // `guard`, when given, is told about non-finite logits (it may swap kernels; the scheduler
  // then refreshes the model's). Starts the scheduler thread.
  Scheduler(CausalLM& model, const SchedulerOptions& options, kernels::KernelSelection* guard = nullptr);
  ~Scheduler();  // shutdown(false)
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  // Validates the request (prompt non-empty, ids in the vocabulary, prompt + max_new_tokens
  // within max_model_len, sampling parameters) and queues it. Throws Error naming the field,
  // QueueFull when the queue is full, Error when shutting down.
  std::shared_ptr<RequestStream> submit(RequestSpec spec);

  // Stops admitting; with drain, waits until running and queued requests finish, otherwise
  // cancels them. Then joins the thread. Idempotent.
  void shutdown(bool drain);

  SchedulerStats stats() const;
  const SchedulerOptions& options() const;  // with the defaults resolved

 private:
  std::unique_ptr<SchedulerLoop> loop_;
};

}  // namespace fp4serve::engine
