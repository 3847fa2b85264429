// Python operator semantics for template values: arithmetic, comparison, `in`, indexing,
// slicing, iteration and attribute lookup. jinja2 evaluates these with Python's own operators,
// so the rules (and the errors: 'NoneType' + 'str' fails, Undefined + 'str' fails,
// Undefined ~ 'str' does not) are Python's. Attribute lookup follows jinja2's sandbox: `a.b`
// on a dict tries the dict method `b` first, then the key; `a['b']` the other way round.
#pragma once

#include <optional>
#include <string>

#include "tachyon/tokenizer/jinja/value.h"

namespace tachyon::tokenizer::jinja {

// op: + - * / // % ** ~
Value binary_op(const std::string& op, const Value& a, const Value& b);
// op: - +
Value unary_op(const std::string& op, const Value& a);
// op: == != < > <= >= in notin
bool compare(const std::string& op, const Value& a, const Value& b);
// Python `item in container`.
bool contains(const Value& container, const Value& item);
// obj[key]; a missing key or index gives Undefined, as in jinja2.
Value get_item(const Value& obj, const Value& key);
// obj[start:stop:step] on strings (by code point) and lists.
Value slice(const Value& obj, std::optional<int64_t> start, std::optional<int64_t> stop,
            std::optional<int64_t> step);
// The items a for loop visits: list elements, dict keys, string characters; Undefined is empty.
ValueList iterate(const Value& v);
// obj.name: methods of str and dict, dict keys, namespace/loop attributes; else Undefined.
Value get_attribute(const Value& obj, const std::string& name);

}  // namespace tachyon::tokenizer::jinja
