// The engine run the context-parallel tests compare with the one-rank runner's (test_pcp_families.cpp,
// test_pcp_tp.cpp through pcp_test_steps.h; test_dcp_families.cpp): two waves of greedy requests
// with top-5 logprobs, the second wave's prompts sharing the first wave's 23-token prompt's first
// 12 or 16 tokens (prefix-cache hits) and going on differently. Callers pick the first wave's
// prompt lengths (they must include 23) and the tokens per request.
#pragma once

#include <chrono>
#include <initializer_list>
#include <memory>
#include <vector>

#include "../model_test_util.h"
#include "tachyon/engine/engine_core.h"

namespace tachyon::testing {

struct TwoWaveRun {
  std::vector<std::vector<int32_t>> tokens;                 // [request] every token, in delivery order
  std::vector<std::vector<core::SampledToken>> logprobs;    // [request] each token's logprob and top-5
  int64_t prefix_hit_tokens = 0;
  engine::EngineStats stats;  // at the end
};

inline TwoWaveRun run_two_waves(std::unique_ptr<runner::ModelRunner> runner, const core::EngineConfig& config,
                                std::initializer_list<int> lengths, int32_t max_tokens) {
  engine::EngineCore engine(config, std::move(runner));
  core::SamplingParams params;
  params.temperature = 0.0f;
  params.max_tokens = max_tokens;
  params.ignore_eos = true;
  params.logprobs = 5;
  TwoWaveRun run;
  for (int wave = 0; wave < 2; ++wave) {
    std::vector<std::shared_ptr<engine::OutputChannel>> channels;
    for (int length : lengths) {
      std::vector<int32_t> prompt = prompt_of(length, length);
      if (wave == 1) {
        prompt = prompt_of(length < 12 ? 16 : 12, 23);  // the 23-token prompt's beginning
        for (int i = 0; i < length; ++i) prompt.push_back(static_cast<int32_t>((i * 53 + 7) % 512));
      }
      channels.push_back(std::make_shared<engine::OutputChannel>());
      engine.submit(prompt, params, channels.back());
    }
    for (int guard = 0; engine.has_work() && guard < 10000; ++guard) engine.step();
    for (const auto& channel : channels) {
      std::vector<int32_t> tokens;
      std::vector<core::SampledToken> logprobs;
      while (auto delta = channel->take(std::chrono::milliseconds(0))) {
        run.prefix_hit_tokens += delta->num_prefix_hit_tokens;
        for (auto& c : delta->completions) {
          tokens.insert(tokens.end(), c.token_ids.begin(), c.token_ids.end());
          logprobs.insert(logprobs.end(), c.logprobs.begin(), c.logprobs.end());
        }
      }
      run.tokens.push_back(tokens);
      run.logprobs.push_back(logprobs);
    }
  }
  run.stats = engine.stats();
  return run;
}

}  // namespace tachyon::testing
