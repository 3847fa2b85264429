// Llama 3.1 / 3.2 JSON tool calls: the answer is the call, one JSON object
//   {"name": "f", "parameters": {...}}
// optionally after <|python_tag|> (a special token, usually dropped by the detokenizer), and
// several calls are separated by "; " (Llama 3.2). Only an answer that starts with '{' (after
// whitespace and the tag) is read as calls: the format has no marker, and text that merely
// mentions JSON later must stay content. An object without a "name" is content, verbatim.
#include "tachyon/server/tool_parser.h"

namespace tachyon::server {
namespace {

constexpr std::string_view kTag = "<|python_tag|>";

class Llama3JsonToolParser : public ToolParser {
 protected:
  void parse(bool at_end) override {
    if (state_ == State::kStart && !decide_start(at_end)) return;
    while (state_ == State::kCalls || state_ == State::kBetween) {
      if (state_ == State::kBetween) {  // another call follows after "; " (or whitespace); else content
        size_t next = skip_whitespace(buffer_, 0);
        if (next < buffer_.size() && buffer_[next] == ';') next = skip_whitespace(buffer_, next + 1);
        if (next == buffer_.size()) {
          if (at_end) buffer_.clear();  // a dangling separator
          return;
        }
        if (buffer_[next] != '{') {
          state_ = State::kPlain;
          break;
        }
        buffer_.erase(0, next);
        state_ = State::kCalls;
      }
      CallObjectScan scan = scan_call_object(buffer_, 0, {"name"}, {"parameters", "arguments"});
      follow_call_object(buffer_, scan);
      if (scan.status == ScanStatus::kIncomplete && !at_end) return;
      if (scan.status != ScanStatus::kComplete || !in_call()) {  // not a call after all
        if (in_call()) {  // cut short or broken: the call keeps what it streamed
          end_call();
          buffer_.erase(0, std::min(scan.end, buffer_.size()));
        } else if (num_calls() == 0) {
          buffer_.insert(0, raw_start_);
        }
        state_ = State::kPlain;
        break;
      }
      end_call(object_arguments(buffer_, scan));
      buffer_.erase(0, scan.end);
      state_ = State::kBetween;
    }
    emit_content(buffer_);
    buffer_.clear();
  }

 private:
  enum class State { kStart, kCalls, kBetween, kPlain };

  // At the answer's start: calls (a '{' after whitespace and the tag) or plain content.
  // False while the first bytes cannot tell yet.
  bool decide_start(bool at_end) {
    size_t at = skip_whitespace(buffer_, 0);
    std::string_view rest = std::string_view(buffer_).substr(at);
    if (rest.starts_with(kTag)) {
      at = skip_whitespace(buffer_, at + kTag.size());
      rest = std::string_view(buffer_).substr(at);
    } else if (!at_end && kTag.starts_with(rest)) {
      return false;
    }
    if (rest.empty() && !at_end) return false;
    if (!rest.empty() && rest[0] == '{') {
      raw_start_ = buffer_.substr(0, at);
      buffer_.erase(0, at);
      state_ = State::kCalls;
    } else {
      state_ = State::kPlain;
    }
    return true;
  }

  State state_ = State::kStart;
  std::string raw_start_;  // whitespace and tag before the first object
};

}  // namespace

std::unique_ptr<ToolParser> make_llama3_json_tool_parser() { return std::make_unique<Llama3JsonToolParser>(); }

}  // namespace tachyon::server
