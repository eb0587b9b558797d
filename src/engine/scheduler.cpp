#include "engine/scheduler.h"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "engine/engine.h"
#include "engine/state_pool.h"
#include "kernels/registry.h"

namespace fp4serve::engine {

namespace {

using Clock = std::chrono::steady_clock;

std::size_t sz(std::int64_t v) { return static_cast<std::size_t>(v); }

SchedulerOptions resolve(const CausalLM& model, SchedulerOptions o) {
  if (o.max_num_seqs < 1) fail("max_num_seqs must be >= 1, got ", o.max_num_seqs);
  if (o.block_tokens < 1) fail("block_tokens must be >= 1, got ", o.block_tokens);
  if (o.prefill_chunk < 1) fail("prefill_chunk must be >= 1, got ", o.prefill_chunk);
  if (o.max_queue < 0) fail("max_queue must be >= 0, got ", o.max_queue);
  const std::int64_t context = model.config().max_position_embeddings;
  if (o.max_model_len < 0) fail("max_model_len must be >= 0 (0 = the model's context), got ", o.max_model_len);
  if (o.max_model_len == 0) o.max_model_len = context;
  if (o.max_model_len < 1) fail("max_model_len must be >= 1: the config has no max_position_embeddings");
  if (context > 0 && o.max_model_len > context)
    fail("max_model_len ", o.max_model_len, " exceeds the model's max_position_embeddings ", context);
  if (o.kv_cache_bytes == 0) {
    const std::int64_t tokens = std::min<std::int64_t>(o.max_model_len, 4096);
    o.kv_cache_bytes = StatePool::sequence_bytes(model.state_spec(), o.block_tokens, tokens) *
                       static_cast<std::uint64_t>(o.max_num_seqs);
  }
  return o;
}

}  // namespace

// ---- RequestStream ---------------------------------------------------------------------------

std::optional<RequestEvent> RequestStream::next(std::chrono::milliseconds timeout) {
  std::unique_lock lock(mu_);
  if (!cv_.wait_for(lock, timeout, [&] { return !events_.empty(); })) return std::nullopt;
  RequestEvent event = std::move(events_.front());
  events_.pop_front();
  return event;
}

void RequestStream::cancel() {
  std::lock_guard lock(mu_);
  cancelled_ = true;
}

bool RequestStream::cancelled() const {
  std::lock_guard lock(mu_);
  return cancelled_;
}

RequestStats RequestStream::stats() const {
  std::lock_guard lock(mu_);
  return stats_;
}

void RequestStream::push(RequestEvent event) {
  std::lock_guard lock(mu_);
  events_.push_back(std::move(event));
  cv_.notify_all();
}

// ---- The scheduler thread --------------------------------------------------------------------

// One request from submit() to its last event.
struct ScheduledSequence {
  std::shared_ptr<RequestStream> stream;
  RequestSpec spec;
  Sampler sampler;
  std::vector<std::int32_t> tokens;  // prompt, then generated: what a recompute replays
  std::int64_t generated = 0;
  PooledSequence pooled;             // open while running
  bool finished = false;             // its last event was delivered
  bool preempted = false;            // this step: state freed, back to the queue

  ScheduledSequence(std::shared_ptr<RequestStream> s, RequestSpec r)
      : stream(std::move(s)), spec(std::move(r)), sampler(spec.sampling), tokens(spec.prompt) {
    sampler.set_prompt(spec.prompt);
  }
  // Tokens not yet run through the model (1 while decoding, more while prefilling).
  std::int64_t pending() const { return static_cast<std::int64_t>(tokens.size()) - pooled.past(); }
};

class SchedulerLoop {
 public:
  SchedulerLoop(CausalLM& model, const SchedulerOptions& options, kernels::KernelSelection* guard)
      : model_(model),
        options_(resolve(model, options)),
        guard_(guard),
        pool_(model.state_spec(), options_.block_tokens, options_.kv_cache_bytes, options_.max_num_seqs),
        vocab_(model.vocab_size()) {
    for (std::int64_t id : model.config().eos_token_ids) eos_.push_back(static_cast<std::int32_t>(id));
    stats_.kv_blocks_total = pool_.total_blocks();
    stats_.max_model_len = options_.max_model_len;
    thread_ = std::thread([this] { run(); });
  }

  ~SchedulerLoop() { shutdown(false); }

