// What the engine tests of speculative decoding share: eight requests of every kind of sampling
// (greedy, seeded with top-k/top-p/min-p, every penalty with min_tokens, n = 2 with logprobs,
// stop ids, short max_tokens) on repetitive or random prompts, an engine over the tiny model's
// CPU runner with a drafter, and the check that a speculative run gives the plain run's tokens
// and logprobs bit for bit (the CPU product sums every row in one fixed order whatever the step's
// shape: kernels/cpu/fixed_order_gemm.h), never past max_tokens. Used by test_engine_ngram.cpp,
// test_engine_draft_model.cpp and test_engine_mtp.cpp.
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <random>
#include <string>
#include <vector>

#include "../tiny_model_suite.h"
#include "tachyon/engine/engine_core.h"
#include "tachyon/runner/cpu_model_runner.h"
#include "tachyon/runner/dp_cpu_model_runner.h"
#include "tachyon/runner/pcp_cpu_model_runner.h"
#include "tachyon/runner/tp_cpu_model_runner.h"

namespace tachyon::engine::speculative_test {

struct SpecRequest {
  std::vector<int32_t> prompt;
  core::SamplingParams params;
};

struct SpecCompletion {
  std::vector<int32_t> tokens;
  std::vector<float> logprobs;
};

using Completions = std::vector<std::vector<SpecCompletion>>;  // [request][index]

inline core::EngineConfig engine_config(const core::SpeculativeConfig& speculative) {
  core::EngineConfig c;
  c.scheduler.max_num_batched_tokens = 32;  // long prompts are chunked, and drafts compete for the budget
  c.scheduler.max_model_len = 160;
  c.scheduler.eos_token_id = 3;
  c.num_blocks = 160;
  c.block_size = 4;
  c.speculative = speculative;
  return c;
}

// A random phrase of 3..8 tokens said 3..5 times, with a random token between some repeats.
inline std::vector<int32_t> repetitive_prompt(std::mt19937& rng) {
  std::vector<int32_t> phrase(3 + rng() % 6);
  for (auto& t : phrase) t = static_cast<int32_t>(4 + rng() % 500);
  std::vector<int32_t> prompt;
  const int repeats = 3 + static_cast<int>(rng() % 3);
  for (int r = 0; r < repeats; ++r) {
    prompt.insert(prompt.end(), phrase.begin(), phrase.end());
    if (rng() % 2) prompt.push_back(static_cast<int32_t>(4 + rng() % 500));
  }
  return prompt;
}

inline std::vector<int32_t> random_prompt(std::mt19937& rng) {
  std::vector<int32_t> prompt(1 + rng() % 30);
  for (auto& t : prompt) t = static_cast<int32_t>(rng() % 512);
  return prompt;
}

// Eight requests, one per kind of sampling; `repetitive` picks the prompts.
inline std::vector<SpecRequest> make_requests(uint32_t seed, bool repetitive) {
  std::mt19937 rng(seed);
  std::vector<SpecRequest> out;
  for (int i = 0; i < 8; ++i) {
    SpecRequest r;
    r.prompt = repetitive ? repetitive_prompt(rng) : random_prompt(rng);
    r.params.max_tokens = static_cast<int32_t>(6 + rng() % 40);
    switch (i) {
      case 0: r.params.temperature = 0.0f; break;
      case 1: r.params.temperature = 0.0f, r.params.ignore_eos = true, r.params.max_tokens = 1 + static_cast<int32_t>(rng() % 3); break;
      case 2: r.params.temperature = 0.9f, r.params.top_k = 20, r.params.top_p = 0.9f, r.params.seed = rng(); break;
      case 3:  // every penalty and min_tokens: the history they read grows with accepted drafts
        r.params.temperature = 1.1f, r.params.seed = rng(), r.params.repetition_penalty = 1.3f;
        r.params.frequency_penalty = 0.4f, r.params.presence_penalty = 0.3f, r.params.min_tokens = 3;
        break;
      case 4: r.params.temperature = 0.7f, r.params.seed = rng(), r.params.n = 2, r.params.logprobs = 2; break;
      case 5: r.params.temperature = 0.0f, r.params.logprobs = 0, r.params.min_tokens = 4; break;
      case 6: r.params.temperature = 0.0f, r.params.ignore_eos = true; break;  // stop ids set from the plain run
      case 7: r.params.temperature = 0.5f, r.params.seed = rng(), r.params.min_p = 0.05f; break;
    }
    out.push_back(r);
  }
  return out;
}

// Builds the drafter an engine gets (null: the one its config names, or none).
using DrafterFactory = std::function<std::unique_ptr<Drafter>()>;
// Builds the runner an engine gets for its config (null: one CPU runner over the suite's model).
using RunnerFactory = std::function<std::unique_ptr<runner::ModelRunner>(const core::EngineConfig&)>;

// `tp` tensor-parallel CPU thread ranks over `weights` (which must outlive the runners), the
// experts split by expert or by tensor.
inline RunnerFactory tensor_parallel_ranks(const model::ModelWeights& weights, int tp, bool expert_parallel = false) {
  return [&weights, tp, expert_parallel](const core::EngineConfig& c) -> std::unique_ptr<runner::ModelRunner> {
    return std::make_unique<runner::TpCpuModelRunner>(weights, tp, c.num_blocks, c.block_size, expert_parallel);
  };
}

// `tp` tensor-parallel CPU thread ranks over `weights` (a latent-attention model's), each group of
// `dcp` of them splitting the latent cache by token (decode context parallelism, interleave 1).
inline RunnerFactory decode_context_parallel_ranks(const model::ModelWeights& weights, int tp, int dcp) {
  return [&weights, tp, dcp](const core::EngineConfig& c) -> std::unique_ptr<runner::ModelRunner> {
    return std::make_unique<runner::TpCpuModelRunner>(weights, tp, c.num_blocks, c.block_size,
                                                      /*expert_parallel=*/false, /*fp8_kv_cache=*/false,
                                                      model::DcpOptions{dcp, 1});
  };
}

// `tp` expert-parallel CPU thread ranks over `weights` (an MoE model's) running each step of two or
// more sequences as two overlapped micro-batches (two-batch overlap, runner/tbo_rank_step.h).
inline RunnerFactory two_batch_overlap_ranks(const model::ModelWeights& weights, int tp) {
  return [&weights, tp](const core::EngineConfig& c) -> std::unique_ptr<runner::ModelRunner> {
    return std::make_unique<runner::TpCpuModelRunner>(weights, tp, c.num_blocks, c.block_size, /*expert_parallel=*/true,
                                                      /*fp8_kv_cache=*/false, model::DcpOptions{},
                                                      runner::TboOptions{.enabled = true});
  };
}

// `pcp` prefill-context-parallel groups of CPU thread ranks over a copy of `weights`, each PCP rank
// the whole model (tp 1) or `tp` tensor-parallel ranks.
inline RunnerFactory prefill_context_parallel_ranks(const model::ModelWeights& weights, int pcp, int tp = 1) {
  return [&weights, pcp, tp](const core::EngineConfig& c) -> std::unique_ptr<runner::ModelRunner> {
    return std::make_unique<runner::PcpCpuModelRunner>(model::ModelWeights(weights), pcp, c.num_blocks, c.block_size,
                                                       tp);
  };
}

// `dp` data-parallel attention replicas of `tp` ranks each over `weights` (an MoE model's, which
// must outlive the runners); each replica's cache the config's num_blocks.
inline RunnerFactory data_parallel_ranks(const model::ModelWeights& weights, int dp, int tp) {
  return [&weights, dp, tp](const core::EngineConfig& c) -> std::unique_ptr<runner::ModelRunner> {
    return std::make_unique<runner::DpCpuModelRunner>(weights, dp, tp, c.num_blocks, c.block_size);
  };
}

template <uint64_t Seed>
class SpeculativeEngineSuite : public testing::TinyModelSuite<Seed> {
 protected:
  using testing::TinyModelSuite<Seed>::model_;

