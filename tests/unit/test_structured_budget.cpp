// The parser's work budget (pda.h, compiled_grammar.h): a state of S stacks costs O(S) to build
// however many alternatives share a prefix (stacks are deduplicated by hash, not by scanning the
// state), and a grammar ambiguous enough to grow past Pda::kMaxStacks stacks, or a mask walk past
// kMaxMaskSteps, fails with GrammarBudgetError naming the limit instead of running for minutes.
// The engine side (the sequence finishes, the others go on) is in test_engine_structured.cpp.
// ctest -R structured_budget
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "tachyon/structured/grammar_compiler.h"
#include "tachyon/structured/matcher.h"

namespace tachyon::structured::budget_test {

std::shared_ptr<const TokenVocabulary> letters_vocabulary() {
  std::vector<std::string> tokens = {"", "a", "aa", "aaaa", "b", "c", "p", "pp", "pppp", "1", "12", "\"", "x"};
  return std::make_shared<const TokenVocabulary>(tokens, 16);
}

// 20,000 alternatives "ppp...p<i>": every one of them is alive for the first 40 bytes.
ConstraintSpec shared_prefix_choice(int count) {
  ConstraintSpec spec{ConstraintSpec::Kind::kChoice, "", {}, "guided_choice"};
  for (int i = 0; i < count; ++i) spec.choices.push_back(std::string(40, 'p') + std::to_string(i));
  return spec;
}

TEST(StructuredBudget, AlternativesSharingAPrefixAdvanceInStepsLinearInTheStacks) {
  constexpr int kAlternatives = 20000;
  static_assert(kAlternatives < Pda::kMaxStacks, "the test needs a state under the limit");
  Grammar grammar = build_grammar(shared_prefix_choice(kAlternatives));
  grammar.finish();
  Pda pda(grammar);
  PdaState state = pda.initial();
  ASSERT_EQ(state.size(), static_cast<size_t>(kAlternatives));
  PdaState next;
  for (int i = 0; i < 40; ++i) {
    const int64_t before = pda.steps();
    ASSERT_TRUE(pda.advance(state, 'p', next)) << "byte " << i;
    ASSERT_EQ(next.size(), static_cast<size_t>(kAlternatives)) << "byte " << i;
    // Each stack is examined, advanced and deduplicated a bounded number of times: a scan of the
    // state per stack would be kAlternatives^2 / 2 = 2e8 comparisons.
    EXPECT_LE(pda.steps() - before, 8 * kAlternatives) << "byte " << i;
    state.swap(next);
  }
  ASSERT_TRUE(pda.advance(state, '7', next));
  EXPECT_EQ(next.size(), 1111u);  // 7, 7x, 7xx, 7xxx
}

TEST(StructuredBudget, DuplicateStacksAreMergedByContent) {
  // Both alternatives of root call x as a tail call: two nodes with one content (x's start over
  // the root's end), which must leave one stack, as the linear scan did.
  ConstraintSpec spec{ConstraintSpec::Kind::kGrammar, "root ::= x | x\nx ::= \"a\" \"b\"", {}, "guided_grammar"};
  Grammar grammar = build_grammar(spec);
  grammar.finish();
  Pda pda(grammar);
  const PdaState start = pda.initial();
  EXPECT_EQ(start.size(), 1u);
  PdaState next;
  ASSERT_TRUE(pda.advance(start, 'a', next));
  EXPECT_EQ(next.size(), 1u);
}

TEST(StructuredBudget, ExponentiallyAmbiguousGrammarFailsWithTheLimit) {
  // Each "a" doubles the stacks: the continuations "b" and "c" pile up in every combination.
  ConstraintSpec spec{ConstraintSpec::Kind::kGrammar, R"(root ::= "a" root "b" | "a" root "c")", {}, "guided_grammar"};
  auto g = std::make_shared<const CompiledGrammar>(build_grammar(spec), letters_vocabulary(), "test");
  Matcher m(g);
  int accepted = 0;
  try {
    for (; accepted < 40; ++accepted) ASSERT_TRUE(m.accept_bytes("a"));
    FAIL() << "40 bytes of an exponentially ambiguous grammar were accepted";
  } catch (const GrammarBudgetError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("too ambiguous"), std::string::npos) << what;
    EXPECT_NE(what.find(std::to_string(Pda::kMaxStacks)), std::string::npos) << what;
  }
  EXPECT_GE(1 << accepted, Pda::kMaxStacks / 2) << "failed early, after " << accepted << " bytes";
  EXPECT_LE(accepted, 20);
}

TEST(StructuredBudget, MaskOfAnExponentiallyAmbiguousStateIsCheapThroughItsCutKey) {
  // The mask cache walks the state cut to its top frames (compiled_grammar.h), where the 2^k
  // stacks differ only below the cut: the mask just under the stack limit is computed at once.
  ConstraintSpec spec{ConstraintSpec::Kind::kGrammar, R"(root ::= "a" root "b" | "a" root "c")", {}, "guided_grammar"};
  auto g = std::make_shared<const CompiledGrammar>(build_grammar(spec), letters_vocabulary(), "test");
  Matcher m(g);
  while (m.num_stacks() * 2 <= static_cast<size_t>(Pda::kMaxStacks)) ASSERT_TRUE(m.accept_bytes("a"));
  const auto mask = m.next_mask();
  EXPECT_TRUE(mask->allows(1) && mask->allows(2) && mask->allows(3));  // a, aa, aaaa
  EXPECT_FALSE(mask->allows(4));                                        // b: root never ends
  EXPECT_THROW(m.accept_bytes("aa"), GrammarBudgetError);
}

TEST(StructuredBudget, MaskWalkPastItsStepBudgetFails) {
  // 2,000 alternatives alive: each transition the walk computes takes in 2,000 stacks.
  Grammar grammar = build_grammar(shared_prefix_choice(2000));
  grammar.finish();
  Pda pda(grammar);
  const PdaState state = pda.initial();
  TokenMask mask;
  try {
    fill_token_mask(pda, state, *letters_vocabulary(), mask, /*max_steps=*/10000);
    FAIL() << "a walk of 2,000 stacks stayed within 10,000 steps";
  } catch (const GrammarBudgetError& e) {
    EXPECT_NE(std::string(e.what()).find("10000 parser steps"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(fill_token_mask(pda, state, *letters_vocabulary(), mask));
  EXPECT_TRUE(mask.allows(6));  // "p"
}

TEST(StructuredBudget, OrdinaryGrammarsStayFarBelowTheLimits) {
  // A mask of a 2,000-alternative state (more tools or enum values than real requests carry)
  // walks within the step budget.
  auto g = std::make_shared<const CompiledGrammar>(build_grammar(shared_prefix_choice(2000)), letters_vocabulary(),
                                                   "test");
  Matcher m(g);
  for (int i = 0; i < 38; ++i) ASSERT_TRUE(m.accept_bytes("p"));
  const auto mask = m.next_mask();
  EXPECT_TRUE(mask->allows(6));  // "p"
  EXPECT_TRUE(mask->allows(7));  // "pp"
  EXPECT_FALSE(mask->allows(8));  // "pppp": 41 bytes of p
  EXPECT_TRUE(mask->any_token);
}

}  // namespace tachyon::structured::budget_test
