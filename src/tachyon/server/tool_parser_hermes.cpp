// Hermes-style tool calls, as Qwen2.5 and Qwen3 (and NousResearch's Hermes) write them:
//   text <tool_call>\n{"name": "f", "arguments": {...}}\n</tool_call>\n<tool_call>...</tool_call>
// (the format Qwen3's chat template asks for, third_party/tokenizers/models/qwen3). A block whose
// JSON never shows a name is content, verbatim.
#include "tachyon/server/tool_parser.h"

namespace tachyon::server {
namespace {

constexpr std::string_view kStart = "<tool_call>";
constexpr std::string_view kEnd = "</tool_call>";

class HermesToolParser : public ToolParser {
 protected:
  void parse(bool at_end) override {
    parse_blocks(kStart, kEnd, at_end, [this](std::string_view body, bool) -> std::optional<std::string> {
      CallObjectScan scan = scan_call_object(body, skip_whitespace(body, 0), {"name"}, {"arguments", "parameters"});
      follow_call_object(body, scan);
      return scan.status == ScanStatus::kComplete ? object_arguments(body, scan) : std::nullopt;
    });
  }
};

}  // namespace

std::unique_ptr<ToolParser> make_hermes_tool_parser() { return std::make_unique<HermesToolParser>(); }

}  // namespace tachyon::server
