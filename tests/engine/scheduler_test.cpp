// The continuous-batching scheduler on an oracle fixture model: concurrent greedy requests give
// exactly the tokens of each run alone (with chunked prefill, small blocks and preemption), the
// queue bound, cancellation, the request checks, top logprobs and penalties, the NaN guard, and
// shutdown with and without draining.
#include "engine/scheduler.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "common/expect_error.h"
#include "engine/engine.h"
#include "kernels/kernels.h"
#include "model/model_weights.h"
#include "model/qwen3_model.h"
#include "model/qwen3_oracle.h"

namespace fp4serve::engine {
namespace {

using namespace std::chrono_literals;

const oracle::Case kMoe{"moe_bf16_gqa2", "default"};

// The reference dense GEMM behind a gate the test opens and closes (to hold the scheduler
// thread inside a forward), optionally turning row 0 of the `poison_call`-th lm_head output NaN.
class ControlledGemm final : public kernels::GemmKernel {
 public:
  explicit ControlledGemm(std::int64_t vocab) : vocab_(vocab) {}
  void run(const float* x, std::int64_t m, const kernels::WeightMatrix& w, float* y,
           kernels::Fp4Semantics semantics) const override {
    {
      std::unique_lock lock(mu_);
      entered_ += 1;
      cv_.notify_all();
      cv_.wait(lock, [&] { return open_; });
    }
    kernels::reference_kernels().dense_gemm->run(x, m, w, y, semantics);
    if (w.n == vocab_ && lm_head_calls_++ == poison_call_) y[0] = std::nanf("");
  }
  void set_open(bool open) {
    std::lock_guard lock(mu_);
    open_ = open;
    cv_.notify_all();
  }
  void wait_entered() const {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return entered_ > 0; });
  }
  int poison_call_ = -1;

 private:
  std::int64_t vocab_;
  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
  mutable bool open_ = true;
  mutable int entered_ = 0;
  mutable int lm_head_calls_ = 0;
};

struct Outcome {
  std::vector<std::int32_t> tokens;
  std::vector<float> logprobs;
  std::vector<std::vector<TokenLogprob>> top;
  std::optional<FinishReason> finish;
  std::string error;
};

Outcome collect(RequestStream& stream) {
  Outcome out;
  const auto deadline = std::chrono::steady_clock::now() + 60s;
  while (std::chrono::steady_clock::now() < deadline) {
    auto e = stream.next(100ms);
    if (!e) continue;
    if (e->kind == RequestEvent::Kind::Token) {
      out.tokens.push_back(e->token);
      out.logprobs.push_back(e->logprob);
      out.top.push_back(e->top);
    } else if (e->kind == RequestEvent::Kind::Finished) {
      out.finish = e->finish;
      return out;
    } else {
      out.error = e->error;
      return out;
    }
  }
  ADD_FAILURE() << "request did not finish within 60 s";
  return out;
}

class SchedulerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    data_ = oracle::load(kMoe);
    model_ = std::make_unique<Qwen3Model>(load_model_weights(kMoe.dir()), kernels::reference_kernels());
  }
  // Request i: a different slice of the fixture's ids and a different length.
  RequestSpec request(std::size_t i, std::int64_t max_new) const {
    RequestSpec r;
    const std::size_t len = 3 + (i * 5) % 11;
    r.prompt.assign(data_.ids.begin() + static_cast<std::ptrdiff_t>(i % 13),
                    data_.ids.begin() + static_cast<std::ptrdiff_t>(i % 13 + len));
    r.max_new_tokens = max_new;
    r.sampling.temperature = 0.0;
    r.ignore_eos = true;
    r.logprobs = true;
    return r;
  }
  // The same request run alone through Session::generate.
  GenerationResult alone(const RequestSpec& r) const {
    GenerationRequest g;
    g.prompt = r.prompt;
    g.max_new_tokens = r.max_new_tokens;
    g.sampling = r.sampling;
    g.stop_tokens = r.stop_tokens;
    return generate(*model_, g);
  }
  // Polls until the scheduler has freed every block (stats are published after each step).
  static void expect_drained(const Scheduler& s) {
    for (int i = 0; i < 500 && (s.stats().kv_blocks_used != 0 || s.stats().running != 0); ++i)
      std::this_thread::sleep_for(10ms);
    EXPECT_EQ(s.stats().kv_blocks_used, 0);
    EXPECT_EQ(s.stats().running, 0);
  }
  oracle::Data data_;
  std::unique_ptr<Qwen3Model> model_;
};

