// The chat request path up to the prompt text: a request body through parse_chat_request, its
// messages and tools through each model's real chat template (ChatTemplate), compared byte for
// byte with Python jinja2 rendering the same template with the messages as the parser returns
// them. The case is an OpenAI tool-call history: an assistant turn with "content": null and
// tool_calls (arguments as JSON strings), then the tool results.
//
// The expected texts were made with the environment of tools/chat_reference_jinja2.py:
//   env.from_string(config["chat_template"]).render(messages=..., tools=..., documents=None,
//       add_generation_prompt=True, bos_token=..., eos_token=...)
//   ctest --test-dir build -R openai_chat_template_path --output-on-failure
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "tachyon/base/file_util.h"
#include "tachyon/server/openai_protocol.h"
#include "tachyon/tokenizer/chat_template.h"

namespace tachyon::server {
namespace {

const char* kToolHistory = R"({"messages":[
  {"role":"system","content":"Be brief."},
  {"role":"user","content":"Weather in Paris and Rome?"},
  {"role":"assistant","content":null,"tool_calls":[
    {"id":"call_1","type":"function","function":{"name":"get_weather","arguments":"{\"city\": \"Paris\"}"}},
    {"id":"call_2","type":"function","function":{"name":"get_weather","arguments":"{\"city\": \"Rome\"}"}}]},
  {"role":"tool","content":"sunny","tool_call_id":"call_1"},
  {"role":"tool","content":"rainy","tool_call_id":"call_2"}],
 "tools":[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object",
   "properties":{"city":{"type":"string"}},"required":["city"]}}}]})";

std::string render(const std::string& model, const std::string& body) {
  ChatRequest request = parse_chat_request(body, ServerLimits{});
  tokenizer::ChatTemplate chat = tokenizer::ChatTemplate::from_tokenizer_config(
      read_json_file(std::filesystem::path(TACHYON_TOKENIZERS) / model / "tokenizer_config.json"));
  tokenizer::ChatTemplateInputs inputs;
  inputs.messages = request.messages;
  inputs.tools = request.tools;
  inputs.add_generation_prompt = request.add_generation_prompt;
  inputs.extra = request.chat_template_kwargs;
  return chat.render(inputs);
}

TEST(OpenaiChatTemplatePath, ToolCallHistoryQwen3) {
  // Qwen3's template tests `'</think>' in message.content`: None there raises in jinja2 too, so
  // the parser hands templates "" for a null content (as vLLM does).
  EXPECT_EQ(render("qwen3", kToolHistory),
            "<|im_start|>system\nBe brief.\n\n# Tools\n\nYou may call one or more functions to assist with the user "
            "query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>\n"
            R"({"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", )"
            R"("properties": {"city": {"type": "string"}}, "required": ["city"]}}})"
            "\n</tools>\n\nFor each function call, return a json object with function name and arguments within "
            "<tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": "
            "<args-json-object>}\n</tool_call><|im_end|>\n<|im_start|>user\nWeather in Paris and Rome?<|im_end|>\n"
            "<|im_start|>assistant\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n"
            "</tool_call>\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Rome\"}}\n"
            "</tool_call><|im_end|>\n<|im_start|>user\n<tool_response>\nsunny\n</tool_response>\n<tool_response>\n"
            "rainy\n</tool_response><|im_end|>\n<|im_start|>assistant\n");
}

TEST(OpenaiChatTemplatePath, ToolCallHistoryLlama3) {
  // This template has no tool support: it prints every content, so a null content printed "None".
  EXPECT_EQ(render("llama3", kToolHistory),
            "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nWeather in Paris and Rome?<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\n<|eot_id|>"
            "<|start_header_id|>tool<|end_header_id|>\n\nsunny<|eot_id|>"
            "<|start_header_id|>tool<|end_header_id|>\n\nrainy<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\n");
}

TEST(OpenaiChatTemplatePath, ToolCallHistoryDeepseekV3) {
  // This template prints tool calls only for `content is none` and concatenates arguments as a
  // string; with vLLM's normalisation (content "", arguments an object) it drops the calls, in
  // jinja2 and in vLLM alike.
  EXPECT_EQ(render("deepseek_v3", kToolHistory),
            "<｜begin▁of▁sentence｜>Be brief.<｜User｜>Weather in Paris and Rome?<｜Assistant｜><｜end▁of▁sentence｜>"
            "<｜tool▁outputs▁begin｜><｜tool▁output▁begin｜>sunny<｜tool▁output▁end｜>\n"
            "<｜tool▁output▁begin｜>rainy<｜tool▁output▁end｜><｜tool▁outputs▁end｜>");
}

TEST(OpenaiChatTemplatePath, OmittedContentRendersAsNullContent) {
  std::string omitted = kToolHistory;
  const std::string null_content = R"("content":null,"tool_calls")";
  omitted.replace(omitted.find(null_content), null_content.size(), R"("tool_calls")");
  for (const char* model : {"qwen3", "llama3", "deepseek_v3"}) {
    EXPECT_EQ(render(model, omitted), render(model, kToolHistory)) << model;
  }
}

}  // namespace
}  // namespace tachyon::server
