// Recursive-descent parser mirroring jinja2's parser.py; see parser.h for the grammar.
#include "tachyon/tokenizer/jinja/parser.h"

#include <cstdlib>
#include <initializer_list>

#include "tachyon/base/check.h"

namespace tachyon::tokenizer::jinja {
namespace {

class Parser {
 public:
  explicit Parser(const std::vector<Token>& tokens) : tokens_(tokens) {}

  StmtList parse_template() {
    StmtList body = parse_body({});
    if (cur().type != TokenType::kEof) fail("unexpected '" + cur().value + "'");
    return body;
  }

 private:
  const Token& cur() const { return tokens_[pos_]; }
  const Token& peek(size_t n = 1) const { return tokens_[std::min(pos_ + n, tokens_.size() - 1)]; }
  void advance() { if (pos_ + 1 < tokens_.size()) ++pos_; }

  [[noreturn]] void fail(const std::string& what) const {
    TACHYON_FAIL() << "syntax error at line " << cur().line << ", column " << cur().column << ": "
                   << what;
    throw;  // unreachable: the failure above throws
  }

  static std::string describe(const Token& t) {
    switch (t.type) {
      case TokenType::kEof: return "end of template";
      case TokenType::kBlockEnd: return "'%}'";
      case TokenType::kVarEnd: return "'}}'";
      case TokenType::kBlockBegin: return "'{%'";
      case TokenType::kVarBegin: return "'{{'";
      case TokenType::kText: return "template text";
      default: return "'" + t.value + "'";
    }
  }

  bool is_op(const char* op) const { return cur().type == TokenType::kOperator && cur().value == op; }
  bool is_name(const char* name) const { return cur().type == TokenType::kName && cur().value == name; }
  bool skip_op(const char* op) { if (!is_op(op)) return false; advance(); return true; }
  bool skip_name(const char* name) { if (!is_name(name)) return false; advance(); return true; }
  void expect_op(const char* op) {
    if (!skip_op(op)) fail(std::string("expected '") + op + "', got " + describe(cur()));
  }
  void expect_block_end() {
    if (cur().type != TokenType::kBlockEnd) fail("expected '%}', got " + describe(cur()));
    advance();
  }
  std::string expect_name() {
    if (cur().type != TokenType::kName) fail("expected a name, got " + describe(cur()));
    std::string name = cur().value;
    advance();
    return name;
  }

  ExprPtr node(ExprKind kind, const Token& at) {
    auto e = std::make_unique<Expr>();
    e->kind = kind;
    e->line = at.line;
    e->column = at.column;
    return e;
  }
  StmtPtr stmt(StmtKind kind, const Token& at) {
    auto s = std::make_unique<Stmt>();
    s->kind = kind;
    s->line = at.line;
    s->column = at.column;
    return s;
  }

  // ---- statements -----------------------------------------------------------------------
  // Parses until `{% <one of end_names>` and leaves the position on that name.
  StmtList parse_body(std::initializer_list<const char*> end_names) {
    StmtList body;
    while (true) {
      const Token& t = cur();
      if (t.type == TokenType::kEof) {
        if (end_names.size() == 0) return body;
        std::string expected;
        for (const char* end : end_names) expected += std::string(expected.empty() ? "" : " or ") + "'" + end + "'";
        fail("unexpected end of template, expected " + expected + " (an opened block was never closed)");
      }
      if (t.type == TokenType::kText) {
        auto s = stmt(StmtKind::kText, t);
        s->text = t.value;
        body.push_back(std::move(s));
        advance();
      } else if (t.type == TokenType::kVarBegin) {
        advance();
        auto s = stmt(StmtKind::kOutput, t);
        s->expr = parse_tuple(true);
        if (cur().type != TokenType::kVarEnd) fail("expected '}}', got " + describe(cur()));
        advance();
        body.push_back(std::move(s));
      } else if (t.type == TokenType::kBlockBegin) {
        advance();
        for (const char* end : end_names) {
          if (is_name(end)) return body;
        }
        body.push_back(parse_statement());
      } else {
        fail("unexpected " + describe(t));
      }
    }
  }

  StmtPtr parse_statement() {
    const Token& t = cur();
    if (t.type != TokenType::kName) fail("expected a statement name, got " + describe(t));
    const std::string& kw = t.value;
    if (kw == "if") return parse_if();
    if (kw == "for") return parse_for();
    if (kw == "set") return parse_set();
    if (kw == "macro") return parse_macro();
    if (kw == "break" || kw == "continue") {
      auto s = stmt(kw == "break" ? StmtKind::kBreak : StmtKind::kContinue, t);
      advance();
      expect_block_end();
      return s;
    }
    if (kw == "generation") {
      auto s = stmt(StmtKind::kScope, t);
      advance();
      expect_block_end();
      s->body = parse_body({"endgeneration"});
      advance();
      expect_block_end();
      return s;
    }
    fail("unknown or misplaced tag '" + kw + "'");
  }

