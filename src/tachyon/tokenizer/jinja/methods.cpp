// Attribute lookup and the Python methods templates call on values: str.startswith, .split,
// .strip, ..., dict.get/.items/.keys/.values. Declared in operators.h (get_attribute).
// Mutating methods (list.append, dict.update) are absent on purpose: transformers renders in
// an ImmutableSandboxedEnvironment where they raise.
#include <optional>

#include "tachyon/base/check.h"
#include "tachyon/tokenizer/jinja/operators.h"
#include "tachyon/tokenizer/jinja/py_string.h"

namespace tachyon::tokenizer::jinja {
namespace {

std::optional<std::string> optional_string(const CallArgs& args, size_t pos, const char* name,
                                           const char* method) {
  const Value* v = args.get(pos, name);
  if (v == nullptr || v->is_none()) return std::nullopt;
  TACHYON_CHECK(v->is_string()) << method << "(): " << name << " must be a string, not "
                                << type_name(*v);
  return v->text;
}

const std::string& string_arg(const CallArgs& args, size_t pos, const char* name, const char* method) {
  const Value* v = args.get(pos, name);
  TACHYON_CHECK(v != nullptr) << method << "() missing argument '" << name << "'";
  require_defined(*v);
  TACHYON_CHECK(v->is_string()) << method << "(): argument must be str, not " << type_name(*v);
  return v->text;
}

int64_t int_arg(const CallArgs& args, size_t pos, const char* name, int64_t fallback) {
  const Value* v = args.get(pos, name);
  if (v == nullptr || v->is_none()) return fallback;
  TACHYON_CHECK(v->is_integral()) << name << " must be an integer, not " << type_name(*v);
  return v->as_int();
}

Value string_list(const std::vector<std::string>& parts) {
  ValueList out;
  for (const auto& p : parts) out.push_back(Value::from_string(p));
  return Value::from_list(std::move(out));
}

// prefix may be a string or a tuple/list of strings, as in Python.
bool affix_match(const std::string& text, const Value& affix, bool prefix, const char* method) {
  if (affix.kind == Kind::kList) {
    for (const Value& a : *affix.list) {
      if (affix_match(text, a, prefix, method)) return true;
    }
    return false;
  }
  require_defined(affix);
  TACHYON_CHECK(affix.is_string()) << method << "() argument must be str or a tuple of str, not "
                                   << type_name(affix);
  return prefix ? starts_with(text, affix.text) : ends_with(text, affix.text);
}

Value string_method(const std::string& self, const std::string& name) {
  using Fn = Function;
  auto make = [&](Fn fn) { return Value::from_function("str." + name, std::move(fn)); };
  if (name == "startswith" || name == "endswith") {
    bool prefix = name == "startswith";
    return make([self, prefix](const CallArgs& a) {
      const Value* v = a.get(0, "prefix");
      TACHYON_CHECK(v != nullptr) << (prefix ? "startswith" : "endswith") << "() takes an argument";
      return Value::from_bool(affix_match(self, *v, prefix, prefix ? "startswith" : "endswith"));
    });
  }
  if (name == "split" || name == "rsplit") {
    bool right = name == "rsplit";
    return make([self, right](const CallArgs& a) {
      return string_list(py_split(self, optional_string(a, 0, "sep", "split"),
                                  int_arg(a, 1, "maxsplit", -1), right));
    });
  }
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    bool left = name != "rstrip", right = name != "lstrip";
    return make([self, left, right](const CallArgs& a) {
      return Value::from_string(py_strip(self, optional_string(a, 0, "chars", "strip"), left, right));
    });
  }
  if (name == "upper") return make([self](const CallArgs&) { return Value::from_string(py_upper(self)); });
  if (name == "lower") return make([self](const CallArgs&) { return Value::from_string(py_lower(self)); });
  if (name == "title") return make([self](const CallArgs&) { return Value::from_string(py_title(self)); });
  if (name == "capitalize") {
    return make([self](const CallArgs&) { return Value::from_string(py_capitalize(self)); });
  }
  if (name == "replace") {
    return make([self](const CallArgs& a) {
      return Value::from_string(py_replace(self, string_arg(a, 0, "old", "replace"),
                                           string_arg(a, 1, "new", "replace"), int_arg(a, 2, "count", -1)));
    });
  }
  if (name == "find" || name == "rfind" || name == "count") {
    return make([self, name](const CallArgs& a) {
      const std::string& sub = string_arg(a, 0, "sub", name.c_str());
      if (name == "count") {
        if (sub.empty()) return Value::from_int(static_cast<int64_t>(utf8_length(self)) + 1);
        int64_t n = 0;
        for (size_t p = self.find(sub); p != std::string::npos; p = self.find(sub, p + sub.size())) ++n;
        return Value::from_int(n);
      }
      size_t p = name == "find" ? self.find(sub) : self.rfind(sub);
      if (p == std::string::npos) return Value::from_int(-1);
      return Value::from_int(static_cast<int64_t>(utf8_length(std::string_view(self).substr(0, p))));
    });
  }
  if (name == "join") {
    return make([self](const CallArgs& a) {
      const Value* v = a.get(0, "iterable");
      TACHYON_CHECK(v != nullptr) << "join() takes an argument";
      std::string out;
      bool first = true;
      for (const Value& item : iterate(*v)) {
        TACHYON_CHECK(item.is_string()) << "join(): expected str instance, " << type_name(item) << " found";
        if (!first) out += self;
        first = false;
        out += item.text;
      }
      return Value::from_string(std::move(out));
    });
  }
  if (name == "isdigit" || name == "isalpha" || name == "isspace" || name == "isalnum") {
    return make([self, name](const CallArgs&) {
      std::u32string s = decode_utf8(self);
      bool ok = !s.empty();
      for (char32_t c : s) {
        bool digit = c >= '0' && c <= '9';
        bool alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
        if (name == "isdigit") ok = ok && digit;
        if (name == "isalpha") ok = ok && alpha;
        if (name == "isalnum") ok = ok && (alpha || digit);
        if (name == "isspace") ok = ok && py_isspace(c);
      }
      return Value::from_bool(ok);
    });
  }
  return Value::undefined("'str object' has no attribute '" + name + "'");
}

Value dict_method(const Value& self, const std::string& name) {
  auto dict = self.dict;
  if (name == "get") {
    return Value::from_function("dict.get", [dict](const CallArgs& a) {
      const Value* key = a.get(0, "key");
      TACHYON_CHECK(key != nullptr) << "get() takes at least one argument";
      const Value* v = key->is_string() ? dict->find(key->text) : nullptr;
      if (v != nullptr) return *v;
      const Value* fallback = a.get(1, "default");
      return fallback != nullptr ? *fallback : Value::none();
    });
  }
  if (name == "items" || name == "keys" || name == "values") {
    return Value::from_function("dict." + name, [dict, name](const CallArgs&) {
      ValueList out;
      for (const auto& [k, v] : dict->items) {
        if (name == "items") out.push_back(Value::from_list({Value::from_string(k), v}, true));
        if (name == "keys") out.push_back(Value::from_string(k));
        if (name == "values") out.push_back(v);
      }
      return Value::from_list(std::move(out));
    });
  }
  return Value::undefined("");
}

}  // namespace

Value get_attribute(const Value& obj, const std::string& name) {
  require_defined(obj);
  switch (obj.kind) {
    case Kind::kString: return string_method(obj.text, name);
    case Kind::kDict: {
      Value method = dict_method(obj, name);
      if (!method.is_undefined()) return method;
      const Value* v = obj.dict->find(name);
      if (v != nullptr) return *v;
      return Value::undefined("'dict object' has no attribute '" + name + "'");
    }
    case Kind::kObject: {
      const Value* v = obj.dict->find(name);
      if (v != nullptr) return *v;
      return Value::undefined("'" + obj.text + " object' has no attribute '" + name + "'");
    }
    default:
      return Value::undefined("'" + type_name(obj) + " object' has no attribute '" + name + "'");
  }
}

}  // namespace tachyon::tokenizer::jinja
