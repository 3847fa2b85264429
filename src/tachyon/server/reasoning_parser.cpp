#include "tachyon/server/reasoning_parser.h"

#include "tachyon/server/json_scan.h"
#include "tachyon/structured/reasoning_prefix.h"
#include "tachyon/tokenizer/deepseek_v32_prompt.h"

namespace tachyon::server {
namespace {

constexpr std::string_view kNames[] = {"qwen3", "deepseek_r1", "deepseek_v3", "glm45"};

// The markers are spelled in one place, structured::reasoning_markers() (start, end), which the
// grammar's reasoning prefix and the vocabulary's marker tokens read too: a constraint after the
// reasoning then ends it where this parser does.
struct Markers {
  std::string start, end;
};
const Markers& think_markers() {
  static const Markers markers = [] {
    const std::vector<std::string> m = structured::reasoning_markers();
    return Markers{m.at(0), m.at(1)};
  }();
  return markers;
}

}  // namespace

ReasoningParser::ReasoningParser(std::string start, std::string end, bool starts_inside, bool markers_by_id)
    : start_(std::move(start)),
      end_(std::move(end)),
      state_(starts_inside ? State::kReasoning : State::kStart),
      markers_by_id_(markers_by_id) {}

void ReasoningParser::drop(size_t n) {
  buffer_.erase(0, n);
  buffer_offset_ += n;
}

ReasoningParser::Found ReasoningParser::find_marker(std::string_view marker, bool at_end) {
  if (!markers_by_id_) {
    const size_t at = buffer_.find(marker);
    if (at != std::string::npos) return {at, at};
    return {at, buffer_.size() - (at_end ? 0 : partial_marker_suffix(buffer_, marker))};
  }
  while (next_marker_ < marker_offsets_.size() && marker_offsets_[next_marker_] < buffer_offset_) ++next_marker_;
  for (size_t k = next_marker_; k < marker_offsets_.size(); ++k) {
    const size_t at = marker_offsets_[k] - buffer_offset_;
    if (at >= buffer_.size()) break;  // its text has not come yet
    const std::string_view there = std::string_view(buffer_).substr(at);
    if (there.starts_with(marker)) return {at, at};
    // The marker token's text is still arriving: nothing from here on is released yet.
    if (!at_end && marker.starts_with(there)) return {std::string::npos, at};
    // Another marker token (a start marker inside the reasoning): text like any other.
  }
  return {std::string::npos, buffer_.size()};
}

void ReasoningParser::push(std::string_view text, std::vector<ChatPiece>& out) {
  buffer_ += text;
  parse(/*at_end=*/false, out);
}

void ReasoningParser::finish(std::vector<ChatPiece>& out) {
  parse(/*at_end=*/true, out);
  if (state_ == State::kStart) reasoning_end_ = 0;  // nothing but whitespace: no reasoning
  if (!buffer_.empty()) {
    out.push_back({.kind = state_ == State::kReasoning ? ChatPiece::Kind::kReasoning : ChatPiece::Kind::kContent,
                   .text = buffer_});
  }
  drop(buffer_.size());
}

void ReasoningParser::parse(bool at_end, std::vector<ChatPiece>& out) {
  while (!buffer_.empty()) {
    switch (state_) {
      case State::kStart: {
        const size_t at = skip_whitespace(buffer_, 0);
        std::string_view rest = std::string_view(buffer_).substr(at);
        if (rest.empty() && !at_end) return;  // whitespace so far: the marker may follow
        // By id: the answer opens with the start marker only when a marker token sits there.
        const bool token_there = !markers_by_id_ || find_marker(start_, at_end).safe == at;
        if (token_there && rest.starts_with(start_)) {
          drop(at + start_.size());
          state_ = State::kReasoning;
        } else if (token_there && !at_end && std::string_view(start_).starts_with(rest)) {
          return;  // still may be the marker
        } else {
          state_ = State::kContent;
          reasoning_end_ = 0;
        }
        break;
      }
      case State::kReasoning: {
        const auto [at, take] = find_marker(end_, at_end);
        if (take > 0) out.push_back({.kind = ChatPiece::Kind::kReasoning, .text = buffer_.substr(0, take)});
        if (at == std::string::npos) {
          drop(take);
          return;
        }
        drop(at + end_.size());
        reasoning_end_ = buffer_offset_;
        state_ = State::kAfter;
        break;
      }
      case State::kAfter: {
        drop(skip_whitespace(buffer_, 0));
        if (buffer_.empty()) return;
        state_ = State::kContent;
        break;
      }
      case State::kContent:
        out.push_back({.kind = ChatPiece::Kind::kContent, .text = buffer_});
        drop(buffer_.size());
        return;
    }
  }
}

std::vector<std::string> reasoning_parser_names() { return {std::begin(kNames), std::end(kNames)}; }

bool is_reasoning_parser_name(std::string_view name) {
  for (std::string_view known : kNames) {
    if (name == known) return true;
  }
  return false;
}

std::string reasoning_parser_for_template(std::string_view chat_template) {
  if (chat_template == tokenizer::kDeepseekV32NativeTemplate) return "deepseek_v3";
  if (chat_template.find(think_markers().end) == std::string_view::npos) return "";
  if (chat_template.find("<|im_start|>") != std::string_view::npos) return "qwen3";
  if (chat_template.find("<｜Assistant｜>") != std::string_view::npos) return "deepseek_r1";
  if (chat_template.find("<|assistant|>") != std::string_view::npos) return "glm45";
  return "qwen3";
}

std::vector<std::string> reasoning_parser_markers(std::string_view name) {
  if (!is_reasoning_parser_name(name)) return {};
  return {think_markers().start, think_markers().end};
}

bool prompt_opens_reasoning(std::string_view name, std::string_view prompt) {
  if (!is_reasoning_parser_name(name)) return false;
  size_t end = prompt.size();
  while (end > 0 && is_json_whitespace(prompt[end - 1])) --end;
  return prompt.substr(0, end).ends_with(think_markers().start);
}

std::unique_ptr<ReasoningParser> make_reasoning_parser(std::string_view name, bool starts_inside, bool markers_by_id) {
  if (!is_reasoning_parser_name(name)) return nullptr;
  return std::make_unique<ReasoningParser>(think_markers().start, think_markers().end, starts_inside, markers_by_id);
}

}  // namespace tachyon::server