  StmtPtr parse_if() {
    auto s = stmt(StmtKind::kIf, cur());
    advance();
    ExprPtr cond = parse_tuple(false);
    while (true) {
      expect_block_end();
      StmtList body = parse_body({"elif", "else", "endif"});
      s->branches.emplace_back(std::move(cond), std::move(body));
      if (skip_name("elif")) {
        cond = parse_tuple(false);
        continue;
      }
      if (skip_name("else")) {
        expect_block_end();
        s->branches.emplace_back(nullptr, parse_body({"endif"}));
      }
      advance();  // endif
      expect_block_end();
      return s;
    }
  }

  StmtPtr parse_for() {
    auto s = stmt(StmtKind::kFor, cur());
    advance();
    s->targets.push_back(expect_name());
    while (skip_op(",")) s->targets.push_back(expect_name());
    if (!skip_name("in")) fail("expected 'in' in for loop, got " + describe(cur()));
    s->expr = parse_tuple(false);
    if (skip_name("if")) s->filter = parse_expression(true);
    if (is_name("recursive")) fail("recursive loops are not supported");
    expect_block_end();
    s->body = parse_body({"endfor", "else"});
    if (skip_name("else")) {
      expect_block_end();
      s->else_body = parse_body({"endfor"});
    }
    advance();  // endfor
    expect_block_end();
    return s;
  }

  StmtPtr parse_set() {
    const Token& at = cur();
    advance();
    std::vector<std::string> targets{expect_name()};
    std::string attribute;
    if (skip_op(".")) {
      attribute = expect_name();
    } else {
      while (skip_op(",")) targets.push_back(expect_name());
    }
    if (skip_op("=")) {
      auto s = stmt(StmtKind::kSet, at);
      s->targets = std::move(targets);
      s->attribute = std::move(attribute);
      s->expr = parse_tuple(true);
      expect_block_end();
      return s;
    }
    if (targets.size() != 1 || !attribute.empty()) fail("block set takes a single name");
    auto s = stmt(StmtKind::kSetBlock, at);
    s->targets = std::move(targets);
    expect_block_end();
    s->body = parse_body({"endset"});
    advance();
    expect_block_end();
    return s;
  }

  StmtPtr parse_macro() {
    auto s = stmt(StmtKind::kMacro, cur());
    advance();
    s->name = expect_name();
    expect_op("(");
    while (!skip_op(")")) {
      if (!s->params.empty()) expect_op(",");
      if (skip_op(")")) break;
      s->params.push_back(expect_name());
      s->defaults.push_back(skip_op("=") ? parse_expression(true) : nullptr);
    }
    expect_block_end();
    s->body = parse_body({"endmacro"});
    advance();
    expect_block_end();
    return s;
  }

  // ---- expressions ----------------------------------------------------------------------
  // A comma-separated list becomes a tuple; `{{ a, b }}` and `set x = 1, 2` are legal.
  ExprPtr parse_tuple(bool with_condexpr) {
    const Token& at = cur();
    ExprPtr first = parse_expression(with_condexpr);
    if (!is_op(",")) return first;
    auto tuple = node(ExprKind::kTuple, at);
    tuple->children.push_back(std::move(first));
    while (skip_op(",")) {
      if (cur().type == TokenType::kBlockEnd || cur().type == TokenType::kVarEnd) break;
      tuple->children.push_back(parse_expression(with_condexpr));
    }
    return tuple;
  }

  ExprPtr parse_expression(bool with_condexpr) {
    const Token& at = cur();
    ExprPtr expr = parse_or();
    if (!with_condexpr) return expr;
    while (skip_name("if")) {
      auto cond = node(ExprKind::kCondition, at);
      cond->children.push_back(std::move(expr));
      cond->children.push_back(parse_or());
      cond->children.push_back(skip_name("else") ? parse_expression(true) : nullptr);
      expr = std::move(cond);
    }
    return expr;
  }

  ExprPtr binary(ExprKind kind, const Token& at, ExprPtr left, ExprPtr right, std::string op = "") {
    auto e = node(kind, at);
    e->name = std::move(op);
    e->children.push_back(std::move(left));
    e->children.push_back(std::move(right));
    return e;
  }

  ExprPtr parse_or() {
    ExprPtr left = parse_and();
    while (is_name("or")) {
      const Token& at = cur();
      advance();
      left = binary(ExprKind::kOr, at, std::move(left), parse_and());
    }
    return left;
  }

