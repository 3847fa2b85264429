// The steps and engine runs the prefill-context-parallel tests share (test_pcp_families.cpp:
// whole-model ranks; test_pcp_tp.cpp: --tp x --pcp): hand-built plans of two sequences in chunks
// after cached tokens then decodes, the unsplit run of them, and greedy engine runs with top-5
// logprobs, chunked prefill and prefix-cache hits, compared to the one-rank runner's.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "../model_test_util.h"
#include "two_wave_engine_run.h"
#include "tachyon/engine/engine_core.h"
#include "tachyon/model/dense_model.h"
#include "tachyon/runner/paged_attention_backend.h"

namespace tachyon::runner::pcp_test {

inline constexpr int32_t kBlockSize = 8;
inline constexpr int32_t kNumBlocks = 8;

// Two sequences: `count` tokens of `tokens` after `computed` cached ones (count 0: absent), in
// blocks out of order, every row's logits.
struct Part {
  int64_t id;
  const std::vector<int32_t>* tokens;
  int64_t computed;
  int64_t count;
  int32_t first_block;
};
inline core::StepPlan make_plan(const std::vector<Part>& parts) {
  core::StepPlan plan;
  plan.block_size = kBlockSize;
  for (const Part& p : parts) {
    if (p.count == 0) continue;
    core::ScheduledSequence s{.sequence_id = p.id, .first_token = plan.num_tokens(), .num_tokens = p.count,
                              .num_computed = p.computed};
    for (int64_t b = 0; b * kBlockSize < p.computed + p.count; ++b) {
      s.block_table.push_back(static_cast<int32_t>((p.first_block + 5 * b) % kNumBlocks));
    }
    for (int64_t i = 0; i < p.count; ++i) {
      const int64_t pos = p.computed + i;
      plan.logits_rows.push_back(plan.num_tokens());
      plan.token_ids.push_back((*p.tokens)[static_cast<size_t>(pos)]);
      plan.positions.push_back(pos);
      plan.slot_mapping.push_back(int64_t{s.block_table[static_cast<size_t>(pos / kBlockSize)]} * kBlockSize +
                                  pos % kBlockSize);
    }
    plan.sequences.push_back(std::move(s));
  }
  return plan;
}

// The steps: sequence 1 (30 tokens) and sequence 2 (9 tokens, blocks apart) in chunks (the
// later chunks attend cached tokens, as prefix-cache hits do), then decodes of both.
inline std::vector<core::StepPlan> steps(const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
  std::vector<core::StepPlan> out;
  const int64_t chunks_a[] = {11, 13, 3, 1, 1, 1}, chunks_b[] = {0, 5, 2, 1, 1, 0};
  int64_t done_a = 0, done_b = 0;
  for (size_t i = 0; i < std::size(chunks_a); ++i) {
    out.push_back(make_plan({{1, &a, done_a, chunks_a[i], 0}, {2, &b, done_b, chunks_b[i], 4}}));
    done_a += chunks_a[i];
    done_b += chunks_b[i];
  }
  return out;
}

// Every step's logits through one whole model over one cache.
inline std::vector<float> unsplit_logits(const model::DenseModel& model, const std::vector<core::StepPlan>& plans) {
  PagedKvCache cache(model.config(), kNumBlocks, kBlockSize);
  std::vector<float> logits;
  for (const core::StepPlan& plan : plans) {
    PagedAttentionBackend attention(model.config(), cache, plan);
    std::vector<float> step = model.forward({plan.token_ids, plan.positions, plan.logits_rows}, attention);
    logits.insert(logits.end(), step.begin(), step.end());
  }
  return logits;
}

// ---------------------------------------------------------------------------------------------
// Through the engine.

inline core::EngineConfig engine_config() {
  core::EngineConfig c;
  c.scheduler.max_num_batched_tokens = 16;  // prompts past 16 tokens are chunked
  c.scheduler.max_model_len = 128;
  c.num_blocks = 64;
  c.block_size = 4;
  return c;
}

using EngineRun = testing::TwoWaveRun;

// Two waves of greedy requests with top-5 logprobs (two_wave_engine_run.h): prompts of 3..23
// tokens, then prompts that share the first wave's 23-token prompt's first 12 or 16 tokens.
inline EngineRun run_engine(std::unique_ptr<ModelRunner> runner) {
  return testing::run_two_waves(std::move(runner), engine_config(), {3, 23, 9, 17}, /*max_tokens=*/8);
}

// The same greedy tokens and prefix hits; logprobs and the top-5 within `tolerance`.
inline void expect_same_engine_run(const EngineRun& got, const EngineRun& want, double tolerance = 1e-4) {
  EXPECT_EQ(got.tokens, want.tokens);
  EXPECT_EQ(got.prefix_hit_tokens, want.prefix_hit_tokens);
  ASSERT_EQ(got.logprobs.size(), want.logprobs.size());
  for (size_t r = 0; r < want.logprobs.size(); ++r) {
    ASSERT_EQ(got.logprobs[r].size(), want.logprobs[r].size());
    for (size_t i = 0; i < want.logprobs[r].size(); ++i) {
      EXPECT_NEAR(got.logprobs[r][i].logprob, want.logprobs[r][i].logprob, tolerance) << "request " << r;
      ASSERT_EQ(got.logprobs[r][i].top.size(), want.logprobs[r][i].top.size());
      for (size_t k = 0; k < want.logprobs[r][i].top.size(); ++k) {
        EXPECT_EQ(got.logprobs[r][i].top[k].token, want.logprobs[r][i].top[k].token);
        EXPECT_NEAR(got.logprobs[r][i].top[k].logprob, want.logprobs[r][i].top[k].logprob, tolerance);
      }
    }
  }
}

}  // namespace tachyon::runner::pcp_test
