// Chat paths -> Anthropic paths, and the field of a body nested too deep. See anthropic_field_paths.h.
#include "tachyon/server/anthropic_field_paths.h"

#include <vector>

namespace tachyon::server {
namespace {

// "tools[0].function.name" and "tools.0.function.name" -> {"tools", "0", "function", "name"}.
std::vector<std::string> segments_of(std::string_view path) {
  std::vector<std::string> segments;
  std::string current;
  for (char c : path) {
    if (c != '.' && c != '[' && c != ']') {
      current += c;
      continue;
    }
    if (!current.empty()) segments.push_back(std::move(current));
    current.clear();
  }
  if (!current.empty()) segments.push_back(std::move(current));
  return segments;
}

// `head` followed by segments[from...], joined with dots.
std::string joined(std::string head, const std::vector<std::string>& segments, size_t from) {
  for (size_t i = from; i < segments.size(); ++i) head += (head.empty() ? "" : ".") + segments[i];
  return head;
}

// The field that holds a value at `segments`: a tool_use input or a tool's input_schema (where
// deep nesting is the client's data), else the top-level field.
std::string holding_field(const std::vector<std::string>& segments) {
  const auto is = [&](size_t i, const char* name) { return segments.size() > i && segments[i] == name; };
  if (is(0, "messages") && is(2, "content") && is(4, "input")) {
    return "messages." + segments[1] + ".content." + segments[3] + ".input";
  }
  if (is(0, "tools") && is(2, "input_schema")) return "tools." + segments[1] + ".input_schema";
  return segments.at(0);
}

}  // namespace

std::string anthropic_field_path(std::string_view chat_path) {
  const std::vector<std::string> s = segments_of(chat_path);
  if (s.empty()) return "";
  const std::string& field = s[0];
  if (field == "stop") return joined("stop_sequences", s, 1);
  if (field == "max_completion_tokens") return "max_tokens";
  if (field == "user") return "metadata.user_id";
  if (field == "chat_template_kwargs") return "thinking";
  if (field == "parallel_tool_calls") return "tool_choice.disable_parallel_tool_use";
  if (field == "messages") return "messages";
  if (field == "tool_choice") return s.back() == "name" ? "tool_choice.name" : "tool_choice";
  if (field == "tools" && s.size() >= 2) {
    const std::string tool = "tools." + s[1];
    if (s.size() < 4 || s[2] != "function") return tool;
    if (s[3] == "parameters") return joined(tool + ".input_schema", s, 4);
    return tool + "." + s[3];  // name, description
  }
  return joined("", s, 0);
}

ApiException with_anthropic_fields(const ApiException& chat_error) {
  ApiError error = chat_error.error();
  if (error.status != 400 || error.param.empty()) return chat_error;
  const std::string field = segments_of(error.param).front();
  // The chat parser quotes the paths it names ("'stop[2]' is 2000 bytes long"); values it quotes
  // (a tool's name, a role) are renamed only if they read as a path under the same field.
  std::string message;
  size_t pos = 0;
  for (;;) {
    const size_t open = error.message.find('\'', pos);
    const size_t close = open == std::string::npos ? std::string::npos : error.message.find('\'', open + 1);
    if (close == std::string::npos) break;
    const std::string quoted = error.message.substr(open + 1, close - open - 1);
    const std::vector<std::string> segments = segments_of(quoted);
    const bool path = !segments.empty() && segments[0] == field && quoted.find(' ') == std::string::npos;
    message += error.message.substr(pos, open + 1 - pos) + (path ? anthropic_field_path(quoted) : quoted) + "'";
    pos = close + 1;
  }
  error.message = message + error.message.substr(pos);
  error.param = anthropic_field_path(error.param);
  return ApiException(std::move(error));
}

std::optional<std::string> anthropic_field_too_deep(std::string_view body, int32_t max_depth) {
  struct Level {
    bool object = false;
    std::string key;     // object: the key of the value being read
    int64_t index = 0;   // array: the index of the value being read
  };
  std::vector<Level> levels;  // the containers open at this byte, the body first
  bool in_string = false;
  bool reading_key = false;  // an object's next string is a key
  std::string text;          // the string being read, when it is a key
  for (size_t i = 0; i < body.size(); ++i) {
    const char c = body[i];
    if (in_string) {
      if (c == '"') {
        in_string = false;
        if (reading_key && !levels.empty()) levels.back().key = text;
      } else {
        if (c == '\\' && i + 1 < body.size()) ++i;  // the escaped byte: keys that matter have none
        if (reading_key) text += body[i];
      }
      continue;
    }
    switch (c) {
      case '"':
        in_string = true;
        text.clear();
        break;
      case '{':
      case '[':
        if (static_cast<int64_t>(levels.size()) >= max_depth && !levels.empty()) {
          if (!levels.front().object) return std::nullopt;  // not a body of fields
          std::vector<std::string> segments;
          for (const Level& level : levels) segments.push_back(level.object ? level.key : std::to_string(level.index));
          return holding_field(segments);
        }
        levels.push_back({.object = c == '{'});
        reading_key = c == '{';
        break;
      case '}':
      case ']':
        if (!levels.empty()) levels.pop_back();
        reading_key = false;
        break;
      case ',':
        if (levels.empty()) break;
        if (levels.back().object) {
          reading_key = true;
        } else {
          ++levels.back().index;
        }
        break;
      case ':':
        reading_key = false;
        break;
      default:
        break;
    }
  }
  return std::nullopt;
}

}  // namespace tachyon::server
