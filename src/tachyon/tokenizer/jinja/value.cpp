// Value construction and the Python object protocol (truthiness, str, repr, ==) that Jinja
// output and comparisons rely on. See value.h.
#include "tachyon/tokenizer/jinja/value.h"

#include <charconv>
#include <cmath>
#include <cstdio>

#include "tachyon/base/check.h"
#include "tachyon/tokenizer/jinja/py_string.h"

namespace tachyon::tokenizer::jinja {

const Value* ValueDict::find(std::string_view key) const {
  for (const auto& [k, v] : items) {
    if (k == key) return &v;
  }
  return nullptr;
}

void ValueDict::set(const std::string& key, Value value) {
  for (auto& [k, v] : items) {
    if (k == key) {
      v = std::move(value);
      return;
    }
  }
  items.emplace_back(key, std::move(value));
}

const Value* CallArgs::get(size_t position, std::string_view name) const {
  if (position < positional.size()) return &positional[position];
  for (const auto& [k, v] : keyword) {
    if (k == name) return &v;
  }
  return nullptr;
}

Value Value::undefined(std::string why) {
  Value v;
  v.text = std::move(why);
  return v;
}

Value Value::none() {
  Value v;
  v.kind = Kind::kNone;
  return v;
}

Value Value::from_bool(bool value) {
  Value v;
  v.kind = Kind::kBool;
  v.boolean = value;
  return v;
}

Value Value::from_int(int64_t value) {
  Value v;
  v.kind = Kind::kInt;
  v.integer = value;
  return v;
}

Value Value::from_float(double value) {
  Value v;
  v.kind = Kind::kFloat;
  v.number = value;
  return v;
}

Value Value::from_string(std::string value) {
  Value v;
  v.kind = Kind::kString;
  v.text = std::move(value);
  return v;
}

Value Value::from_list(ValueList items, bool is_tuple) {
  Value v;
  v.kind = Kind::kList;
  v.list = std::make_shared<const ValueList>(std::move(items));
  v.is_tuple = is_tuple;
  return v;
}

Value Value::from_dict(ValueDict dict) {
  Value v;
  v.kind = Kind::kDict;
  v.dict = std::make_shared<ValueDict>(std::move(dict));
  return v;
}

Value Value::make_object(std::string type_name, ValueDict attributes) {
  Value v;
  v.kind = Kind::kObject;
  v.text = std::move(type_name);
  v.dict = std::make_shared<ValueDict>(std::move(attributes));
  return v;
}

Value Value::from_function(std::string name, Function function) {
  Value v;
  v.kind = Kind::kFunction;
  v.text = std::move(name);
  v.function = std::make_shared<const Function>(std::move(function));
  return v;
}

Value Value::from_json(const nlohmann::ordered_json& json) {
  switch (json.type()) {
    case nlohmann::ordered_json::value_t::null: return none();
    case nlohmann::ordered_json::value_t::boolean: return from_bool(json.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer: return from_int(json.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_unsigned: {
      uint64_t u = json.get<uint64_t>();
      TACHYON_CHECK(u <= static_cast<uint64_t>(INT64_MAX)) << "integer " << u << " is too large";
      return from_int(static_cast<int64_t>(u));
    }
    case nlohmann::ordered_json::value_t::number_float: return from_float(json.get<double>());
    case nlohmann::ordered_json::value_t::string: return from_string(json.get<std::string>());
    case nlohmann::ordered_json::value_t::array: {
      ValueList items;
      items.reserve(json.size());
      for (const auto& item : json) items.push_back(from_json(item));
      return from_list(std::move(items));
    }
    case nlohmann::ordered_json::value_t::object: {
      ValueDict dict;
      dict.items.reserve(json.size());
      for (const auto& [k, item] : json.items()) dict.items.emplace_back(k, from_json(item));
      return from_dict(std::move(dict));
    }
    default: TACHYON_FAIL() << "unsupported JSON value (binary or discarded) in template input";
  }
  return none();
}

bool truthy(const Value& v) {
  switch (v.kind) {
    case Kind::kUndefined:
    case Kind::kNone: return false;
    case Kind::kBool: return v.boolean;
    case Kind::kInt: return v.integer != 0;
    case Kind::kFloat: return v.number != 0.0;
    case Kind::kString: return !v.text.empty();
    case Kind::kList: return !v.list->empty();
    case Kind::kDict: return !v.dict->items.empty();
    default: return true;
  }
}

std::string format_float(double value) {
  if (std::isnan(value)) return "nan";
  if (std::isinf(value)) return value > 0 ? "inf" : "-inf";
  // Shortest round-trip digits in scientific form, then laid out as Python's repr does:
  // fixed notation for exponents in [-4, 16), scientific otherwise.
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), value, std::chars_format::scientific);
  std::string sci(buf, end);
  bool negative = sci[0] == '-';
  if (negative) sci.erase(0, 1);
  size_t e_pos = sci.find('e');
  std::string digits = sci.substr(0, e_pos);
  int exponent = std::stoi(sci.substr(e_pos + 1));
  digits.erase(std::remove(digits.begin(), digits.end(), '.'), digits.end());
  std::string out = negative ? "-" : "";
  if (exponent >= -4 && exponent < 16) {
    if (exponent < 0) {
      out += "0." + std::string(-exponent - 1, '0') + digits;
    } else if (static_cast<int>(digits.size()) <= exponent + 1) {
      out += digits + std::string(exponent + 1 - digits.size(), '0') + ".0";
    } else {
      out += digits.substr(0, exponent + 1) + "." + digits.substr(exponent + 1);
    }
    return out;
  }
  out += digits.substr(0, 1);
  if (digits.size() > 1) out += "." + digits.substr(1);
  char exp_buf[16];
  std::snprintf(exp_buf, sizeof(exp_buf), "e%c%02d", exponent < 0 ? '-' : '+', std::abs(exponent));
  return out + exp_buf;
}

namespace {

std::string repr_string(const std::string& s) {
  bool has_single = s.find('\'') != std::string::npos;
  bool has_double = s.find('"') != std::string::npos;
  char quote = has_single && !has_double ? '"' : '\'';
  std::string out(1, quote);
  for (char32_t c : decode_utf8(s)) {
    if (c == static_cast<char32_t>(quote) || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c == 0x7F || (c >= 0x80 && c <= 0xA0) || c == 0xAD) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\x%02x", static_cast<unsigned>(c));
      out += buf;
    } else {
      append_utf8(out, c);
    }
  }
  out += quote;
  return out;
}

}  // namespace

