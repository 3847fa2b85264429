// The string formats a JSON schema's "format" may name (date, time, date-time, uuid, ipv4, ipv6,
// email, uri), each as a regex of the strings every validator takes, bounded where the format
// allows so that an output always ends.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace tachyon::structured {

// A format's regex and the lengths of its strings (max_length -1: unbounded), so that a schema's
// minLength / maxLength beside it are accepted when every string of the format meets them.
struct StringFormat {
  std::string regex;
  int64_t min_length, max_length;
};

// nullptr for a format not supported.
const StringFormat* find_string_format(std::string_view name);

// "date, date-time, ...": for messages.
std::string supported_string_formats();

}  // namespace tachyon::structured