TEST_F(SchedulerTest, SixteenConcurrentGreedyRequestsEqualEachAlone) {
  SchedulerOptions o;
  o.max_num_seqs = 16;
  o.block_tokens = 4;
  o.prefill_chunk = 8;  // prompts are prefilled in pieces next to running decodes
  Scheduler s(*model_, o);
  std::vector<RequestSpec> specs;
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (std::size_t i = 0; i < 16; ++i) {
    specs.push_back(request(i, static_cast<std::int64_t>(6 + i)));
    streams.push_back(s.submit(specs.back()));
  }
  std::int64_t generated = 0;
  for (std::size_t i = 0; i < 16; ++i) {
    const Outcome got = collect(*streams[i]);
    const GenerationResult want = alone(specs[i]);
    EXPECT_EQ(got.tokens, want.tokens) << "request " << i;
    ASSERT_EQ(got.logprobs.size(), want.logprobs.size());
    for (std::size_t t = 0; t < got.logprobs.size(); ++t) EXPECT_NEAR(got.logprobs[t], want.logprobs[t], 1e-5);
    EXPECT_EQ(got.finish, FinishReason::Length);
    const RequestStats st = streams[i]->stats();
    EXPECT_EQ(st.generated_tokens, specs[i].max_new_tokens);
    EXPECT_EQ(st.prompt_tokens, static_cast<std::int64_t>(specs[i].prompt.size()));
    EXPECT_LE(st.submitted, st.first_token);
    EXPECT_LE(st.first_token, st.finished);
    generated += st.generated_tokens;
  }
  expect_drained(s);
  EXPECT_EQ(s.stats().generated_tokens, static_cast<std::uint64_t>(generated));
  EXPECT_EQ(s.stats().preemptions, 0u);
  EXPECT_GT(s.stats().kv_blocks_total, 0);
}

TEST_F(SchedulerTest, StopTokensEndWithStop) {
  Scheduler s(*model_, {});
  RequestSpec r = request(0, 20);
  const GenerationResult want = alone(r);
  r.stop_tokens = {want.tokens[4]};
  const Outcome got = collect(*s.submit(r));
  const auto first = std::find(want.tokens.begin(), want.tokens.end(), want.tokens[4]) - want.tokens.begin();
  EXPECT_EQ(got.tokens, std::vector<std::int32_t>(want.tokens.begin(), want.tokens.begin() + first + 1));
  EXPECT_EQ(got.finish, FinishReason::Stop);
}

TEST_F(SchedulerTest, PreemptionUnderATinyBudgetKeepsTheTokens) {
  SchedulerOptions o;
  o.max_num_seqs = 4;
  o.block_tokens = 2;
  // 16 blocks of 2 tokens; each request grows to 7-14 + 20 tokens, so four cannot all run.
  o.kv_cache_bytes = 16 * static_cast<std::uint64_t>(model_->state_spec().kv_block_bytes(2));
  Scheduler s(*model_, o);
  std::vector<RequestSpec> specs;
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (std::size_t i = 0; i < 4; ++i) {
    specs.push_back(request(i, 20));
    streams.push_back(s.submit(specs.back()));
  }
  for (std::size_t i = 0; i < 4; ++i) EXPECT_EQ(collect(*streams[i]).tokens, alone(specs[i]).tokens) << i;
  EXPECT_GT(s.stats().preemptions, 0u);
  expect_drained(s);
}

