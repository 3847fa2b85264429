// Regular expressions as grammar rules: guided_regex (the whole output matches) and a JSON
// schema string's "pattern" (the string's characters match). The supported syntax is the
// common subset of Python re / ECMAScript that describes a language: literals, '.', classes
// [a-z] [^...] with \d \w \s (and negations), escapes (\n \t \xHH \uHHHH, escaped punctuation),
// groups ( ) and (?: ), alternation |, quantifiers * + ? {n} {n,} {n,m} (a lazy '?' suffix is
// accepted: it changes which match a search finds, not which strings match), and ^ / $ at the
// ends (the match is always anchored). Backreferences, lookaround, word boundaries and inline
// flags are refused by name: they are not regular, or would change the language silently.
#pragma once

#include <string>
#include <string_view>

#include "tachyon/structured/grammar.h"

namespace tachyon::structured {

enum class RegexContext {
  kRaw,         // the output's bytes
  kJsonString,  // characters inside a JSON string: control characters, '"' and '\' are left out
                // of every class (a pattern that needs them matches nothing: StructuredError)
};

// A sequence matching exactly the strings of `pattern`. Throws StructuredError naming what is
// unsupported or malformed and where (`what` names the field in messages, e.g. "guided_regex").
Sequence compile_regex(Grammar& grammar, std::string_view pattern, RegexContext context, const std::string& what);

}  // namespace tachyon::structured
