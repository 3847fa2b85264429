// IncrementalDetokenizer: for every corpus string and each real tokenizer, pushing the expected
// ids one at a time gives chunks that are each valid UTF-8 and concatenate (with flush) to
// Tokenizer::decode of all the ids, with and without skip_special_tokens.
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "tachyon/base/file_util.h"
#include "tachyon/tokenizer/incremental_detokenizer.h"
#include "tachyon/tokenizer/tokenizer.h"
#include "tachyon/tokenizer/unicode.h"

namespace tachyon::tokenizer {
namespace {

struct Streamed {
  std::string text;
  bool chunks_valid = true;
};

Streamed stream(const Tokenizer& tok, const std::vector<int32_t>& ids, bool skip_special) {
  IncrementalDetokenizer detok(tok, skip_special);
  Streamed out;
  for (const int32_t id : ids) {
    const std::string chunk = detok.push(id);
    out.chunks_valid = out.chunks_valid && is_valid_utf8(chunk);
    out.text += chunk;
  }
  const std::string rest = detok.flush();
  out.chunks_valid = out.chunks_valid && is_valid_utf8(rest);
  out.text += rest;
  return out;
}

void check_streaming(const std::string& name) {
  const Tokenizer tok = Tokenizer::from_dir(std::string(TACHYON_TOKENIZERS) + "/" + name);
  const nlohmann::json expected = read_json_file(std::string(TACHYON_TEST_DATA) + "/tokenizer/expected_" + name + ".json");
  std::size_t same = 0;
  std::size_t same_skip = 0;
  int shown = 0;
  for (std::size_t i = 0; i < expected.size(); ++i) {
    const auto ids = expected[i].at("ids").get<std::vector<int32_t>>();
    for (const bool skip : {false, true}) {
      const Streamed s = stream(tok, ids, skip);
      const std::string want = tok.decode(ids, skip);
      const bool ok = s.chunks_valid && s.text == want;
      (skip ? same_skip : same) += ok;
      if (!ok && shown++ < 5) {
        ADD_FAILURE() << name << " corpus[" << i << "] skip_special=" << skip << " chunks valid=" << s.chunks_valid
                      << "\n  got  " << nlohmann::json(s.text).dump().substr(0, 300)
                      << "\n  want " << nlohmann::json(want).dump().substr(0, 300);
      }
    }
  }
  std::printf("[streaming] %s: identical to decode %zu / %zu, with skip_special_tokens %zu / %zu\n", name.c_str(), same,
              expected.size(), same_skip, expected.size());
  EXPECT_EQ(same, expected.size());
  EXPECT_EQ(same_skip, expected.size());
}

TEST(IncrementalDetokenizer, Llama3) { check_streaming("llama3"); }
TEST(IncrementalDetokenizer, Qwen3) { check_streaming("qwen3"); }
TEST(IncrementalDetokenizer, DeepseekV3) { check_streaming("deepseek_v3"); }
TEST(IncrementalDetokenizer, Llama2) { check_streaming("llama2"); }

// A character split over byte-level tokens is held back until it is complete.
TEST(IncrementalDetokenizer, HoldsBackIncompleteCharacter) {
  const Tokenizer tok = Tokenizer::from_dir(std::string(TACHYON_TOKENIZERS) + "/qwen3");
  // "Ā" is U+0100 = C4 80; byte-level tokens "Ä" (C4) and "Ģ" (80) each carry one byte.
  const auto first = tok.token_to_id("\xC3\x84");
  const auto second = tok.token_to_id("\xC4\xA2");
  ASSERT_TRUE(first && second);
  IncrementalDetokenizer detok(tok);
  EXPECT_EQ(detok.push(*first), "");
  EXPECT_EQ(detok.push(*second), "\xC4\x80");
  EXPECT_EQ(detok.flush(), "");
}

// A stream that ends inside a character flushes it as U+FFFD, as decode() does.
TEST(IncrementalDetokenizer, FlushesIncompleteTailLikeDecode) {
  const Tokenizer tok = Tokenizer::from_dir(std::string(TACHYON_TOKENIZERS) + "/llama3");
  const auto lead = tok.token_to_id("\xC3\x84");
  ASSERT_TRUE(lead);
  IncrementalDetokenizer detok(tok);
  const auto hello = tok.encode("hello", false);
  std::string out;
  for (int32_t id : hello) out += detok.push(id);
  EXPECT_EQ(detok.push(*lead), "");
  out += detok.flush();
  std::vector<int32_t> all = hello;
  all.push_back(*lead);
  EXPECT_EQ(out, tok.decode(all));
  EXPECT_EQ(out, "hello\xEF\xBF\xBD");
}

}  // namespace
}  // namespace tachyon::tokenizer
