// The <think> reasoning split (server/reasoning_parser.cpp), alone and in front of a tool parser,
// whole and in every chunking; and whether a rendered prompt opened the reasoning block,
// through the real Qwen3 chat template with enable_thinking on and off.
#include <gtest/gtest.h>

#include "chat_output_harness.h"
#include "tachyon/tokenizer/chat_template.h"
#include "tachyon/tokenizer/tokenizer.h"

namespace tachyon::server {
namespace {

using testing::Answer;
using testing::expect_answer;

ChatOutputConfig reasoning_config(bool starts_inside, std::string tool_parser = "") {
  ChatOutputConfig config;
  config.reasoning_parser = "qwen3";
  config.reasoning_starts_inside = starts_inside;
  config.tool_parser = std::move(tool_parser);
  return config;
}

TEST(ReasoningParser, ThinkThenAnswer) {
  expect_answer(reasoning_config(false), "<think>\nLet me think: 2 + 2.\n</think>\n\nIt is 4.",
                Answer{"It is 4.", "\nLet me think: 2 + 2.\n", {}});
  expect_answer(reasoning_config(false), "\n<think>a</think>b", Answer{"b", "a", {}});
}

TEST(ReasoningParser, PromptOpenedTheBlock) {  // DeepSeek-R1's template ends with <think>\n
  expect_answer(reasoning_config(true), "Hmm, 2 + 2.\n</think>\n\nIt is 4.", Answer{"It is 4.", "Hmm, 2 + 2.\n", {}});
  expect_answer(reasoning_config(true), "still thinking <thi", Answer{"", "still thinking <thi", {}});
}

TEST(ReasoningParser, NoReasoningIsContentByteForByte) {
  for (std::string text : {"It is 4.", "  It is 4.\n", "4 <think>x</think>", "<thin", "<b>bold</b>", ""}) {
    expect_answer(reasoning_config(false), text, Answer{text, "", {}});
  }
}

TEST(ReasoningParser, CutShortIsReasoning) {
  expect_answer(reasoning_config(false), "<think>partial thought </thi", Answer{"", "partial thought </thi", {}});
}

TEST(ReasoningParser, ThenToolCallsFromTheContent) {
  expect_answer(reasoning_config(false, "hermes"),
                "<think>Need the weather. <tool_call>not this one</tool_call></think>\n\n"
                "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>",
                Answer{"", "Need the weather. <tool_call>not this one</tool_call>",
                       {{"get_weather", R"({"city": "Paris"})"}}});
}

TEST(ReasoningParser, PromptOpensReasoning) {
  EXPECT_TRUE(prompt_opens_reasoning("deepseek_r1", "<｜User｜>hi<｜Assistant｜><think>\n"));
  EXPECT_FALSE(prompt_opens_reasoning("deepseek_r1", "<｜User｜>hi<｜Assistant｜></think>"));
  EXPECT_FALSE(prompt_opens_reasoning("", "<think>\n"));
  EXPECT_EQ(reasoning_parser_for_template("{{ '<|im_start|>assistant\\n<think>\\n\\n</think>' }}"), "qwen3");
  EXPECT_EQ(reasoning_parser_for_template("{{ '<|im_start|>assistant\\n' }}"), "");
}

// enable_thinking reaches the Qwen3 template through chat_template_kwargs (ChatTemplateInputs::extra):
// off, the prompt closes an empty block, so the answer is all content.
TEST(ReasoningParser, EnableThinkingThroughTheQwen3Template) {
  auto tok = tokenizer::Tokenizer::from_dir(std::filesystem::path(TACHYON_TOKENIZERS) / "qwen3");
  ASSERT_EQ(reasoning_parser_for_template(tok.chat_template()), "qwen3");
  tokenizer::ChatTemplate chat_template(tok.chat_template(), tok.bos_token(), tok.eos_token());
  tokenizer::ChatTemplateInputs inputs;
  inputs.messages = nlohmann::ordered_json::parse(R"([{"role": "user", "content": "hi"}])");
  inputs.add_generation_prompt = true;
  std::string on = chat_template.render(inputs);
  EXPECT_TRUE(on.ends_with("<|im_start|>assistant\n")) << on;
  EXPECT_FALSE(prompt_opens_reasoning("qwen3", on));
  inputs.extra = nlohmann::ordered_json::parse(R"({"enable_thinking": false})");
  std::string off = chat_template.render(inputs);
  EXPECT_TRUE(off.ends_with("<think>\n\n</think>\n\n")) << off;
  EXPECT_FALSE(prompt_opens_reasoning("qwen3", off));
  expect_answer(reasoning_config(false), "Hi there!", Answer{"Hi there!", "", {}});
}

}  // namespace
}  // namespace tachyon::server
