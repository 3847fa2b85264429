#include "tachyon/structured/grammar_compiler.h"

#include <nlohmann/json.hpp>

#include "tachyon/structured/ebnf.h"
#include "tachyon/structured/json_schema.h"
#include "tachyon/structured/matcher.h"
#include "tachyon/structured/regex_grammar.h"
#include "tachyon/structured/tool_call_grammar.h"

namespace tachyon::structured {

std::string ConstraintSpec::canonical() const {
  std::string out = std::to_string(static_cast<int>(kind)) + "\n" + std::to_string(text.size()) + ":" + text;
  for (const std::string& c : choices) {
    out += '\n';
    out += std::to_string(c.size()) + ":" + c;
  }
  if (after_reasoning) {
    out += "\nafter_reasoning " + std::to_string(after_reasoning->starts_inside) + " " +
           std::to_string(after_reasoning->start.size()) + ":" + after_reasoning->start + after_reasoning->end;
  }
  return out;
}

namespace {

Grammar build_unchecked(const ConstraintSpec& spec, const TokenVocabulary* vocabulary) {
  switch (spec.kind) {
    case ConstraintSpec::Kind::kJsonObject:
      return json_object_grammar();
    case ConstraintSpec::Kind::kJsonSchema: {
      nlohmann::ordered_json schema;
      try {
        schema = nlohmann::ordered_json::parse(spec.text);
      } catch (const nlohmann::json::exception& e) {
        throw StructuredError(spec.field + ": the schema is not valid JSON (" + e.what() + ")");
      }
      return json_schema_grammar(schema);
    }
    case ConstraintSpec::Kind::kRegex: {
      Grammar g;
      const int32_t root = g.add_rule("root");
      g.add_alternative(root, compile_regex(g, spec.text, RegexContext::kRaw, spec.field));
      g.set_root(root);
      return g;
    }
    case ConstraintSpec::Kind::kChoice: {
      if (spec.choices.empty()) throw StructuredError(spec.field + ": the choice list is empty");
      Grammar g;
      const int32_t root = g.add_rule("root");
      for (const std::string& c : spec.choices) g.add_alternative(root, g.literal(c));
      g.set_root(root);
      return g;
    }
    case ConstraintSpec::Kind::kGrammar:
      return ebnf_grammar(spec.text, spec.field);
    case ConstraintSpec::Kind::kToolCalls:
      return tool_call_grammar(nlohmann::ordered_json::parse(spec.text), vocabulary);
  }
  throw StructuredError("internal: unknown constraint kind");
}

}  // namespace

Grammar build_grammar(const ConstraintSpec& spec, const TokenVocabulary* vocabulary) {
  Grammar g = build_unchecked(spec, vocabulary);
  if (spec.after_reasoning) add_reasoning_prefix(g, *spec.after_reasoning, vocabulary);
  g.finish();
  return g;
}

GrammarCompiler::GrammarCompiler(std::shared_ptr<const TokenVocabulary> vocabulary, size_t max_cached_bytes)
    : vocabulary_(std::move(vocabulary)), max_cached_bytes_(max_cached_bytes) {
  TACHYON_CHECK(vocabulary_ != nullptr) << "internal: GrammarCompiler needs a vocabulary";
}

std::shared_ptr<const CompiledGrammar> GrammarCompiler::compile(const ConstraintSpec& spec) {
  std::string key = spec.canonical();
  {
    std::lock_guard lock(mutex_);
    if (auto it = index_.find(key); it != index_.end()) {
      lru_.splice(lru_.begin(), lru_, it->second);
      return it->second->grammar;
    }
  }
  static const char* const kNames[] = {"json_object", "json_schema", "regex", "choice", "grammar", "tool_calls"};
  auto compiled = std::make_shared<const CompiledGrammar>(build_grammar(spec, vocabulary_.get()), vocabulary_,
                                                          kNames[static_cast<int>(spec.kind)]);
  // The start state and its mask, here on the HTTP thread: a grammar that cannot even start
  // (nested too deeply to expand) is a 400 now, and the first step's mask is already cached.
  Matcher(compiled).next_mask();
  std::lock_guard lock(mutex_);
  if (auto it = index_.find(key); it != index_.end()) return it->second->grammar;
  const size_t bytes = estimated_bytes(*compiled);
  lru_.push_front({key, compiled, bytes});
  cached_bytes_ += bytes;
  index_.emplace(std::move(key), lru_.begin());
  // The newest stays even when it alone is over the byte budget: it is in use.
  while (lru_.size() > 1 && (lru_.size() > kMaxCachedGrammars || cached_bytes_ > max_cached_bytes_)) {
    cached_bytes_ -= lru_.back().bytes;
    index_.erase(lru_.back().key);
    lru_.pop_back();
  }
  return compiled;
}

// The grammar, and its mask cache as it will be when full (CompiledGrammar::kMaxCachedMasks).
size_t GrammarCompiler::estimated_bytes(const CompiledGrammar& grammar) const {
  const size_t mask = static_cast<size_t>(vocabulary_->num_mask_words()) * sizeof(uint32_t) + 256;
  return sizeof(CompiledGrammar) + grammar.grammar().memory_bytes() + CompiledGrammar::kMaxCachedMasks * mask;
}

size_t GrammarCompiler::cached_bytes() const {
  std::lock_guard lock(mutex_);
  return cached_bytes_;
}

size_t GrammarCompiler::cached_grammars() const {
  std::lock_guard lock(mutex_);
  return lru_.size();
}

}  // namespace tachyon::structured
