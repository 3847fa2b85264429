// Template = lexer + parser once, interpreter per render; see template.h.
#include "tachyon/tokenizer/jinja/template.h"

#include "tachyon/tokenizer/jinja/builtins.h"
#include "tachyon/tokenizer/jinja/interpreter.h"
#include "tachyon/tokenizer/jinja/lexer.h"
#include "tachyon/tokenizer/jinja/parser.h"

namespace tachyon::tokenizer::jinja {

Template::Template(std::string_view source) : body_(parse(tokenize(source))) {}

std::string Template::render(const ValueDict& variables) const {
  ValueDict globals = builtin_globals();
  for (const auto& [k, v] : variables.items) globals.set(k, v);
  Interpreter interpreter(globals);
  return interpreter.render(body_);
}

}  // namespace tachyon::tokenizer::jinja
