// Decode context parallelism (DCP) on CPU thread ranks against the unsplit run, on tiny
// DeepSeek-V3 (MLA, no indexer), DeepSeek-V3.2 (DSA, top-8) and GLM-5 (DSA with shared layers),
// with prompts longer than the indexer's top-k so the sparse selection is exercised:
//   groups  a DCP group of 2, 3, 4 and 6 ranks, each holding the whole model and 1/N of the cache
//           (DcpAttentionBackend over hand-built plans: a prompt in chunks, then decodes), gives
//           the single cache's logits within 1e-5 of the logit scale (f32; the LSE merge sums in
//           another order, so not bit-exact), interleave 1 and 2;
//   engine  EngineCore over TpCpuModelRunner at TP 2 x DCP 2, TP 4 x DCP 4, TP 4 x DCP 2 (two DCP
//           groups) and TP 2 x DCP 2 interleave 2 gives CpuModelRunner's greedy tokens and top-5
//           logprobs within 1e-4, with chunked prefill and prefix-cache hits, and with n-gram
//           speculative decoding (verify rows mask by global position) the plain run's tokens;
//   capacity each rank's cache holds num_blocks * block_size / dcp rows (latents and index keys);
//   counts   per attention layer one query all_gather and ONE all_to_all_v of the partials (each
//            rank receives only its own heads' partials), plus the indexer's candidate gather;
//   refusals every combination without such a test is refused at start-up by name.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "../engine_run.h"
#include "../model_test_util.h"
#include "../tiny_families.h"
#include "two_wave_engine_run.h"
#include "tachyon/dist/counting_communicator.h"
#include "tachyon/dist/cpu_communicator.h"
#include "tachyon/engine/engine_core.h"
#include "tachyon/model/dense_model.h"
#include "tachyon/model/make_model.h"
#include "tachyon/runner/cpu_model_runner.h"
#include "tachyon/runner/dcp_attention_backend.h"
#include "tachyon/runner/dcp_checks.h"
#include "tachyon/runner/tp_cpu_model_runner.h"

