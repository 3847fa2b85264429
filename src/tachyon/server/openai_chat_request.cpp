// POST /v1/chat/completions body -> ChatRequest. Messages are checked role by role and their
// content normalized to one string (text parts joined with "\n", as vLLM does) so the chat
// template sees one shape; sampling fields are shared with completions (openai_request_fields.h).
#include <algorithm>
#include <limits>

#include "tachyon/server/openai_protocol.h"
#include "tachyon/server/openai_request_fields.h"

namespace tachyon::server {

namespace {

using fields::Json;

bool known_role(const std::string& role) {
  return role == "system" || role == "user" || role == "assistant" || role == "tool" || role == "developer";
}

// content as a list of {"type":"text","text":...} parts -> the texts joined with "\n".
std::string join_text_parts(const Json& parts, const std::string& path) {
  std::string joined;
  for (size_t i = 0; i < parts.size(); ++i) {
    const Json& part = parts[i];
    std::string part_path = path + "[" + std::to_string(i) + "]";
    if (!part.is_object()) {
      fields::fail(part_path, "Invalid type for '" + part_path +
                                  "': expected an object like {\"type\": \"text\", "
                                  "\"text\": \"...\"}, but got " +
                                  fields::type_name(part) + ".");
    }
    std::optional<std::string> type = fields::read_string(part, "type", part_path + ".type");
    if (!type) fields::fail(part_path + ".type", "'" + part_path + ".type' is required.");
    if (*type != "text") {
      fields::fail(part_path + ".type", "Content part type '" + *type +
                                            "' is not supported by this server; only "
                                            "'text' parts are.");
    }
    std::optional<std::string> text = fields::read_string(part, "text", part_path + ".text");
    if (!text) fields::fail(part_path + ".text", "'" + part_path + ".text' is required.");
    if (i > 0) joined += "\n";
    joined += *text;
  }
  return joined;
}

// OpenAI's rule for a function's name (^[a-zA-Z0-9_-]{1,64}$). The name is spelled inside the
// model's tool-call markup and grammar: an empty one, or one like "</tool_call>", made a forced call
// come back as plain text.
bool is_tool_name(const std::string& name) {
  if (name.empty() || name.size() > 64) return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
  });
}

void check_tool_calls(Json& tool_calls, const std::string& path, int32_t max_depth) {
  if (!tool_calls.is_array()) {
    fields::fail(path,
                 "Invalid type for '" + path + "': expected an array, but got " + fields::type_name(tool_calls) + ".");
  }
  for (size_t i = 0; i < tool_calls.size(); ++i) {
    Json& call = tool_calls[i];
    std::string call_path = path + "[" + std::to_string(i) + "]";
    const Json* function = call.is_object() ? fields::find(call, "function") : nullptr;
    if (function == nullptr || !function->is_object()) {
      fields::fail(call_path, "'" + call_path + "' must be an object with a 'function' object.");
    }
    if (!fields::read_string(*function, "name", call_path + ".function.name")) {
      fields::fail(call_path + ".function.name", "'" + call_path + ".function.name' is required.");
    }
    Json& arguments = call["function"]["arguments"];
    if (arguments.is_string()) {  // templates read arguments as a mapping (vLLM parses them too)
      // The string is a JSON document of its own, nested inside the body: the body's depth limit
      // applies to it too, or copying and rendering it would recurse without bound.
      const std::string arguments_path = call_path + ".function.arguments";
      std::optional<Json> parsed =
          fields::parse_nested_document(arguments.get<std::string>(), arguments_path, max_depth);
      if (!parsed) {
        fields::fail(arguments_path,
                     "'" + arguments_path + "' must be a JSON-encoded string, but it is not valid JSON.");
      }
      arguments = std::move(*parsed);
    } else if (arguments.is_null()) {
      arguments = Json::object();
    }
  }
}