std::string repr(const Value& v) {
  switch (v.kind) {
    case Kind::kString: return repr_string(v.text);
    case Kind::kList: {
      std::string out = v.is_tuple ? "(" : "[";
      for (size_t i = 0; i < v.list->size(); ++i) {
        if (i > 0) out += ", ";
        out += repr((*v.list)[i]);
      }
      if (v.is_tuple && v.list->size() == 1) out += ",";
      return out + (v.is_tuple ? ")" : "]");
    }
    case Kind::kDict: {
      std::string out = "{";
      bool first = true;
      for (const auto& [k, item] : v.dict->items) {
        if (!first) out += ", ";
        first = false;
        out += repr_string(k) + ": " + repr(item);
      }
      return out + "}";
    }
    default: return to_str(v);
  }
}

std::string to_str(const Value& v) {
  switch (v.kind) {
    case Kind::kUndefined: return "";
    case Kind::kNone: return "None";
    case Kind::kBool: return v.boolean ? "True" : "False";
    case Kind::kInt: return std::to_string(v.integer);
    case Kind::kFloat: return format_float(v.number);
    case Kind::kString: return v.text;
    case Kind::kList:
    case Kind::kDict: return repr(v);
    case Kind::kObject: {
      std::string out = "<" + v.text + " ";
      for (const auto& [k, item] : v.dict->items) out += k + "=" + repr(item) + " ";
      return out + ">";
    }
    case Kind::kFunction: return "<function " + v.text + ">";
  }
  return "";
}

std::string type_name(const Value& v) {
  switch (v.kind) {
    case Kind::kUndefined: return "undefined";
    case Kind::kNone: return "NoneType";
    case Kind::kBool: return "bool";
    case Kind::kInt: return "int";
    case Kind::kFloat: return "float";
    case Kind::kString: return "str";
    case Kind::kList: return v.is_tuple ? "tuple" : "list";
    case Kind::kDict: return "dict";
    case Kind::kObject: return v.text;
    case Kind::kFunction: return "function";
  }
  return "?";
}

bool equals(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_integral() && b.is_integral()) return a.as_int() == b.as_int();
    return a.as_double() == b.as_double();
  }
  if (a.kind != b.kind) return false;
  switch (a.kind) {
    case Kind::kUndefined:
    case Kind::kNone: return true;
    case Kind::kString: return a.text == b.text;
    case Kind::kList: {
      if (a.list->size() != b.list->size() || a.is_tuple != b.is_tuple) return false;
      for (size_t i = 0; i < a.list->size(); ++i) {
        if (!equals((*a.list)[i], (*b.list)[i])) return false;
      }
      return true;
    }
    case Kind::kDict: {
      if (a.dict->items.size() != b.dict->items.size()) return false;
      for (const auto& [k, item] : a.dict->items) {
        const Value* other = b.dict->find(k);
        if (other == nullptr || !equals(item, *other)) return false;
      }
      return true;
    }
    default: return a.dict == b.dict && a.function == b.function;  // identity
  }
}

void require_defined(const Value& value) {
  if (value.is_undefined()) {
    TACHYON_FAIL() << (value.text.empty() ? std::string("value is undefined") : value.text);
  }
}

}  // namespace tachyon::tokenizer::jinja
