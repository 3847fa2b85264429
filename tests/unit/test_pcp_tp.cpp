// Prefill context parallelism over tensor-parallel ranks (--tp T --pcp P, T x P CPU thread ranks)
// against the unsplit one-rank run, on tiny DeepSeek-V3 (MLA), DeepSeek-V3.2 and GLM-5 (DSA,
// top-8; a 36-token prompt, past the top-k):
//   layout  tp is the fastest index: global rank = pcp_rank * T + tp_rank, a TP group is T
//           consecutive ranks, a PCP group the P ranks of one tp_rank (dist::RankLayout);
//   groups  (T, P) = (2, 2), (2, 3), (4, 2) over hand-built plans (a prompt in chunks after cached
//           tokens, then decodes): every rank's logits within 1e-5 of the logit scale of the single
//           cache's (not bit for bit as PCP alone is: the TP all-reduces add the ranks' partial
//           sums in another order than one rank's product; measured at most 1.3e-6);
//   counts  a split step makes exactly layers + 1 all_gatherv on the PCP group (the latent, index
//           keys and positions of a layer in one; then the logits rows) and on the TP group the TP
//           seams only (1 + 2 x layers all-reduces, one all_gather of the LM head's slices),
//           carrying the PCP rank's own rows only; a decode step no PCP collective; with DCP the
//           PCP gather carries only the rows the rank's DCP index keeps (bytes counted: about
//           1/dcp of the step's rows);
//   engine  EngineCore over PcpCpuModelRunner(tp = 2, pcp = 2) gives CpuModelRunner's greedy tokens
//           and top-5 logprobs within 1e-4 with chunked prefill and prefix-cache hits;
//   shards  from shards read a layer at a time, TP rank t of every PCP group runs one shard, and
//           the engine gives the tokens of the runner that cuts them from the whole model;
//   refusals the combinations no test here covers are refused at start-up by name.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <memory>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "../model_test_util.h"
#include "../tiny_families.h"
#include "pcp_test_steps.h"
#include "tachyon/dist/counting_communicator.h"
#include "tachyon/dist/cpu_process_groups.h"
#include "tachyon/model/dcp_layout.h"
#include "tachyon/model/make_model.h"
#include "tachyon/model/tp_dense_model.h"
#include "tachyon/model/tp_shard.h"
#include "tachyon/model/tp_shard_loader.h"
#include "tachyon/runner/cpu_model_runner.h"
#include "tachyon/runner/pcp_checks.h"
#include "tachyon/runner/pcp_cpu_model_runner.h"
#include "tachyon/runner/pcp_plan.h"

