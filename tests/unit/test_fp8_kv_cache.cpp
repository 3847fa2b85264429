// The FP8 KV cache of the CPU reference (--kv-cache-dtype fp8, runner/paged_attention_backend.h):
// stored rows are the FP8 round trip of what the model wrote, per the layout (K and V per token and
// KV head, the latent's kv_lora_rank part per 128 values with RoPE kept, index keys per token);
// dense, latent and sparse models stay close to the bf16 cache's logits over a prefill and later
// chunks (which read the FP8 rows back) and differ from them (the cache is really FP8); the flag
// is refused where no test covers it. The canary's accuracy with it: server.canary_fp8.
// Tensor-parallel CPU ranks with the FP8 cache give the single rank's tokens (the factors are per
// KV head or latent row, which a rank holds whole).
// Run: build/tests/unit_tests --gtest_filter='Fp8KvCache*'
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <numeric>
#include <set>
#include <system_error>

#include "../cli_run.h"
#include "../engine_run.h"
#include "tachyon/engine/engine_core.h"
#include "tachyon/runner/cpu_model_runner.h"
#include "tachyon/runner/tp_cpu_model_runner.h"
#include "tachyon/model/dense_model.h"
#include "tachyon/model/gpu_support.h"
#include "tachyon/model/make_model.h"
#include "tachyon/runner/paged_attention_backend.h"
#include "tachyon/tensor/fp8.h"

