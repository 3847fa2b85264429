#include "tachyon/engine/drafter.h"

#include "tachyon/base/check.h"
#include "tachyon/engine/ngram_drafter.h"

namespace tachyon::engine {

core::SpeculativeConfig resolve_speculative_config(core::SpeculativeConfig config) {
  if (!config.enabled()) {
    TACHYON_CHECK(config.num_speculative_tokens == 0 && config.ngram_min == 0 && config.ngram_max == 0)
        << "--num-speculative-tokens, --ngram-min and --ngram-max need --speculative-method";
    return config;
  }
  TACHYON_CHECK(config.method != "draft")
      << "--speculative-method draft: draft-model speculation is not built yet (it needs a second model "
         "runner with its own KV cache beside the target's); use --speculative-method ngram";
  TACHYON_CHECK(config.method != "mtp")
      << "--speculative-method mtp: MTP drafting is not built yet (the MTP module runs as a CPU reference "
         "forward only, without an engine path for its KV cache); use --speculative-method ngram";
  TACHYON_CHECK(config.method == "ngram") << "--speculative-method: unknown method '" << config.method
                                          << "' (ngram; draft and mtp are not built yet)";
  TACHYON_CHECK(config.num_speculative_tokens != 0)
      << "--speculative-method ngram needs --num-speculative-tokens K (1.." << core::kMaxSpeculativeTokens << ")";
  TACHYON_CHECK(config.num_speculative_tokens >= 1 && config.num_speculative_tokens <= core::kMaxSpeculativeTokens)
      << "--num-speculative-tokens must be in 1.." << core::kMaxSpeculativeTokens << ", got "
      << config.num_speculative_tokens;
  // vLLM's rule: neither given, 5 and 5; one given, the other equals it.
  if (config.ngram_min == 0 && config.ngram_max == 0) config.ngram_min = config.ngram_max = 5;
  if (config.ngram_min == 0) config.ngram_min = config.ngram_max;
  if (config.ngram_max == 0) config.ngram_max = config.ngram_min;
  TACHYON_CHECK(config.ngram_min >= 1 && config.ngram_min <= config.ngram_max)
      << "--ngram-min " << config.ngram_min << " and --ngram-max " << config.ngram_max
      << " must satisfy 1 <= min <= max";
  return config;
}

std::unique_ptr<Drafter> make_drafter(const core::SpeculativeConfig& config) {
  const core::SpeculativeConfig resolved = resolve_speculative_config(config);
  if (!resolved.enabled()) return nullptr;
  return std::make_unique<NgramDrafter>(NgramOptions{
      .min_n = resolved.ngram_min, .max_n = resolved.ngram_max, .num_tokens = resolved.num_speculative_tokens});
}

}  // namespace tachyon::engine
