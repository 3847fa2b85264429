// The CUDA runner's KV rows for prefill/decode disaggregation (runner/cuda/cuda_kv_rows.h):
//   - rows gathered from one runner's cache and scattered into another's, under other block
//     ids, gather back bit for bit, and the second runner's decode from
//     them gives the first's logits bit for bit;
//   - through two engines (engine/kv_transfer.h: a prefill engine leases a prompt's KV, the rows
//     are exported and imported by a decode engine that never computes the prompt), greedy and
//     seeded requests give exactly one engine's tokens, and every block returns to free.
// Dense (K and V planes), latent attention (one plane) and the sparse indexer (latent + index
// keys). Needs a GPU: ctest -R gpu.cuda_kv_transfer (scripts/gpu-test.sh).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

#include "runner_test_util.h"
#include "tachyon/engine/kv_transfer.h"

namespace tachyon::runner {
namespace {

using core::SamplingParams;

core::EngineConfig transfer_config(int32_t block_size) {
  core::EngineConfig config = small_config(/*eager=*/false);
  config.block_size = block_size;
  config.device.kv_cache_memory_bytes = int64_t{64} << 20;  // three runners share the GPU
  return config;
}

std::vector<int32_t> random_prompt(std::mt19937_64& gen, int64_t vocab, int length) {
  std::uniform_int_distribution<int32_t> token(0, static_cast<int32_t>(vocab - 1));
  std::vector<int32_t> prompt(static_cast<size_t>(length));
  for (int32_t& t : prompt) t = token(gen);
  return prompt;
}

std::vector<int32_t> tokens_of(const std::vector<core::SampledToken>& sampled) {
  std::vector<int32_t> tokens;
  for (const core::SampledToken& s : sampled) tokens.push_back(s.token);
  return tokens;
}

class CudaKvTransfer : public ::testing::TestWithParam<Variant> {};

TEST_P(CudaKvTransfer, RowsMoveBitExactlyAndDecodeAsTheSourceDoes) {
  const fs::path dir = make_tiny(GetParam());
  const model::ModelConfig mc = model::ModelConfig::from_dir(dir);
  model::SafetensorsCheckpoint checkpoint(dir);
  const model::Bf16ModelWeights weights = model::load_weights_bf16(mc, checkpoint);
  CudaModelRunner source(weights, transfer_config(16));
  CudaModelRunner target(weights, transfer_config(16));
  ASSERT_NE(source.kv_rows(), nullptr);
  ASSERT_NE(target.kv_rows(), nullptr);
  ASSERT_EQ(source.kv_rows()->values_per_token(), target.kv_rows()->values_per_token());
  auto gen = gpu_test::rng(71);
  SamplingParams greedy;
  greedy.temperature = 0.0f;

  // The source prefills a 45-token prompt (three blocks of 16, the last partial) at block ids
  // that do not start at 0.
  std::vector<PlanSequence> on_source(1), on_target(1);
  on_source[0].tokens = random_prompt(gen, mc.vocab_size, 45);
  int32_t next_source = 5, next_target = 3;
  const std::vector<int32_t> first = tokens_of(source.execute(make_plan(on_source, {45}, 16, next_source, greedy)));
  ASSERT_EQ(first.size(), 1u);
  const int64_t width = source.kv_rows()->values_per_token();
  std::vector<float> rows(static_cast<size_t>(45 * width));
  source.kv_rows()->gather(on_source[0].blocks, 45, rows);
  int64_t nonzero = 0, finite = 0;
  for (float v : rows) nonzero += v != 0.0f, finite += std::isfinite(v);
  EXPECT_EQ(finite, static_cast<int64_t>(rows.size()));
  EXPECT_GT(nonzero, static_cast<int64_t>(rows.size()) / 2) << "the gathered rows are mostly zeros";

  // Into the target, at other block ids in another order; gathered back, every bit the same.
  on_target[0].tokens = on_source[0].tokens;
  on_target[0].blocks = {9, 4, 6};
  next_target = 10;
  on_target[0].computed = 45;
  target.kv_rows()->scatter(on_target[0].blocks, 45, rows);
  std::vector<float> back(rows.size());
  target.kv_rows()->gather(on_target[0].blocks, 45, back);
  EXPECT_EQ(std::memcmp(back.data(), rows.data(), rows.size() * sizeof(float)), 0) << "rows changed in the move";

  // Both decode the same 6 greedy tokens from there, with the same logits bit for bit.
  int32_t next = first[0];
  for (int step = 0; step < 6; ++step) {
    on_source[0].tokens.push_back(next);
    on_target[0].tokens.push_back(next);
    const std::vector<int32_t> a = tokens_of(source.execute(make_plan(on_source, {1}, 16, next_source, greedy)));
    const std::vector<float> la = source.last_logits(1);
    const std::vector<int32_t> b = tokens_of(target.execute(make_plan(on_target, {1}, 16, next_target, greedy)));
    const std::vector<float> lb = target.last_logits(1);
    ASSERT_EQ(la.size(), static_cast<size_t>(mc.vocab_size));
    ASSERT_EQ(a.size(), 1u);
    EXPECT_EQ(a, b) << "step " << step;
    EXPECT_EQ(std::memcmp(la.data(), lb.data(), la.size() * sizeof(float)), 0) << "step " << step << ": logits differ";
    next = a[0];
  }

  // Spans that do not fit are refused by name.
  EXPECT_THROW(source.kv_rows()->gather(on_source[0].blocks, 45, std::span<float>(rows.data(), rows.size() - 1)), Error);
  const std::vector<int32_t> outside = {source.num_blocks()};
  EXPECT_THROW(source.kv_rows()->gather(outside, 1, std::span<float>(rows.data(), static_cast<size_t>(width))), Error);
}

struct Request {
  std::vector<int32_t> prompt;
  SamplingParams params;
};

std::vector<int32_t> drain(engine::OutputChannel& channel) {
  std::vector<int32_t> tokens;
  while (auto out = channel.take(std::chrono::milliseconds(0))) {
    for (const auto& d : out->completions) tokens.insert(tokens.end(), d.token_ids.begin(), d.token_ids.end());
  }
  return tokens;
}

void run_idle(engine::EngineCore& e) {
  for (int guard = 0; e.has_work() && guard < 100000; ++guard) e.step();
  e.step();  // releases what was given back meanwhile and publishes the stats
}

std::unique_ptr<engine::EngineCore> make_engine(const model::Bf16ModelWeights& weights) {
  core::EngineConfig config = transfer_config(16);
  auto runner = std::make_unique<CudaModelRunner>(weights, config);
  config.num_blocks = runner->num_blocks();
  return std::make_unique<engine::EngineCore>(config, std::move(runner));
}

// One request at a time on each side, so every step has the plain run's shapes: the decode
// engine's tokens must be the plain engine's exactly.
TEST_P(CudaKvTransfer, DisaggregatedEnginesGiveOneEnginesTokens) {
  const fs::path dir = make_tiny(GetParam());
  const model::ModelConfig mc = model::ModelConfig::from_dir(dir);
  model::SafetensorsCheckpoint checkpoint(dir);
  const model::Bf16ModelWeights weights = model::load_weights_bf16(mc, checkpoint);
  auto gen = gpu_test::rng(72);
  std::vector<Request> requests;
  for (int i = 0; i < 6; ++i) {
    Request r;
    r.prompt = random_prompt(gen, mc.vocab_size, i == 0 ? 150 : 3 + 17 * i);  // 150: two chunks of 128
    r.params.max_tokens = 12;
    r.params.ignore_eos = true;
    if (i % 2 == 0) {
      r.params.temperature = 0.0f;
    } else {
      r.params.temperature = 0.9f;
      r.params.top_p = 0.95f;
      r.params.seed = 500 + static_cast<uint64_t>(i);
    }
    requests.push_back(std::move(r));
  }
  auto plain = make_engine(weights);
  auto prefill = make_engine(weights);
  auto decode = make_engine(weights);
  for (size_t i = 0; i < requests.size(); ++i) {
    const Request& r = requests[i];
    auto alone = std::make_shared<engine::OutputChannel>();
    plain->submit(r.prompt, r.params, alone);
    run_idle(*plain);
    const std::vector<int32_t> expected = drain(*alone);
    ASSERT_EQ(expected.size(), 12u) << "request " << i;

    auto first = std::make_shared<engine::OutputChannel>();
    const int64_t id = prefill->submit_prefill(r.prompt, r.params, first);
    run_idle(*prefill);
    const std::vector<int32_t> first_token = drain(*first);
    ASSERT_EQ(first_token.size(), 1u) << "request " << i;
    engine::KvPayload payload = prefill->export_kv({prefill->kv_epoch(), id});
    EXPECT_EQ(payload.first_token, first_token[0]);
    auto rest = std::make_shared<engine::OutputChannel>();
    decode->submit_imported(std::move(payload), r.params, rest);
    run_idle(*prefill);
    run_idle(*decode);
    // The decode engine's stream carries the whole completion, the imported first token first.
    EXPECT_EQ(drain(*rest), expected) << "request " << i << " (prompt of " << r.prompt.size() << ")";
  }
  EXPECT_EQ(decode->stats().prompt_tokens_computed, 0) << "the decode engine computed prompts";
  EXPECT_EQ(prefill->stats().kv_blocks_free, prefill->stats().kv_blocks_total);
  EXPECT_EQ(decode->stats().kv_blocks_free, decode->stats().kv_blocks_total);
}

INSTANTIATE_TEST_SUITE_P(Architectures, CudaKvTransfer,
                         ::testing::Values(Variant{"qwen3", "tiny-gpu"}, Variant{"deepseek_v3", "tiny-gpu-deepseek-all"},
                                           Variant{"deepseek_v32", "tiny-gpu-dsa-all"}),
                         [](const auto& info) { return info.param.arch; });

}  // namespace
}  // namespace tachyon::runner
