#pragma once
// The memory every running sequence's model state lives in, under one byte budget:
//   - KV blocks of `block_tokens` tokens (all attention layers' K and V of those positions, laid
//     out as model/causal_lm.h says), handed out one at a time as a sequence grows, so sequences
//     of any length share the budget without reserving their maximum length;
//   - for hybrid models, one fixed-size slot per sequence (conv + recurrent state of every
//     linear-attention layer), zeroed when taken. Slots are set aside for `max_sequences`
//     sequences first; the rest of the budget is KV blocks.
// Memory is committed in slabs as blocks are first needed, so a large budget costs nothing until
// it is used. Not thread-safe: one owner (a Session or the scheduler thread) drives it.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "model/causal_lm.h"
#include "util/huge_pages.h"

namespace fp4serve::engine {

class StatePool;

// One sequence's share of a pool: its KV blocks, its fixed state and how many of its tokens
// have been computed. Empty until StatePool::open(); give it back with StatePool::release().
class PooledSequence {
 public:
  std::int64_t past() const { return past_; }
  void advance(std::int64_t tokens) { past_ += tokens; }
  bool is_open() const { return open_; }
  std::int64_t blocks() const { return static_cast<std::int64_t>(blocks_.size()); }
  // The view forward() takes; valid until the sequence's blocks change.
  const SequenceState& state();

 private:
  friend class StatePool;
  bool open_ = false;
  std::int64_t past_ = 0;
  std::int64_t slot_ = -1;
  std::vector<std::byte*> blocks_;
  std::vector<float*> conv_, recurrent_;
  SequenceState view_;
};

class StatePool {
 public:
  // Throws Error when the budget cannot hold the fixed state of `max_sequences` sequences plus
  // one KV block.
  StatePool(const StateSpec& spec, std::int64_t block_tokens, std::uint64_t budget_bytes, std::int64_t max_sequences);
  ~StatePool();
  // The budget one sequence of `tokens` positions needs: its KV blocks plus its fixed state.
  static std::uint64_t sequence_bytes(const StateSpec& spec, std::int64_t block_tokens, std::int64_t tokens);
  StatePool(const StatePool&) = delete;
  StatePool& operator=(const StatePool&) = delete;

  const StateSpec& spec() const { return spec_; }
  std::int64_t block_tokens() const { return block_tokens_; }
  std::uint64_t block_bytes() const;
  std::uint64_t fixed_state_bytes() const;  // per sequence; 0 without linear-attention layers
  // KV blocks that `tokens` positions occupy (0 for a model without attention layers).
  std::int64_t blocks_for(std::int64_t tokens) const;

  std::int64_t total_blocks() const { return total_blocks_; }
  std::int64_t used_blocks() const { return used_blocks_; }
  std::int64_t free_blocks() const { return total_blocks_ - used_blocks_; }
  std::int64_t max_sequences() const { return max_sequences_; }
  std::int64_t open_sequences() const { return open_sequences_; }
  std::uint64_t committed_bytes() const;  // memory actually allocated so far

  // Whether a sequence could ever hold `tokens` positions (the whole pool free for it).
  bool could_ever_fit(std::int64_t tokens) const { return blocks_for(tokens) <= total_blocks_; }
  // Whether a new sequence of `tokens` positions can be opened and reserved right now.
  bool can_admit(std::int64_t tokens) const;

  // Starts a sequence: a zeroed fixed-state slot (hybrid models), no blocks, past 0. False when
  // max_sequences are open.
  bool open(PooledSequence& seq);
  // Grows the sequence's blocks to cover `tokens` positions. False, taking nothing, when too
  // few blocks are free.
  bool reserve(PooledSequence& seq, std::int64_t tokens);
  // Forgets positions from `tokens` on and frees the blocks no longer needed. Only for models
  // without fixed state (a recurrent state cannot be rewound): an Error otherwise.
  void truncate(PooledSequence& seq, std::int64_t tokens);
  // Returns everything the sequence holds; it is empty (not open) afterwards. Idempotent.
  void release(PooledSequence& seq);

 private:
  std::byte* take_block();

  StateSpec spec_;
  std::int64_t block_tokens_;
  std::int64_t max_sequences_;
  std::int64_t total_blocks_ = 0;
  std::int64_t used_blocks_ = 0;
  std::int64_t open_sequences_ = 0;
  std::int64_t slab_blocks_ = 1;
  std::int64_t committed_blocks_ = 0;
  // 2 MiB pages: decode over a long cache streams every cached row once per token, and through
  // 4 KiB pages this VM's TLB walks set the pace (docs/perf.md, session 13).
  std::vector<HugePageBuffer> slabs_;
  std::vector<std::byte*> free_blocks_;
  std::vector<std::unique_ptr<float[]>> slots_;  // fixed state, allocated on first use
  std::vector<std::int64_t> free_slots_;
};

}  // namespace fp4serve::engine