void check_message(Json& message, size_t index, int32_t max_depth) {
  std::string path = "messages[" + std::to_string(index) + "]";
  if (!message.is_object()) {
    fields::fail(path,
                 "Invalid type for '" + path + "': expected an object, but got " + fields::type_name(message) + ".");
  }
  std::optional<std::string> role = fields::read_string(message, "role", path + ".role");
  if (!role) fields::fail(path + ".role", "'" + path + ".role' is required.");
  if (!known_role(*role)) {
    fields::fail(path + ".role", "Invalid role '" + *role + "' in '" + path +
                                     ".role': expected one of system, user, assistant, tool, developer.");
  }
  bool has_tool_calls = false;
  if (message.contains("tool_calls") && !message["tool_calls"].is_null()) {
    if (*role != "assistant") fields::fail(path + ".tool_calls", "Only assistant messages may have 'tool_calls'.");
    check_tool_calls(message["tool_calls"], path + ".tool_calls", max_depth);
    has_tool_calls = !message["tool_calls"].empty();
  }
  fields::read_string(message, "name", path + ".name");
  fields::read_string(message, "tool_call_id", path + ".tool_call_id");
  std::string content_path = path + ".content";
  const Json* content = fields::find(message, "content");
  if (content == nullptr) {
    if (*role == "assistant" && has_tool_calls) {
      // "" rather than None, as vLLM: templates test `'</think>' in message.content` (Qwen3) or
      // print the content (Llama 3), and None raises or prints "None" there.
      message["content"] = "";
      return;
    }
    fields::fail(content_path, "'" + content_path +
                                   "' is required (it may be null only for an assistant message "
                                   "with tool_calls).");
  }
  if (content->is_string()) return;
  if (!content->is_array()) {
    fields::fail(content_path, "Invalid type for '" + content_path +
                                   "': expected a string or an array of text parts, "
                                   "but got " +
                                   fields::type_name(*content) + ".");
  }
  message["content"] = join_text_parts(*content, content_path);
}

void read_messages(Json& body, const ServerLimits& limits, ChatRequest& request) {
  auto it = body.find("messages");
  if (it == body.end() || it->is_null())
    fields::fail("messages", "'messages' is required: a non-empty array of messages.");
  if (!it->is_array()) {
    fields::fail("messages", "Invalid type for 'messages': expected an array, but got " + fields::type_name(*it) + ".");
  }
  if (it->empty()) fields::fail("messages", "'messages' must contain at least one message.");
  for (size_t i = 0; i < it->size(); ++i) check_message((*it)[i], i, limits.max_json_depth);
  request.messages = std::move(*it);
}

void read_tools(const Json& body, ChatRequest& request) {
  const Json* tools = fields::find(body, "tools");
  if (tools == nullptr) return;
  if (!tools->is_array())
    fields::fail("tools", "Invalid type for 'tools': expected an array, but got " + fields::type_name(*tools) + ".");
  for (size_t i = 0; i < tools->size(); ++i) {
    const Json& tool = (*tools)[i];
    std::string path = "tools[" + std::to_string(i) + "]";
    const Json* function = tool.is_object() ? fields::find(tool, "function") : nullptr;
    std::optional<std::string> type =
        tool.is_object() ? fields::read_string(tool, "type", path + ".type") : std::nullopt;
    if (function == nullptr || !function->is_object() || type.value_or("function") != "function") {
      fields::fail(path, "'" + path + "' must be {\"type\": \"function\", \"function\": {\"name\": ...}}.");
    }
    std::optional<std::string> name = fields::read_string(*function, "name", path + ".function.name");
    if (!name) fields::fail(path + ".function.name", "'" + path + ".function.name' is required.");
    if (!is_tool_name(*name)) {
      fields::fail(path + ".function.name", "'" + path + ".function.name' must be 1 to 64 letters, digits, '_' or '-' "
                                            "(OpenAI's rule), but got '" + *name + "'.");
    }
    if (const Json* parameters = fields::find(*function, "parameters"); parameters && !parameters->is_object()) {
      fields::fail(path + ".function.parameters", "Invalid type for '" + path +
                                                      ".function.parameters': expected an "
                                                      "object (a JSON schema), but got " +
                                                      fields::type_name(*parameters) + ".");
    } else if (const Json* type = parameters != nullptr ? fields::find(*parameters, "type") : nullptr;
               type != nullptr && *type != "object") {
      // A call's arguments are a JSON object (OpenAI's rule): a forced call of a tool whose
      // parameters were a string schema answered arguments that no client could read.
      fields::fail(path + ".function.parameters",
                   "'" + path + ".function.parameters' must describe an object (\"type\": \"object\"), but its "
                   "type is " + type->dump() + ".");
    }
  }
  request.tools = *tools;
}

bool has_tool(const Json& tools, const std::string& name) {
  if (!tools.is_array()) return false;
  for (const Json& tool : tools) {
    if (tool["function"]["name"] == name) return true;
  }
  return false;
}

