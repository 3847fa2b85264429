// Incremental JSON scanning for the tool-call parsers: where does a JSON value that is still
// being generated end, and what do we know of a call object {"name": ..., "arguments": ...} so
// far? The parsers re-scan a call's text from its start on every new piece (a call is a few
// kilobytes at most), so these are plain functions of the text with no state; that is what makes
// a call parse the same whatever the chunking.
//
// Decision: the scan checks structure (brackets, strings, escapes, separators), not every token
// of the grammar; a value that scans complete is checked with a real parser where it matters
// (the arguments of a finished call).
// Tests: tests/unit/test_tool_parsers.cpp (ctest -R unit.tool_parsers).
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tachyon::server {

enum class ScanStatus { kComplete, kIncomplete, kInvalid };

struct JsonValueScan {
  ScanStatus status = ScanStatus::kIncomplete;
  size_t end = 0;  // one past the value when complete; text.size() when incomplete
};

// The value starting at text[begin] (no leading whitespace). A number or literal at the very end
// of the text is incomplete (more digits may follow).
JsonValueScan scan_json_value(std::string_view text, size_t begin);

// A call object starting at text[begin] ('{'), with the name under one of `name_keys` (a string)
// and the arguments under one of `argument_keys` (any value).
struct CallObjectScan {
  ScanStatus status = ScanStatus::kIncomplete;
  size_t end = 0;                   // one past the '}' when complete
  std::optional<std::string> name;  // once its string is complete
  size_t arguments_begin = std::string_view::npos;  // where the arguments value starts, once seen
  size_t arguments_end = std::string_view::npos;    // one past it when complete
};
CallObjectScan scan_call_object(std::string_view text, size_t begin, const std::vector<std::string_view>& name_keys,
                                const std::vector<std::string_view>& argument_keys);

size_t skip_whitespace(std::string_view text, size_t pos);
bool is_json_whitespace(char c);
// `text` without the JSON whitespace at either end.
std::string trim_json_whitespace(std::string_view text);

// Decodes a complete JSON string literal ("..." with escapes); nullopt when it is not one.
std::optional<std::string> decode_json_string(std::string_view literal);

// Length of the longest suffix of `text` that is a proper prefix of `marker`: bytes to hold back
// because the marker may be arriving.
size_t partial_marker_suffix(std::string_view text, std::string_view marker);

}  // namespace tachyon::server
