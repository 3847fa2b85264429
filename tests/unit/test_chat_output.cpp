// The chat response assembly the route uses (server/chat_output.h + openai_responses.h): text
// pieces of one choice -> the non-streamed message JSON and the streamed chunks, byte for byte;
// the streamed deltas, accumulated the way the openai client does, give the non-streamed
// message. Also the parser choice from each real tokenizer's chat template, and tool_choice /
// parallel_tool_calls validation.
#include <gtest/gtest.h>

#include "chat_output_harness.h"
#include "tachyon/base/check.h"
#include "tachyon/server/openai_protocol.h"

namespace tachyon::server {
namespace {

using Json = nlohmann::ordered_json;

std::function<std::string()> counting_ids() {
  auto n = std::make_shared<int>(0);
  return [n] { return "call_" + std::to_string((*n)++); };
}

ChatOutputConfig qwen3_config() {
  ChatOutputConfig config;
  config.tool_parser = "hermes";
  config.reasoning_parser = "qwen3";
  return config;
}

const std::vector<std::string> kPieces = {
    "<think>\nweather", " first\n</think>\n\n", "Checking.\n<tool_call>\n{\"name\": \"get_weather\", ",
    "\"arguments\": {\"city\": \"Par", "is\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"now\", \"arguments\": {}}",
    "\n</tool_call>"};

TEST(ChatOutput, NonStreamedMessage) {
  ChatOutput output(qwen3_config(), counting_ids());
  CompletionChoiceResult choice;
  for (size_t i = 0; i < kPieces.size(); ++i) {
    add_chat_text(output, kPieces[i], {}, i + 1 == kPieces.size() ? std::optional<std::string>("stop") : std::nullopt, choice);
  }
  EXPECT_EQ(chat_response("chatcmpl-1", 1, "tiny", {choice}, Usage{3, 4}).dump(),
            R"({"id":"chatcmpl-1","object":"chat.completion","created":1,"model":"tiny","choices":[{"index":0,)"
            R"("message":{"role":"assistant","content":"Checking.","reasoning_content":"\nweather first\n",)"
            R"("tool_calls":[{"id":"call_0","type":"function","function":{"name":"get_weather",)"
            R"("arguments":"{\"city\": \"Paris\"}"}},{"id":"call_1","type":"function","function":{"name":"now",)"
            R"("arguments":"{}"}}]},"logprobs":null,"finish_reason":"tool_calls"}],)"
            R"("usage":{"prompt_tokens":3,"completion_tokens":4,"total_tokens":7,)"
            R"("prompt_tokens_details":{"cached_tokens":0}}})");
}

TEST(ChatOutput, OnlyCallsMeansNullContent) {
  ChatOutput output(qwen3_config(), counting_ids());
  CompletionChoiceResult choice;
  add_chat_text(output, "<tool_call>{\"name\": \"f\", \"arguments\": {}}</tool_call>", {}, "stop", choice);
  Json message = chat_response("c", 1, "m", {choice}, Usage{})["choices"][0]["message"];
  EXPECT_TRUE(message["content"].is_null());
  EXPECT_FALSE(message.contains("reasoning_content"));
  EXPECT_EQ(message["tool_calls"][0]["function"]["arguments"], "{}");
}

TEST(ChatOutput, PlainAnswerKeepsItsShape) {
  ChatOutput output(qwen3_config(), counting_ids());
  CompletionChoiceResult choice;
  add_chat_text(output, "Hello", {}, std::nullopt, choice);
  add_chat_text(output, " world\n", {}, "length", choice);
  EXPECT_EQ(chat_response("c", 1, "m", {choice}, Usage{})["choices"][0].dump(),
            R"({"index":0,"message":{"role":"assistant","content":"Hello world\n"},"logprobs":null,"finish_reason":"length"})");
}

TEST(ChatOutput, StreamedChunks) {
  ChatOutput output(qwen3_config(), counting_ids());
  std::vector<std::string> chunks;
  for (size_t i = 0; i < kPieces.size(); ++i) {
    for (const Json& chunk : chat_text_chunks(output, "c", 1, "m", 0, kPieces[i], {},
                                              i + 1 == kPieces.size() ? std::optional<std::string>("stop") : std::nullopt,
                                              nullptr)) {
      chunks.push_back(chunk["choices"][0].dump());
    }
  }
  const std::vector<std::string> expected = {
      R"({"index":0,"delta":{"reasoning_content":"\nweather"},"logprobs":null,"finish_reason":null})",
      R"({"index":0,"delta":{"reasoning_content":" first\n"},"logprobs":null,"finish_reason":null})",
      R"({"index":0,"delta":{"content":"Checking."},"logprobs":null,"finish_reason":null})",
      R"({"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_0","type":"function","function":{"name":"get_weather","arguments":""}}]},"logprobs":null,"finish_reason":null})",
      R"({"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"city\": \"Par"}}]},"logprobs":null,"finish_reason":null})",
      R"({"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"is\"}"}}]},"logprobs":null,"finish_reason":null})",
      R"({"index":0,"delta":{"tool_calls":[{"index":1,"id":"call_1","type":"function","function":{"name":"now","arguments":""}}]},"logprobs":null,"finish_reason":null})",
      R"({"index":0,"delta":{"tool_calls":[{"index":1,"function":{"arguments":"{}"}}]},"logprobs":null,"finish_reason":null})",
      R"({"index":0,"delta":{"content":""},"logprobs":null,"finish_reason":"tool_calls"})",
  };
  EXPECT_EQ(chunks, expected);
}

