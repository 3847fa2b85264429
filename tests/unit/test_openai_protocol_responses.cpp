// OpenAI response builders: each shape compared byte for byte with hand-written JSON, the way the
// official clients and vLLM's server write it.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>

#include "tachyon/server/openai_responses.h"

namespace tachyon::server {
namespace {

std::string dump(const nlohmann::ordered_json& j) { return j.dump(); }

// Token texts of a toy vocabulary for the top-logprob alternatives.
std::string toy_text(int32_t id) {
  switch (id) {
    case 1:
      return "Hello";
    case 2:
      return " world";
    case 3:
      return "!";
    case 4:
      return "\xC3\xA9";  // é
    case 5:
      return "\xE2\x82";  // half of €: ill-formed alone
    default:
      return "?";
  }
}

core::SampledToken sampled(int32_t token, float logprob, std::vector<core::TokenLogprob> top) {
  return core::SampledToken{.token = token, .logprob = logprob, .top = std::move(top)};
}

TEST(OpenaiResponse, CompletionWithoutLogprobs) {
  std::vector<CompletionChoiceResult> choices(2);
  choices[0] = {.index = 0, .text = "Hello world", .token_ids = {1, 2}, .finish_reason = "length"};
  choices[1] = {.index = 1, .text = "!", .token_ids = {3}, .finish_reason = "stop"};
  EXPECT_EQ(dump(completion_response("cmpl-1", 1700000000, "tiny", choices, Usage{5, 3})),
            R"({"id":"cmpl-1","object":"text_completion","created":1700000000,"model":"tiny","choices":[)"
            R"({"index":0,"text":"Hello world","logprobs":null,"finish_reason":"length"},)"
            R"({"index":1,"text":"!","logprobs":null,"finish_reason":"stop"}],)"
            R"("usage":{"prompt_tokens":5,"completion_tokens":3,"total_tokens":8,)"
            R"("prompt_tokens_details":{"cached_tokens":0}}})");
}

TEST(OpenaiResponse, CompletionLogprobs) {
  CompletionChoiceResult choice{.index = 0,
                                .text = "Hello\xC3\xA9",
                                .token_ids = {1, 4},
                                .token_texts = {"Hello", "\xC3\xA9"},
                                .finish_reason = "length"};
  choice.logprobs = std::vector<core::SampledToken>{
      sampled(1, -0.1f, {{1, -0.1f}, {2, -2.5f}}),
      sampled(4, -3.0f, {{2, -0.5f}, {3, -1.0f}}),  // sampled token outside the top 2: added
  };
  EXPECT_EQ(dump(completion_response("cmpl-2", 1, "tiny", {choice}, Usage{1, 2}, toy_text)),
            R"({"id":"cmpl-2","object":"text_completion","created":1,"model":"tiny","choices":[{"index":0,)"
            "\"text\":\"Hello\xC3\xA9\",\"logprobs\":{\"tokens\":[\"Hello\",\"\xC3\xA9\"],"
            R"("token_logprobs":[-0.1,-3.0],"top_logprobs":[{"Hello":-0.1," world":-2.5},)"
            "{\" world\":-0.5,\"!\":-1.0,\"\xC3\xA9\":-3.0}],"
            R"("text_offset":[0,5]},"finish_reason":"length"}],)"
            R"("usage":{"prompt_tokens":1,"completion_tokens":2,"total_tokens":3,)"
            R"("prompt_tokens_details":{"cached_tokens":0}}})");
}

TEST(OpenaiResponse, CompletionLogprobsZeroAndEdgeValues) {
  // logprobs=0: only the sampled token; -inf becomes -9999.0; a half character becomes U+FFFD;
  // no token_text function: alternatives are spelled token_id:<id>.
  LogprobsDelta delta{
      .tokens = {sampled(5, -std::numeric_limits<float>::infinity(), {}), sampled(1, -1.5f, {{7, -0.25f}})},
      .texts = {"\xE2\x82", "Hello"},
      .text_offset = 10};
  EXPECT_EQ(dump(completion_logprobs(delta, {})),
            "{\"tokens\":[\"\xEF\xBF\xBD\",\"Hello\"],\"token_logprobs\":[-9999.0,-1.5],"
            "\"top_logprobs\":[{\"\xEF\xBF\xBD\":-9999.0},{\"token_id:7\":-0.25,\"Hello\":-1.5}],"
            "\"text_offset\":[10,11]}");
}

TEST(OpenaiResponse, ChatWithoutLogprobs) {
  std::vector<CompletionChoiceResult> choices = {{.index = 0, .text = "Hi there", .finish_reason = "stop"}};
  EXPECT_EQ(
      dump(chat_response("chatcmpl-1", 1700000000, "tiny", choices, Usage{9, 2})),
      R"({"id":"chatcmpl-1","object":"chat.completion","created":1700000000,"model":"tiny","choices":[)"
      R"({"index":0,"message":{"role":"assistant","content":"Hi there"},"logprobs":null,"finish_reason":"stop"}],)"
      R"("usage":{"prompt_tokens":9,"completion_tokens":2,"total_tokens":11,)"
      R"("prompt_tokens_details":{"cached_tokens":0}}})");
}

TEST(OpenaiResponse, ChatLogprobs) {
  CompletionChoiceResult choice{
      .index = 0, .text = "Hi\xC3\xA9", .token_texts = {"Hi", "\xC3\xA9"}, .finish_reason = "abort"};
  choice.logprobs =
      std::vector<core::SampledToken>{sampled(9, -0.5f, {{9, -0.5f}, {3, -1.0f}}), sampled(4, -0.75f, {})};
  EXPECT_EQ(dump(chat_response("chatcmpl-2", 2, "tiny", {choice}, Usage{1, 2}, toy_text)),
            R"({"id":"chatcmpl-2","object":"chat.completion","created":2,"model":"tiny","choices":[{"index":0,)"
            "\"message\":{\"role\":\"assistant\",\"content\":\"Hi\xC3\xA9\"},"
            R"("logprobs":{"content":[)"
            R"({"token":"Hi","logprob":-0.5,"bytes":[72,105],"top_logprobs":[)"
            R"({"token":"Hi","logprob":-0.5,"bytes":[72,105]},{"token":"!","logprob":-1.0,"bytes":[33]}]},)"
            "{\"token\":\"\xC3\xA9\",\"logprob\":-0.75,\"bytes\":[195,169],\"top_logprobs\":[]}]},"
            R"("finish_reason":"abort"}],)"
            R"("usage":{"prompt_tokens":1,"completion_tokens":2,"total_tokens":3,)"
            R"("prompt_tokens_details":{"cached_tokens":0}}})");
}

TEST(OpenaiResponse, ChatLogprobsOfHalfCharacter) {
  // The token text is half of "€": token shows U+FFFD, bytes keep the real bytes.
  LogprobsDelta delta{.tokens = {sampled(5, -0.1f, {})}, .texts = {"\xE2\x82"}};
  EXPECT_EQ(dump(chat_logprobs(delta, toy_text)),
            "{\"content\":[{\"token\":\"\xEF\xBF\xBD\",\"logprob\":-0.1,\"bytes\":[226,130],\"top_logprobs\":[]}]}");
}

TEST(OpenaiResponse, CompletionChunks) {
  EXPECT_EQ(dump(completion_chunk("cmpl-3", 5, "tiny", 1, "Hel", nullptr, std::nullopt)),
            R"({"id":"cmpl-3","object":"text_completion","created":5,"model":"tiny","choices":[)"
            R"({"index":1,"text":"Hel","logprobs":null,"finish_reason":null}]})");
  EXPECT_EQ(dump(completion_chunk("cmpl-3", 5, "tiny", 0, "", nullptr, "length")),
            R"({"id":"cmpl-3","object":"text_completion","created":5,"model":"tiny","choices":[)"
            R"({"index":0,"text":"","logprobs":null,"finish_reason":"length"}]})");
  LogprobsDelta delta{.tokens = {sampled(2, -0.5f, {{2, -0.5f}})}, .texts = {" world"}, .text_offset = 5};
  EXPECT_EQ(dump(completion_chunk("cmpl-3", 5, "tiny", 0, " world", &delta, std::nullopt, toy_text)),
            R"({"id":"cmpl-3","object":"text_completion","created":5,"model":"tiny","choices":[)"
            R"({"index":0,"text":" world","logprobs":{"tokens":[" world"],"token_logprobs":[-0.5],)"
            R"("top_logprobs":[{" world":-0.5}],"text_offset":[5]},"finish_reason":null}]})");
}

TEST(OpenaiResponse, ChatChunks) {
  EXPECT_EQ(dump(chat_chunk("chatcmpl-3", 7, "tiny", 0, "assistant", "", nullptr, std::nullopt)),
            R"({"id":"chatcmpl-3","object":"chat.completion.chunk","created":7,"model":"tiny","choices":[)"
            R"({"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]})");
  EXPECT_EQ(dump(chat_chunk("chatcmpl-3", 7, "tiny", 0, std::nullopt, "Hi", nullptr, std::nullopt)),
            R"({"id":"chatcmpl-3","object":"chat.completion.chunk","created":7,"model":"tiny","choices":[)"
            R"({"index":0,"delta":{"content":"Hi"},"logprobs":null,"finish_reason":null}]})");
  EXPECT_EQ(dump(chat_chunk("chatcmpl-3", 7, "tiny", 2, std::nullopt, std::nullopt, nullptr, "stop")),
            R"({"id":"chatcmpl-3","object":"chat.completion.chunk","created":7,"model":"tiny","choices":[)"
            R"({"index":2,"delta":{},"logprobs":null,"finish_reason":"stop"}]})");
  LogprobsDelta delta{.tokens = {sampled(3, -2.0f, {{1, -0.125f}})}, .texts = {"!"}};
  EXPECT_EQ(dump(chat_chunk("chatcmpl-3", 7, "tiny", 0, std::nullopt, "!", &delta, std::nullopt, toy_text)),
            R"({"id":"chatcmpl-3","object":"chat.completion.chunk","created":7,"model":"tiny","choices":[)"
            R"({"index":0,"delta":{"content":"!"},"logprobs":{"content":[{"token":"!","logprob":-2.0,"bytes":[33],)"
            R"("top_logprobs":[{"token":"Hello","logprob":-0.125,"bytes":[72,101,108,108,111]}]}]},)"
            R"("finish_reason":null}]})");
}