  static Completions run(const std::vector<SpecRequest>& requests, const core::SpeculativeConfig& speculative,
                         EngineStats* stats = nullptr, const DrafterFactory& drafter = nullptr) {
    return run_with(requests, engine_config(speculative), stats, drafter);
  }

  // run() with an engine config of the test's own (cache size, prefix caching, forced acceptance,
  // the KV cache's dtype), and optionally a runner of its own (tensor-parallel ranks).
  static Completions run_with(const std::vector<SpecRequest>& requests, const core::EngineConfig& c,
                              EngineStats* stats = nullptr, const DrafterFactory& drafter = nullptr,
                              const RunnerFactory& runner = nullptr) {
    EngineCore engine(c,
                      runner ? runner(c)
                             : std::make_unique<runner::CpuModelRunner>(*model_, c.num_blocks, c.block_size,
                                                                        model::MlaAttentionForm::kAbsorbed,
                                                                        c.device.kv_cache_dtype == DType::kF8E4M3),
                      drafter ? drafter() : nullptr);
    std::vector<std::shared_ptr<OutputChannel>> channels;
    for (const SpecRequest& r : requests) {
      channels.push_back(std::make_shared<OutputChannel>());
      engine.submit(r.prompt, r.params, channels.back());
    }
    for (int guard = 0; engine.has_work() && guard < 100000; ++guard) engine.step();
    Completions out(requests.size());
    for (size_t i = 0; i < requests.size(); ++i) {
      out[i].resize(static_cast<size_t>(requests[i].params.n));
      while (auto delta = channels[i]->take(std::chrono::milliseconds(0))) {
        for (const auto& d : delta->completions) {
          SpecCompletion& completion = out[i][static_cast<size_t>(d.index)];
          completion.tokens.insert(completion.tokens.end(), d.token_ids.begin(), d.token_ids.end());
          for (const auto& l : d.logprobs) completion.logprobs.push_back(l.logprob);
        }
      }
    }
    if (stats != nullptr) *stats = engine.stats();
    return out;
  }