namespace tachyon::runner {
namespace {

// The models this process wrote, removed when it exits (each test process writes its own).
struct WrittenModels {
  std::set<std::filesystem::path> dirs;
  ~WrittenModels() {
    for (const std::filesystem::path& dir : dirs) {
      std::error_code ignored;
      std::filesystem::remove_all(dir, ignored);
    }
  }
};

std::filesystem::path kv_fp8_model(const std::string& arch, const std::string& preset) {
  static WrittenModels written;
  auto dir = std::filesystem::temp_directory_path() /
             ("tachyon-kvfp8-" + std::to_string(::getpid()) + "-" + arch + "-" + preset);
  if (!std::filesystem::exists(dir / "config.json")) {
    written.dirs.insert(dir);
    model::make_model({.arch = arch, .preset = preset, .seed = 5, .out_dir = dir});
  }
  return dir;
}

// One sequence's plan: tokens [begin, end) of `tokens` over blocks 0, 1, ... (block size 16),
// logits for every row.
core::StepPlan chunk_plan(const std::vector<int32_t>& tokens, int64_t begin, int64_t end) {
  core::StepPlan plan;
  plan.block_size = 16;
  core::ScheduledSequence s;
  s.first_token = 0;
  s.num_tokens = end - begin;
  s.num_computed = begin;
  for (int32_t b = 0; b * 16 < end; ++b) s.block_table.push_back(b);
  for (int64_t t = begin; t < end; ++t) {
    plan.token_ids.push_back(tokens[static_cast<size_t>(t)]);
    plan.positions.push_back(t);
    plan.slot_mapping.push_back(t);
    plan.logits_rows.push_back(t - begin);
  }
  plan.sequences.push_back(std::move(s));
  return plan;
}

// Logits of a prefill of 24 tokens, then chunks of 9 and 1 (which read the cached rows).
std::vector<float> chunked_logits(const model::DenseModel& m, PagedKvCache& cache) {
  std::vector<int32_t> tokens(34);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<int32_t>((i * 37 + 11) % m.config().vocab_size);
  std::vector<float> all;
  for (auto [begin, end] : {std::pair<int64_t, int64_t>{0, 24}, {24, 33}, {33, 34}}) {
    const core::StepPlan plan = chunk_plan(tokens, begin, end);
    PagedAttentionBackend attention(m.config(), cache, plan);
    const std::vector<float> logits =
        m.forward(model::ForwardBatch{plan.token_ids, plan.positions, plan.logits_rows}, attention);
    all.insert(all.end(), logits.begin(), logits.end());
  }
  return all;
}

TEST(Fp8KvCache, StoredRowsAreTheFp8RoundTripOfEachGroup) {
  const auto dir = kv_fp8_model("qwen3", "tiny");
  const model::ModelConfig c = model::ModelConfig::from_dir(dir);
  PagedKvCache cache(c, 4, 16, model::MlaAttentionForm::kAbsorbed, /*fp8=*/true);
  std::vector<int32_t> tokens = {1, 2, 3};
  const core::StepPlan plan = chunk_plan(tokens, 0, 3);
  PagedAttentionBackend attention(c, cache, plan);
  std::vector<float> k(static_cast<size_t>(3 * c.kv_size())), v(static_cast<size_t>(3 * c.v_size()));
  for (size_t i = 0; i < k.size(); ++i) k[i] = std::sin(0.37f * static_cast<float>(i)) * (i % 64 == 5 ? 40.0f : 1.0f);
  for (size_t i = 0; i < v.size(); ++i) v[i] = std::cos(0.11f * static_cast<float>(i));
  attention.store_kv(1, k, v);
  std::vector<float> k_want = k;
  fp8_block_round_trip(k_want, 3 * c.num_key_value_heads, c.head_dim, 1, c.head_dim);  // per token and head
  int changed = 0;
  for (size_t i = 0; i < k.size(); ++i) {
    ASSERT_EQ(cache.keys[1][i], k_want[i]) << i;
    changed += cache.keys[1][i] != k[i];
  }
  EXPECT_GT(changed, static_cast<int>(k.size()) / 2) << "the rows are not FP8";
  std::vector<float> v_want = v;
  fp8_block_round_trip(v_want, 3 * c.num_key_value_heads, c.value_head_dim(), 1, c.value_head_dim());
  for (size_t i = 0; i < v.size(); ++i) ASSERT_EQ(cache.values[1][i], v_want[i]) << i;
}

TEST(Fp8KvCache, LatentRowsKeepTheirRopePart) {
  const auto dir = kv_fp8_model("deepseek_v3", "tiny-deepseek");
  const model::ModelConfig c = model::ModelConfig::from_dir(dir);
  PagedKvCache cache(c, 4, 16, model::MlaAttentionForm::kAbsorbed, /*fp8=*/true);
  std::vector<int32_t> tokens = {1, 2};
  const core::StepPlan plan = chunk_plan(tokens, 0, 2);
  PagedAttentionBackend attention(c, cache, plan);
  const int64_t width = cache.latent_size, rank = c.kv_lora_rank;
  std::vector<float> latent(static_cast<size_t>(2 * width));
  for (size_t i = 0; i < latent.size(); ++i) latent[i] = std::sin(0.23f * static_cast<float>(i) + 0.1f);
  attention.store_latent(0, latent);
  for (int64_t t = 0; t < 2; ++t) {
    std::vector<float> want(latent.begin() + t * width, latent.begin() + t * width + rank);
    fp8_block_round_trip(want, 1, rank, 1, 128);
    for (int64_t i = 0; i < width; ++i) {
      const float stored = cache.latents[0][static_cast<size_t>(t * width + i)];
      ASSERT_EQ(stored, i < rank ? want[static_cast<size_t>(i)] : latent[static_cast<size_t>(t * width + i)])
          << "token " << t << " value " << i;
    }
  }
}

TEST(Fp8KvCache, LogitsStayCloseToTheBf16CacheAndDiffer) {
  struct Case {
    const char* arch;
    const char* preset;
    double max_error;
  };
  // Measured (seed 5, this prompt, relative L2 over 34 rows): qwen3 4.2%, tiny-deepseek 16%,
  // tiny-dsa 47%. Each cached value is within E4M3's rounding (2.6% relative RMS); random untrained
  // weights amplify it layer by layer, routing flips in the MoE layers (as with FP8 weights,
  // test_fp8_checkpoints.cpp: 31% on tiny-deepseek), and FP8 index keys flip the DSA top-k. So the
  // bounds guard against gross errors; the stores' exact values are pinned above and the accuracy
  // on a trained model by server.canary_fp8.
  for (const Case& k : {Case{"qwen3", "tiny", 0.08}, Case{"deepseek_v3", "tiny-deepseek", 0.25},
                        Case{"deepseek_v32", "tiny-dsa", 0.6}}) {
    SCOPED_TRACE(std::string(k.arch) + "/" + k.preset);
    const auto dir = kv_fp8_model(k.arch, k.preset);
    const model::ModelConfig c = model::ModelConfig::from_dir(dir);
    const model::DenseModel m(model::load_weights(c, model::SafetensorsCheckpoint(dir)));
    PagedKvCache plain(c, 4, 16), fp8(c, 4, 16, model::MlaAttentionForm::kAbsorbed, true);
    const std::vector<float> want = chunked_logits(m, plain), got = chunked_logits(m, fp8);
    ASSERT_EQ(got.size(), want.size());
    double diff = 0.0, norm = 0.0;
    for (size_t i = 0; i < want.size(); ++i) {
      diff += (got[i] - want[i]) * (got[i] - want[i]);
      norm += want[i] * want[i];
    }
    const double relative = std::sqrt(diff / norm);
    std::printf("[fp8 kv] %-28s relative logit error %.4f\n", (std::string(k.arch) + "/" + k.preset).c_str(), relative);
    EXPECT_LT(relative, k.max_error);
    EXPECT_GT(relative, 1e-4) << "the FP8 cache gave the bf16 cache's logits";
  }
}

// Five prompts at once, chunked under a 16-token budget, 12 greedy tokens each.
std::vector<std::vector<int32_t>> fp8_kv_engine_tokens(std::unique_ptr<ModelRunner> runner, int64_t vocab) {
  core::EngineConfig c;
  c.scheduler.max_num_batched_tokens = 16;
  c.scheduler.max_model_len = 128;
  c.num_blocks = 64;
  c.block_size = 4;
  engine::EngineCore engine(c, std::move(runner));
  core::SamplingParams params;
  params.temperature = 0.0f;
  params.max_tokens = 12;
  params.ignore_eos = true;
  std::vector<std::shared_ptr<engine::OutputChannel>> channels;
  for (int p = 0; p < 5; ++p) {
    std::vector<int32_t> prompt;
    for (int i = 0; i < 3 + 5 * p; ++i) prompt.push_back(static_cast<int32_t>((i * 37 + p * 101 + 11) % vocab));
    channels.push_back(std::make_shared<engine::OutputChannel>());
    engine.submit(prompt, params, channels.back());
  }
  return testing::run_engine_to_idle(engine, channels, 10000);
}

TEST(Fp8KvCache, TensorParallelRanksGiveTheSingleRanksTokens) {
  for (auto [arch, preset] : {std::pair{"qwen3", "tiny"}, std::pair{"deepseek_v3", "tiny-deepseek"}}) {
    SCOPED_TRACE(std::string(arch) + "/" + preset);
    const auto dir = kv_fp8_model(arch, preset);
    const model::ModelConfig c = model::ModelConfig::from_dir(dir);
    const model::ModelWeights weights = model::load_weights(c, model::SafetensorsCheckpoint(dir));
    const auto single = fp8_kv_engine_tokens(
        std::make_unique<CpuModelRunner>(std::make_unique<model::DenseModel>(weights), 64, 4,
                                         model::MlaAttentionForm::kAbsorbed, /*fp8_kv_cache=*/true),
        c.vocab_size);
    const auto bf16_cache = fp8_kv_engine_tokens(
        std::make_unique<CpuModelRunner>(std::make_unique<model::DenseModel>(weights), 64, 4), c.vocab_size);
    EXPECT_NE(single, bf16_cache) << "the FP8 cache changed no token (is it FP8?)";
    const auto tp2 = fp8_kv_engine_tokens(
        std::make_unique<TpCpuModelRunner>(weights, 2, 64, 4, /*expert_parallel=*/false, /*fp8_kv_cache=*/true),
        c.vocab_size);
    EXPECT_EQ(tp2, single);
  }
}

// Which caches one GPU holds in FP8 (model/gpu_support.h): dense K/V and, since the latent kernels
// read the FP8 planes, DeepSeek's latent rows and DSA's index keys in 16-byte code chunks; never
// over tensor-parallel GPUs (no test there).
TEST(Fp8KvCache, OneGpuHoldsDenseAndLatentCachesInFp8) {
  for (const auto& [arch, preset] : {std::pair{"qwen3", "tiny-gpu"}, std::pair{"deepseek_v3", "tiny-gpu-deepseek-all"},
                                     std::pair{"deepseek_v32", "tiny-gpu-dsa-all"}, std::pair{"glm_moe_dsa", "tiny-gpu-glm-all"}}) {
    SCOPED_TRACE(std::string(arch) + " " + preset);
    const model::ModelConfig c = model::ModelConfig::from_dir(kv_fp8_model(arch, preset));
    EXPECT_EQ(model::fp8_kv_cache_gpu_unsupported(c, false), "");
    EXPECT_NE(model::fp8_kv_cache_gpu_unsupported(c, true).find("tensor-parallel"), std::string::npos);
  }
  model::ModelConfig odd = model::ModelConfig::from_dir(kv_fp8_model("deepseek_v32", "tiny-gpu-dsa-all"));
  odd.kv_lora_rank = 24;
  EXPECT_NE(model::fp8_kv_cache_gpu_unsupported(odd, false).find("multiples of 16"), std::string::npos);
  odd.kv_lora_rank = 32;
  odd.index_head_dim = 8;
  EXPECT_NE(model::fp8_kv_cache_gpu_unsupported(odd, false).find("multiples of 16"), std::string::npos);
}

TEST(Fp8KvCache, RefusedWhereNoTestCoversItInOneLine) {
  const auto dir = kv_fp8_model("qwen3", "tiny-gpu");
  const std::string base = "generate " + dir.string() + " --prompt-ids 1,2,3 --max-tokens 2 --kv-cache-dtype fp8";
  // One GPU serves the FP8 cache for dense attention (tests/gpu/test_cuda_fp8.cpp); tensor-parallel
  // GPUs have no test of it: refused before anything loads, in a CUDA build or not.
  const testing::CliRun gpu = testing::run_cli(base + " --device cuda --tp 2");
  EXPECT_EQ(gpu.exit_code, 1);
  EXPECT_EQ(gpu.output.rfind("error: --kv-cache-dtype fp8 on --device cuda: an FP8 KV cache over tensor-parallel GPUs",
                             0),
            0u)
      << gpu.output;
  const testing::CliRun tp = testing::run_cli(base + " --device cpu --tp 2");
  EXPECT_EQ(tp.exit_code, 0) << tp.output;
  // Speculation over the FP8 cache is tested on the CPU (every drafter), and on one GPU with n-gram
  // drafts (tests/gpu/test_cuda_speculative.cpp); a draft model over it on the GPU is refused.
  const testing::CliRun spec = testing::run_cli(base + " --device cuda --speculative-method draft --draft-model " +
                                                dir.string() + " --num-speculative-tokens 1");
  EXPECT_EQ(spec.exit_code, 1);
  EXPECT_NE(spec.output.find("an FP8 KV cache with --speculative-method draft on GPUs"), std::string::npos)
      << spec.output;
  const testing::CliRun ngram =
      testing::run_cli(base + " --device cpu --speculative-method ngram --num-speculative-tokens 2");
  EXPECT_EQ(ngram.exit_code, 0) << ngram.output;
  const testing::CliRun bad = testing::run_cli(base + " --kv-cache-dtype fp16");
  EXPECT_NE(bad.exit_code, 0);
  const testing::CliRun cpu = testing::run_cli(base + " --device cpu");
  EXPECT_EQ(cpu.exit_code, 0) << cpu.output;
}

}  // namespace
}  // namespace tachyon::runner