  ExprPtr parse_and() {
    ExprPtr left = parse_not();
    while (is_name("and")) {
      const Token& at = cur();
      advance();
      left = binary(ExprKind::kAnd, at, std::move(left), parse_not());
    }
    return left;
  }

  ExprPtr parse_not() {
    if (is_name("not")) {
      auto e = node(ExprKind::kNot, cur());
      advance();
      e->children.push_back(parse_not());
      return e;
    }
    return parse_compare();
  }

  ExprPtr parse_compare() {
    const Token& at = cur();
    ExprPtr first = parse_math1();
    ExprPtr cmp;
    while (true) {
      std::string op;
      if (cur().type == TokenType::kOperator &&
          (cur().value == "==" || cur().value == "!=" || cur().value == "<" || cur().value == ">" ||
           cur().value == "<=" || cur().value == ">=")) {
        op = cur().value;
        advance();
      } else if (is_name("in")) {
        op = "in";
        advance();
      } else if (is_name("not") && peek().type == TokenType::kName && peek().value == "in") {
        op = "notin";
        advance();
        advance();
      } else {
        break;
      }
      if (!cmp) {
        cmp = node(ExprKind::kCompare, at);
        cmp->children.push_back(std::move(first));
      }
      cmp->ops.push_back(op);
      cmp->children.push_back(parse_math1());
    }
    return cmp ? std::move(cmp) : std::move(first);
  }

  ExprPtr parse_math1() {
    ExprPtr left = parse_concat();
    while (is_op("+") || is_op("-")) {
      const Token& at = cur();
      advance();
      left = binary(ExprKind::kBinary, at, std::move(left), parse_concat(), at.value);
    }
    return left;
  }

  ExprPtr parse_concat() {
    ExprPtr left = parse_math2();
    while (is_op("~")) {
      const Token& at = cur();
      advance();
      left = binary(ExprKind::kBinary, at, std::move(left), parse_math2(), "~");
    }
    return left;
  }

  ExprPtr parse_math2() {
    ExprPtr left = parse_pow();
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      const Token& at = cur();
      advance();
      left = binary(ExprKind::kBinary, at, std::move(left), parse_pow(), at.value);
    }
    return left;
  }

  ExprPtr parse_pow() {
    ExprPtr left = parse_unary(true);
    while (is_op("**")) {
      const Token& at = cur();
      advance();
      left = binary(ExprKind::kBinary, at, std::move(left), parse_unary(true), "**");
    }
    return left;
  }

  ExprPtr parse_unary(bool with_filter) {
    ExprPtr e;
    if (is_op("-") || is_op("+")) {
      e = node(ExprKind::kUnary, cur());
      e->name = cur().value;
      advance();
      e->children.push_back(parse_unary(false));
    } else {
      e = parse_primary();
    }
    e = parse_postfix(std::move(e));
    if (with_filter) e = parse_filter_expr(std::move(e));
    return e;
  }

  ExprPtr parse_primary() {
    const Token& t = cur();
    if (t.type == TokenType::kName) {
      auto e = node(ExprKind::kLiteral, t);
      const std::string& n = t.value;
      if (n == "true" || n == "True") e->literal = Value::from_bool(true);
      else if (n == "false" || n == "False") e->literal = Value::from_bool(false);
      else if (n == "none" || n == "None") e->literal = Value::none();
      else { e->kind = ExprKind::kName; e->name = n; }
      advance();
      return e;
    }
    if (t.type == TokenType::kString) {
      std::string s;
      while (cur().type == TokenType::kString) {  // adjacent literals concatenate
        s += cur().value;
        advance();
      }
      auto e = node(ExprKind::kLiteral, t);
      e->literal = Value::from_string(std::move(s));
      return e;
    }
    if (t.type == TokenType::kInteger || t.type == TokenType::kFloat) {
      auto e = node(ExprKind::kLiteral, t);
      if (t.type == TokenType::kInteger) {
        errno = 0;
        long long v = std::strtoll(t.value.c_str(), nullptr, 10);
        if (errno == ERANGE) fail("integer literal too large: " + t.value);
        e->literal = Value::from_int(v);
      } else {
        e->literal = Value::from_float(std::strtod(t.value.c_str(), nullptr));
      }
      advance();
      return e;
    }
    if (skip_op("(")) {
      if (skip_op(")")) {
        auto e = node(ExprKind::kTuple, t);
        return e;
      }
      ExprPtr first = parse_expression(true);
      if (skip_op(")")) return first;
      auto e = node(ExprKind::kTuple, t);
      e->children.push_back(std::move(first));
      while (skip_op(",")) {
        if (is_op(")")) break;
        e->children.push_back(parse_expression(true));
      }
      expect_op(")");
      return e;
    }
    if (skip_op("[")) {
      auto e = node(ExprKind::kList, t);
      while (!skip_op("]")) {
        if (!e->children.empty()) expect_op(",");
        if (skip_op("]")) break;
        e->children.push_back(parse_expression(true));
      }
      return e;
    }
    if (skip_op("{")) {
      auto e = node(ExprKind::kDict, t);
      while (!skip_op("}")) {
        if (!e->children.empty()) expect_op(",");
        if (skip_op("}")) break;
        e->children.push_back(parse_expression(true));
        expect_op(":");
        e->children.push_back(parse_expression(true));
      }
      return e;
    }
    fail("unexpected " + describe(t));
  }

