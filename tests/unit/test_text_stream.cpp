// TextStream: stop strings on streamed text with a real tokenizer, including stop strings that
// span several tokens and deltas, multi-byte stop strings, text held back then released, and
// min_tokens (no stop string may end within the first min_tokens tokens' text).
#include "tachyon/app/text_stream.h"

#include <gtest/gtest.h>

#include <random>

namespace tachyon::engine {
using namespace tachyon::app;
namespace {

const tokenizer::Tokenizer& qwen3() {
  static const tokenizer::Tokenizer tok =
      tokenizer::Tokenizer::from_dir(std::filesystem::path(TACHYON_TOKENIZERS) / "qwen3");
  return tok;
}

// Streams `text`'s tokens in chunks of `chunk` ids; returns everything the stream emitted.
std::string stream(const std::string& text, std::vector<std::string> stops, bool include, size_t chunk,
                   TextStream** out = nullptr) {
  static std::unique_ptr<TextStream> keep;
  std::vector<int32_t> ids = qwen3().encode(text, false);
  keep = std::make_unique<TextStream>(qwen3(), std::move(stops), include);
  std::string emitted;
  for (size_t i = 0; i < ids.size(); i += chunk) {
    size_t n = std::min(chunk, ids.size() - i);
    emitted += keep->push(std::span<const int32_t>(ids.data() + i, n));
  }
  emitted += keep->finish();
  if (out) *out = keep.get();
  return emitted;
}

// Streams `ids` in chunks of `chunk` through a stream with `min_tokens`; returns what it emitted.
std::string stream_ids(const std::vector<int32_t>& ids, std::vector<std::string> stops, int32_t min_tokens,
                       size_t chunk) {
  TextStream s(qwen3(), std::move(stops), /*include_stop_str=*/false, /*skip_special_tokens=*/true, min_tokens);
  std::string emitted;
  for (size_t i = 0; i < ids.size() && !s.stopped(); i += chunk) {
    emitted += s.push(std::span<const int32_t>(ids.data() + i, std::min(chunk, ids.size() - i)));
  }
  return emitted + s.finish();
}

// Text of the first `count` tokens (ASCII texts: equal to what the stream decodes).
std::string prefix_text(const std::vector<int32_t>& ids, size_t count) {
  return qwen3().decode(std::span<const int32_t>(ids.data(), count));
}

TEST(StopPrefixOverlap, LongestSuffixThatStartsAStopString) {
  EXPECT_EQ(stop_prefix_overlap("hello wor", {"world"}), 3u);
  EXPECT_EQ(stop_prefix_overlap("hello", {"world"}), 0u);
  EXPECT_EQ(stop_prefix_overlap("abc<", {"<|end|>", "c<|"}), 2u);
  EXPECT_EQ(stop_prefix_overlap("world", {"world"}), 0u);  // a whole match is not an overlap
}

TEST(TextStream, NoStopStringsGivesTheDecodedText) {
  const std::string text = "Streaming text, 数字 123 and emoji 😀 all arrive intact.";
  TextStream* s = nullptr;
  EXPECT_EQ(stream(text, {}, false, 1, &s), text);
  EXPECT_FALSE(s->stopped());
}

TEST(TextStream, StopStringAcrossTokensIsTrimmed) {
  const std::string text = "The answer is 42. END OF ANSWER and more text after it";
  for (size_t chunk : {1, 2, 3, 100}) {
    TextStream* s = nullptr;
    EXPECT_EQ(stream(text, {"END OF ANSWER"}, false, chunk, &s), "The answer is 42. ") << chunk;
    EXPECT_TRUE(s->stopped());
    EXPECT_EQ(s->stop_string(), "END OF ANSWER");
  }
  EXPECT_EQ(stream(text, {"END OF ANSWER"}, true, 1), "The answer is 42. END OF ANSWER");
}

TEST(TextStream, EarliestOfSeveralStopStringsWins) {
  TextStream* s = nullptr;
  EXPECT_EQ(stream("alpha beta gamma delta", {"delta", "beta"}, false, 100, &s), "alpha ");
  EXPECT_EQ(s->stop_string(), "beta");
}

TEST(TextStream, HeldBackPrefixIsReleasedWhenItDoesNotComplete) {
  // "wor" could start "world" until the text ends without it.
  EXPECT_EQ(stream("hello wor", {"world"}, false, 1), "hello wor");
  EXPECT_EQ(stream("a word, a worm", {"world"}, false, 1), "a word, a worm");
}

TEST(TextStream, MultiByteStopString) {
  EXPECT_EQ(stream("前面的文字。结束了。后面", {"结束"}, false, 1), "前面的文字。");
}

TEST(TextStream, RandomStopStringsMatchTheDecodedPrefix) {
  std::mt19937 rng(8);
  const std::vector<std::string> texts = {
      "def f(x):\n    return x * 2  # double\n\nprint(f(21))\n",
      "Mixed 中文 and English, with émojis 🎉🎉 and numbers 3.14159.",
      "    indented\n\tand tabbed\r\n lines   with  spaces   ",
  };
  int checked = 0;
  for (int trial = 0; trial < 300; ++trial) {
    const std::string& text = texts[rng() % texts.size()];
    std::string decoded = qwen3().decode(qwen3().encode(text, false));
    size_t at = rng() % decoded.size();
    size_t len = 1 + rng() % 6;
    std::string stop = decoded.substr(at, len);
    // Only stop strings made of whole characters (a client cannot send half a character).
    if (stop.empty() || (static_cast<unsigned char>(stop[0]) & 0xC0) == 0x80) continue;
    if (at + len < decoded.size() && (static_cast<unsigned char>(decoded[at + len]) & 0xC0) == 0x80) continue;
    const std::string expected = decoded.substr(0, decoded.find(stop));
    const size_t chunk = 1 + rng() % 4;
    ASSERT_EQ(stream(text, {stop}, false, chunk), expected) << "stop '" << stop << "' chunk " << chunk;
    ++checked;
  }
  EXPECT_GT(checked, 100);
}

TEST(TextStream, MinTokensIgnoresStopStringsInTheFirstTokens) {
  const std::string text = "one STOP two STOP three";
  const std::vector<int32_t> ids = qwen3().encode(text, false);
  size_t past_first_stop = 0;  // tokens up to and including the first "STOP"
  while (prefix_text(ids, past_first_stop).find("STOP") == std::string::npos) ++past_first_stop;
  for (size_t chunk : {1, 2, 100}) {
    EXPECT_EQ(stream_ids(ids, {"STOP"}, 0, chunk), "one ") << chunk;
    EXPECT_EQ(stream_ids(ids, {"STOP"}, static_cast<int32_t>(past_first_stop), chunk), "one STOP two ") << chunk;
    EXPECT_EQ(stream_ids(ids, {"STOP"}, static_cast<int32_t>(ids.size()), chunk), text) << chunk;
  }
}

TEST(TextStream, StopStringStraddlingTheMinTokensBoundaryCounts) {
  // vLLM's rule: a stop string counts when it ends in the text of token min_tokens + 1 or later,
  // wherever it starts; one that ends within the first min_tokens tokens' text does not.
  const std::vector<int32_t> ids = qwen3().encode("abc def ghi", false);
  ASSERT_EQ(prefix_text(ids, 2), "abc def");  // the first two tokens
  for (size_t chunk : {1, 3}) {
    EXPECT_EQ(stream_ids(ids, {"f g"}, 2, chunk), "abc de") << chunk;      // ends in token 3
    EXPECT_EQ(stream_ids(ids, {"def"}, 2, chunk), "abc def ghi") << chunk;  // ends with token 2
    EXPECT_EQ(stream_ids(ids, {"def"}, 1, chunk), "abc ") << chunk;         // ends in token 2
  }
}

TEST(TextStream, RandomStopStringsWithMinTokensMatchTheReference) {
  std::mt19937 rng(21);
  const std::vector<std::string> texts = {
      "def f(x):\n    return x * 2  # double\n\nprint(f(21))\n",
      "the cat sat on the mat, the cat sat on the hat; the end",
      "    indented\n\tand tabbed\r\n lines   with  spaces   ",
  };
  for (int trial = 0; trial < 300; ++trial) {
    const std::string& text = texts[rng() % texts.size()];
    const std::vector<int32_t> ids = qwen3().encode(text, false);
    const std::string decoded = prefix_text(ids, ids.size());
    const std::string stop = decoded.substr(rng() % decoded.size(), 1 + rng() % 5);
    const size_t min_tokens = rng() % (ids.size() + 1);
    // The first match that ends past the first min_tokens tokens' text.
    const size_t boundary = prefix_text(ids, min_tokens).size();
    size_t at = decoded.find(stop, boundary + 1 > stop.size() ? boundary + 1 - stop.size() : 0);
    const std::string expected = decoded.substr(0, at);
    const size_t chunk = 1 + rng() % 4;
    ASSERT_EQ(stream_ids(ids, {stop}, static_cast<int32_t>(min_tokens), chunk), expected)
        << "stop '" << stop << "' min_tokens " << min_tokens << " chunk " << chunk;
  }
}

}  // namespace
}  // namespace tachyon::engine
