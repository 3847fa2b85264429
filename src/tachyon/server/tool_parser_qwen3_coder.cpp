// Qwen3-Coder (and Qwen3.5's) tool calls: XML-like tags around a name and raw parameter values,
// as their chat templates write them:
//   <tool_call>\n<function=NAME>\n<parameter=KEY>\nVALUE\n</parameter>\n...</function>\n</tool_call>
// The templates write a string value as it is and other values through Jinja (`| string`, or
// `| tojson` for a dict or list in the newer ones), so a value is read by the type the tool's
// schema gives its parameter (ToolParser::parameter_type): a string stays the text; an integer,
// number, boolean or null is read as JSON (True / False / None too: Python's spelling); an object
// or array as JSON or as a Python literal (server/python_literal.h); without a type, as JSON when
// it reads as JSON, else as a string. One newline after the parameter tag and one before its
// close are the format's, not the value's.
// Streaming: a string parameter's text streams as it arrives (a coding agent's file contents are
// long), held back only where it could still be the closing tag or a cut UTF-8 character; other
// values stream once their tag closes.
#include <algorithm>
#include <nlohmann/json.hpp>

#include "tachyon/server/python_literal.h"
#include "tachyon/server/tool_parser.h"

namespace tachyon::server {
namespace qwen3_coder_format {

constexpr std::string_view kCallOpen = "<tool_call>";
constexpr std::string_view kCallClose = "</tool_call>";
constexpr std::string_view kFunctionOpen = "<function=";
constexpr std::string_view kFunctionClose = "</function>";
constexpr std::string_view kParameterOpen = "<parameter=";
constexpr std::string_view kParameterClose = "</parameter>";

// Bytes at the end of `text` that may be the start of a UTF-8 character still arriving.
size_t cut_utf8_tail(std::string_view text) {
  for (size_t back = 1; back <= 3 && back <= text.size(); ++back) {
    const auto c = static_cast<unsigned char>(text[text.size() - back]);
    if ((c & 0xC0) == 0x80) continue;  // a continuation byte: look further back
    const size_t length = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
    return length > back ? back : 0;
  }
  return 0;
}

class Qwen3CoderToolParser : public ToolParser {
 public:
  explicit Qwen3CoderToolParser(const nlohmann::ordered_json& tools) : tools_(tools) {}

 protected:
  void parse(bool at_end) override {
    parse_blocks(kCallOpen, kCallClose, at_end, [this](std::string_view body, bool complete) {
      const std::optional<std::string> arguments = follow(body, complete);
      return arguments ? std::optional<std::string>(*arguments + "}") : std::nullopt;
    });
  }

 private:
  // Commits the call at its name and streams its parameters; returns the arguments so far
  // without the closing brace (nullopt before the name, or when the block is no call).
  std::optional<std::string> follow(std::string_view body, bool complete) {
    const size_t open = skip_whitespace(body, 0);
    const std::string_view rest = body.substr(std::min(open, body.size()));
    if (!rest.starts_with(kFunctionOpen)) return std::nullopt;  // not yet, or never: content at the end
    const size_t name_end = rest.find('>');
    if (name_end == std::string_view::npos) return std::nullopt;
    if (!in_call()) {
      std::string name(rest.substr(kFunctionOpen.size(), name_end - kFunctionOpen.size()));
      if (name.empty() || name.find_first_of("<>{}\"' \n\t") != std::string::npos) return std::nullopt;
      current_name_ = name;
      start_call(std::move(name));
    }
    std::string arguments = "{";
    size_t pos = name_end + 1;
    for (int pairs = 0;; ++pairs) {
      const size_t tag = skip_whitespace(rest, pos);
      if (!rest.substr(std::min(tag, rest.size())).starts_with(kParameterOpen)) break;
      const size_t key_end = rest.find('>', tag);
      if (key_end == std::string_view::npos) break;
      const std::string key(rest.substr(tag + kParameterOpen.size(), key_end - tag - kParameterOpen.size()));
      size_t value_begin = key_end + 1;
      if (value_begin < rest.size() && rest[value_begin] == '\n') ++value_begin;
      // The value ends at its closing tag; a block that ended without one ends it at
      // </function> (or at the block's end), as a model that forgot the tag meant.
      size_t value_end = rest.find(kParameterClose, value_begin);
      const bool value_closed = value_end != std::string_view::npos;
      if (!value_closed && !complete) {
        stream_open_string(arguments, pairs, key, rest.substr(std::min(value_begin, rest.size())));
        break;
      }
      if (!value_closed) value_end = std::min(rest.find(kFunctionClose, value_begin), rest.size());
      const size_t begin = std::min(value_begin, value_end);
      std::string_view value = rest.substr(begin, value_end - begin);
      if (value.ends_with('\n')) value.remove_suffix(1);
      if (pairs > 0) arguments += ", ";
      arguments += json_string(key) + ": " + value_json(key, value);
      pos = value_closed ? value_end + kParameterClose.size() : value_end;
    }
    update_arguments(arguments);
    return arguments;
  }

  // A string parameter still arriving: streams `"key": "text` so far, keeping back what may
  // still be its closing tag, the newline before it, or a cut character; and everything from a
  // </function>, which ends the value if its own closing tag never comes.
  void stream_open_string(const std::string& arguments, int pairs, const std::string& key, std::string_view text) {
    if (parameter_type(tools_, current_name_, key) != "string") return;
    text = text.substr(0, text.find(kFunctionClose));
    text.remove_suffix(
        std::max(partial_marker_suffix(text, kParameterClose), partial_marker_suffix(text, kFunctionClose)));
    if (text.ends_with('\n')) text.remove_suffix(1);
    text.remove_suffix(cut_utf8_tail(text));
    std::string quoted = json_string(text);
    quoted.pop_back();  // the closing quote: more text may come
    update_arguments(arguments + (pairs > 0 ? ", " : "") + json_string(key) + ": " + quoted);
  }

  std::string value_json(const std::string& key, std::string_view value) const {
    const std::string type = parameter_type(tools_, current_name_, key);
    if (type == "string") return json_string(value);
    const std::string text = trim_json_whitespace(value);
    if (type == "boolean" || type.empty()) {
      if (text == "True" || text == "False") return text == "True" ? "true" : "false";
    }
    if ((type == "null" || type.empty()) && text == "None") return "null";
    if (nlohmann::json::accept(text)) return text;
    if (type == "object" || type == "array" || type.empty()) {
      if (std::optional<std::string> literal = python_literal_as_json(text)) return *literal;
    }
    return json_string(value);
  }

  const nlohmann::ordered_json tools_;
  std::string current_name_;
};

}  // namespace qwen3_coder_format

std::unique_ptr<ToolParser> make_qwen3_coder_tool_parser(const nlohmann::ordered_json& tools) {
  return std::make_unique<qwen3_coder_format::Qwen3CoderToolParser>(tools);
}

}  // namespace tachyon::server
