// A DeepSeek-V3.2 checkpoint as released, its tokenizer with no chat template (the release ships a
// Python encoder instead), served over real HTTP on the CPU: the chat routes render its prompt with
// the native V3.2 renderer (before: 400 "this model has no chat template"), with the model's own
// begin-of-sentence token, tools in the system block, and thinking mode opening the answer's
// reasoning, which the <think> reasoning parser then reads; the DSML tool parser is the "auto"
// choice. The renderer's text is tests/unit/test_deepseek_v32_chat.cpp's.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "server_fixture.h"
#include "tachyon/model/make_model.h"
#include "tachyon/tokenizer/chat_template.h"
#include "tachyon/tokenizer/tokenizer.h"

namespace tachyon::server::testing::deepseek_v32_test {
namespace {

using json = nlohmann::ordered_json;

class ServerDeepseekV32 : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::filesystem::path(std::filesystem::temp_directory_path() /
                                     ("tachyon-server-v32-" + std::to_string(::getpid())));
    model::make_model({.arch = "deepseek_v32",
                       .preset = "tiny-dsa",
                       .seed = 3,
                       .tokenizer_dir = std::filesystem::path(TACHYON_TOKENIZERS) / "deepseek_v3",
                       .out_dir = *dir_});
    // As released: no chat_template in tokenizer_config.json.
    const std::filesystem::path config_path = *dir_ / "tokenizer_config.json";
    nlohmann::json config = nlohmann::json::parse(std::ifstream(config_path));
    config.erase("chat_template");
    std::ofstream(config_path) << config.dump();
    core::EngineConfig engine = ServerUnderTest::default_engine();
    engine.scheduler.max_model_len = 2048;  // the tools block and a forced call a random model spells byte by byte
    server_ = new ServerUnderTest(engine, {}, 0, [](ServingOptions& options) { options.model_dir = *dir_; });
  }
  static void TearDownTestSuite() {
    delete server_;
    std::filesystem::remove_all(*dir_);
    delete dir_;
  }
  static json chat(const json& extra) {
    json body = {{"model", "tiny"},
                 {"messages", json::array({{{"role", "user"}, {"content", "Hi"}}})},
                 {"max_tokens", 6},
                 {"temperature", 0}};
    body.update(extra);
    auto r = server_->client().Post("/v1/chat/completions", body.dump(), "application/json");
    EXPECT_TRUE(r);
    EXPECT_EQ(r->status, 200) << r->body;
    return json::parse(r->body);
  }
  // The tokens of the native renderer's prompt for `inputs` with this model's tokenizer.
  static size_t prompt_tokens(const tokenizer::ChatTemplateInputs& inputs) {
    const tokenizer::Tokenizer tok = tokenizer::Tokenizer::from_dir(*dir_);
    const std::string prompt = tokenizer::ChatTemplate::deepseek_v32(tok.bos_token(), tok.eos_token()).render(inputs);
    return tok.encode(prompt, /*add_special_tokens=*/false).size();
  }
  static std::filesystem::path* dir_;
  static ServerUnderTest* server_;
};
std::filesystem::path* ServerDeepseekV32::dir_ = nullptr;
ServerUnderTest* ServerDeepseekV32::server_ = nullptr;

TEST_F(ServerDeepseekV32, ChatRendersTheNativePromptWithTheModelsBosToken) {
  const json answer = chat(json::object());
  tokenizer::ChatTemplateInputs inputs;
  inputs.messages = json::array({{{"role", "user"}, {"content", "Hi"}}});
  EXPECT_EQ(answer["usage"]["prompt_tokens"], prompt_tokens(inputs)) << answer.dump();
  // <｜begin▁of▁sentence｜> <｜User｜> Hi <｜Assistant｜> </think>: the turn markers are single tokens.
  EXPECT_LE(answer["usage"]["prompt_tokens"].get<int64_t>(), 8) << answer.dump();
}

TEST_F(ServerDeepseekV32, ToolsGoIntoThePrompt) {
  const json tools = json::array(
      {{{"type", "function"}, {"function", {{"name", "get_weather"}, {"parameters", {{"type", "object"}}}}}}});
  const json answer = chat({{"tools", tools}});
  tokenizer::ChatTemplateInputs inputs;
  inputs.messages = json::array({{{"role", "user"}, {"content", "Hi"}}});
  inputs.tools = tools;
  EXPECT_EQ(answer["usage"]["prompt_tokens"], prompt_tokens(inputs)) << answer.dump();
  EXPECT_GT(answer["usage"]["prompt_tokens"].get<int64_t>(), 100);  // the tools block
  // tool_choice "none" leaves them out, as for every template.
  EXPECT_EQ(chat({{"tools", tools}, {"tool_choice", "none"}})["usage"]["prompt_tokens"],
            chat(json::object())["usage"]["prompt_tokens"]);
}

// A forced call: the grammar writes DSML, and the DSML parser reads the call back.
TEST_F(ServerDeepseekV32, AForcedCallIsWrittenInDsmlAndParsedBack) {
  const json tools = json::array({{{"type", "function"},
                                   {"function",
                                    {{"name", "get_weather"},
                                     {"parameters",
                                      {{"type", "object"},
                                       {"properties",
                                        {{"city", {{"type", "string"}, {"enum", {"Paris", "Rome"}}}},
                                         {"days", {{"type", "integer"}, {"minimum", 1}, {"maximum", 9}}}}},
                                       {"required", {"city", "days"}}}}}}}});
  const json answer = chat({{"tools", tools}, {"tool_choice", "required"}, {"max_tokens", 1000}});
  const json& choice = answer["choices"][0];
  ASSERT_EQ(choice["finish_reason"], "tool_calls") << answer.dump();
  ASSERT_EQ(choice["message"]["tool_calls"].size(), 1u) << answer.dump();
  const json& function = choice["message"]["tool_calls"][0]["function"];
  EXPECT_EQ(function["name"], "get_weather");
  const json arguments = json::parse(function["arguments"].get<std::string>());
  EXPECT_TRUE(arguments["city"] == "Paris" || arguments["city"] == "Rome") << arguments.dump();
  EXPECT_TRUE(arguments["days"].is_number_integer()) << arguments.dump();
}

TEST_F(ServerDeepseekV32, ThinkingModeOpensTheReasoningTheParserReads) {
  const json answer = chat({{"chat_template_kwargs", {{"enable_thinking", true}}}});
  const json& message = answer["choices"][0]["message"];
  // The prompt ends in <think>: a random model's six tokens are all reasoning.
  EXPECT_FALSE(message["reasoning_content"].get<std::string>().empty()) << answer.dump();
  EXPECT_TRUE(message["content"].is_null() || message["content"] == "") << answer.dump();
  EXPECT_EQ(answer["usage"]["completion_tokens_details"]["reasoning_tokens"], answer["usage"]["completion_tokens"]);
}

}  // namespace
}  // namespace tachyon::server::testing::deepseek_v32_test
