// The fair scheduling policy on fake sampled tokens (no model): one client's long prompts, many
// prompts or n-fold sequences cannot hold another client's short request off; each scenario runs
// under FCFS too, to show the lock-out the policy removes. Shares are bounded by the clients with
// work, preemptions for fairness never alternate between two clients, and random runs keep the
// exact block accounting and drain.
#include <gtest/gtest.h>

#include <memory>
#include <numeric>
#include <random>

#include "tachyon/engine/scheduler.h"

namespace tachyon::engine {
using namespace tachyon::core;
namespace {

class FairSchedulerTest : public ::testing::Test {
 protected:
  void make(SchedulerConfig config, int32_t num_blocks, int32_t block_size = 4) {
    kv_ = std::make_unique<KvCacheManager>(num_blocks, block_size, /*prefix_caching=*/true);
    scheduler_ = std::make_unique<Scheduler>(config, *kv_);
  }

  // A sequence of `client` (0: a client of its own) with a prompt of distinct tokens.
  Sequence* add(int prompt_len, uint64_t client, int32_t max_tokens = 1000, int32_t priority = 0) {
    SamplingParams params;
    params.client = client;
    params.priority = priority;
    params.max_tokens = max_tokens;
    params.ignore_eos = true;
    auto s = std::make_unique<Sequence>();
    s->id = static_cast<int64_t>(sequences_.size());
    s->request_id = s->id;
    s->arrival = s->id;
    s->params = std::make_shared<const SamplingParams>(params);
    s->tokens.resize(static_cast<size_t>(prompt_len));
    std::iota(s->tokens.begin(), s->tokens.end(), static_cast<int32_t>(s->id) * 100000);
    s->num_prompt_tokens = prompt_len;
    scheduler_->add(s.get());
    sequences_.push_back(std::move(s));
    return sequences_.back().get();
  }

  StepPlan step() {
    StepPlan plan = scheduler_->schedule();
    std::vector<int32_t> sampled(plan.logits_rows.size(), 7);
    scheduler_->update(plan, sampled);
    std::vector<const std::vector<int32_t>*> tables;
    for (const auto& s : sequences_) {
      if (!s->finished()) tables.push_back(&s->block_table);
    }
    kv_->check_invariants(tables);
    preemptions_ += static_cast<int64_t>(plan.preempted.size());
    return plan;
  }

  // Steps until `s` has its first output token; the number of steps taken (cap + 1: never).
  int steps_to_first_token(const Sequence* s, int cap) {
    for (int i = 1; i <= cap; ++i) {
      step();
      if (s->num_output_tokens() > 0) return i;
    }
    return cap + 1;
  }