TEST(OpenaiResponse, UsageChunks) {
  EXPECT_EQ(dump(usage_chunk("chatcmpl-4", 8, "tiny", true, Usage{3, 4})),
            R"({"id":"chatcmpl-4","object":"chat.completion.chunk","created":8,"model":"tiny","choices":[],)"
            R"("usage":{"prompt_tokens":3,"completion_tokens":4,"total_tokens":7,)"
            R"("prompt_tokens_details":{"cached_tokens":0}}})");
  EXPECT_EQ(dump(usage_chunk("cmpl-4", 8, "tiny", false, Usage{3, 0})),
            R"({"id":"cmpl-4","object":"text_completion","created":8,"model":"tiny","choices":[],)"
            R"("usage":{"prompt_tokens":3,"completion_tokens":0,"total_tokens":3,)"
            R"("prompt_tokens_details":{"cached_tokens":0}}})");
  // Prompt tokens the prefix cache served are counted among prompt_tokens, and told apart.
  EXPECT_EQ(dump(usage_json(Usage{48, 5, 32})),
            R"({"prompt_tokens":48,"completion_tokens":5,"total_tokens":53,)"
            R"("prompt_tokens_details":{"cached_tokens":32}})");
}

TEST(OpenaiResponse, SseAndModels) {
  EXPECT_EQ(sse_data(nlohmann::ordered_json{{"a", 1}}), "data: {\"a\":1}\n\n");
  // A raw ordered_json holding ill-formed bytes still serializes (replaced), never throws.
  EXPECT_EQ(sse_data(nlohmann::ordered_json{{"t", "x\xFF"}}), "data: {\"t\":\"x\xEF\xBF\xBD\"}\n\n");
  EXPECT_EQ(kSseDone, "data: [DONE]\n\n");
  EXPECT_EQ(dump(models_response("tiny", 1700000000, 4096, 496)),
            R"({"object":"list","data":[{"id":"tiny","object":"model","created":1700000000,"owned_by":"tachyon",)"
            R"("root":"tiny","parent":null,"max_model_len":4096,"vocab_size":496}]})");
  EXPECT_FALSE(models_response("tiny", 1700000000, 4096, 0)["data"][0].contains("vocab_size"));  // unknown
}

TEST(OpenaiResponse, InvalidUtf8TextIsReplaced) {
  std::vector<CompletionChoiceResult> choices = {{.index = 0, .text = "ok\xE2\x82", .finish_reason = ""}};
  EXPECT_EQ(dump(completion_response("c", 0, "tiny", choices, Usage{})),
            "{\"id\":\"c\",\"object\":\"text_completion\",\"created\":0,\"model\":\"tiny\",\"choices\":[{\"index\":0,"
            "\"text\":\"ok\xEF\xBF\xBD\",\"logprobs\":null,\"finish_reason\":null}],"
            "\"usage\":{\"prompt_tokens\":0,\"completion_tokens\":0,\"total_tokens\":0,"
            "\"prompt_tokens_details\":{\"cached_tokens\":0}}}");
}

}  // namespace
}  // namespace tachyon::server
