// Shared helpers of the CUDA runner tests (test_cuda_model_runner.cpp, test_tp_cuda_runner.cpp,
// test_cuda_speculative.cpp): tiny random models on disk, the f32 reference over the same
// bf16-rounded weights, a small engine config, TP ranks sharing one GPU, hand-made StepPlans over
// a bump block allocator, and greedy generation through an engine.
#pragma once

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "gpu_test_util.h"
#include "tachyon/engine/engine_core.h"
#include "tachyon/model/dense_model.h"
#include "tachyon/model/make_model.h"
#include "tachyon/runner/cuda/cuda_model_runner.h"
#include "tachyon/runner/cuda/tp_cuda_model_runner.h"
#include "tachyon/runner/paged_attention_backend.h"

namespace tachyon::runner {

namespace fs = std::filesystem;

struct Variant {
  std::string arch;
  std::string preset;
};

inline fs::path make_tiny(const Variant& v) {
  const fs::path dir = fs::temp_directory_path() / ("tachyon-gpu-" + v.arch + "-" + v.preset);
  if (!fs::exists(dir / "config.json")) model::make_model({.arch = v.arch, .preset = v.preset, .seed = 7, .out_dir = dir});
  return dir;
}

// The f32 reference on the same bf16-rounded weights the GPU holds.
inline model::DenseModel reference_model(model::ModelWeights w) {
  auto round = [](std::vector<float>& v) { v = gpu_test::round_to_bf16(std::move(v)); };
  round(w.embed_tokens);
  round(w.final_norm);
  round(w.lm_head);
  for (auto& l : w.layers) {
    for (auto* t : {&l.input_norm, &l.qkv, &l.qkv_bias, &l.q_norm, &l.k_norm, &l.o_proj, &l.o_proj_bias,
                    &l.post_attention_norm, &l.gate_up, &l.gate_up_bias, &l.down, &l.down_bias, &l.router,
                    &l.experts_gate_up, &l.experts_down, &l.router_bias, &l.shared_gate_up, &l.shared_down,
                    &l.q_a_proj, &l.q_a_norm, &l.q_b_proj, &l.kv_a_proj, &l.kv_a_norm, &l.kv_b_proj,
                    &l.indexer_wq_b, &l.indexer_wk, &l.indexer_k_norm, &l.indexer_k_norm_bias,
                    &l.indexer_weights_proj}) {
      round(*t);
    }
  }
  return model::DenseModel(std::move(w));
}

inline model::DenseModel reference_model(const fs::path& dir) {
  model::SafetensorsCheckpoint checkpoint(dir);
  return reference_model(model::load_weights(model::ModelConfig::from_dir(dir), checkpoint));
}

inline core::EngineConfig small_config(bool eager) {
  core::EngineConfig c;
  c.device.kind = "cuda";
  c.device.enforce_eager = eager;
  c.device.gpu_memory_utilization = 0.3;
  c.scheduler.max_num_seqs = 8;
  c.scheduler.max_model_len = 256;
  c.scheduler.max_num_batched_tokens = 128;
  c.block_size = 16;
  return c;
}

// An environment switch set for a scope (a runner reads its switches when it is made), unset
// after it.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const std::string& value) : name_(name) {
    EXPECT_EQ(setenv(name, value.c_str(), 1), 0) << name;
  }
  ~ScopedEnv() { unsetenv(name_); }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
};

// Prompts of the given lengths, uniform random ids of the model's vocabulary drawn from
// gpu_test::rng(salt) in order.
inline std::vector<std::vector<int32_t>> random_prompts(const model::ModelConfig& mc, std::vector<int64_t> lengths,
                                                        uint64_t salt) {
  auto gen = gpu_test::rng(salt);
  std::uniform_int_distribution<int32_t> token(0, static_cast<int32_t>(mc.vocab_size - 1));
  std::vector<std::vector<int32_t>> prompts;
  for (int64_t length : lengths) {
    prompts.emplace_back(static_cast<size_t>(length));
    for (int32_t& t : prompts.back()) t = token(gen);
  }
  return prompts;
}

