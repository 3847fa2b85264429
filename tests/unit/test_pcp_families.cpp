// Prefill context parallelism (PCP) on CPU thread ranks against the unsplit run, on tiny Llama
// (dense attention), DeepSeek-V3 (MLA), DeepSeek-V3.2 and GLM-5 (DSA, top-8), with a prompt
// longer than the indexer's top-k so the sparse selection is exercised:
//   plan    build_pcp_plan's dual-chunk split for groups of 2..8: every row on exactly one rank,
//           the sampling inputs with every piece and `sample` on the one that ends its sequence,
//           pieces r and 2N-1-r of the step's rows, a rank's local plan the unsplit plan's rows
//           and positions; decodes and steps of fewer than 2N rows are not split;
//   groups  a PCP group of 2, 3, 4 (every family) and 6, 8 (DeepSeek-V3.2) whole-model ranks
//           over hand-built plans (a prompt in chunks after cached tokens, then decodes) gives
//           the single cache's logits bit for bit: each query attends the same rows in the same
//           order, and the fixed-order CPU product (kernels/cpu/fixed_order_gemm.h) gives a row
//           the same bits in a product of fewer rows (a general BLAS sgemm, which blocks by the
//           product's shape, did not: ~1e-6);
//   counts  a split step makes exactly one collective per layer (an all_gatherv of the rows and
//           positions, mixed dtypes) plus one for the logits; a decode step none;
//   engine  EngineCore over PcpCpuModelRunner (2, 3, 4) gives CpuModelRunner's greedy tokens and
//           top-5 logprobs, equal, with chunked prefill and prefix-cache hits; with asynchronous
//           scheduling too, and with FP8 weights and an FP8 KV cache (against the one rank's FP8);
//   refusals every combination without such a test is refused at start-up by name.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "../model_test_util.h"
#include "../tiny_families.h"
#include "pcp_test_steps.h"
#include "tachyon/dist/counting_communicator.h"
#include "tachyon/dist/cpu_communicator.h"
#include "tachyon/engine/engine_core.h"
#include "tachyon/model/dense_model.h"
#include "tachyon/model/make_model.h"
#include "tachyon/model/online_fp8.h"
#include "tachyon/runner/cpu_model_runner.h"
#include "tachyon/runner/pcp_checks.h"
#include "tachyon/runner/pcp_cpu_model_runner.h"
#include "tachyon/runner/pcp_plan.h"

