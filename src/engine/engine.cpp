#include "engine/engine.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <sstream>

#include "kernels/registry.h"

namespace fp4serve::engine {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

}  // namespace

std::string_view finish_reason_name(FinishReason reason) {
  switch (reason) {
    case FinishReason::Stop: return "stop";
    case FinishReason::Cancelled: return "cancelled";
    case FinishReason::Length: break;
  }
  return "length";
}

double Timings::prefill_tokens_per_second() const {
  return prefill_seconds > 0.0 ? static_cast<double>(prefill_tokens) / prefill_seconds : 0.0;
}

double Timings::decode_tokens_per_second() const {
  return decode_seconds > 0.0 ? static_cast<double>(decode_tokens) / decode_seconds : 0.0;
}

namespace {

std::int64_t context_of(const CausalLM& model) { return std::max<std::int64_t>(model.config().max_position_embeddings, 1); }

// Room for one sequence of the model's whole context.
std::uint64_t session_budget(const CausalLM& model, std::int64_t block_tokens) {
  return StatePool::sequence_bytes(model.state_spec(), block_tokens, context_of(model)) + 1;
}

}  // namespace

Session::Session(CausalLM& model, kernels::KernelSelection* guard, std::int64_t prefill_chunk,
                 std::int64_t block_tokens)
    : model_(model),
      guard_(guard),
      prefill_chunk_(std::max<std::int64_t>(prefill_chunk, 1)),
      context_(context_of(model)),
      pool_(model.state_spec(), block_tokens, session_budget(model, block_tokens), 1),
      logits_(static_cast<std::size_t>(model.vocab_size())) {
  pool_.open(seq_);
}

Session::~Session() { pool_.release(seq_); }

void Session::reset() {
  pool_.truncate(seq_, 0);
  tokens_.clear();
}

void Session::forward(std::span<const std::int32_t> tokens) {
  const auto m = static_cast<std::int64_t>(tokens.size());
  if (!pool_.reserve(seq_, seq_.past() + m))
    fail("the sequence's state needs more than the context of ", context_, " tokens");
  const SequenceChunk chunk{tokens, &seq_.state(), LogitsFor::LastPosition};
  model_.forward({&chunk, 1}, logits_);
  seq_.advance(m);
  tokens_.insert(tokens_.end(), tokens.begin(), tokens.end());
}

std::string describe_non_finite(std::span<const float> logits, std::int64_t position, std::int64_t step) {
  std::int64_t nan = 0, inf = 0, first = -1;
  for (std::size_t i = 0; i < logits.size(); ++i) {
    if (std::isfinite(logits[i])) continue;
    (std::isnan(logits[i]) ? nan : inf) += 1;
    if (first < 0) first = static_cast<std::int64_t>(i);
  }
  if (first < 0) return {};
  std::ostringstream os;
  os << "non-finite logits after position " << position << " (generated token " << step << "): " << nan
     << " NaN and " << inf << " Inf of " << logits.size() << ", the first at token id " << first
     << "; the request fails and no token is sampled";
  return os.str();
}

void Session::check_finite(std::int64_t position, std::int64_t step) {
  const std::string where = describe_non_finite(logits_, position, step);
  if (where.empty()) return;
  std::ostringstream os;
  os << where;
  if (guard_) {
    const kernels::GuardOutcome outcome = guard_->report_non_finite(where);
    if (outcome.kernels_changed) model_.set_kernels(guard_->kernels());
    for (const std::string& action : outcome.actions) os << "\n  kernel guard: " << action;
  }
  reset();  // the cache may hold non-finite keys/values now
  throw NonFiniteLogits(os.str());
}

GenerationResult Session::generate(const GenerationRequest& request, const TokenCallback& on_token) {
  if (request.prompt.empty()) fail("generate: the prompt is empty");
  if (request.max_new_tokens < 0) fail("generate: max_new_tokens must be >= 0, got ", request.max_new_tokens);
  const std::int64_t V = model_.vocab_size();
  for (std::size_t i = 0; i < request.prompt.size(); ++i) {
    if (request.prompt[i] < 0 || request.prompt[i] >= V)
      fail("prompt token ", i, " is id ", request.prompt[i], ", outside the model's vocabulary [0, ", V, ")");
  }
  const auto prompt_len = static_cast<std::int64_t>(request.prompt.size());
  if (prompt_len > context_)
    fail("the prompt has ", prompt_len, " tokens, more than the model's context of ", context_,
         " (max_position_embeddings)");
  // The last generated token is never fed back, so prompt + max_new_tokens may reach context + 1.
  const std::int64_t max_new = std::min(request.max_new_tokens, context_ + 1 - prompt_len);
  Sampler sampler(request.sampling);
  sampler.set_prompt(request.prompt);
  GenerationResult result;
  result.seed = sampler.seed();

  // Re-use the cached prefix; at least the last prompt token is computed, for its logits.
  std::size_t common = 0;
  while (common < tokens_.size() && common < request.prompt.size() && tokens_[common] == request.prompt[common])
    ++common;
  common = std::min(common, request.prompt.size() - 1);
  if (model_.state_spec().linear_layers > 0 && common != tokens_.size()) common = 0;  // no rewinding a recurrence
  pool_.truncate(seq_, static_cast<std::int64_t>(common));
  tokens_.resize(common);
  result.cached_prompt_tokens = static_cast<std::int64_t>(common);

  // Prefill, in chunks so activations stay bounded on long prompts.
  const auto start = Clock::now();
  for (std::size_t pos = common; pos < request.prompt.size(); pos += static_cast<std::size_t>(prefill_chunk_)) {
    const std::size_t n = std::min(request.prompt.size() - pos, static_cast<std::size_t>(prefill_chunk_));
    forward({request.prompt.data() + pos, n});
  }
  result.timings.prefill_seconds = seconds_since(start);
  result.timings.prefill_tokens = static_cast<std::int64_t>(request.prompt.size() - common);

  // Decode: sample from the current logits, feed the token back, repeat.
  const auto decode_start = Clock::now();
  for (std::int64_t step = 0; step < max_new; ++step) {
    check_finite(static_cast<std::int64_t>(tokens_.size()) - 1, step);
    const SampledToken next = sampler.sample(logits_);
    result.tokens.push_back(next.token);
    result.logprobs.push_back(next.logprob);
    if (on_token) on_token(next.token, next.logprob);
    if (std::find(request.stop_tokens.begin(), request.stop_tokens.end(), next.token) != request.stop_tokens.end()) {
      result.finish = FinishReason::Stop;
      break;
    }
    if (step + 1 == max_new) break;
    forward({&next.token, 1});
    result.timings.decode_tokens += 1;
  }
  result.timings.decode_seconds = result.timings.decode_tokens > 0 ? seconds_since(decode_start) : 0.0;
  return result;
}

GenerationResult generate(CausalLM& model, const GenerationRequest& request, const TokenCallback& on_token,
                          kernels::KernelSelection* guard) {
  Session session(model, guard);
  return session.generate(request, on_token);
}

}  // namespace fp4serve::engine
