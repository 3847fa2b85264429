// Every conversation of tests/data/chat/conversations.json x every model's chat template,
// rendered by ChatTemplate, must equal byte for byte what transformers' apply_chat_template
// produced on the GPU machine (expected_hf_<model>.json, tools/chat_reference.py) and what
// jinja2 produced here (expected_jinja2_<model>.json, tools/chat_reference_jinja2.py). Where the
// reference raised, ChatTemplate must throw tachyon::Error.
//   ctest --test-dir build-jinja -R chat_template --output-on-failure
#include "tachyon/tokenizer/chat_template.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <iostream>
#include <string>

#include "tachyon/base/check.h"
#include "tachyon/base/file_util.h"

namespace tachyon::tokenizer {
namespace {

const std::filesystem::path kData = std::filesystem::path(TACHYON_TEST_DATA) / "chat";
const std::filesystem::path kModels = TACHYON_TOKENIZERS;

nlohmann::ordered_json read_ordered(const std::filesystem::path& path) {
  // Ordered parsing keeps tool-schema key order, which tojson prints.
  return nlohmann::ordered_json::parse(read_file(path));
}

ChatTemplateInputs inputs_of(const nlohmann::ordered_json& conv) {
  ChatTemplateInputs in;
  in.messages = conv.at("messages");
  in.tools = conv.value("tools", nlohmann::ordered_json());
  in.add_generation_prompt = conv.value("add_generation_prompt", false);
  if (conv.contains("extra")) in.extra = conv.at("extra");
  return in;
}

// "first difference at byte N: got ... want ..." so a mismatch is readable in the log.
std::string describe_difference(const std::string& got, const std::string& want) {
  size_t i = 0;
  while (i < got.size() && i < want.size() && got[i] == want[i]) ++i;
  size_t from = i < 40 ? 0 : i - 40;
  return "first difference at byte " + std::to_string(i) + "\n  got:  " +
         nlohmann::json(got.substr(from, 120)).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) +
         "\n  want: " +
         nlohmann::json(want.substr(from, 120)).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

void check_against(const std::string& model, const std::string& reference) {
  const auto conversations = read_ordered(kData / "conversations.json");
  const auto expected = read_ordered(kData / ("expected_" + reference + "_" + model + ".json"));
  const auto& results = expected.at("results");
  ASSERT_EQ(results.size(), conversations.size()) << "regenerate expected_" << reference << "_" << model;
  ChatTemplate chat = ChatTemplate::from_tokenizer_config(read_json_file(kModels / model / "tokenizer_config.json"));
  int identical = 0;
  for (size_t i = 0; i < conversations.size(); ++i) {
    const auto& conv = conversations[i];
    const auto& want = results[i];
    const std::string name = conv.at("name");
    ASSERT_EQ(want.at("name").get<std::string>(), name);
    if (want.contains("error")) {
      try {
        chat.render(inputs_of(conv));
        ADD_FAILURE() << model << "/" << name << ": reference raised (" << want["error"]
                      << ") but ChatTemplate rendered";
      } catch (const Error& e) {
        ++identical;
      }
      continue;
    }
    std::string got;
    try {
      got = chat.render(inputs_of(conv));
    } catch (const Error& e) {
      ADD_FAILURE() << model << "/" << name << ": threw " << e.what();
      continue;
    }
    const std::string want_text = want.at("rendered");
    if (got == want_text) {
      ++identical;
    } else {
      ADD_FAILURE() << model << "/" << name << " differs from " << reference << ": "
                    << describe_difference(got, want_text);
    }
  }
  std::cout << "[chat_template] " << model << " vs " << expected.value("reference", reference) << ": "
            << identical << "/" << conversations.size() << " identical\n";
  EXPECT_EQ(identical, static_cast<int>(conversations.size()));
}

class ChatTemplateReference : public testing::TestWithParam<std::string> {};

TEST_P(ChatTemplateReference, MatchesTransformers) { check_against(GetParam(), "hf"); }
TEST_P(ChatTemplateReference, MatchesJinja2) { check_against(GetParam(), "jinja2"); }

INSTANTIATE_TEST_SUITE_P(Models, ChatTemplateReference,
                         testing::Values("llama3", "qwen3", "deepseek_v3"),
                         [](const auto& info) { return info.param; });

TEST(ChatTemplate, AcceptsPlainJsonInputs) {
  // A caller holding nlohmann::json (sorted keys) converts implicitly.
  ChatTemplate chat("{{ messages[0].content }}|{{ tools | tojson }}", "<s>", "</s>");
  ChatTemplateInputs in;
  nlohmann::json messages = nlohmann::json::array({{{"role", "user"}, {"content", "hi"}}});
  nlohmann::json tools = nlohmann::json::array({{{"b", 1}, {"a", 2}}});
  in.messages = messages;
  in.tools = tools;
  EXPECT_EQ(chat.render(in), "hi|[{\"a\": 2, \"b\": 1}]");
}

TEST(ChatTemplate, SpecialTokensAndDefaults) {
  ChatTemplate chat("{{ bos_token }}{{ tools }}{{ documents }}{{ add_generation_prompt }}{{ eos_token }}", "<s>", "</s>");
  EXPECT_EQ(chat.render({}), "<s>NoneNoneFalse</s>");
}

TEST(ChatTemplate, BosTokenFromAddedTokenObject) {
  nlohmann::json config = {{"chat_template", "{{ bos_token }}|{{ eos_token }}"},
                           {"bos_token", {{"content", "<B>"}, {"lstrip", false}}},
                           {"eos_token", "<E>"}};
  EXPECT_EQ(ChatTemplate::from_tokenizer_config(config).render({}), "<B>|<E>");
}

TEST(ChatTemplate, RaiseExceptionBecomesError) {
  ChatTemplate chat("{% if messages[0].role != 'user' %}{{ raise_exception('first must be user') }}{% endif %}", "", "");
  ChatTemplateInputs in;
  in.messages = nlohmann::ordered_json::parse(R"([{"role": "system", "content": "x"}])");
  try {
    chat.render(in);
    FAIL() << "no throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("first must be user"), std::string::npos) << e.what();
  }
}

TEST(ChatTemplate, ExtraCannotReplaceInputs) {
  ChatTemplate chat("{{ messages }}", "", "");
  ChatTemplateInputs in;
  in.extra = {{"messages", 1}};
  EXPECT_THROW(chat.render(in), Error);
}

TEST(ChatTemplate, SyntaxErrorAtConstruction) {
  try {
    ChatTemplate chat("line one\n{% if x %}\nno end", "", "");
    FAIL() << "no throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("endif"), std::string::npos) << e.what();
  }
}

TEST(ChatTemplate, MissingTemplateInConfig) {
  EXPECT_THROW(ChatTemplate::from_tokenizer_config(nlohmann::json::object()), Error);
}

}  // namespace
}  // namespace tachyon::tokenizer
