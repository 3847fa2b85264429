// The Responses API's response object and its streamed events, from the chat output's pieces.
// See responses_api.h.
#include <algorithm>
#include <vector>

#include "tachyon/server/openai_errors.h"
#include "tachyon/server/openai_responses.h"
#include "tachyon/server/responses_api.h"

namespace tachyon::server {

using Json = nlohmann::ordered_json;

std::string make_response_id() { return "resp_" + make_tool_call_id().substr(5); }

ResponseBuilder::ResponseBuilder(std::string id, std::string model, int64_t created_at, Json echo, int64_t input_tokens)
    : id_(std::move(id)), model_(std::move(model)), created_at_(created_at), echo_(std::move(echo)),
      input_tokens_(input_tokens) {}

std::string ResponseBuilder::event(Json payload) {
  payload["sequence_number"] = sequence_++;
  return sse_event(payload);
}

std::string ResponseBuilder::start() {
  std::string events = event({{"type", "response.created"}, {"response", response()}});
  return events + event({{"type", "response.in_progress"}, {"response", response()}});  // numbered in order
}

std::string ResponseBuilder::open(Item kind, const ChatPiece& piece) {
  const std::string suffix = make_tool_call_id().substr(5);
  Json item;
  if (kind == Item::kMessage) {
    item = {{"id", "msg_" + suffix}, {"type", "message"}, {"status", "in_progress"}, {"role", "assistant"},
            {"content", Json::array()}};
  } else if (kind == Item::kReasoning) {
    item = {{"id", "rs_" + suffix}, {"type", "reasoning"}, {"summary", Json::array()}, {"content", Json::array()}};
  } else {
    item = {{"id", "fc_" + suffix}, {"type", "function_call"}, {"status", "in_progress"}, {"arguments", ""},
            {"call_id", piece.tool_id}, {"name", piece.text}};
  }
  open_ = kind;
  output_.push_back(item);
  const size_t index = output_.size() - 1;
  std::string events = event({{"type", "response.output_item.added"}, {"output_index", index}, {"item", item}});
  const Json empty_part =
      kind == Item::kMessage
          ? Json{{"type", "output_text"}, {"text", ""}, {"annotations", Json::array()}, {"logprobs", Json::array()}}
          : Json{{"type", "reasoning_text"}, {"text", ""}};
  if (kind != Item::kFunctionCall) {
    output_.back()["content"].push_back(empty_part);
    events += event({{"type", "response.content_part.added"}, {"item_id", item["id"]}, {"output_index", index},
                     {"content_index", 0}, {"part", empty_part}});
  }
  return events;
}

std::string ResponseBuilder::close(const char* status) {
  if (open_ == Item::kNone) return "";
  Json& item = output_.back();
  const size_t index = output_.size() - 1;
  std::string events;
  if (open_ == Item::kFunctionCall) {
    events += event({{"type", "response.function_call_arguments.done"}, {"item_id", item["id"]},
                     {"output_index", index}, {"arguments", item["arguments"]}, {"name", item["name"]}});
  } else {
    const Json& part = item["content"][0];
    const bool message = open_ == Item::kMessage;
    if (message) {  // entries whose text never came (a stop string held it back) end with the part
      for (Json& entry : pending_logprobs_) item["content"][0]["logprobs"].push_back(std::move(entry));
      pending_logprobs_ = Json::array();
    }
    Json done = {{"type", message ? "response.output_text.done" : "response.reasoning_text.done"},
                 {"item_id", item["id"]}, {"output_index", index}, {"content_index", 0}, {"text", part["text"]}};
    if (message) done["logprobs"] = part["logprobs"];
    events += event(std::move(done));
    events += event({{"type", "response.content_part.done"}, {"item_id", item["id"]}, {"output_index", index},
                     {"content_index", 0}, {"part", part}});
  }
  if (item.contains("status")) item["status"] = status;
  open_ = Item::kNone;
  return events + event({{"type", "response.output_item.done"}, {"output_index", index}, {"item", item}});
}

std::string ResponseBuilder::add(const std::vector<ChatPiece>& pieces, const Json* logprobs) {
  if (logprobs != nullptr) {
    for (const Json& entry : *logprobs) pending_logprobs_.push_back(entry);
  }
  std::string events;
  for (const ChatPiece& piece : pieces) {
    switch (piece.kind) {
      case ChatPiece::Kind::kContent:
      case ChatPiece::Kind::kReasoning: {
        if (piece.text.empty()) continue;
        const bool message = piece.kind == ChatPiece::Kind::kContent;
        const Item kind = message ? Item::kMessage : Item::kReasoning;
        if (open_ != kind) {
          events += close();  // two statements: the operands of + have no set order
          events += open(kind, piece);
        }
        Json& part = output_.back()["content"][0];
        part["text"] = part["text"].get<std::string>() + piece.text;
        Json delta = {{"type", message ? "response.output_text.delta" : "response.reasoning_text.delta"},
                      {"item_id", output_.back()["id"]}, {"output_index", output_.size() - 1}, {"content_index", 0},
                      {"delta", piece.text}};
        if (message) {
          delta["logprobs"] = std::move(pending_logprobs_);
          pending_logprobs_ = Json::array();
          for (const Json& entry : delta["logprobs"]) part["logprobs"].push_back(entry);
        }
        events += event(std::move(delta));
        break;
      }
      case ChatPiece::Kind::kToolCallStart:
        events += close();
        events += open(Item::kFunctionCall, piece);
        break;
      case ChatPiece::Kind::kToolCallArguments:
        if (open_ != Item::kFunctionCall || piece.text.empty()) continue;
        output_.back()["arguments"] = output_.back()["arguments"].get<std::string>() + piece.text;
        events += event({{"type", "response.function_call_arguments.delta"}, {"item_id", output_.back()["id"]},
                         {"output_index", output_.size() - 1}, {"delta", piece.text}});
        break;
    }
  }
  return events;
}

std::string ResponseBuilder::finish(const std::string& finish_reason, int64_t output_tokens, int64_t cached_tokens,
                                    int64_t reasoning_tokens) {
  // An item the token limit cut is incomplete, as the response is.
  std::string events = close(finish_reason == "length" ? "incomplete" : "completed");
  output_tokens_ = output_tokens;
  cached_tokens_ = cached_tokens;
  reasoning_tokens_ = reasoning_tokens;
  status_ = finish_reason == "length" ? "incomplete" : "completed";
  if (finish_reason == "length") incomplete_reason_ = "max_output_tokens";
  return events + event({{"type", status_ == "completed" ? "response.completed" : "response.incomplete"},
                         {"response", response()}});  // events first: its number is the next
}

Json ResponseBuilder::response() const {
  auto echoed = [this](const char* name, Json fallback) {
    const auto it = echo_.find(name);
    return it == echo_.end() || it->is_null() ? fallback : *it;
  };
  Json response = {{"id", id_},
                   {"object", "response"},
                   {"created_at", created_at_},
                   {"status", status_},
                   {"background", false},
                   {"error", nullptr},
                   {"incomplete_details", nullptr},
                   {"instructions", echoed("instructions", nullptr)},
                   {"max_output_tokens", echoed("max_output_tokens", nullptr)},
                   {"model", model_},
                   {"output", output_},
                   {"parallel_tool_calls", echoed("parallel_tool_calls", true)},
                   {"previous_response_id", echoed("previous_response_id", nullptr)},
                   {"reasoning", echoed("reasoning", Json{{"effort", nullptr}, {"summary", nullptr}})},
                   {"store", echoed("store", false)},
                   {"temperature", echoed("temperature", 1.0)},
                   {"text", echoed("text", Json{{"format", {{"type", "text"}}}})},
                   {"tool_choice", echoed("tool_choice", "auto")},
                   {"tools", echoed("tools", Json::array())},
                   {"top_logprobs", echoed("top_logprobs", 0)},
                   {"top_p", echoed("top_p", 1.0)},
                   {"truncation", "disabled"},
                   {"usage", nullptr},
                   {"user", echoed("user", nullptr)},
                   {"metadata", echoed("metadata", Json::object())}};
  if (!incomplete_reason_.empty()) response["incomplete_details"] = {{"reason", incomplete_reason_}};
  if (status_ != "in_progress") {
    response["usage"] = {{"input_tokens", input_tokens_},
                         {"input_tokens_details", {{"cached_tokens", cached_tokens_}}},
                         {"output_tokens", output_tokens_},
                         {"output_tokens_details", {{"reasoning_tokens", reasoning_tokens_}}},
                         {"total_tokens", input_tokens_ + output_tokens_}};
  }
  return response;
}

Json input_item_list(const Json& items, bool ascending, const std::string& after, int64_t limit) {
  std::vector<const Json*> ordered;
  for (const Json& item : items) ordered.push_back(&item);
  if (!ascending) std::reverse(ordered.begin(), ordered.end());
  size_t begin = 0;
  if (!after.empty()) {
    const auto at = std::find_if(ordered.begin(), ordered.end(),
                                 [&](const Json* item) { return item->is_object() && item->value("id", "") == after; });
    if (at == ordered.end()) {
      throw ApiException({400, "No input item with id '" + after + "' in this response.", "invalid_request_error",
                          "after", ""});
    }
    begin = static_cast<size_t>(at - ordered.begin()) + 1;
  }
  const size_t end = std::min(ordered.size(), begin + static_cast<size_t>(std::max<int64_t>(limit, 0)));
  Json data = Json::array();
  for (size_t i = begin; i < end; ++i) data.push_back(*ordered[i]);
  auto id_of = [](const Json& item) { return item.is_object() && item.contains("id") ? item["id"] : Json(nullptr); };
  return {{"object", "list"},
          {"data", data},
          {"first_id", data.empty() ? Json(nullptr) : id_of(data.front())},
          {"last_id", data.empty() ? Json(nullptr) : id_of(data.back())},
          {"has_more", end < ordered.size()}};
}

}  // namespace tachyon::server
