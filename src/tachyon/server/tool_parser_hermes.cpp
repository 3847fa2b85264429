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
    while (true) {
      if (!in_block_) {
        if (!consume_to_marker(kStart, at_end)) return;
        in_block_ = true;
      }
      const BlockBody body = block_body(kEnd, at_end);
      const size_t open = skip_whitespace(body.text, 0);
      CallObjectScan scan = scan_call_object(body.text, open, {"name"}, {"arguments", "parameters"});
      follow_call_object(body.text, scan);
      if (!body.closed() && !at_end) return;
      const size_t consumed = body.closed() ? body.end + kEnd.size() : buffer_.size();
      if (in_call()) {
        end_call(scan.status == ScanStatus::kComplete ? object_arguments(body.text, scan) : std::nullopt);
      } else {
        emit_content(std::string(kStart) + buffer_.substr(0, consumed));
      }
      buffer_.erase(0, consumed);
      in_block_ = false;
      if (!body.closed()) return;
    }
  }

 private:
  bool in_block_ = false;  // after <tool_call>, before </tool_call>
};

}  // namespace

std::unique_ptr<ToolParser> make_hermes_tool_parser() { return std::make_unique<HermesToolParser>(); }

}  // namespace tachyon::server
