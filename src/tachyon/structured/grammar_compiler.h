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

  explicit GrammarCompiler(std::shared_ptr<const TokenVocabulary> vocabulary);

  // Throws StructuredError naming what is wrong or unsupported.
  std::shared_ptr<const CompiledGrammar> compile(const ConstraintSpec& spec);
  const TokenVocabulary& vocabulary() const { return *vocabulary_; }
  size_t cached_grammars() const;

 private:
  using Lru = std::list<std::pair<std::string, std::shared_ptr<const CompiledGrammar>>>;
  std::shared_ptr<const TokenVocabulary> vocabulary_;
  mutable std::mutex mutex_;
  Lru lru_;
  std::unordered_map<std::string, Lru::iterator> index_;
};

// The grammar alone: tests and the oracle. `vocabulary` (may be null) only decides how a forced
// tool call's markers are asked for (tool_call_grammar.h).
Grammar build_grammar(const ConstraintSpec& spec, const TokenVocabulary* vocabulary = nullptr);

}  // namespace tachyon::structured