  ExprPtr parse_postfix(ExprPtr e) {
    while (true) {
      const Token& at = cur();
      if (skip_op(".")) {
        if (cur().type == TokenType::kInteger) {
          auto item = node(ExprKind::kGetItem, at);
          item->children.push_back(std::move(e));
          auto index = node(ExprKind::kLiteral, cur());
          index->literal = Value::from_int(std::stoll(cur().value));
          advance();
          item->children.push_back(std::move(index));
          e = std::move(item);
          continue;
        }
        auto attr = node(ExprKind::kGetAttr, at);
        attr->name = expect_name();
        attr->children.push_back(std::move(e));
        e = std::move(attr);
      } else if (skip_op("[")) {
        e = parse_subscript(std::move(e), at);
      } else if (is_op("(")) {
        e = parse_call(std::move(e));
      } else {
        return e;
      }
    }
  }

  ExprPtr parse_subscript(ExprPtr target, const Token& at) {
    ExprPtr parts[3];
    bool is_slice = false;
    int part = 0;
    while (!is_op("]")) {
      if (skip_op(":")) {
        is_slice = true;
        if (++part > 2) fail("too many ':' in slice");
        continue;
      }
      if (parts[part]) fail("expected ':' or ']', got " + describe(cur()));
      parts[part] = parse_expression(true);
    }
    advance();  // ]
    if (!is_slice) {
      if (!parts[0]) fail("empty subscript");
      auto e = node(ExprKind::kGetItem, at);
      e->children.push_back(std::move(target));
      e->children.push_back(std::move(parts[0]));
      return e;
    }
    auto e = node(ExprKind::kSlice, at);
    e->children.push_back(std::move(target));
    for (auto& p : parts) e->children.push_back(std::move(p));
    return e;
  }

  // `(` args `)` appended to `e` (a call, or the arguments of a filter or test).
  void parse_args(Expr& e) {
    expect_op("(");
    while (!skip_op(")")) {
      if (!e.keywords.empty() || e.children.size() > 1) expect_op(",");
      if (skip_op(")")) break;
      if (cur().type == TokenType::kName && peek().type == TokenType::kOperator && peek().value == "=") {
        std::string key = cur().value;
        advance();
        advance();
        e.keywords.emplace_back(key, parse_expression(true));
      } else {
        if (!e.keywords.empty()) fail("positional argument after keyword argument");
        e.children.push_back(parse_expression(true));
      }
    }
  }

  ExprPtr parse_call(ExprPtr callee) {
    auto e = node(ExprKind::kCall, cur());
    e->children.push_back(std::move(callee));
    parse_args(*e);
    return e;
  }

  ExprPtr parse_filter_expr(ExprPtr e) {
    while (true) {
      if (is_op("|")) {
        auto f = node(ExprKind::kFilter, cur());
        advance();
        f->name = expect_name();
        f->children.push_back(std::move(e));
        if (is_op("(")) parse_args(*f);
        e = std::move(f);
      } else if (is_name("is")) {
        auto t = node(ExprKind::kTest, cur());
        advance();
        t->negated = skip_name("not");
        t->name = expect_name();
        t->children.push_back(std::move(e));
        const Token& n = cur();
        bool arg_start = n.type == TokenType::kName || n.type == TokenType::kString ||
                         n.type == TokenType::kInteger || n.type == TokenType::kFloat ||
                         (n.type == TokenType::kOperator && (n.value == "[" || n.value == "{"));
        if (is_op("(")) {
          parse_args(*t);
        } else if (arg_start && !is_name("else") && !is_name("or") && !is_name("and")) {
          if (is_name("is")) fail("cannot chain multiple tests with 'is'");
          t->children.push_back(parse_postfix(parse_primary()));
        }
        e = std::move(t);
      } else if (is_op("(")) {
        e = parse_call(std::move(e));
      } else {
        return e;
      }
    }
  }

  const std::vector<Token>& tokens_;
  size_t pos_ = 0;
};

}  // namespace

StmtList parse(const std::vector<Token>& tokens) { return Parser(tokens).parse_template(); }

}  // namespace tachyon::tokenizer::jinja