  std::shared_ptr<RequestStream> submit(RequestSpec spec) {
    const auto P = static_cast<std::int64_t>(spec.prompt.size());
    if (P == 0) fail("prompt: the prompt is empty");
    for (std::size_t i = 0; i < spec.prompt.size(); ++i) {
      if (spec.prompt[i] < 0 || spec.prompt[i] >= vocab_)
        fail("prompt: token ", i, " is id ", spec.prompt[i], ", outside the model's vocabulary [0, ", vocab_, ")");
    }
    if (spec.max_new_tokens < 1) fail("max_new_tokens must be >= 1, got ", spec.max_new_tokens);
    if (P + spec.max_new_tokens > options_.max_model_len) {
      fail("prompt (", P, " tokens) + max_new_tokens (", spec.max_new_tokens, ") = ", P + spec.max_new_tokens,
           " exceeds max_model_len ", options_.max_model_len);
    }
    if (spec.top_logprobs < 0 || spec.top_logprobs > 20) fail("top_logprobs must be in [0, 20], got ", spec.top_logprobs);
    // The last generated token is never run, so the state holds at most P + max_new - 1.
    if (!pool_.could_ever_fit(P + spec.max_new_tokens - 1)) {
      fail("the request needs ", pool_.blocks_for(P + spec.max_new_tokens - 1), " KV blocks of ",
           options_.block_tokens, " tokens but the whole state pool has ", pool_.total_blocks(),
           " (kv cache budget ", options_.kv_cache_bytes, " bytes); shorten the prompt or max_new_tokens");
    }
    for (std::int32_t t : spec.stop_tokens)
      if (t < 0 || t >= vocab_) fail("stop token id ", t, " is outside the model's vocabulary [0, ", vocab_, ")");

    std::unique_lock lock(mu_);
    if (stopping_) fail("the scheduler is shutting down");
    if (static_cast<std::int64_t>(incoming_.size()) + queued_ >= options_.max_queue)
      throw QueueFull("the request queue is full (" + std::to_string(options_.max_queue) + " waiting)");
    std::shared_ptr<RequestStream> stream(new RequestStream(next_id_++));
    auto seq = std::make_unique<ScheduledSequence>(stream, std::move(spec));  // the sampler validates
    stream->stats_.prompt_tokens = P;
    stream->stats_.seed = seq->sampler.seed();
    stream->stats_.submitted = Clock::now();
    incoming_.push_back(std::move(seq));
    stats_.waiting += 1;
    cv_.notify_all();
    return stream;
  }

  void shutdown(bool drain) {
    {
      std::lock_guard lock(mu_);
      stopping_ = true;
      if (!drain) drain_ = false;
      cv_.notify_all();
    }
    std::lock_guard join_lock(join_mu_);
    if (thread_.joinable()) thread_.join();
  }

  SchedulerStats stats() const {
    std::lock_guard lock(mu_);
    return stats_;
  }

  const SchedulerOptions& options() const { return options_; }

 private:
  void run() {
    while (true) {
      {
        std::unique_lock lock(mu_);
        cv_.wait(lock, [&] { return stopping_ || !incoming_.empty() || !waiting_.empty() || !running_.empty(); });
        while (!incoming_.empty()) {
          waiting_.push_back(std::move(incoming_.front()));
          incoming_.pop_front();
        }
        if (stopping_ && !drain_) {
          for (auto& s : waiting_) s->stream->cancel();
          for (auto& s : running_) s->stream->cancel();
        }
        if (stopping_ && waiting_.empty() && running_.empty()) return;
      }
      try {
        step();
      } catch (const std::exception& e) {
        fail_all(std::string("internal scheduler error: ") + e.what());
      }
      publish_stats();
    }
  }

  void deliver_token(ScheduledSequence& s, const SampledToken& t) {
    RequestEvent e;
    e.kind = RequestEvent::Kind::Token;
    e.token = t.token;
    e.logprob = t.logprob;
    if (s.spec.top_logprobs > 0) e.top = top_;
    {
      std::lock_guard lock(s.stream->mu_);
      if (s.generated == 0) s.stream->stats_.first_token = Clock::now();
      s.stream->stats_.generated_tokens = s.generated + 1;
    }
    s.stream->push(std::move(e));
  }

  void finish(ScheduledSequence& s, FinishReason reason) {
    end(s, RequestEvent::Kind::Finished, reason, {});
  }

  void end(ScheduledSequence& s, RequestEvent::Kind kind, FinishReason reason, std::string error) {
    pool_.release(s.pooled);
    s.finished = true;
    {
      std::lock_guard lock(s.stream->mu_);
      s.stream->stats_.finished = Clock::now();
    }
    RequestEvent e;
    e.kind = kind;
    e.finish = reason;
    e.error = std::move(error);
    s.stream->push(std::move(e));
  }

  void fail_all(const std::string& message) {
    for (auto& s : running_)
      if (!s->finished) end(*s, RequestEvent::Kind::Failed, FinishReason::Length, message);
    for (auto& s : waiting_)
      if (!s->finished) end(*s, RequestEvent::Kind::Failed, FinishReason::Length, message);
    running_.clear();
    waiting_.clear();
  }

