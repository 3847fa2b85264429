// Forced tool calls ask for each format's markers as the one token the tokenizer gives them
// (structured/token_vocabulary.h, marker tokens), so the output is the ids the model itself
// writes. With the real Qwen3 (Hermes) and DeepSeek-V3 tokenizers: the first mask allows the
// marker's id alone, the tokenizer's own encoding of a call is accepted token by token, a marker
// spelled in ordinary pieces is refused, and the parser reads the decoded ids back as the call.
// A marker that is a special token (Mistral's [TOOL_CALLS]) is asked for by its id as well, and
// no other token can spell a marker. ctest -R tool_call_markers
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "chat_output_harness.h"
#include "tachyon/structured/grammar_compiler.h"
#include "tachyon/structured/matcher.h"
#include "tachyon/tokenizer/tokenizer.h"

namespace tachyon::server::tool_call_markers_test {

using Json = nlohmann::ordered_json;
using structured::ConstraintSpec;

const Json kCityTool = Json::parse(
    R"({"name": "get_weather", "index": 0, "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
        "required": ["city"]}})");

ConstraintSpec forced_call(const std::string& format) {
  const Json request = {{"format", format}, {"tools", Json::array({kCityTool})}, {"parallel", false}};
  return {ConstraintSpec::Kind::kToolCalls, request.dump(), {}, "tool_choice"};
}

std::vector<int32_t> allowed_ids(const structured::TokenMask& mask, int64_t vocab_size) {
  std::vector<int32_t> out;
  for (int32_t id = 0; id < vocab_size; ++id) {
    if (mask.allows(id)) out.push_back(id);
  }
  return out;
}

struct RealCase {
  std::string tokenizer;  // under TACHYON_TOKENIZERS
  std::string format;
  std::string call;                  // the canonical call of get_weather(city "Paris")
  std::vector<std::string> markers;  // the markers in it, in order
};

TEST(ToolCallMarkers, RealTokenizersGetTheMarkerTokenIds) {
  const std::vector<RealCase> cases = {
      {"qwen3", "hermes", "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>",
       {"<tool_call>", "</tool_call>"}},
      {"deepseek_v3", "deepseek_v3",
       "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n{\"city\": \"Paris\"}\n"
       "```<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
       {"<｜tool▁calls▁begin｜>", "<｜tool▁call▁begin｜>", "<｜tool▁sep｜>", "<｜tool▁call▁end｜>", "<｜tool▁calls▁end｜>"}},
  };
  for (const RealCase& c : cases) {
    SCOPED_TRACE(c.tokenizer);
    const auto tok = tokenizer::Tokenizer::from_dir(std::filesystem::path(TACHYON_TOKENIZERS) / c.tokenizer);
    const auto vocabulary = structured::TokenVocabulary::from_tokenizer(tok, tok.vocab_size());
    std::vector<int32_t> marker_ids;
    for (const std::string& m : c.markers) {
      const std::optional<int32_t> id = tok.token_to_id(m);
      ASSERT_TRUE(id.has_value()) << m;
      EXPECT_EQ(vocabulary->marker_token(m), id) << m;
      marker_ids.push_back(*id);
    }
    structured::GrammarCompiler compiler(vocabulary);
    const auto grammar = compiler.compile(forced_call(c.format));
    structured::Matcher matcher(grammar);
    // The only way to start is the opening marker's own id.
    EXPECT_EQ(allowed_ids(*matcher.next_mask(), vocabulary->vocab_size()), std::vector<int32_t>{marker_ids.front()});
    // The tokenizer's encoding of the call (each marker one id) is accepted token by token, each
    // token allowed by the mask before it.
    const std::vector<int32_t> ids = tok.encode(c.call, /*add_special_tokens=*/false);
    size_t markers_seen = 0;
    for (int32_t id : ids) {
      ASSERT_TRUE(matcher.next_mask()->allows(id)) << "token " << id << " '" << tok.id_to_token(id) << "'";
      ASSERT_TRUE(matcher.accept_token(id)) << "token " << id;
      if (markers_seen < marker_ids.size() && id == marker_ids[markers_seen]) ++markers_seen;
    }
    EXPECT_EQ(markers_seen, marker_ids.size());
    EXPECT_TRUE(matcher.can_end());
    // The opening marker in ordinary pieces is refused: the model never writes it so.
    structured::Matcher pieces(grammar);
    const std::vector<int32_t> spelled = tok.encode(c.markers.front().substr(0, 1), false);
    EXPECT_FALSE(pieces.next_mask()->allows(spelled.front()));
    EXPECT_FALSE(pieces.accept_token(spelled.front()));
    // The parser reads the decoded ids back as the call.
    const Json tools = Json::parse(R"([{"type": "function", "function": {"name": "get_weather"}}])");
    const testing::Answer answer = testing::run_chunks(testing::tools_config(c.format, tools), {tok.decode(ids)});
    ASSERT_EQ(answer.calls.size(), 1u);
    EXPECT_EQ(answer.calls[0].first, "get_weather");
    EXPECT_EQ(Json::parse(answer.calls[0].second), Json::parse(R"({"city": "Paris"})"));
  }
}

// Bytes 0..255 as tokens, and token 256 a special "[TOOL_CALLS]" (no text spelling at all).
TEST(ToolCallMarkers, ASpecialTokenMarkerIsAskedForByItsId) {
  std::vector<std::string> tokens;
  for (int b = 0; b < 256; ++b) tokens.push_back(std::string(1, static_cast<char>(b)));
  tokens.push_back("");  // special: no text spelling
  const auto vocabulary =
      std::make_shared<const structured::TokenVocabulary>(tokens, 257, std::vector<std::pair<std::string, int32_t>>{{"[TOOL_CALLS]", 256}});
  EXPECT_TRUE(vocabulary->token_bytes(0xFF).empty()) << "0xFF starts marker spellings: no ordinary token holds it";
  const auto grammar = std::make_shared<const structured::CompiledGrammar>(
      structured::build_grammar(forced_call("mistral"), vocabulary.get()), vocabulary, "test");
  structured::Matcher matcher(grammar);
  EXPECT_EQ(allowed_ids(*matcher.next_mask(), 257), std::vector<int32_t>{256});
  EXPECT_FALSE(matcher.accept_bytes("[TOOL_CALLS]")) << "the marker's text is not the marker";
  ASSERT_TRUE(matcher.accept_token(256));
  EXPECT_TRUE(matcher.accept_bytes(R"([{"name": "get_weather", "arguments": {"city": "Paris"}}])"));
  EXPECT_TRUE(matcher.can_end());
  // Without a vocabulary the grammar spells the marker as text (tests and the oracle).
  structured::Matcher text(std::make_shared<const structured::CompiledGrammar>(
      structured::build_grammar(forced_call("mistral")), vocabulary, "test"));
  EXPECT_TRUE(text.accept_bytes("[TOOL_CALLS]"));
}

}  // namespace tachyon::server::tool_call_markers_test