// The openai client's stream accumulation: deltas of every chunking give the whole message.
TEST(ChatOutput, StreamedDeltasAccumulateToTheMessage) {
  std::string text;
  for (const std::string& piece : kPieces) text += piece;
  ChatOutput whole(qwen3_config(), counting_ids());
  CompletionChoiceResult expected;
  add_chat_text(whole, text, {}, "stop", expected);
  for (size_t n : {1, 2, 3, 5, 11}) {
    ChatOutput output(qwen3_config(), counting_ids());
    std::vector<std::string> parts = testing::split_every(text, n);
    std::string content, reasoning, finish;
    Json calls = Json::array();
    for (size_t i = 0; i < parts.size(); ++i) {
      for (const Json& chunk : chat_text_chunks(output, "c", 1, "m", 0, parts[i], {},
                                                i + 1 == parts.size() ? std::optional<std::string>("stop") : std::nullopt,
                                                nullptr)) {
        const Json& choice = chunk["choices"][0];
        const Json& delta = choice["delta"];
        if (delta.contains("content")) content += delta["content"].get<std::string>();
        if (delta.contains("reasoning_content")) reasoning += delta["reasoning_content"].get<std::string>();
        for (const Json& call : delta.value("tool_calls", Json::array())) {
          const size_t index = call["index"].get<size_t>();
          if (index == calls.size()) calls.push_back({{"id", call["id"]}, {"name", call["function"]["name"]}, {"arguments", ""}});
          calls[index]["arguments"] = calls[index]["arguments"].get<std::string>() +
                                      call["function"]["arguments"].get<std::string>();
        }
        if (!choice["finish_reason"].is_null()) finish = choice["finish_reason"];
      }
    }
    EXPECT_EQ(content, expected.text) << n;
    EXPECT_EQ(reasoning, expected.reasoning) << n;
    EXPECT_EQ(finish, expected.finish_reason) << n;
    ASSERT_EQ(calls.size(), expected.tool_calls.size()) << n;
    for (size_t i = 0; i < calls.size(); ++i) {
      EXPECT_EQ(calls[i]["name"], expected.tool_calls[i].name);
      EXPECT_EQ(calls[i]["arguments"], expected.tool_calls[i].arguments);
    }
  }
}

TEST(ChatOutput, ParallelToolCallsOff) {
  ChatOutputConfig config = qwen3_config();
  config.parallel_tool_calls = false;
  std::string text;
  for (const std::string& piece : kPieces) text += piece;
  testing::Answer answer = testing::run_chunks(config, {text});
  ASSERT_EQ(answer.calls.size(), 1u);
  EXPECT_EQ(answer.calls[0].first, "get_weather");
}

