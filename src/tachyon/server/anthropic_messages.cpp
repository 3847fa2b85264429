// Anthropic errors, stop reasons and the message builder (streamed events and the whole
// message from the same blocks). See anthropic_messages.h.
#include "tachyon/server/anthropic_messages.h"

#include "tachyon/server/chat_output.h"
#include "tachyon/server/openai_responses.h"

namespace tachyon::server {

using Json = nlohmann::ordered_json;

std::string anthropic_error_type(int status) {
  switch (status) {
    case 401: return "authentication_error";
    case 403: return "permission_error";
    case 404: return "not_found_error";
    case 413: return "request_too_large";
    case 429: return "rate_limit_error";
    case 503:
    case 529: return "overloaded_error";
    default: return status >= 500 ? "api_error" : "invalid_request_error";
  }
}

std::string anthropic_error_body(const ApiError& error) {
  Json body = {{"type", "error"},
               {"error", {{"type", anthropic_error_type(error.status)}, {"message", to_valid_utf8(error.message)}}}};
  return body.dump();
}

std::string anthropic_stop_reason(const std::string& finish_reason, const std::string& stop_string) {
  if (finish_reason == "length") return "max_tokens";
  if (finish_reason == "tool_calls") return "tool_use";
  if (finish_reason == "stop" && !stop_string.empty()) return "stop_sequence";
  return "end_turn";
}

std::string make_message_id() { return "msg_" + make_tool_call_id().substr(5); }
std::string make_tool_use_id() { return "toolu_" + make_tool_call_id().substr(5); }

AnthropicMessage::AnthropicMessage(std::string id, std::string model, int64_t input_tokens)
    : id_(std::move(id)), model_(std::move(model)), input_tokens_(input_tokens) {}

std::string AnthropicMessage::start() {
  Json head = message();
  head["content"] = Json::array();
  return sse_event({{"type", "message_start"}, {"message", std::move(head)}}) + sse_event({{"type", "ping"}});
}

std::string AnthropicMessage::open(Block kind, const ChatPiece& piece) {
  Json block;
  if (kind == Block::kText) block = {{"type", "text"}, {"text", ""}};
  if (kind == Block::kThinking) block = {{"type", "thinking"}, {"thinking", ""}, {"signature", ""}};
  if (kind == Block::kToolUse) {
    block = {{"type", "tool_use"}, {"id", piece.tool_id}, {"name", piece.text}, {"input", Json::object()}};
  }
  open_ = kind;
  tool_arguments_.clear();
  content_.push_back(block);
  return sse_event({{"type", "content_block_start"}, {"index", content_.size() - 1}, {"content_block", block}});
}

std::string AnthropicMessage::close() {
  if (open_ == Block::kNone) return "";
  if (open_ == Block::kToolUse) {
    Json input = Json::parse(tool_arguments_, nullptr, false);
    content_.back()["input"] = input.is_object() ? input : Json::object();
  }
  open_ = Block::kNone;
  return sse_event({{"type", "content_block_stop"}, {"index", content_.size() - 1}});
}

std::string AnthropicMessage::add(const std::vector<ChatPiece>& pieces) {
  std::string events;
  for (const ChatPiece& piece : pieces) {
    Json delta;
    switch (piece.kind) {
      case ChatPiece::Kind::kContent:
      case ChatPiece::Kind::kReasoning: {
        if (piece.text.empty()) continue;
        const bool text = piece.kind == ChatPiece::Kind::kContent;
        const Block kind = text ? Block::kText : Block::kThinking;
        if (open_ != kind) {
          events += close();  // two statements: the operands of + have no set order
          events += open(kind, piece);
        }
        const char* field = text ? "text" : "thinking";
        content_.back()[field] = content_.back()[field].get<std::string>() + piece.text;
        delta = {{"type", text ? "text_delta" : "thinking_delta"}, {field, piece.text}};
        break;
      }
      case ChatPiece::Kind::kToolCallStart:
        events += close();
        events += open(Block::kToolUse, piece);
        continue;
      case ChatPiece::Kind::kToolCallArguments:
        if (open_ != Block::kToolUse || piece.text.empty()) continue;
        tool_arguments_ += piece.text;
        delta = {{"type", "input_json_delta"}, {"partial_json", piece.text}};
        break;
    }
    events += sse_event({{"type", "content_block_delta"}, {"index", content_.size() - 1}, {"delta", std::move(delta)}});
  }
  return events;
}

std::string AnthropicMessage::finish(const std::string& stop_reason, const std::string& stop_string,
                                     int64_t output_tokens, int64_t cached_input_tokens) {
  std::string events = close();
  stop_reason_ = stop_reason;
  stop_string_ = stop_reason == "stop_sequence" ? stop_string : "";
  output_tokens_ = output_tokens;
  cached_input_tokens_ = cached_input_tokens;
  Json delta = {{"stop_reason", stop_reason_}, {"stop_sequence", nullptr}};
  if (!stop_string_.empty()) delta["stop_sequence"] = stop_string_;
  events += sse_event({{"type", "message_delta"}, {"delta", std::move(delta)}, {"usage", final_usage()}});
  return events + sse_event({{"type", "message_stop"}});
}

Json AnthropicMessage::message() const {
  Json message = {{"id", id_},
                  {"type", "message"},
                  {"role", "assistant"},
                  {"model", model_},
                  {"content", content_},
                  {"stop_reason", nullptr},
                  {"stop_sequence", nullptr},
                  {"usage", final_usage()}};
  if (!stop_reason_.empty()) message["stop_reason"] = stop_reason_;
  if (!stop_string_.empty()) message["stop_sequence"] = stop_string_;
  return message;
}

Json AnthropicMessage::final_usage() const {
  return {{"input_tokens", input_tokens_ - cached_input_tokens_},
          {"cache_creation_input_tokens", 0},
          {"cache_read_input_tokens", cached_input_tokens_},
          {"output_tokens", output_tokens_}};
}

}  // namespace tachyon::server
