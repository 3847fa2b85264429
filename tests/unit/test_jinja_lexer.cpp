// Lexer: token stream and jinja2's whitespace control (trim_blocks, lstrip_blocks, -, +).
// The byte-exact whitespace cases are also checked against jinja2 in test_jinja_conformance.
#include "tachyon/tokenizer/jinja/lexer.h"

#include <gtest/gtest.h>

#include "tachyon/base/check.h"
#include "tachyon/tokenizer/jinja/template.h"

namespace tachyon::tokenizer::jinja {
namespace {

std::string render(const std::string& source) { return Template(source).render({}); }

std::string error_of(const std::string& source) {
  try {
    Template t(source);
    t.render({});
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(JinjaLexer, TokenKindsAndPositions) {
  auto tokens = tokenize("hi {{ a.b[1] | f('s', 2.5) }}\n{% if x %}");
  std::vector<TokenType> types;
  for (const auto& t : tokens) types.push_back(t.type);
  std::vector<TokenType> want = {
      TokenType::kText, TokenType::kVarBegin, TokenType::kName, TokenType::kOperator, TokenType::kName,
      TokenType::kOperator, TokenType::kInteger, TokenType::kOperator, TokenType::kOperator, TokenType::kName,
      TokenType::kOperator, TokenType::kString, TokenType::kOperator, TokenType::kFloat, TokenType::kOperator,
      TokenType::kVarEnd, TokenType::kText, TokenType::kBlockBegin, TokenType::kName, TokenType::kName,
      TokenType::kBlockEnd, TokenType::kEof};
  EXPECT_EQ(types, want);
  EXPECT_EQ(tokens[11].value, "s");
  EXPECT_EQ(tokens[18].line, 2);
  EXPECT_EQ(tokens[18].column, 4);
}

TEST(JinjaLexer, TrimBlocksDropsOneNewlineAfterBlockTag) {
  EXPECT_EQ(render("{% if true %}\nyes\n{% endif %}\nafter"), "yes\nafter");
  EXPECT_EQ(render("{{ 'a' }}\nb"), "a\nb");  // not after a variable tag
}

TEST(JinjaLexer, LstripBlocksOnlyAtLineStart) {
  EXPECT_EQ(render("  {% if true %}\n  x\n  {% endif %}\ndone"), "  x\ndone");
  EXPECT_EQ(render("x  {% if true %}y{% endif %}"), "x  y");
  EXPECT_EQ(render("  {{ 'v' }}"), "  v");  // variables are never lstripped
}

TEST(JinjaLexer, MinusStripsAllWhitespacePlusKeepsIt) {
  EXPECT_EQ(render("a  \n  {%- if true -%}  \n  b  \n  {%- endif -%}  \n  c"), "abc");
  EXPECT_EQ(render("a \n {{- 'x' -}} \n b"), "axb");
  EXPECT_EQ(render("  {%+ if true %}x{% endif %}"), "  x");
  EXPECT_EQ(render("{% if true +%}\nx{% endif %}"), "\nx");
}

TEST(JinjaLexer, CommentsRawAndNewlines) {
  EXPECT_EQ(render("a\n  {# comment {{ x }} #}\nb"), "a\nb");
  EXPECT_EQ(render("{% raw %}{{ kept }}{% endraw %}"), "{{ kept }}");
  EXPECT_EQ(render("a\r\nb\rc\n"), "a\nb\nc");  // newlines normalised, one trailing dropped
  EXPECT_EQ(render("{{ '}}' }}"), "}}");
  EXPECT_EQ(render("{{ {'a': {'b': 1}}['a'] }}"), "{'b': 1}");  // '}}' inside braces is not an end
}

TEST(JinjaLexer, SyntaxErrorsCarryLineAndColumn) {
  EXPECT_NE(error_of("ok\n{# never closed").find("line 2, column 1: missing end of comment tag"), std::string::npos)
      << error_of("ok\n{# never closed");
  EXPECT_NE(error_of("a\nb {{ 'abc }}").find("line 2, column 6: unterminated string"), std::string::npos)
      << error_of("a\nb {{ 'abc }}");
  EXPECT_NE(error_of("{{ (1 }}").find("unexpected '}', expected ')'"), std::string::npos) << error_of("{{ (1 }}");
  EXPECT_NE(error_of("{{ 1 $ 2 }}").find("unexpected char '$'"), std::string::npos);
  EXPECT_NE(error_of("{{ x").find("unexpected end of template"), std::string::npos);
}

}  // namespace
}  // namespace tachyon::tokenizer::jinja
