// The mask cache keys a state by the top frames of its stacks (compiled_grammar.h): every mask it
// gives must equal the walk of the whole state, uncached, however deep the output nests and
// however many levels a token closes; and a recursive schema's states at different depths must
// share their masks (the point of the cut key: one mask per shape, not per depth).
// ctest -R structured_mask_cache
#include <gtest/gtest.h>

#include <filesystem>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "tachyon/structured/grammar_compiler.h"
#include "tachyon/structured/matcher.h"
#include "tachyon/tokenizer/tokenizer.h"

namespace tachyon::structured::mask_cache_test {

namespace fs = std::filesystem;

const char* kTree = R"({"$defs":{"node":{"type":"object","properties":{"value":{"type":"integer","minimum":0,"maximum":9},
  "children":{"type":"array","items":{"$ref":"#/$defs/node"},"maxItems":2}},"required":["value","children"],
  "additionalProperties":false}},"$ref":"#/$defs/node"})";
const char* kList = R"({"type":"object","properties":{"head":{"type":"string","maxLength":2},
  "tail":{"anyOf":[{"$ref":"#"},{"type":"null"}]}},"required":["head","tail"]})";

ConstraintSpec schema(const std::string& text) { return {ConstraintSpec::Kind::kJsonSchema, text, {}, "json_schema"}; }

// The whole state's mask, walked without any cache (the reference).
struct WholeState {
  explicit WholeState(const CompiledGrammar& g) : grammar(g), pda(g.grammar()), state(pda.initial()) {}
  bool accept(const std::string& bytes) {
    PdaState next;
    for (char c : bytes) {
      if (!pda.advance(state, static_cast<uint8_t>(c), next)) return false;
      state = next;
    }
    return true;
  }
  TokenMask mask() {
    TokenMask out;
    EXPECT_TRUE(fill_token_mask(pda, state, grammar.vocabulary(), out));
    return out;
  }
  const CompiledGrammar& grammar;
  Pda pda;
  PdaState state;
};

// Closers of 1 to 12 levels, so that some token always pops below any cut.
std::shared_ptr<const TokenVocabulary> closer_vocabulary() {
  std::vector<std::string> tokens = {"{\"value\": ", "1", ", \"children\": [", "]", "}", "]}", "}]}", ", ", "[]",
                                     "[]}", "[]}]}"};
  std::string closer = "}";
  for (int levels = 1; levels <= 12; ++levels) {
    tokens.push_back(closer);
    closer += "]}";
  }
  return std::make_shared<const TokenVocabulary>(tokens, static_cast<int32_t>(tokens.size()));
}

void expect_same(const TokenMask& got, const TokenMask& want, const std::string& where) {
  EXPECT_EQ(got.words, want.words) << where;
  EXPECT_EQ(got.can_end, want.can_end) << where;
}

TEST(StructuredMaskCache, DeepTreeStatesShareMasksAndEqualTheWholeWalk) {
  auto g = std::make_shared<const CompiledGrammar>(build_grammar(schema(kTree)), closer_vocabulary(), "test");
  Matcher m(g);
  WholeState whole(*g);
  auto step = [&](const std::string& bytes, const std::string& where) {
    ASSERT_TRUE(m.accept_bytes(bytes)) << where;
    ASSERT_TRUE(whole.accept(bytes)) << where;
    expect_same(*m.next_mask(), whole.mask(), where);
  };
  const int depth = 40;
  for (int d = 0; d < depth; ++d) {
    step("{\"value\": ", "down " + std::to_string(d));
    step("1", "value " + std::to_string(d));
    step(", \"children\": [", "children " + std::to_string(d));
  }
  step("{\"value\": 1, \"children\": []", "leaf");
  for (int d = depth; d > 0; --d) step(d % 2 ? "}]" : "}, {\"value\": 2, \"children\": []}]", "up " + std::to_string(d));
  step("}", "root closed");
  EXPECT_TRUE(m.must_end());
  // About 20 shapes of state, each once; keyed by whole stacks it was one per depth (over 200).
  EXPECT_LE(g->cached_masks(), 40u);
}

// Random walks over Llama-3's 128K tokens (which hold multi-level closers such as "}]}" and
// "\"}}"): every mask from the cache equals the uncached walk of the whole state.
TEST(StructuredMaskCache, RandomWalksEqualTheWholeStateWalk) {
  const auto tok = tokenizer::Tokenizer::from_dir(fs::path(TACHYON_TOKENIZERS) / "llama3");
  GrammarCompiler compiler(TokenVocabulary::from_tokenizer(tok, tok.vocab_size()));
  const std::vector<ConstraintSpec> specs = {schema(kTree), schema(kList),
                                             {ConstraintSpec::Kind::kJsonObject, "", {}, "response_format"}};
  for (size_t c = 0; c < specs.size(); ++c) {
    const auto g = compiler.compile(specs[c]);
    const TokenVocabulary& v = g->vocabulary();
    std::mt19937_64 rng(7 + c);
    for (int w = 0; w < 6; ++w) {
      Matcher m(g);
      WholeState whole(*g);
      for (int step = 0; step < 60; ++step) {
        const std::string where = "constraint " + std::to_string(c) + " walk " + std::to_string(w) + " step " + std::to_string(step);
        const auto mask = m.next_mask();
        expect_same(*mask, whole.mask(), where);
        // Open often at first, then prefer tokens that close several levels at once.
        std::vector<int32_t> allowed, closing;
        for (int32_t id = 0; id < v.num_tokens(); ++id) {
          if (!mask->allows(id)) continue;
          allowed.push_back(id);
          const std::string& b = v.token_bytes(id);
          if (b.size() >= 2 && b.find_first_not_of("\"]}") == std::string::npos) closing.push_back(id);
        }
        if (allowed.empty()) break;
        const auto& pool = (step > 30 && !closing.empty() && rng() % 2 == 0) ? closing : allowed;
        const int32_t token = pool[rng() % pool.size()];
        ASSERT_TRUE(m.accept_token(token)) << where;
        ASSERT_TRUE(whole.accept(v.token_bytes(token))) << where;
      }
    }
  }
}

}  // namespace tachyon::structured::mask_cache_test