namespace tachyon::runner::pcp_test {
namespace {


struct Grid {
  int tp;
  int pcp;
  int dcp = 1;         // decode context parallel size inside each TP group
  int interleave = 1;  // DCP tokens per run
  std::string name() const {
    return "tp " + std::to_string(tp) + " pcp " + std::to_string(pcp) + " dcp " + std::to_string(dcp) + " interleave " +
           std::to_string(interleave);
  }
};
const Grid kGrids[] = {{2, 2}, {2, 3}, {4, 2}};
// PCP beside DCP: prefill split over the PCP ranks, the cache split by token over each TP group.
const Grid kDcpGrids[] = {{2, 2, 2, 1}, {2, 2, 2, 2}, {4, 2, 2, 1}};

struct GridRun {
  std::vector<std::vector<float>> logits;                       // [global rank] every step's logits
  std::vector<std::vector<dist::CollectiveCounts>> pcp_counts;  // [global rank][step]
  std::vector<std::vector<dist::CollectiveCounts>> tp_counts;   // [global rank][step]
  std::vector<std::vector<dist::CollectiveCounts>> dcp_counts;  // [global rank][step]
  std::vector<int64_t> cache_rows;                              // [global rank] latent rows of its cache
};

// Every global rank of the T x P grid on its own thread: its TP shard, its whole cache, each
// step through run_pcp_rank_step with its PCP group, collectives counted per group.
GridRun grid_run(const model::ModelWeights& full, const std::vector<core::StepPlan>& plans, Grid grid) {
  const int world = grid.tp * grid.pcp;
  dist::CpuProcessGroups groups(dist::ParallelConfig{.tp = grid.tp, .pcp = grid.pcp, .dcp = grid.dcp});
  GridRun run;
  run.logits.resize(static_cast<size_t>(world));
  run.pcp_counts.resize(static_cast<size_t>(world));
  run.tp_counts.resize(static_cast<size_t>(world));
  run.dcp_counts.resize(static_cast<size_t>(world));
  run.cache_rows.resize(static_cast<size_t>(world));
  std::vector<dist::ProcessGroups> rank_groups;
  for (int r = 0; r < world; ++r) rank_groups.push_back(groups.make(r));
  std::vector<std::string> errors(static_cast<size_t>(world));
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      try {
        const dist::ProcessGroups& mine = rank_groups[static_cast<size_t>(r)];
        dist::CountingCommunicator tp(*mine.tp), pcp(*mine.pcp), dcp(*mine.dcp);
        const model::TpDenseModel model(model::shard_weights(full, tp.rank(), tp.size()), tp);
        PagedKvCache cache(model.config(), kNumBlocks, kBlockSize / grid.dcp);
        run.cache_rows[static_cast<size_t>(r)] = static_cast<int64_t>(cache.latents[0].size()) / cache.latent_size;
        const PcpDcp split_cache{.group = grid.dcp > 1 ? &dcp : nullptr, .interleave = grid.interleave};
        const PcpRankForward forward = [&](const model::ForwardBatch& batch, model::AttentionBackend& attention,
                                           const model::ForwardHook& hook) {
          return model.forward(batch, attention, hook);
        };
        for (const core::StepPlan& plan : plans) {
          tp.reset();
          pcp.reset();
          dcp.reset();
          std::vector<float> step = run_pcp_rank_step(model.config(), forward, cache, plan, pcp, split_cache);
          std::vector<float>& logits = run.logits[static_cast<size_t>(r)];
          logits.insert(logits.end(), step.begin(), step.end());
          run.pcp_counts[static_cast<size_t>(r)].push_back(pcp.counts());
          run.tp_counts[static_cast<size_t>(r)].push_back(tp.counts());
          run.dcp_counts[static_cast<size_t>(r)].push_back(dcp.counts());
        }
      } catch (const std::exception& e) {
        errors[static_cast<size_t>(r)] = e.what();
      }
    });
  }
  for (std::thread& t : threads) t.join();
  for (int r = 0; r < world; ++r) EXPECT_EQ(errors[static_cast<size_t>(r)], "") << "rank " << r;
  return run;
}

TEST(PcpTp, TpIsTheFastestIndex) {
  const dist::RankLayout layout(dist::ParallelConfig{.tp = 2, .pcp = 3});
  EXPECT_EQ(layout.tp_group(3), (std::vector<int>{2, 3}));
  EXPECT_EQ(layout.pcp_group(3), (std::vector<int>{1, 3, 5}));
  EXPECT_EQ(layout.coord(5), (dist::RankCoord{.dp = 0, .pcp = 2, .tp = 1}));
}

