// DeepSeek-V3.2's tool calls (DSML), as its release's prompt shows them and the model writes them
// (tokenizer/deepseek_v32_prompt.h): one block holds every call of the answer,
//   <｜DSML｜function_calls>
//   <｜DSML｜invoke name="NAME">
//   <｜DSML｜parameter name="KEY" string="true|false">VALUE</｜DSML｜parameter>
//   </｜DSML｜invoke>
//   </｜DSML｜function_calls>
// A value whose string attribute is "true" is text as it is (no escaping, no quotes); "false":
// JSON (or a Python literal, or, failing both, the text as a string). A call commits at its name
// and its arguments stream a parameter at a time; an invoke cut off by the answer's end ends its
// call with the parameters that closed. Text inside the block that is no invoke comes back as
// content.
#include <algorithm>
#include <nlohmann/json.hpp>

#include "tachyon/server/json_scan.h"
#include "tachyon/server/python_literal.h"
#include "tachyon/server/tool_parser.h"
#include "tachyon/tokenizer/deepseek_v32_prompt.h"

namespace tachyon::server {
namespace dsml_format {

const std::string kDsml = tokenizer::kDsmlToken;
const std::string kBlockOpen = "<" + kDsml + "function_calls>";
const std::string kBlockClose = "</" + kDsml + "function_calls>";
const std::string kInvokeOpen = "<" + kDsml + "invoke";
const std::string kInvokeClose = "</" + kDsml + "invoke>";
const std::string kParameterOpen = "<" + kDsml + "parameter";
const std::string kParameterClose = "</" + kDsml + "parameter>";

// The value of attribute `name` in a tag's text (` name="x" string="true">`), nullopt when absent.
std::optional<std::string> attribute(std::string_view tag, std::string_view name) {
  const std::string key = " " + std::string(name) + "=\"";
  const size_t at = tag.find(key);
  if (at == std::string_view::npos) return std::nullopt;
  const size_t begin = at + key.size();
  const size_t end = tag.find('"', begin);
  if (end == std::string_view::npos) return std::nullopt;
  return std::string(tag.substr(begin, end - begin));
}

class DsmlToolParser : public ToolParser {
 protected:
  void parse(bool at_end) override {
    while (true) {
      if (!in_block_) {
        if (!consume_to_marker(kBlockOpen, at_end)) return;
        in_block_ = true;
      }
      if (!parse_block(at_end)) return;
    }
  }

 private:
  // The block's invokes, as far as they have come; true when the block closed.
  bool parse_block(bool at_end) {
    while (true) {
      const size_t pos = std::min(skip_whitespace(buffer_, 0), buffer_.size());
      const std::string_view rest = std::string_view(buffer_).substr(pos);
      if (rest.starts_with(kBlockClose)) {
        buffer_.erase(0, pos + kBlockClose.size());
        in_block_ = false;
        return true;
      }
      if (rest.starts_with(kInvokeOpen)) {
        const size_t end = rest.find(kInvokeClose);
        if (end == std::string_view::npos && !at_end) {
          follow(rest.substr(0, rest.size() - partial_marker_suffix(rest, kInvokeClose)));
          return false;
        }
        const std::string_view invoke = rest.substr(0, std::min(end, rest.size()));
        const std::optional<std::string> arguments = follow(invoke);
        if (in_call()) {
          end_call(arguments);
        } else {
          emit_content(invoke);  // no name: not a call
        }
        buffer_.erase(0, end == std::string_view::npos ? buffer_.size() : pos + end + kInvokeClose.size());
        if (end == std::string_view::npos) return false;
        continue;
      }
      // A marker still arriving waits; anything else is the model leaving the format: content.
      if (!at_end &&
          (std::string_view(kBlockClose).starts_with(rest) || std::string_view(kInvokeOpen).starts_with(rest))) {
        return false;
      }
      emit_content(rest);
      buffer_.clear();
      in_block_ = false;
      return false;
    }
  }

  // Commits the call at its name and streams the parameters that closed; returns the arguments
  // (nullopt before the name, or when the invoke has none).
  std::optional<std::string> follow(std::string_view invoke) {
    const size_t head_end = invoke.find('>');
    if (head_end == std::string_view::npos) return std::nullopt;
    const std::optional<std::string> name = attribute(invoke.substr(0, head_end + 1), "name");
    if (!name || name->empty()) return std::nullopt;
    if (!in_call()) start_call(*name);
    std::string arguments = "{";
    size_t pos = head_end + 1;
    for (int pairs = 0;; ++pairs) {
      const size_t tag = std::min(skip_whitespace(invoke, pos), invoke.size());
      if (!invoke.substr(tag).starts_with(kParameterOpen)) break;
      const size_t tag_end = invoke.find('>', tag);
      if (tag_end == std::string_view::npos) break;
      const std::string_view head =
          invoke.substr(tag + kParameterOpen.size(), tag_end - tag - kParameterOpen.size() + 1);
      const size_t value_end = invoke.find(kParameterClose, tag_end + 1);
      if (value_end == std::string_view::npos) break;  // still arriving (or cut off: dropped)
      const std::string key = attribute(head, "name").value_or("");
      const std::string_view value = invoke.substr(tag_end + 1, value_end - tag_end - 1);
      if (pairs > 0) arguments += ", ";
      arguments += json_string(key) + ": " + value_json(value, attribute(head, "string").value_or("false") == "true");
      pos = value_end + kParameterClose.size();
    }
    update_arguments(arguments);
    return arguments + "}";
  }

  static std::string value_json(std::string_view value, bool is_string) {
    if (is_string) return json_string(value);
    const std::string text = trim_json_whitespace(value);
    if (nlohmann::json::accept(text)) return text;
    if (std::optional<std::string> literal = python_literal_as_json(text)) return *literal;
    return json_string(value);
  }

  bool in_block_ = false;
};

}  // namespace dsml_format

std::unique_ptr<ToolParser> make_deepseek_v32_tool_parser() { return std::make_unique<dsml_format::DsmlToolParser>(); }

}  // namespace tachyon::server
