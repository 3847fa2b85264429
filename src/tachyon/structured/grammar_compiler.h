// GrammarCompiler: request constraints in, CompiledGrammar out, with a bounded LRU cache by the
// constraint's canonical text, so the agent that sends the same schema with every request pays
// for its compilation once. One per served tokenizer (it holds the TokenVocabulary), shared by
// the HTTP threads (thread-safe); compilation runs on the HTTP thread that parses the request,
// so a bad constraint is a 400 before anything reaches the engine (DESIGN rule 7).
#pragma once

#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "tachyon/structured/compiled_grammar.h"
#include "tachyon/structured/reasoning_prefix.h"

namespace tachyon::structured {

// What a request asked for, before compilation.
struct ConstraintSpec {
  enum class Kind { kJsonObject, kJsonSchema, kRegex, kChoice, kGrammar, kToolCalls };
  Kind kind = Kind::kJsonObject;
  // kJsonSchema: the schema's JSON; kRegex: the regex; kGrammar: EBNF; kToolCalls: the request of
  // tool_call_grammar (tool_call_grammar.h) as JSON.
  std::string text;
  std::vector<std::string> choices;  // kChoice
  std::string field;                 // the request field it came from, for error messages
  // Set: the constraint applies after the model's reasoning (reasoning_prefix.h).
  std::optional<ReasoningPrefix> after_reasoning;

  std::string canonical() const;     // the cache key
};

class GrammarCompiler {
 public:
  static constexpr size_t kMaxCachedGrammars = 64;
  // And by bytes (estimated: the grammar and its mask cache when full), so 64 grammars near the
  // element budget (grammar.h, up to 64 MiB each) cannot pin 4 GiB; 512 MiB still holds 64 of the
  // usual size with a 128K vocabulary (a full mask cache is 256 masks of 16 KiB: 4 MiB).
  static constexpr size_t kMaxCachedBytes = size_t{512} << 20;

  explicit GrammarCompiler(std::shared_ptr<const TokenVocabulary> vocabulary,
                           size_t max_cached_bytes = kMaxCachedBytes);

  // Throws StructuredError naming what is wrong or unsupported.
  std::shared_ptr<const CompiledGrammar> compile(const ConstraintSpec& spec);
  const TokenVocabulary& vocabulary() const { return *vocabulary_; }
  size_t cached_grammars() const;
  size_t cached_bytes() const;  // the estimates of the cached grammars

 private:
  struct Entry {
    std::string key;
    std::shared_ptr<const CompiledGrammar> grammar;
    size_t bytes = 0;  // estimated
  };
  using Lru = std::list<Entry>;
  size_t estimated_bytes(const CompiledGrammar& grammar) const;
  std::shared_ptr<const TokenVocabulary> vocabulary_;
  size_t max_cached_bytes_;
  size_t cached_bytes_ = 0;
  mutable std::mutex mutex_;
  Lru lru_;
  std::unordered_map<std::string, Lru::iterator> index_;
};

// The grammar alone: tests and the oracle. `vocabulary` (may be null) only decides how a forced
// tool call's markers are asked for (tool_call_grammar.h).
Grammar build_grammar(const ConstraintSpec& spec, const TokenVocabulary* vocabulary = nullptr);

}  // namespace tachyon::structured