// Every rank of `grid` gives the unsplit logits within 1e-5 of their scale over `plans`, with each
// step's collectives counted on the PCP, TP and (with DCP) DCP groups, and a cache of its share.
void expect_grid_matches(const model::ModelWeights& weights, const std::vector<core::StepPlan>& plans,
                         const std::vector<float>& want, const Grid& grid) {
  SCOPED_TRACE(grid.name());
  const model::ModelConfig& c = weights.config;
  int64_t row_values = 0, indexer_layers = 0;  // per token, summed over layers: what the PCP gather carries
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    row_values += c.kv_lora_rank + c.qk_rope_head_dim;  // the latent: whole on every TP rank
    if (c.has_sparse_attention() && c.has_indexer(l)) row_values += c.index_head_dim, ++indexer_layers;
  }
  const GridRun got = grid_run(weights, plans, grid);
  for (int r = 0; r < grid.tp * grid.pcp; ++r) {
    SCOPED_TRACE("rank " + std::to_string(r));
    ASSERT_EQ(got.logits[static_cast<size_t>(r)].size(), want.size());
    EXPECT_LE(testing::relative_error(got.logits[static_cast<size_t>(r)], want), 1e-5);
    EXPECT_EQ(got.cache_rows[static_cast<size_t>(r)], int64_t{kNumBlocks} * kBlockSize / grid.dcp);
    const int pcp_rank = r / grid.tp;
    for (size_t step = 0; step < plans.size(); ++step) {
      SCOPED_TRACE("step " + std::to_string(step));
      const core::StepPlan& plan = plans[step];
      const PcpPlan split = build_pcp_plan(plan, grid.pcp);
      const dist::CollectiveCounts& pcp = got.pcp_counts[static_cast<size_t>(r)][step];
      const dist::CollectiveCounts& tp = got.tp_counts[static_cast<size_t>(r)][step];
      const dist::CollectiveCounts& dcp = got.dcp_counts[static_cast<size_t>(r)][step];
      const int64_t gathers = split.split ? c.num_hidden_layers + 1 : 0;
      EXPECT_EQ(pcp.collectives(), gathers);
      EXPECT_EQ(pcp.of(dist::CollectiveKind::kAllGatherv), gathers);
      if (split.split) {
        // The rows this rank's DCP index keeps (every row without DCP): only those travel, since
        // every rank of a PCP group holds the same DCP index.
        const int64_t n = plan.num_tokens(), logits = static_cast<int64_t>(plan.logits_rows.size());
        std::vector<int64_t> kept(static_cast<size_t>(grid.dcp));  // [DCP index] rows it keeps
        for (int d = 0; d < grid.dcp; ++d) {
          const model::DcpLayout layout{.size = grid.dcp, .rank = d, .interleave = grid.interleave};
          for (int64_t t = 0; t < n; ++t) kept[static_cast<size_t>(d)] += layout.owns(plan.slot_mapping[static_cast<size_t>(t)] % plan.block_size);
        }
        EXPECT_EQ(std::accumulate(kept.begin(), kept.end(), int64_t{0}), n);
        const int64_t mine = kept[static_cast<size_t>(r % grid.tp % grid.dcp)];
        if (grid.dcp > 1) {
          EXPECT_LE(mine, n / grid.dcp + grid.interleave * static_cast<int64_t>(plan.sequences.size()));
        }
        EXPECT_EQ(pcp.received_of(dist::CollectiveKind::kAllGatherv),
                  mine * (row_values * 4 + c.num_hidden_layers * 8) + logits * c.vocab_size * 4);
      }
      // The TP seams, on this PCP rank's rows only (all of them in a replicated decode).
      const core::StepPlan& local = split.split ? split.local[static_cast<size_t>(pcp_rank)] : plan;
      const int64_t rows = local.num_tokens(), logits_rows = static_cast<int64_t>(local.logits_rows.size());
      EXPECT_EQ(tp.collectives(), 2 + 2 * c.num_hidden_layers);
      EXPECT_EQ(tp.of(dist::CollectiveKind::kAllReduce), 1 + 2 * c.num_hidden_layers);
      EXPECT_EQ(tp.of(dist::CollectiveKind::kAllGather), 1);
      EXPECT_EQ(tp.received_of(dist::CollectiveKind::kAllReduce),
                (1 + 2 * c.num_hidden_layers) * rows * c.hidden_size * 4);
      EXPECT_EQ(tp.received_of(dist::CollectiveKind::kAllGather), logits_rows * c.vocab_size * 4);
      // DCP (dcp_attention_backend.h): per layer the query gather and one all_to_all_v of the
      // partials, plus the top-k candidates' gather on a full indexer layer; none without DCP.
      const int64_t layers = grid.dcp > 1 ? c.num_hidden_layers : 0;
      EXPECT_EQ(dcp.of(dist::CollectiveKind::kAllToAllV), layers);
      EXPECT_EQ(dcp.of(dist::CollectiveKind::kAllGather), grid.dcp > 1 ? layers + indexer_layers : 0);
      EXPECT_EQ(dcp.collectives(), grid.dcp > 1 ? 2 * layers + indexer_layers : 0);
    }
  }
}

