// POST /v1/responses body -> ResponsesRequest: the Responses fields are checked and rewritten as
// the OpenAI chat body they mean, which parse_chat_request then validates as it does for the chat
// route (sampling ranges, tool schemas, the structured-output schema, the model name). Only mapped
// fields are carried over, and the fields this server cannot honour (stored responses, hosted
// tools, background runs) are refused by name. See responses_api.h.
#include <array>

#include "tachyon/server/openai_request_fields.h"
#include "tachyon/server/responses_api.h"

namespace tachyon::server {
namespace {

using fields::Json;
using fields::object_at;

std::string at(const std::string& path, size_t i) { return path + "[" + std::to_string(i) + "]"; }

std::string required_string(const Json& object, const std::string& name, const std::string& path) {
  std::optional<std::string> value = fields::read_string(object, name, path + "." + name);
  if (!value) fields::fail(path + "." + name, "Missing required parameter: '" + path + "." + name + "'.");
  return *value;
}

// A message's content: a string, or text parts ("input_text"; an assistant's "output_text" or
// "refusal") joined with "\n". Images, files and audio are refused: this server reads text.
std::string content_text(const Json& content, const std::string& role, const std::string& path) {
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array()) {
    fields::fail(path, "Invalid type for '" + path + "': expected a string or an array of content parts, but got " +
                           fields::type_name(content) + ".");
  }
  std::string text;
  for (size_t i = 0; i < content.size(); ++i) {
    const std::string part_path = at(path, i);
    const Json& part = object_at(content[i], part_path);
    const std::string type = required_string(part, "type", part_path);
    const bool assistant_text = role == "assistant" && (type == "output_text" || type == "refusal");
    if (type != "input_text" && !assistant_text) {
      fields::fail(part_path + ".type", "Content part type '" + type + "' in '" + part_path + ".type' is not supported "
                                        "by this server; only text parts are (input_text, and output_text or refusal "
                                        "in an assistant message).");
    }
    if (i > 0) text += "\n";
    text += required_string(part, type == "refusal" ? "refusal" : "text", part_path);
  }
  return text;
}

// The assistant message that a function_call or reasoning item belongs to: the last message when
// it is an assistant's with no tool result after it, else a new one.
Json& assistant_turn(Json& messages) {
  if (messages.empty() || messages.back()["role"] != "assistant") {
    messages.push_back({{"role", "assistant"}, {"content", ""}});
  }
  return messages.back();
}

// The conversation's items -> chat messages appended to `out`. Items from `first_own` on are the
// request's input (errors name them "input[i]"); those before, a kept response's.
void convert_items(const Json& input, size_t first_own, Json& out) {
  std::string reasoning;  // a reasoning item's text, for the assistant turn that follows it
  for (size_t i = 0; i < input.size(); ++i) {
    const std::string path = i >= first_own ? at("input", i - first_own) : "previous_response_id";
    const Json& item = object_at(input[i], path);
    const std::string type = fields::read_string(item, "type", path + ".type").value_or("message");
    if (type == "message") {
      const std::string role = required_string(item, "role", path);
      if (role != "user" && role != "assistant" && role != "system" && role != "developer") {
        fields::fail(path + ".role", "Invalid value for '" + path + ".role': '" + role +
                                         "'. Expected user, assistant, system or developer.");
      }
      const Json* content = fields::find(item, "content");
      if (content == nullptr) fields::fail(path + ".content", "Missing required parameter: '" + path + ".content'.");
      Json message = {{"role", role == "developer" ? "system" : role},
                      {"content", content_text(*content, role, path + ".content")}};
      if (role == "assistant" && !reasoning.empty()) message["reasoning_content"] = std::exchange(reasoning, "");
      out.push_back(std::move(message));
    } else if (type == "function_call") {
      Json& turn = assistant_turn(out);
      if (!reasoning.empty()) turn["reasoning_content"] = std::exchange(reasoning, "");
      turn["tool_calls"].push_back({{"id", required_string(item, "call_id", path)},
                                    {"type", "function"},
                                    {"function", {{"name", required_string(item, "name", path)},
                                                  {"arguments", required_string(item, "arguments", path)}}}});
    } else if (type == "function_call_output") {
      const Json* output = fields::find(item, "output");
      if (output == nullptr) fields::fail(path + ".output", "Missing required parameter: '" + path + ".output'.");
      out.push_back({{"role", "tool"},
                     {"tool_call_id", required_string(item, "call_id", path)},
                     {"content", content_text(*output, "tool", path + ".output")}});
    } else if (type == "reasoning") {
      // Its text parts (reasoning_text), else its summary's (summary_text); encrypted content is
      // opaque to this server.
      for (const char* key : {"content", "summary"}) {
        const Json* parts = fields::find(item, key);
        if (parts == nullptr || !reasoning.empty()) continue;
        const std::string parts_path = path + "." + key;
        if (!parts->is_array()) fields::fail(parts_path, "Invalid type for '" + parts_path + "': expected an array.");
        for (size_t j = 0; j < parts->size(); ++j) {
          reasoning += required_string(object_at((*parts)[j], at(parts_path, j)), "text", at(parts_path, j));
        }
      }
    } else if (type == "item_reference") {
      fields::fail(path + ".type", "'item_reference' items ('" + path + ".type') are not supported: send the items "
                                   "themselves, or continue a kept response with 'previous_response_id'.");
    } else {
      fields::fail(path + ".type", "Input item type '" + type + "' in '" + path + ".type' is not supported by this "
                                   "server; message, function_call, function_call_output and reasoning items are.");
    }
  }
}

Json convert_tools(const Json& tools) {
  if (!tools.is_array()) {
    fields::fail("tools", "Invalid type for 'tools': expected an array, but got " + fields::type_name(tools) + ".");
  }
  Json out = Json::array();
  for (size_t i = 0; i < tools.size(); ++i) {
    const std::string path = at("tools", i);
    const Json& tool = object_at(tools[i], path);
    const std::string type = required_string(tool, "type", path);
    if (type != "function") {
      fields::fail(path + ".type", "Tool type '" + type + "' in '" + path + ".type' is not supported by this server; "
                                   "only function tools ({\"type\": \"function\", \"name\", \"parameters\"}) are.");
    }
    Json function = {{"name", required_string(tool, "name", path)}};
    for (const char* key : {"description", "parameters", "strict"}) {
      if (const Json* value = fields::find(tool, key)) function[key] = *value;
    }
    out.push_back({{"type", "function"}, {"function", std::move(function)}});
  }
  return out;
}

Json convert_tool_choice(const Json& choice) {
  if (choice.is_string()) return choice;  // auto, none, required: the chat parser checks the value
  object_at(choice, "tool_choice");
  const std::string type = required_string(choice, "type", "tool_choice");
  if (type != "function") {
    fields::fail("tool_choice.type", "Invalid value for 'tool_choice.type': '" + type + "'. Expected 'function' (or "
                                     "tool_choice as 'auto', 'none' or 'required').");
  }
  return {{"type", "function"}, {"function", {{"name", required_string(choice, "name", "tool_choice")}}}};
}

// text.format -> the chat body's response_format.
Json convert_text_format(const Json& text) {
  object_at(text, "text");
  const Json* format = fields::find(text, "format");
  if (format == nullptr) return nullptr;
  object_at(*format, "text.format");
  const std::string type = required_string(*format, "type", "text.format");
  if (type == "text" || type == "json_object") return {{"type", type}};
  if (type != "json_schema") {
    fields::fail("text.format.type", "Invalid value for 'text.format.type': '" + type +
                                         "'. Expected 'text', 'json_object' or 'json_schema'.");
  }
  Json schema = {{"name", required_string(*format, "name", "text.format")}};
  const Json* given = fields::find(*format, "schema");
  if (given == nullptr) fields::fail("text.format.schema", "Missing required parameter: 'text.format.schema'.");
  schema["schema"] = *given;
  for (const char* key : {"description", "strict"}) {
    if (const Json* value = fields::find(*format, key)) schema[key] = *value;
  }
  return {{"type", "json_schema"}, {"json_schema", std::move(schema)}};
}

// reasoning.effort -> enable_thinking for the templates that read it: "minimal" and "none" turn
// the reasoning off, any other effort on (the effort itself is not a budget here).
void convert_reasoning(const Json& reasoning, Json& chat) {
  object_at(reasoning, "reasoning");
  const std::optional<std::string> effort = fields::read_string(reasoning, "effort", "reasoning.effort");
  if (!effort) return;
  static constexpr std::array<std::string_view, 5> kEfforts = {"none", "minimal", "low", "medium", "high"};
  if (std::find(kEfforts.begin(), kEfforts.end(), *effort) == kEfforts.end()) {
    fields::fail("reasoning.effort", "Invalid value for 'reasoning.effort': '" + *effort +
                                         "'. Expected none, minimal, low, medium or high.");
  }
  chat["chat_template_kwargs"] = {{"enable_thinking", *effort != "none" && *effort != "minimal"}};
}

// Fields that need what this server does not have: stored responses, conversations and prompts,
// background runs, hosted tools' limits. Refused by name instead of ignored.
void refuse_unserved_fields(const Json& body) {
  for (const char* key : {"conversation", "prompt"}) {
    if (fields::find(body, key) != nullptr) {
      fields::fail(key, std::string("'") + key + "' is not supported: this server keeps no conversations or prompts; "
                                                 "send the input with each request, or continue a response with "
                                                 "'previous_response_id'.");
    }
  }
  if (fields::read_bool(body, "background", "background").value_or(false)) {
    fields::fail("background", "'background' responses are not supported by this server; stream the response instead.");
  }
  if (const Json* truncation = fields::find(body, "truncation"); truncation != nullptr && *truncation != "disabled") {
    fields::fail("truncation",
                 "Only 'truncation': 'disabled' is supported: an input longer than the context is an error.");
  }
  if (fields::find(body, "max_tool_calls") != nullptr) {
    fields::fail("max_tool_calls", "'max_tool_calls' is not supported by this server.");
  }
}

// Whether the output text's logprobs are asked for: "message.output_text.logprobs" in `include`,
// or top_logprobs > 0. Not with tools: a call's tokens are no output text, and which of an
// answer's tokens a call took is not tracked. The other values of `include` concern items this
// server never writes (hosted tools' outputs) or has nothing for (encrypted reasoning: its
// reasoning items carry their text instead), and ask for nothing to change.
bool wants_logprobs(const Json& body) {
  std::optional<size_t> asked;
  if (const Json* include = fields::find(body, "include")) {
    if (!include->is_array()) fields::fail("include", "Invalid type for 'include': expected an array of strings.");
    for (size_t i = 0; i < include->size(); ++i) {
      if ((*include)[i] == "message.output_text.logprobs") asked = i;
    }
  }
  const int64_t top = fields::read_int(body, "top_logprobs", "top_logprobs", 0, 20).value_or(0);
  const Json* tools = fields::find(body, "tools");
  if ((asked || top > 0) && tools != nullptr && tools->is_array() && !tools->empty()) {
    const std::string field = asked ? at("include", *asked) : "top_logprobs";
    fields::fail(field, "Logprobs ('" + field + "') with 'tools' are not supported on /v1/responses: a tool call's "
                        "tokens are not output text. Ask for one or the other.");
  }
  return asked || top > 0;
}

// The input as GET .../input_items lists it (ResponsesRequest::input_items), once convert_items
// took it; a field of another type than expected is read as absent all the same.
Json listed_input_items(const Json& input) {
  auto text_of = [](const Json& item, const char* key) {
    const auto it = item.find(key);
    return it != item.end() && it->is_string() ? it->get<std::string>() : std::string();
  };
  const Json given = input.is_string() ? Json::array({{{"role", "user"}, {"content", input}}}) : input;
  Json out = Json::array();
  for (Json item : given) {
    if (item.is_object()) {
      if (!item.contains("type") && item.contains("role")) item["type"] = "message";
      const std::string type = text_of(item, "type");
      if (type == "message") {
        if (const auto content = item.find("content"); content != item.end() && content->is_string()) {
          const char* part = text_of(item, "role") == "assistant" ? "output_text" : "input_text";
          *content = Json::array({{{"type", part}, {"text", *content}}});
        }
        if (!item.contains("status")) item["status"] = "completed";
      }
      if (!item.contains("id") || !item["id"].is_string()) {
        const std::string prefix = type == "message"                ? "msg_"
                                   : type == "function_call"        ? "fc_"
                                   : type == "function_call_output" ? "fco_"
                                   : type == "reasoning"            ? "rs_"
                                                                    : "item_";
        item.erase("id");
        Json with_id = {{"id", prefix + make_tool_call_id().substr(5)}};
        with_id.update(item);  // the id first, as OpenAI lists it
        item = std::move(with_id);
      }
    }
    out.push_back(std::move(item));
  }
  return out;
}

}  // namespace

