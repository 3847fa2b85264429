// DeepSeek sparse attention (DSA, DeepSeek-V3.2) on the CPU reference: the config and checkpoint
// names; the lightning indexer's projections, scores and top-k against a double-precision
// reimplementation written here; the sparse latent attention against a reference over the kept
// set only; the strong structural check that DSA keeping every token is DeepSeek-V3 with the same
// weights (1e-6 relative), while top-8 really changes the logits past 8 tokens; chunked prefill,
// the paged cache and the engine against the one-sequence reference; the refusals (CUDA; tp > 1 on CUDA).
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <numeric>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "../architecture_checks.h"
#include "../model_test_util.h"
#include "../moe_test_util.h"
#include "tachyon/base/check.h"
#include "tachyon/kernels/dsa_indexer.h"
#include "tachyon/kernels/sparse_mla_attention.h"
#include "tachyon/model/attention_backend.h"
#include "tachyon/model/dense_model.h"
#include "tachyon/model/dsa_indexer.h"
#include "tachyon/model/make_model.h"
#include "tachyon/model/mla.h"
#include "tachyon/model/model_weights.h"
#include "tachyon/model/rope.h"
#include "tachyon/model/safetensors.h"
#include "tachyon/model/tp_shard.h"
#include "tachyon/runner/paged_attention_backend.h"
#include "tachyon/app/runner_factory.h"

