// Tokenizer API on the real tokenizers: tokenizer_config.json fields, id lookups, special ids,
// invalid UTF-8 input, speed on long inputs, and the errors for broken or unsupported files.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <thread>
#include <map>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "tachyon/base/check.h"
#include "tachyon/tokenizer/tokenizer.h"

namespace tachyon::tokenizer {
namespace {

using nlohmann::json;
using Ids = std::vector<int32_t>;

// Each real tokenizer is loaded once per test binary.
const Tokenizer& real(const std::string& name) {
  static std::map<std::string, Tokenizer> cache;
  auto it = cache.find(name);
  if (it == cache.end()) it = cache.emplace(name, Tokenizer::from_dir(std::string(TACHYON_TOKENIZERS) + "/" + name)).first;
  return it->second;
}

// The message of the tachyon::Error that `fn` throws ("" when it does not throw).
template <typename Fn>
std::string error_of(Fn fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

json minimal_json() {
  return json{{"model", {{"type", "BPE"}, {"vocab", {{"a", 0}, {"b", 1}, {"ab", 2}}}, {"merges", {"a b"}}}}};
}

TEST(TokenizerApi, ConfigTokensAndTemplate) {
  const Tokenizer& llama3 = real("llama3");
  EXPECT_EQ(llama3.bos_token(), "<|begin_of_text|>");
  EXPECT_EQ(llama3.bos_id(), 128000);
  EXPECT_EQ(llama3.eos_id(), 128001);
  EXPECT_FALSE(llama3.chat_template().empty());
  EXPECT_EQ(llama3.vocab_size(), 128256);
  // DeepSeek-V3 stores its tokens as {"content": ...} objects.
  const Tokenizer& deepseek = real("deepseek_v3");
  EXPECT_EQ(deepseek.bos_token(), "<\xEF\xBD\x9C" "begin\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>");
  EXPECT_EQ(deepseek.bos_id(), 0);
  EXPECT_EQ(deepseek.eos_id(), 1);
  const Tokenizer& qwen = real("qwen3");
  EXPECT_EQ(qwen.bos_token(), "");
  EXPECT_EQ(qwen.bos_id(), std::nullopt);
  EXPECT_EQ(qwen.eos_token(), "<|im_end|>");
  EXPECT_EQ(qwen.vocab_size(), 151669);
  EXPECT_EQ(real("llama2").chat_template(), "");
}

TEST(TokenizerApi, ChatTemplateListTakesDefault) {
  const json config = {{"bos_token", {{"content", "a"}}},
                       {"chat_template", {{{"name", "tool_use"}, {"template", "T"}}, {{"name", "default"}, {"template", "D"}}}}};
  const Tokenizer tok = Tokenizer::from_json(minimal_json(), config);
  EXPECT_EQ(tok.chat_template(), "D");
  EXPECT_EQ(tok.bos_token(), "a");
  EXPECT_EQ(tok.bos_id(), 0);
  EXPECT_EQ(tok.encode("ab"), (Ids{2}));
}

TEST(TokenizerApi, IdLookups) {
  const Tokenizer& llama2 = real("llama2");
  EXPECT_EQ(llama2.token_to_id("<s>"), 1);
  EXPECT_EQ(llama2.id_to_token(1), "<s>");
  EXPECT_EQ(llama2.token_to_id("\xE2\x96\x81the"), 272);  // as in tokenizer.json
  EXPECT_EQ(llama2.token_to_id("no such token"), std::nullopt);
  EXPECT_TRUE(llama2.is_special(2));
  EXPECT_FALSE(llama2.is_special(272));
  EXPECT_THROW(llama2.id_to_token(32000), Error);
  EXPECT_THROW(llama2.id_to_token(-1), Error);
  const Tokenizer& qwen = real("qwen3");
  EXPECT_EQ(qwen.token_to_id("<think>"), 151667);
  EXPECT_FALSE(qwen.is_special(151667));  // an added token that is not special
  EXPECT_TRUE(qwen.is_special(151644));
}

TEST(TokenizerApi, SpecialTokensFollowAddSpecialTokens) {
  const Tokenizer& llama2 = real("llama2");
  const Ids with = llama2.encode("Hello", true);
  const Ids without = llama2.encode("Hello", false);
  ASSERT_FALSE(with.empty());
  EXPECT_EQ(with.front(), 1);
  EXPECT_EQ(Ids(with.begin() + 1, with.end()), without);
  EXPECT_EQ(llama2.decode(with, true), "Hello");
  // Added-token text is always matched, whatever add_special_tokens says.
  EXPECT_EQ(real("qwen3").encode("<|im_start|>", false), (Ids{151644}));
  // decode skips ids it does not know, as HF does.
  EXPECT_EQ(real("qwen3").decode(Ids{9707, 999999999, -5}), "Hello");
}

TEST(TokenizerApi, InvalidUtf8IsRepairedNotFatal) {
  const std::string bad = "ab\xFF\xC3(\xF0\x9F\x98 end\xE2";
  const std::string repaired = "ab\xEF\xBF\xBD\xEF\xBF\xBD(\xEF\xBF\xBD end\xEF\xBF\xBD";
  for (const char* name : {"llama3", "qwen3", "deepseek_v3", "llama2"}) {
    const Tokenizer& tok = real(name);
    Ids ids;
    ASSERT_NO_THROW(ids = tok.encode(bad)) << name;
    EXPECT_EQ(ids, tok.encode(repaired)) << name;
    EXPECT_EQ(tok.decode(tok.encode(repaired, false)), repaired) << name;
  }
}

TEST(TokenizerApi, LongInputsEncodeFast) {
  std::string prose;
  while (prose.size() < 100000) prose += "The engine batches 12345 requests; it's fast.\n\tdef f(x):  return x * 2  # \xE4\xBD\xA0\xE5\xA5\xBD ";
  std::string one_word(100000, 'a');
  for (const char* name : {"llama3", "qwen3", "deepseek_v3", "llama2"}) {
    const Tokenizer& tok = real(name);
    for (const std::string* text : {&prose, &one_word}) {
      const auto t0 = std::chrono::steady_clock::now();
      const Ids ids = tok.encode(*text);
      const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      std::printf("[speed] %s: %zu bytes -> %zu ids in %.3f s\n", name, text->size(), ids.size(), seconds);
      EXPECT_LT(seconds, 1.0) << name;
      EXPECT_EQ(tok.decode(ids, true), *text) << name;
    }
  }
}

// One Tokenizer serves many threads: concurrent encodes give the serial results.
TEST(TokenizerApi, ConcurrentEncodeMatchesSerial) {
  const Tokenizer& tok = real("qwen3");
  std::vector<std::string> texts;
  for (int i = 0; i < 200; ++i) texts.push_back("item " + std::to_string(i * 7919) + " \xE4\xBD\xA0\xE5\xA5\xBD it's <|im_end|>");
  std::vector<Ids> serial;
  for (const auto& t : texts) serial.push_back(tok.encode(t));
  std::vector<Ids> results[2];
  std::vector<std::thread> threads;
  for (int w = 0; w < 2; ++w) {
    threads.emplace_back([&, w] {
      for (const auto& t : texts) results[w].push_back(tok.encode(t));
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(results[0], serial);
  EXPECT_EQ(results[1], serial);
}

TEST(TokenizerApi, MissingFilesNameThePath) {
  EXPECT_NE(error_of([] { Tokenizer::from_dir("/nonexistent/tokenizer_dir"); }).find("/nonexistent/tokenizer_dir"),
            std::string::npos);
}

TEST(TokenizerApi, UnsupportedComponentsNameTypeAndFile) {
  const std::vector<std::pair<std::string, json>> cases = {
      {"normalizer", {{"type", "NFKD"}}},
      {"pre_tokenizer", {{"type", "Whitespace"}}},
      {"post_processor", {{"type", "RobertaProcessing"}}},
      {"decoder", {{"type", "WordPiece"}}},
  };
  for (const auto& [key, component] : cases) {
    json j = minimal_json();
    j[key] = component;
    const std::string message = error_of([&] { Tokenizer::from_json(j, json::object(), "models/x/tokenizer.json"); });
    EXPECT_NE(message.find(component["type"].get<std::string>()), std::string::npos) << message;
    EXPECT_NE(message.find("models/x/tokenizer.json"), std::string::npos) << message;
  }
  json unigram = minimal_json();
  unigram["model"]["type"] = "Unigram";
  EXPECT_NE(error_of([&] { Tokenizer::from_json(unigram, json::object(), "u.json"); }).find("Unigram"), std::string::npos);
}

TEST(TokenizerApi, BrokenFilesThrowErrors) {
  json bad_merge = minimal_json();
  bad_merge["model"]["merges"] = {"a zz"};
  EXPECT_NE(error_of([&] { Tokenizer::from_json(bad_merge, json::object(), "m.json"); }).find("m.json"), std::string::npos);
  json no_model = json::object();
  EXPECT_THROW(Tokenizer::from_json(no_model), Error);
  json bad_type = minimal_json();
  bad_type["model"]["vocab"] = "not an object";
  EXPECT_THROW(Tokenizer::from_json(bad_type), Error);
  json bad_regex = minimal_json();
  bad_regex["pre_tokenizer"] = {{"type", "Split"}, {"pattern", {{"Regex", "(["}}}, {"behavior", "Isolated"}, {"invert", false}};
  EXPECT_THROW(Tokenizer::from_json(bad_regex), Error);
}

// A directory holding `tokenizer_json` as its tokenizer.json, removed with the object.
struct TokenizerDir {
  std::filesystem::path path;
  explicit TokenizerDir(const std::string& text)
      : path(std::filesystem::temp_directory_path() / ("tachyon-tokenizer-api-" + std::to_string(::getpid()))) {
    std::filesystem::create_directories(path);
    std::ofstream(path / "tokenizer.json") << text;
  }
  ~TokenizerDir() { std::filesystem::remove_all(path); }
};

// from_dir reads tokenizer.json with the vocabulary and merges moved out of the parse as it goes
// (tokenizer.cpp): the same tokenizer as from_json on the whole file, merges as "a b" strings and
// as ["a", "b"] pairs (a pair may hold a space), unk and byte fallback options kept.
TEST(TokenizerApi, ADirectoryReadsAsItsJsonDoes) {
  json j = json{{"model",
                 {{"type", "BPE"},
                  {"vocab", {{"a", 0}, {"b", 1}, {"ab", 2}, {" ", 3}, {"a ", 4}, {"<unk>", 5}, {"abab", 6}}},
                  {"merges", json::array({"a b", json::array({"a", " "}), "ab ab"})},
                  {"unk_token", "<unk>"},
                  {"fuse_unk", true}}}};
  const TokenizerDir dir(j.dump());
  const Tokenizer streamed = Tokenizer::from_dir(dir.path), whole = Tokenizer::from_json(j);
  EXPECT_EQ(streamed.vocab_size(), whole.vocab_size());
  for (const char* text : {"ab", "a b", "abab", "a zz b", "ba a ", ""}) {
    EXPECT_EQ(streamed.encode(text), whole.encode(text)) << text;
  }
  EXPECT_EQ(streamed.encode("abab"), (Ids{6}));
  EXPECT_EQ(streamed.encode("a "), (Ids{4}));
  for (int32_t id = 0; id < whole.vocab_size(); ++id) EXPECT_EQ(streamed.id_to_token(id), whole.id_to_token(id));
  // And a real one, whole.
  const std::string dir_llama3 = std::string(TACHYON_TOKENIZERS) + "/llama3";
  std::ifstream file(dir_llama3 + "/tokenizer.json");
  const Tokenizer llama3_whole = Tokenizer::from_json(json::parse(file));
  const Tokenizer& llama3 = real("llama3");
  EXPECT_EQ(llama3.vocab_size(), llama3_whole.vocab_size());
  for (int32_t id = 0; id < llama3.vocab_size(); id += 997) EXPECT_EQ(llama3.id_to_token(id), llama3_whole.id_to_token(id));
  const std::string text = "Streaming the merges out of the parse: 12,345 tokens\n\t— ünïcödé, emoji 🙂.";
  EXPECT_EQ(llama3.encode(text), llama3_whole.encode(text));
}

TEST(TokenizerApi, BrokenDirectoriesThrowErrorsNamingTheFile) {
  auto load_error = [](const json& j) {
    const TokenizerDir dir(j.dump());
    return error_of([&] { Tokenizer::from_dir(dir.path); });
  };
  json unknown_part = minimal_json();
  unknown_part["model"]["merges"] = {"a zz"};
  json object_merge = minimal_json();
  object_merge["model"]["merges"] = json::array({json{{"left", "a"}}});
  json text_id = minimal_json();
  text_id["model"]["vocab"]["c"] = "three";
  json vocab_text = minimal_json();
  vocab_text["model"]["vocab"] = "not an object";
  json no_merges = minimal_json();
  no_merges["model"].erase("merges");
  for (const json& j : {unknown_part, object_merge, text_id, vocab_text, no_merges}) {
    const std::string message = load_error(j);
    EXPECT_NE(message.find("tokenizer.json"), std::string::npos) << j.dump() << ": " << message;
  }
  EXPECT_NE(load_error(object_merge).find("is not a pair"), std::string::npos);
  const TokenizerDir not_json("{\"model\": ");
  EXPECT_NE(error_of([&] { Tokenizer::from_dir(not_json.path); }).find("malformed tokenizer JSON"), std::string::npos);
}

}  // namespace
}  // namespace tachyon::tokenizer
