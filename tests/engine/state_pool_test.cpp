// The state pool: the budget in blocks and fixed-state slots, reserve/truncate/release
// bookkeeping, zeroed recurrent state, and the errors for budgets that hold nothing.
#include "engine/state_pool.h"

#include <gtest/gtest.h>

#include "common/expect_error.h"

namespace fp4serve::engine {
namespace {

StateSpec attention_only() {
  StateSpec s;
  s.attention_layers = 2;
  s.kv_row_elements = 8;  // a block of 4 tokens: 2 * 2 * 4 * 8 floats = 512 bytes
  return s;
}

StateSpec hybrid() {
  StateSpec s = attention_only();
  s.linear_layers = 3;
  s.conv_state_floats = 5;
  s.recurrent_state_floats = 11;  // 3 * 16 floats = 192 bytes per sequence
  return s;
}

TEST(StatePool, BudgetBecomesBlocks) {
  StatePool pool(attention_only(), 4, 512 * 10 + 100, 8);
  EXPECT_EQ(pool.block_bytes(), 512u);
  EXPECT_EQ(pool.total_blocks(), 10);
  EXPECT_EQ(pool.blocks_for(0), 0);
  EXPECT_EQ(pool.blocks_for(1), 1);
  EXPECT_EQ(pool.blocks_for(4), 1);
  EXPECT_EQ(pool.blocks_for(5), 2);
  EXPECT_TRUE(pool.could_ever_fit(40));
  EXPECT_FALSE(pool.could_ever_fit(41));
  EXPECT_EQ(pool.committed_bytes(), 0u);  // nothing allocated before it is needed
}

TEST(StatePool, SixteenBitCacheHoldsTwiceTheBlocks) {
  StateSpec spec = attention_only();
  spec.kv_dtype = DType::F16;
  StatePool pool(spec, 4, 512 * 10 + 100, 8);
  EXPECT_EQ(pool.block_bytes(), 256u);
  EXPECT_EQ(pool.total_blocks(), 20);
  EXPECT_EQ(StatePool::sequence_bytes(spec, 4, 9), 3 * 256u);
  PooledSequence seq;
  ASSERT_TRUE(pool.open(seq));
  ASSERT_TRUE(pool.reserve(seq, 9));
  EXPECT_EQ(seq.state().kv_dtype, DType::F16);  // the model checks it against what it writes
  EXPECT_EQ(pool.committed_bytes(), 20 * 256u);  // one slab: all 20 blocks
  pool.release(seq);
}

TEST(StatePool, SequenceBytesIsWhatOneSequenceTakes) {
  EXPECT_EQ(StatePool::sequence_bytes(attention_only(), 4, 0), 0u);
  EXPECT_EQ(StatePool::sequence_bytes(attention_only(), 4, 5), 2u * 512u);
  EXPECT_EQ(StatePool::sequence_bytes(hybrid(), 4, 8), 2u * 512u + 192u);
  // A pool with exactly that budget admits that sequence, and one token more does not fit.
  StatePool pool(hybrid(), 4, StatePool::sequence_bytes(hybrid(), 4, 8), 1);
  EXPECT_TRUE(pool.could_ever_fit(8));
  EXPECT_FALSE(pool.could_ever_fit(9));
}

TEST(StatePool, ReserveTruncateRelease) {
  StatePool pool(attention_only(), 4, 512 * 10, 2);
  PooledSequence a, b, c;
  ASSERT_TRUE(pool.open(a));
  ASSERT_TRUE(pool.open(b));
  EXPECT_FALSE(pool.open(c));  // max_sequences
  EXPECT_TRUE(pool.reserve(a, 17));  // 5 blocks
  EXPECT_EQ(a.blocks(), 5);
  EXPECT_EQ(pool.used_blocks(), 5);
  EXPECT_FALSE(pool.reserve(b, 24));  // 6 > 5 free: nothing taken
  EXPECT_EQ(b.blocks(), 0);
  EXPECT_EQ(pool.used_blocks(), 5);
  EXPECT_TRUE(pool.reserve(b, 20));
  EXPECT_EQ(pool.free_blocks(), 0);
  EXPECT_FALSE(pool.can_admit(1));

  // Blocks are distinct memory, and the view covers them.
  a.advance(17);
  const SequenceState& st = a.state();
  EXPECT_EQ(st.past, 17);
  EXPECT_EQ(st.block_tokens, 4);
  ASSERT_EQ(st.kv_blocks.size(), 5u);
  for (std::size_t i = 0; i < 5; ++i)
    for (std::size_t j = 0; j < 5; ++j)
      if (i != j) {
        EXPECT_NE(st.kv_blocks[i], st.kv_blocks[j]);
      }
  for (std::byte* blk : b.state().kv_blocks)
    for (std::byte* other : st.kv_blocks) EXPECT_NE(blk, other);

  pool.truncate(a, 6);  // keeps 2 blocks
  EXPECT_EQ(a.past(), 6);
  EXPECT_EQ(a.blocks(), 2);
  EXPECT_EQ(pool.used_blocks(), 7);
  pool.release(b);
  pool.release(b);  // idempotent
  EXPECT_FALSE(b.is_open());
  EXPECT_EQ(pool.used_blocks(), 2);
  EXPECT_EQ(pool.open_sequences(), 1);
  EXPECT_TRUE(pool.can_admit(32));
  EXPECT_FALSE(pool.can_admit(33));
  pool.release(a);
  EXPECT_EQ(pool.used_blocks(), 0);
  EXPECT_GT(pool.committed_bytes(), 0u);
}

TEST(StatePool, SlabsStartOnTwoMiBPages) {
  // Slabs are mapped for 2 MiB pages, so a slab's first block (the first one handed out) sits on
  // a 2 MiB boundary; heap memory from new[] would be 16-byte aligned.
  StatePool pool(attention_only(), 4, 512 * 10, 1);
  PooledSequence a;
  ASSERT_TRUE(pool.open(a));
  ASSERT_TRUE(pool.reserve(a, 4));
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(a.state().kv_blocks[0]) % (std::uintptr_t{2} << 20), 0u);
}

TEST(StatePool, HybridStateIsZeroedAndCannotBeRewound) {
  StatePool pool(hybrid(), 4, 2 * 192 + 512 * 3, 2);
  EXPECT_EQ(pool.fixed_state_bytes(), 192u);
  EXPECT_EQ(pool.total_blocks(), 3);
  PooledSequence a;
  ASSERT_TRUE(pool.open(a));
  const SequenceState& st = a.state();
  ASSERT_EQ(st.conv_state.size(), 3u);
  ASSERT_EQ(st.recurrent_state.size(), 3u);
  for (std::size_t l = 0; l < 3; ++l) {
    for (int i = 0; i < 5; ++i) EXPECT_EQ(st.conv_state[l][i], 0.0f);
    for (int i = 0; i < 11; ++i) EXPECT_EQ(st.recurrent_state[l][i], 0.0f);
    st.recurrent_state[l][3] = 42.0f;  // the sequence runs
  }
  ASSERT_TRUE(pool.reserve(a, 5));
  a.advance(5);
  testing::expect_error([&] { pool.truncate(a, 2); }, {"cannot be cut back to 2 of its 5 tokens"});
  pool.truncate(a, 0);  // starting over is fine and zeroes the state
  EXPECT_EQ(a.state().recurrent_state[1][3], 0.0f);
  pool.release(a);
  PooledSequence b;
  ASSERT_TRUE(pool.open(b));  // the slot is re-used, zeroed again
  for (std::size_t l = 0; l < 3; ++l) EXPECT_EQ(b.state().recurrent_state[l][3], 0.0f);
}

TEST(StatePool, BudgetsThatHoldNothingAreErrors) {
  testing::expect_error([] { StatePool(attention_only(), 4, 511, 1); }, {"holds no KV block of 4 tokens (512 bytes)"});
  testing::expect_error([] { StatePool(hybrid(), 4, 192 * 4 - 1, 4); }, {"recurrent state of 4 sequences"});
  testing::expect_error([] { StatePool(attention_only(), 0, 1 << 20, 1); }, {"block size"});
}

}  // namespace
}  // namespace fp4serve::engine