TEST(PcpTp, GridsGiveTheUnsplitLogitsWithCountedCollectives) {
  const std::vector<int32_t> a = testing::prompt_of(36, 4), b = testing::prompt_of(12, 9);
  const std::vector<core::StepPlan> plans = steps(a, b);
  for (const testing::TinyFamily& f : testing::kLatentFamilies) {
    SCOPED_TRACE(f.preset);
    const model::ModelWeights weights = testing::tiny_weights(f, 5);
    const std::vector<float> want = unsplit_logits(model::DenseModel(weights), plans);
    for (const Grid& grid : kGrids) expect_grid_matches(weights, plans, want, grid);
  }
}

// PCP beside DCP: PCP writes the DCP layout directly (each rank keeps the gathered rows its DCP
// group deals it), prefill queries and decodes attend through DCP's partials and LSE merge.
TEST(PcpTp, DcpGridsGiveTheUnsplitLogitsFromASplitCache) {
  const std::vector<int32_t> a = testing::prompt_of(36, 4), b = testing::prompt_of(12, 9);
  const std::vector<core::StepPlan> plans = steps(a, b);
  for (const testing::TinyFamily& f : testing::kLatentFamilies) {
    SCOPED_TRACE(f.preset);
    const model::ModelWeights weights = testing::tiny_weights(f, 5);
    const std::vector<float> want = unsplit_logits(model::DenseModel(weights), plans);
    for (const Grid& grid : kDcpGrids) expect_grid_matches(weights, plans, want, grid);
  }
}

TEST(PcpTp, EngineGreedyTokensAndLogprobsMatchOneRank) {
  const core::EngineConfig c = engine_config();
  for (const testing::TinyFamily& f : testing::kLatentFamilies) {
    SCOPED_TRACE(f.preset);
    const model::ModelWeights weights = testing::tiny_weights(f, 5);
    const EngineRun want = run_engine(std::make_unique<CpuModelRunner>(std::make_unique<model::DenseModel>(weights),
                                                                       c.num_blocks, c.block_size));
    ASSERT_GT(want.prefix_hit_tokens, 0) << "the second wave must hit the prefix cache";
    auto runner = std::make_unique<PcpCpuModelRunner>(weights, 2, c.num_blocks, c.block_size, /*tp_size=*/2);
    ASSERT_EQ(runner->tp_size(), 2);
    ASSERT_EQ(runner->pcp_size(), 2);
    expect_same_engine_run(run_engine(std::move(runner)), want);
    for (const int interleave : {1, 2}) {
      SCOPED_TRACE("dcp 2 interleave " + std::to_string(interleave));
      auto dcp = std::make_unique<PcpCpuModelRunner>(weights, 2, c.num_blocks, c.block_size, /*tp_size=*/2,
                                                     model::DcpOptions{.size = 2, .interleave = interleave});
      ASSERT_EQ(dcp->rank_cache(3).latents[0].size(),
                static_cast<size_t>(c.num_blocks * c.block_size / 2 * dcp->rank_cache(3).latent_size));
      expect_same_engine_run(run_engine(std::move(dcp)), want);
    }
  }
}

