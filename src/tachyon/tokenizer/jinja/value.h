// Value: the dynamic type of the Jinja interpreter, modelled on the Python objects that jinja2
// hands to a chat template (str, int, float, bool, None, list, tuple, dict, Undefined, callables).
// The one non-obvious decision: lists and dicts are shared and immutable once built, as in
// transformers' ImmutableSandboxedEnvironment; only namespace() objects (kObject) are mutated,
// through `{% set ns.x = ... %}`. Dicts keep insertion order because tojson must print keys in
// the order the request gave them. Tested by tests/unit/test_jinja_values.cpp.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace tachyon::tokenizer::jinja {

enum class Kind { kUndefined, kNone, kBool, kInt, kFloat, kString, kList, kDict, kObject, kFunction };

struct Value;
using ValueList = std::vector<Value>;

// Ordered string-keyed map; linear lookup is fine for chat messages and tool schemas.
struct ValueDict {
  std::vector<std::pair<std::string, Value>> items;

  const Value* find(std::string_view key) const;
  void set(const std::string& key, Value value);
};

// Arguments of a call, filter or test, after evaluation.
struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;

  // The argument at `position`, else the keyword `name`, else nullptr.
  const Value* get(size_t position, std::string_view name) const;
};

using Function = std::function<Value(const CallArgs&)>;

struct Value {
  Kind kind = Kind::kUndefined;
  bool boolean = false;  // kBool
  int64_t integer = 0;   // kInt
  double number = 0;     // kFloat
  // kString: the UTF-8 text. kUndefined: why it is undefined ("'x' is undefined"), for errors.
  // kObject: the type name ("namespace", "loop"). kFunction: the function's name.
  std::string text;
  std::shared_ptr<const ValueList> list;  // kList
  bool is_tuple = false;                  // kList: prints as (a, b) instead of [a, b]
  std::shared_ptr<ValueDict> dict;        // kDict (never mutated once built) and kObject (mutable)
  std::shared_ptr<const Function> function;  // kFunction

  static Value undefined(std::string why);
  static Value none();
  static Value from_bool(bool value);
  static Value from_int(int64_t value);
  static Value from_float(double value);
  static Value from_string(std::string value);
  static Value from_list(ValueList items, bool is_tuple = false);
  static Value from_dict(ValueDict dict);
  static Value make_object(std::string type_name, ValueDict attributes = {});
  static Value from_function(std::string name, Function function);
  static Value from_json(const nlohmann::ordered_json& json);

  bool is_undefined() const { return kind == Kind::kUndefined; }
  bool is_none() const { return kind == Kind::kNone; }
  bool is_string() const { return kind == Kind::kString; }
  bool is_number() const { return kind == Kind::kInt || kind == Kind::kFloat || kind == Kind::kBool; }
  bool is_integral() const { return kind == Kind::kInt || kind == Kind::kBool; }
  int64_t as_int() const { return kind == Kind::kBool ? (boolean ? 1 : 0) : integer; }
  double as_double() const { return kind == Kind::kFloat ? number : static_cast<double>(as_int()); }
};

// Python truthiness; Undefined is falsy.
bool truthy(const Value& value);
// Python str(): None -> "None", True -> "True", 1.0 -> "1.0", lists as repr, Undefined -> "".
std::string to_str(const Value& value);
// Python repr(): strings quoted, used inside printed lists and dicts.
std::string repr(const Value& value);
// Python type name for error messages: "str", "int", "NoneType", "dict", "undefined", ...
std::string type_name(const Value& value);
// Python ==: 1 == 1.0 == True; lists and dicts compare element-wise; Undefined equals Undefined.
bool equals(const Value& a, const Value& b);
// Python float repr: shortest round-trip digits, "1.0", "1e+16", "1.5e-07", "inf", "nan".
std::string format_float(double value);
// Throws the "is undefined" error if `value` is Undefined; used where jinja2 raises
// UndefinedError (arithmetic, attribute of undefined, calling it).
void require_defined(const Value& value);

}  // namespace tachyon::tokenizer::jinja
