// DeepSeek-V3 / R1 tool calls (the tokens of DeepSeek-V3's chat template,
// third_party/tokenizers/models/deepseek_v3):
//   <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME\n```json\n{...}\n```<｜tool▁call▁end｜>
//   \n<｜tool▁call▁begin｜>...<｜tool▁call▁end｜><｜tool▁calls▁end｜>
// and DeepSeek-V3.1's shorter call, told apart by the '{' right after the separator:
//   <｜tool▁call▁begin｜>NAME<｜tool▁sep｜>{...}<｜tool▁call▁end｜>
// A call commits at its name (V3: the newline after it); its arguments are the JSON value.
#include <utility>

#include "tachyon/server/tool_parser.h"

namespace tachyon::server {
namespace {

constexpr std::string_view kCallsBegin = "<｜tool▁calls▁begin｜>";
constexpr std::string_view kCallsEnd = "<｜tool▁calls▁end｜>";
constexpr std::string_view kCallBegin = "<｜tool▁call▁begin｜>";
constexpr std::string_view kCallEnd = "<｜tool▁call▁end｜>";
constexpr std::string_view kSep = "<｜tool▁sep｜>";

class DeepseekV3ToolParser : public ToolParser {
 protected:
  void parse(bool at_end) override {
    while (true) {
      if (state_ == State::kContent) {
        if (!consume_to_marker(kCallsBegin, at_end)) return;
        state_ = State::kBetween;
        unclaimed_ = kCallsBegin;
        claimed_ = false;
      }
      if (state_ == State::kBetween && !read_between(at_end)) return;
      if (state_ == State::kCall && !read_call(at_end)) return;
    }
  }

 private:
  enum class State { kContent, kBetween, kCall };

  // Between calls: the next call, the end of the block, or stray text (content). False: wait.
  bool read_between(bool at_end) {
    const size_t at = skip_whitespace(buffer_, 0);
    std::string_view rest = std::string_view(buffer_).substr(at);
    if (rest.starts_with(kCallBegin)) {
      if (!claimed_) unclaimed_ += buffer_.substr(0, at);
      buffer_.erase(0, at + kCallBegin.size());
      state_ = State::kCall;
      return true;
    }
    if (rest.starts_with(kCallsEnd)) {
      if (!claimed_) unclaimed_ += buffer_.substr(0, at + kCallsEnd.size());
      buffer_.erase(0, at + kCallsEnd.size());
      leave_block();
      return true;
    }
    if (!at_end && (kCallBegin.starts_with(rest) || kCallsEnd.starts_with(rest))) return false;
    leave_block();  // not a call: the rest is content again
    return true;
  }

  // Inside <｜tool▁call▁begin｜> ... <｜tool▁call▁end｜>. False: wait for more text.
  bool read_call(bool at_end) {
    const size_t end = buffer_.find(kCallEnd);
    const bool closed = end != std::string::npos;
    std::string_view body(buffer_);
    if (closed) {
      body = body.substr(0, end);
    } else if (!at_end) {
      body.remove_suffix(partial_marker_suffix(body, kCallEnd));
    }
    const bool complete = closed || at_end;
    const std::optional<size_t> value = follow(body, complete);
    JsonValueScan scan;
    if (value && *value < body.size()) {
      scan = scan_json_value(body, *value);
      const size_t stop = scan.status == ScanStatus::kComplete ? scan.end : body.size();
      update_arguments(body.substr(*value, stop - *value));
    }
    if (!complete) return false;
    const size_t consumed = closed ? end + kCallEnd.size() : buffer_.size();
    if (in_call()) {
      end_call();
    } else {
      emit_content(take_unclaimed() + std::string(kCallBegin) + buffer_.substr(0, consumed));
    }
    buffer_.erase(0, consumed);
    state_ = State::kBetween;
    return true;
  }

  // A block that made no call is content, markers and all.
  std::string take_unclaimed() { return std::exchange(unclaimed_, std::string()); }
  void leave_block() {
    if (!unclaimed_.empty()) emit_content(take_unclaimed());
    state_ = State::kContent;
  }
  void commit(std::string name) {
    unclaimed_.clear();
    claimed_ = true;
    start_call(std::move(name));
  }

  // Commits the call once its name is known; returns where the arguments' JSON starts.
  std::optional<size_t> follow(std::string_view body, bool complete) {
    const size_t sep = body.find(kSep);
    if (sep == std::string_view::npos) return std::nullopt;
    const size_t after = sep + kSep.size();
    if (after == body.size() && !complete) return std::nullopt;
    if (after < body.size() && body[after] == '{') {  // V3.1: NAME<｜tool▁sep｜>{...}
      if (!in_call() && !trim_json_whitespace(body.substr(0, sep)).empty()) commit(trim_json_whitespace(body.substr(0, sep)));
      return after;
    }
    const size_t newline = body.find('\n', after);  // V3: function<｜tool▁sep｜>NAME\n```json\n{...}\n```
    if (newline == std::string_view::npos) {
      if (complete && !in_call() && !trim_json_whitespace(body.substr(after)).empty()) commit(trim_json_whitespace(body.substr(after)));
      return std::nullopt;
    }
    if (!in_call() && !trim_json_whitespace(body.substr(after, newline - after)).empty()) {
      commit(trim_json_whitespace(body.substr(after, newline - after)));
    }
    size_t at = skip_whitespace(body, newline + 1);
    std::string_view rest = body.substr(at);
    if (rest.starts_with("```")) {
      const size_t fence_end = body.find('\n', at);
      if (fence_end == std::string_view::npos) return std::nullopt;
      at = skip_whitespace(body, fence_end + 1);
    } else if (std::string_view("```").starts_with(rest)) {
      return std::nullopt;
    }
    return at;
  }

  State state_ = State::kContent;
  std::string unclaimed_;  // the block's markers while it has made no call (not yet content)
  bool claimed_ = false;   // the block has made a call: its markers are no content
};

}  // namespace

std::unique_ptr<ToolParser> make_deepseek_v3_tool_parser() { return std::make_unique<DeepseekV3ToolParser>(); }

}  // namespace tachyon::server
