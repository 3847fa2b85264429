// A Python literal as JSON text: what a model writes for a structured tool argument when its chat
// template showed it values through Jinja's `| string` (Python's str()): {'a': [1, True, None]}
// for {"a": [1, true, null]}. Qwen3-Coder's template renders a dict or list argument that way, so
// the model answers in kind (server/tool_parser_qwen3_coder.cpp).
//
// Read: dicts, lists and tuples (as arrays), strings in single or double quotes with Python's
// escapes (\n \t \r \\ \' \" \xhh \uhhhh \Uhhhhhhhh), integers, floats (and their exponents),
// True, False, None; nesting up to 64 levels. A dict key must be a string, as JSON's. Anything
// else (sets, bytes, expressions, NaN) is no literal here: nullopt, and the caller keeps the text.
// Tests: tests/unit/test_tool_parsers.cpp (PythonLiteral.*).
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace tachyon::server {

std::optional<std::string> python_literal_as_json(std::string_view text);

}  // namespace tachyon::server
