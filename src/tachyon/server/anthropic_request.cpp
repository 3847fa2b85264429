// POST /v1/messages body -> AnthropicRequest: the Anthropic fields are checked and rewritten as the
// OpenAI chat body they mean, which parse_chat_request then validates as it does for the chat
// route (sampling ranges, stop strings, tool arguments, the model name). Only mapped fields are
// carried over, so OpenAI-only fields (n, logprobs ...) cannot slip in. Every error names the
// field as the client sent it, in Anthropic's spelling ("messages.1.content.0.text"): the chat
// parser's are renamed (anthropic_field_paths.h). See anthropic_messages.h.
#include <limits>

#include "tachyon/server/anthropic_field_paths.h"
#include "tachyon/server/anthropic_messages.h"
#include "tachyon/server/openai_request_fields.h"

namespace tachyon::server {
namespace {

using fields::Json;
using fields::object_at;

std::string at(const std::string& path, size_t i) { return path + "." + std::to_string(i); }

std::string required_string(const Json& object, const std::string& name, const std::string& path) {
  std::optional<std::string> value = fields::read_string(object, name, path + "." + name);
  if (!value) fields::fail(path + "." + name, "'" + path + "." + name + "' is required.");
  return *value;
}

[[noreturn]] void unsupported_block(const std::string& type, const std::string& path) {
  fields::fail(path + ".type", "Content block type '" + type + "' in '" + path +
                                   "' is not supported by this server; only text, tool_use, tool_result and "
                                   "thinking blocks are.");
}

// fields::parse_body, whose nesting error names the field that nests too deep.
Json parse_anthropic_body(std::string_view text, const ServerLimits& limits) {
  try {
    return fields::parse_body(text, limits);
  } catch (const ApiException&) {
    if (std::optional<std::string> field = anthropic_field_too_deep(text, limits.max_json_depth)) {
      const std::string levels = std::to_string(limits.max_json_depth);
      fields::fail(*field, "'" + *field + "' is nested too deeply: the request body may nest arrays and objects "
                           "at most " + levels + " levels deep (the body is level 1).");
    }
    throw;
  }
}

// A string, or an array of text blocks joined with "\n" (system, tool_result content).
std::string text_of(const Json& value, const std::string& path) {
  if (value.is_string()) return value.get<std::string>();
  if (!value.is_array()) {
    fields::fail(path, "Invalid type for '" + path + "': expected a string or an array of text blocks, but got " +
                           fields::type_name(value) + ".");
  }
  std::string joined;
  for (size_t i = 0; i < value.size(); ++i) {
    const Json& block = object_at(value[i], at(path, i));
    const std::string type = required_string(block, "type", at(path, i));
    if (type != "text") unsupported_block(type, at(path, i));
    if (i > 0) joined += "\n";
    joined += required_string(block, "text", at(path, i));
  }
  return joined;
}

// One Anthropic message -> one or more chat messages appended to `out`.
void convert_message(const Json& message, const std::string& path, Json& out) {
  object_at(message, path);
  const std::string role = required_string(message, "role", path);
  if (role != "user" && role != "assistant") {
    fields::fail(path + ".role", "Invalid role '" + role + "' in '" + path + ".role': expected user or assistant.");
  }
  const std::string content_path = path + ".content";
  const Json* content = fields::find(message, "content");
  if (content == nullptr) fields::fail(content_path, "'" + content_path + "' is required.");
  if (content->is_string()) {
    out.push_back({{"role", role}, {"content", *content}});
    return;
  }
  if (!content->is_array()) {
    fields::fail(content_path, "Invalid type for '" + content_path +
                                   "': expected a string or an array of content blocks, but got " +
                                   fields::type_name(*content) + ".");
  }
  std::string text;
  std::string reasoning;
  bool has_text = false;
  Json tool_calls = Json::array();
  for (size_t i = 0; i < content->size(); ++i) {
    const std::string block_path = at(content_path, i);
    const Json& block = object_at((*content)[i], block_path);
    const std::string type = required_string(block, "type", block_path);
    if (type == "text") {
      if (has_text) text += "\n";
      text += required_string(block, "text", block_path);
      has_text = true;
    } else if (type == "tool_use" && role == "assistant") {
      const Json* input = fields::find(block, "input");
      if (input != nullptr) object_at(*input, block_path + ".input");
      tool_calls.push_back({{"id", required_string(block, "id", block_path)},
                            {"type", "function"},
                            {"function", {{"name", required_string(block, "name", block_path)},
                                          {"arguments", input ? *input : Json::object()}}}});
    } else if (type == "tool_result" && role == "user") {
      const Json* result = fields::find(block, "content");
      out.push_back({{"role", "tool"},
                     {"tool_call_id", required_string(block, "tool_use_id", block_path)},
                     {"content", result ? text_of(*result, block_path + ".content") : ""}});
    } else if (type == "thinking" && role == "assistant") {
      reasoning += required_string(block, "thinking", block_path);
    } else if (type == "redacted_thinking" && role == "assistant") {
      continue;  // opaque to this server
    } else if (type == "tool_use" || type == "tool_result" || type == "thinking") {
      fields::fail(block_path + ".type", "'" + type + "' blocks may not appear in a " + role + " message.");
    } else {
      unsupported_block(type, block_path);
    }
  }
  if (role == "user") {
    if (has_text || out.empty() || out.back()["role"] != "tool") out.push_back({{"role", "user"}, {"content", text}});
    return;
  }
  Json assistant = {{"role", "assistant"}, {"content", text}};
  if (!tool_calls.empty()) assistant["tool_calls"] = std::move(tool_calls);
  if (!reasoning.empty()) assistant["reasoning_content"] = reasoning;
  out.push_back(std::move(assistant));
}

// Anthropic's prefill: a final assistant message is the start of the answer, which the model
// continues (the answer holds only the continuation). Only text can be continued, so its other
// blocks are refused; as Anthropic does, so is text ending in whitespace (it would end in a
// token the model rarely continues from). Takes its converted message off `messages` (the route
// puts the text after the generation prompt, routes_messages.cpp) and returns the text.
std::string take_prefill(const Json& message, const std::string& path, Json& messages) {
  const Json& content = message["content"];  // checked by convert_message
  for (size_t i = 0; content.is_array() && i < content.size(); ++i) {
    const std::string type = content[i]["type"].get<std::string>();
    if (type == "text" || type == "redacted_thinking") continue;
    const std::string block_path = at(path + ".content", i);
    fields::fail(block_path, "'" + block_path + "' is a " + type + " block in the final assistant message, which is a "
                             "prefill the model continues as text; only text blocks can be continued. End 'messages' "
                             "with a user message (with the tool_result of a tool_use) instead.");
  }
  std::string text = messages.back()["content"].get<std::string>();
  messages.erase(messages.size() - 1);
  if (!text.empty() && std::string_view(" \t\n\r\f\v").find(text.back()) != std::string_view::npos) {
    fields::fail(path + ".content", "'" + path + ".content': final assistant content cannot end with trailing "
                                    "whitespace (it is a prefill the model continues).");
  }
  return text;
}

// The chat messages; `prefill` set when the last message is an assistant's (take_prefill).
Json convert_messages(const Json& body, std::optional<std::string>& prefill) {
  Json messages = Json::array();
  if (const Json* system = fields::find(body, "system")) {
    messages.push_back({{"role", "system"}, {"content", text_of(*system, "system")}});
  }
  const Json* given = fields::find(body, "messages");
  if (given == nullptr) fields::fail("messages", "'messages' is required: a non-empty array of messages.");
  if (!given->is_array()) {
    fields::fail("messages", "Invalid type for 'messages': expected an array, but got " + fields::type_name(*given) + ".");
  }
  if (given->empty()) fields::fail("messages", "'messages' must contain at least one message.");
  for (size_t i = 0; i < given->size(); ++i) convert_message((*given)[i], at("messages", i), messages);
  if (given->back()["role"] == "assistant") {
    prefill = take_prefill(given->back(), at("messages", given->size() - 1), messages);
  }
  return messages;
}

// What a prefill cannot go with, as Anthropic refuses it too: thinking (the model would reason
// before the text it must continue) and a forced tool call (the call would have to start where
// the text ends). Templates that reason by default get their reasoning closed before the text
// (enable_thinking false), so the text is where an answer's text goes, as it is when they render
// an assistant turn (vLLM's continue_final_message renders the same prompt).
void fit_prefill(const std::string& path, Json& chat) {
  if (chat.contains("chat_template_kwargs") && chat["chat_template_kwargs"]["enable_thinking"] == true) {
    fields::fail("thinking", "'thinking' cannot be enabled when the final message ('" + path + "') is an assistant "
                             "prefill: the model would reason before the text it must continue. Disable thinking, "
                             "or end 'messages' with a user message.");
  }
  if (chat.contains("tool_choice") && chat["tool_choice"] != "auto" && chat["tool_choice"] != "none") {
    fields::fail("tool_choice", "A forced tool call ('tool_choice' of type 'any' or 'tool') cannot follow an assistant "
                                "prefill (the final message, '" + path + "'): the call would have to start where its "
                                "text ends. Use 'auto', or end 'messages' with a user message.");
  }
  chat["chat_template_kwargs"] = {{"enable_thinking", false}};
}

Json convert_tools(const Json& tools) {
  if (!tools.is_array()) {
    fields::fail("tools", "Invalid type for 'tools': expected an array, but got " + fields::type_name(tools) + ".");
  }
  Json out = Json::array();
  for (size_t i = 0; i < tools.size(); ++i) {
    const std::string path = at("tools", i);
    const Json& tool = object_at(tools[i], path);
    std::optional<std::string> type = fields::read_string(tool, "type", path + ".type");
    if (type.value_or("custom") != "custom") {
      fields::fail(path + ".type", "Tool type '" + *type + "' is not supported by this server; only client tools "
                                   "({name, description, input_schema}) are.");
    }
    Json function = {{"name", required_string(tool, "name", path)}};
    if (std::optional<std::string> description = fields::read_string(tool, "description", path + ".description")) {
      function["description"] = *description;
    }
    const Json* schema = fields::find(tool, "input_schema");
    if (schema == nullptr) fields::fail(path + ".input_schema", "'" + path + ".input_schema' is required.");
    function["parameters"] = object_at(*schema, path + ".input_schema");
    out.push_back({{"type", "function"}, {"function", std::move(function)}});
  }
  return out;
}

void convert_tool_choice(const Json& choice, const Json& tools, Json& chat) {
  object_at(choice, "tool_choice");
  const std::string type = required_string(choice, "type", "tool_choice");
  if (std::optional<bool> off = fields::read_bool(choice, "disable_parallel_tool_use",
                                                  "tool_choice.disable_parallel_tool_use")) {
    chat["parallel_tool_calls"] = !*off;
  }
  if (type == "auto" || type == "none") {
    chat["tool_choice"] = type;
    return;
  }
  if ((type == "tool" || type == "any") && tools.empty()) {
    fields::fail("tool_choice", "'tool_choice' of type '" + type + "' needs a non-empty 'tools' list.");
  }
  if (type == "tool") {
    const std::string name = required_string(choice, "name", "tool_choice");
    bool known = false;
    for (const Json& tool : tools) known = known || tool["function"]["name"] == name;
    if (!known) {
      fields::fail("tool_choice.name", "Invalid value for 'tool_choice.name': no tool named '" + name + "' in 'tools'.");
    }
    chat["tool_choice"] = {{"type", "function"}, {"function", {{"name", name}}}};
  } else if (type == "any") {
    chat["tool_choice"] = "required";
  } else {
    fields::fail("tool_choice.type", "Invalid value for 'tool_choice.type': '" + type +
                                         "'. Expected 'auto', 'any', 'tool' or 'none'.");
  }
}

void convert_thinking(const Json& thinking, Json& chat) {
  object_at(thinking, "thinking");
  const std::string type = required_string(thinking, "type", "thinking");
  if (type == "enabled") {
    if (!fields::read_int(thinking, "budget_tokens", "thinking.budget_tokens", 1,
                          std::numeric_limits<int32_t>::max())) {
      fields::fail("thinking.budget_tokens", "'thinking.budget_tokens' is required when thinking is enabled.");
    }
  } else if (type != "disabled") {
    fields::fail("thinking.type", "Invalid value for 'thinking.type': '" + type + "'. Expected 'enabled' or 'disabled'.");
  }
  chat["chat_template_kwargs"] = {{"enable_thinking", type == "enabled"}};
}

// metadata.user_id: the end user, as OpenAI's `user` (ChatRequest::user). Other metadata keys are
// not read, as other fields this server does not map.
std::string read_user_id(const Json& body) {
  const Json* metadata = fields::find(body, "metadata");
  if (metadata == nullptr) return "";
  object_at(*metadata, "metadata");
  std::optional<std::string> user = fields::read_string(*metadata, "user_id", "metadata.user_id");
  if (user && user->size() > fields::kMaxUserBytes) {
    fields::fail("metadata.user_id", "'metadata.user_id' is " + std::to_string(user->size()) + " bytes; at most " +
                                         std::to_string(fields::kMaxUserBytes) + " are allowed.");
  }
  return user.value_or("");
}

}  // namespace

ChatRequest parse_anthropic_request(std::string_view body_text, const ServerLimits& limits, AnthropicRoute route) {
  Json body = parse_anthropic_body(body_text, limits);
  if (!fields::read_string(body, "model", "model")) fields::fail("model", "'model' is required.");
  // Counting tokens takes no max_tokens (Anthropic's count_tokens has none): one token of room.
  if (route == AnthropicRoute::kCountTokens) body["max_tokens"] = 1;
  const Json* max_tokens = fields::find(body, "max_tokens");
  if (max_tokens == nullptr) fields::fail("max_tokens", "'max_tokens' is required.");
  std::optional<std::string> prefill;
  Json chat = {{"model", body["model"]}, {"max_tokens", *max_tokens}, {"messages", convert_messages(body, prefill)}};
  if (const Json* stop = fields::find(body, "stop_sequences")) {
    if (!stop->is_array()) {
      fields::fail("stop_sequences",
                   "Invalid type for 'stop_sequences': expected an array of strings, but got " + fields::type_name(*stop) + ".");
    }
    chat["stop"] = *stop;
  }
  for (const char* name : {"temperature", "top_p", "top_k", "stream"}) {
    if (const Json* value = fields::find(body, name)) chat[name] = *value;
  }
  Json tools = Json::array();
  if (const Json* given = fields::find(body, "tools")) {
    tools = convert_tools(*given);
    chat["tools"] = tools;
  }
  if (const Json* choice = fields::find(body, "tool_choice")) convert_tool_choice(*choice, tools, chat);
  if (const Json* thinking = fields::find(body, "thinking")) convert_thinking(*thinking, chat);
  if (prefill) fit_prefill(at("messages", body["messages"].size() - 1), chat);
  const std::string user = read_user_id(body);
  // The chat body nests a tool_use input and a tool's input_schema one level deeper than the
  // Anthropic body did (inside "function"); that body passed the limit itself, above.
  ServerLimits converted = limits;
  converted.max_json_depth += 1;
  ChatRequest request;
  try {
    request = parse_chat_request(chat.dump(), converted);
  } catch (const ApiException& e) {
    throw with_anthropic_fields(e);
  }
  request.user = user;
  request.prefill = prefill.value_or("");
  return request;
}

}  // namespace tachyon::server
