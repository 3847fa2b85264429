// SampledToken: what a runner returns for one sampled row (its token, raw logprob and the top
// alternatives). Plain data read by the runner, the engine and the server alike.
#pragma once

#include <cstdint>
#include <vector>

namespace tachyon::core {

struct TokenLogprob {
  int32_t token = -1;
  float logprob = 0.0f;
};

struct SampledToken {
  int32_t token = -1;
  // log-softmax of the raw logits at `token` (vLLM's default "raw" logprobs); set when
  // params.logprobs >= 0, else 0.
  float logprob = 0.0f;
  // [min(params.logprobs, vocab)] the most likely tokens by raw logprob, descending, ties to the
  // lower id; empty when params.logprobs <= 0.
  std::vector<TokenLogprob> top;
};

}  // namespace tachyon::core
