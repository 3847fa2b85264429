// Reasoning markers by their token ids (server/reasoning_parser.h, ChatOutput): with the real Qwen3
// tokenizer, where <think> and </think> are added tokens, the answer's ids go through a TextStream
// as the server's GenerationRun sends them (whole, then one, two and three ids per delta, and with
// a stop string that holds a marker's text back to the delta after its id) into ChatOutput. The
// marker tokens split reasoning from content; the same characters written as ordinary tokens
// stay text; every delivery gives the same answer, and the same count of reasoning tokens for
// usage. A constraint's grammar after the reasoning reads the markers by id as well.
// ctest -R reasoning_marker_ids
#include <gtest/gtest.h>

#include <filesystem>

#include "chat_output_harness.h"
#include "tachyon/app/text_stream.h"
#include "tachyon/structured/grammar_compiler.h"
#include "tachyon/structured/matcher.h"
#include "tachyon/tokenizer/tokenizer.h"

namespace tachyon::server::reasoning_marker_ids_test {

using testing::Answer;

class ReasoningMarkerIds : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    tok_ = new tokenizer::Tokenizer(
        tokenizer::Tokenizer::from_dir(std::filesystem::path(TACHYON_TOKENIZERS) / "qwen3"));
  }
  static void TearDownTestSuite() {
    delete tok_;
    tok_ = nullptr;
  }

  // The marker token itself (the tokenizer's own encoding of the marker text).
  static std::vector<int32_t> token(const std::string& marker) {
    const std::vector<int32_t> ids = tok_->encode(marker, /*add_special_tokens=*/false);
    EXPECT_EQ(ids.size(), 1u) << marker;
    return ids;
  }
  // `text` as ordinary tokens, one character at a time: never a marker token.
  static std::vector<int32_t> pieces(const std::string& text) {
    std::vector<int32_t> out;
    for (char c : text) {
      for (int32_t id : tok_->encode(std::string(1, c), false)) out.push_back(id);
    }
    return out;
  }
  static std::vector<int32_t> text(const std::string& s) { return tok_->encode(s, false); }

  static ChatOutputConfig config(bool starts_inside) {
    ChatOutputConfig c;
    c.reasoning_parser = "qwen3";
    c.reasoning_starts_inside = starts_inside;
    c.tokenizer = tok_;
    return c;
  }

  // As the server delivers it: `per_delta` ids at a time (0: all at once), their text released
  // by a TextStream (with `stop` strings that never match but hold text back).
  static Answer deliver(const ChatOutputConfig& c, const std::vector<int32_t>& ids, size_t per_delta,
                        const std::vector<std::string>& stop) {
    ChatOutput output(c);
    app::TextStream stream(*tok_, stop, /*include_stop_str=*/false);
    CompletionChoiceResult choice;
    const size_t step = per_delta == 0 ? std::max<size_t>(ids.size(), 1) : per_delta;
    for (size_t i = 0; i < ids.size(); i += step) {
      const std::span<const int32_t> delta(ids.data() + i, std::min(step, ids.size() - i));
      append_pieces(output.push(stream.push(delta), delta), choice);
    }
    append_pieces(output.push(stream.finish(), {}), choice);
    append_pieces(output.finish(), choice);
    return Answer{choice.text, choice.reasoning, {}};
  }

  static void expect(bool starts_inside, const std::vector<std::vector<int32_t>>& parts, const Answer& expected) {
    std::vector<int32_t> ids;
    for (const auto& p : parts) ids.insert(ids.end(), p.begin(), p.end());
    for (const std::vector<std::string>& stop :
         {std::vector<std::string>{}, std::vector<std::string>{"<think>!", "</think>!"}}) {
      for (size_t per_delta : {0, 1, 2, 3}) {
        EXPECT_EQ(deliver(config(starts_inside), ids, per_delta, stop), expected)
            << "ids per delta " << per_delta << (stop.empty() ? "" : ", marker text held back a delta")
            << "; text: " << ::testing::PrintToString(tok_->decode(ids));
      }
    }
  }

  static tokenizer::Tokenizer* tok_;
};

tokenizer::Tokenizer* ReasoningMarkerIds::tok_ = nullptr;

