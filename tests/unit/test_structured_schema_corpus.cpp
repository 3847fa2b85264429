// Every constrained output parses and validates against its schema, over a corpus of schemas
// (tests/data/structured/schema_corpus.json): seeded random token walks over the real Llama-3
// vocabulary (128K tokens) stand in for a model whose choices are random; each walk ends where the
// grammar may end, its text must parse as JSON, and Python's jsonschema (a validator nobody here
// wrote; tests/structured/validate_json_outputs.py) must find it valid. The refused schemas must
// be refused naming the keyword. A control shows the validator has teeth: the same walks through
// the grammars of schemas stripped of their "required" lists or of their bounds give outputs it
// rejects, and the union of overlapping oneOf branches (which is why the grammar refuses them)
// gives outputs that match two. Validation is skipped when python3 or its jsonschema module is missing (setup.sh
// installs python3-jsonschema); the walks and the JSON parse run regardless.
// ctest -R structured_schema_corpus
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <set>

#include "tachyon/structured/grammar_compiler.h"
#include "tachyon/structured/matcher.h"
#include "tachyon/tokenizer/tokenizer.h"

namespace tachyon::structured::schema_corpus_test {

using Json = nlohmann::ordered_json;
namespace fs = std::filesystem;

constexpr int kWalksPerSchema = 8;
constexpr int kMaxSteps = 600;

const Json& corpus() {
  static const Json all = [] {
    std::ifstream in(fs::path(TACHYON_TEST_DATA) / "structured" / "schema_corpus.json");
    return Json::parse(in);
  }();
  return all;
}

GrammarCompiler& llama3_compiler() {
  static GrammarCompiler compiler = [] {
    const auto tok = tokenizer::Tokenizer::from_dir(fs::path(TACHYON_TOKENIZERS) / "llama3");
    return GrammarCompiler(TokenVocabulary::from_tokenizer(tok, tok.vocab_size()));
  }();
  return compiler;
}

std::shared_ptr<const CompiledGrammar> compile_schema(const Json& schema) {
  return llama3_compiler().compile({ConstraintSpec::Kind::kJsonSchema, schema.dump(), {}, "json_schema"});
}

struct Walk {
  std::string text;
  std::string unfinished;  // why the walk did not end; "" when it did
};

// A model whose choices are random: for the first `free` steps any allowed token (short ones more
// often, so walks reach structure rather than only long string pieces); then, so that every walk
// ends, tokens that close ('"', ']', '}'), else ones that separate (',', ' '), else any short one.
Walk random_walk(const std::shared_ptr<const CompiledGrammar>& grammar, std::mt19937_64& rng) {
  const TokenVocabulary& vocabulary = grammar->vocabulary();
  const int free_steps = static_cast<int>(rng() % 40);
  auto only_of = [](const std::string& bytes, std::string_view set) {
    return !bytes.empty() && bytes.find_first_not_of(set) == std::string::npos;
  };
  Matcher m(grammar);
  Walk walk;
  std::vector<int32_t> allowed, short_ones, closing, separating;
  for (int step = 0; step < kMaxSteps; ++step) {
    if (m.must_end()) return walk;
    const auto mask = m.next_mask();
    if (mask->can_end && (step >= free_steps || rng() % 4 == 0)) return walk;
    allowed.clear(), short_ones.clear(), closing.clear(), separating.clear();
    for (int32_t id = 0; id < vocabulary.vocab_size(); ++id) {
      if (!mask->allows(id)) continue;
      const std::string& bytes = vocabulary.token_bytes(id);
      allowed.push_back(id);
      if (bytes.size() <= 2) short_ones.push_back(id);
      if (only_of(bytes, "\"]}")) closing.push_back(id);
      if (only_of(bytes, ", ")) separating.push_back(id);
    }
    if (allowed.empty()) {
      walk.unfinished = mask->can_end ? "" : "a dead end: no token allowed and the grammar may not end";
      return walk;
    }
    const std::vector<int32_t>* pool = &allowed;
    if (step >= free_steps && !closing.empty()) pool = &closing;
    else if (step >= free_steps && !separating.empty()) pool = &separating;
    else if (!short_ones.empty() && rng() % 4 != 0) pool = &short_ones;
    const int32_t token = (*pool)[rng() % pool->size()];
    if (!m.accept_token(token)) {
      walk.unfinished = "the matcher refused token " + std::to_string(token) + " that its mask allowed";
      return walk;
    }
    walk.text += vocabulary.token_bytes(token);
  }
  walk.unfinished = "no end after " + std::to_string(kMaxSteps) + " tokens";
  return walk;
}

// JSON's grammar (RFC 8259) puts no limit on a number's exponent, and the grammar engine none
// either (as xgrammar, the mask oracle); this JSON library refuses a number beyond a double's
// range ("1E400"), where Python's json (the validator's parser) and JavaScript's JSON.parse give
// infinity. So such a number (error 406) counts as parsed here; the validator parses the whole text anyway.
bool parses(const std::string& text) {
  try {
    [[maybe_unused]] const Json parsed = Json::parse(text);  // a cast to void does not quiet GCC here
    return true;
  } catch (const Json::out_of_range& e) {
    return e.id == 406;  // "number overflow"
  } catch (const Json::parse_error&) {
    return false;
  }
}

// The walks' outputs of one schema, as the validator's input case. Fails the test on a walk that
// does not end or does not parse.
Json walk_case(const std::string& name, const Json& schema, const Json& grammar_schema, uint64_t seed) {
  const auto grammar = compile_schema(grammar_schema);
  std::mt19937_64 rng(seed);
  Json outputs = Json::array();
  std::set<std::string> distinct;
  for (int w = 0; w < kWalksPerSchema; ++w) {
    const Walk walk = random_walk(grammar, rng);
    EXPECT_EQ(walk.unfinished, "") << name << " walk " << w << " after '" << walk.text << "'";
    if (!walk.unfinished.empty()) continue;
    EXPECT_TRUE(parses(walk.text)) << name << ": not JSON: " << walk.text;
    outputs.push_back(walk.text);
    distinct.insert(walk.text);
  }
  return {{"name", name}, {"schema", schema}, {"outputs", outputs}, {"distinct", distinct.size()}};
}

struct Report {
  bool ran = false;  // false: python3 or jsonschema missing (skip_reason says which)
  std::string skip_reason;
  nlohmann::json body;
};

// One python3 run for all the cases (each start costs a good part of a second).
Report validate(const Json& cases) {
  const fs::path script = fs::path(TACHYON_TEST_DATA) / ".." / "structured" / "validate_json_outputs.py";
  const fs::path in_path = fs::temp_directory_path() / ("tachyon-schema-corpus-" + std::to_string(::getpid()) + ".json");
  const fs::path out_path = fs::path(in_path).replace_extension(".report");
  std::ofstream(in_path) << Json{{"cases", cases}}.dump();
  const std::string command = "python3 " + script.string() + " " + in_path.string() + " > " + out_path.string() + " 2>&1";
  const int status = std::system(command.c_str());
  std::ifstream report_file(out_path);
  const std::string text((std::istreambuf_iterator<char>(report_file)), std::istreambuf_iterator<char>());
  fs::remove(in_path);
  fs::remove(out_path);
  if (!WIFEXITED(status) || WEXITSTATUS(status) == 127) return {false, "python3 is not installed", {}};
  if (WEXITSTATUS(status) == 2) {
    return {false, "python3 has no jsonschema module (scripts/setup.sh installs python3-jsonschema)", {}};
  }
  Report report{true, "", nlohmann::json::parse(text, nullptr, false)};
  EXPECT_FALSE(report.body.is_discarded()) << text.substr(0, 4000);
  return report;
}

TEST(StructuredSchemaCorpus, EveryWalkParsesAndValidates) {
  const Json& accepted = corpus()["accepted"];
  ASSERT_GE(accepted.size(), 30u);
  Json cases = Json::array();
  size_t outputs = 0;
  for (size_t i = 0; i < accepted.size(); ++i) {
    const Json& entry = accepted[i];
    const std::string name = entry["name"].get<std::string>();
    Json one;
    try {
      one = walk_case(name, entry["schema"], entry["schema"], 1000 + i);
    } catch (const StructuredError& e) {
      ADD_FAILURE() << name << " was refused: " << e.what();
      continue;
    }
    // A schema that only allows one value ("const", an empty array) may give one output; the
    // others must show the walks wander.
    EXPECT_TRUE(one["distinct"].get<size_t>() > 1 || name.starts_with("const") || name.starts_with("exactly") ||
                name.starts_with("string_exactly") || name.starts_with("object_no_properties"))
        << name << ": every walk gave " << one["outputs"];
    outputs += one["outputs"].size();
    cases.push_back(std::move(one));
  }
  const Report report = validate(cases);
  if (!report.ran) GTEST_SKIP() << report.skip_reason << "; " << outputs << " outputs parsed as JSON";
  ASSERT_TRUE(report.body.contains("checked")) << report.body.dump();
  std::printf("schema corpus: %zu schemas, %d outputs validated, %zu invalid; formats the validator cannot check: %s\n",
              cases.size(), report.body["checked"].get<int>(), report.body["failures"].size(),
              report.body["unchecked_formats"].dump().c_str());
  EXPECT_EQ(report.body["checked"].get<size_t>(), outputs);
  EXPECT_TRUE(report.body["schema_errors"].empty()) << report.body["schema_errors"].dump(2);
  EXPECT_TRUE(report.body["failures"].empty()) << report.body["failures"].dump(2);
}

TEST(StructuredSchemaCorpus, RefusedSchemasNameTheKeyword) {
  const Json& refused = corpus()["refused"];
  ASSERT_GE(refused.size(), 20u);
  for (const Json& entry : refused) {
    const std::string name = entry["name"].get<std::string>();
    const std::string keyword = entry["refuses"].get<std::string>();
    try {
      build_grammar({ConstraintSpec::Kind::kJsonSchema, entry["schema"].dump(), {}, "json_schema"});
      ADD_FAILURE() << name << " was accepted";
    } catch (const StructuredError& e) {
      EXPECT_NE(std::string(e.what()).find(keyword), std::string::npos) << name << ": '" << e.what() << "' does not name " << keyword;
    }
  }
}

// Removes every member named in `keys`, at any depth (a property *named* like a keyword, inside
// "properties", is kept).
Json without(const Json& schema, const std::set<std::string>& keys, bool in_properties = false) {
  if (schema.is_array()) {
    Json out = Json::array();
    for (const Json& item : schema) out.push_back(without(item, keys));
    return out;
  }
  if (!schema.is_object()) return schema;
  Json out = Json::object();
  for (const auto& [key, value] : schema.items()) {
    if (!in_properties && keys.count(key) != 0) continue;
    out[key] = without(value, keys, !in_properties && key == "properties");
  }
  return out;
}

// The control: a grammar that drops the "required" lists, or the bounds, gives outputs that the
// validator rejects for the schemas that have them. Were the validator blind, or the comparison
// made against the grammar's own schema, the corpus test above could not fail.
TEST(StructuredSchemaCorpus, ValidatorRejectsGrammarsWithoutRequiredOrBounds) {
  const std::map<std::string, std::set<std::string>> mutations = {
      {"required", {"required"}},
      {"bounds", {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "minItems", "maxItems", "minLength", "maxLength"}},
  };
  const std::map<std::string, std::vector<std::string>> must_fail = {
      {"required", {"person", "required_vs_optional", "tool_arguments_weather", "ref_defs", "recursive_tree"}},
      {"bounds", {"integer_bounds_inclusive", "integer_bounds_exclusive", "integer_upper_only", "array_min_max",
                  "string_bounds", "person"}},
  };
  const Json& accepted = corpus()["accepted"];
  Json cases = Json::array();
  for (const auto& [mutation, keys] : mutations) {
    for (const std::string& name : must_fail.at(mutation)) {
      const auto entry = std::find_if(accepted.begin(), accepted.end(), [&](const Json& e) { return e["name"] == name; });
      ASSERT_NE(entry, accepted.end()) << name;
      cases.push_back(walk_case(mutation + "/" + name, (*entry)["schema"], without((*entry)["schema"], keys), 7));
    }
  }
  const Report report = validate(cases);
  if (!report.ran) GTEST_SKIP() << report.skip_reason;
  std::set<std::string> failed;
  for (const auto& failure : report.body["failures"]) failed.insert(failure["name"].get<std::string>());
  for (const auto& [mutation, names] : must_fail) {
    for (const std::string& name : names) {
      EXPECT_EQ(failed.count(mutation + "/" + name), 1u) << "no output of " << name << " without its " << mutation << " was rejected";
    }
  }
}

// Every "oneOf" key renamed (a property named so, inside "properties", is kept).
Json renamed(const Json& schema, const std::string& from, const std::string& to, bool in_properties = false) {
  if (schema.is_array()) {
    Json out = Json::array();
    for (const Json& item : schema) out.push_back(renamed(item, from, to));
    return out;
  }
  if (!schema.is_object()) return schema;
  Json out = Json::object();
  for (const auto& [key, value] : schema.items()) {
    out[!in_properties && key == from ? to : key] = renamed(value, from, to, !in_properties && key == "properties");
  }
  return out;
}

// Why overlapping oneOf branches are refused: the same walks through their union (the grammar a
// oneOf would have as anyOf) give outputs that match two branches, which the validator rejects.
TEST(StructuredSchemaCorpus, ValidatorRejectsOverlappingOneOfAsAnyOf) {
  // (The other overlapping ones overlap on values these walks rarely write, e.g. strings of 3
  // characters or fewer.)
  const std::vector<std::string> must_fail = {"one_of_integer_and_number", "one_of_open_objects", "one_of_boolean_and_true"};
  const Json& refused = corpus()["refused"];
  Json cases = Json::array();
  for (const std::string& name : must_fail) {
    const auto entry = std::find_if(refused.begin(), refused.end(), [&](const Json& e) { return e["name"] == name; });
    ASSERT_NE(entry, refused.end()) << name;
    cases.push_back(walk_case("as_any_of/" + name, (*entry)["schema"], renamed((*entry)["schema"], "oneOf", "anyOf"), 11));
  }
  const Report report = validate(cases);
  if (!report.ran) GTEST_SKIP() << report.skip_reason;
  std::set<std::string> failed;
  for (const auto& failure : report.body["failures"]) failed.insert(failure["name"].get<std::string>());
  for (const std::string& name : must_fail) {
    EXPECT_EQ(failed.count("as_any_of/" + name), 1u) << "no output of " << name << " as anyOf matched two branches";
  }
}

}  // namespace tachyon::structured::schema_corpus_test
