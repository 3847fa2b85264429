// Interpreter: scoping, loops and loop controls, namespace(), macros, undefined handling,
// runtime errors with line numbers, and robustness: a mangled template or hostile input must
// end in tachyon::Error, never a crash. Broad jinja2 parity lives in test_jinja_conformance.
#include "tachyon/tokenizer/jinja/interpreter.h"

#include <gtest/gtest.h>

#include <random>

#include "tachyon/base/check.h"
#include "tachyon/base/file_util.h"
#include "tachyon/tokenizer/jinja/template.h"

namespace tachyon::tokenizer::jinja {
namespace {

std::string render(const std::string& source, const char* vars_json = "{}") {
  ValueDict vars;
  const auto json = nlohmann::ordered_json::parse(vars_json);  // outlives the items() view
  for (const auto& [k, v] : json.items()) vars.set(k, Value::from_json(v));
  return Template(source).render(vars);
}

std::string error_of(const std::string& source, const char* vars_json = "{}") {
  try {
    render(source, vars_json);
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(JinjaInterpreter, LoopScopesAreFreshPerIteration) {
  EXPECT_EQ(render("{% set x = 'o' %}{% for i in [1, 2] %}{{ x }}{% set x = i %}{{ x }}{% endfor %}{{ x }}"), "o1o2o");
  EXPECT_EQ(render("{% if true %}{% set y = 1 %}{% endif %}{{ y }}"), "1");
}

TEST(JinjaInterpreter, NamespaceCarriesStateOutOfLoops) {
  EXPECT_EQ(render("{% set ns = namespace(n=0) %}{% for i in range(4) %}{% set ns.n = ns.n + i %}{% endfor %}{{ ns.n }}"),
            "6");
}

TEST(JinjaInterpreter, LoopControlsAndLoopObject) {
  EXPECT_EQ(render("{% for i in range(9) %}{% if i is odd %}{% continue %}{% endif %}{% if i > 5 %}{% break %}{% endif %}{{ i }}{% endfor %}"),
            "024");
  EXPECT_EQ(render("{% for m in ['a', 'b', 'c'] %}{{ loop.index0 }}{{ m }}{% if not loop.last %},{% endif %}{% endfor %}"),
            "0a,1b,2c");
  EXPECT_EQ(render("{% for x in [] %}x{% else %}none{% endfor %}"), "none");
}

TEST(JinjaInterpreter, MacrosWithDefaultsAndKeywords) {
  EXPECT_EQ(render("{% macro f(a, b='B') %}{{ a }}{{ b }}{% endmacro %}{{ f(1) }}{{ f(1, 2) }}{{ f(b=3, a=4) }}"), "1B1243");
}

TEST(JinjaInterpreter, UndefinedIsFalsyEmptyAndIterableButNotUsable) {
  EXPECT_EQ(render("[{{ missing }}][{{ missing | length }}][{% for x in missing %}x{% endfor %}][{{ missing is defined }}]"),
            "[][0][][False]");
  EXPECT_EQ(render("{{ m.tool_calls is defined }}{% if m.tool_calls %}x{% endif %}", R"({"m": {"role": "user"}})"),
            "False");
  EXPECT_NE(error_of("{{ m.tool_calls.function }}", R"({"m": {}})").find("'dict object' has no attribute 'tool_calls'"),
            std::string::npos);
  EXPECT_NE(error_of("{{ missing + 'a' }}").find("'missing' is undefined"), std::string::npos);
}

TEST(JinjaInterpreter, GenerationTagRendersItsBody) {
  // transformers' {% generation %} marks assistant tokens for masks; the text is unchanged.
  EXPECT_EQ(render("a{% generation %}b{{ 1 }}{% endgeneration %}c"), "ab1c");
}

TEST(JinjaInterpreter, RuntimeErrorsNameLineAndColumn) {
  std::string e = error_of("line1\n{% for m in messages %}\n  {{ m.content + 1 }}\n{% endfor %}",
                           R"({"messages": [{"content": "x"}]})");
  EXPECT_NE(e.find("line 3, column"), std::string::npos) << e;
  EXPECT_NE(e.find("unsupported operand type(s) for +: 'str' and 'int'"), std::string::npos) << e;
  e = error_of("\n\n{{ raise_exception('Conversation roles must alternate') }}");
  EXPECT_NE(e.find("line 3"), std::string::npos) << e;
  EXPECT_NE(e.find("Conversation roles must alternate"), std::string::npos) << e;
  e = error_of("{% set d = {} %}{% set d.x = 1 %}");
  EXPECT_NE(e.find("non-namespace"), std::string::npos) << e;
}

TEST(JinjaInterpreter, SyntaxErrorsNameLineAndColumn) {
  std::string e = error_of("{% for x in y %}\n{% endif %}");
  EXPECT_NE(e.find("line 2"), std::string::npos) << e;
  e = error_of("{% if x %}\n{% frobnicate %}{% endif %}");
  EXPECT_NE(e.find("line 2, column 4: unknown or misplaced tag 'frobnicate'"), std::string::npos) << e;
  e = error_of("{{ 1 + }}");
  EXPECT_NE(e.find("line 1, column 8"), std::string::npos) << e;
}

TEST(JinjaInterpreter, RangeIsBounded) {
  EXPECT_NE(error_of("{{ range(1000000) | length }}").find("range() is too large"), std::string::npos);
}

// Cuts, duplicates and swaps pieces of real chat templates: each variant must parse and render
// or throw tachyon::Error; anything else (crash, other exception) fails the test.
TEST(JinjaInterpreter, MangledTemplatesNeverCrash) {
  std::vector<std::string> sources;
  for (const char* model : {"llama3", "qwen3", "deepseek_v3"}) {
    auto config = read_json_file(std::filesystem::path(TACHYON_TOKENIZERS) / model / "tokenizer_config.json");
    sources.push_back(config.at("chat_template").get<std::string>());
  }
  ValueDict vars;
  vars.set("messages", Value::from_json(nlohmann::ordered_json::parse(
                           R"([{"role": "system", "content": "s"}, {"role": "user", "content": "u"},
                               {"role": "assistant", "content": null, "tool_calls": [{"type": "function",
                                "function": {"name": "f", "arguments": "{}"}}]}, {"role": "tool", "content": "r"}])")));
  vars.set("add_generation_prompt", Value::from_bool(true));
  std::mt19937 rng(1234);
  int rendered = 0, rejected = 0;
  for (int round = 0; round < 600; ++round) {
    std::string s = sources[round % sources.size()];
    for (int edit = 0; edit < 3; ++edit) {
      size_t a = rng() % s.size(), b = rng() % s.size();
      if (a > b) std::swap(a, b);
      switch (rng() % 3) {
        case 0: s.erase(a, std::min<size_t>(b - a, 12)); break;
        case 1: s.insert(a, s.substr(b, 8)); break;
        default: std::swap(s[a], s[b]); break;
      }
    }
    try {
      Template(s).render(vars);
      ++rendered;
    } catch (const Error&) {
      ++rejected;
    }
  }
  EXPECT_EQ(rendered + rejected, 600);
  EXPECT_GT(rejected, 0);
}

}  // namespace
}  // namespace tachyon::tokenizer::jinja
