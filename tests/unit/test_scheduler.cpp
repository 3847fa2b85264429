// Scheduler policies, on fake sampled tokens (no model): decodes first, chunked prefill within
// the token budget, max_num_seqs, preemption by recompute, prefix-cache hits, stop conditions,
// priorities, aborts, and exact block accounting under random runs.
#include "tachyon/engine/scheduler.h"

#include <gtest/gtest.h>

#include <memory>
#include <numeric>
#include <random>

namespace tachyon::engine {
using namespace tachyon::core;
namespace {

class SchedulerTest : public ::testing::Test {
 protected:
  void make(SchedulerConfig config, int32_t num_blocks, int32_t block_size = 4, bool prefix_caching = true) {
    kv_ = std::make_unique<KvCacheManager>(num_blocks, block_size, prefix_caching);
    scheduler_ = std::make_unique<Scheduler>(config, *kv_);
  }

  Sequence* add(int prompt_len, SamplingParams params = {}, int first_token = 0) {
    auto s = std::make_unique<Sequence>();
    s->id = static_cast<int64_t>(sequences_.size());
    s->arrival = s->id;
    s->params = std::make_shared<const SamplingParams>(params);
    s->tokens.resize(static_cast<size_t>(prompt_len));
    std::iota(s->tokens.begin(), s->tokens.end(), first_token);
    s->num_prompt_tokens = prompt_len;
    scheduler_->add(s.get());
    sequences_.push_back(std::move(s));
    return sequences_.back().get();
  }

  // Runs one step, "sampling" token 7 (or `token`) for every sampled sequence.
  StepPlan step(int32_t token = 7) {
    StepPlan plan = scheduler_->schedule();
    std::vector<int32_t> sampled(plan.logits_rows.size(), token);
    scheduler_->update(plan, sampled);
    check();
    return plan;
  }

  void check() {
    std::vector<const std::vector<int32_t>*> tables;
    for (const auto& s : sequences_) {
      if (!s->finished()) tables.push_back(&s->block_table);
    }
    kv_->check_invariants(tables);
  }

  const ScheduledSequence* find(const StepPlan& plan, const Sequence* s) {
    for (const auto& e : plan.sequences) {
      if (e.sequence_id == s->id) return &e;
    }
    return nullptr;
  }

