// Python str semantics on UTF-8 text: the string methods and filters that chat templates call
// (strip with a char set, split, replace, startswith, title, ...) and code-point indexing.
// Python counts and slices by code point, not byte, so "héllo"|length is 5 and "ab"[::-1]
// reverses characters; these helpers decode to UTF-32 where that matters.
// Case mapping (upper/lower/title) covers ASCII only; other characters pass unchanged.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tachyon::tokenizer::jinja {

std::u32string decode_utf8(std::string_view text);
std::string encode_utf8(std::u32string_view text);
void append_utf8(std::string& out, char32_t code_point);
size_t utf8_length(std::string_view text);

// str.isspace() for one code point (ASCII whitespace, \x1c-\x1f, \x85, \xa0, Unicode spaces).
bool py_isspace(char32_t c);

// str.strip / lstrip / rstrip; `chars` unset strips whitespace, else any code point in it.
std::string py_strip(std::string_view text, const std::optional<std::string>& chars, bool left,
                     bool right);
// str.split / rsplit; `sep` unset splits on whitespace runs and drops empty pieces.
std::vector<std::string> py_split(std::string_view text, const std::optional<std::string>& sep,
                                  int64_t maxsplit, bool from_right);
// str.replace; count < 0 replaces all.
std::string py_replace(std::string_view text, std::string_view old_text, std::string_view new_text,
                       int64_t count);
std::string py_upper(std::string_view text);
std::string py_lower(std::string_view text);
std::string py_capitalize(std::string_view text);
// Jinja's title filter: first letter of each word upper, the rest lower.
std::string py_title(std::string_view text);
bool starts_with(std::string_view text, std::string_view prefix);
bool ends_with(std::string_view text, std::string_view suffix);

// Python slice semantics: resolves start/stop/step against `length` into the picked indices.
std::vector<int64_t> slice_indices(int64_t length, std::optional<int64_t> start,
                                   std::optional<int64_t> stop, std::optional<int64_t> step);

}  // namespace tachyon::tokenizer::jinja
