// Python operator semantics for template values; see operators.h.
#include "tachyon/tokenizer/jinja/operators.h"

#include <cctype>
#include <cmath>
#include <cstdio>

#include "tachyon/base/check.h"
#include "tachyon/tokenizer/jinja/py_string.h"

namespace tachyon::tokenizer::jinja {
namespace {

[[noreturn]] void unsupported(const std::string& op, const Value& a, const Value& b) {
  require_defined(a);
  require_defined(b);
  TACHYON_FAIL() << "unsupported operand type(s) for " << op << ": '" << type_name(a) << "' and '"
                 << type_name(b) << "'";
  throw;  // unreachable: the failure above throws
}

int64_t floor_div(int64_t a, int64_t b) {
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}

Value repeat(const Value& seq, int64_t times) {
  if (seq.is_string()) {
    std::string out;
    for (int64_t i = 0; i < times; ++i) out += seq.text;
    return Value::from_string(std::move(out));
  }
  ValueList out;
  for (int64_t i = 0; i < times; ++i) out.insert(out.end(), seq.list->begin(), seq.list->end());
  return Value::from_list(std::move(out), seq.is_tuple);
}

// Python's printf-style `'fmt' % args` for the conversions templates use: %s %r %d %i %f %%,
// with an optional precision for %f ("%.2f").
Value percent_format(const std::string& fmt, const Value& args) {
  ValueList values = args.kind == Kind::kList && args.is_tuple ? *args.list : ValueList{args};
  size_t next = 0;
  std::string out;
  for (size_t i = 0; i < fmt.size(); ++i) {
    if (fmt[i] != '%') {
      out += fmt[i];
      continue;
    }
    TACHYON_CHECK(i + 1 < fmt.size()) << "incomplete format in '" << fmt << "'";
    if (fmt[i + 1] == '%') {
      out += '%';
      ++i;
      continue;
    }
    int precision = -1;
    size_t j = i + 1;
    if (fmt[j] == '.') {
      precision = 0;
      for (++j; j < fmt.size() && std::isdigit(static_cast<unsigned char>(fmt[j])); ++j) {
        precision = precision * 10 + (fmt[j] - '0');
      }
    }
    TACHYON_CHECK(j < fmt.size()) << "incomplete format in '" << fmt << "'";
    TACHYON_CHECK(next < values.size()) << "not enough arguments for format string '" << fmt << "'";
    const Value& v = values[next++];
    char conversion = fmt[j];
    if (conversion == 's') {
      out += to_str(v);
    } else if (conversion == 'r') {
      out += repr(v);
    } else if (conversion == 'd' || conversion == 'i') {
      TACHYON_CHECK(v.is_number()) << "%" << conversion << " format: a real number is required, not " << type_name(v);
      out += std::to_string(v.kind == Kind::kFloat ? static_cast<int64_t>(v.number) : v.as_int());
    } else if (conversion == 'f') {
      TACHYON_CHECK(v.is_number()) << "%f format: a real number is required, not " << type_name(v);
      char buf[64];
      std::snprintf(buf, sizeof(buf), "%.*f", precision < 0 ? 6 : precision, v.as_double());
      out += buf;
    } else {
      TACHYON_FAIL() << "unsupported format character '" << conversion << "' in '" << fmt << "'";
    }
    i = j;
  }
  TACHYON_CHECK(next == values.size()) << "not all arguments converted during string formatting";
  return Value::from_string(std::move(out));
}

Value arithmetic(const std::string& op, const Value& a, const Value& b) {
  if (!a.is_number() || !b.is_number()) unsupported(op, a, b);
  bool integral = a.is_integral() && b.is_integral();
  if (op == "/") {
    TACHYON_CHECK(b.as_double() != 0.0) << "division by zero";
    return Value::from_float(a.as_double() / b.as_double());
  }
  if (integral) {
    int64_t x = a.as_int(), y = b.as_int();
    if (op == "+") return Value::from_int(x + y);
    if (op == "-") return Value::from_int(x - y);
    if (op == "*") return Value::from_int(x * y);
    TACHYON_CHECK(op == "**" || y != 0) << "integer division or modulo by zero";
    if (op == "//") return Value::from_int(floor_div(x, y));
    if (op == "%") return Value::from_int(x - floor_div(x, y) * y);
    if (y < 0) return Value::from_float(std::pow(static_cast<double>(x), static_cast<double>(y)));
    int64_t r = 1;
    for (int64_t i = 0; i < y; ++i) r *= x;
    return Value::from_int(r);
  }
  double x = a.as_double(), y = b.as_double();
  if (op == "+") return Value::from_float(x + y);
  if (op == "-") return Value::from_float(x - y);
  if (op == "*") return Value::from_float(x * y);
  if (op == "**") return Value::from_float(std::pow(x, y));
  TACHYON_CHECK(y != 0.0) << "float division or modulo by zero";
  if (op == "//") return Value::from_float(std::floor(x / y));
  double m = std::fmod(x, y);
  if (m != 0 && ((m < 0) != (y < 0))) m += y;
  return Value::from_float(m);
}

// Python ordering for < > <= >=: numbers, strings (code point order = UTF-8 byte order), lists.
int order(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_integral() && b.is_integral()) return a.as_int() < b.as_int() ? -1 : a.as_int() > b.as_int();
    return a.as_double() < b.as_double() ? -1 : a.as_double() > b.as_double();
  }
  if (a.is_string() && b.is_string()) return a.text.compare(b.text) < 0 ? -1 : a.text != b.text;
  if (a.kind == Kind::kList && b.kind == Kind::kList) {
    size_t n = std::min(a.list->size(), b.list->size());
    for (size_t i = 0; i < n; ++i) {
      if (!equals((*a.list)[i], (*b.list)[i])) return order((*a.list)[i], (*b.list)[i]);
    }
    return a.list->size() < b.list->size() ? -1 : a.list->size() > b.list->size();
  }
  require_defined(a);
  require_defined(b);
  TACHYON_FAIL() << "'<' not supported between instances of '" << type_name(a) << "' and '"
                 << type_name(b) << "'";
  return 0;
}

}  // namespace

