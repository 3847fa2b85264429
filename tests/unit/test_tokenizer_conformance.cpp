// Conformance with HF `tokenizers`: every corpus string of tests/data/tokenizer/corpus.json must
// encode to the ids, and decode to the text, that tools/tokenizer_reference.py recorded on the GPU
// machine for the real Llama-3, Qwen3, DeepSeek-V3 and Llama-2 tokenizers.
#include <chrono>
#include <cstdio>
#include <map>
#include <string>

#include <gtest/gtest.h>

#include "tachyon/base/file_util.h"
#include "tachyon/tokenizer/tokenizer.h"

namespace tachyon::tokenizer {
namespace {

const nlohmann::json& corpus() {
  static const nlohmann::json c = read_json_file(std::string(TACHYON_TEST_DATA) + "/tokenizer/corpus.json");
  return c;
}

void check_conformance(const std::string& name) {
  const auto t0 = std::chrono::steady_clock::now();
  const Tokenizer tok = Tokenizer::from_dir(std::string(TACHYON_TOKENIZERS) + "/" + name);
  const auto t1 = std::chrono::steady_clock::now();
  const nlohmann::json expected = read_json_file(std::string(TACHYON_TEST_DATA) + "/tokenizer/expected_" + name + ".json");
  const nlohmann::json& texts = corpus();
  ASSERT_EQ(expected.size(), texts.size());
  std::size_t ids_same = 0;
  std::size_t decode_same = 0;
  int shown = 0;
  double encode_s = 0;
  for (std::size_t i = 0; i < texts.size(); ++i) {
    const std::string text = texts[i].get<std::string>();
    const auto want_ids = expected[i].at("ids").get<std::vector<int32_t>>();
    const auto want_text = expected[i].at("decoded").get<std::string>();
    const auto e0 = std::chrono::steady_clock::now();
    const std::vector<int32_t> ids = tok.encode(text, true);
    encode_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - e0).count();
    ids_same += ids == want_ids;
    const std::string decoded = tok.decode(want_ids, false);
    decode_same += decoded == want_text;
    if ((ids != want_ids || decoded != want_text) && shown++ < 5) {
      ADD_FAILURE() << name << " corpus[" << i << "] " << nlohmann::json(text).dump().substr(0, 300)
                    << "\n  ids " << (ids == want_ids ? "match" : "differ: got " + nlohmann::json(ids).dump().substr(0, 300) +
                                                                      "\n  want " + nlohmann::json(want_ids).dump().substr(0, 300))
                    << "\n  decode " << (decoded == want_text ? "matches" : "differs: got " + nlohmann::json(decoded).dump().substr(0, 300));
    }
  }
  std::printf("[conformance] %s: ids identical %zu / %zu, decode identical %zu / %zu (load %.2f s, encode all %.2f s)\n",
              name.c_str(), ids_same, texts.size(), decode_same, texts.size(),
              std::chrono::duration<double>(t1 - t0).count(), encode_s);
  EXPECT_EQ(ids_same, texts.size());
  EXPECT_EQ(decode_same, texts.size());
}

TEST(TokenizerConformance, Llama3) { check_conformance("llama3"); }
TEST(TokenizerConformance, Qwen3) { check_conformance("qwen3"); }
TEST(TokenizerConformance, DeepseekV3) { check_conformance("deepseek_v3"); }
TEST(TokenizerConformance, Llama2) { check_conformance("llama2"); }

}  // namespace
}  // namespace tachyon::tokenizer
