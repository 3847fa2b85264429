// EngineConfig::plan_hash must change when any plan-changing field changes (DESIGN.md rule 6),
// and stay put for the fields that change no plan.
#include <functional>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "tachyon/base/check.h"
#include "tachyon/core/engine_config.h"

namespace tachyon::engine {
using namespace tachyon::core;
namespace {

TEST(EngineConfig, PlanHashMovesWithEveryPlanField) {
  const EngineConfig base;
  const std::vector<std::pair<std::string, std::function<void(EngineConfig&)>>> flips = {
      {"max_num_batched_tokens", [](EngineConfig& c) { c.scheduler.max_num_batched_tokens += 1; }},
      {"max_num_seqs", [](EngineConfig& c) { c.scheduler.max_num_seqs += 1; }},
      {"max_model_len", [](EngineConfig& c) { c.scheduler.max_model_len += 1; }},
      {"block_size", [](EngineConfig& c) { c.block_size *= 2; }},
      {"kind", [](EngineConfig& c) { c.device.kind = "cuda"; }},
      {"enforce_eager", [](EngineConfig& c) { c.device.enforce_eager = true; }},
      {"cuda_graph_batch_sizes", [](EngineConfig& c) { c.device.cuda_graph_batch_sizes = {1, 3}; }},
      {"dtype", [](EngineConfig& c) { c.device.dtype = DType::kF16; }},
      {"kv_cache_dtype", [](EngineConfig& c) { c.device.kv_cache_dtype = DType::kF32; }},
      {"quantization", [](EngineConfig& c) { c.device.quantization = "fp8"; }},
      {"tensor_parallel_size", [](EngineConfig& c) { c.device.tensor_parallel_size = 2; }},
      {"enable_expert_parallel", [](EngineConfig& c) { c.device.enable_expert_parallel = true; }},
      {"enable_two_batch_overlap", [](EngineConfig& c) { c.device.enable_two_batch_overlap = true; }},
      {"data_parallel_size", [](EngineConfig& c) { c.device.data_parallel_size = 2; }},
      {"decode_context_parallel_size", [](EngineConfig& c) { c.device.decode_context_parallel_size = 2; }},
      {"dcp_kv_cache_interleave_size", [](EngineConfig& c) { c.device.dcp_kv_cache_interleave_size = 2; }},
      {"prefill_context_parallel_size", [](EngineConfig& c) { c.device.prefill_context_parallel_size = 2; }},
      {"gpu_name", [](EngineConfig& c) { c.device.gpu_name = "NVIDIA H200 sm_90"; }},
      {"model_identity", [](EngineConfig& c) { c.device.model_identity = "Qwen3ForCausalLM:abc"; }},
      {"num_speculative_tokens", [](EngineConfig& c) { c.speculative.num_speculative_tokens = 3; }},
  };
  std::set<std::string> seen = {base.plan_hash()};
  for (const auto& [field, flip] : flips) {
    EngineConfig changed = base;
    flip(changed);
    EXPECT_TRUE(seen.insert(changed.plan_hash()).second) << "plan_hash ignores " << field;
  }
}

TEST(EngineConfig, PlanHashIgnoresFieldsThatChangeNoPlan) {
  const EngineConfig base;
  EngineConfig changed = base;
  changed.num_blocks += 7;
  changed.enable_prefix_caching = !changed.enable_prefix_caching;
  changed.max_queued_requests += 1;
  changed.device.async_scheduling = AsyncScheduling::kOff;
  changed.device.gpu_memory_utilization = 0.5;
  changed.device.kv_cache_memory_bytes = 1 << 30;
  EXPECT_EQ(base.plan_hash(), changed.plan_hash());
  EXPECT_EQ(base.plan_hash().size(), 32u);
}

TEST(EngineConfig, DefaultGraphBucketsCoverEveryBatchUpToMaxSeqs) {
  EngineConfig c;
  c.scheduler.max_num_seqs = 20;
  EXPECT_EQ(cuda_graph_batch_sizes(c), (std::vector<int32_t>{1, 2, 4, 8, 16, 20}));
  c.scheduler.max_num_seqs = 256;
  std::vector<int32_t> sizes = cuda_graph_batch_sizes(c);
  EXPECT_EQ(sizes.front(), 1);
  EXPECT_EQ(sizes.back(), 256);
  c.device.cuda_graph_batch_sizes = {8, 1, 8};
  EXPECT_EQ(cuda_graph_batch_sizes(c), (std::vector<int32_t>{1, 8}));
  c.device.cuda_graph_batch_sizes = {300};
  EXPECT_THROW(cuda_graph_batch_sizes(c), Error);
}

// A verify step runs 1 + k decode rows per sequence (runner/step_inputs.h): the buckets reach
// max_num_seqs * (1 + k), bounded by the step's tokens, and every small row count has its own.
TEST(EngineConfig, WithDraftsTheGraphBucketsCoverEveryVerifyStepsRows) {
  EngineConfig c;
  c.scheduler.max_num_seqs = 20;
  c.scheduler.max_num_batched_tokens = 2048;
  c.speculative.num_speculative_tokens = 3;
  EXPECT_EQ(max_decode_rows(c), 80);
  EXPECT_EQ(cuda_graph_batch_sizes(c),
            (std::vector<int32_t>{1, 2, 3, 4, 5, 6, 7, 8, 16, 20, 28, 36, 44, 52, 60, 68, 76, 80}));
  c.scheduler.max_num_seqs = 256;
  c.scheduler.max_num_batched_tokens = 600;  // bounds the rows: 256 * 4 would be 1024
  EXPECT_EQ(max_decode_rows(c), 600);
  const std::vector<int32_t> sizes = cuda_graph_batch_sizes(c);
  ASSERT_GE(sizes.size(), 8u);
  EXPECT_EQ(std::vector<int32_t>(sizes.end() - 8, sizes.end()),
            (std::vector<int32_t>{248, 256, 320, 384, 448, 512, 576, 600}));
  c.device.cuda_graph_batch_sizes = {600};
  EXPECT_EQ(cuda_graph_batch_sizes(c), (std::vector<int32_t>{600}));
  c.device.cuda_graph_batch_sizes = {601};
  EXPECT_THROW(cuda_graph_batch_sizes(c), Error);
  c.speculative.num_speculative_tokens = 0;
  c.device.cuda_graph_batch_sizes = {};
  EXPECT_EQ(max_decode_rows(c), 256);
  EXPECT_EQ(cuda_graph_batch_sizes(c).back(), 256);
}

}  // namespace
}  // namespace tachyon::engine