Value binary_op(const std::string& op, const Value& a, const Value& b) {
  if (op == "~") return Value::from_string(to_str(a) + to_str(b));
  if (op == "+") {
    if (a.is_string() && b.is_string()) return Value::from_string(a.text + b.text);
    if (a.kind == Kind::kList && b.kind == Kind::kList && a.is_tuple == b.is_tuple) {
      ValueList out = *a.list;
      out.insert(out.end(), b.list->begin(), b.list->end());
      return Value::from_list(std::move(out), a.is_tuple);
    }
  }
  if (op == "*") {
    bool a_seq = a.is_string() || a.kind == Kind::kList;
    bool b_seq = b.is_string() || b.kind == Kind::kList;
    if (a_seq && b.is_integral()) return repeat(a, b.as_int());
    if (b_seq && a.is_integral()) return repeat(b, a.as_int());
  }
  if (op == "%" && a.is_string()) return percent_format(a.text, b);
  return arithmetic(op, a, b);
}

Value unary_op(const std::string& op, const Value& a) {
  require_defined(a);
  TACHYON_CHECK(a.is_number()) << "bad operand type for unary " << op << ": '" << type_name(a) << "'";
  if (op == "+") return a.kind == Kind::kBool ? Value::from_int(a.as_int()) : a;
  if (a.kind == Kind::kFloat) return Value::from_float(-a.number);
  return Value::from_int(-a.as_int());
}

bool compare(const std::string& op, const Value& a, const Value& b) {
  if (op == "==") return equals(a, b);
  if (op == "!=") return !equals(a, b);
  if (op == "in") return contains(b, a);
  if (op == "notin") return !contains(b, a);
  int c = order(a, b);
  if (op == "<") return c < 0;
  if (op == ">") return c > 0;
  if (op == "<=") return c <= 0;
  return c >= 0;
}

bool contains(const Value& container, const Value& item) {
  switch (container.kind) {
    case Kind::kUndefined: return false;  // jinja2's Undefined iterates as empty
    case Kind::kString:
      require_defined(item);
      TACHYON_CHECK(item.is_string()) << "'in <string>' requires string as left operand, not "
                                      << type_name(item);
      return container.text.find(item.text) != std::string::npos;
    case Kind::kList:
      for (const Value& v : *container.list) {
        if (equals(v, item)) return true;
      }
      return false;
    case Kind::kDict:
    case Kind::kObject:
      return item.is_string() && container.dict->find(item.text) != nullptr;
    default:
      TACHYON_FAIL() << "argument of type '" << type_name(container) << "' is not iterable";
  }
  return false;
}

Value get_item(const Value& obj, const Value& key) {
  require_defined(obj);
  if (obj.kind == Kind::kDict && key.is_string()) {
    const Value* v = obj.dict->find(key.text);
    if (v != nullptr) return *v;
    return Value::undefined("'dict object' has no attribute '" + key.text + "'");
  }
  if ((obj.kind == Kind::kList || obj.is_string()) && key.is_integral()) {
    int64_t n = obj.is_string() ? static_cast<int64_t>(utf8_length(obj.text))
                                : static_cast<int64_t>(obj.list->size());
    int64_t i = key.as_int() < 0 ? key.as_int() + n : key.as_int();
    if (i < 0 || i >= n) return Value::undefined(type_name(obj) + " index out of range");
    if (obj.kind == Kind::kList) return (*obj.list)[i];
    return Value::from_string(encode_utf8(decode_utf8(obj.text).substr(i, 1)));
  }
  if (key.is_string()) return get_attribute(obj, key.text);
  return Value::undefined("'" + type_name(obj) + " object' has no item " + repr(key));
}

Value slice(const Value& obj, std::optional<int64_t> start, std::optional<int64_t> stop,
            std::optional<int64_t> step) {
  require_defined(obj);
  if (obj.is_string()) {
    std::u32string s = decode_utf8(obj.text);
    std::u32string out;
    for (int64_t i : slice_indices(static_cast<int64_t>(s.size()), start, stop, step)) out += s[i];
    return Value::from_string(encode_utf8(out));
  }
  TACHYON_CHECK(obj.kind == Kind::kList) << "'" << type_name(obj) << "' object is not subscriptable";
  ValueList out;
  for (int64_t i : slice_indices(static_cast<int64_t>(obj.list->size()), start, stop, step)) {
    out.push_back((*obj.list)[i]);
  }
  return Value::from_list(std::move(out), obj.is_tuple);
}

ValueList iterate(const Value& v) {
  switch (v.kind) {
    case Kind::kUndefined: return {};
    case Kind::kList: return *v.list;
    case Kind::kDict: {
      ValueList keys;
      for (const auto& [k, item] : v.dict->items) keys.push_back(Value::from_string(k));
      return keys;
    }
    case Kind::kString: {
      ValueList chars;
      for (char32_t c : decode_utf8(v.text)) chars.push_back(Value::from_string(encode_utf8(std::u32string(1, c))));
      return chars;
    }
    default: TACHYON_FAIL() << "'" << type_name(v) << "' object is not iterable";
  }
  return {};
}

}  // namespace tachyon::tokenizer::jinja