  // The engine config of a run over the FP8 KV cache (--kv-cache-dtype fp8).
  static core::EngineConfig fp8_kv_config(const core::SpeculativeConfig& speculative) {
    core::EngineConfig c = engine_config(speculative);
    c.device.kv_cache_dtype = DType::kF8E4M3;
    return c;
  }

  // The plain run of `requests` over the FP8 KV cache; sets differs_from_bf16 when a completion's
  // logprobs differ from the bf16 cache's run (so the cache is FP8).
  static Completions plain_fp8_kv_run(const std::vector<SpecRequest>& requests, bool& differs_from_bf16) {
    const Completions plain = run_with(requests, fp8_kv_config({}));
    const Completions bf16 = run(requests, {});
    for (size_t r = 0; r < plain.size(); ++r) {
      differs_from_bf16 = differs_from_bf16 || plain[r][0].logprobs != bf16[r][0].logprobs;
    }
    return plain;
  }

  // The stop-id request stops at a token its plain run generates (when it generates one).
  static void set_stop_ids(std::vector<SpecRequest>& requests) {
    const Completions plain = run(requests, {});
    const std::vector<int32_t>& tokens = plain[6][0].tokens;
    if (tokens.size() > 4) requests[6].params.stop_token_ids = {tokens[tokens.size() / 2]};
  }

  static void expect_same(const Completions& got, const Completions& plain, const std::vector<SpecRequest>& requests,
                          const std::string& what, double logprob_tolerance = 0.0) {
    for (size_t r = 0; r < plain.size(); ++r) {
      for (size_t c = 0; c < plain[r].size(); ++c) {
        EXPECT_EQ(got[r][c].tokens, plain[r][c].tokens) << what << " request " << r << " completion " << c;
        EXPECT_LE(got[r][c].tokens.size(), static_cast<size_t>(requests[r].params.max_tokens)) << what << " request " << r;
        ASSERT_EQ(got[r][c].logprobs.size(), plain[r][c].logprobs.size()) << what << " request " << r;
        for (size_t t = 0; t < plain[r][c].logprobs.size(); ++t) {
          EXPECT_NEAR(got[r][c].logprobs[t], plain[r][c].logprobs[t], logprob_tolerance)
              << what << " request " << r << " token " << t;
        }
      }
    }
  }
};

}  // namespace tachyon::engine::speculative_test