// Its own namespace: the unity build may put this file beside test_dcp_families.cpp, whose
// anonymous namespace has helpers of the same names.
namespace tachyon::runner::pcp_test {
namespace {

using Family = testing::TinyFamily;
constexpr Family kFamilies[] = {{"llama", "tiny"},
                                {"deepseek_v3", "tiny-deepseek"},
                                {"deepseek_v32", "tiny-dsa"},
                                {"glm_moe_dsa", "tiny-glm-dsa"}};

model::ModelWeights weights_of(const Family& f) { return testing::tiny_weights(f, 5); }

struct GroupRun {
  std::vector<std::vector<float>> logits;                 // [rank] every step's logits
  std::vector<std::vector<dist::CollectiveCounts>> counts;  // [rank][step]
};

GroupRun pcp_run(const model::DenseModel& model, const std::vector<core::StepPlan>& plans, int size) {
  dist::CpuWorld world(size);
  GroupRun run{std::vector<std::vector<float>>(static_cast<size_t>(size)),
               std::vector<std::vector<dist::CollectiveCounts>>(static_cast<size_t>(size))};
  std::vector<std::string> errors(static_cast<size_t>(size));
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r) {
    threads.emplace_back([&, r] {
      try {
        dist::CpuCommunicator inner(world, r);
        dist::CountingCommunicator group(inner);
        PagedKvCache cache(model.config(), kNumBlocks, kBlockSize);
        for (const core::StepPlan& plan : plans) {
          group.reset();
          std::vector<float> step = run_pcp_rank_step(model, cache, plan, group);
          run.logits[static_cast<size_t>(r)].insert(run.logits[static_cast<size_t>(r)].end(), step.begin(), step.end());
          run.counts[static_cast<size_t>(r)].push_back(group.counts());
        }
      } catch (const std::exception& e) {
        errors[static_cast<size_t>(r)] = e.what();
      }
    });
  }
  for (std::thread& t : threads) t.join();
  for (int r = 0; r < size; ++r) EXPECT_EQ(errors[static_cast<size_t>(r)], "") << "rank " << r;
  return run;
}

TEST(PcpPlan, DualChunkSplitCoversEveryRowOnce) {
  const std::vector<int32_t> a = testing::prompt_of(40, 1), b = testing::prompt_of(40, 2);
  const core::StepPlan plan = make_plan({{1, &a, 3, 29, 0}, {2, &b, 0, 5, 4}});
  for (int size : {2, 3, 4, 6, 8}) {
    SCOPED_TRACE(size);
    const PcpPlan pcp = build_pcp_plan(plan, size);
    ASSERT_TRUE(pcp.split);
    std::vector<int64_t> all = pcp.gathered_tokens;
    std::sort(all.begin(), all.end());
    ASSERT_EQ(static_cast<int64_t>(all.size()), plan.num_tokens());
    for (int64_t t = 0; t < plan.num_tokens(); ++t) EXPECT_EQ(all[static_cast<size_t>(t)], t);
    int64_t logits = 0;
    for (int r = 0; r < size; ++r) {
      const core::StepPlan& local = pcp.local[static_cast<size_t>(r)];
      const std::vector<int64_t>& mine = pcp.rank_tokens[static_cast<size_t>(r)];
      ASSERT_EQ(local.num_tokens(), static_cast<int64_t>(mine.size()));
      for (size_t i = 0; i < mine.size(); ++i) {
        EXPECT_EQ(local.positions[i], plan.positions[static_cast<size_t>(mine[i])]);
        EXPECT_EQ(local.slot_mapping[i], plan.slot_mapping[static_cast<size_t>(mine[i])]);
      }
      // The 34 rows in 2N pieces: rank r holds pieces r and 2N-1-r; piece r lies in sequence 1.
      const int64_t pieces = 2 * size, begin = 34 * r / pieces, end = 34 * (r + 1) / pieces;
      const core::ScheduledSequence& first = local.sequences.front();
      EXPECT_EQ(first.sequence_id, 1);
      EXPECT_EQ(first.num_computed, 3 + begin);
      EXPECT_EQ(first.num_tokens, end - begin);
      EXPECT_EQ(mine.front(), begin);
      EXPECT_EQ(mine.back(), 34 * (pieces - r) / pieces - 1);  // the end of piece 2N-1-r
      logits += static_cast<int64_t>(local.logits_rows.size());
    }
    EXPECT_EQ(logits, static_cast<int64_t>(plan.logits_rows.size()));
  }
  const core::StepPlan decode = make_plan({{1, &a, 7, 1, 0}, {2, &b, 3, 1, 4}});
  EXPECT_FALSE(build_pcp_plan(decode, 4).split);
  const core::StepPlan short_prefill = make_plan({{1, &a, 0, 3, 0}});  // 3 rows < 2N: replicated
  EXPECT_FALSE(build_pcp_plan(short_prefill, 1).split);
  EXPECT_FALSE(build_pcp_plan(short_prefill, 2).split);
  EXPECT_TRUE(build_pcp_plan(make_plan({{1, &a, 0, 4, 0}}), 2).split);
}

// A piece carries its sequence's sampling inputs, and only the piece that ends the sequence
// samples (the GPU ranks sample their own logits rows from it: runner/cuda/pcp_cuda_model_runner.h).
TEST(PcpPlan, OnlyThePieceEndingASampledSequenceSamplesWithItsInputs) {
  const std::vector<int32_t> a = testing::prompt_of(40, 1), b = testing::prompt_of(40, 2);
  core::StepPlan plan = make_plan({{1, &a, 3, 29, 0}, {2, &b, 0, 5, 4}});
  plan.logits_rows = {28, 33};  // the last row of each sequence
  auto params = std::make_shared<const core::SamplingParams>();
  for (core::ScheduledSequence& s : plan.sequences) {
    s.params = params;
    s.seed = 100 + static_cast<uint64_t>(s.sequence_id);
    s.num_output_tokens = s.sequence_id;
    s.output_tokens = {7, 8};
  }
  plan.sequences[1].sample = true;  // sequence 1's chunk stops short of its prompt: no sample
  for (int size : {2, 3, 4, 6, 8}) {
    SCOPED_TRACE(size);
    const PcpPlan pcp = build_pcp_plan(plan, size);
    ASSERT_TRUE(pcp.split);
    int sampled = 0;
    for (int r = 0; r < size; ++r) {
      const core::StepPlan& local = pcp.local[static_cast<size_t>(r)];
      for (const core::ScheduledSequence& piece : local.sequences) {
        const core::ScheduledSequence& whole = plan.sequences[piece.sequence_id == 1 ? 0 : 1];
        EXPECT_EQ(piece.params, params);
        EXPECT_EQ(piece.seed, whole.seed);
        EXPECT_EQ(piece.num_output_tokens, whole.num_output_tokens);
        EXPECT_EQ(piece.output_tokens, whole.output_tokens);
        const bool ends = piece.num_computed + piece.num_tokens == whole.num_computed + whole.num_tokens;
        EXPECT_EQ(piece.sample, ends && whole.sample) << "rank " << r << " sequence " << piece.sequence_id;
        if (!piece.sample) continue;
        ++sampled;
        ASSERT_FALSE(local.logits_rows.empty());  // its last row is one of the rank's logits rows
        const int64_t last = piece.first_token + piece.num_tokens - 1;
        EXPECT_NE(std::find(local.logits_rows.begin(), local.logits_rows.end(), last), local.logits_rows.end());
      }
    }
    EXPECT_EQ(sampled, 1) << "sequence 2 samples on exactly one rank";
  }
}

TEST(PcpFamilies, GroupsGiveTheUnsplitLogits) {
  const std::vector<int32_t> a = testing::prompt_of(36, 4), b = testing::prompt_of(12, 9);
  const std::vector<core::StepPlan> plans = steps(a, b);
  for (const Family& f : kFamilies) {
    SCOPED_TRACE(f.preset);
    const model::DenseModel model(weights_of(f));
    const std::vector<float> want = unsplit_logits(model, plans);
    std::vector<int> sizes = {2, 3, 4};
    if (std::string(f.preset) == "tiny-dsa") sizes = {2, 3, 4, 6, 8};
    for (int size : sizes) {
      const GroupRun got = pcp_run(model, plans, size);
      for (int r = 0; r < size; ++r) {
        ASSERT_EQ(got.logits[static_cast<size_t>(r)].size(), want.size());
        EXPECT_EQ(testing::relative_error(got.logits[static_cast<size_t>(r)], want), 0.0)
            << "rank " << r << " of " << size;
      }
    }
  }
}

// One collective per layer in a split step: an all_gatherv carrying the rows attention needs
// (latent, or K and V; index keys on a full DSA layer) and their int64 positions in one call;
// then one all_gatherv of the logits rows. Decode steps (one row per sequence) make none.
TEST(PcpFamilies, OneGatherPerLayerInAPrefillStep) {
  const std::vector<int32_t> a = testing::prompt_of(36, 4), b = testing::prompt_of(12, 9);
  const std::vector<core::StepPlan> plans = steps(a, b);
  for (const Family& f : kFamilies) {
    SCOPED_TRACE(f.preset);
    const model::DenseModel model(weights_of(f));
    const model::ModelConfig& c = model.config();
    int64_t row_values = 0;  // per token, summed over layers: what the layer gathers
    for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
      row_values += c.is_mla() ? c.kv_lora_rank + c.qk_rope_head_dim : c.kv_size() + c.v_size();
      if (c.has_sparse_attention() && c.has_indexer(l)) row_values += c.index_head_dim;
    }
    const int size = 3;
    const GroupRun got = pcp_run(model, plans, size);
    for (int r = 0; r < size; ++r) {
      for (size_t step = 0; step < plans.size(); ++step) {
        SCOPED_TRACE("rank " + std::to_string(r) + " step " + std::to_string(step));
        const dist::CollectiveCounts& counts = got.counts[static_cast<size_t>(r)][step];
        const core::StepPlan& plan = plans[step];
        const bool prefill = build_pcp_plan(plan, size).split;
        EXPECT_EQ(counts.collectives(), prefill ? c.num_hidden_layers + 1 : 0);
        EXPECT_EQ(counts.of(dist::CollectiveKind::kAllGatherv), prefill ? c.num_hidden_layers + 1 : 0);
        if (!prefill) continue;
        const int64_t n = plan.num_tokens(), logits = static_cast<int64_t>(plan.logits_rows.size());
        EXPECT_EQ(counts.received_of(dist::CollectiveKind::kAllGatherv),
                  n * (row_values * 4 + c.num_hidden_layers * 8) + logits * c.vocab_size * 4);
      }
    }
  }
}