// tool_choice and parallel_tool_calls, after the tools are read.
void read_tool_choice(const Json& body, ChatRequest& request) {
  request.parallel_tool_calls = fields::read_bool(body, "parallel_tool_calls", "parallel_tool_calls").value_or(true);
  const Json* choice = fields::find(body, "tool_choice");
  if (choice == nullptr) return;
  const bool has_tools = request.tools.is_array() && !request.tools.empty();
  if (choice->is_string()) {
    const std::string value = choice->get<std::string>();
    if (value == "auto") return;
    if (value == "none") {
      request.tool_choice = ToolChoice::kNone;
      return;
    }
    if (value != "required") {
      fields::fail("tool_choice", "Invalid value for 'tool_choice': '" + value +
                                      "'. Expected 'none', 'auto', 'required' or {\"type\": \"function\", "
                                      "\"function\": {\"name\": ...}}.");
    }
    request.tool_choice = ToolChoice::kRequired;
  } else if (choice->is_object()) {
    std::optional<std::string> type = fields::read_string(*choice, "type", "tool_choice.type");
    const Json* function = fields::find(*choice, "function");
    if (type.value_or("") != "function" || function == nullptr || !function->is_object()) {
      fields::fail("tool_choice", "'tool_choice' as an object must be {\"type\": \"function\", \"function\": "
                                  "{\"name\": ...}}.");
    }
    std::optional<std::string> name = fields::read_string(*function, "name", "tool_choice.function.name");
    if (!name) fields::fail("tool_choice.function.name", "'tool_choice.function.name' is required.");
    if (has_tools && !has_tool(request.tools, *name)) {
      fields::fail("tool_choice.function.name",
                   "Invalid value for 'tool_choice.function.name': no function named '" + *name + "' in 'tools'.");
    }
    request.tool_choice = ToolChoice::kFunction;
    request.tool_choice_function = *name;
  } else {
    fields::fail("tool_choice", "Invalid type for 'tool_choice': expected a string or an object, but got " +
                                    fields::type_name(*choice) + ".");
  }
  if (!has_tools) {
    fields::fail("tool_choice", "'tool_choice' " + std::string(request.tool_choice == ToolChoice::kRequired
                                                                  ? "'required'"
                                                                  : "naming a function") +
                                    " needs a non-empty 'tools' list.");
  }
}

void read_logprobs(const Json& body, const ServerLimits& limits, ChatRequest& request) {
  bool logprobs = fields::read_bool(body, "logprobs", "logprobs").value_or(false);
  std::optional<int64_t> top = fields::read_int(body, "top_logprobs", "top_logprobs", 0, limits.max_logprobs);
  if (top && *top > 0 && !logprobs) {
    fields::fail("top_logprobs", "'top_logprobs' requires 'logprobs' to be true.");
  }
  request.params.logprobs = logprobs ? static_cast<int32_t>(top.value_or(0)) : -1;
}

// Chat fields OpenAI defines that this server does not serve: refused by name, not ignored, so
// that a client relying on one learns it at once (the deprecated function-calling fields would
// otherwise yield plain text where the client expects a call; audio output, no audio at all).
void refuse_unserved_chat_fields(const Json& body) {
  if (fields::find(body, "functions") != nullptr) {
    fields::fail("functions", "'functions' (deprecated by OpenAI) is not supported by this server; pass the functions as "
                              "'tools' ({\"type\": \"function\", \"function\": {...}}) instead.");
  }
  if (fields::find(body, "function_call") != nullptr) {
    fields::fail("function_call", "'function_call' (deprecated by OpenAI) is not supported by this server; use "
                                  "'tool_choice' instead.");
  }
  if (const Json* modalities = fields::find(body, "modalities")) {
    if (!modalities->is_array()) {
      fields::fail("modalities", "Invalid type for 'modalities': expected an array, but got " +
                                     fields::type_name(*modalities) + ".");
    }
    for (const Json& m : *modalities) {
      if (m != "text") fields::fail("modalities", "this server answers with text only: 'modalities' may hold \"text\".");
    }
  }
  if (const Json* audio = fields::find(body, "audio"); audio != nullptr && !audio->is_null()) {
    fields::fail("audio", "this server answers with text only: 'audio' output is not supported.");
  }
}