// TP ranks sharing GPU 0 through the host-staged communicator (shared_gpu_tp_comms): eager (its
// collectives cannot be captured) and a fixed KV size per rank (ranks sizing their caches from
// one GPU's free memory at once would each count the others' allocations as theirs).
inline core::EngineConfig shared_gpu_config(int tp) {
  core::EngineConfig config = small_config(/*eager=*/true);
  config.device.tensor_parallel_size = tp;
  config.device.kv_cache_memory_bytes = int64_t{64} << 20;
  return config;
}

inline std::unique_ptr<TpCudaModelRunner> shared_gpu_runner(const model::Bf16ModelWeights& weights,
                                                            const core::EngineConfig& config, int tp) {
  SharedGpuTpComms comms = shared_gpu_tp_comms(tp);
  return std::make_unique<TpCudaModelRunner>(
      weights, config, TpCudaLayout{.devices = std::vector<int>(static_cast<size_t>(tp), 0), .ranks_share_gpu = true},
      std::move(comms.make_comm), std::move(comms.on_failure));
}

// The weights of a tiny DSA model whose indexer keeps 16 tokens instead of its preset's 128 (so
// the tests' contexts of up to ~80 tokens are sparse), cut to the layers whose selection reads the
// embeddings: DeepSeek-V3.2's first layer, GLM-5's first full layer and the shared one after it.
// Two runs that differ only in how attention's sums are split then select from bit-equal scores,
// so any difference in what they keep shows in the logits. (The later layers are read as if they
// were MTP modules, then dropped.)
inline model::Bf16ModelWeights sparse_selection_weights(const fs::path& dir) {
  model::ModelConfig mc = model::ModelConfig::from_dir(dir);
  const int64_t layers = mc.num_hidden_layers;
  mc.index_topk = 16;
  mc.num_hidden_layers = mc.indexer_types.empty() ? 1 : 2;
  if (!mc.indexer_types.empty()) mc.indexer_types.resize(2);
  mc.num_nextn_predict_layers = layers - mc.num_hidden_layers;
  model::SafetensorsCheckpoint checkpoint(dir);
  model::Bf16ModelWeights weights = model::load_weights_bf16(mc, checkpoint);
  weights.config.num_nextn_predict_layers = 0;
  return weights;
}

// Sequences of a hand-made plan: each has a prompt and a block table from a bump allocator.
struct PlanSequence {
  std::vector<int32_t> tokens;
  int64_t computed = 0;
  std::vector<int32_t> blocks;
};

inline core::StepPlan make_plan(std::vector<PlanSequence>& seqs, const std::vector<int64_t>& run, int32_t block_size,
                           int32_t& next_block, const core::SamplingParams& greedy) {
  core::StepPlan plan;
  plan.block_size = block_size;
  for (size_t i = 0; i < seqs.size(); ++i) {
    PlanSequence& s = seqs[i];
    const int64_t n = run[i];
    if (n == 0) continue;
    while (static_cast<int64_t>(s.blocks.size()) * block_size < s.computed + n) s.blocks.push_back(next_block++);
    core::ScheduledSequence scheduled;
    scheduled.sequence_id = static_cast<int64_t>(i);
    scheduled.first_token = plan.num_tokens();
    scheduled.num_tokens = n;
    scheduled.num_computed = s.computed;
    scheduled.block_table = s.blocks;
    scheduled.sample = s.computed + n == static_cast<int64_t>(s.tokens.size());
    scheduled.params = std::make_shared<const core::SamplingParams>(greedy);
    scheduled.output_tokens = {};
    for (int64_t t = 0; t < n; ++t) {
      const int64_t pos = s.computed + t;
      plan.token_ids.push_back(s.tokens[static_cast<size_t>(pos)]);
      plan.positions.push_back(pos);
      plan.slot_mapping.push_back(int64_t{s.blocks[static_cast<size_t>(pos / block_size)]} * block_size + pos % block_size);
    }
    if (scheduled.sample) plan.logits_rows.push_back(plan.num_tokens() - 1);
    plan.sequences.push_back(std::move(scheduled));
    s.computed += n;
  }
  return plan;
}

