// Our token masks against an oracle nobody here wrote: xgrammar's WebAssembly build (npm
// @mlc-ai/web-xgrammar, installed by scripts/setup.sh) replays seeded random token walks over
// the real Qwen3 and Llama-3 vocabularies and must give the same bitmask before every token
// (tests/structured/xgrammar_oracle.cjs does the replay). Skipped when node or the package is
// missing. ctest -R structured_oracle
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>

#include "tachyon/structured/grammar_compiler.h"
#include "tachyon/structured/matcher.h"
#include "tachyon/tokenizer/tokenizer.h"

namespace tachyon::structured::oracle_test {

using Json = nlohmann::json;
namespace fs = std::filesystem;

struct Case {
  std::string name;
  std::string kind;  // json_schema, json_object, ebnf, regex (as the oracle script names them)
  std::string text;
};

const std::vector<Case>& cases() {
  static const std::vector<Case> all = {
      {"object", "json_schema", R"({"type":"object","properties":{"name":{"type":"string"},"age":{"type":"integer"},"ok":{"type":"boolean"}},"required":["name","age","ok"]})"},
      {"optional", "json_schema", R"({"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"number"},"c":{"type":"null"}},"required":["b"]})"},
      {"nested", "json_schema", R"({"type":"object","properties":{"user":{"type":"object","properties":{"id":{"type":"integer"},"tags":{"type":"array","items":{"type":"string"}}},"required":["id","tags"]}},"required":["user"]})"},
      {"array", "json_schema", R"({"type":"array","items":{"type":"number"}})"},
      {"bounded_array", "json_schema", R"({"type":"array","items":{"type":"boolean"},"minItems":1,"maxItems":3})"},
      {"enum", "json_schema", R"({"type":"object","properties":{"color":{"enum":["red","green","blue"]},"n":{"const":3}},"required":["color","n"]})"},
      {"any_of", "json_schema", R"({"anyOf":[{"type":"integer"},{"type":"string"},{"type":"null"}]})"},
      {"ref", "json_schema", R"({"$defs":{"item":{"type":"object","properties":{"v":{"type":"integer"}},"required":["v"]}},"type":"array","items":{"$ref":"#/$defs/item"}})"},
      {"recursive", "json_schema", R"({"type":"object","properties":{"value":{"type":"integer"},"next":{"anyOf":[{"$ref":"#"},{"type":"null"}]}},"required":["value","next"]})"},
      {"untyped", "json_schema", R"({"type":"object","properties":{"data":{}},"required":["data"]})"},
      {"string", "json_schema", R"({"type":"string"})"},
      {"int_range", "json_schema", R"({"type":"object","properties":{"a":{"type":"integer","minimum":-15,"maximum":1234},"b":{"type":"integer","exclusiveMinimum":7}},"required":["a","b"]})"},
      {"json_object", "json_object", ""},
      {"ebnf", "ebnf", "root ::= \"(\" item (\", \" item)* \")\"\nitem ::= [a-z]+ | [0-9]{1,3} | \"yes\"\n"},
      {"regex", "regex", R"([A-Z][a-z]{1,8} [0-9]{2,4}(\.[0-9]+)?)"},
      // Last, so the walks of the cases above stay the draws they were (one random stream).
      {"map", "json_schema", R"({"type":"object","additionalProperties":{"type":"integer"}})"},
      {"tuple", "json_schema", R"({"type":"array","prefixItems":[{"type":"string"},{"type":"boolean"}],"items":{"type":"integer"}})"},
  };
  return all;
}

ConstraintSpec spec_of(const Case& c) {
  if (c.kind == "json_schema") return {ConstraintSpec::Kind::kJsonSchema, c.text, {}, c.name};
  if (c.kind == "json_object") return {ConstraintSpec::Kind::kJsonObject, "", {}, c.name};
  if (c.kind == "ebnf") return {ConstraintSpec::Kind::kGrammar, c.text, {}, c.name};
  return {ConstraintSpec::Kind::kRegex, c.text, {}, c.name};
}

std::string base64(const std::vector<uint32_t>& words) {
  static const char* kDigits = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string bytes(words.size() * 4, '\0');
  for (size_t i = 0; i < words.size(); ++i) {
    for (int b = 0; b < 4; ++b) bytes[i * 4 + static_cast<size_t>(b)] = static_cast<char>((words[i] >> (8 * b)) & 0xFF);
  }
  std::string out;
  for (size_t i = 0; i < bytes.size(); i += 3) {
    uint32_t v = static_cast<uint8_t>(bytes[i]) << 16;
    if (i + 1 < bytes.size()) v |= static_cast<uint8_t>(bytes[i + 1]) << 8;
    if (i + 2 < bytes.size()) v |= static_cast<uint8_t>(bytes[i + 2]);
    out += kDigits[(v >> 18) & 63];
    out += kDigits[(v >> 12) & 63];
    out += i + 1 < bytes.size() ? kDigits[(v >> 6) & 63] : '=';
    out += i + 2 < bytes.size() ? kDigits[v & 63] : '=';
  }
  return out;
}