// --tp 2 --pcp 2 from the TP shards read a layer at a time (model/tp_shard_loader.h, the served
// path) against the runner that cuts them from the whole model: TP rank t of both PCP groups runs
// one shard (the host holds the model once, not once per PCP group), and the engine's tokens and
// logprobs are the same.
TEST(PcpTp, ShardsReadLayerByLayerAreSharedByThePcpGroups) {
  const core::EngineConfig c = engine_config();
  for (const testing::TinyFamily& f : testing::kLatentFamilies) {
    SCOPED_TRACE(f.preset);
    const auto dir = std::filesystem::temp_directory_path() /
                     ("tachyon-pcp-shards-" + std::to_string(::getpid()) + "-" + f.preset);
    std::filesystem::remove_all(dir);
    model::make_model({.arch = f.arch, .preset = f.preset, .seed = 5, .dtype = DType::kF32, .out_dir = dir});
    const model::ModelConfig mc = model::ModelConfig::from_dir(dir);
    const model::SafetensorsCheckpoint checkpoint(dir);
    auto cut = std::make_unique<PcpCpuModelRunner>(model::load_weights(mc, checkpoint), 2, c.num_blocks,
                                                   c.block_size, /*tp_size=*/2);
    auto read = std::make_unique<PcpCpuModelRunner>(
        model::load_f32_tp_shards(mc, checkpoint, {.first = 0, .count = 2, .tp_size = 2}, /*online_fp8=*/false), mc, 2,
        c.num_blocks, c.block_size);
    for (const PcpCpuModelRunner* runner : {cut.get(), read.get()}) {
      ASSERT_EQ(runner->tp_size(), 2);
      ASSERT_EQ(runner->pcp_size(), 2);
      // Global rank = pcp_rank * tp + tp_rank: ranks 0 and 2 are TP rank 0, ranks 1 and 3 TP rank 1.
      ASSERT_NE(runner->rank_shard(0), nullptr);
      EXPECT_EQ(runner->rank_shard(0), runner->rank_shard(2));
      EXPECT_EQ(runner->rank_shard(1), runner->rank_shard(3));
      EXPECT_NE(runner->rank_shard(0), runner->rank_shard(1));
      EXPECT_EQ(runner->rank_shard(1)->tp_rank, 1);
    }
    const EngineRun want = run_engine(std::move(cut));
    expect_same_engine_run(run_engine(std::move(read)), want, 0.0);
    std::filesystem::remove_all(dir);
  }
}

std::string refusal(int tp, int pcp, const char* arch = "deepseek_v32", const char* preset = "tiny-dsa",
                    int dcp = 1) {
  core::EngineConfig config;
  config.device.kind = "cpu";
  config.device.tensor_parallel_size = tp;
  config.device.prefill_context_parallel_size = pcp;
  config.device.decode_context_parallel_size = dcp;
  return pcp_unsupported_reason(config, model::make_model_config({.arch = arch, .preset = preset}));
}

TEST(PcpTp, OnlyTheTestedGridsAreAllowed) {
  for (const Grid grid : kGrids) {
    EXPECT_EQ(refusal(grid.tp, grid.pcp), "");
    EXPECT_EQ(refusal(grid.tp, grid.pcp, "deepseek_v3", "tiny-deepseek"), "");
    EXPECT_EQ(refusal(grid.tp, grid.pcp, "glm_moe_dsa", "tiny-glm-dsa"), "");
  }
  auto has = [](const std::string& why, const char* text) { return why.find(text) != std::string::npos; };
  EXPECT_TRUE(has(refusal(2, 4), "--pcp 4 with --tp 2 is not verified by any test yet"));
  EXPECT_TRUE(has(refusal(4, 3), "--pcp 3 with --tp 4 is not verified by any test yet"));
  EXPECT_TRUE(has(refusal(2, 2, "llama", "tiny"), "--pcp 2 with --tp 2 is verified on the latent-attention"));
  for (const Grid grid : kDcpGrids) {
    EXPECT_EQ(refusal(grid.tp, grid.pcp, "deepseek_v32", "tiny-dsa", grid.dcp), "");
    EXPECT_EQ(refusal(grid.tp, grid.pcp, "glm_moe_dsa", "tiny-glm-dsa", grid.dcp), "");
  }
  EXPECT_TRUE(has(refusal(2, 3, "deepseek_v32", "tiny-dsa", 2), "--pcp 3 with --dcp 2 (--tp 2) is not verified"));
  EXPECT_TRUE(has(refusal(4, 2, "deepseek_v32", "tiny-dsa", 4), "--pcp 2 with --dcp 4 (--tp 4) is not verified"));
}

}  // namespace
}  // namespace tachyon::runner::pcp_test