TEST(PcpFamilies, EngineGreedyTokensAndLogprobsMatchOneRank) {
  const core::EngineConfig c = engine_config();
  for (const Family& f : kFamilies) {
    SCOPED_TRACE(f.preset);
    const model::ModelWeights weights = weights_of(f);
    const EngineRun want = run_engine(std::make_unique<CpuModelRunner>(std::make_unique<model::DenseModel>(weights),
                                                                       c.num_blocks, c.block_size));
    ASSERT_GT(want.prefix_hit_tokens, 0) << "the second wave must hit the prefix cache";
    for (const auto& tokens : want.tokens) ASSERT_EQ(tokens.size(), 8u);
    for (int size : {2, 3, 4}) {
      SCOPED_TRACE("pcp " + std::to_string(size));
      expect_same_engine_run(run_engine(std::make_unique<PcpCpuModelRunner>(weights, size, c.num_blocks, c.block_size)),
                             want, /*tolerance=*/0.0);
    }
  }
}

// FP8 weights (online quantization's E4M3 round trip, as the CPU holds them) and an FP8 KV cache:
// a split step's gathered rows are stored as the one-rank cache stores them (row by row, so the
// same on any rank), and PCP 2 and 3 (and --tp 2 --pcp 2 on the latent-attention models) give the
// one-rank run's tokens and logprobs with the same weights and cache, bit for bit. The FP8 cache
// moves the logprobs (it is FP8).
TEST(PcpFamilies, Fp8WeightsAndAnFp8KvCacheMatchOneRank) {
  const core::EngineConfig c = engine_config();
  for (const Family& f : kFamilies) {
    SCOPED_TRACE(f.preset);
    model::ModelWeights weights = weights_of(f);
    model::quantize_weights_fp8(weights);
    const auto one_rank = [&](bool fp8_kv_cache) {
      return run_engine(std::make_unique<CpuModelRunner>(std::make_unique<model::DenseModel>(weights), c.num_blocks,
                                                         c.block_size, model::MlaAttentionForm::kAbsorbed,
                                                         fp8_kv_cache));
    };
    const EngineRun want = one_rank(true);
    const EngineRun bf16 = one_rank(false);
    bool moved = false;
    for (size_t r = 0; r < want.logprobs.size(); ++r) {
      for (size_t i = 0; i < want.logprobs[r].size() && i < bf16.logprobs[r].size(); ++i) {
        moved = moved || want.logprobs[r][i].logprob != bf16.logprobs[r][i].logprob;
      }
    }
    EXPECT_TRUE(moved) << "the FP8 cache moved no logprob (is it FP8?)";
    const bool latent = std::string(f.arch) != "llama";
    for (const auto& [pcp, tp] : {std::pair{2, 1}, std::pair{3, 1}, std::pair{2, 2}}) {
      if (tp > 1 && !latent) continue;  // --tp x --pcp is verified on the latent-attention models
      SCOPED_TRACE("pcp " + std::to_string(pcp) + " tp " + std::to_string(tp));
      expect_same_engine_run(run_engine(std::make_unique<PcpCpuModelRunner>(weights, pcp, c.num_blocks, c.block_size,
                                                                             tp, model::DcpOptions{},
                                                                             /*fp8_kv_cache=*/true)),
                             want, tp == 1 ? 0.0 : 1e-4);
    }
  }
}