// `logprobs`: when given, each prompt's tokens with their 3 top logprobs (near_ties.h reads them).
inline std::vector<std::vector<int32_t>> generate(engine::EngineCore& engine, const std::vector<std::vector<int32_t>>& prompts,
                                           int32_t max_tokens,
                                           std::vector<std::vector<core::SampledToken>>* logprobs = nullptr) {
  core::SamplingParams greedy;
  greedy.temperature = 0.0f;
  greedy.max_tokens = max_tokens;
  greedy.ignore_eos = true;
  if (logprobs != nullptr) {
    greedy.logprobs = 3;
    logprobs->assign(prompts.size(), {});
  }
  std::vector<std::vector<int32_t>> outputs(prompts.size());
  std::vector<std::shared_ptr<engine::OutputChannel>> channels;
  for (size_t i = 0; i < prompts.size(); ++i) {
    channels.push_back(std::make_shared<engine::OutputChannel>([&outputs, logprobs, i](engine::RequestOutput&& out) {
      for (auto& d : out.completions) {
        outputs[i].insert(outputs[i].end(), d.token_ids.begin(), d.token_ids.end());
        if (logprobs != nullptr) (*logprobs)[i].insert((*logprobs)[i].end(), d.logprobs.begin(), d.logprobs.end());
      }
    }));
    engine.submit(prompts[i], greedy, channels.back());
  }
  while (engine.step()) {
  }
  return outputs;
}

// The engine over runners from make_runner() (num_blocks from the runner): `max_tokens` greedy
// tokens for each prompt, every one, and the same in two runs.
template <typename MakeRunner>
void expect_engine_serves_alike(const MakeRunner& make_runner, const core::EngineConfig& config,
                                const std::vector<std::vector<int32_t>>& prompts, int32_t max_tokens) {
  auto serve = [&] {
    core::EngineConfig engine_config = config;
    auto runner = make_runner();
    engine_config.num_blocks = runner->num_blocks();
    engine::EngineCore engine(engine_config, std::move(runner));
    return generate(engine, prompts, max_tokens);
  };
  const auto first = serve();
  for (const auto& tokens : first) EXPECT_EQ(tokens.size(), static_cast<size_t>(max_tokens));
  EXPECT_EQ(serve(), first) << "two runs through the engine must give the same tokens";
}

// A mixed schedule through `gpu` and the f32 reference over the same bf16 weights:
//   step 1: all of seq 0, a chunk of 33 of seq 1, a chunk of 20 of seq 2 (mixed, not sampled);
//   step 2: the rest of seqs 1 and 2 (their earlier chunks are read back from the cache);
//   steps 3..14: decodes of all three (graph replays: batch 3 pads to the bucket of 4).
// Every sampled step's logits (last_logits(rows)) must be within logits_tolerance of the reference.
//
// bf16 activations put a dense tiny model's logits 0.9-1.2e-2 from the f32 reference (the H200,
// 3 random token draws per variant). The latent-attention variants land at 1.7-3.0e-2 over 15
// draws each (DeepSeek-V3 1.7-2.7e-2, V3.2 1.7-2.6e-2, GLM-5's 4 layers 2.0-3.0e-2): the absorbed
// form rounds twice more (the query projected into the latent space, the latent output before
// W_UV), the q/kv LoRA adds two more products and norms, and the YaRN mscale sharpens the
// softmax those roundings feed. transformers' own bf16 run sits as far from its f32 run on the
// same models (the H200, 6 prompts each: dense 1.4e-2, Qwen3-MoE 1.2-1.4e-2, DeepSeek-V3
// 1.8-2.3e-2, GLM-5 2.0-2.7e-2), so the gap is the architecture's, not our kernels'. MLA gets
// 4e-2 and dense 2e-2; a wrong kernel, cache slot or rope lands far above either (tens of percent).
inline double logits_tolerance(const model::ModelConfig& mc) { return mc.is_mla() ? 4e-2 : 2e-2; }