namespace tachyon::model {
namespace {

using testing::prompt_of;
using testing::relative_error;
using testing::layer_norm_double;
using testing::linear_double;
using testing::rope_double;
using testing::sequence_logits;

std::filesystem::path temp_dir(const std::string& tag) { return testing::fresh_temp_dir("dsa-" + tag); }

ModelWeights tiny_dsa_weights(uint64_t seed = 0) { return testing::make_weights("deepseek_v32", "tiny-dsa", seed); }

// The same weights with another top-k.
ModelWeights with_topk(ModelWeights weights, int64_t topk) {
  weights.config.index_topk = topk;
  return weights;
}

// The same weights as a DeepSeek-V3 model: no indexer, every token attended.
ModelWeights without_indexer(ModelWeights weights) {
  ModelConfig& c = weights.config;
  c.architecture = "DeepseekV3ForCausalLM";
  c.model_type = "deepseek_v3";
  c.index_n_heads = c.index_head_dim = c.index_topk = 0;
  for (LayerWeights& layer : weights.layers) {
    layer.indexer_wq_b.clear();
    layer.indexer_wk.clear();
    layer.indexer_k_norm.clear();
    layer.indexer_k_norm_bias.clear();
    layer.indexer_weights_proj.clear();
  }
  return weights;
}

// ---- Config and weights -------------------------------------------------------------------------

TEST(DsaConfig, ReadsAndWritesTheIndexerFields) {
  const ModelConfig c = make_model_config({.arch = "deepseek_v32", .preset = "tiny-dsa"});
  EXPECT_EQ(c.architecture, "DeepseekV32ForCausalLM");
  EXPECT_TRUE(c.is_mla());
  EXPECT_TRUE(c.has_sparse_attention());
  EXPECT_EQ(c.index_n_heads, 16);
  EXPECT_EQ(c.index_head_dim, 16);
  EXPECT_EQ(c.index_topk, 8);
  const nlohmann::json json = c.to_json();
  EXPECT_EQ(json["model_type"], "deepseek_v32");
  EXPECT_EQ(json["index_topk"], 8);
  EXPECT_EQ(json["index_n_heads"], 16);
  EXPECT_EQ(json["index_head_dim"], 16);

  nlohmann::json defaults = json;  // absent fields take DeepseekV32Config's defaults
  defaults.erase("index_topk");
  defaults.erase("index_n_heads");
  defaults.erase("index_head_dim");
  const ModelConfig d = ModelConfig::from_json(defaults);
  EXPECT_EQ(d.index_n_heads, 64);
  EXPECT_EQ(d.index_head_dim, 128);
  EXPECT_EQ(d.index_topk, 2048);

  nlohmann::json no_lora = json;  // the indexer's query reads the q LoRA latent
  no_lora["q_lora_rank"] = nullptr;
  EXPECT_THROW(ModelConfig::from_json(no_lora), Error);
  EXPECT_FALSE(make_model_config({.arch = "deepseek_v3", .preset = "tiny-deepseek"}).has_sparse_attention());
  EXPECT_THROW(make_model_config({.arch = "deepseek_v3", .preset = "tiny-dsa"}), Error);
  EXPECT_THROW(make_model_config({.arch = "deepseek_v32", .preset = "tiny-deepseek"}), Error);

  const ModelConfig real = make_model_config({.arch = "deepseek_v32", .preset = "deepseek-v32-reduced"});
  EXPECT_EQ(real.hidden_size, 7168);
  EXPECT_EQ(real.num_hidden_layers, 4);
  EXPECT_EQ(real.q_lora_rank, 1536);
  EXPECT_EQ(real.index_n_heads, 64);
  EXPECT_EQ(real.index_head_dim, 128);
  EXPECT_EQ(real.index_topk, 2048);
}

TEST(DsaWeights, ExpectedTensorsNameTheIndexerAsTheCheckpointDoes) {
  const ModelConfig c = make_model_config({.arch = "deepseek_v32", .preset = "tiny-dsa"});
  const auto tensors = expected_tensors(c);
  auto shape_of = [&](const std::string& name) {
    for (const auto& [tensor, shape] : tensors) {
      if (tensor == name) return shape;
    }
    return std::vector<int64_t>{};
  };
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".self_attn.indexer.";
    EXPECT_EQ(shape_of(p + "wq_b.weight"), (std::vector<int64_t>{16 * 16, 32}));
    EXPECT_EQ(shape_of(p + "wk.weight"), (std::vector<int64_t>{16, 64}));
    EXPECT_EQ(shape_of(p + "k_norm.weight"), (std::vector<int64_t>{16}));
    EXPECT_EQ(shape_of(p + "k_norm.bias"), (std::vector<int64_t>{16}));
    EXPECT_EQ(shape_of(p + "weights_proj.weight"), (std::vector<int64_t>{16, 64}));
  }
  const ModelWeights w = tiny_dsa_weights();
  EXPECT_EQ(w.layers[1].indexer_wq_b.size(), size_t{16 * 16 * 32});
  EXPECT_EQ(w.layers[1].indexer_k_norm_bias.size(), size_t{16});
}

// ---- The indexer against a double reimplementation ----------------------------------------------

TEST(DsaIndexer, ProjectionsScoresAndTopkMatchADoubleReimplementation) {
  const ModelWeights weights = tiny_dsa_weights(3);
  const ModelConfig& c = weights.config;
  const LayerWeights& w = weights.layers[1];
  const int64_t n = 21, heads = c.index_n_heads, dim = c.index_head_dim;
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(n * c.hidden_size));
  for (float& v : x) v = normal(rng);
  std::vector<int64_t> positions(static_cast<size_t>(n));
  std::iota(positions.begin(), positions.end(), 0);
  const std::vector<float> inv_freq = rope_inv_freq(c);
  const MlaLatentProjections mla = mla_project_latent(c, w, inv_freq, x, positions);
  const DsaIndexerProjections got = dsa_indexer_project(c, w, inv_freq, x, mla.q_lora, positions);

  std::vector<double> q = linear_double(w.indexer_wq_b, mla.q_lora, n, c.q_lora_rank, heads * dim);
  rope_double(c, q, positions, heads, dim);
  std::vector<double> k = linear_double(w.indexer_wk, x, n, c.hidden_size, dim);
  layer_norm_double(k, w.indexer_k_norm, w.indexer_k_norm_bias, n, dim);
  rope_double(c, k, positions, 1, dim);
  std::vector<double> head_weights = linear_double(w.indexer_weights_proj, x, n, c.hidden_size, heads);
  for (double& v : head_weights) v /= std::sqrt(static_cast<double>(heads));
  EXPECT_LT(relative_error(got.q, q), 1e-5);
  EXPECT_LT(relative_error(got.k, k), 1e-5);
  EXPECT_LT(relative_error(got.weights, head_weights), 1e-5);