// continue_final_message (vLLM's): the final message must be an assistant's text, which becomes
// the prefill the answer continues. Refused with what cannot continue a text: the template's
// generation prompt asked for on top of it, thinking (the model would reason before the text),
// a forced tool call or a structured-output constraint (the answer would have to start where
// the text ends). Reasoning templates get their reasoning closed (enable_thinking false).
void take_final_message(const Json& body, ChatRequest& request) {
  if (!fields::read_bool(body, "continue_final_message", "continue_final_message").value_or(false)) return;
  if (fields::read_bool(body, "add_generation_prompt", "add_generation_prompt").value_or(false)) {
    fields::fail("add_generation_prompt",
                 "'continue_final_message' and 'add_generation_prompt' cannot both be true: the answer continues "
                 "the final message instead of starting a new one.");
  }
  const Json& last = request.messages.back();
  if (last["role"] != "assistant" || !last["content"].is_string() || last.contains("tool_calls")) {
    fields::fail("continue_final_message", "'continue_final_message' needs the final message to be an assistant's "
                                           "text (no tool_calls) for the answer to continue.");
  }
  if (request.chat_template_kwargs.value("enable_thinking", false) == true) {
    fields::fail("chat_template_kwargs", "'enable_thinking' cannot be true with 'continue_final_message': the model "
                                         "would reason before the text it must continue.");
  }
  if (request.tool_choice == ToolChoice::kRequired || request.tool_choice == ToolChoice::kFunction) {
    fields::fail("tool_choice", "A forced tool call cannot follow 'continue_final_message': the call would have to "
                                "start where the final message's text ends.");
  }
  if (request.constraint) {
    fields::fail(request.constraint->field, "'" + request.constraint->field + "' cannot be combined with "
                                            "'continue_final_message': the answer would have to start where the "
                                            "final message's text ends.");
  }
  request.prefill = last["content"].get<std::string>();
  request.messages.erase(request.messages.size() - 1);
  request.add_generation_prompt = true;  // the rest is rendered as for an answer, which the prefill starts
  request.chat_template_kwargs["enable_thinking"] = false;
}

}  // namespace

ChatRequest parse_chat_request(std::string_view body_text, const ServerLimits& limits) {
  Json body = fields::parse_body(body_text, limits);
  fields::check_model(body, limits);
  ChatRequest request;
  read_messages(body, limits, request);
  read_tools(body, request);
  read_tool_choice(body, request);
  if (const Json* kwargs = fields::find(body, "chat_template_kwargs")) {
    if (!kwargs->is_object()) {
      fields::fail("chat_template_kwargs", "Invalid type for 'chat_template_kwargs': expected an object, but got " +
                                               fields::type_name(*kwargs) + ".");
    }
    request.chat_template_kwargs = *kwargs;
  }
  request.add_generation_prompt =
      fields::read_bool(body, "add_generation_prompt", "add_generation_prompt").value_or(true);
  constexpr int64_t kInt32Max = std::numeric_limits<int32_t>::max();
  std::optional<int64_t> max_tokens =
      fields::read_int(body, "max_completion_tokens", "max_completion_tokens", 1, kInt32Max);
  std::optional<int64_t> legacy_max = fields::read_int(body, "max_tokens", "max_tokens", 1, kInt32Max);
  if (!max_tokens) max_tokens = legacy_max;
  if (max_tokens) request.max_tokens = static_cast<int32_t>(*max_tokens);
  request.params.max_tokens =
      static_cast<int32_t>(max_tokens.value_or(std::min<int64_t>(limits.max_model_len, kInt32Max)));
  // Kept as asked for: the route may apply it after the model's reasoning (chat_generation).
  request.constraint = fields::read_structured_spec(body, limits);
  if (request.constraint && (request.tool_choice == ToolChoice::kRequired || request.tool_choice == ToolChoice::kFunction)) {
    fields::fail("tool_choice", "a forced tool call ('tool_choice' 'required' or naming a function) constrains the answer "
                                "to the call, so it cannot be combined with '" + request.constraint->field + "'.");
  }
  fields::read_sampling_fields(body, limits, request.params);
  fields::check_sequences(1, request.params.n, limits);
  read_logprobs(body, limits, request);
  fields::read_stream_fields(body, request.stream, request.include_usage);
  request.user = fields::read_user(body);
  refuse_unserved_chat_fields(body);
  take_final_message(body, request);
  fields::validate_params(request.params, limits);
  return request;
}

}  // namespace tachyon::server
