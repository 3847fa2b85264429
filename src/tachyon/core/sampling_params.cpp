#include "tachyon/core/sampling_params.h"

#include <cmath>

#include "tachyon/base/check.h"

namespace tachyon::core {

void SamplingParams::validate(int64_t vocab_size) const {
  TACHYON_CHECK(std::isfinite(temperature) && temperature >= 0.0f) << "temperature must be >= 0, got " << temperature;
  TACHYON_CHECK(top_k >= 0) << "top_k must be >= 0 (0 disables it), got " << top_k;
  TACHYON_CHECK(top_p > 0.0f && top_p <= 1.0f) << "top_p must be in (0, 1], got " << top_p;
  TACHYON_CHECK(min_p >= 0.0f && min_p <= 1.0f) << "min_p must be in [0, 1], got " << min_p;
  TACHYON_CHECK(std::isfinite(presence_penalty) && presence_penalty >= -2.0f && presence_penalty <= 2.0f)
      << "presence_penalty must be in [-2, 2], got " << presence_penalty;
  TACHYON_CHECK(std::isfinite(frequency_penalty) && frequency_penalty >= -2.0f && frequency_penalty <= 2.0f)
      << "frequency_penalty must be in [-2, 2], got " << frequency_penalty;
  TACHYON_CHECK(repetition_penalty >= kMinRepetitionPenalty && repetition_penalty <= kMaxRepetitionPenalty)
      << "repetition_penalty must be in [1e-6, 1e6], got " << repetition_penalty;
  TACHYON_CHECK(max_tokens >= 1) << "max_tokens must be >= 1, got " << max_tokens;
  TACHYON_CHECK(min_tokens >= 0 && min_tokens <= max_tokens)
      << "min_tokens must be in [0, max_tokens], got " << min_tokens;
  TACHYON_CHECK(stop_token_ids.size() <= kMaxStopTokenIds)
      << "stop_token_ids: at most " << kMaxStopTokenIds << " ids, got " << stop_token_ids.size();
  for (int32_t id : stop_token_ids) {
    TACHYON_CHECK(id >= 0 && id < vocab_size) << "stop_token_ids: " << id << " is outside the vocabulary [0, "
                                              << vocab_size << ")";
  }
  for (const std::string& s : stop) TACHYON_CHECK(!s.empty()) << "stop strings must not be empty";
  TACHYON_CHECK(logprobs >= -1 && logprobs <= 20) << "logprobs must be in [0, 20], got " << logprobs;
  TACHYON_CHECK(n >= 1 && n <= 128) << "n must be in [1, 128], got " << n;
  if (structured != nullptr) {
    TACHYON_CHECK(min_tokens == 0) << "min_tokens cannot be combined with structured outputs (the grammar decides where "
                                      "the output ends)";
    TACHYON_CHECK(!ignore_eos) << "ignore_eos cannot be combined with structured outputs (the grammar decides where "
                                  "the output ends)";
  }
}

}  // namespace tachyon::core
