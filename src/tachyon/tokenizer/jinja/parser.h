// Parser: tokens -> statement tree. Recursive descent with jinja2's grammar and operator
// precedence (lowest first): `x if c else y`, or, and, not, comparisons and `in`, + -, ~,
// * / // %, **, unary - +, then postfix (.attr, [index], [a:b:c], call) and `|filter` /
// `is test`. Supported statements: if/elif/else, for (with else, `if` filter, tuple targets),
// set (name, tuple, namespace attribute, block), macro, break, continue, raw, generation.
#pragma once

#include <vector>

#include "tachyon/tokenizer/jinja/ast.h"
#include "tachyon/tokenizer/jinja/lexer.h"

namespace tachyon::tokenizer::jinja {

// Throws tachyon::Error "syntax error at line L, column C: ..." on malformed templates.
StmtList parse(const std::vector<Token>& tokens);

}  // namespace tachyon::tokenizer::jinja
