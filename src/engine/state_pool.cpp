#include "engine/state_pool.h"

#include <algorithm>
#include <cstring>

#include "util/error.h"

namespace fp4serve::engine {

namespace {

constexpr std::uint64_t kSlabBytes = 64ull << 20;  // memory is committed in steps of about this much

std::size_t sz(std::int64_t v) { return static_cast<std::size_t>(v); }

}  // namespace

const SequenceState& PooledSequence::state() {
  view_.past = past_;
  view_.kv_blocks = blocks_;
  view_.conv_state = conv_;
  view_.recurrent_state = recurrent_;
  return view_;
}

StatePool::StatePool(const StateSpec& spec, std::int64_t block_tokens, std::uint64_t budget_bytes,
                     std::int64_t max_sequences)
    : spec_(spec), block_tokens_(block_tokens), max_sequences_(max_sequences) {
  if (block_tokens_ < 1) fail("KV block size must be >= 1 token, got ", block_tokens_);
  if (max_sequences_ < 1) fail("the state pool must allow at least one sequence, got ", max_sequences_);
  const std::uint64_t fixed = fixed_state_bytes() * static_cast<std::uint64_t>(max_sequences_);
  if (fixed > budget_bytes) {
    fail("the state memory budget of ", budget_bytes, " bytes cannot hold the recurrent state of ", max_sequences_,
         " sequences (", fixed_state_bytes(), " bytes each); raise the budget or lower the sequence count");
  }
  if (block_bytes() > 0) {
    total_blocks_ = static_cast<std::int64_t>((budget_bytes - fixed) / block_bytes());
    if (total_blocks_ < 1) {
      fail("the state memory budget of ", budget_bytes, " bytes holds no KV block of ", block_tokens_, " tokens (",
           block_bytes(), " bytes)");
    }
    slab_blocks_ = std::clamp<std::int64_t>(static_cast<std::int64_t>(kSlabBytes / block_bytes()), 1, total_blocks_);
  }
  slots_.resize(fixed_state_bytes() > 0 ? sz(max_sequences_) : 0);
  for (std::int64_t i = static_cast<std::int64_t>(slots_.size()) - 1; i >= 0; --i) free_slots_.push_back(i);
}

StatePool::~StatePool() = default;

std::uint64_t StatePool::sequence_bytes(const StateSpec& spec, std::int64_t block_tokens, std::int64_t tokens) {
  const std::int64_t blocks = (std::max<std::int64_t>(tokens, 0) + block_tokens - 1) / std::max<std::int64_t>(block_tokens, 1);
  return static_cast<std::uint64_t>(blocks * spec.kv_block_bytes(block_tokens)) +
         static_cast<std::uint64_t>(spec.fixed_state_floats()) * sizeof(float);
}

std::uint64_t StatePool::block_bytes() const { return static_cast<std::uint64_t>(spec_.kv_block_bytes(block_tokens_)); }

std::uint64_t StatePool::fixed_state_bytes() const {
  return static_cast<std::uint64_t>(spec_.fixed_state_floats()) * sizeof(float);
}

std::int64_t StatePool::blocks_for(std::int64_t tokens) const {
  if (block_bytes() == 0 || tokens <= 0) return 0;
  return (tokens + block_tokens_ - 1) / block_tokens_;
}

std::uint64_t StatePool::committed_bytes() const {
  std::uint64_t slots = 0;
  for (const auto& s : slots_) slots += s ? fixed_state_bytes() : 0;
  return static_cast<std::uint64_t>(committed_blocks_) * block_bytes() + slots;
}

bool StatePool::can_admit(std::int64_t tokens) const {
  return open_sequences_ < max_sequences_ && blocks_for(tokens) <= free_blocks();
}

std::byte* StatePool::take_block() {
  if (free_blocks_.empty()) {
    // Commit the next slab (uninitialised: positions are written before attention reads them).
    const std::int64_t n = std::min(slab_blocks_, total_blocks_ - committed_blocks_);
    const auto bytes = sz(spec_.kv_block_bytes(block_tokens_));
    slabs_.emplace_back(sz(n) * bytes, "KV cache slab");
    auto* slab = static_cast<std::byte*>(slabs_.back().data());
    for (std::int64_t b = n - 1; b >= 0; --b) free_blocks_.push_back(slab + sz(b) * bytes);
    committed_blocks_ += n;
  }
  std::byte* block = free_blocks_.back();
  free_blocks_.pop_back();
  ++used_blocks_;
  return block;
}

bool StatePool::open(PooledSequence& seq) {
  if (seq.open_) fail("state pool: the sequence is already open");
  if (open_sequences_ >= max_sequences_) return false;
  seq.past_ = 0;
  seq.blocks_.clear();
  seq.conv_.clear();
  seq.recurrent_.clear();
  if (!slots_.empty()) {
    const std::int64_t slot = free_slots_.back();
    free_slots_.pop_back();
    auto& mem = slots_[sz(slot)];
    const auto floats = sz(spec_.fixed_state_floats());
    if (!mem) mem = std::make_unique_for_overwrite<float[]>(floats);
    std::memset(mem.get(), 0, floats * sizeof(float));  // a new sequence starts from zero state
    seq.slot_ = slot;
    // Per layer: the conv state, then the recurrent state.
    float* p = mem.get();
    for (std::int64_t l = 0; l < spec_.linear_layers; ++l) {
      seq.conv_.push_back(p);
      p += spec_.conv_state_floats;
      seq.recurrent_.push_back(p);
      p += spec_.recurrent_state_floats;
    }
  }
  seq.view_.block_tokens = block_tokens_;
  seq.view_.kv_dtype = spec_.kv_dtype;
  seq.open_ = true;
  ++open_sequences_;
  return true;
}

bool StatePool::reserve(PooledSequence& seq, std::int64_t tokens) {
  if (!seq.open_) fail("state pool: reserve on a sequence that is not open");
  const std::int64_t need = blocks_for(tokens) - seq.blocks();
  if (need <= 0) return true;
  if (need > free_blocks()) return false;
  for (std::int64_t i = 0; i < need; ++i) seq.blocks_.push_back(take_block());
  return true;
}

void StatePool::truncate(PooledSequence& seq, std::int64_t tokens) {
  if (!seq.open_) fail("state pool: truncate on a sequence that is not open");
  if (tokens >= seq.past_) return;
  if (spec_.linear_layers > 0 && tokens > 0)
    fail("state pool: a sequence with recurrent state cannot be cut back to ", tokens, " of its ", seq.past_,
         " tokens");
  seq.past_ = std::max<std::int64_t>(tokens, 0);
  const std::int64_t keep = blocks_for(seq.past_);
  while (seq.blocks() > keep) {
    free_blocks_.push_back(seq.blocks_.back());
    seq.blocks_.pop_back();
    --used_blocks_;
  }
  if (seq.past_ == 0 && seq.slot_ >= 0)
    std::memset(slots_[sz(seq.slot_)].get(), 0, sz(spec_.fixed_state_floats()) * sizeof(float));
}

void StatePool::release(PooledSequence& seq) {
  if (!seq.open_) return;
  for (std::byte* b : seq.blocks_) free_blocks_.push_back(b);
  used_blocks_ -= seq.blocks();
  seq.blocks_.clear();
  if (seq.slot_ >= 0) free_slots_.push_back(seq.slot_);
  seq.slot_ = -1;
  seq.conv_.clear();
  seq.recurrent_.clear();
  seq.past_ = 0;
  seq.open_ = false;
  --open_sequences_;
}

}  // namespace fp4serve::engine