TEST_F(SchedulerTest, FullQueueThrowsQueueFull) {
  ControlledGemm gate(model_->vocab_size());
  kernels::KernelSet k = kernels::reference_kernels();
  k.dense_gemm = &gate;
  model_->set_kernels(k);
  gate.set_open(false);
  SchedulerOptions o;
  o.max_num_seqs = 1;
  o.max_queue = 2;
  Scheduler s(*model_, o);
  auto a = s.submit(request(0, 4));
  gate.wait_entered();  // the scheduler thread is inside a's first forward
  auto b = s.submit(request(1, 4));
  auto c = s.submit(request(2, 4));
  EXPECT_THROW(s.submit(request(3, 4)), QueueFull);
  EXPECT_EQ(s.stats().waiting, 2);
  gate.set_open(true);
  for (auto* st : {a.get(), b.get(), c.get()}) EXPECT_EQ(collect(*st).tokens.size(), 4u);
  EXPECT_NO_THROW(collect(*s.submit(request(3, 4))));  // room again
}

TEST_F(SchedulerTest, CancelStopsTheSequenceAndFreesItsBlocks) {
  Scheduler s(*model_, {});
  auto stream = s.submit(request(1, 200));
  auto first = stream->next(10s);
  ASSERT_TRUE(first.has_value());
  EXPECT_EQ(first->kind, RequestEvent::Kind::Token);
  stream->cancel();
  stream->cancel();  // idempotent
  EXPECT_TRUE(stream->cancelled());
  const Outcome rest = collect(*stream);
  EXPECT_EQ(rest.finish, FinishReason::Cancelled);
  EXPECT_LT(rest.tokens.size(), 199u);
  expect_drained(s);
}

TEST_F(SchedulerTest, BadRequestsFailAtSubmitNamingTheField) {
  SchedulerOptions o;
  o.max_model_len = 64;
  o.block_tokens = 2;
  o.kv_cache_bytes = 8 * static_cast<std::uint64_t>(model_->state_spec().kv_block_bytes(2));
  Scheduler s(*model_, o);
  EXPECT_EQ(s.options().max_model_len, 64);
  RequestSpec r = request(0, 62);  // 3 prompt tokens
  testing::expect_error([&] { s.submit(r); }, {"max_new_tokens (62) = 65", "exceeds max_model_len 64"});
  r = request(0, 20);  // fits max_model_len but not the 8-block pool
  testing::expect_error([&] { s.submit(r); }, {"KV blocks", "whole state pool has 8"});
  r = request(0, 4);
  r.prompt.push_back(100000);
  testing::expect_error([&] { s.submit(r); }, {"id 100000, outside the model's vocabulary"});
  r = request(0, 4);
  r.prompt.clear();
  testing::expect_error([&] { s.submit(r); }, {"prompt is empty"});
  r = request(0, 0);
  testing::expect_error([&] { s.submit(r); }, {"max_new_tokens must be >= 1"});
  r = request(0, 4);
  r.top_logprobs = 21;
  testing::expect_error([&] { s.submit(r); }, {"top_logprobs"});
  r = request(0, 4);
  r.sampling.temperature = -1.0;
  testing::expect_error([&] { s.submit(r); }, {"temperature"});
  r = request(0, 4);
  r.sampling.repetition_penalty = 0.0;
  testing::expect_error([&] { s.submit(r); }, {"repetition-penalty"});
  EXPECT_EQ(s.stats().waiting, 0);

  o.max_model_len = 100000;
  testing::expect_error([&] { Scheduler(*model_, o); }, {"exceeds the model's max_position_embeddings 512"});
}

TEST_F(SchedulerTest, LogprobsOnlyWhenAsked) {
  Scheduler s(*model_, {});
  RequestSpec r = request(3, 4);
  const Outcome with = collect(*s.submit(r));
  r.logprobs = false;
  const Outcome without = collect(*s.submit(r));
  EXPECT_EQ(with.tokens, without.tokens);
  ASSERT_EQ(with.logprobs.size(), 4u);
  for (std::size_t t = 0; t < 4; ++t) {
    EXPECT_LT(with.logprobs[t], 0.0f);         // a real log-probability (the vocabulary has > 1 token)
    EXPECT_EQ(without.logprobs[t], 0.0f) << t;  // not computed
  }
}

