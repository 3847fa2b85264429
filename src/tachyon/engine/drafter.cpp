#include "tachyon/engine/drafter.h"

#include "tachyon/base/check.h"
#include "tachyon/engine/ngram_drafter.h"

namespace tachyon::engine {

core::SpeculativeConfig resolve_speculative_config(core::SpeculativeConfig config) {
  if (!config.enabled()) {
    TACHYON_CHECK(config.num_speculative_tokens == 0 && config.ngram_min == 0 && config.ngram_max == 0 &&
                  config.draft_model.empty() && config.forced_acceptance < 0.0f)
        << "--num-speculative-tokens, --ngram-min, --ngram-max, --draft-model and "
           "--speculative-forced-acceptance need --speculative-method";
    return config;
  }
  TACHYON_CHECK(config.method == "ngram" || config.method == "draft" || config.method == "mtp")
      << "--speculative-method: unknown method '" << config.method << "' (ngram, draft or mtp)";
  TACHYON_CHECK(config.num_speculative_tokens != 0)
      << "--speculative-method " << config.method << " needs --num-speculative-tokens K (1.."
      << core::kMaxSpeculativeTokens << ")";
  TACHYON_CHECK(config.num_speculative_tokens >= 1 && config.num_speculative_tokens <= core::kMaxSpeculativeTokens)
      << "--num-speculative-tokens must be in 1.." << core::kMaxSpeculativeTokens << ", got "
      << config.num_speculative_tokens;
  TACHYON_CHECK(config.forced_acceptance < 0.0f || config.forced_acceptance <= 1.0f)
      << "--speculative-forced-acceptance must be in [0, 1], got " << config.forced_acceptance;
  if (config.method == "draft") {
    TACHYON_CHECK(!config.draft_model.empty())
        << "--speculative-method draft needs --draft-model DIR (a model with the target's vocabulary)";
    TACHYON_CHECK(config.ngram_min == 0 && config.ngram_max == 0)
        << "--ngram-min and --ngram-max are for --speculative-method ngram";
    return config;
  }
  TACHYON_CHECK(config.draft_model.empty()) << "--draft-model needs --speculative-method draft";
  if (config.method == "mtp") {  // the served model's own MTP modules draft
    TACHYON_CHECK(config.ngram_min == 0 && config.ngram_max == 0)
        << "--ngram-min and --ngram-max are for --speculative-method ngram";
    return config;
  }
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
  TACHYON_CHECK(resolved.method == "ngram")
      << "internal: a " << resolved.method << " drafter needs its model, loaded by app::load_runner";
  return std::make_unique<NgramDrafter>(NgramOptions{
      .min_n = resolved.ngram_min, .max_n = resolved.ngram_max, .num_tokens = resolved.num_speculative_tokens});
}

}  // namespace tachyon::engine
