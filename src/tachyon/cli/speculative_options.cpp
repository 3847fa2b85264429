// The speculative-decoding flags of serve, generate and bench latency / throughput, registered
// in one place. Names after vLLM's --speculative-config keys; checked together (and resolved:
// unset n-gram sizes) by the runner factory before any weight loads (engine/drafter.h).
#include "tachyon/cli/commands.h"

namespace tachyon::cli {

void add_speculative_options(CLI::App& cmd, core::SpeculativeConfig& speculative) {
  cmd.add_option("--speculative-method", speculative.method,
                 "propose draft tokens that the model verifies in the same step, so output is unchanged: ngram "
                 "(prompt lookup in the sequence itself), draft (a smaller model, --draft-model), mtp (the "
                 "model's own multi-token-prediction modules, DeepSeek-V3 style; on --device cuda at --tp 1 with one "
                 "module)")
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
  cmd.add_option("--draft-model", speculative.draft_model,
                 "the draft model's directory for --speculative-method draft (it must share the served model's "
                 "tokenizer)")
      ->check(CLI::ExistingDirectory);
  cmd.add_option("--speculative-forced-acceptance", speculative.forced_acceptance,
                 "benchmarks only: accept each draft with this probability instead of verifying it (the text is "
                 "then NOT the model's); the mean acceptance length of k drafts is 1 + p + ... + p^k")
      ->check(CLI::Range(0.0f, 1.0f));
}

}  // namespace tachyon::cli