  std::unique_ptr<KvCacheManager> kv_;
  std::unique_ptr<Scheduler> scheduler_;
  std::vector<std::unique_ptr<Sequence>> sequences_;
  int64_t preemptions_ = 0;
};

// Six 400-token prompts of one client, then a 5-token prompt of another: FCFS computes all six
// prompts first (75 steps of 32 tokens); fair serves the short one in the next step (a newcomer
// enters level with the least served client, and among equals one that waits goes first).
TEST_F(FairSchedulerTest, ManyLongPromptsOfOneClientDoNotHoldAShortRequestOff) {
  for (SchedulingPolicy policy : {SchedulingPolicy::kFcfs, SchedulingPolicy::kFair}) {
    sequences_.clear();
    make({.max_num_batched_tokens = 32, .max_model_len = 2048, .policy = policy}, 4096);
    for (int i = 0; i < 6; ++i) add(400, /*client=*/1);
    step();
    Sequence* probe = add(5, /*client=*/2, /*max_tokens=*/1);
    const int steps = steps_to_first_token(probe, 200);
    if (policy == SchedulingPolicy::kFair) {
      EXPECT_EQ(steps, 1) << "the short request waits behind the long prompts";
    } else {
      EXPECT_GT(steps, 70) << "FCFS runs every earlier prompt first";
    }
  }
}

// A request's priority orders its own client's requests and breaks ties between equally served
// clients, but does not buy a larger share: client 1's three requests (priorities 3, -1, 1) run
// most urgent first, and client 2's request (priority 5) runs after client 1's first, not after
// all three, as the priority policy would run it.
TEST_F(FairSchedulerTest, PriorityOrdersAClientsOwnRequestsNotTheShares) {
  for (SchedulingPolicy policy : {SchedulingPolicy::kFair, SchedulingPolicy::kPriority, SchedulingPolicy::kFcfs}) {
    sequences_.clear();
    make({.max_num_batched_tokens = 8, .max_model_len = 256, .policy = policy}, 4096);
    Sequence* low = add(8, /*client=*/1, /*max_tokens=*/1, /*priority=*/3);  // one 8-token prompt a step
    Sequence* urgent = add(8, 1, 1, /*priority=*/-1);
    Sequence* middle = add(8, 1, 1, /*priority=*/1);
    Sequence* other = add(8, /*client=*/2, 1, /*priority=*/5);
    std::vector<int64_t> order;
    for (int i = 0; i < 4; ++i) {
      const StepPlan plan = step();
      ASSERT_EQ(plan.sequences.size(), 1u);
      order.push_back(plan.sequences[0].sequence_id);
    }
    const std::vector<int64_t> expected =
        policy == SchedulingPolicy::kFair       ? std::vector<int64_t>{urgent->id, other->id, middle->id, low->id}
        : policy == SchedulingPolicy::kPriority ? std::vector<int64_t>{urgent->id, middle->id, low->id, other->id}
                                                : std::vector<int64_t>{low->id, urgent->id, middle->id, other->id};
    EXPECT_EQ(order, expected) << "policy " << static_cast<int>(policy);
  }
}

// One prompt longer than many steps' budget: fair gives a newcomer its tokens from the next
// step's budget, and the long prompt the rest of it.
TEST_F(FairSchedulerTest, OneLongPromptSharesEachStepsBudget) {
  make({.max_num_batched_tokens = 64, .max_model_len = 8192, .policy = SchedulingPolicy::kFair}, 4096);
  Sequence* long_prompt = add(4000, /*client=*/0);
  step();
  step();
  Sequence* probe = add(5, /*client=*/0, /*max_tokens=*/1);
  const StepPlan plan = step();
  ASSERT_EQ(plan.sequences.size(), 2u);
  EXPECT_EQ(plan.sequences[0].sequence_id, probe->id) << "equal service: the one that waits goes first";
  EXPECT_EQ(plan.sequences[0].num_tokens, 5);
  EXPECT_EQ(plan.sequences[1].sequence_id, long_prompt->id);
  EXPECT_EQ(plan.sequences[1].num_tokens, 59);
  EXPECT_EQ(probe->finish_reason, FinishReason::kLength);
}

// One client's eight sequences fill the KV cache while decoding: FCFS leaves another client's
// request waiting until they finish; fair preempts the first client's latest sequence for it, and
// the others go on decoding.
TEST_F(FairSchedulerTest, AClientHoldingTheWholeCacheYieldsItsLatestSequence) {
  for (SchedulingPolicy policy : {SchedulingPolicy::kFcfs, SchedulingPolicy::kFair}) {
    sequences_.clear();
    preemptions_ = 0;
    make({.max_num_batched_tokens = 256, .max_model_len = 256, .policy = policy}, 72, 4);
    std::vector<Sequence*> heavy;
    for (int i = 0; i < 8; ++i) heavy.push_back(add(28, /*client=*/1, /*max_tokens=*/200));
    while (kv_->num_free_blocks() > 0) step();
    const int64_t heavy_preempted_before = preemptions_;
    Sequence* probe = add(6, /*client=*/2, /*max_tokens=*/4);
    const int steps = steps_to_first_token(probe, 100);
    if (policy == SchedulingPolicy::kFcfs) {
      EXPECT_GT(steps, 100) << "FCFS never admits it while the first client's sequences grow";
      continue;
    }
    EXPECT_EQ(steps, 1);
    EXPECT_EQ(preemptions_ - heavy_preempted_before, 1) << "one sequence yields: the first client's latest";
    EXPECT_EQ(heavy.back()->status, SequenceStatus::kWaiting);
    EXPECT_EQ(heavy.back()->num_preemptions, 1);
    for (int i = 0; i < 4; ++i) step();
    EXPECT_EQ(probe->finish_reason, FinishReason::kLength) << "it ran to its max_tokens";
    int decoding = 0;
    for (Sequence* s : heavy) decoding += s->status == SequenceStatus::kRunning;
    EXPECT_GE(decoding, 6) << "the first client's other sequences go on";
  }
}

// A client's only sequence is not preempted for another's smaller one, and two clients whose
// sequences each need most of the cache do not take it from each other in turn.
TEST_F(FairSchedulerTest, LargeSequencesOfTwoClientsDoNotPreemptEachOtherInTurn) {
  make({.max_num_batched_tokens = 128, .max_model_len = 128, .policy = SchedulingPolicy::kFair}, 32, 4);
  Sequence* a = add(100, /*client=*/1, /*max_tokens=*/20);
  step();
  Sequence* b = add(90, /*client=*/2, /*max_tokens=*/20);
  for (int guard = 0; scheduler_->has_work() && guard < 200; ++guard) step();
  EXPECT_FALSE(scheduler_->has_work());
  EXPECT_EQ(a->num_output_tokens(), 20);
  EXPECT_EQ(b->num_output_tokens(), 20);
  EXPECT_EQ(a->num_preemptions + b->num_preemptions, 0) << "the cache fits one of them at a time, in turn once";
}

// Shares exist for clients with work only: after many clients' requests finish, none is kept.
// A client that arrives late starts at the least service of the others: it does not get the
// budget alone for as long as they were served.
TEST_F(FairSchedulerTest, SharesAreKeptOnlyForClientsWithWorkAndNewcomersStartLevel) {
  make({.max_num_batched_tokens = 16, .max_model_len = 4096, .policy = SchedulingPolicy::kFair}, 4096);
  for (uint64_t client = 1; client <= 50; ++client) add(3, client, 2);
  Sequence* old_client = add(2000, /*client=*/100);
  EXPECT_EQ(scheduler_->num_fair_clients(), 51u);
  for (int i = 0; i < 40; ++i) step();
  EXPECT_GT(old_client->num_computed_tokens, 0);
  Sequence* newcomer = add(2000, /*client=*/200);
  int64_t old_before = old_client->num_computed_tokens;
  for (int i = 0; i < 20; ++i) step();
  const int64_t old_gain = old_client->num_computed_tokens - old_before;
  EXPECT_GE(old_gain, 16 * 20 / 2 - 16) << "the newcomer did not take the budget alone";
  EXPECT_GE(newcomer->num_computed_tokens, 16 * 20 / 2 - 16);
  for (int guard = 0; scheduler_->has_work() && guard < 2000; ++guard) step();
  EXPECT_FALSE(scheduler_->has_work());
  EXPECT_EQ(scheduler_->num_fair_clients(), 0u) << "a client's share goes with its last sequence";
}

// Random clients, prompts, aborts and cache sizes under the fair policy: exact block accounting
// every step, and every run drains (no sequence is starved or preempted forever).
TEST_F(FairSchedulerTest, RandomRunsKeepExactAccountingAndDrain) {
  for (int trial = 0; trial < 300; ++trial) {
    std::mt19937 rng(static_cast<uint32_t>(trial) + 1000);
    sequences_.clear();
    SchedulerConfig config;
    config.policy = SchedulingPolicy::kFair;
    config.max_num_batched_tokens = 4 + static_cast<int64_t>(rng() % 40);
    config.max_num_seqs = 1 + static_cast<int64_t>(rng() % 8);
    const int32_t num_blocks = 8 + static_cast<int32_t>(rng() % 24);
    const int32_t block_size = 1 + static_cast<int32_t>(rng() % 6);
    config.max_model_len = std::min<int64_t>(64, num_blocks * block_size);
    make(config, num_blocks, block_size);
    for (int op = 0; op < 80; ++op) {
      if (rng() % 3 == 0) {
        const int prompt = 1 + static_cast<int>(rng() % std::min<int64_t>(30, config.max_model_len - 1));
        add(prompt, rng() % 4, 1 + static_cast<int32_t>(rng() % 10));
      }
      if (rng() % 7 == 0 && !sequences_.empty()) scheduler_->abort(sequences_[rng() % sequences_.size()].get());
      ASSERT_NO_THROW(step()) << "trial " << trial << " op " << op;
    }
    for (int guard = 0; scheduler_->has_work() && guard < 2000; ++guard) step();
    EXPECT_FALSE(scheduler_->has_work()) << "trial " << trial << " never drained";
    EXPECT_EQ(kv_->num_free_blocks(), kv_->num_blocks()) << "trial " << trial;
    EXPECT_EQ(scheduler_->num_fair_clients(), 0u) << "trial " << trial;
  }
}

}  // namespace
}  // namespace tachyon::engine
