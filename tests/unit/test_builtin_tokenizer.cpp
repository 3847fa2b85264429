// The built-in byte-level tokenizer: every string round-trips, bytes map to their own ids,
// special tokens are matched, and its ChatML template renders.
#include "tachyon/tokenizer/builtin_tokenizer.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include "tachyon/tokenizer/chat_template.h"
#include "tachyon/tokenizer/tokenizer.h"

namespace tachyon::tokenizer {
namespace {

TEST(BuiltinTokenizer, RoundTripsBytesAndSpecialTokens) {
  auto dir = std::filesystem::temp_directory_path() / ("tachyon-builtin-" + std::to_string(::getpid()));
  write_builtin_tokenizer(dir);
  Tokenizer tok = Tokenizer::from_dir(dir);
  EXPECT_EQ(tok.vocab_size(), 259);
  EXPECT_EQ(tok.encode("AB", false), (std::vector<int32_t>{65, 66}));
  for (const std::string text : {"plain text", "  spaces\tand\nnewlines ", "中文 and émoji 😀", "x<|im_end|>y"}) {
    std::vector<int32_t> ids = tok.encode(text, false);
    EXPECT_EQ(tok.decode(ids), text);
  }
  std::vector<int32_t> special = tok.encode("<|im_start|>user", false);
  EXPECT_EQ(special.front(), 257);
  EXPECT_EQ(tok.eos_id(), 258);
  ChatTemplate chat(tok.chat_template(), tok.bos_token(), tok.eos_token());
  ChatTemplateInputs inputs;
  inputs.messages = nlohmann::ordered_json::array({{{"role", "user"}, {"content", "hi"}}});
  inputs.add_generation_prompt = true;
  EXPECT_EQ(chat.render(inputs), "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n");
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace tachyon::tokenizer