// Asynchronous scheduling (each step planned and launched before the one in flight is applied; the
// runner resolves its deferred tokens): the one-rank run's tokens, prefix hits and logprobs under
// the same scheduling, bit for bit, and the synchronous run's tokens (a step applied later commits
// its blocks later, so the second wave may hit fewer cached tokens than synchronously).
TEST(PcpFamilies, AsynchronousSchedulingMatchesOneRank) {
  core::EngineConfig async = engine_config();
  async.device.async_scheduling = core::AsyncScheduling::kOn;
  for (const Family& f : {kFamilies[0], kFamilies[1]}) {
    SCOPED_TRACE(f.preset);
    const model::ModelWeights weights = weights_of(f);
    const auto one_rank = [&] {
      return std::make_unique<CpuModelRunner>(std::make_unique<model::DenseModel>(weights), async.num_blocks,
                                              async.block_size);
    };
    const EngineRun want = testing::run_two_waves(one_rank(), async, {3, 23, 9, 17}, /*max_tokens=*/8);
    const EngineRun got = testing::run_two_waves(
        std::make_unique<PcpCpuModelRunner>(weights, 2, async.num_blocks, async.block_size), async, {3, 23, 9, 17}, 8);
    expect_same_engine_run(got, want, /*tolerance=*/0.0);
    EXPECT_EQ(got.tokens, run_engine(one_rank()).tokens);
  }
}

