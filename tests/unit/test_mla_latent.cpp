// The compressed-latent MLA cache and the absorbed attention (model/mla_absorbed.h,
// kernels/mla_attention.h) against the decompressed form they replace: the same logits (1e-5
// relative) and the same greedy tokens on tiny-deepseek and tiny-deepseek-noqlora, for one
// sequence at once, in prefill chunks, through the paged backend with a ragged batch and through
// the engine; the cache's per-token footprint; and one attention call per head against a
// double-precision reference written here.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "../engine_run.h"
#include "../model_test_util.h"
#include "tachyon/base/check.h"
#include "tachyon/engine/engine_core.h"
#include "tachyon/kernels/mla_attention.h"
#include "tachyon/model/attention_backend.h"
#include "tachyon/model/dense_model.h"
#include "tachyon/model/make_model.h"
#include "tachyon/model/mla_absorbed.h"
#include "tachyon/model/safetensors.h"
#include "tachyon/runner/cpu_model_runner.h"
#include "tachyon/runner/paged_attention_backend.h"

namespace tachyon::model {
namespace {

using testing::prompt_of;
using testing::relative_error;
using testing::sequence_logits;

constexpr const char* kPresets[] = {"tiny-deepseek", "tiny-deepseek-noqlora"};
constexpr double kLogitsTolerance = 1e-5;  // relative to the largest logit

DenseModel make_deepseek(const std::string& preset) {
  const auto dir = std::filesystem::temp_directory_path() /
                   ("tachyon-mla-latent-" + std::to_string(::getpid()) + "-" + preset);
  make_model({.arch = "deepseek_v3", .preset = preset, .seed = 5, .out_dir = dir});
  ModelWeights weights = load_weights(ModelConfig::from_dir(dir), SafetensorsCheckpoint(dir));
  std::filesystem::remove_all(dir);
  return DenseModel(std::move(weights));
}

// greedy_generate's loop over a cache of the given form.
std::vector<int32_t> greedy(const DenseModel& model, const std::vector<int32_t>& prompt, int64_t count,
                            MlaAttentionForm form) {
  SequenceKvCache cache(model.config(), static_cast<int64_t>(prompt.size()) + count, form);
  std::vector<int32_t> out;
  std::vector<float> logits = model.forward(prompt, cache);
  while (static_cast<int64_t>(out.size()) < count) {
    out.push_back(static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin()));
    logits = model.forward(std::span(&out.back(), 1), cache);
  }
  return out;
}

TEST(MlaLatent, OneSequenceAtOnceMatchesTheDecompressedForm) {
  for (const char* preset : kPresets) {
    const DenseModel model = make_deepseek(preset);
    const std::vector<int32_t> tokens = prompt_of(19, 1);
    const std::vector<float> want = sequence_logits(model, tokens, 19, MlaAttentionForm::kDecompressed);
    const std::vector<float> got = sequence_logits(model, tokens, 19, MlaAttentionForm::kAbsorbed);
    EXPECT_LT(relative_error(got, want), kLogitsTolerance) << preset;
  }
}

TEST(MlaLatent, PrefillChunksMatchTheDecompressedForm) {
  for (const char* preset : kPresets) {
    const DenseModel model = make_deepseek(preset);
    const std::vector<int32_t> tokens = prompt_of(19, 2);
    const std::vector<float> want = sequence_logits(model, tokens, 19, MlaAttentionForm::kDecompressed);
    for (int64_t chunk : {1, 4, 7}) {  // chunks attend the latents the earlier chunks cached
      const std::vector<float> got = sequence_logits(model, tokens, chunk, MlaAttentionForm::kAbsorbed);
      EXPECT_LT(relative_error(got, want), kLogitsTolerance) << preset << " chunk " << chunk;
    }
    const std::vector<int32_t> prompt = prompt_of(11, 3);
    const std::vector<int32_t> absorbed = greedy(model, prompt, 8, MlaAttentionForm::kAbsorbed);
    EXPECT_EQ(absorbed, greedy(model, prompt, 8, MlaAttentionForm::kDecompressed)) << preset;
    EXPECT_EQ(absorbed, greedy_generate(model, prompt, 8)) << preset << ": greedy_generate serves the absorbed form";
  }
}

// Two sequences in two ragged steps over a paged cache with scattered blocks: step 1 prefills a
// chunk of each, step 2 the rest of one and a single token of the other. Every token's logits
// are returned and compared with the one-sequence decompressed forward.
TEST(MlaLatent, PagedRaggedBatchMatchesTheDecompressedForm) {
  constexpr int32_t kBlockSize = 4;
  for (const char* preset : kPresets) {
    const DenseModel model = make_deepseek(preset);
    const std::vector<std::vector<int32_t>> tokens = {prompt_of(10, 4), prompt_of(8, 5)};
    const std::vector<std::vector<int32_t>> blocks = {{3, 0, 5}, {1, 6}};
    const std::vector<std::vector<int64_t>> chunk_ends = {{6, 10}, {7, 8}};  // tokens computed after each step
    for (MlaAttentionForm form : {MlaAttentionForm::kAbsorbed, MlaAttentionForm::kDecompressed}) {
      runner::PagedKvCache cache(model.config(), 8, kBlockSize, form);
      std::vector<std::vector<float>> got(tokens.size());
      for (size_t step = 0; step < 2; ++step) {
        core::StepPlan plan;
        plan.block_size = kBlockSize;
        for (size_t s = 0; s < tokens.size(); ++s) {
          core::ScheduledSequence sequence;
          sequence.sequence_id = static_cast<int64_t>(s);
          sequence.first_token = plan.num_tokens();
          sequence.num_computed = step == 0 ? 0 : chunk_ends[s][0];
          sequence.num_tokens = chunk_ends[s][step] - sequence.num_computed;
          sequence.block_table = blocks[s];
          for (int64_t p = sequence.num_computed; p < chunk_ends[s][step]; ++p) {
            plan.logits_rows.push_back(plan.num_tokens());
            plan.token_ids.push_back(tokens[s][static_cast<size_t>(p)]);
            plan.positions.push_back(p);
            plan.slot_mapping.push_back(int64_t{blocks[s][static_cast<size_t>(p / kBlockSize)]} * kBlockSize +
                                        p % kBlockSize);
          }
          plan.sequences.push_back(sequence);
        }
        runner::PagedAttentionBackend attention(model.config(), cache, plan);
        const std::vector<float> logits =
            model.forward(ForwardBatch{plan.token_ids, plan.positions, plan.logits_rows}, attention);
        const int64_t vocab = model.config().vocab_size;
        for (const core::ScheduledSequence& sequence : plan.sequences) {
          auto& out = got[static_cast<size_t>(sequence.sequence_id)];
          out.insert(out.end(), logits.begin() + sequence.first_token * vocab,
                     logits.begin() + (sequence.first_token + sequence.num_tokens) * vocab);
        }
      }
      for (size_t s = 0; s < tokens.size(); ++s) {
        const std::vector<float> want =
            sequence_logits(model, tokens[s], static_cast<int64_t>(tokens[s].size()), MlaAttentionForm::kDecompressed);
        EXPECT_LT(relative_error(got[s], want), kLogitsTolerance)
            << preset << " sequence " << s << " absorbed " << (form == MlaAttentionForm::kAbsorbed);
      }
    }
  }
}

std::vector<std::vector<int32_t>> engine_tokens(const DenseModel& model, MlaAttentionForm form,
                                                const std::vector<std::vector<int32_t>>& prompts) {
  core::EngineConfig config;
  config.scheduler.max_num_batched_tokens = 16;  // the 23-token prompt is chunked
  config.scheduler.max_model_len = 64;
  config.num_blocks = 64;
  config.block_size = 4;
  engine::EngineCore engine(config, std::make_unique<runner::CpuModelRunner>(model, config.num_blocks,
                                                                             config.block_size, form));
  core::SamplingParams params;
  params.temperature = 0.0f;
  params.max_tokens = 7;
  params.ignore_eos = true;
  std::vector<std::shared_ptr<engine::OutputChannel>> channels;
  for (const std::vector<int32_t>& prompt : prompts) {
    channels.push_back(std::make_shared<engine::OutputChannel>());
    engine.submit(prompt, params, channels.back());
  }
  return testing::run_engine_to_idle(engine, channels, 1000);
}

TEST(MlaLatent, EngineGreedyTokensAreTheDecompressedForms) {
  for (const char* preset : kPresets) {
    const DenseModel model = make_deepseek(preset);
    const std::vector<std::vector<int32_t>> prompts = {prompt_of(3, 6), prompt_of(23, 7), prompt_of(9, 8),
                                                       prompt_of(14, 9)};
    const auto absorbed = engine_tokens(model, MlaAttentionForm::kAbsorbed, prompts);
    EXPECT_EQ(absorbed, engine_tokens(model, MlaAttentionForm::kDecompressed, prompts)) << preset;
    for (size_t p = 0; p < prompts.size(); ++p) {
      EXPECT_EQ(absorbed[p], greedy(model, prompts[p], 7, MlaAttentionForm::kDecompressed)) << preset << " " << p;
    }
  }
}

// Values per layer and token actually allocated by a cache of `slots` tokens.
template <typename Cache>
int64_t allocated_per_token(const Cache& cache, int64_t slots) {
  EXPECT_FALSE(cache.keys.empty() && cache.latents.empty());
  const size_t layer0 = cache.keys.empty() ? cache.latents[0].size() : cache.keys[0].size() + cache.values[0].size();
  return static_cast<int64_t>(layer0) / slots;
}

TEST(MlaLatent, CacheHoldsTheLatentRowPerTokenAndLayer) {
  const ModelConfig mla = make_model_config({.arch = "deepseek_v3", .preset = "tiny-deepseek"});
  const int64_t latent = mla.kv_lora_rank + mla.qk_rope_head_dim;  // 16 + 8
  EXPECT_EQ(kv_values_per_token(mla, MlaAttentionForm::kAbsorbed), latent);
  EXPECT_EQ(kv_values_per_token(mla, MlaAttentionForm::kDecompressed),
            mla.num_attention_heads * (mla.head_dim + mla.v_head_dim));
  const SequenceKvCache sequence(mla, 10);  // the default form is the absorbed one
  EXPECT_EQ(sequence.latents.size(), static_cast<size_t>(mla.num_hidden_layers));
  EXPECT_TRUE(sequence.keys.empty() && sequence.values.empty());
  EXPECT_EQ(allocated_per_token(sequence, 10), latent);
  const runner::PagedKvCache paged(mla, 6, 4);
  EXPECT_EQ(paged.latent_size, latent);
  EXPECT_EQ(allocated_per_token(paged, 24), latent);
  EXPECT_EQ(allocated_per_token(runner::PagedKvCache(mla, 6, 4, MlaAttentionForm::kDecompressed), 24),
            kv_values_per_token(mla, MlaAttentionForm::kDecompressed));

  // DeepSeek-V3's real dims: 512 + 64 = 576 values per token instead of 128 x (192 + 128).
  const ModelConfig v3 = make_model_config({.arch = "deepseek_v3", .preset = "deepseek-v3-reduced"});
  EXPECT_EQ(kv_values_per_token(v3, MlaAttentionForm::kAbsorbed), 576);
  EXPECT_EQ(kv_values_per_token(v3, MlaAttentionForm::kDecompressed), 128 * (192 + 128));

  // A dense model's cache is K and V whatever the form.
  const ModelConfig dense = make_model_config({.arch = "qwen3", .preset = "tiny"});
  for (MlaAttentionForm form : {MlaAttentionForm::kAbsorbed, MlaAttentionForm::kDecompressed}) {
    EXPECT_EQ(kv_values_per_token(dense, form), dense.kv_size() + dense.v_size());
    const SequenceKvCache cache(dense, 10, form);
    EXPECT_TRUE(cache.latents.empty());
    EXPECT_EQ(allocated_per_token(cache, 10), dense.kv_size() + dense.v_size());
    EXPECT_EQ(allocated_per_token(runner::PagedKvCache(dense, 6, 4, form), 24), dense.kv_size() + dense.v_size());
  }
}

TEST(MlaLatent, CacheOfOneFormRefusesTheOtherFormsCalls) {
  const ModelConfig c = make_model_config({.arch = "deepseek_v3", .preset = "tiny-deepseek"});
  SequenceKvCache latent(c, 4), decompressed(c, 4, MlaAttentionForm::kDecompressed);
  SequenceAttention on_latent(c, latent, 1), on_decompressed(c, decompressed, 1);
  const std::vector<float> k(static_cast<size_t>(c.kv_size())), v(static_cast<size_t>(c.v_size()));
  const std::vector<float> row(static_cast<size_t>(c.kv_lora_rank + c.qk_rope_head_dim));
  EXPECT_THROW(on_latent.store_kv(0, k, v), Error);
  EXPECT_THROW(on_decompressed.store_latent(0, row), Error);
  EXPECT_NO_THROW(on_latent.store_latent(0, row));
}

// ---------------------------------------------------------------------------------------------
// One attention call per head against double precision: random kv_b_proj, queries and latent
// rows; the reference decompresses every head's keys and values (the non-absorbed math), the
// absorbed path runs absorb_queries, the sequence backend's attend_latent, expand_attended.

std::vector<float> random_values(std::mt19937& gen, size_t count) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> out(count);
  for (float& v : out) v = normal(gen);
  return out;
}