  // I(t, s) = sum_h w[t, h] relu(q[t, h] . k[s] / sqrt(dim)), causal.
  std::vector<double> want(static_cast<size_t>(n * n), -INFINITY);
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t s = 0; s <= t; ++s) {
      double score = 0;
      for (int64_t h = 0; h < heads; ++h) {
        double dot = 0;
        for (int64_t d = 0; d < dim; ++d) dot += q[(t * heads + h) * dim + d] * k[s * dim + d];
        score += head_weights[t * heads + h] * std::max(dot / std::sqrt(static_cast<double>(dim)), 0.0);
      }
      want[static_cast<size_t>(t * n + s)] = score;
    }
  }
  const kernels::cpu::DsaIndexerShape shape = dsa_indexer_shape(c, n, 0);
  std::vector<float> scores(static_cast<size_t>(n * n));
  kernels::cpu::dsa_index_scores(scores.data(), got.q.data(), got.weights.data(), got.k.data(), shape);
  double scale = 0, worst = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    if (std::isinf(want[i])) {
      EXPECT_TRUE(std::isinf(scores[i]) && scores[i] < 0) << "entry " << i << " is not causal";
      continue;
    }
    scale = std::max(scale, std::abs(want[i]));
    worst = std::max(worst, std::abs(scores[i] - want[i]));
  }
  EXPECT_LT(worst / scale, 1e-5);

  std::vector<int32_t> kept(static_cast<size_t>(n * c.index_topk));
  kernels::cpu::dsa_select_topk(kept.data(), scores.data(), shape);
  int rows_checked = 0;
  for (int64_t t = 0; t < n; ++t) {
    std::vector<int32_t> order(static_cast<size_t>(t + 1));
    std::iota(order.begin(), order.end(), 0);
    const double* row = want.data() + t * n;
    std::stable_sort(order.begin(), order.end(), [row](int32_t a, int32_t b) { return row[a] > row[b]; });
    const size_t count = std::min<size_t>(static_cast<size_t>(c.index_topk), order.size());
    // A near-tie at the boundary may fall either way in f32: such rows are not compared.
    if (count < order.size() && row[order[count - 1]] - row[order[count]] < 1e-4 * scale) continue;
    std::set<int32_t> want_set(order.begin(), order.begin() + static_cast<long>(count));
    const int32_t* got_row = kept.data() + t * c.index_topk;
    std::vector<int32_t> got_list(got_row, got_row + count);
    EXPECT_TRUE(std::is_sorted(got_list.begin(), got_list.end())) << "row " << t;
    EXPECT_EQ(std::set<int32_t>(got_list.begin(), got_list.end()), want_set) << "row " << t;
    for (int64_t j = static_cast<int64_t>(count); j < c.index_topk; ++j) EXPECT_EQ(got_row[j], -1) << "row " << t;
    ++rows_checked;
  }
  EXPECT_GE(rows_checked, n - 3);
}

TEST(DsaIndexer, TopkKeepsEveryTokenUpToTopkAndBreaksTiesTowardsTheEarlier) {
  kernels::cpu::DsaIndexerShape shape{.num_queries = 2, .first_position = 3, .num_heads = 1, .head_dim = 1, .topk = 4};
  // Query 0 sits at position 3 (4 candidates: all kept); query 1 at 4, with a tie at 1.0.
  const std::vector<float> scores = {0.5f, -1.0f, 2.0f, 0.0f, -INFINITY,  //
                                     1.0f, 3.0f, 1.0f, -2.0f, 1.0f};
  std::vector<int32_t> kept(8);
  kernels::cpu::dsa_select_topk(kept.data(), scores.data(), shape);
  EXPECT_EQ(kept, (std::vector<int32_t>{0, 1, 2, 3, 0, 1, 2, 4}));
}

// ---- Sparse latent attention against a reference over the kept set ------------------------------

