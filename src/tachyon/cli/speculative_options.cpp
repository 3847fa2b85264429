// The speculative-decoding flags of serve, generate and bench latency / throughput, registered
// in one place. Names after vLLM's --speculative-config keys; checked together (and resolved:
// unset n-gram sizes) by the runner factory before any weight loads (engine/drafter.h).
#include "tachyon/cli/commands.h"

namespace tachyon::cli {

void add_speculative_options(CLI::App& cmd, core::SpeculativeConfig& speculative) {
  cmd.add_option("--speculative-method", speculative.method,
                 "propose draft tokens that the model verifies in the same step, so output is unchanged: ngram "
                 "(prompt lookup in the sequence itself); draft and mtp are not built yet")
      ->check(CLI::IsMember({"ngram", "draft", "mtp"}))
      ->option_text("ngram");
  cmd.add_option("--num-speculative-tokens", speculative.num_speculative_tokens,
                 "drafts per sequence and step (needed with --speculative-method)")
      ->check(CLI::Range(1, core::kMaxSpeculativeTokens));
  cmd.add_option("--ngram-min", speculative.ngram_min,
                 "shortest suffix of the sequence looked up for drafts (vLLM's prompt_lookup_min; default: "
                 "--ngram-max, or 5 when neither is given)")
      ->check(CLI::Range(1, 1024));
  cmd.add_option("--ngram-max", speculative.ngram_max,
                 "longest suffix looked up; the longest that recurs wins (vLLM's prompt_lookup_max; default: "
                 "--ngram-min, or 5 when neither is given)")
      ->check(CLI::Range(1, 1024));
}

}  // namespace tachyon::cli
