// Python json.dumps for template values: the `tojson` filter as transformers defines it
// (ensure_ascii=False, key order kept, separators ", " and ": ", or "," and ": " with an indent).
// Matching Python byte for byte matters because tool schemas and tool-call arguments are
// printed into the prompt with it.
#pragma once

#include <optional>
#include <string>

#include "tachyon/tokenizer/jinja/value.h"

namespace tachyon::tokenizer::jinja {

struct JsonDumpOptions {
  bool ensure_ascii = false;
  std::optional<std::string> indent;  // unset: one line; else the string repeated per level
  std::string item_separator = ", ";  // Python turns this into "," when indent is set
  std::string key_separator = ": ";
  bool sort_keys = false;
};

// Throws tachyon::Error for values JSON cannot hold (undefined, functions, namespaces).
std::string json_dump(const Value& value, const JsonDumpOptions& options);

}  // namespace tachyon::tokenizer::jinja
