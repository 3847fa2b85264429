// Jinja tests (`x is defined`, `x is none`, `x is string`, `x is divisibleby 3`, ...), declared
// in filters.h. Their results follow jinja2/tests.py, e.g. booleans are numbers but not
// integers, and strings are sequences and iterables.
#include "tachyon/base/check.h"
#include "tachyon/tokenizer/jinja/filters.h"
#include "tachyon/tokenizer/jinja/operators.h"
#include "tachyon/tokenizer/jinja/py_string.h"

namespace tachyon::tokenizer::jinja {
namespace {

const Value& test_arg(const CallArgs& args, const std::string& test) {
  const Value* v = args.get(0, "other");
  TACHYON_CHECK(v != nullptr) << "test '" << test << "' needs an argument";
  return *v;
}

}  // namespace

bool apply_test(const std::string& name, const Value& x, const CallArgs& args) {
  if (name == "defined") return !x.is_undefined();
  if (name == "undefined") return x.is_undefined();
  if (name == "none") return x.is_none();
  if (name == "boolean") return x.kind == Kind::kBool;
  if (name == "true") return x.kind == Kind::kBool && x.boolean;
  if (name == "false") return x.kind == Kind::kBool && !x.boolean;
  if (name == "integer") return x.kind == Kind::kInt;
  if (name == "float") return x.kind == Kind::kFloat;
  if (name == "number") return x.is_number();
  if (name == "string") return x.is_string();
  if (name == "mapping") return x.kind == Kind::kDict;
  if (name == "sequence" || name == "iterable") {
    return x.is_string() || x.kind == Kind::kList || x.kind == Kind::kDict;
  }
  if (name == "callable") return x.kind == Kind::kFunction;
  if (name == "lower") return x.is_string() && py_lower(x.text) == x.text;
  if (name == "upper") return x.is_string() && py_upper(x.text) == x.text;
  if (name == "odd" || name == "even") {
    require_defined(x);
    TACHYON_CHECK(x.is_integral()) << "test '" << name << "' needs an integer, got " << type_name(x);
    return (x.as_int() % 2 != 0) == (name == "odd");
  }
  if (name == "divisibleby") {
    const Value& n = test_arg(args, name);
    TACHYON_CHECK(x.is_integral() && n.is_integral() && n.as_int() != 0)
        << "divisibleby needs non-zero integers, got " << type_name(x) << " and " << type_name(n);
    return x.as_int() % n.as_int() == 0;
  }
  if (name == "sameas") {
    const Value& other = test_arg(args, name);
    if (x.kind != other.kind) return false;
    return x.kind == Kind::kNone || x.kind == Kind::kUndefined ? true : equals(x, other);
  }
  static const char* kCompare[][2] = {{"eq", "=="}, {"equalto", "=="}, {"==", "=="}, {"ne", "!="},
                                      {"!=", "!="}, {"lt", "<"},  {"lessthan", "<"}, {"<", "<"},
                                      {"le", "<="}, {"<=", "<="}, {"gt", ">"}, {"greaterthan", ">"},
                                      {">", ">"},   {"ge", ">="}, {">=", ">="}, {"in", "in"}};
  for (const auto& [test, op] : kCompare) {
    if (name == test) return compare(op, x, test_arg(args, name));
  }
  if (name == "filter" || name == "test") {
    TACHYON_FAIL() << "test '" << name << "' is not supported";
  }
  TACHYON_FAIL() << "no test named '" << name << "'";
  return false;
}

}  // namespace tachyon::tokenizer::jinja
