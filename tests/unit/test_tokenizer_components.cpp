// Unit tests of the tokenizer's pieces on small hand-made inputs: UTF-8 repair, the byte-level
// table, the regex wrapper, BPE merging (ranks, ties, ignore_merges, unknowns, byte fallback),
// added-token flags and the decoders.
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "tachyon/base/check.h"
#include "tachyon/tokenizer/byte_level.h"
#include "tachyon/tokenizer/decoder.h"
#include "tachyon/tokenizer/regex.h"
#include "tachyon/tokenizer/tokenizer.h"
#include "tachyon/tokenizer/unicode.h"

namespace tachyon::tokenizer {
namespace {

using nlohmann::json;
using Ids = std::vector<int32_t>;
const std::string kFffd = "\xEF\xBF\xBD";

// A tokenizer.json with a tiny BPE model and no other components.
json tiny_bpe(json vocab, json merges, json extra_model = json::object()) {
  json model = {{"type", "BPE"}, {"vocab", std::move(vocab)}, {"merges", std::move(merges)}};
  model.update(extra_model);
  return json{{"model", model}, {"added_tokens", json::array()}};
}

TEST(TokenizerUnicode, LossyRepairFollowsMaximalSubparts) {
  EXPECT_EQ(utf8_lossy("abc"), "abc");
  EXPECT_EQ(utf8_lossy("\xE0\x80"), kFffd + kFffd);          // E0 needs A0..BF next
  EXPECT_EQ(utf8_lossy("\xF0\x9F\x98"), kFffd);              // truncated emoji: one subpart
  EXPECT_EQ(utf8_lossy("\xED\xA0\x80"), kFffd + kFffd + kFffd);  // surrogates are invalid
  EXPECT_EQ(utf8_lossy("a\xFF" "b"), "a" + kFffd + "b");
  EXPECT_TRUE(is_valid_utf8("h\xC3\xA9llo \xF0\x9F\x98\x80"));
  EXPECT_FALSE(is_valid_utf8("\xC0\xAF"));  // overlong
}

TEST(TokenizerUnicode, NfcComposes) {
  EXPECT_EQ(nfc("e\xCC\x81"), "\xC3\xA9");
  EXPECT_EQ(nfc("plain"), "plain");
}

TEST(TokenizerByteLevel, MapsEveryByteAndBack) {
  EXPECT_EQ(byte_level_encode(" "), "\xC4\xA0");   // Ġ
  EXPECT_EQ(byte_level_encode("\n"), "\xC4\x8A");  // Ċ
  EXPECT_EQ(byte_level_encode("A~"), "A~");
  std::string all;
  for (int b = 0; b < 256; ++b) all.push_back(static_cast<char>(b));
  const std::string mapped = byte_level_encode(all);
  EXPECT_TRUE(is_valid_utf8(mapped));
  EXPECT_EQ(byte_level_decode(mapped), all);
  EXPECT_EQ(byte_level_decode("\xE2\x96\x81"), std::nullopt);  // "▁" is not in the table
}

TEST(TokenizerRegex, WhitespaceMatchesOnigurumaIncludingNel) {
  EXPECT_EQ(onig_compatible_pattern(R"(\s+(?!\S))"), R"([\s\x{85}]+(?![^\s\x{85}]))");
  EXPECT_EQ(onig_compatible_pattern(R"([^\s\p{L}])"), R"([^\s\x{85}\p{L}])");
  const Regex ws(R"(\s+)");
  const auto m = ws.find_all("a\xC2\x85 b");
  ASSERT_EQ(m.size(), 1u);
  EXPECT_EQ(m[0], std::make_pair(std::size_t{1}, std::size_t{4}));
  EXPECT_THROW(Regex("(unclosed"), Error);
  const Regex literal(Regex::escape("a.b"));
  EXPECT_EQ(literal.find_all("axb a.b").size(), 1u);
}

TEST(TokenizerBpe, MergesByRank) {
  const json vocab = {{"a", 0}, {"b", 1}, {"c", 2}, {"ab", 3}, {"bc", 4}, {"abc", 5}};
  // "b c" outranks "a b", and no merge joins a + bc.
  EXPECT_EQ(Tokenizer::from_json(tiny_bpe(vocab, {"b c", "a b", "ab c"})).encode("abc"), (Ids{0, 4}));
  EXPECT_EQ(Tokenizer::from_json(tiny_bpe(vocab, {"a b", "b c", "ab c"})).encode("abc"), (Ids{5}));
  // The ["a", "b"] merge format means the same.
  EXPECT_EQ(Tokenizer::from_json(tiny_bpe(vocab, json::array({{"a", "b"}, {"ab", "c"}}))).encode("abc"), (Ids{5}));
}

TEST(TokenizerBpe, EqualRanksMergeLeftmostFirst) {
  const json vocab = {{"a", 0}, {"aa", 1}};
  const Tokenizer tok = Tokenizer::from_json(tiny_bpe(vocab, {"a a"}));
  EXPECT_EQ(tok.encode("aaa"), (Ids{1, 0}));
  EXPECT_EQ(tok.encode("aaaa"), (Ids{1, 1}));
}

TEST(TokenizerBpe, IgnoreMergesTakesWholePieceFromVocab) {
  const json vocab = {{"c", 0}, {"a", 1}, {"ca", 2}};
  EXPECT_EQ(Tokenizer::from_json(tiny_bpe(vocab, json::array(), {{"ignore_merges", true}})).encode("ca"), (Ids{2}));
  EXPECT_EQ(Tokenizer::from_json(tiny_bpe(vocab, json::array(), {{"ignore_merges", false}})).encode("ca"), (Ids{0, 1}));
}

TEST(TokenizerBpe, UnknownCharactersUseUnkAndFuse) {
  const json vocab = {{"<unk>", 0}, {"a", 1}};
  const Tokenizer plain = Tokenizer::from_json(tiny_bpe(vocab, json::array(), {{"unk_token", "<unk>"}}));
  EXPECT_EQ(plain.encode("axya"), (Ids{1, 0, 0, 1}));
  const Tokenizer fused = Tokenizer::from_json(tiny_bpe(vocab, json::array(), {{"unk_token", "<unk>"}, {"fuse_unk", true}}));
  EXPECT_EQ(fused.encode("axya"), (Ids{1, 0, 1}));
  // Without an unk token an unknown character is dropped, as HF does.
  EXPECT_EQ(Tokenizer::from_json(tiny_bpe(vocab, json::array())).encode("axa"), (Ids{1, 1}));
}

TEST(TokenizerBpe, ByteFallbackSpellsUnknownCharactersAsBytes) {
  json j = tiny_bpe({{"<unk>", 0}, {"<0xC3>", 1}, {"<0xA9>", 2}, {"a", 3}}, json::array(),
                    {{"unk_token", "<unk>"}, {"byte_fallback", true}, {"fuse_unk", true}});
  j["decoder"] = {{"type", "Sequence"}, {"decoders", {{{"type", "ByteFallback"}}, {{"type", "Fuse"}}}}};
  const Tokenizer tok = Tokenizer::from_json(j);
  const Ids ids = tok.encode("a\xC3\xA9" "a");
  EXPECT_EQ(ids, (Ids{3, 1, 2, 3}));
  EXPECT_EQ(tok.decode(ids), "a\xC3\xA9" "a");
  EXPECT_EQ(tok.encode("\xE2\x82\xAC"), (Ids{0}));  // "€": no byte tokens for it -> unk
  EXPECT_EQ(tok.decode(Ids{1, 3}), kFffd + "a");     // a lone lead byte decodes to one U+FFFD
}

// Added-token flags on a model that knows single characters only.
class TokenizerAddedTokens : public ::testing::Test {
 protected:
  static json added(int id, const std::string& content, json flags = json::object()) {
    json t = {{"id", id}, {"content", content}, {"special", false}, {"single_word", false},
              {"lstrip", false}, {"rstrip", false}, {"normalized", false}};
    t.update(flags);
    return t;
  }
  Tokenizer make() const {
    json j = tiny_bpe({{"a", 0}, {"b", 1}, {"c", 2}, {" ", 3}, {"x", 4}}, json::array());
    j["normalizer"] = {{"type", "Replace"}, {"pattern", {{"String", "A"}}}, {"content", "a"}};
    j["added_tokens"] = {added(10, "cab", {{"single_word", true}}), added(11, "<L>", {{"lstrip", true}}),
                         added(12, "<R>", {{"rstrip", true}}), added(13, "Aab", {{"normalized", true}}),
                         added(14, "Ab"), added(15, "<a>"), added(16, "<a><b>"),
                         added(17, "<s>", {{"special", true}})};
    return Tokenizer::from_json(j);
  }
};

TEST_F(TokenizerAddedTokens, SingleWordMatchesOnlyWholeWords) {
  const Tokenizer tok = make();
  EXPECT_EQ(tok.encode("cab"), (Ids{10}));
  EXPECT_EQ(tok.encode(" cab "), (Ids{3, 10, 3}));
  EXPECT_EQ(tok.encode("acab"), (Ids{0, 2, 0, 1}));
}

TEST_F(TokenizerAddedTokens, LstripAndRstripSwallowWhitespace) {
  const Tokenizer tok = make();
  EXPECT_EQ(tok.encode("a  <L>b"), (Ids{0, 11, 1}));
  EXPECT_EQ(tok.encode("a<R> \t b"), (Ids{0, 12, 1}));
  EXPECT_EQ(tok.encode("a <R> b"), (Ids{0, 3, 12, 1}));
}

TEST_F(TokenizerAddedTokens, NormalizedTokensMatchAfterNormalization) {
  const Tokenizer tok = make();
  EXPECT_EQ(tok.encode("xAab"), (Ids{4, 13}));  // "xAab" -> "xaab" holds the normalized "aab"
  EXPECT_EQ(tok.encode("xaab"), (Ids{4, 13}));
  EXPECT_EQ(tok.encode("Ab"), (Ids{14}));        // raw token matched before normalization
  EXPECT_EQ(tok.encode("ab"), (Ids{0, 1}));
}

TEST_F(TokenizerAddedTokens, LeftmostLongestAndSpecialSkipping) {
  const Tokenizer tok = make();
  EXPECT_EQ(tok.encode("<a><b>"), (Ids{16}));
  EXPECT_EQ(tok.encode("<a>b"), (Ids{15, 1}));
  EXPECT_TRUE(tok.is_special(17));
  EXPECT_FALSE(tok.is_special(15));
  EXPECT_EQ(tok.decode(Ids{17, 0, 15}, false), "<s> a <a>");  // no decoder: joined with spaces
  EXPECT_EQ(tok.decode(Ids{17, 0, 15}, true), "a <a>");
}

TEST(TokenizerDecoder, StripAndReplaceAsLlama2) {
  const auto decoder = make_decoder(json::parse(R"({"type": "Sequence", "decoders": [
      {"type": "Replace", "pattern": {"String": "\u2581"}, "content": " "}, {"type": "ByteFallback"},
      {"type": "Fuse"}, {"type": "Strip", "content": " ", "start": 1, "stop": 0}]})"),
                                    "test");
  EXPECT_EQ(decoder->decode({"\xE2\x96\x81Hello", "\xE2\x96\x81world", "<0x21>"}), "Hello world!");
  EXPECT_EQ(decoder->decode({"\xE2\x96\x81\xE2\x96\x81x"}), " x");
  EXPECT_EQ(decoder->decode({"<0xE4>", "<0xB8>"}), kFffd + kFffd);  // invalid run: one U+FFFD per byte
}

TEST(TokenizerDecoder, ByteLevelKeepsUnmappedTokensAsText) {
  const auto decoder = make_decoder(json{{"type", "ByteLevel"}}, "test");
  EXPECT_EQ(decoder->decode({"Hello", "\xC4\xA0world"}), "Hello world");
  EXPECT_EQ(decoder->decode({"<\xEF\xBD\x9CUser\xEF\xBD\x9C>"}), "<\xEF\xBD\x9CUser\xEF\xBD\x9C>");
  EXPECT_EQ(decoder->decode({"\xC3\xA5"}), kFffd);  // byte E5 alone is an incomplete character
}

}  // namespace
}  // namespace tachyon::tokenizer
