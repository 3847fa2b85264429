// Lexer: template source -> tokens, with jinja2's whitespace rules applied to the text between
// tags, configured as transformers configures it: trim_blocks (drop the first newline after a
// block or comment tag), lstrip_blocks (drop spaces and tabs before a block or comment tag that
// starts its line), `{%-`/`-%}` strip all whitespace, `{%+`/`+%}` turn the trimming off, one
// trailing newline of the source is dropped, and \r\n / \r become \n. It follows jinja2's
// lexer.py rule by rule, because a single byte of whitespace difference changes the prompt.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace tachyon::tokenizer::jinja {

enum class TokenType {
  kText,        // raw template text, whitespace control already applied
  kVarBegin,    // {{
  kVarEnd,      // }}
  kBlockBegin,  // {%
  kBlockEnd,    // %}
  kName,
  kString,      // value already unescaped
  kInteger,
  kFloat,
  kOperator,
  kEof,
};

struct Token {
  TokenType type = TokenType::kEof;
  std::string value;
  int line = 1;
  int column = 1;
};

// Throws tachyon::Error "syntax error at line L, column C: ..." on malformed input.
std::vector<Token> tokenize(std::string_view source);

}  // namespace tachyon::tokenizer::jinja
