// Constraints compiled over a vocabulary of the 256 single bytes and nothing else, so a test sees
// every string whole: accepted exactly when the constraint's language holds it.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "tachyon/structured/grammar_compiler.h"
#include "tachyon/structured/matcher.h"

namespace tachyon::structured::testing {

inline std::shared_ptr<const TokenVocabulary> byte_vocabulary() {
  std::vector<std::string> bytes;
  for (int b = 0; b < 256; ++b) bytes.push_back(std::string(1, static_cast<char>(b)));
  return std::make_shared<const TokenVocabulary>(bytes, 256);
}

inline std::shared_ptr<const CompiledGrammar> compile_over_bytes(const ConstraintSpec& spec) {
  return std::make_shared<const CompiledGrammar>(build_grammar(spec), byte_vocabulary(), "test");
}

inline std::shared_ptr<const CompiledGrammar> compile_schema_over_bytes(const std::string& schema) {
  return compile_over_bytes({ConstraintSpec::Kind::kJsonSchema, schema, {}, "json_schema"});
}

// The whole string accepted, and complete.
inline bool matches_whole(const std::shared_ptr<const CompiledGrammar>& g, const std::string& text) {
  Matcher m(g);
  return m.accept_bytes(text) && m.can_end();
}

}  // namespace tachyon::structured::testing