TEST(ChatParsers, ChosenFromEachTokenizersTemplate) {
  auto resolve = [](const std::string& model, const std::string& tool, const std::string& reasoning) {
    auto tok = tokenizer::Tokenizer::from_dir(std::filesystem::path(TACHYON_TOKENIZERS) / model);
    return resolve_chat_parsers(tool, reasoning, tok);
  };
  ChatParsers qwen3 = resolve("qwen3", "auto", "auto");
  EXPECT_EQ(qwen3.tool, "hermes");
  EXPECT_EQ(qwen3.reasoning, "qwen3");
  EXPECT_FALSE(qwen3.tool_markers_special);  // <tool_call> and <think> are not special in Qwen3
  EXPECT_FALSE(qwen3.reasoning_markers_special);
  ChatParsers deepseek = resolve("deepseek_v3", "auto", "auto");
  EXPECT_EQ(deepseek.tool, "deepseek_v3");
  EXPECT_EQ(deepseek.reasoning, "");
  ChatParsers llama3 = resolve("llama3", "auto", "auto");  // Llama 3.0's template shows no tools
  EXPECT_EQ(llama3.tool, "");
  EXPECT_EQ(resolve("llama3", "llama3_json", "none").tool, "llama3_json");
  EXPECT_EQ(resolve("qwen3", "none", "none").tool, "");
  EXPECT_EQ(resolve("qwen3", "glm47", "glm45").tool, "glm45");
  EXPECT_THROW(resolve("qwen3", "hermes2", "auto"), tachyon::Error);
  EXPECT_THROW(resolve("qwen3", "auto", "think"), tachyon::Error);
}

// ---- tool_choice ----

const char* kTools =
    R"("tools": [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}])";

ApiError chat_error(const std::string& fields) {
  try {
    parse_chat_request(R"({"messages": [{"role": "user", "content": "hi"}], )" + fields + "}", ServerLimits{});
  } catch (const ApiException& e) {
    return e.error();
  }
  ADD_FAILURE() << "accepted: " << fields;
  return {};
}

ChatRequest chat(const std::string& fields) {
  return parse_chat_request(R"({"messages": [{"role": "user", "content": "hi"}], )" + fields + "}", ServerLimits{});
}

TEST(ToolChoice, AutoAndNone) {
  EXPECT_EQ(chat(std::string(kTools)).tool_choice, ToolChoice::kAuto);
  EXPECT_EQ(chat(std::string(kTools) + R"(, "tool_choice": "auto")").tool_choice, ToolChoice::kAuto);
  EXPECT_EQ(chat(std::string(kTools) + R"(, "tool_choice": "none")").tool_choice, ToolChoice::kNone);
  EXPECT_EQ(chat(R"("tool_choice": "none")").tool_choice, ToolChoice::kNone);
  EXPECT_EQ(chat(R"("tool_choice": null)").tool_choice, ToolChoice::kAuto);
  EXPECT_FALSE(chat(std::string(kTools) + R"(, "parallel_tool_calls": false)").parallel_tool_calls);
  EXPECT_EQ(chat(std::string(kTools) + R"(, "tool_choice": "required")").tool_choice, ToolChoice::kRequired);
  const ChatRequest named = chat(std::string(kTools) + R"(, "tool_choice": {"type": "function", "function": {"name": "get_weather"}})");
  EXPECT_EQ(named.tool_choice, ToolChoice::kFunction);
  EXPECT_EQ(named.tool_choice_function, "get_weather");
}

TEST(ToolChoice, Refusals) {
  struct Case {
    std::string fields, param, message_part;
  };
  const std::vector<Case> cases = {
      {std::string(kTools) + R"(, "tool_choice": "required", "guided_regex": "a")", "tool_choice", "cannot be combined"},
      {std::string(kTools) + R"(, "tool_choice": {"type": "function", "function": {"name": "get_weather"}}, )"
                             R"("response_format": {"type": "json_object"})",
       "tool_choice", "cannot be combined"},
      {std::string(kTools) + R"(, "tool_choice": {"type": "function", "function": {"name": "nope"}})",
       "tool_choice.function.name", "no function named 'nope'"},
      {std::string(kTools) + R"(, "tool_choice": "sometimes")", "tool_choice", "Invalid value"},
      {std::string(kTools) + R"(, "tool_choice": 3)", "tool_choice", "Invalid type"},
      {std::string(kTools) + R"(, "tool_choice": {"type": "function"})", "tool_choice", "must be"},
      {std::string(kTools) + R"(, "tool_choice": {"type": "function", "function": {}})", "tool_choice.function.name",
       "required"},
      {R"("tool_choice": "required")", "tool_choice", "needs a non-empty 'tools'"},
      {std::string(kTools) + R"(, "parallel_tool_calls": "yes")", "parallel_tool_calls", ""},
  };
  for (const Case& c : cases) {
    ApiError error = chat_error(c.fields);
    EXPECT_EQ(error.status, 400) << c.fields;
    EXPECT_EQ(error.param, c.param) << c.fields;
    EXPECT_NE(error.message.find(c.message_part), std::string::npos) << error.message;
  }
}

}  // namespace
}  // namespace tachyon::server