// An FP8 run's products of more than 8 rows run E4M3 x E4M3 (the projections on cuBLASLt's
// block-scaled product, routed experts on moe_grouped_gemm_fp8): their inputs take one FP8
// rounding per row and 128 columns (up to 2^-4 relative) that the other side does not make (the
// f32 reference), or makes at other points (a TP group's ranks: another all-reduce order before
// the rounding), and it compounds over a model's products. Measured on an H100, one seed per case,
// worst step against the reference: dense-attention tiny models 5.7e-2 to 8.0e-2 (with the FP8 KV
// cache too, qwen3 tiny: 1.06e-1), latent attention 1.12e-1 to 1.14e-1; routed experts alone (the
// projections then still bf16 x bf16, 12 seeds): mixtral tiny-gpu-mixtral-all 2.96e-2 to 3.84e-2,
// qwen3_moe tiny-gpu-moe-all 1.45e-2 to 2.48e-2. Both forms get 1.6e-1 (8x dense's logits_tolerance,
// 4x latent's). The products themselves are held to bf16 precision over the quantized operands
// (gpu_fp8_gemm's Fp8Gemm, gpu_moe_kernels' MoeFp8ByFp8Gemm), so a wrong factor, tile or padded
// row fails there; at the model level it lands far past 1.6e-1 (tens of percent and more).
inline double fp8_inputs_logits_tolerance(const model::ModelConfig& mc) {
  return (mc.is_mla() ? 4.0 : 8.0) * logits_tolerance(mc);
}

inline void expect_logits_match_reference(const model::DenseModel& reference, const std::string& name,
                                          int32_t block_size, ModelRunner& gpu,
                                          const std::function<std::vector<float>(int32_t rows)>& last_logits,
                                          double tolerance, bool fp8_kv_cache = false) {
  const model::ModelConfig& mc = reference.config();
  PagedKvCache cpu_cache(mc, 64, block_size, model::MlaAttentionForm::kAbsorbed, fp8_kv_cache);
  auto gen = gpu_test::rng(11);
  std::uniform_int_distribution<int32_t> token(0, static_cast<int32_t>(mc.vocab_size - 1));
  std::vector<PlanSequence> seqs(3);
  const std::vector<int64_t> prompt_lengths = {5, 40, 70};
  for (size_t i = 0; i < seqs.size(); ++i) {
    seqs[i].tokens.resize(static_cast<size_t>(prompt_lengths[i]));
    for (int32_t& t : seqs[i].tokens) t = token(gen);
  }
  core::SamplingParams greedy;
  greedy.temperature = 0.0f;
  int32_t next_block = 0;
  double worst = 0.0;
  std::vector<std::vector<int64_t>> schedule = {{5, 33, 20}, {0, 7, 50}};
  for (int step = 0; step < 12; ++step) schedule.push_back({1, 1, 1});
  for (size_t step = 0; step < schedule.size(); ++step) {
    if (step >= 2) {
      for (PlanSequence& s : seqs) s.tokens.push_back(token(gen));  // the "sampled" token: any id
    }
    core::StepPlan plan = make_plan(seqs, schedule[step], block_size, next_block, greedy);
    gpu.execute(plan);
    PagedAttentionBackend attention(mc, cpu_cache, plan);
    std::vector<float> expected =
        reference.forward(model::ForwardBatch{plan.token_ids, plan.positions, plan.logits_rows}, attention);
    if (plan.logits_rows.empty()) continue;
    const std::vector<float> got = last_logits(static_cast<int32_t>(plan.logits_rows.size()));
    const double error = gpu_test::relative_error(got, expected);
    worst = std::max(worst, error);
    // The seed in the message: a failure on fresh inputs can be replayed from its line alone.
    EXPECT_LT(error, tolerance) << "step " << step << " of " << name << " (TACHYON_TEST_SEED=" << gpu_test::test_seed()
                                << ")";
  }
  std::printf("[runner vs cpu] %-50s worst logits rel. error %.2e (tolerance %.0e)\n", name.c_str(), worst, tolerance);
}

inline void expect_logits_match_reference(const fs::path& dir, int32_t block_size, ModelRunner& gpu,
                                          const std::function<std::vector<float>(int32_t rows)>& last_logits) {
  const model::DenseModel reference = reference_model(dir);
  expect_logits_match_reference(reference, dir.filename().string(), block_size, gpu, last_logits,
                                logits_tolerance(reference.config()));
}

}  // namespace tachyon::runner