TEST_F(SchedulerTest, TopLogprobsAndPenalties) {
  Scheduler s(*model_, {});
  RequestSpec r = request(2, 8);
  r.top_logprobs = 5;
  const Outcome got = collect(*s.submit(r));
  ASSERT_EQ(got.top.size(), 8u);
  for (std::size_t t = 0; t < got.top.size(); ++t) {
    ASSERT_EQ(got.top[t].size(), 5u);
    EXPECT_EQ(got.top[t][0].token, got.tokens[t]);  // greedy: the most likely
    EXPECT_NEAR(got.top[t][0].logprob, got.logprobs[t], 1e-6);
    for (std::size_t j = 1; j < 5; ++j) EXPECT_GE(got.top[t][j - 1].logprob, got.top[t][j].logprob);
  }
  // Penalties reach the sampler: the same tokens as alone, and not those without them.
  RequestSpec p = request(2, 16);
  p.sampling.frequency_penalty = 2.0;
  p.sampling.repetition_penalty = 1.3;
  const Outcome penalised = collect(*s.submit(p));
  EXPECT_EQ(penalised.tokens, alone(p).tokens);
  EXPECT_NE(penalised.tokens, alone(request(2, 16)).tokens);
}

TEST_F(SchedulerTest, NonFiniteLogitsFailOnlyThatRequest) {
  ControlledGemm gemm(model_->vocab_size());
  gemm.poison_call_ = 2;  // the third step: a's decode row 0 of a batch with b
  kernels::KernelSet k = kernels::reference_kernels();
  k.dense_gemm = &gemm;
  model_->set_kernels(k);
  gemm.set_open(false);
  Scheduler s(*model_, {});
  auto a = s.submit(request(0, 10));
  gemm.wait_entered();
  auto b = s.submit(request(5, 10));
  gemm.set_open(true);
  const Outcome bad = collect(*a);
  EXPECT_NE(bad.error.find("non-finite logits"), std::string::npos) << bad.error;
  EXPECT_NE(bad.error.find("1 NaN and 0 Inf of 256, the first at token id 0"), std::string::npos) << bad.error;
  EXPECT_FALSE(bad.finish.has_value());
  EXPECT_EQ(bad.tokens.size(), 2u);  // the tokens before the bad logits were delivered
  model_->set_kernels(kernels::reference_kernels());
  const Outcome good = collect(*b);
  EXPECT_EQ(good.tokens, alone(request(5, 10)).tokens);
  EXPECT_EQ(s.stats().nan_guard_events, 1u);
  expect_drained(s);
}

TEST_F(SchedulerTest, DrainingShutdownFinishesEveryRequest) {
  Scheduler s(*model_, {});
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (std::size_t i = 0; i < 4; ++i) streams.push_back(s.submit(request(i, 10)));
  s.shutdown(true);
  for (std::size_t i = 0; i < 4; ++i) {
    const Outcome o = collect(*streams[i]);
    EXPECT_EQ(o.tokens, alone(request(i, 10)).tokens);
    EXPECT_EQ(o.finish, FinishReason::Length);
  }
  testing::expect_error([&] { s.submit(request(0, 4)); }, {"shutting down"});
  s.shutdown(true);  // idempotent
}

TEST_F(SchedulerTest, ShutdownWithoutDrainCancels) {
  ControlledGemm gate(model_->vocab_size());
  kernels::KernelSet k = kernels::reference_kernels();
  k.dense_gemm = &gate;
  model_->set_kernels(k);
  gate.set_open(false);
  Scheduler s(*model_, {});
  auto a = s.submit(request(0, 100));
  gate.wait_entered();
  auto b = s.submit(request(1, 100));
  std::thread stopper([&] { s.shutdown(false); });
  std::this_thread::sleep_for(20ms);
  gate.set_open(true);
  stopper.join();
  for (auto* st : {a.get(), b.get()}) {
    const Outcome o = collect(*st);
    EXPECT_EQ(o.finish, FinishReason::Cancelled);
    EXPECT_LT(o.tokens.size(), 100u);
  }
}

}  // namespace
}  // namespace fp4serve::engine