  // Frees the state of the most recently admitted running sequence (not yet preempted) and
  // queues it first, to be recomputed. Returns it.
  ScheduledSequence* preempt_newest() {
    for (auto it = running_.rbegin(); it != running_.rend(); ++it) {
      ScheduledSequence& s = **it;
      if (s.preempted || s.finished) continue;
      pool_.release(s.pooled);
      s.preempted = true;
      preemptions_ += 1;
      return &s;
    }
    return nullptr;
  }

  void retire_cancelled() {
    for (auto& s : waiting_)
      if (s->stream->cancelled()) finish(*s, FinishReason::Cancelled);
    for (auto& s : running_)
      if (s->stream->cancelled()) finish(*s, FinishReason::Cancelled);
    std::erase_if(waiting_, [](const auto& s) { return s->finished; });
    std::erase_if(running_, [](const auto& s) { return s->finished; });
  }

  void admit() {
    while (!waiting_.empty() && static_cast<std::int64_t>(running_.size()) < options_.max_num_seqs) {
      ScheduledSequence& s = *waiting_.front();
      const auto need = static_cast<std::int64_t>(s.tokens.size());
      // Keep one spare block per running sequence so that admitting does not at once force
      // the running ones (which grow a block at a time) into preemption.
      const std::int64_t headroom = static_cast<std::int64_t>(running_.size());
      if (!pool_.can_admit(need) || pool_.blocks_for(need) + headroom > pool_.free_blocks()) break;
      pool_.open(s.pooled);
      pool_.reserve(s.pooled, need);
      running_.push_back(std::move(waiting_.front()));
      waiting_.pop_front();
    }
  }

  // The non-finite check of one row of logits; returns the message when the row is bad.
  std::string non_finite(const ScheduledSequence& s, const float* row) const {
    return describe_non_finite({row, static_cast<std::size_t>(vocab_)}, static_cast<std::int64_t>(s.tokens.size()) - 1,
                               s.generated);
  }

  bool is_stop(const ScheduledSequence& s, std::int32_t token) const {
    if (std::find(s.spec.stop_tokens.begin(), s.spec.stop_tokens.end(), token) != s.spec.stop_tokens.end())
      return true;
    return !s.spec.ignore_eos && std::find(eos_.begin(), eos_.end(), token) != eos_.end();
  }

  void step() {
    retire_cancelled();
    admit();
    publish_stats();  // admitted requests count as running while the forward runs

    // Decoding sequences first, one token each; a sequence whose next token needs a block when
    // none is free preempts the newest running sequence (possibly itself).
    chunks_.clear();
    batch_.clear();
    std::int64_t budget = options_.prefill_chunk;
    for (auto& sp : running_) {
      ScheduledSequence& s = *sp;
      if (s.preempted || s.pending() != 1) continue;
      while (!pool_.reserve(s.pooled, s.pooled.past() + 1)) {
        if (preempt_newest() == &s) break;
      }
      if (s.preempted) continue;
      batch_.push_back(&s);
      budget -= 1;
    }
    // Then prompt chunks (their blocks were reserved at admission) within the token budget.
    std::int64_t prefilled = 0;
    for (auto& sp : running_) {
      ScheduledSequence& s = *sp;
      if (s.preempted || s.pending() <= 1) continue;
      if (budget <= 0) break;
      batch_.push_back(&s);
      budget -= std::min(s.pending(), budget);
    }
    // Preempted sequences go back to the front of the queue, the earliest admitted first.
    for (auto it = running_.rbegin(); it != running_.rend(); ++it) {
      if (!(*it)->preempted) continue;
      (*it)->preempted = false;
      waiting_.push_front(std::move(*it));
    }
    std::erase_if(running_, [](const auto& s) { return !s; });
    if (batch_.empty()) return;

    // One forward over every chunk. The budget is recomputed in the same order as above.
    std::int64_t logit_rows = 0;
    budget = options_.prefill_chunk;
    lengths_.clear();
    for (ScheduledSequence* s : batch_) {
      const std::int64_t n = s->pending() == 1 ? 1 : std::min(s->pending(), std::max<std::int64_t>(budget, 1));
      budget -= n;
      if (s->pending() > 1) prefilled += n;
      const bool last = n == s->pending();
      lengths_.push_back(n);
      chunks_.push_back({std::span<const std::int32_t>(s->tokens.data() + s->pooled.past(), sz(n)),
                         &s->pooled.state(), last ? LogitsFor::LastPosition : LogitsFor::None});
      logit_rows += last ? 1 : 0;
    }
    logits_.resize(sz(logit_rows * vocab_));
    try {
      model_.forward(chunks_, logits_);
    } catch (const std::exception& e) {
      for (ScheduledSequence* s : batch_)
        end(*s, RequestEvent::Kind::Failed, FinishReason::Length, std::string("model forward failed: ") + e.what());
      std::erase_if(running_, [](const auto& s) { return s->finished; });
      return;
    }

    // Sample every sequence that got logits.
    std::int64_t row = 0;
    std::uint64_t sampled = 0, nan_events = 0;
    std::string guard_report;
    for (std::size_t k = 0; k < batch_.size(); ++k) {
      ScheduledSequence& s = *batch_[k];
      s.pooled.advance(lengths_[k]);
      if (chunks_[k].logits == LogitsFor::None) continue;
      const float* logits = logits_.data() + row * vocab_;
      row += 1;
      const std::string bad = non_finite(s, logits);
      if (!bad.empty()) {
        nan_events += 1;
        if (guard_report.empty()) guard_report = bad;
        end(s, RequestEvent::Kind::Failed, FinishReason::Length, bad);
        continue;
      }
      const std::span<const float> row_span(logits, sz(vocab_));
      SampledToken t = s.sampler.sample(row_span, /*with_logprob=*/false);
      if (s.spec.logprobs || s.spec.top_logprobs > 0) {  // one normaliser for both
        const double log_z = log_normalizer(row_span);
        t.logprob = static_cast<float>(static_cast<double>(row_span[sz(t.token)]) - log_z);
        if (s.spec.top_logprobs > 0) top_logprobs(row_span, s.spec.top_logprobs, log_z, top_);
      }
      deliver_token(s, t);
      s.tokens.push_back(t.token);
      s.generated += 1;
      sampled += 1;
      if (is_stop(s, t.token)) {
        finish(s, FinishReason::Stop);
      } else if (s.generated >= s.spec.max_new_tokens) {
        finish(s, FinishReason::Length);
      }
    }
    if (nan_events > 0 && guard_) {
      // The kernels may be at fault: the guard re-validates and may swap them (no forward runs
      // now, so the model's kernels can change here).
      const kernels::GuardOutcome outcome = guard_->report_non_finite(guard_report);
      if (outcome.kernels_changed) model_.set_kernels(guard_->kernels());
    }
    std::erase_if(running_, [](const auto& s) { return s->finished; });
    steps_ += 1;
    nan_events_ += nan_events;
    prompt_tokens_ += static_cast<std::uint64_t>(prefilled);
    generated_tokens_ += sampled;
  }

