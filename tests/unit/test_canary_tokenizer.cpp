// The canary model's tokenizer (assets/canary, written by tools/train_canary_tokenizer.py) as our
// loader reads it: prompts of the canary task round-trip, every digit is a token of its own (the
// model does arithmetic digit by digit), <|endoftext|> is the one special token, and the chat
// template turns a chat into the task's prompt. The pinned ids were checked against two other
// implementations: the trainer's own merge-by-rank encoder and the @lenml/tokenizers (transformers.js)
// reference. If the asset is retrained, re-pin them.
#include <gtest/gtest.h>

#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tachyon/tokenizer/chat_template.h"
#include "tachyon/tokenizer/tokenizer.h"

namespace tachyon::tokenizer {
namespace {

using Ids = std::vector<int32_t>;
const std::string kAssetDir = std::string(TACHYON_TEST_DATA) + "/../../assets/canary";
constexpr int32_t kEos = 493;

const Tokenizer& canary() {
  static const Tokenizer tokenizer = Tokenizer::from_dir(kAssetDir);
  return tokenizer;
}

// "Question: q\nAnswer: a" for each record of the committed sample of the test split.
std::vector<std::string> sample_prompts() {
  std::ifstream in(std::string(TACHYON_TEST_DATA) + "/canary/test_sample.jsonl");
  std::vector<std::string> prompts;
  for (std::string line; std::getline(in, line);) {
    const auto record = nlohmann::json::parse(line);
    prompts.push_back("Question: " + record.at("question").get<std::string>() + "\nAnswer: " +
                      record.at("answer").get<std::string>());
  }
  return prompts;
}

TEST(CanaryTokenizer, SpecialTokens) {
  const Tokenizer& tok = canary();
  EXPECT_EQ(tok.vocab_size(), kEos + 1);
  EXPECT_EQ(tok.eos_token(), "<|endoftext|>");
  EXPECT_EQ(tok.eos_id(), kEos);
  EXPECT_EQ(tok.bos_id(), kEos);
  EXPECT_TRUE(tok.is_special(kEos));
  EXPECT_EQ(tok.encode("<|endoftext|>"), Ids{kEos});
  EXPECT_EQ(tok.decode(Ids{kEos}), "<|endoftext|>");
  EXPECT_EQ(tok.decode(Ids{kEos}, /*skip_special_tokens=*/true), "");
}

TEST(CanaryTokenizer, PinnedIds) {
  const Tokenizer& tok = canary();
  // That | makes | _ | 1 | 4 | _* | _ | 3 | _= | _ | 4 | 2 | _coins | . | \n | #### | _ | 4 | 2
  EXPECT_EQ(tok.encode("That makes 14 * 3 = 42 coins.\n#### 42"),
            (Ids{425, 383, 32, 49, 52, 354, 32, 51, 264, 32, 52, 50, 332, 46, 10, 307, 32, 52, 50}));
  // Question | : | _Mia | _has | _ | 7 | _apples | . | \n | Answer | :
  EXPECT_EQ(tok.encode("Question: Mia has 7 apples.\nAnswer:"), (Ids{315, 58, 451, 267, 32, 55, 329, 46, 10, 311, 58}));
}

TEST(CanaryTokenizer, SamplePromptsRoundTripWithOneTokenPerDigit) {
  const Tokenizer& tok = canary();
  const auto prompts = sample_prompts();
  ASSERT_EQ(prompts.size(), 40u);
  for (const std::string& prompt : prompts) {
    const Ids ids = tok.encode(prompt);
    EXPECT_EQ(tok.decode(ids), prompt);
    std::size_t digits_in_text = 0;
    for (char c : prompt) digits_in_text += c >= '0' && c <= '9';
    std::size_t digit_tokens = 0;
    for (const int32_t id : ids) {
      const std::string piece = tok.decode(Ids{id});
      if (piece.find_first_of("0123456789") == std::string::npos) continue;
      EXPECT_EQ(piece.size(), 1u) << "token " << id << " '" << piece << "' holds a digit and more";
      ++digit_tokens;
    }
    EXPECT_EQ(digit_tokens, digits_in_text) << prompt;
    // Every word of the task is one token, so even a digit-heavy prompt is under a token per 2 bytes.
    EXPECT_LT(ids.size() * 2, prompt.size()) << prompt;
  }
}

TEST(CanaryTokenizer, DigitsAreTheirOwnTokens) {
  const Tokenizer& tok = canary();
  for (char d = '0'; d <= '9'; ++d) {
    const std::string digit(1, d);
    EXPECT_EQ(tok.encode(digit), Ids{static_cast<int32_t>(d)});  // byte tokens keep their byte's id
    const auto id = static_cast<int32_t>(d);
    EXPECT_EQ(tok.encode(" " + digit + digit + digit + "."), (Ids{32, id, id, id, 46}));
  }
}

TEST(CanaryTokenizer, ChatTemplateMakesTheTaskPrompt) {
  std::ifstream in(kAssetDir + "/tokenizer_config.json");
  const ChatTemplate chat = ChatTemplate::from_tokenizer_config(nlohmann::json::parse(in));
  ChatTemplateInputs inputs;
  inputs.messages = {{{"role", "system"}, {"content", "ignored"}},
                     {{"role", "user"}, {"content", "Mia has 2 apples. How many apples does Mia have now?"}},
                     {{"role", "assistant"}, {"content", "#### 2"}},
                     {{"role", "user"}, {"content", "Leo has 3 cards."}}};
  inputs.add_generation_prompt = true;
  EXPECT_EQ(chat.render(inputs),
            "Question: Mia has 2 apples. How many apples does Mia have now?\nAnswer: #### 2\n\n"
            "Question: Leo has 3 cards.\nAnswer:");
}

}  // namespace
}  // namespace tachyon::tokenizer