TEST(DsaAttention, AttendsExactlyTheKeptTokens) {
  constexpr int64_t kRank = 16, kRope = 8, kHeads = 3, kQueries = 5, kFirst = 12, kWidth = 6;
  const kernels::cpu::MlaAttentionShape shape{.num_queries = kQueries, .first_position = kFirst, .num_heads = kHeads,
                                              .kv_lora_rank = kRank, .rope_dim = kRope, .scale = 0.3f};
  const int64_t tokens = kFirst + kQueries, row = kRank + kRope;
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> latent(static_cast<size_t>(tokens * row)), q(static_cast<size_t>(kQueries * kHeads * row));
  for (float& v : latent) v = normal(rng);
  for (float& v : q) v = normal(rng);
  std::vector<int32_t> kept(static_cast<size_t>(kQueries * kWidth), -1);
  for (int64_t i = 0; i < kQueries; ++i) {  // a random subset of the causal tokens, 1 .. kWidth of them
    std::vector<int32_t> candidates(static_cast<size_t>(kFirst + i + 1));
    std::iota(candidates.begin(), candidates.end(), 0);
    std::shuffle(candidates.begin(), candidates.end(), rng);
    const int64_t count = 1 + i % kWidth;
    std::sort(candidates.begin(), candidates.begin() + count);
    std::copy_n(candidates.begin(), count, kept.begin() + i * kWidth);
  }
  std::vector<float> out(static_cast<size_t>(kQueries * kHeads * kRank));
  kernels::cpu::sparse_mla_attention(out.data(), q.data(), latent.data(), kept.data(), kWidth, shape);

  std::vector<double> want(out.size(), 0.0);
  for (int64_t i = 0; i < kQueries; ++i) {
    for (int64_t h = 0; h < kHeads; ++h) {
      const float* qh = q.data() + (i * kHeads + h) * row;
      std::vector<double> scores;
      std::vector<int32_t> used;
      for (int64_t j = 0; j < kWidth; ++j) {
        const int32_t t = kept[static_cast<size_t>(i * kWidth + j)];
        if (t < 0) continue;
        double dot = 0;
        for (int64_t d = 0; d < row; ++d) dot += static_cast<double>(qh[d]) * latent[t * row + d];
        scores.push_back(dot * shape.scale);
        used.push_back(t);
      }
      const double top = *std::max_element(scores.begin(), scores.end());
      double sum = 0;
      for (double& s : scores) sum += (s = std::exp(s - top));
      for (size_t u = 0; u < used.size(); ++u) {
        for (int64_t d = 0; d < kRank; ++d) {
          want[static_cast<size_t>((i * kHeads + h) * kRank + d)] += scores[u] / sum * latent[used[u] * row + d];
        }
      }
    }
  }
  EXPECT_LT(relative_error(out, want), 1e-5);

  // The paged cache with scattered blocks gives the same numbers.
  constexpr int32_t kBlock = 4;
  const std::vector<int32_t> table = {3, 0, 4, 1, 2};  // 20 slots for 17 tokens
  std::vector<float> paged(static_cast<size_t>(5 * kBlock * row));
  for (int64_t t = 0; t < tokens; ++t) {
    std::copy_n(latent.data() + t * row, row, paged.data() + (table[t / kBlock] * kBlock + t % kBlock) * row);
  }
  std::vector<float> paged_out(out.size());
  kernels::cpu::paged_sparse_mla_attention(paged_out.data(), q.data(), paged.data(), kept.data(), kWidth, table.data(),
                                           kBlock, shape);
  EXPECT_EQ(paged_out, out);
}

// ---- The model ----------------------------------------------------------------------------------

constexpr int kPromptLength = 40;  // 5x the tiny preset's top-8

TEST(DsaModel, KeepingEveryTokenIsDeepseekV3WithTheSameWeights) {
  const ModelWeights weights = tiny_dsa_weights();
  const DenseModel dense_dsa(with_topk(weights, 64));  // >= the 40-token context: nothing dropped
  const DenseModel v3(without_indexer(weights));
  const std::vector<int32_t> tokens = prompt_of(kPromptLength, 1);
  const std::vector<float> want = sequence_logits(v3, tokens, kPromptLength);
  EXPECT_LT(relative_error(sequence_logits(dense_dsa, tokens, kPromptLength), want), 1e-6);
  // In chunks of 7 the rows run in products of other shapes; the fixed-order CPU product
  // (kernels/cpu/fixed_order_gemm.h) gives a row the same bits in any of them (the error is 0
  // today); the bound dates from a BLAS whose sums depended on the product's shape.
  EXPECT_LT(relative_error(sequence_logits(dense_dsa, tokens, 7), want), 4e-6);
}