  void publish_stats() {
    std::lock_guard lock(mu_);
    queued_ = static_cast<std::int64_t>(waiting_.size());
    stats_.waiting = queued_ + static_cast<std::int64_t>(incoming_.size());
    stats_.running = static_cast<std::int64_t>(running_.size());
    stats_.kv_blocks_used = pool_.used_blocks();
    stats_.steps = steps_;
    stats_.preemptions = preemptions_;
    stats_.nan_guard_events = nan_events_;
    stats_.prompt_tokens = prompt_tokens_;
    stats_.generated_tokens = generated_tokens_;
  }

  CausalLM& model_;
  const SchedulerOptions options_;
  kernels::KernelSelection* guard_;
  StatePool pool_;  // scheduler thread only (after construction)
  const std::int64_t vocab_;
  std::vector<std::int32_t> eos_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::unique_ptr<ScheduledSequence>> incoming_;  // submitted, not yet seen by the thread
  std::int64_t queued_ = 0;                                   // waiting_.size() at the last step
  bool stopping_ = false;
  bool drain_ = true;
  std::uint64_t next_id_ = 1;
  SchedulerStats stats_;

  // Scheduler thread only.
  std::deque<std::unique_ptr<ScheduledSequence>> waiting_;  // admission order, preempted first
  std::vector<std::unique_ptr<ScheduledSequence>> running_;  // admission order
  std::vector<ScheduledSequence*> batch_;
  std::vector<SequenceChunk> chunks_;
  std::vector<std::int64_t> lengths_;
  std::vector<float> logits_;
  std::vector<TokenLogprob> top_;
  std::uint64_t steps_ = 0, preemptions_ = 0, nan_events_ = 0, prompt_tokens_ = 0, generated_tokens_ = 0;

  std::mutex join_mu_;
  std::thread thread_;
};

// ---- Scheduler -------------------------------------------------------------------------------

Scheduler::Scheduler(CausalLM& model, const SchedulerOptions& options, kernels::KernelSelection* guard)
    : loop_(std::make_unique<SchedulerLoop>(model, options, guard)) {}

Scheduler::~Scheduler() { shutdown(false); }

std::shared_ptr<RequestStream> Scheduler::submit(RequestSpec spec) { return loop_->submit(std::move(spec)); }

void Scheduler::shutdown(bool drain) { loop_->shutdown(drain); }

SchedulerStats Scheduler::stats() const { return loop_->stats(); }

const SchedulerOptions& Scheduler::options() const { return loop_->options(); }

}  // namespace fp4serve::engine
