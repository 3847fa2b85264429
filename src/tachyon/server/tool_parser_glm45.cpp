// GLM-4.5 / GLM-4.6 / GLM-4.7 / GLM-5 tool calls: a name and key/value tags, no JSON around them:
//   <tool_call>NAME\n<arg_key>k</arg_key>\n<arg_value>v</arg_value>\n</tool_call>    (4.5, 4.6)
//   <tool_call>NAME<arg_key>k</arg_key><arg_value>v</arg_value></tool_call>          (4.7, 5)
// The chat template writes a string value as it is and any other value as JSON, so a value
// becomes a JSON string when the tool's schema says the parameter is a string, else the JSON it
// parses as (a string again when it is no JSON). Arguments stream pair by pair as the object
// {"k": v, ...}.
#include <nlohmann/json.hpp>

#include "tachyon/server/tool_parser.h"

namespace tachyon::server {
namespace {

constexpr std::string_view kStart = "<tool_call>";
constexpr std::string_view kEnd = "</tool_call>";
constexpr std::string_view kKeyOpen = "<arg_key>";
constexpr std::string_view kKeyClose = "</arg_key>";
constexpr std::string_view kValueOpen = "<arg_value>";
constexpr std::string_view kValueClose = "</arg_value>";

class Glm45ToolParser : public ToolParser {
 public:
  explicit Glm45ToolParser(const nlohmann::ordered_json& tools) : tools_(tools) {}

 protected:
  void parse(bool at_end) override {
    parse_blocks(kStart, kEnd, at_end, [this](std::string_view body, bool complete) {
      const std::optional<std::string> arguments = follow(body, complete);
      return arguments ? std::optional<std::string>(*arguments + "}") : std::nullopt;
    });
  }

 private:
  // Commits the call at its name and streams the complete pairs; returns the arguments so far
  // without the closing brace (nullopt before the name).
  std::optional<std::string> follow(std::string_view body, bool complete) {
    size_t name_end = std::min(body.find(kKeyOpen), body.find('\n'));
    if (name_end == std::string_view::npos) {
      if (!complete) return std::nullopt;
      name_end = body.size();
    }
    if (!in_call()) {
      std::string name = trim_json_whitespace(body.substr(0, name_end));
      if (name.empty() || name.find_first_of("<>{}\" ") != std::string::npos) return std::nullopt;
      current_name_ = name;
      start_call(std::move(name));
    }
    std::string arguments = "{";
    size_t pos = name_end;
    for (int pairs = 0;; ++pairs) {
      const size_t key_open = skip_whitespace(body, pos);
      if (!body.substr(key_open).starts_with(kKeyOpen)) break;
      const size_t key_close = body.find(kKeyClose, key_open);
      if (key_close == std::string_view::npos) break;
      const size_t value_open = skip_whitespace(body, key_close + kKeyClose.size());
      if (!body.substr(value_open).starts_with(kValueOpen)) break;
      const size_t value_close = body.find(kValueClose, value_open);
      if (value_close == std::string_view::npos) break;
      const std::string key = trim_json_whitespace(body.substr(key_open + kKeyOpen.size(), key_close - key_open - kKeyOpen.size()));
      const std::string_view value =
          body.substr(value_open + kValueOpen.size(), value_close - value_open - kValueOpen.size());
      if (pairs > 0) arguments += ", ";
      arguments += json_string(key);
      arguments += ": ";
      arguments += value_json(key, value);
      pos = value_close + kValueClose.size();
    }
    update_arguments(arguments);
    return arguments;
  }

  // A value as JSON text: a string when the schema says so or when it is no JSON.
  std::string value_json(const std::string& key, std::string_view value) const {
    if (parameter_type(tools_, current_name_, key) == "string") return json_string(value);
    const std::string text = trim_json_whitespace(value);
    if (nlohmann::json::accept(text)) return text;
    return json_string(value);
  }

  const nlohmann::ordered_json tools_;
  std::string current_name_;
};

}  // namespace

std::unique_ptr<ToolParser> make_glm45_tool_parser(const nlohmann::ordered_json& tools) {
  return std::make_unique<Glm45ToolParser>(tools);
}

}  // namespace tachyon::server