// Seeded walks: before each token the mask (EOS bit set where the grammar may end); the token is
// drawn among the allowed ones, short tokens more often so walks reach structure, not just long
// strings. Returns the oracle's input.
Json record_walks(const std::string& model, int walks_per_case, int max_steps) {
  const fs::path dir = fs::path(TACHYON_TOKENIZERS) / model;
  const tokenizer::Tokenizer tok = tokenizer::Tokenizer::from_dir(dir);
  const int32_t eos = *tok.eos_id();
  GrammarCompiler compiler(TokenVocabulary::from_tokenizer(tok, tok.vocab_size()));
  Json input = {{"tokenizer_json", (dir / "tokenizer.json").string()}, {"vocab_size", tok.vocab_size()}, {"eos", eos},
                {"cases", Json::array()}};
  std::mt19937_64 rng(1234);
  for (const Case& c : cases()) {
    auto grammar = compiler.compile(spec_of(c));
    for (int w = 0; w < walks_per_case; ++w) {
      Matcher m(grammar);
      Json walk = {{"name", model + "/" + c.name + "/" + std::to_string(w)}, {"kind", c.kind}, {"text", c.text},
                   {"tokens", Json::array()}, {"masks", Json::array()}};
      for (int step = 0; step < max_steps; ++step) {
        const auto mask = m.next_mask();
        std::vector<uint32_t> words = mask->words;
        if (mask->can_end) words[static_cast<size_t>(eos) >> 5] |= 1u << (eos & 31);
        walk["masks"].push_back(base64(words));
        std::vector<int32_t> all, short_ones;
        for (int32_t id = 0; id < tok.vocab_size(); ++id) {
          if (!mask->allows(id)) continue;
          all.push_back(id);
          if (compiler.vocabulary().token_bytes(id).size() <= 2) short_ones.push_back(id);
        }
        if (all.empty() || (mask->can_end && rng() % 3 == 0)) break;
        const auto& pool = (!short_ones.empty() && rng() % 4 != 0) ? short_ones : all;
        const int32_t token = pool[rng() % pool.size()];
        EXPECT_TRUE(m.accept_token(token));
        walk["tokens"].push_back(token);
      }
      input["cases"].push_back(std::move(walk));
    }
  }
  return input;
}

void compare_with_xgrammar(const std::string& model) {
  const fs::path script = fs::path(TACHYON_TEST_DATA) / ".." / "structured" / "xgrammar_oracle.cjs";
  const fs::path package = fs::path(TACHYON_TOKENIZERS) / ".." / "node_modules" / "@mlc-ai" / "web-xgrammar";
  if (std::system("node --version > /dev/null 2>&1") != 0) GTEST_SKIP() << "node is not installed";
  if (!fs::exists(package)) GTEST_SKIP() << "npm @mlc-ai/web-xgrammar is not installed (scripts/setup.sh installs it)";
  const Json input = record_walks(model, 2, 24);
  const fs::path in_path = fs::temp_directory_path() / ("tachyon-oracle-" + model + "-" + std::to_string(::getpid()) + ".json");
  const fs::path out_path = fs::path(in_path).replace_extension(".report");
  std::ofstream(in_path) << input.dump();
  const std::string command = "node " + script.string() + " " + in_path.string() + " > " + out_path.string() + " 2>&1";
  const int status = std::system(command.c_str());
  std::ifstream report_file(out_path);
  const std::string report((std::istreambuf_iterator<char>(report_file)), std::istreambuf_iterator<char>());
  fs::remove(in_path);
  if (status == 0) fs::remove(out_path);  // else kept for reading: its path is in the failure
  const Json parsed = Json::parse(report, nullptr, false);
  ASSERT_FALSE(parsed.is_discarded()) << report.substr(0, 4000);
  std::printf("xgrammar oracle, %s: %d of %d masks equal over %lld token decisions (%lld disagree; %lld invalid-UTF-8 "
              "tokens only xgrammar allows)\n", model.c_str(), parsed["masks_equal"].get<int>(),
              parsed["masks_compared"].get<int>(), parsed["tokens_compared"].get<long long>(),
              parsed["tokens_disagreeing"].get<long long>(), parsed["invalid_utf8_only_xgrammar_allows"].get<long long>());
  EXPECT_EQ(status, 0) << "the whole report: " << out_path << "\n" << report.substr(0, 3000);
  EXPECT_GT(parsed["masks_compared"].get<int>(), 100);
}

TEST(StructuredOracle, Qwen3MasksEqualXgrammars) { compare_with_xgrammar("qwen3"); }
TEST(StructuredOracle, Llama3MasksEqualXgrammars) { compare_with_xgrammar("llama3"); }

}  // namespace tachyon::structured::oracle_test