TEST_F(ReasoningMarkerIds, MarkerTokensSplitReasoningFromContent) {
  ASSERT_EQ(tok_->token_to_id("<think>"), std::optional<int32_t>(151667));
  ASSERT_EQ(tok_->token_to_id("</think>"), std::optional<int32_t>(151668));
  expect(false, {token("<think>"), text("\nLet me think: 2 + 2.\n"), token("</think>"), text("\n\nIt is 4.")},
         Answer{"It is 4.", "\nLet me think: 2 + 2.\n", {}});
  expect(false, {text("\n"), token("<think>"), text("a"), token("</think>"), text("b")}, Answer{"b", "a", {}});
  // The same text through the text-matching parser (no tokenizer) gives the same answer.
  testing::expect_answer(
      [] {
        ChatOutputConfig c;
        c.reasoning_parser = "qwen3";
        return c;
      }(),
      "<think>\nLet me think: 2 + 2.\n</think>\n\nIt is 4.", Answer{"It is 4.", "\nLet me think: 2 + 2.\n", {}});
}

TEST_F(ReasoningMarkerIds, MarkerTextInOrdinaryTokensIsContent) {
  expect(false, {pieces("<think>"), text("x"), pieces("</think>"), text("y")}, Answer{"<think>x</think>y", "", {}});
  expect(false, {pieces("<think>")}, Answer{"<think>", "", {}});
}

TEST_F(ReasoningMarkerIds, OrdinaryEndMarkerTextStaysInTheReasoning) {
  expect(false, {token("<think>"), text("a "), pieces("</think>"), text(" b"), token("</think>"), text("c")},
         Answer{"c", "a </think> b", {}});
  // The prompt opened the block (DeepSeek-R1's template): only the token closes it.
  expect(true, {text("a"), pieces("</think>"), token("</think>"), text("c")}, Answer{"c", "a</think>", {}});
}

// A tokenizer without the marker tokens (DeepSeek-V3's has no <think>): markers by their text.
TEST_F(ReasoningMarkerIds, WithoutMarkerTokensTheTextDecides) {
  const auto v3 = tokenizer::Tokenizer::from_dir(std::filesystem::path(TACHYON_TOKENIZERS) / "deepseek_v3");
  ASSERT_FALSE(v3.token_to_id("<think>").has_value());
  ChatOutputConfig c;
  c.reasoning_parser = "deepseek_r1";
  c.tokenizer = &v3;
  ChatOutput output(c);
  const std::vector<int32_t> ids = v3.encode("<think>a</think>b", false);
  CompletionChoiceResult choice;
  append_pieces(output.push(v3.decode(ids), ids), choice);
  append_pieces(output.finish(), choice);
  EXPECT_EQ((Answer{choice.text, choice.reasoning, {}}), (Answer{"b", "a", {}}));
}

// usage's reasoning_tokens: the tokens from the answer's start (the prompt opened the block) or its
// start marker through the end marker, whatever the delivery; every token while the reasoning
// runs on; none for an answer without a block. Marker text in ordinary pieces counts as the
// reasoning's (it does not end it).
TEST_F(ReasoningMarkerIds, ReasoningTokensCountTheBlocksTokensMarkersIncluded) {
  struct Case {
    bool starts_inside;
    std::vector<std::vector<int32_t>> parts;
    size_t reasoning_parts;  // the leading parts that are the reasoning's
  };
  const std::vector<Case> cases = {
      {false, {token("<think>"), text("\nLet me think: 2 + 2.\n"), token("</think>"), text("\n\nIt is 4.")}, 3},
      {true, {text("a"), pieces("</think>"), text(" b"), token("</think>"), text("c")}, 4},
      {false, {text("It is 4.")}, 0},
      {false, {token("<think>"), text("still thinking")}, 2},
      {true, {text("still thinking")}, 1},
      {false, {pieces("<think>"), text("x"), pieces("</think>")}, 0},
  };
  for (const Case& c : cases) {
    std::vector<int32_t> ids;
    size_t reasoning = 0;
    for (size_t p = 0; p < c.parts.size(); ++p) {
      ids.insert(ids.end(), c.parts[p].begin(), c.parts[p].end());
      if (p < c.reasoning_parts) reasoning += c.parts[p].size();
    }
    for (size_t per_delta : {0, 1, 2, 3}) {
      ChatOutput output(config(c.starts_inside));
      app::TextStream stream(*tok_, {}, /*include_stop_str=*/false);
      const size_t step = per_delta == 0 ? ids.size() : per_delta;
      for (size_t i = 0; i < ids.size(); i += step) {
        const std::span<const int32_t> delta(ids.data() + i, std::min(step, ids.size() - i));
        output.push(stream.push(delta), delta);
      }
      output.push(stream.finish(), {});
      output.finish();
      EXPECT_EQ(output.reasoning_tokens(), static_cast<int64_t>(reasoning))
          << "ids per delta " << per_delta << "; text: " << ::testing::PrintToString(tok_->decode(ids));
    }
  }
  // Without a tokenizer the output cannot place tokens: it counts none.
  ChatOutputConfig untokenized;
  untokenized.reasoning_parser = "qwen3";
  ChatOutput output(untokenized);
  output.push("<think>a</think>b", text("<think>a</think>b"));
  output.finish();
  EXPECT_EQ(output.reasoning_tokens(), 0);
}

