// DeepSeek-V3.2's chat prompt; see deepseek_v32_prompt.h.
#include "tachyon/tokenizer/deepseek_v32_prompt.h"

#include <vector>

#include "tachyon/base/check.h"
#include "tachyon/tokenizer/jinja/json_dump.h"
#include "tachyon/tokenizer/jinja/value.h"

namespace tachyon::tokenizer {
namespace {

using Json = nlohmann::ordered_json;

const std::string kDsml = kDsmlToken;
const std::string kUser =
    "<\xEF\xBD\x9C"
    "User\xEF\xBD\x9C>";  // <｜User｜>
const std::string kAssistant =
    "<\xEF\xBD\x9C"
    "Assistant\xEF\xBD\x9C>";  // <｜Assistant｜>
const std::string kThinkStart = "<think>";
const std::string kThinkEnd = "</think>";

// Python's json.dumps(value, ensure_ascii=False), as the release's encoder prints schemas and
// non-string arguments.
std::string python_json(const Json& value) { return jinja::json_dump(jinja::Value::from_json(value), {}); }

// The block the model reads its tools from (the release's wording: the model was trained on it).
std::string tools_block(const Json& tools) {
  std::string schemas;
  for (const Json& tool : tools) {
    if (!schemas.empty()) schemas += "\n";
    schemas += python_json(tool.contains("function") ? tool["function"] : tool);
  }
  return "## Tools\n\nYou have access to a set of tools you can use to answer the user's question.\n"
         "You can invoke functions by writing a \"<" +
         kDsml +
         "function_calls>\" block like the following as part "
         "of your reply to the user:\n<" +
         kDsml + "function_calls>\n<" + kDsml + "invoke name=\"$FUNCTION_NAME\">\n<" + kDsml +
         "parameter name=\"$PARAMETER_NAME\" string=\"true|false\">$PARAMETER_VALUE</" + kDsml + "parameter>\n...\n</" +
         kDsml + "invoke>\n<" + kDsml + "invoke name=\"$FUNCTION_NAME2\">\n...\n</" + kDsml + "invoke>\n</" + kDsml +
         "function_calls>\n\nString and scalar parameters should be specified as is without "
         "any escaping or quotes, while lists and objects should use JSON format. The \"string\" attribute should be "
         "set to \"true\" for string type parameters and \"false\" for other types (numbers, booleans, arrays, "
         "objects).\n\nIf the thinking_mode is enabled, then after function results you should strongly consider "
         "outputting a thinking block. Here is an example:\n\n<" +
         kDsml + "function_calls>\n...\n</" + kDsml +
         "function_calls>\n\n<function_results>\n...\n</function_results>\n\n" + kThinkStart +
         "...thinking about results" + kThinkEnd +
         "\n\nHere are the functions available in JSONSchema format:\n"
         "<functions>\n" +
         schemas + "\n</functions>\n";
}

// A message's text: a string, null, or text parts joined.
std::string text_of(const Json& message, const char* key) {
  const auto it = message.find(key);
  if (it == message.end() || it->is_null()) return "";
  if (it->is_string()) return it->get<std::string>();
  TACHYON_CHECK(it->is_array()) << "message " << key << " must be a string, null or a list of text parts";
  std::string text;
  for (const Json& part : *it) {
    if (part.is_object() && part.contains("text") && part["text"].is_string()) text += part["text"].get<std::string>();
  }
  return text;
}

std::string role_of(const Json& message) {
  TACHYON_CHECK(message.is_object() && message.contains("role") && message["role"].is_string())
      << "every chat message needs a role";
  return message["role"].get<std::string>();
}

// One call as an invoke block: its arguments (a JSON object, or its text) one parameter a line.
std::string invoke(const Json& call) {
  const Json& function = call.contains("function") ? call["function"] : call;
  TACHYON_CHECK(function.contains("name") && function["name"].is_string()) << "a tool call needs a function name";
  Json arguments = function.value("arguments", Json::object());
  if (arguments.is_string()) arguments = Json::parse(arguments.get<std::string>());
  TACHYON_CHECK(arguments.is_object()) << "a tool call's arguments must be a JSON object";
  std::string lines;
  for (const auto& [key, value] : arguments.items()) {
    if (!lines.empty()) lines += "\n";
    const bool is_string = value.is_string();
    lines += "<" + kDsml + "parameter name=\"" + key + "\" string=\"" + (is_string ? "true" : "false") + "\">" +
             (is_string ? value.get<std::string>() : python_json(value)) + "</" + kDsml + "parameter>";
  }
  return "<" + kDsml + "invoke name=\"" + function["name"].get<std::string>() + "\">\n" + lines + "\n</" + kDsml +
         "invoke>";
}

int last_user_index(const Json& messages) {
  for (int i = static_cast<int>(messages.size()) - 1; i >= 0; --i) {
    const std::string role = role_of(messages[static_cast<size_t>(i)]);
    if (role == "user" || role == "developer") return i;
  }
  return -1;
}

std::string render_message(const Json& messages, int index, int last_user, bool thinking) {
  const Json& message = messages[static_cast<size_t>(index)];
  const std::string role = role_of(message);
  const std::string content = text_of(message, "content");
  const Json tools = message.value("tools", Json(nullptr));
  const bool has_tools = tools.is_array() && !tools.empty();
  const std::string think_or_not = index == last_user && thinking ? kThinkStart : kThinkEnd;
  if (role == "system") return content + (has_tools ? "\n\n" + tools_block(tools) : "");
  if (role == "user") return kUser + content + kAssistant + think_or_not;
  if (role == "developer") {
    TACHYON_CHECK(!content.empty()) << "a developer message needs content";
    const std::string body = (has_tools ? "\n\n" + tools_block(tools) : "") + "\n\n# The user's message is: " + content;
    return kUser + body + kAssistant + think_or_not;
  }
  if (role == "tool") {
    int assistant = index - 1;
    while (assistant >= 0 && role_of(messages[static_cast<size_t>(assistant)]) == "tool") --assistant;
    TACHYON_CHECK(assistant >= 0 && role_of(messages[static_cast<size_t>(assistant)]) == "assistant")
        << "a tool message must follow an assistant message with tool calls";
    const Json calls = messages[static_cast<size_t>(assistant)].value("tool_calls", Json::array());
    const int order = index - assistant;
    TACHYON_CHECK(calls.is_array() && static_cast<int>(calls.size()) >= order)
        << "more tool results than the assistant message made calls";
    std::string out = order == 1 ? "\n\n<function_results>" : "";
    out += "\n<result>" + content + "</result>";
    if (order == static_cast<int>(calls.size())) {
      out += "\n</function_results>\n\n" + (index >= last_user && thinking ? kThinkStart : kThinkEnd);
    }
    return out;
  }
  TACHYON_CHECK(role == "assistant") << "unknown chat role '" << role << "'";
  std::string calls;
  const Json tool_calls = message.value("tool_calls", Json(nullptr));
  if (tool_calls.is_array() && !tool_calls.empty()) {
    std::vector<std::string> invokes;
    for (const Json& call : tool_calls) invokes.push_back(invoke(call));
    calls = "\n\n<" + kDsml + "function_calls>\n";
    for (size_t i = 0; i < invokes.size(); ++i) calls += (i > 0 ? "\n" : "") + invokes[i];
    calls += "\n</" + kDsml + "function_calls>";
  }
  std::string reasoning;
  if (thinking && index > last_user) reasoning = text_of(message, "reasoning_content") + kThinkEnd;
  return reasoning + content + calls;
}

}  // namespace

std::string render_deepseek_v32(const ChatTemplateInputs& inputs, const std::string& bos_token,
                                const std::string& eos_token) {
  TACHYON_CHECK(inputs.messages.is_array()) << "chat messages must be a list";
  bool thinking = false;
  if (inputs.extra.is_object()) {
    for (const char* key : {"thinking", "enable_thinking"}) {
      if (inputs.extra.contains(key) && inputs.extra[key].is_boolean() && inputs.extra[key].get<bool>())
        thinking = true;
    }
  }
  Json messages = Json::array();
  if (inputs.tools.is_array() && !inputs.tools.empty())
    messages.push_back({{"role", "system"}, {"tools", inputs.tools}});
  for (const Json& message : inputs.messages) messages.push_back(message);
  const int last_user = last_user_index(messages);
  if (thinking) {  // the reasoning of turns before the last user turn is dropped (and, as the release does, developer
                   // turns)
    Json kept = Json::array();
    for (int i = 0; i < static_cast<int>(messages.size()); ++i) {
      Json message = messages[static_cast<size_t>(i)];
      const std::string role = role_of(message);
      if (role == "user" || role == "system" || role == "tool" || i >= last_user) {
        kept.push_back(std::move(message));
      } else if (role == "assistant") {
        message.erase("reasoning_content");
        kept.push_back(std::move(message));
      }
    }
    messages = std::move(kept);
  }
  const int last = last_user_index(messages);
  std::string prompt = bos_token;
  for (int i = 0; i < static_cast<int>(messages.size()); ++i) {
    prompt += render_message(messages, i, last, thinking);
    if (role_of(messages[static_cast<size_t>(i)]) == "assistant") prompt += eos_token;
  }
  return prompt;
}

}  // namespace tachyon::tokenizer
