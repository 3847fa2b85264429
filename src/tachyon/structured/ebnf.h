// EBNF (GBNF / xgrammar syntax) -> Grammar, for guided_grammar. Rules `name ::= ...`, the start
// rule is `root`; sequences, `|`, groups ( ), quantifiers * + ? {m} {m,} {m,n}, string literals
// "..." and character classes [a-z] [^...] over Unicode code points (escapes \n \t \r \\ \" \]
// \xHH \uHHHH), `#` comments to the end of the line. Lookahead assertions (=...) are refused.
#pragma once

#include <string>
#include <string_view>

#include "tachyon/structured/grammar.h"

namespace tachyon::structured {

// Throws StructuredError (`what` names the field) with the line of the problem.
Grammar ebnf_grammar(std::string_view text, const std::string& what);

}  // namespace tachyon::structured
