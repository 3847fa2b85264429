// Jinja filters (`value | name(args)`) and tests (`value is name(args)`), with jinja2's
// semantics. `tojson` is transformers' override: json.dumps(value, ensure_ascii=False,
// indent=None, separators=None, sort_keys=False), so its first positional argument is
// ensure_ascii, not indent. Unknown names throw an Error naming them.
#pragma once

#include <string>

#include "tachyon/tokenizer/jinja/value.h"

namespace tachyon::tokenizer::jinja {

Value apply_filter(const std::string& name, const Value& operand, const CallArgs& args);
bool apply_test(const std::string& name, const Value& operand, const CallArgs& args);
// jinja2's attribute path for filters: "a.b.0" looks up a, then b, then index 0.
Value attribute_path(const Value& value, const std::string& path);

}  // namespace tachyon::tokenizer::jinja
