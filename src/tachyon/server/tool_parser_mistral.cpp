// Mistral tool calls: [TOOL_CALLS] (a special token, kept for this parser) and then either
//   [{"name": "f", "arguments": {...}}, {...}]          (v3 tokenizer: Mistral 7B v0.3, Nemo, Small)
// or, from the v11 tokenizer on (Mistral Small 3.2, Magistral, Devstral), one call per marker:
//   [TOOL_CALLS]f[ARGS]{...}[TOOL_CALLS]g[ARGS]{...}
// Text before the marker is content; a block that yields no call comes back as content, marker
// and all; text after a block that is not part of it is content again.
#include "tachyon/server/tool_parser.h"

namespace tachyon::server {
namespace {

constexpr std::string_view kMarker = "[TOOL_CALLS]";
constexpr std::string_view kArgs = "[ARGS]";
constexpr std::string_view kCallId = "[CALL_ID]";
constexpr size_t kWait = std::string::npos;

class MistralToolParser : public ToolParser {
 protected:
  void parse(bool at_end) override {
    while (true) {
      if (!in_block_) {
        if (!consume_to_marker(kMarker, at_end)) return;
        in_block_ = true;
        form_ = Form::kUnknown;
        pos_ = 0;
        broken_ = false;
        calls_before_block_ = num_calls();
      }
      size_t end = read_block();
      if (end == kWait) {
        if (!at_end) return;
        end = buffer_.size();
      }
      end_block(end);
    }
  }

 private:
  enum class Form { kUnknown, kArray, kObject, kNamed };

  // Where the block ends in buffer_, or kWait while it may go on.
  size_t read_block() {
    if (form_ == Form::kUnknown) {
      const size_t at = skip_whitespace(buffer_, 0);
      if (at == buffer_.size()) return kWait;
      form_ = buffer_[at] == '[' ? Form::kArray : buffer_[at] == '{' ? Form::kObject : Form::kNamed;
      pos_ = form_ == Form::kArray ? at + 1 : at;
    }
    if (form_ == Form::kObject) return read_object(pos_);
    if (form_ == Form::kNamed) return read_named();
    while (true) {  // [{...}, {...}]
      const size_t at = skip_whitespace(buffer_, pos_);
      if (at == buffer_.size()) return kWait;
      if (buffer_[at] == ']') return at + 1;
      if (buffer_[at] == ',') {
        pos_ = at + 1;
        continue;
      }
      if (buffer_[at] != '{') return at;
      const size_t end = read_object(at);
      if (end == kWait || end == at || broken_) return end;  // a broken object ends the block
      pos_ = end;
    }
  }

  // A call object at buffer_[at]: one past it when complete; `at` itself when it is no call.
  size_t read_object(size_t at) {
    std::string_view text = std::string_view(buffer_).substr(at);
    CallObjectScan scan = scan_call_object(text, 0, {"name"}, {"arguments", "parameters"});
    follow_call_object(text, scan);
    if (scan.status == ScanStatus::kIncomplete) return kWait;
    if (!in_call()) return at;
    broken_ = scan.status == ScanStatus::kInvalid;
    end_call(scan.status == ScanStatus::kComplete ? object_arguments(text, scan) : std::nullopt);
    return at + scan.end;
  }

  // name[ARGS]{...}: the block ends with the arguments' JSON value.
  size_t read_named() {
    if (!in_call()) {
      const size_t args = buffer_.find(kArgs, pos_);
      if (args == std::string::npos) return kWait;
      std::string name = buffer_.substr(pos_, args - pos_);
      if (size_t id = name.find(kCallId); id != std::string::npos) name.resize(id);
      while (!name.empty() && is_json_whitespace(name.back())) name.pop_back();
      if (name.empty() || name.find_first_of(" \n\t{}[]\"") != std::string::npos) return pos_;
      start_call(std::move(name));
      pos_ = args + kArgs.size();
    }
    const size_t value = skip_whitespace(buffer_, pos_);
    if (value == buffer_.size()) return kWait;
    JsonValueScan scan = scan_json_value(buffer_, value);
    // Complete or broken: the value ends where the scan says (a broken one where it broke, as
    // whatever pieces the text came in); still arriving: all of it so far.
    const size_t end = scan.status == ScanStatus::kIncomplete ? buffer_.size() : scan.end;
    update_arguments(std::string_view(buffer_).substr(value, end - value));
    if (scan.status == ScanStatus::kIncomplete) return kWait;
    end_call();
    return scan.end;
  }

  void end_block(size_t end) {
    end = std::min(end, buffer_.size());
    if (in_call()) end_call();
    if (num_calls() == calls_before_block_) emit_content(std::string(kMarker) + buffer_.substr(0, end));
    buffer_.erase(0, end);
    in_block_ = false;
  }

  bool in_block_ = false;
  Form form_ = Form::kUnknown;
  size_t pos_ = 0;  // where the block's next element starts in buffer_
  int32_t calls_before_block_ = 0;
  bool broken_ = false;  // the last call object was malformed after its name
};

}  // namespace

std::unique_ptr<ToolParser> make_mistral_tool_parser() { return std::make_unique<MistralToolParser>(); }

}  // namespace tachyon::server