ApiException with_responses_fields(const ApiException& e) {
  ApiError error = e.error();
  static constexpr std::array<std::pair<std::string_view, std::string_view>, 5> kRenamed = {
      {{"max_completion_tokens", "max_output_tokens"}, {"response_format.json_schema", "text.format"},
       {"response_format", "text.format"}, {"messages", "input"}, {".function.", "."}}};
  for (const auto& [from, to] : kRenamed) {
    for (std::string* s : {&error.param, &error.message}) {
      for (size_t k = 0; (k = s->find(from, k)) != std::string::npos; k += to.size()) s->replace(k, from.size(), to);
    }
  }
  return ApiException(std::move(error));
}

ResponsesRequest parse_responses_request(std::string_view body_text, const ServerLimits& limits,
                                         const PreviousItems& previous) {
  const Json body = fields::parse_body(body_text, limits);
  refuse_unserved_fields(body);
  ResponsesRequest request;
  request.store = fields::read_bool(body, "store", "store").value_or(true);
  // The conversation: the continued response's items (not its instructions), then the input.
  if (std::optional<std::string> id = fields::read_string(body, "previous_response_id", "previous_response_id")) {
    if (!previous) {
      fields::fail("previous_response_id", "'previous_response_id' is not supported: this server keeps no responses "
                                           "(--responses-store-mb 0, or a prefill/decode role); send the whole input.");
    }
    std::optional<Json> items = previous(*id);
    if (!items) {
      fields::fail("previous_response_id", "Previous response with id '" + *id + "' not found (never kept, deleted, "
                                           "or dropped as the least recently used).");
    }
    request.items = std::move(*items);
  }
  const Json* input = fields::find(body, "input");
  if (input == nullptr) fields::fail("input", "Missing required parameter: 'input'.");
  if (input->is_string()) {
    request.items.push_back({{"role", "user"}, {"content", *input}});
  } else {
    if (!input->is_array()) {
      fields::fail("input", "Invalid type for 'input': expected a string or an array of input items, but got " +
                                fields::type_name(*input) + ".");
    }
    if (input->empty()) fields::fail("input", "'input' must contain at least one item.");
    request.items.insert(request.items.end(), input->begin(), input->end());
  }
  Json messages = Json::array();
  if (std::optional<std::string> instructions = fields::read_string(body, "instructions", "instructions")) {
    messages.push_back({{"role", "system"}, {"content", *instructions}});
  }
  convert_items(request.items, request.items.size() - (input->is_array() ? input->size() : 1), messages);
  request.input_items = listed_input_items(*input);  // after convert_items refused what it cannot read
  Json chat = {{"messages", std::move(messages)}};
  if (const Json* model = fields::find(body, "model")) chat["model"] = *model;
  if (const Json* max = fields::find(body, "max_output_tokens")) chat["max_completion_tokens"] = *max;
  for (const char* name : {"temperature", "top_p", "stream", "parallel_tool_calls", "user", "safety_identifier"}) {
    if (const Json* value = fields::find(body, name)) chat[name] = *value;
  }
  if (const Json* tools = fields::find(body, "tools")) chat["tools"] = convert_tools(*tools);
  if (const Json* choice = fields::find(body, "tool_choice")) chat["tool_choice"] = convert_tool_choice(*choice);
  if (const Json* text = fields::find(body, "text")) {
    if (Json format = convert_text_format(*text); !format.is_null()) chat["response_format"] = std::move(format);
  }
  if (const Json* reasoning = fields::find(body, "reasoning")) convert_reasoning(*reasoning, chat);
  if (wants_logprobs(body)) {
    chat["logprobs"] = true;
    if (const Json* top = fields::find(body, "top_logprobs")) chat["top_logprobs"] = *top;
  }
  if (const Json* metadata = fields::find(body, "metadata")) {
    object_at(*metadata, "metadata");
    if (metadata->size() > 16) fields::fail("metadata", "'metadata' may hold at most 16 keys.");
    for (const auto& [key, value] : metadata->items()) {
      if (!value.is_string() || key.size() > 64 || value.get<std::string>().size() > 512) {
        fields::fail("metadata." + key, "'metadata' keys are strings of at most 64 characters and its values strings "
                                        "of at most 512.");
      }
    }
  }
  // The chat body nests a tool's parameters one level deeper than this body did (in "function").
  ServerLimits converted = limits;
  converted.max_json_depth += 1;
  try {
    request.chat = parse_chat_request(chat.dump(), converted);
  } catch (const ApiException& e) {
    throw with_responses_fields(e);
  }
  // What the response object repeats of the request, where it was given (ResponseBuilder fills in
  // the defaults); a text without a format repeats as the default one.
  for (const char* name : {"instructions", "max_output_tokens", "temperature", "top_p", "user", "reasoning",
                           "previous_response_id", "metadata", "tools", "tool_choice", "top_logprobs"}) {
    if (const Json* value = fields::find(body, name)) request.echo[name] = *value;
  }
  if (const Json* text = fields::find(body, "text"); text != nullptr && text->contains("format")) {
    request.echo["text"] = *text;
  }
  request.echo["parallel_tool_calls"] = request.chat.parallel_tool_calls;
  return request;
}

}  // namespace tachyon::server
