// Syntax tree of a parsed template. One generic node type per layer (Expr, Stmt) with a kind
// and children keeps the parser and interpreter small; each kind's comment says what its
// fields hold. Nodes carry the line and column of their first token for error messages.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tachyon/tokenizer/jinja/value.h"

namespace tachyon::tokenizer::jinja {

enum class ExprKind {
  kLiteral,    // literal
  kName,       // name
  kList,       // children: elements
  kTuple,      // children: elements
  kDict,       // children: key0, value0, key1, value1, ...
  kGetAttr,    // children[0].name
  kGetItem,    // children[0][children[1]]
  kSlice,      // children[0][children[1]:children[2]:children[3]], absent parts are null
  kCall,       // children[0](children[1..], keywords)
  kFilter,     // children[0] | name(children[1..], keywords)
  kTest,       // children[0] is [not] name(children[1..], keywords); negated
  kUnary,      // name ("-" or "+") children[0]
  kNot,        // not children[0]
  kBinary,     // children[0] name children[1]; name is + - * / // % ** ~
  kAnd,        // children[0] and children[1]
  kOr,         // children[0] or children[1]
  kCompare,    // children[0] ops[0] children[1] ops[1] children[2] ...; ops: == != < > <= >= in notin
  kCondition,  // children[0] if children[1] else children[2] (children[2] may be null)
};

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  ExprKind kind = ExprKind::kLiteral;
  int line = 0;
  int column = 0;
  Value literal;
  std::string name;
  std::vector<ExprPtr> children;
  std::vector<std::pair<std::string, ExprPtr>> keywords;
  std::vector<std::string> ops;
  bool negated = false;
};

enum class StmtKind {
  kText,      // text
  kOutput,    // {{ expr }}
  kIf,        // branches: (condition, body)...; a final else has a null condition
  kFor,       // for targets in expr [if filter]: body [else else_body]
  kSet,       // set targets = expr, or set targets[0].attribute = expr
  kSetBlock,  // set targets[0] %}body{% endset
  kMacro,     // macro name(params = defaults): body
  kBreak,
  kContinue,
  kScope,     // a body rendered as is: {% generation %} (transformers' assistant-mask tag)
};

struct Stmt;
using StmtPtr = std::unique_ptr<Stmt>;
using StmtList = std::vector<StmtPtr>;

struct Stmt {
  StmtKind kind = StmtKind::kText;
  int line = 0;
  int column = 0;
  std::string text;
  ExprPtr expr;
  ExprPtr filter;
  std::vector<std::string> targets;
  std::string attribute;
  std::vector<std::pair<ExprPtr, StmtList>> branches;
  StmtList body;
  StmtList else_body;
  std::string name;
  std::vector<std::string> params;
  std::vector<ExprPtr> defaults;  // one per param, null where the param has no default
};

}  // namespace tachyon::tokenizer::jinja
