// Interpreter: walks the statement tree and writes the output. Scoping follows jinja2: a for
// loop gives every iteration a fresh child scope (a `set` inside the body is gone at the next
// iteration and after the loop), `if` has no scope of its own, a macro sees the template's
// top-level scope plus its arguments, and only namespace() objects carry state out of a loop.
// Errors are re-thrown with the line and column of the innermost node that failed.
#pragma once

#include <string>
#include <unordered_map>

#include "tachyon/tokenizer/jinja/ast.h"
#include "tachyon/tokenizer/jinja/value.h"

namespace tachyon::tokenizer::jinja {

struct Scope {
  std::unordered_map<std::string, Value> vars;
  const Scope* parent = nullptr;

  const Value* find(const std::string& name) const;
};

class Interpreter {
 public:
  explicit Interpreter(const ValueDict& globals);

  // Renders `body`; throws tachyon::Error "line L, column C: ..." on any runtime error.
  std::string render(const StmtList& body);

 private:
  enum class Flow { kNormal, kBreak, kContinue };

  Flow exec_list(const StmtList& body, Scope& scope, std::string& out);
  Flow exec(const Stmt& s, Scope& scope, std::string& out);
  void exec_for(const Stmt& s, Scope& scope, std::string& out);
  void exec_set(const Stmt& s, Scope& scope, Value value);
  Value make_macro(const Stmt& s);

  Value eval(const Expr& e, Scope& scope);
  Value eval_node(const Expr& e, Scope& scope);
  Value eval_compare(const Expr& e, Scope& scope);
  Value eval_slice(const Expr& e, Scope& scope);
  CallArgs eval_args(const Expr& e, Scope& scope);

  Scope root_;
  // Where the innermost failing node sits; set once while an error unwinds.
  bool error_located_ = false;
  int error_line_ = 0;
  int error_column_ = 0;
};

}  // namespace tachyon::tokenizer::jinja