TEST(MlaLatent, OneAttentionCallMatchesADoubleReferencePerHead) {
  const ModelConfig c = make_model_config({.arch = "deepseek_v3", .preset = "tiny-deepseek"});
  const int64_t heads = c.num_attention_heads, nope = c.qk_nope_head_dim, rope = c.qk_rope_head_dim;
  const int64_t rank = c.kv_lora_rank, vd = c.v_head_dim, qk = c.head_dim, row = rank + rope;
  const int64_t cached = 6, n = 5, total = cached + n;  // 5 new tokens after 6 cached ones
  std::mt19937 gen(17);
  LayerWeights w;
  w.kv_b_proj = random_values(gen, static_cast<size_t>(heads * (nope + vd) * rank));
  for (float& x : w.kv_b_proj) x /= std::sqrt(static_cast<float>(rank));
  const std::vector<float> latents = random_values(gen, static_cast<size_t>(total * row));  // [total, rank + rope]
  const std::vector<float> q = random_values(gen, static_cast<size_t>(n * heads * qk));     // [n, heads, qk]

  SequenceKvCache cache(c, total);
  std::copy(latents.begin(), latents.end(), cache.latents[0].begin());  // as earlier steps would have
  cache.length = cached;
  SequenceAttention attention(c, cache, n);
  const std::vector<float> q_latent = absorb_queries(c, w, q);
  std::vector<float> out_latent(static_cast<size_t>(n * heads * rank));
  attention.attend_latent(0, q_latent, out_latent);
  const std::vector<float> got = expand_attended(c, w, out_latent);  // [n, heads, v_head_dim]

  const double scale = attention_shape(c, n, cached).scale;
  double worst = 0, largest = 0;
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t h = 0; h < heads; ++h) {
      const float* w_uk = w.kv_b_proj.data() + h * (nope + vd) * rank;  // [nope, rank]
      const float* w_uv = w_uk + nope * rank;                           // [vd, rank]
      const float* qh = q.data() + (i * heads + h) * qk;
      std::vector<double> scores, values;  // [t], [t, vd]
      for (int64_t t = 0; t <= cached + i; ++t) {
        const float* c_kv = latents.data() + t * row;
        double dot = 0;
        for (int64_t d = 0; d < nope; ++d) {
          double k_nope = 0;
          for (int64_t r = 0; r < rank; ++r) k_nope += double{w_uk[d * rank + r]} * c_kv[r];
          dot += qh[d] * k_nope;
        }
        for (int64_t d = 0; d < rope; ++d) dot += double{qh[nope + d]} * c_kv[rank + d];
        scores.push_back(dot * scale);
        for (int64_t e = 0; e < vd; ++e) {
          double v = 0;
          for (int64_t r = 0; r < rank; ++r) v += double{w_uv[e * rank + r]} * c_kv[r];
          values.push_back(v);
        }
      }
      const double max_score = *std::max_element(scores.begin(), scores.end());
      double denominator = 0;
      for (double& s : scores) denominator += (s = std::exp(s - max_score));
      for (int64_t e = 0; e < vd; ++e) {
        double want = 0;
        for (size_t t = 0; t < scores.size(); ++t) want += scores[t] / denominator * values[t * vd + e];
        const double diff = std::abs(want - got[static_cast<size_t>((i * heads + h) * vd + e)]);
        worst = std::max(worst, diff);
        largest = std::max(largest, std::abs(want));
        EXPECT_LT(diff, 1e-5 * (1 + std::abs(want))) << "token " << i << " head " << h << " dim " << e;
      }
    }
  }
  EXPECT_LT(worst, 1e-5 * largest);

  // The paged kernel over scattered blocks gives the contiguous kernel's latents exactly.
  const int32_t block_size = 3;
  const std::vector<int32_t> block_table = {4, 1, 3, 0};  // ceil(11 / 3) blocks
  std::vector<float> paged_cache(static_cast<size_t>(5 * block_size * row));
  for (int64_t t = 0; t < total; ++t) {
    const int64_t slot = int64_t{block_table[static_cast<size_t>(t / block_size)]} * block_size + t % block_size;
    std::copy_n(latents.data() + t * row, row, paged_cache.data() + slot * row);
  }
  std::vector<float> paged_out(out_latent.size());
  kernels::cpu::paged_mla_attention(paged_out.data(), q_latent.data(), paged_cache.data(), block_table.data(),
                                    block_size, mla_attention_shape(c, n, cached));
  EXPECT_EQ(paged_out, out_latent);
}

}  // namespace
}  // namespace tachyon::model