  std::unique_ptr<KvCacheManager> kv_;
  std::unique_ptr<Scheduler> scheduler_;
  std::vector<std::unique_ptr<Sequence>> sequences_;
};

TEST_F(SchedulerTest, PrefillThenDecodeWithPlanArrays) {
  make({.max_num_batched_tokens = 64}, 16);
  SamplingParams p;
  p.max_tokens = 3;
  Sequence* a = add(6, p);
  StepPlan plan = step();
  ASSERT_EQ(plan.sequences.size(), 1u);
  EXPECT_EQ(plan.num_tokens(), 6);
  EXPECT_EQ(plan.positions, (std::vector<int64_t>{0, 1, 2, 3, 4, 5}));
  EXPECT_EQ(plan.logits_rows, (std::vector<int64_t>{5}));
  const auto& e = plan.sequences[0];
  ASSERT_EQ(e.block_table.size(), 2u);
  EXPECT_EQ(plan.slot_mapping[5], e.block_table[1] * 4 + 1);
  EXPECT_EQ(a->num_output_tokens(), 1);
  plan = step();
  EXPECT_EQ(plan.token_ids, (std::vector<int32_t>{7}));
  EXPECT_EQ(plan.positions, (std::vector<int64_t>{6}));
  step();
  EXPECT_TRUE(a->finished());
  EXPECT_EQ(a->finish_reason, FinishReason::kLength);
  EXPECT_EQ(kv_->num_free_blocks(), 16);
}

TEST_F(SchedulerTest, DecodesFirstThenChunkedPrefillFillsTheBudget) {
  make({.max_num_batched_tokens = 8}, 64);
  Sequence* a = add(3);
  step();  // a prefilled
  Sequence* b = add(20);
  StepPlan plan = step();
  ASSERT_EQ(plan.sequences.size(), 2u);
  EXPECT_EQ(plan.sequences[0].sequence_id, a->id);  // the decode comes first
  EXPECT_EQ(plan.sequences[0].num_tokens, 1);
  EXPECT_EQ(plan.sequences[1].num_tokens, 7);  // the rest of the budget
  EXPECT_FALSE(plan.sequences[1].sample);
  EXPECT_EQ(b->num_computed_tokens, 7);
  // A chunk names the prompt token after it (an MTP module on the runner embeds it); a slice
  // that reaches its last known token names none.
  EXPECT_EQ(plan.sequences[1].next_token, b->tokens[7]);
  EXPECT_EQ(plan.sequences[0].next_token, -1);
  plan = step();
  EXPECT_EQ(find(plan, b)->num_tokens, 7);
  EXPECT_EQ(find(plan, b)->next_token, b->tokens[14]);
  plan = step();
  EXPECT_EQ(find(plan, b)->num_tokens, 6);
  EXPECT_TRUE(find(plan, b)->sample);
  EXPECT_EQ(find(plan, b)->next_token, -1);
  EXPECT_EQ(b->num_output_tokens(), 1);
}

TEST_F(SchedulerTest, WithoutChunkingLongPromptsWaitForAWholeBudget) {
  make({.max_num_batched_tokens = 16, .max_model_len = 16, .enable_chunked_prefill = false}, 64);
  add(10);
  Sequence* b = add(10);
  StepPlan plan = step();
  EXPECT_EQ(plan.sequences.size(), 1u);  // b does not fit next to a and is not split
  EXPECT_EQ(b->num_computed_tokens, 0);
  plan = step();
  EXPECT_EQ(plan.sequences.size(), 2u);  // a decodes, b prefills whole
  EXPECT_EQ(b->num_computed_tokens, 10);
}

TEST_F(SchedulerTest, MaxNumSeqs) {
  make({.max_num_batched_tokens = 100, .max_num_seqs = 2}, 64);
  add(2);
  add(2);
  Sequence* c = add(2);
  EXPECT_EQ(step().sequences.size(), 2u);
  EXPECT_EQ(c->status, SequenceStatus::kWaiting);
}

TEST_F(SchedulerTest, PreemptsLatestArrivalAndRecomputes) {
  make({.max_num_batched_tokens = 100}, 4, 4);  // 16 token slots
  SamplingParams p;
  p.max_tokens = 20;
  Sequence* a = add(7, p);
  Sequence* b = add(7, p, 100);
  step();  // both prefilled: 2 blocks each, all 4 blocks used
  EXPECT_EQ(kv_->num_free_blocks(), 0);
  step();  // both decode at position 7 (still in block 2)
  StepPlan plan = step();  // a needs a third block: b (later arrival) is preempted
  EXPECT_EQ(plan.preempted, (std::vector<int64_t>{b->id}));
  EXPECT_EQ(b->status, SequenceStatus::kWaiting);
  EXPECT_EQ(b->num_computed_tokens, 0);
  EXPECT_EQ(b->num_tokens(), 9);  // its tokens are kept for the recompute
  EXPECT_EQ(b->num_preemptions, 1);
  EXPECT_EQ(a->num_output_tokens(), 3);
}

TEST_F(SchedulerTest, PrefixHitComputesOnlyNewTokens) {
  make({.max_num_batched_tokens = 100}, 32, 4);
  SamplingParams p;
  p.max_tokens = 1;
  Sequence* a = add(10, p);
  step();
  EXPECT_TRUE(a->finished());
  Sequence* b = add(13, p);  // same first 10 tokens (iota), 3 more
  StepPlan plan = step();
  EXPECT_EQ(b->num_prefix_hit_tokens, 8);  // two full blocks of a
  EXPECT_EQ(find(plan, b)->num_tokens, 5);
  EXPECT_EQ(find(plan, b)->num_computed, 8);
}

TEST_F(SchedulerTest, StopConditions) {
  make({.max_num_batched_tokens = 100, .eos_token_id = 2}, 64);
  SamplingParams eos;
  Sequence* a = add(3, eos);
  step(2);
  EXPECT_EQ(a->finish_reason, FinishReason::kStop);
  EXPECT_EQ(a->stop_token, 2);

  SamplingParams min_tokens;
  min_tokens.min_tokens = 2;
  Sequence* b = add(3, min_tokens);
  step(2);
  EXPECT_FALSE(b->finished());  // eos before min_tokens does not stop
  step(2);
  EXPECT_EQ(b->finish_reason, FinishReason::kStop);

  SamplingParams ignore;
  ignore.ignore_eos = true;
  ignore.max_tokens = 2;
  Sequence* c = add(3, ignore);
  step(2);
  EXPECT_FALSE(c->finished());
  step(2);
  EXPECT_EQ(c->finish_reason, FinishReason::kLength);

  SamplingParams stop_ids;
  stop_ids.stop_token_ids = {9};
  Sequence* d = add(3, stop_ids);
  step(9);
  EXPECT_EQ(d->finish_reason, FinishReason::kStop);
  EXPECT_EQ(d->stop_token, 9);
}

TEST_F(SchedulerTest, StopsAtMaxModelLen) {
  make({.max_num_batched_tokens = 100, .max_model_len = 6}, 64);
  SamplingParams p;
  p.max_tokens = 100;
  Sequence* a = add(4, p);
  step();
  step();
  EXPECT_EQ(a->finish_reason, FinishReason::kLength);
  EXPECT_EQ(a->num_tokens(), 6);
}

TEST_F(SchedulerTest, PriorityOrdersTheWaitingQueue) {
  make({.max_num_batched_tokens = 4, .policy = SchedulingPolicy::kPriority}, 64);
  SamplingParams low, high;
  low.priority = 5;
  high.priority = -1;
  Sequence* first = add(4, low);
  Sequence* urgent = add(4, high);
  StepPlan plan = step();
  ASSERT_EQ(plan.sequences.size(), 1u);
  EXPECT_EQ(plan.sequences[0].sequence_id, urgent->id);
  EXPECT_EQ(first->status, SequenceStatus::kWaiting);
}

TEST_F(SchedulerTest, AbortWaitingPrefillingAndDecodingFreesEverything) {
  make({.max_num_batched_tokens = 6}, 64);
  Sequence* decoding = add(3);
  step();
  Sequence* prefilling = add(20);
  Sequence* waiting = add(5);
  step();
  EXPECT_GT(prefilling->num_computed_tokens, 0);
  EXPECT_LT(prefilling->num_computed_tokens, 20);
  EXPECT_EQ(waiting->status, SequenceStatus::kWaiting);
  for (Sequence* s : {decoding, prefilling, waiting}) scheduler_->abort(s);
  for (Sequence* s : {decoding, prefilling, waiting}) EXPECT_EQ(s->finish_reason, FinishReason::kAbort);
  check();
  EXPECT_EQ(kv_->num_free_blocks(), 64);
  EXPECT_FALSE(scheduler_->has_work());
}

TEST_F(SchedulerTest, RandomRunsKeepExactAccounting) {
  for (int trial = 0; trial < 300; ++trial) {
    std::mt19937 rng(static_cast<uint32_t>(trial));
    sequences_.clear();
    SchedulerConfig config;
    config.max_num_batched_tokens = 4 + static_cast<int64_t>(rng() % 40);
    config.max_num_seqs = 1 + static_cast<int64_t>(rng() % 8);
    config.eos_token_id = 3;
    const int32_t num_blocks = 8 + static_cast<int32_t>(rng() % 24);
    const int32_t block_size = 1 + static_cast<int32_t>(rng() % 6);
    // As the engine requires: one sequence of max_model_len tokens always fits the cache.
    config.max_model_len = std::min<int64_t>(64, num_blocks * block_size);
    make(config, num_blocks, block_size, rng() % 2);
    for (int op = 0; op < 80; ++op) {
      if (rng() % 3 == 0) {
        SamplingParams p;
        p.max_tokens = 1 + static_cast<int32_t>(rng() % 10);
        const int prompt = 1 + static_cast<int>(rng() % std::min<int64_t>(30, config.max_model_len - 1));
        add(prompt, p, static_cast<int>(rng() % 3) * 5);
      }
      if (rng() % 7 == 0 && !sequences_.empty()) scheduler_->abort(sequences_[rng() % sequences_.size()].get());
      ASSERT_NO_THROW(step(static_cast<int32_t>(rng() % 5))) << "trial " << trial << " op " << op;
    }
    for (int guard = 0; scheduler_->has_work() && guard < 2000; ++guard) step(static_cast<int32_t>(rng() % 5));
    EXPECT_FALSE(scheduler_->has_work()) << "trial " << trial << " never drained";
    EXPECT_EQ(kv_->num_free_blocks(), kv_->num_blocks()) << "trial " << trial;
  }
}

}  // namespace
}  // namespace tachyon::engine
