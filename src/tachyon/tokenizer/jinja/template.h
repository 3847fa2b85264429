// Template: a parsed Jinja template that renders many times. Parsing happens once in the
// constructor (syntax errors surface at load time, with line and column); render() takes the
// variables and adds the builtin globals (range, namespace, raise_exception, ...) beneath them.
#pragma once

#include <string>
#include <string_view>

#include "tachyon/tokenizer/jinja/ast.h"
#include "tachyon/tokenizer/jinja/value.h"

namespace tachyon::tokenizer::jinja {

class Template {
 public:
  // Throws tachyon::Error "syntax error at line L, column C: ..." on a malformed template.
  explicit Template(std::string_view source);

  // Throws tachyon::Error "chat template error at line L, column C: ..." on runtime errors.
  std::string render(const ValueDict& variables) const;

 private:
  StmtList body_;
};

}  // namespace tachyon::tokenizer::jinja
