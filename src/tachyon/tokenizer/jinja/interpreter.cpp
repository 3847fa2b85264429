// Statement execution and expression evaluation; see interpreter.h for the scoping rules.
#include "tachyon/tokenizer/jinja/interpreter.h"

#include "tachyon/base/check.h"
#include "tachyon/tokenizer/jinja/filters.h"
#include "tachyon/tokenizer/jinja/operators.h"

namespace tachyon::tokenizer::jinja {

const Value* Scope::find(const std::string& name) const {
  for (const Scope* s = this; s != nullptr; s = s->parent) {
    auto it = s->vars.find(name);
    if (it != s->vars.end()) return &it->second;
  }
  return nullptr;
}

Interpreter::Interpreter(const ValueDict& globals) {
  for (const auto& [k, v] : globals.items) root_.vars[k] = v;
}

std::string Interpreter::render(const StmtList& body) {
  std::string out;
  try {
    exec_list(body, root_, out);
  } catch (const Error& e) {
    if (!error_located_) throw;
    throw Error("chat template error at line " + std::to_string(error_line_) + ", column " +
                std::to_string(error_column_) + ": " + e.what());
  }
  return out;
}

Interpreter::Flow Interpreter::exec_list(const StmtList& body, Scope& scope, std::string& out) {
  for (const StmtPtr& s : body) {
    Flow flow = exec(*s, scope, out);
    if (flow != Flow::kNormal) return flow;
  }
  return Flow::kNormal;
}

Interpreter::Flow Interpreter::exec(const Stmt& s, Scope& scope, std::string& out) {
  try {
    switch (s.kind) {
      case StmtKind::kText: out += s.text; break;
      case StmtKind::kOutput: out += to_str(eval(*s.expr, scope)); break;
      case StmtKind::kIf:
        for (const auto& [cond, body] : s.branches) {
          if (cond == nullptr || truthy(eval(*cond, scope))) return exec_list(body, scope, out);
        }
        break;
      case StmtKind::kFor: exec_for(s, scope, out); break;
      case StmtKind::kSet: exec_set(s, scope, eval(*s.expr, scope)); break;
      case StmtKind::kSetBlock: {
        std::string captured;
        Scope inner{{}, &scope};
        exec_list(s.body, inner, captured);
        exec_set(s, scope, Value::from_string(std::move(captured)));
        break;
      }
      case StmtKind::kMacro: scope.vars[s.name] = make_macro(s); break;
      case StmtKind::kBreak: return Flow::kBreak;
      case StmtKind::kContinue: return Flow::kContinue;
      case StmtKind::kScope: return exec_list(s.body, scope, out);
    }
  } catch (const Error&) {
    if (!error_located_) {
      error_located_ = true;
      error_line_ = s.line;
      error_column_ = s.column;
    }
    throw;
  }
  return Flow::kNormal;
}

namespace {

void bind_targets(const std::vector<std::string>& targets, const Value& item, Scope& scope) {
  if (targets.size() == 1) {
    scope.vars[targets[0]] = item;
    return;
  }
  ValueList parts = iterate(item);
  TACHYON_CHECK(parts.size() == targets.size())
      << (parts.size() > targets.size() ? "too many" : "not enough") << " values to unpack (expected "
      << targets.size() << ", got " << parts.size() << ")";
  for (size_t i = 0; i < targets.size(); ++i) scope.vars[targets[i]] = parts[i];
}

Value make_loop(const ValueList& items, size_t i) {
  int64_t n = static_cast<int64_t>(items.size());
  int64_t index = static_cast<int64_t>(i);
  ValueDict loop;
  loop.set("index", Value::from_int(index + 1));
  loop.set("index0", Value::from_int(index));
  loop.set("revindex", Value::from_int(n - index));
  loop.set("revindex0", Value::from_int(n - index - 1));
  loop.set("first", Value::from_bool(i == 0));
  loop.set("last", Value::from_bool(index == n - 1));
  loop.set("length", Value::from_int(n));
  loop.set("depth", Value::from_int(1));
  loop.set("depth0", Value::from_int(0));
  loop.set("previtem", i > 0 ? items[i - 1] : Value::undefined("there is no previous item"));
  loop.set("nextitem", index + 1 < n ? items[i + 1] : Value::undefined("there is no next item"));
  loop.set("cycle", Value::from_function("loop.cycle", [index](const CallArgs& a) {
             TACHYON_CHECK(!a.positional.empty()) << "loop.cycle() needs at least one value";
             return a.positional[index % a.positional.size()];
           }));
  return Value::make_object("loop", std::move(loop));
}

}  // namespace

void Interpreter::exec_for(const Stmt& s, Scope& scope, std::string& out) {
  ValueList items = iterate(eval(*s.expr, scope));
  if (s.filter) {
    ValueList kept;
    for (const Value& item : items) {
      Scope probe{{}, &scope};
      bind_targets(s.targets, item, probe);
      if (truthy(eval(*s.filter, probe))) kept.push_back(item);
    }
    items = std::move(kept);
  }
  if (items.empty()) {
    Scope inner{{}, &scope};
    exec_list(s.else_body, inner, out);
    return;
  }
  for (size_t i = 0; i < items.size(); ++i) {
    Scope iteration{{}, &scope};
    bind_targets(s.targets, items[i], iteration);
    iteration.vars["loop"] = make_loop(items, i);
    if (exec_list(s.body, iteration, out) == Flow::kBreak) break;
  }
}

void Interpreter::exec_set(const Stmt& s, Scope& scope, Value value) {
  if (s.attribute.empty()) {
    bind_targets(s.targets, value, scope);
    return;
  }
  const Value* target = scope.find(s.targets[0]);
  TACHYON_CHECK(target != nullptr) << "'" << s.targets[0] << "' is undefined";
  TACHYON_CHECK(target->kind == Kind::kObject && target->text == "namespace")
      << "cannot assign attribute on non-namespace object '" << s.targets[0] << "'";
  target->dict->set(s.attribute, std::move(value));
}

Value Interpreter::make_macro(const Stmt& s) {
  const Stmt* macro = &s;
  return Value::from_function(s.name, [this, macro](const CallArgs& args) {
    Scope local{{}, &root_};
    TACHYON_CHECK(args.positional.size() <= macro->params.size())
        << "macro '" << macro->name << "' takes " << macro->params.size() << " arguments, got "
        << args.positional.size();
    for (size_t i = 0; i < macro->params.size(); ++i) {
      const Value* given = args.get(i, macro->params[i]);
      if (given != nullptr) local.vars[macro->params[i]] = *given;
      else if (macro->defaults[i]) local.vars[macro->params[i]] = eval(*macro->defaults[i], local);
      else local.vars[macro->params[i]] = Value::undefined("parameter '" + macro->params[i] + "' was not provided");
    }
    std::string out;
    exec_list(macro->body, local, out);
    return Value::from_string(std::move(out));
  });
}

Value Interpreter::eval(const Expr& e, Scope& scope) {
  try {
    return eval_node(e, scope);
  } catch (const Error&) {
    if (!error_located_) {
      error_located_ = true;
      error_line_ = e.line;
      error_column_ = e.column;
    }
    throw;
  }
}

CallArgs Interpreter::eval_args(const Expr& e, Scope& scope) {
  CallArgs args;
  for (size_t i = 1; i < e.children.size(); ++i) args.positional.push_back(eval(*e.children[i], scope));
  for (const auto& [k, v] : e.keywords) args.keyword.emplace_back(k, eval(*v, scope));
  return args;
}

Value Interpreter::eval_compare(const Expr& e, Scope& scope) {
  Value left = eval(*e.children[0], scope);
  for (size_t i = 0; i < e.ops.size(); ++i) {
    Value right = eval(*e.children[i + 1], scope);
    if (!compare(e.ops[i], left, right)) return Value::from_bool(false);
    left = std::move(right);
  }
  return Value::from_bool(true);
}

Value Interpreter::eval_slice(const Expr& e, Scope& scope) {
  Value target = eval(*e.children[0], scope);
  std::optional<int64_t> bounds[3];
  for (int i = 0; i < 3; ++i) {
    if (!e.children[i + 1]) continue;
    Value b = eval(*e.children[i + 1], scope);
    if (b.is_none()) continue;
    TACHYON_CHECK(b.is_integral()) << "slice indices must be integers or None, not " << type_name(b);
    bounds[i] = b.as_int();
  }
  return slice(target, bounds[0], bounds[1], bounds[2]);
}

Value Interpreter::eval_node(const Expr& e, Scope& scope) {
  switch (e.kind) {
    case ExprKind::kLiteral: return e.literal;
    case ExprKind::kName: {
      const Value* v = scope.find(e.name);
      return v != nullptr ? *v : Value::undefined("'" + e.name + "' is undefined");
    }
    case ExprKind::kList:
    case ExprKind::kTuple: {
      ValueList items;
      for (const ExprPtr& c : e.children) items.push_back(eval(*c, scope));
      return Value::from_list(std::move(items), e.kind == ExprKind::kTuple);
    }
    case ExprKind::kDict: {
      ValueDict dict;
      for (size_t i = 0; i + 1 < e.children.size(); i += 2) {
        Value key = eval(*e.children[i], scope);
        TACHYON_CHECK(key.is_string()) << "dict keys in templates must be strings, got " << type_name(key);
        dict.set(key.text, eval(*e.children[i + 1], scope));
      }
      return Value::from_dict(std::move(dict));
    }
    case ExprKind::kGetAttr: return get_attribute(eval(*e.children[0], scope), e.name);
    case ExprKind::kGetItem: {
      Value target = eval(*e.children[0], scope);
      return get_item(target, eval(*e.children[1], scope));
    }
    case ExprKind::kSlice: return eval_slice(e, scope);
    case ExprKind::kCall: {
      Value callee = eval(*e.children[0], scope);
      require_defined(callee);
      TACHYON_CHECK(callee.kind == Kind::kFunction) << "'" << type_name(callee) << "' object is not callable";
      return (*callee.function)(eval_args(e, scope));
    }
    case ExprKind::kFilter: {
      Value operand = eval(*e.children[0], scope);
      return apply_filter(e.name, operand, eval_args(e, scope));
    }
    case ExprKind::kTest: {
      Value operand = eval(*e.children[0], scope);
      return Value::from_bool(apply_test(e.name, operand, eval_args(e, scope)) != e.negated);
    }
    case ExprKind::kUnary: return unary_op(e.name, eval(*e.children[0], scope));
    case ExprKind::kNot: return Value::from_bool(!truthy(eval(*e.children[0], scope)));
    case ExprKind::kBinary: {
      Value left = eval(*e.children[0], scope);
      return binary_op(e.name, left, eval(*e.children[1], scope));
    }
    case ExprKind::kAnd: {
      Value left = eval(*e.children[0], scope);
      return truthy(left) ? eval(*e.children[1], scope) : left;
    }
    case ExprKind::kOr: {
      Value left = eval(*e.children[0], scope);
      return truthy(left) ? left : eval(*e.children[1], scope);
    }
    case ExprKind::kCompare: return eval_compare(e, scope);
    case ExprKind::kCondition:
      if (truthy(eval(*e.children[1], scope))) return eval(*e.children[0], scope);
      return e.children[2] ? eval(*e.children[2], scope) : Value::undefined("conditional had no else branch");
  }
  return Value::none();
}

}  // namespace tachyon::tokenizer::jinja
