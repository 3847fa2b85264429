// The Responses API's output-text logprobs, without a server: which of an answer's tokens are its
// output text (ContentTokens, from the reasoning count ChatOutput reports) and how ResponseBuilder
// hands the entries out (each output_text delta carries the entries released with or before it,
// the part and its .done event all of them, entries whose text never came end with the part).
// The route end to end: tests/server/test_server_responses.cpp (...LogprobsAreTheChatRoutes...).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "tachyon/server/chat_output.h"
#include "tachyon/server/responses_api.h"

namespace tachyon::server::responses_logprobs_test {
namespace {

using Json = nlohmann::ordered_json;
using Range = std::pair<size_t, size_t>;

TEST(ContentTokens, WithoutReasoningEveryTokenIsReleasedAsItComes) {
  ContentTokens content;
  EXPECT_EQ(content.next(2, 0), Range(0, 2));
  EXPECT_EQ(content.next(0, 0), Range(2, 2));
  EXPECT_EQ(content.next(3, 0), Range(2, 5));
}

TEST(ContentTokens, NothingWhileTheReasoningRunsThenTheTokensAfterIt) {
  ContentTokens content;
  EXPECT_EQ(content.next(3, 3), Range(3, 3));  // running: every token so far counts as reasoning
  EXPECT_EQ(content.next(2, 5), Range(5, 5));
  // The block closed at the end of token 4 (its marker included): tokens 4 and 5 are text, and
  // token 4 came in an earlier push.
  EXPECT_EQ(content.next(1, 4), Range(4, 6));
  EXPECT_EQ(content.next(2, 4), Range(6, 8));
}

TEST(ContentTokens, AnAnswerThatIsAllReasoningReleasesNothing) {
  ContentTokens content;
  EXPECT_EQ(content.next(4, 4), Range(4, 4));
  EXPECT_EQ(content.next(1, 5), Range(5, 5));
}

Json entry(const std::string& token) {
  return {{"token", token}, {"logprob", -0.5}, {"bytes", Json::array()}, {"top_logprobs", Json::array()}};
}

// The data of each SSE event in `stream` ("event: NAME\ndata: {...}\n\n").
std::vector<Json> event_data(const std::string& stream) {
  std::vector<Json> out;
  for (size_t at = stream.find("data: "); at != std::string::npos; at = stream.find("data: ", at)) {
    const size_t end = stream.find('\n', at);
    out.push_back(Json::parse(stream.substr(at + 6, end - at - 6)));
    at = end;
  }
  return out;
}

ChatPiece content(const std::string& text) { return ChatPiece{.kind = ChatPiece::Kind::kContent, .text = text}; }

TEST(ResponseBuilderLogprobs, DeltasCarryTheirEntriesAndThePartHoldsThemAll) {
  ResponseBuilder builder("resp_1", "tiny", 0, Json::object(), 3);
  std::string events = builder.start();
  const Json first = Json::array({entry("A")});
  events += builder.add({}, &first);  // a token whose text the detokenizer still holds
  const Json second = Json::array({entry("B"), entry("C")});
  events += builder.add({content("AB")}, &second);
  const Json none = Json::array();
  events += builder.add({content("C")}, &none);
  const Json held = Json::array({entry("D")});  // a stop string held its text back: it never comes
  events += builder.add({}, &held);
  events += builder.finish("stop", 4);

  std::vector<Json> deltas;
  Json done;
  for (const Json& e : event_data(events)) {
    if (e["type"] == "response.output_text.delta") deltas.push_back(e);
    if (e["type"] == "response.output_text.done") done = e;
  }
  ASSERT_EQ(deltas.size(), 2u) << events;
  EXPECT_EQ(deltas[0]["logprobs"], Json::array({entry("A"), entry("B"), entry("C")}));
  EXPECT_EQ(deltas[1]["logprobs"], Json::array());
  const Json all = Json::array({entry("A"), entry("B"), entry("C"), entry("D")});
  EXPECT_EQ(done["logprobs"], all);
  const Json part = builder.response()["output"][0]["content"][0];
  EXPECT_EQ(part["text"], "ABC");
  EXPECT_EQ(part["logprobs"], all);
}

TEST(ResponseBuilderLogprobs, WithoutEntriesThePartsLogprobsStayEmpty) {
  ResponseBuilder builder("resp_2", "tiny", 0, Json::object(), 3);
  builder.start();
  builder.add({content("Hi")});
  builder.finish("stop", 1);
  EXPECT_EQ(builder.response()["output"][0]["content"][0]["logprobs"], Json::array());
  EXPECT_EQ(builder.response()["top_logprobs"], 0);
}

}  // namespace
}  // namespace tachyon::server::responses_logprobs_test