namespace tachyon::runner {
namespace {

using Family = testing::TinyFamily;
constexpr const Family (&kFamilies)[3] = testing::kLatentFamilies;

model::ModelWeights weights_of(const Family& f) { return testing::tiny_weights(f, 5); }

// ---------------------------------------------------------------------------------------------
// A DCP group of whole-model ranks over hand-built plans of one sequence.

constexpr int32_t kBlockSize = 24;  // a multiple of dcp x interleave for dcp 2, 3, 4, 6 and interleave 1, 2
constexpr int32_t kNumBlocks = 8;

// `count` tokens of `tokens` after `computed` cached ones, in blocks 6, 1, 3, ... (not in order),
// every row's logits.
core::StepPlan sequence_plan(const std::vector<int32_t>& tokens, int64_t computed, int64_t count) {
  core::StepPlan plan;
  plan.block_size = kBlockSize;
  core::ScheduledSequence s{.sequence_id = 1, .first_token = 0, .num_tokens = count, .num_computed = computed};
  for (int64_t b = 0; b * kBlockSize < computed + count; ++b) s.block_table.push_back(static_cast<int32_t>((6 + 3 * b) % kNumBlocks));
  for (int64_t i = 0; i < count; ++i) {
    const int64_t p = computed + i;
    plan.token_ids.push_back(tokens[static_cast<size_t>(p)]);
    plan.positions.push_back(p);
    plan.slot_mapping.push_back(int64_t{s.block_table[static_cast<size_t>(p / kBlockSize)]} * kBlockSize + p % kBlockSize);
    plan.logits_rows.push_back(i);
  }
  plan.sequences.push_back(std::move(s));
  return plan;
}

// The chunks a 30-token prompt and 6 decode steps run in: every step's logits, concatenated.
const std::vector<int64_t> kChunks = {7, 16, 7, 1, 1, 1, 1, 1, 1};

std::vector<float> unsplit_logits(const model::DenseModel& model, const std::vector<int32_t>& tokens) {
  PagedKvCache cache(model.config(), kNumBlocks, kBlockSize);
  std::vector<float> logits;
  int64_t computed = 0;
  for (int64_t count : kChunks) {
    const core::StepPlan plan = sequence_plan(tokens, computed, count);
    PagedAttentionBackend attention(model.config(), cache, plan);
    std::vector<float> step = model.forward({plan.token_ids, plan.positions, plan.logits_rows}, attention);
    logits.insert(logits.end(), step.begin(), step.end());
    computed += count;
  }
  return logits;
}

// Every rank's logits of the same steps with the cache split over `size` ranks.
std::vector<std::vector<float>> dcp_logits(const model::DenseModel& model, const std::vector<int32_t>& tokens,
                                           int size, int interleave) {
  dist::CpuWorld world(size);
  std::vector<std::vector<float>> logits(static_cast<size_t>(size));
  std::vector<std::string> errors(static_cast<size_t>(size));
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r) {
    threads.emplace_back([&, r] {
      try {
        dist::CpuCommunicator group(world, r);
        PagedKvCache cache(model.config(), kNumBlocks, kBlockSize / size);
        int64_t computed = 0;
        for (int64_t count : kChunks) {
          const core::StepPlan plan = sequence_plan(tokens, computed, count);
          DcpAttentionBackend attention(model.config(), cache, plan, group, interleave);
          std::vector<float> step = model.forward({plan.token_ids, plan.positions, plan.logits_rows}, attention);
          logits[static_cast<size_t>(r)].insert(logits[static_cast<size_t>(r)].end(), step.begin(), step.end());
          computed += count;
        }
      } catch (const std::exception& e) {
        errors[static_cast<size_t>(r)] = e.what();
      }
    });
  }
  for (std::thread& t : threads) t.join();
  for (int r = 0; r < size; ++r) EXPECT_EQ(errors[static_cast<size_t>(r)], "") << "rank " << r;
  return logits;
}

TEST(DcpFamilies, GroupsOf2346GiveTheUnsplitLogits) {
  std::vector<int32_t> tokens = testing::prompt_of(36, 4);
  for (const Family& f : kFamilies) {
    SCOPED_TRACE(f.preset);
    const model::DenseModel model(weights_of(f));
    const std::vector<float> want = unsplit_logits(model, tokens);
    for (int size : {2, 3, 4, 6}) {
      for (int interleave : {1, 2}) {
        const std::vector<std::vector<float>> got = dcp_logits(model, tokens, size, interleave);
        for (int r = 0; r < size; ++r) {
          EXPECT_LE(testing::relative_error(got[static_cast<size_t>(r)], want), 1e-5)
              << "rank " << r << " of " << size << ", interleave " << interleave;
        }
      }
    }
  }
}

// The collectives of one DCP step, counted on every rank (dist::CountingCommunicator): per
// attention layer one all_gather of the queries and ONE all_to_all_v of the partials, plus one
// all_gather of the top-k candidates per full indexer layer; nothing else. Each rank receives
// size x (its heads' partials), not size x (the group's): the all_to_all_v's point.
TEST(DcpFamilies, OneExchangeOfPartialsPerLayer) {
  const std::vector<int32_t> tokens = testing::prompt_of(36, 4);
  for (const Family& f : kFamilies) {
    SCOPED_TRACE(f.preset);
    const model::DenseModel model(weights_of(f));
    const model::ModelConfig& c = model.config();
    int64_t indexer_layers = 0;
    for (int64_t l = 0; l < c.num_hidden_layers; ++l) indexer_layers += c.has_sparse_attention() && c.has_indexer(l);
    for (int size : {2, 3}) {
      dist::CpuWorld world(size);
      std::vector<std::vector<dist::CollectiveCounts>> counts(static_cast<size_t>(size));  // [rank][step]
      std::vector<std::thread> threads;
      for (int r = 0; r < size; ++r) {
        threads.emplace_back([&, r] {
          dist::CpuCommunicator inner(world, r);
          dist::CountingCommunicator group(inner);
          PagedKvCache cache(c, kNumBlocks, kBlockSize / size);
          int64_t computed = 0;
          for (int64_t count : {int64_t{30}, int64_t{1}}) {  // a prefill chunk, then a decode
            const core::StepPlan plan = sequence_plan(tokens, computed, count);
            DcpAttentionBackend attention(c, cache, plan, group, 1);
            group.reset();
            model.forward({plan.token_ids, plan.positions, plan.logits_rows}, attention);
            counts[static_cast<size_t>(r)].push_back(group.counts());
            computed += count;
          }
        });
      }
      for (std::thread& t : threads) t.join();
      for (int r = 0; r < size; ++r) {
        for (size_t step = 0; step < 2; ++step) {
          const dist::CollectiveCounts& got = counts[static_cast<size_t>(r)][step];
          const int64_t n = step == 0 ? 30 : 1, layers = c.num_hidden_layers;
          SCOPED_TRACE("size " + std::to_string(size) + " rank " + std::to_string(r) + " step " + std::to_string(step));
          EXPECT_EQ(got.of(dist::CollectiveKind::kAllToAllV), layers);
          EXPECT_EQ(got.of(dist::CollectiveKind::kAllGather), layers + indexer_layers);
          EXPECT_EQ(got.collectives(), 2 * layers + indexer_layers);
          // [size sources, n tokens, heads] partial rows of kv_lora_rank values and one lse each.
          EXPECT_EQ(got.received_of(dist::CollectiveKind::kAllToAllV),
                    layers * size * n * c.num_attention_heads * (c.kv_lora_rank + 1) * 4);
        }
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Through the engine.

struct Layout {
  int tp = 2;
  int dcp = 2;
  int interleave = 1;
  std::string name() const {
    return "tp " + std::to_string(tp) + " dcp " + std::to_string(dcp) + " interleave " + std::to_string(interleave);
  }
};
const Layout kLayouts[] = {{2, 2, 1}, {4, 4, 1}, {4, 2, 1}, {2, 2, 2}};

core::EngineConfig engine_config() {
  core::EngineConfig c;
  c.scheduler.max_num_batched_tokens = 16;  // prompts past 16 tokens are chunked
  c.scheduler.max_model_len = 128;
  c.num_blocks = 64;
  c.block_size = 4;
  return c;
}

using EngineRun = testing::TwoWaveRun;

// Two waves of greedy requests with top-5 logprobs (two_wave_engine_run.h): prompts of 1..23
// tokens, then prompts that share the first wave's first 12 or 16 tokens and go on differently.
EngineRun run_engine(std::unique_ptr<ModelRunner> runner, core::EngineConfig config = engine_config(),
                     int32_t max_tokens = 10) {
  return testing::run_two_waves(std::move(runner), config, {3, 23, 9, 17, 1}, max_tokens);
}

// The greatest |difference| of the sampled and top-5 logprobs (the same tokens are required).
double worst_logprob_diff(const EngineRun& got, const EngineRun& want) {
  double worst = 0;
  for (size_t r = 0; r < want.logprobs.size(); ++r) {
    EXPECT_EQ(got.logprobs[r].size(), want.logprobs[r].size());
    for (size_t i = 0; i < want.logprobs[r].size() && i < got.logprobs[r].size(); ++i) {
      const core::SampledToken& a = got.logprobs[r][i];
      const core::SampledToken& b = want.logprobs[r][i];
      worst = std::max(worst, static_cast<double>(std::fabs(a.logprob - b.logprob)));
      EXPECT_EQ(a.top.size(), b.top.size());
      for (size_t k = 0; k < a.top.size() && k < b.top.size(); ++k) {
        EXPECT_EQ(a.top[k].token, b.top[k].token) << "request " << r << " token " << i << " top " << k;
        worst = std::max(worst, static_cast<double>(std::fabs(a.top[k].logprob - b.top[k].logprob)));
      }
    }
  }
  return worst;
}

std::unique_ptr<ModelRunner> dcp_runner(const model::ModelWeights& weights, const Layout& layout,
                                        const core::EngineConfig& c = engine_config()) {
  return std::make_unique<TpCpuModelRunner>(weights, layout.tp, c.num_blocks, c.block_size, false, false,
                                            model::DcpOptions{layout.dcp, layout.interleave});
}

TEST(DcpFamilies, EngineGreedyTokensAndLogprobsMatchOneRank) {
  const core::EngineConfig c = engine_config();
  for (const Family& f : kFamilies) {
    SCOPED_TRACE(f.preset);
    const model::ModelWeights weights = weights_of(f);
    const EngineRun want = run_engine(std::make_unique<CpuModelRunner>(std::make_unique<model::DenseModel>(weights),
                                                                       c.num_blocks, c.block_size));
    ASSERT_GT(want.prefix_hit_tokens, 0) << "the second wave must hit the prefix cache";
    for (const auto& tokens : want.tokens) ASSERT_EQ(tokens.size(), 10u);
    for (const Layout& layout : kLayouts) {
      const EngineRun got = run_engine(dcp_runner(weights, layout));
      EXPECT_EQ(got.tokens, want.tokens) << layout.name();
      EXPECT_EQ(got.prefix_hit_tokens, want.prefix_hit_tokens) << layout.name();
      EXPECT_LE(worst_logprob_diff(got, want), 1e-4) << layout.name();
    }
  }
}

// N-gram drafts verified under DCP: the verify rows of a step attend by global position, so the
// tokens are the plain run's, and drafts were really accepted.
TEST(DcpFamilies, NgramSpeculationGivesThePlainTokens) {
  core::EngineConfig spec = engine_config();
  spec.speculative = {.method = "ngram", .num_speculative_tokens = 3, .ngram_min = 1, .ngram_max = 2};
  for (const Family& f : {kFamilies[1], kFamilies[2]}) {
    SCOPED_TRACE(f.preset);
    const model::ModelWeights weights = weights_of(f);
    const core::EngineConfig c = engine_config();
    const EngineRun want = run_engine(std::make_unique<CpuModelRunner>(std::make_unique<model::DenseModel>(weights),
                                                                       c.num_blocks, c.block_size),
                                      c, 40);
    for (const Layout& layout : {kLayouts[0], kLayouts[2]}) {
      const EngineRun got = run_engine(dcp_runner(weights, layout, spec), spec, 40);
      EXPECT_EQ(got.tokens, want.tokens) << layout.name();
      EXPECT_GT(got.stats.draft_tokens_accepted, 0) << layout.name() << ": " << got.stats.draft_tokens << " drafts";
    }
  }
}

TEST(DcpFamilies, EachRankCachesItsShareOfTheTokens) {
  const model::ModelWeights weights = weights_of(kFamilies[1]);  // latent rows and index keys
  const model::ModelConfig& c = weights.config;
  const int32_t blocks = 64, block_size = 8;
  const size_t latent = static_cast<size_t>(c.kv_lora_rank + c.qk_rope_head_dim);
  const size_t index_key = static_cast<size_t>(c.index_head_dim);
  for (int dcp : {1, 2, 4}) {
    TpCpuModelRunner runner(weights, 4, blocks, block_size, false, false, {dcp, 1});
    for (int r = 0; r < 4; ++r) {
      const PagedKvCache& cache = runner.rank_cache(r);
      const size_t rows = static_cast<size_t>(blocks) * static_cast<size_t>(block_size / dcp);
      EXPECT_EQ(cache.num_blocks, blocks);  // the engine's block count: the same block ids on every rank
      EXPECT_EQ(cache.block_size, block_size / dcp) << "dcp " << dcp;
      EXPECT_EQ(cache.latents[0].size(), rows * latent) << "dcp " << dcp << " rank " << r;
      EXPECT_EQ(cache.index_keys[0].size(), rows * index_key) << "dcp " << dcp << " rank " << r;
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Start-up refusals.

std::string refusal(void (*edit)(core::EngineConfig&), const char* arch = "deepseek_v32",
                    const char* preset = "tiny-dsa") {
  core::EngineConfig config;
  config.device.kind = "cpu";
  config.device.tensor_parallel_size = 4;
  config.device.decode_context_parallel_size = 2;
  edit(config);
  return dcp_unsupported_reason(config, model::make_model_config({.arch = arch, .preset = preset}));
}

TEST(DcpFamilies, UntestedCombinationsAreRefusedByName) {
  EXPECT_EQ(refusal([](core::EngineConfig&) {}), "");
  EXPECT_EQ(refusal([](core::EngineConfig& c) { c.device.decode_context_parallel_size = 1; }, "llama", "tiny"), "");
  EXPECT_EQ(refusal([](core::EngineConfig& c) { c.speculative.method = "ngram"; }), "");
  auto has = [](const std::string& why, const char* text) { return why.find(text) != std::string::npos; };
  EXPECT_TRUE(has(refusal([](core::EngineConfig& c) { c.device.kind = "cuda"; }),
                  "verified only with tensor-parallel ranks sharing one GPU"));
  EXPECT_TRUE(has(refusal([](core::EngineConfig& c) { c.device.decode_context_parallel_size = 3; }),
                  "--dcp 3 must divide --tp 4"));
  EXPECT_TRUE(has(refusal([](core::EngineConfig& c) { c.device.tensor_parallel_size = 6; c.device.decode_context_parallel_size = 6; c.block_size = 16; }),
                  "--block-size 16 must be a multiple of --dcp 6"));
  EXPECT_TRUE(has(refusal([](core::EngineConfig& c) { c.device.tensor_parallel_size = 1; }), "must divide --tp 1"));
  EXPECT_TRUE(has(refusal([](core::EngineConfig&) {}, "llama", "tiny"), "has no latent attention"));
  EXPECT_TRUE(has(refusal([](core::EngineConfig& c) { c.device.kv_cache_dtype = DType::kF8E4M3; }),
                  "with --kv-cache-dtype fp8 is not verified"));
  // Every drafter is verified (n-gram here; a draft model's and MTP's in test_engine_draft_model.cpp and
  // test_engine_mtp.cpp).
  EXPECT_EQ(refusal([](core::EngineConfig& c) { c.speculative.method = "draft"; }), "");
  EXPECT_EQ(refusal([](core::EngineConfig& c) { c.speculative.method = "mtp"; }), "");
  EXPECT_TRUE(has(refusal([](core::EngineConfig& c) { c.device.dcp_kv_cache_interleave_size = 16; }),
                  "x --dcp-kv-cache-interleave-size 16"));
  EXPECT_TRUE(has(refusal([](core::EngineConfig& c) { c.device.nnodes = 2; }), "--nnodes"));
  EXPECT_TRUE(has(refusal([](core::EngineConfig& c) { c.device.data_parallel_size = 2; }),
                  "--dcp 2 with --dp 2 is not verified"));
}

}  // namespace
}  // namespace tachyon::runner