TEST(DsaModel, TopkChangesTheLogitsOnlyPastTopkTokens) {
  const ModelWeights weights = tiny_dsa_weights();
  const DenseModel sparse(weights);  // top-8
  const DenseModel v3(without_indexer(weights));
  const std::vector<int32_t> tokens = prompt_of(kPromptLength, 2);
  const std::vector<float> got = sequence_logits(sparse, tokens, kPromptLength);
  const std::vector<float> want = sequence_logits(v3, tokens, kPromptLength);
  const size_t vocab = static_cast<size_t>(weights.config.vocab_size);
  const std::vector<float> got_head(got.begin(), got.begin() + 8 * vocab);
  const std::vector<float> want_head(want.begin(), want.begin() + 8 * vocab);
  EXPECT_LT(relative_error(got_head, want_head), 1e-6) << "positions 0..7 keep every token";
  const std::vector<float> got_tail(got.end() - vocab, got.end()), want_tail(want.end() - vocab, want.end());
  EXPECT_GT(relative_error(got_tail, want_tail), 1e-2) << "top-8 of 40 tokens must change the last logits";
}

TEST(DsaModel, PrefillChunksMatchTheWholePrompt) {
  const DenseModel model(tiny_dsa_weights());
  const std::vector<int32_t> tokens = prompt_of(kPromptLength, 3);
  const std::vector<float> want = sequence_logits(model, tokens, kPromptLength);
  for (int64_t chunk : {1, 5, 16}) {  // later chunks select among the index keys earlier ones cached
    EXPECT_LT(relative_error(sequence_logits(model, tokens, chunk), want), 1e-5) << "chunk " << chunk;
  }
}

TEST(DsaModel, EngineMatchesGreedyGenerate) {
  testing::expect_engine_matches_greedy_generate(DenseModel(tiny_dsa_weights()), "tiny-dsa");
}

TEST(DsaCache, PagedCacheHoldsOneIndexKeyPerTokenAndLayer) {
  const ModelConfig c = make_model_config({.arch = "deepseek_v32", .preset = "tiny-dsa"});
  EXPECT_EQ(index_key_values_per_token(c), 16);
  runner::PagedKvCache cache(c, 8, 4);
  EXPECT_EQ(cache.index_key_size, c.index_head_dim);
  ASSERT_EQ(cache.index_keys.size(), static_cast<size_t>(c.num_hidden_layers));
  for (const auto& layer : cache.index_keys) EXPECT_EQ(layer.size(), size_t{8 * 4 * 16});
  EXPECT_EQ(cache.latent_size, c.kv_lora_rank + c.qk_rope_head_dim);
  SequenceKvCache sequence(c, 10);
  ASSERT_EQ(sequence.index_keys.size(), static_cast<size_t>(c.num_hidden_layers));
  EXPECT_EQ(sequence.index_keys[0].size(), size_t{10 * 16});

  const ModelConfig v3 = make_model_config({.arch = "deepseek_v3", .preset = "tiny-deepseek"});
  EXPECT_EQ(index_key_values_per_token(v3), 0);
  EXPECT_TRUE(runner::PagedKvCache(v3, 8, 4).index_keys.empty());
  EXPECT_THROW(runner::PagedKvCache(c, 8, 4, MlaAttentionForm::kDecompressed), Error);
}

TEST(DsaModel, TensorParallelismRunsOnCpuAndGpuRanks) {
  const ModelConfig c = make_model_config({.arch = "deepseek_v32", .preset = "tiny-dsa"});
  EXPECT_NO_THROW(check_tp_size(c, 1));
  EXPECT_NO_THROW(check_tp_size(c, 2));  // test_tp_families.cpp runs it
  EXPECT_EQ(cuda_tp_unsupported_reason(c, 2), "");  // the indexer replicated, the heads split
  EXPECT_EQ(app::cuda_unsupported_reason(c), "");
  ModelConfig wide = c;
  wide.index_head_dim = 256;
  EXPECT_NE(app::cuda_unsupported_reason(wide).find("sparse attention"), std::string::npos);

  const auto dir = temp_dir("runner");
  make_model({.arch = "deepseek_v32", .preset = "tiny-dsa", .seed = 1, .out_dir = dir});
  testing::expect_cpu_load_and_tp_served(dir, "deepseek_v32");
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace tachyon::model