// By text (a tokenizer without marker tokens): the tokens whose text ends by the end marker's end.
TEST_F(ReasoningMarkerIds, ReasoningTokensByTheMarkersText) {
  const auto v3 = tokenizer::Tokenizer::from_dir(std::filesystem::path(TACHYON_TOKENIZERS) / "deepseek_v3");
  ChatOutputConfig c;
  c.reasoning_parser = "deepseek_r1";
  c.tokenizer = &v3;
  ChatOutput output(c);
  const std::vector<int32_t> reasoning = v3.encode("<think>a b c</think>", false);
  const std::vector<int32_t> content = v3.encode("\n\nThe end.", false);
  std::vector<int32_t> ids = reasoning;
  ids.insert(ids.end(), content.begin(), content.end());
  output.push(v3.decode(ids), ids);
  output.finish();
  EXPECT_EQ(output.reasoning_tokens(), static_cast<int64_t>(reasoning.size()));
}

}  // namespace tachyon::server::reasoning_marker_ids_test

namespace tachyon::server::reasoning_marker_ids_test {

// The grammar of a constraint after the reasoning asks for the same marker tokens
// (structured/reasoning_prefix.h): the model's own marker ids open and close the block, and the
// end marker's characters in ordinary pieces are reasoning text, as the parser above reads them.
TEST_F(ReasoningMarkerIds, AConstraintAfterTheReasoningAsksForTheMarkerTokens) {
  const auto vocabulary = structured::TokenVocabulary::from_tokenizer(*tok_, tok_->vocab_size());
  structured::GrammarCompiler compiler(vocabulary);
  structured::ConstraintSpec spec{structured::ConstraintSpec::Kind::kJsonSchema, R"({"type": "integer"})", {}, "x"};
  spec.after_reasoning = structured::ReasoningPrefix{"<think>", "</think>", false};
  const auto grammar = compiler.compile(spec);
  auto accepts = [&](const std::vector<std::vector<int32_t>>& parts) {
    structured::Matcher m(grammar);
    for (const auto& part : parts) {
      for (int32_t id : part) {
        if (!m.next_mask()->allows(id) || !m.accept_token(id)) return std::string("refused ") + tok_->id_to_token(id);
      }
    }
    return std::string(m.can_end() ? "complete" : "open");
  };
  EXPECT_EQ(accepts({token("<think>"), text("Hm, 2 + 2."), token("</think>"), text("\n\n4")}), "complete");
  EXPECT_EQ(accepts({text("4")}), "complete") << "the reasoning block is optional";
  // </think> in ordinary pieces is reasoning text: the block is still open, and the JSON after it too.
  EXPECT_EQ(accepts({token("<think>"), text("a"), pieces("</think>"), text("4")}), "open");
  EXPECT_EQ(accepts({token("<think>"), text("a"), pieces("</think>"), token("</think>"), text("4")}), "complete");
  // The start marker in ordinary pieces is not a reasoning block (nor an integer).
  EXPECT_EQ(accepts({pieces("<think>")}), "refused <");
}

}  // namespace tachyon::server::reasoning_marker_ids_test