// ---------------------------------------------------------------------------------------------
// Start-up refusals.

std::string refusal(void (*edit)(core::EngineConfig&), const char* arch = "deepseek_v32",
                    const char* preset = "tiny-dsa") {
  core::EngineConfig config;
  config.device.kind = "cpu";
  config.device.prefill_context_parallel_size = 2;
  edit(config);
  return pcp_unsupported_reason(config, model::make_model_config({.arch = arch, .preset = preset}));
}

TEST(PcpFamilies, UntestedCombinationsAreRefusedByName) {
  EXPECT_EQ(refusal([](core::EngineConfig&) {}), "");
  EXPECT_EQ(refusal([](core::EngineConfig&) {}, "llama", "tiny"), "");
  EXPECT_EQ(refusal([](core::EngineConfig& c) { c.device.kind = "auto"; }), "");
  for (int size : {3, 4, 6, 8}) {
    core::EngineConfig config;
    config.device.prefill_context_parallel_size = size;
    EXPECT_EQ(pcp_unsupported_reason(config, model::make_model_config({.arch = "llama", .preset = "tiny"})), "");
  }
  auto has = [](const std::string& why, const char* text) { return why.find(text) != std::string::npos; };
  EXPECT_TRUE(has(refusal([](core::EngineConfig& c) { c.device.prefill_context_parallel_size = 5; }),
                  "--pcp 5 is not verified by any test (group sizes 2, 3, 4, 6 and 8 are)"));
  EXPECT_TRUE(has(refusal([](core::EngineConfig& c) { c.device.kind = "cuda"; }),
                  "verified only with whole-model ranks sharing one GPU"));
  EXPECT_TRUE(has(refusal([](core::EngineConfig& c) { c.device.tensor_parallel_size = 8; }), "--pcp 2 with --tp 8"));
  EXPECT_TRUE(has(refusal([](core::EngineConfig& c) { c.device.data_parallel_size = 2; }), "--pcp 2 with --dp 2"));
  EXPECT_TRUE(has(refusal([](core::EngineConfig& c) { c.device.decode_context_parallel_size = 2; }),
                  "--pcp 2 with --dcp 2"));
  EXPECT_TRUE(has(refusal([](core::EngineConfig& c) { c.device.nnodes = 2; }), "--nnodes"));
  EXPECT_TRUE(has(refusal([](core::EngineConfig& c) { c.device.enable_expert_parallel = true; }),
                  "--enable-expert-parallel"));
  EXPECT_TRUE(has(refusal([](core::EngineConfig& c) { c.device.enable_two_batch_overlap = true; }), "or --tbo"));
  // FP8 weights and an FP8 KV cache are verified (Fp8WeightsAndAnFp8KvCacheMatchOneRank).
  EXPECT_EQ(refusal([](core::EngineConfig& c) { c.device.kv_cache_dtype = DType::kF8E4M3; }), "");
  EXPECT_EQ(refusal([](core::EngineConfig& c) { c.device.quantization = "fp8"; }), "");
  // Every drafter is verified (test_engine_draft_model.cpp, test_engine_mtp.cpp), and so is
  // asynchronous scheduling (above).
  EXPECT_EQ(refusal([](core::EngineConfig& c) { c.speculative.method = "ngram"; }), "");
  EXPECT_EQ(refusal([](core::EngineConfig& c) { c.speculative.method = "draft"; }), "");
  EXPECT_EQ(refusal([](core::EngineConfig& c) { c.speculative.method = "mtp"; }), "");
  EXPECT_EQ(refusal([](core::EngineConfig& c) { c.device.async_scheduling = core::AsyncScheduling::kOn; }), "");
  EXPECT_TRUE(has(refusal([](core::EngineConfig&) {}, "qwen3_moe", "tiny-moe"), "is not verified by any test yet"));
}

}  // namespace
}  // namespace tachyon::runner::pcp_test
